"""Compiled kernels (numba) for every family the numpy engine runs, bit for bit the same.

``supports(model)`` says whether a model has a compiled kernel; ``batched(plan, A, B, C)`` runs a call's
plan on a batch of products and returns None when these particular inputs need the numpy engine (for instance a
late-c product overflowing to infinity).  The engine imports this package only when numba is installed
(the ``fast`` extra).  Each family's kernel sits behind a runner (:mod:`.runners`, named by ``Family.numba``);
this module runs the step plan around them.  See ``families.py`` for why each kernel is exact.
"""

from __future__ import annotations

import numba  # without numba this package does not import, and the engine runs numpy
import numpy as np

from ...model import Model
from ...plan import Index, Plan, array_index, run
from .. import rules
from ..kernels import add_c, store

__all__ = ["supports", "batched"]


def supports(model: Model) -> bool:
    """Whether a compiled kernel runs this model (the numpy engine runs every model): the block model's
    family has one (``Family.numba``, :mod:`.runners`), its products are exact in float64, its results have
    at most 51 bits, and the family's runner takes it."""
    block = model.block_model()
    if block is not model:  # block by block, see _Compiled
        return supports(block)
    if not model.family.has("numba"):
        return False
    if not rules.products_exact_in_float64(model.input_format, model.b_format) or model.result_format.precision > 51:
        return False
    return model.family.implementation("numba").supports(model)


class _NeedsNumpy(Exception):
    """A block of a plan met inputs the compiled kernels do not run (the numpy engine takes the call)."""


class _Compiled:
    """The compiled kernels' :class:`blockfma.plan.Datapath` for plans that are not a plain chain (an
    accumulator format, C after the blocks, a product order): each block by the compiled fused kernel of
    the block model over (batch, m, k) and (batch, k, n) operands, the store and the addition of C by the
    numpy engine's own code."""

    def __init__(self, p: Plan, A: np.ndarray, B: np.ndarray):
        self.p, self.A, self.B = p, A, B

    def block(self, products: Index, c: np.ndarray) -> np.ndarray:
        ix = array_index(products)
        out = _chain(self.p.unit(products), self.A[:, :, ix], self.B[:, ix, :], c, self.p.block_width)
        if out is None:
            raise _NeedsNumpy
        return out

    def zero(self, c: np.ndarray) -> np.ndarray:
        return np.zeros(c.shape)

    def store(self, x: np.ndarray) -> np.ndarray:
        return store(self.p.model, x)

    def add_c(self, s: np.ndarray, c: np.ndarray) -> np.ndarray:
        return add_c(self.p.model, s, c)


#: products below which the kernels run on one thread: waking numba's thread pool costs more than the
#: work (measured on the 2-core CI machine under load: 24 ms against 0.3 ms for 256 rows of 32 products)
SMALL_WORK = 1 << 16


def batched(p: Plan, A: np.ndarray, B: np.ndarray, C: np.ndarray) -> np.ndarray | None:
    """float64 D (batch, m, n) of the call's plan ``p`` for finite A (batch, m, k), B (batch, k, n),
    C (batch, m, n), values already checked, flushed and in the model's formats; None if these inputs need
    the numpy engine."""
    threads = numba.get_num_threads()
    if threads == 1 or A.shape[0] * A.shape[1] * A.shape[2] * B.shape[2] >= SMALL_WORK:
        return _batched(p, A, B, C)
    numba.set_num_threads(1)
    try:
        return _batched(p, A, B, C)
    finally:
        numba.set_num_threads(threads)


def _batched(p: Plan, A: np.ndarray, B: np.ndarray, C: np.ndarray) -> np.ndarray | None:
    kp, L = p.padded, p.block_width
    if kp != A.shape[2]:
        A = rules.pad(A, kp)
        B = np.swapaxes(rules.pad(np.swapaxes(B, 1, 2), kp), 1, 2)
    if not p.is_chain:  # blocks by the compiled kernels, the rest of each step by numpy
        try:
            return run(p, _Compiled(p, A, B), np.asarray(C, dtype=np.float64))
        except _NeedsNumpy:
            return None
    if p.narrow_c:  # the first step reads the C given in its own format (Plan.first), the rest chain on
        W = p.width
        C = _chain(p.first, A[:, :, :W], B[:, :W, :], C, L)
        if C is None or kp == W:
            return C
        A, B = A[:, :, W:], B[:, W:, :]
    return _chain(p.block, A, B, C, L)


def _chain(unit: Model, A: np.ndarray, B: np.ndarray, C: np.ndarray, L: int) -> np.ndarray | None:
    """A chain of blocks of L of one block model by its family's compiled kernel (k a multiple of L); None
    if these inputs need the numpy engine."""
    # contiguous and writable: numba compiles a kernel anew for read-only arrays (broadcast views are),
    # which doubled the kernels compiled in a test run
    A, B, C = (np.require(x, np.float64, ("C", "W")) for x in (A, B, C))
    out = np.empty(C.shape)
    return out if unit.family.implementation("numba").run(unit, A, B, C, out, L) else None
