"""``gemm`` on dask arrays: one task per output tile, each with the whole of K.

Every output element's dot product runs in one task, so its blocks chain in order exactly as in memory: the
result is bit-identical to ``gemm`` on the same numpy arrays, whatever the chunks or the scheduler (threads,
processes, a ``dask.distributed`` cluster).  K is never split (a split K would reorder the chain).
:func:`blockfma.gemm` sends dask arrays here with itself as ``kernel``: this module imports no engine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..model import Model
from ..optional import require

__all__ = ["is_dask", "gemm"]


def is_dask(x: Any) -> bool:
    """Whether ``x`` is a dask array (looked at without importing dask)."""
    return type(x).__module__.split(".")[0] == "dask" and hasattr(x, "chunks")


def _dask_array() -> Any:
    return require("dask.array", extra="dask", needed_by="gemm on dask arrays", what="dask")


def _tile(a: np.ndarray, b: np.ndarray, c: np.ndarray, *, kernel: Callable[..., np.ndarray], model: Model,
          kwargs: dict) -> np.ndarray:
    return kernel(a, b, c, model=model, **kwargs)


def gemm(A: Any, B: Any, C: Any, model: Model, *, kernel: Callable[..., np.ndarray], **kwargs: Any) -> Any:
    """A lazy dask array D = A @ B + C computed tile by tile by ``kernel`` (:func:`blockfma.gemm`, which
    passes itself; ``kwargs``: its ``round_inputs``, ``backend``, ``check``).  Output tiles follow A's row
    chunks and B's column chunks."""
    da = _dask_array()
    A = da.asarray(A)
    B = da.asarray(B)
    if A.ndim != 2 or B.ndim != 2:
        raise ValueError(f"gemm takes 2-D A and B; got shapes {A.shape} and {B.shape}")
    if A.shape[1] != B.shape[0]:
        raise ValueError(f"inner dimensions differ: A is {A.shape}, B is {B.shape} (A's columns must equal "
                         "B's rows)")
    A = A.rechunk({1: -1})  # the whole of K in every task: blocks chain in order
    B = B.rechunk({0: -1})
    m, n = A.shape[0], B.shape[1]
    if C is None:
        C = da.zeros((m, n), chunks=(A.chunks[0], B.chunks[1]))
    else:
        C = da.broadcast_to(da.asarray(C), (m, n)).rechunk((A.chunks[0], B.chunks[1]))
    dtype = model.output_format.dtype
    return da.blockwise(_tile, "ij", A, "ik", B, "kj", C, "ij", dtype=dtype, concatenate=True,
                        kernel=kernel, model=model, kwargs=kwargs)
