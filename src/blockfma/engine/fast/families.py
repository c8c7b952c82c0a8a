"""Compiled kernels of the algorithm families (see docs/semantics.md; ``engine/kernels.py`` is the numpy twin).

Each kernel computes a batch of products ``D[b] = A[b] @ B[b] + C[b]``, chaining blocks of L over k. One
parallel task owns a tile of ROWS x COLS outputs and keeps, per output, the running C (``d``) and the
block's state in small arrays; the innermost loops run along a row of B so that they vectorise.  Why
each step is exact:

* a product of two values of at most 26 significant bits (fp16, bf16, tf32, fp8, fp32 inputs) is exact in
  float64, and so is its scaling by a power of two;
* ``np.trunc``/``np.floor`` of a scaled term cuts it exactly at the alignment quantum, and the sum of cut
  terms is an integer below 2**53;
* the IEEE steps round ``s + err`` (a TwoSum pair) through a round-to-odd float64, which composes with a
  final rounding to binary32;
* everything else goes through ``rounding.round_int``, the scalar twin of ``formats.round_integer``.

Inputs are finite (the dispatcher sends other calls to numpy); infinities and NaN born of overflow inside a
chain are carried along.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from ..rules import NO_EXPONENT
from .rounding import (bitlen, bits32_of, bits_of, exponent_bits, float32_of, float_of, fma32, odd_toward,
                       pow2_bits, round_int, round_pair, round_row, to_f32_nearest, two_sum)

ROWS, COLS = 4, 256  # output tile of one task: B's block rows are reused ROWS times from cache
F32_ROWS, F32_COLS = 4, 512  # the same for truncated_fused_f32 (longer rows: less loop overhead)
NONE = NO_EXPONENT  # exponent of "no term"
ZERO_LSB, ZERO_TOP = 1 << 14, -(1 << 14)  # bit span of a zero term: empty
F32_TINY = 2.0**-126
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


# --- truncated-fused (NVIDIA) ---------------------------------------------------------------------------
@njit(parallel=True, cache=True)
def truncated_fused(A, EA, ZA, B, EB, ZB, C, out, L, F, e_zero, c_emin, floor_align, carry_mod,
                    p, emin, maxval, has_inf, neg_zero, subnormals, mode, overflow):
    nbatch, m, kp = A.shape
    n = B.shape[2]
    for task in prange(_ntasks(nbatch, m, n)):
        bt, i0, j0, R, J = _tile(task, m, n)
        d = np.empty((R, J))
        emax = np.empty((R, J), np.int32)
        sc = np.empty((R, J), np.int64)
        inv = np.empty((R, J), np.int64)
        S = np.empty((R, J))
        Y = np.empty(J)
        flags = np.empty(J, np.bool_)
        d[:, :] = C[bt, i0:i0 + R, j0:j0 + J]
        for blk in range(kp // L):
            k0 = blk * L
            for r in range(R):
                _block_start_exponents(d[r], ZA[bt, i0 + r, blk], ZB[bt, blk, j0:j0 + J], emax[r], c_emin, e_zero)
            for kk in range(k0, k0 + L):  # e_max over the products: sums of the factors' exponents
                ebk = EB[bt, kk, j0:j0 + J]
                for r in range(R):
                    ea = EA[bt, i0 + r, kk]
                    em = emax[r]
                    for j in range(J):
                        em[j] = max(em[j], ea + ebk[j])
            for r in range(R):  # the alignment quantum 2**(e_max - F), and C cut at it
                em = emax[r]
                scr = sc[r]
                invr = inv[r]
                for j in range(J):
                    scr[j] = pow2_bits(F - em[j])
                    invr[j] = pow2_bits(em[j] - F)
                scf = scr.view(np.float64)
                sr = S[r]
                dr = d[r]
                if floor_align:
                    for j in range(J):
                        sr[j] = np.floor(dr[j] * scf[j])
                else:
                    for j in range(J):
                        sr[j] = np.trunc(dr[j] * scf[j])
            for kk in range(k0, k0 + L):  # every product cut at the quantum and summed exactly
                bk = B[bt, kk, j0:j0 + J]
                for r in range(R):
                    a = A[bt, i0 + r, kk]
                    if a == 0.0:
                        continue
                    sr = S[r]
                    scf = sc[r].view(np.float64)
                    if floor_align:
                        for j in range(J):
                            sr[j] += np.floor(a * bk[j] * scf[j])
                    else:
                        for j in range(J):
                            sr[j] += np.trunc(a * bk[j] * scf[j])
            for r in range(R):  # carries lost, then one rounding
                sr = S[r]
                if carry_mod > 0.0:
                    for j in range(J):
                        sr[j] = math.copysign(np.fmod(abs(sr[j]), carry_mod), sr[j])
                invf = inv[r].view(np.float64)
                for j in range(J):
                    Y[j] = sr[j] * invf[j]  # exact: an integer below 2**53 times a power of two
                round_row(Y, d[r], flags, p, emin, maxval, has_inf, neg_zero, subnormals, mode, overflow)
        out[bt, i0:i0 + R, j0:j0 + J] = d


@njit(parallel=True, cache=True)
def truncated_fused_f32(A, EA, ZA, B, EB, ZB, C, out, L, G, F, kmin, kmax, e_zero, c_emin, floor_align,
                        carry_mod, p, emin, maxval, has_inf, neg_zero, subnormals, mode, overflow):
    """truncated_fused for inputs whose products are exact binary32 normal values (fp16, fp8): A and B
    float32, EA and EB int16.  Each product is scaled by 2**(F - e_max) in binary32 and cut to an int32
    (8 lanes per AVX2 instruction instead of 4); see ``batched`` for why it is exact.  The int32 sums are
    folded into the float64 sum every G products, before they could overflow."""
    nbatch, m, kp = A.shape
    n = B.shape[2]
    for task in prange(_ntasks(nbatch, m, n, F32_ROWS, F32_COLS)):
        bt, i0, j0, R, J = _tile(task, m, n, F32_ROWS, F32_COLS)
        d = np.empty((R, J))
        emax = np.empty((R, J), np.int16)
        sc = np.empty((R, J), np.int32)
        S32 = np.zeros((R, J), np.int32)
        S = np.empty((R, J))
        Y = np.empty(J)
        flags = np.empty(J, np.bool_)
        d[:, :] = C[bt, i0:i0 + R, j0:j0 + J]
        for blk in range(kp // L):
            k0 = blk * L
            for r in range(R):
                _block_start_exponents(d[r], ZA[bt, i0 + r, blk], ZB[bt, blk, j0:j0 + J], emax[r], c_emin, e_zero)
            for kk in range(k0, k0 + L - 3, 4):  # e_max over the products: sums of the factors' exponents
                eb0 = EB[bt, kk, j0:j0 + J]
                eb1 = EB[bt, kk + 1, j0:j0 + J]
                eb2 = EB[bt, kk + 2, j0:j0 + J]
                eb3 = EB[bt, kk + 3, j0:j0 + J]
                for r in range(R):
                    ea0 = EA[bt, i0 + r, kk]
                    ea1 = EA[bt, i0 + r, kk + 1]
                    ea2 = EA[bt, i0 + r, kk + 2]
                    ea3 = EA[bt, i0 + r, kk + 3]
                    em = emax[r]
                    for j in range(J):
                        em[j] = max(max(em[j], max(np.int16(ea0 + eb0[j]), np.int16(ea1 + eb1[j]))),
                                    max(np.int16(ea2 + eb2[j]), np.int16(ea3 + eb3[j])))
            for kk in range(k0 + L // 4 * 4, k0 + L):
                ebk = EB[bt, kk, j0:j0 + J]
                for r in range(R):
                    ea = EA[bt, i0 + r, kk]
                    em = emax[r]
                    for j in range(J):
                        em[j] = max(em[j], np.int16(ea + ebk[j]))
            for r in range(R):  # the quantum's inverse 2**(F - e_max) in binary32 (clamped)
                em = emax[r]
                scr = sc[r]
                for j in range(J):
                    scr[j] = np.int32(min(max(F - em[j], kmin), kmax) + 127) << 23
            if L > G:
                S[:, :] = 0.0
            for g0 in range(k0, k0 + L, G):
                g1 = min(g0 + G, k0 + L)
                for kk in range(g0, g1 - 3, 4):  # products cut at the quantum, summed in int32, four at a time
                    bk = B[bt, kk, j0:j0 + J]
                    bk1 = B[bt, kk + 1, j0:j0 + J]
                    bk2 = B[bt, kk + 2, j0:j0 + J]
                    bk3 = B[bt, kk + 3, j0:j0 + J]
                    for r in range(R):
                        a = A[bt, i0 + r, kk]
                        a1 = A[bt, i0 + r, kk + 1]
                        a2 = A[bt, i0 + r, kk + 2]
                        a3 = A[bt, i0 + r, kk + 3]
                        s32 = S32[r]
                        scf = sc[r].view(np.float32)
                        if floor_align:
                            for j in range(J):
                                s32[j] += ((np.int32(np.floor(a * bk[j] * scf[j]))
                                            + np.int32(np.floor(a1 * bk1[j] * scf[j])))
                                           + (np.int32(np.floor(a2 * bk2[j] * scf[j]))
                                              + np.int32(np.floor(a3 * bk3[j] * scf[j]))))
                        else:
                            for j in range(J):
                                s32[j] += ((np.int32(a * bk[j] * scf[j]) + np.int32(a1 * bk1[j] * scf[j]))
                                           + (np.int32(a2 * bk2[j] * scf[j]) + np.int32(a3 * bk3[j] * scf[j])))
                for kk in range(g0 + (g1 - g0) // 4 * 4, g1):
                    bk = B[bt, kk, j0:j0 + J]
                    for r in range(R):
                        a = A[bt, i0 + r, kk]
                        s32 = S32[r]
                        scf = sc[r].view(np.float32)
                        if floor_align:
                            for j in range(J):
                                s32[j] += np.int32(np.floor(a * bk[j] * scf[j]))
                        else:
                            for j in range(J):
                                s32[j] += np.int32(a * bk[j] * scf[j])
                if g0 + G < k0 + L:  # more to come: the int32 sums moved to float64
                    for r in range(R):
                        s32 = S32[r]
                        sr = S[r]
                        for j in range(J):
                            sr[j] += np.float64(s32[j])
                            s32[j] = 0
            for r in range(R):  # C cut at the quantum, the sum (carries lost), then one rounding
                em = emax[r]
                dr = d[r]
                s32 = S32[r]
                sr = S[r]
                for j in range(J):
                    s64 = float_of(pow2_bits(F - em[j]))
                    c = np.floor(dr[j] * s64) if floor_align else np.trunc(dr[j] * s64)
                    Y[j] = c + np.float64(s32[j]) + (sr[j] if L > G else 0.0)
                    s32[j] = 0
                if carry_mod > 0.0:
                    for j in range(J):
                        Y[j] = math.copysign(np.fmod(abs(Y[j]), carry_mod), Y[j])
                for j in range(J):
                    Y[j] *= float_of(pow2_bits(em[j] - F))  # exact: an integer below 2**53 times 2**k
                round_row(Y, dr, flags, p, emin, maxval, has_inf, neg_zero, subnormals, mode, overflow)
        out[bt, i0:i0 + R, j0:j0 + J] = d


# --- late-c (AMD CDNA3) ---------------------------------------------------------------------------------
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
            E = max(e_dot, e_c)
            s_units = np.floor(np.float64(s0[j]) * float_of(pow2_bits(max(e_dot - E + (G - F), -1000))))
            c_units = np.floor(c * float_of(pow2_bits(F - E))) * float_of(pow2_bits(G - F))
            t = s_units + c_units
            sh = max(max(exponent_bits(bits_of(t)) + E - G, np.int64(c_emin)) - F2 - (E - G), 0) * renorm
            t = np.floor(t * float_of(pow2_bits(-sh))) * float_of(pow2_bits(sh))
            T[j] = t
            y = t * float_of(pow2_bits(E - G))
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
            E = max(e_dot, e_c)
            c = 0.0 if e_c < E - F - 1 else c  # C far below the products' unit is dropped
            s_units = np.floor(s * float_of(pow2_bits(max(e_dot - E + (G - F), -1000))))
            c_units = np.floor(c * float_of(pow2_bits(F - E))) * float_of(pow2_bits(G - F))
            t = s_units + c_units
            sh = max(max(exponent_bits(bits_of(t)) + E - G, np.int64(c_emin)) - F2 - (E - G), 0) * renorm
            t = np.floor(t * float_of(pow2_bits(-sh))) * float_of(pow2_bits(sh))
            T[j] = t
            y = t * float_of(pow2_bits(E - G))
            Y[j] = y if math.isfinite(dr[j]) else dr[j]
    if ieee_zero:
        keep[:] = dr
    round_row(Y, dr, flags, p, emin, maxval, has_inf, neg_zero, subnormals, mode, overflow)
    if ieee_zero:  # an exact zero is -0 only when every term is a -0
        for j in range(J):
            if T[j] == 0.0 and keep[j] == 0.0 and math.copysign(1.0, keep[j]) < 0:
                if _all_products_negative_zero(A, B, bt, i, j0 + j, k0, k0 + L):
                    dr[j] = -0.0


@njit(cache=True, inline="always")
def _group_tops(EA, EB, bt, i0, j0, k0, L, groups, eg):
    """eg[g, r, j]: the largest E_a + E_b over group g's products of the block (the int dtype of eg;
    products with a zero factor sum to far below any other, through the zeros' exponent)."""
    R, J = eg.shape[1], eg.shape[2]
    for kk in range(k0, k0 + L):
        g = (kk - k0) % groups
        ebk = EB[bt, kk, j0:j0 + J]
        for r in range(R):
            ea = EA[bt, i0 + r, kk]
            em = eg[g, r]
            for j in range(J):  # in eg's own width, so that the loop vectorises
                em[j] = max(em[j], eg.dtype.type(ea + ebk[j]))


