"""The GPU engine: the array kernels of the fused families (:mod:`.array`) run on torch tensors.

``backend="cuda"`` runs them on a CUDA GPU, ``backend="torch"`` on the CPU (the same code, so the CPU run in
the test suite checks the GPU's algorithm; the GPU test then checks the device).  This module is the
driver: it puts the operands on the device once (padded to whole blocks, with their exponents), fuses each
block into one kernel with torch.compile where it can, and walks the blocks in order over tiles of the
output.  The kernels themselves are the ones the numpy engine runs, on numpy arrays; see :mod:`.array` for
why they are exact on any device.  ``supports(model)`` says which models run here (truncated-fused, late-c
and exact-fused with results no wider than binary32); the others run on the CPU engines.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from ..model import Family, Model
from ..optional import require
from . import array, rules

__all__ = ["supports", "available", "torch_device", "dot", "gemm"]

_TILE = {"cpu": 1 << 20, "cuda": 1 << 24}  # products per step (rows x cols x L), bounding a step's memory
COMPILE = {"cpu": os.environ.get("BLOCKFMA_TORCH_COMPILE", "0") == "1",
           "cuda": os.environ.get("BLOCKFMA_TORCH_COMPILE", "1") == "1"}  # fuse each block with torch.compile
_FUSABLE = (Family.TRUNCATED_FUSED, Family.LATE_C)  # exact-fused's carry loop takes minutes to compile
_STEPS: dict[tuple, Callable[..., Any]] = {}


def _torch() -> Any:
    return require("torch", extra="torch", needed_by="the GPU engine", note=" (a CUDA build for backend='cuda')")


def available() -> bool:
    """Whether torch imports and sees a CUDA GPU."""
    try:
        return bool(_torch().cuda.is_available())
    except ImportError:
        return False


def torch_device(backend: str) -> Any:
    """The torch device of a backend name: ``"torch"`` is the CPU, ``"cuda"`` (or ``"cuda:1"``) a GPU."""
    torch = _torch()
    if backend == "torch":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ValueError(f"backend={backend!r} needs a CUDA GPU, and torch {torch.__version__} sees none "
                         "(torch.cuda.is_available() is False); use backend='auto' for the CPU engines")
    return torch.device(backend)


def supports(model: Model) -> bool:
    """Whether the GPU engine runs this model: what the array kernels run (:func:`.array.supports`), with C
    fused into the block and no separate accumulator format (those run on the CPU engines)."""
    return array.supports(model) and model.c_entry == "fused" and model.accumulator_format is None


# --- drivers -------------------------------------------------------------------------------------------
def _on(dev: Any, x: np.ndarray, kp: int | None = None) -> Any:
    """A float64 copy of ``x`` on the device, its last axis padded with zeros to ``kp``."""
    x = x if kp is None else rules.pad(x, kp)
    return _torch().from_numpy(np.array(x, dtype=np.float64)).to(dev)


def _step(model: Model, products: bool, overflow: bool, device_type: str) -> Callable[..., Any]:
    """The block kernel for this model and these flags: compiled by torch.compile (one fused kernel per
    block, Triton on a GPU) where ``COMPILE[device_type]`` says so, else run op by op.  Exact-fused always
    runs op by op: its carry loop unrolls into a graph that takes minutes to compile.  Should compiling
    fail (no Triton, no C++ compiler), a warning says so and the op-by-op kernel runs: same bits, slower."""
    key = (model, products, overflow, device_type)
    if key not in _STEPS:
        kernel = array.KERNELS[model.family]
        torch = _torch()

        def step(a: Any, b: Any, ea: Any, eb: Any, c: Any) -> Any:
            return kernel(torch, model, a, b, c, ea=ea, eb=eb, products=products, overflow=overflow)

        if not COMPILE.get(device_type, False) or model.family not in _FUSABLE:
            _STEPS[key] = step
        else:
            # dynamic=False: one graph per tile shape.  With dynamic shapes torch 2.11 turned the model's
            # integer parameters into symbols and failed on the second shape (H100 run, 2026-11-22).
            dynamo = _torch()._dynamo.config  # one graph per (model, tile shape): the default limit of 8
            for name in ("recompile_limit", "cache_size_limit"):  # recompiles sent most models to eager
                if hasattr(dynamo, name):
                    setattr(dynamo, name, max(getattr(dynamo, name), 512))
            compiled = _torch().compile(step, dynamic=False)
            fallen_back: list[bool] = []

            def guarded(*args: Any) -> Any:
                if not fallen_back:  # every call may compile anew (a new shape), so every call is guarded
                    try:
                        return compiled(*args)
                    except Exception as exc:  # a broken toolchain, not an arithmetic question
                        warnings.warn(f"torch.compile failed for the GPU engine ({type(exc).__name__}: {exc}); "
                                      "running it op by op (same results, slower)", RuntimeWarning, stacklevel=2)
                        fallen_back.append(True)
                return step(*args)

            _STEPS[key] = guarded
    return _STEPS[key]


def _check(model: Model) -> None:
    if not supports(model):
        raise ValueError(f"the GPU engine does not run {model.summary()} (it runs the fused families, "
                         "truncated-fused, late-c and exact-fused, with inputs of at most 26 bits and binary32 or "
                         "narrower results); use backend='auto'")


def _operands(model: Model, A: np.ndarray, B: np.ndarray, C: np.ndarray, backend: str
              ) -> tuple[Any, int, Callable[..., Any], Any, Any, Any, Any, Any]:
    """What gemm and dot share: (device, L, the block step, A, B padded to whole blocks on the device,
    their exponents, C on the device).  A and B have k on their last axis."""
    _check(model)
    dev = torch_device(backend)
    k = A.shape[-1]
    L = model.block_width or max(k, 1)
    kp = -(-k // L) * L
    step = _step(model, *array.flags(model, A, B), dev.type)
    At, Bd, D = _on(dev, A, kp), _on(dev, B, kp), _on(dev, C)
    torch = _torch()
    EA = array.fmt_exponent(torch, model.input_format, array.finite(torch, At))
    EB = array.fmt_exponent(torch, model.b_format, array.finite(torch, Bd))
    return dev, L, step, At, Bd, EA, EB, D


def gemm(model: Model, A: np.ndarray, Bt: np.ndarray, C: np.ndarray, backend: str = "cuda",
         progress: Callable[[float], None] | None = None) -> np.ndarray:
    """float64 D (m, n) = A (m, k) @ Bt.T + C, values already checked, flushed and in the model's formats."""
    dev, L, step, At, Bd, EA, EB, D = _operands(model, A, Bt, C, backend)
    m, n = D.shape
    tile = _TILE[dev.type] // array.width(model, L)
    cols = max(1, min(n, tile))
    rows = max(1, tile // cols)
    nblocks = At.shape[1] // L
    for j in range(nblocks):
        sl = slice(j * L, (j + 1) * L)
        for r in range(0, m, rows):
            rs = slice(r, min(m, r + rows))
            for c0 in range(0, n, cols):
                cs = slice(c0, min(n, c0 + cols))
                D[rs, cs] = step(At[rs, None, sl], Bd[None, cs, sl], EA[rs, None, sl], EB[None, cs, sl], D[rs, cs])
        if progress is not None:
            progress((j + 1) / nblocks)
    return D.cpu().numpy()


def dot(model: Model, A: np.ndarray, B: np.ndarray, C: np.ndarray, backend: str = "cuda") -> np.ndarray:
    """float64 d (rows,) = sum over k of A * B (rows, k) + C (rows,), values already checked."""
    dev, L, step, At, Bd, EA, EB, D = _operands(model, A, B, C, backend)
    rows = D.shape[0]
    chunk = max(1, _TILE[dev.type] // array.width(model, L))
    for j in range(At.shape[1] // L):
        sl = slice(j * L, (j + 1) * L)
        for r in range(0, rows, chunk):
            rs = slice(r, min(rows, r + chunk))
            D[rs] = step(At[rs, sl], Bd[rs, sl], EA[rs, sl], EB[rs, sl], D[rs])
    return D.cpu().numpy()
