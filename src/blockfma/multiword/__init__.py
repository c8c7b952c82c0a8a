"""Accurate matrix products from low-precision units: multiword (Fasi et al.), Markidis, Ootomo-Yokota,
3xTF32/4xTF32 and TF64 (Valero-Lara et al.), bf16x9, FABsum, and the Ozaki schemes, with error metrics and
bounds.  Every method runs its word products on a simulated unit (a device preset's Model) by default, or
on real units through torch with ``backend="hardware"`` (:mod:`.hardware`).

    split(A, fmt, p, *, scale=0)              the words of A (Fasi et al., eq. 2.2)
    matmul(A, B, *, method, device=None, model=None, backend=None, summation=None, block=None, order=None,
           progress=None)                     (RangeWarning, OverflowWarning: see its docstring)
    errors(C_hat, C, A, B)                    componentwise (eq. 3.1) and normwise errors
    reference(A, B, exact=False)              float64, or correctly rounded exact products
    bound(method, n, ...)                     Theorem 2.1, Table 2.1, FABsum and probabilistic bounds
    matmul(A, B, accuracy="fp64", explain=False)   the fastest method meeting DGEMM's bound ("fp32": SGEMM's,
                                              or a number) on this device and shape, chosen, then run
    choose(m, k, n, *, accuracy, device=None, backend=None, data=None)   that choice as a Choice record
                                              (method, parameters, predicted error and time, the rejected
                                              alternatives and why; .explain()), on a card's RATES
    with accurate("fp64", dtypes=(torch.float64,), backend="hardware"): ...   torch's matmuls of those
                                              dtypes through the chosen methods; .log says what ran
    registry.REGISTRY                         every method as a frozen object (its parameters, sources),
                                              which bound, choose, matmul and the CLI read
"""

from . import bounds, hardware, metrics, ozaki, registry
from .bounds import bound
from .choose import RATES, Choice, Option, Rates, choose
from .methods import METHODS, TF64_UNIT, Method, OverflowWarning, matmul, methods, unit_model
from .metrics import errors, reference
from .split import RangeWarning, split
from .switch import Accurate, accurate

__all__ = ["bounds", "hardware", "metrics", "ozaki", "registry", "bound", "errors", "reference", "matmul", "methods",
           "METHODS", "Method", "split", "RangeWarning", "OverflowWarning", "unit_model", "TF64_UNIT",
           "choose", "Choice", "Option", "Rates", "RATES", "accurate", "Accurate"]
