"""``accurate``: torch's float64 (optionally float32) matmuls through the method chosen for an accuracy.

    with bf.multiword.accurate("fp64", backend="hardware") as acc:   # doctest: +SKIP
        y = x @ w                        # float64: the method :func:`.choose.choose` picks for this shape
    print(acc.log)                       # what each call chose

:class:`Accurate` is a rule of the torch front (:mod:`blockfma.torch_front`, loaded when a block starts, says
how calls are intercepted, batches folded and backward run): each 2-D product runs through
:func:`blockfma.multiword.matmul`, its result rounded once to nearest into the tensors' dtype (exact for
float64); torch adds C (times beta) and scales by alpha after the product.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Sequence
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
    """``accurate(...)``: a context manager under which torch's matmuls of ``dtypes`` (default
    ``(torch.float64,)``; add ``torch.float32`` to route those too) run by the method :func:`.choose.choose`
    picks for ``accuracy`` ("fp64", "fp32" or a componentwise bound in (0, 1)) on each product's shape and
    data; reusable and nestable (the innermost block wins).

    ``backend``: where the chosen method's unit calls run, as :func:`blockfma.multiword.matmul` takes it
    (default "hardware": this machine's GPU through torch, else its CPU); ``device``: the card whose rates
    (and, on the simulator, whose units) the choice uses (default: the GPU torch sees; "H100" on the
    simulator).  ``log``: a :class:`Call` per matmul seen, in order."""

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
        from ..torch_front import Mode  # torch is optional: loaded when a block starts

        self._modes.append(Mode(self).__enter__())  # entered first: a failed entry pushes nothing
        return self

    def __exit__(self, *exc: Any) -> None:
        self._modes.pop().__exit__(*exc)

    # --- the rule of the torch front (:class:`blockfma.torch_front.Rule`) ------------------------------------
    layer = "accurate()"
    adds_c = False  # torch adds alpha * P + beta * C after the product

    def native(self, op: str, tensors: Sequence[Any], keywords: Collection[str], dims: int | None) -> bool:
        """Whether this call runs natively (:meth:`blockfma.torch_front.Rule.native`), logged with the reason."""
        torch = _torch()
        *c, a, b = tensors
        why = ""
        if any(not isinstance(t, torch.Tensor) for t in (a, b)):
            why = "an operand is not a tensor"
        elif b.dtype != a.dtype or a.dtype not in self.dtypes:
            why = f"dtype {a.dtype} is not routed"
        elif any(t.dim() == 0 or t.numel() == 0 for t in (a, b)):
            why = "an empty or 0-d operand"
        elif not all(bool(torch.isfinite(t).all()) for t in (a, b)):
            why = "NaN or infinite entries: torch's GEMM propagates them (the methods refuse them)"
        elif keywords:
            why = f"keywords {', '.join(sorted(keywords))} not modelled"
        elif dims is not None and (a.dim() != dims or b.dim() != dims):
            why = f"operands not {dims}-D (torch's error)"
        elif c and getattr(c[0], "dtype", a.dtype) != a.dtype:
            why = "bias dtype differs" if op == "linear" else "C's dtype differs"
        if why:
            from ..torch_front import shapes

            dtype = str(getattr(tensors[0], "dtype", "-")).removeprefix("torch.")
            self._append(Call(op, shapes(tensors), dtype, "native", note=why))
        return bool(why)

    def route_of(self, a: Any) -> None:
        """None: each 2-D product is chosen for its own shape and data when it runs."""
        return None

    def gemm(self, a: Any, b: Any, c: None, route: None, ran: list[Choice]) -> Any:
        """A @ B for (..., m, k) and (..., k, n): each batch entry's 2-D product by its chosen method, its
        Choice appended to ``ran``."""
        torch = _torch()
        a3, b3 = a.reshape(-1, *a.shape[-2:]), b.reshape(-1, *b.shape[-2:])
        out = torch.stack([self.run(a3[i], b3[i], ran) for i in range(a3.shape[0])])
        return out.reshape(*a.shape[:-1], b.shape[-1])

    def run(self, a: Any, b: Any, choices: list[Choice]) -> Any:
        """One 2-D product by :func:`blockfma.multiword.matmul` with ``accuracy=`` (no autograd), its Choice
        appended to ``choices``: on real units (``backend="hardware..."``) on the tensors' device
        (:mod:`.tensors`); on simulated units through host arrays."""
        from .hardware import is_hardware
        from .methods import matmul

        a, b = a.detach(), b.detach()
        kwargs = {"accuracy": self.accuracy, "device": self.device, "backend": self.backend, "return_info": True}
        if is_hardware(self.backend):
            C, info = matmul(a, b, **kwargs)
            C = C.to(dtype=a.dtype)
        else:
            C, info = matmul(a.to("cpu").numpy(), b.to("cpu").numpy(), **kwargs)
            C = _torch().from_numpy(np.asarray(C, dtype=np.float64)).to(device=a.device, dtype=a.dtype)
        choices.append(info["choice"])
        return C

    def record(self, op: str, tensors: Sequence[Any], route: None, products: int = 0,
               ran: Sequence[Choice] = ()) -> None:
        """Log a routed call: the methods its products ran (one label, or the labels joined by " / ")."""
        from ..torch_front import shapes

        labels = sorted({c.option.label for c in ran})
        self._append(Call(op, shapes(tensors), str(tensors[0].dtype).removeprefix("torch."),
                          labels[0] if len(labels) == 1 else " / ".join(labels), ran[0], products))

    def _append(self, call: Call) -> None:
        with self._lock:
            self.log.append(call)


accurate = Accurate  # bf.multiword.accurate(...): the class itself
