"""The few array operations numpy and torch spell differently, for the steps of :mod:`.split`,
:mod:`.ozaki` and :mod:`.methods` that run on both (numpy arrays on the host; torch tensors on their
device, :mod:`.tensors`).

Every function takes the array module first (``numpy`` or ``torch``), as :mod:`blockfma.engine.array`
does, so a rule (how a word is split, how a slice is cut, how a residue and the CRT are formed) is written
once and executed by both.  Only exact operations are used where a rule needs exactness: :func:`ldexp`
rounds once (as ``numpy.ldexp``; torch's own ``ldexp`` multiplies by ``2.0**e``, which underflows to zero
for e < -1074 and so is not used), :func:`round_to` rounds once to a format.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import formats as _formats
from ..engine.array import round_to as _engine_round_to
from ..formats import Format, RoundingMode

__all__ = ["is_numpy", "pow2", "ldexp", "frexp", "round_to", "binary32", "to", "zeros", "contiguous", "clip", "amax",
           "row_squares", "first", "constant", "count"]


def is_numpy(xp: Any) -> bool:
    """Whether ``xp`` is numpy (else torch)."""
    return xp is np


def to(xp: Any, x: Any, dtype: str) -> Any:
    """x converted to "float64", "float32", "int64", "int32" or "int8" (C-style: floats truncate)."""
    return x.astype(getattr(np, dtype)) if is_numpy(xp) else x.to(getattr(xp, dtype))


def zeros(xp: Any, shape: tuple[int, ...], dtype: str, like: Any) -> Any:
    """Zeros of ``shape`` and ``dtype`` (a name, as for :func:`to`) on ``like``'s device."""
    if is_numpy(xp):
        return np.zeros(shape, dtype=getattr(np, dtype))
    return xp.zeros(shape, dtype=getattr(xp, dtype), device=like.device)


def constant(xp: Any, values: Any, dtype: str, like: Any) -> Any:
    """``values`` (a list of Python numbers) as an array of ``dtype`` on ``like``'s device."""
    if is_numpy(xp):
        return np.array(values, dtype=getattr(np, dtype))
    return xp.tensor(values, dtype=getattr(xp, dtype), device=like.device)


def contiguous(xp: Any, x: Any) -> Any:
    """x in row-major (C) order: a copy where it is a transposed view."""
    return np.ascontiguousarray(x) if is_numpy(xp) else x.contiguous()


def clip(xp: Any, x: Any, lo: int | None, hi: int | None) -> Any:
    """x limited to [lo, hi] (None: no limit on that side)."""
    return np.clip(x, lo, hi) if is_numpy(xp) else xp.clamp(x, min=lo, max=hi)


def amax(xp: Any, x: Any, axis: int, keepdims: bool = False) -> Any:
    """The maximum along ``axis`` (of a non-empty axis)."""
    return np.max(x, axis=axis, keepdims=keepdims) if is_numpy(xp) else xp.amax(x, dim=axis, keepdim=keepdims)


def row_squares(xp: Any, Y: Any) -> Any:
    """sum_j Y[i, j]**2 for each row i, in float64 (the summation order is the library's: it may differ
    between numpy and torch in the last bits)."""
    return np.einsum("ij,ij->i", Y, Y) if is_numpy(xp) else (Y * Y).sum(dim=1)


def count(xp: Any, mask: Any) -> int:
    """The number of True entries of ``mask``, as a Python int."""
    return int(np.count_nonzero(mask)) if is_numpy(xp) else int(xp.count_nonzero(mask).item())


def first(xp: Any, mask: Any) -> tuple[int, ...] | None:
    """The index of the first True entry of ``mask`` (row-major), or None."""
    if is_numpy(xp):
        hits = np.argwhere(mask)
        return tuple(int(t) for t in hits[0]) if len(hits) else None
    hits = xp.nonzero(mask)
    return tuple(int(t) for t in hits[0].tolist()) if hits.shape[0] else None


def pow2(xp: Any, e: Any) -> Any:
    """2.0**e for integers e in [-1022, 1023] (an int64 array), built from the bit pattern: exact."""
    return ((to(xp, e, "int64") + 1023) << 52).view(xp.float64)


