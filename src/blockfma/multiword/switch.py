"""``accurate``: torch's float64 (optionally float32) matmuls through the method chosen for an accuracy.

    with bf.multiword.accurate("fp64", backend="hardware") as acc:   # doctest: +SKIP
        y = x @ w                        # float64: the method :func:`.choose.choose` picks for this shape
    print(acc.log)                       # what each call chose

Inside the block a TorchFunctionMode routes ``@``, ``torch.matmul``, ``mm``, ``bmm``, ``addmm``,
``baddbmm`` and ``F.linear`` on tensors of the routed dtypes through :func:`blockfma.multiword.matmul` with
``accuracy=``: each 2-D product (a batched one: each batch entry; a batched A times a 2-D B: folded into
one product, as torch folds it) is chosen for its own shape and data and run; the result is rounded once
to nearest into the tensors' dtype (exact for float64, where the methods' results are float64 values)
and comes back on the tensors' device.  ``addmm``/``baddbmm``/``linear`` add C (times beta) and scale by
alpha with torch's own elementwise operations after the product.  On exit torch's native GEMMs are back.

Autograd: a routed product is an autograd Function whose backward (grad_A = grad @ B^T, grad_B = A^T @ grad)
runs through the chosen methods too (each product chosen for its own shape and data, logged as
"backward grad_A" / "backward grad_B"), also when ``backward()`` runs after the block.

Run natively and logged as such: other dtypes, empty operands, operands with NaN or infinities (torch's
GEMM propagates them as DGEMM does; the methods refuse them), and calls with keywords the switch does not
model.  Torch calls made while a routed product runs (the real units' own matmuls) are never routed again,
also not by an enclosing block.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..arguments import ArgumentError, Shown
from ..optional import require
from .choose import Choice, check_accuracy, rates_for

__all__ = ["accurate", "Accurate", "Call"]


def _torch() -> Any:
    return require("torch", extra="torch", needed_by="blockfma.multiword.accurate")


@dataclass(frozen=True)
class Call:
    """One matmul seen inside the block: the op, the operands' shapes, the dtype, the method it ran (with
    its parameters; "native" where torch ran it), the :class:`~.choose.Choice` (None for a native call),
    the number of products, and a note saying why a call stayed native."""

    op: str
    shapes: str
    dtype: str
    method: str
    choice: Choice | None = None
    products: int = 0
    note: str = ""


class Accurate:
    """The context manager :func:`accurate` returns; reusable and nestable (the innermost block wins).
    ``log``: a :class:`Call` per matmul seen, in order."""

    def __init__(self, accuracy: Any = "fp64", *, dtypes: Any = None, device: Any = None,
                 backend: str | None = "hardware") -> None:
        torch = _torch()
        from .methods import check_backend

        self.accuracy = check_accuracy(accuracy)
        check_backend(backend)
        rates_for(device, backend)  # a card without rates (or a backend's missing GPU) fails here, not in a matmul
        self.backend = backend
        self.device = device
        listed = (torch.float64,) if dtypes is None else dtypes
        if isinstance(listed, torch.dtype):
            listed = (listed,)
        try:
            listed = tuple(listed)
        except TypeError:
            listed = (listed,)
        for dt in listed:
            if dt not in (torch.float64, torch.float32):
                raise ArgumentError("dtypes", Shown(repr(dtypes)), f"holds {dt!r}: the switch routes torch.float64 "
                                    "and torch.float32 matmuls", use={"dtypes": Shown("(torch.float64,)")})
        if not listed:
            raise ArgumentError("dtypes", Shown(repr(dtypes)), "is empty", use={"dtypes": Shown("(torch.float64,)")})
        self.dtypes = listed
        self.log: list[Call] = []
        self._modes: list[Any] = []
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"accurate({self.accuracy!r}, backend={self.backend!r})"

    def __enter__(self) -> Accurate:
        mode = _mode_class()(self)
        mode.__enter__()
        self._modes.append(mode)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._modes.pop().__exit__(*exc)

    def _record(self, call: Call) -> None:
        with self._lock:
            self.log.append(call)

    # --- the products ---------------------------------------------------------------------------------------
    def _why_native(self, *tensors: Any) -> str:
        """Why these operands run natively ("" if they are routed)."""
        torch = _torch()
        a = tensors[0]
        if any(not isinstance(t, torch.Tensor) for t in tensors):
            return "an operand is not a tensor"
        if any(t.dtype != a.dtype for t in tensors) or a.dtype not in self.dtypes:
            return f"dtype {a.dtype} is not routed"
        if any(t.dim() == 0 or t.numel() == 0 for t in tensors):
            return "an empty or 0-d operand"
        if not all(bool(torch.isfinite(t).all()) for t in tensors):
            return "NaN or infinite entries: torch's GEMM propagates them (the methods refuse them)"
        return ""

    def product(self, op: str, a: Any, b: Any) -> Any:
        """torch.matmul(a, b) (1-D operands, broadcast batch axes) by the chosen methods, logged."""
        torch = _torch()
        squeeze = []
        if a.dim() == 1:
            a, squeeze = a.unsqueeze(0), squeeze + ["row"]
        if b.dim() == 1:
            b, squeeze = b.unsqueeze(-1), squeeze + ["col"]
        if a.shape[-1] != b.shape[-2]:
            raise ValueError(f"{op} under accurate(): shapes {tuple(a.shape)} and {tuple(b.shape)} cannot be "
                             f"multiplied ({a.shape[-1]} != {b.shape[-2]})")
        m, n = a.shape[-2], b.shape[-1]
        choices: list[Choice] = []
        if b.dim() == 2:  # A's batch folded into its rows: one product, as torch runs it
            lead = a.shape[:-2]
            out = self._gemm(a.reshape(-1, a.shape[-1]), b, choices).reshape(*lead, m, n)
        else:
            lead = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
            a3 = a.expand(*lead, *a.shape[-2:]).reshape(-1, *a.shape[-2:])
            b3 = b.expand(*lead, *b.shape[-2:]).reshape(-1, *b.shape[-2:])
            out = torch.stack([self._gemm(a3[i], b3[i], choices) for i in range(a3.shape[0])]).reshape(*lead, m, n)
        if "col" in squeeze:
            out = out.squeeze(-1)
        if "row" in squeeze:
            out = out.squeeze(-2 if out.dim() >= 2 else -1)
        labels = sorted({c.option.label for c in choices})
        self._record(Call(op, f"{_shape(a)} x {_shape(b)}", str(a.dtype).removeprefix("torch."),
                          labels[0] if len(labels) == 1 else " / ".join(labels), choices[0], len(choices)))
        return out

    def _gemm(self, a: Any, b: Any, choices: list[Choice]) -> Any:
        """One 2-D product by the chosen method, differentiable where autograd records."""
        torch = _torch()
        if torch.is_grad_enabled() and (a.requires_grad or b.requires_grad):
            return _autograd()(self, choices, a, b)
        return self.run(a, b, choices)

    def run(self, a: Any, b: Any, choices: list[Choice]) -> Any:
        """One 2-D product by the chosen method (no autograd), its Choice appended to ``choices``."""
        _BUSY.on = True
        try:
            C, info = _run(a.detach(), b.detach(), accuracy=self.accuracy, device=self.device, backend=self.backend)
        finally:
            _BUSY.on = False
        choices.append(info["choice"])
        return C

    def backward_product(self, op: str, a: Any, b: Any) -> Any:
        """A gradient's product (2-D) by the chosen method, logged as ``op``."""
        choices: list[Choice] = []
        out = self.run(a, b, choices)
        self._record(Call(op, f"{_shape(a)} x {_shape(b)}", str(a.dtype).removeprefix("torch."),
                          choices[0].option.label, choices[0], 1))
        return out


