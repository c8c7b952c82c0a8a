"""Accurate matrix products from low-precision units: multiword (Fasi et al.), Markidis, Ootomo-Yokota,
3xTF32/4xTF32 and TF64 (Valero-Lara et al.), bf16x9, FABsum, and the Ozaki schemes, with error metrics and
bounds (docs/multiword.md).  Every method runs its word products on a simulated unit (a device preset's
Model) by default, or on real units through torch with ``backend="hardware"`` (:mod:`.hardware`).

:func:`matmul` runs a method (or, with ``accuracy=``, the fastest that :func:`choose` finds meeting it);
:func:`split` makes the words, :func:`errors` and :func:`reference` measure, :func:`bound` bounds;
:func:`accurate` routes torch's matmuls through the chosen methods; :data:`registry.REGISTRY` holds every
method as a frozen object.
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
