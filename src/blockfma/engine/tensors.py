"""``gemm`` on torch tensors where they lie: A, B, C checked on their device only where the dtype does not
guarantee the model's formats, run by an engine that takes tensors (Triton), D finished there as
:func:`blockfma.engine.api.finish` writes it.  No operand or D is copied to the host; calls it does not
take (:func:`gemm` returns None) go to the host (:func:`to_host`) as numpy calls do."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from .. import formats as _formats
from ..model import Model, NaNStyle
from ..plan import plan
from . import registry, rules
from . import triton as _triton
from .base import Operands

__all__ = ["given", "holds", "check", "finish", "gemm", "to_host", "DTYPES"]

#: format -> the torch dtype (by name) that stores its values
DTYPES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32", "fp64": "float64", "e4m3fn": "float8_e4m3fn",
          "e5m2": "float8_e5m2", "e4m3fnuz": "float8_e4m3fnuz", "e5m2fnuz": "float8_e5m2fnuz"}
_FORMATS = {dtype: fmt for fmt, dtype in DTYPES.items()}


def given(*xs: Any) -> bool:
    """Whether some of ``xs`` are torch tensors and the others None."""
    torch = sys.modules.get("torch")  # a tensor implies torch imported
    return torch is not None and all(x is None or isinstance(x, torch.Tensor) for x in xs) and any(
        x is not None for x in xs)


def holds(fmt: _formats.Format, dtype: Any) -> bool:
    """Whether every code of the torch ``dtype`` is a value of ``fmt`` (fp16 tensors, fp32 input): no look."""
    native = _FORMATS.get(str(dtype).removeprefix("torch."))
    return native is not None and _formats.holds_codes(fmt, native)


def check(fmt: _formats.Format, x: Any, what: str) -> bool:
    """True where ``x`` holds values of ``fmt`` only: at once where its dtype guarantees it, else on x's device
    (each value a multiple of its last place in ``fmt``, within its range; one small read back), ValueError
    naming the first value ``fmt`` does not hold; False for a tensor not of floats (the host checks)."""
    if holds(fmt, x.dtype):
        return True
    torch = sys.modules["torch"]
    if not x.is_floating_point():
        return False
    v = x if x.dtype == torch.float64 else x.float()
    e = torch.clamp(torch.frexp(v).exponent - fmt.precision, min=fmt.emin - fmt.precision + 1)  # the last place
    ok = ((v / torch.ldexp(torch.ones_like(v), e)).frac() == 0) & (v.abs() <= fmt.max)
    ok |= (torch.isinf(v) & fmt.has_infinities) | (torch.isnan(v) & fmt.has_nan)
    if not fmt.has_negative_zero or not fmt.signed:
        ok &= ~(torch.signbit(v) & ((v == 0) | (not fmt.signed)))
    if bool(ok.all()):
        return True
    idx = tuple((~ok).nonzero()[0].tolist())
    raise ValueError(f"{what}{_formats.index_text(idx)} = {float(x[idx])!r} is not representable in {fmt.name}; "
                     f"round it first with blockfma.formats.round({fmt.name!r}, x) or pass round_inputs='rne' (or "
                     "'device' to read it as the device does)")


def finish(model: Model, d: Any) -> Any:
    """float32 results ``d`` of ``model``'s output format as a tensor of its dtype there, written as
    :func:`blockfma.engine.api.finish` writes them (computed zeros +0 under ``rounded_zero="positive"``, each
    NaN the model's pattern) with no read back; None for outputs beyond binary32 or ``nan="propagate"``."""
    fmt, torch = model.output_format, sys.modules["torch"]
    if fmt.name not in DTYPES or fmt.bits > 32 or model.nan is NaNStyle.PROPAGATE:
        return None
    if model.rounded_zero == "positive":
        d = torch.where(d == 0, torch.zeros_like(d), d)
    out = d.to(getattr(torch, DTYPES[fmt.name])).view(getattr(torch, f"int{fmt.bits}"))  # exact
    code = rules.nan_bits(fmt, model.nan)
    code -= (code >> (fmt.bits - 1)) << fmt.bits  # as a signed integer
    return torch.where(torch.isnan(d), torch.full_like(out, code), out).view(getattr(torch, DTYPES[fmt.name]))


def gemm(model: Model, A: Any, B: Any, C: Any, backend: str, check_values: bool = True) -> tuple[Any, str] | None:
    """(D, the engine's name) of ``bf.gemm`` on 2-D tensors of one device, run where they lie, D of the output
    format's dtype there; None where the host runs the call (no engine takes the tensors, shapes the host
    reports on, a check only the host makes, a model that flushes, an output :func:`finish` does not write)."""
    torch, checked = sys.modules["torch"], zip((model.input_format, model.b_format, model.c_format), (A, B, C), "ABC")
    C = torch.zeros((1, 1), device=A.device) if C is None else C  # read with strides 0: no pass over D
    if (A.dim() != 2 or B.dim() != 2 or A.shape[1] != B.shape[0] or 0 in (*A.shape, B.shape[1]) or not
            model.subnormals or model.block_scaled or len({A.device, B.device, C.device}) > 1 or
            finish(model, torch.zeros(0, device=A.device)) is None):
        return None
    (m, k), n = A.shape, B.shape[1]
    try:
        C2 = C.expand(m, n)
    except RuntimeError:
        return None
    p = plan(model, k)
    engine = registry.choose(p, Operands.matrix(A, B, C2), backend)
    if engine is None or not engine.tensors:
        return None
    if check_values and not all(check(f, x, what) for f, x, what in checked if x is not None):  # no C: no check
        return None
    keep = _triton.OPERAND_DTYPES if _triton.STORAGE_LOADS else ("float32",)
    ab = [x.detach() if str(x.dtype).removeprefix("torch.") in keep else x.detach().float() for x in (A, B)]
    D = engine.run(p, Operands.matrix(*ab, C2.detach().float()))  # exact: values within binary32
    return finish(model, D[0]), engine.name


def to_host(x: Any) -> Any:
    """A tensor's values as a numpy array, bits unchanged (bf16 and fp8 as ml_dtypes); anything else as given."""
    if not given(x):
        return x
    x = x.detach().to("cpu").contiguous()
    name = _FORMATS.get(str(x.dtype).removeprefix("torch."))
    if name is None or x.dtype.itemsize not in (1, 2) or name == "fp16":
        return x.numpy()
    ints = sys.modules["torch"].int8 if x.dtype.itemsize == 1 else sys.modules["torch"].int16
    return x.view(ints).numpy().view(np.dtype(_formats.get(name).dtype))
