"""The steps every word method's run is made of, on numpy arrays (and, through :mod:`.tensors`, on torch
tensors): the unit (:func:`unit_model`), the split into words (:func:`split_operands`), the word products and
their additions (:func:`combine`: the one copy of the methods' accumulation rules: "outside", "inside",
the order, FABsum; docs/multiword.md, "Methods"), and the settlement of entries that overflowed
(:func:`settle`).
"""

from __future__ import annotations

import difflib
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import formats as _formats
from ..arguments import ArgumentError, Shown
from ..formats import RoundingMode
from ..model import Model
from . import hardware as _hardware
from .registry import TF64_UNIT, Method
from .split import (RangeWarning, check_range, check_rounding, range_message, split_words, summary,
                    underflow_loss)

__all__ = ["OverflowWarning", "SIMULATOR_BACKENDS", "check_backend", "unit_model", "split_operands", "combine",
           "settle", "working_set", "Run", "WordPlan"]

SIMULATOR_BACKENDS = ("auto", "numpy", "numba", "cuda")
"""The simulator engine's backends ``matmul`` takes (and "cuda:N"); "hardware[:DEVICE]" runs real units."""


class OverflowWarning(RuntimeWarning):
    """A word product (or a sum of them) overflowed the unit's output or the method's high format: the
    entries it touched are NaN where the method cannot compute them, or +-inf with the exact product's sign
    where the product itself lies beyond the high format's range (see :func:`matmul`)."""


def check_backend(backend: Any) -> tuple[str, bool]:
    """``backend`` of :func:`matmul` as (canonical name, on real units): a simulator engine ("auto", "numpy",
    "numba", "cuda", "cuda:N"; None is "auto") or the real units through torch ("hardware", "hardware:cpu",
    "hardware:cuda", "hardware:cuda:N").  The old spellings "torch", "torch:..." are refused with the new one."""
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


# --- the run ------------------------------------------------------------------------------------------------
def _fl(fmt: str, x: np.ndarray) -> np.ndarray:
    return _formats.round(fmt, x, RoundingMode.TiesToEven)


@dataclass(frozen=True)
class WordPlan:
    """A word method's run, its arguments checked: the method, its products in the order run, where they
    are added, FABsum's summation and block, the split's rounding, the simulated unit (None: real units)."""

    method: Method
    products: tuple[tuple[int, int], ...]
    accumulate: str
    summation: str | None
    block: int | None
    rounding: Any
    unit: Model | None


@dataclass
class Run:
    """The arrays' side of :func:`combine`: the unit's products on the host (a simulated Model through
    ``blockfma.gemm``, the TF64 unit, or a real unit through torch), the outside additions, and the overflow
    bookkeeping."""

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

    def limit(self) -> tuple[float, bool]:
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
            top, saturates = self.limit()
            if saturates:
                bad |= np.abs(X) >= top
        if bad.any():
            self.over = bad if self.over is None else self.over | bad
            self.where[label] = self.where.get(label, 0) + int(np.count_nonzero(bad))

    fl = staticmethod(_fl)  # x rounded to fmt, to nearest even (the outside additions' rounding)
    zeros = staticmethod(np.zeros)  # a float64 zero matrix of the shape

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
    seen = summary(xp, A, B)  # one look at both (on a device: one synchronisation), for the checks below
    check_range(A, lowf, "A", xp, seen[0][0])
    check_range(B, lowf, "B", xp, seen[1][0])
    mode = check_rounding("split_rounding", rounding)
    Aw = split_words(A, lowf, m_.p, m_.scale, mode, xp, seen[0][2])
    Bw = split_words(B, lowf, m_.p, m_.scale, mode, xp, seen[1][2])
    losses = [underflow_loss(A, Aw, lowf, m_.p, m_.scale, 1, "A", xp, seen[0]),
              underflow_loss(B, Bw, lowf, m_.p, m_.scale, 0, "B", xp, seen[1])]
    if any(loss.entries for loss in losses):
        warnings.warn(range_message(losses, lowf, m_.p, m_.name), RangeWarning, stacklevel=stacklevel)
    return Aw, Bw


def combine(run: Any, Aw: list[Any], Bw: list[Any], m_: Method, products: tuple[tuple[int, int], ...], acc: str,
            summation: str | None, block: int | None, say: Callable[[str], None] | None, shape: str = ""
            ) -> tuple[Any, dict[str, Any]]:
    """The word products of ``m_`` in the order ``products`` on ``run``'s unit, added as the method adds
    them (inside the unit's accumulator, or outside in the high format rounding to nearest; Ootomo's groups;
    FABsum's blocks): (C, info).  ``run`` holds the arrays' side (``Run`` for numpy arrays on the host, the
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
            for group in m_.groups(products):
                T = None
                for i, j in group:
                    tell(i, j)
                    T = run.gemm(Aw[i], Bw[j], T, _label(i, j))
                i, j = group[0]
                C = run.fl(high, C + scaled(i, j, T))
                run.note(C, f"the {high} sum", unit=False)
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
    more = {} if m_.outside_groups else {"accumulate": acc, "summation": summation, "block": block}
    return C, {"method": m_.name, "unit": run.name, "calls": run.calls, "products": products, **more, **run.extra()}


def _exact_side(A: np.ndarray, B: np.ndarray, ii: np.ndarray, jj: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(A @ B)[ii, jj] and (|A||B|)[ii, jj] in float64 without overflow: rows of A and columns of B scaled by
    powers of two first, the sums (at most the inner dimension) scaled back, to +-inf beyond binary64's
    range; relative error about n 2**-53 of (|A||B|)[ii, jj]."""
    rows, ri = np.unique(ii, return_inverse=True)
    cols, ci = np.unique(jj, return_inverse=True)
    Ar, Bc = A[rows], B[:, cols]
    ea = np.frexp(np.abs(Ar).max(axis=1, initial=0.0))[1]
    eb = np.frexp(np.abs(Bc).max(axis=0, initial=0.0))[1]
    with np.errstate(under="ignore"):
        As, Bs = np.ldexp(Ar, -ea[:, None]), np.ldexp(Bc, -eb[None, :])
        S, M = As @ Bs, np.abs(As) @ np.abs(Bs)
    with np.errstate(over="ignore", under="ignore"):
        return np.ldexp(S[ri, ci], ea[ri] + eb[ci]), np.ldexp(M[ri, ci], ea[ri] + eb[ci])


def settle(C: np.ndarray, over: np.ndarray | None, A: np.ndarray, B: np.ndarray, high: str, method: str,
           where: dict[str, int], unit: str, limit: float, stacklevel: int = 3) -> np.ndarray:
    """Entries that overflowed somewhere: +-inf with the exact product's sign where the exact product lies
    beyond ``high``'s range (rounding to nearest), NaN where it does not (the method cannot compute them on
    this unit); one OverflowWarning naming the method, the products and the fix."""
    bad = ~np.isfinite(C) if over is None else over | ~np.isfinite(C)
    if not bad.any():
        return C
    ii, jj = np.nonzero(bad)
    exact, size = _exact_side(A, B, ii, jj)
    with np.errstate(over="ignore"):
        beyond = ~np.isfinite(_fl(high, exact))
    C = C.copy()
    C[ii, jj] = np.where(beyond, np.copysign(np.inf, exact), np.nan)
    n_inf, n_nan = int(np.count_nonzero(beyond)), int(np.count_nonzero(~beyond))
    i, j = int(ii[0]), int(jj[0])
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
                  OverflowWarning, stacklevel=stacklevel)
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
