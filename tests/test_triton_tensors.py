"""bf.gemm and bf.torch.emulate on torch tensors where they lie (blockfma.engine.tensors), the Triton kernel
run by its interpreter on the CPU: no operand or result copied to the host outside the kernel launches (the
interpreter's own copies), the numpy engine's bits, and one compilation per layout, not per shape."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch", reason="the tensor path takes torch tensors: torch is not installed")
pytest.importorskip("triton", reason="triton is not installed (pip install 'blockfma[triton]')")

import torch

import blockfma as bf
from blockfma.engine import registry, tensors, triton as tr
from helpers import triton_mode

H100 = bf.device("H100").model("fp16", "fp32")


@pytest.fixture(autouse=True)
def interpreter(monkeypatch):
    triton_mode(monkeypatch, False)


class _Guard:
    """Host copies of tensors refused (Tensor.numpy, .cpu, __array__, np.asarray on a tensor of more than
    four values) except inside the kernels' launches (the interpreter runs them on host copies)."""

    def __init__(self, monkeypatch):
        self.inside = 0
        self.operands = []  # the dtypes of A and B each launch read
        for name in ("numpy", "cpu", "__array__"):
            monkeypatch.setattr(torch.Tensor, name, self._refused(getattr(torch.Tensor, name), f"Tensor.{name}"))
        asarray = np.asarray
        monkeypatch.setattr(np, "asarray", lambda x, *a, **k: self._refused(asarray, "np.asarray")(x, *a, **k)
                            if isinstance(x, torch.Tensor) else asarray(x, *a, **k))
        kernel = tr._kernel()  # imported in this process's mode (the fixture's)
        monkeypatch.setattr(tr, "_kernel", lambda: self._launcher(kernel))

    def _refused(self, real, what):
        def call(x, *args, **kwargs):
            if not self.inside and x.numel() > 4:
                raise AssertionError(f"{what} copied a tensor of {x.numel()} values to the host")
            return real(x, *args, **kwargs)

        return call

    def _launcher(self, kernel):
        guard = self

        class Launcher:
            def __getitem__(self, grid):
                def launch(*args, **kwargs):
                    guard.operands.append((args[0].dtype, args[1].dtype))
                    guard.inside += 1
                    try:
                        return kernel[grid](*args, **kwargs)
                    finally:
                        guard.inside -= 1

                return launch

        return Launcher()


def _bits(x):
    return bf.formats.bits(np.asarray(x))


@pytest.mark.parametrize("device,fin,fout,dtype", [("H100", "fp16", "fp32", torch.float16),  # the fast path
                                                   ("H100", "fp16", "fp16", torch.float32),  # checked on the device
                                                   ("MI300X", "bf16", "fp32", torch.bfloat16),  # exponents looked at
                                                   ("H100", "tf32", "fp32", torch.float32),  # checked on the device
                                                   ("MI300X", "fp32", "fp32", torch.float32),  # the FMA chain
                                                   ("H100", "e4m3fn", "fp32", torch.float8_e4m3fn)])  # read as fp8
def test_gemm_on_tensors_runs_where_they_lie_without_host_copies(monkeypatch, device, fin, fout, dtype):
    """... and, with ``triton.STORAGE_LOADS``, the kernel reads A and B in the dtype they come in (fp8, fp16, bf16:
    no float32 copies); without it (the default until a GPU measures the trade) as float32 copies made there."""
    model = bf.device(device).model(fin, fout)
    A, B, C = registry.trial_inputs(model, m=20, n=12)  # NaN, infinities, zeros of both signs, subnormals
    want = bf.gemm(A, B, C, model=model, backend="numpy")
    a, b, c = (torch.from_numpy(x).to(t) for x, t in ((A, dtype), (B, dtype), (C, torch.float32)))  # exact
    guard = _Guard(monkeypatch)
    for copy in (lambda: a.numpy(), lambda: a.cpu(), lambda: np.asarray(a), lambda: np.array(a)):
        with pytest.raises(AssertionError, match="to the host"):  # the guard holds
            copy()
    results = []
    for storage in (False, True) if dtype != torch.float32 else (False,):  # float32: the same either way
        monkeypatch.setattr(tr, "STORAGE_LOADS", storage)
        got = bf.gemm(a, b, c, model=model, backend="triton")
        assert bf.engine.last_backend() == "triton" and isinstance(got, torch.Tensor) and got.device == a.device
        results.append(got)
    assert guard.operands == [(torch.float32, torch.float32), (dtype, dtype)][:len(results)]
    monkeypatch.undo()
    for got in results:
        assert got.dtype == getattr(torch, tensors.DTYPES[fout]) and np.array_equal(_bits(got.numpy()), _bits(want))


