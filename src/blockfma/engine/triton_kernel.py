"""The shared jitted helpers of the Triton kernel (:mod:`.triton_gemm`) and the blocks of the truncated-fused and late-c
families (general and fast path); see :mod:`blockfma.engine.triton` for what they compute and why it is exact.

A block takes the tile (:class:`.triton_gemm.Tile`), the step's first product k0, the block's offset j in the
step, its C and its parameters ``B`` (:class:`blockfma.engine.triton.Block`, a compile-time structure);
rounding helpers take a :class:`blockfma.engine.triton.Rounding`.
"""
# mypy: ignore-errors
# ruff: noqa: E741, RUF059
from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["fused_block", "load_block", "decode", "cut", "lead", "round_value",
           "product_nan", "with_specials", "store_output", "add_c", "zero_pick", "products", "reduce_max",
           "reduce_min", "reduce_sum", "aligned_sum", "fused_value", "term_zero_flags", "special_flags", "load_lane",
           "lane_exp", "scale32", "lane_specials", "CODE_BIAS", "widen"]


# Reductions through tl.reduce with combine functions of this module: tl.sum/tl.max are jitted in Triton's
# own standard library when triton is imported, so they break the interpreter where TRITON_INTERPRET was
# set only after that import (as a test does); these are defined when this module is.
@triton.jit
def _add(x, y):
    return x + y


@triton.jit
def _greater(x, y):
    return tl.maximum(x, y)


@triton.jit
def _lesser(x, y):
    return tl.minimum(x, y)


@triton.jit
def reduce_sum(x, axis):
    return tl.reduce(x, axis, _add)


@triton.jit
def reduce_max(x, axis):
    return tl.reduce(x, axis, _greater)


@triton.jit
def reduce_min(x, axis):
    return tl.reduce(x, axis, _lesser)


@triton.jit
def _decode32(x, EMIN: tl.constexpr):
    """(negative, significand (0 for zeros and non-finite), last-place exponent, E_fmt, zero or non-finite,
    NaN, infinite) of binary32 values, the integers as int32."""
    bits = x.to(tl.int32, bitcast=True)
    neg = bits < 0
    ef = (bits >> 23) & 0xFF
    fr = bits & 0x7FFFFF
    nonfinite = ef == 255
    nan = nonfinite & (fr != 0)
    inf = nonfinite & (fr == 0)
    zero = ((bits & 0x7FFFFFFF) == 0) | nonfinite
    mant = tl.where(ef > 0, fr | 0x800000, fr)
    mant = tl.where(zero, 0, mant)
    lsb = tl.where(ef > 0, ef - 150, -149)
    e = tl.where(nonfinite, EMIN, tl.maximum(ef - 127, EMIN))
    return neg, mant, lsb, e, zero, nan, inf


@triton.jit
def decode(x, EMIN: tl.constexpr):
    """:func:`_decode32` with the significand and exponents as int64."""
    neg, mant, lsb, e, zero, nan, inf = _decode32(x, EMIN)
    return neg, mant.to(tl.int64), lsb.to(tl.int64), e.to(tl.int64), zero, nan, inf


@triton.jit
def _cut_to(mag, sh, neg, FLOOR: tl.constexpr, LIM: tl.constexpr):
    """mag * 2**-sh (mag >= 0) cut toward zero, or toward minus infinity for ``neg`` terms under FLOOR; a
    left shift where sh < 0; shifts clamped to LIM (62 for int64 mag < 2**53, 30 for int32 mag < 2**30)."""
    right = tl.minimum(tl.maximum(sh, 0), LIM)
    left = tl.minimum(tl.maximum(-sh, 0), LIM)
    t = (mag << left) >> right
    if FLOOR:
        t = tl.where(neg & (sh > 0), (mag + ((1 << right) - 1)) >> right, t)
    return t


@triton.jit
def cut(mag, sh, neg, FLOOR: tl.constexpr):
    """mag * 2**-sh (mag >= 0, int64 < 2**53) cut toward zero, or toward minus infinity for ``neg``
    terms under FLOOR; a left shift where sh < 0."""
    return _cut_to(mag, sh, neg, FLOOR, 62)


@triton.jit
def lead(mag):
    """floor(log2 mag) of integers 0 < mag < 2**53 (exact through float64)."""
    return ((mag.to(tl.float64).to(tl.int64, bitcast=True) >> 52) & 0x7FF) - 1023


@triton.jit
def pow2(e):
    """2.0**e as float64 for integer e in [-1022, 1023], built from its bits."""
    return ((e + 1023) << 52).to(tl.float64, bitcast=True)


@triton.jit
def _over(zero, FMAX: tl.constexpr, HOW: tl.constexpr):
    """What a result beyond the largest finite value becomes: 0 that value, 1 infinity, 2 NaN."""
    if HOW == 0:
        return zero + FMAX
    elif HOW == 1:
        return zero + float("inf")
    else:
        return zero + float("nan")


@triton.jit
def round_value(mag, unit, neg, R: tl.constexpr):
    """The value (float64, signed: -0 for a negative zero) of ``(-1)**neg * mag * 2**unit`` (int64 0 <= mag < 2**53)
    rounded once as ``R`` says (:class:`blockfma.engine.triton.Rounding`): into a format of precision P (MODE: 0 toward
    zero, 1 nearest even, 2 nearest away, 3 up, 4 down, 5 odd), with subnormals or flush-to-zero (tininess before
    rounding), and beyond its largest finite value FMAX what OVER_POS / OVER_NEG say (0 FMAX, 1 infinity, 2 NaN)."""
    P: tl.constexpr = R.P
    EMIN: tl.constexpr = R.EMIN
    FMAX: tl.constexpr = R.FMAX
    MODE: tl.constexpr = R.MODE
    SUBNORMALS: tl.constexpr = R.SUBNORMALS
    OVER_POS: tl.constexpr = R.OVER_POS
    OVER_NEG: tl.constexpr = R.OVER_NEG
    e = lead(tl.maximum(mag, 1)) + unit
    if SUBNORMALS:
        q = tl.maximum(e, EMIN) - (P - 1)
    else:
        q = e - (P - 1)
    drop = tl.minimum(tl.maximum(q - unit, 0), 60)
    q = unit + drop
    t = mag >> drop
    rem = mag - (t << drop)
    half = (1 << drop) >> 1
    inexact = rem != 0
    if MODE == 0:
        r = t
    elif MODE == 1:
        r = t + ((drop > 0) & ((rem > half) | ((rem == half) & ((t & 1) == 1)))).to(tl.int64)
    elif MODE == 2:
        r = t + ((drop > 0) & (rem >= half)).to(tl.int64)
    elif MODE == 3:
        r = t + (inexact & ~neg).to(tl.int64)
    elif MODE == 4:
        r = t + (inexact & neg).to(tl.int64)
    else:
        r = t | inexact.to(tl.int64)
    v = r.to(tl.float64) * pow2(q)
    zero = (mag * 0).to(tl.float64)  # +0 (v may be infinite below)
    if OVER_POS == OVER_NEG:
        over = _over(zero, FMAX, OVER_POS)
    else:
        over = tl.where(neg, _over(zero, FMAX, OVER_NEG), _over(zero, FMAX, OVER_POS))
    v = tl.where(v > FMAX, over, v)
    if not SUBNORMALS:
        v = tl.where((mag > 0) & (e < EMIN), zero, v)
    return tl.where(neg, -v, v)


