"""Probes: measure a matrix unit through a black box and infer its Model, verified in a closed loop.

The data path inside (docs/probes.md): :mod:`~blockfma.probes.targets` (one protocol for the simulator, any callable,
this GPU's ``mma.sync`` through :mod:`~blockfma.probes.cuda`, and ``torch``) -> :mod:`~blockfma.probes.features` (the
feature tests as data; :mod:`~blockfma.probes.seeds` the seeds' published cases) -> :mod:`~blockfma.probes.infer`
(candidate Models narrowed, separated, verified) -> :mod:`~blockfma.probes.findings` (the feature-table row, the
verified Model, a device record). :mod:`~blockfma.probes.order` infers the summation tree of a whole GEMM over K
(FPRev's method); :mod:`~blockfma.probes.scaled` and :mod:`~blockfma.probes.blackwell` probe block-scaled units.

    >>> import blockfma as bf
    >>> f = bf.probe("sim:V100", "fp16", "fp32", verify=500)
    >>> f.model() == bf.device("V100").model("fp16", "fp32")
    True
"""

from .findings import Findings, ProbeError, probe
from .targets import Target, TargetError, target

__all__ = ["probe", "Findings", "ProbeError", "target", "Target", "TargetError"]
