"""Compiled kernels of the algorithm families (see docs/semantics.md; ``engine/kernels.py`` is the numpy twin).

Each kernel computes a batch of products ``D[b] = A[b] @ B[b] + C[b]``, chaining blocks of L over k. One
parallel task owns a tile of ROWS x COLS outputs and keeps, per output, the running C (``d``) and the
block's state in small arrays; the innermost loops run along a row of B so that they vectorise.

A family's kernel is written once, in a factory (``truncated_fused(lanes32)``, ...) that builds and keeps one numba
kernel per lane type: with ``lanes32`` the innermost loops run in binary32 lanes (8 per AVX2 instruction instead of 4),
for inputs the caller has checked keep every value there exact (each factory says what it needs), else in float64
lanes.  The factory fixes the dtypes of the kernel's arrays and its tile, and ``lanes32`` (a constant of the kernel's
closure: numba prunes the other lane type's branch before typing) picks the step that differs; in the helpers the cut
families share, the operands' type picks it (:func:`_cut`, :func:`_pow2`).  numba caches each kernel (its cache key
hashes the closure's constants).  Products, scalings, cuts and sums are exact as in :mod:`..array`; the IEEE steps round
``s + err`` (a TwoSum pair) through a round-to-odd float64, which composes with a final rounding to binary32; everything
else goes through ``rounding.round_int``, the scalar twin of ``formats.round_integer``.

Inputs are finite (the dispatcher sends other calls to numpy); infinities and NaN born of overflow inside a
chain are carried along.
"""

from __future__ import annotations

import functools
import math
from typing import Callable

import numpy as np
from numba import njit, prange
from numba.extending import overload

from ...formats import RoundingMode, fp32
from .rounding import (bitlen, bits32_of, bits_of, exponent_bits, float32_of, float_of, fma32, fmt_params,
                       odd_toward, pow2_bits, round_int, round_pair, round_row, to_f32_nearest, two_sum)

ROWS, COLS = 4, 256  # output tile of one task: B's block rows are reused ROWS times from cache
F32_ROWS, F32_COLS = 4, 512  # the same for the cut families in binary32 lanes (longer rows: less loop overhead)
NO_SUM = -(1 << 15)  # below every sum of two exponents (a zero's is -2**14), and an int16
ZERO_LSB, ZERO_TOP = 1 << 14, -(1 << 14)  # bit span of a zero term: empty
F32_TINY = 2.0**-126
F32_MAX = 3.4028234663852886e38
RO32 = fmt_params(fp32, RoundingMode.ToOdd, True, "ieee")  # binary32, round to odd, subnormals kept
NO_EXP_LO, NO_EXP_HI = 1 << 20, -(1 << 20)  # exponent range of no values


