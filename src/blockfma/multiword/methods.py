"""Accurate matrix products from low-precision units: the methods, run on a simulated unit by default.

Each method splits A and B into words of a low format (:func:`.split.split`), computes some word products
with the unit (``blockfma.gemm`` on the device's Model: the engine's trusted path, every block rounded as the
hardware rounds it), and adds them up:

* ``accumulate="outside"`` (Fasi et al.'s Algorithm 2.1): each product from zero on the unit, then
  C <- fl_high(C + C_ij) in the high format, rounding to nearest;
* ``accumulate="inside"`` (Algorithm 4.1, cuBLAS with beta = 1; Markidis; NVIDIA's 3xTF32): the running C is
  the unit's C, so every product is chained into it by the unit's own arithmetic (truncation included).

The order of the products is a parameter: on a truncating unit Algorithm 2.1's (A1B1, A1B2, A2B1) and
Algorithm 4.1's (A2B1, A1B2, A1B1) give different bits.  ``summation="fabsum-v1" | "fabsum-v2"`` (Algorithms
4.2 and 4.3, block size ``block``) computes the leading product A1B1 in blocks of ``block`` columns on the
unit and adds the blocks in fp32 (v1) or fp64 (v2) rounding to nearest (Algorithm 4.4).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import formats as _formats
from ..formats import RoundingMode
from ..model import Family, Model
from . import hardware as _hardware
from .split import check_operands, split

__all__ = ["Method", "METHODS", "methods", "matmul", "unit_model", "TF64_UNIT"]

ORDERS = ("alg2.1", "cublas")

# A unit that multiplies fp32 words exactly and accumulates in fp64 (Valero-Lara et al.'s proposed TF64):
# an fp64 FMA chain with fp32 inputs (every fp32 x fp32 product is exact in fp64).
TF64_UNIT = Model(Family.FMA_CHAIN, "fp32", "fp64", block_width=1,
                  name="TF64 unit (fp32 x fp32 exact, fp64 FMA chain)")


@dataclass(frozen=True)
class Method:
    """One method: words of ``low`` (``p`` of them, residuals scaled by 2**``scale``), the word products
    (0-based (i, j), in the order computed), where they are accumulated, the high format, the source."""

    name: str
    low: str
    p: int
    products: tuple[tuple[int, int], ...]
    accumulate: str  # "outside" | "inside"
    high: str = "fp32"
    scale: int = 0
    split_rounding: str = "rne"
    outside_groups: tuple[tuple[int, ...], ...] = ()  # ootomo: products summed inside, groups added outside
    source: str = ""
    description: str = ""

    @property
    def n_products(self) -> int:
        return len(self.products)


def _triangle(p: int, order: str = "alg2.1") -> tuple[tuple[int, int], ...]:
    """Products A_i B_j with i + j <= p + 1 (1-based): Algorithm 2.1's loop order (i, then j), or the
    cuBLAS order of Algorithm 4.1 (the smallest first, A1B1 last)."""
    pairs = tuple((i, j) for i in range(p) for j in range(p) if i + j <= p - 1)
    if order == "cublas":
        return tuple(sorted(pairs, key=lambda t: (-(t[0] + t[1]), -t[0])))
    return pairs


FASI = "Fasi, Higham, Lopez, Mary, Mikaitis 2022 (Algorithm 2.1)"
METHODS: dict[str, Method] = {m.name: m for m in [
    Method("fp16", "fp16", 1, ((0, 0),), "outside", source=FASI, description="one fp16 word"),
    Method("bf16", "bf16", 1, ((0, 0),), "outside", source=FASI, description="one bf16 word"),
    Method("tf32", "tf32", 1, ((0, 0),), "outside", source="Valero-Lara et al. 2023 (1xTF32)",
           description="one tf32 word"),
    Method("double-fp16", "fp16", 2, _triangle(2), "outside", source=FASI,
           description="p = 2 fp16 words, 3 products (i + j <= 3)"),
    Method("double-bf16", "bf16", 2, _triangle(2), "outside", source=FASI,
           description="p = 2 bf16 words, 3 products"),
    Method("triple-bf16", "bf16", 3, _triangle(3), "outside", source=FASI,
           description="p = 3 bf16 words, 6 products (i + j <= 4)"),
    Method("markidis", "fp16", 2, ((0, 0), (0, 1), (1, 0), (1, 1)), "inside",
           source="Markidis et al. 2018", description="fp16 words and residuals, 4 products in the unit"),
    Method("ootomo", "fp16", 2, ((0, 0), (0, 1), (1, 0)), "outside", scale=11,
           outside_groups=((0,), (1, 2)), source="Ootomo and Yokota 2022",
           description="residuals scaled by 2^11, the corrections summed in the unit, added outside (RN)"),
    Method("3xtf32", "tf32", 2, ((1, 0), (0, 1), (0, 0)), "inside",
           source="Valero-Lara et al. 2023; NVIDIA CUTLASS 3xTF32",
           description="big and small tf32 words, small products first, in the unit's accumulator"),
    Method("4xtf32", "tf32", 2, ((1, 1), (1, 0), (0, 1), (0, 0)), "inside", source="Valero-Lara et al. 2023",
           description="3xtf32 and the small x small product"),
    Method("bf16x9", "bf16", 3, tuple(sorted(((i, j) for i in range(3) for j in range(3)),
                                             key=lambda t: (-(t[0] + t[1]), -t[0]))), "inside",
           source="cuBLAS FP32 emulation on Blackwell (CUBLAS_COMPUTE_32F_EMULATED_16BFX9)",
           description="3 bf16 words each, all 9 products, the smallest first, in the unit's accumulator"),
    Method("tf64", "fp32", 2, ((1, 0), (0, 1), (0, 0)), "inside", high="fp64",
           source="Valero-Lara et al. 2023 (3xTF64)",
           description="fp64 through 2 fp32 words on a unit that accumulates in fp64, 3 products"),
]}


def methods() -> list[str]:
    """The names ``matmul`` takes (multiword methods; "ozaki1"/"ozaki2" and the native baselines too)."""
    return list(METHODS) + ["mmm", "ozaki1", "ozaki2", "fp32", "fp64"]


def unit_model(low: str, high: str = "fp32", device: Any = None, model: Model | None = None) -> Model:
    """The unit a method runs on: ``model`` if given (checked to take ``low``), else the device preset's
    Model for (low, high), else for "tf64" the hypothetical TF64 unit."""
    lowf = _formats.get(low)
    if model is not None:
        if not isinstance(model, Model):
            raise TypeError(f"model= takes a blockfma.Model, not {type(model).__name__}")
        if model.input_format != lowf and not (lowf.name == "tf32" and model.input_format.name == "tf32"):
            raise ValueError(f"the model takes {model.input_format.name}, but this method's words are {lowf.name}")
        return model
    if low == "fp32" and high == "fp64":
        return TF64_UNIT
    from ..devices import device as _device

    dev = _device("V100" if device is None else device)
    try:
        return dev.model(low, high)
    except ValueError as exc:
        raise ValueError(f"{dev.name} has no {low} -> {high} unit ({exc}); pick a device that has one "
                         f"(e.g. device='A100' for bf16 and tf32) or pass model=") from None


@dataclass
class _Run:
    unit: Model | None
    backend: str
    calls: int = 0
    hw: Any = None  # a hardware.TorchUnit for backend="torch"

    @property
    def name(self) -> str:
        return self.hw.name if self.hw is not None else self.unit.name

    def extra(self) -> dict[str, Any]:
        """The hardware unit's device and the seconds spent in its calls (nothing for a simulated unit)."""
        return {} if self.hw is None else {"hardware": self.hw.info(), "unit_seconds": self.hw.seconds}

    def gemm(self, A: np.ndarray, B: np.ndarray, C: np.ndarray | None) -> np.ndarray:
        """One product on the unit, its C chained in (None: from zero); float64 values of the unit's output."""
        from ..engine import gemm

        self.calls += 1
        if self.hw is not None:
            return self.hw.gemm(A, B, C, check=False)
        if self.unit == TF64_UNIT:
            return _fma_chain_fp64(A, B, C)
        out = gemm(A, B, C, model=self.unit, check=False, backend=self.backend)
        return np.asarray(out, dtype=np.float64)


