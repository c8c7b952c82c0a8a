"""discriminate, equivalent and worst_error: questions about Models answered by an SMT solver.

Every answer that holds an input is checked by the engine (``blockfma.dot``) before it is returned: the
witness's outputs are recomputed bit for bit and must be what the formula said, so a witness is a fact about
the simulator, not only about the encoding.  Time limits, "unknown" and "vacuous" answers and the checks of
arguments are as :mod:`blockfma.smt` says; ``total_timeout`` (worst_error) bounds the whole search (default
:data:`TOTAL_TIMEOUT`, 600 s).
"""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
import z3

from .. import formats as _formats
from ..arguments import TIMEOUT, ArgumentError, choice, flag, integer, memory, permutation, seconds
from ..literals import bits_hex, hex_float
from ..model import Model
from ..progress import reporter
from ..reference import product_scales
from . import constraints as _cons
from . import encode as _enc
from .bv import disj
from . import solve as _solve

__all__ = ["Witness", "Verdict", "WorstError", "EncodingError", "resolve", "discriminate", "equivalent", "check_models",
           "shared_c_format", "worst_error", "default_k", "MAX_K", "TOTAL_TIMEOUT"]

MAX_K = 256
"""The most products a formula may have: building grows linearly and the solvers' time much faster (sizes
and times in docs/smt.md); no solver answered the harder questions in minutes past k = 64."""

TOTAL_TIMEOUT = 600.0
"""Seconds a whole :func:`worst_error` search may take unless told otherwise (its queries get ``timeout``
each)."""

_BYTES_PER_PRODUCT = 6_000  # SMT-LIB text per product of a two-model formula (V100, fp16 -> fp32), measured
_SEED_ROWS_MAX = 1_000_000
_DIGITS_MAX = 64


class EncodingError(RuntimeError):
    """The formula and the engine disagree on a witness: a bug in blockfma (please report it)."""


# --- results -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Witness:
    """An input on which two computations differ: ``a``, ``b`` (float64 arrays of values of the input
    formats), ``c``, the outputs ``d_a`` and ``d_b`` as the engine computes them (numpy scalars of the output
    formats, so their bits compare), and which solver found it in how many seconds."""

    a: np.ndarray
    b: np.ndarray
    c: float
    d_a: Any
    d_b: Any
    solver: str
    seconds: float
    names: tuple[str, str] = ("a", "b")
    formats: tuple[str, str, str, str] = ("fp16", "fp16", "fp32", "fp32")  # A, B, C, D
    scale_a: np.ndarray | None = None  # a block-scaled model's scales (one per scale block), else None
    scale_b: np.ndarray | None = None
    scale_format: str | None = None
    # each model's C format where they differ (C, in formats[2], is then the narrower, widened exactly for
    # the model that takes the wider one), else None
    c_formats: tuple[str, str] | None = None

    def lines(self) -> list[str]:
        fa, fb, fc, fd = self.formats
        read = "" if self.c_formats is None else "; " + ", ".join(
            f"{n} reads it as {f}" for n, f in zip(self.names, self.c_formats))
        out = [f"a = [{', '.join(hex_float(x) for x in self.a)}]  ({fa})",
               f"b = [{', '.join(hex_float(x) for x in self.b)}]  ({fb})",
               f"c = {hex_float(self.c)}  ({fc}{read})"]
        if self.scale_a is not None and self.scale_b is not None:
            out += [f"scale_a = [{', '.join(hex_float(x) for x in self.scale_a)}]  ({self.scale_format})",
                    f"scale_b = [{', '.join(hex_float(x) for x in self.scale_b)}]  ({self.scale_format})"]
        for name, d in zip(self.names, (self.d_a, self.d_b)):
            out.append(f"{name}: d = {hex_float(d)}  {bits_hex(d, fd)}")
        out.append(f"(found by {self.solver} in {self.seconds:.3f} s; checked by the engine)")
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def to_json(self) -> dict[str, Any]:
        """Plain values: inputs as exact hex floats, outputs as hex floats and bit patterns."""
        fa, fb, fc, fd = self.formats
        out = {"a": [hex_float(x) for x in self.a], "b": [hex_float(x) for x in self.b], "c": hex_float(self.c),
               "formats": {"a": fa, "b": fb, "c": fc, "d": fd},
               "d": [{"model": n, "value": hex_float(d), "bits": bits_hex(d, fd)}
                     for n, d in zip(self.names, (self.d_a, self.d_b))],
               "solver": self.solver, "seconds": round(self.seconds, 4), "checked_by_engine": True}
        if self.c_formats is not None:
            out["c_formats"] = [{"model": n, "format": f} for n, f in zip(self.names, self.c_formats)]
        if self.scale_a is not None and self.scale_b is not None:
            out["scale_a"] = [hex_float(x) for x in self.scale_a]
            out["scale_b"] = [hex_float(x) for x in self.scale_b]
            out["formats"]["scale"] = self.scale_format
        return out


@dataclass(frozen=True)
class Verdict:
    """The answer of :func:`equivalent`: ``status`` "proved" (no input tells them apart), "refuted" (with
    ``witness``), "unknown" (the solver gave up or ran out of time: ``reason``, ``seconds``) or "vacuous"
    (no input meets the side constraints, so nothing was proved: ``reason``).  ``bool(verdict)`` is True
    only when proved; :func:`discriminate` returns the unknown and vacuous verdicts as they are."""

    status: str
    seconds: float
    solver: str
    k: int  # the products of each input the question was asked for
    witness: Witness | None = None
    reason: str = ""

    def __bool__(self) -> bool:
        return self.status == "proved"

    @property
    def unknown(self) -> bool:
        return self.status == "unknown"

    @property
    def vacuous(self) -> bool:
        return self.status == "vacuous"

    def __str__(self) -> str:
        if self.status == "proved":
            return f"equivalent for k = {self.k}: proved by {self.solver} in {self.seconds:.3f} s"
        if self.status == "refuted":
            return f"not equivalent for k = {self.k}:\n{self.witness}"
        if self.status == "vacuous":
            return f"vacuous for k = {self.k}: {self.reason} ({self.solver}, {self.seconds:.3f} s); nothing proved"
        return f"unknown for k = {self.k} after {self.seconds:.1f} s ({self.solver}: {self.reason})"

    def to_json(self) -> dict[str, Any]:
        """Plain values; the witness (refuted) in :meth:`Witness.to_json`'s form."""
        return {"status": self.status, "k": self.k, "solver": self.solver, "seconds": round(self.seconds, 4),
                "reason": self.reason or None, "witness": None if self.witness is None else self.witness.to_json()}


