"""Exact scalar reference of every algorithm family, written to read like ``docs/semantics.md``.

This module is the oracle the fast engine is tested against, so it is deliberately simple and slow: every
exact value is a Python ``int`` or ``fractions.Fraction``, every value of a floating-point format (the
inputs, each rounded intermediate result, the output) is a Python ``float``, which holds every value of
every format here exactly, together with the sign of zero, infinities and NaN.  It has its own rounding,
:func:`round_exact`, independent of ``formats.round`` (which it is also the oracle for).

Section names in the docstrings refer to ``docs/semantics.md``.

    round_exact(fmt, x, mode)   one exact rational -> a value of fmt ("Notation", R)
    dot(model, a, b, c)         d = a.b + c as the model computes it ("Blocks and chaining")
    dot_bits(model, a, b, c)    the same, as the bit pattern of the output format, NaN per ``model.nan``
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any, Literal

from .formats import Format, RoundingMode
from .model import Alignment, Model, NaNStyle
from .plan import Index, Plan, pad, plan, run, take

__all__ = ["round_exact", "dot", "dot_bits", "exponent", "to_fraction", "cut", "encode", "largest_finite",
           "binary64_bits", "from_binary64_bits", "truncated_fused_block", "exact_fused_block", "pairwise_block",
           "late_c_block", "scaled_fused_block", "fma_chain_block", "amx_block", "bfdot_block", "special_result",
           "product", "term", "round_result", "Term", "product_scales"]

NAN = math.nan
INF = math.inf

Number = float | int | Fraction
Term = tuple[Fraction, bool]  # an exact term of a sum: its value and its sign (the sign matters for zeros)


# --- exact helpers ---------------------------------------------------------------------------------------
def pow2(e: int) -> Fraction:
    """2**e exactly, for any integer e."""
    return Fraction(2) ** e


def to_fraction(x: Number) -> Fraction:
    """The exact value of a finite float, int or Fraction (-0.0 gives 0: keep signs with :func:`is_negative`)."""
    if isinstance(x, float) and not math.isfinite(x):
        raise ValueError(f"to_fraction: {x!r} is not finite")
    return Fraction(x)


def is_negative(x: Number) -> bool:
    """The sign bit of x (True for -0.0)."""
    if isinstance(x, float):
        return math.copysign(1.0, x) < 0
    return x < 0


def floor_log2(x: Fraction) -> int:
    """floor(log2 x) for an exact x > 0."""
    e = x.numerator.bit_length() - x.denominator.bit_length()  # floor(log2 x) is e or e - 1
    return e if x >= pow2(e) else e - 1


def exponent(fmt: Format, x: Number) -> int:
    """E_f(x) = max(floor(log2 |x|), f.emin) for a finite nonzero x ("Notation"): subnormals take emin."""
    v = abs(to_fraction(x))
    if v == 0:
        raise ValueError("exponent: x must be nonzero")
    return max(floor_log2(v), fmt.emin)


def cut(t: Fraction, q: Fraction, alignment: Alignment | str) -> Fraction:
    """Cut t to a multiple of the quantum q: toward zero ("truncate") or toward minus infinity ("floor")."""
    if Alignment(alignment) is Alignment.TRUNCATE:
        magnitude = math.floor(abs(t) / q) * q
        return -magnitude if t < 0 else magnitude
    return math.floor(t / q) * q


def largest_finite(fmt: Format) -> Fraction:
    """The largest finite value of fmt, exactly (``Format.max`` states the rule: fn formats such as e4m3fn lose
    the all-ones significand of the top binade to NaN, so their largest value is one ulp lower, 448)."""
    return Fraction(fmt.max)


def _signed(value: Fraction | float, negative: bool) -> float:
    v = float(value)
    return -v if negative else v


# --- rounding ----------------------------------------------------------------------------------------------
def round_significand(scaled: Fraction, mode: RoundingMode, negative: bool) -> int:
    """The significand ``scaled`` (in units of its last kept bit, magnitude of a value of sign ``negative``)
    rounded to an integer in mode: the dropped fraction in [0, 1) decides."""
    kept = math.floor(scaled)
    dropped = scaled - kept
    half = Fraction(1, 2)
    if mode is RoundingMode.TiesToEven:
        return kept + (dropped > half or (dropped == half and kept % 2 == 1))
    if mode is RoundingMode.TiesAway:
        return kept + (dropped >= half)
    if mode is RoundingMode.TowardZero:
        return kept
    if mode is RoundingMode.TowardPositive:
        return kept + (dropped > 0 and not negative)
    if mode is RoundingMode.TowardNegative:
        return kept + (dropped > 0 and negative)
    if mode is RoundingMode.ToOdd:
        return kept | 1 if dropped > 0 else kept
    raise ValueError(f"unknown rounding mode {mode!r}")  # pragma: no cover - the enum is closed


def overflows_to_infinity(mode: RoundingMode, negative: bool, overflow: str) -> bool:
    """Whether a result above the largest finite value becomes infinity (else the largest finite value):
    ``"ieee"`` as IEEE 754 sec. 7.4, ``"inf"`` always, ``"saturate"`` never."""
    if overflow == "saturate":
        return False
    if overflow == "inf":
        return True
    if overflow == "ieee":
        return {
            RoundingMode.TiesToEven: True,
            RoundingMode.TiesAway: True,
            RoundingMode.TowardZero: False,
            RoundingMode.ToOdd: False,
            RoundingMode.TowardPositive: not negative,
            RoundingMode.TowardNegative: negative,
        }[mode]
    raise ValueError(f"overflow must be 'ieee', 'inf' or 'saturate', not {overflow!r}")


def round_exact(
    fmt: Format,
    x: Fraction | int,
    mode: RoundingMode,
    *,
    negative: bool = False,
    subnormals: bool | None = None,
    overflow: Literal["ieee", "inf", "saturate"] = "ieee",
) -> float:
    """Round the exact rational x to fmt in mode; return the value as a float ("Notation", R).

    ``negative`` is the sign of x when x == 0.  The significand is rounded with an unbounded exponent range (keeping
    subnormals: the quantum never goes below 2**(emin - p + 1)); with ``subnormals=False`` (default: ``fmt.subnormals``)
    a value whose exact magnitude is below 2**emin becomes a zero of its sign first (tininess before rounding).  A
    result above the largest finite value overflows: ``"ieee"`` as IEEE 754 sec. 7.4 (TiesToEven, TiesAway: infinity;
    TowardZero, ToOdd: the largest finite value; TowardPositive/TowardNegative: infinity on their side only), ``"inf"``
    always infinity, ``"saturate"`` always the largest finite value.  A format without infinities gives NaN where
    infinity is due (the largest finite value where it has no NaN either); a format without negative zero gives +0.
    Formats without a sign or a zero (the scale formats e8m0fnu, ue4m3) are not output formats: refused.
    """
    if not fmt.signed or not fmt.has_zero:
        raise ValueError(f"round_exact: {fmt.name} has no sign or no zero; the reference rounds to signed formats "
                         "with a zero (blockfma.formats.round handles the scale formats)")
    mode = RoundingMode.parse(mode)
    x = Fraction(x)
    sign = x < 0 or (x == 0 and negative)
    keep_subnormals = fmt.subnormals if subnormals is None else subnormals
    p = fmt.precision

    def zero() -> float:
        return -0.0 if sign and fmt.has_negative_zero else 0.0

    magnitude = abs(x)
    if magnitude == 0:
        return zero()
    if not keep_subnormals and magnitude < pow2(fmt.emin):
        return zero()

    lead = floor_log2(magnitude)
    quantum_exp = (max(lead, fmt.emin) if keep_subnormals else lead) - (p - 1)
    scaled = magnitude / pow2(quantum_exp)  # the significand in units of the last kept bit
    kept = round_significand(scaled, mode, sign)
    result = kept * pow2(quantum_exp)

    if result == 0:  # a nonzero value that rounds to zero keeps its sign
        return zero()
    big = largest_finite(fmt)
    if result > big:
        to_infinity = overflows_to_infinity(mode, sign, overflow)
        if not to_infinity:
            return _signed(big, sign)
        if fmt.has_infinities:
            return _signed(INF, sign)
        return NAN if fmt.has_nan else _signed(big, sign)
    return _signed(result, sign)


# --- bit patterns ------------------------------------------------------------------------------------------
def binary64_bits(x: float) -> int:
    """The binary64 code of a Python float, NaN payloads and signalling NaNs included."""
    return int(struct.unpack("<Q", struct.pack("<d", x))[0])


def from_binary64_bits(code: int) -> float:
    """The Python float of a binary64 code (a NaN keeps its payload)."""
    return float(struct.unpack("<d", struct.pack("<Q", code))[0])


def quiet(x: float) -> float:
    """A NaN with its quiet bit (binary64 fraction bit 51) set, sign and payload kept."""
    return from_binary64_bits(binary64_bits(x) | (1 << 51))


INVALID = from_binary64_bits(0xFFF8000000000000)  # the NaN of an invalid operation under nan="propagate"


def encode(fmt: Format, x: float, nan: NaNStyle = NaNStyle.DEFAULT) -> int:
    """Bit pattern of a value of fmt (IEEE-style layout: sign, exponent field, fraction field).

    A NaN is written in the style ``nan`` ("Notation"): canonical (positive, all fraction bits set),
    default (positive, top fraction bit set), indefinite (negative, top fraction bit set) or propagate
    (x's own sign and binary64 payload, left-aligned into fmt's fraction, cut to its width, quiet bit
    set).  Only formats with infinities (the output formats) take NaN styles; others get their own NaN code.
    """
    t = fmt.fraction_bits
    sign_bit = 1 << (fmt.bits - 1)
    all_ones_exp = ((1 << fmt.exponent_bits) - 1) << t
    if math.isnan(x):
        if fmt.nan == "fnuz":
            return sign_bit
        if fmt.nan == "fn":
            return all_ones_exp | ((1 << t) - 1)
        quiet_bit = 1 << (t - 1) if t > 0 else 1
        if NaNStyle(nan) is NaNStyle.PROPAGATE:
            code = binary64_bits(x)
            payload = (code & ((1 << 52) - 1)) >> (52 - t)
            return (sign_bit if code >> 63 else 0) | all_ones_exp | payload | quiet_bit
        return {
            NaNStyle.CANONICAL: all_ones_exp | ((1 << t) - 1),
            NaNStyle.DEFAULT: all_ones_exp | quiet_bit,
            NaNStyle.INDEFINITE: sign_bit | all_ones_exp | quiet_bit,
        }[NaNStyle(nan)]
    sign = sign_bit if is_negative(x) and (x != 0 or fmt.has_negative_zero) else 0
    if math.isinf(x):
        if not fmt.has_infinities:
            raise ValueError(f"encode: {fmt.name} has no infinities")
        return sign | all_ones_exp
    v = abs(to_fraction(x))
    if v == 0:
        return sign
    if v < pow2(fmt.emin):  # subnormal: exponent field 0, value = fraction * 2**(emin - t)
        exp_field, frac = 0, v / pow2(fmt.emin - t)
    else:
        e = floor_log2(v)
        exp_field, frac = e + fmt.bias, v / pow2(e - t) - 2**t
    if frac.denominator != 1 or not 0 <= exp_field < (1 << fmt.exponent_bits) or v > largest_finite(fmt):
        raise ValueError(f"encode: {x!r} is not a value of {fmt.name}")
    return sign | (exp_field << t) | int(frac)


# --- reading inputs ----------------------------------------------------------------------------------------
def _value_of(fmt: Format, x: Number, what: str) -> float:
    """x as a float, checked to be a value of fmt (NaN and infinities pass)."""
    v = float(x)
    if isinstance(x, (int, Fraction)) and Fraction(v) != x:
        raise ValueError(f"{what} = {x!r} is not a value of {fmt.name}")
    if math.isfinite(v) and round_exact(fmt, Fraction(v), RoundingMode.TowardZero, subnormals=True,
                                        overflow="saturate") != v:
        raise ValueError(f"{what} = {x!r} is not a value of {fmt.name}")
    return v


def _flush_input(model: Model, fmt: Format, x: float) -> float:
    """With subnormals=False a subnormal input becomes a zero of its own sign, or +0 with
    flush_zero="positive" ("Special values")."""
    if not model.subnormals and math.isfinite(x) and x != 0 and abs(Fraction(x)) < pow2(fmt.emin):
        return 0.0 if model.flush_zero == "positive" else math.copysign(0.0, x)
    return x


# --- special values and signs of zero ----------------------------------------------------------------------
def special_result(pairs: Sequence[tuple[float, float]], addends: Sequence[float],
                   more_infinities: Sequence[bool] = ()) -> float | None:
    """The rules of "Special values": NaN if any input is NaN or a product is inf * 0; else the infinity
    of the infinite terms (NaN if both signs occur); None when every term is finite.  ``more_infinities``
    are the signs (True: negative) of further infinite terms (late-c's overflowing products)."""
    values = [x for pair in pairs for x in pair] + list(addends)
    if any(math.isnan(x) for x in values):
        return NAN
    infinite_signs = set(more_infinities)
    for a, b in pairs:
        if math.isinf(a) or math.isinf(b):
            if a == 0 or b == 0:
                return NAN  # inf * 0
            infinite_signs.add(is_negative(a) != is_negative(b))
    infinite_signs |= {is_negative(x) for x in addends if math.isinf(x)}
    if len(infinite_signs) == 2:
        return NAN  # +inf and -inf
    if infinite_signs:
        return -INF if infinite_signs.pop() else INF
    return None


def product(a: float, b: float) -> Term:
    """The exact product of two finite values; the sign of a zero product is the xor of the factors'."""
    return to_fraction(a) * to_fraction(b), is_negative(a) != is_negative(b)


def term(x: float) -> Term:
    """A finite addend (C, a partial sum) as a term of an exact sum: its value and its sign."""
    return to_fraction(x), is_negative(x)


def _zero_is_negative(terms: Sequence[Term], mode: RoundingMode, exact_zero: str) -> bool:
    """Sign of an exactly zero sum of ``terms`` ("Sign of an exact zero").

    With ``exact_zero="positive"`` +0; with ``"ieee"``, if every term is zero, -0 when all are -0
    (TowardNegative: when any is), else +0; nonzero terms that cancel give +0 (TowardNegative: -0).
    A lone product (one term) thus keeps its sign in "ieee".
    """
    if exact_zero == "positive":
        return False
    if all(value == 0 for value, _ in terms):
        signs = [negative for _, negative in terms]
        return any(signs) if mode is RoundingMode.TowardNegative else all(signs)
    return mode is RoundingMode.TowardNegative


def round_result(model: Model, x: Fraction, terms: Sequence[Term]) -> float:
    """R(x): round the exact value x, the sum of ``terms``, to the result format ("Notation"); with
    ``rounded_zero="positive"`` a nonzero x that rounds to zero gives +0 ("Sign of an exact zero")."""
    value = round_exact(model.result_format, x, model.output_rounding,
                        negative=_zero_is_negative(terms, model.output_rounding, model.exact_zero),
                        subnormals=model.subnormals, overflow=model.overflow)
    if value == 0 and model.rounded_zero == "positive":
        return 0.0
    return value


def _P(model: Model, x: Fraction, terms: Sequence[Term]) -> float:
    """P(x) of the pairwise family: an IEEE operation rounding to fc, TiesToEven, flushing when
    subnormals=False; its exact zeros follow IEEE 754 sec. 6.3."""
    mode = RoundingMode.TiesToEven
    return round_exact(model.c_format, x, mode, negative=_zero_is_negative(terms, mode, "ieee"),
                       subnormals=model.subnormals, overflow="ieee")


Rounder = Callable[[Model, Fraction, Sequence[Term]], float]


def _ieee_operation(model: Model, rounder: Rounder, pairs: Sequence[tuple[float, float]],
                    addends: Sequence[float]) -> float:
    """One operation sum(a*b for pairs) + sum(addends) with one rounding: a multiplication (one pair), an
    addition (two addends), an FMA (one pair, one addend), or a whole exact-fused block.  Special
    values first, then the exact sum, rounded by ``rounder``."""
    special = special_result(pairs, addends)
    if special is not None:
        return special
    terms = [product(a, b) for a, b in pairs] + [term(x) for x in addends]
    return rounder(model, sum((value for value, _ in terms), Fraction(0)), terms)


# --- the families, one block each --------------------------------------------------------------------------
def truncated_fused_block(model: Model, a: Sequence[float], b: Sequence[float], c: float) -> float:
    """truncated-fused (NVIDIA tensor cores), steps 1-6 of its section."""
    special = special_result(list(zip(a, b)), [c])
    if special is not None:
        return special
    fa, fb, fc, F = model.input_format, model.b_format, model.c_format, model.fraction_bits
    assert F is not None and model.e_zero is not None
    # 1. exact products, exponent = sum of the factors' exponents (not renormalised), or with
    #    product_exponent="normalized" the product's own exponent floor(log2 |p|); zeros at e_zero
    products = [product(ai, bi) for ai, bi in zip(a, b)]
    if model.product_exponent == "normalized":
        exps = [floor_log2(abs(p)) if p != 0 else model.e_zero for p, _ in products]
    else:
        exps = [exponent(fa, ai) + exponent(fb, bi) if p != 0 else model.e_zero
                for (p, _), ai, bi in zip(products, a, b)]
    # 2. C's exponent, in the format the block reads C in (the first block: c_input_format, where given)
    e_c = exponent(fc, c) if c != 0 else model.e_zero
    # 3. the block's maximum exponent and the alignment quantum
    e_max = max(*exps, e_c)
    q = pow2(e_max - F)
    # 4. every term cut to a multiple of q
    terms = products + [term(c)]
    # 5. exact sum of the cut terms; carries beyond carry_bits above the leading bit are lost
    S = sum((cut(t, q, model.alignment) for t, _ in terms), Fraction(0))
    if model.carry_bits is not None:
        wrapped = abs(S) % pow2(e_max + 1 + model.carry_bits)
        S = -wrapped if S < 0 else wrapped
    # 6. one rounding
    return round_result(model, S, terms)


def scaled_fused_block(model: Model, a: Sequence[float], b: Sequence[float], c: float,
                       sa: Sequence[float] | None = None, sb: Sequence[float] | None = None) -> float:
    """scaled-fused (block-scaled MMA): truncated-fused whose terms carry the scales of A and B.

    ``sa[i]``, ``sb[i]``: the scales of product i (values of the ``scale_format`` option; None: all 1).  As
    MMA-Sim 2.1.1 reads PTX's ``mma.block_scale`` / ``tcgen05.mma.block_scale`` (mmasim/arithmetic/fdpa.py):

    * ``scale_group`` None (``st_fdpa``, the k = 32 ``kind::mxf8f6f4``): term i is a_i b_i sa_i sb_i, its
      exponent the sum of the four factors' exponents (E_f, subnormals at emin); a zero term at e_zero;
    * ``scale_group`` G (``gst_fdpa``, the k = 64 ``kind::mxf4`` and ``mxf4nvf4``): every G consecutive
      products are summed exactly, the sum times its scales sa sb is a term whose exponent is the scales'
      exponents alone (not the sum's); at e_zero where all G products are zero or sa sb = 0 (a sum that
      cancels to zero keeps the scales' exponent);
    * C at its exponent (e_zero if zero); then as truncated-fused: e_max, every term cut at 2**(e_max - F),
      exact sum, one rounding.  A NaN scale makes the result NaN."""
    n = len(a)
    sa = [1.0] * n if sa is None else list(sa)
    sb = [1.0] * n if sb is None else list(sb)
    if any(math.isnan(x) for x in sa + sb):
        return NAN
    special = special_result(list(zip(a, b)), [c])
    if special is not None:
        return special
    fa, fb, fc, F = model.input_format, model.b_format, model.c_format, model.fraction_bits
    fs = model.scale_format
    assert F is not None and model.e_zero is not None
    G = model.option("scale_group")
    terms: list[Term] = []
    exps: list[int] = []
    if G is None:
        for ai, bi, x, y in zip(a, b, sa, sb):
            value, negative = product(ai, bi)
            value *= to_fraction(x) * to_fraction(y)
            terms.append((value, negative))
            exps.append(exponent(fa, ai) + exponent(fb, bi) + exponent(fs, x) + exponent(fs, y)
                        if value != 0 else model.e_zero)
    else:
        for g in range(0, n, G):
            products = [product(ai, bi) for ai, bi in zip(a[g:g + G], b[g:g + G])]
            scale = to_fraction(sa[g]) * to_fraction(sb[g])
            total = sum((p for p, _ in products), Fraction(0))
            terms.append((total * scale, all(neg for _, neg in products)))
            zero = scale == 0 or all(p == 0 for p, _ in products)
            exps.append(model.e_zero if zero else exponent(fs, sa[g]) + exponent(fs, sb[g]))
    e_c = exponent(fc, c) if c != 0 else model.e_zero
    e_max = max(*exps, e_c)
    q = pow2(e_max - F)
    terms.append(term(c))
    S = sum((cut(t, q, model.alignment) for t, _ in terms), Fraction(0))
    if model.carry_bits is not None:
        wrapped = abs(S) % pow2(e_max + 1 + model.carry_bits)
        S = -wrapped if S < 0 else wrapped
    return round_result(model, S, terms)


def _scale_of(fmt: Format, x: Number, what: str) -> float:
    """x as a float, checked to be a scale of fmt: e8m0fnu a power of two in [2**-127, 2**127], ue4m3 a
    non-negative e4m3fn value; NaN passes (it makes the result NaN)."""
    v = float(x)
    if math.isnan(v):
        return v
    if isinstance(x, (int, Fraction)) and Fraction(v) != x:
        raise ValueError(f"{what} = {x!r} is not a value of {fmt.name}")
    if is_negative(v) or math.isinf(v):
        raise ValueError(f"{what} = {x!r} is not a value of {fmt.name} (scales are unsigned and finite)")
    if fmt.name == "e8m0fnu":
        r = Fraction(v)
        if r == 0 or r.numerator & (r.numerator - 1) or r.denominator & (r.denominator - 1) \
                or not -127 <= floor_log2(r) <= 127:
            raise ValueError(f"{what} = {x!r} is not a value of {fmt.name} (a power of two, 2**-127 to 2**127)")
        return v
    from .formats import e4m3fn

    try:
        return _value_of(e4m3fn, v, what)  # ue4m3: the non-negative values of e4m3fn
    except ValueError:
        raise ValueError(f"{what} = {x!r} is not a value of {fmt.name}") from None


def exact_fused_block(model: Model, a: Sequence[float], b: Sequence[float], c: float) -> float:
    """exact-fused: S = p_1 + ... + p_L + c exactly, result R(S)."""
    return _ieee_operation(model, round_result, list(zip(a, b)), [c])


def pairwise_block(model: Model, a: Sequence[float], b: Sequence[float], c: float) -> float:
    """pairwise (AMD CDNA2): p_i = P(a_i * b_i), a balanced tree of P(x + y), then R(c + s)."""
    level = [_ieee_operation(model, _P, [(ai, bi)], []) for ai, bi in zip(a, b)]
    while len(level) > 1:
        level = [_ieee_operation(model, _P, [], [level[i], level[i + 1]]) for i in range(0, len(level), 2)]
    return _ieee_operation(model, round_result, [], [c, level[0]])


def late_c_block(model: Model, a: Sequence[float], b: Sequence[float], c: float) -> float:
    """late-c (AMD CDNA3), steps 1-5 of its section."""
    fa, fb, fc = model.input_format, model.b_format, model.c_format
    F, F2 = model.fraction_bits, model.late_fraction_bits
    assert F is not None and F2 is not None
    pairs = list(zip(a, b))
    # 1. a finite product of magnitude >= 2**(fc.emax + 1) is an infinity of its sign
    overflowing = [negative for p, negative in (product(ai, bi) for ai, bi in pairs
                                                if math.isfinite(ai) and math.isfinite(bi))
                   if abs(p) >= pow2(fc.emax + 1)]
    special = special_result(pairs, [c], overflowing)
    if special is not None:
        return special
    products = [product(ai, bi) for ai, bi in pairs]

    # 2. the products' sum S, aligned on their own maximum exponent e_dot
    def e_prod(i: int) -> int:
        return exponent(fa, a[i]) + exponent(fb, b[i])

    def aligned_sum(indices: Sequence[int]) -> tuple[Fraction, float]:
        """Sum of the products at ``indices`` cut toward zero at 2**(e - F), e their maximum exponent."""
        nonzero = [i for i in indices if products[i][0] != 0]
        if not nonzero:
            return Fraction(0), -INF
        e = max(e_prod(i) for i in nonzero)
        q = pow2(e - F)
        return sum((cut(products[i][0], q, Alignment.TRUNCATE) for i in nonzero), Fraction(0)), e

    L = len(pairs)
    if model.groups == 1:
        S, e_dot = aligned_sum(range(L))
    else:
        S_even, e_even = aligned_sum(range(0, L, 2))
        S_odd, e_odd = aligned_sum(range(1, L, 2))
        e_dot = max(e_even, e_odd)
        if e_dot == -INF:
            S = Fraction(0)
        else:
            q = pow2(int(e_dot) - F)
            S = cut(S_even, q, Alignment.FLOOR) + cut(S_odd, q, Alignment.FLOOR)
    # 3. C's exponent and the common exponent E; with groups=2 a C far below is dropped
    e_c = exponent(fc, c) if c != 0 else fc.emin
    E = int(max(e_dot, e_c))
    c_value = to_fraction(c)
    if model.groups == 2 and e_c < E - F - 1:
        c_value = Fraction(0)
    # 4. C floored at 2**(E - F); S floored at 2**(E - F2) ("common") or at 2**(E - F2 - 1) and the sum then
    #    floored at F2 bits below its own leading bit, its exponent at least fc.emin ("leading")
    c_value = cut(c_value, pow2(E - F), Alignment.FLOOR)
    if model.late_cut == "common":
        total = cut(S, pow2(E - F2), Alignment.FLOOR) + c_value
    else:
        total = cut(S, pow2(E - F2 - 1), Alignment.FLOOR) + c_value
        if total != 0:
            total = cut(total, pow2(max(floor_log2(abs(total)), fc.emin) - F2), Alignment.FLOOR)
    # 5. one rounding
    return round_result(model, total, products + [term(c)])


def _propagated_nan(a: float, b: float, d: float) -> float:
    """The NaN one FMA d' = fma(a, b, d) writes under nan="propagate" ("Special values"): b if it is a
    NaN, else d, else a, quieted; with no NaN operand (inf * 0, inf - inf) the invalid NaN, negative quiet."""
    for x in (b, d, a):
        if math.isnan(x):
            return quiet(x)
    return INVALID


def fma_chain_block(model: Model, a: Sequence[float], b: Sequence[float], c: float) -> float:
    """fma-chain: d = R(a_i * b_i + d), one IEEE fusedMultiplyAdd (L = 1); a NaN result carries the NaN
    the model's style passes on (only "propagate" looks at the operands)."""
    d = c
    for ai, bi in zip(a, b):
        result = _ieee_operation(model, round_result, [(ai, bi)], [d])
        if math.isnan(result) and model.nan is NaNStyle.PROPAGATE:
            result = _propagated_nan(ai, bi, d)
        d = result
    return d


def amx_block(model: Model, a: Sequence[float], b: Sequence[float], c: float) -> float:
    """amx (Intel TDPBF16PS): even and odd fp32 partial sums updated by FMAs, then R(c + R(even + odd))."""
    even = odd = 0.0
    for j in range(len(a) // 2):
        even = _ieee_operation(model, round_result, [(a[2 * j], b[2 * j])], [even])
        odd = _ieee_operation(model, round_result, [(a[2 * j + 1], b[2 * j + 1])], [odd])
    t = _ieee_operation(model, round_result, [], [even, odd])
    return _ieee_operation(model, round_result, [], [c, t])


def bfdot_block(model: Model, a: Sequence[float], b: Sequence[float], c: float) -> float:
    """bfdot (Arm, FPCR.EBF = 0): p_0 = R(a_0 b_0), p_1 = R(a_1 b_1), s = R(p_0 + p_1), R(c + s)."""
    p0 = _ieee_operation(model, round_result, [(a[0], b[0])], [])
    p1 = _ieee_operation(model, round_result, [(a[1], b[1])], [])
    s = _ieee_operation(model, round_result, [], [p0, p1])
    return _ieee_operation(model, round_result, [], [c, s])


def _A(model: Model, x: Fraction, terms: Sequence[Term]) -> float:
    """The IEEE addition of C after the blocks (``c_entry="after"`` or ``"end"``): TiesToEven into the
    output format, IEEE zero signs; with ``rounded_zero="positive"`` a zero is +0."""
    mode = RoundingMode.TiesToEven
    value = round_exact(model.output_format, x, mode, negative=_zero_is_negative(terms, mode, "ieee"),
                        subnormals=model.subnormals, overflow="ieee")
    return 0.0 if value == 0 and model.rounded_zero == "positive" else value


def dot(model: Model, a: Sequence[Number], b: Sequence[Number], c: Number,
        scale_a: Sequence[Number] | None = None, scale_b: Sequence[Number] | None = None) -> float:
    """d = a.b + c as ``model`` computes it; the value of the output format as a float (NaN as nan).

    "Blocks and chaining": the model's step plan (:mod:`blockfma.plan`: blocks of L = ``block_width``, a
    short last step padded with (+0) * (+0), each block's result the next block's C, or C added after a
    step's blocks) run with this module's exact blocks.  With ``subnormals=False`` subnormal inputs are
    flushed to zeros of their sign first (in the formats the datapath reads them in).

    A block-scaled model (the scaled-fused family) takes ``scale_a`` and ``scale_b``: one scale of its
    ``scale_format`` per ``scale_block`` products along K (k a multiple of it); product i takes
    ``scale_a[i // scale_block]`` and ``scale_b[i // scale_block]``; padding products take scale 1.
    """
    if len(a) != len(b):
        raise ValueError(f"a and b must have the same length, not {len(a)} and {len(b)}")
    a_values = [_value_of(model.input_format, x, f"a[{i}]") for i, x in enumerate(a)]
    b_values = [_value_of(model.b_format, x, f"b[{i}]") for i, x in enumerate(b)]
    d = _value_of(model.c_format, c, "c")
    scales = product_scales(model, len(a_values), scale_a, scale_b)
    if not a_values:  # an empty dot product is C as given
        return d
    p = plan(model, len(a_values))
    m = p.model  # operands unpacked to a wider format keep their values
    a_values = pad([_flush_input(m, m.input_format, x) for x in a_values], p.padded, 0.0)
    b_values = pad([_flush_input(m, m.b_format, x) for x in b_values], p.padded, 0.0)
    if scales is not None:
        scales = (pad(scales[0], p.padded, 1.0), pad(scales[1], p.padded, 1.0))
    return run(p, _Exact(p, a_values, b_values, scales), _flush_input(m, m.c_format, d))


def product_scales(model: Model, k: int, scale_a: Sequence[Any] | None, scale_b: Sequence[Any] | None,
                   decode: Callable[[Format, Any, str], Any] | None = None) -> tuple[list[Any], list[Any]] | None:
    """The scales of each of the k products of a block-scaled model (product i takes scale i // scale_block),
    ``scale_a`` and ``scale_b`` checked for count and each decoded by ``decode(scale_format, x, name)`` (default: as a
    float, checked to be a scale of the format); None for other models, which take none. The SMT encoder passes its own
    ``decode`` (bit-vector codes): one place for the rule of which product takes which scale."""
    if not model.block_scaled:
        if scale_a is not None or scale_b is not None:
            raise ValueError(f"scale_a and scale_b are for block-scaled models; {model.family.name} takes none")
        return None
    block, fs = model.option("scale_block"), model.scale_format
    decode = _scale_of if decode is None else decode
    if k % block:
        raise ValueError(f"k = {k} must be a multiple of the scale block {block}")
    out = []
    for name, given in (("scale_a", scale_a), ("scale_b", scale_b)):
        if given is None or len(given) != k // block:
            raise ValueError(f"{name} must hold {k // block} scales (one per {block} products of k = {k}), "
                             f"not {None if given is None else len(given)}")
        values = [decode(fs, x, f"{name}[{j}]") for j, x in enumerate(given)]
        out.append([values[i // block] for i in range(k)])
    return out[0], out[1]


class _Exact:
    """The reference's :class:`blockfma.plan.Datapath`: the family's exact block, and the store and the
    IEEE addition of C written with this module's own rounding."""

    def __init__(self, p: Plan, a: list[float], b: list[float], scales: tuple[list[float], list[float]] | None = None):
        self.p, self.model, self.a, self.b, self.scales = p, p.model, a, b, scales
        self.sum_block = p.block.family.implementation("reference")

    def block(self, products: Index, c: float) -> float:
        a, b, unit = take(self.a, products), take(self.b, products), self.p.unit(products)
        if self.scales is None:
            return self.sum_block(unit, a, b, c)
        return self.sum_block(unit, a, b, c, take(self.scales[0], products), take(self.scales[1], products))

    def zero(self, c: float) -> float:
        return 0.0

    def store(self, x: float) -> float:
        return _store(self.model, x)

    def add_c(self, s: float, c: float) -> float:
        return _ieee_operation(self.model, _A, [], [s, c])


def _store(model: Model, d: float) -> float:
    """A result of the accumulator (``accumulator_format``) rounded to nearest even into the output format;
    NaN, infinities and the sign of zero kept.  Without an accumulator format, ``d`` itself."""
    if model.accumulator_format is None or not math.isfinite(d):
        return d
    return round_exact(model.output_format, to_fraction(d), RoundingMode.TiesToEven, negative=is_negative(d),
                       subnormals=model.subnormals)


def dot_bits(model: Model, a: Sequence[Number], b: Sequence[Number], c: Number,
             scale_a: Sequence[Number] | None = None, scale_b: Sequence[Number] | None = None) -> int:
    """:func:`dot`, as the bit pattern of the result in ``model.output_format`` (NaN per ``model.nan``)."""
    return encode(model.output_format, dot(model, a, b, c, scale_a, scale_b), model.nan)
