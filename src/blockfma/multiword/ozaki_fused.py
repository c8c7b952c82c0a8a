"""Ozaki I and II on torch tensors with their elementwise work fused into Triton kernels, bit for bit the
unfused paths (:func:`.ozaki.ozaki1_steps`, :func:`.ozaki.ozaki2_steps`).  Ozaki II: after the shifts, one
:func:`residues_kernel` per operand (2**s x truncated, its centred residues modulo every modulus written as int8
slices, zero-padded to :func:`.ozaki.int_mm_shape`, B's transposed: the layout ``torch._int_mm`` wants), one int8
product per modulus into one int32 array, one :func:`crt_kernel` (the CRT in 48-bit int64 limbs, rounded once
to float64, unscaled in one rounding).  Ozaki I: one :func:`slices_kernel` per operand (the row exponents and
every slice), one int8 product per level of slice pairs (its pairs side by side along k where their int32 sum
is exact), one :func:`levels_kernel` (the levels' exact sums, scaled and added in float64 in the unfused
order).  Used where :func:`.tensors.fused_here`; imported then, when Triton fixes whether its interpreter runs
the kernels (``TRITON_INTERPRET=1``, on the CPU).
"""
# mypy: ignore-errors
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import triton
import triton.language as tl

from ..engine import triton_kernel as tk
from . import ozaki

__all__ = ["ozaki1", "ozaki2", "slices_kernel", "levels_kernel", "residues_kernel", "crt_kernel", "PRODUCT_BYTES",
           "interpreted"]

LIMB = 48  # the CRT's limbs (written out in the kernels): 22 sums residue (< 2**8) x limb stay below 2**61
PRODUCT_BYTES = 2**32  # the int32 products of one block of rows of A, all moduli or levels (a few GEMMs of n = 16384)
EXACT = {"enable_fp_fusion": False}  # Ozaki I's launches: no FMA contraction, every float64 operation rounds


@dataclass(frozen=True)
class Constants:
    """The moduli and, in limbs, the CRT's c_l = (P/m_l) ((P/m_l)^-1 mod m_l) (``C[4 l + i]``), P, P - P // 2,
    P // 2; 1/P.  Compile-time values of the kernels."""

    MODS: tuple[int, ...]
    W: tuple[int, ...]  # 2**32 mod m
    C: tuple[int, ...]
    P: tuple[int, ...]
    PH: tuple[int, ...]
    H: tuple[int, ...]
    INV_P: float