@dataclass(frozen=True)
class WorstError:
    """The largest error of a model's d = a·b + c against the exact value, with the input that reaches it.

    ``value``: the error at ``a``, ``b``, ``c`` (exact; relative to sum |a_i b_i| + |c| with ``relative=True``, else
    absolute); ``bound``: no input has an error above it (proved: every larger threshold was unsatisfiable) or None when
    the search stopped first; ``status`` "exact" when ``value == bound`` to the bisection's resolution, "lower bound"
    when the search stopped first (no proof that nothing exceeds ``value``), "unknown" when no input meeting the
    constraints was found at all (``value`` 0 and zero inputs are then placeholders)."""

    value: Fraction
    bound: Fraction | None
    relative: bool
    a: np.ndarray
    b: np.ndarray
    c: float
    d: Any
    exact: Fraction
    status: str
    solver: str
    seconds: float
    queries: int
    log: list[tuple[str, str, float]] = field(default_factory=list)
    scale_a: np.ndarray | None = None  # a block-scaled model's scales at the input (one per scale block)
    scale_b: np.ndarray | None = None

    def __str__(self) -> str:
        kind = "relative to sum|a_i b_i| + |c|" if self.relative else "absolute"
        if self.scale_a is not None:
            kind = "relative to sum|a_i sa_i b_i sb_i| + |c|" if self.relative else "absolute"
        b = "not proved" if self.bound is None else f"{float(self.bound):.6g} (= {frac_text(self.bound)})"
        scales = [] if self.scale_a is None or self.scale_b is None else [
            f"scale_a = [{', '.join(hex_float(x) for x in self.scale_a)}]",
            f"scale_b = [{', '.join(hex_float(x) for x in self.scale_b)}]"]
        return "\n".join([
            f"worst error ({kind}): {float(self.value):.6g} (= {frac_text(self.value)}), status {self.status}",
            f"proved upper bound: {b}",
            f"a = [{', '.join(hex_float(x) for x in self.a)}]",
            f"b = [{', '.join(hex_float(x) for x in self.b)}]", *scales,
            f"c = {hex_float(self.c)}; d = {hex_float(self.d)}; exact = {frac_text(self.exact)}",
            f"({self.queries} solver queries, {self.solver}, {self.seconds:.1f} s)"])

    def to_json(self) -> dict[str, Any]:
        """Plain values: errors as exact fractions ("3*2^-25") beside floats, inputs as hex floats."""
        return {"status": self.status, "relative": self.relative,
                "value": frac_text(self.value), "value_float": float(self.value),
                "bound": None if self.bound is None else frac_text(self.bound),
                "bound_float": None if self.bound is None else float(self.bound),
                "a": [hex_float(x) for x in self.a], "b": [hex_float(x) for x in self.b], "c": hex_float(self.c),
                "d": hex_float(self.d), "exact": frac_text(self.exact), "solver": self.solver,
                "seconds": round(self.seconds, 3), "queries": self.queries,
                "log": [{"threshold": t, "answer": a, "seconds": sec} for t, a, sec in self.log],
                **({} if self.scale_a is None or self.scale_b is None else
                   {"scale_a": [hex_float(x) for x in self.scale_a], "scale_b": [hex_float(x) for x in self.scale_b]})}


def _floor_log2(x: Fraction) -> int:
    e = x.numerator.bit_length() - x.denominator.bit_length()
    return e if x >= Fraction(2) ** e else e - 1


def frac_text(x: Fraction) -> str:
    """A rational as the reports write it: ``3*2^-5`` for dyadic values, ``n/d`` otherwise."""
    if x == 0:
        return "0"
    n, d = x.numerator, x.denominator
    if d & (d - 1) == 0:
        e = d.bit_length() - 1
        while n % 2 == 0 and n:
            n //= 2
            e -= 1
        return f"{n}*2^{-e}" if n != 1 else f"2^{-e}"
    return f"{n}/{d}"


# --- models ------------------------------------------------------------------------------------------------
def resolve(model: Model | str, input_format: Any = None, output_format: Any = None, *, name: str = "model") -> Model:
    """A Model as it is, or a preset's named as "DEVICE" or "DEVICE:INSTRUCTION" with ``input_format``
    (required) and ``output_format`` (None: fp32).  Formats given with a Model are refused (the Model fixes
    its own); ``name`` is the argument's name in errors."""
    if isinstance(model, Model):
        for arg, value in (("input_format", input_format), ("output_format", output_format)):
            if value is not None:
                raise ArgumentError(arg, value, f"is for a device named as a string; {name} is a Model with "
                                    "its own formats", fix=f"leave {arg} out, or change the Model with .replace()")
        return model
    if not isinstance(model, str) or not model.strip():
        raise ArgumentError(name, model, "must be a blockfma.Model or a device name (e.g. 'V100' or "
                            "'H100:mma.m16n8k16')")
    from ..devices import device

    dev, _, instruction = model.partition(":")
    if input_format is None:
        raise ArgumentError("input_format", None, f"is needed: {name}={model!r} names a device",
                            use={"input_format": "fp16"})
    for arg, value in (("input_format", input_format), ("output_format", output_format)):
        for fmt in value if isinstance(value, (tuple, list)) else [value]:
            try:
                if fmt is not None:
                    _formats.get(fmt)
            except (ValueError, TypeError, KeyError) as exc:
                raise ArgumentError(arg, value, str(exc).strip("'\"")) from None
    return device(dev).model(input_format, "fp32" if output_format is None else output_format,
                             instruction=instruction or None)