def _fma_chain_fp64(A: np.ndarray, B: np.ndarray, C: np.ndarray | None) -> np.ndarray:
    """The TF64 unit's product, as the engine computes it but in k rank-one float64 updates: an fp32 x fp32
    product is exact in binary64, so ``D + a_i b_i`` in float64 is one FMA rounded to nearest
    (tests/test_multiword.py holds it to ``blockfma.gemm`` on TF64_UNIT bit for bit)."""
    D = np.zeros((A.shape[0], B.shape[1])) if C is None else np.array(C, dtype=np.float64)
    for i in range(A.shape[1]):
        D = D + A[:, i, None] * B[None, i, :]
    return D


def _fl(fmt: str, x: np.ndarray) -> np.ndarray:
    return _formats.round(fmt, x, RoundingMode.TiesToEven)


def _fabsum(run: _Run, A: np.ndarray, B: np.ndarray, block: int, version: str, high: str) -> np.ndarray:
    """Algorithms 4.2/4.3: blocks of ``block`` inner products on the unit, from zero; the blocks added in
    fp32 (v1) or fp64 (v2), rounding to nearest, the v2 sum rounded once to ``high`` at the end."""
    n = A.shape[1]
    inter = "fp32" if version == "fabsum-v1" else "fp64"
    total = np.zeros((A.shape[0], B.shape[1]))
    for start in range(0, n, block):
        T = run.gemm(A[:, start:start + block], B[start:start + block, :], None)
        total = _fl(inter, total + T)  # one IEEE addition per entry (exact sum of two floats, rounded)
    return _fl(high, total)


