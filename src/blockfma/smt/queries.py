"""The named queries: Valpey et al.'s Properties 1-5 and every row of their Table 4, and a few beyond them.

Each query is a formula over the inputs of one or two Models (the presets, or the paper's variants of them), the answer
it should have ("sat": a witness exists; "unsat": a proof), and a check that the engine makes of the witness (the
property, recomputed with ``blockfma.dot`` and Fractions).  ``queries()`` lists them, ``run(name)`` answers one.  The
seed's times (z3 4.8.9 and cvc5 1.0.2 on a 32-core EPYC, 6-hour limit) are kept beside each for benchmarks/bench_smt.py,
and bitwuzla's on a 2-core machine (``expected_seconds``): a query that runs out of its ``timeout`` (default 60 s, like
every smt question) says how long it should take. The carry queries use the paper's reading of products
(``product_exponent="normalized"``) and, beyond the paper, the presets' (docs/smt.md, "Notes on the seed").
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

import numpy as np
import z3

from .. import formats as _formats
from ..arguments import TIMEOUT, ArgumentError, flag, seconds
from ..formats import RoundingMode
from ..literals import hex_float
from ..model import Family, Model
from ..progress import reporter
from . import constraints as C
from . import encode as _enc
from . import solve as _solve
from .bv import disj
from .api import checked_witness, difference_formula, engine_bits, frac_text, inputs_for, witness_inputs

__all__ = ["Query", "QueryResult", "queries", "get", "run", "Separation", "separate", "AccumulatorReading",
           "accumulator_inputs", "accumulator_constraints", "separation_formula", "checked_separation",
           "reference_checked"]

RZ, RN = RoundingMode.TowardZero, RoundingMode.TiesToEven
_NO_ANSWER = float("inf")  # the seed's "-": no answer within its 6-hour limit


@dataclass(frozen=True)
class QueryResult:
    """A query's answer: ``status`` (sat/unsat/unknown), whether it is the ``expected`` one and the engine's
    check of the witness held (``ok``), the witness or proof in exact form (``lines``)."""

    name: str
    status: str
    expected: str
    ok: bool
    solver: str
    seconds: float
    lines: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        head = f"{self.name}: {self.status} in {self.seconds:.3f} s ({self.solver}); expected {self.expected}"
        mark = "" if self.ok else "  ** NO ANSWER **" if self.status == "unknown" else "  ** NOT AS EXPECTED **"
        return "\n".join([head + mark] + ["  " + x for x in self.lines])

    def to_json(self) -> dict[str, Any]:
        """Plain values (the witness or proof as the exact text lines: hex floats, bit patterns)."""
        return {"query": self.name, "status": self.status, "expected": self.expected, "ok": self.ok,
                "solver": self.solver, "seconds": round(self.seconds, 4), "lines": list(self.lines)}


@dataclass(frozen=True)
class Query:
    name: str
    title: str
    source: str
    expected: str  # "sat" (a witness) or "unsat" (a proof)
    build: Callable[[], tuple[list[Any], list[Any], Callable[[_solve.Outcome], list[str]]]]
    # (z3, cvc5) in Valpey et al.'s Table 4: None where not reported, inf where no answer came in 6 hours;
    # Property 5's 300 s is the paper's "less than 5 minutes" with cvc5
    seed_seconds: tuple[float | None, float | None] | None = None
    slow: bool = False  # left out of the default test run
    # bitwuzla's seconds on a 2-core machine (docs/smt.md's table): what a time-out is measured against
    expected_seconds: float | None = None


# --- models the queries speak of ---------------------------------------------------------------------------
def _v100(out: str = "fp32", **changes: Any) -> Model:
    from ..devices import device

    m = device("V100").model("fp16", out)
    return m.replace(**changes) if changes else m


def _paper_volta(carry: int | None) -> Model:
    """Valpey et al.'s Algorithm 1 for Volta: products normalised, 24-bit significands, 3 carry bits."""
    return _v100(product_exponent="normalized", carry_bits=carry, name=f"Volta (paper), {carry} carry bits")


def _paper_ampere(carry: int | None) -> Model:
    """Algorithm 1 for Ampere: 8 products, one shifted bit kept (F = 24), 4 carry bits."""
    from ..devices import device

    m = device("A100").model("fp16", "fp32")
    return m.replace(product_exponent="normalized", carry_bits=carry, fraction_bits=24,
                     name=f"Ampere (paper), {carry} carry bits")


def _ieee(family: Family, out: str, mode: RoundingMode, L: int, name: str, inp: str = "fp16") -> Model:
    return Model(family, inp, out, block_width=L, output_rounding=mode, name=name)


def _zeros_after(n: int, k: int, c: bool = False) -> C.Constraint:
    return C.zeros(a=range(n, k), b=range(n, k), c=c)


def _value(fmt: Any, bits: z3.BitVecRef, LSB: int, W: int) -> z3.BitVecRef:
    return _enc.value_in_frame(_formats.get(fmt), bits, LSB, W)


def _exact(a: np.ndarray, b: np.ndarray, c: float) -> Fraction:
    return sum((Fraction(float(x)) * Fraction(float(y)) for x, y in zip(a, b)), Fraction(c))


def _f(x: Any) -> Fraction:
    return Fraction(float(x))