@triton.jit
def _nan_of(nan_a, inf_a, za, nan_b, inf_b, zb):
    # the products that are NaN (rules.fused_specials), of factors' flags already broadcast to one shape: a NaN
    # factor, or an infinity times a (finite) 0
    return nan_a | nan_b | (inf_a & (zb & ~inf_b & ~nan_b)) | ((za & ~inf_a & ~nan_a) & inf_b)


@triton.jit
def product_nan(nan_a, inf_a, za, nan_b, inf_b, zb):
    # the (tile, L, tile) products that are NaN (:func:`_nan_of`)
    return _nan_of(nan_a[:, :, None], inf_a[:, :, None], za[:, :, None], nan_b[None, :, :], inf_b[None, :, :],
                   zb[None, :, :])


@triton.jit
def with_specials(v, plus, nan, pos, ninf):
    # v where no special value arose, else NaN (also for +inf meeting -inf), +inf or -inf; as float32
    nan = nan | (pos & ninf)
    v = tl.where(nan, plus + float("nan"), tl.where(pos, plus + float("inf"), tl.where(ninf, plus - float("inf"), v)))
    return v.to(tl.float32)


@triton.jit
def zero_pick(v, s, plus, only_zeros, all_neg, any_neg, B: tl.constexpr):
    # The result where the block's exact sum s is zero (rules.exact_zero): the IEEE sign (-0 only if every
    # term is a zero (only_zeros) of sign - (all_neg), or, rounding toward -inf (MODE 4), if any is (any_neg)),
    # else +0; -0 becomes +0 where the format has none.  The flags count C in.  B: the block's parameters.
    NEG_ZERO: tl.constexpr = B.R.NEG_ZERO
    if B.IEEE_ZERO and NEG_ZERO:
        if B.R.MODE == 4:
            zneg = any_neg | ~only_zeros
        else:
            zneg = only_zeros & all_neg
        v = tl.where(s == 0, tl.where(zneg, -plus, plus), v)
    else:
        v = tl.where(s == 0, plus, v)
    if not NEG_ZERO:
        v = tl.where(v == 0, plus, v)
    return v


@triton.jit
def _zero_sign(v, s, plus, na, nb, nc, nan_a, inf_a, nan_b, inf_b, nan_c, inf_c, pzero, czero, live3, B: tl.constexpr):
    # The result where the block's exact sum s is zero (rules.exact_zero: non-finite operands count as +0),
    # by :func:`zero_pick` over the (tile, L, tile) products and C.
    only_zeros = czero
    all_neg = czero
    any_neg = czero
    if B.IEEE_ZERO and B.R.NEG_ZERO:
        sa = na & ~(nan_a | inf_a)
        sb = nb & ~(nan_b | inf_b)
        sc = nc & ~(nan_c | inf_c)
        only_zeros, all_neg, any_neg = term_zero_flags(pzero, sa[:, :, None] ^ sb[None, :, :], live3, czero, sc)
    return zero_pick(v, s, plus, only_zeros, all_neg, any_neg, B)


@triton.jit
def term_zero_flags(tzero, tneg, live3, czero, sc):
    """The flags of :func:`zero_pick` from a block's (tile, T, tile) terms over their live slots: whether
    each is zero (``tzero``) and its sign (``tneg``), and C's (``czero``, ``sc``): every term a zero, every
    one of sign -, any of sign -."""
    only_zeros = (reduce_min(tl.where(live3, tzero.to(tl.int32), 1), axis=1) == 1) & czero
    all_neg = (reduce_min(tl.where(live3, tneg.to(tl.int32), 1), axis=1) == 1) & sc
    any_neg = (reduce_max(tl.where(live3, tneg.to(tl.int32), 0), axis=1) == 1) | sc
    return only_zeros, all_neg, any_neg


@triton.jit
def products(na, ma, la, za, nb, mb, lb, zb):
    """The (BM, L, BN) products of decoded a (BM, L) and b (L, BN): exact int64 significand products, the
    factors' signs (xor, as given: also for specials), last places (la + lb), and whether a factor is a
    zero (or a non-finite value, decoded as one)."""
    return (ma[:, :, None] * mb[None, :, :], na[:, :, None] ^ nb[None, :, :], la[:, :, None] + lb[None, :, :],
            za[:, :, None] | zb[None, :, :])


@triton.jit
def fused_value(s, unit, WRAP: tl.constexpr, R: tl.constexpr):
    """A truncated-fused block's int64 sum s of cut terms at ``2**unit``, wrapped at WRAP bits where the model has carry
    bits (keeping its sign, fmod), rounded once into the result format: (value float64, the wrapped sum, +0 float64)."""
    if WRAP > 0:  # carry bits: the sum wraps, keeping its sign (fmod)
        ms = tl.where(s < 0, -s, s) & ((1 << WRAP) - 1)
        s = tl.where(s < 0, -ms, ms)
    neg = s < 0
    mag = tl.where(neg, -s, s)
    v = round_value(mag, unit, neg, R)
    return v, s, (s * 0).to(tl.float64)


