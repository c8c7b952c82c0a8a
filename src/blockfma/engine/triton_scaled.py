"""The Triton block of the block-scaled models (the scaled-fused family: PTX ``mma.block_scale``,
``tcgen05.mma.block_scale``) for :mod:`blockfma.engine.triton` (see there, and :mod:`blockfma.engine.scaled`
for the rule it follows).

Integers only, as the truncated-fused general path of :mod:`.triton_kernel`, whose jitted helpers it calls (decode,
products, the aligned sum, the rounding, zero signs and special values: one rule, one place).  A scale never multiplies
a value in floating point: a*sa*b*sb reaches 2**±290, far beyond binary32.  Each operand and scale arrives as a binary32
value (exact: e8m0's 2**-127 is a binary32 subnormal, NaN a NaN), is decoded into a significand at its own format's last
place (below 2**P, :func:`_decode_in`), a last-place exponent and ``E_fmt``; so a term is an int64 significand (at most
Pa + Pb + 2 Ps bits: 16 for fp8 operands with ue4m3 scales) at a last place and an exponent, all integers:

* ``G`` 0 (``scale_group`` None, k = 32 ``kind::mxf8f6f4``): term i is ``ma mb msa msb`` at
  ``la + lb + lsa + lsb``, its exponent ``E(a) + E(b) + E(sa) + E(sb)``, e_zero where it is zero (a zero
  factor or scale);
* ``G`` > 0 (``kind::mxf4``, ``mxf4nvf4``): the products of each G lanes, shifted to the lowest last place
  LO that any product of the formats can have, summed exactly in int64; the sum times ``msa msb`` at
  ``LO + lsa + lsb``, its exponent ``E(sa) + E(sb)``, e_zero where every product or a scale is zero.

Then C, the cut at ``2**(e_max - F)``, the exact sum and one rounding as truncated-fused; a NaN scale makes
the block NaN.  The host (:func:`blockfma.engine.triton.scaled_gemm_tensors`) passes one scale per scale
block (``sa`` (M, K / SB), ``sb`` (K / SB, N)); the kernel reads product k's as scale ``k // SB`` (the rule
of :func:`blockfma.reference.product_scales`), padding products past K as 1.0.  Its entry,
:func:`scaled_block`, is the block-scaled variant of the one kernel skeleton (:mod:`.triton_gemm`).

The fast path (FAST, where :func:`blockfma.engine.triton.scaled_fast_constants` holds the model: every preset
of today) computes the same block with one ``BLOCK_M x BLOCK_N`` register tile per lane: e_max from the
integer exponent codes, then each term as a binary32 value, the exact product ``a*b`` (or a group's exact
float32 sum) times the scales' significands, scaled by two exact powers of two to the cut's unit and
converted to int64 (the conversion is the cut), summed in int64; its bounds are written out below.
"""
# mypy: ignore-errors
# ruff: noqa: E741, RUF059
from __future__ import annotations

import triton
import triton.language as tl

from . import triton_kernel as tk

__all__ = ["scaled_block"]


@triton.jit
def _decode_in(x, EMIN: tl.constexpr, P: tl.constexpr):
    """:func:`tk.decode` of binary32 values of a format of precision P and least exponent EMIN (>= -127),
    the significand shifted down to the format's last place ``2**(E_fmt - P + 1)`` (exact: no value of the
    format has a bit below it), so below 2**P."""
    neg, mant, lsb, e, zero, nan, inf = tk.decode(x, EMIN)
    sh = tl.minimum(tl.maximum(e - (P - 1) - lsb, 0), 62)
    return neg, mant >> sh, lsb + sh, e, zero, nan, inf


