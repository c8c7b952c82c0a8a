"""Formal models in SMT: inputs that tell two designs apart, proofs that two behave the same, worst errors.

The encoding (:mod:`.encode`) writes a Model's d = a·b + c as a bit-vector formula over the inputs' bit
patterns, the formal twin of the exact reference; :mod:`.solve` hands it to z3, cvc5 or bitwuzla.

    discriminate(model_a, model_b, *, k=None, timeout=60, constraints=None)
        -> Witness (found), None (proved: no input tells them apart), or a falsy Verdict with status
           "unknown" (time-out, give-up) or "vacuous" (no input meets the constraints); never None for those
    equivalent(model_a, model_b, *, k=None, timeout=60, constraints=None)
        -> Verdict: "proved" (the only truthy one), "refuted" (with a witness), "unknown" or "vacuous"
    worst_error(model, *, k=None, timeout=60, total_timeout=600, progress=None) -> WorstError
        status "exact" (bound proved) or "lower bound" (the search stopped first); minutes with the defaults
    queries.queries() / queries.run(name, *, timeout=60)   the seed's named queries
    queries.separate(models, *, k=None, constraints=None) -> one input on which all the models differ
    queries.accumulator_inputs(model, (34, 35, 36, 37)) -> inputs that read a unit's F (docs/blackwell.md)

Two models compared share A's, B's and the output format, their C formats may differ (``shared_c_format``),
and block-scaled models take their scales as free inputs (witnesses carry ``scale_a`` and ``scale_b``):
docs/smt.md, "The questions", and docs/blackwell.md, "The SMT encoding of block-scaled MMA".

``timeout`` is seconds per solver query everywhere (default :data:`blockfma.arguments.TIMEOUT`, 60 s; None or
``math.inf``: no limit); ``k`` is at most :data:`MAX_K`.  Every result has ``to_json()``.  Bad arguments raise
:class:`~blockfma.arguments.ArgumentError` naming the argument, its value and the fix.
"""

from . import constraints, queries
from .api import (MAX_K, TOTAL_TIMEOUT, EncodingError, Verdict, WorstError, Witness, default_k, discriminate,
                  equivalent, shared_c_format, worst_error)
from .encode import unsupported
from .solve import SOLVERS, available, installed

__all__ = ["constraints", "queries", "discriminate", "equivalent", "worst_error", "Witness", "Verdict", "WorstError",
           "EncodingError", "unsupported", "SOLVERS", "available", "installed", "default_k", "MAX_K",
           "TOTAL_TIMEOUT", "shared_c_format"]