def default_k(*models: Model) -> int:
    """One step of the widest model (its instruction or block), at least 4."""
    return max([m.step_width or 8 for m in models] + [4])


def _refuse(model: Model) -> None:
    why = _enc.unsupported(model)
    if why is not None:
        raise NotImplementedError(f"{model.name or 'model'}: {why}")


def _same_inputs(ma: Model, mb: Model) -> None:
    """Two models one formula may compare: the same A, B and output formats, and C formats of which one
    holds every code of the other (:func:`shared_c_format`); ValueError naming the difference."""
    for what, x, y in (("A's format", ma.input_format, mb.input_format), ("B's format", ma.b_format, mb.b_format),
                       ("output format", ma.output_format, mb.output_format)):
        if x != y:
            raise ValueError(f"the models differ in {what} ({x.name} and {y.name}): compare models of the same "
                             f"{what}")
    shared_c_format([ma, mb])


def shared_c_format(models: Sequence[Model]) -> _formats.Format:
    """The format of the C that models compared on one input share: the narrowest of their C formats, one
    whose every code (values, zeros, infinities, NaN: :func:`blockfma.formats.holds_codes`) each other C
    format holds.  A model that takes a wider C reads the shared one widened exactly, as the engine reads an
    fp16 value given as an fp32 C: so Volta's m8n8k4 with fp16 C (``c_input_format``) compares with the same
    unit reading an fp32 C.  ValueError where no C format is held by all the others."""
    fcs = list(dict.fromkeys(m.c_format for m in models))
    for fc in fcs:
        if all(_formats.holds_codes(other, fc) for other in fcs):
            return fc
    names = " and ".join(f.name for f in fcs)
    why = "neither holds every value of the other, so no C is an input of both" if len(fcs) == 2 else \
        "none is held by all the others, so no C is an input of every model"
    raise ValueError(f"the models' C formats ({names}) do not nest: {why}; compare models whose C formats are the "
                     "same or one of which holds the other (fp16 C against fp32 C)")


def check_k(k: Any) -> int | None:
    """k checked before any formula is built: None (the default length) or an integer in [1, MAX_K]; a
    longer one is refused with the size its formula would need."""
    if k is None:
        return None
    k = integer("k", k, least=1)
    if k > MAX_K:
        mb = k * _BYTES_PER_PRODUCT / 1e6
        raise ArgumentError("k", k, f"is too long for a formula: {k} products would need about {mb:,.0f} MB of "
                            "SMT-LIB text (more for FMA chains) and minutes to write before a solver starts",
                            use={"k": MAX_K}, fix="the most a formula may have (blockfma.smt.MAX_K), or less")
    return k


def check_constraints(constraints: Any) -> Any:
    """``constraints`` as given, checked to be None, a callable or an iterable of callables (a list)."""
    if constraints is None or callable(constraints):
        return constraints
    if isinstance(constraints, (str, bytes)) or not hasattr(constraints, "__iter__"):
        raise ArgumentError("constraints", constraints, "must be a constraint (a function of the symbolic inputs, "
                            "e.g. smt.constraints.positive()), a list of them, or None")
    listed = list(constraints)
    for con in listed:
        if not callable(con):
            raise ArgumentError("constraints", constraints, f"holds {con!r}, which is not a constraint (a function "
                                "of the symbolic inputs, e.g. smt.constraints.positive())")
    return listed


def _codes(values: dict[str, int], names: Sequence[str]) -> np.ndarray:
    return np.array([values[n] for n in names], dtype=np.int64)


def witness_inputs(model: Model, values: dict[str, int], inputs: _cons.Inputs) -> tuple[np.ndarray, np.ndarray, float]:
    """The inputs (a, b, c) as float64 values that a solver's model ``values`` gives ``inputs`` (C in the
    inputs' C format: a shared narrower C where models of different C formats are compared)."""
    a = _formats.decode(model.input_format, _codes(values, [str(x) for x in inputs.bits_a])).astype(np.float64)
    b = _formats.decode(model.b_format, _codes(values, [str(x) for x in inputs.bits_b])).astype(np.float64)
    c = float(_formats.decode(inputs.c.fmt, np.array([values[str(inputs.bits_c)]]))[0])
    return a, b, c


def witness_scales(model: Model, values: dict[str, int], inputs: _cons.Inputs
                   ) -> tuple[np.ndarray | None, np.ndarray | None]:
    """A block-scaled model's scales (float64 values of its scale format) in a solver's model ``values``;
    (None, None) for other models."""
    if not model.block_scaled:
        return None, None
    fs = model.scale_format
    return tuple(_formats.decode(fs, _codes(values, [str(x) for x in bits])).astype(np.float64)  # type: ignore
                 for bits in (inputs.bits_sa, inputs.bits_sb))


def engine_bits(model: Model, a: np.ndarray, b: np.ndarray, c: float, scale_a: np.ndarray | None = None,
                scale_b: np.ndarray | None = None) -> tuple[Any, int]:
    """The engine's d for one row (with a block-scaled model's scales), and its bit pattern."""
    from ..engine import dot

    scales = {} if scale_a is None else {"scale_a": np.asarray(scale_a)[None], "scale_b": np.asarray(scale_b)[None]}
    d = dot(np.asarray(a)[None], np.asarray(b)[None], np.asarray([c]), model=model, **scales)[0]
    return d, int(_formats.bits(d))


def _inputs(model: Model, k: int, prefix: str = "", c_format: _formats.Format | None = None) -> _cons.Inputs:
    fc = c_format or model.c_format
    bits_a, bits_b, bits_c = _enc.input_vars(model, k, prefix, fc)
    sa, sb = _enc.scale_vars(model, k, prefix)
    fs = model.scale_format if model.block_scaled else None
    return _cons.Inputs.of(model.input_format, model.b_format, fc, bits_a, bits_b, bits_c, fs, sa, sb)