@triton.jit
def _scaled_block(a, b, sa, sb, d, lane, B: tl.constexpr):
    """One block-scaled block: a (BM, LP), b (LP, BN) binary32 operands (lanes from L on hold no product),
    their scales sa (BM, T), sb (T, BN) (T = LP term slots of one product, or L / G groups), d (BM, BN) its
    C; the rounded result as float32 (BM, BN)."""
    L: tl.constexpr = B.L
    G: tl.constexpr = B.G
    T: tl.constexpr = B.T
    EZ: tl.constexpr = B.EZ
    LO: tl.constexpr = B.LO
    na, ma, la, ea, za, nan_a, inf_a = _decode_in(a, B.A_EMIN, B.A_P)
    nb, mb, lb, eb, zb, nan_b, inf_b = _decode_in(b, B.B_EMIN, B.B_P)
    nc, mc, lc, ec, zc, nan_c, inf_c = tk.decode(d, B.C_EMIN)
    _, msa, lsa, esa, zsa, nan_sa, _ = _decode_in(sa, B.S_EMIN, B.S_P)
    _, msb, lsb, esb, zsb, nan_sb, _ = _decode_in(sb, B.S_EMIN, B.S_P)
    pm, pneg, pl, pzero = tk.products(na, ma, la, za, nb, mb, lb, zb)  # (BM, LP, BN)
    # the finite-replaced products' signs (rules.exact_zero: non-finite operands count as +0)
    pneg_f = (na & ~(nan_a | inf_a))[:, :, None] ^ (nb & ~(nan_b | inf_b))[None, :, :]
    sm = msa[:, :, None] * msb[None, :, :]  # (BM, T, BN): the scales' significands' product, at ...
    sl = lsa[:, :, None] + lsb[None, :, :]  # ... this last place
    se = esa[:, :, None] + esb[None, :, :]
    if G == 0:  # one term per product
        tm = pm * sm
        tp = pl + sl
        te = tl.where(tm == 0, EZ, ea[:, :, None] + eb[None, :, :] + se)
        tneg = pneg_f
        live3 = (lane < L)[None, :, None]
        if B.LP != L:
            te = tl.where(live3, te, -(1 << 30))
    else:  # one term per group of G products: their exact sum at the unit 2**LO, times the scales
        shifted = tk.cut(pm, LO - pl, False, False)  # a left shift: every product's last place is LO or above
        sv = tl.reshape(tl.where(pneg_f, -shifted, shifted), (a.shape[0], T, G, b.shape[1]))
        sums = tk.reduce_sum(sv, 2)
        nonzero = tk.reduce_max(tl.reshape((pm != 0).to(tl.int32), (a.shape[0], T, G, b.shape[1])), 2) == 1
        neg = sums < 0
        tm = tl.where(neg, -sums, sums) * sm
        tp = LO + sl
        te = tl.where(~nonzero | (sm == 0), EZ, se)
        tneg = neg
        live3 = tl.full([1, T, 1], 1, tl.int1)
    s, unit = tk.aligned_sum(tm, tneg, tp, te, nc, mc, lc, ec, zc, B)
    R: tl.constexpr = B.R  # passed on: a constexpr by name (Triton 3.6 passes no plain objects)
    v, s, plus = tk.fused_value(s, unit, B.WRAP, R)
    only_zeros = zc
    all_neg = zc
    any_neg = zc
    if B.IEEE_ZERO and B.R.NEG_ZERO:  # the terms' signs: a product's; a group's - where all its products are
        sc = nc & ~(nan_c | inf_c)
        if G == 0:
            zneg = pneg_f
        else:
            zneg = tk.reduce_min(tl.reshape(pneg_f.to(tl.int32), (a.shape[0], T, G, b.shape[1])), 2) == 1
        only_zeros, all_neg, any_neg = tk.term_zero_flags(tm == 0, zneg, live3, zc, sc)
    v = tk.zero_pick(v, s, plus, only_zeros, all_neg, any_neg, B)
    nan, pos, ninf = tk.special_flags(nan_a, inf_a, za, nan_b, inf_b, zb, pneg, nc, nan_c, inf_c, B.SPECIALS)
    # a NaN scale makes the block NaN (before every other rule)
    nan_a_scale = tk.reduce_max(nan_sa.to(tl.int32), 1) == 1  # (BM,)
    nan_b_scale = tk.reduce_max(nan_sb.to(tl.int32), 0) == 1  # (BN,)
    nan = nan | nan_a_scale[:, None] | nan_b_scale[None, :]
    return tk.with_specials(v, plus, nan, pos, ninf)


