"""Bit-vector encoding of a Model: d = a·b + c as a formula over the inputs' bit patterns.

This is the formal twin of ``reference.py`` (docs/semantics.md is the spec both follow): every input is a bit-vector of
its format's width, every exact value a fixed-point integer, and every rounding is written with integer operations only
(QF_BV; no floating-point theory: the units' arithmetic is not IEEE).  The two fixed-point frames (the *aligned frame*
of a truncated-fused, late-c or scaled-fused block, in units of 2**(e_max - F); the *exact frame* of the IEEE-operation
families, in units of 2**LSB) are described in docs/smt.md, "The encoding".  Scales of a block-scaled model are bit
patterns of the scale format too (:func:`decode` takes unsigned formats and formats without a zero).

Which models are covered is :func:`unsupported`'s answer: every family, and every parameter but
``nan="propagate"`` and float64 in an exact frame (4,000-bit integers) or in a late-c block.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import z3

from ..formats import Format, RoundingMode, holds_codes
from ..formats import encode as encode_value
from ..family import Family
from ..model import Alignment, Model, NaNStyle
from ..plan import Index, Plan, pad, plan, run, take
from ..reference import product_scales
from .bv import EW, conj, disj, exponent, maximum, msb, normalize, resize, sar, shl, shr, sresize

__all__ = ["EW", "Sym", "unsupported", "decode", "encode_bits", "dot", "exact_value", "input_vars", "scale_vars"]

_EXACT_FRAME_LIMIT = 1400  # bits; wider exact frames (float64 terms) are refused


# --- symbolic values of a format ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Sym:
    """A value of ``fmt``, symbolically: flags, sign, and for a finite nonzero value
    ``sig * 2**(exp - (p - 1))`` with ``exp`` = E_f(x) = max(floor(log2 |x|), emin) ("Notation")."""

    fmt: Format
    nan: z3.BoolRef
    inf: z3.BoolRef
    zero: z3.BoolRef
    neg: z3.BoolRef
    sig: z3.BitVecRef  # fmt.precision bits
    exp: z3.BitVecRef  # EW bits, signed

    @property
    def lsb(self) -> z3.BitVecRef:
        return self.exp - (self.fmt.precision - 1)


def decode(fmt: Format, bits: z3.BitVecRef) -> Sym:
    """The value of a bit pattern of ``fmt`` (IEEE layout; "fn", "fnuz" and "none" NaN encodings; the unsigned
    scale formats: e8m0fnu without a zero, 0xFF its NaN; ue4m3 with a zero, 0x7F its NaN)."""
    t, eb = fmt.fraction_bits, fmt.exponent_bits
    assert bits.size() == fmt.bits, (fmt, bits.size())
    sign = z3.Extract(fmt.bits - 1, fmt.bits - 1, bits) == 1 if fmt.signed else z3.BoolVal(False)
    field = z3.Extract(t + eb - 1, t, bits)
    frac = z3.Extract(t - 1, 0, bits) if t > 0 else None
    top = (1 << eb) - 1
    frac_zero = z3.BoolVal(True) if frac is None else frac == 0
    if fmt.nan == "ieee":
        nan = conj(field == top, z3.Not(frac_zero))
        inf = conj(field == top, frac_zero)
    elif fmt.nan == "fn":
        nan = conj(field == top, z3.BoolVal(True) if frac is None else frac == (1 << t) - 1)
        inf = z3.BoolVal(False)
    elif fmt.nan == "fnuz":  # the negative-zero code is the NaN
        nan = bits == (1 << (fmt.bits - 1))
        inf = z3.BoolVal(False)
    else:  # "none": every code is a number (fp6, fp4)
        nan = inf = z3.BoolVal(False)
    # without a zero (e8m0fnu) the exponent field 0 is an ordinary binade: no subnormals, no zero
    sub = field == 0 if fmt.has_zero else z3.BoolVal(False)
    zero = conj(sub, frac_zero, z3.Not(nan))
    hidden = z3.If(sub, z3.BitVecVal(0, 1), z3.BitVecVal(1, 1))
    sig = hidden if frac is None else z3.Concat(hidden, frac)
    exp = z3.If(sub, exponent(fmt.emin), z3.ZeroExt(EW - eb, field) - fmt.bias)
    return Sym(fmt, nan, inf, zero, sign, sig, exp)


def _flush(model: Model, x: Sym) -> Sym:
    """With subnormals=False a subnormal becomes a zero of its sign (+0 with flush_zero="positive")."""
    if model.subnormals:
        return x
    fmt = x.fmt
    sub = conj(z3.Not(x.zero), z3.Not(x.nan), z3.Not(x.inf),
               z3.Extract(fmt.precision - 1, fmt.precision - 1, x.sig) == 0)
    neg = conj(x.neg, z3.Not(sub)) if model.flush_zero == "positive" else x.neg
    return Sym(fmt, x.nan, x.inf, disj(x.zero, sub), neg, z3.If(sub, z3.BitVecVal(0, fmt.precision), x.sig), x.exp)


def _widen(x: Sym, fmt: Format) -> Sym:
    """The same value read in a format that holds it (``unpack_format``): exponent and significand anew."""
    if fmt == x.fmt:
        return x
    p, q = x.fmt.precision, fmt.precision
    wide = z3.ZeroExt(q - p, x.sig) if q > p else x.sig
    lead = x.lsb + msb(wide)  # floor(log2 |x|)
    exp = z3.If(lead < fmt.emin, exponent(fmt.emin), lead)
    lsb_new = exp - (q - 1)
    sig = shl(wide, x.lsb - lsb_new)
    return Sym(fmt, x.nan, x.inf, x.zero, x.neg, z3.If(x.zero, z3.BitVecVal(0, q), sig), exp)


def encode_bits(fmt: Format, x: Sym, nan: NaNStyle) -> z3.BitVecRef:
    """The bit pattern of x in ``fmt`` (an output format, with infinities); x is a value of ``fmt`` or of a
    format with its exponent range and fewer fraction bits (``output_fraction_bits``), whose fraction is
    then left-aligned.  A NaN is written in the style ``nan`` (one fixed pattern)."""
    if nan is NaNStyle.PROPAGATE:
        raise NotImplementedError("nan='propagate' is not encoded")
    t, eb, n = fmt.fraction_bits, fmt.exponent_bits, fmt.bits
    top = (1 << eb) - 1
    quiet = 1 << (t - 1)
    nan_code = {NaNStyle.CANONICAL: (top << t) | ((1 << t) - 1),
                NaNStyle.DEFAULT: (top << t) | quiet,
                NaNStyle.INDEFINITE: (1 << (n - 1)) | (top << t) | quiet}[nan]
    p_src = x.fmt.precision
    sign = z3.If(x.neg, z3.BitVecVal(1 << (n - 1), n), z3.BitVecVal(0, n))
    normal = z3.Extract(p_src - 1, p_src - 1, x.sig) == 1
    field = z3.If(normal, resize(x.exp + fmt.bias, n), z3.BitVecVal(0, n))
    frac = resize(z3.Extract(p_src - 2, 0, x.sig), n) << (t - (p_src - 1)) if p_src > 1 else z3.BitVecVal(0, n)
    finite = sign | (field << t) | frac
    zero = sign
    inf = sign | z3.BitVecVal(top << t, n)
    return z3.If(x.nan, z3.BitVecVal(nan_code, n), z3.If(x.inf, inf, z3.If(x.zero, zero, finite)))


# --- rounding ----------------------------------------------------------------------------------------------
def _round_kept(mode: RoundingMode, kept: z3.BitVecRef, neg: z3.BoolRef, above: z3.BoolRef, tie: z3.BoolRef,
                inexact: z3.BoolRef) -> z3.BitVecRef:
    """The kept significand (one bit wider than the format's, for a carry) rounded in mode, given where the
    dropped bits are above half a unit (``above``), exactly half (``tie``) or not zero (``inexact``)."""
    if mode is RoundingMode.ToOdd:
        return z3.If(inexact, kept | 1, kept)
    if mode is RoundingMode.TiesToEven:
        inc = disj(above, conj(tie, z3.Extract(0, 0, kept) == 1))
    elif mode is RoundingMode.TiesAway:
        inc = disj(above, tie)
    elif mode is RoundingMode.TowardZero:
        return kept
    elif mode is RoundingMode.TowardPositive:
        inc = conj(inexact, z3.Not(neg))
    elif mode is RoundingMode.TowardNegative:
        inc = conj(inexact, neg)
    else:  # pragma: no cover
        raise ValueError(f"unknown rounding mode {mode!r}")
    n = kept.size()
    return kept + z3.If(inc, z3.BitVecVal(1, n), z3.BitVecVal(0, n))


def _to_infinity(mode: RoundingMode, overflow: str, neg: z3.BoolRef) -> z3.BoolRef:
    """Whether an overflow gives infinity: always (``"inf"``), else as IEEE 754 sec. 7.4."""
    if overflow == "inf":
        return z3.BoolVal(True)
    return {RoundingMode.TiesToEven: z3.BoolVal(True), RoundingMode.TiesAway: z3.BoolVal(True),
            RoundingMode.TowardZero: z3.BoolVal(False), RoundingMode.ToOdd: z3.BoolVal(False),
            RoundingMode.TowardPositive: z3.Not(neg), RoundingMode.TowardNegative: neg}[mode]


def _round(fmt: Format, N: z3.BitVecRef, unit: z3.BitVecRef | int, mode: RoundingMode, *, subnormals: bool,
           overflow: str, zero_neg: z3.BoolRef, rounded_zero: str = "signed") -> Sym:
    """R(N * 2**unit) in ``fmt`` (``reference.round_exact``): N a signed fixed-point integer, rounded once in ``mode``
    with an unbounded exponent range, then subnormals (or a flush to zero when ``subnormals`` is False: tininess before
    rounding) and overflow (``"ieee"`` or ``"inf"``).  ``zero_neg`` is the sign of an exact zero (N == 0); a nonzero N
    that rounds to zero keeps N's sign, or is +0 with ``rounded_zero="positive"``."""
    p = fmt.precision
    unit = exponent(unit) if isinstance(unit, int) else unit
    w = N.size()
    neg = N < 0
    mag = z3.If(neg, -z3.SignExt(1, N), z3.SignExt(1, N))  # w + 1 bits: |N| even for the most negative N
    W = max(w + 1, p + 2)
    mag = resize(mag, W)
    norm, lz = normalize(mag)  # the leading bit at position W - 1
    lead = unit + (W - 1) - lz  # floor(log2 |x|)
    nonzero = mag != 0
    tiny = lead < fmt.emin
    # drop = W - p (+ the subnormal shift): the bits of norm below the kept significand
    extra = z3.If(tiny, exponent(fmt.emin) - lead, exponent(0)) if subnormals else exponent(0)
    drop = extra + (W - p)
    kept = resize(shr(norm, drop), p + 1)
    rest = norm & (shl(z3.BitVecVal(1, W), drop) - 1)  # shl gives 0 for drop >= W: the mask is all ones
    half = shl(z3.BitVecVal(1, W), drop - 1)
    half_big = z3.UGE(drop, exponent(W + 1))  # half is 2**W or more (then shl gave 0): rest < half
    inexact = rest != 0
    above = conj(z3.Not(half_big), z3.UGT(rest, half))
    tie = conj(z3.Not(half_big), rest == half)
    kept = _round_kept(mode, kept, neg, above, tie, inexact)
    # the exponent of the kept significand's leading bit: lead (normal), emin (subnormal)
    exp = z3.If(tiny, exponent(fmt.emin), lead) if subnormals else lead
    carry = z3.Extract(p, p, kept) == 1  # rounding carried into a new binade
    exp = z3.If(carry, exp + 1, exp)
    sig = z3.If(carry, z3.Extract(p, 1, kept), z3.Extract(p - 1, 0, kept))
    result_zero = sig == 0
    if not subnormals:
        result_zero = disj(result_zero, tiny)
        sig = z3.If(tiny, z3.BitVecVal(0, p), sig)
    result_zero = disj(result_zero, z3.Not(nonzero))
    over = conj(z3.Not(result_zero), exp > fmt.emax)
    to_inf = _to_infinity(mode, overflow, neg)
    big_sig = z3.BitVecVal((1 << p) - 1, p)
    sig = z3.If(over, big_sig, sig)
    exp = z3.If(over, exponent(fmt.emax), exp)
    if rounded_zero == "positive":
        sign = conj(neg, z3.Not(result_zero))
        zero_sign = z3.BoolVal(False)
    else:
        sign = neg
        zero_sign = z3.If(nonzero, neg, zero_neg)
    sign = z3.If(result_zero, zero_sign, sign)
    if not fmt.has_negative_zero:
        sign = conj(sign, z3.Not(result_zero))
    return Sym(fmt, z3.BoolVal(False), conj(over, to_inf), result_zero, sign,
               z3.If(result_zero, z3.BitVecVal(0, p), sig), exp)


# --- terms and sums ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Term:
    """An exact term sig * 2**lsb of a sum, with its static bounds: lsb >= lsb_min, |value| < 2**top."""

    zero: z3.BoolRef
    neg: z3.BoolRef
    sig: z3.BitVecRef
    lsb: z3.BitVecRef
    lsb_min: int
    top: int


def product(x: Sym, y: Sym) -> Term:
    """The exact product x * y of finite values as a term."""
    px, py = x.fmt.precision, y.fmt.precision
    sig = z3.ZeroExt(py, x.sig) * z3.ZeroExt(px, y.sig)
    lsb_min = x.fmt.emin - (px - 1) + y.fmt.emin - (py - 1)
    top = x.fmt.emax + 1 + y.fmt.emax + 1
    return Term(disj(x.zero, y.zero), z3.Xor(x.neg, y.neg), sig, x.lsb + y.lsb, lsb_min, top)


def addend(x: Sym) -> Term:
    """A finite value x as a term of a sum."""
    f = x.fmt
    return Term(x.zero, x.neg, x.sig, x.lsb, f.emin - (f.precision - 1), f.emax + 1)


def exact_sum(terms: Sequence[Term]) -> tuple[z3.BitVecRef, int]:
    """(N, LSB): the exact sum of finite terms as N * 2**LSB."""
    LSB = min(t.lsb_min for t in terms)
    top = max(t.top for t in terms)
    W = top - LSB + len(terms).bit_length() + 1
    if W > _EXACT_FRAME_LIMIT:
        raise NotImplementedError(f"an exact sum over {W} bits (float64 terms) is not encoded")
    total = z3.BitVecVal(0, W)
    for t in terms:
        placed = shl(resize(t.sig, W), t.lsb - LSB)
        placed = z3.If(t.zero, z3.BitVecVal(0, W), placed)
        total = total + z3.If(t.neg, -placed, placed)
    return total, LSB


def _zero_is_negative(terms: Sequence[Term], mode: RoundingMode, exact_zero: str) -> z3.BoolRef:
    """Sign of an exactly zero sum ("Sign of an exact zero"); the twin of reference._zero_is_negative."""
    if exact_zero == "positive":
        return z3.BoolVal(False)
    only_zeros = conj(*[t.zero for t in terms])
    if mode is RoundingMode.TowardNegative:
        return disj(z3.Not(only_zeros), disj(*[t.neg for t in terms]))
    return conj(only_zeros, *[t.neg for t in terms])


def _specials(pairs: Sequence[tuple[Sym, Sym]], addends: Sequence[Sym],
              more_inf: Sequence[tuple[z3.BoolRef, z3.BoolRef]] = ()) -> tuple[z3.BoolRef, z3.BoolRef, z3.BoolRef]:
    """(nan, inf, negative) by the rules of "Special values" (reference.special_result)."""
    nan = [x.nan for pair in pairs for x in pair] + [x.nan for x in addends]
    pos, neg = [], []
    for x, y in pairs:
        nan.append(disj(conj(x.inf, y.zero), conj(x.zero, y.inf)))
        inf = disj(x.inf, y.inf)
        sign = z3.Xor(x.neg, y.neg)
        pos.append(conj(inf, z3.Not(sign)))
        neg.append(conj(inf, sign))
    for x in addends:
        pos.append(conj(x.inf, z3.Not(x.neg)))
        neg.append(conj(x.inf, x.neg))
    for inf, sign in more_inf:
        pos.append(conj(inf, z3.Not(sign)))
        neg.append(conj(inf, sign))
    any_pos, any_neg = disj(*pos) if pos else z3.BoolVal(False), disj(*neg) if neg else z3.BoolVal(False)
    is_nan = disj(*nan, conj(any_pos, any_neg))
    return is_nan, disj(any_pos, any_neg), any_neg


def _special(fmt: Format, base: Sym, nan: z3.BoolRef, inf: z3.BoolRef, neg: z3.BoolRef) -> Sym:
    """``base`` with NaN and infinite results put in."""
    special = disj(nan, inf)
    return Sym(fmt, nan, z3.If(special, z3.Not(nan), base.inf), conj(base.zero, z3.Not(special)),
               z3.If(special, neg, base.neg), base.sig, base.exp)


# --- the families ------------------------------------------------------------------------------------------
def _R(model: Model, N: z3.BitVecRef, unit: z3.BitVecRef | int, terms: Sequence[Term]) -> Sym:
    """R(x) of the model: into the result format, the model's rounding, zeros and overflow."""
    mode = model.output_rounding
    return _round(model.result_format, N, unit, mode, subnormals=model.subnormals, overflow=model.overflow,
                  zero_neg=_zero_is_negative(terms, mode, model.exact_zero), rounded_zero=model.rounded_zero)


def _P(model: Model, N: z3.BitVecRef, unit: z3.BitVecRef | int, terms: Sequence[Term]) -> Sym:
    """P(x) of the pairwise family: IEEE, to nearest even in the C format."""
    mode = RoundingMode.TiesToEven
    return _round(model.c_format, N, unit, mode, subnormals=model.subnormals, overflow="ieee",
                  zero_neg=_zero_is_negative(terms, mode, "ieee"))


def _A(model: Model, N: z3.BitVecRef, unit: z3.BitVecRef | int, terms: Sequence[Term]) -> Sym:
    """The IEEE addition of C after the blocks (c_entry="after" or "end"), into the output format."""
    mode = RoundingMode.TiesToEven
    return _round(model.output_format, N, unit, mode, subnormals=model.subnormals, overflow="ieee",
                  zero_neg=_zero_is_negative(terms, mode, "ieee"), rounded_zero=model.rounded_zero)


def _ieee_operation(model: Model, rounder, pairs: Sequence[tuple[Sym, Sym]], addends: Sequence[Sym],
                    fmt: Format) -> Sym:
    """sum(x*y for pairs) + sum(addends) with one rounding, special values first."""
    nan, inf, neg = _specials(pairs, addends)
    terms = [product(x, y) for x, y in pairs] + [addend(x) for x in addends]
    N, LSB = exact_sum(terms)
    return _special(fmt, rounder(model, N, LSB, terms), nan, inf, neg)


def truncated_fused_block(model: Model, a: Sequence[Sym], b: Sequence[Sym], c: Sym) -> Sym:
    """truncated-fused, steps 1-6 (reference.truncated_fused_block)."""
    nan, inf, neg = _specials(list(zip(a, b)), [c])
    products = [product(x, y) for x, y in zip(a, b)]
    ez = exponent(model.e_zero)
    # 1.-2. the terms' exponents, zeros at e_zero
    exps = []
    for t in products:
        if model.product_exponent == "normalized":
            e = t.lsb + msb(t.sig)
        else:
            e = t.lsb + (t.sig.size() - 2)  # E_a + E_b
        exps.append(z3.If(t.zero, ez, e))
    # |product| < 2**(E_a + E_b + 2), and below 2**(e + 1) for a normalized exponent e
    return _aligned_sum(model, products, exps, [2] * len(products), c, nan, inf, neg)


def _aligned_sum(model: Model, terms: Sequence[Term], exps: Sequence[z3.BitVecRef], over: Sequence[int], c: Sym,
                 nan: z3.BoolRef, inf: z3.BoolRef, neg: z3.BoolRef) -> Sym:
    """Steps 3-6 of a truncated-fused block, for every fused family (truncated-fused, scaled-fused): C joins
    ``terms`` at its exponent (e_zero if zero); e_max, the largest of ``exps`` and C's; every term cut at
    2**(e_max - F) (``alignment``); the exact sum, modulo the carry bits; one rounding, then the special
    values ``nan``, ``inf`` (of sign ``neg``).  ``exps[i]`` is term i's exponent as the unit reads it (at
    least its lsb), ``over[i]`` a static bound with |term i| < 2**(exps[i] + over[i])."""
    F = model.fraction_bits
    terms = list(terms) + [addend(c)]
    exps = list(exps) + [z3.If(c.zero, exponent(model.e_zero), c.exp)]
    over = list(over) + [1]
    # 3. the block's maximum exponent
    e_max = maximum(exps)
    # 4. every term cut at 2**(e_max - F): magnitude in units of the quantum, then signed
    width = F + max(over) + 2  # |term| < 2**(e_max + over): F + over bits, and one spare
    n_sum = width + len(terms).bit_length() + 1
    if model.carry_bits is not None:
        n_sum = max(n_sum, F + 2 + model.carry_bits + 1)
    S = z3.BitVecVal(0, n_sum)
    for t in terms:
        left = F + 2  # the most a term's lsb can sit above the quantum: lsb - (e_max - F) <= F
        wide = resize(t.sig, t.sig.size() + left) << left
        shift = e_max - F - t.lsb + left  # >= 0
        mag = shr(wide, shift)
        mag = z3.If(t.zero, z3.BitVecVal(0, wide.size()), mag)
        if model.alignment is Alignment.FLOOR:
            lost = shl(mag, shift) != wide
            mag = mag + z3.If(conj(t.neg, lost, z3.Not(t.zero)), z3.BitVecVal(1, wide.size()),
                              z3.BitVecVal(0, wide.size()))
        mag = resize(mag, n_sum)
        S = S + z3.If(t.neg, -mag, mag)
    # 5. carries beyond carry_bits above the leading bit are lost: |S| mod 2**(F + 1 + carry_bits) units
    if model.carry_bits is not None:
        m = F + 1 + model.carry_bits
        s_neg = S < 0
        absS = z3.If(s_neg, -S, S)
        wrapped = absS & ((1 << m) - 1)
        S = z3.If(s_neg, -wrapped, wrapped)
    # 6. one rounding
    return _special(model.result_format, _R(model, S, e_max - F, terms), nan, inf, neg)


def scaled_fused_block(model: Model, a: Sequence[Sym], b: Sequence[Sym], c: Sym, sa: Sequence[Sym],
                       sb: Sequence[Sym]) -> Sym:
    """scaled-fused (reference.scaled_fused_block): ``sa[i]``, ``sb[i]`` the scales of product i (values of
    the ``scale_format`` option).  Without ``scale_group`` term i is a_i b_i sa_i sb_i at the sum of the four
    exponents; with G, every G products are summed exactly and the sum times its scales is a term at the
    scales' exponents alone (e_zero where all G products are zero or a scale is).  Then as truncated-fused
    (:func:`_aligned_sum`); a NaN scale makes the result NaN."""
    nan, inf, neg = _specials(list(zip(a, b)), [c])
    nan = disj(nan, *[s.nan for s in list(sa) + list(sb)])
    products = [product(x, y) for x, y in zip(a, b)]
    ez = exponent(model.e_zero)
    G = model.option("scale_group")
    terms: list[Term] = []
    exps: list[z3.BitVecRef] = []
    over: list[int] = []
    if G is None:
        for t, x, y in zip(products, sa, sb):
            scaled = _scaled(t, x, y)
            # E_a + E_b + E(sa) + E(sb): the product's lsb sits (pa - 1) + (pb - 1) below E_a + E_b
            e = t.lsb + (t.sig.size() - 2) + x.exp + y.exp
            terms.append(scaled)
            exps.append(z3.If(scaled.zero, ez, e))
            over.append(4)  # four significands below 2 each
    else:
        for g in range(0, len(products), G):
            group = products[g:g + G]
            N, LSB = exact_sum(group)  # the G products' exact sum, N * 2**LSB
            negative = N < 0
            mag = z3.If(negative, -z3.SignExt(1, N), z3.SignExt(1, N))  # |N|, one bit wider
            total = Term(N == 0, negative, mag, exponent(LSB), LSB,
                         max(t.top for t in group) + (len(group) - 1).bit_length())
            x, y = sa[g], sb[g]
            scaled = _scaled(total, x, y)
            assert LSB <= 2  # the term's lsb lies at most 2 above its exponent, as _aligned_sum's cut needs
            # a zero term (the sum cancels, or a scale is 0) is -0 where all its products are (reference)
            all_negative = conj(*[t.neg for t in group])
            terms.append(Term(scaled.zero, z3.If(scaled.zero, all_negative, negative), scaled.sig, scaled.lsb,
                              scaled.lsb_min, scaled.top))
            exps.append(z3.If(disj(x.zero, y.zero, conj(*[t.zero for t in group])), ez, x.exp + y.exp))
            over.append(total.top + 2)  # |sum| < 2**top, each scale below 2**(E(s) + 1)
    return _aligned_sum(model, terms, exps, over, c, nan, inf, neg)


def _scaled(t: Term, x: Sym, y: Sym) -> Term:
    """The term t times the scales x and y (unsigned values of a scale format), exactly."""
    px, py, n = x.fmt.precision, y.fmt.precision, t.sig.size()
    sig = z3.ZeroExt(px + py, t.sig) * z3.ZeroExt(n + py, x.sig) * z3.ZeroExt(n + px, y.sig)
    lsb_min = t.lsb_min + x.fmt.emin - (px - 1) + y.fmt.emin - (py - 1)
    return Term(disj(t.zero, x.zero, y.zero), t.neg, sig, t.lsb + x.lsb + y.lsb, lsb_min,
                t.top + x.fmt.emax + 1 + y.fmt.emax + 1)


def _late_c_group(model: Model, products: Sequence[Term], lowest: int) -> tuple[z3.BoolRef, z3.BitVecRef, z3.BitVecRef]:
    """(any nonzero product, e, S): e the largest E(a_i) + E(b_i) over the nonzero products (``lowest``, the
    least such exponent, when there is none) and S the sum of the products cut toward zero at 2**(e - F), a
    signed integer in units of 2**(e - F) (reference.late_c_block, aligned_sum)."""
    F = model.fraction_bits
    nonzero = disj(*[z3.Not(t.zero) for t in products])
    # E(a) + E(b) = lsb + (pa - 1) + (pb - 1); a zero product takes no part in the maximum
    exps = [z3.If(t.zero, exponent(lowest), t.lsb + (t.sig.size() - 2)) for t in products]
    e = maximum(exps)
    # |p| < 2**(E(a) + E(b) + 2) <= 2**(e + 2): below 2**(F + 2) units each
    width = F + 3 + len(products).bit_length()
    S = z3.BitVecVal(0, width)
    for t in products:
        left = max(0, F - (t.sig.size() - 2))  # the most the product's lsb can sit above the quantum
        wide = resize(t.sig, t.sig.size() + left) << left
        mag = shr(wide, e - F - t.lsb + left)  # the shift is >= 0 for a nonzero product
        mag = resize(z3.If(t.zero, z3.BitVecVal(0, wide.size()), mag), width)
        S = S + z3.If(t.neg, -mag, mag)
    return nonzero, e, S


def late_c_block(model: Model, a: Sequence[Sym], b: Sequence[Sym], c: Sym) -> Sym:
    """late-c, steps 1-5 (reference.late_c_block): products cut at F below their own maximum exponent
    e_dot (per even/odd group with groups=2, the groups' sums then floored at 2**(e_dot - F)); C floored at
    2**(E - F), E = max(e_dot, E(c)); the products' sum floored at 2**(E - F2) ("common") or at
    2**(E - F2 - 1) with the total then floored at F2 bits below its own leading bit ("leading"); one
    rounding.  All frames are in units of a variable quantum, so every integer is a few bits over F2."""
    fc, F, F2 = model.c_format, model.fraction_bits, model.late_fraction_bits
    pairs = list(zip(a, b))
    products = [product(x, y) for x, y in pairs]
    # 1. a finite product of magnitude >= 2**(fc.emax + 1) is an infinity of its sign
    overflowing = []
    for (x, y), t in zip(pairs, products):
        if t.top > fc.emax + 1:  # else no product of these formats is that large
            finite = z3.Not(disj(x.nan, x.inf, y.nan, y.inf))
            big = conj(finite, z3.Not(t.zero), t.lsb + msb(t.sig) >= fc.emax + 1)
            overflowing.append((big, t.neg))
    nan, inf, neg = _specials(pairs, [c], overflowing)
    # 2. the products' sum S in units of 2**(e_dot - F); has_dot False when every product is zero
    lowest = model.input_format.emin + model.b_format.emin
    if model.groups == 1:
        has_dot, e_dot, S = _late_c_group(model, products, lowest)
    else:
        has_even, e_even, S_even = _late_c_group(model, products[0::2], lowest)
        has_odd, e_odd, S_odd = _late_c_group(model, products[1::2], lowest)
        has_dot = disj(has_even, has_odd)
        e_dot = maximum([e_even, e_odd])  # an empty group's e is the least exponent: it never wins
        w = max(S_even.size(), S_odd.size()) + 1
        S = sar(sresize(S_even, w), e_dot - e_even) + sar(sresize(S_odd, w), e_dot - e_odd)
    # 3. C's exponent (fc.emin for a zero C) and the common exponent E
    e_c = z3.If(c.zero, exponent(fc.emin), c.exp)
    E = z3.If(conj(has_dot, e_dot > e_c), e_dot, e_c)
    c_zero = c.zero
    if model.groups == 2:
        c_zero = disj(c_zero, e_c < E - F - 1)
    # 4. everything in units of 2**(E - G): G = F2 ("common") or F2 + 1 ("leading")
    G = F2 if model.late_cut == "common" else F2 + 1
    pc = fc.precision
    c_left = max(0, F - (pc - 1))  # |C| < 2**(E + 1): below 2**(F + 1) units of 2**(E - F)
    c_wide = resize(c.sig, pc + 1 + c_left) << c_left
    c_wide = z3.If(c.neg, -c_wide, c_wide)
    c_cut = sar(c_wide, E - F - c.lsb + c_left)  # floored at 2**(E - F); the shift is >= 0 for a nonzero C
    c_cut = z3.If(c_zero, z3.BitVecVal(0, c_wide.size()), c_cut)
    width = max(S.size(), c_cut.size()) + G - F + 2  # the sum, and the floor of a negative T, fit
    c_units = sresize(c_cut, width) << (G - F)
    S_units = sar(sresize(S, width) << (G - F), z3.If(has_dot, E - e_dot, exponent(0)))  # floored at 2**(E - G)
    T = S_units + c_units
    if model.late_cut == "leading":
        # floored at 2**(e_T - F2), e_T = max(floor(log2 |T|), fc.emin): k = e_T - F2 - (E - G) units
        lead = msb(z3.If(T < 0, -T, T))  # floor(log2 |T|) - (E - G)
        floor_at = exponent(fc.emin) - E + G
        k = z3.If(lead > floor_at, lead, floor_at) - F2
        k = z3.If(conj(T != 0, k > 0), k, exponent(0))
        T = sar(T, k) << resize(k, width)
    # 5. one rounding
    return _special(model.result_format, _R(model, T, E - G, products + [addend(c)]), nan, inf, neg)


def exact_fused_block(model: Model, a: Sequence[Sym], b: Sequence[Sym], c: Sym) -> Sym:
    return _ieee_operation(model, _R, list(zip(a, b)), [c], model.result_format)


def pairwise_block(model: Model, a: Sequence[Sym], b: Sequence[Sym], c: Sym) -> Sym:
    fc = model.c_format
    level = [_ieee_operation(model, _P, [(x, y)], [], fc) for x, y in zip(a, b)]
    while len(level) > 1:
        level = [_ieee_operation(model, _P, [], [level[i], level[i + 1]], fc) for i in range(0, len(level), 2)]
    return _ieee_operation(model, _R, [], [c, level[0]], model.result_format)


def fma_chain_block(model: Model, a: Sequence[Sym], b: Sequence[Sym], c: Sym) -> Sym:
    d = c
    for x, y in zip(a, b):
        d = _ieee_operation(model, _R, [(x, y)], [d], model.result_format)
    return d


def amx_block(model: Model, a: Sequence[Sym], b: Sequence[Sym], c: Sym) -> Sym:
    fmt = model.result_format
    even = odd = _zero(fmt)
    for j in range(len(a) // 2):
        even = _ieee_operation(model, _R, [(a[2 * j], b[2 * j])], [even], fmt)
        odd = _ieee_operation(model, _R, [(a[2 * j + 1], b[2 * j + 1])], [odd], fmt)
    t = _ieee_operation(model, _R, [], [even, odd], fmt)
    return _ieee_operation(model, _R, [], [c, t], fmt)


def bfdot_block(model: Model, a: Sequence[Sym], b: Sequence[Sym], c: Sym) -> Sym:
    fmt = model.result_format
    p0 = _ieee_operation(model, _R, [(a[0], b[0])], [], fmt)
    p1 = _ieee_operation(model, _R, [(a[1], b[1])], [], fmt)
    s = _ieee_operation(model, _R, [], [p0, p1], fmt)
    return _ieee_operation(model, _R, [], [c, s], fmt)


def _zero(fmt: Format) -> Sym:
    """+0 in fmt."""
    f = z3.BoolVal(False)
    return Sym(fmt, f, f, z3.BoolVal(True), f, z3.BitVecVal(0, fmt.precision), exponent(fmt.emin))


def _as_output(model: Model, x: Sym) -> Sym:
    """A block's result (a value of the result format) read as a value of the C format, for the next block;
    with an accumulator format, rounded to nearest even into the output format ("Blocks and chaining")."""
    fc = model.output_format
    if model.accumulator_format is not None:
        acc = x
        N = z3.If(acc.neg, -z3.ZeroExt(1, acc.sig), z3.ZeroExt(1, acc.sig))
        r = _round(fc, N, acc.lsb, RoundingMode.TiesToEven, subnormals=model.subnormals, overflow="ieee",
                   zero_neg=acc.neg)
        return Sym(fc, acc.nan, disj(acc.inf, r.inf), disj(acc.zero, r.zero),
                   z3.If(disj(acc.nan, acc.inf, acc.zero), acc.neg, r.neg), r.sig, r.exp)
    return _reformat(x, fc)


def _reformat(x: Sym, fmt: Format) -> Sym:
    """A value of a format with fmt's exponent range and at most its precision, as a value of fmt."""
    if x.fmt == fmt:
        return x
    q, p = fmt.precision, x.fmt.precision
    return Sym(fmt, x.nan, x.inf, x.zero, x.neg, z3.ZeroExt(q - p, x.sig) << (q - p), x.exp)


# --- the model ---------------------------------------------------------------------------------------------
def unsupported(model: Model) -> str | None:
    """None when :func:`dot` encodes ``model``, else one line naming what is missing."""
    if not model.family.has("smt"):
        encoded = ", ".join(f.name for f in Family if f.has("smt"))
        return f"the {model.family.value} family gives no bit-vector encoding (encoded: {encoded})"
    if model.nan is NaNStyle.PROPAGATE:
        return "nan='propagate' (NaN payloads passed on) is not encoded; NaN results with a fixed pattern are"
    fmts = [model.input_format, model.b_format, model.output_format] + \
        [f for f in (model.unpack_format, model.accumulator_format) if f is not None]
    if any(f.bits > 32 for f in fmts) and model.family is not Family.TRUNCATED_FUSED:
        return "float64 values in an exact sum (4,000-bit integers) are not encoded"
    if model.output_format.bits > 32 and model.family is Family.TRUNCATED_FUSED:
        return "float64 outputs are not encoded"
    return None


def input_vars(model: Model, k: int, prefix: str = "", c_format: Format | None = None
               ) -> tuple[list[z3.BitVecRef], list[z3.BitVecRef], z3.BitVecRef]:
    """Fresh bit-vector inputs a[0..k), b[0..k), c in the model's formats (c in the C format, or in
    ``c_format``: a narrower C shared with another model, :func:`dot`'s ``c_format``)."""
    a = [z3.BitVec(f"{prefix}a{i}", model.input_format.bits) for i in range(k)]
    b = [z3.BitVec(f"{prefix}b{i}", model.b_format.bits) for i in range(k)]
    c = z3.BitVec(f"{prefix}c", (c_format or model.c_format).bits)
    return a, b, c


def _read_c(model: Model, c: z3.BitVecRef, c_format: Format | None) -> Sym:
    """C's bit pattern as a value of the model's C format: decoded there, or decoded in ``c_format`` (a
    format whose every code the C format holds) and widened exactly."""
    fc = model.c_format
    if c_format is None or c_format == fc:
        return decode(fc, c)
    if not holds_codes(fc, c_format):
        raise ValueError(f"{model.name or 'the model'} takes C in {fc.name}, which does not hold every code of "
                         f"{c_format.name}: a C in {c_format.name} is not an input of it")
    return _widen(decode(c_format, c), fc)


def scale_vars(model: Model, k: int, prefix: str = "") -> tuple[list[z3.BitVecRef], list[z3.BitVecRef]]:
    """Fresh scale inputs sa[0..k/block), sb[0..k/block) in the scale format of a block-scaled model (one per
    ``scale_block`` products along K); two empty lists for other models."""
    if not model.block_scaled:
        return [], []
    block, fs = model.option("scale_block"), model.scale_format
    if k % block:
        raise ValueError(f"k = {k} must be a multiple of the scale block {block}")
    return ([z3.BitVec(f"{prefix}sa{j}", fs.bits) for j in range(k // block)],
            [z3.BitVec(f"{prefix}sb{j}", fs.bits) for j in range(k // block)])


def dot(model: Model, a: Sequence[z3.BitVecRef], b: Sequence[z3.BitVecRef], c: z3.BitVecRef,
        scale_a: Sequence[z3.BitVecRef] | None = None, scale_b: Sequence[z3.BitVecRef] | None = None, *,
        c_format: Format | None = None) -> z3.BitVecRef:
    """The bit pattern of d = a·b + c in ``model.output_format`` as the model computes it (reference.dot_bits): blocks
    of L chained, a short last block padded with +0 products, inputs flushed when subnormals=False, A and B unpacked
    where the model says, C added after the blocks with c_entry="after" or "end".  A block-scaled model takes
    ``scale_a`` and ``scale_b``, bit patterns of its scale format, one per ``scale_block`` products
    (:func:`scale_vars`); padding products take scale 1. ``c_format``: ``c`` is a bit pattern of that format, narrower
    than the model's C format (which must hold its every code), widened exactly into it: the same C given to a model
    that takes a wider one (the engine given an fp16 value as an fp32 C)."""
    why = unsupported(model)
    if why is not None:
        raise NotImplementedError(f"{model.name or model.family.value}: {why}")
    if len(a) != len(b):
        raise ValueError(f"a and b must have the same length, not {len(a)} and {len(b)}")
    k = len(a)
    # which product takes which scale, and the count checks: the reference's rule; here codes decoded
    scales = product_scales(model, k, scale_a, scale_b, decode=lambda fs, x, name: decode(fs, x))
    fa, fb = model.input_format, model.b_format
    xs = [decode(fa, x) for x in a]
    ys = [decode(fb, y) for y in b]
    d = _read_c(model, c, c_format)
    if k == 0:  # C as given, widened exactly into the output format
        return encode_bits(model.output_format, _widen(d, model.output_format), model.nan)
    p = plan(model, k)
    arith = p.model
    if arith is not model:
        xs = [_widen(x, arith.input_format) for x in xs]
        ys = [_widen(y, arith.b_format) for y in ys]
    xs = pad([_flush(arith, x) for x in xs], p.padded, _zero(arith.input_format))
    ys = pad([_flush(arith, y) for y in ys], p.padded, _zero(arith.b_format))
    if scales is not None:
        fs = model.scale_format
        one = decode(fs, z3.BitVecVal(int(encode_value(fs, 1.0)), fs.bits))
        scales = (pad(scales[0], p.padded, one), pad(scales[1], p.padded, one))
    d = run(p, _Formula(p, xs, ys, scales), _flush(arith, d))
    return encode_bits(model.output_format, d, model.nan)


class _Formula:
    """The encoding's :class:`blockfma.plan.Datapath`: the family's bit-vector block, the store into the output format
    and the IEEE addition of C, over :class:`Sym` values; a block-scaled model's blocks get their products' scales."""

    def __init__(self, p: Plan, a: list[Sym], b: list[Sym], scales: tuple[list[Sym], list[Sym]] | None = None):
        self.p, self.model, self.a, self.b, self.scales = p, p.model, a, b, scales
        self.sum_block = p.block.family.implementation("smt")

    def block(self, products: Index, c: Sym) -> Sym:
        unit = self.p.unit(products)  # the first block reads the C given in its format (c_input_format)
        a, b, c = take(self.a, products), take(self.b, products), _widen(c, unit.c_format)
        if self.scales is None:
            return _reformat(self.sum_block(unit, a, b, c), unit.output_format)
        sa, sb = take(self.scales[0], products), take(self.scales[1], products)
        return _reformat(self.sum_block(unit, a, b, c, sa, sb), unit.output_format)

    def zero(self, c: Sym) -> Sym:
        return _zero(self.p.block.output_format)

    def store(self, x: Sym) -> Sym:
        return _as_output(self.model, x)

    def add_c(self, s: Sym, c: Sym) -> Sym:
        return _ieee_operation(self.model, _A, [], [s, c], self.model.output_format)


def exact_value(model: Model, a: Sequence[z3.BitVecRef], b: Sequence[z3.BitVecRef], c: z3.BitVecRef,
                scale_a: Sequence[z3.BitVecRef] | None = None, scale_b: Sequence[z3.BitVecRef] | None = None
                ) -> tuple[z3.BitVecRef, int, z3.BoolRef, z3.BitVecRef, int]:
    """The exact a·b + c and sum |a_i b_i| + |c| of finite inputs (a block-scaled model's products times
    their scales: sum a_i sa_i b_i sb_i + c, no NaN scale), as fixed-point integers over one frame:
    (value N, LSB, all inputs finite, magnitude M, LSB) with value = N * 2**LSB."""
    xs = [decode(model.input_format, x) for x in a]
    ys = [decode(model.b_format, y) for y in b]
    z = decode(model.c_format, c)
    terms = [product(x, y) for x, y in zip(xs, ys)]
    scales = product_scales(model, len(a), scale_a, scale_b, decode=lambda fs, x, name: decode(fs, x))
    finite = [z3.Not(disj(v.nan, v.inf)) for v in xs + ys + [z]]
    if scales is not None:
        terms = [_scaled(t, x, y) for t, x, y in zip(terms, *scales)]
        finite += [z3.Not(s.nan) for s in scales[0] + scales[1]]
    terms.append(addend(z))
    N, LSB = exact_sum(terms)
    mags = [Term(t.zero, z3.BoolVal(False), t.sig, t.lsb, t.lsb_min, t.top) for t in terms]
    M, _ = exact_sum(mags)
    return N, LSB, conj(*finite), M, LSB


def value_in_frame(fmt: Format, bits: z3.BitVecRef, LSB: int, width: int) -> z3.BitVecRef:
    """A finite value of fmt (its bit pattern) as a signed integer in units of 2**LSB (LSB at most the
    format's lowest bit), ``width`` bits."""
    x = decode(fmt, bits)
    assert LSB <= fmt.emin - (fmt.precision - 1)
    placed = shl(resize(x.sig, width), x.lsb - LSB)
    placed = z3.If(x.zero, z3.BitVecVal(0, width), placed)
    return z3.If(x.neg, -placed, placed)
