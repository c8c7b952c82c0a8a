"""``blockfma.multiword.matmul``: the methods of :mod:`.registry` on a simulated unit by default.

:func:`matmul` checks the arguments, then hands the operands to the runner of the method's kind: the word
methods' steps (:mod:`.steps`), Ozaki I and II (:mod:`.ozaki`), the native GEMMs; torch tensors to
:mod:`.tensors`; ``accuracy=`` has :func:`.choose.choose` pick the method first.
"""

from __future__ import annotations

import difflib
import numbers
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import formats as _formats
from ..arguments import ArgumentError, Shown, choice, flag, integer, keywords, memory, permutation
from ..model import Model
from ..progress import reporter
from . import hardware as _hardware, ozaki as _ozaki, tensors as _tensors
from .bounds import ozaki_slices
from .choose import check_accuracy, choose
from .registry import METHODS, REGISTRY, TF64_UNIT, Method, Mmm, Ozaki, smallest_first
from .split import MAX_WORDS, check_format, check_operands, check_rounding
from .steps import (SIMULATOR_BACKENDS, OverflowWarning, Run, WordPlan, check_backend, combine, settle,
                    split_operands, unit_model, working_set)

__all__ = ["Method", "METHODS", "methods", "matmul", "unit_model", "TF64_UNIT", "OverflowWarning",
           "SIMULATOR_BACKENDS", "check_backend"]

ORDERS = ("alg2.1", "cublas")
_PARAMETERS = ("method", "device", "model", "backend", "summation", "block", "order", "accumulate",
               "split_rounding", "p", "low", "progress", "return_info", "accuracy", "explain")
_OPTIONS = {n: e.parameters for n, e in REGISTRY.items() if isinstance(e, Ozaki)}  # the Ozaki keywords


def methods() -> list[str]:
    """The names ``matmul`` takes (multiword methods; "ozaki1"/"ozaki2" and the native baselines too)."""
    return [name for name, entry in REGISTRY.items() if entry.runs]


# --- arguments ---------------------------------------------------------------------------------------------
def check_method(method: Any) -> str:
    known = methods()
    if isinstance(method, str) and method.strip().lower() in known:
        return method.strip().lower()
    close = difflib.get_close_matches(str(method).lower(), known, n=1, cutoff=0.5) if isinstance(method, str) else []
    raise ArgumentError("method", method, f"unknown method; the methods are: {', '.join(known)}",
                        use={"method": close[0]} if close else None)


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
        return smallest_first(m.products)
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


def _check_keywords(name: str, given: dict[str, Any], options: dict[str, Any], on_hw: bool) -> None:
    """The keywords ``method=name`` does not take, refused: another method's option, a multiword parameter
    for Ozaki or the baselines, ``p``/``low`` but for "mmm", a simulated unit with real units, two units."""
    for key in options:
        if key not in _OPTIONS.get(name, ()):
            if any(key in keys for keys in _OPTIONS.values()):
                takes = " and ".join(f"method={k!r}" for k, keys in _OPTIONS.items() if key in keys)
                raise ArgumentError(key, options[key], f"is an argument of {takes}, not of method={name!r}",
                                    fix="leave it out")
            keywords("matmul", {key: options[key]}, _PARAMETERS + _OPTIONS.get(name, ()))
    if REGISTRY[name].kind not in ("words", "mmm"):
        for key, value in given.items():
            raise ArgumentError(key, value, f"method={name!r} does not use {key}= (it is for the multiword "
                                "methods)", fix="leave it out")
    if REGISTRY[name].kind != "mmm":
        for key in ("p", "low"):
            if key in given:
                raise ArgumentError(key, given[key], f"is for method='mmm' ({name} fixes its words)",
                                    use={"method": "mmm"})
    if on_hw and ("device" in given or "model" in given):
        key = "device" if "device" in given else "model"
        raise ArgumentError(key, given[key], "picks a simulated unit, and backend='hardware' runs real units",
                            fix="leave it out, or use a simulator backend ('auto')")
    if "device" in given and "model" in given:
        raise ArgumentError("device", given["device"], "and model= both pick the unit", fix="pass one of them")


def _method(name: str, p: Any, low: Any) -> Method:
    """The word method ``name`` (for "mmm": of ``p`` words of ``low``, checked)."""
    entry = REGISTRY[name]
    if not isinstance(entry, Mmm):
        return METHODS[name]
    if p is None or low is None:
        raise ArgumentError("p" if p is None else "low", p if p is None else low,
                            "method='mmm' needs p= (the number of words) and low= (their format)",
                            use={"p": 2, "low": "bf16"})
    return entry.method(integer("p", p, least=1, most=MAX_WORDS), check_format("low", low).name)


