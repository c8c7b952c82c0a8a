"""The accurate-GEMM method chosen for a requested accuracy: ``choose(m, k, n, accuracy=...)``.

:func:`choose` predicts, for every method :func:`blockfma.multiword.matmul` runs, the error and the time of
an (m x k) @ (k x n) product on a device, and returns the fastest method (with its words, slices or moduli)
whose predicted error meets the accuracy asked, as a frozen :class:`Choice` that lists the alternatives and
why each lost (:meth:`Choice.explain`).

**Predicted error.**  Each method's worst-case bound at inner dimension k (:mod:`.bounds`), with the unit's
u_high: 2**-23 where the unit truncates (a simulated unit whose Model rounds toward zero or truncates its
alignment, as every NVIDIA preset does; a real NVIDIA GPU), 2**-24 where it rounds to nearest; Ozaki's per
entry against |A||B| from the data (:func:`.bounds.ozaki_ratios`: one int8 product and row and column norms,
computed only where an Ozaki method could win; its cost is counted in theirs), or without data from an
exponent spread (0 assumed, and said).  Worst case, so the choice is conservative.

**Predicted cost.**  A roofline per kernel on the device's peak rates (:data:`RATES`, each with its source):
a unit call takes max(2 m k n / rate of its unit, bytes moved / memory bandwidth) plus one launch latency;
the splitting, slicing, residues, CRT and outside additions are elementwise passes costed by the bytes they
move (fused as GEMMul8 fuses them).  The costs are a device-resident implementation's (against measured
times: docs/multiword.md).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import math
import numbers
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import formats as _formats
from ..arguments import ArgumentError, Shown, integer
from ..formats import RoundingMode
from ..model import Alignment
from . import bounds as _bounds, ozaki as _ozaki, tensors as _tensors
from .bounds import ozaki2_bound
from .hardware import device_info, hardware_device, is_hardware
from .registry import METHODS, REGISTRY, Method, Ozaki
from .split import check_operands, check_range
from .steps import check_backend, unit_model

__all__ = ["Rates", "RATES", "Option", "Choice", "choose", "ozaki2_bound", "check_accuracy", "target", "rates_for"]

ACCURACIES = ("fp64", "fp32")
"""The named accuracies :func:`choose` takes (besides a number)."""

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


def _load_rates(path: Path) -> dict[str, Rates]:
    """The cards of ``rates.json``: TFLOP/s (TOP/s for int8) there, FLOP/s here."""
    def peak(value: float | None) -> float | None:
        return None if value is None else value * 1e12

    cards = json.loads(path.read_text())["cards"]
    units = ("fp64", "fp32", "tf32", "fp16", "bf16", "int8")
    return {c["name"]: Rates(c["name"], *(peak(c[u]) for u in units), c["bandwidth"], c["preset"],  # type: ignore[arg-type]
                             **{k: c[k] for k in ("truncates", "launch", "source") if k in c}) for c in cards}


RATES: dict[str, Rates] = _load_rates(Path(__file__).with_name("rates.json"))
"""Peak rates per card (keys as :func:`choose` takes them in ``device=``), from ``rates.json`` beside this
module, each row with its vendor source (against measured times: docs/multiword.md)."""

_BYTES = {"fp64": 8, "fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "int8": 1}
_MAX_OZAKI1_SLICES = 40  # far past fp64: ozaki1's float64 additions floor its bound long before
_U64 = 2.0**-53  # binary64 unit roundoff


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
        return REGISTRY[self.method].kind == "native"


@dataclass(frozen=True)
class Choice:
    """What :func:`choose` chose: ``option`` (method, parameters, predicted bound and time), the product's
    ``shape`` (m, k, n), the ``accuracy`` asked and the componentwise ``target`` it means for this k, the
    ``device`` (its :class:`Rates`), the ``backend`` the product runs on, the data's ``ratios``
    (:func:`.bounds.ozaki_ratios`, None where not computed), ``basis``: the Ozaki options' bound in words,
    the ``alternatives`` with why each was rejected, and ``notes`` (assumptions)."""

    option: Option
    shape: tuple[int, int, int]
    accuracy: str | float
    target: float
    rates: Rates
    backend: str | None
    ratios: _bounds.OzakiRatios | None
    basis: str
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
        if REGISTRY[self.method].kind == "words" and not is_hardware(self.backend):
            args["device"] = self.rates.preset
        if self.backend is not None:
            args["backend"] = self.backend
        return args

    def explain(self) -> str:
        """The choice in words: the target, the chosen method with its predicted error and time, every
        rejected alternative with its numbers and reason."""
        m, k, n = self.shape
        where = "real units (" + self.backend + ")" if is_hardware(self.backend) else "simulated units"
        lines = [f"accuracy={self.accuracy!r} for {m} x {k} @ {k} x {n} on {self.rates.name} ({where})",
                 f"  target: componentwise error <= {self.target:.3g}" + {
                     "fp64": " (DGEMM's bound gamma_k(2^-53))", "fp32": " (SGEMM's bound)"}.get(self.accuracy, ""),
                 f"  chosen: {self.option.label}: predicted error <= {self.bound:.3g}, {self.option.calls} unit "
                 f"call{'s' if self.option.calls != 1 else ''}, predicted time {_time(self.cost)} on "
                 f"{self.option.unit}",
                 f"    ({self.option.detail})",
                 f"  Ozaki bounds: {self.basis}",
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

    on_hw = check_backend(backend)[1]
    if isinstance(device, Rates):
        return device
    if device is None and on_hw:
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


def _multiword_cost(c: _Cost, mth: Method) -> tuple[float, int]:
    calls = len(mth.products)
    t = c.over_ab(8 + mth.p * _BYTES[mth.low])  # the words of A and of B, one pass each
    # the sums outside the unit: one per product (Algorithm 2.1), none (all chained in the unit's
    # accumulator), or one per group of products chained in the unit (Ootomo-Yokota)
    sums = len(mth.outside_groups) or (1 if mth.accumulate == "inside" else calls)
    t += sum(c.call(mth.low, 4, chained=i >= sums) for i in range(calls))  # calls past `sums` chain a C in
    t += (sums - 1) * c.over_mn(12)  # C <- fl(C + C_ij): read two fp32, write one
    return t + c.over_mn(12), calls  # fp32 result to float64


def _ozaki1_cost(c: _Cost, s: int, per: int) -> tuple[float, int]:
    """Fused (.ozaki_fused): a slicing kernel per operand (two reads), the s (s + 1) / 2 pair products in one call
    per ``per`` pairs of a level (side by side along k), one kernel over the calls' int32 sums."""
    calls = sum(-(-g // per) for g in range(1, s + 1))
    return c.over_ab(16 + s) + s * (s + 1) // 2 * c.call("int8", 0) + c.over_mn(8 * calls + 8), calls


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
    if A is None or B is None:
        return ""
    torch = sys.modules.get("torch")
    xp = torch if torch is not None and isinstance(A, torch.Tensor) else np  # tensors looked at on their device
    for X, name in ((A, "A"), (B, "B")):
        try:
            check_range(X, _formats.get(fmt), name, xp)
        except ArgumentError as exc:
            return exc.problem.split(":")[0]

    def biggest(X: Any) -> float:
        return 0.0 if 0 in tuple(X.shape) else float(abs(X).max())

    top = biggest(A) * biggest(B) * k
    return f"sums of products may reach {top:.3g}, beyond fp32's range" if top > _formats.get("fp32").max else ""


def _data_format(X: Any) -> str | None:
    dt = getattr(X, "dtype", None)
    name = str(dt).removeprefix("torch.") if dt is not None else ""
    return {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}.get(name)


@dataclass(frozen=True)
class _Problem:
    """What every method's option is worked out from: the shape, the card, real units or simulated, the
    checked operands (None without data) and their common input format, the exponent spread (without data),
    the target, the cost of the fastest other method meeting it (``rival``) and the data's Ozaki ratios."""

    m: int
    k: int
    n: int
    rates: Rates
    on_hw: bool
    A: Any
    B: Any
    fmt_in: str | None
    spread: int
    goal: float
    rival: float = math.inf

    @property
    def cost(self) -> _Cost:
        return _Cost(self.rates, self.m, self.k, self.n)

    @property
    def checked(self) -> float:  # the cost of ozaki_ratios: a pass over A and B, one int8 product, one over C
        return 0.0 if self.A is None else self.cost.over_ab(9) + self.cost.call("int8", 4) + self.cost.over_mn(4)

    @functools.cached_property
    def ratios(self) -> _bounds.OzakiRatios | None:
        return None if self.A is None else _bounds.ozaki_ratios(self.A, self.B)


def _option(method: str, bound: float, seconds: float, calls: int, unit: str, u: float | None = None,
            reason: str = "", detail: str = "", **params: Any) -> Option:
    detail = detail or (METHODS[method].description if method in METHODS else "")
    return Option(method, tuple(params.items()), bound, seconds, calls, unit, u, reason, detail)


def _native_options(e: Any, q: _Problem) -> list[Option]:
    """DGEMM, or SGEMM with the inputs rounded to fp32 (none where the data would overflow fp32)."""
    unit, cost = f"{q.rates.name} {e.name} GEMM ({'D' if e.name == 'fp64' else 'S'}GEMM)", q.cost
    if e.name == "fp64":
        return [_option("fp64", _bounds.bound("fp64", q.k), cost.call("fp64", 8), 1, unit, detail=e.description)]
    why = _range_reason(q.A, q.B, "fp32", q.k)
    if why:
        return [_option("fp32", math.inf, math.inf, 1, unit, reason=why, detail=e.description)]
    seconds = (0.0 if q.fmt_in == "fp32" else cost.over_ab(12)) + cost.call("fp32", 4) + cost.over_mn(12)
    return [_option("fp32", _bounds.bound("fp32", q.k, input_format=_in_fp32(q.fmt_in)), seconds, 1, unit,
                    detail=e.description)]


def _words_options(e: Method, q: _Problem) -> list[Option]:
    """A word method on the card's unit for its words (none where the card lacks it or the data overflow)."""
    if e.high != "fp32":
        return [_option(e.name, math.inf, math.inf, e.n_products, "", reason="no device has the TF64 unit (fp32 "
                        "x fp32 exact, fp64 accumulation) it needs")]
    why, u, unit = _unit(q.rates, e.low, q.on_hw)
    why = why or _range_reason(q.A, q.B, e.low, q.k)
    if why:
        return [_option(e.name, math.inf, math.inf, e.n_products, "", reason=why)]
    fmt = q.fmt_in if q.fmt_in in ("fp32", e.low) else None
    t, calls = _multiword_cost(q.cost, e)
    return [_option(e.name, _bounds.bound(e.name, q.k, u_high=u, input_format=fmt), t, calls, unit, u)]


def _ozaki1_options(e: Any, q: _Problem) -> list[Option]:
    """Ozaki I with the fewest slices whose bound meets the target (the most accurate count if none does)."""
    try:
        w = _ozaki.slice_width(q.k)
    except ValueError as exc:
        return [_option("ozaki1", math.inf, math.inf, 0, "", reason=str(exc))]
    per = max(1, _bounds.ozaki_max_inner(w) // q.k)  # pairs of slices to an int32 sum
    best = None
    for s in range(1, _MAX_OZAKI1_SLICES + 1):
        b = _bounds.ozaki_bound(q.k, s, slice_bits=w, exponent_spread=q.spread, ratios=q.ratios)
        best = (s, b) if best is None or b < best[1] or b == best[1] == math.inf else best
        if b <= q.goal:
            break
    s, b = best
    t, calls = _ozaki1_cost(q.cost, s, per)
    return [_option("ozaki1", b, t + q.checked, calls, f"{q.rates.name} int8 -> int32 (exact)", reason=_short(
        b, q), detail=f"{s} int8 slices of {w} bits per row of A and column of B, the {s * (s + 1) // 2} slice "
                    f"products with s + t <= {s + 1}, added in float64", slices=s)]


def _ozaki2_options(e: Any, q: _Problem) -> list[Option]:
    """Ozaki II, fast and accurate scaling, each with the fewest moduli whose bound meets the target."""
    chunks = -(-q.k // _ozaki.RESIDUE_K)  # ozaki2 sums k in chunks of residue products in int32
    out = []
    for scaling in ("fast", "accurate"):
        for N in range(1, len(_ozaki.MODULI) + 1):
            b = ozaki2_bound(q.k, N, scaling=scaling, exponent_spread=q.spread, ratios=q.ratios)
            if b <= q.goal:
                break
        t, calls = _ozaki2_cost(q.cost, N, chunks, scaling)
        out.append(_option("ozaki2", b, t + q.checked, calls, f"{q.rates.name} int8 -> int32 (exact)",
                           reason=_short(b, q), detail=f"{N} moduli (the "
                           f"first {N} of ozaki.MODULI, P ~ 2^{math.log2(math.prod(_ozaki.MODULI[:N])):.0f}), "
                           f"{scaling} scaling, one int8 product per modulus, the CRT", n_moduli=N, scaling=scaling))
    return out


def _short(bound: float, q: _Problem) -> str:  # why an Ozaki scheme at its most accurate misses on the data
    return "" if bound <= q.goal or q.A is None else "its most slices or moduli miss it on this data " \
        "(rows or columns spanning too many binades for int8)"


def _int8(options: Any) -> Any:
    """An Ozaki scheme's options; its refusal on a card without an int8 matrix unit, or where even its
    fewest slices or moduli (and the data's bound) cost more than the ``rival`` (the data then not examined)."""
    def run(e: Any, q: _Problem) -> list[Option]:
        if q.rates.int8 is None:
            return [_option(e.name, math.inf, math.inf, 0, "", reason=f"{q.rates.name} has no int8 matrix unit")]
        least = (_ozaki1_cost(q.cost, 1, 1) if e.name == "ozaki1" else _ozaki2_cost(q.cost, 1, 1, "fast"))[0]
        if q.A is not None and least + q.checked >= q.rival:
            return [_option(e.name, math.inf, least + q.checked, 1, "", reason="slower at its fewest slices or "
                            "moduli than the fastest method meeting it (its bound on the data not computed)")]
        return options(e, q)
    return run


_OPTIONS = {"native": _native_options, "words": _words_options, "ozaki1": _int8(_ozaki1_options),
            "ozaki2": _int8(_ozaki2_options)}
"""How each kind of :mod:`.registry` method is costed and bounded for :func:`choose` ("mmm" needs its words
named, FABsum is a summation: neither is chosen)."""


def _candidates() -> list[Any]:
    """The registry's methods :func:`choose` weighs, in its order: the native GEMMs first, the most precise
    first (the first of equal costs is chosen), then the others in the registry's order."""
    natives = [e for e in REGISTRY.values() if e.kind == "native"]
    natives.sort(key=lambda e: -_formats.get(e.name).precision)
    return natives + [e for e in REGISTRY.values() if e.kind in _OPTIONS and e.kind != "native"]


def _problem(m: int, k: int, n: int, acc: str | float, rates: Rates, on_hw: bool, data: Any,
             exponent_spread: Any) -> _Problem:
    """The problem ``choose`` weighs, its data checked where they are (tensors on their device)."""
    if data is not None and exponent_spread is not None:
        raise ArgumentError("exponent_spread", exponent_spread, "and data= both give the spread", fix="pass one")
    if data is None:
        spread = integer("exponent_spread", 0 if exponent_spread is None else exponent_spread, least=0)
        return _Problem(m, k, n, rates, on_hw, None, None, None, spread, target(acc, k, None))
    if not (isinstance(data, (tuple, list)) and len(data) == 2):
        raise ArgumentError("data", Shown(f"<{type(data).__name__}>"), "must be the pair (A, B)")
    shapes = tuple(tuple(np.shape(X)) for X in data)
    if shapes != ((m, k), (k, n)):
        raise ArgumentError("data", Shown(f"<shapes {shapes}>"), f"must be A of shape ({m}, {k}) and B of "
                            f"shape ({k}, {n}) for m={m}, k={k}, n={n}")
    A, B = _tensors.check_tensors(*data) if _tensors.given(*data) else check_operands(*data)
    fmts = {_data_format(X) for X in data}
    fmt_in = fmts.pop() if len(fmts) == 1 else None
    return _Problem(m, k, n, rates, on_hw, A, B, fmt_in, 0, target(acc, k, fmt_in))


def _rejected(options: list[Option], chosen: Option, goal: float) -> tuple[Option, ...]:
    """Every option but the chosen one, with why it lost."""
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
    return tuple(rest)


def _notes(q: _Problem, acc: str | float, chosen: Option, options: list[Option]) -> tuple[str, ...]:
    """The assumptions a Choice states: a worst-case target, truncating units."""
    notes = []
    if isinstance(acc, str) and not chosen.native:
        typical = math.sqrt(q.k) * (_U64 if acc == "fp64" else 2.0**-24)
        if chosen.bound > 10 * typical:
            notes.append(f"the target is {'DGEMM' if acc == 'fp64' else 'SGEMM'}'s worst-case bound, which grows "
                         f"like k u; that GEMM usually errs about sqrt(k) u = {typical:.2g} or less, and the chosen "
                         f"method's bound allows {chosen.bound / typical:.3g}x that: pass accuracy={typical:.2g} "
                         "for the typical error as the goal")
    if any(o.u_high is not None and o.u_high > 2.0**-24 for o in options):
        notes.append(f"{q.rates.name}'s low-precision units truncate: their bounds use u_high = 2^-23 (fp32 "
                     "rounding toward zero), not 2^-24")
    return tuple(notes)


def choose(m: int, k: int, n: int, *, accuracy: Any, device: Any = None, backend: str | None = None,
           data: tuple[Any, Any] | None = None, exponent_spread: int | None = None) -> Choice:
    """The fastest method for an (m x k) @ (k x n) product whose predicted componentwise error meets
    ``accuracy`` on ``device``: "fp64", DGEMM's bound for this k, gamma_k(2**-53); "fp32", SGEMM's,
    gamma_k(2**-24) plus the rounding of the inputs to fp32 (2u + u**2) unless they are fp32 already; a number
    in (0, 1), that componentwise bound itself.

    ``device``: a card of :data:`RATES` (default "H100"; with ``backend="hardware"``, the GPU torch sees,
    or "cpu") or a :class:`Rates`; the simulated units are its preset's Models.  ``backend``: as
    :func:`blockfma.multiword.matmul` takes it (the simulator's engine, or "hardware" for real units).
    ``data=(A, B)``: the operands (numpy arrays or tensors), on which the Ozaki methods are bounded per entry
    (:func:`.bounds.ozaki_ratios`) and whose dtype (fp32 data: SGEMM takes them as they are) the targets use;
    ``exponent_spread``: the spread the Ozaki bounds assume without data (default 0, said).  An accuracy that
    no method reaches is an ArgumentError naming the most accurate one.  Every method of the registry
    (:mod:`.registry`) is weighed by the rule of its kind."""
    m, k, n = (integer(name, v, least=1) for name, v in (("m", m), ("k", k), ("n", n)))
    acc = check_accuracy(accuracy)
    on_hw = check_backend(backend)[1]
    q = _problem(m, k, n, acc, rates_for(device, backend), on_hw, data, exponent_spread)
    options = [o for e in _candidates() if not isinstance(e, Ozaki) for o in _OPTIONS[e.kind](e, q)]
    q = dataclasses.replace(q, rival=min([o.cost for o in options if o.bound <= q.goal], default=math.inf))
    options += [o for e in _candidates() if isinstance(e, Ozaki) for o in _OPTIONS[e.kind](e, q)]
    feasible = [o for o in options if o.bound <= q.goal and math.isfinite(o.cost)]
    if not feasible:
        best = min(options, key=lambda o: o.bound)
        raise ArgumentError("accuracy", accuracy, f"no method reaches a componentwise error of {q.goal:.3g} at "
                            f"k={k}: the most accurate is {best.label} with a bound of {best.bound:.3g}",
                            use={"accuracy": float(f"{best.bound * 1.06:.2g}")})  # 2 digits, >= the bound
    chosen = min(feasible, key=lambda o: o.cost)  # the first of equal costs: the native GEMMs come first
    r = q.__dict__.get("ratios")  # only where it was computed
    basis = f"exponent spread {q.spread} " + ("(given)" if exponent_spread is not None else "(assumed: pass data=(A, "
                                              "B) to bound them on the data)") if data is None else \
        "not computed from the data: no Ozaki method could run, or be faster, here" if r is None else \
        (f"from the data (bounds.ozaki_ratios: one int8 product bounds |A||B| below): per entry, error <= (2^-L "
         f"{r.fast:.3g} + 2^-53) (|A||B|)_ij for ozaki2 (2^L = sqrt(P/2)), (2^-sw ({r.cut:.3g} + (s-1) "
         f"{r.count:.3g}) + gamma_(s-1)) (|A||B|)_ij for ozaki1; DGEMM's: {_bounds.bound('fp64', k):.3g} (|A||B|)_ij")
    return Choice(chosen, (m, k, n), acc, q.goal, q.rates, backend, r, basis, _rejected(options, chosen, q.goal),
                  _notes(q, acc, chosen, options))