# --- a query from two models -------------------------------------------------------------------------------
def _pair_query(ma: Model, mb: Model, k: int, cons: Any = None, order_b: list[int] | None = None,
                check: Callable[[Any], list[str]] | None = None):
    def build():
        form, variables, v, _, _ = difference_formula(ma, mb, k, cons, order_b)

        def finish(out: _solve.Outcome) -> list[str]:
            w = checked_witness(ma, mb, out, v, order_b)
            return w.lines() + (check(w) if check else [])
        return form, variables, finish
    return build


def _pair_proof(ma: Model, mb: Model, k: int, cons: Any = None, order_b: list[int] | None = None):
    def build():
        form, variables, v, _, _ = difference_formula(ma, mb, k, cons, order_b)

        def finish(out: _solve.Outcome) -> list[str]:
            w = checked_witness(ma, mb, out, v, order_b)
            return ["counterexample:"] + w.lines()
        return form, variables, finish
    return build


class NotShown(Exception):
    """A witness that satisfies the formula but not the property the engine checks (a query to fix)."""


def _need(cond: bool, what: str) -> None:
    if not cond:
        raise NotShown(f"the engine's check failed: the witness does not show {what}")


# --- Table 4 -----------------------------------------------------------------------------------------------
def _exact_multiplication():
    """a, b in fp16 whose product is not an fp16 value, and the unit returns the product exactly."""
    m = _v100()
    k = 4

    def build():
        v = inputs_for(m, k)
        d = z3.BitVec("d", 32)
        N, LSB, _, _, _ = _enc.exact_value(m, v.bits_a, v.bits_b, v.bits_c)
        form = [d == _enc.dot(m, v.bits_a, v.bits_b, v.bits_c), _value("fp32", d, LSB, N.size()) == N]
        form += C.apply([_zeros_after(1, k, c=True), C.product_in_range("fp16", [0]), C.product_not_in("fp16", [0])], v)

        def finish(out: _solve.Outcome) -> list[str]:
            a, b, c = witness_inputs(m, out.values, v)
            dd, _ = engine_bits(m, a, b, c)
            p = _f(a[0]) * _f(b[0])
            half = _formats.round_fraction("fp16", p, RN)
            _need(_f(dd) == p and Fraction(half) != p, "exact product, not an fp16 value")
            return [f"a = {hex_float(a[0])}, b = {hex_float(b[0])} (fp16)",
                    f"exact product {hex_float(float(p))}; in fp16 {hex_float(half)}; "
                    f"V100 d = {hex_float(dd)} (exact)"]
        return form, [*v.bits_a, *v.bits_b, v.bits_c, d], finish
    return build


def _exact_addition():
    """Property 1: products not in fp16 whose sum is; fp16 arithmetic gets it wrong, the unit does not."""
    fp16_arith = _ieee(Family.PAIRWISE, "fp16", RN, 4, "fp16 arithmetic (products and sums rounded to fp16)")
    unit = _v100("fp16")
    k = 4
    cons = [_zeros_after(2, k, c=True), C.product_in_range("fp16", [0, 1]), C.product_not_in("fp16", [0, 1]),
            C.sum_in("fp16")]

    def check(w) -> list[str]:
        x = _exact(w.a, w.b, w.c)
        _need(_f(w.d_b) == x and _f(w.d_a) != x, "the unit exact, fp16 arithmetic not")
        return [f"exact sum {hex_float(float(x))} (an fp16 value): the unit accumulates in fp32"]
    return _pair_query(fp16_arith, unit, k, cons, check=check)


def _rounding_final():
    """Property 2: the fp16 output is rounded to nearest: a single product where RN and RZ differ."""
    unit = _v100("fp16")
    rz = _v100("fp16", output_rounding=RZ, name="V100 fp16->fp16 with RZ output")
    k = 4

    def check(w) -> list[str]:
        p = _f(w.a[0]) * _f(w.b[0])
        _need(_f(w.d_a) == Fraction(_formats.round_fraction("fp16", p, RN)), "the unit rounds to nearest")
        return [f"exact {hex_float(float(p))}: RN gives the unit's result"]
    return _pair_query(unit, rz, k, [_zeros_after(1, k, c=True), C.product_in_range("fp16", [0])], check=check)


def _rounding_accumulator():
    """Table 3: the accumulator truncates its terms, which is not IEEE round-toward-zero: a result above
    the exact value in magnitude."""
    unit = _v100()
    rz = _ieee(Family.EXACT_FUSED, "fp32", RZ, 4, "IEEE round-toward-zero (exact sum, one RZ)")
    k = 4

    def build():
        form, variables, v, d_a, _ = difference_formula(unit, rz, k, [_zeros_after(1, k)])
        N, LSB, _, _, _ = _enc.exact_value(unit, v.bits_a, v.bits_b, v.bits_c)
        W = N.size() + 2
        da = _value("fp32", d_a, LSB, W)
        x = z3.SignExt(2, N)
        form += [z3.Not(_enc.decode(_formats.fp32, d_a).nan), z3.Not(_enc.decode(_formats.fp32, d_a).inf),
                 z3.If(da < 0, -da, da) > z3.If(x < 0, -x, x)]

        def finish(out: _solve.Outcome) -> list[str]:
            w = checked_witness(unit, rz, out, v)
            x = _exact(w.a, w.b, w.c)
            _need(abs(_f(w.d_a)) > abs(x), "|d| above the exact |a·b + c|")
            return w.lines() + [f"exact {frac_text(x)}: the unit's |d| exceeds it, which no round-toward-zero does"]
        return form, variables, finish
    return build


