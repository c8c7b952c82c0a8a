"""Speed of bit-exact GEMM simulation, per algorithm family and input format, against numpy.

For each size n the script times numpy's float32 matmul of n x n matrices (the baseline, measured in this
same run) and ``blockfma.gemm`` for one preset of each family, and prints GMAC/s (10^9 simulated
multiply-adds per second) and the ratio of times (simulation / numpy).  Inputs are random normal values
rounded to the input format; C is random binary32.  Compilation (numba) happens in a warm-up call and is
not timed.  numpy is timed again (best of 5) just before each case, and the case's ratio is to that time.

    python benchmarks/bench_gemm.py                        # sizes 256, 512, 1024, 2048
    python benchmarks/bench_gemm.py --sizes 1024 --families truncated-fused
    python benchmarks/bench_gemm.py --backend numpy --sizes 256 --json out.json
    python benchmarks/bench_gemm.py --families scaled-fused --sizes 256   # block-scaled only

Block-scaled GEMMs (family scaled-fused: B200 ``tcgen05`` mxf4nvf4 with ue4m3 scales, mxf8f6f4 with ue8m0)
are timed in the engine and, as their baseline, in the exact reference that ran every block-scaled call
before the engine did (``blockfma.reference.dot`` dot by dot): the reference is timed on
``--reference-rows`` rows of A and its time scaled to all n rows (every row costs the same), and the
ratio printed is reference / engine.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import time

import numpy as np

import blockfma as bf
from blockfma.files import results_option, write_text

CASES = [  # (family, device, input format)
    ("truncated-fused", "H100", "fp16"),
    ("truncated-fused", "V100", "fp16"),
    ("truncated-fused", "A100", "bf16"),
    ("truncated-fused", "A100", "tf32"),
    ("truncated-fused", "H100", "e4m3fn"),
    ("exact-fused", "MI100", "fp16"),
    ("exact-fused", "exact", "fp16"),
    ("pairwise", "MI250X", "fp16"),
    ("late-c", "MI300X", "fp16"),
    ("late-c", "MI300X", "e4m3fnuz"),
    ("fma-chain", "ieee-sequential", "fp16"),
    ("amx", "Intel AMX", "bf16"),
    ("bfdot", "Arm BFDOT", "bf16"),
]


SCALED_CASES = [  # (device, instruction, input format): block-scaled, timed against the exact reference
    ("B200", "tcgen05.mxf4nvf4.block16.ue4m3", "e2m1fn"),
    ("B200", "tcgen05.mxf8f6f4.block32", "e4m3fn"),
]


def scaled_problem(model, n: int, rng: np.random.Generator):
    """A, B (n x n) of random codes of the input format (finite), C binary32, scales near 1 (random codes
    of the scale format around its 1)."""
    fmt = model.input_format
    fs = bf.formats.get(model.option("scale_format"))
    blocks = n // model.option("scale_block")

    def codes(shape):
        x = bf.formats.decode(fmt, rng.integers(0, 1 << fmt.bits, shape))
        return np.where(np.isfinite(x), x, 0.0)

    def scales(shape):
        if fs.name == "e8m0fnu":
            return bf.formats.decode(fs, rng.integers(120, 135, shape))
        return bf.formats.decode(fs, rng.integers(0x30, 0x48, shape))

    C = bf.formats.round("fp32", rng.standard_normal((n, n)))
    return codes((n, n)), codes((n, n)), C, scales((n, blocks)), scales((blocks, n))


def reference_gemm(model, A, B, C, SA, SB) -> np.ndarray:
    """The block-scaled path before the engine ran it: the exact reference, dot product by dot product."""
    return np.array([[bf.reference.dot(model, list(A[i]), list(B[:, j]), float(C[i, j]), list(SA[i]),
                                       list(SB[:, j])) for j in range(B.shape[1])] for i in range(A.shape[0])])


def run_scaled(n: int, args, rng: np.random.Generator, show, rows: list, estimate: dict) -> None:
    """The block-scaled cases at size n: engine (bf.gemm) against the reference, ratio reference / engine."""
    for device, instruction, fmt in SCALED_CASES:
        key = ("scaled-fused", device, instruction)
        if key in estimate and estimate[key] * 8 > args.budget:
            show(f"{n:>5}  {'scaled-fused':16} {instruction:30} {'skipped':>9}  (about {estimate[key] * 8:.0f} s)")
            estimate[key] *= 8
            continue
        model = bf.device(device).model(fmt, "fp32", instruction=instruction)
        # the compiled kernels run the per-product kinds; group-scaled ones run in numpy (matrix products)
        backend = "numpy" if args.backend == "numba" and model.option("scale_group") else args.backend
        A, B, C, SA, SB = scaled_problem(model, n, rng)
        bf.gemm(A[:2], B, C[:2], model=model, scale_a=SA[:2], scale_b=SB, scale_layout="kn", backend=backend)  # warm up
        t = best_time(lambda: bf.gemm(A, B, C, model=model, scale_a=SA, scale_b=SB, scale_layout="kn", backend=backend),
                      args.repeat if n <= 512 else 1)
        ran = bf.engine.last_backend()
        r = max(1, min(n, args.reference_rows))
        t_ref = best_time(lambda: reference_gemm(model, A[:r], B, C[:r], SA[:r], SB), 1) * n / r
        estimate[key] = t
        rows.append({"n": n, "family": "scaled-fused", "device": device, "instruction": instruction, "input": fmt,
                     "seconds": t, "gmacs": n**3 / t / 1e9, "reference_seconds": t_ref, "reference_rows": r,
                     "ratio_reference": t_ref / t, "backend": ran})
        show(f"{n:>5}  {'scaled-fused':16} {instruction:30} {t:9.3f} {n**3 / t / 1e9:8.3f}   engine {ran}; "
             f"reference {t_ref:8.1f} s (timed on {r} rows) = {t_ref / t:7.0f} x the engine's time")


def best_time(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="256,512,1024,2048", help="comma-separated n (n x n x n GEMMs)")
    ap.add_argument("--families", default="", help="comma-separated families to run (default: all)")
    ap.add_argument("--backend", default="auto", choices=["auto", "numpy", "numba"])
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per case up to n = 1024 (best is kept)")
    ap.add_argument("--reference-rows", type=int, default=4,
                    help="rows of A the exact reference computes for the block-scaled baseline (scaled to n)")
    ap.add_argument("--budget", type=float, default=60.0,
                    help="skip a case at a size whose estimated time exceeds this many seconds")
    ap.add_argument("--json", metavar="FILE", help="write the rows to FILE "
                    "(atomically; checked before the run; its folder must exist), or - to print them as JSON "
                    "(the table then goes to stderr)")
    args = ap.parse_args(argv)
    # a bad destination fails now, not after the run; with --json - the table goes to stderr
    show = functools.partial(print, file=results_option(args.json, "--json", ap.error), flush=True)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    families = {f for f in args.families.split(",") if f}
    cases = [c for c in CASES if not families or c[0] in families]
    rng = np.random.default_rng(2024)
    rows = []
    estimate: dict[tuple, float] = {}
    show(f"blockfma {bf.__version__}, backend {args.backend}, {os.cpu_count()} CPUs, numpy {np.__version__}")
    header = f"{'n':>5}  {'family':16} {'device':16} {'input':9} {'seconds':>9} {'GMAC/s':>8} {'x numpy':>8}"
    show(header)
    show("-" * len(header))
    for n in sizes:
        macs = n**3
        a32 = rng.standard_normal((n, n)).astype(np.float32)
        b32 = rng.standard_normal((n, n)).astype(np.float32)
        a32 @ b32
        t_np = best_time(lambda: a32 @ b32, max(args.repeat, 5))
        show(f"{n:>5}  {'numpy float32':16} {'':16} {'':9} {t_np:9.4f} {macs / t_np / 1e9:8.1f} {1.0:8.1f}")
        for family, device, fmt in cases:
            # the baseline again before each case: on a shared machine its time drifts within a run, and a
            # ratio is only fair against numpy timed under the same load
            t_np = best_time(lambda: a32 @ b32, max(args.repeat, 5))
            key = (family, device, fmt)
            if key in estimate and estimate[key] * 8 > args.budget:
                show(f"{n:>5}  {family:16} {device:16} {fmt:9} {'skipped':>9}  (about {estimate[key] * 8:.0f} s)")
                estimate[key] *= 8
                continue
            model = bf.device(device).model(fmt, "fp32")
            A = bf.formats.round(fmt, rng.standard_normal((n, n)), saturate=True)
            B = bf.formats.round(fmt, rng.standard_normal((n, n)), saturate=True)
            C = bf.formats.round("fp32", rng.standard_normal((n, n)))
            bf.gemm(A[:8, :64], B[:64, :8], C[:8, :8], model=model, backend=args.backend)  # compile
            t = best_time(lambda: bf.gemm(A, B, C, model=model, backend=args.backend),
                          args.repeat if n <= 1024 else 1)
            estimate[key] = t
            rows.append({"n": n, "family": family, "device": device, "input": fmt, "seconds": t,
                         "gmacs": macs / t / 1e9, "numpy_seconds": t_np, "ratio": t / t_np,
                         "backend": args.backend})
            show(f"{n:>5}  {family:16} {device:16} {fmt:9} {t:9.3f} {macs / t / 1e9:8.3f} {t / t_np:8.1f}")
        if not families or "scaled-fused" in families:
            run_scaled(n, args, rng, show, rows, estimate)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    show(f"peak resident memory: {peak:.0f} MiB")
    if args.json:
        write_text(args.json, json.dumps({"rows": rows, "peak_mib": peak, "cpus": os.cpu_count()}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
