"""Record a GEMM library's split-K plans on the card: cuBLAS's decisions for fp16, bf16, fp32 (TF32 off and on)
and fp8 ``torch._scaled_mm`` (with and without fast accumulation) over a grid of (m, n, k) shapes.

For each kind and shape the library's output on two sets of operands built to make every split visible
(:func:`operands`: large products whose partial sums round differently for every number of parts) is compared
bit for bit with ``bf.torch.emulate(preset, split_k={kind: {shape: S}})`` for each candidate S; the one S that
matches is the decision (``kind`` "split-k", or "unsplit" for S = 1), none or several decide nothing ("other",
the matches listed: with fast accumulation off, an fp8 split into one 128-wide k-tile per part sums as the
unsplit GEMM does, and no output can tell them apart).  The JSON is what :func:`from_survey` reads (the
order probes' surveys too); commit it under data/hardware/ and derive ``orders.RECORDED`` from it (with a test
beside tests/test_torch_orders.py's, which holds the H100 entries to their record).

    python scripts/record_plans.py --out data/hardware/h200-plans.json          # on the GPU (about minutes)

CI runs the same code on the CPU with a library of known plans as the target (tests/test_torch_orders.py).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch

import blockfma as bf
from blockfma.provenance import provenance
from blockfma.torch import orders
from blockfma.torch.routes import FP8
from blockfma.torch_switches import matmul_switches

SHAPES = [(16, 256, 16384), (64, 4096, 64), (16, 64, 5760), (16, 16, 4096), (16, 16, 1024), (128, 128, 1024),
          (128, 128, 8192), (1024, 1024, 1024)]
KINDS = ["fp16", "bf16", "fp32", "tf32", "e4m3fn", "e4m3fn*e5m2"]
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32, "tf32": torch.float32,
          **{name: dtype for dtype, name in FP8.items()}}


def operands(kind: str, m: int, n: int, k: int, design: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """A (m, k) and B (k, n; column-major for fp8) of the kind's dtypes.  Design 0: small values, +2^16 at
    index 0 and -2^16 at k - 1 (fp32 partial sums round, the result is small: fp16 and bf16 outputs show it);
    design 1: values over 2^-6..2^4 times normal ones, 2^14 at index 0 (fp8's short fast accumulator shows it)."""
    g = torch.Generator().manual_seed(design)
    fa, _, fb = kind.partition("*")
    a, b = torch.randn(m, k, generator=g), torch.randn(n, k, generator=g)
    if design == 0:
        a, b = a / 16, b / 16
        a[:, 0], b[:, 0], a[:, -1], b[:, -1] = 256.0, 256.0, -256.0, 256.0
    else:
        a = a * 2.0 ** torch.randint(-6, 5, a.shape, generator=g)
        b = b * 2.0 ** torch.randint(-6, 5, b.shape, generator=g)
        a[:, 0], b[:, 0] = 128.0, 128.0
    a, b = a.clamp(-448, 448).to(DTYPES[fa]), b.clamp(-448, 448).to(DTYPES[fb or fa])
    return a.to(device), b.to(device).t()


def library_call(kind: str, a: torch.Tensor, b: torch.Tensor, fast: bool) -> torch.Tensor:
    """The library's GEMM of this kind: torch.matmul (TF32 allowed for "tf32" only) or fp8 ``torch._scaled_mm``."""
    if kind in ("fp16", "bf16", "fp32", "tf32"):
        with matmul_switches(torch, tf32=kind == "tf32"):
            return a @ b
    one = torch.tensor(1.0, device=a.device)
    return torch._scaled_mm(a, b, one, one, out_dtype=torch.float32, use_fast_accum=fast)


def record_plans(target: Callable[..., torch.Tensor], preset: str, *, shapes: Iterable[Sequence[int]] = SHAPES,
                 kinds: Iterable[str] = KINDS, parts: Iterable[int] = range(1, 17), backend: str = "auto",
                 device: str = "cpu", budget: float | None = None) -> dict:
    """The survey: one run per (kind, fast accumulation for fp8, shape); ``target(kind, a, b, fast)`` is the
    library; the replay emulates ``preset`` with ``backend``.  Stops starting runs after ``budget`` seconds."""
    start, runs = time.monotonic(), []
    for kind in kinds:
        for fast in ((True, False) if kind not in ("fp16", "bf16", "fp32", "tf32") else (None,)):
            for m, n, k in shapes:
                if budget is not None and time.monotonic() - start > budget:
                    return {"runs": runs, "stopped": f"budget of {budget} s spent"}
                pairs = [operands(kind, m, n, k, design, device) for design in (0, 1)]
                want = [target(kind, a, b, bool(fast)).cpu() for a, b in pairs]
                key = "fp32" if kind == "tf32" else tuple(DTYPES[f] for f in kind.split("*")) if "*" in kind \
                    else DTYPES[kind]
                tiles = -(-k // orders.TILE.get((preset, kind), 1))  # S with an empty split: the same as fewer
                matches = []
                for s in (s for s in parts if s == 1 or (s - 1) * -(-tiles // s) < tiles):
                    with bf.torch.emulate(preset, split_k={key: {(m, n, k): s}}, backend=backend):
                        got = [library_call(kind, a, b, bool(fast)).cpu() for a, b in pairs]
                    if all(torch.equal(x.view(torch.uint8), y.view(torch.uint8)) for x, y in zip(got, want)):
                        matches.append(s)
                one = matches[0] if len(matches) == 1 else None
                runs.append({"dtype": "fp32" if kind == "tf32" else kind, "m": m, "n_cols": n, "n": k,
                             **({"allow_tf32": kind == "tf32"} if kind in ("fp32", "tf32") else {}),
                             **({"use_fast_accum": fast} if fast is not None else {}),
                             "kind": "other" if one is None else "unsplit" if one == 1 else "split-k", "ways": one,
                             "combine": "sequential", "matches": matches,
                             "verify_replay": {"ok": one is not None, "outputs": m * n, "candidates": list(parts)}})
    return {"runs": runs}


def from_survey(survey: Mapping[str, Any], device: str) -> dict[tuple[str, str], dict[tuple[int, int, int], int]]:
    """``blockfma.torch.orders.RECORDED``'s entries for ``device`` from a survey of the order probes
    (``blockfma.experiments.torch_orders``) or a record of this script: a verified contiguous split with
    sequential partial sums gives its parts, one chain (blocks, sequential, unsplit) 1; anything else (an
    interleaved order, an error, a failed check, a replay that several plans match) decides nothing."""
    out: dict[tuple[str, str], dict[tuple[int, int, int], int]] = {}
    for r in survey["runs"]:
        check = r.get("verify_preset") or r.get("verify_fp32") or r.get("verify_replay") or {}
        kind = "tf32" if r.get("allow_tf32") else r["dtype"]
        if r.get("kind") == "split-k" and r.get("combine") == "sequential" and check.get("ok"):
            out.setdefault((device, kind), {})[(r["m"], r["n_cols"], r["n"])] = r["ways"]
        elif r.get("kind") in ("blocks", "sequential", "unsplit") and check.get("ok"):
            out.setdefault((device, kind), {})[(r["m"], r["n_cols"], r["n"])] = 1
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="the JSON record to write")
    p.add_argument("--preset", default="H100", help="the blockfma preset whose models replay the library")
    p.add_argument("--device", default="cuda")
    p.add_argument("--shapes", default=",".join("x".join(map(str, s)) for s in SHAPES), help="MxNxK,...")
    p.add_argument("--kinds", default=",".join(KINDS))
    p.add_argument("--max-parts", type=int, default=16)
    p.add_argument("--budget", type=float, default=None, help="seconds after which no run starts")
    args = p.parse_args()
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    env = {**provenance(args.device), "preset": args.preset, "cublaslt": getattr(torch._C, "_cublasLt_version",
                                                                                    lambda: None)()}
    survey = record_plans(lambda kind, a, b, fast: library_call(kind, a, b, fast), args.preset, shapes=shapes,
                          kinds=args.kinds.split(","), parts=range(1, args.max_parts + 1), device=args.device,
                          budget=args.budget)
    with open(args.out, "w") as f:
        json.dump({"what": "cuBLAS split-K plans by replay (scripts/record_plans.py)", "orders": {
            "environment": env, **survey}}, f, indent=1)
    for r in survey["runs"]:
        print(r["dtype"], r.get("allow_tf32", r.get("use_fast_accum", "")), f"{r['m']}x{r['n_cols']}x{r['n']}",
              r["kind"], r["matches"])


if __name__ == "__main__":
    main()
