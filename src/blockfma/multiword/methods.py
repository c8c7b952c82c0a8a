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

import difflib
import math
import numbers
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import formats as _formats
from ..arguments import ArgumentError, Shown, choice, flag, integer, keywords, memory, permutation
from ..formats import RoundingMode
from ..model import Family, Model
from ..progress import reporter
from . import hardware as _hardware, tensors as _tensors
from .split import (MAX_WORDS, RangeWarning, check_range, range_message, split_words, underflow_loss,
                    check_format, check_input, check_rounding)

__all__ = ["Method", "METHODS", "methods", "matmul", "unit_model", "TF64_UNIT", "OverflowWarning",
           "SIMULATOR_BACKENDS", "check_backend"]

ORDERS = ("alg2.1", "cublas")
SIMULATOR_BACKENDS = ("auto", "numpy", "numba", "cuda")
"""The simulator engine's backends ``matmul`` takes (and "cuda:N"); "hardware[:DEVICE]" runs real units."""


class OverflowWarning(RuntimeWarning):
    """A word product (or a sum of them) overflowed the unit's output or the method's high format: the
    entries it touched are NaN where the method cannot compute them, or +-inf with the exact product's sign
    where the product itself lies beyond the high format's range (see :func:`matmul`)."""

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


# --- arguments ---------------------------------------------------------------------------------------------
def check_method(method: Any) -> str:
    known = methods()
    if isinstance(method, str) and method.strip().lower() in known:
        return method.strip().lower()
    close = difflib.get_close_matches(str(method).lower(), known, n=1, cutoff=0.5) if isinstance(method, str) else []
    raise ArgumentError("method", method, f"unknown method; the methods are: {', '.join(known)}",
                        use={"method": close[0]} if close else None)


def check_backend(backend: Any) -> tuple[str, bool]:
    """``backend`` of :func:`matmul` as (canonical name, on real units): a simulator engine ("auto", "numpy",
    "numba", "cuda", "cuda:N"; None is "auto") or the real units through torch ("hardware", "hardware:cpu",
    "hardware:cuda", "hardware:cuda:N").  The old spellings "torch", "torch:..." are refused with the new
    one: in ``blockfma.gemm``, backend="torch" is the simulator's engine on torch, not the hardware."""
    if backend is None:
        return "auto", False
    if not isinstance(backend, str):
        raise ArgumentError("backend", backend, "must be a string: 'auto', 'numpy', 'numba', 'cuda' (the "
                            "simulator's engine) or 'hardware', 'hardware:cuda', 'hardware:cpu' (real units)")
    key = backend.strip().lower()
    if key in SIMULATOR_BACKENDS or (key.startswith("cuda:") and key[5:].isdigit()):
        return key, False
    if _hardware.is_hardware(key):
        _hardware.hardware_spec(backend)  # the spelling only; the device is looked up when it is used
        return key, True
    if key == "torch" or key.startswith("torch:"):
        raise ArgumentError("backend", backend, "is the old name of the real units through torch (and in "
                            "blockfma.gemm backend='torch' means the simulator's engine on torch)",
                            use={"backend": "hardware" + key[len("torch"):]})
    close = difflib.get_close_matches(key, list(SIMULATOR_BACKENDS) + ["hardware"], n=1)
    raise ArgumentError("backend", backend, "must be 'auto', 'numpy', 'numba', 'cuda' or 'cuda:N' (the "
                        "simulator's engine), or 'hardware', 'hardware:cuda[:N]', 'hardware:cpu' (real units "
                        "through torch)", use={"backend": close[0]} if close else None)


def _preset_with(low: str, high: str) -> str | None:
    """A device preset with a (low -> high) unit, for a hint (A100 first: it has fp16, bf16 and tf32)."""
    from ..devices import device as _device, devices as _devices

    for name in ["A100", "V100", *(d.name for d in _devices())]:
        try:
            _device(name).model(low, high)
        except (ValueError, KeyError):
            continue
        return name
    return None


