"""PyTorch with another device's arithmetic: ``bf.torch.emulate`` (torch's matmuls through ``bf.gemm`` with a
device's models, forward and backward), ``bf.torch.divergence`` (a module's layers across devices and against
float64) and ``bf.torch.mx`` (MXFP8, MXFP4 and NVFP4 quantisers and scale layouts); docs/torch.md.  This
package imports torch; ``import blockfma`` does not (``bf.torch`` loads on first use).
"""

from __future__ import annotations

from ..optional import require

require("torch", extra="torch", needed_by="blockfma.torch")

from .divergence import Divergence, divergence, ulps  # noqa: E402
from . import mx  # noqa: E402
from .emulate import Emulation, Op, Route, emulate  # noqa: E402

__all__ = ["emulate", "Emulation", "Op", "Route", "divergence", "Divergence", "ulps", "mx"]
