"""Block kernels: one block of every algorithm family, array-at-a-time.

Each kernel takes float64 arrays ``a`` and ``b`` of shape ``(..., L)`` and ``c`` of shape ``(...)`` (all
broadcastable; values already in the model's formats and already flushed where the model flushes) and
returns the block's result, float64 of the broadcast shape ``(...)``, a value of the model's C format.
NaN results are plain float64 NaN here; the caller writes the model's NaN bit pattern at the end.
See docs/semantics.md for what each family computes.
"""

from __future__ import annotations

import numpy as np

from ..formats import Format, RoundingMode, bit_length, round_integer
from ..model import Alignment, Family, Model
from . import rules, wide

_NONE = rules.NO_EXPONENT


def split_format(fmt: Format, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Finite values of ``fmt`` as ``(m, E)``: ``x == m * 2**(E - p + 1)``, ``E = E_fmt(x)`` (emin for
    subnormals), ``m`` a signed integer with ``|m| < 2**p``.  Zeros give ``m = 0`` (and E = emin)."""
    _, e = np.frexp(x)
    big_e = np.where(x == 0, fmt.emin, np.maximum(e.astype(np.int64) - 1, fmt.emin))
    m = np.ldexp(x, (fmt.precision - 1 - big_e).astype(np.int32)).astype(np.int64)
    return m, big_e


def shift(m: np.ndarray, sh: np.ndarray, alignment: Alignment = Alignment.TRUNCATE) -> np.ndarray:
    """``m * 2**sh`` cut to an integer: exact for ``sh >= 0``; else toward zero (truncate) or toward minus
    infinity (floor)."""
    left = m << np.minimum(np.maximum(sh, 0), 62)
    r = np.minimum(np.maximum(-sh, 0), 63)
    if alignment is Alignment.FLOOR:
        right = m >> r
    else:
        right = np.where(m < 0, -((-m) >> r), m >> r)
    return np.where(sh >= 0, left, right)


def flush(fmt: Format, x: np.ndarray) -> np.ndarray:
    """Subnormal values of ``fmt`` replaced by zeros of their sign."""
    return np.where(np.abs(x) < fmt.smallest_normal, np.copysign(0.0, x), x)


# --- special values and zero signs of the fused families (the shared rules) -------------------------------
def fused_specials(a: np.ndarray, b: np.ndarray, c: np.ndarray, overflow: np.ndarray | None = None
                   ) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`rules.fused_specials`, or None when every input is finite and no product overflows."""
    if overflow is None and np.all(np.isfinite(a)) and np.all(np.isfinite(b)) and np.all(np.isfinite(c)):
        return None
    with np.errstate(invalid="ignore"):
        return rules.fused_specials(np, a, b, c, overflow=overflow)


def _finite(x: np.ndarray) -> np.ndarray:
    return np.where(np.isfinite(x), x, 0.0)


def _exact_zero(model: Model, a: np.ndarray, b: np.ndarray, c: np.ndarray, zero: np.ndarray,
                value: np.ndarray) -> np.ndarray:
    if not np.any(zero):
        return value
    return rules.exact_zero(np, model, a, b, c, zero, value)


# --- families ------------------------------------------------------------------------------------------
def truncated_fused(model: Model, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    fin, fc = model.input_format, model.c_format
    F, ez = model.fraction_bits, model.e_zero
    assert F is not None and ez is not None
    specials = fused_specials(a, b, c)
    af, bf, cf = (_finite(a), _finite(b), _finite(c)) if specials else (a, b, c)
    ma, ea = split_format(fin, af)
    mb, eb = split_format(fin, bf)
    mp = ma * mb
    lsb = ea + eb - 2 * (fin.precision - 1)  # products are mp * 2**lsb exactly
    if model.product_exponent == "normalized":  # the product's own exponent floor(log2 |p|)
        ep = np.where(mp == 0, ez, bit_length(np.abs(mp)) - 1 + lsb)
    else:  # the sum of the factors' exponents: significand in [1, 4)
        ep = np.where(mp == 0, ez, ea + eb)
    mc, ec = split_format(fc, cf)
    ec = np.where(mc == 0, ez, ec)
    emax = np.maximum(ep.max(axis=-1), ec)
    u = emax - F  # exponent of the alignment quantum
    terms = shift(mp, lsb - u[..., None], model.alignment)
    s = terms.sum(axis=-1) + shift(mc, ec - (fc.precision - 1) - u, model.alignment)
    if model.carry_bits is not None:
        s = np.sign(s) * (np.abs(s) & ((np.int64(1) << (F + 1 + model.carry_bits)) - 1))
    value = round_integer(model.result_format, s < 0, np.abs(s), u, model.output_rounding,
                          subnormals=model.subnormals, overflow=model.overflow)
    value = _exact_zero(model, af, bf, cf, s == 0, value)
    if specials:
        value = np.where(specials[0], specials[1], value)
    return value


def exact_fused(model: Model, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    specials = fused_specials(a, b, c)
    af, bf, cf = (_finite(a), _finite(b), _finite(c)) if specials else (a, b, c)
    shape = np.broadcast_shapes(af.shape, bf.shape)[:-1] + (1,)
    ma, ea = wide.split(af)
    mb, eb = wide.split(bf)
    mc, ec = wide.split(cf)
    parts = wide.product_terms(ma, ea, mb, eb)  # each (..., L)
    ms = [np.broadcast_to(m, shape[:-1] + m.shape[-1:]) for m, _ in parts] + [np.broadcast_to(mc[..., None], shape)]
    es = [np.broadcast_to(e, shape[:-1] + e.shape[-1:]) for _, e in parts] + [np.broadcast_to(ec[..., None], shape)]
    value, zero = wide.round_sum(model.result_format, np.concatenate(ms, axis=-1), np.concatenate(es, axis=-1),
                                 model.output_rounding, subnormals=model.subnormals, overflow=model.overflow)
    value = _exact_zero(model, af, bf, cf, zero, value)
    if specials:
        value = np.where(specials[0], specials[1], value)
    return value


def _op(model: Model, fmt: Format, mode: RoundingMode, addends: list[np.ndarray],
        a: np.ndarray | None = None, b: np.ndarray | None = None, *, ieee_zero: bool = False) -> np.ndarray:
    """One IEEE operation of a step family: ``R(a*b + sum(addends))`` with the model's flushing, overflow
    and (unless ``ieee_zero``) exact-zero sign."""
    fin = model.input_format
    exact_product = rules.products_exact_in_float64(fin)
    return wide.ieee_op(fmt, mode, model.subnormals, model.overflow if not ieee_zero else "ieee", addends, a, b,
                        exact_product=exact_product,
                        positive_zero=model.exact_zero == "positive" and not ieee_zero)


def pairwise(model: Model, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    fc, rne = model.c_format, RoundingMode.TiesToEven
    level = [_op(model, fc, rne, [], a[..., i], b[..., i], ieee_zero=True) for i in range(a.shape[-1])]
    while len(level) > 1:
        level = [_op(model, fc, rne, [level[i], level[i + 1]], ieee_zero=True) for i in range(0, len(level), 2)]
    return _op(model, model.result_format, model.output_rounding, [c, level[0]])


def fma_chain(model: Model, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    d = c
    for i in range(a.shape[-1]):
        d = _op(model, model.result_format, model.output_rounding, [d], a[..., i], b[..., i])
    return d


def amx(model: Model, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    fc, mode = model.result_format, model.output_rounding
    shape = np.broadcast_shapes(a.shape[:-1], b.shape[:-1], c.shape)
    even = np.zeros(shape)
    odd = np.zeros(shape)
    for j in range(0, a.shape[-1], 2):
        even = _op(model, fc, mode, [even], a[..., j], b[..., j])
        odd = _op(model, fc, mode, [odd], a[..., j + 1], b[..., j + 1])
    return _op(model, fc, mode, [c, _op(model, fc, mode, [even, odd])])


def bfdot(model: Model, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    fc, mode = model.result_format, model.output_rounding
    p0 = _op(model, fc, mode, [], a[..., 0], b[..., 0])
    p1 = _op(model, fc, mode, [], a[..., 1], b[..., 1])
    return _op(model, fc, mode, [c, _op(model, fc, mode, [p0, p1])])


def late_c(model: Model, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    fin, fc = model.input_format, model.c_format
    F, F2, groups = model.fraction_bits, model.late_fraction_bits, model.groups
    assert F is not None and F2 is not None
    low = 2 * (fin.precision - 1)
    with np.errstate(invalid="ignore"):
        af, bf, cf = _finite(a), _finite(b), _finite(c)
    ma, ea = split_format(fin, af)
    mb, eb = split_format(fin, bf)
    mp = ma * mb
    ep = ea + eb
    # a product reaching 2**(emax+1) of the C format is infinite
    overflow = (mp != 0) & (bit_length(np.abs(mp)) - 1 + ep - low >= fc.emax + 1)
    specials = fused_specials(a, b, c, overflow if np.any(overflow) else None)
    sums, units, tops = [], [], []
    for g in range(groups):
        mg, eg = mp[..., g::groups], ep[..., g::groups]
        top = np.where(mg != 0, eg, _NONE).max(axis=-1)
        u = top - F
        sums.append(shift(mg, eg - low - u[..., None]).sum(axis=-1))
        units.append(u)
        tops.append(top)
    e_dot = np.maximum.reduce(tops) if groups > 1 else tops[0]
    if groups == 1:
        s, u_s = sums[0], units[0]
    else:
        u_s = e_dot - F
        s = sum(shift(sg, ug - u_s, Alignment.FLOOR) for sg, ug in zip(sums, units))
    mc, ec = split_format(fc, cf)
    big_e = np.maximum(e_dot, ec)
    if groups > 1:
        mc = np.where(ec < big_e - F - 1, 0, mc)
    unit = big_e - F2
    s = shift(s, u_s - unit, Alignment.FLOOR)
    cterm = shift(mc, ec - (fc.precision - 1) - (big_e - F), Alignment.FLOOR) << (F2 - F)
    total = s + cterm
    value = round_integer(model.result_format, total < 0, np.abs(total), unit, model.output_rounding,
                          subnormals=model.subnormals, overflow=model.overflow)
    value = _exact_zero(model, af, bf, np.where(mc == 0, np.copysign(0.0, cf), cf), total == 0, value)
    if specials:
        value = np.where(specials[0], specials[1], value)
    return value


KERNELS = {
    Family.TRUNCATED_FUSED: truncated_fused,
    Family.EXACT_FUSED: exact_fused,
    Family.PAIRWISE: pairwise,
    Family.LATE_C: late_c,
    Family.FMA_CHAIN: fma_chain,
    Family.AMX: amx,
    Family.BFDOT: bfdot,
}