def _summation(summation: Any, block: Any, products: tuple[tuple[int, int], ...]) -> tuple[str | None, int | None]:
    """(summation, block) checked: FABsum needs its block size, the block needs FABsum, FABsum needs A1B1."""
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
    return summation, block


def _plan(name: str, args: dict[str, Any], backend: Any, on_hw: bool, unit: bool) -> WordPlan:
    """A word method's run with its arguments checked (``args``: p, low, order, summation, block,
    accumulate, split_rounding, device, model as given); ``unit``: whether to look up the simulated unit."""
    m_ = _method(name, args["p"], args["low"])
    products = _products(m_, args["order"])
    summation, block = _summation(args["summation"], args["block"], products)
    acc = choice("accumulate", args["accumulate"], ("outside", "inside"), none=True)
    if m_.outside_groups:
        for key, value in (("accumulate", acc), ("summation", summation)):
            if value is not None:
                raise ArgumentError(key, value, f"{m_.name} fixes how its products are added (the "
                                    "corrections in the unit, then A1B1 outside)", fix="leave it out")
    acc = acc or ("inside" if args["order"] == "cublas" else m_.accumulate)
    rounding = m_.split_rounding if args["split_rounding"] is None else check_rounding("split_rounding",
                                                                                       args["split_rounding"])
    if on_hw and m_.high == "fp64":
        raise ArgumentError("backend", backend, f"{m_.name} needs a unit with exact fp32 x fp32 products "
                            "accumulated in fp64, which no GPU has", use={"backend": "auto"})
    model = unit_model(m_.low, m_.high, args["device"], args["model"]) if unit else None
    return WordPlan(m_, products, acc, summation, block, rounding, model)


def _as_array(X: Any, name: str) -> np.ndarray:
    """X as a numpy array without a copy where it is one (its shape is checked before any conversion)."""
    try:
        return np.asarray(X)
    except (TypeError, ValueError) as exc:
        raise ArgumentError(name, Shown(f"<{type(X).__name__}>"),
                            f"is not a rectangular array of numbers ({exc})") from None


def _words(name: str, plan: WordPlan | None, options: dict[str, Any]) -> int:
    """Words (slices, moduli) a run holds, for :func:`.steps.working_set` (checked later where they are used)."""
    if plan is not None:
        return plan.method.p
    kind = REGISTRY[name].kind
    value = options.get("slices") if kind == "ozaki1" else options.get("n_moduli") if kind == "ozaki2" else 1
    if kind == "ozaki2" and options.get("moduli") is not None and hasattr(options["moduli"], "__len__"):
        value = len(options["moduli"])
    return value if isinstance(value, int) and 0 < value < 10**6 else (9 if kind == "ozaki1" else 16)


def _operands(A: Any, B: Any, name: str, plan: WordPlan | None, options: dict[str, Any], backend_name: str,
              on_hw: bool) -> tuple[np.ndarray, np.ndarray]:
    """A and B checked (shapes and memory before any conversion, then finite float64 values) and, for real
    units, the device looked up before any work."""
    A_raw, B_raw = _as_array(A, "A"), _as_array(B, "B")
    if A_raw.ndim == 2 and B_raw.ndim == 2:
        (mm, n), q = A_raw.shape, B_raw.shape[1]
        kind = "multiword" if plan is not None else "baseline" if REGISTRY[name].kind == "native" else name
        memory("A", A_raw, working_set(kind, mm, n, q, _words(name, plan, options)),
               f"{name} on a {mm}x{n} @ {n}x{q} product",
               fix="split the product into blocks of rows of A (matmul(A[i:i+r], B, ...)) or of columns of B")
    A_, B_ = check_operands(A_raw, B_raw)
    if on_hw:
        _hardware.hardware_device(backend_name)  # a clear error for a bad device before any work
    return A_, B_


# --- the runners, one per kind -------------------------------------------------------------------------------
def _shape(A: np.ndarray, B: np.ndarray) -> str:
    return f"{A.shape[0]}x{A.shape[1]} @ {B.shape[0]}x{B.shape[1]}"


