"""Where a target runs: torch imported with its install hint, the torch device a backend name picks, and
the metadata of the device (GPU name, compute capability, driver and library versions).

The probe targets (:mod:`.targets`), the order prober's torch target (:mod:`.order.targets`) and the
multiword hardware units (:mod:`blockfma.multiword.hardware`) all go through these.  Two views of a device
are kept, each the one its records were written with: :func:`gpu_metadata` (GPU 0 as CuPy and torch see it:
the probe records, ``compute_capability`` as ``"90"``) and :func:`device_info` (one torch device, GPU or
CPU: the multiword records, ``compute_capability`` as ``"9.0"``).

    >>> torch_device("torch:cpu")
    device(type='cpu')
"""

from __future__ import annotations

from typing import Any

from ..optional import hint, require
from ..provenance import cpu_name, device_info

__all__ = ["TORCH_HINT", "TORCH_DTYPES", "import_torch", "is_torch", "torch_device", "device_info", "gpu_metadata",
           "cpu_name"]

TORCH_HINT = hint("torch")
TORCH_DTYPES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}
"""The torch dtype (a ``torch`` attribute) of each blockfma format that torch's matmuls take."""


def import_torch(needs: str = "backend='torch'") -> Any:
    """The torch module, or an ImportError saying that ``needs`` needs PyTorch and how to install it."""
    return require("torch", extra="torch", needed_by=needs, what="PyTorch, which is not installed")


def is_torch(backend: Any) -> bool:
    """Whether ``backend`` names the torch hardware backend ("torch", "torch:cpu", "torch:cuda[:N]")."""
    return isinstance(backend, str) and backend.strip().lower().partition(":")[0] == "torch"


def torch_device(backend: str) -> Any:
    """The torch device ``backend`` names: "torch" is "cuda" where ``torch.cuda.is_available()``, else "cpu";
    "torch:cpu", "torch:cuda" (the current GPU) and "torch:cuda:N" name one.  ValueError otherwise."""
    if not is_torch(backend):
        raise ValueError(f"backend={backend!r} does not name torch; use 'torch', 'torch:cuda' or 'torch:cpu'")
    torch = import_torch()
    name = backend.strip().lower()
    spec = name[len("torch:"):] if name != "torch" else ("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(spec)
    except (RuntimeError, ValueError):
        dev = None
    if dev is None or dev.type not in ("cpu", "cuda"):
        raise ValueError(f"backend={backend!r}: {spec!r} is not a device here; use 'torch', 'torch:cuda[:N]' "
                         "or 'torch:cpu'")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"backend={backend!r} needs a CUDA GPU, and torch {torch.__version__} sees none "
                             "(torch.cuda.is_available() is False); use 'torch:cpu' or the simulator")
        index = torch.cuda.current_device() if dev.index is None else dev.index
        if index >= torch.cuda.device_count():
            raise ValueError(f"backend={backend!r}: there are {torch.cuda.device_count()} CUDA devices "
                             f"(0 to {torch.cuda.device_count() - 1})")
        dev = torch.device("cuda", index)
    return dev


def gpu_metadata() -> dict[str, Any]:
    """GPU name, compute capability, driver and CUDA versions, as far as CuPy or torch can tell."""
    out: dict[str, Any] = {}
    try:
        import cupy as cp

        props = cp.cuda.runtime.getDeviceProperties(0)
        out.update(gpu=props["name"].decode(), compute_capability=f"{props['major']}{props['minor']}",
                   cuda_runtime=cp.cuda.runtime.runtimeGetVersion(), cuda_driver=cp.cuda.runtime.driverGetVersion(),
                   cupy=cp.__version__)
    except Exception:  # noqa: BLE001 - metadata only: whatever can be read
        pass
    try:
        import torch

        if torch.cuda.is_available():
            out.setdefault("gpu", torch.cuda.get_device_name(0))
            out["torch"] = torch.__version__
            out["torch_cuda"] = torch.version.cuda
    except Exception:  # noqa: BLE001
        pass
    return out
