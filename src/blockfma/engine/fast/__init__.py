"""Compiled kernels (numba) for every family the numpy engine runs, bit for bit the same.

``supports(model)`` says whether a model has a compiled kernel; ``batched(plan, A, B, C)`` runs a call's
plan on a batch of products and returns None when these particular inputs need the numpy engine (for instance a
late-c product overflowing to infinity).  The engine imports this package only when numba is installed
(the ``fast`` extra).  Each family's kernel sits behind a runner (:mod:`.runners`, named by ``Family.numba``);
this module runs the step plan around them.  See ``families.py`` for why each kernel is exact.
"""

from __future__ import annotations

import functools

import numba  # without numba this package does not import, and the engine runs numpy
import numpy as np

from ...model import Model
from ...plan import Plan
from .. import rules
from ..kernels import add_c, store

__all__ = ["supports", "batched"]


@functools.lru_cache(maxsize=512)
def supports(model: Model) -> bool:
    """Whether a compiled kernel runs this model (the numpy engine runs every model): the block model's
    family has one (``Family.numba``, :mod:`.runners`), its products are exact in float64, its results have
    at most 51 bits, and the family's runner takes it (cached: models are frozen and hashable)."""
    block = model.block_model()
    if block is not model:  # block by block, see _steps
        return supports(block)
    if not model.family.has("numba"):
        return False
    if not rules.products_exact_in_float64(model.input_format, model.b_format) or model.result_format.precision > 51:
        return False
    return model.family.implementation("numba").supports(model)


#: products below which the kernels run on one thread: on a loaded machine a parallel region waits for a
#: descheduled thread (2 cores under load, one thread against two: 0.3 against 24 ms for 256 rows of 32 products,
#: 0.4 against 12 ms at 64x128x128, 4 against 20 ms at 256^3, where two save at most half: bench_small.py); at
#: 2^22 products (about 1 ms on one thread) a quiet machine of many cores loses at most that much
SMALL_WORK = 1 << 22
STEP_SUMS = 1 << 22  # step sums (float64) one compiled call of _steps makes at most (32 MB)


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
        return _steps(p, A, B, C)
    if p.narrow_c:  # the first step reads the C given in its own format (Plan.first), the rest chain on
        W = p.width
        C = _chain(p.first, A[:, :, :W], B[:, :W, :], C, L)
        if C is None or kp == W:
            return C
        A, B = A[:, :, W:], B[:, W:, :]
    return _chain(p.block, A, B, C, L)


def _steps(p: Plan, A: np.ndarray, B: np.ndarray, C: np.ndarray) -> np.ndarray | None:
    """D of a plan that is not a plain chain, its steps' blocks by the compiled kernels (products in the plan's
    order), the store and the addition of C by numpy.  Steps that sum from +0 with C after (``c_entry``
    "after" or "end") are independent until C: one call sums STEP_SUMS of them, as a batch of chains."""
    (nb, m, _), n, W = A.shape, B.shape[2], p.width
    if p.order is not None:  # each step's products in the plan's order: its blocks are then slices
        order = (np.arange(p.steps)[:, None] * W + p.order).ravel()
        A, B = A[:, :, order], B[:, order]
    D = np.asarray(C, dtype=np.float64)
    group = 1 if p.c_fused else max(1, STEP_SUMS // (nb * m * n))  # fused C: each step needs the last
    for s in range(0, p.steps, group):
        g, ks = min(group, p.steps - s), slice(s * W, (s + group) * W)
        a = A[:, :, ks].reshape(nb, m, g, W).transpose(0, 2, 1, 3).reshape(nb * g, m, W)
        c = D if p.c_fused else np.zeros((nb * g, m, n))
        S = _chain(p.unit(ks), a, B[:, ks].reshape(nb * g, W, n), c, p.block_width)
        if S is None:
            return None
        S = (store(p.model, S) if p.store else S).reshape(nb, g, m, n)
        for j in range(g):
            D = S[:, j] if p.c_fused else add_c(p.model, S[:, j], D)
    return D


def _chain(unit: Model, A: np.ndarray, B: np.ndarray, C: np.ndarray, L: int) -> np.ndarray | None:
    """A chain of blocks of L of one block model by its family's compiled kernel (k a multiple of L); None
    if these inputs need the numpy engine."""
    # contiguous and writable: numba compiles a kernel anew for read-only arrays (broadcast views are),
    # which doubled the kernels compiled in a test run
    A, B, C = (np.require(x, np.float64, ("C", "W")) for x in (A, B, C))
    out = np.empty(C.shape)
    return out if unit.family.implementation("numba").run(unit, A, B, C, out, L) else None