def _accumulation_order():
    """Property 3: (p1 + p2) + p3 and p1 + (p2 + p3) in fp32 with RZ differ; the unit gives one result."""
    seq = _ieee(Family.FMA_CHAIN, "fp32", RZ, 1, "sequential fp32 RZ additions")
    k = 3

    def check(w) -> list[str]:
        unit = _v100()
        a4, b4 = np.append(w.a, 0.0), np.append(w.b, 0.0)
        d1, bits1 = engine_bits(unit, a4, b4, w.c)
        _, bits2 = engine_bits(unit, a4[[2, 1, 0, 3]], b4[[2, 1, 0, 3]], w.c)
        _need(bits1 == bits2, "the unit's result does not depend on the order")
        return [f"V100 gives {hex_float(d1)} in both orders"]
    return _pair_query(seq, seq, k, [C.zeros(c=True)], order_b=[2, 1, 0], check=check)


def _normalisation():
    """Property 4: (a1 b1 + a2 b2) + c with a normalisation (RZ) after each addition differs from the unit's
    sum without one, all inputs positive."""
    unit = _v100()
    seq = _ieee(Family.FMA_CHAIN, "fp32", RZ, 1, "fp32 RZ with normalisation")
    add = _ieee(Family.EXACT_FUSED, "fp32", RZ, 1, "fp32 RZ addition", inp="fp32")
    k = 4

    def build():
        v = inputs_for(unit, k)
        s = _enc.dot(seq, v.bits_a[:2], v.bits_b[:2], z3.BitVecVal(0, 32))
        one = z3.BitVecVal(_formats.encode("fp32", np.float64(1.0)).item(), 32)
        d_seq = z3.BitVec("d_seq", 32)
        d_unit = z3.BitVec("d_unit", 32)
        form = [d_seq == _enc.dot(add, [s], [one], v.bits_c), d_unit == _enc.dot(unit, v.bits_a, v.bits_b, v.bits_c),
                d_seq != d_unit]
        form += C.apply([_zeros_after(2, k), C.positive("c"), C.positive("ab", positions=[0, 1])], v)

        def finish(out: _solve.Outcome) -> list[str]:
            a, b, c = witness_inputs(unit, out.values, v)
            du, bu = engine_bits(unit, a, b, c)
            s_, _ = engine_bits(seq, a[:2], b[:2], 0.0)
            ds, bs = engine_bits(add, np.array([float(s_)]), np.array([1.0]), c)
            _need((bu, bs) == (out.values["d_unit"], out.values["d_seq"]) and bu != bs, "the two sums differ")
            return [f"a = [{hex_float(a[0])}, {hex_float(a[1])}], b = [{hex_float(b[0])}, {hex_float(b[1])}] "
                    f"(fp16), c = {hex_float(c)}",
                    f"(a1 b1 + a2 b2) + c with normalisation: {hex_float(ds)}; the unit: {hex_float(du)}"]
        return form, [*v.bits_a, *v.bits_b, v.bits_c, d_seq, d_unit], finish
    return build


def _carry_pair(ma: Model, mb: Model, k: int):
    """A pair query whose check says which of the two results unlimited carries give (the correct sum, as
    Valpey et al. saw on hardware)."""
    def check(w) -> list[str]:
        full, _ = engine_bits(ma.replace(carry_bits=None), w.a, w.b, w.c)
        agree = [n for n, d in zip(w.names, (w.d_a, w.d_b)) if _f(d) == _f(full)]
        return [f"with unlimited carries: {hex_float(full)}, as {' and '.join(agree) or 'neither'}"]
    return _pair_query(ma, mb, k, check=check)


def _fp16_c_reading():
    """Volta's ``mma.m8n8k4.f32.f16.f16.f16`` (fp16 C, fp32 D) as MMA-Sim reads it (C's exponent taken in
    fp16: a subnormal at -14) against the same unit given that C as fp32 (a subnormal at its own exponent):
    an input on which they differ, and the check that C is then subnormal in fp16 (the only place the two
    readings part) and that the exact reference gives both results."""
    from ..devices import device
    from ..reference import dot_bits

    v100 = device("V100")
    narrow = v100.instruction("mma.f16c").models[("fp16", "fp32")]
    wide = v100.model("fp16", "fp32")

    def check(w) -> list[str]:
        _need(0 < abs(w.c) < 2.0**-14, "C subnormal in fp16")
        ref = [dot_bits(m, list(w.a), list(w.b), w.c) for m in (narrow, wide)]
        _need(ref == [int(_formats.bits(d)) for d in (w.d_a, w.d_b)], "the exact reference's results")
        return [f"C = {hex_float(w.c)} is subnormal in fp16: MMA-Sim's reading aligns it at exponent -14, the "
                f"fp32 C at its own, {math.frexp(w.c)[1] - 1}; the exact reference gives both results"]
    return _pair_query(narrow, wide, narrow.instruction_k or 4, check=check)


