"""Time every named SMT query (blockfma.smt.queries) with each installed solver, beside Valpey et al.'s times.

The seed's Table 4 was measured with z3 4.8.9 and cvc5 1.0.2 on a 32-core AMD EPYC 7502P (1.5 GHz) with a
6-hour limit; this script runs the same questions, encoded in bit-vectors over blockfma's Models, on this
machine, one solver at a time (each solver is single-threaded), and prints seconds per (query, solver) with
the seed's numbers in the last columns.  A time-out prints as "> T".  Every witness is checked by the engine.

    python benchmarks/bench_smt.py                         # every query, every installed solver, 120 s each
    python benchmarks/bench_smt.py --solvers bitwuzla --timeout 30 --queries carry-3 carry-4-ampere
    python benchmarks/bench_smt.py --json data/smt-times.json
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform

from blockfma.files import results_option, write_text
from blockfma.smt import SOLVERS, available
from blockfma.smt import queries as Q


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--solvers", nargs="*", default=[s for s in SOLVERS if available(s)])
    ap.add_argument("--queries", nargs="*", default=None, help="names (default: all)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per query and solver")
    ap.add_argument("--json", default=None, metavar="FILE", help="write the times to FILE "
                    "(atomically; checked before the run; its folder must exist), or - to print them "
                    "(the table then goes to stderr)")
    args = ap.parse_args(argv)
    # a bad destination fails now, not after the run; with --json - the table goes to stderr
    show = functools.partial(print, file=results_option(args.json, "--json", ap.error), flush=True)
    names = args.queries or [q.name for q in Q.queries()]
    rows = []
    head = f"{'query':28s}" + "".join(f"{s:>12s}" for s in args.solvers) + f"{'seed z3':>12s}{'seed cvc5':>12s}"
    show(head)
    show("-" * len(head))
    for name in names:
        q = Q.get(name)
        times: dict[str, dict] = {}
        cells = []
        for s in args.solvers:
            r = Q.run(name, solver=s, timeout=args.timeout)
            times[s] = {"status": r.status, "seconds": round(r.seconds, 4), "ok": r.ok}
            cells.append(f"> {args.timeout:.0f}" if r.status == "unknown" else
                         f"{r.seconds:.3f}{'' if r.ok else ' !'}")
        seed = q.seed_seconds
        seed_cells = [_seed_cell(seed[i]) for i in range(2)] if seed else ["", ""]
        show(f"{name:28s}" + "".join(f"{c:>12s}" for c in cells) + f"{seed_cells[0]:>12s}{seed_cells[1]:>12s}")
        rows.append({"query": name, "expected": q.expected, "times": times,
                     "seed_seconds": None if seed is None else dict(zip(("z3", "cvc5"), map(_seed_cell, seed)))})
    show("\n'!' marks an answer other than the expected one; in the seed's columns '-' is no answer in 6 hours,\n"
         "blank not reported, '< 300' the paper's 'less than 5 minutes'.")
    if args.json:
        meta = {"machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
                "python": platform.python_version(), "timeout_s": args.timeout}
        for s in args.solvers:
            meta[f"{s}_version"] = _version(s)
        write_text(args.json, json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    return 0


def _seed_cell(t: float | None) -> str:
    if t is None:
        return ""
    if t == float("inf"):
        return "-"
    return "< 300" if t == 300.0 else f"{t:g}"


def _version(solver: str) -> str:
    if solver == "z3":
        import z3

        return z3.get_version_string()
    if solver == "cvc5":
        import cvc5

        v = cvc5.Solver(cvc5.TermManager()).getVersion()
        return v.decode() if isinstance(v, bytes) else str(v)
    import bitwuzla

    return str(bitwuzla.version())


if __name__ == "__main__":
    raise SystemExit(main())
