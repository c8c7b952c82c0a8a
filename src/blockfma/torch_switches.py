"""torch's process-wide matmul switches (TF32, fp16/bf16 reduced-precision reductions, fp16 accumulation),
set for one block and restored (:func:`matmul_switches`): the one place blockfma touches them.

TF32 goes through the per-backend fp32 precision where torch has it (2.9 and later), else through the legacy
``torch.backends.cuda.matmul.allow_tf32``: once the new API has been used, torch refuses to read the legacy
switch, so the two are never mixed here.  Whenever TF32 is set, oneDNN's fp32 matmuls on the CPU are pinned
to IEEE as well.  The switches are process-wide: concurrent torch work in other threads sees them meanwhile.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["matmul_switches", "tf32_enabled", "readable"]

Switch = tuple[Callable[[], Any], Callable[[Any], None], Any]


def readable(obj: Any, name: str) -> Any:
    """getattr, or None where this torch has no such switch (older releases)."""
    try:
        return getattr(obj, name)
    except (AttributeError, RuntimeError):
        return None


def _precision_api(torch: Any) -> tuple[Any, Any] | None:
    get_p = getattr(torch._C, "_get_fp32_precision_getter", None)
    set_p = getattr(torch._C, "_set_fp32_precision_setter", None)
    return None if get_p is None or set_p is None else (get_p, set_p)


def tf32_enabled(torch: Any) -> bool:
    """Whether fp32 matmuls on CUDA may use TF32 now (read without mixing torch's two APIs)."""
    api = _precision_api(torch)
    if api is not None:
        try:
            return api[0]("cuda", "matmul") == "tf32"
        except RuntimeError:
            pass
    return bool(torch.backends.cuda.matmul.allow_tf32)


def _tf32_switches(torch: Any, tf32: bool) -> list[Switch]:
    api = _precision_api(torch)
    if api is None:  # older torch: the legacy switch (oneDNN's fp32 precision is left as it is)
        m = torch.backends.cuda.matmul
        return [(lambda: m.allow_tf32, lambda v: setattr(m, "allow_tf32", v), tf32)]
    get_p, set_p = api
    out: list[Switch] = []
    # Reading back gives the inherited value; writing that back would pin it, so a value equal to the
    # parent's ("all") is restored as "none" (inherit).
    for backend, value in (("cuda", "tf32" if tf32 else "ieee"), ("mkldnn", "ieee")):
        def get(b: str = backend) -> str:
            v = get_p(b, "matmul")
            return "none" if v == get_p(b, "all") else v

        try:
            get()
        except RuntimeError:  # a torch without this (backend, op) pair
            continue
        out.append((get, lambda v, b=backend: set_p(b, "matmul", v), value))
    return out


def _switches(torch: Any, tf32: bool | None, reduced: bool | None, fp16_accumulation: bool | None) -> list[Switch]:
    """(get, set, value for the call) of each switch to be set."""
    out = [] if tf32 is None else _tf32_switches(torch, tf32)
    m = torch.backends.cuda.matmul
    if reduced is not None:
        for fmt in ("fp16", "bf16"):
            name = f"allow_{fmt}_reduced_precision_reduction"
            if readable(m, name) is None:
                continue

            def get(n: str = name, pair: bool = readable(m, name + "_split_k") is not None) -> Any:
                # newer torch holds (reduced precision, split-K) pairs
                return (getattr(m, n), getattr(m, n + "_split_k")) if pair else getattr(m, n)

            out.append((get, lambda v, n=name: setattr(m, n, v), bool(reduced)))
    if fp16_accumulation is not None and readable(m, "allow_fp16_accumulation") is not None:
        out.append((lambda: m.allow_fp16_accumulation, lambda v: setattr(m, "allow_fp16_accumulation", v),
                    bool(fp16_accumulation)))
    return out


@contextlib.contextmanager
def matmul_switches(torch: Any, *, tf32: bool | None = None, reduced: bool | None = None,
                    fp16_accumulation: bool | None = None) -> Iterator[None]:
    """For the block: TF32 for fp32 matmuls on CUDA iff ``tf32`` (and IEEE fp32 matmuls in oneDNN), the fp16 and bf16
    reduced-precision reductions iff ``reduced``, fp16 accumulation iff ``fp16_accumulation``; None leaves a switch as
    it is.  Every switch set is restored afterwards, also after an exception; a switch this torch lacks is skipped."""
    saved: list[tuple[Callable[[Any], None], Any]] = []
    try:
        for get, put, value in _switches(torch, tf32, reduced, fp16_accumulation):
            saved.append((put, get()))
            put(value)
        yield
    finally:
        for put, old in reversed(saved):
            put(old)
