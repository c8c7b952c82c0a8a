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

try:
    from triton.runtime.interpreter import InterpretedFunction as Interpreted
except ImportError:
    Interpreted = None

UNIT = {"mm", "addmm", "baddbmm", "bmm", "_int_mm"}
FREE = {"view", "_unsafe_view", "detach", "t", "transpose", "permute", "as_strided", "expand", "slice", "select",
        "alias", "unsqueeze", "squeeze", "_reshape_alias", "reshape", "lift_fresh", "unbind", "empty", "empty_like",
        "new_empty", "empty_strided"}
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

    def __enter__(self):  # reads by the host that CPU tensors do without an aten op, and Triton's launches
        self.saved = [(torch.Tensor, name, getattr(torch.Tensor, name)) for name in HOST]
        for owner, name, method in self.saved:
            setattr(owner, name, self._host(method))
        if Interpreted is not None:
            self.saved.append((Interpreted, "__getitem__", Interpreted.__getitem__))
            Interpreted.__getitem__ = self._kernel(Interpreted.__getitem__)
        self.paused = False
        return super().__enter__()

    def __exit__(self, *exc):
        for owner, name, method in self.saved:
            setattr(owner, name, method)
        return super().__exit__(*exc)

    def _kernel(self, getitem):
        """A kernel launch is one pass over its tensors (the interpreter's own copies are not counted)."""
        def launcher(fn, grid):
            run = getitem(fn, grid)

            def launch(*args, **kwargs):
                self.paused = True
                try:
                    return run(*args, **kwargs)
                finally:
                    self.paused = False
                    big = [t for t in args if isinstance(t, torch.Tensor) and t.numel() >= self.counts.size]
                    self.counts.passes += 1
                    self.counts.traffic += sum(t.numel() * t.element_size() for t in big) / (8 * self.counts.size)
                    self.counts.ops.append(f"triton {fn.fn.__name__}")
            return launch
        return launcher

    def _host(self, method):
        def read(tensor, *args, **kwargs):
            self.counts.syncs += 1
            self.counts.ops.append(f"SYNC Tensor.{method.__name__}")
            return method(tensor, *args, **kwargs)
        return read

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self.paused:
            return out
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


# per method: (passes, syncs) at most, on the torch ops (no Triton here) and fused (under Triton's interpreter;
# on a GPU, compiled); before issue 32's clean-up 3xtf32 took 110 passes and 15 syncs, bf16x9 146 and 15
UNFUSED = {"fp32": (6, 2), "fp64": (3, 2), "tf32": (32, 3), "bf16": (26, 3), "double-bf16": (40, 3),
           "markidis": (90, 9), "ootomo": (82, 5), "3xtf32": (44, 3), "4xtf32": (44, 3), "bf16x9": (38, 3)}
FUSED = {"tf32": (6, 3), "bf16": (6, 3), "double-bf16": (14, 3), "3xtf32": (6, 3), "4xtf32": (6, 3),
         "bf16x9": (6, 3), "ozaki2": (16, 6)}


@pytest.mark.parametrize("method", list(UNFUSED))
def test_passes_and_syncs_on_torch_ops(method, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # on the CPU: no Triton, every step a torch op
    c = count(method, data="fp64" if method == "fp64" else "fp32")
    assert (c.passes, c.syncs) <= UNFUSED[method] and c.passes <= UNFUSED[method][0], c.ops
    assert c.units == {"bf16x9": 9, "4xtf32": 4, "markidis": 4}.get(method, 3 if "x" in method or method in (
        "double-bf16", "ootomo") else 1)


@pytest.fixture
def interpreter(monkeypatch):
    pytest.importorskip("triton", reason="triton is not installed (pip install 'blockfma[triton]')")
    from helpers import triton_mode

    triton_mode(monkeypatch, False)
    from blockfma.multiword import tensors

    if not tensors.fused_here(torch.device("cpu")):
        pytest.skip("the fused kernels were defined for the GPU in this process (one mode per process)")


@pytest.mark.parametrize("method", list(FUSED))
def test_passes_and_syncs_fused(method, interpreter):
    c = count(method, data="fp64" if method == "ozaki2" else "fp32")
    assert c.passes <= FUSED[method][0] and c.syncs <= FUSED[method][1], c.ops


if __name__ == "__main__":  # the table of docs/multiword.md: python tests/test_multiword_passes.py
    for name in ["fp32", "fp64", "tf32", "bf16", "double-bf16", "markidis", "ootomo", "3xtf32", "4xtf32", "bf16x9",
                 "ozaki1", "ozaki2"]:
        c = count(name, data="fp64" if name.startswith(("ozaki", "fp64")) else "fp32")
        print(f"| {name} | {c.units} | {c.passes} | {c.traffic:.1f} | {c.syncs} |")
