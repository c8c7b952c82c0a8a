"""The accurate-GEMM method chosen for a requested accuracy: ``choose(m, k, n, accuracy=...)``.

:func:`choose` predicts, for every method :func:`blockfma.multiword.matmul` runs, the error and the time of
an (m x k) @ (k x n) product on a device, and returns the fastest method (with its words, slices or moduli)
whose predicted error meets the accuracy asked, as a frozen :class:`Choice` that lists the alternatives and
why each lost (:meth:`Choice.explain`).

**Accuracy.**  ``"fp64"``: a componentwise error (:func:`.metrics.componentwise`, max |C_hat - C| / (|A||B|))
no larger than DGEMM's bound for this k, gamma_k(2**-53) (:func:`.bounds.bound` ("fp64", k));
``"fp32"``: no larger than SGEMM's, gamma_k(2**-24) plus the rounding of the inputs to fp32 (2u + u**2)
unless they are fp32 already; a number in (0, 1): that componentwise bound itself.

**Predicted error.**  Each method's worst-case bound at inner dimension k, from :mod:`.bounds`: the multiword
methods by :func:`.bounds.bound` with the unit's u_high, which is 2**-23 (:func:`.bounds.unit_roundoff`
(fp32, "rz")) where the unit truncates (a simulated unit whose Model rounds its output toward zero or
truncates its alignment, as every NVIDIA preset does; a real NVIDIA GPU), 2**-24 where it rounds to nearest
(the CPU's fp32 matmul); Ozaki I by :func:`.bounds.ozaki_bound` with the slices' width for k
(:func:`.ozaki.slice_width`) and the inputs' exponent spread (:func:`.bounds.exponent_spread` of ``data``;
0 assumed without data, and said); Ozaki II by :func:`ozaki2_bound` (derived here, see there).  A bound is
worst case: measured errors are usually far smaller, and the choice is therefore conservative.

**Predicted cost.**  A roofline per kernel on the device's peak rates (:data:`RATES`, each with its source):
a unit call takes max(2 m k n / rate of its unit, bytes moved / memory bandwidth) plus one launch latency;
the splitting, slicing, residues, CRT and outside additions are elementwise passes costed by the bytes they
move (fused as GEMMul8 fuses them: one pass per operand writes all words, slices or residues).  So small and
skinny products, where launches and memory traffic dominate, go to the native GEMM.  The costs are those of
a device-resident implementation; today's host-side splitting (issue 21) is slower than predicted.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import numbers
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..arguments import ArgumentError, Shown, flag, integer
from . import bounds as _bounds
from . import ozaki as _ozaki

__all__ = ["Rates", "RATES", "Option", "Choice", "choose", "ozaki2_bound", "check_accuracy", "target", "rates_for",
           "matmul_for"]

ACCURACIES = ("fp64", "fp32")
"""The named accuracies :func:`choose` takes (besides a number)."""

_H100 = ("NVIDIA H100 Tensor Core GPU datasheet, SXM5 column, dense (the datasheet's 'with sparsity' figures "
         "halved); the same table at glennklockwood.com/garden/processors/h100")


@dataclass(frozen=True)
class Rates:
    """Peak rates of one card's units (FLOP/s; OP/s for int8, None where the card has no int8 matrix unit),
    its memory bandwidth (bytes/s), the latency of one kernel launch (s), whether its low-precision matrix
    units truncate (NVIDIA: alignment and fp32 output toward zero, shared/DEVICE-FACTS.md), the blockfma
    device preset whose Models simulate its units, and the source of the numbers.  ``launch``: 5 us by
    default, the order of one CUDA kernel launch (no datasheet gives it)."""

    name: str
    fp64: float
    fp32: float
    tf32: float | None
    fp16: float | None
    bf16: float | None
    int8: float | None
    bandwidth: float
    preset: str | None
    truncates: bool = True
    launch: float = 5e-6
    source: str = ""

    def rate(self, unit: str) -> float | None:
        """The peak rate of ``unit`` ("fp64", "fp32", "tf32", "fp16", "bf16", "int8"), None without one."""
        return getattr(self, unit)

    def relative(self, unit: str) -> float | None:
        """``unit``'s rate over the fp64 unit's (DGEMM's)."""
        r = self.rate(unit)
        return None if r is None else r / self.fp64


T = 1e12
RATES: dict[str, Rates] = {r.name: r for r in [
    Rates("H100", 66.9 * T, 66.9 * T, 494.7 * T, 989.4 * T, 989.4 * T, 1978.9 * T, 3.35e12, "H100",
          source=_H100 + "; fp64 is the fp64 tensor cores (DMMA), fp32 the CUDA cores (SGEMM)"),
    Rates("H200", 66.9 * T, 66.9 * T, 494.7 * T, 989.4 * T, 989.4 * T, 1978.9 * T, 4.8e12, "H100",
          source="NVIDIA H200 Tensor Core GPU datasheet, SXM column, dense: the H100 SXM5's compute, 4.8 TB/s HBM3e"),
    Rates("A100", 19.5 * T, 19.5 * T, 156 * T, 312 * T, 312 * T, 624 * T, 2.039e12, "A100",
          source="NVIDIA A100 Tensor Core GPU datasheet, 80GB SXM column, dense; fp64 is the fp64 tensor cores"),
    Rates("V100", 7.8 * T, 15.7 * T, None, 125 * T, None, None, 0.9e12, "V100",
          source="NVIDIA V100 Tensor Core GPU datasheet, SXM2 column: fp16 tensor cores only (no bf16, tf32 or "
          "int8 matrix unit)"),
    Rates("RTX 4090", 1.29 * T, 82.6 * T, 82.6 * T, 165.2 * T, 165.2 * T, 660.6 * T, 1.008e12, "Ada",
          source="NVIDIA Ada Lovelace GPU architecture whitepaper, appendix table (GeForce RTX 4090, dense): "
          "fp16/bf16 and tf32 tensor cores with fp32 accumulation, fp64 at 1/64 of fp32"),
    Rates("cpu", 1e11, 2e11, 2e11, 2e11, 2e11, 2e11, 2e10, None, truncates=False, launch=1e-5,
          source="nominal, no datasheet: a CPU's fp32 SIMD lanes are twice its fp64 ones, and backend="
          "'hardware:cpu' multiplies fp16/bf16/tf32 words and int8 slices by fp32-rate matmuls; measure a CPU "
          "with benchmarks/bench_multiword_gpu.py"),
]}
"""Peak rates per card (keys as :func:`choose` takes them in ``device=``); none of them is in
shared/DEVICE-FACTS.md, which records arithmetic, not speed: each row names its vendor source.  A check of
the roofline against issue 21's H100 measurements (benchmarks/bench_multiword_gpu.py, device time) at
n = 8192: DGEMM 18 ms (predicted 16.4), SGEMM 21 ms (16.4), 3xTF32's three unit calls 8.4 ms (6.7), so
large products reach 78 to 91% of these peaks; at n = 1024 the measured calls take 3.5 to 11 times the
prediction (per-call overheads beyond the 5 us launch), which only strengthens the native fallback."""

_BYTES = {"fp64": 8, "fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "int8": 1}
_SINGLE = ("fp16", "bf16", "tf32")
_MULTIWORD = ("double-fp16", "double-bf16", "triple-bf16", "markidis", "ootomo", "3xtf32", "4xtf32", "bf16x9")
_MAX_OZAKI1_SLICES = 40  # far past fp64: ozaki1's float64 additions floor its bound long before
_U64 = 2.0**-53


# ------------------------------------------------------------------------------------------- the records

@dataclass(frozen=True)
class Option:
    """One method considered: its matmul name and parameters, the predicted error bound (inf where it has
    none here) and time (s; inf where it cannot run), its unit calls, the unit in words, the u_high its
    bound used (None for Ozaki and the native GEMMs), ``reason``: why it was rejected ("" if chosen), and
    ``detail``: the method's words (slices, moduli) and products in words."""

    method: str
    params: tuple[tuple[str, Any], ...]
    bound: float
    cost: float
    calls: int
    unit: str
    u_high: float | None = None
    reason: str = ""
    detail: str = ""

    @property
    def label(self) -> str:
        """The method with its parameters, e.g. "ozaki2 (n_moduli=13, scaling='fast')"."""
        return self.method + (f" ({', '.join(f'{k}={v!r}' for k, v in self.params)})" if self.params else "")

    @property
    def native(self) -> bool:
        """Whether this is the native GEMM ("fp64": DGEMM, "fp32": SGEMM)."""
        return self.method in ("fp64", "fp32")


@dataclass(frozen=True)
class Choice:
    """What :func:`choose` chose: ``option`` (method, parameters, predicted bound and time), the product's
    ``shape`` (m, k, n), the ``accuracy`` asked and the componentwise ``target`` it means for this k, the
    ``device`` (its :class:`Rates`), the ``backend`` the product runs on, the exponent ``spread`` the Ozaki
    bounds used (and whether it came from the data), the ``alternatives`` with why each was rejected, and
    ``notes`` (assumptions)."""

    option: Option
    shape: tuple[int, int, int]
    accuracy: str | float
    target: float
    rates: Rates
    backend: str | None
    spread: int
    spread_from_data: bool
    alternatives: tuple[Option, ...]
    notes: tuple[str, ...] = ()

    @property
    def method(self) -> str:
        """The chosen method's matmul name ("fp64" and "fp32" are the native GEMMs)."""
        return self.option.method

    @property
    def params(self) -> dict[str, Any]:
        """Its parameters for matmul (``slices``; ``n_moduli`` and ``scaling``; none for the others)."""
        return dict(self.option.params)

    @property
    def bound(self) -> float:
        """Its predicted componentwise error bound."""
        return self.option.bound

    @property
    def cost(self) -> float:
        """Its predicted time in seconds on the card."""
        return self.option.cost

    @property
    def native(self) -> bool:
        """Whether it is the native GEMM."""
        return self.option.native

    def arguments(self) -> dict[str, Any]:
        """Keywords for :func:`blockfma.multiword.matmul` that run this choice: the method, its parameters,
        the simulated device for a multiword method, the backend."""
        args: dict[str, Any] = {"method": self.method, **self.params}
        if self.method not in ("fp32", "fp64", "ozaki1", "ozaki2") and not _on_hardware(self.backend):
            args["device"] = self.rates.preset
        if self.backend is not None:
            args["backend"] = self.backend
        return args

    def explain(self) -> str:
        """The choice in words: the target, the chosen method with its predicted error and time, every
        rejected alternative with its numbers and reason."""
        m, k, n = self.shape
        where = "real units (" + self.backend + ")" if _on_hardware(self.backend) else "simulated units"
        lines = [f"accuracy={self.accuracy!r} for {m} x {k} @ {k} x {n} on {self.rates.name} ({where})",
                 f"  target: componentwise error <= {self.target:.3g}" + {
                     "fp64": " (DGEMM's bound gamma_k(2^-53))", "fp32": " (SGEMM's bound)"}.get(self.accuracy, ""),
                 f"  chosen: {self.option.label}: predicted error <= {self.bound:.3g}, {self.option.calls} unit "
                 f"call{'s' if self.option.calls != 1 else ''}, predicted time {_time(self.cost)} on {self.option.unit}",
                 f"    ({self.option.detail})",
                 f"  exponent spread {self.spread} " + ("(from the data)" if self.spread_from_data else
                                                        "(assumed: pass data=(A, B) to count it)"),
                 f"  rates: {self.rates.source}", "  rejected:"]
        width = max([len(o.label) for o in self.alternatives] + [10])
        for o in self.alternatives:
            cost = _time(o.cost) if math.isfinite(o.cost) else "-"
            err = f"{o.bound:.3g}" if math.isfinite(o.bound) else "-"
            lines.append(f"    {o.label:<{width}}  error <= {err:>9}  time {cost:>9}  {o.reason}")
        lines += [f"  note: {t}" for t in self.notes]
        return "\n".join(lines)


def _time(s: float) -> str:
    return f"{s * 1e3:.3g} ms" if s >= 1e-3 else f"{s * 1e6:.3g} us"


def _on_hardware(backend: str | None) -> bool:
    from .hardware import is_hardware

    return is_hardware(backend)


# ------------------------------------------------------------------------------------------- the bounds

def ozaki2_bound(k: int, n_moduli: int | None = None, *, moduli: Sequence[int] | None = None,
                 scaling: str = "fast", exponent_spread: int = 0) -> float:
    """Bound on the componentwise error of :func:`.ozaki.ozaki2` (derived here; no seed states one).

    With P the product of the moduli and 2**L = sqrt(P/2) (a hair less), ozaki2 computes A' = trunc(2**sa_i A),
    B' = trunc(2**sb_j B), the exact A' B' and one rounding to float64.  Per term, |2**sa_i a_il - A'_il| <
    min(1, 2**sa_i |a_il|) and |A'_il| <= 2**sa_i |a_il| (likewise B), so term l of entry (i, j) is off by
    less than (1 / (2**sa_i |a_il|) + 1 / (2**sb_j |b_lj|)) 2**(sa_i + sb_j) |a_il b_lj|, and zero where
    a_il b_lj = 0.  The fast scaling (largest sa_i with 2**sa_i ||a_i||_2 <= 2**L) gives 2**-sa_i <
    2**(1-L) ||a_i||_2 <= 2**(1-L) sqrt(k) max_l |a_il|; the accurate one (6-bit bounds, one unit GEMM)
    2**(2-L) sqrt(k) max_l |a_il|.  With every nonzero |a_il| >= 2**-d_A max_l |a_il| (likewise d_B) and
    2**d_A + 2**d_B <= 2**spread + 1 (spread = d_A + d_B, :func:`.bounds.exponent_spread`):

        componentwise error <= c sqrt(2 k / P) (2**spread + 1) + 2**-53,   c = 2 (fast), 4 (accurate),

    the last term the final rounding (|A' B'| <= 2**(sa_i+sb_j) (|A||B|)_ij).  No underflow assumed."""
    k = integer("k", k, least=1)
    mods = _ozaki.MODULI[:integer("n_moduli", n_moduli, least=1, most=len(_ozaki.MODULI))] if moduli is None \
        else tuple(moduli)
    if scaling not in ("fast", "accurate"):
        raise ArgumentError("scaling", scaling, "must be 'fast' or 'accurate'")
    spread = integer("exponent_spread", exponent_spread, least=0)
    c = 2.0 if scaling == "fast" else 4.0
    P = math.prod(mods)
    r = c * math.sqrt(2.0 * k / P) * (1 + 2.0**-16) * (2.0**spread + 1)
    return r + _U64


# ---------------------------------------------------------------------------------------------- accuracy

def check_accuracy(accuracy: Any) -> str | float:
    """``accuracy`` as "fp64", "fp32" or a float in (0, 1); an ArgumentError naming the value otherwise."""
    if isinstance(accuracy, str):
        key = accuracy.strip().lower()
        if key in ACCURACIES:
            return key
        close = difflib.get_close_matches(key, ACCURACIES, n=1)
        raise ArgumentError("accuracy", accuracy, "must be 'fp64' (DGEMM's error bound), 'fp32' (SGEMM's) or a "
                            "componentwise relative error bound in (0, 1) such as 1e-10",
                            use={"accuracy": close[0]} if close else None)
    if isinstance(accuracy, numbers.Real) and not isinstance(accuracy, bool) and 0 < float(accuracy) < 1:
        return float(accuracy)
    raise ArgumentError("accuracy", accuracy, "must be 'fp64', 'fp32' or a componentwise relative error bound "
                        "in (0, 1) such as 1e-10 (a positive number below 1)", use={"accuracy": "fp64"})


def _in_fp32(input_format: str | None) -> str | None:
    """"fp32" for data that fp32 holds exactly (SGEMM takes them without rounding), else None."""
    return "fp32" if input_format in ("fp32", "fp16", "bf16") else None


def target(accuracy: str | float, k: int, input_format: str | None = None) -> float:
    """The componentwise error bound ``accuracy`` asks for at inner dimension k: DGEMM's bound ("fp64"),
    SGEMM's ("fp32", with the rounding of the inputs to fp32 unless ``input_format`` is one fp32 holds:
    "fp32", "fp16", "bf16"), or the number."""
    acc = check_accuracy(accuracy)
    if acc == "fp64":
        return _bounds.bound("fp64", k)
    if acc == "fp32":
        return _bounds.bound("fp32", k, input_format=_in_fp32(input_format))
    return float(acc)


# -------------------------------------------------------------------------------------------- the device

def rates_for(device: Any = None, backend: str | None = None) -> Rates:
    """The :class:`Rates` ``device`` names (a key of :data:`RATES`, any case, or a Rates): by default the
    GPU torch sees (or "cpu") for a hardware ``backend``, "H100" on the simulator; an ArgumentError naming
    the cards with rates otherwise."""
    from .methods import check_backend

    on_hw = check_backend(backend)[1]
    if isinstance(device, Rates):
        return device
    if device is None and on_hw:
        from .hardware import device_info, hardware_device

        dev = hardware_device(backend or "hardware")
        if dev.type == "cpu":
            return RATES["cpu"]
        gpu = str(device_info(dev).get("name", ""))
        for key in RATES:
            if key != "cpu" and key.lower() in gpu.lower():
                return RATES[key]
        raise ArgumentError("device", None, f"blockfma has no peak rates for torch's GPU {gpu!r} (it has "
                            f"{', '.join(RATES)})", fix="pass device='H100' (or the nearest card), or a "
                            "blockfma.multiword.Rates of this one")
    name = "H100" if device is None else device
    if isinstance(name, str):
        for key, r in RATES.items():
            if key.lower() == name.strip().lower():
                return r
    shown = getattr(name, "name", name)
    close = difflib.get_close_matches(str(shown), list(RATES), n=1)
    raise ArgumentError("device", Shown(repr(shown)), f"has no peak rates here; the cards with rates are "
                        f"{', '.join(RATES)} (or pass a blockfma.multiword.Rates)",
                        use={"device": close[0]} if close else None)


def _unit(rates: Rates, low: str, on_hw: bool) -> tuple[str | None, float | None, str]:
    """(the reason it cannot run or None, the unit's u_high for the bound, the unit in words) for words of
    ``low`` with fp32 accumulation."""
    unit_roundoff = _bounds.unit_roundoff
    if rates.rate(low) is None:
        return f"{rates.name} has no {low} matrix unit", None, ""
    if on_hw:
        rz = rates.truncates
        return None, unit_roundoff("fp32", "rz" if rz else "rn"), f"{rates.name} {low} -> fp32" + (
            " (truncating)" if rz else "")
    from ..formats import RoundingMode
    from ..model import Alignment
    from .methods import unit_model

    if rates.preset is None:
        return f"{rates.name} has no simulated units (no device preset): run it with backend='hardware'", None, ""

    try:
        model = unit_model(low, "fp32", rates.preset)
    except ArgumentError:
        return f"the {rates.preset} preset has no {low} -> fp32 unit", None, ""
    directed = model.output_rounding in (RoundingMode.TowardZero, RoundingMode.TowardNegative,
                                         RoundingMode.TowardPositive)
    rz = directed or (model.fraction_bits is not None and model.alignment in (Alignment.TRUNCATE, Alignment.FLOOR))
    return None, unit_roundoff("fp32", "rz" if rz else "rn"), model.name or model.summary()


# ------------------------------------------------------------------------------------------------- costs

class _Cost:
    """The roofline of one product on ``rates``: unit calls and elementwise passes, in seconds."""

    def __init__(self, rates: Rates, m: int, k: int, n: int) -> None:
        self.r, self.m, self.k, self.n = rates, float(m), float(k), float(n)
        self.ab, self.mn = self.m * self.k + self.k * self.n, self.m * self.n

    def call(self, unit: str, out: int = 4, chained: bool = False) -> float:
        rate = self.r.rate(unit)
        assert rate is not None
        moved = self.ab * _BYTES[unit] + self.mn * (out + (out if chained else 0))
        return max(2 * self.m * self.k * self.n / rate, moved / self.r.bandwidth) + self.r.launch

    def over_ab(self, per: float) -> float:
        """One pass per operand moving ``per`` bytes per element of A and B."""
        return self.ab * per / self.r.bandwidth + 2 * self.r.launch

    def over_mn(self, per: float) -> float:
        """One pass over the result moving ``per`` bytes per element."""
        return self.mn * per / self.r.bandwidth + self.r.launch


def _multiword_cost(c: _Cost, name: str) -> tuple[float, int]:
    from .methods import METHODS

    mth = METHODS[name]
    calls = len(mth.products)
    t = c.over_ab(8 + mth.p * _BYTES[mth.low])  # the words of A and of B, one pass each
    # the sums outside the unit: one per product (Algorithm 2.1), none (all chained in the unit's
    # accumulator), or one per group of products chained in the unit (Ootomo-Yokota)
    sums = len(mth.outside_groups) or (1 if mth.accumulate == "inside" else calls)
    t += sum(c.call(mth.low, 4, chained=i >= sums) for i in range(calls))  # calls past `sums` chain a C in
    t += (sums - 1) * c.over_mn(12)  # C <- fl(C + C_ij): read two fp32, write one
    return t + c.over_mn(12), calls  # fp32 result to float64


def _ozaki1_cost(c: _Cost, s: int, chunks: int) -> tuple[float, int]:
    calls = s * (s + 1) // 2 * chunks
    t = c.over_ab(8 + s) + calls * (c.call("int8", 4) + c.over_mn(4 + 8 + 8)) + s * c.over_mn(24)
    return t, calls


def _ozaki2_cost(c: _Cost, N: int, chunks: int, scaling: str) -> tuple[float, int]:
    calls = N * chunks
    t = c.over_ab(8) + c.over_ab(8 + N)  # the norms (or 6-bit bounds), then every residue in one pass
    if scaling == "accurate":
        t += c.over_ab(9) + chunks * c.call("int8", 4) + c.over_mn(4)
        calls += chunks
    t += N * chunks * c.call("int8", 4) + c.over_mn(4 * N + 8)  # the products, then the CRT
    return t, calls


# ------------------------------------------------------------------------------------------------ choose

def _range_reason(A: Any, B: Any, fmt: str, k: int) -> str:
    """Why words of ``fmt`` (with fp32 sums) cannot hold this data ("" if they can, or without data): an entry
    beyond the format's range (:func:`.split.check_range`'s message), or products that may overflow fp32."""
    from .. import formats
    from .split import check_range

    if A is None or B is None:
        return ""
    torch = sys.modules.get("torch")
    xp = torch if torch is not None and isinstance(A, torch.Tensor) else np  # tensors looked at on their device
    for X, name in ((A, "A"), (B, "B")):
        try:
            check_range(X, formats.get(fmt), name, xp)
        except ArgumentError as exc:
            return exc.problem.split(":")[0]

    def biggest(X: Any) -> float:
        return 0.0 if 0 in tuple(X.shape) else float(abs(X).max())

    top = biggest(A) * biggest(B) * k
    return f"sums of products may reach {top:.3g}, beyond fp32's range" if top > formats.get("fp32").max else ""


def _data_format(X: Any) -> str | None:
    dt = getattr(X, "dtype", None)
    name = str(dt).removeprefix("torch.") if dt is not None else ""
    return {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}.get(name)


def choose(m: int, k: int, n: int, *, accuracy: Any, device: Any = None, backend: str | None = None,
           data: tuple[Any, Any] | None = None, exponent_spread: int | None = None) -> Choice:
    """The fastest method for an (m x k) @ (k x n) product whose predicted componentwise error meets
    ``accuracy`` ("fp64", "fp32" or a number in (0, 1); see the module docstring) on ``device``.

    ``device``: a card of :data:`RATES` (default "H100"; with ``backend="hardware"``, the GPU torch sees,
    or "cpu") or a :class:`Rates`; the simulated units are its preset's Models.  ``backend``: as
    :func:`blockfma.multiword.matmul` takes it (the simulator's engine, or "hardware" for real units).
    ``data=(A, B)``: the operands (numpy arrays or CPU tensors), whose exponent spread the Ozaki bounds use
    and whose dtype (fp32 data: SGEMM takes them as they are) the targets use; ``exponent_spread``: that
    spread where the data are not at hand (default 0, an assumption the Choice states).  An accuracy that
    no method reaches is an ArgumentError naming the most accurate one."""
    from .methods import METHODS, check_backend

    m, k, n = (integer(name, v, least=1) for name, v in (("m", m), ("k", k), ("n", n)))
    acc = check_accuracy(accuracy)
    on_hw = check_backend(backend)[1]
    rates = rates_for(device, backend)
    notes: list[str] = []
    if data is not None and exponent_spread is not None:
        raise ArgumentError("exponent_spread", exponent_spread, "and data= both give the spread", fix="pass one")
    fmt_in = None
    if data is not None:
        if not (isinstance(data, (tuple, list)) and len(data) == 2):
            raise ArgumentError("data", Shown(f"<{type(data).__name__}>"), "must be the pair (A, B)")
        shapes = tuple(tuple(np.shape(X)) for X in data)
        if shapes != ((m, k), (k, n)):
            raise ArgumentError("data", Shown(f"<shapes {shapes}>"), f"must be A of shape ({m}, {k}) and B of "
                                f"shape ({k}, {n}) for m={m}, k={k}, n={n}")
        from . import tensors
        from .split import check_operands

        # the operands checked where they are: tensors on their device (no copy to the host)
        A, B = tensors.check_tensors(*data) if tensors.given(*data) else check_operands(*data)
        spread, from_data = _bounds.exponent_spread(A, B), True
        fmts = {_data_format(X) for X in data}
        fmt_in = fmts.pop() if len(fmts) == 1 else None
    else:
        A = B = None
        spread, from_data = integer("exponent_spread", 0 if exponent_spread is None else exponent_spread,
                                    least=0), exponent_spread is not None
    goal = target(acc, k, fmt_in)
    cost = _Cost(rates, m, k, n)
    options: list[Option] = []

    def add(method: str, params: dict[str, Any], bound: float, seconds: float, calls: int, unit: str,
            u: float | None = None, reason: str = "", detail: str = "") -> None:
        if not detail and method in METHODS:
            detail = METHODS[method].description
        options.append(Option(method, tuple(params.items()), bound, seconds, calls, unit, u, reason, detail))

    # the native GEMMs
    add("fp64", {}, _bounds.bound("fp64", k), cost.call("fp64", 8), 1, f"{rates.name} fp64 GEMM (DGEMM)",
        detail="the native fp64 GEMM")
    why = _range_reason(A, B, "fp32", k)
    add("fp32", {}, math.inf if why else _bounds.bound("fp32", k, input_format=_in_fp32(fmt_in)),
        math.inf if why else (0.0 if fmt_in == "fp32" else cost.over_ab(12)) + cost.call("fp32", 4) + cost.over_mn(12),
        1, f"{rates.name} fp32 GEMM (SGEMM)", reason=why,
        detail="the native fp32 GEMM, inputs rounded to fp32, the result back")
    # one word, and the multiword methods
    for name in _SINGLE + _MULTIWORD:
        low = METHODS[name].low
        why, u, unit = _unit(rates, low, on_hw)
        why = why or _range_reason(A, B, low, k)
        if why:
            add(name, {}, math.inf, math.inf, len(METHODS[name].products), "", reason=why)
            continue
        fmt = fmt_in if fmt_in in ("fp32", low) else None
        t, calls = _multiword_cost(cost, name)
        add(name, {}, _bounds.bound(name, k, u_high=u, input_format=fmt), t, calls, unit, u)
    add("tf64", {}, math.inf, math.inf, 3, "", reason="no device has the TF64 unit (fp32 x fp32 exact, fp64 "
        "accumulation) it needs")
    # Ozaki I and II on the int8 unit
    int8 = f"{rates.name} int8 -> int32 (exact)"
    if rates.int8 is None:
        for name in ("ozaki1", "ozaki2"):
            add(name, {}, math.inf, math.inf, 0, "", reason=f"{rates.name} has no int8 matrix unit")
    else:
        try:
            w = _ozaki.slice_width(k)
        except ValueError as exc:
            add("ozaki1", {}, math.inf, math.inf, 0, "", reason=str(exc))
        else:
            chunks = -(-k // _bounds.ozaki_max_inner(w))
            best = None
            for s in range(1, _MAX_OZAKI1_SLICES + 1):
                b = _bounds.ozaki_bound(k, s, slice_bits=w, exponent_spread=spread)
                best = (s, b) if best is None or b < best[1] else best
                if b <= goal:
                    break
            s, b = best
            t, calls = _ozaki1_cost(cost, s, chunks)
            add("ozaki1", {"slices": s}, b, t, calls, int8, detail=f"{s} int8 slices of {w} bits per row of A and "
                f"column of B, the {s * (s + 1) // 2} slice products with s + t <= {s + 1}, added in float64")
        chunks = -(-k // (2**31 // (128 * 128)))  # ozaki2 sums k in chunks of 131071 residue products in int32
        for scaling in ("fast", "accurate"):
            for N in range(1, len(_ozaki.MODULI) + 1):
                b = ozaki2_bound(k, N, scaling=scaling, exponent_spread=spread)
                if b <= goal:
                    break
            t, calls = _ozaki2_cost(cost, N, chunks, scaling)
            add("ozaki2", {"n_moduli": N, "scaling": scaling}, b, t, calls, int8, detail=f"{N} moduli (the first "
                f"{N} of ozaki.MODULI, P ~ 2^{math.log2(math.prod(_ozaki.MODULI[:N])):.0f}), {scaling} scaling, one "
                "int8 product per modulus, the CRT")

    feasible = [o for o in options if o.bound <= goal and math.isfinite(o.cost)]
    if not feasible:
        best_o = min(options, key=lambda o: o.bound)
        raise ArgumentError("accuracy", accuracy, f"no method reaches a componentwise error of {goal:.3g} at k={k}: "
                            f"the most accurate is {best_o.label} with a bound of {best_o.bound:.3g}",
                            use={"accuracy": float(f"{best_o.bound * 1.06:.2g}")})  # 2 digits, >= the bound
    chosen = min(feasible, key=lambda o: o.cost)  # the first of equal costs: the native GEMMs come first
    rest = []
    for o in options:
        if o is chosen:
            continue
        if o.reason:
            rest.append(o)
        elif o.bound > goal:
            rest.append(dataclasses.replace(o, reason=f"bound {o.bound / goal:.3g}x the target"))
        else:
            rest.append(dataclasses.replace(o, reason=f"meets it, {o.cost / chosen.cost:.3g}x the chosen's time"))
    if not from_data and chosen.method in ("ozaki1", "ozaki2"):
        notes.append("Ozaki bounds grow with the exponent spread of A's rows and B's columns; this one assumes "
                     f"{spread}: run it with data=(A, B) (mw.matmul(A, B, accuracy=...) does)")
    if isinstance(acc, str) and not chosen.native:
        typical = math.sqrt(k) * (_U64 if acc == "fp64" else 2.0**-24)
        if chosen.bound > 10 * typical:
            notes.append(f"the target is {'DGEMM' if acc == 'fp64' else 'SGEMM'}'s worst-case bound, which grows "
                         f"like k u; that GEMM usually errs about sqrt(k) u = {typical:.2g} or less, and the chosen "
                         f"method's bound allows {chosen.bound / typical:.3g}x that: pass accuracy={typical:.2g} "
                         "for the typical error as the goal")
    if any(o.u_high is not None and o.u_high > 2.0**-24 for o in options):
        notes.append(f"{rates.name}'s low-precision units truncate: their bounds use u_high = 2^-23 (fp32 "
                     "rounding toward zero), not 2^-24")
    return Choice(chosen, (m, k, n), acc, goal, rates, backend, spread, from_data, tuple(rest), tuple(notes))


# ------------------------------------------------------------------------------------- matmul(accuracy=)

def matmul_for(A: Any, B: Any, *, method: Any, accuracy: Any, explain: Any, device: Any, backend: Any,
               progress: Any, return_info: Any, unused: dict[str, Any]) -> Any:
    """:func:`blockfma.multiword.matmul` with ``accuracy=``: the checks, :func:`choose` on the operands,
    then the chosen method.  (matmul's own branch; see its docstring.)"""
    from .methods import matmul

    explain = flag("explain", explain)
    if method is not None and accuracy is not None:
        raise ArgumentError("accuracy", accuracy, f"and method={method!r} both pick the method",
                            fix="pass method= to run that method, or accuracy= to have one chosen")
    if accuracy is None:
        if explain:
            raise ArgumentError("explain", explain, "shows the method chosen for accuracy=, and none was asked",
                                use={"accuracy": "fp64"})
        raise ArgumentError("method", None, "unknown method: name one (blockfma.multiword.methods() lists them), "
                            "or pass accuracy='fp64', 'fp32' or a number to have one chosen", use={"accuracy": "fp64"})
    check_accuracy(accuracy)
    for key, value in unused.items():
        raise ArgumentError(key, value, "sets a parameter of one method, and with accuracy= the method and its "
                            "parameters are chosen", fix="leave it out, or pass method= instead of accuracy=")
    from .split import check_operands

    from . import tensors

    A_, B_ = tensors.check_tensors(A, B) if tensors.given(A, B) else check_operands(A, B)
    if 0 in A_.shape + B_.shape:  # an empty product: exact zeros, nothing to choose
        if explain:
            print(f"accuracy={accuracy!r}: an empty product ({A_.shape} @ {B_.shape}): zeros, by the native fp64 GEMM")
        C, info = matmul(A, B, method="fp64", backend=backend, progress=progress, return_info=True)
        info["choice"] = None
        return (C, info) if flag("return_info", return_info) else C
    choice = choose(A_.shape[0], A_.shape[1], B_.shape[1], accuracy=accuracy, device=device, backend=backend,
                    data=(A, B))
    if explain:
        print(choice.explain())
    C, info = matmul(A, B, **choice.arguments(), progress=progress, return_info=True)
    info["choice"] = choice
    return (C, info) if flag("return_info", return_info) else C
