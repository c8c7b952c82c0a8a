"""Block kernels of the numpy engine: one block of every algorithm family, array-at-a-time.

Each kernel takes float64 arrays ``a`` and ``b`` of shape ``(..., L)`` and ``c`` of shape ``(...)`` (all
broadcastable; values already in the model's formats and already flushed where the model flushes) and
returns the block's result, float64 of the broadcast shape ``(...)``, a value of the model's C format.
NaN results are plain float64 NaN here (under ``nan="propagate"`` the fma chain carries the NaN it passes on,
payload and all); the caller writes the model's NaN bit pattern at the end.

The fused families (truncated-fused, late-c, exact-fused) are the array kernels of :mod:`.array`, the same
code the GPU engine runs on torch tensors, called here with numpy; exact-fused models beyond their reach
(fp64 inputs or results) sum through :mod:`.wide`.  The step families (pairwise, fma-chain, amx, bfdot)
are chains of IEEE operations, each rounded once by :func:`.wide.ieee_op`.  See docs/semantics.md for what
each family computes.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..formats import Format, RoundingMode
from ..formats import round as round_values
from ..model import Family, Model, NaNStyle
from . import array, rules, wide


def flush(fmt: Format, x: np.ndarray, positive: bool = False) -> np.ndarray:
    """Subnormal values of ``fmt`` replaced by zeros of their sign (by +0 with ``positive``)."""
    tiny = np.abs(x) < fmt.smallest_normal
    if positive:
        return np.where(tiny & (x != 0), 0.0, x)
    return np.where(tiny, np.copysign(0.0, x), x)


# --- fused families: the shared array kernels -------------------------------------------------------------
def _fused(model: Model, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    if not array.supports(model):
        if model.family is Family.EXACT_FUSED:
            return _exact_fused_wide(model, a, b, c)
        raise ValueError(f"the engine does not run {model.summary()}: its products or block sums do not fit "
                         "float64 (the engine takes inputs of at most 26 bits, F + log2(L) below about 48 and "
                         "|e_zero| up to 900); "
                         "blockfma.reference.dot computes it exactly, row by row")
    products, overflow = array.flags(model, a, b)
    with np.errstate(invalid="ignore", over="ignore"):
        return array.KERNELS[model.family](np, model, a, b, c, products=products, overflow=overflow)


def _exact_fused_wide(model: Model, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Exact-fused for fp64 inputs or results: products split into terms of int64 and summed in limbs."""
    with np.errstate(invalid="ignore"):
        mask, special = rules.fused_specials(np, a, b, c)
    af, bf, cf = array.finite(np, a), array.finite(np, b), array.finite(np, c)
    shape = np.broadcast_shapes(af.shape, bf.shape)[:-1] + (1,)
    ma, ea = wide.split(af)
    mb, eb = wide.split(bf)
    mc, ec = wide.split(cf)
    parts = wide.product_terms(ma, ea, mb, eb)  # each (..., L)
    ms = [np.broadcast_to(m, shape[:-1] + m.shape[-1:]) for m, _ in parts] + [np.broadcast_to(mc[..., None], shape)]
    es = [np.broadcast_to(e, shape[:-1] + e.shape[-1:]) for _, e in parts] + [np.broadcast_to(ec[..., None], shape)]
    value, zero = wide.round_sum(model.result_format, np.concatenate(ms, axis=-1), np.concatenate(es, axis=-1),
                                 model.output_rounding, subnormals=model.subnormals, overflow=model.overflow)
    value = rules.exact_zero(np, model, af, bf, cf, zero, value)
    return np.where(mask, special, value)


# --- step families: chains of IEEE operations ------------------------------------------------------------
def _op(model: Model, fmt: Format, mode: RoundingMode, addends: list[np.ndarray],
        a: np.ndarray | None = None, b: np.ndarray | None = None, *, ieee_zero: bool = False) -> np.ndarray:
    """One IEEE operation of a step family: ``R(a*b + sum(addends))`` with the model's flushing, overflow
    and (unless ``ieee_zero``) exact-zero sign."""
    exact_product = rules.products_exact_in_float64(model.input_format, model.b_format)
    return wide.ieee_op(fmt, mode, model.subnormals, model.overflow if not ieee_zero else "ieee", addends, a, b,
                        exact_product=exact_product,
                        positive_zero=model.exact_zero == "positive" and not ieee_zero)


