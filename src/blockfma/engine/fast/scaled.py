"""Compiled kernels (numba) of block-scaled MMA with a scale per product (``scale_group`` None: the k = 32
``kind::mxf8f6f4``), bit for bit the numpy engine's :func:`blockfma.engine.scaled.block`, within the same
float64 bounds (:func:`blockfma.engine.scaled.supports`).

The operands folded with their scales (:func:`blockfma.engine.scaled.fold`, the one rule: value ``x s``,
exponent ``E(x) + E(s)``) are a truncated-fused problem with given exponents, which the truncated-fused
kernel (:func:`.runners.truncated_fused_given`, float64 lanes) runs as it is: every cut term lies below
2**(F + 4) (four factors each below 2**(E + 1)), and L + 1 of them sum exactly in float64.

Group-scaled models (k = 64 ``kind::mxf4``, ``mxf4nvf4``) have no kernel here: the numpy engine sums their groups by
matrix products (:func:`blockfma.engine.scaled.group_chain`), which measured faster than a compiled chain over the same
terms.  Inputs are finite (NaN scales are set to 1 here and their outputs made NaN after: a NaN scale makes its whole
dot product NaN); exact zeros are +0 (``exact_zero="positive"``, every preset): other models run in the numpy engine.
"""

from __future__ import annotations


import numpy as np

from ...model import Model
from ...plan import Plan
from .. import scaled
from .runners import truncated_fused_given

__all__ = ["supports", "batched"]


def supports(model: Model) -> bool:
    """Whether the compiled kernels run this block-scaled model: a scale per product, the numpy engine's
    bounds, +0 exact zeros."""
    return (scaled.supports(model) and model.option("scale_group") is None and model.exact_zero == "positive"
            and model.result_format.precision <= 51)


def batched(pl: Plan, A: np.ndarray, B: np.ndarray, C: np.ndarray, SA: np.ndarray, SB: np.ndarray) -> np.ndarray:
    """float64 D (batch, m, n) of the plan of a block-scaled model (:func:`supports`) for finite
    A (batch, m, kp), B (batch, kp, n), C (batch, m, n), kp the plan's padded k (padded with +0), and the
    scales of every product SA (batch, m, kp), SB (batch, kp, n) (padding products: 1), NaN allowed."""
    m = pl.block
    fs = m.scale_format
    nan = np.isnan(SA).any(axis=2)[:, :, None] | np.isnan(SB).any(axis=1)[:, None, :]
    SA, SB = np.where(np.isnan(SA), 1.0, SA), np.where(np.isnan(SB), 1.0, SB)
    out = np.empty(np.broadcast_shapes(C.shape, A.shape[:2] + B.shape[2:]))
    C = np.require(np.broadcast_to(C, out.shape), np.float64, ("C", "W"))
    A2, EA = scaled.fold(np, m.input_format, A, fs, SA)
    B2, EB = scaled.fold(np, m.b_format, B, fs, SB)
    truncated_fused_given(m, A2, EA, B2, EB, C, out, pl.block_width)
    return np.where(nan, np.nan, out)
