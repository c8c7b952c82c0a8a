"""The torch front: the one interception layer for torch's matmuls.  ``bf.torch.emulate`` and
``bf.multiword.accurate`` each bring a :class:`Rule`; this module holds what they share.

Inside a :class:`Mode` the calls of the handler table (``@``, ``torch.matmul``, ``mm``, ``bmm``, ``addmm``, ``baddbmm``
and their Tensor and in-place forms, ``F.linear``) and of the rule's own extra handlers go to their handler.  A call the
rule does not run natively (:meth:`Rule.native`) runs with torch.matmul's semantics (:func:`matmul`) as one autograd
Function whose forward and backward (grad_A = grad @ B^T, grad_B = A^T @ grad, with the forward's route, also when
``backward()`` runs after the block) are the rule's :meth:`Rule.gemm`.  C enters the product where :attr:`Rule.adds_c`
says so (``alpha``/``beta`` other than 1 (beta 0) are refused then); else torch adds ``alpha * P + beta * C`` after.
``out=`` and the in-place forms copy the result (an ``out`` of another dtype or device is refused, as by torch).  With
``create_graph=True`` the backward's products are such Functions in their turn.  Meta and fake tensors run natively
(shapes only). A block holds in the thread that entered it, as ``torch.no_grad`` does (:func:`_start`).  Torch calls
made while a rule's ``gemm`` runs are never intercepted again, also not by an enclosing block.  To add an interception:
a class with the :class:`Rule` methods that enters ``Mode(rule, extra)`` in its ``__enter__`` (``extra``: handlers
called as ``handler(rule, func, *args, **kwargs)``).
"""

from __future__ import annotations

import math
import threading
import warnings
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import is_fake
from torch.overrides import TorchFunctionMode

from .arguments import ArgumentError

__all__ = ["Rule", "Mode", "matmul", "shapes", "with_out"]


class Rule(Protocol):
    """What an interception brings: which calls it routes, how a routed product is computed, what is logged."""

    layer: str  #: the layer as error messages name it ("emulate", "accurate()")
    adds_c: bool  #: C enters the product (alpha and beta are not modelled), or torch adds it after

    def native(self, op: str, tensors: Sequence[Any], keywords: Collection[str], dims: int | None) -> bool:
        """Whether this call runs natively (the rule logs it then), or raise where it is an error.
        ``tensors``: (a, b), or (c, a, b) with C (``addmm``'s input, ``linear``'s bias); ``keywords``: those the
        front does not model; ``dims``: the rank the op requires (2 for mm, 3 for bmm; None for matmul)."""

    def route_of(self, a: torch.Tensor) -> Any:
        """What fixes the arithmetic of a call, chosen when it is seen and kept for its backward."""

    def gemm(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor | None, route: Any, ran: list) -> torch.Tensor:
        """D = A @ B (+ C) for (..., m, k) and (..., k, n) with equal batch axes, C None or D's shape; no
        autograd; what ran may be appended to ``ran`` (handed to :meth:`record`)."""

    def record(self, op: str, tensors: Sequence[Any], route: Any, products: int = 0, ran: Sequence[Any] = ()) -> None:
        """Log a routed call: its product's operands, the route, the number of 2-D products."""


_BUSY = threading.local()  # set while a rule's gemm runs in this thread: every block's mode lets torch be


def shapes(tensors: Sequence[Any]) -> str:
    """The tensors' shapes as the logs write them: ``4x8 x 8x2`` (a 0-d tensor ``()``)."""
    return " x ".join("x".join(map(str, t.shape)) or "()" for t in tensors if isinstance(t, torch.Tensor))


def check_out(out: torch.Tensor | None, result: torch.Tensor) -> None:
    """A RuntimeError, as torch gives, where ``out`` has another dtype or device than ``result`` (or its A)."""
    if out is not None and (out.dtype != result.dtype or out.device != result.device):
        raise RuntimeError(f"out= is a {out.dtype} tensor on {out.device} and the result a {result.dtype} one on "
                           f"{result.device}: torch refuses this too; pass out of the result's dtype and device")


