"""backend="auto" and the Triton kernel: large GEMMs go to it where a GPU is visible, after the kernel has
shown the exact engines' bits for the model on that GPU (once per model); a wrong or failing kernel costs
speed, never bits.  The GPU is stood in here by Triton's interpreter on the CPU."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

pytest.importorskip("torch", reason="backend='triton' takes torch tensors: torch is not installed")
pytest.importorskip("triton", reason="triton is not installed (pip install 'blockfma[triton]')")

import blockfma as bf
from blockfma import formats
from blockfma.engine import registry, triton as tr
from helpers import triton_mode

MODEL = bf.device("H100").model("fp16", "fp32")


@pytest.fixture
def gpu(monkeypatch):
    """A 'visible GPU' that is Triton's interpreter on the CPU, with room for any GEMM, a fresh record of
    verified models, and a small threshold of work so that small GEMMs count as large."""
    triton_mode(monkeypatch, False)
    monkeypatch.setattr(tr, "gpu_visible", lambda: True)
    monkeypatch.setattr(tr, "free_bytes", lambda device: None)
    monkeypatch.setattr(registry, "_VERIFIED", {})
    monkeypatch.setattr(registry, "GPU_MIN_WORK", 4000)
    trial = registry.trial_inputs
    monkeypatch.setattr(registry, "trial_inputs", lambda model: trial(model, m=16, n=16))  # one tile: the interpreter is slow


def inputs(seed: int = 3, shape: tuple[int, int, int] = (16, 30, 16)):
    rng = np.random.default_rng(seed)
    m, k, n = shape
    A = formats.round("fp16", rng.standard_normal((m, k)), "rne")
    B = formats.round("fp16", rng.standard_normal((k, n)), "rne")
    C = formats.round("fp32", rng.standard_normal((m, n)), "rne")
    return A, B, C


def test_trial_inputs_hold_every_kind_of_value():
    A, B, C = registry.trial_inputs(MODEL)
    for x, fmt in ((A, formats.fp16), (B, formats.fp16), (C, formats.fp32)):
        assert np.all(formats.is_representable(fmt, x))
        assert np.isnan(x).any() and np.isposinf(x).any() and np.isneginf(x).any()
        assert (np.signbit(x) & (x == 0)).any() and ((x == 0) & ~np.signbit(x)).any()
        sub = (x != 0) & (np.abs(x) < fmt.smallest_normal)
        assert sub.any()
    k = A.shape[1]
    assert k > 2 * MODEL.step(MODEL.block_width)  # two whole steps and a padded third


def test_auto_runs_large_gemms_on_the_kernel_once_verified(gpu):
    A, B, C = inputs()
    want = formats.bits(bf.gemm(A, B, C, model=MODEL, backend="numpy"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = bf.gemm(A, B, C, model=MODEL)
    assert bf.engine.last_backend() == "triton"
    assert np.array_equal(formats.bits(got), want)
    assert registry._VERIFIED == {MODEL.arithmetic_model(): True}
    bf.gemm(A[:2], B[:, :2], C[:2, :2], model=MODEL)  # 120 products: below the threshold
    assert bf.engine.last_backend() != "triton"


def test_a_kernel_that_differs_is_reported_once_and_not_used_again(gpu, monkeypatch):
    real = tr.gemm

    def off_by_one_ulp(model, A, B, C, **kw):
        D = real(model, A, B, C, **kw)
        i, j = np.argwhere(np.isfinite(D))[0]  # the trial's first finite output (NaN stays NaN)
        D[i, j] = np.nextafter(np.float32(D[i, j]), np.float32(np.inf))
        return D

    monkeypatch.setattr(tr, "gemm", off_by_one_ulp)
    A, B, C = inputs()
    want = formats.bits(bf.gemm(A, B, C, model=MODEL, backend="numpy"))
    with pytest.warns(RuntimeWarning, match=r"differs from the exact engines .* \(2 of 512 trial outputs, first D\[\d+, \d+\]"):
        got = bf.gemm(A, B, C, model=MODEL)
    assert bf.engine.last_backend() != "triton"
    assert np.array_equal(formats.bits(got), want)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once per model
        bf.gemm(A, B, C, model=MODEL)
    assert bf.engine.last_backend() != "triton"


def test_a_kernel_wrong_only_on_finite_operands_is_caught(gpu, monkeypatch):
    """The second trial has no NaN or infinity (the paths that need finite operands, as the grid path's rounding
    instruction): a kernel wrong only there is caught too."""
    real = tr.gemm

    def off_on_finite(model, A, B, C, **kw):
        D = real(model, A, B, C, **kw)
        if np.isfinite(A).all() and np.isfinite(B).all():
            i, j = np.argwhere(np.isfinite(D))[0]
            D[i, j] = np.nextafter(np.float32(D[i, j]), np.float32(np.inf))
        return D

    monkeypatch.setattr(tr, "gemm", off_on_finite)
    A, B, C = inputs()
    with pytest.warns(RuntimeWarning, match=r"differs from the exact engines .* \(1 of 512 trial outputs, first D\[1\d"):
        bf.gemm(A, B, C, model=MODEL)
    assert bf.engine.last_backend() != "triton"


def test_a_kernel_that_fails_is_reported_and_the_cpu_engines_run(gpu, monkeypatch):
    def broken(*args, **kw):
        raise RuntimeError("PTX .version 9.9 does not support .target sm_90a\nmore lines")

    monkeypatch.setattr(tr, "gemm", broken)
    A, B, C = inputs()
    with pytest.warns(RuntimeWarning, match=r"failed .* \(RuntimeError: PTX \.version 9\.9 .*sm_90a\); the CPU"):
        got = bf.gemm(A, B, C, model=MODEL)
    assert bf.engine.last_backend() != "triton"
    assert np.array_equal(formats.bits(got), formats.bits(bf.gemm(A, B, C, model=MODEL, backend="numpy")))


def test_auto_leaves_the_kernel_where_it_cannot_serve(gpu, monkeypatch):
    A, B, C = inputs()
    amx = bf.device("Intel AMX").model("bf16", "fp32")  # a family the kernel does not run
    assert not tr.supports(amx)
    bf.gemm(formats.round("bf16", A, "rne"), formats.round("bf16", B, "rne"), C, model=amx)
    assert bf.engine.last_backend() != "triton"
    monkeypatch.setattr(tr, "free_bytes", lambda device: 1000)  # operands that do not fit the GPU
    bf.gemm(A, B, C, model=MODEL)
    assert bf.engine.last_backend() != "triton"
    assert registry._VERIFIED == {}  # neither call tried the kernel
    monkeypatch.setattr(tr, "free_bytes", lambda device: None)
    monkeypatch.setattr(tr, "gpu_visible", lambda: False)
    bf.gemm(A, B, C, model=MODEL)
    assert bf.engine.last_backend() != "triton"


def test_no_gpu_here_means_no_kernel(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is visible")
    assert not tr.gpu_visible()
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert not tr.gpu_visible()  # the interpreter is never picked by auto: it is slow