# ---- the fast path: one (BLOCK_M, BLOCK_N) register tile per lane, float32 products, int64 terms -------------
#
# Taken where the host (blockfma.engine.triton.scaled_fast_constants) has shown it exact, for every value of the
# model's formats (no look at the operands).  Its bounds, with Pa, Pb, Ps the significand bits of A's, B's and
# the scales' formats and LO the lowest last place of a product (lowest_bit(fa) + lowest_bit(fb)):
#
# * every finite nonzero a, b is a binary32 normal (so tk.lane_exp reads E_fmt from its exponent field) and
#   LO >= -126: a nonzero product |a*b| >= 2**LO is a binary32 normal of at most Pa + Pb bits, exact
#   (e5m2 x e5m2: 2**-32 up to 57344**2 < 2**32; e2m1 x e2m1: 0.5 * 0.5 = 2**-2 up to 36);
# * a term's "significand" q: the product (G = 0) or the float32 sum of a group's G products (G > 0: every
#   partial sum a multiple of 2**LO below G * max|a| * max|b| = 2**H, so exact in any order, also where
#   Triton contracts it into an FMA, where H - LO <= 24: e2m1, G = 16: 576 < 2**10, 12 bits);
# * the scales' significands msa, msb (decoded by _decode_in: ue8m0 1, ue4m3 at most 4 bits) multiply into
#   f1 = msa * msb * 2**k1, a normal (>= 2**-126) of at most 2 Ps bits, and q * f1 has at most
#   bits(q) + 2 Ps <= 24 bits (the host's BITS bound: mxf8f6f4 4 + 4 + 2, mxf4/nvf4 12 + 8);
# * the scaling: the term's value q * msa * msb * 2**(lsa + lsb) at the cut unit 2**(e_max - F) is
#   q * msa * msb * 2**k with k = lsa + lsb - (e_max - F), applied as two exact scalings 2**k1, 2**k2
#   (k1 = floor(k / 2), k2 = k - k1, k clamped to [-252, 200], so both are binary32 normals, tk.scale, and
#   f1 < 2**(8 + 100) stays finite):
#   for k >= 0 both are >= 1, q * f1 >= 2**LO is normal and every product is exact (the result is the term's
#   magnitude below 2**53: the bound of blockfma.engine.scaled.supports); for k < 0 (k2 <= 0), where an
#   intermediate or the result leaves binary32's normal range the exact value is below 2**-126, so below 1:
#   it is cut to 0 whatever the GPU does with subnormals (flushed or not), as it is where k was clamped
#   (k < -252 only where the exact value is below 2**(32 + 8 - 252)); a nonzero term never reaches k > 200
#   (its exponent is at most e_max, and lsa = E(sa) - (Ps - 1): k <= F - E(a) - E(b) <= F - LO <= 53 + 126,
#   F < 53 by scaled.supports; a group's k <= F), and a zero term is 0 at any scale;
# * the conversion to int64 truncates toward zero: that is the cut (under FLOOR tl.floor first, and -1 for a
#   negative nonzero term whose scaled value underflowed, as the truncated-fused fast path's _term does in int32);
# * e_max from integer codes alone: E(a) + E(b) (tk.lane_exp) plus E(sa) + E(sb) (_decode_in) per product,
#   or E(sa) + E(sb) per group with a nonzero product; e_zero for zero terms; C's.
#
# The int64 sum, C's term, the rounding, special values and NaN scales are the general path's helpers.  Zero
# signs: only where exact zeros are +0 (IEEE_ZERO and NEG_ZERO take the general path, which has the terms'
# signs).  Lanes go in units of U: U = min(SB, L) products sharing one pair of scales (G = 0) or one group
# (U = G, within one scale block): f1, f2 are made once per unit.