# --- Property 5 --------------------------------------------------------------------------------------------
def _markidis_ootomo(pinned: bool):
    """Property 5: inputs where Ootomo-Yokota's product (accumulation outside the unit, RN) is less accurate
    than Markidis's (C accumulated inside the unit).  With fp16-valued A and B the residuals vanish:
    Markidis = TC(a, b, c), Ootomo-Yokota = RN(TC(a, b, 0) + c).  ``pinned``: the outcome Table 5 reports
    (exact = Markidis = 1 + 2**-23, Ootomo-Yokota = 1)."""
    unit = _v100()
    add = _ieee(Family.EXACT_FUSED, "fp32", RN, 1, "fp32 RN addition", inp="fp32")
    k = 4

    def build():
        v = inputs_for(unit, k)
        dm, s, doy = z3.BitVec("d_markidis", 32), z3.BitVec("s", 32), z3.BitVec("d_ootomo", 32)
        one = z3.BitVecVal(_formats.encode("fp32", np.float64(1.0)).item(), 32)
        form = [dm == _enc.dot(unit, v.bits_a, v.bits_b, v.bits_c),
                s == _enc.dot(unit, v.bits_a, v.bits_b, z3.BitVecVal(0, 32)),
                doy == _enc.dot(add, [s], [one], v.bits_c)]
        N, LSB, _, _, _ = _enc.exact_value(unit, v.bits_a, v.bits_b, v.bits_c)
        W = N.size() + 2
        x = z3.SignExt(2, N)
        em, eo = _value("fp32", dm, LSB, W) - x, _value("fp32", doy, LSB, W) - x
        form += [z3.If(em < 0, -em, em) < z3.If(eo < 0, -eo, eo)]
        for d in (dm, doy):
            form += [z3.Not(_enc.decode(_formats.fp32, d).nan), z3.Not(_enc.decode(_formats.fp32, d).inf)]
        form += C.apply([C.exponents(-15, 14, "ab"), C.finite()], v)
        if pinned:
            top = Fraction(1) + Fraction(1, 2**23)
            form += [N == int(top / Fraction(2) ** LSB), dm == _bits32(top), doy == _bits32(Fraction(1))]

        def finish(out: _solve.Outcome) -> list[str]:
            a, b, c = witness_inputs(unit, out.values, v)
            m_, _ = engine_bits(unit, a, b, c)
            s_, _ = engine_bits(unit, a, b, 0.0)
            oy = _formats.round_fraction("fp32", _f(s_) + Fraction(c), RN)
            x_ = _exact(a, b, c)
            _need(abs(_f(m_) - x_) < abs(Fraction(oy) - x_), "Markidis closer to the exact value")
            return [f"a = [{', '.join(hex_float(t) for t in a)}] (fp16 values: residuals 0)",
                    f"b = [{', '.join(hex_float(t) for t in b)}]",
                    f"c = {hex_float(c)} (fp32)",
                    f"exact {hex_float(float(x_))}{'' if Fraction(float(x_)) == x_ else ' (rounded)'}; "
                    f"Markidis {hex_float(m_)}; Ootomo-Yokota {hex_float(oy)}"]
        return form, [*v.bits_a, *v.bits_b, v.bits_c, dm, s, doy], finish
    return build


def _bits32(x: Fraction) -> int:
    return int(_formats.encode("fp32", np.float64(float(x))).item())


# --- the B200 mxf4 accumulator (DeepGEMM issue 176: "34, 35, 36 or 37 bits?") -------------------------------
def _b200_mxf4() -> Model:
    from ..devices import device

    return device("B200").model("e2m1fn", "fp32", instruction="tcgen05.mxf4.block32")


def _accumulator_query(fractions: tuple[int, ...]):
    """One instruction's input (A and B zero but for the first product of each scale group, scales and C
    within 2**+-32) on which the B200 mxf4 preset gives a different fp32 result for every F in
    ``fractions``; each result recomputed by the engine and the exact reference."""
    def build():
        unit = _b200_mxf4()
        k = unit.step_width or unit.block_width
        positions, cons = accumulator_constraints(unit, k)
        cands = [unit.replace(fraction_bits=f, name=f"F = {f}") for f in fractions]
        form, variables, v, ds = separation_formula(cands, k, cons)

        def finish(out: _solve.Outcome) -> list[str]:
            sep = reference_checked(cands, checked_separation(cands, out, v, ds))
            at = ", ".join(map(str, positions))
            return [f"a[{at}] = [{', '.join(hex_float(sep.a[i]) for i in positions)}] (e2m1fn; the rest +0)",
                    f"b[{at}] = [{', '.join(hex_float(sep.b[i]) for i in positions)}] (e2m1fn; the rest +0)",
                    f"scale_a = [{', '.join(hex_float(x) for x in sep.scale_a)}] (ue8m0, per 32)",
                    f"scale_b = [{', '.join(hex_float(x) for x in sep.scale_b)}] (ue8m0, per 32)",
                    f"c = {hex_float(sep.c)} (fp32)"] + \
                [f"{name}: d = {hex_float(d)} ({bits:#010x})" for name, d, bits in zip(sep.names, sep.d, sep.bits)]
        return form, variables, finish
    return build