def constants(mods: tuple[int, ...]) -> Constants:
    P, limbs = math.prod(mods), lambda v: ozaki.limbs(v, 4, LIMB)
    assert P.bit_length() + (255 * len(mods)).bit_length() < 4 * LIMB - 1, "sum r_l c_l fits four limbs"
    c = [limbs(P // m * pow(P // m % m, -1, m) % P) for m in mods]
    return Constants(mods, tuple(2**32 % m for m in mods), sum(c, ()), limbs(P), limbs(P - P // 2), limbs(P // 2),
                     1.0 / P)


def interpreted() -> bool:
    """Whether this process defined the kernels for Triton's interpreter."""
    return type(crt_kernel).__name__ == "InterpretedFunction"


@triton.jit
def _ldexp(x, e):
    """x * 2**e (e int64) in one rounding where |x| >= 1 or x = 0 (the first factor is exact then), and
    exactly wherever |x * 2**e| >= 1."""
    e1 = tl.minimum(tl.maximum(e, -1022), 1023)
    return x * tk.pow2(e1) * tk.pow2(tl.minimum(tl.maximum(e - e1, -1022), 1023))


@triton.jit
def residues_kernel(x_ptr, s_ptr, out_ptr, R, C, RP, CP, sxr, sxc, S: tl.constexpr, BR: tl.constexpr,
                    BC: tl.constexpr):
    """out[l, i, j] = trunc(2**s_i x_ij) centred modulo S.MODS[l] (int8), zero up to (RP, CP) beyond (R, C):
    u = |2**s x| < 2**84 as hi 2**32 + lo (int64), its residue ((hi mod m)(2**32 mod m) + lo mod m) mod m."""
    r = (tl.program_id(0) * BR + tl.arange(0, BR)).to(tl.int64)  # int64 offsets: 16 moduli x 16384^2 > 2**31
    c = (tl.program_id(1) * BC + tl.arange(0, BC)).to(tl.int64)
    x = tl.load(x_ptr + r[:, None] * sxr + c[None, :] * sxc, mask=(r[:, None] < R) & (c[None, :] < C), other=0.0)
    u = tl.abs(_ldexp(x, tl.load(s_ptr + r, mask=r < R, other=0)[:, None]))
    hi = (u * 2.0**-32).to(tl.int64)  # floor: u >= 0, exact scaling
    lo = (u - hi.to(tl.float64) * 2.0**32).to(tl.int64)  # exact difference below 2**32
    inside = (r[:, None] < RP) & (c[None, :] < CP)
    for q in tl.static_range(len(S.MODS)):
        m = S.MODS[q]
        v = ((hi % m) * S.W[q] + lo % m) % m
        v = tl.where((x < 0) & (v != 0), m - v, v)  # x's residue in [0, m)
        v = tl.where(v > m - 1 - m // 2, v - m, v)
        tl.store(out_ptr + (q * RP + r[:, None]) * CP + c[None, :], v.to(tl.int8), mask=inside)


@triton.jit
def _norm(x0, x1, x2, x3):
    """Carries propagated: the first three limbs in [0, 2**48), the last signed (arithmetic shifts)."""
    x1 += x0 >> 48
    x2 += x1 >> 48
    x3 += x2 >> 48
    return x0 & 0xFFFFFFFFFFFF, x1 & 0xFFFFFFFFFFFF, x2 & 0xFFFFFFFFFFFF, x3


@triton.jit
def _add(x0, x1, x2, x3, sign, L: tl.constexpr, where):
    """X + sign * L (L a constant in limbs) where ``where``, normalized."""
    return _norm(tl.where(where, x0 + sign * L[0], x0), tl.where(where, x1 + sign * L[1], x1),
                 tl.where(where, x2 + sign * L[2], x2), tl.where(where, x3 + sign * L[3], x3))


@triton.jit
def _take(T, sticky, x, i: tl.constexpr, shift):
    """Limb i's bits at or above 2**shift into T, the rest into the sticky bit."""
    d = 48 * i - shift
    r = tl.minimum(tl.maximum(-d, 0), 62)
    right = x >> r
    return T + tl.where(d >= 0, x << tl.minimum(tl.maximum(d, 0), 62), right), sticky | ((d < 0) & (x != right << r))


@triton.jit
def crt_kernel(p_ptr, sa_ptr, sb_ptr, out_ptr, M, N, spl, spm, spn, som, son, S: tl.constexpr, BM: tl.constexpr,
               BN: tl.constexpr):
    """out_ij = RN(X_ij) 2**-(sa_i + sb_j) in one rounding, X_ij in [-(P // 2), P - 1 - P // 2] with X = p[l, i, j]
    mod S.MODS[l]: :class:`.ozaki.CRT`'s steps in four limbs (the multiple of P to subtract from a float64
    quotient, corrected by one P each way, the top 55 bits with a sticky bit)."""
    rm = (tl.program_id(0) * BM + tl.arange(0, BM)).to(tl.int64)  # int64 offsets into out (m n > 2**31)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    x0 = tl.full((BM, BN), 0, tl.int64)  # (not tl.zeros: a jit function, which the interpreter may not run)
    x1, x2, x3 = x0, x0, x0
    for q in tl.static_range(len(S.MODS)):
        m = S.MODS[q]
        r = tl.load(p_ptr + q * spl + rm[:, None] * spm + rn[None, :] * spn, mask=mask, other=0).to(tl.int64) % m
        r = tl.where(r < 0, r + m, r)  # in [0, m) whichever sign convention % has
        x0, x1, x2, x3 = x0 + r * S.C[4 * q], x1 + r * S.C[4 * q + 1], x2 + r * S.C[4 * q + 2], x3 + r * S.C[4 * q + 3]
    f = x0.to(tl.float64) + x1.to(tl.float64) * 2.0**48 + x2.to(tl.float64) * 2.0**96 + x3.to(tl.float64) * 2.0**144
    d = (f * S.INV_P + 0.5).to(tl.int64)  # within one of the nearest quotient
    x0, x1, x2, x3 = _norm(x0 - d * S.P[0], x1 - d * S.P[1], x2 - d * S.P[2], x3 - d * S.P[3])
    over = _add(x0, x1, x2, x3, -1, S.PH, True)[3] >= 0  # X > P - 1 - P // 2
    x0, x1, x2, x3 = _add(x0, x1, x2, x3, -1, S.P, over)
    under = _add(x0, x1, x2, x3, 1, S.H, True)[3] < 0  # X < -(P // 2)
    x0, x1, x2, x3 = _add(x0, x1, x2, x3, 1, S.P, under)
    neg = x3 < 0
    x0, x1, x2, x3 = _norm(tl.where(neg, -x0, x0), tl.where(neg, -x1, x1), tl.where(neg, -x2, x2),
                           tl.where(neg, -x3, x3))
    top = tl.where(x3 != 0, x3, tl.where(x2 != 0, x2, tl.where(x1 != 0, x1, x0)))  # the top limb not zero
    t = tl.where(x3 != 0, 3, tl.where(x2 != 0, 2, tl.where(x1 != 0, 1, 0)))
    bits = 48 * t + tk.lead(top) + 1  # |X| < 2**bits
    shift = tl.maximum(bits - 55, 0)
    T, sticky = _take(x0 * 0, x0 != x0, x0, 0, shift)
    T, sticky = _take(T, sticky, x1, 1, shift)
    T, sticky = _take(T, sticky, x2, 2, shift)
    T, sticky = _take(T, sticky, x3, 3, shift)
    e = shift - tl.load(sa_ptr + rm, mask=rm < M, other=0)[:, None] - tl.load(sb_ptr + rn, mask=rn < N, other=0)
    v = _ldexp((T | sticky.to(tl.int64)).to(tl.float64), e)
    tl.store(out_ptr + rm[:, None] * som + rn[None, :] * son, tl.where(neg, -v, v), mask=mask)


def _residues(torch: Any, X: Any, s: Any, K: Constants, rows: int, cols: int) -> Any:
    out = torch.empty((len(K.MODS), rows, cols), dtype=torch.int8, device=X.device)
    b = 64 if interpreted() else 16  # the interpreter: few large tiles; sm_90: no spills at 16 x 16, 4 warps
    residues_kernel[(-(-rows // b), -(-cols // b))](X, s, out, X.shape[0], X.shape[1], rows, cols, *X.stride(),
                                                   S=K, BR=b, BC=b)
    return out


def ozaki2(torch: Any, A: Any, B: Any, mods: tuple[int, ...], scaling: str, unit: Any) -> Any:
    """:func:`.ozaki.ozaki2_steps` on checked, non-empty float64 tensors of one device, fused; ``unit`` their
    device's :class:`.hardware.Int8Unit`.  Rows of A in blocks whose products stay under PRODUCT_BYTES."""
    (m, k), n = A.shape, B.shape[1]
    K = constants(mods)
    sa, sb = ozaki.shifts(torch, A, B, math.prod(mods), scaling, unit.product)
    _, kp, np_ = ozaki.int_mm_shape(m, k, n)
    wide = k > ozaki.RESIDUE_K  # k in chunks, their int32 products summed in int64
    rows = max(1, PRODUCT_BYTES // (len(mods) * (8 if wide else 4) * np_))
    bm, bn = (64, 64) if interpreted() else (16, 32)  # sm_90: 250 registers, no spills
    C = torch.empty((m, n), dtype=torch.float64, device=A.device)
    with np.errstate(over="ignore"):  # the interpreter's numpy: products beyond binary64 are +-inf, as unfused
        rb = _residues(torch, B.T, sb, K, np_, kp)  # B^T row-major: B column-major, as _int_mm wants it
        for i in range(0, m, rows):
            mp = ozaki.int_mm_shape(min(rows, m - i), k, n)[0]
            ra = _residues(torch, A[i:i + rows], sa[i:i + rows], K, mp, kp)
            p = torch.empty((len(mods), mp, np_), dtype=torch.int64 if wide else torch.int32, device=A.device)
            for q in range(len(mods)):
                if wide:
                    p[q] = ozaki.chunked(torch, unit.product, ra[q], rb[q].T, ozaki.RESIDUE_K)
                else:
                    unit.int_mm(ra[q], rb[q].T, out=p[q])
            out = C[i:i + rows]
            crt_kernel[(-(-out.shape[0] // bm), -(-n // bn))](p, sa[i:i + rows], sb, out, out.shape[0], n,
                                                             *p.stride(), *out.stride(), S=K, BM=bm, BN=bn)
    return C


@triton.jit
def slices_kernel(x_ptr, e_ptr, out_ptr, R, C, RP, CP, sxr, sxc, SL, first, step, W: tl.constexpr, BR: tl.constexpr,
                  BC: tl.constexpr):
    """Rows i < R of x cut by :func:`.ozaki.cut_rows`' steps: e[i] = frexp's exponent of max_j |x_ij| (0 for a zero
    row); slice s = 1 ... SL of row i into out[i, first + (s - 1) step, :] (int8), zero up to (RP, CP) beyond (R, C).
    Every value kept is exact, so the slices are the unfused ones."""
    r = (tl.program_id(0) * BR + tl.arange(0, BR)).to(tl.int64)
    mx = tl.full((BR,), 0.0, tl.float64)
    for c0 in range(0, C, BC):
        c = c0 + tl.arange(0, BC).to(tl.int64)
        x = tl.load(x_ptr + r[:, None] * sxr + c[None, :] * sxc, mask=(r[:, None] < R) & (c[None, :] < C), other=0.0)
        mx = tl.maximum(mx, tl.reduce(tl.abs(x), 1, tl.standard._elementwise_max))  # the interpreter: np.max
    bits = mx.to(tl.int64, bitcast=True)  # subnormal: 2**-1074 bits, lead(bits) + 1 - 1074 its exponent
    e = tl.where(bits >> 52 > 0, (bits >> 52) - 1022, tl.where(bits > 0, tk.lead(bits) - 1073, 0))
    tl.store(e_ptr + r, e, mask=r < R)
    for c0 in range(0, CP, BC):
        c = c0 + tl.arange(0, BC).to(tl.int64)
        x = tl.load(x_ptr + r[:, None] * sxr + c[None, :] * sxc, mask=(r[:, None] < R) & (c[None, :] < C), other=0.0)
        for s in range(1, SL + 1):
            sh = s * W - e[:, None]  # |x 2**sh| < 2**W: x holds the bits below slice s - 1
            d = _ldexp(x, sh).to(tl.int64).to(tl.float64)  # truncated, exact where |d| >= 1
            tl.store(out_ptr + (r[:, None] * SL + first + (s - 1) * step) * CP + c[None, :], d.to(tl.int8),
                     mask=(r[:, None] < RP) & (c[None, :] < CP))
            x = x - _ldexp(d, -sh)  # exact: the bits just taken


@triton.jit
def levels_kernel(p_ptr, ea_ptr, eb_ptr, out_ptr, M, N, SL, GC, spq, spm, spn, som, son, W: tl.constexpr,
                  BM: tl.constexpr, BN: tl.constexpr):
    """out_ij = the float64 sum, from +0 and level g = SL + 1 down to 2, of the level's exact sum (its g - 1 slice
    pairs' products, GC pairs to a group, group q's int32 sums p[q, i, j], the levels' groups in that order)
    times 2**(ea_i + eb_j - g W): :func:`.ozaki.ozaki1_steps`' additions and roundings (launched without FMA
    contraction: each scaled level rounds before it is added)."""
    rm = (tl.program_id(0) * BM + tl.arange(0, BM)).to(tl.int64)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    base = tl.load(ea_ptr + rm, mask=rm < M, other=0)[:, None] + tl.load(eb_ptr + rn, mask=rn < N, other=0)[None, :]
    c = tl.full((BM, BN), 0.0, tl.float64)
    q = 0
    for i in range(0, SL):
        level = tl.full((BM, BN), 0, tl.int64)
        for _ in range(0, (SL - i + GC - 1) // GC):  # level g = SL + 1 - i: its g - 1 pairs in groups of GC
            level += tl.load(p_ptr + q * spq + rm[:, None] * spm + rn[None, :] * spn, mask=mask, other=0).to(tl.int64)
            q += 1
        c = c + _ldexp(level.to(tl.float64), base - (SL + 1 - i) * W)
    tl.store(out_ptr + rm[:, None] * som + rn[None, :] * son, c, mask=mask)


def _slices(torch: Any, X: Any, e: Any, slices: int, w: int, rows: int, cols: int, first: int, step: int) -> Any:
    out = torch.empty((rows, slices * cols), dtype=torch.int8, device=X.device)
    br, bc = (64, 64) if interpreted() else (32, 32)
    slices_kernel[(-(-rows // br),)](X, e, out, X.shape[0], X.shape[1], rows, cols, *X.stride(), slices, first, step,
                                     W=w, BR=br, BC=bc, **EXACT)
    return out


def ozaki1(torch: Any, A: Any, B: Any, slices: int, w: int, unit: Any) -> Any:
    """:func:`.ozaki.ozaki1_steps` on checked, non-empty float64 tensors of one device, fused; ``unit`` their
    device's :class:`.hardware.Int8Unit`.  Each level's pairs of slices in groups whose int32 sums are exact
    (:func:`.bounds.ozaki_max_inner`), each group one product of A's slices side by side along k and B's (kept
    in reverse order, so that a level's partners lie side by side too); rows of A in blocks whose products stay
    under PRODUCT_BYTES."""
    from .bounds import ozaki_max_inner

    (m, k), n = A.shape, B.shape[1]
    _, kp, np_ = ozaki.int_mm_shape(m, -(-k // 16) * 16, n)  # k to 16: every group's slices 16-byte aligned
    gc = max(1, ozaki_max_inner(w) // k)  # pairs to a group: at least one, as unfused (its int32 range)
    groups = [(g, s, min(s + gc, g)) for g in range(slices + 1, 1, -1) for s in range(1, g, gc)]  # s .. end - 1
    rows = max(1, PRODUCT_BYTES // (4 * len(groups) * np_))
    eb = torch.empty(n, dtype=torch.int64, device=A.device)
    sb = _slices(torch, B.T, eb, slices, w, np_, kp, slices - 1, -1)
    bm, bn = (64, 64) if interpreted() else (32, 32)
    C = torch.empty((m, n), dtype=torch.float64, device=A.device)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):  # the interpreter's numpy: as unfused
        for i in range(0, m, rows):
            a, out = A[i:i + rows], C[i:i + rows]
            ea = torch.empty(a.shape[0], dtype=torch.int64, device=A.device)
            sa = _slices(torch, a, ea, slices, w, ozaki.int_mm_shape(a.shape[0], k, n)[0], kp, 0, 1)
            p = torch.empty((len(groups), sa.shape[0], np_), dtype=torch.int32, device=A.device)
            for q, (g, s, t) in enumerate(groups):  # A's slices s .. t - 1 with B's g - s .. g - t + 1
                unit.int_mm(sa[:, (s - 1) * kp:(t - 1) * kp], sb[:, (slices - g + s) * kp:(slices - g + t) * kp].T,
                            out=p[q])
            levels_kernel[(-(-a.shape[0] // bm), -(-n // bn))](p, ea, eb, out, a.shape[0], n, slices, gc, *p.stride(),
                                                              *out.stride(), W=w, BM=bm, BN=bn, **EXACT)
    return C