@triton.jit
def widen(x, STANDIN: tl.constexpr):
    """A or B loaded in its dtype (``triton.OPERAND_DTYPES``) as float32, exactly: the conversion instruction on a
    GPU; under the interpreter (STANDIN), whose conversions lose fp8 NaN and infinities and bf16 subnormals, the
    value built from the bits (E exponent and M fraction bits; e4m3fn has no infinities, NaN S.1111.111)."""
    if x.dtype == tl.float32 or not STANDIN:  # (static branches: Triton compiles the code after a return too)
        y = x.to(tl.float32)
    else:
        BITS: tl.constexpr = x.dtype.primitive_bitwidth
        E: tl.constexpr = 8 if x.dtype == tl.bfloat16 else 4 if x.dtype == tl.float8e4nv else 5
        M: tl.constexpr = BITS - 1 - E
        c = x.to(tl.int16 if BITS == 16 else tl.int8, bitcast=True).to(tl.int32) & ((1 << BITS) - 1)
        f, m = (c >> M) & ((1 << E) - 1), c & ((1 << M) - 1)
        e = (tl.maximum(f, 1) + 1 - (1 << (E - 1)) - M).to(tl.int64)  # the last place (bias 2**(E - 1) - 1)
        v = tl.where(f > 0, m | (1 << M), m).to(tl.float64) * pow2(e)
        if x.dtype == tl.float8e4nv:
            v = tl.where((f == (1 << E) - 1) & (m == (1 << M) - 1), float("nan"), v)
        else:
            v = tl.where(f == (1 << E) - 1, tl.where(m == 0, float("inf"), float("nan")), v)
        y = tl.where(c >> (BITS - 1) != 0, -v, v).to(tl.float32)
    return y


@triton.jit
def load_block(t, k0, j, B: tl.constexpr):
    """The operands of the block of products j .. j + L of the step at k0 (through the step's product order
    under ORDERED) on the general path: a (BM, LP), b (LP, BN) of the tile ``t`` (lanes from L on, and
    products past K, the plan's +0 padding, are +0)."""
    if B.ORDERED:
        kk = k0 + tl.load(t.order_ptr + j + t.lane, mask=t.lane < B.L, other=0)
    else:
        kk = k0 + j + t.lane
    live = (kk < t.K) & (t.lane < B.L)
    a = tl.load(t.a_ptr + t.rm[:, None] * t.sam + kk[None, :] * t.sak, mask=(t.rm[:, None] < t.M) & live[None, :],
                other=0.0)
    b = tl.load(t.b_ptr + kk[:, None] * t.sbk + t.rn[None, :] * t.sbn, mask=live[:, None] & (t.rn[None, :] < t.N),
                other=0.0)
    return widen(a, B.STANDIN), widen(b, B.STANDIN)


@triton.jit
def fused_block(t, k0, j, d, B: tl.constexpr):
    """The truncated-fused or late-c block of products j .. j + L of the step at k0 of the tile ``t`` with C
    ``d`` (BM, BN), on the fast path (FAST: :func:`_fast_block`, :func:`_fast_late_block`) or the general one
    (:func:`_general_block`, :func:`_general_late_block`): its rounded result, float32."""
    LATE: tl.constexpr = B.FAMILY == "late-c"
    if B.FAST and LATE:
        d = _fast_late_block(t, k0, j, d, B)
    elif B.FAST:
        d = _fast_block(t, k0, j, d, B)
    else:
        a, b = load_block(t, k0, j, B)
        if LATE:
            d = _general_late_block(a, b, d, t.lane, B)
        else:
            d = _general_block(a, b, d, t.lane, B)
    return d


@triton.jit
def _general_block(a, b, d, lane, B: tl.constexpr):
    """One truncated-fused block: a (BM, LP) and b (LP, BN) binary32 operands (lanes from L on stand
    for no product), d (BM, BN) its C; the rounded result as float32 (BM, BN)."""
    EZ: tl.constexpr = B.EZ
    na, ma, la, ea, za, nan_a, inf_a = decode(a, B.A_EMIN)
    nb, mb, lb, eb, zb, nan_b, inf_b = decode(b, B.B_EMIN)
    nc, mc, lc, ec, zc, nan_c, inf_c = decode(d, B.C_EMIN)
    pm, pneg, pl, pzero = products(na, ma, la, za, nb, mb, lb, zb)  # (BLOCK_M, LP, BLOCK_N)
    if B.NORMALIZED:
        ep = tl.where(pm == 0, EZ, lead(tl.maximum(pm, 1)) + pl)
    else:
        ep = tl.where(pzero, EZ, ea[:, :, None] + eb[None, :, :])
    if B.LP != B.L:  # lanes beyond L stand for no product at all
        ep = tl.where((lane < B.L)[None, :, None], ep, -(1 << 30))
    s, unit = aligned_sum(pm, pneg & ~pzero, pl, ep, nc, mc, lc, ec, zc, B)
    R: tl.constexpr = B.R  # passed on: a constexpr by name (Triton 3.6 passes no plain objects)
    v, s, plus = fused_value(s, unit, B.WRAP, R)
    # an exactly zero sum: +0, or the IEEE sign over the finite-replaced products and C
    # (rules.exact_zero: non-finite operands count as +0)
    v = _zero_sign(v, s, plus, na, nb, nc, nan_a, inf_a, nan_b, inf_b, nan_c, inf_c, pzero, zc,
                   (lane < B.L)[None, :, None], B)
    nan, pos, ninf = special_flags(nan_a, inf_a, za, nan_b, inf_b, zb, pneg, nc, nan_c, inf_c, B.SPECIALS)
    return with_specials(v, plus, nan, pos, ninf)


@triton.jit
def aligned_sum(tm, tneg, tp, te, nc, mc, lc, ec, zc, B: tl.constexpr):
    """The truncated-fused sum of a block's (tile, T, tile) terms and C: terms of magnitude ``tm`` (int64)
    at the last place ``tp``, of sign ``tneg``, at exponent ``te`` (e_zero for zero terms, far below any
    for slots that hold no term), and C (decoded, int64) at its exponent (e_zero if zero); every one cut at
    ``2**(emax - F)`` (toward zero, or minus infinity under FLOOR) and summed: (int64 sum, that unit)."""
    emax = tl.maximum(reduce_max(te, axis=1), tl.where(zc, B.EZ, ec))
    unit = emax - B.F
    t = cut(tm, unit[:, None, :] - tp, tneg, B.FLOOR)
    s = reduce_sum(tl.where(tneg, -t, t), axis=1)
    cneg_f = nc & ~zc
    tc = cut(mc, unit - lc, cneg_f, B.FLOOR)
    return s + tl.where(cneg_f, -tc, tc), unit