def test_gemm_on_tensors_without_c_and_with_a_broadcast_c(monkeypatch):
    A, B, _ = registry.trial_inputs(H100, m=16, n=8)
    a, b = (torch.from_numpy(x).to(torch.float16) for x in (A, B))
    row = np.linspace(-3, 3, 8).astype(np.float32).astype(np.float64)
    want_none = bf.gemm(A, B, model=H100, backend="numpy")
    want_row = bf.gemm(A, B, row, model=H100, backend="numpy")
    _Guard(monkeypatch)
    got_none = bf.gemm(a, b, model=H100, backend="triton")
    got_row = bf.gemm(a, b, torch.tensor(row, dtype=torch.float32), model=H100, backend="triton")
    monkeypatch.undo()
    assert np.array_equal(_bits(got_none.numpy()), _bits(want_none))
    assert np.array_equal(_bits(got_row.numpy()), _bits(want_row))


def test_checks_only_where_the_dtype_does_not_guarantee_the_format():
    fp16, e4m3 = bf.formats.get("fp16"), bf.formats.get("e4m3fn")
    assert tensors.holds(fp16, torch.float16) and tensors.holds(bf.formats.get("fp32"), torch.bfloat16)
    assert not tensors.holds(fp16, torch.float32) and not tensors.holds(e4m3, torch.float16)
    assert not tensors.holds(bf.formats.get("e4m3fnuz"), torch.float8_e4m3fn)  # its -0 and NaN codes
    x = torch.tensor([[1.0, 448.0], [float("nan"), -0.0]])
    assert tensors.check(e4m3, x, "A")
    with pytest.raises(ValueError, match=r"^A\[0, 1\] = 449.0 is not representable in e4m3fn; round it first"):
        tensors.check(e4m3, torch.tensor([[1.0, 449.0]]), "A")
    with pytest.raises(ValueError, match=r"^A\[0\] = inf is not representable in e4m3fn"):
        tensors.check(e4m3, torch.tensor([float("inf")]), "A")
    with pytest.raises(ValueError, match=r"^B\[1\] = -0.0 is not representable in e4m3fnuz"):
        tensors.check(bf.formats.get("e4m3fnuz"), torch.tensor([1.0, -0.0]), "B")
    tf32, e2m1 = bf.formats.get("tf32"), bf.formats.get("e2m1fn")
    assert tensors.check(tf32, torch.tensor([1 + 2.0**-10, -(2.0**-126), 2.0**-136, 2.0**127, float("inf")]), "A")
    with pytest.raises(ValueError, match=r"^A\[1\] = 1.0009765625 is not representable in e2m1fn"):
        tensors.check(e2m1, torch.tensor([6.0, 1 + 2.0**-10], dtype=torch.float64), "A")
    with pytest.raises(ValueError, match=r"^A\[0\] = 1.00048828125 is not representable in tf32"):
        tensors.check(tf32, torch.tensor([1 + 2.0**-11]), "A")
    assert tensors.check(e4m3, torch.tensor([448.0, -(2.0**-9)]).to(torch.float8_e4m3fn), "A")  # fp8 looked at
    assert tensors.check(bf.formats.get("e5m2"), torch.tensor([2.0**-16, 57344.0]).to(torch.float16), "A")
    assert not tensors.check(fp16, torch.ones(2, dtype=torch.int32), "A")  # integers: the host reads them
    with pytest.raises(ValueError, match=r"^A\[0, 0\] = 0.1 is not representable in fp16"):
        bf.gemm(torch.full((2, 16), 0.1, dtype=torch.float64), torch.ones((16, 2)), model=H100, backend="triton")


