"""The GPU engine: the array kernels of the fused families (:mod:`.array`) run on torch tensors.

``backend="cuda"`` runs them on a CUDA GPU, ``backend="torch"`` on the CPU (the same code: docs/engines.md,
"The GPU engine").  This module is the driver: it puts the operands on the device once (padded to whole
blocks, with their exponents), fuses each block into one kernel with torch.compile where it can, and walks
the plan's blocks over tiles of the output.  :func:`supports` says which models run here.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from ..formats import RoundingMode
from ..model import Family, Model
from ..plan import Index, Plan, array_index, run
from ..optional import require
from . import array, rules
from .triton import check_fits

__all__ = ["supports", "available", "torch_device", "dot", "gemm", "scaled"]

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
    """Whether the GPU engine runs this model: its blocks are what the array kernels run
    (:func:`.array.supports` of the block model), and so are its store and its addition of C where it has
    them (the addition is an exact-fused block of one product, ``s * 1 + c``)."""
    m = model.arithmetic_model()
    if not array.supports(m.block_model()):
        return False
    return (m.c_entry == "fused" or array.supports(_adder(m))) and \
        (m.accumulator_format is None or rules.values_in_binary32(m.output_format))


def _adder(model: Model) -> Model:
    """C added after the blocks as an exact-fused block of one product: ``s * 1 + c`` rounded once to
    nearest even into the output format, IEEE zero signs and overflow: the IEEE addition of the plan."""
    return Model(Family.EXACT_FUSED, model.output_format, model.output_format, block_width=1,
                 subnormals=model.subnormals, flush_zero=model.flush_zero, name="the addition of C")


# --- drivers -------------------------------------------------------------------------------------------
def _on(dev: Any, x: np.ndarray, kp: int | None = None) -> Any:
    """A float64 copy of ``x`` on the device, its last axis padded with zeros to ``kp``."""
    x = x if kp is None else rules.pad(x, kp)
    return _torch().from_numpy(np.array(x, dtype=np.float64)).to(dev)


def _step(model: Model, products: bool, overflow: bool, device_type: str) -> Callable[..., Any]:
    """The block kernel for this model and these flags: compiled by torch.compile (one fused kernel per
    block, Triton on a GPU) where ``COMPILE[device_type]`` says so, else (and always for exact-fused, whose
    carry loop takes minutes to compile) op by op.  Should compiling fail (no Triton, no C++ compiler), a
    warning says so and the op-by-op kernel runs: same bits, slower."""
    key = (model, products, overflow, device_type)
    if key not in _STEPS:
        kernel = model.family.implementation("array")
        torch = _torch()

        def step(a: Any, b: Any, ea: Any, eb: Any, c: Any) -> Any:
            return kernel(torch, model, a, b, c, ea=ea, eb=eb, products=products, overflow=overflow)

        if not COMPILE.get(device_type, False) or model.family not in _FUSABLE:
            _STEPS[key] = step
        else:
            # dynamic=False: one graph per tile shape.  With dynamic shapes torch 2.11 turned the model's
            # integer parameters into symbols and failed on the second shape (seen on an H100).
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
                    except Exception as exc:  # noqa: BLE001 - a broken toolchain, not an arithmetic question
                        warnings.warn(f"torch.compile failed for the GPU engine ({type(exc).__name__}: {exc}); "
                                      "running it op by op (same results, slower)", RuntimeWarning, stacklevel=2)
                        fallen_back.append(True)
                return step(*args)

            _STEPS[key] = guarded
    return _STEPS[key]


def refusal(model: Model) -> ValueError:
    """The error for a model the GPU engine does not run."""
    return ValueError(f"the GPU engine does not run {model.summary()} (it runs the families with array "
                      "kernels, truncated-fused, late-c and exact-fused, with inputs of at most 26 bits and "
                      "binary32 or narrower results); use backend='auto'")


class _Tiles:
    """The GPU engine's :class:`blockfma.plan.Datapath`: operands padded on the device with their exponents,
    each block by the family's array kernel (compiled where it can be) over tiles of the output, written in
    place; the store and the addition of C by the array kernels too."""

    def __init__(self, p: Plan, A: np.ndarray, B: np.ndarray, backend: str, gemm: bool):
        if not supports(p.model):
            raise refusal(p.model)
        torch = _torch()
        self.dev = torch_device(backend)
        self.p, self.gemm = p, gemm
        flags = array.flags(p.block, A, B)
        # the block kernel of each block model the plan hands out (Plan.unit: the first step's may differ)
        self.steps = {id(u): _step(u, *flags, self.dev.type) for u in (p.block, p.first)}
        self.A, self.B = _on(self.dev, A, p.padded), _on(self.dev, B, p.padded)
        self.EA = array.fmt_exponent(torch, p.block.input_format, array.finite(torch, self.A))
        self.EB = array.fmt_exponent(torch, p.block.b_format, array.finite(torch, self.B))
        self.adder = None if p.c_fused else _step(_adder(p.model), True, False, self.dev.type)  # s may be NaN or inf
        self.tile = max(1, _TILE[self.dev.type] // array.width(p.block, p.block_width))  # outputs per call

    def block(self, products: Index, D: Any) -> Any:
        ix = array_index(products)
        A, B, EA, EB = self.A[..., ix], self.B[..., ix], self.EA[..., ix], self.EB[..., ix]
        step = self.steps[id(self.p.unit(products))]
        if not self.gemm:
            for r in range(0, D.shape[0], self.tile):
                rs = slice(r, r + self.tile)
                D[rs] = step(A[rs], B[rs], EA[rs], EB[rs], D[rs])
            return D
        m, n = D.shape
        cols = max(1, min(n, self.tile))
        rows = max(1, self.tile // cols)
        for r in range(0, m, rows):
            rs = slice(r, min(m, r + rows))
            for c0 in range(0, n, cols):
                cs = slice(c0, min(n, c0 + cols))
                D[rs, cs] = step(A[rs, None], B[None, cs], EA[rs, None], EB[None, cs], D[rs, cs])
        return D

    def zero(self, c: Any) -> Any:
        return _torch().zeros_like(c)

    def store(self, x: Any) -> Any:
        torch = _torch()
        m = self.p.model
        rounded = array.round_to(torch, m.output_format, array.finite(torch, x), RoundingMode.TiesToEven,
                                 subnormals=m.subnormals)
        return torch.where(torch.isfinite(x), rounded, x)

    def add_c(self, s: Any, c: Any) -> Any:
        torch = _torch()
        one = torch.ones_like(s)[..., None]
        return self.adder(s[..., None], one, array.fmt_exponent(torch, self.p.model.output_format, array.finite(
            torch, s))[..., None], torch.zeros_like(one, dtype=torch.int64), c)


def gemm(p: Plan, A: np.ndarray, Bt: np.ndarray, C: np.ndarray, backend: str = "cuda",
         progress: Callable[[float], None] | None = None) -> np.ndarray:
    """float64 D (m, n) = A (m, k) @ Bt.T + C by the plan, values already checked, flushed and in the model's formats. A
    GEMM whose operands cannot fit the device's free memory is refused before anything moves, with the sizes and the fix
    (``blockfma.engine.triton.check_fits`` with this engine's sizes: A and B in float64 with their int64 exponents, C
    and D in float64; one tile's temporaries come on top)."""
    check_fits(A.shape[0], A.shape[1], Bt.shape[0], torch_device(backend), operand_bytes=16, output_bytes=16,
               what="A and B in float64 with their exponents, C and D in float64")
    tiles = _Tiles(p, A, Bt, backend, gemm=True)
    return run(p, tiles, _on(tiles.dev, C), progress).cpu().numpy()


def dot(p: Plan, A: np.ndarray, B: np.ndarray, C: np.ndarray, backend: str = "cuda") -> np.ndarray:
    """float64 d (rows,) = sum over k of A * B (rows, k) + C (rows,) by the plan, values already checked."""
    tiles = _Tiles(p, A, B, backend, gemm=False)
    return run(p, tiles, _on(tiles.dev, C)).cpu().numpy()


class _ScaledTiles:
    """The GPU engine's :class:`blockfma.plan.Datapath` of a block-scaled plan (a chain of fused blocks): each
    block by :func:`blockfma.engine.scaled.block` on torch tensors, op by op, over tiles of rows."""

    def __init__(self, p: Plan, A: Any, Bt: Any, SA: Any, SBt: Any, products: bool, rows: int):
        self.p, self.A, self.Bt, self.SA, self.SBt, self.products, self.rows = p, A, Bt, SA, SBt, products, rows

    def block(self, products: Index, D: Any) -> Any:
        from . import scaled

        ix = array_index(products)
        for r in range(0, D.shape[1], self.rows):
            rs = slice(r, r + self.rows)
            D[:, rs] = scaled.block(_torch(), self.p.block, self.A[:, rs, None, ix], self.Bt[:, None, :, ix],
                                    D[:, rs], self.SA[:, rs, None, ix], self.SBt[:, None, :, ix],
                                    products=self.products)
        return D

    def zero(self, c: Any) -> Any:  # pragma: no cover - block-scaled plans fuse C into every block
        raise NotImplementedError("a block-scaled plan fuses C into each block")

    store = add_c = zero


def scaled(p: Plan, A: np.ndarray, Bt: np.ndarray, C: np.ndarray, SA: np.ndarray, SBt: np.ndarray,
           backend: str = "cuda") -> np.ndarray:
    """float64 D (batch, m, n) by the plan of a block-scaled model (within :func:`blockfma.engine.scaled.supports`):
    A (batch, m, k), Bt (batch, n, k) (B transposed), C (batch, m, n), values checked and flushed; the
    scales of every product SA (batch, m, kp), SBt (batch, n, kp), kp the plan's padded k (padding: 1).
    A call whose arrays cannot fit the device's free memory is refused before anything moves."""
    _torch()  # torch missing: the one-line install hint, before anything else
    dev = torch_device(backend)
    (batch, m, k), n = A.shape, Bt.shape[1]
    check_fits(m, k, n, dev, operand_bytes=16, output_bytes=16, batch=batch,
               what="A and B in float64 with a float64 scale per product, C and D in float64")
    products = not (np.isfinite(A).all() and np.isfinite(Bt).all())
    with np.errstate(invalid="ignore", over="ignore"):
        tiles = _ScaledTiles(p, _on(dev, A, p.padded), _on(dev, Bt, p.padded), _on(dev, SA), _on(dev, SBt), products,
                             max(1, _TILE[dev.type] // max(1, n * p.block_width)))
        out = run(p, tiles, _on(dev, C))
    return out.cpu().numpy()