@njit(cache=True, inline="always")
def _tile(task, m, n, rows=ROWS, cols=COLS):
    ti = (m + rows - 1) // rows
    tj = (n + cols - 1) // cols
    bt = task // (ti * tj)
    i0 = (task // tj) % ti * rows
    j0 = task % tj * cols
    return bt, i0, j0, min(rows, m - i0), min(cols, n - j0)


@njit(cache=True, inline="always")
def _ntasks(nbatch, m, n, rows=ROWS, cols=COLS):
    return nbatch * ((m + rows - 1) // rows) * ((n + cols - 1) // cols)


@njit(cache=True, inline="always")
def _block_start_exponents(d, za, zb, em, c_emin, e_zero):
    """A block's starting e_max for one row of outputs: C's exponent E_fc (e_zero for a zero C), raised to
    e_zero where the block has a zero product (``za`` for the row of A, ``zb`` per column of B)."""
    di = d.view(np.int64)
    for j in range(d.size):
        e = max(np.int32(exponent_bits(di[j])), c_emin)
        e = e_zero if d[j] == 0.0 else e
        em[j] = max(e, e_zero) if (za or zb[j]) else e


@njit(cache=True)
def _all_products_negative_zero(A, B, bt, i, j, k0, k1):
    for kk in range(k0, k1):
        a = A[bt, i, kk]
        b = B[bt, kk, j]
        if not ((a == 0.0 or b == 0.0) and (math.copysign(1.0, a) * math.copysign(1.0, b) < 0)):
            return False
    return True


@njit(parallel=True, cache=True)
def exponents(x, emin, zero_exp, out):
    """out = E(x) = max(floor(log2 |x|), emin), zero_exp for zeros (x and out flat; every nonzero x a
    float64 normal value, whose exponent field is floor(log2 |x|)).  Returns the least and the greatest
    floor(log2 |x|) of the nonzero x (NO_EXP_LO > NO_EXP_HI when there is none)."""
    lo = NO_EXP_LO
    hi = NO_EXP_HI
    for i in prange(x.shape[0]):
        t = exponent_bits(bits_of(x[i]))
        zero = x[i] == 0.0
        out[i] = zero_exp if zero else max(t, emin)
        lo = min(lo, NO_EXP_LO if zero else t)
        hi = max(hi, NO_EXP_HI if zero else t)
    return lo, hi


# --- the cut families' steps: e_max, the quantum, products cut and summed exactly ----------------------
def _cut(x):
    """x cut to an integer toward zero."""


@overload(_cut, inline="always")
def _cut_in_lanes(x):
    """In binary32 lanes an int32 (the conversion truncates; exact, |x| < 2**31 where the caller uses
    binary32 lanes), in float64 lanes a float64 integer (exact)."""
    if x.bitwidth == 32:
        return lambda x: np.int32(x)
    return lambda x: np.trunc(x)


def _pow2(k, lanes):
    """2.0**k as a value of the float dtype of the array ``lanes``."""


@overload(_pow2, inline="always")
def _pow2_in_lanes(k, lanes):
    """Built from its bits, so that the loops vectorise: 2.0**k for -126 <= k <= 127 in binary32 lanes and
    -1022 <= k <= 1023 in float64 lanes (the callers clamp k)."""
    if lanes.dtype.bitwidth == 32:
        return lambda k, lanes: float32_of(np.int32((k + 127) << 23))
    return lambda k, lanes: float_of(pow2_bits(k))


@njit(cache=True, inline="always")
def _four_rows(X, bt, kk, step, j0, J):
    """Rows kk, kk + step, kk + 2 step, kk + 3 step of X[bt] (B's layout), columns j0 to j0 + J."""
    return (X[bt, kk, j0:j0 + J], X[bt, kk + step, j0:j0 + J], X[bt, kk + 2 * step, j0:j0 + J],
            X[bt, kk + 3 * step, j0:j0 + J])


@njit(cache=True, inline="always")
def _four_columns(X, bt, i, kk, step):
    """X[bt, i] at columns kk, kk + step, kk + 2 step, kk + 3 step (A's layout)."""
    return X[bt, i, kk], X[bt, i, kk + step], X[bt, i, kk + 2 * step], X[bt, i, kk + 3 * step]


@njit(cache=True, inline="always")
def _fours_end(k_first, k_end, step, fours):
    """Where the products k_first, k_first + step, ... below k_end stop being taken four at a time: after
    the last whole four with ``fours`` (a constant at each call), else at once."""
    if fours:
        return k_first + (k_end - k_first + step - 1) // step // 4 * 4 * step
    return k_first


@njit(cache=True, inline="always")
def _product_tops(EA, EB, bt, i0, j0, k_first, k_end, step, em, fours):
    """em[r, j] raised to the largest E_a + E_b over the products k_first, k_first + step, ... below k_end of the tile's
    rows and columns (with ``fours``, a constant at each call, four products at a time), in em's own int dtype so that
    the loops vectorise (exact: exponents are at most 2**14 in magnitude, zeros' included, and em holds their sums)."""
    R, J = em.shape
    t = em.dtype.type
    k4 = _fours_end(k_first, k_end, step, fours)
    for kk in range(k_first, k4, 4 * step):
        eb0, eb1, eb2, eb3 = _four_rows(EB, bt, kk, step, j0, J)
        for r in range(R):
            e = em[r]
            ea0, ea1, ea2, ea3 = _four_columns(EA, bt, i0 + r, kk, step)
            for j in range(J):
                e[j] = max(max(e[j], max(t(ea0 + eb0[j]), t(ea1 + eb1[j]))), max(t(ea2 + eb2[j]), t(ea3 + eb3[j])))
    for kk in range(k4, k_end, step):
        ebk = EB[bt, kk, j0:j0 + J]
        for r in range(R):
            ea = EA[bt, i0 + r, kk]
            e = em[r]
            for j in range(J):
                e[j] = max(e[j], t(ea + ebk[j]))


@njit(cache=True, inline="always")
def _quanta(em, F, kmin, kmax, scale):
    """scale[r, j] = 2**(F - em[r, j]), the inverse of the alignment quantum 2**(em - F), its exponent
    clamped to [kmin, kmax], in scale's lanes."""
    R, J = em.shape
    for r in range(R):
        e = em[r]
        s = scale[r]
        for j in range(J):
            s[j] = _pow2(min(max(F - np.int64(e[j]), kmin), kmax), s)


@njit(cache=True, inline="always")
def _cut_sums(A, B, bt, i0, j0, k_first, k_end, step, scale, acc, floor, fours):
    """acc[r, j] += each product k_first, k_first + step, ... below k_end of the tile's rows and columns,
    times scale[r, j], cut (:func:`_cut`; with ``floor`` floored first, which leaves the cut exact), with
    ``fours`` (a constant at each call) four products at a time.  The products and their scaling are exact
    in the lanes of A and B (the families say when), and so are the sums of the cut terms in acc's lanes."""
    R, J = acc.shape
    k4 = _fours_end(k_first, k_end, step, fours)
    for kk in range(k_first, k4, 4 * step):
        b0, b1, b2, b3 = _four_rows(B, bt, kk, step, j0, J)
        for r in range(R):
            s, sc = acc[r], scale[r]
            a0, a1, a2, a3 = _four_columns(A, bt, i0 + r, kk, step)
            if floor:
                for j in range(J):
                    s[j] += ((_cut(np.floor(a0 * b0[j] * sc[j])) + _cut(np.floor(a1 * b1[j] * sc[j])))
                             + (_cut(np.floor(a2 * b2[j] * sc[j])) + _cut(np.floor(a3 * b3[j] * sc[j]))))
            else:
                for j in range(J):
                    s[j] += ((_cut(a0 * b0[j] * sc[j]) + _cut(a1 * b1[j] * sc[j]))
                             + (_cut(a2 * b2[j] * sc[j]) + _cut(a3 * b3[j] * sc[j])))
    for kk in range(k4, k_end, step):
        bk = B[bt, kk, j0:j0 + J]
        for r in range(R):
            s, sc = acc[r], scale[r]
            a = A[bt, i0 + r, kk]
            if floor:
                for j in range(J):
                    s[j] += _cut(np.floor(a * bk[j] * sc[j]))
            else:
                for j in range(J):
                    s[j] += _cut(a * bk[j] * sc[j])


@njit(cache=True, inline="always")
def _fold(acc, S):
    """The lanes' sums acc moved into the float64 sums S (acc set to 0), before more products could overflow them."""
    R, J = acc.shape
    for r in range(R):
        s = acc[r]
        sr = S[r]
        for j in range(J):
            sr[j] += np.float64(s[j])
            s[j] = 0


@njit(cache=True, inline="always")
def _cut_c_sum(dr, em, s, sr, folded, F, floor_align, carry_mod, Y):
    """Y = a truncated-fused block's exact sum for one row of outputs: C (``dr``) cut at the quantum 2**(em - F) like
    the products, plus their cut sum (``s``, and ``sr`` where ``folded``; ``s`` reset to 0), carries beyond
    ``carry_mod`` lost, scaled back to its value (exact: an integer below 2**53 times 2**k)."""
    J = dr.shape[0]
    for j in range(J):
        s64 = float_of(pow2_bits(F - em[j]))
        c = np.floor(dr[j] * s64) if floor_align else np.trunc(dr[j] * s64)
        Y[j] = c + np.float64(s[j]) + (sr[j] if folded else 0.0)
        s[j] = 0
    if carry_mod > 0.0:
        for j in range(J):
            Y[j] = math.copysign(np.fmod(abs(Y[j]), carry_mod), Y[j])
    for j in range(J):
        Y[j] *= float_of(pow2_bits(em[j] - F))


# --- truncated-fused (NVIDIA) ---------------------------------------------------------------------------
@functools.cache
def truncated_fused(lanes32: bool) -> Callable[..., None]:
    """The truncated-fused kernel: per block and output, e_max over C and the products (sums of the
    factors' exponents), each product scaled by 2**(F - e_max) and cut (toward zero, or floor), C cut at
    the same quantum, the cut terms summed exactly, carries lost (``carry_mod``), one rounding.

    ``lanes32``: A and B float32, EA and EB int16, for products that are exact binary32 normal values
    (``_binary32_products`` checks the inputs and gives kmin, kmax and G, and says why each cut term is an exact int32);
    the int32 sums are folded into float64 every G products, before they could overflow. Else float64 lanes (EA int32, B
    float32 or float64): every cut term and sum of them is an exact float64 integer (L + 1 terms below 2**(F + 2) sum
    below 2**53: ``array.supports``), so G >= L (no folding), and [kmin, kmax] = [-1022, 1023] holds every F - e_max of
    a finite C (a non-finite C gives a non-finite sum, and round_row leaves it as it is)."""
    rows, cols = (F32_ROWS, F32_COLS) if lanes32 else (ROWS, COLS)
    lane, exp_t, acc_t = (np.float32, np.int16, np.int32) if lanes32 else (np.float64, np.int32, np.float64)

    @njit(parallel=True, cache=True)
    def kernel(A, EA, ZA, B, EB, ZB, C, out, L, G, F, kmin, kmax, e_zero, c_emin, floor_align, carry_mod,
               p, emin, maxval, has_inf, neg_zero, subnormals, mode, overflow):
        nbatch, m, kp = A.shape
        n = B.shape[2]
        for task in prange(_ntasks(nbatch, m, n, rows, cols)):
            bt, i0, j0, R, J = _tile(task, m, n, rows, cols)
            d = np.empty((R, J))
            emax = np.empty((R, J), exp_t)
            scale = np.empty((R, J), lane)
            acc = np.zeros((R, J), acc_t)
            S = np.empty((R, J))
            Y = np.empty(J)
            flags = np.empty(J, np.bool_)
            d[:, :] = C[bt, i0:i0 + R, j0:j0 + J]
            for blk in range(kp // L):
                k0 = blk * L
                for r in range(R):
                    _block_start_exponents(d[r], ZA[bt, i0 + r, blk], ZB[bt, blk, j0:j0 + J], emax[r], c_emin, e_zero)
                _product_tops(EA, EB, bt, i0, j0, k0, k0 + L, 1, emax, lanes32)
                _quanta(emax, F, kmin, kmax, scale)
                if L > G:
                    S[:, :] = 0.0
                for g0 in range(k0, k0 + L, G):
                    g1 = min(g0 + G, k0 + L)
                    _cut_sums(A, B, bt, i0, j0, g0, g1, 1, scale, acc, floor_align, lanes32)
                    if g1 < k0 + L:  # more to come: the lanes' sums moved to float64
                        _fold(acc, S)
                for r in range(R):  # C cut at the quantum, the sum (carries lost), then one rounding
                    _cut_c_sum(d[r], emax[r], acc[r], S[r], L > G, F, floor_align, carry_mod, Y)
                    round_row(Y, d[r], flags, p, emin, maxval, has_inf, neg_zero, subnormals, mode, overflow)
            out[bt, i0:i0 + R, j0:j0 + J] = d

    return kernel


# --- late-c (AMD CDNA3) ---------------------------------------------------------------------------------
@njit(cache=True, inline="always")
def _late_c_merge(s, e_dot, c, e_c, F, F2, G, c_emin, renorm):
    """A late-c block's group sum s (units of 2**(e_dot - F)) and C (exponent e_c) merged at G bits below
    their common exponent E, each floored there, C at F bits below E; with ``renorm`` (1) the sum floored
    again at F2 bits below its own leading bit.  (t: the sum in units of 2**(E - G), its value)."""
    E = max(e_dot, e_c)
    s_units = np.floor(s * float_of(pow2_bits(max(e_dot - E + (G - F), -1000))))
    c_units = np.floor(c * float_of(pow2_bits(F - E))) * float_of(pow2_bits(G - F))
    t = s_units + c_units
    sh = max(max(exponent_bits(bits_of(t)) + E - G, np.int64(c_emin)) - F2 - (E - G), 0) * renorm
    t = np.floor(t * float_of(pow2_bits(-sh))) * float_of(pow2_bits(sh))
    return t, t * float_of(pow2_bits(E - G))


@njit(cache=True, inline="always")
def _late_c_row(A, B, bt, i, j0, k0, L, dr, eg, Sg, r, groups, F, F2, G, c_emin, ieee_zero, Y, T, keep, flags,
                p, emin, maxval, has_inf, neg_zero, subnormals, mode, overflow):
    """The end of a late-c block for one row of outputs: the group sums (integers in units of 2**(eg - F),
    any dtype) merged and floored at G bits below the common exponent E, C added at F bits below it; with
    G = F2 + 1 (late_cut="leading") the sum is floored again at F2 bits below its own leading bit (its
    exponent at least c_emin); one rounding into ``dr`` in place."""
    renorm = np.int64(G - F2)  # 1 or 0: branch-free, so that the loops vectorise
    J = dr.shape[0]
    di = dr.view(np.int64)
    if groups == 1:  # the common case, written so that the loop vectorises
        eg0 = eg[0, r]
        s0 = Sg[0, r]
        for j in range(J):
            e_dot = np.int64(eg0[j])
            c = dr[j]
            e_c = max(exponent_bits(di[j]), np.int64(c_emin))
            T[j], y = _late_c_merge(np.float64(s0[j]), e_dot, c, e_c, F, F2, G, c_emin, renorm)
            Y[j] = y if math.isfinite(c) else c
    else:
        for j in range(J):  # the halves floored at the common 2**(e_dot - F) and added
            e0 = np.int64(eg[0, r, j])
            e1 = np.int64(eg[1, r, j])
            e_dot = max(e0, e1)
            s = (np.floor(np.float64(Sg[0, r, j]) * float_of(pow2_bits(max(e0 - e_dot, -1000))))
                 + np.floor(np.float64(Sg[1, r, j]) * float_of(pow2_bits(max(e1 - e_dot, -1000)))))
            c = dr[j]
            e_c = max(exponent_bits(di[j]), np.int64(c_emin))
            c = 0.0 if e_c < max(e_dot, e_c) - F - 1 else c  # C far below the products' unit is dropped
            T[j], y = _late_c_merge(s, e_dot, c, e_c, F, F2, G, c_emin, renorm)
            Y[j] = y if math.isfinite(dr[j]) else dr[j]
    if ieee_zero:
        keep[:] = dr
    round_row(Y, dr, flags, p, emin, maxval, has_inf, neg_zero, subnormals, mode, overflow)
    if ieee_zero:  # an exact zero is -0 only when every term is a -0
        for j in range(J):
            if T[j] == 0.0 and keep[j] == 0.0 and math.copysign(1.0, keep[j]) < 0:
                if _all_products_negative_zero(A, B, bt, i, j0 + j, k0, k0 + L):
                    dr[j] = -0.0


@functools.cache
def late_c(lanes32: bool) -> Callable[..., None]:
    """The late-c kernel: per block, the products in ``groups`` interleaved groups, each group's products
    cut toward zero at 2**(top - F), top the group's largest E_a + E_b, and summed exactly; then
    :func:`_late_c_row` merges the groups, adds C and rounds once.

    ``lanes32``: A and B float32, EA and EB int16, for products that are exact binary32 normal values
    (``_binary32_products`` with e_zero = 0 and no floor gives kmin and kmax, and says why each cut term is
    an exact int32; the caller checks that a group's int32 sum cannot overflow).  Else float64 lanes (EA and
    EB int32): every cut term and sum is an exact float64 integer, and [kmin, kmax] = [-1022, 1023] holds
    F - top of every group with a nonzero product (a group of zero products cuts to 0 at any scale)."""
    rows, cols = (F32_ROWS, F32_COLS) if lanes32 else (ROWS, COLS)
    lane, exp_t, acc_t = (np.float32, np.int16, np.int32) if lanes32 else (np.float64, np.int32, np.float64)

    @njit(parallel=True, cache=True)
    def kernel(A, EA, B, EB, C, out, L, F, F2, G, groups, kmin, kmax, c_emin, ieee_zero, p, emin, maxval, has_inf,
               neg_zero, subnormals, mode, overflow):
        nbatch, m, kp = A.shape
        n = B.shape[2]
        for task in prange(_ntasks(nbatch, m, n, rows, cols)):
            bt, i0, j0, R, J = _tile(task, m, n, rows, cols)
            d = np.empty((R, J))
            eg = np.empty((groups, R, J), exp_t)
            scale = np.empty((groups, R, J), lane)
            Sg = np.empty((groups, R, J), acc_t)
            Y = np.empty(J)
            T = np.empty(J)
            keep = np.empty(J)
            flags = np.empty(J, np.bool_)
            d[:, :] = C[bt, i0:i0 + R, j0:j0 + J]
            for blk in range(kp // L):
                k0 = blk * L
                eg[:, :, :] = NO_SUM
                Sg[:, :, :] = 0
                for g in range(groups):  # group g: the products k0 + g, k0 + g + groups, ...
                    _product_tops(EA, EB, bt, i0, j0, k0 + g, k0 + L, groups, eg[g], False)
                    _quanta(eg[g], F, kmin, kmax, scale[g])
                    _cut_sums(A, B, bt, i0, j0, k0 + g, k0 + L, groups, scale[g], Sg[g], False, False)
                for r in range(R):
                    _late_c_row(A, B, bt, i0 + r, j0, k0, L, d[r], eg, Sg, r, groups, F, F2, G, c_emin, ieee_zero,
                                Y, T, keep, flags, p, emin, maxval, has_inf, neg_zero, subnormals, mode, overflow)
            out[bt, i0:i0 + R, j0:j0 + J] = d

    return kernel


# --- exact-fused (AMD CDNA1, correctly rounded reference) ----------------------------------------------
@njit(cache=True)
def _limb_sum(ms, ls, count, lo, hi):
    """The exact sum of ms[i] * 2**ls[i] (least last bit 2**lo, below 2**hi) over a wide span, in 30-bit
    limbs: (zero?, negative?, mag, exp) with mag its leading 61 bits and a sticky bit, times 2**exp."""
    LIMB = 30
    mask = (np.int64(1) << LIMB) - 1
    nl = (hi - lo) // LIMB + 8
    acc = np.zeros(nl, np.int64)
    for i in range(count):
        mi = ms[i]
        if mi == 0:
            continue
        sgn = -1 if mi < 0 else 1
        a = abs(mi)
        rel = ls[i] - lo
        j = rel // LIMB + 2
        o = rel % LIMB
        for piece in range(3):
            chunk = ((a >> (LIMB * piece)) & mask) << o
            acc[j + piece] += sgn * (chunk & mask)
            acc[j + piece + 1] += sgn * (chunk >> LIMB)
    for t in range(nl - 1):
        c = acc[t] >> LIMB
        acc[t] -= c << LIMB
        acc[t + 1] += c
    negative = acc[nl - 1] < 0
    if negative:
        for t in range(nl):
            acc[t] = -acc[t]
        for t in range(nl - 1):
            c = acc[t] >> LIMB
            acc[t] -= c << LIMB
            acc[t + 1] += c
    t = nl - 1
    while t > 2 and acc[t] == 0:
        t -= 1
    if acc[t] == 0:
        return True, False, np.int64(0), np.int64(0)
    x2, x1, x0 = acc[t], acc[t - 1], acc[t - 2]
    bl = max(bitlen(x2), 1)
    mant = (((x2 << LIMB) | x1) << (LIMB + 1 - bl)) | (x0 >> (bl - 1))
    sticky = (x0 & ((np.int64(1) << (bl - 1)) - 1)) != 0
    for u in range(t - 2):
        sticky = sticky or acc[u] != 0
    return False, negative, (mant << 1) | np.int64(sticky), np.int64(lo + LIMB * (t - 4) + (bl - 1) - 1)


@njit(cache=True)
def _exact_round(ms, ls, hs, count, p, emin, maxval, has_inf, neg_zero, subnormals, mode, overflow):
    """One rounding of the exact sum of ms[i] * 2**ls[i] (|term| < 2**hs[i]); (value, exact zero?)."""
    lo = np.int64(1) << 40
    hi = -lo
    for i in range(count):
        if ms[i] != 0:
            lo = min(lo, ls[i])
            hi = max(hi, hs[i])
    if hi == -(np.int64(1) << 40):
        return 0.0, True
    if hi - lo <= 62 - bitlen(count):
        total = np.int64(0)
        for i in range(count):
            if ms[i] != 0:
                total += ms[i] << (ls[i] - lo)
        if total == 0:
            return 0.0, True
        return round_int(total < 0, abs(total), lo, p, emin, maxval, has_inf, neg_zero, subnormals, mode,
                         overflow), False
    zero, negative, mag, exp = _limb_sum(ms, ls, count, lo, hi)
    if zero:
        return 0.0, True
    return round_int(negative, mag, exp, p, emin, maxval, has_inf, neg_zero, subnormals, mode, overflow), False


@njit(cache=True)
def _exact_block_scalar(MA, LA, HA, MB, LB, HB, bt, i, j, k0, L, d, c_emin, c_p, p, emin, maxval, has_inf,
                        neg_zero, subnormals, mode, overflow):
    """One exact-fused block of one output with integer terms (for sums spread over more than 53 bits)."""
    ms = np.empty(L + 1, np.int64)
    ls = np.empty(L + 1, np.int64)
    hs = np.empty(L + 1, np.int64)
    for t in range(L):
        kk = k0 + t
        ms[t] = MA[bt, i, kk] * MB[bt, kk, j]
        ls[t] = LA[bt, i, kk] + LB[bt, kk, j]
        hs[t] = HA[bt, i, kk] + HB[bt, kk, j]
    ms[L] = 0
    ls[L] = 0
    hs[L] = 0
    if d != 0.0:
        e = max(exponent_bits(bits_of(d)), c_emin)
        ms[L] = np.int64(math.ldexp(d, c_p - 1 - e))
        ls[L] = e - (c_p - 1)
        hs[L] = e + 1
    value, zero = _exact_round(ms, ls, hs, L + 1, p, emin, maxval, has_inf, neg_zero, subnormals, mode, overflow)
    return 0.0 if zero else value


@njit(cache=True, inline="always")
def _exact_start(d, c_emin, c_p, lo, S, U, Mn):
    """An exact-fused block starts from C (``d``): its last bit's exponent ``lo``, the float64 sum S and the
    sum of magnitudes U at C, the least product magnitude Mn at infinity."""
    R, J = d.shape
    for r in range(R):
        dr = d[r]
        di = dr.view(np.int64)
        for j in range(J):
            e = max(exponent_bits(di[j]), np.int64(c_emin))
            lo[r, j] = ZERO_LSB if dr[j] == 0.0 else e - (c_p - 1)
            S[r, j] = dr[j]
            U[r, j] = abs(dr[j])
            Mn[r, j] = math.inf


@njit(cache=True, inline="always")
def _exact_products(A, B, bt, i0, j0, k0, L, S, U, Mn):
    """The block's products added to S, their magnitudes to U, the least nonzero magnitude kept in Mn
    (zero products are added too: float64's sum of zeros has the IEEE sign)."""
    R, J = S.shape
    for kk in range(k0, k0 + L):
        bk = B[bt, kk, j0:j0 + J]
        for r in range(R):
            a = A[bt, i0 + r, kk]
            sr = S[r]
            ur = U[r]
            mn = Mn[r]
            for j in range(J):
                q = a * bk[j]
                sr[j] += q
                aq = abs(q)
                ur[j] += aq
                mn[j] = min(mn[j], aq if aq != 0.0 else math.inf)


@njit(parallel=True, cache=True)
def exact_fused(A, MA, LA, HA, B, MB, LB, HB, C, out, L, frac, c_emin, c_p, zero_sign,
                p, emin, maxval, has_inf, neg_zero, subnormals, mode, overflow):
    """Each block's products and C summed in float64, which is exact when every partial sum fits 53 bits
    above the terms' least last bit; the other blocks go through the integer terms (MA * 2**LA, ...).

    The check costs two vector operations per product: the sum of magnitudes U bounds every partial sum (|s| <= U_exact
    < 2**(floor(log2 U) + 2), U rounded up to L + 1 times), and the least nonzero product magnitude bounds the products'
    last bits (a product q is a multiple of 2**(E_a + E_b - frac), frac = (p_a - 1) + (p_b - 1), and below 2**(E_a + E_b
    + 2), so its last bit lies at or above floor(log2 |q|) - 1 - frac)."""
    nbatch, m, kp = A.shape
    n = B.shape[2]
    for task in prange(_ntasks(nbatch, m, n)):
        bt, i0, j0, R, J = _tile(task, m, n)
        d = np.empty((R, J))
        lo = np.empty((R, J), np.int64)
        S = np.empty((R, J))
        U = np.empty((R, J))
        Mn = np.empty((R, J))
        Y = np.empty(J)
        keep = np.empty(J)
        flags = np.empty(J, np.bool_)
        spread = np.empty(J, np.bool_)  # the float64 sum may be inexact: sum the integer terms
        d[:, :] = C[bt, i0:i0 + R, j0:j0 + J]
        for blk in range(kp // L):
            k0 = blk * L
            _exact_start(d, c_emin, c_p, lo, S, U, Mn)
            _exact_products(A, B, bt, i0, j0, k0, L, S, U, Mn)
            for r in range(R):
                dr = d[r]
                ui = U[r].view(np.int64)
                mni = Mn[r].view(np.int64)
                for j in range(J):  # branch-free, so that it vectorises (Mn = inf gives a huge bound)
                    keep[j] = dr[j]
                    Y[j] = S[r, j] if math.isfinite(dr[j]) else dr[j]
                    low = min(lo[r, j], exponent_bits(mni[j]) - 1 - frac)
                    spread[j] = (U[r, j] != 0.0) & (exponent_bits(ui[j]) + 2 - low > 53)
                wide = False
                for j in range(J):
                    wide |= spread[j]
                round_row(Y, dr, flags, p, emin, maxval, has_inf, neg_zero, subnormals, mode, overflow, zero_sign)
                if not wide:
                    continue
                for j in range(J):
                    if spread[j] and math.isfinite(keep[j]):
                        dr[j] = _exact_block_scalar(MA, LA, HA, MB, LB, HB, bt, i0 + r, j0 + j, k0, L, keep[j],
                                                    c_emin, c_p, p, emin, maxval, has_inf, neg_zero, subnormals,
                                                    mode, overflow)
        out[bt, i0:i0 + R, j0:j0 + J] = d


# --- IEEE steps: pairwise (CDNA2), fma-chain, amx, bfdot -------------------------------------------------
@njit(cache=True, inline="always")
def _tiny_exact(s, err):
    """The exact value s + err lies below binary32's smallest normal (s = fl(s + err))."""
    a = abs(s)
    return (a < F32_TINY) | ((a == F32_TINY) & (err != 0.0) & ((err > 0) != (s > 0)))


@njit(cache=True, inline="always")
def _fma32(a, b, d, ftz):
    """fl32(a*b + d), one rounding to nearest even (a*b exact in float64), flushed when ftz."""
    s, err = two_sum(a * b, d)
    x = odd_toward(s, err) if math.isfinite(s) else s  # an infinite s has a NaN err
    return to_f32_nearest(x, ftz & _tiny_exact(s, err))


@njit(cache=True, inline="always")
def _add32(x, y, ftz):
    """fl32(x + y) of two binary32 values, to nearest even, flushed when ftz."""
    s, err = two_sum(x, y)
    z = odd_toward(s, err) if math.isfinite(s) else s
    return to_f32_nearest(z, ftz & _tiny_exact(s, err))


@njit(cache=True, inline="always")
def _add32f(x, y, ftz):
    """_add32 for binary32 operands in binary32 arithmetic: fl32(x + y) is the IEEE binary32 addition, to
    nearest even, and an exact sum below 2**-126 in magnitude is a subnormal, exact (so fl32(x + y)
    itself is below 2**-126 exactly when the exact sum is): flushed to a zero of its sign when ftz."""
    s = x + y
    return s * np.float32(0.0) if (ftz & (abs(s) < np.float32(F32_TINY))) else s


@njit(parallel=True, cache=True)
def pairwise(A, B, C, out, L, ftz):
    """The products rounded to binary32, then the tree of binary32 additions and C, all in binary32
    lanes (C is a binary32 value: rne32 in supports())."""
    nbatch, m, kp = A.shape
    n = B.shape[2]
    for task in prange(_ntasks(nbatch, m, n)):
        bt, i0, j0, R, J = _tile(task, m, n)
        d = np.empty((R, J), np.float32)
        P = np.empty((L, J), np.float32)
        Q = np.empty((L, J), np.float32)
        d[:, :] = C[bt, i0:i0 + R, j0:j0 + J]
        for blk in range(kp // L):
            k0 = blk * L
            for r in range(R):
                for t in range(L):  # the products, rounded to binary32
                    a = A[bt, i0 + r, k0 + t]
                    bk = B[bt, k0 + t, j0:j0 + J]
                    pt = P[t]
                    for j in range(J):
                        x = a * bk[j]  # exact
                        y = np.float32(x)
                        pt[j] = y * np.float32(0.0) if (ftz & (abs(x) < F32_TINY)) else y
                width = L
                src, dst = P, Q
                while width > 1:  # the binary tree of binary32 additions, level by level
                    width //= 2
                    for t in range(width):
                        x0 = src[2 * t]
                        x1 = src[2 * t + 1]
                        y = dst[t]
                        for j in range(J):
                            y[j] = _add32f(x0[j], x1[j], ftz)
                    src, dst = dst, src
                dr = d[r]
                s0 = src[0]
                for j in range(J):
                    dr[j] = _add32f(dr[j], s0[j], ftz)
        out[bt, i0:i0 + R, j0:j0 + J] = d


@njit(cache=True, inline="always")
def _fma_lane32(a, b, c, ftz):
    """(fl32(a * b + c) flushed when ftz, whether |fl32| == 2**-126) for binary32 values in binary32 lanes: one fused
    multiply-add (llvm.fma), the IEEE operation _fma32 computes.  With ftz a result is flushed when the exact value is
    below 2**-126: when |fl32| < 2**-126 it is, when |fl32| > 2**-126 it is not (rounding is monotonic); |fl32| ==
    2**-126 may come from either side, and those steps are redone by :func:`_redo_edges32`."""
    e = fma32(a, b, c)
    tiny = np.float32(F32_TINY)
    return (e * np.float32(0.0) if (ftz & (abs(e) < tiny)) else e), abs(e) == tiny


@njit(cache=True, inline="always")
def _redo_edges32(J, a, b, acc, res, ftz):
    """The steps of a row of _fma_lane32 that landed on +-2**-126 redone by _fma32, which flushes by the exact value."""
    for j in range(J):
        if abs(res[j]) == np.float32(F32_TINY):
            res[j] = _fma32(np.float64(a), np.float64(b[j]), np.float64(acc[j]), ftz)


@njit(cache=True, inline="always")
def _fma_row32(J, a, b, acc, res, ftz):
    """res[j] = fl32(a * b[j] + acc[j]) for j < J, to nearest even, flushed when ftz, in binary32 lanes
    (:func:`_fma_lane32`).  J is given: a trip count read from an array that the caller swaps with another
    each step (acc, res) keeps LLVM from vectorising the loop (5x slower AMX)."""
    edge = False
    for j in range(J):
        x, at_edge = _fma_lane32(a, b[j], acc[j], ftz)
        res[j] = x
        edge |= at_edge
    if ftz and edge:
        _redo_edges32(J, a, b, acc, res, ftz)


@njit(cache=True, inline="always")
def _fma_rows32(J, a0, b0, acc0, res0, a1, b1, acc1, res1, ftz):
    """:func:`_fma_row32` for two rows in one loop (AMX's even and odd chains: 5% faster than one row after
    the other)."""
    edge = False
    for j in range(J):
        x0, at_edge0 = _fma_lane32(a0, b0[j], acc0[j], ftz)
        x1, at_edge1 = _fma_lane32(a1, b1[j], acc1[j], ftz)
        res0[j] = x0
        res1[j] = x1
        edge |= at_edge0 | at_edge1
    if ftz and edge:
        _redo_edges32(J, a0, b0, acc0, res0, ftz)
        _redo_edges32(J, a1, b1, acc1, res1, ftz)


@njit(cache=True, inline="always")
def _fma_rows64(J, a0, b0, acc0, res0, a1, b1, acc1, res1, ftz):
    """:func:`_fma_rows32` in float64 lanes (the products exact in float64): _fma32 on each."""
    for j in range(J):
        res0[j] = _fma32(a0, b0[j], acc0[j], ftz)
        res1[j] = _fma32(a1, b1[j], acc1[j], ftz)


@njit(cache=True, inline="always")
def _fma_row_rounded(a, b, acc, res, positive_zero, p, emin, maxval, has_inf, neg_zero, subnormals, mode, overflow):
    """res[j] = a * b[j] + acc[j] rounded once to a format of p <= 51 bits, any rounding but TowardNegative
    (float64 lanes, a * b[j] exact in float64): one TwoSum, then round_pair; an exact zero is +0 with
    ``positive_zero`` and else the float64 sum's (IEEE's), a non-finite sum is carried along."""
    for j in range(b.shape[0]):
        s, err = two_sum(a * b[j], acc[j])
        if s == 0.0:
            res[j] = 0.0 if positive_zero else s
        elif math.isfinite(s):
            res[j] = round_pair(s, err, p, emin, maxval, has_inf, neg_zero, subnormals, mode, overflow)
        else:
            res[j] = s


@functools.cache
def fma_chain(lanes32: bool) -> Callable[..., None]:
    """The fma-chain kernel: each step one fused multiply-add d = R(a * b + d) in the result format.

    ``lanes32``: binary32 results rounded to nearest even, A and B float32 (their values binary32 values):
    :func:`_fma_row32` in binary32 lanes; every zero result is made +0 at the end with ``positive_zero``.
    Else float64 lanes, any result format of p <= 51 bits: :func:`_fma_row_rounded`."""
    lane = np.float32 if lanes32 else np.float64

    @njit(parallel=True, cache=True)
    def kernel(A, B, C, out, ftz, positive_zero, p, emin, maxval, has_inf, neg_zero, subnormals, mode, overflow):
        nbatch, m, kp = A.shape
        n = B.shape[2]
        for task in prange(_ntasks(nbatch, m, n)):
            bt, i0, j0, R, J = _tile(task, m, n)
            d = np.empty((R, J), lane)
            d2 = np.empty((R, J), lane)
            d[:, :] = C[bt, i0:i0 + R, j0:j0 + J]
            for kk in range(kp):
                bk = B[bt, kk, j0:j0 + J]
                for r in range(R):
                    if lanes32:
                        _fma_row32(J, A[bt, i0 + r, kk], bk, d[r], d2[r], ftz)
                    else:
                        _fma_row_rounded(A[bt, i0 + r, kk], bk, d[r], d2[r], positive_zero, p, emin, maxval, has_inf,
                                         neg_zero, subnormals, mode, overflow)
                d, d2 = d2, d
            if lanes32 and positive_zero:
                for r in range(R):
                    for j in range(J):
                        if d[r, j] == 0.0:
                            d[r, j] = 0.0
            out[bt, i0:i0 + R, j0:j0 + J] = d

    return kernel


@functools.cache
def amx(lanes32: bool) -> Callable[..., None]:
    """The AMX kernel: per block of L products, two binary32 chains from +0, the even products' and the odd ones', each
    step one fused multiply-add rounded to nearest even, then C + (even + odd) by two binary32 additions; results below
    2**-126 flushed when ftz.  ``lanes32``: A and B float32 (their values binary32 values), :func:`_fma_rows32` and
    :func:`_add32f`; else float64 lanes (products exact in float64), :func:`_fma_rows64` and :func:`_add32`."""
    lane = np.float32 if lanes32 else np.float64

    @njit(parallel=True, cache=True)
    def kernel(A, B, C, out, L, ftz):
        nbatch, m, kp = A.shape
        n = B.shape[2]
        for task in prange(_ntasks(nbatch, m, n)):
            bt, i0, j0, R, J = _tile(task, m, n)
            d = np.empty((R, J), lane)
            ev = np.empty(J, lane)
            od = np.empty(J, lane)
            ev2 = np.empty(J, lane)
            od2 = np.empty(J, lane)
            d[:, :] = C[bt, i0:i0 + R, j0:j0 + J]
            for blk in range(kp // L):
                k0 = blk * L
                for r in range(R):
                    ev[:] = 0.0
                    od[:] = 0.0
                    for t in range(k0, k0 + L, 2):
                        a0 = A[bt, i0 + r, t]
                        a1 = A[bt, i0 + r, t + 1]
                        b0 = B[bt, t, j0:j0 + J]
                        b1 = B[bt, t + 1, j0:j0 + J]
                        if lanes32:
                            _fma_rows32(J, a0, b0, ev, ev2, a1, b1, od, od2, ftz)
                        else:
                            _fma_rows64(J, a0, b0, ev, ev2, a1, b1, od, od2, ftz)
                        ev, ev2 = ev2, ev
                        od, od2 = od2, od
                    dr = d[r]
                    for j in range(J):
                        if lanes32:
                            dr[j] = _add32f(dr[j], _add32f(ev[j], od[j], ftz), ftz)
                        else:
                            dr[j] = _add32(dr[j], _add32(ev[j], od[j], ftz), ftz)
            out[bt, i0:i0 + R, j0:j0 + J] = d

    return kernel


@njit(cache=True, inline="always")
def _odd24(x):
    """A float64 rounded to odd at 53 bits, rounded to odd at 24 (truncated, the last bit set if anything
    was dropped: the two make one rounding to odd); above binary32's largest finite value, that value."""
    b = bits_of(x)
    low = b & ((np.int64(1) << 29) - 1)
    y = float_of((b - low) | (np.int64(low != 0) << 29))
    return math.copysign(F32_MAX, y) if abs(y) > F32_MAX else y


@njit(cache=True, inline="always")
def _odd32(s, err, ftz):
    """Round to odd into binary32 of the exact s + err, subnormal results flushed when ftz (the only
    case of the Arm units, which flush), overflow to the largest finite value."""
    if s == 0.0 or not math.isfinite(s):
        return s
    if ftz and _tiny_exact(s, err):
        return math.copysign(0.0, s)
    x = odd_toward(s, err)
    if abs(x) < F32_TINY:
        p, emin, maxval, has_inf, neg_zero, subnormals, mode, overflow = RO32
        return round_pair(s, err, p, emin, maxval, has_inf, neg_zero, subnormals, mode, overflow)
    return _odd24(x)


@njit(cache=True, inline="always")
def _odd32_ftz(s, err):
    """_odd32 with subnormal results flushed, branch-free (so that the loops vectorise)."""
    y = _odd24(odd_toward(s, err))
    return math.copysign(0.0, s) if _tiny_exact(s, err) else y


@njit(cache=True, inline="always")
def _odd32_ftz_f(x, y):
    """_odd32_ftz of the exact x + y for binary32 x, y, in binary32: (s, err) = TwoSum in binary32 is exact
    short of overflow; s moved to its odd neighbour on err's side where s is even and inexact; an
    overflowing s (then exact |x + y| is above the largest finite value) gives the largest finite value,
    of its sign; a sum whose exact value is below 2**-126 a zero of its sign."""
    s = x + y
    bp = s - x
    err = (x - (s - bp)) + (y - bp)
    b = bits32_of(s)
    move = np.int32((err != np.float32(0.0)) & ((b & 1) == 0))
    away = np.int32((err > np.float32(0.0)) == (s > np.float32(0.0)))
    r = float32_of(np.int32(b + move * (2 * away - 1)))
    r = np.float32(math.copysign(F32_MAX, s)) if abs(s) > np.float32(F32_MAX) else r
    a = abs(s)
    tiny = np.float32(F32_TINY)
    flush = (a < tiny) | ((a == tiny) & (err != np.float32(0.0)) & ((err > np.float32(0.0)) != (s > np.float32(0.0))))
    return s * np.float32(0.0) if flush else r


@functools.cache
def bfdot(lanes32: bool, ftz: bool) -> Callable[..., None]:
    """The BFDOT kernel: per pair of products, both rounded to odd into binary32, their sum rounded to odd, then C +
    that sum rounded to odd; ``ftz`` flushes subnormal results (a constant of the kernel: its loops have no branch on
    it).  ``lanes32`` (with ftz): A and B float32, every nonzero product an exact binary32 normal value (the caller
    checks the inputs' exponent range), so left as it is, C a binary32 value, the sums by :func:`_odd32_ftz_f`; else
    float64 lanes (products exact in float64), TwoSums rounded by :func:`_odd32_ftz` (branch-free, so that the loop
    vectorises) or, with subnormals, :func:`_odd32` (ftz a closure constant rather than a helper's argument: numba then
    prunes the other branch before typing, a third of this kernel's compile time)."""
    lane = np.float32 if lanes32 else np.float64

    @njit(parallel=True, cache=True)
    def kernel(A, B, C, out):
        nbatch, m, kp = A.shape
        n = B.shape[2]
        for task in prange(_ntasks(nbatch, m, n)):
            bt, i0, j0, R, J = _tile(task, m, n)
            d = np.empty((R, J), lane)
            d[:, :] = C[bt, i0:i0 + R, j0:j0 + J]
            for k0 in range(0, kp, 2):
                b0 = B[bt, k0, j0:j0 + J]
                b1 = B[bt, k0 + 1, j0:j0 + J]
                for r in range(R):
                    a0 = A[bt, i0 + r, k0]
                    a1 = A[bt, i0 + r, k0 + 1]
                    dr = d[r]
                    for j in range(J):
                        if lanes32:  # the products exact binary32 values already
                            dr[j] = _odd32_ftz_f(dr[j], _odd32_ftz_f(a0 * b0[j], a1 * b1[j]))
                        elif ftz:
                            s, err = two_sum(_odd32_ftz(a0 * b0[j], 0.0), _odd32_ftz(a1 * b1[j], 0.0))
                            s, err = two_sum(dr[j], _odd32_ftz(s, err))
                            dr[j] = _odd32_ftz(s, err)
                        else:
                            s, err = two_sum(_odd32(a0 * b0[j], 0.0, ftz), _odd32(a1 * b1[j], 0.0, ftz))
                            s, err = two_sum(dr[j], _odd32(s, err, ftz))
                            dr[j] = _odd32(s, err, ftz)
            out[bt, i0:i0 + R, j0:j0 + J] = d

    return kernel