def _block_symmetric(m: Model) -> int | None:
    """L when permuting the products inside each block of L leaves the model's result unchanged (fused
    blocks: a maximum, a sum of cut terms, zero signs from all/any), else None."""
    if not m.family.is_symmetric(m) or m.product_order != "natural" or m.instruction_k is not None \
            or m.block_width is None:
        return None
    return m.block_width


def symmetry_breaking(models: Sequence[Model], v: _cons.Inputs) -> list[z3.BoolRef]:
    """Inside each block, the (a_i, b_i) pairs in increasing order of A's code: every input has a permuted
    twin that satisfies this and gives the same result on every model here, so no answer is lost and the
    solver skips up to L! orderings.  Empty when a model is not block-symmetric (or the widths differ)."""
    widths = {_block_symmetric(m) for m in models}
    if len(widths) != 1 or None in widths:
        return []
    (L,) = widths
    out = []
    for start in range(0, v.k, L):
        for i in range(start, min(start + L, v.k) - 1):
            out.append(z3.ULE(v.bits_a[i], v.bits_a[i + 1]))
    return out


def difference_formula(ma: Model, mb: Model, k: int, constraints: Any, order_b: Sequence[int] | None = None,
                       symmetry: bool = False
                       ) -> tuple[list[z3.BoolRef], list[z3.BitVecRef], _cons.Inputs, z3.BitVecRef, z3.BitVecRef]:
    """The formula "d_a != d_b" over shared inputs; model b sees the inputs in ``order_b``.  C is in the
    narrower of the two C formats (:func:`shared_c_format`), widened exactly for a model that takes a wider
    one.  With ``symmetry`` (and no constraints or reordering, which may name positions) the products of
    each block come sorted (:func:`symmetry_breaking`)."""
    _same_inputs(ma, mb)
    _same_scales(ma, mb, order_b)
    fc = shared_c_format([ma, mb])
    v = _inputs(ma, k, c_format=fc)
    fd = ma.output_format
    d_a, d_b = z3.BitVec("d_a", fd.bits), z3.BitVec("d_b", fd.bits)
    perm = list(range(k)) if order_b is None else list(order_b)
    sa, sb = (v.bits_sa, v.bits_sb) if ma.block_scaled else (None, None)
    form = [d_a == _enc.dot(ma, v.bits_a, v.bits_b, v.bits_c, sa, sb, c_format=fc),
            d_b == _enc.dot(mb, [v.bits_a[i] for i in perm], [v.bits_b[i] for i in perm], v.bits_c, sa, sb,
                            c_format=fc),
            d_a != d_b] + _cons.apply(constraints, v)
    if symmetry and constraints is None and order_b is None:
        form += symmetry_breaking([ma, mb], v)
    return form, [*v.variables, d_a, d_b], v, d_a, d_b


def check_models(models: Sequence[Model]) -> None:
    """Models that one formula may compare: each encoded (NotImplementedError naming what is missing), all of
    the first one's A, B and output formats, C formats that nest (:func:`shared_c_format`), and
    block-scaled alike (ValueError naming the difference)."""
    for m in models:
        _refuse(m)
        _same_inputs(models[0], m)
        _same_scales(models[0], m)
    shared_c_format(models)


def _same_scales(ma: Model, mb: Model, order_b: Sequence[int] | None = None) -> None:
    """Two models compared on shared inputs take the same scales: both block-scaled with one scale format
    and scale block, or neither; a reordering of the products would move them across scale blocks."""
    if not (ma.block_scaled or mb.block_scaled):
        return
    if not (ma.block_scaled and mb.block_scaled):
        raise ValueError("one model is block-scaled and the other is not: compare block-scaled models with each "
                         "other (both take the same scales)")
    for option in ("scale_format", "scale_block"):
        if ma.option(option) != mb.option(option):
            raise ValueError(f"the models differ in option {option} ({ma.option(option)!r} and "
                             f"{mb.option(option)!r}): compare block-scaled models that read the same scales")
    if order_b is not None:
        raise ValueError("order_b is not supported for block-scaled models (a reordering moves products across "
                         "scale blocks)")


def checked_witness(ma: Model, mb: Model, out: _solve.Outcome, v: _cons.Inputs,
                    order_b: Sequence[int] | None = None) -> Witness:
    """The solver's witness of :func:`difference_formula`, checked against the engine (EncodingError where
    the formula and the engine disagree)."""
    a, b, c = witness_inputs(ma, out.values, v)
    sa, sb = witness_scales(ma, out.values, v)
    perm = list(range(len(a))) if order_b is None else list(order_b)
    da, bits_da = engine_bits(ma, a, b, c, sa, sb)  # C a value of both models' C formats (shared_c_format)
    db, bits_db = engine_bits(mb, a[perm], b[perm], c, sa, sb)
    if (bits_da, bits_db) != (out.values["d_a"], out.values["d_b"]):
        raise EncodingError(f"the formula and the engine disagree on a = {list(a)}, b = {list(b)}, c = {c}: "
                            f"formula {out.values['d_a']:#x}, {out.values['d_b']:#x}; engine {bits_da:#x}, "
                            f"{bits_db:#x} ({ma.name} / {mb.name}); please report this")
    if bits_da == bits_db:
        raise EncodingError("the solver's witness gives the same bits on both models; please report this")
    widened = None if ma.c_format == mb.c_format else (ma.c_format.name, mb.c_format.name)
    return Witness(a, b, c, da, db, out.solver, out.seconds, (ma.name or "model a", mb.name or "model b"),
                   (ma.input_format.name, ma.b_format.name, v.c.fmt.name, ma.output_format.name), sa, sb,
                   ma.scale_format.name if ma.block_scaled else None, widened)