# --- one input that tells several models apart ------------------------------------------------------------
@dataclass(frozen=True)
class Separation:
    """One input on which every model gives a different result (pairwise different bits): ``a``, ``b``
    (float64 arrays of values of the input formats), ``c``, a block-scaled model's ``scale_a`` and
    ``scale_b`` (else None), and each model's result as the engine computes it (``d``: numpy scalars of the
    output format; ``bits``: their patterns), with the solver and its seconds, and ``c_format``, C's format:
    models whose C formats differ share the narrower C, widened exactly for those that take a wider one."""

    names: tuple[str, ...]
    a: np.ndarray
    b: np.ndarray
    c: float
    scale_a: np.ndarray | None
    scale_b: np.ndarray | None
    d: tuple[Any, ...]
    bits: tuple[int, ...]
    solver: str
    seconds: float
    c_format: str | None = None  # the format of C (shared by every model: api.shared_c_format); None: unnamed

    def lines(self) -> list[str]:
        out = [f"a = [{', '.join(hex_float(x) for x in self.a)}]", f"b = [{', '.join(hex_float(x) for x in self.b)}]",
               f"c = {hex_float(self.c)}" + ("" if self.c_format is None else f"  ({self.c_format})")]
        if self.scale_a is not None and self.scale_b is not None:
            out += [f"scale_a = [{', '.join(hex_float(x) for x in self.scale_a)}]",
                    f"scale_b = [{', '.join(hex_float(x) for x in self.scale_b)}]"]
        out += [f"{n}: d = {hex_float(d)}" for n, d in zip(self.names, self.d)]
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())


def separate(models: Any, *, k: int | None = None, constraints: Any = None, finite_results: bool = True,
             timeout: float | None = TIMEOUT, solver: str = "auto") -> Separation | None | Any:
    """One input of length k (and scales, for block-scaled models) on which the models' results are pairwise
    different bit patterns (finite ones with ``finite_results``), under ``constraints``.  Answers as
    :func:`blockfma.smt.discriminate` does: a :class:`Separation` (found, and checked by the engine),
    ``None`` (proved: no such input), or a falsy Verdict with status "unknown" (the solver gave up) or
    "vacuous" (no input meets the constraints).  Two models: the question discriminate asks."""
    from .api import Verdict, check_constraints, check_k, check_models, default_k

    models = list(models) if isinstance(models, (list, tuple)) else None
    if not models or len(models) < 2 or not all(isinstance(m, Model) for m in models):
        raise ArgumentError("models", models, "must be a list of two or more blockfma.Model (one input format)")
    timeout = seconds("timeout", timeout)
    k = check_k(k)
    constraints = check_constraints(constraints)
    name = _solve.pick(solver)
    check_models(models)
    k = default_k(*models) if k is None else k
    form, variables, v, ds = separation_formula(models, k, constraints, finite_results)
    out = _solve.check(form, variables, solver=name, timeout=timeout)
    if out.status == "unknown":
        return Verdict("unknown", out.seconds, out.solver, k, reason=out.reason)
    if out.status == "unsat":
        if constraints is not None:
            alone = _solve.check(C.apply(constraints, v), v.variables, solver=name, timeout=timeout)
            if alone.status != "sat":
                return Verdict("vacuous" if alone.status == "unsat" else "unknown", out.seconds, out.solver, k,
                               reason=f"no input of length {k} meets the constraints" if alone.status == "unsat"
                               else f"whether any input meets the constraints is unknown ({alone.reason})")
        return None
    return checked_separation(models, out, v, ds)


def separation_formula(models: list[Model], k: int, constraints: Any, finite_results: bool = True
                       ) -> tuple[list[Any], list[Any], C.Inputs, list[z3.BitVecRef]]:
    """The formula "the models' results are pairwise different bits" over one shared input of length k (and
    its scales), finite results with ``finite_results``, under ``constraints``: (formula, variables, inputs,
    the results' bit-vectors).  C is in the narrowest of the models' C formats (``api.shared_c_format``),
    widened exactly for a model that takes a wider one."""
    from .api import shared_c_format

    fc = shared_c_format(models)
    v = inputs_for(models[0], k, c_format=fc)
    fd = models[0].output_format
    ds = [z3.BitVec(f"d{i}", fd.bits) for i in range(len(models))]
    scales = (v.bits_sa, v.bits_sb) if models[0].block_scaled else (None, None)
    form = [d == _enc.dot(m, v.bits_a, v.bits_b, v.bits_c, *scales, c_format=fc) for d, m in zip(ds, models)]
    form += [ds[i] != ds[j] for i in range(len(ds)) for j in range(i + 1, len(ds))]
    if finite_results:
        form += [z3.Not(disj(_enc.decode(fd, d).nan, _enc.decode(fd, d).inf)) for d in ds]
    return form + C.apply(constraints, v), [*v.variables, *ds], v, ds


