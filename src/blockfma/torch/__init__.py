"""PyTorch with another device's arithmetic: ``bf.torch.emulate`` and ``bf.torch.divergence``.

``with bf.torch.emulate("MI300X"): model(x)`` runs torch's matmuls (``@``, ``matmul``, ``mm``, ``bmm``,
``addmm``, ``baddbmm``, ``F.linear``, the two matmuls of ``F.scaled_dot_product_attention`` and fp8
``torch._scaled_mm``) through ``bf.gemm`` (or, for tensors on a GPU, the Triton kernel there) with the
device's models, forward and backward; ``bf.torch.divergence`` compares a module's
layers across devices and against a float64 reference.  This package imports torch; ``import blockfma``
does not (``bf.torch`` loads on first use).
"""

from __future__ import annotations

from ..optional import require

require("torch", extra="torch", needed_by="blockfma.torch")

from .divergence import Divergence, divergence, ulps  # noqa: E402
from .emulate import Emulation, Op, Route, emulate  # noqa: E402

__all__ = ["emulate", "Emulation", "Op", "Route", "divergence", "Divergence", "ulps"]
