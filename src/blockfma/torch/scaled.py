"""The scaled GEMMs of ``bf.torch.emulate`` (``torch._scaled_mm``, ``F.scaled_mm``): their operands and scales
read and checked, the recipes of ``F.scaled_mm``, and the binary32 epilogue (:func:`epilogue`) that applies
the scales, the bias and ``out_dtype`` to the model's fp32 product."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..arguments import ArgumentError, Shown
from ..model import Family, Model
from . import mx
from .compute import finish
from .routes import FORMATS, FP8, Route

__all__ = ["fp8_operands", "block_operands", "check_out_dtype", "check_scale_result", "scale", "check_bias",
           "block_scale_format", "block_scales", "global_scale", "epilogue", "v2_block_recipe", "v2_swizzled",
           "PLAIN_RECIPES"]

PLAIN_RECIPES = (0, 1)  # F.ScalingType.TensorWise, RowWise: the scales _scaled_mm takes
#: F.ScalingType lists of the block-scale recipes (BlockWise1x16 = 2, BlockWise1x32 = 3, TensorWise = 0) ->
#: (elements per scale, whether a global scale comes second)
_BLOCK_RECIPES = {(2,): (16, False), (3,): (32, False), (2, 0): (16, True)}


def _what(t: Any) -> str:
    return type(t).__name__ if not isinstance(t, torch.Tensor) else f"{t.dim()}-D {t.dtype}"


def fp8_operands(a: Any, b: Any) -> tuple[int, int, int]:
    """(m, k, n) of 2-D fp8 operands of ``torch._scaled_mm``, checked."""
    for name, t in (("self", a), ("mat2", b)):
        if not isinstance(t, torch.Tensor) or t.dtype not in FP8 or t.dim() != 2:
            raise ArgumentError(name, Shown(_what(t)), "torch._scaled_mm under emulate takes 2-D fp8 tensors "
                                "(torch.float8_e4m3fn, float8_e5m2 or their fnuz forms)")
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    if b.shape[0] != k:
        raise ValueError(f"_scaled_mm under emulate: shapes {tuple(a.shape)} and {tuple(b.shape)} cannot be "
                         f"multiplied ({k} != {b.shape[0]})")
    return m, k, n


def block_operands(a: Any, b: Any) -> tuple[str, str, int, int, int]:
    """(A's format, B's format, m, K, n) of a block-scaled ``torch._scaled_mm``: 2-D fp8 operands (MXFP8) or
    packed fp4 ones (MXFP4, NVFP4: K counts two values a byte), checked."""
    fp4 = mx.FP4
    fmts = []
    for name, t in (("self", a), ("mat2", b)):
        if not (isinstance(t, torch.Tensor) and t.dim() == 2 and (t.dtype in mx.FP8_FORMATS or
                                                                  (fp4 is not None and t.dtype == fp4))):
            raise ArgumentError(name, Shown(_what(t)), "a block-scaled torch._scaled_mm takes 2-D "
                                "torch.float8_e4m3fn / float8_e5m2 (MXFP8) or torch.float4_e2m1fn_x2 "
                                "(MXFP4, NVFP4) tensors")
        fmts.append("e2m1fn" if t.dtype == fp4 else mx.FP8_FORMATS[t.dtype])
    packed = fmts[0] == "e2m1fn"
    if packed != (fmts[1] == "e2m1fn"):
        raise ArgumentError("mat2", Shown(str(b.dtype)), f"self is {a.dtype}: packed fp4 operands go with "
                            "packed fp4 (K counts differ otherwise)", fix="quantise both to one recipe")
    if b.shape[0] != a.shape[1]:
        raise ValueError(f"_scaled_mm under emulate: shapes {tuple(a.shape)} and {tuple(b.shape)} cannot be "
                         f"multiplied ({a.shape[1]} != {b.shape[0]}" + (", fp4 bytes along K)" if packed else ")"))
    return fmts[0], fmts[1], a.shape[0], a.shape[1] * (2 if packed else 1), b.shape[1]


def check_out_dtype(out_dtype: Any, what: str) -> None:
    if out_dtype is None or out_dtype not in FORMATS:
        raise ArgumentError("out_dtype", out_dtype, f"{what} of torch._scaled_mm is not modelled",
                            fix="pass out_dtype=torch.bfloat16, torch.float16 or torch.float32")


def check_scale_result(scale_result: Any) -> None:
    if scale_result is not None:
        raise ArgumentError("scale_result", Shown("a tensor"), "scales an fp8 output only, which is not "
                            "modelled", fix="pass scale_result=None with a bf16, fp16 or fp32 out_dtype")


def scale(name: str, s: Any, shape: tuple[int, int], device: torch.device) -> torch.Tensor:
    """A ``_scaled_mm`` scale as a float32 tensor that broadcasts to (m, n): one value, or ``shape``."""
    if not isinstance(s, torch.Tensor) or s.dtype != torch.float32:
        what = type(s).__name__ if not isinstance(s, torch.Tensor) else str(s.dtype)
        raise ArgumentError(name, Shown(what), "must be a float32 tensor", fix="e.g. torch.tensor(1.0)")
    if s.numel() == 1:
        return s.reshape(1, 1).to(device)
    if tuple(s.shape) != shape:
        raise ArgumentError(name, Shown(f"shape {tuple(s.shape)}"), f"must hold one value (per tensor) or have "
                            f"shape {shape} (row-wise scaling)")
    return s.to(device)


def check_bias(bias: Any, n: int) -> None:
    if bias is not None and (not isinstance(bias, torch.Tensor) or bias.dtype not in FORMATS
                             or tuple(bias.shape) != (n,)):
        what = type(bias).__name__ if not isinstance(bias, torch.Tensor) else f"{tuple(bias.shape)} {bias.dtype}"
        raise ArgumentError("bias", Shown(what), f"must be a 1-D fp32, fp16 or bf16 tensor of {n} values "
                            "(one per output column)")


def block_scale_format(scale_a: Any, scale_b: Any) -> str:
    """The format of both operands' block scales: "e8m0fnu" (MX) or "ue4m3" (NVFP4), checked."""
    dtypes = []
    for name, s in (("scale_a", scale_a), ("scale_b", scale_b)):
        if not isinstance(s, torch.Tensor) or s.dtype not in mx.SCALE_FORMATS:
            what = type(s).__name__ if not isinstance(s, torch.Tensor) else str(s.dtype)
            raise ArgumentError(name, Shown(what), "block scales are torch.float8_e8m0fnu (MX) or "
                                "torch.float8_e4m3fn (NVFP4's ue4m3)")
        dtypes.append(s.dtype)
    if dtypes[0] != dtypes[1]:
        raise ArgumentError("scale_b", Shown(str(dtypes[1])), f"scale_a is {dtypes[0]}: both operands' scales "
                            "must have one format")
    return "ue4m3" if dtypes[0] == torch.float8_e4m3fn else "e8m0fnu"