def checked_separation(models: list[Model], out: _solve.Outcome, v: C.Inputs, ds: list[z3.BitVecRef]) -> Separation:
    """The solver's input for :func:`separation_formula` with every model's result, recomputed by the engine
    (EncodingError where the formula and the engine disagree)."""
    from .api import witness_scales

    a, b, c = witness_inputs(models[0], out.values, v)
    sa, sb = witness_scales(models[0], out.values, v)
    results = [engine_bits(m, a, b, c, sa, sb) for m in models]
    got = tuple(out.values[str(d)] for d in ds)
    if tuple(bits for _, bits in results) != got:
        from .api import EncodingError

        raise EncodingError(f"the formula and the engine disagree on a = {list(a)}, b = {list(b)}, c = {c}: formula "
                            f"{[hex(x) for x in got]}, engine {[hex(bits) for _, bits in results]}; please report this")
    return Separation(tuple(m.name or f"model {i}" for i, m in enumerate(models)), a, b, c, sa, sb,
                      tuple(d for d, _ in results), got, out.solver, out.seconds, v.c.fmt.name)


@dataclass(frozen=True)
class AccumulatorReading:
    """The inputs that read a block-scaled unit's accumulator width F: for every pair of candidate F an input
    whose results differ (``pairs``), and one input that separates them all at once (``joint``: a Separation,
    or None: ``joint_status`` says "proved none" (no such input under the constraints), "unknown" (the
    solver gave up) or "not asked"); each input with every candidate's result."""

    model: Model
    fractions: tuple[int, ...]
    positions: tuple[int, ...]
    pairs: dict[tuple[int, int], Separation]
    joint: Separation | None
    joint_status: str

    def rows(self) -> list[tuple[str, Separation]]:
        """(label, input) for every input found: the pairs, then the joint one."""
        out = [(f"F {f} vs {g}", s) for (f, g), s in self.pairs.items()]
        if isinstance(self.joint, Separation):
            out.append(("all at once", self.joint))
        return out


def reference_checked(models: list[Model], sep: Separation) -> Separation:
    """``sep`` once the exact reference (:func:`blockfma.reference.dot_bits`) gives every model's result as
    the formula and the engine did (EncodingError otherwise)."""
    from .. import reference as _ref
    from .api import EncodingError

    for m, bits in zip(models, sep.bits):
        scales = () if sep.scale_a is None else (list(sep.scale_a), list(sep.scale_b))
        ref = _ref.dot_bits(m, list(sep.a), list(sep.b), sep.c, *scales)
        if ref != bits:
            raise EncodingError(f"{m.name}: the reference gives {ref:#x}, the formula and engine {bits:#x} on "
                                f"a = {list(sep.a)}, b = {list(sep.b)}, c = {sep.c}; please report this")
    return sep


def accumulator_constraints(model: Model, k: int, positions: Any = None, exponents: Any = (-32, 32),
                            zero_c: bool = False) -> tuple[list[int], list[C.Constraint]]:
    """The inputs :func:`accumulator_inputs` searches, as constraints: A and B +0 except at ``positions`` (default: the
    first product of every ``scale_group``, or of every 8 products), finite values, the scales' and C's exponents within
    ``exponents`` (no NaN scale), C = +0 with ``zero_c``.  Returns the positions (checked) and the constraints."""
    step = model.option("scale_group") if model.block_scaled and model.option("scale_group") else 8
    if positions is None:
        positions = list(range(0, k, step))
    positions = C.check_positions("positions", positions, k)
    others = [i for i in range(k) if i not in positions]
    ok = isinstance(exponents, (tuple, list)) and len(exponents) == 2 and \
        all(isinstance(e, int) and not isinstance(e, bool) for e in exponents) and exponents[0] <= exponents[1]
    if not ok:
        raise ArgumentError("exponents", exponents, "must be two integers (lo, hi) with lo <= hi: the range of the "
                            "scales' and C's exponents", use={"exponents": (-32, 32)})
    lo, hi = exponents
    return positions, [C.zeros(a=others, b=others, c=flag("zero_c", zero_c)), C.finite(), C.scales(lo, hi),
                       C.exponents(lo, hi, "c")]


def _fractions(fractions: Any) -> list[int]:
    """The accumulator widths F to tell apart: two or more different integers 0 to 52, else an ArgumentError."""
    listed = list(fractions) if isinstance(fractions, (list, tuple, range)) else None
    if not listed or len(listed) < 2 or len(set(listed)) != len(listed) or \
            not all(isinstance(f, int) and not isinstance(f, bool) and 0 <= f <= 52 for f in listed):
        raise ArgumentError("fractions", fractions, "must list two or more different accumulator widths F "
                            "(integers 0 to 52)", use={"fractions": (34, 35, 36, 37)})
    return listed


