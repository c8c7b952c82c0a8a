"""Reproduce the multiword figures (Fasi et al. 2023, Figs. 3.1, 4.3-4.5; Valero-Lara et al. 2023, Figs. 4
and 5; an Ozaki-scheme sweep) as CSV data and PNG plots.

    python scripts/reproduce_multiword.py --out results/multiword --scale small
    python scripts/reproduce_multiword.py --out /tmp/mw --scale ci --only fig_3_1

For every figure: the rows from ``blockfma.experiments.multiword``, written to OUT/NAME.csv, then the plot
from ``blockfma.plot`` to OUT/NAME.png (each file written atomically, so an interrupted run leaves whole
files).  OUT is created if missing; every file's path is checked before the first figure is computed (an
existing NAME.csv that is not a regular file, e.g. a folder, stops the run at once).  Progress goes to stderr.  Without matplotlib the CSVs are still written and the plots are skipped
with a note (``pip install 'blockfma[plot]'``).  Scales: ci (seconds), small (about 1.5 min on two idle
cores; 4 to 7 min on a busy machine), paper (as close to the seeds' sizes as time allows: about 35 min on
two cores, and 7 GB for the exact reference of Valero-Lara's 4096 x 4096 product).  ``--threads 1`` can
help on a busy machine: FABsum makes hundreds of small engine calls, each waking numba's thread pool.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def _threads(n: int | None) -> None:
    """Set numba's thread count (its parallel kernels pay a wake-up per call; with many small calls, as
    FABsum makes, one thread can be faster on a busy machine)."""
    if n is None:
        return
    try:
        import numba
    except ImportError:
        return
    numba.set_num_threads(n)


def main(argv: list[str] | None = None) -> int:
    from blockfma import files
    from blockfma.arguments import ArgumentError
    from blockfma.experiments import multiword as mw
    from blockfma.optional import hint

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, type=Path,
                    help="output folder for NAME.csv and NAME.png (created, with its parents, if missing)")
    ap.add_argument("--scale", choices=mw.SCALES, default="small", help="problem sizes (default: small)")
    ap.add_argument("--only", action="append", choices=list(mw.FIGURES), metavar="NAME",
                    help=f"run only this figure (repeatable): {', '.join(mw.FIGURES)}")
    ap.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    ap.add_argument("--no-plots", action="store_true", help="write the CSVs only")
    ap.add_argument("--threads", type=int, default=None, help="numba threads for the engine (default: numba's)")
    ap.add_argument("--quiet", action="store_true", help="no per-point progress, one line per figure")
    args = ap.parse_args(argv)
    _threads(args.threads)

    def say(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    plot = None
    if not args.no_plots:
        try:
            import matplotlib  # noqa: F401

            from blockfma import plot
        except ImportError:
            say(f"note: matplotlib is missing, so no plots ({hint('plot')}); writing the CSVs")

    names = args.only or list(mw.FIGURES)
    try:  # every file this run writes, checked before the first figure is computed
        args.out = files.folder(args.out, create=True, name="out")
        for name in names:
            for ext in ("csv",) + (("png",) if plot is not None else ()):
                files.destination(args.out / f"{name}.{ext}", name="out")
    except ArgumentError as exc:
        ap.error(exc.message({"out": "--out"}))
    t_all = time.perf_counter()
    for i, name in enumerate(names, 1):
        say(f"[{i}/{len(names)}] {name} (scale {args.scale}) ...")
        t0 = time.perf_counter()
        progress = None if args.quiet else (lambda s: say("  " + s))
        rows = mw.run(name, scale=args.scale, seed=args.seed, progress=progress)
        csv_path = mw.write_csv(rows, args.out / f"{name}.csv")
        done = [str(csv_path)]
        if plot is not None:
            png = args.out / f"{name}.png"
            plot.plot(name, rows, png)
            done.append(str(png))
        say(f"[{i}/{len(names)}] {name}: {len(rows)} rows in {time.perf_counter() - t0:.1f} s -> {', '.join(done)}")
    say(f"done: {len(names)} figure(s) in {time.perf_counter() - t_all:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