@triton.jit
def _fast_term(q, f1, f2, FLOOR: tl.constexpr):
    """The int64 cut terms of exact float32 term significands q at scale f1 * f2 (see above): (q * f1) * f2
    truncated toward zero by the conversion, or floored (FLOOR; a zero scale f1 = 0 is a zero term)."""
    x = (q * f1) * f2
    if FLOOR:
        t = tl.floor(x).to(tl.int64)
        t = tl.where((q < 0) & (f1 > 0) & (t == 0), -1, t)
    else:
        t = x.to(tl.int64)
    return t


@triton.jit
def _unit_scales(t, k0, u, B: tl.constexpr):
    """The scales of the unit of lanes from u of the block at k0 of the tile ``t`` (1.0 past K, as the
    general path pads), decoded: (msa, lsa, esa, nan_sa) (BLOCK_M,) and those of sb (BLOCK_N,)."""
    ks = k0 + u + tl.full([1], 0, tl.int32)
    live = ks < t.K
    si = ks // B.SB
    sa = tl.load(t.sa_rows + si * t.ssak, mask=live, other=1.0)
    sb = tl.load(t.sb_cols + si * t.ssbk, mask=live, other=1.0)
    _, msa, lsa, esa, _, nan_sa, _ = _decode_in(sa, B.S_EMIN, B.S_P)
    _, msb, lsb, esb, _, nan_sb, _ = _decode_in(sb, B.S_EMIN, B.S_P)
    return msa, lsa.to(tl.int32), esa.to(tl.int32), nan_sa, msb, lsb.to(tl.int32), esb.to(tl.int32), nan_sb


@triton.jit
def _fast_emax(t, k0, d, B: tl.constexpr):
    """The fast path's first pass over a block's units and lanes: its largest exponent e_max (int32, BM, BN)
    from the integer codes alone (see above), C's included."""
    U: tl.constexpr = B.U
    EZ: tl.constexpr = B.EZ
    nc, mc, lc, ec, zc, nan_c, inf_c = tk.decode(d, B.C_EMIN)  # (decoded again after the loops: fewer live registers)
    emax = tl.where(zc, EZ, ec.to(tl.int32))
    for u in range(0, B.L, U):
        msa, lsa, esa, _, msb, lsb, esb, _ = _unit_scales(t, k0, u, B)
        szero = (msa == 0)[:, None] | (msb == 0)[None, :]  # a zero (or NaN) scale: zero terms
        se = esa[:, None] + esb[None, :]
        top = tl.full(d.shape, -(1 << 21), tl.int32)  # two NONE exponents: no product
        zrow = t.rm < 0  # which rows of A / columns of B hold a zero factor in the unit
        zcol = t.rn < 0
        nz = top > 0  # where some product of the unit is not zero
        for l in range(u, u + U):
            a, b = tk.load_lane(t.a_rows, t.b_cols, t.a_rows, k0, l, 0, t.KM, t.sak, t.sbk, False, "", 0.0, B.STANDIN)
            ea, za = tk.lane_exp(a, B.A_EMIN, B.SPECIALS)
            eb, zb = tk.lane_exp(b, B.B_EMIN, B.SPECIALS)
            if B.G == 0:  # a term per product: E(a) + E(b) + E(sa) + E(sb), e_zero where a factor is zero
                top = tl.maximum(top, ea[:, None] + eb[None, :])
                zrow = zrow | za
                zcol = zcol | zb
            else:  # a term per group: E(sa) + E(sb) where some product of the group is not zero
                nz = nz | (~za[:, None] & ~zb[None, :])
        if B.G == 0:
            te = tl.where(szero, EZ, top - 254 + se)
            te = tl.where(zrow[:, None] | zcol[None, :], tl.maximum(te, EZ), te)
        else:
            te = tl.where(nz & ~szero, se, EZ)
        emax = tl.maximum(emax, te)
    return emax