@triton.jit
def special_flags(nan_a, inf_a, za, nan_b, inf_b, zb, pneg, nc, nan_c, inf_c, SPECIALS: tl.constexpr):
    """The (NaN, +inf, -inf) flags of :func:`with_specials` for a block (rules.fused_specials, on the
    operands as given): C's, and under SPECIALS its (tile, L, tile) products' (signs ``pneg``)."""
    nan = nan_c
    pos = inf_c & ~nc
    ninf = inf_c & nc
    if SPECIALS:
        pnan = product_nan(nan_a, inf_a, za, nan_b, inf_b, zb)
        pinf = (inf_a[:, :, None] | inf_b[None, :, :]) & ~pnan
        nan = nan | (reduce_max(pnan.to(tl.int32), axis=1) == 1)
        pos = pos | (reduce_max((pinf & ~pneg).to(tl.int32), axis=1) == 1)
        ninf = ninf | (reduce_max((pinf & pneg).to(tl.int32), axis=1) == 1)
    return nan, pos, ninf


@triton.jit
def _shift_floor(x, k):
    """floor(x * 2**k) of signed int64 x (arithmetic shifts; |k| clamped to 62)."""
    return tl.where(k >= 0, x << tl.minimum(tl.maximum(k, 0), 62), x >> tl.minimum(tl.maximum(-k, 0), 62))


@triton.jit
def _late_join(s0, s1, top0, top1):
    """Two groups' int64 sums (cut at F bits below their tops) floored to the unit of the larger top: (the
    sum, that top e_dot)."""
    e_dot = tl.maximum(top0, top1)
    return _shift_floor(s0, top0 - e_dot) + _shift_floor(s1, top1 - e_dot), e_dot


@triton.jit
def _late_value(s, e_dot, nc, mc, lc, ec, zc, B: tl.constexpr):
    """A late-c block from its products' int64 sum s at the unit 2**(e_dot - F) and C (decoded, int64): C
    floored at F bits and added at F2 bits below the common exponent (dropped, with two groups, where it lies
    below the products' unit), the sum cut at F2 bits below its own leading bit (``late_cut="leading"``),
    one rounding: (value float64, the exact sum, +0 float64, C dropped)."""
    F: tl.constexpr = B.F
    ecz = tl.where(zc, B.C_EMIN, ec)
    big_e = tl.maximum(e_dot, ecz)
    dropped = (ecz < big_e - F - 1) & (B.GROUPS > 1)
    G: tl.constexpr = B.F2 + B.LEADING
    s = _shift_floor(s, e_dot - big_e + G - F)
    msc = tl.where(dropped, 0, tl.where(nc, -mc, mc))
    cterm = _shift_floor(msc, lc + F - big_e) << (G - F)
    total = s + cterm
    if B.LEADING:
        mag0 = tl.where(total < 0, -total, total)
        top = lead(tl.maximum(mag0, 1)) + big_e - G
        sh = tl.minimum(tl.maximum(tl.maximum(top, B.C_EMIN) - B.F2 - (big_e - G), 0), 62)
        total = tl.where(total == 0, total, (total >> sh) << sh)
    neg = total < 0
    mag = tl.where(neg, -total, total)
    R: tl.constexpr = B.R  # passed on: a constexpr by name (Triton 3.6 passes no plain objects)
    v = round_value(mag, big_e - G, neg, R)
    return v, total, (total * 0).to(tl.float64), dropped


@triton.jit
def _general_late_block(a, b, d, lane, B: tl.constexpr):
    """One late-c block (AMD CDNA3, :func:`blockfma.engine.array.late_c`): the products cut toward zero at F bits below
    their maximum exponent (per group of lanes, the groups' sums then floored at the dot's unit), C added at F2 bits
    below the common exponent (floored), the sum cut again at F2 bits below its own leading bit
    (``late_cut="leading"``), one rounding.  A finite product of 2**(C_EMAX + 1) or more is an infinity."""
    F: tl.constexpr = B.F
    na, ma, la, ea, za, nan_a, inf_a = decode(a, B.A_EMIN)
    nb, mb, lb, eb, zb, nan_b, inf_b = decode(b, B.B_EMIN)
    nc, mc, lc, ec, zc, nan_c, inf_c = decode(d, B.C_EMIN)
    live3 = (lane < B.L)[None, :, None]
    pm, pneg, pl, pzero = products(na, ma, la, za, nb, mb, lb, zb)
    ep = tl.where(pzero | ~live3, -(1 << 20), ea[:, :, None] + eb[None, :, :])
    pneg_f = pneg & ~pzero
    odd = ((lane % 2) == 1)[None, :, None]
    if B.GROUPS == 1:
        e_dot = reduce_max(ep, axis=1)
        tp = cut(pm, e_dot[:, None, :] - F - pl, pneg_f, False)
        s = reduce_sum(tl.where(pneg_f, -tp, tp), axis=1)
    else:
        top0 = reduce_max(tl.where(odd, -(1 << 20), ep), axis=1)
        top1 = reduce_max(tl.where(odd, ep, -(1 << 20)), axis=1)
        t0 = cut(pm, top0[:, None, :] - F - pl, pneg_f, False)
        t1 = cut(pm, top1[:, None, :] - F - pl, pneg_f, False)
        s0 = reduce_sum(tl.where(odd, 0, tl.where(pneg_f, -t0, t0)), axis=1)
        s1 = reduce_sum(tl.where(odd, tl.where(pneg_f, -t1, t1), 0), axis=1)
        s, e_dot = _late_join(s0, s1, top0, top1)
    v, total, plus, dropped = _late_value(s, e_dot, nc, mc, lc, ec, zc, B)
    v = _zero_sign(v, total, plus, na, nb, nc, nan_a, inf_a, nan_b, inf_b, nan_c, inf_c, pzero, zc | dropped, live3, B)
    nan = nan_c
    pos = inf_c & ~nc
    ninf = inf_c & nc
    pover = (pm > 0) & (lead(tl.maximum(pm, 1)) + pl >= B.C_EMAX + 1) & live3
    if B.SPECIALS:
        pnan = product_nan(nan_a, inf_a, za, nan_b, inf_b, zb)
        pinf = ((inf_a[:, :, None] | inf_b[None, :, :]) | pover) & ~pnan
        nan = nan | (reduce_max(pnan.to(tl.int32), axis=1) == 1)
    else:
        pinf = pover
    pos = pos | (reduce_max((pinf & ~pneg).to(tl.int32), axis=1) == 1)
    ninf = ninf | (reduce_max((pinf & pneg).to(tl.int32), axis=1) == 1)
    return with_specials(v, plus, nan, pos, ninf)