def test_what_the_tensor_path_leaves_to_the_host():
    a, b = torch.ones((4, 16), dtype=torch.float16), torch.ones((16, 2), dtype=torch.float16)
    want = bf.gemm(np.ones((4, 16)), np.ones((16, 2)), model=H100, backend="numpy")
    for backend in ("auto", "numpy"):  # auto leaves CPU tensors to the host; numpy runs host arrays only
        got = bf.gemm(a, b, model=H100, backend=backend)
        assert isinstance(got, np.ndarray) and np.array_equal(_bits(got), _bits(want))
    got = bf.gemm(a, b, model=H100, backend="triton", round_inputs="rne")  # rounding runs on the host
    assert isinstance(got, np.ndarray) and np.array_equal(_bits(got), _bits(want))
    tf32 = bf.device("H100").model("tf32", "fp32")  # float32 tensors checked on their device
    assert isinstance(bf.gemm(torch.ones((4, 8)), torch.ones((8, 2)), model=tf32, backend="triton"), torch.Tensor)
    bf16 = bf.gemm(a.to(torch.bfloat16), b.to(torch.bfloat16), model=bf.device("H100").model("bf16", "fp32"))
    assert isinstance(bf16, np.ndarray) and np.array_equal(_bits(bf16), _bits(want))  # bf16 tensors reach the host


def test_emulate_on_tensors_copies_nothing_to_the_host(monkeypatch):
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(12, 40, generator=g).half(), torch.randn(40, 8, generator=g).half()
    c = torch.randn(12, 8, generator=g).half()
    with bf.torch.emulate("H100", backend="numpy"):
        want, want_c = a @ b, torch.addmm(c, a, b)
    _Guard(monkeypatch)
    with bf.torch.emulate("H100", backend="triton"):
        got, got_c = a @ b, torch.addmm(c, a, b)
    monkeypatch.undo()
    for x, y in ((got, want), (got_c, want_c)):
        assert x.dtype == y.dtype and torch.equal(x.view(torch.int16), y.view(torch.int16))


def _binder(kernel):
    """The launcher's specialization of a kernel compiled (not interpreted) for sm_90: what keys its
    compilation cache (Triton's JITFunction.run), computed without a GPU."""
    try:
        from triton.backends.compiler import GPUTarget
        from triton.compiler import make_backend
        from triton.runtime.jit import JITFunction, create_function_from_signature
    except ImportError as exc:
        pytest.skip(f"this Triton does not expose its launcher's binder ({exc})")
    jit = JITFunction(kernel.fn, **kernel.kwargs)
    binder = create_function_from_signature(jit.signature, jit.params, make_backend(GPUTarget("cuda", 90, 32)))

    def key(args, kwargs):
        _, specialization, options = binder(*args, **kwargs)
        return str(specialization) + str(options)

    return key


class _Recorder:
    """A kernel that records its launches' arguments (and computes nothing)."""

    def __init__(self):
        self.launches = []

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.launches.append((args, kwargs))


@pytest.mark.parametrize("model,dtype", [(H100, torch.float32), (bf.device("MI300X").model("fp32", "fp32"), None),
                                         (H100, torch.float16), (bf.device("H100").model("e4m3fn", "fp32"),
                                                                 torch.float8_e4m3fn)])
def test_a_new_shape_of_the_same_layout_compiles_nothing_new(monkeypatch, model, dtype):
    gemm_key = _binder(tr._kernel())
    gemm = _Recorder()
    monkeypatch.setattr(tr, "_kernel", lambda: gemm)

    def key(m, k, n, c=True):
        a, b = torch.ones((m, k), dtype=dtype), torch.ones((k, n), dtype=dtype)  # (A and B as they come)
        tr.gemm_tensors(model, a, b, torch.zeros((m, n)) if c else torch.zeros((1, 1)).expand(m, n), specials=False)
        return gemm_key(*gemm.launches[-1])

    first = key(16, 32, 16)
    assert key(48, 96, 32) == first and key(64, 256, 160) == first  # rows, K, N: no new compilation
    odd = key(21, 48, 16)  # tiles that do not divide M: one more compilation (EVEN: masks), shared by all such
    assert odd != first and key(37, 64, 32) == odd
    assert key(48, 40, 32) != first  # a row stride not a multiple of 16: one more compilation (vector loads)
    assert key(16, 32, 16, c=False) == key(48, 64, 80, c=False)  # C read with strides 0: its own, once
    if dtype not in (None, torch.float32):  # A and B read in their own dtype: a compilation of their own
        wide = torch.ones((16, 32)), torch.ones((32, 16))
        tr.gemm_tensors(model, *wide, torch.zeros((16, 16)), specials=False)
        assert gemm_key(*gemm.launches[-1]) != first


