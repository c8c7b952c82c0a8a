"""The rules every engine shares, each written once (docs/semantics.md states them; reference.py is the
oracle's own, deliberately separate copy).

* special values of the fused families: NaN and infinity in, NaN made (:func:`fused_specials`);
* the sign of an exactly zero block sum (:func:`exact_zero`);
* the bit pattern of a NaN result per NaN style (:func:`nan_bits`, :func:`nan_codes`), and which NaN an FMA
  passes on under ``nan="propagate"`` (:func:`fma_nan`);
* when products and values are exact in float64 or binary32 lanes (:func:`products_exact_in_float64`,
  :func:`values_in_binary32`);
* padding of a short last block with +0 products (:func:`pad`), and the exponent that stands for "no term"
  (:data:`NO_EXPONENT`).

The array functions take their array module first (``numpy`` or ``torch``; both spell the few operations
used here alike: ``isnan``, ``isinf``, ``signbit``, ``where``, ``any``/``all`` with ``axis``, ``*_like``), so
the numpy kernels and the GPU engine, compiled by torch.compile or not, call the same code.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import formats as _formats
from ..formats import Format, RoundingMode, fp32, holds
from ..model import Model, NaNStyle

__all__ = ["NO_EXPONENT", "fused_specials", "exact_zero", "exact_zero_terms", "zero_sign", "nan_bits", "nan_codes",
           "INVALID_NAN", "fma_nan", "products_exact_in_float64", "values_in_binary32", "pad"]

NO_EXPONENT = -(1 << 20)  # the exponent of "no term" (a zero product in a maximum): below every real one


# --- special values ----------------------------------------------------------------------------------------
def fused_specials(xp: Any, a: Any, b: Any, c: Any, *, products: bool = True, overflow: Any = None) -> tuple[Any, Any]:
    """(mask, value) of the blocks whose result is NaN or infinite by the fused families' rules
    (docs/semantics.md, "Special values"): a NaN input, or a product inf * 0, gives NaN; otherwise infinite
    products (sign: xor of the factors') and an infinite C give that infinity, or NaN if both signs occur.

    ``a``, ``b``: (..., L) float64; ``c``: (...).  ``products=False`` says every a and b is finite (only C is
    looked at); ``overflow`` is a mask (..., L) of finite products that overflow to infinity (late-c)."""
    nan = xp.isnan(c)
    pos = xp.isinf(c) & ~xp.signbit(c)
    neg = xp.isinf(c) & xp.signbit(c)
    if products or overflow is not None:
        prod_neg = xp.signbit(a) ^ xp.signbit(b)
        prod_inf = xp.zeros_like(prod_neg)
        prod_nan = xp.zeros_like(prod_neg)
        if products:
            prod_nan = (xp.isnan(a) | xp.isnan(b) | (xp.isinf(a) & (b == 0)) | ((a == 0) & xp.isinf(b)))
            prod_inf = (xp.isinf(a) | xp.isinf(b)) & ~prod_nan
            nan = nan | xp.any(prod_nan, axis=-1)
        if overflow is not None:
            prod_inf = prod_inf | (overflow & ~prod_nan)
        pos = pos | xp.any(prod_inf & ~prod_neg, axis=-1)
        neg = neg | xp.any(prod_inf & prod_neg, axis=-1)
    nan = nan | (pos & neg)
    mask = nan | pos | neg
    value = xp.where(nan, xp.full_like(mask, float("nan"), dtype=c.dtype),
                     xp.where(pos, xp.full_like(mask, float("inf"), dtype=c.dtype),
                              xp.full_like(mask, float("-inf"), dtype=c.dtype)))
    return mask, value


# --- the sign of zero --------------------------------------------------------------------------------------
def zero_sign(all_zero_negative: Any, any_zero_negative: Any, only_zeros: Any, mode: RoundingMode) -> Any:
    """IEEE 754 sign (True = negative) of an exactly zero sum: when every term is a zero, negative if all are
    -0 (TowardNegative: if any is); when nonzero terms cancel, +0 (TowardNegative: -0)."""
    if mode is RoundingMode.TowardNegative:
        return any_zero_negative | ~only_zeros
    return only_zeros & all_zero_negative


def exact_zero(xp: Any, model: Model, a: Any, b: Any, c: Any, zero: Any, value: Any) -> Any:
    """``value`` with the model's sign written where the block's sum is exactly zero (``zero``):
    ``exact_zero="positive"`` gives +0, ``"ieee"`` the IEEE sign of :func:`zero_sign` over the block's
    products (sign: xor of the factors') and C; formats without -0 give +0."""
    if model.exact_zero == "positive":  # (the common case: no per-product flags to build)
        return exact_zero_terms(xp, model, None, None, c, zero, value)
    return exact_zero_terms(xp, model, (a == 0) | (b == 0), xp.signbit(a) ^ xp.signbit(b), c, zero, value)


def exact_zero_terms(xp: Any, model: Model, term_zero: Any, term_negative: Any, c: Any, zero: Any, value: Any) -> Any:
    """:func:`exact_zero` over a block's terms given as ``term_zero`` and ``term_negative`` (..., T) (whether
    each term is zero, and its sign; unread, and may be None, where ``exact_zero="positive"``) and C (...):
    for terms that are not plain products (block-scaled groups)."""
    plus = xp.zeros_like(value)
    if model.exact_zero == "positive":
        return xp.where(zero, plus, value)
    only_zeros = xp.all(term_zero, axis=-1) & (c == 0)
    all_neg = xp.all(term_negative, axis=-1) & xp.signbit(c)
    any_neg = xp.any(term_negative, axis=-1) | xp.signbit(c)
    neg0 = zero_sign(all_neg, any_neg, only_zeros, model.output_rounding)
    if not model.output_format.has_negative_zero:
        return xp.where(zero, plus, value)
    return xp.where(zero, xp.where(neg0, -plus, plus), value)


# --- NaN bit patterns --------------------------------------------------------------------------------------
def nan_bits(fmt: Format, style: NaNStyle) -> int:
    """The bit pattern of a NaN result in ``fmt``: canonical (positive, every payload bit set: 0x7FFFFFFF),
    default (positive quiet NaN: 0x7FC00000) or indefinite (negative quiet NaN: 0xFFC00000) for every NaN;
    ``propagate`` keeps input NaNs (:func:`nan_codes`) and writes the NaN of an invalid operation, which no
    input passed on, as indefinite (0xFFF8000000000000 in binary64)."""
    t, w = fmt.fraction_bits, fmt.exponent_bits
    exp = ((1 << w) - 1) << t
    if style is NaNStyle.CANONICAL:
        return exp | ((1 << t) - 1)
    quiet = exp | (1 << (t - 1))
    return quiet | (1 << (fmt.bits - 1)) if style in (NaNStyle.INDEFINITE, NaNStyle.PROPAGATE) else quiet


INVALID_NAN = float(np.uint64(nan_bits(_formats.fp64, NaNStyle.PROPAGATE)).view(np.float64))  # 0xFFF8...


def nan_codes(fmt: Format, style: NaNStyle, values: np.ndarray) -> np.ndarray:
    """The codes (uint64) in ``fmt`` of the NaN results ``values`` (float64 NaNs): the style's one pattern,
    or with ``propagate`` each NaN's own sign and payload moved into ``fmt`` (:func:`formats.nan_codes`:
    left-aligned, quieted), which the engine carried from the input NaN (:func:`fma_nan`)."""
    if style is NaNStyle.PROPAGATE:
        return _formats.nan_codes(fmt, values)
    return np.full(np.shape(values), nan_bits(fmt, style), dtype=np.uint64)


def fma_nan(a: np.ndarray, b: np.ndarray, d: np.ndarray) -> np.ndarray:
    """The NaN one step ``fma(a, b, d)`` of a chain writes under ``nan="propagate"`` (the H100's DMMA, see
    :class:`~blockfma.model.NaNStyle`): B's NaN where ``b`` is one, else the accumulator's where ``d`` is one,
    else A's where ``a`` is one, quieted; else (``inf * 0``, ``inf - inf``) :data:`INVALID_NAN`.  float64
    arrays (numpy; broadcast), meaningful where the step's result is NaN."""
    a, b, d = np.broadcast_arrays(*(_formats.quiet_nans(x) for x in (a, b, d)))
    return np.where(np.isnan(b), b, np.where(np.isnan(d), d, np.where(np.isnan(a), a, INVALID_NAN)))


# --- exactness predicates ----------------------------------------------------------------------------------
def products_exact_in_float64(fmt: Format, other: Format | None = None) -> bool:
    """A product of a value of ``fmt`` and one of ``other`` (default: ``fmt``) is exactly a float64 (at most
    52 significant bits, no overflow or underflow): precision <= 26 and exponents within binary32's reach
    twice over, for both."""
    return all(f.precision <= 26 and f.emax <= 128 and f.emin >= -149 for f in (fmt, other or fmt))


def values_in_binary32(fmt: Format) -> bool:
    """Every value of ``fmt``, subnormals included, is a binary32 value."""
    return holds(fp32, fmt)


# --- blocks ------------------------------------------------------------------------------------------------
def pad(x: np.ndarray, L: int) -> np.ndarray:
    """``x`` with its last axis padded with zeros to length ``L`` (a short last block: +0 * +0 products)."""
    short = L - x.shape[-1]
    if short <= 0:
        return x
    return np.concatenate([x, np.zeros(x.shape[:-1] + (short,), dtype=x.dtype)], axis=-1)
