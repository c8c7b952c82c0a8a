"""Solvers: one call, ``check(assertions, variables, solver=..., timeout=...)``, for z3, cvc5 and bitwuzla.

Formulas are built with z3's Python API (z3-solver is a core dependency) in the bit-vector theory; cvc5 and bitwuzla
read the same formula as SMT-LIB 2 text (``z3.Solver.to_smt2``), so every solver answers the very same question.  cvc5
and bitwuzla are optional (``pip install 'blockfma[smt]'``).  ``solver="auto"`` takes the fastest one installed for
bit-vector queries by benchmarks/bench_smt.py's measurements on a 2-core machine (bitwuzla, then cvc5, then z3).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import z3

from .. import optional
from ..arguments import TIMEOUT, ArgumentError, choice, seconds

__all__ = ["SOLVERS", "Outcome", "available", "installed", "pick", "check"]

SOLVERS = ("bitwuzla", "cvc5", "z3")  # the order "auto" tries them in: fastest first (bench_smt.py)
_INSTALL = {"cvc5": "pip install cvc5", "bitwuzla": "pip install bitwuzla"}


@dataclass(frozen=True)
class Outcome:
    """A solver's answer: ``status`` "sat" (``values`` holds every variable's bits), "unsat" or "unknown"
    (time-out or give-up, ``reason`` says which), after ``seconds``."""

    status: str
    solver: str
    seconds: float
    values: dict[str, int] = field(default_factory=dict)
    reason: str = ""


def available(solver: str) -> bool:
    """Whether a solver's Python package is installed."""
    solver = choice("solver", solver, SOLVERS)
    return solver == "z3" or optional.available(solver)


def installed() -> list[str]:
    """The solvers installed here, in the order "auto" tries them."""
    return [s for s in SOLVERS if available(s)]


def pick(solver: str = "auto") -> str:
    """The solver ``solver`` names ("auto", "bitwuzla", "cvc5" or "z3", any case), checked to be installed; "auto": the
    first installed of SOLVERS.  An :class:`~blockfma.arguments.ArgumentError` names the installed ones otherwise."""
    have = installed()
    name = choice("solver", solver, ("auto",) + SOLVERS)
    if name == "auto":
        return have[0]
    if name not in have:
        raise ArgumentError("solver", solver, "is not installed here",
                            fix=f"installed: {', '.join(have)} (or 'auto'); install it with {_INSTALL[name]} "
                                f"(or {optional.hint('smt')})")
    return name


def _smt2(assertions: Sequence[z3.BoolRef]) -> str:
    s = z3.Solver()
    s.add(*assertions)
    return "(set-logic QF_BV)\n" + s.to_smt2().replace("(check-sat)", "")


_MAX_MS = 2**31 - 1  # the solvers keep limits in 32 bits: bitwuzla and cvc5 gave up at once on 10**10 s


def _ms(timeout: float) -> int:
    """A time limit in whole milliseconds, at least 1 (0 means "no limit" to every solver)."""
    return max(1, int(timeout * 1000))


def _z3(assertions: Sequence[z3.BoolRef], variables: Sequence[z3.BitVecRef], timeout: float | None
        ) -> tuple[str, dict[str, int], str]:
    s = z3.SolverFor("QF_BV")
    if timeout is not None:
        s.set("timeout", _ms(timeout))
    s.add(*assertions)
    r = s.check()
    if r == z3.sat:
        m = s.model()
        return "sat", {str(v): m.eval(v, model_completion=True).as_long() for v in variables}, ""
    if r == z3.unsat:
        return "unsat", {}, ""
    return "unknown", {}, s.reason_unknown()


def _bitwuzla(assertions: Sequence[z3.BoolRef], variables: Sequence[z3.BitVecRef], timeout: float | None
              ) -> tuple[str, dict[str, int], str]:
    import bitwuzla as bw

    tm = bw.TermManager()
    opts = bw.Options()
    opts.set(bw.Option.PRODUCE_MODELS, True)
    if timeout is not None:
        opts.set(bw.Option.TIME_LIMIT_PER, _ms(timeout))
    parser = bw.Parser(tm, opts)
    parser.parse(_smt2(assertions), True, False)
    slv = parser.bitwuzla()
    r = slv.check_sat()
    if r == bw.Result.SAT:
        declared = {f.symbol(): f for f in parser.get_declared_funs()}
        names = [str(v) for v in variables]
        return "sat", {n: int(slv.get_value(declared[n]).value(10)) if n in declared else 0 for n in names}, ""
    if r == bw.Result.UNSAT:
        return "unsat", {}, ""
    return "unknown", {}, "timeout"


def _cvc5(assertions: Sequence[z3.BoolRef], variables: Sequence[z3.BitVecRef], timeout: float | None
          ) -> tuple[str, dict[str, int], str]:
    import cvc5

    tm = cvc5.TermManager()
    slv = cvc5.Solver(tm)
    slv.setOption("produce-models", "true")
    if timeout is not None:
        slv.setOption("tlimit-per", str(_ms(timeout)))
    sm = cvc5.SymbolManager(tm)
    parser = cvc5.InputParser(slv, sm)
    parser.setStringInput(cvc5.InputLanguage.SMT_LIB_2_6, _smt2(assertions), "blockfma")
    while True:
        cmd = parser.nextCommand()
        if cmd.isNull():
            break
        cmd.invoke(slv, sm)
    r = slv.checkSat()
    if r.isSat():
        declared = {str(t): t for t in sm.getDeclaredTerms()}
        names = [str(v) for v in variables]
        return "sat", {n: int(slv.getValue(declared[n]).getBitVectorValue(10)) if n in declared else 0
                       for n in names}, ""
    if r.isUnsat():
        return "unsat", {}, ""
    return "unknown", {}, str(r.getUnknownExplanation()).lower()


_BACKENDS = {"z3": _z3, "bitwuzla": _bitwuzla, "cvc5": _cvc5}


def check(assertions: Sequence[z3.BoolRef], variables: Sequence[z3.BitVecRef], *, solver: str = "auto",
          timeout: float | None = TIMEOUT) -> Outcome:
    """Is the conjunction of ``assertions`` satisfiable?  The values of ``variables`` (bit-vectors) when it
    is; "unknown" when the solver gives up or ``timeout`` seconds pass (None or ``math.inf``: no limit;
    limits are passed to the solver in whole milliseconds, at least 1; over 2**31 - 1 ms, about 24 days, they
    are no limit, which the solvers cannot hold)."""
    timeout = seconds("timeout", timeout)
    if timeout is not None and timeout * 1000 > _MAX_MS:  # over 24 days: no limit (the solvers cannot hold it)
        timeout = None
    name = pick(solver)
    start = time.perf_counter()
    status, values, reason = _BACKENDS[name](list(assertions), list(variables), timeout)
    spent = time.perf_counter() - start
    if status == "unknown" and not reason:
        reason = "timeout"
    return Outcome(status, name, spent, values, reason)
