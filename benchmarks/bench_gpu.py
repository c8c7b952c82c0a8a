"""Speed of the GPU engine (``backend="cuda"``), checked bit for bit against the CPU engine, as a record.

For each size n the script times torch's float32 matmul of n x n matrices on the same device (the
baseline, measured in this same run) and ``blockfma.gemm(..., backend=...)`` for each truncated-fused and
late-c preset case, and prints GMAC/s (10^9 simulated multiply-adds per second) and the ratio of times.
Before timing, each case's result at the smallest size is compared bit for bit with the CPU engine.
Compilation (torch.compile) happens in a warm-up call and is not timed.  ``--record`` writes the rows with
the device's metadata as JSON (atomically), for ``data/hardware/``.

    python benchmarks/bench_gpu.py                                   # on a CUDA GPU
    python benchmarks/bench_gpu.py --record data/hardware/h100-gemm-speed.json
    python benchmarks/bench_gpu.py --backend torch --sizes 128       # the same code on the CPU (smoke test)
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import platform
import sys
import time

import numpy as np

import blockfma as bf
from blockfma.engine import gpu
from blockfma.files import results_option, write_text

CASES = [  # (device, input format, output format)
    ("H100", "fp16", "fp32"),
    ("H100", "bf16", "fp32"),
    ("H100", "tf32", "fp32"),
    ("H100", "e4m3fn", "fp32"),
    ("H100", "fp16", "fp16"),
    ("V100", "fp16", "fp32"),
    ("A100", "bf16", "fp32"),
    ("MI300X", "fp16", "fp32"),
    ("MI300X", "e4m3fnuz", "fp32"),
]


def _sync(torch, dev) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def best_time(fn, repeat: int, sync) -> float:
    best = float("inf")
    for _ in range(repeat):
        sync()
        t = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - t)
    return best


def metadata(torch, dev) -> dict:
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "blockfma": bf.__version__, "torch": torch.__version__, "numpy": np.__version__,
            "python": platform.python_version(), "host": platform.node(), "cpus": os.cpu_count(),
            "torch_compile": gpu.COMPILE.get(dev.type, False)}
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev)
        meta.update({"gpu": props.name, "compute_capability": f"{props.major}.{props.minor}",
                     "multiprocessors": props.multi_processor_count, "memory_gib": props.total_memory / 2**30,
                     "cuda": torch.version.cuda})
    return meta


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="256,1024,2048,4096", help="comma-separated n (n x n x n GEMMs)")
    ap.add_argument("--backend", default="cuda", help="'cuda' (default), 'cuda:N' or 'torch' (CPU)")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per case (best is kept)")
    ap.add_argument("--record", metavar="FILE", help="write rows and device metadata to this JSON file "
                    "(atomically; checked before the run; its folder must exist), or - to print them "
                    "(the table then goes to stderr)")
    args = ap.parse_args(argv)
    # a bad destination fails now, not after the run; with --record - the table goes to stderr
    show = functools.partial(print, file=results_option(args.record, "--record", ap.error), flush=True)
    try:
        import torch
        dev = gpu.torch_device(args.backend)
    except (ImportError, ValueError) as exc:
        print(f"bench_gpu: {exc}", file=sys.stderr)
        return 2
    sizes = [int(s) for s in args.sizes.split(",") if s]
    meta = metadata(torch, dev)
    show(", ".join(f"{k} {v}" for k, v in meta.items()))
    rng = np.random.default_rng(2024)
    rows, checks = [], []
    n0 = min(sizes)
    for device, fin, fout in CASES:  # bit-for-bit check against the CPU engine first
        model = bf.device(device).model(fin, fout)
        A = bf.formats.round(fin, rng.standard_normal((n0, n0)), saturate=True)
        B = bf.formats.round(fin, rng.standard_normal((n0, n0)), saturate=True)
        C = bf.formats.round(model.c_format, rng.standard_normal((n0, n0)))
        got = bf.gemm(A, B, C, model=model, backend=args.backend)
        want = bf.gemm(A, B, C, model=model, backend="auto")
        same = bool(np.array_equal(bf.formats.bits(got), bf.formats.bits(want)))
        checks.append({"device": device, "input": fin, "output": fout, "n": n0, "bit_exact": same})
        show(f"check {device} {fin}->{fout} n={n0}: {'bit-exact' if same else 'MISMATCH'} against the CPU engine")
    header = f"{'n':>5}  {'device':8} {'in->out':14} {'seconds':>9} {'GMAC/s':>9} {'x fp32 matmul':>14}"
    show(header)
    show("-" * len(header))
    sync = lambda: _sync(torch, dev)  # noqa: E731
    for n in sizes:
        macs = n**3
        a32 = torch.randn(n, n, device=dev)
        b32 = torch.randn(n, n, device=dev)
        torch.backends.cuda.matmul.allow_tf32 = False
        a32 @ b32
        t_mm = best_time(lambda: a32 @ b32, max(args.repeat, 5), sync)
        show(f"{n:>5}  {'torch':8} {'fp32 matmul':14} {t_mm:9.5f} {macs / t_mm / 1e9:9.1f} {1.0:14.1f}")
        for device, fin, fout in CASES:
            model = bf.device(device).model(fin, fout)
            A = bf.formats.round(fin, rng.standard_normal((n, n)), saturate=True)
            B = bf.formats.round(fin, rng.standard_normal((n, n)), saturate=True)
            C = bf.formats.round(model.c_format, rng.standard_normal((n, n)))
            bf.gemm(A, B, C, model=model, backend=args.backend)  # warm-up: compiles this shape
            t = best_time(lambda: bf.gemm(A, B, C, model=model, backend=args.backend), args.repeat, sync)
            rows.append({"n": n, "device": device, "input": fin, "output": fout, "seconds": t,
                         "gmacs": macs / t / 1e9, "baseline_seconds": t_mm, "ratio": t / t_mm})
            show(f"{n:>5}  {device:8} {fin + '->' + fout:14} {t:9.4f} {macs / t / 1e9:9.2f} {t / t_mm:14.1f}")
    if args.record:
        write_text(args.record, json.dumps({
            "what": "blockfma.gemm speed on the GPU engine (times include host-device transfers)",
            "backend": args.backend, "metadata": meta, "checks": checks, "rows": rows}, indent=1) + "\n")
    return 0 if all(c["bit_exact"] for c in checks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
