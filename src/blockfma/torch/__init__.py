"""PyTorch with another device's arithmetic: ``bf.torch.emulate``, ``bf.torch.divergence``, ``bf.torch.mx``.

``with bf.torch.emulate("MI300X"): model(x)`` runs torch's matmuls (``@``, ``matmul``, ``mm``, ``bmm``,
``addmm``, ``baddbmm``, ``F.linear``, the two matmuls of ``F.scaled_dot_product_attention``, and fp8, MXFP8,
MXFP4 and NVFP4 ``torch._scaled_mm`` / ``F.scaled_mm``) through ``bf.gemm`` (or, for tensors on a GPU, the
Triton kernel there) with the device's models, forward and backward; ``bf.torch.divergence`` compares a
module's layers across devices and against a float64 reference; ``bf.torch.mx`` quantises to MXFP8, MXFP4
and NVFP4 and converts block scales between the plain layout and cuBLAS's swizzled one.  This package
imports torch; ``import blockfma`` does not (``bf.torch`` loads on first use).
"""

from __future__ import annotations

from ..optional import require

require("torch", extra="torch", needed_by="blockfma.torch")

from .divergence import Divergence, divergence, ulps  # noqa: E402
from . import mx  # noqa: E402
from .emulate import Emulation, Op, Route, emulate  # noqa: E402

__all__ = ["emulate", "Emulation", "Op", "Route", "divergence", "Divergence", "ulps", "mx"]