def unit_model(low: str, high: str = "fp32", device: Any = None, model: Model | None = None) -> Model:
    """The unit a method runs on: ``model`` if given (checked to take ``low``), else the device preset's
    Model for (low, high), else for "tf64" the hypothetical TF64 unit.  Bad values are ArgumentErrors
    (a device without the unit names one that has it)."""
    lowf = _formats.get(low)
    if model is not None:
        if not isinstance(model, Model):
            raise ArgumentError("model", Shown(f"<{type(model).__name__}>"),
                                "must be a blockfma.Model (bf.device(NAME).model(low, high), or bf.Model(...))")
        if model.input_format != lowf and not (lowf.name == "tf32" and model.input_format.name == "tf32"):
            raise ArgumentError("model", Shown(f"<Model {model.name or model.input_format.name}>"),
                                f"takes {model.input_format.name} inputs, but this method's words are {lowf.name}",
                                fix=f"pass a model of {lowf.name} inputs")
        return model
    if low == "fp32" and high == "fp64":
        if device is not None:
            raise ArgumentError("device", device, "tf64 runs on the hypothetical TF64 unit (fp32 x fp32 exact, "
                                "fp64 accumulation), which no preset has", fix="leave device out")
        return TF64_UNIT
    from ..devices import Device, device as _device

    name = "V100" if device is None else device
    if not isinstance(name, (str, Device)):
        raise ArgumentError("device", device, "must be a preset name such as 'V100' or 'A100' (blockfma "
                            "devices lists them), or a blockfma Device")
    try:
        dev = _device(name)
    except ValueError as exc:
        raise ArgumentError("device", device, str(exc)) from None
    try:
        return dev.model(low, high)
    except ValueError:
        other = _preset_with(low, high)
        raise ArgumentError("device", dev.name, f"has no {low} -> {high} unit for this method's words",
                            use={"device": other} if other else None,
                            fix="" if other else "pass model= (a blockfma.Model of such a unit)") from None


def _pair(t: Any) -> tuple[int, int]:
    ok = not isinstance(t, (str, bytes)) and hasattr(t, "__len__") and len(t) == 2 and all(
        isinstance(x, numbers.Integral) and not isinstance(x, bool) for x in t)
    if not ok:
        raise TypeError
    return int(t[0]), int(t[1])


def _products(m: Method, order: Any) -> tuple[tuple[int, int], ...]:
    """The word products in the order ``order`` asks (see :func:`matmul`), checked."""
    if order is None:
        return m.products
    if m.outside_groups:
        raise ArgumentError("order", order, f"{m.name} fixes its order (the corrections chained in the unit, "
                            "then added to A1B1 outside)", fix="leave order out")
    if isinstance(order, str):
        key = choice("order", order, ORDERS)
        if key == "alg2.1":
            return tuple(sorted(m.products))
        return tuple(sorted(m.products, key=lambda t: (-(t[0] + t[1]), -t[0])))
    every = tuple((i, j) for i in range(m.p) for j in range(m.p))
    try:
        pairs = [_pair(t) for t in order]
    except TypeError:
        raise ArgumentError("order", order, f"must be 'alg2.1', 'cublas' or a list of 0-based (i, j) pairs "
                            f"of word indices (0 to {m.p - 1})") from None
    items = every if len(pairs) == len(every) else m.products
    try:
        return tuple(permutation("order", pairs, items))
    except ArgumentError:
        also = "" if len(every) == len(m.products) else f", or all {len(every)} pairs {list(every)} (eq. 2.5)"
        raise ArgumentError("order", order, f"must hold each of {m.name}'s word products {list(m.products)} "
                            f"exactly once, in any order{also}") from None


