"""The Triton kernel of :mod:`blockfma.engine.triton` (see there for what it computes and why it is exact).

Imported only by that module, at first use: Triton decides when a kernel is defined whether it runs under
its interpreter (``TRITON_INTERPRET=1``), and its jitted functions must live at a module's top level.
"""
# mypy: ignore-errors
# ruff: noqa
from __future__ import annotations

import os

import triton
import triton.language as tl

__all__ = ["gemm_kernel", "INTERPRETED"]

INTERPRETED = os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "on", "yes")




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
def _sum(x, axis):
    return tl.reduce(x, axis, _add)


@triton.jit
def _max(x, axis):
    return tl.reduce(x, axis, _greater)


@triton.jit
def _min(x, axis):
    return tl.reduce(x, axis, _lesser)


@triton.jit
def _decode(x, EMIN: tl.constexpr):
    """(negative, significand int64 (0 for zeros and non-finite), last-place exponent, E_fmt, zero or
    non-finite, NaN, infinite) of binary32 values."""
    bits = x.to(tl.int32, bitcast=True)
    neg = bits < 0
    ef = ((bits >> 23) & 0xFF).to(tl.int64)
    fr = (bits & 0x7FFFFF).to(tl.int64)
    nonfinite = ef == 255
    nan = nonfinite & (fr != 0)
    inf = nonfinite & (fr == 0)
    zero = ((bits & 0x7FFFFFFF) == 0) | nonfinite
    mant = tl.where(ef > 0, fr | 0x800000, fr)
    mant = tl.where(zero, 0, mant)
    lsb = tl.where(ef > 0, ef - 150, -149)
    e = tl.maximum(ef - 127, EMIN)
    return neg, mant, lsb, e, zero, nan, inf


@triton.jit
def _cut(mag, sh, neg, FLOOR: tl.constexpr):
    """mag * 2**-sh (mag >= 0, int64 < 2**53) cut toward zero, or toward minus infinity for ``neg``
    terms under FLOOR; a left shift where sh < 0."""
    right = tl.minimum(tl.maximum(sh, 0), 62)
    left = tl.minimum(tl.maximum(-sh, 0), 62)
    t = (mag << left) >> right
    if FLOOR:
        t = tl.where(neg & (sh > 0), (mag + ((1 << right) - 1)) >> right, t)
    return t


@triton.jit
def _lead(mag):
    """floor(log2 mag) of integers 0 < mag < 2**53 (exact through float64)."""
    return ((mag.to(tl.float64).to(tl.int64, bitcast=True) >> 52) & 0x7FF) - 1023