def matmul(A: Any, B: Any, *, method: str, device: Any = None, model: Model | None = None,
           backend: str | None = None, summation: str | None = None, block: int | None = None,
           order: str | Sequence[tuple[int, int]] | None = None, accumulate: str | None = None,
           split_rounding: str | None = None, p: int | None = None, low: str | None = None,
           words: int | None = None, return_info: bool = False, **options: Any) -> Any:
    """C ≈ A @ B by ``method`` (see :func:`methods`), its word products on a simulated unit: the device
    preset's Model for the words' format (default V100 for fp16, ``device="A100"`` for bf16/tf32), or
    ``model``.  Returns a float64 array of values of the method's high format (fp32; fp64 for tf64, Ozaki).

    ``backend``: the simulator engine's ("auto", "numpy", "numba", "cuda", ...), or "torch" ("torch:cuda",
    "torch:cpu") for real units through torch (:mod:`.hardware`: fp16/bf16/tf32 words with fp32 output,
    ``torch._int_mm`` for Ozaki, torch's fp32/fp64 matmul for the baselines; no ``device``/``model``; tf64
    has no such unit).

    ``order``: "alg2.1" (i, then j: A1B1, A1B2, A2B1), "cublas" (A2B1, A1B2, A1B1) or explicit 0-based
    (i, j) pairs; ``accumulate``: "outside" or "inside" (see the module docstring); ``summation``:
    "fabsum-v1"/"fabsum-v2" with ``block`` (the leading product in blocks, Algorithm 4.4);
    ``split_rounding``: how words are rounded (tf32: "rne", or "rz" as the unit reads fp32); "mmm" takes
    ``p`` and ``low``.  ``return_info=True`` returns (C, info) with the unit, the number of unit calls and
    the products in their order.  Non-finite entries, incompatible shapes and values beyond the low format
    are ValueErrors; words that underflow give a RangeWarning.
    """
    A_, B_ = check_operands(A, B)
    backend = backend or "auto"
    hw = None
    if _hardware.is_torch(backend):
        if device is not None or model is not None:
            raise ValueError("device= and model= pick a simulated unit; backend='torch' runs on the hardware: "
                             "leave them out, or use a simulator backend")
        _hardware.torch_device(backend)  # a clear error for a bad device before any work
    if method in ("fp32", "fp64"):  # the native baselines: binary32 / binary64 matmul (numpy, BLAS; or torch)
        dt = np.float32 if method == "fp32" else np.float64
        if _hardware.is_torch(backend):
            hw = _hardware.TorchUnit(method, backend)
            C = hw.gemm(A_.astype(dt), B_.astype(dt), check=False)
            info = {"method": method, "unit": hw.name, "calls": 1, "hardware": hw.info(), "unit_seconds": hw.seconds}
            return (C, info) if return_info else C
        C = (A_.astype(dt) @ B_.astype(dt)).astype(np.float64)
        return (C, {"method": method, "unit": f"numpy {dt.__name__} matmul", "calls": 1}) if return_info else C
    if method in ("ozaki1", "ozaki2"):
        from . import ozaki

        if _hardware.is_torch(backend):
            if options.get("unit") is not None:
                raise ValueError("pass unit= or backend='torch', not both (backend='torch' uses torch._int_mm)")
            hw = options["unit"] = _hardware.Int8Unit(backend)
        if method == "ozaki1":
            from .bounds import ozaki_slices

            options.setdefault("slices", ozaki_slices(53))  # fp64 accuracy by the slice-count rule
            C = ozaki.ozaki1(A_, B_, **options)
            detail = f"{options['slices']} slices"
        else:
            C = ozaki.ozaki2(A_, B_, **options)
            detail = f"{len(options['moduli']) if options.get('moduli') else options.get('n_moduli') or 16} moduli"
        info = {"method": method, "unit": f"int8 x int8 -> int32 (exact), {detail}", "calls": None}
        if hw is not None:
            info.update(unit=f"{hw.name}, {detail}", calls=hw.calls, hardware=hw.info(), unit_seconds=hw.seconds)
        return (C, info) if return_info else C
    if options:
        raise TypeError(f"matmul() got unexpected arguments {', '.join(options)} for method {method!r}")
    if method == "mmm":
        if p is None or low is None:
            raise ValueError("method='mmm' needs p= (words) and low= (their format, e.g. 'bf16')")
        m = Method(f"mmm-{low}-p{p}", low, p, _triangle(p), "outside", source=FASI)
    elif method in METHODS:
        m = METHODS[method]
    else:
        raise ValueError(f"unknown method {method!r}; the methods are: {', '.join(methods())}")
    products = _products(m, order)
    acc = accumulate or ("inside" if order == "cublas" else m.accumulate)
    if acc not in ("outside", "inside"):
        raise ValueError(f"accumulate must be 'outside' or 'inside', not {acc!r}")
    if summation not in (None, "fabsum-v1", "fabsum-v2"):
        raise ValueError(f"summation must be 'fabsum-v1' or 'fabsum-v2', not {summation!r}")
    if summation and not (isinstance(block, (int, np.integer)) and block >= 1):
        raise ValueError(f"summation={summation!r} needs block= (a positive block size), not {block!r}")
    if _hardware.is_torch(backend):
        if m.high == "fp64":
            raise ValueError(f"{m.name} needs a unit with exact fp32 x fp32 products accumulated in fp64, which no "
                             "GPU has: backend='torch' cannot run it; use the simulator (backend='auto')")
        run = _Run(None, backend, hw=_hardware.TorchUnit(m.low, backend))
    else:
        run = _Run(unit_model(m.low, m.high, device, model), backend)
    rounding = split_rounding or m.split_rounding
    Aw = split(A_, m.low, m.p, scale=m.scale, rounding=rounding, name="A")
    Bw = split(B_, m.low, m.p, scale=m.scale, rounding=rounding, name="B")
    high = m.high

    def scaled(i: int, j: int, T: np.ndarray) -> np.ndarray:
        return np.ldexp(T, -m.scale * (i + j)) if m.scale else T

    if m.outside_groups:  # Ootomo-Yokota: each group summed in the unit, the groups added outside (RN)
        C = np.zeros((A_.shape[0], B_.shape[1]))
        for group in sorted(m.outside_groups, key=lambda g: -min(sum(products[t]) for t in g)):
            T = None
            for t in group:
                i, j = products[t]
                T = run.gemm(Aw[i], Bw[j], T)
            i, j = products[group[0]]
            C = _fl(high, C + scaled(i, j, T))
        info = {"method": m.name, "unit": run.name, "calls": run.calls, "products": products, **run.extra()}
        return (C, info) if return_info else C
    C = None
    for i, j in products:
        if summation and (i, j) == (0, 0):
            T = _fabsum(run, Aw[0], Bw[0], int(block), summation, high)
            C = T if C is None else _fl(high, C + T)
            continue
        if acc == "inside":
            if m.scale:
                raise ValueError("scaled words cannot be chained in the unit's accumulator")
            C = run.gemm(Aw[i], Bw[j], C)
        else:
            T = scaled(i, j, run.gemm(Aw[i], Bw[j], None))
            C = T if C is None else _fl(high, C + T)
    assert C is not None
    info = {"method": m.name, "unit": run.name, "calls": run.calls, "products": products,
            "accumulate": acc, "summation": summation, "block": block, **run.extra()}
    return (C, info) if return_info else C


def _products(m: Method, order: Any) -> tuple[tuple[int, int], ...]:
    if order is None:
        return m.products
    if m.outside_groups:
        raise ValueError(f"{m.name} fixes its order (products grouped in the unit, groups added outside)")
    if order == "alg2.1":
        return tuple(sorted(m.products))
    if order == "cublas":
        return tuple(sorted(m.products, key=lambda t: (-(t[0] + t[1]), -t[0])))
    if isinstance(order, str):
        raise ValueError(f"order must be 'alg2.1', 'cublas' or a list of (i, j) pairs, not {order!r}")
    pairs = tuple((int(i), int(j)) for i, j in order)
    bad = [t for t in pairs if not (0 <= t[0] < m.p and 0 <= t[1] < m.p)]
    if bad:
        raise ValueError(f"order names word products {bad} outside 0..{m.p - 1}")
    return pairs