def test_storage_dtypes_of_any_strides():
    """A and B read in their storage dtype as views of any strides: a column-major fp8 A, fp8 values held in
    fp16 every other column of B, a broadcast C; a bf16 A broadcast along its rows: the numpy engine's bits."""
    rng = np.random.default_rng(31)
    for fin, ta, tb in (("e4m3fn", torch.float8_e4m3fn, torch.float16), ("bf16", torch.bfloat16, torch.bfloat16)):
        model = bf.device("H100").model(fin, "fp32")
        A = bf.formats.round(fin, rng.standard_normal((1 if fin == "bf16" else 5, 32)))
        B = bf.formats.round(fin, rng.standard_normal((32, 6)))
        C = bf.formats.round("fp32", rng.standard_normal((1, 6)))
        a = torch.from_numpy(A).to(ta).expand(5, 32) if fin == "bf16" else torch.from_numpy(A.T.copy()).to(ta).T
        b = torch.from_numpy(np.repeat(B, 2, axis=1)).to(tb)[:, ::2]
        assert not a.is_contiguous() and not b.is_contiguous()
        got = tr.gemm_tensors(model, a, b, torch.from_numpy(C.astype(np.float32)).expand(5, 6))
        want = bf.gemm(np.broadcast_to(A, (5, 32)), B, np.broadcast_to(C, (5, 6)), model=model, backend="numpy")
        assert np.array_equal(got.numpy().view(np.uint32), want.astype(np.float32).view(np.uint32))


def test_gemm_tensors_checks_its_operands_where_they_enter(monkeypatch):
    """gemm_tensors reads its operands by their strides: a short one was read past (garbage, no error); now
    shapes, dtypes and devices are refused by name at the entry, and views of any strides (a transposed A,
    a strided B, a broadcast C) give the numpy engine's bits."""
    from blockfma.arguments import ArgumentError

    a, b, c = torch.ones((4, 8)), torch.ones((8, 3)), torch.zeros((4, 3))
    cases = [((a, torch.ones((6, 3)), c), r"^b=<shape \(6, 3\)>: must have shape \(8, 3\) with a \(4, 8\)$"),
             ((a, b, torch.zeros((2, 3))), r"^c=<shape \(2, 3\)>: must have shape \(4, 3\) with a \(4, 8\)$"),
             ((a.double(), b, c), r"^a=<2-D torch.float64>: must be a 2-D torch tensor of dtype float32 or "
                                  r"float16 or bfloat16 or float8_e4m3fn or float8_e5m2$"),
             ((a, torch.ones(8), c), r"^b=<1-D torch.float32>: must be a 2-D torch tensor of dtype float32 or "),
             ((a, b, c.half()), r"^c=<2-D torch.float16>: must be a 2-D torch tensor of dtype float32$"),
             ((a, b, np.zeros((4, 3), np.float32)), r"^c=<ndarray>: must be a 2-D torch tensor of dtype float32$"),
             ((a, b, c.to("meta")), r"^c=<on meta>: every operand on one device, a CUDA GPU \(or the CPU under "
                                    r"Triton's interpreter, TRITON_INTERPRET=1\); a is on cpu$")]
    for args, message in cases:
        with pytest.raises(ArgumentError, match=message):
            tr.gemm_tensors(H100, *args)
    rng = np.random.default_rng(5)
    A = bf.formats.round("fp16", rng.standard_normal((5, 24)))
    B = bf.formats.round("fp16", rng.standard_normal((24, 6)))
    C = bf.formats.round("fp32", rng.standard_normal((1, 6)))
    want = bf.gemm(A, B, np.broadcast_to(C, (5, 6)), model=H100, backend="numpy").view(np.uint32)
    at = torch.from_numpy(np.ascontiguousarray(A.T, dtype=np.float32)).T  # column-major A
    wide = torch.from_numpy(np.repeat(B, 2, axis=1).astype(np.float32))[:, ::2]  # B every other column
    c1 = torch.from_numpy(C.astype(np.float32)).expand(5, 6)  # strides 0 along rows
    assert not at.is_contiguous() and not wide.is_contiguous()
    got = tr.gemm_tensors(H100, at, wide, c1).numpy().view(np.uint32)
    assert np.array_equal(got, want)
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # CPU tensors without the interpreter: refused before any launch
    with pytest.raises(ArgumentError, match=r"^a=<on cpu>: every operand on one device, a CUDA GPU \(or the CPU"):
        tr.gemm_tensors(H100, a, b, c)