# ---- the fast path: one (BLOCK_M, BLOCK_N) register tile per lane, float32 products, int32 terms ----------------
#
# Taken where the host (blockfma.engine.triton.fast_constants) has shown it exact for the call's operands: the
# significands multiply within 24 bits (fp16, bf16, tf32, fp8 inputs), every nonzero |a|, |b| is a binary32
# normal and every nonzero product lies in [2**(F - 127), 2**128).  Then a*b is exact in binary32, the block's
# scale 2**(F - emax) is a binary32 normal wherever a nonzero product exists (emax is at least that product's
# exponent), and a*b * 2**(F - emax) is exact and below 2**(F + 2) (|a*b| < 2**(E_a + E_b + 2)): its
# conversion to int32, which truncates toward zero, IS the cut (a floor for FLOOR; a result that underflowed,
# of magnitude below 1 anyway, truncates to 0 and floors to -1 for a negative product).  Int32 sums of CHUNK
# such terms cannot overflow; longer sums and C go on in int64 (SUM64).  Nothing here depends on the GPU
# flushing subnormals or fusing multiplies: every float32 operation is exact on normal operands.  A zero (or,
# under SPECIALS, non-finite) factor is no product (NONE); its e_zero enters only where it can matter
# (EZ_LIVE); C's term, the rounding, zero signs and specials are the general path's helpers.  The passes are
# loops over lanes (an unrolled block held too many registers: see benchmarks/bench_gpu.py --ptxas).

NONE = tl.constexpr(-(1 << 20))  # the exponent of no product (zeros and non-finite factors): below any real one
CODE_BIAS = tl.constexpr(383)  # the first pass's codes E_fmt + 383 (triton._exponent_codes) lie in [257, 510]


@triton.jit
def load_lane(a_rows, b_cols, order_ptr, k0, j, l, K, sak, sbk, ORDERED: tl.constexpr, CACHE: tl.constexpr,
              OTHER: tl.constexpr, STANDIN: tl.constexpr):
    """The A column (BLOCK_M,) and B row (BLOCK_N,) of lane l of the block at step k0, offset j (through the step's
    product order under ORDERED), from the tile's row pointers of A and column pointers of B (rows and columns past M
    and N repeat the last one: their results are not stored); products past K (None: there are none, no masks) are the
    plan's +0 padding (their values: OTHER).  The two passes load with different CACHE modifiers, so that the compiler
    reloads (from L1) rather than holding a whole block's columns and rows in registers from one pass to the next."""
    if ORDERED:
        base = k0
        kl = tl.load(order_ptr + j + l + tl.full([1], 0, tl.int32))
    else:
        base = k0 + j
        kl = l + tl.full([1], 0, tl.int32)  # a tensor (1,) also where l is a Python int
    live, other = (None, None) if K is None else (base + kl < K, OTHER)
    a = tl.load((a_rows + base * sak) + kl * sak, mask=live, other=other, cache_modifier=CACHE)  # (a static l: an
    b = tl.load((b_cols + base * sbk) + kl * sbk, mask=live, other=other, cache_modifier=CACHE)  # offset; pass 0)
    return widen(a, STANDIN), widen(b, STANDIN)


@triton.jit
def lane_exp(x, EMIN: tl.constexpr, SPECIALS: tl.constexpr):
    """(E_fmt + 127 of binary32 values the fast path holds (finite nonzero ones are normal: the exponent field,
    raised to EMIN + 127), NONE for zeros and (SPECIALS) non-finite values (int32); which are those).  Biased:
    the block subtracts 2 * 127 once from its largest sum, not per lane and value."""
    ef = (x.to(tl.int32, bitcast=True) >> 23) & 0xFF
    none = ef == 0
    if SPECIALS:
        none = none | (ef == 255)
    return tl.where(none, NONE, tl.maximum(ef, EMIN + 127)), none


@triton.jit
def scale32(e):
    """2.0**e as float32 (int32 e clamped to [-126, 127]: only reached where every product is zero)."""
    return ((tl.minimum(tl.maximum(e, -126), 127) + 127) << 23).to(tl.float32, bitcast=True)


@triton.jit
def _term(p, scale, FLOOR: tl.constexpr):
    """The cut int32 terms of exact float32 products p (BLOCK_M, BLOCK_N) at the unit 1/scale: p * scale
    truncated toward zero by the conversion, or floored (FLOOR)."""
    x = p * scale
    if FLOOR:
        t = tl.floor(x).to(tl.int32)
        t = tl.where((p < 0) & (t == 0), -1, t)  # a negative product whose scaled value underflowed
    else:
        t = x.to(tl.int32)
    return t


@triton.jit
def lane_specials(a, b, A_EMIN: tl.constexpr, B_EMIN: tl.constexpr, nan, pos, ninf):
    """One lane's products folded into the special flags of :func:`with_specials` (rules.fused_specials),
    and a, b with their non-finite values as +0 (the finite-replaced operands, rules.exact_zero)."""
    na, ma, la, ea, za, nan_a, inf_a = _decode32(a, A_EMIN)
    nb, mb, lb, eb, zb, nan_b, inf_b = _decode32(b, B_EMIN)
    pn = _nan_of(nan_a[:, None], inf_a[:, None], za[:, None], nan_b[None, :], inf_b[None, :], zb[None, :])
    pi = (inf_a[:, None] | inf_b[None, :]) & ~pn
    pg = na[:, None] ^ nb[None, :]
    return tl.where(za, 0.0, a), tl.where(zb, 0.0, b), nan | pn, pos | (pi & ~pg), ninf | (pi & pg)


@triton.jit
def _zero_flags(bits_or, bits_and, czero, sc):
    """The flags of :func:`zero_pick` from the OR and the AND of the bit patterns of a block's exact float32
    products of finite-replaced operands (their sign bits are the IEEE signs, zeros included): every
    product a zero (and C, ``czero``), every one of sign - (and C's, ``sc``), any of sign -."""
    return czero & ((bits_or & 0x7FFFFFFF) == 0), (bits_and < 0) & sc, (bits_or < 0) | sc


@triton.jit
def _max_sum16(acc, a, b, STANDIN: tl.constexpr):
    """max(acc, a + b) in each 16-bit half of int32 words whose halves and sums lie below 2**15: PTX's add.u16x2
    and max.u16x2 (one VIADDMNMX.U16x2 on sm_90), their exact stand-in under the interpreter (STANDIN)."""
    a, b = tl.broadcast_to(a, acc.shape), tl.broadcast_to(b, acc.shape)
    if STANDIN:
        s = a + b  # (no carry out of the low half)
        return tl.maximum(acc & 0xFFFF, s & 0xFFFF) | (tl.maximum(acc >> 16, s >> 16) << 16)
    return tl.inline_asm_elementwise("{.reg .b32 t; add.u16x2 t, $1, $2; max.u16x2 $0, t, $3;}", "=r,r,r,r",
                                     [a, b, acc], dtype=tl.int32, is_pure=True, pack=1)