# --- the run ------------------------------------------------------------------------------------------------
@dataclass
class _Run:
    unit: Model | None
    backend: str
    calls: int = 0
    hw: Any = None  # a hardware.TorchUnit for backend="hardware"
    over: np.ndarray | None = None  # entries a unit call or a high-format sum overflowed
    where: dict[str, int] = field(default_factory=dict)  # product label -> entries it overflowed

    @property
    def name(self) -> str:
        return self.hw.name if self.hw is not None else self.unit.name

    def extra(self) -> dict[str, Any]:
        """The hardware unit's device and the seconds spent in its calls (nothing for a simulated unit)."""
        return {} if self.hw is None else {"hardware": self.hw.info(), "unit_seconds": self.hw.seconds}

    def _limit(self) -> tuple[float, bool]:
        """The unit output format's largest value, and whether the unit saturates there (rounds an
        overflow to it instead of to infinity: IEEE overflow under a directed rounding)."""
        if self.hw is not None:
            return (_formats.get("fp64").max if self.hw.fmt == "fp64" else _formats.get("fp32").max), False
        u = self.unit
        directed = u.output_rounding in (RoundingMode.TowardZero, RoundingMode.TowardNegative,
                                         RoundingMode.TowardPositive)
        return u.output_format.max, u.overflow == "ieee" and directed

    def note(self, X: np.ndarray, label: str, unit: bool = True) -> None:
        """Record the entries of X (a unit's output, or a sum in the high format) that overflowed."""
        bad = ~np.isfinite(X)
        if unit:
            top, saturates = self._limit()
            if saturates:
                bad |= np.abs(X) >= top
        if bad.any():
            self.over = bad if self.over is None else self.over | bad
            self.where[label] = self.where.get(label, 0) + int(np.count_nonzero(bad))

    def fl(self, fmt: str, x: np.ndarray) -> np.ndarray:
        """x rounded to ``fmt``, to nearest even (the outside additions' rounding)."""
        return _fl(fmt, x)

    def zeros(self, shape: tuple[int, int]) -> np.ndarray:
        """A float64 zero matrix of ``shape``."""
        return np.zeros(shape)

    def gemm(self, A: np.ndarray, B: np.ndarray, C: np.ndarray | None, label: str = "") -> np.ndarray:
        """One product on the unit, its C chained in (None: from zero); float64 values of the unit's output."""
        from ..engine import gemm

        self.calls += 1
        if self.hw is not None:
            out = self.hw.gemm(A, B, C, check=False)
        elif self.unit == TF64_UNIT:
            out = _fma_chain_fp64(A, B, C)
        else:
            out = np.asarray(gemm(A, B, C, model=self.unit, check=False, backend=self.backend, progress=False),
                             dtype=np.float64)
        self.note(out, label)
        return out


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


def _fabsum(run: Any, A: np.ndarray, B: np.ndarray, block: int, version: str, high: str) -> np.ndarray:
    """Algorithms 4.2/4.3: blocks of ``block`` inner products on the unit, from zero; the blocks added in
    fp32 (v1) or fp64 (v2), rounding to nearest, the v2 sum rounded once to ``high`` at the end."""
    n = A.shape[1]
    inter = "fp32" if version == "fabsum-v1" else "fp64"
    total = run.zeros((A.shape[0], B.shape[1]))
    for start in range(0, n, block):
        T = run.gemm(A[:, start:start + block], B[start:start + block, :], None, f"A1B1 (FABsum block at {start})")
        total = run.fl(inter, total + T)  # one IEEE addition per entry (exact sum of two floats, rounded)
        run.note(total, f"FABsum's {inter} sum", unit=False)
    out = run.fl(high, total)
    run.note(out, f"FABsum's {high} result", unit=False)
    return out


def _label(i: int, j: int) -> str:
    return f"A{i + 1}B{j + 1}"


def split_operands(A: Any, B: Any, m_: Method, rounding: Any, xp: Any = np, stacklevel: int = 3
                   ) -> tuple[list[Any], list[Any]]:
    """The words of A and B (checked float64, numpy or torch with ``xp``) for method ``m_``: an
    ArgumentError naming the first entry beyond the low format's range, one RangeWarning (at the caller's
    caller, ``stacklevel``) for words that lose bits to underflow beyond the split's accuracy."""
    lowf = _formats.get(m_.low)
    check_range(A, lowf, "A", xp)
    check_range(B, lowf, "B", xp)
    mode = check_rounding("split_rounding", rounding)
    Aw = split_words(A, lowf, m_.p, m_.scale, mode, xp)
    Bw = split_words(B, lowf, m_.p, m_.scale, mode, xp)
    losses = [underflow_loss(A, Aw, lowf, m_.p, m_.scale, 1, "A", xp),
              underflow_loss(B, Bw, lowf, m_.p, m_.scale, 0, "B", xp)]
    if any(loss.entries for loss in losses):
        warnings.warn(range_message(losses, lowf, m_.p, m_.name), RangeWarning, stacklevel=stacklevel)
    return Aw, Bw