# --- the questions -----------------------------------------------------------------------------------------
def discriminate(model_a: Model | str, model_b: Model | str, *, k: int | None = None,
                 timeout: float | None = TIMEOUT, constraints: Any = None, solver: str = "auto",
                 input_format: Any = None, output_format: Any = None, order_b: Sequence[int] | None = None,
                 symmetry: bool = False) -> Witness | Verdict | None:
    """Inputs a, b (length k) and c on which the two models give different bits.  Three answers that read
    apart:

    * a :class:`Witness` (truthy): found, and checked by the engine;
    * ``None``: proved, no input of length k (under ``constraints``) tells them apart;
    * a falsy :class:`Verdict`: no answer.  ``status`` "unknown" when the solver gave up or ``timeout``
      passed (``reason``, ``seconds``), "vacuous" when no input meets ``constraints``.

    So test ``w is None`` for a proof and ``isinstance(w, Witness)`` (or ``w`` and not a Verdict) for a witness; ``not
    w`` alone also holds for "unknown".  :func:`equivalent` asks the same question and always returns a Verdict.

    ``timeout``: seconds for the solver (default 60; None or ``math.inf``: no limit); ``constraints``: side conditions
    on the inputs (see :mod:`blockfma.smt.constraints`); ``order_b``: model b reads the products in this order (a
    permutation of range(k)).  Models whose C formats differ are compared where one holds every value of the other
    (:func:`shared_c_format`: C is then an input of the narrower format, widened exactly for the other model); their
    output formats must agree.  Devices may be named instead of Models, with ``input_format``/``output_format``.
    ``symmetry`` adds :func:`symmetry_breaking` (off by default: no faster with bitwuzla on the carry queries)."""
    verdict = equivalent(model_a, model_b, k=k, timeout=timeout, constraints=constraints, solver=solver,
                         input_format=input_format, output_format=output_format, order_b=order_b,
                         symmetry=symmetry)
    if verdict.status == "refuted":
        return verdict.witness
    if verdict.status == "proved":
        return None
    return verdict


def _constraints_alone(v: _cons.Inputs, constraints: Any, name: str, timeout: float | None) -> _solve.Outcome | None:
    """One solver call on ``constraints`` alone: does any input meet them?  None without constraints."""
    if constraints is None:
        return None
    return _solve.check(_cons.apply(constraints, v), v.variables, solver=name, timeout=timeout)


