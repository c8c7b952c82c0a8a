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

__all__ = ["is_dask", "matrix_shapes", "gemm"]


def is_dask(x: Any) -> bool:
    """Whether ``x`` is a dask array (looked at without importing dask)."""
    return type(x).__module__.split(".")[0] == "dask" and hasattr(x, "chunks")


def _tile(a: np.ndarray, b: np.ndarray, c: np.ndarray, sa: np.ndarray | None = None, sb: np.ndarray | None = None,
          *, kernel: Callable[..., np.ndarray], model: Model, kwargs: dict) -> np.ndarray:
    return kernel(a, b, c, model=model, scale_a=sa, scale_b=sb, **kwargs)


def matrix_shapes(A: Any, B: Any) -> None:
    """gemm's rule for A and B (numpy or dask arrays): 2-D, A's columns as many as B's rows; else ValueError."""
    if A.ndim != 2 or B.ndim != 2:
        raise ValueError(f"gemm takes 2-D A and B; got shapes {A.shape} and {B.shape}")
    if A.shape[1] != B.shape[0]:
        raise ValueError(f"inner dimensions differ: A is {A.shape}, B is {B.shape} (A's columns must equal B's rows)")


def gemm(A: Any, B: Any, C: Any, model: Model, *, kernel: Callable[..., np.ndarray], scale_a: Any = None,
         scale_b: Any = None, stated: bool = False, **kwargs: Any) -> Any:
    """A lazy dask array D = A @ B + C computed tile by tile by ``kernel`` (:func:`blockfma.gemm`, which
    passes itself; ``kwargs``: its ``round_inputs``, ``backend``, ``check``, ``c_format``).  Output tiles
    follow A's row chunks and B's column chunks; a block-scaled model's ``scale_a`` (m, k // block) follows
    A's rows and ``scale_b`` (k // block, n) B's columns, each task holding all of K's scales."""
    da = require("dask.array", extra="dask", needed_by="gemm on dask arrays", what="dask")
    A = da.asarray(A)
    B = da.asarray(B)
    matrix_shapes(A, B)
    A = A.rechunk({1: -1})  # the whole of K in every task: blocks chain in order
    B = B.rechunk({0: -1})
    m, n = A.shape[0], B.shape[1]
    if C is None:
        C = da.zeros((m, n), chunks=(A.chunks[0], B.chunks[1]))
    else:
        C = da.broadcast_to(da.asarray(C), (m, n)).rechunk((A.chunks[0], B.chunks[1]))
    dtype = model.output_format.dtype
    if scale_a is None and scale_b is None and not model.block_scaled:
        return da.blockwise(_tile, "ij", A, "ik", B, "kj", C, "ij", dtype=dtype, concatenate=True,
                            kernel=kernel, model=model, kwargs=kwargs)
    sa, sb = (None if x is None else da.asarray(x) for x in (scale_a, scale_b))
    SA, SB = model.scale_shapes(A.shape[1], (sa, sb), ((m,), (n,)), True, stated)  # the in-memory call's rule
    kwargs = {**kwargs, "scale_layout": "kn"}  # the tiles' scale_b is laid out as B (checked here, whatever its shape)
    SA = da.broadcast_to(sa, SA).rechunk((A.chunks[0], -1))
    SB = da.broadcast_to(sb[:, None] if sb.ndim == 1 else sb, SB).rechunk((-1, B.chunks[1]))
    return da.blockwise(_tile, "ij", A, "ik", B, "kj", C, "ij", SA, "is", SB, "sj", dtype=dtype,
                        concatenate=True, kernel=kernel, model=model, kwargs=kwargs)