def accumulator_inputs(model: Model, fractions: Any = (34, 35, 36, 37), *, positions: Any = None,
                       exponents: tuple[int, int] = (-32, 32), zero_c: bool = False, joint: bool = True,
                       timeout: float | None = TIMEOUT, solver: str = "auto", progress: Any = None
                       ) -> AccumulatorReading:
    """Inputs of one instruction that tell apart the accumulator widths ``fractions`` (the model's
    ``fraction_bits`` F, everything else as the model states it): for every pair, an input whose results
    differ, and with ``joint`` one input whose results differ for all of them at once.

    The inputs are short: A and B are +0 except at ``positions`` (default: the first product of every
    ``scale_group``, or of every 8 products); C and the scales are free but for their exponents, which lie
    in ``exponents`` (no NaN scale, so the numbers stay readable); with ``zero_c`` C is +0 (what a GEMM
    library's D = A B with beta = 0 gives the unit); every result is a finite number.  Every input's results
    under every candidate F are recomputed by the engine (the formula must agree) and by the exact reference
    (``blockfma.reference.dot_bits``), which must agree too.  ``progress`` (None: lines on stderr where it is
    a terminal; True, False or a function of one line) reports each query (timings in docs/blackwell.md)."""
    say = reporter(progress)
    from .api import check_k

    if not isinstance(model, Model):
        raise ArgumentError("model", model, "must be a blockfma.Model (e.g. bf.device('B200').model('e2m1fn', "
                            "'fp32', instruction='tcgen05.mxf4.block32'))")
    listed = _fractions(fractions)
    k = check_k(model.step_width or model.block_width or 8)
    positions, cons = accumulator_constraints(model, k, positions, exponents, zero_c)
    cands = [model.replace(fraction_bits=f, name=f"F={f}") for f in listed]

    def everyone(sep: Separation) -> Separation:
        """The input's results under every candidate, not only the pair it was found for."""
        res = [engine_bits(m, sep.a, sep.b, sep.c, sep.scale_a, sep.scale_b) for m in cands]
        return reference_checked(cands, Separation(tuple(m.name for m in cands), sep.a, sep.b, sep.c, sep.scale_a,
                                                   sep.scale_b, tuple(d for d, _ in res),
                                                   tuple(bits for _, bits in res), sep.solver, sep.seconds,
                                                   sep.c_format))

    pairs: dict[tuple[int, int], Separation] = {}
    for i in range(len(cands)):
        for j in range(i + 1, len(cands)):
            got = separate([cands[i], cands[j]], k=k, constraints=cons, timeout=timeout, solver=solver)
            if say is not None:
                say(f"F = {listed[i]} against {listed[j]}: "
                    f"{'found' if isinstance(got, Separation) else 'none'}")
            if not isinstance(got, Separation):
                what = "proved: no such input" if got is None else f"{got.status}: {got.reason}"
                raise RuntimeError(f"no input tells F = {listed[i]} from F = {listed[j]} ({what})")
            pairs[(listed[i], listed[j])] = everyone(got)
    together, status = None, "not asked"
    if joint:
        got = separate(cands, k=k, constraints=cons, timeout=timeout, solver=solver)
        if say is not None:
            say(f"one input for all of F = {', '.join(map(str, listed))}: "
                f"{'found' if isinstance(got, Separation) else 'none'}")
        if isinstance(got, Separation):
            together, status = everyone(got), "found"
        else:
            status = "proved none" if got is None else got.status
    return AccumulatorReading(model, tuple(listed), tuple(positions), pairs, together, status)


# --- the registry ------------------------------------------------------------------------------------------
def _registry() -> dict[str, Query]:
    V = "Valpey et al. 2024"
    volta3, volta2, volta4 = _paper_volta(3), _paper_volta(2), _paper_volta(4)
    amp4, amp3 = _paper_ampere(4), _paper_ampere(3)
    v100 = _v100()
    qs = [
        Query("exact-multiplication", "fp16 products are exact in the unit (Table 1)", f"{V}, Table 4 row 1",
              "sat", _exact_multiplication(), (0.55, 0.027)),
        Query("exact-addition-fp16", "Property 1: fp16 x fp16 -> fp16 accumulates in fp32",
              f"{V}, Table 4 row 2", "sat", _exact_addition(), (27.59, 0.12)),
        Query("rounding-final-result", "Property 2: the fp16 output is rounded to nearest",
              f"{V}, Table 4 row 3", "sat", _rounding_final(), (0.52, 0.008)),
        Query("rounding-accumulator", "Table 3: truncation of the terms is not IEEE round-toward-zero",
              f"{V}, Table 4 row 4", "sat", _rounding_accumulator(), (0.34, 0.017)),
        Query("accumulation-order", "Property 3: sequential RZ sums depend on the order; the unit does not",
              f"{V}, Table 4 row 5", "sat", _accumulation_order(), (9.87, 0.25)),
        Query("normalisation", "Property 4: no normalisation of the partial sums (all inputs positive)",
              f"{V}, Table 4 row 6", "sat", _normalisation(), (9.63, 0.25)),
        Query("carry-3", "a 5-term accumulator needs 3 carry bits (2 give another result)",
              f"{V}, Table 4 row 7", "sat", _carry_pair(volta3, volta2, 4),
              (410.25, 72.793)),
        Query("carry-4-as-3", "proof: 4 carry bits behave as 3 for the 5-term accumulator", f"{V}, sec. 4.3",
              "unsat", _pair_proof(volta4, volta3, 4)),
        Query("carry-4-ampere", "a 9-term accumulator (Ampere) needs 4 carry bits", f"{V}, Table 4 row 8",
              "sat", _carry_pair(amp4, amp3, 8), (_NO_ANSWER, _NO_ANSWER)),
        Query("markidis-vs-ootomo", "Property 5: Ootomo-Yokota less accurate than Markidis on some input",
              f"{V}, sec. 6", "sat", _markidis_ootomo(False), (None, 300.0), slow=True),
        Query("markidis-vs-ootomo-table5", "Property 5 with Table 5's outcome: exact = Markidis = 1 + 2^-23, "
              "Ootomo-Yokota = 1", f"{V}, Table 5", "sat", _markidis_ootomo(True)),
        # beyond the paper
        Query("order-independence", "proof: the V100 unit's result does not depend on the order of its "
              "products", "blockfma", "unsat", _pair_proof(v100, v100, 4, order_b=[3, 2, 1, 0]), slow=True),
        Query("v100-carry-3", "with products in [1, 4) (the presets), 3 carry bits are not enough for V100",
              "blockfma", "sat", _carry_pair(v100, v100.replace(carry_bits=3, name="V100, 3 carry bits"), 4)),
        Query("v100-carry-4", "proof: with products in [1, 4), 4 carry bits suffice for V100", "blockfma",
              "unsat", _pair_proof(v100, v100.replace(carry_bits=4), 4)),
        Query("m8n8k4-fp16-c", "Volta m8n8k4 with fp16 C: an input whose result depends on reading a subnormal "
              "fp16 C at exponent -14 (MMA-Sim) or at its own", "blockfma (MMA-Sim's reading)", "sat",
              _fp16_c_reading()),
        Query("b200-mxf4-f35-vs-f36", "B200 tcgen05.mxf4: an input whose fp32 result tells an accumulator of "
              "F = 35 fraction bits (the preset) from one of 36", "blockfma (docs/blackwell.md)", "sat",
              _accumulator_query((35, 36))),
        Query("b200-mxf4-f34-to-f37", "B200 tcgen05.mxf4: one input with four different results for F = 34, 35, "
              "36 and 37 (DeepGEMM issue 176's question)", "blockfma (docs/blackwell.md)", "sat",
              _accumulator_query((34, 35, 36, 37))),
    ]
    return {q.name: replace(q, expected_seconds=_BITWUZLA_SECONDS.get(q.name)) for q in qs}


