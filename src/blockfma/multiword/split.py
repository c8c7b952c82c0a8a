"""Splitting a matrix into words of a low-precision format (multiword arithmetic).

Fasi et al. (2022, eq. 2.2): A_1 = fl_low(A), A_i = fl_low(A - A_1 - ... - A_{i-1}), so that
A = A_1 + ... + A_p + ΔA with |ΔA| <= u_low^p |A| barring underflow.  Each residual is exact in binary64
(the error of rounding a binary64 value to fewer bits is a binary64 value), so the only roundings are the
fl_low of each word.  Ootomo and Yokota scale each residual by 2**s before rounding it (s = 11 for fp16), which
keeps the small words out of fp16's subnormal range; the words then carry that scale, undone after the
products.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from .. import formats as _formats
from ..formats import Format, RoundingMode

__all__ = ["RangeWarning", "split", "check_input", "check_operands"]


class RangeWarning(UserWarning):
    """A word lost bits to underflow (the seed's caveat on range): the split is not as accurate as u_low^p."""


def check_input(A: Any, name: str = "A") -> np.ndarray:
    """A as a 2-D float64 array of finite real values (exact for every real dtype here, bfloat16 and fp8
    included), or a ValueError naming the first bad entry: the one input rule of every multiword function."""
    arr = np.asarray(A)
    if arr.dtype.kind == "c":
        raise ValueError(f"{name} is complex; multiword products take real matrices")
    if arr.dtype.kind in "USV":
        raise ValueError(f"{name} must hold numbers, not dtype {arr.dtype}")
    if arr.dtype.kind == "O":
        try:
            arr = np.asarray(arr, dtype=np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"{name} is not an array of real numbers") from None
    x = _formats.from_numpy(arr, name)
    if x.ndim != 2:
        raise ValueError(f"{name} must be a 2-D matrix; got shape {x.shape}")
    bad = np.argwhere(~np.isfinite(x))
    if len(bad):
        i, j = (int(t) for t in bad[0])
        raise ValueError(f"{name}[{i}, {j}] = {float(x[i, j])!r} is not finite ({len(bad)} non-finite entries): "
                         "multiword products and their error measures take finite matrices")
    return x


def check_operands(A: Any, B: Any) -> tuple[np.ndarray, np.ndarray]:
    """:func:`check_input` on A and B, and A's columns equal to B's rows."""
    A_, B_ = check_input(A, "A"), check_input(B, "B")
    if A_.shape[1] != B_.shape[0]:
        raise ValueError(f"inner dimensions differ: A is {A_.shape}, B is {B_.shape} (A's columns must equal "
                         "B's rows)")
    return A_, B_


def split(A: Any, fmt: Format | str, p: int, *, scale: int = 0, rounding: RoundingMode | str = "rne",
          name: str = "A") -> list[np.ndarray]:
    """The p words of A in ``fmt``: A ≈ W_1 + 2**-s W_2 + 2**-2s W_3 + ..., returned as [W_1, ..., W_p].

    W_1 = fl(A); W_i = fl(2**((i-1)s) (A - W_1 - 2**-s W_2 - ...)), each fl rounding to ``fmt`` in
    ``rounding`` (to nearest by default; "rz" is how a tf32 unit reads fp32 registers).  ``scale`` = s.
    A value beyond ``fmt``'s range is a ValueError (scale A first); a residual that the format cannot hold
    whole (underflow into or below the subnormals) gives a :class:`RangeWarning` with the count.
    """
    f = _formats.get(fmt)
    if not isinstance(p, (int, np.integer)) or isinstance(p, bool) or p < 1:
        raise ValueError(f"the number of words p must be a positive integer, not {p!r}")
    x = check_input(A, name)
    big = np.argwhere(np.abs(x) > f.max)
    if len(big):
        i, j = (int(t) for t in big[0])
        raise ValueError(f"{name}[{i}, {j}] = {x[i, j]!r} is beyond {f.name}'s largest value {f.max!r}: scale "
                         f"{name} by a power of two first (multiword words must hold its entries)")
    mode = RoundingMode.parse(rounding)
    words: list[np.ndarray] = []
    residual = x.copy()
    for i in range(p):
        scaled = np.ldexp(residual, scale * i)
        w = _formats.round(f, scaled, mode)
        words.append(w)
        residual = residual - np.ldexp(w, -scale * i)  # exact: the error of one rounding
    lost = int(np.count_nonzero(_lost_to_underflow(f, words, x, scale)))
    if lost:
        warnings.warn(f"{lost} entries of {name} lose bits to underflow in {f.name} words (entries too small for "
                      f"{p} words of {f.name}; scale {name} up, or use scale=)", RangeWarning, stacklevel=2)
    return words


def _lost_to_underflow(f: Format, words: list[np.ndarray], x: np.ndarray, scale: int) -> np.ndarray:
    """Entries whose some word's input lay below fmt's smallest normal (its significand cut by the range,
    not by the precision), where the entry is not yet exact."""
    mask = np.zeros(x.shape, bool)
    residual = x.copy()
    for i, w in enumerate(words):
        scaled = np.ldexp(residual, scale * i)
        tiny = (scaled != 0) & (np.abs(scaled) < f.smallest_normal) & (w != scaled)
        mask |= tiny
        residual = residual - np.ldexp(w, -scale * i)
    return mask
