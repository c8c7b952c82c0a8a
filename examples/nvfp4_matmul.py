"""What the emulation of an NVFP4 (and MXFP8, MXFP4) matmul shows against fp32 (issue 23's closing question).

Two operand pairs, built here (no downloads): random normal matrices, and one small linear layer (GELU
activations of normal inputs times Kaiming-uniform weights).  Each is quantised along K by
``bf.torch.mx`` (MXFP8: e4m3 elements, e8m0 scale per 32, the scale rounded up; MXFP4: e2m1, e8m0 per 32;
NVFP4: e2m1, ue4m3 per 16 and a float32 global scale), multiplied by ``torch._scaled_mm`` / ``F.scaled_mm``
under ``bf.torch.emulate("B200")`` (the tcgen05 block_scale models chained over K), and compared with

* ``exact``: the float64 product of the original values (the reference every error is relative to);
* ``exact(q)``: the product of the quantised (dequantised) values, each entry an fsum of float64 products
  (exact to about 1e-16 relative);
* ``fp32(q)`` and ``fp32``: torch's fp32 matmul on the dequantised and on the original values (this CPU's
  BLAS: its order and FMAs, not a GPU's).

Errors are ||Y - Y_ref||_F / ||exact||_F.  ``quantisation`` = exact(q) vs exact; ``accumulation`` =
emulated vs exact(q), i.e. what the B200's accumulator adds on top of the quantisation; ``RN`` = the share
of entries where the emulated result is the fp32 rounding (nearest even) of exact(q), and ``ulps`` the
largest distance from it in fp32 ulps.

    PYTHONPATH=src python examples/nvfp4_matmul.py [--m 16 --n 8 --k 256 --seed 0]

(The emulation runs through ``bf.gemm``'s exact reference for block-scaled models today: about 10 ms a dot
product of K = 256 on one CPU core, so keep m x n small.)
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import torch
import torch.nn.functional as F

import blockfma as bf
from blockfma.report import table
from blockfma.torch import mx

TWO = [F.ScalingType.BlockWise1x16, F.ScalingType.TensorWise]


def operands(m: int, n: int, k: int, seed: int) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """name -> (X (m, k), W (n, k)) in float32; the product is X @ W.T."""
    g = torch.Generator().manual_seed(seed)
    rand = (torch.randn(m, k, generator=g), torch.randn(n, k, generator=g))
    bound = math.sqrt(6 / k)  # Kaiming-uniform for a ReLU-like layer of fan-in k
    layer = (F.gelu(torch.randn(m, k, generator=g)), (torch.rand(n, k, generator=g) * 2 - 1) * bound)
    return {"randn": rand, "GELU x Kaiming": layer}


def emulated(recipe: str, qa: mx.Quantized, qb: mx.Quantized) -> torch.Tensor:
    """The fp32 product of the quantised operands under emulate("B200")."""
    with bf.torch.emulate("B200"):
        if recipe == "NVFP4":
            return F.scaled_mm(qa.data, qb.data.t(), [qa.swizzled_scales(), qa.global_scale], TWO,
                               [qb.swizzled_scales(), qb.global_scale], TWO,
                               swizzle_a=[F.SwizzleType.SWIZZLE_32_4_4], swizzle_b=[F.SwizzleType.SWIZZLE_32_4_4],
                               output_dtype=torch.float32)
        return torch._scaled_mm(qa.data, qb.data.t(), qa.swizzled_scales(), qb.swizzled_scales(),
                                out_dtype=torch.float32)


def exact_product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b.T with every entry an fsum of the float64 products (each product rounded once)."""
    return np.array([[math.fsum(a[i] * b[j]) for j in range(b.shape[0])] for i in range(a.shape[0])])


def ulps(x: np.ndarray, ref32: np.ndarray) -> np.ndarray:
    """|x - ref32| in units of ref32's last place (fp32)."""
    spacing = np.spacing(np.abs(ref32).astype(np.float32)).astype(np.float64)
    return np.abs(x.astype(np.float64) - ref32.astype(np.float64)) / spacing


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--m", type=int, default=16)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--k", type=int, default=256, help="a multiple of 32")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    quantisers = {"MXFP8": lambda x: mx.to_mx(x, "e4m3fn"), "MXFP4": lambda x: mx.to_mx(x, "e2m1fn"),
                  "NVFP4": mx.to_nvfp4}
    start = time.monotonic()
    rows = []
    for case, (x, w) in operands(args.m, args.n, args.k, args.seed).items():
        exact = exact_product(x.double().numpy(), w.double().numpy())
        norm = np.linalg.norm(exact)
        fp32 = (x @ w.t()).double().numpy()
        for recipe, quantise in quantisers.items():
            qa, qb = quantise(x), quantise(w)
            da, db = qa.dequantize().numpy(), qb.dequantize().numpy()
            exact_q = exact_product(da, db)
            fp32_q = (torch.from_numpy(da).float() @ torch.from_numpy(db).float().t()).double().numpy()
            emu = emulated(recipe, qa, qb).double().numpy()
            rn = exact_q.astype(np.float32)  # nearest even
            d = ulps(emu, rn)
            rows.append({
                "operands": case, "recipe": recipe,
                "quantisation": f"{np.linalg.norm(exact_q - exact) / norm:.3e}",
                "accumulation (B200)": f"{np.linalg.norm(emu - exact_q) / norm:.3e}",
                "accumulation (fp32(q))": f"{np.linalg.norm(fp32_q - exact_q) / norm:.3e}",
                "total (B200)": f"{np.linalg.norm(emu - exact) / norm:.3e}",
                "fp32": f"{np.linalg.norm(fp32 - exact) / norm:.3e}",
                "RN": f"{np.mean(d == 0):.0%}", "ulps": f"{d.max():.0f}",
            })
    print(f"X ({args.m} x {args.k}) @ W.T ({args.k} x {args.n}), seed {args.seed}; errors relative to "
          "||exact||_F; RN / ulps: emulated vs the fp32 rounding of exact(q)")
    print(table(rows, list(rows[0])))
    print(f"({time.monotonic() - start:.1f} s)")


if __name__ == "__main__":
    main()