def pairwise(model: Model, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    fc, rne = model.c_format, RoundingMode.TiesToEven
    level = [_op(model, fc, rne, [], a[..., i], b[..., i], ieee_zero=True) for i in range(a.shape[-1])]
    while len(level) > 1:
        level = [_op(model, fc, rne, [level[i], level[i + 1]], ieee_zero=True) for i in range(0, len(level), 2)]
    return _op(model, model.result_format, model.output_rounding, [c, level[0]])


def fma_chain(model: Model, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    propagate = model.nan is NaNStyle.PROPAGATE
    d = c
    for i in range(a.shape[-1]):
        step = _op(model, model.result_format, model.output_rounding, [d], a[..., i], b[..., i])
        if propagate and np.isnan(step).any():  # which NaN this FMA passes on
            step = np.where(np.isnan(step), rules.fma_nan(a[..., i], b[..., i], d), step)
        d = step
    return d


def amx(model: Model, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    fc, mode = model.result_format, model.output_rounding
    shape = np.broadcast_shapes(a.shape[:-1], b.shape[:-1], c.shape)
    even = np.zeros(shape)
    odd = np.zeros(shape)
    for j in range(0, a.shape[-1], 2):
        even = _op(model, fc, mode, [even], a[..., j], b[..., j])
        odd = _op(model, fc, mode, [odd], a[..., j + 1], b[..., j + 1])
    return _op(model, fc, mode, [c, _op(model, fc, mode, [even, odd])])


def bfdot(model: Model, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    fc, mode = model.result_format, model.output_rounding
    p0 = _op(model, fc, mode, [], a[..., 0], b[..., 0])
    p1 = _op(model, fc, mode, [], a[..., 1], b[..., 1])
    return _op(model, fc, mode, [c, _op(model, fc, mode, [p0, p1])])


KERNELS = {
    Family.TRUNCATED_FUSED: _fused,
    Family.EXACT_FUSED: _fused,
    Family.PAIRWISE: pairwise,
    Family.LATE_C: _fused,
    Family.FMA_CHAIN: fma_chain,
    Family.AMX: amx,
    Family.BFDOT: bfdot,
}


def block_kernel(model: Model) -> Callable[[Model, np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
    """The numpy engine's kernel for one step of ``model``: its family's block; with an ``accumulator_format``
    the block computed in it, then rounded to nearest even into the output format (stored); with
    ``c_entry="after"`` or ``"end"`` the step's blocks from +0, stored, then C added by one IEEE addition
    (TiesToEven into the output format)."""
    kernel = KERNELS[model.family]
    unit = model.block_model()
    stored = model.accumulator_format is not None

    def block(model: Model, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
        if model.c_entry == "fused":
            s = kernel(unit, a, b, c)
        else:  # one step (a block, or an instruction of blocks in product_order) from +0, then C
            order = model.order(a.shape[-1])
            a, b = a[..., order], b[..., order]
            L = model.block_width or a.shape[-1]
            s = np.zeros(np.broadcast_shapes(np.shape(c), a.shape[:-1], b.shape[:-1]))
            for j in range(0, a.shape[-1], L):
                s = kernel(unit, a[..., j:j + L], b[..., j:j + L], s)
            s = store(model, s) if stored else s
            return wide.ieee_op(model.output_format, RoundingMode.TiesToEven, model.subnormals, "ieee", [s, c])
        return store(model, s) if stored else s

    return kernel if unit is model else block


def store(model: Model, values: np.ndarray) -> np.ndarray:
    """An accumulator's results rounded to nearest even into the model's output format (NaN, infinities and
    the sign of zero kept)."""
    return round_values(model.output_format, values, RoundingMode.TiesToEven, subnormals=model.subnormals)
