"""What ``multiword.matmul`` does on torch tensors outside its unit calls, counted (issue 32): every aten op a
call runs is recorded by a ``TorchDispatchMode`` with the bytes it reads and writes, and the host
synchronisations among them (``.item()``/``bool(t)``: ``_local_scalar_dense``; ``nonzero``; boolean indexing;
copies to another device), each a stall on a GPU.  A *pass* is an op other than a unit call (``mm``,
``addmm``, ``baddbmm``, ``_int_mm``) that touches an array of at least an operand's size (views are free); the
*traffic* is the bytes those passes read and write, in units of one float64 matrix of that size.  The counts
do not depend on n (a fixed number of passes per call), so a small n holds them exactly: the budgets below are
what each method does now (the table in docs/multiword.md, "Overview"), and a change that adds a pass or a sync fails here.
Structural, not timed: nothing here can be flaky."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
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
UNFUSED = {"fp32": (6, 2), "fp64": (3, 2), "tf32": (34, 3), "bf16": (28, 3), "double-bf16": (36, 3),
           "markidis": (90, 7), "ootomo": (84, 5), "3xtf32": (46, 3), "4xtf32": (46, 3), "bf16x9": (40, 3),
           "ozaki2": (240, 17)}
FUSED = {"tf32": (4, 2), "bf16": (4, 2), "double-bf16": (6, 2), "3xtf32": (4, 2), "4xtf32": (4, 2),
         "bf16x9": (4, 2), "ozaki2": (16, 4)}


@pytest.mark.parametrize("method", list(UNFUSED))
def test_passes_and_syncs_on_torch_ops(method, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # on the CPU: no Triton, every step a torch op
    c = count(method, data="fp64" if method in ("fp64", "ozaki2") else "fp32")
    assert c.passes <= UNFUSED[method][0] and c.syncs <= UNFUSED[method][1], c.ops
    assert c.units == (mw.METHODS[method].n_products if method in mw.METHODS else 24 if method == "ozaki2" else 1)


def test_a_matrix_with_zeros_beyond_the_words_range_is_refused(monkeypatch):
    """The one look at the operands reads the largest |x| apart from the smallest nonzero one."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    A = torch.zeros(3, 4, dtype=torch.float64)
    A[1, 2] = 1e300
    with pytest.raises(ValueError, match=r"A\[1, 2\] = 1e\+300 is beyond tf32's largest value"):
        mw.matmul(A, A.T.contiguous(), method="3xtf32")


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
    assert c.ops.count("triton words_kernel") == (0 if method == "ozaki2" else 2)  # one per operand


def test_fp32_sums_of_the_products_are_the_float64_sums_rounded():
    """The outside additions of unscaled words add the unit's fp32 outputs in fp32 (one pass, where the
    numpy path adds in float64 and rounds to fp32): the same bits, ties, overflow and subnormals included,
    against numpy's own binary32 addition and the float64 sum rounded by blockfma.formats.round."""
    from blockfma import formats

    rng = np.random.default_rng(5)
    a = (rng.standard_normal(4000) * 2.0 ** rng.integers(-150, 120, 4000)).astype(np.float32)
    b = (rng.standard_normal(4000) * 2.0 ** rng.integers(-150, 120, 4000)).astype(np.float32)
    edge = [(1, 2**-24), (1 + 2**-23, 2**-24), (-1, -(2**-24)), (3.4028235e38, 2.0**103), (3.4028235e38, 2.0**104),
            (2**-149, 2**-149), (2**-126, -(2**-149)), (1, -1), (-0.0, 0.0), (-0.0, -0.0), (2.0**100, 2.0**-100)]
    a[:len(edge)], b[:len(edge)] = np.array(edge, dtype=np.float32).T
    with np.errstate(over="ignore"):
        want = a + b
        rounded = formats.round("fp32", a.astype(np.float64) + b.astype(np.float64))
    got = (torch.from_numpy(a) + torch.from_numpy(b)).numpy()
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    assert np.array_equal(got.astype(np.float64).view(np.uint64), rounded.view(np.uint64))


# --- the fused split's bits ----------------------------------------------------------------------------------
def _edge_data(m=9, k=40, n=7, seed=3):
    """binary32 data with what rounding tests: ties of tf32 and bf16 (to even, up and down, either sign), -0,
    a value that rounds up into the next binade, the largest tf32 value, wide exponents; and (m, k) x (k, n)."""
    rng = np.random.default_rng(seed)
    A = (rng.standard_normal((m, k)) * 2.0 ** rng.integers(-40, 40, (m, k))).astype(np.float32).astype(np.float64)
    B = (0.5 - rng.random((k, n))).astype(np.float32).astype(np.float64)
    ties = [1 + 2**-11, 1 + 3 * 2**-11, -(1 + 2**-11), 1 + 2**-8, 1 + 3 * 2**-8, -(1 + 3 * 2**-8), -0.0, 0.0,
            2 - 2**-23, (2 - 2**-7) * 2.0**127, 1 + 2**-11 + 2**-23, 2.0**-100 * (1 + 2**-9)]
    A[0, :len(ties)] = ties
    B[:len(ties), 0] = ties
    B[9, 0] = 2.0**-100  # A[0, 9] B[9, 0] within fp32's range
    return A, B


def _bits(x):
    x = x.cpu().numpy() if hasattr(x, "cpu") else np.asarray(x)
    return np.asarray(x, dtype=np.float64).view(np.uint64)