@triton.jit
def _half_top(h):
    """E_a + E_b of a 16-bit half of the first pass's maxima (:func:`_pair_max`), NONE where no product."""
    return tl.where(h >= 2 * (CODE_BIAS - 126), h - 2 * CODE_BIAS, NONE)


@triton.jit
def _pair_max(t, k0, j, d, B: tl.constexpr):
    """The first pass of a fast block, two lanes at a time: per 16-bit half (lanes 2i and 2i + 1) the largest
    sum of the factors' codes (triton._exponent_codes; one with a code below CODE_BIAS - 126 is no product) in
    C's register layout (coalesced, a few rows and columns per thread, not Triton's default for a new tensor);
    and (EZ_LIVE) which rows of A and columns of B hold a zero factor in the block (a zero product there)."""
    LW: tl.constexpr = (B.L + 1) // 2
    acc = tl.maximum(tl.minimum(d.to(tl.int32, bitcast=True) | 0x7FFFFFFF, 0), 0)  # 0 (of C's layout)
    zrow, zcol = t.rm < 0, t.rn < 0
    w0 = (k0 + j) // B.L * LW  # the block's first word
    for i in range(LW):
        wa = tl.load(t.ea_rows + w0 + i)
        wb = tl.load(t.eb_cols + (w0 + i) * t.sebk)
        acc = _max_sum16(acc, wa[:, None], wb[None, :], B.STANDIN)
        if B.EZ_LIVE:
            zrow = zrow | ((wa & 0xFFFF) == 0) | ((wa >> 16) == 0)
            zcol = zcol | ((wb & 0xFFFF) == 0) | ((wb >> 16) == 0)
    return acc, zrow, zcol


@triton.jit
def _no_flags(d):
    """The second pass's flags before its first lane, of C's shape: no NaN, +inf or -inf product, and the
    OR and the AND of no product's bit patterns."""
    no = tl.full(d.shape, 0, tl.int1)
    return no, no, no, tl.full(d.shape, 0, tl.int32), tl.full(d.shape, -1, tl.int32)


@triton.jit
def _lane_product(t, k0, j, l, nan, pos, ninf, bits_or, bits_and, B: tl.constexpr):
    """The second pass's lane l: its exact float32 products (BLOCK_M, BLOCK_N) of finite-replaced operands,
    its special flags folded into nan, pos, ninf, and (where exact zeros take the IEEE sign) its products' bit
    patterns into the block's OR and AND."""
    a, b = load_lane(t.a_rows, t.b_cols, t.order_ptr, k0, j, l, t.KM, t.sak, t.sbk, B.ORDERED, ".ca", 0.0, B.STANDIN)
    if B.SPECIALS:
        a, b, nan, pos, ninf = lane_specials(a, b, B.A_EMIN, B.B_EMIN, nan, pos, ninf)
    p = a[:, None] * b[None, :]
    if B.IEEE_ZERO and B.R.NEG_ZERO:
        bits_or = bits_or | p.to(tl.int32, bitcast=True)
        bits_and = bits_and & p.to(tl.int32, bitcast=True)
    return p, nan, pos, ninf, bits_or, bits_and


@triton.jit
def _block_emax(t, k0, j, d, B: tl.constexpr):
    """The first pass of a fast block (:func:`_pair_max`): its largest exponent (int32, of C's shape), of its
    products (E_a + E_b), C's (e_zero for a zero C) and e_zero where a zero product may enter (EZ_LIVE)."""
    acc, zrow, zcol = _pair_max(t, k0, j, d, B)
    nc, mc, lc, ec, zc, nan_c, inf_c = _decode32(d, B.C_EMIN)
    emax = tl.maximum(_half_top(tl.maximum(acc & 0xFFFF, acc >> 16)), tl.where(zc, B.EZ, ec))
    if B.EZ_LIVE:  # a zero product's e_zero may be the largest exponent where some term is not zero
        emax = tl.maximum(emax, tl.where(zrow[:, None] | zcol[None, :], B.EZ, NONE))
    return emax


@triton.jit
def _fast_block(t, k0, j, d, B: tl.constexpr):
    """:func:`_general_block` on the fast path (see above): two passes over the block's L lanes (loops, not unrolled: an
    unrolled block holds too many registers), the first for its largest exponent, the second for the cut terms, by
    float32 products and int32 conversions or (GRID) by one rounding FMA per product into an accumulator on the cut's
    grid (:func:`_grid_sum`); C's term, the sum's rounding, zero signs and special values as there."""
    emax = _block_emax(t, k0, j, d, B)
    nan, pos, ninf, bits_or, bits_and = _no_flags(d)  # (C's are decoded again after the loop: fewer live registers)
    if B.GRID:
        s = _grid_sum(t, k0, j, emax - B.F, B)
    else:
        CHUNK: tl.constexpr = B.CHUNK
        U: tl.constexpr = 2 if CHUNK % 2 == 0 and B.L % 2 == 0 else 1
        scale = scale32(B.F - emax)
        s32 = tl.full(d.shape, 0, tl.int32)
        s64 = tl.full(d.shape, 0, tl.int64)
        for c in range(0, B.L, CHUNK):  # int32 sums of at most CHUNK (<= L) terms, carried on in int64 between them
            if CHUNK < B.L:
                s64 = s64 + s32.to(tl.int64)  # (nothing at c = 0)
                s32 = s32 * 0
            for l in range(c, min(c + CHUNK, B.L), U):  # U lanes an iteration: static offsets, sums of three
                for i in tl.static_range(U):
                    p, nan, pos, ninf, bits_or, bits_and = _lane_product(t, k0, j + l, i, nan, pos, ninf, bits_or,
                                                                         bits_and, B)
                    s32 = s32 + _term(p, scale, B.FLOOR)
        s = s64 + s32.to(tl.int64) if B.SUM64 else s32
    unit = emax - B.F
    nc, mc, lc, ec, zc, nan_c, inf_c = _decode32(d, B.C_EMIN)
    cneg_f = nc & ~zc
    tc = _cut_to(mc, unit - lc, cneg_f, B.FLOOR, 30)
    s = s.to(tl.int64) + tl.where(cneg_f, -tc, tc).to(tl.int64)
    R: tl.constexpr = B.R  # passed on: a constexpr by name (Triton 3.6 passes no plain objects)
    v, s, plus = fused_value(s, unit.to(tl.int64), B.WRAP, R)
    if B.GRID and B.IEEE_ZERO and B.R.NEG_ZERO:
        # the grid sum keeps no product signs: a tile with an exactly zero sum reads them in one more pass
        if reduce_max(reduce_max((s == 0).to(tl.int32), 1), 0) == 1:
            for l in range(B.L):
                p, nan, pos, ninf, bits_or, bits_and = _lane_product(t, k0, j + l, 0, nan, pos, ninf, bits_or, bits_and,
                                                                     B)
    only_zeros, all_neg, any_neg = _zero_flags(bits_or, bits_and, zc, nc & ~(nan_c | inf_c))
    v = zero_pick(v, s, plus, only_zeros, all_neg, any_neg, B)
    return with_specials(v, plus, nan | nan_c, pos | (inf_c & ~nc), ninf | (inf_c & nc))