def combine(run: Any, Aw: list[Any], Bw: list[Any], m_: Method, products: tuple[tuple[int, int], ...], acc: str,
            summation: str | None, block: int | None, say: Callable[[str], None] | None, shape: str = ""
            ) -> tuple[Any, dict[str, Any]]:
    """The word products of ``m_`` in the order ``products`` on ``run``'s unit, added as the method adds
    them (inside the unit's accumulator, or outside in the high format rounding to nearest; Ootomo's groups;
    FABsum's blocks): (C, info).  ``run`` holds the arrays' side (``_Run`` for numpy arrays on the host, the
    tensor run of :mod:`.tensors` on a torch device): ``gemm``, ``fl``, ``zeros``, ``note``, ``name``,
    ``calls``, ``extra``; the words ``Aw``, ``Bw`` are in what its ``gemm`` takes.  The one copy of the
    methods' accumulation rules, run by both paths."""
    high = m_.high
    step = [0]

    def tell(i: int, j: int) -> None:
        step[0] += 1
        if say:
            say(f"{m_.name}: product {step[0]} of {len(products)} ({_label(i, j)}) on {run.name}, {shape} ...")

    def scaled(i: int, j: int, T: Any) -> Any:
        return T * 2.0 ** (-m_.scale * (i + j)) if m_.scale else T  # a power of two above 2**-1022: ldexp's bits

    with np.errstate(over="ignore", invalid="ignore"):
        if m_.outside_groups:  # Ootomo-Yokota: each group summed in the unit, the groups added outside (RN)
            C = run.zeros((Aw[0].shape[0], Bw[0].shape[1]))
            for group in sorted(m_.outside_groups, key=lambda g: -min(sum(products[t]) for t in g)):
                T = None
                for t in group:
                    i, j = products[t]
                    tell(i, j)
                    T = run.gemm(Aw[i], Bw[j], T, _label(i, j))
                i, j = products[group[0]]
                C = run.fl(high, C + scaled(i, j, T))
                run.note(C, f"the {high} sum", unit=False)
            info = {"method": m_.name, "unit": run.name, "calls": run.calls, "products": products, **run.extra()}
        else:
            C = None
            for i, j in products:
                tell(i, j)
                if summation and (i, j) == (0, 0):
                    T = _fabsum(run, Aw[0], Bw[0], block, summation, high)
                    C = T if C is None else run.fl(high, C + T)
                elif acc == "inside":
                    if m_.scale:
                        raise ArgumentError("accumulate", acc, "scaled words cannot be chained in the unit's "
                                            "accumulator", use={"accumulate": "outside"})
                    C = run.gemm(Aw[i], Bw[j], C, _label(i, j))
                    continue
                else:
                    T = scaled(i, j, run.gemm(Aw[i], Bw[j], None, _label(i, j)))
                    C = T if C is None else run.fl(high, C + T)
                run.note(C, f"the {high} sum", unit=False)
            assert C is not None
            info = {"method": m_.name, "unit": run.name, "calls": run.calls, "products": products,
                    "accumulate": acc, "summation": summation, "block": block, **run.extra()}
    return C, info


