"""Formal models in SMT: inputs that tell two designs apart, proofs that two behave the same, worst errors.

The encoding (:mod:`.encode`) writes a Model's d = a·b + c as a bit-vector formula over the inputs' bit
patterns, the formal twin of the exact reference; :mod:`.solve` hands it to z3, cvc5 or bitwuzla.

    discriminate(model_a, model_b, *, k=None, timeout=60, constraints=None)  -> Witness or None
    equivalent(model_a, model_b, *, k=None, timeout=60)                      -> Verdict (proved/refuted/unknown)
    worst_error(model, *, k, reference="exact", constraints=None)             -> WorstError
    queries() / query(name)                                                  the seed's named queries
"""

from . import constraints, queries
from .api import EncodingError, Verdict, WorstError, Witness, default_k, discriminate, equivalent, worst_error
from .encode import unsupported
from .solve import SOLVERS, available

__all__ = ["constraints", "queries", "discriminate", "equivalent", "worst_error", "Witness", "Verdict", "WorstError",
           "EncodingError", "unsupported", "SOLVERS", "available", "default_k"]
