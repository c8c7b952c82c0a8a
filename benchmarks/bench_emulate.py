"""Slowdown of ``bf.torch.emulate(device)`` against native torch on the same tensors, timed in the same run.

For each GEMM shape (m x k x n), dtype and emulated device the script times ``A @ B`` natively and under
``emulate(device)`` on the same tensors (the CPU, or a CUDA GPU where there is one: there the emulation
runs on the card by the Triton kernel where it supports the route's model, else through the host), and
prints both times and their ratio; with ``--scaled-mm`` also ``torch._scaled_mm`` of e4m3fn operands for
the devices with fp8 units.  Before timing, each case's emulated result at the first shape is compared bit
for bit with ``bf.gemm`` (numpy engine) on the same values where the route is a plain model (not scaled,
stored or split).  ``--out FILE`` writes the rows and the machine's metadata as JSON (``-``: standard output;
the table then goes to stderr).  Not run by CI (it times things); a tiny smoke run:

    python benchmarks/bench_emulate.py --shapes 16x32x16 --repeat 1
    python benchmarks/bench_emulate.py --out emulate-speed.json       # on a GPU: CUDA tensors
"""

from __future__ import annotations

import argparse
import functools
import sys

import numpy as np

import blockfma as bf
from blockfma.files import results_option, write_json
from blockfma.provenance import provenance
from blockfma.timing import best_time, synchronizer

DTYPES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}


def host(t):
    """A tensor's values as float64 numpy (exact for fp16, bf16, fp32 and fp8)."""
    return t.detach().float().cpu().numpy().astype(np.float64)