def _exact_side(A: np.ndarray, B: np.ndarray, I: np.ndarray, J: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(A @ B)[I, J] and (|A||B|)[I, J] in float64 without overflow: rows of A and columns of B scaled by
    powers of two first, the sums (at most the inner dimension) scaled back, to +-inf beyond binary64's
    range; relative error about n 2**-53 of (|A||B|)[I, J]."""
    rows, ri = np.unique(I, return_inverse=True)
    cols, ci = np.unique(J, return_inverse=True)
    Ar, Bc = A[rows], B[:, cols]
    ea = np.frexp(np.abs(Ar).max(axis=1, initial=0.0))[1]
    eb = np.frexp(np.abs(Bc).max(axis=0, initial=0.0))[1]
    with np.errstate(under="ignore"):
        As, Bs = np.ldexp(Ar, -ea[:, None]), np.ldexp(Bc, -eb[None, :])
        S, M = As @ Bs, np.abs(As) @ np.abs(Bs)
    with np.errstate(over="ignore", under="ignore"):
        return np.ldexp(S[ri, ci], ea[ri] + eb[ci]), np.ldexp(M[ri, ci], ea[ri] + eb[ci])


def settle(C: np.ndarray, over: np.ndarray | None, A: np.ndarray, B: np.ndarray, high: str, method: str,
           where: dict[str, int], unit: str, limit: float) -> np.ndarray:
    """Entries that overflowed somewhere: +-inf with the exact product's sign where the exact product lies
    beyond ``high``'s range (rounding to nearest), NaN where it does not (the method cannot compute them on
    this unit); one OverflowWarning naming the method, the products and the fix."""
    bad = ~np.isfinite(C) if over is None else over | ~np.isfinite(C)
    if not bad.any():
        return C
    I, J = np.nonzero(bad)
    exact, size = _exact_side(A, B, I, J)
    with np.errstate(over="ignore"):
        beyond = ~np.isfinite(_fl(high, exact))
    C = C.copy()
    C[I, J] = np.where(beyond, np.copysign(np.inf, exact), np.nan)
    n_inf, n_nan = int(np.count_nonzero(beyond)), int(np.count_nonzero(~beyond))
    i, j = int(I[0]), int(J[0])
    steps = list(where.items())
    what = (f"{steps[0][0]} overflowed in {steps[0][1]} entries" + (f" (and {len(steps) - 1} later steps)"
            if len(steps) > 1 else "")) if steps else "the result overflowed"
    parts = []
    if n_inf:
        parts.append(f"{n_inf} entries whose exact product lies beyond {high}'s range are +-inf with its sign")
    if n_nan:
        top = float(size[~beyond].max())  # the largest (|A||B|)_ij among them: what must fit the unit
        k = max(1, math.ceil(math.log2(top / limit) / 2) + 1) if math.isfinite(top) and top > 0 else 512
        parts.append(f"{n_nan} entries whose exact product lies within it are NaN, lost to the overflow; scale A "
                     f"and B by powers of two so that |A||B| stays inside the unit's output range ({limit:.4g}), "
                     f"e.g. A * 2**-{k} and B * 2**-{k} (exact), and the product by 2**{2 * k}")
    warnings.warn(f"{method} on {unit}: {what}: {'; '.join(parts)} (e.g. C[{i}, {j}], exact {float(exact[0]):.4g})",
                  OverflowWarning, stacklevel=3)
    return C


def working_set(kind: str, m: int, n: int, q: int, words: int) -> float:
    """Bytes a run of ``kind`` holds at its peak, about: the float64 operands and their words (or slices),
    the result and its partial sums, and for Ozaki II the residue products and the CRT's integers."""
    ab, mq = float(m) * n + float(n) * q, float(m) * q
    if kind == "baseline":
        return 8 * 3 * ab + 8 * 3 * mq
    if kind == "ozaki1":
        return 8 * 4 * ab + words * ab + 8 * 6 * mq
    if kind == "ozaki2":
        return 8 * 6 * ab + 8 * words * mq + 160 * mq
    return 8 * (words + 4) * ab + 8 * 8 * mq


def _words(kind: str, m: Method | None, options: dict[str, Any]) -> int:
    """Words (slices, moduli) a run holds, for :func:`working_set` (checked later where they are used)."""
    if m is not None:
        return m.p
    value = options.get("slices") if kind == "ozaki1" else options.get("n_moduli") if kind == "ozaki2" else 1
    if kind == "ozaki2" and options.get("moduli") is not None and hasattr(options["moduli"], "__len__"):
        value = len(options["moduli"])
    return value if isinstance(value, int) and 0 < value < 10**6 else (9 if kind == "ozaki1" else 16)


_PARAMETERS = ("method", "device", "model", "backend", "summation", "block", "order", "accumulate",
               "split_rounding", "p", "low", "progress", "return_info", "accuracy", "explain")
_OZAKI = {"ozaki1": ("slices", "unit", "width"), "ozaki2": ("moduli", "n_moduli", "unit", "scaling")}


