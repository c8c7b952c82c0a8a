"""Speed of the compiled kernels on each lane path: binary32 lanes and float64 lanes of every family.

``bench_gemm.py`` times one preset per family, which mostly runs the binary32-lane kernels; this script
also times the float64-lane paths, by inputs outside the binary32 path's range (products below 2**-126)
or by formats whose values are not binary32 values, and checks which kernel each case ran.  Each case is
one ``blockfma.gemm(..., backend="numba")`` call, timed ``--repeat`` times after a warm-up call (compile
or cache load, not timed); the median is printed.

``--compare OLD_SRC NEW_SRC`` runs the cases in fresh processes alternately on two source trees (for
before/after timings on a shared machine: the same load on both sides) and prints the median of each
case per tree over all rounds.

    python benchmarks/bench_lanes.py --sizes 256x256x256
    python benchmarks/bench_lanes.py --compare /tmp/before/src src --rounds 3 --sizes 256x256x256,512x1024x512
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

import blockfma as bf
from blockfma.formats import Format
from blockfma.model import Family, Model

STDOUT = "-"  # --json's standard output (blockfma.files.STDOUT, spelt here for --compare's old trees)
E8M25 = Format("e8m25", 8, 26, 127)  # 26-bit values: products exact in float64, values not binary32 values


def _cases() -> dict[str, tuple[Model, float]]:
    """name -> (model, scale of A and B): a scale of 2**-70 puts every product below 2**-126, outside the
    binary32 lanes' range."""
    tiny = 2.0**-70
    bfdot = bf.device("Arm BFDOT").model("bf16", "fp32")
    return {
        "truncated-fused f32 (H100 fp16)": (bf.device("H100").model("fp16", "fp32"), 1.0),
        "truncated-fused f64 (H100 bf16 tiny)": (bf.device("H100").model("bf16", "fp32"), tiny),
        "late-c f32 (MI300X fp16)": (bf.device("MI300X").model("fp16", "fp32"), 1.0),
        "late-c f64 (MI300X bf16 tiny)": (bf.device("MI300X").model("bf16", "fp32"), tiny),
        "exact-fused (exact fp16)": (bf.device("exact").model("fp16", "fp32"), 1.0),
        "fma-chain f32 (sequential fp32)": (bf.device("ieee-sequential").model("fp32", "fp32"), 1.0),
        "fma-chain f64 (sequential fp16->fp16)": (bf.device("ieee-sequential").model("fp16", "fp16"), 1.0),
        "amx f32 (Intel AMX bf16)": (bf.device("Intel AMX").model("bf16", "fp32"), 1.0),
        "amx f64 (AMX 26-bit inputs)": (Model(Family.AMX, E8M25, "fp32", block_width=32, subnormals=False), 1.0),
        "bfdot f32 (Arm BFDOT bf16)": (bfdot, 1.0),
        "bfdot f64 ftz (Arm BFDOT bf16 tiny)": (bfdot, tiny),
        "bfdot f64 subnormals (BFDOT subn)": (bfdot.replace(subnormals=True, name="bfdot subn"), 1.0),
        "pairwise (MI250X fp16)": (bf.device("MI250X").model("fp16", "fp32"), 1.0),
    }


def run(sizes: list[tuple[int, int, int]], names: list[str], repeat: int) -> dict[str, float]:
    cases = _cases()
    rng = np.random.default_rng(2024)
    times = {}
    for m, k, n in sizes:
        for name in names:
            model, scale = cases[name]
            fin, fb = model.input_format, model.b_format
            A = bf.formats.round(fin, rng.standard_normal((m, k)) * scale, saturate=True)
            B = bf.formats.round(fb, rng.standard_normal((k, n)) * scale, saturate=True)
            C = bf.formats.round(model.c_format, rng.standard_normal((m, n)))
            bf.gemm(A[:8], B, C[:8], model=model, backend="numba")  # compile or load from the cache
            samples = []
            for _ in range(repeat):
                t = time.perf_counter()
                bf.gemm(A, B, C, model=model, backend="numba")
                samples.append(time.perf_counter() - t)
            times[f"{m}x{k}x{n} {name}"] = statistics.median(samples)
    return times


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="256x256x256", help="comma-separated m x k x n")
    ap.add_argument("--cases", default="", help="comma-separated case names' prefixes (default: all)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", nargs="?", const=STDOUT, metavar="FILE",
                    help="the times as one JSON object: printed instead of the table (no FILE, or -), or written "
                         "to FILE (atomically; checked before the run; its folder must exist)")
    ap.add_argument("--compare", nargs=2, metavar=("OLD_SRC", "NEW_SRC"))
    ap.add_argument("--rounds", type=int, default=3, help="with --compare: processes per tree, alternating")
    args = ap.parse_args(argv)
    if args.json is not None and args.compare:
        ap.error("--json goes with a single run; --compare prints its table of medians")
    if args.json not in (None, STDOUT):  # a bad destination fails now, not after the run
        from blockfma.arguments import ArgumentError  # imported here: --compare's children may run old trees
        from blockfma.files import destination

        try:
            destination(args.json, name="json")
        except ArgumentError as exc:
            ap.error(exc.message({"json": "--json"}))
    sizes = [tuple(int(x) for x in s.split("x")) for s in args.sizes.split(",") if s]
    prefixes = [c for c in args.cases.split(",") if c]
    names = [c for c in _cases() if not prefixes or any(c.startswith(p) for p in prefixes)]
    if not args.compare:
        times = run(sizes, names, args.repeat)
        if args.json == STDOUT:
            print(json.dumps(times))
        elif args.json is not None:
            from blockfma.files import write_text

            write_text(args.json, json.dumps(times) + "\n")
        else:
            for key, t in times.items():
                print(f"{t:9.4f}  {key}")
        return 0
    samples: dict[str, dict[str, list[float]]] = {src: {} for src in args.compare}
    child = [sys.executable, os.path.abspath(__file__), "--sizes", args.sizes, "--cases", args.cases,
             "--repeat", str(args.repeat), "--json"]
    for _ in range(args.rounds):
        for src in args.compare:
            env = dict(os.environ, PYTHONPATH=os.path.abspath(src))
            out = subprocess.run(child, env=env, check=True, capture_output=True, text=True).stdout
            for key, t in json.loads(out.splitlines()[-1]).items():
                samples[src].setdefault(key, []).append(t)
    old, new = args.compare
    print(f"{'before':>9} {'after':>9} {'after/before':>12}  case (median seconds over {args.rounds} processes "
          f"x {args.repeat} calls)")
    for key in samples[old]:
        t0, t1 = statistics.median(samples[old][key]), statistics.median(samples[new][key])
        print(f"{t0:9.4f} {t1:9.4f} {t1 / t0:12.3f}  {key}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