def block_scales(name: str, s: torch.Tensor, rows: int, kb: int, swizzled: bool, fs: str) -> np.ndarray:
    """One operand's scales as a float64 (rows, kb) array, read from their layout and checked: a
    negative ue4m3 (its sign bit set) is refused; NaN codes pass (they make results NaN)."""
    if not swizzled and tuple(s.shape) != (rows, kb):
        hint = " (that is the transposed layout: pass its .t())" if tuple(s.shape) == (kb, rows) else ""
        per = "row of self" if name == "scale_a" else "column of mat2"
        raise ArgumentError(name, Shown(f"shape {tuple(s.shape)}"), f"plain (unswizzled) block scales "
                            f"must have shape ({rows}, {kb}): one row per {per}, one scale per block of "
                            f"K{hint}", fix="or pass them swizzled (blockfma.torch.mx.swizzle) with "
                            "SwizzleType.SWIZZLE_32_4_4")
    t = mx.unswizzle(s, rows, kb, name) if swizzled else s
    v = mx.values(t, "e4m3fn" if fs == "ue4m3" else "e8m0fnu")
    neg = np.signbit(v) & ~np.isnan(v)
    if neg.any():
        r, j = (int(x) for x in np.argwhere(neg)[0])
        raise ArgumentError(name, Shown(f"<{rows}x{kb} ue4m3 scales>"), f"the scale of row {r}, block {j} is "
                            f"{float(v[r, j])!r}: ue4m3 scales are unsigned (sign bit 0)",
                            fix="quantise with blockfma.torch.mx.to_nvfp4, or clear the sign bits")
    return v


def global_scale(global_a: Any, global_b: Any, device: torch.device) -> torch.Tensor:
    """NVFP4's global scales as one binary32 product ga * gb (nearest even); 1 without them."""
    if (global_a is None) != (global_b is None):
        raise ArgumentError("scale_b" if global_b is None else "scale_a", None, "NVFP4's global scales come "
                            "in pairs: one float32 value for each operand", fix="pass both or neither")
    if global_a is None:
        return torch.ones((), dtype=torch.float32)
    ga = scale("scale_a", global_a, (1, 1), device)
    gb = scale("scale_b", global_b, (1, 1), device)
    return (ga * gb).reshape(())  # binary32, nearest even


def epilogue(route: Route, product: torch.Tensor, s: torch.Tensor, bias: torch.Tensor | None,
             out_dtype: torch.dtype) -> torch.Tensor:
    """The binary32 epilogue of a scaled GEMM: ``product`` (fp32) times ``s`` (fp32, broadcasting), plus
    ``bias`` converted exactly to fp32, each step rounded to nearest even in binary32, then one conversion
    (nearest even) to ``out_dtype``; NaNs take the route's model's NaN codes."""
    d = product * s
    if bias is not None:
        d = d + bias.to(device=product.device, dtype=torch.float32)
    out = d.to(out_dtype)  # nearest even
    assert route.model is not None
    if bool(torch.isnan(out).any()):
        nan_model = Model(Family.EXACT_FUSED, FORMATS[out_dtype], FORMATS[out_dtype], block_width=1,
                          nan=route.model.nan, name="the epilogue's NaN codes")
        out = finish(nan_model, out.to(torch.float32), out_dtype, computed=False)
    return out


def v2_block_recipe(recipe_a: list, recipe_b: list) -> tuple[int, bool] | None:
    """(block, two-level) of a block-scale recipe pair of ``F.scaled_mm``: both ``[BlockWise1x32]`` or both
    ``[BlockWise1x16]``, or both ``[BlockWise1x16, TensorWise]`` (NVFP4 with a global scale); else None."""
    ra, rb = tuple(int(x) for x in recipe_a), tuple(int(x) for x in recipe_b)
    return _BLOCK_RECIPES.get(ra) if ra == rb else None


def v2_swizzled(name: str, swizzle: Any) -> bool:
    """Whether ``F.scaled_mm``'s swizzle list says cuBLAS's layout (SWIZZLE_32_4_4 first; none: plain)."""
    kinds = [int(x) for x in (swizzle or [])]
    if kinds and kinds[0] not in (0, 1):
        raise ArgumentError(name, kinds, "swizzles are SwizzleType.NO_SWIZZLE (0) or SWIZZLE_32_4_4 (1)")
    return bool(kinds) and kinds[0] == 1