def frexp(xp: Any, x: Any) -> tuple[Any, Any]:
    """(m, e) with x = m * 2**e, 1/2 <= |m| < 1 (m = e = 0 for x = 0), e as int64."""
    m, e = xp.frexp(x)
    return m, to(xp, e, "int64")


def ldexp(xp: Any, x: Any, e: Any) -> Any:
    """x * 2**e rounded once (to nearest even where it underflows; +-inf beyond the range), for float64 x
    and integer e (a Python int or an integer array broadcasting with x): ``numpy.ldexp``'s result."""
    if is_numpy(xp):
        return np.ldexp(x, e)
    if isinstance(e, int) and -1022 <= e <= 1023:
        return x if e == 0 else x * 2.0**e  # one rounding of the exact product: the same as ldexp
    if not isinstance(e, int) and e.numel():
        lo, hi = xp.stack(xp.aminmax(e)).tolist()  # e's range, read at once
        if -1022 <= lo and hi <= 1023:
            return x * pow2(xp, e)  # 2**e a normal number: one rounding of the exact product, as ldexp
    m, ex = frexp(xp, x)
    t = ex + (e if isinstance(e, int) else to(xp, e, "int64"))
    t1 = xp.clamp(t, -1021, 1000)  # m * 2**t1 is exact: a normal number with 53 bits above 2**-1074
    t2 = xp.clamp(t - t1, -1022, 1023)  # the one rounding (clamping only where the result is 0 or inf anyway)
    return m * pow2(xp, t1) * pow2(xp, t2)


def binary32(xp: Any, x: Any) -> bool:
    """Whether every value of the float64 array x is a binary32 value (a finite x: within its range)."""
    with np.errstate(over="ignore"):  # beyond binary32's range: inf, not equal
        return bool((to(xp, to(xp, x, "float32"), "float64") == x).all())


def round_to(xp: Any, fmt: Format | str, x: Any, mode: RoundingMode = RoundingMode.TiesToEven, *,
             is_binary32: bool | None = None) -> Any:
    """Finite float64 values rounded once to ``fmt`` in ``mode``, as float64: :func:`blockfma.formats.round`
    on numpy arrays, :func:`blockfma.engine.array.round_to` (the engine's exact array rounding) on torch,
    or torch's binary32 conversions where x holds binary32 values (``is_binary32``: known; None: looked
    at)."""
    f = _formats.get(fmt)
    if is_numpy(xp):
        return _formats.round(f, x, mode)
    if f.name == "fp64":
        return x
    fast = _from_binary32(xp, f, x, mode, is_binary32)
    return fast if fast is not None else _engine_round_to(xp, f, x, mode, subnormals=f.subnormals)


BINARY32_ROUNDINGS = {("fp16", RoundingMode.TiesToEven): "float16", ("bf16", RoundingMode.TiesToEven): "bfloat16",
                      ("tf32", RoundingMode.TiesToEven): "rne", ("tf32", RoundingMode.TowardZero): "rz"}
"""The (format, mode) pairs :func:`round_to` takes in a few device operations on binary32 values."""


def _from_binary32(xp: Any, f: Format, x: Any, mode: RoundingMode, known: bool | None) -> Any:
    """The same rounding in a few device operations where every x is a binary32 value (as fp32-level data
    and all its split residuals are), in x's dtype (float64, or float32: no conversions): fp16/bf16 to
    nearest even by torch's binary32 conversion (IEEE, one rounding: the float64 -> float32 step is exact
    here), tf32 by the bits (10 fraction bits: round to nearest even or cut 13 bits of the binary32 pattern;
    subnormals have the same quantum 2**-136 in both readings).  None where it does not apply."""
    kind = BINARY32_ROUNDINGS.get((f.name, mode))
    if kind is None:
        return None
    if known is False or (known is None and not binary32(xp, x)):
        return None
    y = x.to(xp.float32)
    if kind in ("float16", "bfloat16"):
        return y.to(getattr(xp, kind)).to(x.dtype)
    b = y.view(xp.int32)
    if kind == "rne":
        b = b + (0xFFF + ((b >> 13) & 1))  # a carry into the exponent is the rounding up (to inf beyond range)
    return (b & ~0x1FFF).view(xp.float32).to(x.dtype)