# bitwuzla 0.9.1's seconds on a 2-core machine (benchmarks/bench_smt.py; docs/smt.md's table)
_BITWUZLA_SECONDS = {
    "exact-multiplication": 0.033,
    "exact-addition-fp16": 0.29,
    "rounding-final-result": 0.034,
    "rounding-accumulator": 0.14,
    "accumulation-order": 0.68,
    "normalisation": 2.8,
    "carry-3": 1.1,
    "carry-4-as-3": 2.1,
    "carry-4-ampere": 4.3,
    "markidis-vs-ootomo": 22.5,
    "markidis-vs-ootomo-table5": 3.6,
    "order-independence": 48.9,
    "v100-carry-3": 0.86,
    "v100-carry-4": 0.92,
    "m8n8k4-fp16-c": 0.47,
    "b200-mxf4-f35-vs-f36": 0.85,
    "b200-mxf4-f34-to-f37": 5.6}


_QUERIES: dict[str, Query] | None = None


def queries() -> list[Query]:
    """Every named query, in the paper's order, then those beyond it."""
    global _QUERIES
    if _QUERIES is None:
        _QUERIES = _registry()
    return list(_QUERIES.values())


def get(name: str) -> Query:
    """The query named ``name`` (an ArgumentError naming the closest one otherwise)."""
    table = {q.name: q for q in queries()}
    if not isinstance(name, str) or name.strip() not in table:
        close = difflib.get_close_matches(name, list(table), n=1) if isinstance(name, str) else []
        raise ArgumentError("name", name, "is not a named query", use={"name": close[0]} if close else None,
                            fix=f"the queries are: {', '.join(table)}")
    return table[name.strip()]


def run(name: str, *, solver: str = "auto", timeout: float | None = TIMEOUT, progress: Any = None) -> QueryResult:
    """Answer one named query; the witness (if any) is checked by the engine.  ``timeout``: seconds for the
    solver (default 60; None or ``math.inf``: no limit); a query that runs out says how long it takes with
    bitwuzla.  ``progress`` (None: on a terminal) announces the query and its expected time first."""
    q = get(name)
    timeout = seconds("timeout", timeout)
    say = reporter(progress)
    solver_name = _solve.pick(solver)
    if say is not None:
        expect = "" if q.expected_seconds is None else f"; about {q.expected_seconds:g} s with bitwuzla"
        say(f"{q.name}: asking {solver_name} (limit {'none' if timeout is None else f'{timeout:g} s'}{expect})")
    form, variables, finish = q.build()
    out = _solve.check(form, variables, solver=solver_name, timeout=timeout)
    spent = out.seconds
    if out.status == "sat":
        try:
            lines, shown = finish(out), True
        except NotShown as e:
            lines, shown = [str(e)], False
        return QueryResult(q.name, "sat", q.expected, q.expected == "sat" and shown, out.solver, spent, lines)
    if out.status == "unsat":
        lines = ["proved: no input satisfies the query"] if q.expected == "unsat" else ["no witness exists"]
        return QueryResult(q.name, "unsat", q.expected, q.expected == "unsat", out.solver, spent, lines)
    hint = "" if q.expected_seconds is None else \
        f"; with bitwuzla it takes about {q.expected_seconds:g} s on a 2-core machine: pass a longer timeout"
    return QueryResult(q.name, "unknown", q.expected, False, out.solver, spent,
                       [f"gave up after {spent:.1f} s ({out.reason}){hint}"])