# ---- the grid path: one FMA rounding toward zero per product --------------------------------------------------
#
# Taken where the host (blockfma.engine.triton.grid_path) has shown it exact: the fast path's
# conditions, no NaN or infinity among A and B, product exponents E_a + E_b ("max", not "normalized"),
# truncated-fused, F + ceil(log2 L) <= 20, and (cutting toward zero) the count below.
#
# Exactness.  The block's terms are x_i = a_i b_i 2**-u cut to integers (toward zero, or toward minus infinity
# under FLOOR), u = emax - F.  Each |a_i b_i| < 2**(E_a + E_b + 2) <= 2**(emax + 2), so |x_i| < 2**(F + 2), and
# any partial sum of L of them is below L 2**(F + 2) <= 2**22 units.  A binary32 accumulator that starts at
# O = 1.5 * 2**(u + 23) therefore stays in the binade [2**(u + 23), 2**(u + 24)), whose last place is 2**u: every
# value it holds is O plus an integer number of units, and FMA(a, b, acc) rounded toward zero is acc +
# floor(x), the product entering the FMA exactly.  The sum in units is the accumulator's bit pattern less O's
# (same sign and exponent): no conversion.  The unit's exponent is clamped into [-149, 103]: below, only where
# every product is zero (the host checks A's and B's least exponents), above, where every product is below
# one unit either way (the host checks their largest), so the integer terms are the same.
#
# The count (a cut toward zero).  A floor differs from the cut toward zero only for a negative product that is
# not on the grid, by one unit.  A value a = m_a 2**l_a with m_a odd (l_a the place of its lowest set bit)
# times b likewise is (m_a m_b) 2**(l_a + l_b), m_a m_b odd: on the grid 2**u exactly where l_a + l_b >= u.
# The host codes each value's l + bias into 0 .. 31 (63 for zeros, whose products are exact) in one byte per
# lane, four lanes to a word, and its sign in bit 7 of a second word (engine.triton._grid_codes); v = u +
# bias_a + bias_b clamped into [0, 63] keeps every comparison (below 0 every product is exact, above 62 every
# nonzero one inexact).  The bytes l_a + l_b + (128 - v) lie in [1, 254] and have bit 7 set exactly where the
# product is exact: one 32-bit addition compares four lanes, and the signs' exclusive or, masked by its
# complement, flags the negative inexact ones in bit 7.  Shifted to bit 0 and summed, a byte counts at most
# L / 4 flags.  The rounding instruction is PTX's fma.rz; under Triton's interpreter (no inline assembly) an
# exact stand-in computes it (:func:`fma_rz_standin`, held to Fractions by the tests, and to the instruction
# on a GPU).


@triton.jit
def fma_rz_standin(a, b, c):
    """a * b + c of binary32 values rounded once toward zero into binary32, exactly, by float64 operations
    rounded to nearest: the product is exact in float64, p + c is s + e exactly (TwoSum), and the nearest
    binary32 value r to s is one last place too far from zero exactly where s + e lies between r and zero
    (r - s is exact: they are within a factor 2).  For finite sums (the grid path has no others)."""
    p = a.to(tl.float64) * b.to(tl.float64)
    c64 = c.to(tl.float64)
    s = p + c64
    bb = s - p
    e = (p - (s - bb)) + (c64 - bb)
    r = s.to(tl.float32)
    beyond = e - (r.to(tl.float64) - s)  # the exact sum less r
    down = (beyond != 0) & ((beyond < 0) != (r < 0)) & (r != 0)  # (a zero r is the cut of a tiny sum)
    r = tl.where(down, (r.to(tl.int32, bitcast=True) - 1).to(tl.float32, bitcast=True), r)
    return tl.where(s == 0, e.to(tl.float32), r)


@triton.jit
def fma_rz(a, b, c, STANDIN: tl.constexpr):
    """a * b + c (float32, of C's shape) by one FMA rounded toward zero: PTX's fma.rz on the GPU, the exact
    :func:`fma_rz_standin` under the interpreter (STANDIN)."""
    a = tl.broadcast_to(a, c.shape)
    b = tl.broadcast_to(b, c.shape)
    if STANDIN:
        return fma_rz_standin(a, b, c)
    return tl.inline_asm_elementwise("fma.rz.f32 $0, $1, $2, $3;", "=f,f,f,f", [a, b, c], dtype=tl.float32,
                                     is_pure=True, pack=1)