def _run_native(A: np.ndarray, B: np.ndarray, name: str, plan: Any, backend: str, on_hw: bool,
                options: dict[str, Any], say: Any) -> tuple[np.ndarray, dict[str, Any]]:
    """The native baselines: one binary32 / binary64 matmul (numpy's BLAS, or torch's on real units)."""
    dt = np.float32 if name == "fp32" else np.float64
    if say:
        say(f"{name}: one {name} matmul, {_shape(A, B)} ...")
    if on_hw:
        hw = _hardware.TorchUnit(name, backend)
        with np.errstate(over="ignore", invalid="ignore"):
            C = hw.gemm(A.astype(dt), B.astype(dt), check=False)
        info = {"method": name, "unit": hw.name, "calls": 1, "hardware": hw.info(), "unit_seconds": hw.seconds}
    else:
        with np.errstate(over="ignore", invalid="ignore"):
            C = (A.astype(dt) @ B.astype(dt)).astype(np.float64)
        info = {"method": name, "unit": f"numpy {dt.__name__} matmul", "calls": 1}
    return settle(C, None, A, B, name, name, {}, info["unit"], _formats.get(name).max, stacklevel=5), info


def _run_ozaki(A: np.ndarray, B: np.ndarray, name: str, plan: Any, backend: str, on_hw: bool,
               options: dict[str, Any], say: Any) -> tuple[np.ndarray, dict[str, Any]]:
    """Ozaki I and II on the exact int8 unit (``unit=``, or torch._int_mm on real units)."""
    hw = None
    if on_hw:
        if options.get("unit") is not None:
            raise ArgumentError("unit", options["unit"], "and backend='hardware' both pick the int8 unit "
                                "(backend='hardware' uses torch._int_mm)", fix="pass one of them")
        hw = options["unit"] = _hardware.Int8Unit(backend)
    if say:
        say(f"{name}: int8 products of {_shape(A, B)} ...")
    if name == "ozaki1":
        options.setdefault("slices", ozaki_slices(53))  # fp64 accuracy by the slice-count rule
        C = _ozaki.ozaki1(A, B, **options)
        detail = f"{options['slices']} slices"
    else:
        C = _ozaki.ozaki2(A, B, **options)
        detail = f"{len(options['moduli']) if options.get('moduli') else options.get('n_moduli') or 16} moduli"
    info = {"method": name, "unit": f"int8 x int8 -> int32 (exact), {detail}", "calls": None}
    if hw is not None:
        info.update(unit=f"{hw.name}, {detail}", calls=hw.calls, hardware=hw.info(), unit_seconds=hw.seconds)
    return settle(C, None, A, B, "fp64", name, {}, info["unit"], _formats.get("fp64").max, stacklevel=5), info


def _run_words(A: np.ndarray, B: np.ndarray, name: str, plan: WordPlan, backend: str, on_hw: bool,
               options: dict[str, Any], say: Any) -> tuple[np.ndarray, dict[str, Any]]:
    """A word method: the split, the products on the unit, their additions (:func:`.steps.combine`)."""
    m_ = plan.method
    run = Run(plan.unit, backend, hw=_hardware.TorchUnit(m_.low, backend) if on_hw else None)
    Aw, Bw = split_operands(A, B, m_, plan.rounding, stacklevel=5)
    C, info = combine(run, Aw, Bw, m_, plan.products, plan.accumulate, plan.summation, plan.block, say,
                      shape=_shape(A, B))
    return settle(C, run.over, A, B, m_.high, m_.name, run.where, run.name, run.limit()[0], stacklevel=5), info


_RUNNERS: dict[str, Callable[..., tuple[np.ndarray, dict[str, Any]]]] = {
    "native": _run_native, "ozaki1": _run_ozaki, "ozaki2": _run_ozaki, "words": _run_words, "mmm": _run_words}
"""The arrays' runner of each kind of :mod:`.registry` (torch tensors: :func:`.tensors.matmul`)."""