def matmul(A: Any, B: Any, *, method: str | None = None, device: Any = None, model: Model | None = None,
           backend: str | None = None, summation: str | None = None, block: int | None = None,
           order: str | Sequence[tuple[int, int]] | None = None, accumulate: str | None = None,
           split_rounding: str | None = None, p: int | None = None, low: str | None = None,
           progress: bool | Callable[[str], None] | None = None, return_info: bool = False,
           accuracy: Any = None, explain: bool = False, **options: Any) -> Any:
    """C ≈ A @ B by ``method`` (see :func:`methods`), its word products on a simulated unit: the device
    preset's Model for the words' format (default V100 for fp16, ``device="A100"`` for bf16/tf32), or
    ``model``.  Returns a float64 array of values of the method's high format (fp32; fp64 for tf64, Ozaki).

    ``backend``: the simulator engine's ("auto", "numpy", "numba", "cuda", "cuda:N"), or "hardware"
    ("hardware:cuda", "hardware:cuda:N", "hardware:cpu") for real units through torch (:mod:`.hardware`:
    fp16/bf16/tf32 words with fp32 output, ``torch._int_mm`` for Ozaki, torch's fp32/fp64 matmul for the
    baselines; no ``device``/``model``; tf64 has no such unit).  The old "torch" spellings are refused with
    the new one.

    ``order``: "alg2.1" (i, then j: A1B1, A1B2, A2B1), "cublas" (A2B1, A1B2, A1B1) or explicit 0-based
    (i, j) pairs: each of the method's word products once (a permutation), or all p**2 of them (eq. 2.5:
    the products the method drops included); ``accumulate``: "outside" or "inside" (see the module
    docstring); ``summation``: "fabsum-v1"/"fabsum-v2" with ``block`` (the leading product in blocks,
    Algorithm 4.4); ``split_rounding``: how words are rounded (tf32: "rne", or "rz" as the unit reads
    fp32); "mmm" takes ``p`` and ``low``.  Ozaki: ``slices``, ``width``, ``unit`` (ozaki1) or ``moduli``,
    ``n_moduli``, ``scaling``, ``unit`` (ozaki2) as keywords.  An argument the method does not use is an
    error, not ignored.  ``return_info=True`` returns (C, info) with the unit, the number of unit calls and
    the products in their order.

    Inputs: any real dtype (ml_dtypes' bfloat16 and fp8 included, integers as their values); non-finite
    entries, incompatible shapes, values beyond the low format and operands whose working set exceeds the
    memory available now are refused (:class:`~blockfma.arguments.ArgumentError`) before any work.

    Range: words that lose bits to underflow beyond the split's accuracy give one :class:`RangeWarning`
    per call (see :func:`.split.split` for the threshold).  A word product that overflows the unit's output
    format (fp16 for an fp16 -> fp16 unit; fp32 sums beyond 3.4e38), or a sum of them the high format,
    gives one :class:`OverflowWarning` naming the products; the entries it touched are +-inf with the
    exact product's sign where that lies beyond the high format's range, NaN elsewhere (the method cannot
    compute them on this unit; scale A and B by powers of two).

    ``progress`` (:mod:`blockfma.progress`: None = on a terminal): one line per word product.  Durations on
    the simulator (numba, two cores): about 1 s per 2e8 to 5e8 multiply-adds per product, so 256 x 1024 x
    256 in double-fp16 (3 products) takes about 0.6 s, 256 x 4096 x 256 about 1.5 s, 1024 x 4096 x 1024
    about 25 s; the numpy engine (no numba) is several times slower.  On real units the host's split
    dominates (seconds at n = 8192).

    torch tensors (CPU or CUDA) in: a float64 tensor on their device out, every step there
    (:mod:`.tensors`; ``backend`` None or "hardware"); NaN and Inf are refused as for arrays.

    ``accuracy`` instead of ``method`` ("fp64": DGEMM's error bound, "fp32": SGEMM's, or a componentwise
    bound in (0, 1)): the fastest method that meets it for this shape and data on ``device`` (a card of
    :data:`.choose.RATES`, default "H100") is chosen by :func:`.choose.choose` and run; ``explain=True``
    prints the :class:`.choose.Choice`, ``return_info=True`` returns it as ``info["choice"]``.  The other
    method parameters are refused with ``accuracy``, as is ``method`` itself.
    """
    if accuracy is not None or method is None or explain is not False:  # the method chosen for an accuracy
        from .choose import matmul_for

        for key in options:  # a misspelt keyword is named as such, not taken for a missing method
            if not any(key in keys for keys in _OZAKI.values()):
                keywords("matmul", {key: options[key]}, _PARAMETERS)

        unused = {k: v for k, v in (("model", model), ("summation", summation), ("block", block), ("order", order),
                                    ("accumulate", accumulate), ("split_rounding", split_rounding), ("p", p),
                                    ("low", low)) if v is not None}
        return matmul_for(A, B, method=method, accuracy=accuracy, explain=explain, device=device, backend=backend,
                          progress=progress, return_info=return_info, unused={**unused, **options})
    name = check_method(method)
    backend_name, on_hw = check_backend(backend)
    return_info = flag("return_info", return_info)
    say = reporter(progress)
    kind = "ozaki" + name[-1] if name in _OZAKI else "baseline" if name in ("fp32", "fp64") else "multiword"
    given = {k: v for k, v in (("device", device), ("model", model), ("summation", summation), ("block", block),
                               ("order", order), ("accumulate", accumulate), ("split_rounding", split_rounding),
                               ("p", p), ("low", low)) if v is not None}
    for key in options:
        if key not in _OZAKI.get(name, ()):
            if any(key in keys for keys in _OZAKI.values()):
                takes = " and ".join(f"method={k!r}" for k, keys in _OZAKI.items() if key in keys)
                raise ArgumentError(key, options[key], f"is an argument of {takes}, not of method={name!r}",
                                    fix="leave it out")
            keywords("matmul", {key: options[key]}, _PARAMETERS + _OZAKI.get(name, ()))
    if kind != "multiword":
        for key, value in given.items():
            raise ArgumentError(key, value, f"method={name!r} does not use {key}= (it is for the multiword "
                                "methods)", fix="leave it out")
    if name != "mmm":
        for key in ("p", "low"):
            if key in given:
                raise ArgumentError(key, given[key], f"is for method='mmm' ({name} fixes its words)",
                                    use={"method": "mmm"})
    if on_hw and ("device" in given or "model" in given):
        key = "device" if "device" in given else "model"
        raise ArgumentError(key, given[key], "picks a simulated unit, and backend='hardware' runs real units",
                            fix="leave it out, or use a simulator backend ('auto')")
    if "device" in given and "model" in given:
        raise ArgumentError("device", device, "and model= both pick the unit", fix="pass one of them")

    # the method and its parameters
    m_: Method | None = None
    if kind == "multiword":
        if name == "mmm":
            if p is None or low is None:
                raise ArgumentError("p" if p is None else "low", p if p is None else low,
                                    "method='mmm' needs p= (the number of words) and low= (their format)",
                                    use={"p": 2, "low": "bf16"})
            p = integer("p", p, least=1, most=MAX_WORDS)
            lowname = check_format("low", low).name
            m_ = Method(f"mmm-{lowname}-p{p}", lowname, p, _triangle(p), "outside", source=FASI)
        else:
            m_ = METHODS[name]
        products = _products(m_, order)
        summation = choice("summation", summation, ("fabsum-v1", "fabsum-v2"), none=True)
        block = integer("block", block, least=1, none=True)
        if summation and block is None:
            raise ArgumentError("block", None, f"summation={summation!r} needs block= (the FABsum block size, "
                                "a positive number of inner products)", use={"block": 64})
        if block is not None and not summation:
            raise ArgumentError("block", block, "is FABsum's block size and needs summation=",
                                use={"summation": "fabsum-v2"})
        if summation and (0, 0) not in products:
            raise ArgumentError("summation", summation, "runs the leading product A1B1, which this order leaves out")
        acc = choice("accumulate", accumulate, ("outside", "inside"), none=True)
        if m_.outside_groups:
            for key, value in (("accumulate", acc), ("summation", summation)):
                if value is not None:
                    raise ArgumentError(key, value, f"{m_.name} fixes how its products are added (the "
                                        "corrections in the unit, then A1B1 outside)", fix="leave it out")
        acc = acc or ("inside" if order == "cublas" else m_.accumulate)
        rounding = m_.split_rounding if split_rounding is None else check_rounding("split_rounding", split_rounding)
        if on_hw and m_.high == "fp64":
            raise ArgumentError("backend", backend, f"{m_.name} needs a unit with exact fp32 x fp32 products "
                                "accumulated in fp64, which no GPU has", use={"backend": "auto"})
        unit = None if on_hw or _tensors.given(A, B) else unit_model(m_.low, m_.high, device, model)

    if _tensors.given(A, B):  # torch tensors: every step on their device (.tensors), a tensor out
        steps = {} if m_ is None else {"method": m_, "products": products, "accumulate": acc,
                                       "summation": summation, "block": block, "rounding": rounding}
        return _tensors.matmul(A, B, name, backend, options, say=say, return_info=return_info, **steps,
                               simulated={k: given[k] for k in ("device", "model") if k in given})

    # the operands: shapes and memory before any conversion
    A_raw, B_raw = _as_array(A, "A"), _as_array(B, "B")
    if A_raw.ndim == 2 and B_raw.ndim == 2:
        (mm, n), q = A_raw.shape, B_raw.shape[1]
        memory("A", A_raw, working_set(kind, mm, n, q, _words(kind, m_, options)), f"{name} on a {mm}x{n} @ {n}x{q} product",
               fix="split the product into blocks of rows of A (matmul(A[i:i+r], B, ...)) or of columns of B")
    A_, B_ = check_input(A_raw, "A"), check_input(B_raw, "B")
    if A_.shape[1] != B_.shape[0]:
        raise ArgumentError("B", B_, f"inner dimensions differ: A is {A_.shape}, B is {B_.shape} (A's "
                            "columns must equal B's rows)")
    if on_hw:
        _hardware.hardware_device(backend_name)  # a clear error for a bad device before any work

    if kind == "baseline":  # the native baselines: binary32 / binary64 matmul (numpy, BLAS; or torch)
        dt = np.float32 if name == "fp32" else np.float64
        if say:
            say(f"{name}: one {name} matmul, {A_.shape[0]}x{A_.shape[1]} @ {B_.shape[0]}x{B_.shape[1]} ...")
        if on_hw:
            hw = _hardware.TorchUnit(name, backend_name)
            with np.errstate(over="ignore", invalid="ignore"):
                C = hw.gemm(A_.astype(dt), B_.astype(dt), check=False)
            info = {"method": name, "unit": hw.name, "calls": 1, "hardware": hw.info(), "unit_seconds": hw.seconds}
        else:
            with np.errstate(over="ignore", invalid="ignore"):
                C = (A_.astype(dt) @ B_.astype(dt)).astype(np.float64)
            info = {"method": name, "unit": f"numpy {dt.__name__} matmul", "calls": 1}
        C = settle(C, None, A_, B_, name, name, {}, info["unit"], _formats.get(name).max)
        return (C, info) if return_info else C
    if kind in ("ozaki1", "ozaki2"):
        from . import ozaki

        hw = None
        if on_hw:
            if options.get("unit") is not None:
                raise ArgumentError("unit", options["unit"], "and backend='hardware' both pick the int8 unit "
                                    "(backend='hardware' uses torch._int_mm)", fix="pass one of them")
            hw = options["unit"] = _hardware.Int8Unit(backend_name)
        if say:
            say(f"{name}: int8 products of {A_.shape[0]}x{A_.shape[1]} @ {B_.shape[0]}x{B_.shape[1]} ...")
        if name == "ozaki1":
            from .bounds import ozaki_slices

            options.setdefault("slices", ozaki_slices(53))  # fp64 accuracy by the slice-count rule
            C = ozaki.ozaki1(A_, B_, **options)
            detail = f"{options['slices']} slices"
        else:
            C = ozaki.ozaki2(A_, B_, **options)
            detail = f"{len(options['moduli']) if options.get('moduli') else options.get('n_moduli') or 16} moduli"
        info = {"method": name, "unit": f"int8 x int8 -> int32 (exact), {detail}", "calls": None}
        if hw is not None:
            info.update(unit=f"{hw.name}, {detail}", calls=hw.calls, hardware=hw.info(), unit_seconds=hw.seconds)
        C = settle(C, None, A_, B_, "fp64", name, {}, info["unit"], _formats.get("fp64").max)
        return (C, info) if return_info else C

    assert m_ is not None
    run = _Run(unit, backend_name, hw=_hardware.TorchUnit(m_.low, backend_name) if on_hw else None)
    Aw, Bw = split_operands(A_, B_, m_, rounding)
    C, info = combine(run, Aw, Bw, m_, products, acc, summation, block, say, shape=f"{A_.shape[0]}x{A_.shape[1]} "
                      f"@ {B_.shape[0]}x{B_.shape[1]}")
    C = settle(C, run.over, A_, B_, m_.high, m_.name, run.where, run.name, run._limit()[0])
    return (C, info) if return_info else C


def _as_array(X: Any, name: str) -> np.ndarray:
    """X as a numpy array without a copy where it is one (its shape is checked before any conversion)."""
    try:
        return np.asarray(X)
    except (TypeError, ValueError) as exc:
        raise ArgumentError(name, Shown(f"<{type(X).__name__}>"),
                            f"is not a rectangular array of numbers ({exc})") from None
