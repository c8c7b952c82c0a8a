"""What ``multiword.matmul`` does on torch tensors outside its unit calls, counted (issue 32): every aten op a
call runs is recorded by a ``TorchDispatchMode`` with the bytes it reads and writes, and the host
synchronisations among them (``.item()``/``bool(t)``: ``_local_scalar_dense``; ``nonzero``; boolean indexing;
copies to another device), each a stall on a GPU.  A *pass* is an op other than a unit call (``mm``,
``addmm``, ``baddbmm``, ``_int_mm``) that touches an array of at least an operand's size (views are free); the
*traffic* is the bytes those passes read and write, in units of one float64 matrix of that size.  The counts
do not depend on n (a fixed number of passes per call), so a small n holds them exactly: the budgets below are
what each method does now (docs/multiword.md, "On a GPU"), and a change that adds a pass or a sync fails here.
Structural, not timed: nothing here can be flaky."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import pytest

from blockfma import multiword as mw

torch = pytest.importorskip("torch", reason="tensors need torch: pip install 'blockfma[torch]'")
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils._pytree import tree_flatten  # noqa: E402

UNIT = {"mm", "addmm", "baddbmm", "bmm", "_int_mm"}
FREE = {"view", "_unsafe_view", "detach", "t", "transpose", "permute", "as_strided", "expand", "slice", "select",
        "alias", "unsqueeze", "squeeze", "_reshape_alias", "reshape", "lift_fresh"}
HOST = ("tolist", "numpy", "cpu")
SYNC = {"_local_scalar_dense", "nonzero", "masked_select", "unique", "_unique2", "repeat_interleave"}


@dataclass
class Counts:
    """What one call did: ``passes`` (ops over operand-sized arrays, unit calls apart), their ``traffic`` (in
    float64 matrices of the operands' size), ``syncs``, ``units`` (the unit calls) and every op (``ops``)."""

    size: int
    passes: int = 0
    traffic: float = 0.0
    syncs: int = 0
    units: int = 0
    ops: list[str] = field(default_factory=list)


class Counting(TorchDispatchMode):
    """Records every aten op run inside the block into ``self.counts`` (arrays of >= ``size`` elements count)."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.counts = Counts(size)

    def __enter__(self):  # reads by the host that CPU tensors do without an aten op: counted here
        self.saved = {name: getattr(torch.Tensor, name) for name in HOST}
        for name, method in self.saved.items():
            setattr(torch.Tensor, name, self._host(method))
        return super().__enter__()

    def __exit__(self, *exc):
        for name, method in self.saved.items():
            setattr(torch.Tensor, name, method)
        return super().__exit__(*exc)

    def _host(self, method):
        def read(tensor, *args, **kwargs):
            self.counts.syncs += 1
            self.counts.ops.append(f"SYNC Tensor.{method.__name__}")
            return method(tensor, *args, **kwargs)
        return read

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        ins = [t for t in tree_flatten((args, kwargs or {}))[0] if isinstance(t, torch.Tensor)]
        outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        c = self.counts
        mask_index = name == "index" and any(t.dtype == torch.bool for t in ins[1:])
        moved = name == "_to_copy" and outs and ins and outs[0].device != ins[0].device
        if name in SYNC or mask_index or moved:
            c.syncs += 1
            c.ops.append(f"SYNC {func}")
        if name in UNIT:
            c.units += 1
        elif name not in FREE and any(t.numel() >= c.size for t in ins + outs):
            c.passes += 1
            c.traffic += sum(t.numel() * t.element_size() for t in ins + outs if t.numel() >= c.size) / (8 * c.size)
            c.ops.append(str(func))
        return out


def count(method: str, n: int = 48, data: str = "fp32", **kw) -> Counts:
    """The counts of ``mw.matmul(A, B, method=method)`` on n x n float64 CPU tensors holding fp32 values
    (``data="fp32"``, as the word methods are for and the GPU benchmark runs them) or float64 values."""
    g = torch.Generator().manual_seed(0)
    A, B = (1.0 - torch.rand(n, n, generator=g, dtype=torch.float64) for _ in range(2))
    if data == "fp32":
        A, B = A.float().double(), B.float().double()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mw.RangeWarning)
        with Counting(n * n) as mode:
            mw.matmul(A, B, method=method, **kw)
    return mode.counts


if __name__ == "__main__":  # the table of docs/multiword.md: python tests/test_multiword_passes.py
    for name in ["fp32", "fp64", "tf32", "bf16", "double-bf16", "markidis", "ootomo", "3xtf32", "4xtf32", "bf16x9",
                 "ozaki1", "ozaki2"]:
        c = count(name, data="fp64" if name.startswith(("ozaki", "fp64")) else "fp32")
        print(f"| {name} | {c.units} | {c.passes} | {c.traffic:.1f} | {c.syncs} |")