@pytest.mark.parametrize("low,p,rounding", [("tf32", 2, "rne"), ("tf32", 3, "rz"), ("bf16", 3, "rne")])
def test_fused_words_are_the_splits_words(low, p, rounding, interpreter):
    """The kernel's words against the numpy split (blockfma.formats.round, exact rational rounding) and, for
    the first bf16 word, ml_dtypes' bfloat16 conversion (to nearest even)."""
    import ml_dtypes

    from blockfma.multiword import words_fused

    A, B = _edge_data()
    got = words_fused.split(torch, torch.from_numpy(A), torch.from_numpy(B), low, p, rounding == "rne",
                            torch.float32)
    assert got is not None
    for X, words, axis in ((A, got[0], 1), (B, got[1], 0)):
        want = mw.split(X, low, p, rounding=rounding, axis=axis)
        for w, v in zip(words, want):
            assert w.dtype == torch.float32 and np.array_equal(_bits(w), _bits(v))
    if low == "bf16":
        assert np.array_equal(_bits(got[0][0]), _bits(A.astype(ml_dtypes.bfloat16)))


@pytest.mark.parametrize("method", ["tf32", "bf16", "double-bf16", "triple-bf16", "3xtf32", "4xtf32", "bf16x9"])
def test_fused_methods_give_the_numpy_paths_bits(method, interpreter):
    A, B = _edge_data()
    want = mw.matmul(A, B, method=method, backend="hardware:cpu")
    C, info = mw.matmul(torch.from_numpy(A), torch.from_numpy(B), method=method, return_info=True)
    assert np.array_equal(_bits(C), _bits(want)) and info["split"] == "fused (Triton)"


@pytest.mark.parametrize("case", ["float64", "subnormal", "beyond tf32", "beyond binary32", "overflow"])
def test_fused_split_falls_back_to_the_checks(case, interpreter):
    """Data the kernel's words do not serve go the unfused way, with its bits, warnings and errors."""
    A, B = _edge_data(seed=4)
    if case == "float64":
        A = A + 2.0**-40 * np.random.default_rng(0).random(A.shape)
    elif case == "subnormal":  # second words below tf32's normal range, losing bits: a RangeWarning
        A[2] = np.ldexp(1 + np.arange(A.shape[1]) * 2.0**-20, -120)
    elif case.startswith("beyond"):
        A[1, 3] = np.float32(3.4028e38) if case == "beyond tf32" else -1e300
        with pytest.raises(ValueError, match=r"A\[1, 3\] = .* is beyond tf32's largest value"):
            mw.matmul(torch.from_numpy(A), torch.from_numpy(B), method="3xtf32")
        return
    else:
        A[3], B[:, 2] = 2.0**70, 2.0**70
    with warnings.catch_warnings(record=True) as w_np:
        warnings.simplefilter("always")
        want = mw.matmul(A, B, method="3xtf32", backend="hardware:cpu")
    with warnings.catch_warnings(record=True) as w_t:
        warnings.simplefilter("always")
        got, info = mw.matmul(torch.from_numpy(A), torch.from_numpy(B), method="3xtf32", return_info=True)
    assert np.array_equal(_bits(got), _bits(want)) and info["split"] == ("fused (Triton)" if case == "overflow"
                                                                          else "torch")
    assert [str(w.message) for w in w_t] == [str(w.message) for w in w_np]
    assert len(w_t) == (case in ("subnormal", "overflow"))


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("method", ["3xtf32", "bf16x9"])
def test_nan_and_inf_are_refused_by_the_fused_path_too(method, value, interpreter):
    """The word methods' finiteness check is the split kernel's (one read fewer): the same error."""
    A, B = torch.ones(3, 4, dtype=torch.float64), torch.ones(4, 2, dtype=torch.float64)
    B[2, 1] = value
    with pytest.raises(ValueError, match=r"^B=.*B\[2, 1\] = -?(nan|inf) is not finite \(1 non-finite"):
        mw.matmul(A, B, method=method)
    with pytest.raises(ValueError, match=r"B\[2, 1\] = -?(nan|inf) is not finite"):  # an empty product too
        mw.matmul(A[:0], B, method=method)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU visible to torch")
@pytest.mark.parametrize("method", ["tf32", "3xtf32", "bf16x9"])
def test_cuda_fused_words_are_the_splits_words(method, monkeypatch):
    """The compiled kernel's words, in the unit's dtype: the numpy split's."""
    from helpers import triton_mode

    from blockfma.multiword import hardware, words_fused

    triton_mode(monkeypatch, True)
    m_ = mw.METHODS[method]
    A, B = _edge_data(m=300, k=700, n=200)
    T, U = torch.from_numpy(A).cuda(), torch.from_numpy(B).cuda()
    dtype = hardware.TorchUnit(m_.low, "hardware:cuda").dtype
    got = words_fused.split(torch, T, U, m_.low, m_.p, True, dtype)
    assert got is not None
    for X, words, axis in ((A, got[0], 1), (B, got[1], 0)):
        for w, v in zip(words, mw.split(X, m_.low, m_.p, axis=axis)):
            assert w.dtype == dtype and np.array_equal(_bits(w.double()), _bits(v))


if __name__ == "__main__":  # the table of docs/multiword.md: python tests/test_multiword_passes.py
    for name in ["fp32", "fp64", "tf32", "bf16", "double-bf16", "markidis", "ootomo", "3xtf32", "4xtf32", "bf16x9",
                 "ozaki1", "ozaki2"]:
        c = count(name, data="fp64" if name.startswith(("ozaki", "fp64")) else "fp32")
        print(f"| {name} | {c.units} | {c.passes} | {c.traffic:.1f} | {c.syncs} |")
