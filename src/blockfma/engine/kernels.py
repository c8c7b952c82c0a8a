"""Block kernels of the numpy engine: one block of every algorithm family, array-at-a-time.

Each kernel takes float64 arrays ``a`` and ``b`` of shape ``(..., L)`` and ``c`` of shape ``(...)`` (all
broadcastable; values already in the model's formats and already flushed where the model flushes) and
returns the block's result, float64 of the broadcast shape ``(...)``, a value of the model's C format.
NaN results are plain float64 NaN here (under ``nan="propagate"`` the fma chain carries the NaN it passes on,
payload and all); the caller writes the model's NaN bit pattern at the end.

The fused families (truncated-fused, late-c, exact-fused) are the array kernels of :mod:`.array`, the same code the GPU
engine runs on torch tensors, called here with numpy (:func:`array_block`); exact-fused models beyond their reach (fp64
inputs or results) sum through :mod:`.wide`.  The step families (pairwise, fma-chain, amx, bfdot) are chains of IEEE
operations, each rounded once by :func:`.wide.ieee_op`.  See docs/semantics.md for what each family computes; which code
runs a family's block is the family's (:func:`block_function`), and what happens around the blocks is the step plan
(:mod:`blockfma.plan`), run here by :class:`Blocks`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..formats import Format, RoundingMode, get as get_format, holds
from ..formats import round as round_values
from ..model import Model, NaNStyle
from ..plan import Index, Plan, array_index
from . import array, rules, wide


def flush(fmt: Format, x: np.ndarray, positive: bool = False) -> np.ndarray:
    """Subnormal values of ``fmt`` replaced by zeros of their sign (by +0 with ``positive``)."""
    tiny = np.abs(x) < fmt.smallest_normal
    if positive:
        return np.where(tiny & (x != 0), 0.0, x)
    return np.where(tiny, np.copysign(0.0, x), x)


def flush_operands(model: Model, a: np.ndarray, b: np.ndarray, c: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A, B and C with subnormals flushed where the model flushes them: A and B in the formats the datapath
    reads them in (unpacked, where it unpacks them), C in the model's C format."""
    if model.subnormals:
        return a, b, c
    plus = model.flush_zero == "positive"
    arith = model.arithmetic_model()
    return flush(arith.input_format, a, plus), flush(arith.b_format, b, plus), flush(model.c_format, c, plus)


# --- fused families: the shared array kernels -------------------------------------------------------------
def _run_array(kernel: Callable[..., np.ndarray], model: Model, a: np.ndarray, b: np.ndarray,
               c: np.ndarray) -> np.ndarray:
    """An array kernel (:mod:`.array`) on numpy arrays, for a model it supports."""
    products, overflow = array.flags(model, a, b)
    with np.errstate(invalid="ignore", over="ignore"):
        return kernel(np, model, a, b, c, products=products, overflow=overflow)


def array_block(kernel: Callable[..., np.ndarray]) -> Callable[[Model, np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
    """A family's array kernel (:mod:`.array`, shared with the GPU engine) as a numpy block."""

    def block(model: Model, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
        if not array.supports(model):
            raise ValueError(f"the engine does not run {model.summary()}: its products or block sums do not "
                             "fit float64 (the engine takes inputs of at most 26 bits, F + log2(L) below about 48 "
                             "and |e_zero| up to 900); blockfma.reference.dot computes it exactly, row by row")
        return _run_array(kernel, model, a, b, c)

    return block


def exact_fused(model: Model, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """One exact-fused block: the array kernel where its float64 bounds hold, else exact limbs (:mod:`.wide`)
    for fp64 inputs or results."""
    if array.supports(model):
        return _run_array(array.exact_fused, model, a, b, c)
    return _exact_fused_wide(model, a, b, c)


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


def reference_block(model: Model, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """A family's exact reference block (:mod:`blockfma.reference`) applied element by element: how the
    numpy engine runs a family that gives no array code of its own (a user's family; exact, slow)."""
    ref = model.family.implementation("reference")
    shape = np.broadcast_shapes(a.shape[:-1], b.shape[:-1], np.shape(c))
    a, b = np.broadcast_to(a, shape + a.shape[-1:]), np.broadcast_to(b, shape + b.shape[-1:])
    c = np.broadcast_to(c, shape)
    out = np.empty(shape)
    for idx in np.ndindex(*shape):
        out[idx] = ref(model, [float(x) for x in a[idx]], [float(x) for x in b[idx]], float(c[idx]))
    return out


def block_function(model: Model) -> Callable[[Model, np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
    """The numpy engine's code for one block of ``model``'s family: its numpy block, else its array kernel
    run with numpy, else its exact reference element by element."""
    fam = model.family
    if fam.has("numpy"):
        return fam.implementation("numpy")
    if fam.has("array"):
        return array_block(fam.implementation("array"))
    return reference_block


class Blocks:
    """The numpy engine's :class:`blockfma.plan.Datapath` over ``a`` (..., padded) and ``b`` (..., padded),
    float64, broadcasting: each block by the family's numpy code (:func:`block_function`), the store and the
    addition of C array-at-a-time."""

    def __init__(self, p: Plan, a: np.ndarray, b: np.ndarray):
        self.p, self.model, self.a, self.b = p, p.model, a, b
        self.sum_block = block_function(p.block)

    def block(self, products: Index, c: np.ndarray) -> np.ndarray:
        ix = array_index(products)
        return self.sum_block(self.p.unit(products), self.a[..., ix], self.b[..., ix], c)

    def zero(self, c: np.ndarray) -> np.ndarray:
        return np.zeros(np.broadcast_shapes(np.shape(c), self.a.shape[:-1], self.b.shape[:-1]))

    def store(self, x: np.ndarray) -> np.ndarray:
        return store(self.model, x)

    def add_c(self, s: np.ndarray, c: np.ndarray) -> np.ndarray:
        return add_c(self.model, s, c)


def add_c(model: Model, s: np.ndarray, c: np.ndarray) -> np.ndarray:
    """C added after a step's blocks: one IEEE addition, TiesToEven into the output format."""
    if _casts(model) and holds(model.output_format, model.c_format):  # s: a value of the output format
        with np.errstate(over="ignore", invalid="ignore"):
            return (s + c).astype(np.float32).astype(model.output_format.dtype).astype(np.float64)
    return wide.ieee_op(model.output_format, RoundingMode.TiesToEven, model.subnormals, "ieee", [s, c])


def store(model: Model, values: np.ndarray) -> np.ndarray:
    """An accumulator's results rounded to nearest even into the model's output format (NaN, infinities and
    the sign of zero kept)."""
    if _casts(model) and rules.values_in_binary32(model.accumulator):
        with np.errstate(over="ignore", invalid="ignore"):
            return values.astype(np.float32).astype(model.output_format.dtype).astype(np.float64)
    return round_values(model.output_format, values, RoundingMode.TiesToEven, subnormals=model.subnormals)


def _casts(model: Model) -> bool:
    """Whether numpy's casts float64 -> float32 -> the output dtype round as :func:`store` and :func:`add_c` must:
    fp16, bf16 or fp32 with subnormals, NaN payloads not carried.  A binary32 value casts to float32 exactly; a
    sum of two values of p <= 24 bits rounded to 53, 24, then p bits is rounded once (Figueroa 1995: double
    rounding is innocuous from 2p + 2 bits).  tests/test_engine_vs_reference.py holds them to the exact code."""
    out = model.output_format
    return (out.name in ("fp16", "bf16", "fp32") and out == get_format(out.name) and model.subnormals
            and model.nan is not NaNStyle.PROPAGATE)