def _run(A: Any, B: Any, name: str, backend: Any, args: dict[str, Any], options: dict[str, Any], say: Any
         ) -> tuple[Any, dict[str, Any]]:
    """``method=name`` run on A and B, every argument checked first (``args``: the method parameters given)."""
    backend_name, on_hw = check_backend(backend)
    given = {k: v for k, v in args.items() if v is not None}
    _check_keywords(name, given, options, on_hw)
    on_tensors = _tensors.given(A, B)
    plan = _plan(name, args, backend, on_hw, not (on_hw or on_tensors)) if REGISTRY[name].kind in (
        "words", "mmm") else None
    if on_tensors:  # torch tensors: every step on their device (.tensors), a tensor out
        return _tensors.matmul(A, B, name, backend, options, say=say, plan=plan,
                               simulated={k: given[k] for k in ("device", "model") if k in given})
    A_, B_ = _operands(A, B, name, plan, options, backend_name, on_hw)
    return _RUNNERS[REGISTRY[name].kind](A_, B_, name, plan, backend_name, on_hw, options, say)


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
    ("hardware:cuda", "hardware:cuda:N", "hardware:cpu") for real units through torch (:mod:`.hardware`; no
    ``device``/``model``; tf64 has no such unit); the old "torch" spellings are refused with the new one.

    ``order``: "alg2.1" (A1B1, A1B2, A2B1), "cublas" (A2B1, A1B2, A1B1) or explicit 0-based (i, j) pairs:
    each of the method's word products once, or all p**2 of them (eq. 2.5); ``accumulate``: "outside" or
    "inside"; ``summation``: "fabsum-v1"/"fabsum-v2" with ``block``; ``split_rounding``: how words are
    rounded (tf32: "rne", or "rz" as the unit reads fp32); "mmm" takes ``p`` and ``low``.  Ozaki:
    ``slices``, ``width``, ``unit`` (ozaki1) or ``moduli``, ``n_moduli``, ``scaling``, ``unit`` (ozaki2).
    An argument the method does not use is an error.  ``return_info=True`` returns (C, info) with the unit,
    the number of unit calls and the products in their order.  ``progress``: one line per word product.

    Refused (:class:`~blockfma.arguments.ArgumentError`) before any work: non-finite entries, incompatible
    shapes, values beyond the low format, a working set beyond the memory available now.  Words that lose
    bits to underflow give one :class:`RangeWarning` per call (:func:`.split.split`); a word product or sum
    that overflows gives one :class:`OverflowWarning`, its entries +-inf with the exact product's sign where
    that lies beyond the high format's range, NaN elsewhere (docs/multiword.md, "Methods").

    torch tensors in: a float64 tensor on their device out, every step there (:mod:`.tensors`).

    ``accuracy`` instead of ``method`` ("fp64": DGEMM's error bound, "fp32": SGEMM's, or a componentwise
    bound in (0, 1)): the fastest method meeting it for this shape and data on ``device`` (a card of
    :data:`.choose.RATES`, default "H100"), chosen by :func:`.choose.choose` and run; ``explain=True`` prints
    the :class:`.choose.Choice`, ``return_info=True`` returns it as ``info["choice"]``.  The other method
    parameters are refused with ``accuracy``, as is ``method`` itself.
    """
    args = {"device": device, "model": model, "summation": summation, "block": block, "order": order,
            "accumulate": accumulate, "split_rounding": split_rounding, "p": p, "low": low}
    if accuracy is not None or method is None or explain is not False:  # the method chosen for an accuracy
        return _matmul_for(A, B, method=method, accuracy=accuracy, explain=explain, backend=backend,
                           progress=progress, return_info=return_info, args=args, options=options)
    name = check_method(method)
    check_backend(backend)
    return_info = flag("return_info", return_info)
    C, info = _run(A, B, name, backend, args, options, reporter(progress))
    return (C, info) if return_info else C


def _matmul_for(A: Any, B: Any, *, method: Any, accuracy: Any, explain: Any, backend: Any, progress: Any,
                return_info: Any, args: dict[str, Any], options: dict[str, Any]) -> Any:
    """:func:`matmul` with ``accuracy=``: the checks, :func:`.choose.choose` on the operands, then the chosen
    method (``args``: the method parameters given, which accuracy= refuses but ``device``)."""
    for key in options:  # a misspelt keyword is named as such, not taken for a missing method
        if not any(key in keys for keys in _OPTIONS.values()):
            keywords("matmul", {key: options[key]}, _PARAMETERS)
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
    unused = {k: v for k, v in args.items() if v is not None and k != "device"}
    for key, value in {**unused, **options}.items():
        raise ArgumentError(key, value, "sets a parameter of one method, and with accuracy= the method and its "
                            "parameters are chosen", fix="leave it out, or pass method= instead of accuracy=")
    A_, B_ = _tensors.check_tensors(A, B) if _tensors.given(A, B) else check_operands(A, B)
    if 0 in A_.shape + B_.shape:  # an empty product: exact zeros, nothing to choose
        if explain:
            print(f"accuracy={accuracy!r}: an empty product ({A_.shape} @ {B_.shape}): zeros, by the native fp64 GEMM")
        C, info = matmul(A, B, method="fp64", backend=backend, progress=progress, return_info=True)
        info["choice"] = None
        return (C, info) if flag("return_info", return_info) else C
    chosen = choose(A_.shape[0], A_.shape[1], B_.shape[1], accuracy=accuracy, device=args["device"],
                    backend=backend, data=(A, B))
    if explain:
        print(chosen.explain())
    C, info = matmul(A, B, **chosen.arguments(), progress=progress, return_info=True)
    info["choice"] = chosen
    return (C, info) if flag("return_info", return_info) else C