_BUSY = threading.local()  # set while a routed product runs in this thread: every block's mode lets torch be


def _shape(t: Any) -> str:
    return "x".join(map(str, t.shape)) or "()"


def _run(a: Any, b: Any, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
    """One 2-D product by :func:`blockfma.multiword.matmul` (``accuracy=`` in ``kwargs``), tensors in and out:
    on real units (``backend="hardware..."``) the tensors go in as they are and every step runs on their
    device (:mod:`.tensors`); on simulated units (a simulator backend) through host arrays, as the simulator
    computes there."""
    from .hardware import is_hardware
    from .methods import matmul

    if is_hardware(kwargs.get("backend")):
        C, info = matmul(a, b, return_info=True, **kwargs)
        return C.to(dtype=a.dtype), info
    torch = _torch()
    C, info = matmul(a.detach().to("cpu").numpy(), b.detach().to("cpu").numpy(), return_info=True, **kwargs)
    return torch.from_numpy(np.asarray(C, dtype=np.float64)).to(device=a.device, dtype=a.dtype), info


# --- the torch side --------------------------------------------------------------------------------------------
def _native(acc: Accurate, op: str, why: str, tensors: tuple[Any, ...], run: Callable[[], Any]) -> Any:
    shapes = " x ".join(_shape(t) for t in tensors if hasattr(t, "shape"))
    dtype = str(getattr(tensors[0], "dtype", "-")).removeprefix("torch.")
    acc._record(Call(op, shapes, dtype, "native", note=why))
    return run()


def _with_out(result: Any, out: Any) -> Any:
    if out is None:
        return result
    out.resize_(result.shape)
    return out.copy_(result)


def _h_matmul(acc: Accurate, func: Any, a: Any, b: Any, *, out: Any = None) -> Any:
    why = acc._why_native(a, b)
    if why:
        return _native(acc, "matmul", why, (a, b), lambda: func(a, b, **({} if out is None else {"out": out})))
    return _with_out(acc.product("matmul", a, b), out)


def _h_rmatmul(acc: Accurate, func: Any, b: Any, a: Any) -> Any:
    why = acc._why_native(a, b)
    return _native(acc, "matmul", why, (a, b), lambda: func(b, a)) if why else acc.product("matmul", a, b)


def _fixed(op: str, dims: int) -> Callable[..., Any]:
    def handler(acc: Accurate, func: Any, a: Any, b: Any, *, out: Any = None, **kw: Any) -> Any:
        why = acc._why_native(a, b) or (f"keywords {', '.join(sorted(kw))} not modelled" if kw else "")
        if not why and (a.dim() != dims or b.dim() != dims):
            why = f"operands not {dims}-D (torch's error)"
        if why:
            return _native(acc, op, why, (a, b), lambda: func(a, b, **kw, **({} if out is None else {"out": out})))
        return _with_out(acc.product(op, a, b), out)

    return handler


def _addmm_like(op: str, dims: int) -> Callable[..., Any]:
    def handler(acc: Accurate, func: Any, c: Any, a: Any, b: Any, *, beta: Any = 1, alpha: Any = 1,
                out: Any = None, **kw: Any) -> Any:
        why = acc._why_native(a, b) or (f"keywords {', '.join(sorted(kw))} not modelled" if kw else "")
        if not why and (a.dim() != dims or b.dim() != dims):
            why = f"operands not {dims}-D (torch's error)"
        if not why and (getattr(c, "dtype", a.dtype) != a.dtype):
            why = "C's dtype differs"
        if why:
            return _native(acc, op, why, (c, a, b), lambda: func(c, a, b, beta=beta, alpha=alpha, **kw,
                                                                 **({} if out is None else {"out": out})))
        P = acc.product(op, a, b)
        result = (P if alpha == 1 else alpha * P) + (0 if beta == 0 else (c if beta == 1 else beta * c))
        if beta == 0:
            result = result.expand(_torch().broadcast_shapes(P.shape, c.shape)).clone()
        if func in _IN_PLACE:
            return c.copy_(result)
        return _with_out(result, out)

    return handler


def _h_linear(acc: Accurate, func: Any, x: Any, w: Any, bias: Any = None) -> Any:
    why = acc._why_native(x, w) or ("" if bias is None or bias.dtype == x.dtype else "bias dtype differs")
    if why:
        return _native(acc, "linear", why, (x, w), lambda: func(x, w, bias))
    y = acc.product("linear", x, w.t() if w.dim() == 2 else w)
    return y if bias is None else y + bias


_AUTOGRAD: list[Any] = []


def _autograd() -> Any:
    """The autograd Function of a routed 2-D product (made once, on first use: torch is optional):
    ``apply(acc, choices, a, b)``; its backward routes grad @ B^T and A^T @ grad the same way."""
    if _AUTOGRAD:
        return _AUTOGRAD[0]
    torch = _torch()

    class _Product(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, acc: Accurate, choices: list[Choice], a: Any, b: Any) -> Any:
            ctx.save_for_backward(a, b)
            ctx.acc = acc
            return acc.run(a, b, choices)

        @staticmethod
        def backward(ctx: Any, grad: Any) -> tuple[Any, ...]:
            a, b = ctx.saved_tensors
            acc = ctx.acc
            ga = acc.backward_product("backward grad_A", grad, b.t()) if ctx.needs_input_grad[2] else None
            gb = acc.backward_product("backward grad_B", a.t(), grad) if ctx.needs_input_grad[3] else None
            return None, None, ga, gb

    _AUTOGRAD.append(_Product.apply)
    return _AUTOGRAD[0]


_HANDLERS: dict[Any, Callable[..., Any]] = {}
_IN_PLACE: set[Any] = set()
_CLASS: list[type] = []


def _mode_class() -> type:
    """The TorchFunctionMode class (made once, on first use: torch is optional)."""
    if _CLASS:
        return _CLASS[0]
    torch = _torch()
    import torch.nn.functional as F
    from torch.overrides import TorchFunctionMode

    _HANDLERS.update({
        torch.matmul: _h_matmul, torch.Tensor.matmul: _h_matmul, torch.Tensor.__matmul__: _h_matmul,
        torch.Tensor.__rmatmul__: _h_rmatmul,
        torch.mm: _fixed("mm", 2), torch.Tensor.mm: _fixed("mm", 2),
        torch.bmm: _fixed("bmm", 3), torch.Tensor.bmm: _fixed("bmm", 3),
        torch.addmm: _addmm_like("addmm", 2), torch.Tensor.addmm: _addmm_like("addmm", 2),
        torch.Tensor.addmm_: _addmm_like("addmm", 2),
        torch.baddbmm: _addmm_like("baddbmm", 3), torch.Tensor.baddbmm: _addmm_like("baddbmm", 3),
        torch.Tensor.baddbmm_: _addmm_like("baddbmm", 3),
        F.linear: _h_linear,
    })
    _IN_PLACE.update({torch.Tensor.addmm_, torch.Tensor.baddbmm_})

    class _Mode(TorchFunctionMode):
        """The TorchFunctionMode of one ``with accurate(...)`` block (torch calls made inside a handler,
        the units' own included, run natively: a mode is off while its handler runs)."""

        def __init__(self, acc: Accurate) -> None:
            super().__init__()
            self.acc = acc

        def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: Any = None) -> Any:
            handler = _HANDLERS.get(func)
            if handler is None or getattr(_BUSY, "on", False):
                return func(*args, **(kwargs or {}))
            return handler(self.acc, func, *args, **(kwargs or {}))

    _CLASS.append(_Mode)
    return _Mode


def accurate(accuracy: Any = "fp64", *, dtypes: Any = None, device: Any = None,
             backend: str | None = "hardware") -> Accurate:
    """A context manager under which torch's matmuls of ``dtypes`` (default ``(torch.float64,)``; add
    ``torch.float32`` to route those too) run by the method :func:`.choose.choose` picks for ``accuracy``
    ("fp64", "fp32" or a componentwise bound in (0, 1)) on each product's shape and data.

    ``backend``: where the chosen method's unit calls run, as :func:`blockfma.multiword.matmul` takes it
    (default "hardware": this machine's GPU through torch, else its CPU); ``device``: the card whose rates
    (and, on the simulator, whose units) the choice uses (default: the GPU torch sees; "H100" on the
    simulator).  See the module docstring for what runs natively."""
    return Accurate(accuracy, dtypes=dtypes, device=device, backend=backend)
