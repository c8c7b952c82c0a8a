"""Solvers: one call, ``check(assertions, variables, solver=..., timeout=...)``, for z3, cvc5 and bitwuzla.

Formulas are built with z3's Python API (z3-solver is a core dependency) in the bit-vector theory; cvc5 and
bitwuzla read the same formula as SMT-LIB 2 text (``z3.Solver.to_smt2``), so every solver answers the very
same question.  cvc5 and bitwuzla are optional (``pip install 'blockfma[smt]'``).  ``solver="auto"`` takes
the fastest one installed for bit-vector queries by benchmarks/bench_smt.py's measurements on a 2-core
machine (bitwuzla, then cvc5, then z3).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import z3

from .. import optional

__all__ = ["SOLVERS", "Outcome", "available", "pick", "check"]

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
    if solver == "z3":
        return True
    if solver not in _INSTALL:
        raise ValueError(f"unknown solver {solver!r}; choose one of {', '.join(SOLVERS)} or 'auto'")
    return optional.available(solver)


def pick(solver: str = "auto") -> str:
    """The solver ``solver`` names, checked to be installed; "auto": the first installed of SOLVERS."""
    if solver == "auto":
        return next(s for s in SOLVERS if available(s))
    if not available(solver):
        raise ImportError(f"solver {solver!r} is not installed; install it with: {_INSTALL[solver]} "
                          f"(or: {optional.hint('smt')})")
    return solver


def _smt2(assertions: Sequence[z3.BoolRef]) -> str:
    s = z3.Solver()
    s.add(*assertions)
    return "(set-logic QF_BV)\n" + s.to_smt2().replace("(check-sat)", "")


def _z3(assertions: Sequence[z3.BoolRef], variables: Sequence[z3.BitVecRef], timeout: float
        ) -> tuple[str, dict[str, int], str]:
    s = z3.SolverFor("QF_BV")
    s.set("timeout", max(1, int(timeout * 1000)))
    s.add(*assertions)
    r = s.check()
    if r == z3.sat:
        m = s.model()
        return "sat", {str(v): m.eval(v, model_completion=True).as_long() for v in variables}, ""
    if r == z3.unsat:
        return "unsat", {}, ""
    return "unknown", {}, s.reason_unknown()


def _bitwuzla(assertions: Sequence[z3.BoolRef], variables: Sequence[z3.BitVecRef], timeout: float
              ) -> tuple[str, dict[str, int], str]:
    import bitwuzla as bw

    tm = bw.TermManager()
    opts = bw.Options()
    opts.set(bw.Option.PRODUCE_MODELS, True)
    opts.set(bw.Option.TIME_LIMIT_PER, max(1, int(timeout * 1000)))
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


def _cvc5(assertions: Sequence[z3.BoolRef], variables: Sequence[z3.BitVecRef], timeout: float
          ) -> tuple[str, dict[str, int], str]:
    import cvc5

    tm = cvc5.TermManager()
    slv = cvc5.Solver(tm)
    slv.setOption("produce-models", "true")
    slv.setOption("tlimit-per", str(max(1, int(timeout * 1000))))
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
          timeout: float = 60.0) -> Outcome:
    """Is the conjunction of ``assertions`` satisfiable?  The values of ``variables`` (bit-vectors) when it
    is; "unknown" when the solver gives up or ``timeout`` seconds pass."""
    if timeout <= 0:
        raise ValueError(f"timeout must be positive, not {timeout!r} seconds")
    name = pick(solver)
    start = time.perf_counter()
    status, values, reason = _BACKENDS[name](list(assertions), list(variables), float(timeout))
    seconds = time.perf_counter() - start
    if status == "unknown" and not reason:
        reason = "timeout"
    return Outcome(status, name, seconds, values, reason)
