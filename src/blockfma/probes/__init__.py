"""Probes: measure a matrix unit through a black box and infer its Model, verified in a closed loop.

The data path inside: :mod:`~blockfma.probes.targets` (one protocol for the simulator, any callable, this
GPU's ``mma.sync`` through :mod:`~blockfma.probes.cuda`, and ``torch``; the same protocol, ``BlackBox``, under
the order prober's targets and the multiword hardware units; :mod:`~blockfma.probes.runtime` imports torch and
describes the device) -> :mod:`~blockfma.probes.features`
(the feature tests as data, built from the formats; :mod:`~blockfma.probes.seeds` holds the seeds' published
cases) -> :mod:`~blockfma.probes.infer` (candidate Models narrowed stage by stage, separated by simulated
inputs, verified on random and adversarial rows) -> :mod:`~blockfma.probes.findings` (the feature-table row,
the verified Model, a device record).  :mod:`~blockfma.probes.order` infers the summation tree of a whole
GEMM over K (FPRev's method), e.g. what ``torch.matmul`` does with split-K.  Block-scaled units (B200
``tcgen05`` and RTX 5090 ``mma`` mxf8f6f4, mxf4, mxf4nvf4 kinds) take scales with their rows:
:mod:`~blockfma.probes.scaled` (a target that takes scales, the feature tests of the scale path, the
inference of a ``scaled-fused`` Model) and :mod:`~blockfma.probes.blackwell` (the sm_120a ``mma.sync
... block_scale`` kernels and their register layouts).

    >>> import blockfma as bf
    >>> f = bf.probe("sim:V100", "fp16", "fp32", verify=500)
    >>> f.model() == bf.device("V100").model("fp16", "fp32")
    True
"""

from .findings import Findings, ProbeError, probe
from .targets import Target, TargetError, target

__all__ = ["probe", "Findings", "ProbeError", "target", "Target", "TargetError"]
