"""Compiled kernels (numba) of block-scaled MMA (the scaled-fused family), bit for bit the numpy engine's
:func:`blockfma.engine.scaled.block`, within the same float64 bounds (:func:`blockfma.engine.scaled.supports`).

* ``scale_group`` None: the operands folded with their scales (:func:`blockfma.engine.scaled.fold`, the one
  rule: value ``x s``, exponent ``E(x) + E(s)``) are a truncated-fused problem with given exponents, which
  the truncated-fused kernel (:func:`.families.truncated_fused`, float64 lanes) runs as it is: every cut
  term lies below 2**(F + 4) (four factors each below 2**(E + 1)), L + 1 of them sum exactly in float64;
* ``scale_group`` G: :func:`group_scaled`, per output and block, the exact sums of G products (float64:
  within the bounds, integers in the products' last place below 2**53), their terms
  ``sum * sa * sb`` at ``E(sa) + E(sb)`` (e_zero where every product or a scale is zero:
  :func:`blockfma.engine.scaled.group_terms` states it), e_max with C, the cut, the sum, one rounding.

Inputs are finite (NaN scales are set to 1 here and their outputs made NaN after: a NaN scale makes its
whole dot product NaN); exact zeros are +0 (``exact_zero="positive"``, every preset): other models run in
the numpy engine.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from ...model import Alignment, Model
from ...plan import plan
from .. import array, rules, scaled
from . import families as _k
from .rounding import bits_of, exponent_bits, float_of, pow2_bits, round_float
from .runners import _ZERO_EXP, _any_zero_per_block, _params

__all__ = ["supports", "batched"]


def supports(model: Model) -> bool:
    """Whether the compiled kernels run this block-scaled model: the numpy engine's bounds, +0 exact zeros."""
    return scaled.supports(model) and model.exact_zero == "positive" and model.result_format.precision <= 51


@njit(parallel=True, cache=True)
def group_scaled(A, Bt, SA, ESA, SB, ESB, C, out, L, G, F, e_zero, c_emin, floor_align, carry_mod,
                 p, emin, maxval, has_inf, neg_zero, subnormals, mode, overflow):
    """D = A B + C, group-scaled: A (batch, m, kp), B transposed Bt (batch, n, kp), the scales of each group SA
    (batch, m, kp / G) and SB (batch, kp / G, n) with their exponents E_fs (ESA, ESB), C and out
    (batch, m, n); blocks of L products chained over kp, each a truncated-fused sum of its L / G group
    terms and C."""
    nbatch, m, kp = A.shape
    n = Bt.shape[1]
    T = L // G
    for task in prange(nbatch * m):
        bt = task // m
        i = task % m
        vals = np.empty(T)
        for j in range(n):
            d = C[bt, i, j]
            for blk in range(kp // L):
                if not math.isfinite(d):  # an infinite C (an overflow) stays: the products are finite
                    break
                k0 = blk * L
                em = e_zero if d == 0.0 else max(exponent_bits(bits_of(d)), c_emin)
                for t in range(T):
                    g = k0 // G + t
                    s = 0.0
                    size = 0.0
                    for kk in range(g * G, g * G + G):
                        pr = A[bt, i, kk] * Bt[bt, j, kk]  # exact
                        s += pr  # exact: the bounds of scaled.supports
                        size += abs(pr)  # > 0 exactly when some product is nonzero
                    sc = SA[bt, i, g] * SB[bt, g, j]
                    vals[t] = s * sc
                    e = ESA[bt, i, g] + ESB[bt, g, j] if (size > 0.0 and sc != 0.0) else e_zero
                    em = max(em, e)
                q = float_of(pow2_bits(F - em))
                acc = np.floor(d * q) if floor_align else np.trunc(d * q)
                for t in range(T):
                    acc += np.floor(vals[t] * q) if floor_align else np.trunc(vals[t] * q)
                if carry_mod > 0.0:
                    acc = math.copysign(np.fmod(abs(acc), carry_mod), acc)
                if acc == 0.0:
                    d = 0.0
                else:
                    d = round_float(acc * float_of(pow2_bits(em - F)), p, emin, maxval, has_inf, neg_zero,
                                    subnormals, mode, overflow)
            out[bt, i, j] = d


def batched(model: Model, A: np.ndarray, B: np.ndarray, C: np.ndarray, SA: np.ndarray, SB: np.ndarray
            ) -> np.ndarray:
    """float64 D (batch, m, n) of a block-scaled model (:func:`supports`) for finite A (batch, m, kp),
    B (batch, kp, n), C (batch, m, n), kp a whole number of blocks (padded with +0), and the scales of
    every product SA (batch, m, kp), SB (batch, kp, n) (padding products: 1), NaN allowed."""
    pl = plan(model, A.shape[2])
    L, m = pl.block_width, pl.block
    nan = np.isnan(SA).any(axis=2)[:, :, None] | np.isnan(SB).any(axis=1)[:, None, :]
    SA, SB = np.where(np.isnan(SA), 1.0, SA), np.where(np.isnan(SB), 1.0, SB)
    fs, G = scaled.scale_format(m), m.option("scale_group")
    carry_mod = 0.0 if m.carry_bits is None else float(2.0 ** (m.fraction_bits + 1 + m.carry_bits))
    floor = m.alignment is Alignment.FLOOR
    out = np.empty(np.broadcast_shapes(C.shape, A.shape[:2] + B.shape[2:]))
    C = np.require(np.broadcast_to(C, out.shape), np.float64, ("C", "W"))
    if G is None:
        A2, EA = scaled.fold(np, m.input_format, A, fs, SA)
        B2, EB = scaled.fold(np, m.b_format, B, fs, SB)
        EA, EB = (np.where(e == rules.NO_EXPONENT, _ZERO_EXP, e).astype(np.int32) for e in (EA, EB))
        A2, B2 = np.ascontiguousarray(A2), np.ascontiguousarray(B2)
        ZA, ZB = _any_zero_per_block(A2, L, 2), _any_zero_per_block(B2, L, 1)
        _k.truncated_fused(False)(A2, np.ascontiguousarray(EA), ZA, B2, np.ascontiguousarray(EB), ZB, C, out, L, L,
                                  m.fraction_bits, -1022, 1023, m.e_zero, m.c_format.emin, floor, carry_mod,
                                  *_params(m))
    else:
        SA, SB = np.ascontiguousarray(SA[:, :, ::G]), np.ascontiguousarray(SB[:, ::G, :])
        ESA = np.ascontiguousarray(array.fmt_exponent(np, fs, SA))  # zeros: their terms are at e_zero
        ESB = np.ascontiguousarray(array.fmt_exponent(np, fs, SB))
        group_scaled(np.ascontiguousarray(A, np.float64), np.ascontiguousarray(np.swapaxes(B, 1, 2), np.float64),
                     SA, ESA, SB, ESB,
                     C, out, L, G, m.fraction_bits, m.e_zero, m.c_format.emin, floor, carry_mod, *_params(m))
    return np.where(nan, np.nan, out)
