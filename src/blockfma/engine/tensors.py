"""``gemm`` on torch tensors where they lie: A, B and C checked on their device only where their dtype does
not already guarantee the model's formats, handed to an engine that runs tensors (the Triton kernel), and
D finished there in the output format's dtype, NaN patterns and zero signs written as
:func:`blockfma.engine.api.finish` writes them: no copy of an operand or of D to the host, no read back
but the kernel's own small one (whether some input is NaN or infinite) and, for a dtype that does not
guarantee its format, one per operand checked.  Calls it does not take (:func:`gemm` returns None) run on
the host as numpy calls do."""

from __future__ import annotations

import sys
from typing import Any

from .. import formats as _formats
from ..model import Model, NaNStyle
from ..plan import plan
from . import registry, rules
from .base import Operands

__all__ = ["given", "dtype_format", "holds", "check", "finishes", "finish", "gemm", "DTYPES"]

#: the torch dtypes (by name) of the formats whose values a torch dtype stores exactly
DTYPES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32", "fp64": "float64", "e4m3fn": "float8_e4m3fn",
          "e5m2": "float8_e5m2", "e4m3fnuz": "float8_e4m3fnuz", "e5m2fnuz": "float8_e5m2fnuz"}
_FORMATS = {dtype: fmt for fmt, dtype in DTYPES.items()}


def _torch() -> Any:
    return sys.modules.get("torch")


def given(*xs: Any) -> bool:
    """Whether ``xs`` (None aside) are all torch tensors (torch imported: a tensor implies it)."""
    torch = _torch()
    return torch is not None and all(x is None or isinstance(x, torch.Tensor) for x in xs) and \
        any(x is not None for x in xs)


def dtype_format(dtype: Any) -> _formats.Format | None:
    """The format whose values a torch floating dtype stores (float16: fp16), None for other dtypes."""
    name = _FORMATS.get(str(dtype).removeprefix("torch."))
    return None if name is None else _formats.get(name)


def holds(fmt: _formats.Format, dtype: Any) -> bool:
    """Whether every code of ``dtype`` is a value of ``fmt`` (fp16 tensors for an fp16 or fp32 input): then
    the tensor's values need no look."""
    native = dtype_format(dtype)
    return native is not None and _formats.holds_codes(fmt, native)


def check(fmt: _formats.Format, x: Any, what: str) -> bool:
    """Whether ``x`` holds values of ``fmt`` only, checked on its device: True at once where its dtype
    guarantees it (:func:`holds`); else by a round trip through ``fmt``'s own torch dtype (one pass, one
    small read back), ValueError naming the first value ``fmt`` does not hold; False where neither tells
    (no torch dtype stores ``fmt``, e.g. tf32: the caller checks on the host)."""
    if holds(fmt, x.dtype):
        return True
    torch = _torch()
    own = DTYPES.get(fmt.name)
    if own is None or not x.is_floating_point() or dtype_format(x.dtype) is None:
        return False
    back = x.to(getattr(torch, own)).to(x.dtype)
    ok = (back == x) | (torch.isnan(x) if fmt.has_nan else torch.zeros_like(x, dtype=torch.bool))
    if not fmt.has_negative_zero:
        ok &= ~((x == 0) & torch.signbit(x))
    if bool(ok.all()):
        return True
    idx = tuple((~ok).nonzero()[0].tolist())  # only on the way to the error
    raise ValueError(f"{what}{_formats.index_text(idx)} = {float(x[idx])!r} is not representable in {fmt.name}; "
                     f"round it first with blockfma.formats.round({fmt.name!r}, x) or pass round_inputs='rne' (or "
                     "'device' to read it as the device does)")


def finishes(model: Model) -> bool:
    """Whether :func:`finish` writes ``model``'s results: an output format of a torch dtype within binary32,
    NaNs of one pattern (not ``nan="propagate"``, whose NaNs carry payloads)."""
    fmt = model.output_format
    return fmt.name in DTYPES and fmt.bits <= 32 and model.nan is not NaNStyle.PROPAGATE


def finish(model: Model, d: Any, *, computed: bool = True) -> Any:
    """float32 results ``d`` of ``model``'s output format as a tensor of its dtype on ``d``'s device, as
    :func:`blockfma.engine.api.finish` writes them (every computed zero +0 under ``rounded_zero="positive"``,
    each NaN the model's one pattern), without a read back; None where not :func:`finishes`."""
    fmt, torch = model.output_format, _torch()
    if not finishes(model):
        return None
    own = DTYPES[fmt.name]
    if computed and model.rounded_zero == "positive":
        d = torch.where(d == 0, torch.zeros_like(d), d)
    out = d.to(getattr(torch, own))  # exact: the values are the format's
    code = rules.nan_bits(fmt, model.nan)
    code -= (code >> (fmt.bits - 1)) << fmt.bits  # as the signed integer of the same bits
    ints = {8: torch.int8, 16: torch.int16, 32: torch.int32}[fmt.bits]
    bits = torch.where(torch.isnan(d), torch.full_like(out.view(ints), code), out.view(ints))
    return bits.view(out.dtype)


def _operands(A: Any, B: Any, C: Any) -> tuple[int, Any] | None:
    """(k, C as (m, n)) of 2-D tensors of one device with products to sum, else None."""
    torch = _torch()
    if A.dim() != 2 or B.dim() != 2 or A.shape[1] != B.shape[0] or 0 in (*A.shape, B.shape[1]):
        return None
    (m, k), n = A.shape, B.shape[1]
    if C is None:
        C = torch.zeros((1, 1), dtype=torch.float32, device=A.device)  # read with strides 0: no pass over D
    if len({A.device, B.device, C.device}) > 1:
        return None
    try:
        return k, C.expand(m, n)
    except RuntimeError:
        return None


def gemm(model: Model, A: Any, B: Any, C: Any, backend: str, *, check_values: bool = True) -> tuple[Any, str] | None:
    """(D, the engine's name) of ``bf.gemm`` on torch tensors, run where they lie: D a tensor of the output
    format's dtype there; None where the call goes to the host (an engine that takes tensors does not
    take them, shapes the host path reports on, a format check only the host makes, a model that flushes
    subnormals, an output without a torch dtype)."""
    torch = _torch()
    shape = _operands(A, B, C)
    if shape is None or not model.subnormals or model.block_scaled or not finishes(model):
        return None
    k, C2 = shape
    p = plan(model, k)
    engine = registry.choose(p, Operands.matrix(A, B, C2), backend)
    if engine is None or not engine.tensors:
        return None
    given_ = ((model.input_format, A, "A"), (model.b_format, B, "B")) + (() if C is None else
                                                                        ((model.c_format, C2, "C"),))
    if check_values and not all(check(f, x, what) for f, x, what in given_):
        return None
    a, b, c = (x.detach().to(torch.float32) for x in (A, B, C2))  # exact: formats within binary32
    D = engine.run(p, Operands.matrix(a, b, c))
    assert D is not None
    return finish(model, D[0]), engine.name