@triton.jit
def _grid_sum(t, k0, j, u, B: tl.constexpr):
    """The second pass of a block on the grid path (see above): the sum of its L products cut at 2**u, in
    units (int32): the floors by one FMA per product, plus (cutting toward zero) the count of the negative
    inexact ones, read four lanes at a time from the codes of A (t.sa_rows) and B (t.sb_cols)."""
    acc = (((tl.minimum(tl.maximum(u, -149), 103) + 23 + 127) << 23) | (1 << 22)).to(tl.float32, bitcast=True)
    if B.FLOOR:
        for l in range(B.L):
            a, b = load_lane(t.a_rows, t.b_cols, t.order_ptr, k0, j + l, 0, t.KM, t.sak, t.sbk, B.ORDERED, ".ca", 0.0,
                             B.STANDIN)
            acc = fma_rz(a[:, None], b[None, :], acc, B.STANDIN)
        return (acc.to(tl.int32, bitcast=True) & 0x7FFFFF) - (1 << 22)
    U4 = (128 - tl.minimum(tl.maximum(u + B.CBIAS, 0), 63)) * 0x01010101  # per byte: 128 - v
    cnt = (u * 0).to(tl.uint32)
    kq = (k0 + j) // 4
    for q in range(B.L // 4):  # a quad of lanes: its codes, then its four products
        la4 = tl.load(t.sa_rows + (2 * (kq + q)) * t.ssak)
        sa4 = tl.load(t.sa_rows + (2 * (kq + q) + 1) * t.ssak)
        lb4 = tl.load(t.sb_cols + (2 * (kq + q)) * t.ssbk)
        sb4 = tl.load(t.sb_cols + (2 * (kq + q) + 1) * t.ssbk)
        w = la4[:, None] + lb4[None, :] + U4  # bit 7 of each byte: the lane's product is exact at the cut
        flags = ((sa4[:, None] ^ sb4[None, :]) & ~w).to(tl.uint32, bitcast=True)  # bit 7: negative and inexact
        cnt = cnt + (flags >> 7)
        for i in tl.static_range(4):
            a, b = load_lane(t.a_rows, t.b_cols, t.order_ptr, k0, j + 4 * q, i, t.KM, t.sak, t.sbk, False, ".ca", 0.0,
                             B.STANDIN)
            acc = fma_rz(a[:, None], b[None, :], acc, B.STANDIN)
    n = ((cnt * 0x01010101) >> 24).to(tl.int32)  # the four bytes' counts (each at most L / 4) summed
    return (acc.to(tl.int32, bitcast=True) & 0x7FFFFF) - (1 << 22) + n  # (its exponent field stays O's)


@triton.jit
def _fast_late_block(t, k0, j, d, B: tl.constexpr):
    """:func:`_general_late_block` on the fast path (see above; the host also keeps every product below
    2**(C_EMAX + 1), so none overflows): per group (even and odd lanes where GROUPS is 2) its top exponent,
    then its terms cut at F bits below it, summed in int32 (the host checks a group's lanes fit, and that
    GROUPS divides L); C and the rest as there."""
    GROUPS: tl.constexpr = B.GROUPS
    acc, zrow, zcol = _pair_max(t, k0, j, d, B)  # lane 2i + g in group g, in half g (L is even where GROUPS is 2)
    top0, top1 = _half_top(acc & 0xFFFF), _half_top(acc >> 16)
    if GROUPS == 1:
        top0 = tl.maximum(top0, top1)
    scale0 = scale32(B.F - top0)
    scale1 = scale32(B.F - top1)
    nan, pos, ninf, bits_or, bits_and = _no_flags(d)
    s0 = tl.full(d.shape, 0, tl.int32)
    s1 = tl.full(d.shape, 0, tl.int32)
    for l in range(0, B.L, GROUPS):
        for g in tl.static_range(GROUPS):
            p, nan, pos, ninf, bits_or, bits_and = _lane_product(t, k0, j + l, g, nan, pos, ninf, bits_or, bits_and, B)
            if g == 1:
                s1 = s1 + _term(p, scale1, False)
            else:
                s0 = s0 + _term(p, scale0, False)
    if GROUPS == 1:
        s = s0.to(tl.int64)
        e_dot = top0.to(tl.int64)
    else:
        s, e_dot = _late_join(s0.to(tl.int64), s1.to(tl.int64), top0.to(tl.int64), top1.to(tl.int64))
    nc, mc, lc, ec, zc, nan_c, inf_c = decode(d, B.C_EMIN)
    v, total, plus, dropped = _late_value(s, e_dot, nc, mc, lc, ec, zc, B)
    only_zeros, all_neg, any_neg = _zero_flags(bits_or, bits_and, zc | dropped, nc & ~(nan_c | inf_c))
    v = zero_pick(v, total, plus, only_zeros, all_neg, any_neg, B)
    return with_specials(v, plus, nan | nan_c, pos | (inf_c & ~nc), ninf | (inf_c & nc))


@triton.jit
def store_output(x, R: tl.constexpr):
    """float32 values rounded into the output format as ``R`` says (nearest even; NaN, infinities and the
    sign of zero kept): the plan's store."""
    neg, mant, lsb, e, zero, nan, inf = decode(x, -126)
    v = round_value(mant, lsb, neg, R)
    if not R.NEG_ZERO:
        v = tl.where(v == 0, (mant * 0).to(tl.float64), v)
    return tl.where(nan | inf, x, v.to(tl.float32))


@triton.jit
def add_c(s, c, R: tl.constexpr):
    """s + c by one IEEE addition rounded as ``R`` says (nearest even) into its format (float32 in and out).

    Both are aligned to the unit 2**(top - 50), top the larger one's exponent (its significand then holds
    below 2**51).  A smaller one whose last bit falls below that unit is cut toward zero: it is then below
    2**(top - 27), and the sum, exact or cut, lies within 2**23 units of the larger value, which is on the
    result's grid, while the nearest midpoint of a rounding to 24 bits or fewer lies 2**25 units away (and
    the nearest power of two below the smallest normal): the rounding cannot tell them apart."""
    ns, ms, ls, es, zs, nan_s, inf_s = decode(s, -126)
    nc, mc, lc, ec, zc, nan_c, inf_c = decode(c, -126)
    top = tl.maximum(tl.where(zs, -(1 << 20), ls), tl.where(zc, -(1 << 20), lc)) + 23
    top = tl.where(zs & zc, 0, top)  # two zeros (or non-finite values): any unit in range
    unit = top - 50
    ts = cut(ms, unit - ls, False, False)
    tc = cut(mc, unit - lc, False, False)
    total = tl.where(ns, -ts, ts) + tl.where(nc, -tc, tc)
    neg = total < 0
    mag = tl.where(neg, -total, total)
    v = round_value(mag, unit, neg, R)
    zero = (total * 0).to(tl.float64)
    zneg = zs & zc & ns & nc  # an exact zero: -0 only for (-0) + (-0)
    if R.NEG_ZERO:
        v = tl.where(total == 0, tl.where(zneg, -zero, zero), v)
    else:
        v = tl.where(v == 0, zero, v)
    nan = nan_s | nan_c | (inf_s & inf_c & (ns != nc))
    inf = (inf_s | inf_c) & ~nan
    ineg = tl.where(inf_s, ns, nc)
    v = tl.where(nan, zero + float("nan"), tl.where(inf, tl.where(ineg, zero - float("inf"), zero + float("inf")), v))
    return v.to(tl.float32)