@triton.jit
def _fast_scaled_block(t, k0, d, B: tl.constexpr):
    """:func:`_scaled_block` on the fast path (see above): a first pass for e_max (:func:`_fast_emax`), a
    second for the cut terms; the block's rounded result as float32 (BLOCK_M, BLOCK_N)."""
    U: tl.constexpr = B.U
    FLOOR: tl.constexpr = B.FLOOR
    unit = _fast_emax(t, k0, d, B) - B.F
    nan = unit < unit  # the products' special flags, and NaN scales by row and column
    pos = nan
    ninf = nan
    nrow = t.rm < 0
    ncol = t.rn < 0
    s = tl.full(d.shape, 0, tl.int64)
    for u in range(0, B.L, U):
        msa, lsa, esa, nsa, msb, lsb, esb, nsb = _unit_scales(t, k0, u, B)
        nrow = nrow | nsa
        ncol = ncol | nsb
        k = tl.minimum(tl.maximum(lsa[:, None] + lsb[None, :] - unit, -252), 200)
        k1 = k >> 1
        f1 = (msa[:, None] * msb[None, :]).to(tl.float32) * tk.scale32(k1)
        f2 = tk.scale32(k - k1)
        q = tl.full(d.shape, 0.0, tl.float32)
        for l in range(u, u + U):
            a, b = tk.load_lane(t.a_rows, t.b_cols, t.a_rows, k0, l, 0, t.KM, t.sak, t.sbk, False, ".ca", 0.0,
                                B.STANDIN)
            if B.SPECIALS:
                a, b, nan, pos, ninf = tk.lane_specials(a, b, B.A_EMIN, B.B_EMIN, nan, pos, ninf)
            if B.G == 0:
                s = s + _fast_term(a[:, None] * b[None, :], f1, f2, FLOOR)
            else:
                q = q + a[:, None] * b[None, :]
        if B.G != 0:
            s = s + _fast_term(q, f1, f2, FLOOR)
    unit64 = unit.to(tl.int64)
    nc, mc, lc, ec, zc, nan_c, inf_c = tk.decode(d, B.C_EMIN)
    cneg_f = nc & ~zc
    tc = tk.cut(mc, unit64 - lc, cneg_f, FLOOR)
    s = s + tl.where(cneg_f, -tc, tc)
    R: tl.constexpr = B.R  # passed on: a constexpr by name (Triton 3.6 passes no plain objects)
    v, s, plus = tk.fused_value(s, unit64, B.WRAP, R)
    v = tk.zero_pick(v, s, plus, zc, zc, zc, B)  # (never IEEE_ZERO and NEG_ZERO here)
    nan = nan | nan_c | nrow[:, None] | ncol[None, :]
    return tk.with_specials(v, plus, nan, pos | (inf_c & ~nc), ninf | (inf_c & nc))


@triton.jit
def scaled_block(t, k0, j, d, B: tl.constexpr):
    """The block-scaled block at k0 + j of the tile ``t`` with C ``d``: on the fast path (FAST) or the general
    one (its operands and scales loaded whole, :func:`_scaled_block`); float32 (BM, BN)."""
    if B.FAST:
        return _fast_scaled_block(t, k0 + j, d, B)
    else:
        GS: tl.constexpr = 1 if B.G == 0 else B.G  # products per term slot
        a, b = tk.load_block(t, k0, j, B)
        slot = tl.arange(0, B.T)
        ks = k0 + j + slot * GS  # the first product of each term slot takes the slot's scales
        slive = (ks < t.K) & (slot * GS < B.L)
        si = ks // B.SB
        sa = tl.load(t.sa_ptr + t.rm[:, None] * t.ssam + si[None, :] * t.ssak,
                     mask=(t.rm[:, None] < t.M) & slive[None, :], other=1.0)
        sb = tl.load(t.sb_ptr + si[:, None] * t.ssbk + t.rn[None, :] * t.ssbn,
                     mask=slive[:, None] & (t.rn[None, :] < t.N), other=1.0)
        return _scaled_block(a, b, sa, sb, d, t.lane, B)
