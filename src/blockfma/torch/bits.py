"""Tensors to host arrays and back with their bits unchanged, and the NaN codes and zero signs a model gives
(:func:`finish`), for ``bf.torch.emulate``."""

from __future__ import annotations

import numpy as np
import torch

from .. import formats as _formats
from ..engine.api import finish as _finish
from ..model import Model
from .routes import FP8

__all__ = ["to_numpy", "from_numpy", "finish"]


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """A tensor's values on the host in a numpy dtype of the same width, bits unchanged (bf16 as ml_dtypes)."""
    t = t.detach().to("cpu").contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(_formats.get("bf16").dtype)
    if t.dtype in FP8:
        return t.view(torch.uint8).numpy().view(_formats.get(FP8[t.dtype]).dtype)
    return t.numpy()


def from_numpy(x: np.ndarray, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """numpy values of the dtype's format (float16, float32, ml_dtypes bfloat16) as a tensor, bits unchanged."""
    x = np.ascontiguousarray(x)
    if dtype == torch.bfloat16:
        out = torch.from_numpy(x.view(np.int16).copy()).view(torch.bfloat16)
    else:
        out = torch.from_numpy(x.astype(np.dtype(str(dtype).removeprefix("torch.")), copy=True))
    return out.to(device)


def finish(model: Model, d: torch.Tensor, dtype: torch.dtype, *, computed: bool = True) -> torch.Tensor:
    """float32 results of ``model``'s output format (``d``, on any device) as a tensor of ``dtype`` there,
    the NaNs and -0s finished by :func:`blockfma.engine.api.finish` (the model's NaN codes, +0 for
    computed zeros under ``rounded_zero="positive"``; it leaves other values as they are): only those
    entries visit the host."""
    out = d.to(dtype)  # exact: the values are in the format already; NaNs and -0s are rewritten below
    special = torch.isnan(d) | ((d == 0) & torch.signbit(d))
    if bool(special.any()):
        idx = special.nonzero(as_tuple=True)
        done = _finish(model, d[idx].double().cpu().numpy(), computed=computed)
        out = out.clone() if out.data_ptr() == d.data_ptr() else out
        out[idx] = from_numpy(done, dtype, d.device)
    return out