def with_out(result: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    """``result``, or copied into ``out`` (resized to it) where one was passed."""
    if out is None:
        return result
    check_out(out, result)
    out.resize_(result.shape)
    return out.copy_(result)


def _gemm(rule: Rule, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor | None, route: Any, ran: list) -> torch.Tensor:
    was = getattr(_BUSY, "on", False)
    _BUSY.on = True
    try:
        return rule.gemm(a, b, c, route, ran)
    finally:
        _BUSY.on = was


def _backward(rule: Rule, op: str, a: torch.Tensor, b: torch.Tensor, route: Any) -> torch.Tensor:
    ran: list = []
    if torch.is_grad_enabled():  # create_graph=True: this product differentiable in its turn, by the rule
        out = _Product.apply(rule, route, ran, a, b, None)
    else:
        out = _gemm(rule, a, b, None, route, ran)
    rule.record(op, (a, b), route, max(1, math.prod(a.shape[:-2])), ran)
    return out


class _Product(torch.autograd.Function):
    """D = A @ B + C by the rule, its backward products by the rule with the forward's route."""

    @staticmethod
    def forward(ctx: Any, rule: Rule, route: Any, ran: list, a: torch.Tensor, b: torch.Tensor,
                c: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(a, b)
        ctx.rule, ctx.route = rule, route
        return _gemm(rule, a, b, c, route, ran)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        a, b = ctx.saved_tensors
        grad = grad.to(a.dtype)
        ga = gb = None
        if ctx.needs_input_grad[3]:
            ga = _backward(ctx.rule, "backward grad_A", grad, b.transpose(-1, -2), ctx.route)
        if ctx.needs_input_grad[4]:
            gb = _backward(ctx.rule, "backward grad_B", a.transpose(-1, -2), grad, ctx.route)
        return None, None, None, ga, gb, grad if ctx.needs_input_grad[5] else None


def matmul(rule: Rule, op: str, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor | None = None) -> torch.Tensor:
    """torch.matmul(a, b) + c by the rule, logged as ``op`` (1-D operands, broadcast batch axes; a batched A
    with a 2-D B is folded into one product, as torch folds it); C, where given, enters the product."""
    squeeze = []
    if a.dim() == 1:
        a, squeeze = a.unsqueeze(0), squeeze + [-2]
    if b.dim() == 1:
        b, squeeze = b.unsqueeze(-1), squeeze + [-1]
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(f"{op} under {rule.layer}: shapes {tuple(a.shape)} and {tuple(b.shape)} cannot be "
                         f"multiplied ({a.shape[-1]} != {b.shape[-2]})")
    m, n = a.shape[-2], b.shape[-1]
    route, ran = rule.route_of(a), []
    if b.dim() == 2 and a.dim() > 2:  # A's batch folded into its rows: one product, as torch runs it
        lead = a.shape[:-2]
        c2 = None if c is None else c.expand(*lead, m, n).reshape(-1, n)
        out = _Product.apply(rule, route, ran, a.reshape(-1, a.shape[-1]), b, c2).reshape(*lead, m, n)
        products = 1
    else:
        lead = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        c3 = None if c is None else c.expand(*lead, m, n)
        out = _Product.apply(rule, route, ran, a.expand(*lead, *a.shape[-2:]), b.expand(*lead, *b.shape[-2:]), c3)
        products = max(1, math.prod(lead))
    rule.record(op, (a, b) if c is None else (c, a, b), route, products, ran)
    for axis in squeeze:
        out = out.squeeze(axis) if axis == -1 else out.squeeze(-2 if out.dim() >= 2 else -1)
    return out


# --- the handler table -------------------------------------------------------------------------------------------
def _out(out: Any) -> dict[str, Any]:
    return {} if out is None else {"out": out}


def _h_rmatmul(rule: Rule, func: Any, b: Any, a: Any) -> Any:
    return func(b, a) if rule.native("matmul", (a, b), (), None) else matmul(rule, "matmul", a, b)


def _fixed(op: str, dims: int | None) -> Callable[..., Any]:
    def handler(rule: Rule, func: Any, a: Any, b: Any, *, out: Any = None, **kw: Any) -> Any:
        if rule.native(op, (a, b), tuple(kw), dims):
            return func(a, b, **kw, **_out(out))
        check_out(out, a)  # before the work
        return with_out(matmul(rule, op, a, b), out)

    return handler


def _unit(rule: Rule, op: str, name: str, value: Any, fix: str) -> None:
    if value != 1:
        raise ArgumentError(name, value, f"{op} under {rule.layer} takes {name}=1 only (no scaling is modelled)",
                            fix=fix)


def _addmm_like(op: str, dims: int) -> Callable[..., Any]:
    def handler(rule: Rule, func: Any, c: Any, a: Any, b: Any, *, beta: Any = 1, alpha: Any = 1, out: Any = None,
                **kw: Any) -> Any:
        if rule.native(op, (c, a, b), tuple(kw), dims):
            return func(c, a, b, beta=beta, alpha=alpha, **kw, **_out(out))
        check_out(out, a)
        if rule.adds_c:
            _unit(rule, op, "alpha", alpha, "scale the product outside the call")
            if beta != 0:
                _unit(rule, op, "beta", beta, "pass beta=0 or 1, or scale C first")
            result = matmul(rule, op, a, b, None if beta == 0 else c)
        else:
            p = matmul(rule, op, a, b)
            result = (p if alpha == 1 else alpha * p) + (0 if beta == 0 else (c if beta == 1 else beta * c))
        if beta == 0:
            result = result.expand(torch.broadcast_shapes(result.shape, c.shape))
        if func in (torch.Tensor.addmm_, torch.Tensor.baddbmm_):
            return c.copy_(result)
        return with_out(result, out)

    return handler


def _h_linear(rule: Rule, func: Any, x: Any, w: Any, bias: Any = None) -> Any:
    wt = w.t() if w.dim() == 2 else w
    if rule.native("linear", (x, wt) if bias is None else (bias, x, wt), (), None):
        return func(x, w, bias)
    if rule.adds_c or bias is None:
        return matmul(rule, "linear", x, wt, bias)
    return matmul(rule, "linear", x, wt) + bias


HANDLERS: dict[Any, Callable[..., Any]] = {
    **dict.fromkeys((torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__), _fixed("matmul", None)),
    torch.Tensor.__rmatmul__: _h_rmatmul,
    torch.mm: _fixed("mm", 2), torch.Tensor.mm: _fixed("mm", 2),
    torch.bmm: _fixed("bmm", 3), torch.Tensor.bmm: _fixed("bmm", 3),
    torch.addmm: _addmm_like("addmm", 2), torch.Tensor.addmm: _addmm_like("addmm", 2),
    torch.Tensor.addmm_: _addmm_like("addmm", 2),
    torch.baddbmm: _addmm_like("baddbmm", 3), torch.Tensor.baddbmm: _addmm_like("baddbmm", 3),
    torch.Tensor.baddbmm_: _addmm_like("baddbmm", 3),
    F.linear: _h_linear,
}


_ACTIVE = threading.local()  # .modes: the blocks entered in this thread, innermost last
_NATIVE_START = threading.Thread.start
_OPEN = {"blocks": 0, "lock": threading.Lock()}  # blocks open in the process: Thread.start is _start while any is


def _start(thread: threading.Thread) -> None:
    """Thread.start while a block is open: a RuntimeWarning, once per block, where the starting thread is in one."""
    modes = getattr(_ACTIVE, "modes", [])
    if modes and not modes[-1].warned and not getattr(_BUSY, "on", False):  # not the rule's own threads
        modes[-1].warned = True
        warnings.warn(f"a thread started inside {modes[-1].rule.layer} runs torch's matmuls natively: a block holds "
                      "in the thread that entered it (as torch.no_grad does); enter it in the thread's function too",
                      RuntimeWarning, stacklevel=2)
    _NATIVE_START(thread)


class Mode(TorchFunctionMode):
    """The TorchFunctionMode of one block: the table's calls (and ``extra``'s, which come first) go to their
    handler with ``rule``; the rest, calls on meta or fake tensors, and all while a rule's gemm runs, to torch.
    ``threading.Thread.start`` is :func:`_start` while any block is open."""

    def __init__(self, rule: Rule, extra: Mapping[Any, Callable[..., Any]] | None = None) -> None:
        super().__init__()
        self.rule = rule
        self.handlers = HANDLERS if not extra else {**HANDLERS, **extra}
        self.warned = False  # of a thread started inside this block

    def __enter__(self) -> Mode:
        super().__enter__()
        _ACTIVE.__dict__.setdefault("modes", []).append(self)
        with _OPEN["lock"]:
            _OPEN["blocks"] += 1
            threading.Thread.start = _start  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: Any) -> None:
        with _OPEN["lock"]:
            _OPEN["blocks"] -= 1
            if _OPEN["blocks"] == 0:
                threading.Thread.start = _NATIVE_START  # type: ignore[method-assign]
        _ACTIVE.modes.remove(self)
        super().__exit__(*exc)

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: Any = None) -> Any:
        handler, kwargs = self.handlers.get(func), kwargs or {}
        if handler is None or getattr(_BUSY, "on", False) or any(
                isinstance(t, torch.Tensor) and (t.is_meta or is_fake(t)) for t in (*args, *kwargs.values())):
            return func(*args, **kwargs)
        return handler(self.rule, func, *args, **kwargs)