def check(emu, torch, dtype, A, B, got) -> bool | None:
    """The emulated result against bf.gemm with the route's model (None where the route is not a plain model)."""
    route = emu.route(dtype)
    if route.model is None or route.scaled or route.stored or route.parts(A.shape[0], B.shape[1], A.shape[1]) > 1:
        return None
    want = bf.gemm(A.detach().cpu().numpy() if dtype != torch.bfloat16 else host(A),
                   B.detach().cpu().numpy() if dtype != torch.bfloat16 else host(B),
                   model=route.model, round_inputs=route.round_inputs, backend="numpy")
    return bool(np.array_equal(bf.formats.bits(want), bf.formats.bits(
        got.detach().cpu().view(torch.int16).numpy().view(want.dtype) if dtype != torch.float32
        else got.detach().cpu().numpy())))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="64x256x64,256x256x256,512x1024x512",
                    help="comma-separated m x k x n GEMM shapes")
    ap.add_argument("--dtypes", default="fp16,bf16,fp32", help="comma-separated torch dtypes (fp16, bf16, fp32)")
    ap.add_argument("--devices", default="H100,MI300X,V100", help="comma-separated presets to emulate")
    ap.add_argument("--on", default=None, help="torch device of the tensors (default: cuda if visible, else cpu)")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per case (the best is kept)")
    ap.add_argument("--scaled-mm", action="store_true", help="also time torch._scaled_mm of e4m3fn operands")
    ap.add_argument("--out", metavar="FILE", help="write rows and metadata as JSON to FILE (atomically), or - "
                    "to print them (the table then goes to stderr)")
    args = ap.parse_args(argv)
    show = functools.partial(print, file=results_option(args.out, "--out", ap.error), flush=True)
    try:
        shapes = [tuple(int(x) for x in s.lower().split("x")) for s in args.shapes.split(",") if s]
        assert all(len(s) == 3 and min(s) > 0 for s in shapes)
    except (ValueError, AssertionError):
        ap.error(f"--shapes {args.shapes}: give m x k x n triples such as 64x256x64,128x128x128")
    bad = [d for d in args.dtypes.split(",") if d not in DTYPES]
    if bad:
        ap.error(f"--dtypes {args.dtypes}: unknown {', '.join(bad)} (use fp16, bf16, fp32)")
    try:
        import torch
    except ImportError as exc:
        print(f"bench_emulate: {exc}", file=sys.stderr)
        return 2
    dev = torch.device(args.on or ("cuda" if torch.cuda.is_available() else "cpu"))
    sync = synchronizer(torch, dev)
    meta = provenance(dev)
    show(", ".join(f"{k} {v}" for k, v in meta.items()))
    header = f"{'shape':>14}  {'dtype':6} {'device':8} {'native s':>10} {'emulated s':>11} {'slowdown':>10}  bits"
    show(header)
    show("-" * len(header))
    gen = torch.Generator().manual_seed(2026)
    rows = []
    for i, (m, k, n) in enumerate(shapes):
        for name in args.dtypes.split(","):
            dtype = getattr(torch, DTYPES[name])
            A = torch.randn(m, k, generator=gen).to(dtype).to(dev)
            B = torch.randn(k, n, generator=gen).to(dtype).to(dev)
            A @ B
            t_native = best_time(lambda: A @ B, max(args.repeat, 3), sync)
            for preset in args.devices.split(","):
                emu = bf.torch.emulate(preset)
                try:
                    with emu:
                        got = A @ B  # warm-up (compiles the Triton kernel once per model on a GPU)
                except ValueError as exc:  # a dtype the device lacks
                    show(f"{m}x{k}x{n:<6}  {name:6} {preset:8} skipped: {exc}")
                    continue
                same = check(emu, torch, dtype, A, B, got) if i == 0 else None

                def run():
                    with emu:
                        A @ B

                t = best_time(run, args.repeat, sync)
                rows.append({"m": m, "k": k, "n": n, "dtype": name, "device": preset, "on": str(dev),
                             "native_seconds": t_native, "emulated_seconds": t, "slowdown": t / t_native,
                             "route": emu.route(dtype).summary, "bit_exact": same})
                show(f"{m}x{k}x{n:<6}  {name:6} {preset:8} {t_native:10.6f} {t:11.5f} {t / t_native:10.1f}  "
                     f"{'-' if same is None else ('exact' if same else 'MISMATCH')}")
        if args.scaled_mm:
            a8 = torch.randn(m, k, generator=gen).to(dev).to(torch.float8_e4m3fn)
            b8 = torch.randn(n, k, generator=gen).to(dev).to(torch.float8_e4m3fn).t()
            one = torch.tensor(1.0, device=dev)
            try:
                torch._scaled_mm(a8, b8, one, one, out_dtype=torch.bfloat16)
                t_native = best_time(lambda: torch._scaled_mm(a8, b8, one, one, out_dtype=torch.bfloat16),
                                     max(args.repeat, 3), sync)
            except RuntimeError as exc:  # e.g. a GPU without fp8 GEMMs
                show(f"{m}x{k}x{n:<6}  e4m3fn native _scaled_mm unavailable: {str(exc).splitlines()[0]}")
                continue
            for preset in args.devices.split(","):
                if ("e4m3fn", "fp32") not in bf.device(preset).pairs():
                    continue
                emu = bf.torch.emulate(preset)

                def run8():
                    with emu:
                        torch._scaled_mm(a8, b8, one, one, out_dtype=torch.bfloat16)

                run8()
                t = best_time(run8, args.repeat, sync)
                rows.append({"m": m, "k": k, "n": n, "dtype": "e4m3fn _scaled_mm", "device": preset, "on": str(dev),
                             "native_seconds": t_native, "emulated_seconds": t, "slowdown": t / t_native,
                             "route": emu.fp8_route(a8.dtype, b8.dtype, False).summary, "bit_exact": None})
                show(f"{m}x{k}x{n:<6}  e4m3fn {preset:8} {t_native:10.6f} {t:11.5f} {t / t_native:10.1f}  -")
    if args.out:
        write_json(args.out, {"what": "bf.torch.emulate against native torch on the same tensors, same run",
                              "metadata": meta, "rows": rows})
    return 0 if all(r["bit_exact"] is not False for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