def equivalent(model_a: Model | str, model_b: Model | str, *, k: int | None = None,
               timeout: float | None = TIMEOUT, constraints: Any = None, solver: str = "auto",
               input_format: Any = None, output_format: Any = None, order_b: Sequence[int] | None = None,
               symmetry: bool = False) -> Verdict:
    """Do two models give the same bits on every input of length k (under ``constraints``)?  A :class:`Verdict`:
    "proved", "refuted" with a witness the engine has checked, "unknown" after ``timeout`` seconds (default 60; None or
    ``math.inf``: no limit), or "vacuous" when no input meets ``constraints`` (checked by one more solver call, made
    only when constraints are given and the difference was not found).  Only "proved" is truthy.  The arguments are
    :func:`discriminate`'s; k defaults to :func:`default_k` and is at most :data:`MAX_K`."""
    timeout = seconds("timeout", timeout)
    k = check_k(k)
    constraints = check_constraints(constraints)
    symmetry = flag("symmetry", symmetry)
    name = _solve.pick(solver)
    ma = resolve(model_a, input_format, output_format, name="model_a")
    mb = resolve(model_b, input_format, output_format, name="model_b")
    for m in (ma, mb):
        _refuse(m)
    _same_inputs(ma, mb)  # C formats that nest are compared on the narrower C (shared_c_format)
    _same_scales(ma, mb)
    k = default_k(ma, mb) if k is None else k
    for m in (ma, mb):
        block = m.option("scale_block") if m.block_scaled else 1
        if k % block:
            raise ArgumentError("k", k, f"must be a multiple of {m.name or 'the model'}'s scale block ({block}): "
                                "every scale block takes one scale of A and one of B",
                                use={"k": block * -(-k // block)})
    if order_b is not None:
        listed = permutation("order_b", order_b, range(k))
        if not all(isinstance(i, numbers.Integral) and not isinstance(i, bool) for i in listed):
            raise ArgumentError("order_b", order_b, f"must hold the positions 0 to {k - 1} as integers, each once")
        order_b = [int(i) for i in listed]
    form, variables, v, _, _ = difference_formula(ma, mb, k, constraints, order_b, symmetry)
    start = time.perf_counter()
    out = _solve.check(form, variables, solver=name, timeout=timeout)
    if out.status == "sat":
        return Verdict("refuted", out.seconds, out.solver, k, checked_witness(ma, mb, out, v, order_b))
    alone = _constraints_alone(v, constraints, name, timeout)
    spent = time.perf_counter() - start
    if alone is not None and alone.status == "unsat":
        return Verdict("vacuous", spent, out.solver, k, reason=f"no input of length {k} meets the constraints")
    if out.status == "unknown":
        return Verdict("unknown", out.seconds, out.solver, k, reason=out.reason)
    if alone is not None and alone.status == "unknown":
        return Verdict("unknown", spent, out.solver, k,
                       reason="no input tells them apart, but whether any input meets the constraints is "
                              f"unknown ({alone.reason})")
    return Verdict("proved", out.seconds, out.solver, k)


def _seed_rows(model: Model, k: int, normal_inputs: bool, n: int) -> list[tuple[np.ndarray, np.ndarray, float]]:
    """Up to 8 rows of finite inputs (normal ones with ``normal_inputs``) with finite results whose error,
    ranked in binary64 with math.fsum, is largest among ``n`` rows of the probes' input families (a
    block-scaled model's with unit scales)."""
    from ..engine import dot
    from ..inputs import Formats, mixed_rows

    if n <= 0:
        return []
    f = Formats.of(model.input_format, model.b_format, model.c_format, model.output_format)
    rng = np.random.default_rng(7)
    a, b, c = mixed_rows(f, k, n, rng, ("normal", "cancel", "extremes", "wide"))
    a2, b2, c2 = _below_cut_rows(f, k, n, rng)
    a, b, c = np.concatenate([a, a2]), np.concatenate([b, b2]), np.concatenate([c, c2])
    ok = np.isfinite(a).all(1) & np.isfinite(b).all(1) & np.isfinite(c)
    if normal_inputs:
        for x, fmt in ((a, model.input_format), (b, model.b_format), (c[:, None], model.c_format)):
            ok &= ((x == 0) | (np.abs(x) >= 2.0 ** fmt.emin)).all(1)
    a, b, c = a[ok], b[ok], c[ok]
    if len(c) == 0:
        return []
    sa, sb = _unit_scales(model, k)  # a block-scaled model's rows take unit scales
    scales = {} if sa is None else {"scale_a": np.tile(sa, (len(c), 1)), "scale_b": np.tile(sb, (len(c), 1))}
    d = dot(a, b, c, model=model, **scales).astype(np.float64)
    with np.errstate(all="ignore"):
        p = a * b
    score = np.zeros(len(c))
    for i in range(len(c)):
        if not math.isfinite(d[i]):
            score[i] = -1.0
            continue
        x = math.fsum(list(p[i]) + [c[i]])
        mag = math.fsum(list(np.abs(p[i])) + [abs(c[i])])
        score[i] = abs(d[i] - x) / mag if mag else 0.0
    top = np.argsort(score)[::-1][:8]
    return [(a[i], b[i], float(c[i])) for i in top if score[i] >= 0]


def _below_cut_rows(f: Any, k: int, n: int, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """Rows where an alignment loses most: one product near 2**e and every other term (products and C)
    of one sign, just below 2**(e - g) for a gap g of 6 to 30 bits (a term below the cut is lost whole)."""
    from .. import formats as fm

    def below(fmt: Any, x: np.ndarray) -> np.ndarray:
        """The largest value of fmt below 2**x (0 where fmt does not reach it)."""
        ulp = 2.0 ** -(fmt.precision - 1)
        v = (2.0 - ulp) * np.exp2(x - 1.0)
        return np.where(x - 1 >= fmt.emin, fm.round(fmt, v), 0.0)

    e = rng.integers(-3, 4, n).astype(float)
    g = rng.integers(6, 31, n).astype(float)
    sign = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    a = np.repeat(below(f.a, (e - g)[:, None]), k, axis=1) * sign[:, None]
    b = np.ones((n, k))
    a[:, 0] = fm.round(f.a, np.exp2(e)) * rng.choice([1.0, 1.5], n)
    a[:, 0] = fm.round(f.a, a[:, 0])
    c = below(f.c, e - g) * sign
    return a, b, c


def _exact_of(model: Model, a: np.ndarray, b: np.ndarray, c: float, scale_a: np.ndarray | None = None,
              scale_b: np.ndarray | None = None) -> tuple[Fraction, Fraction]:
    """(a·b + c, sum |a_i b_i| + |c|) exactly; a block-scaled model's products times their scales."""
    terms = [Fraction(float(x)) * Fraction(float(y)) for x, y in zip(a, b)]
    scales = product_scales(model, len(terms), scale_a, scale_b)
    if scales is not None:
        terms = [t * Fraction(x) * Fraction(y) for t, x, y in zip(terms, *scales)]
    terms.append(Fraction(c))
    return sum(terms, Fraction(0)), sum((abs(t) for t in terms), Fraction(0))


def _unit_scales(model: Model, k: int) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Scales of 1 for a block-scaled model's k products (one per scale block); (None, None) for others."""
    if not model.block_scaled:
        return None, None
    ones = np.ones(k // model.option("scale_block"))
    return ones, ones.copy()


_Row = tuple[np.ndarray, np.ndarray, float, Any, Any]  # a, b, c, scale_a, scale_b (None: no scales)
_SCALE_BITS = 80  # worst_error's relative thresholds go down to 2**-80


@dataclass(frozen=True)
class _ErrorFormula:
    """A model's output d = dot(a, b, c) beside its exact value: ``base`` (d is the model's result, inputs and
    result finite, plus the side constraints), ``abs_err`` = |d - (a·b + c)| in units of 2**LSB, and ``M``
    the magnitude sum |a_i b_i| + |c| in the same units."""

    v: _cons.Inputs
    base: list[z3.BoolRef]
    variables: list[Any]
    abs_err: Any
    M: Any
    LSB: int

    @classmethod
    def of(cls, m: Model, k: int, constraints: Any, normal_inputs: bool, symmetry: bool) -> _ErrorFormula:
        v = _inputs(m, k)
        fd = m.output_format
        d = z3.BitVec("d", fd.bits)
        scale_bits_ab = (v.bits_sa, v.bits_sb) if m.block_scaled else (None, None)
        N, LSB, finite, M, _ = _enc.exact_value(m, v.bits_a, v.bits_b, v.bits_c, *scale_bits_ab)
        W = N.size() + 2
        dv = _enc.value_in_frame(fd, d, LSB, W)
        err = dv - z3.SignExt(2, N)
        abs_err = z3.If(err < 0, -err, err)
        out_finite = z3.Not(disj(_enc.decode(fd, d).nan, _enc.decode(fd, d).inf))
        base = [d == _enc.dot(m, v.bits_a, v.bits_b, v.bits_c, *scale_bits_ab), finite, out_finite] + \
            _cons.apply(constraints, v)
        if normal_inputs:
            base += _cons.apply(_cons.normal(), v)
        if symmetry and constraints is None:
            base += symmetry_breaking([m], v)
        return cls(v, base, [*v.variables, d], abs_err, M, LSB)

    def above(self, T: Fraction, relative: bool) -> list[z3.BoolRef]:
        """error > T, T = n / 2**s dyadic: |err| * 2**s > n * M (relative), |err| * 2**(s + LSB) > n (absolute)."""
        abs_err, M = self.abs_err, self.M
        n, den = T.numerator, T.denominator
        assert den & (den - 1) == 0, T
        s = den.bit_length() - 1
        if relative:
            w = abs_err.size() + s + n.bit_length() + 2
            return [z3.UGT(z3.ZeroExt(w - abs_err.size(), abs_err) << s, z3.ZeroExt(w - M.size(), M) * n)]
        up, down = max(0, s + self.LSB), max(0, -(s + self.LSB))
        w = abs_err.size() + up + n.bit_length() + down + 2
        return [z3.UGT(z3.ZeroExt(w - abs_err.size(), abs_err) << up, z3.BitVecVal(n << down, w))]


def _start_line(m: Model, k: int, solver: str, timeout: float | None, total_timeout: float | None) -> str:
    """worst_error's first progress line: the model, k and the time limits."""
    limit = "no limit" if total_timeout is None else f"at most {total_timeout:g} s"
    each = "no limit" if timeout is None else f"up to {timeout:g} s"
    return f"worst error of {m.name or 'the model'}, k = {k}: {solver} queries of {each} each, {limit} in all"


class _Search:
    """One worst_error search: its formula, limits and bounds so far (errors <= ``lo`` are reached, none
    exceeds ``hi``), the worst input found (``best``: error, input, d, exact value) and the query log."""

    def __init__(self, m: Model, k: int, f: _ErrorFormula, *, relative: bool, digits: int, solver: str,
                 timeout: float | None, total_timeout: float | None, say: Any, start: float) -> None:
        self.m, self.k, self.f, self.relative, self.digits, self.solver = m, k, f, relative, digits, solver
        self.timeout, self.total_timeout, self.say, self.start = timeout, total_timeout, say, start
        self.log: list[tuple[str, str, float]] = []
        self.best: tuple[Fraction, _Row, Any, Fraction] | None = None
        self.lo: Fraction = Fraction(-1)
        self.hi: Fraction | None = None
        self.queries = 0

    def bounds(self) -> str:
        found = "none yet" if self.best is None else f"{float(self.best[0]):.4g}"
        return f"worst so far {found}, proved bound {'none' if self.hi is None else f'{float(self.hi):.4g}'}"

    def left(self) -> float | None:
        """Seconds the search may still spend (None: no limit)."""
        if self.total_timeout is None:
            return None
        return self.total_timeout - (time.perf_counter() - self.start)

    def limit(self) -> float | None:
        rest, timeout = self.left(), self.timeout
        return timeout if rest is None else rest if timeout is None else min(timeout, rest)

    def dyadic(self, x: Fraction) -> Fraction:
        """x rounded up to a dyadic threshold (2**-(scale_bits + digits + 8) relative, 2**LSB absolute)."""
        q = Fraction(1, 2 ** (_SCALE_BITS + self.digits + 8)) if self.relative else Fraction(2) ** self.f.LSB
        return Fraction(-(-x // q)) * q

    def error_of(self, row: _Row) -> tuple[Fraction, Any, Fraction]:
        dd, _ = engine_bits(self.m, *row)
        x, mag = _exact_of(self.m, *row)
        e = abs(Fraction(float(dd)) - x)
        return (e / mag if self.relative and mag else e), dd, x

    def keep(self, row: _Row) -> Fraction:
        """Record a row's error if it is the worst so far; the error."""
        e, dd, x = self.error_of(row)
        if self.best is None or e > self.best[0]:
            self.best = (e, row, dd, x)
        return e

    def found(self, out: _solve.Outcome) -> Fraction:
        """Record a satisfying input's error (checked by the engine); the error."""
        m, v = self.m, self.f.v
        a, b, c = witness_inputs(m, out.values, v)
        row = (a, b, c, *witness_scales(m, out.values, v))
        _, bits = engine_bits(m, *row)
        if bits != out.values["d"]:
            raise EncodingError(f"formula and engine disagree on a = {list(a)}, b = {list(b)}, c = {c}")
        e = self.keep(row)
        self.lo = max(self.lo, e)
        return e

    def seed(self, seed_rows: int, normal_inputs: bool) -> None:
        """A first lower bound from the engine on adversarial rows: no solver needed."""
        for a, b, c in _seed_rows(self.m, self.k, normal_inputs, seed_rows):
            self.keep((a, b, c, *_unit_scales(self.m, self.k)))
        if self.best is not None:
            self.lo = self.best[0]
            self.log.append(("engine rows", f"{seed_rows} rows: best {float(self.lo):.4g}", 0.0))
        if self.say is not None:
            self.say(f"  the engine on {seed_rows} random and adversarial rows: {self.bounds()}")

    def any_input(self, constraints: Any, normal_inputs: bool) -> None:
        """One input that meets the constraints, the proof that none does (an ArgumentError), or no time left."""
        if (limit := self.limit()) is not None and limit <= 0:
            return
        out = _solve.check(self.f.base, self.f.variables, solver=self.solver, timeout=limit)
        self.queries += 1
        self.log.append(("any input", out.status, round(out.seconds, 3)))
        if self.say is not None:
            self.say(f"  any input meeting the constraints? {out.status} ({out.seconds:.2f} s)")
        if out.status == "unsat":
            raise ArgumentError("constraints", constraints, f"no input of length {self.k} meets them (with finite "
                                f"inputs{', normal ones,' if normal_inputs else ''} and a finite result), so "
                                "there is no worst error to find", fix="relax the constraints")
        if out.status == "sat":
            self.found(out)

    def ask(self, T: Fraction) -> str:
        """Is there an input with error > T? "sat" (found, lo raised), "unsat" (hi lowered), "unknown", or
        "stop" (no time left)."""
        if (limit := self.limit()) is not None and limit <= 0:  # read once: the limit passed is never below 0
            return "stop"
        out = _solve.check(self.f.base + self.f.above(T, self.relative), self.f.variables, solver=self.solver,
                           timeout=limit)
        self.queries += 1
        self.log.append((frac_text(T), out.status, round(out.seconds, 3)))
        if out.status == "sat":
            e_found = self.found(out)
            if e_found <= T:
                raise EncodingError(f"the solver's input has error {e_found}, not above {T}; please report this")
        elif out.status == "unsat":
            self.hi = T if self.hi is None else min(self.hi, T)
        if self.say is not None:
            self.say(f"  error > {float(T):.4g}? {out.status} ({out.seconds:.2f} s): {self.bounds()}")
        return out.status

    def climb(self) -> None:
        """Upward from an error every rounding reaches (satisfiable queries are the fast ones): each witness
        sets the next threshold to the power of two above its error; the first threshold not reached (proved
        or timed out) caps the search; then bisection between the best error and the cap."""
        relative, lo = self.relative, self.lo
        e = (_floor_log2(lo) + 1) if lo > 0 else -(self.m.result_format.precision + 2) if relative else 0
        status = self.ask(self.dyadic(lo) if lo > 0 else Fraction(2) ** e)
        while status == "unsat" and e > (-_SCALE_BITS if relative else self.f.LSB):
            e -= 1
            status = self.ask(Fraction(2) ** e)
        cap = Fraction(2) ** e if status != "sat" else None
        while status == "sat":
            e = _floor_log2(self.lo) + 1
            status = self.ask(Fraction(2) ** e)
            if status != "sat":
                cap = Fraction(2) ** e
        for _ in range(self.digits):  # bisection between the best error found and the cap
            if status == "stop" or cap is None or self.lo <= 0 or self.lo >= cap:
                break
            mid = self.dyadic((self.lo + cap) / 2)
            status = self.ask(mid)
            if status != "sat":
                cap = mid

    def result(self, constrained: bool) -> WorstError:
        spent = time.perf_counter() - self.start
        hi, name, m, k = self.hi, self.solver, self.m, self.k
        if self.best is None:  # no input found: the zero input (valid without constraints: its error is 0)
            zero = np.zeros(k)
            ones = _unit_scales(m, k)
            dd, _ = engine_bits(m, zero, zero, 0.0, *ones)
            status = "unknown" if constrained else "exact" if hi is not None else "lower bound"
            return WorstError(Fraction(0), hi, self.relative, zero, zero, 0.0, dd, Fraction(0), status, name, spent,
                              self.queries, self.log, *ones)
        e_best, (a, b, c, sa, sb), dd, x = self.best
        exact = hi is not None and (hi - e_best) <= hi / 2 ** self.digits
        return WorstError(e_best, hi, self.relative, a, b, c, dd, x, "exact" if exact else "lower bound", name,
                          spent, self.queries, self.log, sa, sb)


def worst_error(model: Model | str, *, k: int | None = None, reference: str = "exact", relative: bool = True,
                constraints: Any = None, timeout: float | None = TIMEOUT,
                total_timeout: float | None = TOTAL_TIMEOUT, solver: str = "auto", digits: int = 6,
                normal_inputs: bool = True, seed_rows: int = 4000, input_format: Any = None,
                output_format: Any = None, progress: Any = None, symmetry: bool = False) -> WorstError:
    """The largest error |d - (a·b + c)| of a model over all finite inputs of length k whose result is finite
    (and ``constraints``), relative to sum |a_i b_i| + |c| (``relative=True``) or absolute.  A block-scaled
    model's scales are inputs too (no NaN scale): its exact value and magnitude take each product times its
    scales, sum a_i sa_i b_i sb_i + c and sum |a_i sa_i b_i sb_i| + |c|; the engine's rows start from unit
    scales, and the result carries the worst input's ``scale_a`` and ``scale_b``.

    Found by bisection over the solver: "is there an input with error > T?" for thresholds T, first over powers of two,
    then ``digits`` bits of T's significand (0 to 64); each satisfiable answer raises the lower bound to the error of
    the input found (exact, recomputed with the engine and Fractions), each unsatisfiable one proves an upper bound (the
    result's ``status``: :class:`WorstError`).  ``timeout`` bounds each query and ``total_timeout`` the whole search.
    Proofs of upper bounds are hard for the solvers, so a search usually runs until its limits (timings in
    docs/smt.md).  ``progress`` (None: lines on stderr where it is a terminal; True, False, or a function of one line)
    reports the start, the engine's rows and every query with the bounds so far.

    ``normal_inputs`` (default) leaves subnormal inputs out: a subnormal factor takes part with exponent
    emin, above its value, so the alignment can drop C whole (docs/smt.md), which would hide every other
    error; pass False to include them.  Without ``constraints`` the search starts from the largest error
    the engine finds on ``seed_rows`` random and adversarial rows (0 to 10**6; the solver then only has to
    beat it); with them it starts from one input the solver finds, and constraints that no such input meets
    raise an ArgumentError naming them (the worst error over no input is not defined)."""
    choice("reference", reference, ("exact",))
    relative = flag("relative", relative)
    normal_inputs = flag("normal_inputs", normal_inputs)
    symmetry = flag("symmetry", symmetry)
    timeout = seconds("timeout", timeout)
    total_timeout = seconds("total_timeout", total_timeout)
    digits = integer("digits", digits, least=0, most=_DIGITS_MAX)
    seed_rows = integer("seed_rows", seed_rows, least=0, most=_SEED_ROWS_MAX)
    k = check_k(k)
    constraints = check_constraints(constraints)
    say = reporter(progress)
    name = _solve.pick(solver)
    m = resolve(model, input_format, output_format)
    _refuse(m)
    k = default_k(m) if k is None else k
    if constraints is None:  # the engine's rows: 2 per seed row, a and b with copies and dot's temporaries
        memory("seed_rows", seed_rows, seed_rows * k * 160, f"the engine's {2 * seed_rows} rows of {k} products",
               fix="pass fewer seed_rows (or a shorter k)")
    start = time.perf_counter()
    if say is not None:
        say(_start_line(m, k, name, timeout, total_timeout))
    search = _Search(m, k, _ErrorFormula.of(m, k, constraints, normal_inputs, symmetry), relative=relative,
                     digits=digits, solver=name, timeout=timeout, total_timeout=total_timeout, say=say, start=start)
    if constraints is None:
        search.seed(seed_rows, normal_inputs)
    else:
        search.any_input(constraints, normal_inputs)
    search.climb()
    return search.result(constraints is not None)


def inputs_for(model: Model, k: int, prefix: str = "", c_format: Any = None) -> _cons.Inputs:
    """Fresh symbolic inputs of length k in a model's formats (for queries built by hand); C in
    ``c_format`` where given (a narrower C shared with another model: :func:`shared_c_format`)."""
    return _inputs(model, k, prefix, None if c_format is None else _formats.get(c_format))