@njit(parallel=True, cache=True)
def late_c(A, EA, B, EB, C, out, L, F, F2, G, groups, c_emin, ieee_zero,
           p, emin, maxval, has_inf, neg_zero, subnormals, mode, overflow):
    nbatch, m, kp = A.shape
    n = B.shape[2]
    for task in prange(_ntasks(nbatch, m, n)):
        bt, i0, j0, R, J = _tile(task, m, n)
        d = np.empty((R, J))
        eg = np.empty((groups, R, J), np.int32)
        sc = np.empty((groups, R, J), np.int64)
        Sg = np.empty((groups, R, J))
        Y = np.empty(J)
        T = np.empty(J)
        keep = np.empty(J)
        flags = np.empty(J, np.bool_)
        d[:, :] = C[bt, i0:i0 + R, j0:j0 + J]
        for blk in range(kp // L):
            k0 = blk * L
            eg[:, :, :] = NONE
            Sg[:, :, :] = 0.0
            _group_tops(EA, EB, bt, i0, j0, k0, L, groups, eg)
            for g in range(groups):  # each group's quantum 2**(e - F) (any power of two for an empty group)
                for r in range(R):
                    em = eg[g, r]
                    scr = sc[g, r]
                    for j in range(J):
                        scr[j] = pow2_bits(F - max(em[j], -900))
            for kk in range(k0, k0 + L):  # products cut toward zero at their group's quantum
                g = (kk - k0) % groups
                bk = B[bt, kk, j0:j0 + J]
                for r in range(R):
                    a = A[bt, i0 + r, kk]
                    if a == 0.0:
                        continue
                    sr = Sg[g, r]
                    scf = sc[g, r].view(np.float64)
                    for j in range(J):
                        sr[j] += np.trunc(a * bk[j] * scf[j])
            for r in range(R):
                _late_c_row(A, B, bt, i0 + r, j0, k0, L, d[r], eg, Sg, r, groups, F, F2, G, c_emin, ieee_zero, Y, T,
                            keep, flags, p, emin, maxval, has_inf, neg_zero, subnormals, mode, overflow)
        out[bt, i0:i0 + R, j0:j0 + J] = d


@njit(parallel=True, cache=True)
def late_c_f32(A, EA, B, EB, C, out, L, F, F2, G, groups, kmin, kmax, c_emin, ieee_zero,
               p, emin, maxval, has_inf, neg_zero, subnormals, mode, overflow):
    """late_c for inputs whose products are exact binary32 normal values (fp16, fp8; bf16 and tf32 within
    a range): A and B float32, EA and EB int16.  Each product is scaled by 2**(F - top) in binary32 and cut
    toward zero to an int32, 8 lanes per AVX2 instruction; ``batched`` says why that is exact and why a
    group's int32 sum cannot overflow."""
    nbatch, m, kp = A.shape
    n = B.shape[2]
    for task in prange(_ntasks(nbatch, m, n, F32_ROWS, F32_COLS)):
        bt, i0, j0, R, J = _tile(task, m, n, F32_ROWS, F32_COLS)
        d = np.empty((R, J))
        eg = np.empty((groups, R, J), np.int16)
        sc = np.empty((groups, R, J), np.int32)
        Sg = np.empty((groups, R, J), np.int32)
        Y = np.empty(J)
        T = np.empty(J)
        keep = np.empty(J)
        flags = np.empty(J, np.bool_)
        d[:, :] = C[bt, i0:i0 + R, j0:j0 + J]
        for blk in range(kp // L):
            k0 = blk * L
            eg[:, :, :] = -(1 << 15)  # below every sum of two exponents, zeros' included
            Sg[:, :, :] = 0
            _group_tops(EA, EB, bt, i0, j0, k0, L, groups, eg)
            for g in range(groups):  # each group's quantum's inverse 2**(F - top) in binary32 (clamped)
                for r in range(R):
                    em = eg[g, r]
                    scr = sc[g, r]
                    for j in range(J):
                        scr[j] = np.int32(min(max(F - em[j], kmin), kmax) + 127) << 23
            for kk in range(k0, k0 + L):  # products cut toward zero at their group's quantum, in int32
                g = (kk - k0) % groups
                bk = B[bt, kk, j0:j0 + J]
                for r in range(R):
                    a = A[bt, i0 + r, kk]
                    sr = Sg[g, r]
                    scf = sc[g, r].view(np.float32)
                    for j in range(J):
                        sr[j] += np.int32(a * bk[j] * scf[j])
            for r in range(R):
                _late_c_row(A, B, bt, i0 + r, j0, k0, L, d[r], eg, Sg, r, groups, F, F2, G, c_emin, ieee_zero, Y, T,
                            keep, flags, p, emin, maxval, has_inf, neg_zero, subnormals, mode, overflow)
        out[bt, i0:i0 + R, j0:j0 + J] = d


# --- exact-fused (AMD CDNA1, correctly rounded reference) ----------------------------------------------
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
    # wide span: 30-bit limbs, then the leading 61 bits and a sticky bit
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
        return 0.0, True
    x2, x1, x0 = acc[t], acc[t - 1], acc[t - 2]
    bl = max(bitlen(x2), 1)
    mant = (((x2 << LIMB) | x1) << (LIMB + 1 - bl)) | (x0 >> (bl - 1))
    sticky = (x0 & ((np.int64(1) << (bl - 1)) - 1)) != 0
    for u in range(t - 2):
        sticky = sticky or acc[u] != 0
    mag = (mant << 1) | np.int64(sticky)
    exp = lo + LIMB * (t - 4) + (bl - 1) - 1
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


@njit(parallel=True, cache=True)
def exact_fused(A, MA, LA, HA, B, MB, LB, HB, C, out, L, frac, c_emin, c_p, zero_sign,
                p, emin, maxval, has_inf, neg_zero, subnormals, mode, overflow):
    """Each block's products and C summed in float64, which is exact when every partial sum fits 53 bits
    above the terms' least last bit; the other blocks go through the integer terms (MA * 2**LA, ...).

    The check costs two vector operations per product: the sum of magnitudes U bounds every partial sum
    (|s| <= U_exact < 2**(floor(log2 U) + 2), U rounded up to L + 1 times), and the least nonzero product
    magnitude bounds the products' last bits (a product q is a multiple of 2**(E_a + E_b - frac), frac =
    (p_a - 1) + (p_b - 1), and below 2**(E_a + E_b + 2), so its last bit lies at or above
    floor(log2 |q|) - 1 - frac)."""
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
            for r in range(R):  # C first: the exact sum starts from it
                dr = d[r]
                di = dr.view(np.int64)
                for j in range(J):
                    e = max(exponent_bits(di[j]), np.int64(c_emin))
                    lo[r, j] = ZERO_LSB if dr[j] == 0.0 else e - (c_p - 1)
                    S[r, j] = dr[j]
                    U[r, j] = abs(dr[j])
                    Mn[r, j] = math.inf
            for kk in range(k0, k0 + L):  # the products: their sum, sum of magnitudes, least magnitude
                bk = B[bt, kk, j0:j0 + J]
                for r in range(R):  # zero products are added too: float64's sum of zeros has the IEEE sign
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


@njit(parallel=True, cache=True)
def fma_chain_f32(A, B, C, out, ftz, positive_zero):
    """Binary32 result, to nearest even: each step is one fused multiply-add in binary32 lanes (A and B
    float32, their values binary32 values), flushed as in amx_f32 (steps landing on +-2**-126 redone by
    _fma32)."""
    nbatch, m, kp = A.shape
    n = B.shape[2]
    tiny = np.float32(F32_TINY)
    zero = np.float32(0.0)
    for task in prange(_ntasks(nbatch, m, n)):
        bt, i0, j0, R, J = _tile(task, m, n)
        d = np.empty((R, J), np.float32)
        d2 = np.empty((R, J), np.float32)
        d[:, :] = C[bt, i0:i0 + R, j0:j0 + J]
        for kk in range(kp):
            bk = B[bt, kk, j0:j0 + J]
            for r in range(R):
                a = A[bt, i0 + r, kk]
                dr = d[r]
                nr = d2[r]
                edge = False
                for j in range(J):
                    e = fma32(a, bk[j], dr[j])
                    edge = edge | (abs(e) == tiny)
                    nr[j] = e * zero if (ftz & (abs(e) < tiny)) else e
                if ftz and edge:
                    for j in range(J):
                        if abs(nr[j]) == tiny:
                            nr[j] = _fma32(np.float64(a), np.float64(bk[j]), np.float64(dr[j]), ftz)
            d, d2 = d2, d
        if positive_zero:
            for r in range(R):
                for j in range(J):
                    if d[r, j] == 0.0:
                        d[r, j] = 0.0
        out[bt, i0:i0 + R, j0:j0 + J] = d


@njit(parallel=True, cache=True)
def fma_chain(A, B, C, out, positive_zero, p, emin, maxval, has_inf, neg_zero, subnormals, mode, overflow):
    """Any result format of p <= 51 bits and any rounding but TowardNegative: one TwoSum per step."""
    nbatch, m, kp = A.shape
    n = B.shape[2]
    for task in prange(nbatch * m * n):
        bt = task // (m * n)
        i = (task // n) % m
        j = task % n
        d = C[bt, i, j]
        for kk in range(kp):
            s, err = two_sum(A[bt, i, kk] * B[bt, kk, j], d)
            if s == 0.0:
                d = 0.0 if positive_zero else s
            elif math.isfinite(s):
                d = round_pair(s, err, p, emin, maxval, has_inf, neg_zero, subnormals, mode, overflow)
            else:
                d = s
        out[bt, i, j] = d


@njit(parallel=True, cache=True)
def amx(A, B, C, out, L, ftz):
    nbatch, m, kp = A.shape
    n = B.shape[2]
    for task in prange(_ntasks(nbatch, m, n)):
        bt, i0, j0, R, J = _tile(task, m, n)
        d = np.empty((R, J))
        ev = np.empty(J)
        od = np.empty(J)
        d[:, :] = C[bt, i0:i0 + R, j0:j0 + J]
        for blk in range(kp // L):
            k0 = blk * L
            for r in range(R):
                ev[:] = 0.0
                od[:] = 0.0
                for t in range(0, L, 2):
                    a0 = A[bt, i0 + r, k0 + t]
                    a1 = A[bt, i0 + r, k0 + t + 1]
                    b0 = B[bt, k0 + t, j0:j0 + J]
                    b1 = B[bt, k0 + t + 1, j0:j0 + J]
                    for j in range(J):
                        ev[j] = _fma32(a0, b0[j], ev[j], ftz)
                        od[j] = _fma32(a1, b1[j], od[j], ftz)
                dr = d[r]
                for j in range(J):
                    dr[j] = _add32(dr[j], _add32(ev[j], od[j], ftz), ftz)
        out[bt, i0:i0 + R, j0:j0 + J] = d


@njit(parallel=True, cache=True)
def amx_f32(A, B, C, out, L, ftz):
    """amx for inputs that are binary32 values (A, B float32), in binary32 lanes: each step is one fused
    multiply-add (llvm.fma), the IEEE operation _fma32 computes.  With ftz a result is flushed when the
    exact value is below 2**-126: when |fl32| < 2**-126 it is, when |fl32| > 2**-126 it is not (rounding
    is monotonic); |fl32| == 2**-126 may come from either side, and those steps are redone by _fma32."""
    nbatch, m, kp = A.shape
    n = B.shape[2]
    tiny = np.float32(F32_TINY)
    zero = np.float32(0.0)
    for task in prange(_ntasks(nbatch, m, n)):
        bt, i0, j0, R, J = _tile(task, m, n)
        d = np.empty((R, J), np.float32)
        ev = np.empty(J, np.float32)
        od = np.empty(J, np.float32)
        ev2 = np.empty(J, np.float32)
        od2 = np.empty(J, np.float32)
        d[:, :] = C[bt, i0:i0 + R, j0:j0 + J]
        for blk in range(kp // L):
            k0 = blk * L
            for r in range(R):
                ev[:] = 0.0
                od[:] = 0.0
                for t in range(0, L, 2):
                    a0 = A[bt, i0 + r, k0 + t]
                    a1 = A[bt, i0 + r, k0 + t + 1]
                    b0 = B[bt, k0 + t, j0:j0 + J]
                    b1 = B[bt, k0 + t + 1, j0:j0 + J]
                    edge = False
                    for j in range(J):
                        e = fma32(a0, b0[j], ev[j])
                        o = fma32(a1, b1[j], od[j])
                        edge = edge | (abs(e) == tiny) | (abs(o) == tiny)
                        ev2[j] = e * zero if (ftz & (abs(e) < tiny)) else e
                        od2[j] = o * zero if (ftz & (abs(o) < tiny)) else o
                    if ftz and edge:
                        for j in range(J):
                            if abs(ev2[j]) == tiny:
                                ev2[j] = _fma32(np.float64(a0), np.float64(b0[j]), np.float64(ev[j]), ftz)
                            if abs(od2[j]) == tiny:
                                od2[j] = _fma32(np.float64(a1), np.float64(b1[j]), np.float64(od[j]), ftz)
                    ev, ev2 = ev2, ev
                    od, od2 = od2, od
                dr = d[r]
                for j in range(J):
                    dr[j] = _add32f(dr[j], _add32f(ev[j], od[j], ftz), ftz)
        out[bt, i0:i0 + R, j0:j0 + J] = d


@njit(cache=True, inline="always")
def _odd32(s, err, ftz):
    """Round to odd into binary32 of the exact s + err, subnormal results flushed when ftz (the only
    case of the Arm units, which flush), overflow to the largest finite value."""
    if s == 0.0 or not math.isfinite(s):
        return s
    if ftz and _tiny_exact(s, err):
        return math.copysign(0.0, s)
    x = odd_toward(s, err)  # round to odd at 53 bits, then at 24: one rounding to odd
    if abs(x) < F32_TINY:
        return round_pair(s, err, 24, -126, 3.4028234663852886e38, True, True, True, 5, 0)
    b = bits_of(x)
    low = b & ((np.int64(1) << 29) - 1)
    y = float_of((b - low) | (np.int64(low != 0) << 29))
    if abs(y) > 3.4028234663852886e38:
        y = math.copysign(3.4028234663852886e38, y)
    return y


F32_MAX = 3.4028234663852886e38


@njit(cache=True, inline="always")
def _odd32_ftz(s, err):
    """Round to odd into binary32 of the exact s + err with subnormal results flushed (branch-free):
    odd at 53 bits, then truncate to 24 bits setting the last bit if anything was dropped; overflow gives
    the largest finite value (IEEE 754 for round to odd)."""
    x = odd_toward(s, err)
    b = bits_of(x)
    low = b & ((np.int64(1) << 29) - 1)
    y = float_of((b - low) | (np.int64(low != 0) << 29))
    y = math.copysign(F32_MAX, y) if abs(y) > F32_MAX else y
    return math.copysign(0.0, s) if _tiny_exact(s, err) else y


@njit(parallel=True, cache=True)
def bfdot_ftz(A, B, C, out):
    nbatch, m, kp = A.shape
    n = B.shape[2]
    for task in prange(_ntasks(nbatch, m, n)):
        bt, i0, j0, R, J = _tile(task, m, n)
        d = np.empty((R, J))
        d[:, :] = C[bt, i0:i0 + R, j0:j0 + J]
        for k0 in range(0, kp, 2):
            b0 = B[bt, k0, j0:j0 + J]
            b1 = B[bt, k0 + 1, j0:j0 + J]
            for r in range(R):
                a0 = A[bt, i0 + r, k0]
                a1 = A[bt, i0 + r, k0 + 1]
                dr = d[r]
                for j in range(J):
                    p0 = _odd32_ftz(a0 * b0[j], 0.0)
                    p1 = _odd32_ftz(a1 * b1[j], 0.0)
                    s, err = two_sum(p0, p1)
                    t = _odd32_ftz(s, err)
                    s, err = two_sum(dr[j], t)
                    dr[j] = _odd32_ftz(s, err)
        out[bt, i0:i0 + R, j0:j0 + J] = d


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


@njit(parallel=True, cache=True)
def bfdot_ftz_f32(A, B, C, out):
    """bfdot_ftz when every nonzero product a*b is an exact binary32 normal value (the caller checks the
    inputs' exponent range): then _odd32_ftz leaves the products alone, and the two sums are rounded to
    odd in binary32 lanes (_odd32_ftz_f)."""
    nbatch, m, kp = A.shape
    n = B.shape[2]
    for task in prange(_ntasks(nbatch, m, n)):
        bt, i0, j0, R, J = _tile(task, m, n)
        d = np.empty((R, J), np.float32)
        d[:, :] = C[bt, i0:i0 + R, j0:j0 + J]
        for k0 in range(0, kp, 2):
            b0 = B[bt, k0, j0:j0 + J]
            b1 = B[bt, k0 + 1, j0:j0 + J]
            for r in range(R):
                a0 = A[bt, i0 + r, k0]
                a1 = A[bt, i0 + r, k0 + 1]
                dr = d[r]
                for j in range(J):
                    t = _odd32_ftz_f(a0 * b0[j], a1 * b1[j])
                    dr[j] = _odd32_ftz_f(dr[j], t)
        out[bt, i0:i0 + R, j0:j0 + J] = d


@njit(parallel=True, cache=True)
def bfdot(A, B, C, out, ftz):
    nbatch, m, kp = A.shape
    n = B.shape[2]
    for task in prange(nbatch * m * n):
        bt = task // (m * n)
        i = (task // n) % m
        j = task % n
        d = C[bt, i, j]
        for k0 in range(0, kp, 2):
            p0 = _odd32(A[bt, i, k0] * B[bt, k0, j], 0.0, ftz)
            p1 = _odd32(A[bt, i, k0 + 1] * B[bt, k0 + 1, j], 0.0, ftz)
            s, err = two_sum(p0, p1)
            t = _odd32(s, err, ftz) if s != 0.0 else s
            s, err = two_sum(d, t)
            d = _odd32(s, err, ftz) if s != 0.0 else s
        out[bt, i, j] = d
