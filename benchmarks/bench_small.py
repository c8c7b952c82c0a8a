"""Per-call cost of small GEMMs: ``bf.gemm`` and routed torch ops against numpy, torch and the engine's floor.

A model is many small matmuls, so what a call costs beyond its products is what a user of
``bf.torch.emulate`` feels.  For each shape (m x k x n, or b x m x k x n: a batch of b products) the script
times, as the best of ``--repeat`` calls after a warm-up call (numba compiled, plans cached):

* ``bf.gemm`` with each device's fp16 -> fp32 model (2-D shapes only: ``bf.gemm`` takes matrices);
* ``torch.matmul`` and ``F.linear`` under ``bf.torch.emulate(device)`` in fp16, bf16 and fp32 (CPU tensors);

and beside them, in the same run, numpy's and torch's float32 matmul of the shape on one thread (timed
again before each case, the best kept), and the **floor**: the shape's multiply-adds at the rate the engine
reaches on a 1024^3 GEMM of the same model (timed once per model in this run; ``--floor-n`` changes the
size).  It prints seconds per call and the ratios to the floor, to numpy and to torch.  Nothing is asserted
(CI does not run it); ratios, not absolute times, are comparable between machines.  The default run takes
well under a minute:

    python benchmarks/bench_small.py
    python benchmarks/bench_small.py --shapes 64x128x128,8x64x64x64 --devices H100 --repeat 50
    python benchmarks/bench_small.py --json small.json       # rows as JSON (- : standard output)
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import sys

# the baselines on one thread, as the engine runs small calls: on a shared machine a BLAS call's threads wait
# for a core (numpy took 16 ms for a 128^3 matmul under load); set before numpy loads OpenBLAS
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

import blockfma as bf
from blockfma.files import results_option, write_json
from blockfma.provenance import provenance
from blockfma.timing import best_time

DTYPES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}


def parse_shapes(text: str) -> list[tuple[int, ...]]:
    """``"64x128x128,8x64x64x64"`` -> [(1, 64, 128, 128), (8, 64, 64, 64)] (batch, m, k, n)."""
    shapes = []
    for s in text.split(","):
        dims = tuple(int(x) for x in s.lower().split("x"))
        if len(dims) not in (3, 4) or min(dims) < 1:
            raise ValueError(s)
        shapes.append(dims if len(dims) == 4 else (1, *dims))
    return shapes


def floor_rate(model, fmt: str, n: int, round_inputs=None) -> float:
    """Multiply-adds per second of ``bf.gemm`` with ``model`` on an n x n x n GEMM (one timed call after a
    small warm-up)."""
    rng = np.random.default_rng(1)
    A, B = (bf.formats.round(fmt, rng.standard_normal((n, n)), saturate=True) for _ in range(2))
    bf.gemm(A[:8], B, model=model, round_inputs=round_inputs)
    return n**3 / best_time(lambda: bf.gemm(A, B, model=model, round_inputs=round_inputs), 1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="16x16x16,64x128x128,128x128x128,256x256x256,8x64x64x64",
                    help="comma-separated m x k x n, or b x m x k x n (a batch of b products)")
    ap.add_argument("--devices", default="H100,MI300X", help="comma-separated presets")
    ap.add_argument("--dtypes", default="fp16,bf16,fp32", help="comma-separated torch dtypes of the routed ops")
    ap.add_argument("--repeat", type=int, default=20, help="timed calls per case (the best is kept)")
    ap.add_argument("--floor-n", type=int, default=1024, help="size of the GEMM that sets the engine's rate")
    ap.add_argument("--json", metavar="FILE", help="write the rows and the machine's metadata as JSON to FILE, "
                    "or - to print them (the table then goes to stderr)")
    args = ap.parse_args(argv)
    show = functools.partial(print, file=results_option(args.json, "--json", ap.error), flush=True)
    try:
        shapes = parse_shapes(args.shapes)
    except ValueError as exc:
        ap.error(f"--shapes {args.shapes}: {exc} is not m x k x n or b x m x k x n of positive integers")
    bad = [d for d in args.dtypes.split(",") if d not in DTYPES]
    if bad or args.repeat < 1 or args.floor_n < 16:
        ap.error(f"--dtypes {args.dtypes} (fp16, bf16, fp32), --repeat {args.repeat} (>= 1), --floor-n {args.floor_n} "
                 "(>= 16): one of them is out of range")
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as exc:
        print(f"bench_small: {exc}", file=sys.stderr)
        return 2
    import blockfma.torch  # noqa: F401 - bf.torch

    torch.set_num_threads(1)  # the torch baseline on one thread too (the routed ops' own torch work is copies)

    meta = provenance(torch.device("cpu"))
    show(", ".join(f"{k} {v}" for k, v in meta.items()))
    devices = args.devices.split(",")
    rates: dict = {}  # model -> MAC/s at floor_n^3

    def rate(model, fmt, round_inputs=None):
        if model not in rates:
            rates[model] = floor_rate(model, fmt, args.floor_n, round_inputs)
            show(f"floor: {model.summary()}: {rates[model] / 1e9:.2f} GMAC/s at {args.floor_n}^3")
        return rates[model]

    cases = []  # (label, model, input format, round_inputs, make(torch tensors) -> call)
    for dev in devices:
        cases.append((f"bf.gemm {dev} fp16", bf.device(dev).model("fp16", "fp32"), "fp16", None, None))
        for dt in args.dtypes.split(","):
            emu = bf.torch.emulate(dev)
            route = emu.route(getattr(torch, DTYPES[dt]))
            fmt = "bf16" if dt == "bf16" else route.model.input_name
            for op in ("matmul", "linear"):
                cases.append((f"{op} {dev} {dt}", route.model, fmt, route.round_inputs, (emu, dt, op)))
    for _, model, fmt, rnd, _ in cases:  # the floors first, so that each shape's rows are timed together
        rate(model, fmt, rnd)
    header = f"{'shape':>14}  {'call':22} {'ms/call':>9} {'floor ms':>9} {'x floor':>8} {'x numpy':>8} {'x torch':>8}"
    show(header)
    show("-" * len(header))
    gen = torch.Generator().manual_seed(2026)
    rows = []
    for b, m, k, n in shapes:
        lead = (b,) if b > 1 else ()
        label = f"{b}x{m}x{k}x{n}" if b > 1 else f"{m}x{k}x{n}"
        a32 = torch.randn(*lead, m, k, generator=gen).half().float()  # fp16 values: every dtype holds them
        w32 = torch.randn(n, k, generator=gen).half().float()
        b32 = (w32.t().expand(b, k, n) if b > 1 else w32.t()).contiguous()
        an, bn = a32.numpy(), b32.numpy()
        an @ bn
        a32 @ b32
        t_np = t_torch = float("inf")
        timed = []
        macs = b * m * k * n
        for name, model, fmt, rnd, how in cases:
            if how is None:
                if b > 1:
                    continue
                A, B = an.astype(np.float16), bn.astype(np.float16)

                def call():
                    return bf.gemm(A, B, model=model)
            else:
                emu, dt, op = how
                x = a32.to(getattr(torch, DTYPES[dt]))
                w = w32.to(x.dtype)
                wt = b32.to(x.dtype)

                def call():
                    with emu:
                        return F.linear(x, w) if op == "linear" else torch.matmul(x, wt)
            # the baselines again before each case, their best kept: on a shared machine a BLAS call's threads
            # can wait for a core as the engine's do, and the best of many runs is the fair baseline
            t_np = min(t_np, best_time(lambda: an @ bn, 10))
            t_torch = min(t_torch, best_time(lambda: a32 @ b32, 10))
            call()
            timed.append((name, best_time(call, args.repeat), macs / rate(model, fmt, rnd)))
        show(f"{label:>14}  {'numpy float32':22} {t_np * 1e3:9.4f}")
        show(f"{label:>14}  {'torch float32':22} {t_torch * 1e3:9.4f}")
        for name, t, floor in timed:
            rows.append({"shape": label, "call": name, "seconds": t, "floor_seconds": floor, "numpy_seconds": t_np,
                         "torch_seconds": t_torch, "x_floor": t / floor, "x_numpy": t / t_np, "x_torch": t / t_torch})
            show(f"{label:>14}  {name:22} {t * 1e3:9.4f} {floor * 1e3:9.4f} {t / floor:8.1f} {t / t_np:8.1f} "
                 f"{t / t_torch:8.1f}")
    geo = {c: math.exp(np.mean([math.log(r["x_floor"]) for r in rows if r["call"].split()[0] == c]))
           for c in ("bf.gemm", "matmul", "linear") if any(r["call"].split()[0] == c for r in rows)}
    show("geometric mean of x floor: " + ", ".join(f"{c} {v:.1f}" for c, v in geo.items()))
    if args.json:
        write_json(args.json, {"what": "per-call time of small GEMMs against numpy, torch and the engine's floor, "
                                       "same run", "metadata": meta, "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