@triton.jit
def _pow2(e):
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
def gemm_kernel(a_ptr, b_ptr, c_ptr, d_ptr, M, N, K, KP, sam, sak, sbk, sbn, scm, scn, sdm, sdn,
           L: tl.constexpr, LP: tl.constexpr, F: tl.constexpr, EZ: tl.constexpr, FLOOR: tl.constexpr,
           WRAP: tl.constexpr, NORMALIZED: tl.constexpr, A_EMIN: tl.constexpr, B_EMIN: tl.constexpr,
           C_EMIN: tl.constexpr, P: tl.constexpr, EMIN: tl.constexpr, FMAX: tl.constexpr,
           MODE: tl.constexpr, SUBNORMALS: tl.constexpr, OVER_POS: tl.constexpr, OVER_NEG: tl.constexpr,
           NEG_ZERO: tl.constexpr, IEEE_ZERO: tl.constexpr,
           SPECIALS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    lane = tl.arange(0, LP)
    out_mask = (rm[:, None] < M) & (rn[None, :] < N)
    d = tl.load(c_ptr + rm[:, None] * scm + rn[None, :] * scn, mask=out_mask, other=0.0)
    for k0 in range(0, KP, L):
        kk = k0 + lane
        live = (kk < K) & (lane < L)  # products past K are the plan's +0 padding
        a = tl.load(a_ptr + rm[:, None] * sam + kk[None, :] * sak, mask=(rm[:, None] < M) & live[None, :],
                    other=0.0)
        b = tl.load(b_ptr + kk[:, None] * sbk + rn[None, :] * sbn, mask=live[:, None] & (rn[None, :] < N),
                    other=0.0)
        na, ma, la, ea, za, nan_a, inf_a = _decode(a, A_EMIN)
        nb, mb, lb, eb, zb, nan_b, inf_b = _decode(b, B_EMIN)
        nc, mc, lc, ec, zc, nan_c, inf_c = _decode(d, C_EMIN)
        # products, (BLOCK_M, LP, BLOCK_N)
        pm = ma[:, :, None] * mb[None, :, :]
        pneg = na[:, :, None] ^ nb[None, :, :]  # the factors' signs (as given: also for specials)
        pl = la[:, :, None] + lb[None, :, :]
        pzero = za[:, :, None] | zb[None, :, :]  # a zero product of the finite-replaced operands
        if NORMALIZED:
            ep = tl.where(pm == 0, EZ, _lead(tl.maximum(pm, 1)) + pl)
        else:
            ep = tl.where(pzero, EZ, ea[:, :, None] + eb[None, :, :])
        if LP != L:  # lanes beyond L stand for no product at all
            ep = tl.where((lane < L)[None, :, None], ep, -(1 << 30))
        ecz = tl.where(zc, EZ, ec)
        emax = tl.maximum(_max(ep, axis=1), ecz)
        unit = emax - F
        pneg_f = pneg & ~pzero  # the sign of the finite-replaced product's value
        tp = _cut(pm, unit[:, None, :] - pl, pneg_f, FLOOR)
        s = _sum(tl.where(pneg_f, -tp, tp), axis=1)
        cneg_f = nc & ~zc
        tc = _cut(mc, unit - lc, cneg_f, FLOOR)
        s = s + tl.where(cneg_f, -tc, tc)
        if WRAP > 0:  # carry bits: the sum wraps, keeping its sign (fmod)
            ms = tl.where(s < 0, -s, s) & ((1 << WRAP) - 1)
            s = tl.where(s < 0, -ms, ms)
        # one rounding of s * 2**unit into the result format
        neg = s < 0
        mag = tl.where(neg, -s, s)
        e = _lead(tl.maximum(mag, 1)) + unit
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
        v = r.to(tl.float64) * _pow2(q)
        if OVER_POS == OVER_NEG:  # beyond the largest finite value: 0 that value, 1 infinity, 2 NaN
            over = _over(tl.full([BLOCK_M, BLOCK_N], 0.0, tl.float64), FMAX, OVER_POS)
        else:
            over = tl.where(neg, _over(tl.full([BLOCK_M, BLOCK_N], 0.0, tl.float64), FMAX, OVER_NEG), _over(tl.full([BLOCK_M, BLOCK_N], 0.0, tl.float64), FMAX, OVER_POS))
        v = tl.where(v > FMAX, over, v)
        if not SUBNORMALS:
            v = tl.where((mag > 0) & (e < EMIN), 0.0, v)
        v = tl.where(neg, -v, v)
        # an exactly zero sum: +0, or the IEEE sign over the finite-replaced products and C
        # (rules.exact_zero: non-finite operands count as +0)
        plus = tl.full([BLOCK_M, BLOCK_N], 0.0, tl.float64)
        if IEEE_ZERO and NEG_ZERO:
            live3 = (lane < L)[None, :, None]
            sa = na & ~(nan_a | inf_a)
            sb = nb & ~(nan_b | inf_b)
            sc = nc & ~(nan_c | inf_c)
            zprod = (sa[:, :, None] ^ sb[None, :, :]).to(tl.int32)
            only_zeros = (_min(tl.where(live3, pzero.to(tl.int32), 1), axis=1) == 1) & zc
            all_neg = (_min(tl.where(live3, zprod, 1), axis=1) == 1) & sc
            any_neg = (_max(tl.where(live3, zprod, 0), axis=1) == 1) | sc
            if MODE == 4:
                zneg = any_neg | ~only_zeros
            else:
                zneg = only_zeros & all_neg
            v = tl.where(s == 0, tl.where(zneg, -plus, plus), v)
        else:
            v = tl.where(s == 0, plus, v)
        if not NEG_ZERO:
            v = tl.where(v == 0, plus, v)
        # special values (rules.fused_specials, on the operands as given)
        nan = nan_c
        pos = inf_c & ~nc
        ninf = inf_c & nc
        if SPECIALS:
            pnan = (nan_a[:, :, None] | nan_b[None, :, :]
                    | (inf_a[:, :, None] & (zb & ~inf_b & ~nan_b)[None, :, :])
                    | ((za & ~inf_a & ~nan_a)[:, :, None] & inf_b[None, :, :]))
            pinf = (inf_a[:, :, None] | inf_b[None, :, :]) & ~pnan
            nan = nan | (_max(pnan.to(tl.int32), axis=1) == 1)
            pos = pos | (_max((pinf & ~pneg).to(tl.int32), axis=1) == 1)
            ninf = ninf | (_max((pinf & pneg).to(tl.int32), axis=1) == 1)
        nan = nan | (pos & ninf)
        v = tl.where(nan, plus + float("nan"), tl.where(pos, plus + float("inf"), tl.where(ninf, plus - float("inf"), v)))
        d = v.to(tl.float32)
    tl.store(d_ptr + rm[:, None] * sdm + rn[None, :] * sdn, d, mask=out_mask)

