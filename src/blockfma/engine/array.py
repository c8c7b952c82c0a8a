"""The array kernels of the fused families: one code path for numpy arrays and torch tensors.

Each kernel takes its array module first (``numpy`` or ``torch``, as :mod:`.rules` does) and computes one block for a
whole batch: ``a``, ``b`` of shape ``(..., L)`` and ``c`` of shape ``(...)`` (float64, broadcasting; values already in
the model's formats and flushed where the model flushes).  The numpy engine (:mod:`.kernels`) calls them with ``numpy``;
the GPU engine (:mod:`.gpu`) with ``torch`` on a CUDA GPU or the CPU, op by op or fused by torch.compile.  Only exact
operations are used (float64 products of inputs of at most 26 bits, powers of two built from their bits,
``trunc``/``floor`` cuts, integer sums below 2**53, one rounding by :func:`round_to`), so the bits do not depend on the
module, the device or the order of any reduction (docs/engines.md, "The GPU engine").

:func:`supports` says which models fit those bounds: every truncated-fused and late-c preset, and the exact-fused ones
with results no wider than binary32.  The numpy engine runs the others (fp64 exact-fused) through :mod:`.wide`.  What
each family computes is docs/semantics.md; the special values and the sign of zeros come from :mod:`.rules`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..formats import Format, RoundingMode, signed_result
from ..model import Alignment, Family, Model
from . import rules

__all__ = ["supports", "flags", "width", "round_to", "fmt_exponent", "finite", "truncated_fused", "aligned_sum",
           "late_c", "exact_fused"]

_NONE = rules.NO_EXPONENT
LIMB = 32  # bits per limb of the exact-fused accumulator


def supports(model: Model) -> bool:
    """Whether the family's array kernel runs this model: a family with one (truncated-fused, late-c,
    exact-fused, or a user's), inputs whose products are exact in float64, C and results no wider than
    binary32, and for the cut families block sums below 2**53."""
    if not model.family.has("array"):
        return False
    if not rules.products_exact_in_float64(model.input_format, model.b_format):
        return False
    if not (rules.values_in_binary32(model.c_format) and rules.values_in_binary32(model.result_format)):
        return False
    if model.family not in (Family.TRUNCATED_FUSED, Family.LATE_C):
        return True
    if model.block_width is None:
        return False
    headroom = 2 + (model.block_width + 1).bit_length()  # bits of a sum of L + 1 terms below 2**(F+2)
    if model.family is Family.TRUNCATED_FUSED:  # e_zero within reach of float64's powers of two
        return (model.fraction_bits is not None and model.fraction_bits + headroom <= 53
                and model.e_zero is not None and abs(model.e_zero) <= 900)
    F, F2 = model.fraction_bits, model.late_fraction_bits
    return F is not None and F2 is not None and F2 >= F and late_sum_bits(model) + headroom <= 53


def late_sum_bits(model: Model) -> int:
    """Late-c: the bits below the common exponent at which S is cut before C is added, F2 + 1 under
    ``late_cut="leading"`` (the sum is cut again at F2 bits below its own leading bit) and F2 under ``"common"``."""
    assert model.late_fraction_bits is not None
    return model.late_fraction_bits + (model.late_cut == "leading")


def flags(model: Model, a: np.ndarray, b: np.ndarray) -> tuple[bool, bool]:
    """(some a or b may be non-finite, some product may overflow the C format), looked at once on the host
    for a whole call so that the kernels skip the work the inputs cannot need.  Only late-c turns an
    overflowing product into an infinity (the other fused families cut it at its exponent)."""
    products = not (np.isfinite(a).all() and np.isfinite(b).all())
    if model.family is not Family.LATE_C:
        return products, False
    fa = np.abs(a[np.isfinite(a)])
    fb = np.abs(b[np.isfinite(b)])
    big = (fa.max() if fa.size else 0.0) * (fb.max() if fb.size else 0.0)
    return products, bool(big >= 2.0 ** (model.c_format.emax + 1))  # Python bools: torch.compile folds them


def width(model: Model, L: int) -> int:
    """Elements a kernel holds per output (its L products, and the limbs of exact-fused): what a caller
    divides its memory budget by to size a tile."""
    return L + 1 + (_limb_span(model, L)[1] if model.family is Family.EXACT_FUSED else 0)


# --- the few operations numpy and torch spell differently --------------------------------------------------
def _is_torch(xp: Any) -> bool:
    return xp is not np


def _as(xp: Any, x: Any, dtype: Any) -> Any:
    return x.to(dtype) if _is_torch(xp) else x.astype(dtype)


def _take(xp: Any, x: Any, i: Any) -> Any:
    """x[..., i] with one index per row (``i`` of shape ``x.shape[:-1]``)."""
    if _is_torch(xp):
        return x.gather(-1, i.unsqueeze(-1)).squeeze(-1)
    return np.take_along_axis(x, i[..., None], -1)[..., 0]


def _limb_sums(xp: Any, n: int, index: list[Any], values: list[Any]) -> Any:
    """int64 ``acc`` of shape ``(..., n)`` with ``acc[..., l]`` the sum of the ``values[i][..., t]`` whose
    ``index[i][..., t]`` is ``l`` (integer values below 2**33 in magnitude, fewer than 2**19 per row)."""
    shape = tuple(values[0].shape[:-1])
    if _is_torch(xp):
        acc = xp.zeros(shape + (n,), dtype=xp.int64, device=values[0].device)
        for i, v in zip(index, values):
            acc.scatter_add_(-1, i, v)
        return acc
    # numpy: one bincount over flat indices; its float64 sums of integers below 2**52 are exact
    rows = np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.int64).reshape(shape + (1,)) * n
    flat = np.concatenate([np.broadcast_to(i + rows, v.shape).reshape(-1) for i, v in zip(index, values)])
    weights = np.concatenate([v.reshape(-1) for v in values]).astype(np.float64)
    return np.bincount(flat, weights=weights, minlength=rows.size * n).astype(np.int64).reshape(shape + (n,))


# --- exact float64 helpers -------------------------------------------------------------------------------
def _pow2(xp: Any, e: Any) -> Any:
    """2.0**e for integer arrays e in [-1022, 1023], built from the bit pattern (exact on every device)."""
    return ((_as(xp, e, xp.int64) + 1023) << 52).view(xp.float64)


def _exponent(xp: Any, x: Any) -> Any:
    """floor(log2 |x|) of normal float64 values (int64)."""
    return ((x.view(xp.int64) >> 52) & 0x7FF) - 1023


def fmt_exponent(xp: Any, fmt: Format, x: Any) -> Any:
    """E_fmt(x) = max(floor(log2 |x|), emin) of finite values, and NO_EXPONENT for zeros (int64)."""
    return xp.where(x == 0, _NONE, xp.clip(_exponent(xp, x), fmt.emin, None))


def finite(xp: Any, x: Any) -> Any:
    """x with its non-finite values replaced by 0."""
    return xp.where(xp.isfinite(x), x, 0.0)


def round_to(xp: Any, fmt: Format, x: Any, mode: RoundingMode, *, subnormals: bool, overflow: str = "ieee") -> Any:
    """Round exact finite float64 values ``x`` once to ``fmt`` (precision <= 52): what
    :func:`blockfma.formats.round_integer` does on (sign, integer, exponent) triples, here on float64
    values, with its flush-to-zero (tininess before rounding) and its overflow policies.  The significand
    scaled to an integer quantum is rounded by trunc/round/floor/ceil, all exact."""
    neg = xp.signbit(x)
    ax = xp.abs(x)
    e = xp.where(ax == 0, fmt.emin, _exponent(xp, ax))
    q = (xp.clip(e, fmt.emin, None) if subnormals else e) - (fmt.precision - 1)
    y = ax * _pow2(xp, -q)  # |x| in units of the result's last place: exact
    if mode is RoundingMode.TowardZero:
        r = xp.trunc(y)
    elif mode is RoundingMode.TiesToEven:
        r = xp.round(y)  # half to even
    elif mode is RoundingMode.TiesAway:
        r = xp.floor(y + 0.5)  # exact: y < 2**53 has a last place of at most 2**-1 here
    elif mode is RoundingMode.TowardPositive:
        r = xp.where(neg, xp.trunc(y), xp.ceil(y))
    elif mode is RoundingMode.TowardNegative:
        r = xp.where(neg, xp.ceil(y), xp.trunc(y))
    else:  # ToOdd
        t = xp.trunc(y)
        r = t + _as(xp, (t != y) & (xp.fmod(t, 2) == 0), y.dtype)
    v = r * _pow2(xp, q)
    return signed_result(xp, fmt, v, neg, (ax > 0) & (ax < fmt.smallest_normal), mode, overflow,  # type: ignore[arg-type]
                         subnormals=subnormals)


def _exponents(xp: Any, model: Model, a: Any, b: Any, ea: Any, eb: Any) -> tuple[Any, Any]:
    return (fmt_exponent(xp, model.input_format, a) if ea is None else ea,
            fmt_exponent(xp, model.b_format, b) if eb is None else eb)


# --- block kernels -----------------------------------------------------------------------------------------
# Each takes (xp, model, a, b, c) and, as keywords: the exponents E_fin of a and b (int64, NO_EXPONENT for
# zeros; computed here unless a caller that reuses them across blocks passes them) and the two flags of
# :func:`flags`, fixed for a whole call: ``products`` (some a or b may be non-finite) and ``overflow``
# (some product may overflow the C format).
def truncated_fused(xp: Any, model: Model, a: Any, b: Any, c: Any, *, ea: Any = None, eb: Any = None,
                    products: bool = True, overflow: bool = False) -> Any:
    """One truncated-fused block: products and C cut at 2**(e_max - F), summed exactly, rounded once."""
    ez = model.e_zero
    assert ez is not None
    mask, special = rules.fused_specials(xp, a, b, c, products=products)
    if products:
        a, b = finite(xp, a), finite(xp, b)
    c = finite(xp, c)
    p = a * b  # exact
    if model.product_exponent == "normalized":
        ep = xp.where(p == 0, ez, _exponent(xp, p))
    else:
        ea, eb = _exponents(xp, model, a, b, ea, eb)
        ep = xp.where((ea == _NONE) | (eb == _NONE), ez, ea + eb)
    value, zero = aligned_sum(xp, model, p, ep, c)
    value = rules.exact_zero(xp, model, a, b, c, zero, value)
    return xp.where(mask, special, value)


def aligned_sum(xp: Any, model: Model, p: Any, ep: Any, c: Any) -> tuple[Any, Any]:
    """The truncated-fused sum of exact terms ``p`` (..., T) at exponents ``ep`` (zeros at e_zero) and a
    finite C (...): e_max over the terms and C (C at E_fc, e_zero if zero), every term and C cut at
    2**(e_max - F) (``alignment``), summed exactly (modulo the carry bits), rounded once to the result
    format.  Returns (the rounded value, whether the sum is exactly zero: its sign is the caller's)."""
    F, ez = model.fraction_bits, model.e_zero
    assert F is not None and ez is not None
    fc = model.c_format
    ec = xp.where(c == 0, ez, xp.clip(_exponent(xp, c), fc.emin, None))
    emax = xp.maximum(xp.amax(ep, axis=-1), ec)
    scale = _pow2(xp, F - emax)
    cut = xp.floor if model.alignment is Alignment.FLOOR else xp.trunc
    s = xp.sum(cut(p * scale[..., None]), axis=-1) + cut(c * scale)
    if model.carry_bits is not None:
        s = xp.fmod(s, float(2 ** (F + 1 + model.carry_bits)))  # keeps the sign, as the wrap does
    value = round_to(xp, model.result_format, s * _pow2(xp, emax - F), model.output_rounding,
                     subnormals=model.subnormals, overflow=model.overflow)
    return value, s == 0


def late_c(xp: Any, model: Model, a: Any, b: Any, c: Any, *, ea: Any = None, eb: Any = None,
           products: bool = True, overflow: bool = False) -> Any:
    """One late-c block: products cut at 2**(top - F) per group, groups merged, C added at F2 bits."""
    F, F2, groups = model.fraction_bits, model.late_fraction_bits, model.groups
    assert F is not None and F2 is not None
    fc = model.c_format
    af, bf = (finite(xp, a), finite(xp, b)) if products else (a, b)
    p = af * bf  # exact
    mask, special = rules.fused_specials(xp, a, b, c, products=products,
                                         overflow=(xp.abs(p) >= 2.0 ** (fc.emax + 1)) if overflow else None)
    a, b, c = af, bf, finite(xp, c)
    ea, eb = _exponents(xp, model, a, b, ea, eb)
    ep = xp.where(p == 0, _NONE, ea + eb)
    sums, units, tops = [], [], []
    for g in range(groups):
        pg, eg = p[..., g::groups], ep[..., g::groups]
        top = xp.amax(eg, axis=-1)
        sums.append(xp.sum(xp.trunc(pg * _pow2(xp, xp.clip(F - top, None, 1023))[..., None]), axis=-1))
        units.append(top - F)
        tops.append(top)
    e_dot = tops[0]
    for t in tops[1:]:
        e_dot = xp.maximum(e_dot, t)
    s = sums[0]
    if groups > 1:  # each group's sum cut at the dot's unit e_dot - F
        s = sum(xp.floor(sg * _pow2(xp, xp.clip(ug - (e_dot - F), -1022, None))) for sg, ug in zip(sums, units))
    ec = xp.clip(_exponent(xp, c), fc.emin, None)  # E_fc(c); emin for a zero
    big_e = xp.maximum(e_dot, ec)
    cc = xp.where(ec < big_e - F - 1, 0.0, c) if groups > 1 else c
    # the products' sum, at unit e_dot - F, moved to unit big_e - G (only ever to a finer unit or the
    # same one when e_dot is the larger exponent: cut toward minus infinity); C cut at big_e - F
    G = late_sum_bits(model)
    s = xp.floor(s * _pow2(xp, xp.clip(e_dot - big_e + G - F, -1022, None)))
    cterm = xp.floor(cc * _pow2(xp, F - big_e)) * float(2 ** (G - F))
    total = s + cterm
    if model.late_cut == "leading":  # the sum floored at F2 bits below its leading bit (exponent >= emin)
        lead = _exponent(xp, xp.abs(total)) + big_e - G  # a zero total gives a lead far below emin
        sh = xp.clip(xp.clip(lead, fc.emin, None) - F2 - (big_e - G), 0, None)
        total = xp.floor(total * _pow2(xp, -sh)) * _pow2(xp, sh)
    value = round_to(xp, model.result_format, total * _pow2(xp, big_e - G), model.output_rounding,
                     subnormals=model.subnormals, overflow=model.overflow)
    value = rules.exact_zero(xp, model, a, b, xp.where(cc == 0, xp.copysign(xp.zeros_like(c), c), cc),
                             total == 0, value)
    return xp.where(mask, special, value)


def _limb_span(model: Model, L: int) -> tuple[int, int]:
    """(lo, n): exponent of the accumulator's lowest bit and its number of limbs, for sums of L products
    and C.  Two zero limbs lie below every term's last bit and two limbs above its largest sum (carries,
    sign), so the leading three limbs always exist and the top limb's sign is the sum's."""
    fa, fb, fc = model.input_format, model.b_format, model.c_format
    lsb = min(fa.emin - fa.precision + 1 + fb.emin - fb.precision + 1, fc.emin - fc.precision + 1)
    top = max(fa.emax + 1 + fb.emax + 1, fc.emax + 1) + (L + 1).bit_length()
    lo = lsb - 2 * LIMB
    return lo, -(-(top - lo) // LIMB) + 2


def exact_fused(xp: Any, model: Model, a: Any, b: Any, c: Any, *, ea: Any = None, eb: Any = None,
                products: bool = True, overflow: bool = False) -> Any:
    """One exact-fused block: the L products and C summed exactly, rounded once.

    Every product and C is an exact float64 with a known last place (the input format's quantum at the
    factors' exponents, C's at its own).  Where a block's terms span at most 53 bits with room for the
    carries, their float64 sum is exact in any order; the other blocks go through :func:`_limb_sum`."""
    mask, special = rules.fused_specials(xp, a, b, c, products=products)
    if products:
        a, b = finite(xp, a), finite(xp, b)
    c = finite(xp, c)
    fa, fb, fc = model.input_format, model.b_format, model.c_format
    ea, eb = _exponents(xp, model, a, b, ea, eb)
    p = a * b  # exact
    terms = xp.concatenate([p, xp.broadcast_to(c[..., None], p.shape[:-1] + (1,))], axis=-1)
    big = 1 << 30
    lsb_p = xp.where(p == 0, big, ea + eb - (fa.precision - 1) - (fb.precision - 1))  # p: a multiple of 2**lsb_p
    lsb_c = xp.where(c == 0, big, xp.clip(_exponent(xp, c), fc.emin, None) - (fc.precision - 1))
    lo = xp.minimum(xp.amin(lsb_p, axis=-1), lsb_c)
    hi = xp.amax(xp.where(terms == 0, -big, _exponent(xp, terms) + 1), axis=-1)  # |term| < 2**hi
    narrow = hi - lo <= 53 - (p.shape[-1] + 1).bit_length()
    total = xp.sum(xp.where(narrow[..., None], terms, 0.0), axis=-1)  # exact where narrow
    zero = total == 0
    wide = ~narrow
    if bool(xp.any(wide)):
        if not _is_torch(xp):  # numpy reductions of one row give scalars: make writable arrays
            total, zero = np.array(total), np.array(zero)
        total[wide], zero[wide] = _limb_sum(xp, model, terms[wide])
    value = round_to(xp, model.result_format, total, model.output_rounding, subnormals=model.subnormals,
                     overflow=model.overflow)
    value = rules.exact_zero(xp, model, a, b, c, zero, value)
    return xp.where(mask, special, value)


def _limb_sum(xp: Any, model: Model, terms: Any) -> tuple[Any, Any]:
    """(the sum over the last axis of ``terms`` rounded to odd at 53 bits, whether it is zero): the exact
    sum of terms of any span, in 32-bit limbs of int64.

    Each term (an exact float64) is cut into three 32-bit pieces at its limb and added in (integer adds:
    exact in any order).  After carrying, the leading limbs give the sum rounded to odd at 53 bits, which
    then rounds to any format of at most 51 bits exactly as the sum would."""
    lo, nl = _limb_span(model, terms.shape[-1] - 1)
    lsb = xp.clip(_exponent(xp, terms) - 52, lo + 2 * LIMB, None)  # every term is a multiple of 2**lsb
    j = (lsb - lo) // LIMB
    x = xp.abs(terms) * _pow2(xp, -(lo + LIMB * j))  # an integer below 2**85 with at most 53 bits: exact
    two32 = float(2**LIMB)
    q1 = xp.floor(x / two32)  # exact: division by a power of two
    q2 = xp.floor(q1 / two32)
    sign = xp.where(xp.signbit(terms), -1, 1)
    pieces = (x - q1 * two32, q1 - q2 * two32, q2)
    acc = _limb_sums(xp, nl, [j + k for k in range(3)], [_as(xp, piece, xp.int64) * sign for piece in pieces])

    def carry(acc: Any) -> Any:
        for i in range(nl - 1):
            up = acc[..., i] >> LIMB  # floor
            acc[..., i] -= up << LIMB
            acc[..., i + 1] += up
        return acc

    acc = carry(acc)
    neg = acc[..., -1] < 0
    acc = carry(xp.where(neg[..., None], -acc, acc))
    nz = acc != 0
    zero = ~xp.any(nz, axis=-1)
    t = xp.clip(nl - 1 - xp.argmax(_as(xp, xp.flip(nz, (-1,)), xp.int8), axis=-1), 2, None)
    top, mid, low = _take(xp, acc, t), _take(xp, acc, t - 1), _take(xp, acc, t - 2)
    below = _take(xp, xp.cumsum(_as(xp, nz, xp.int64), axis=-1), xp.clip(t - 3, 0, None))
    w = (top << (LIMB - 1)) | (mid >> 1)  # the leading 63 bits or fewer, lsb at 2**(lo + 32t - 31)
    sh = xp.clip(_exponent(xp, _as(xp, top, xp.float64)) + 1 - 22, 0, None)  # bits of w beyond 53
    kept = w >> sh
    sticky = ((w & ((1 << sh) - 1)) != 0) | ((mid & 1) != 0) | (low != 0) | ((t >= 3) & (below > 0))
    kept = kept | _as(xp, sticky, xp.int64)  # round to odd
    value = _as(xp, kept, xp.float64) * _pow2(xp, lo + LIMB * t - (LIMB - 1) + sh)
    return xp.where(neg, -value, value), zero
