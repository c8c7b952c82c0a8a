"""The 'torch' probe target (torch.baddbmm, cuBLAS on a GPU): its calls on the CPU, its errors, the matmul
switches it sets and restores; the cuBLAS readings themselves are held to the H100 record in
tests/test_probe_records.py, and the runs on a GPU are marked gpu."""

from __future__ import annotations

import numpy as np
import pytest

import blockfma as bf
from blockfma import formats as F
from blockfma.probes import targets
from blockfma.torch_switches import matmul_switches, readable, tf32_enabled

from helpers import bits

torch = pytest.importorskip("torch", reason="the torch target needs torch: pip install 'blockfma[torch]'")


def _switches() -> tuple:
    m = torch.backends.cuda.matmul
    return (tf32_enabled(torch), readable(m, "allow_fp16_reduced_precision_reduction"),
            readable(m, "allow_bf16_reduced_precision_reduction"), readable(m, "allow_fp16_accumulation"))


@pytest.mark.parametrize("fmt", ["fp16", "bf16", "fp32"])
def test_cpu_target_gives_exact_small_integer_dot_products(fmt):
    t = targets.target("torch:cpu", fmt, fmt, k=8)
    rng = np.random.default_rng(1)
    a, b = rng.integers(-4, 5, (40, 8)).astype(float), rng.integers(-4, 5, (40, 8)).astype(float)
    c = rng.integers(-16, 17, 40).astype(float)
    before = _switches()
    d = t(a, b, c)
    assert _switches() == before
    assert np.array_equal(np.asarray(d, dtype=np.float64), (a * b).sum(axis=1) + c)
    assert t.formats.d.name == fmt and t.metadata()["call"].startswith("torch.baddbmm")


def test_switches_are_set_for_the_block_and_restored_after_an_error():
    m = torch.backends.cuda.matmul
    before = _switches()
    with pytest.raises(RuntimeError, match="inside"):
        with matmul_switches(torch, tf32=not before[0], reduced=True):
            assert tf32_enabled(torch) is (not before[0])
            if readable(m, "allow_fp16_reduced_precision_reduction") is not None:
                assert bool(np.all(m.allow_fp16_reduced_precision_reduction))
            raise RuntimeError("inside")
    assert _switches() == before
    with matmul_switches(torch):  # nothing given: nothing touched
        assert _switches() == before


def test_fp32_output_needs_cuda_and_other_pairs_are_refused():
    with pytest.raises(targets.TargetError, match="needs CUDA"):
        targets.TorchTarget("fp16", 8, "cpu", output_format="fp32")
    with pytest.raises(ValueError, match="or fp32 from fp16 or bf16"):
        targets.target("torch:cpu", "bf16", "fp16", k=8)
    with pytest.raises(ValueError, match="or fp32 from fp16 or bf16"):
        targets.target("torch:cpu", "fp32", "fp16", k=8)


# --- on a GPU ------------------------------------------------------------------------------------------
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU visible to torch")


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("fmt", ["fp16", "bf16"])
def test_cublas_fp16_and_bf16_outputs_are_the_cublas_preset(fmt):
    """torch.baddbmm with fp16/bf16 D on this GPU against the H100 'cublas' preset (fp32 accumulation over
    K, the sum stored, then C): the probe's verification on random rows (only where the preset is an
    H100's)."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the cublas preset is the H100's")
    f = bf.probe("torch:cuda", fmt, fmt, k=64, verify=20_000)
    assert f.verified, f.verification
    preset = bf.device("H100").model(fmt, fmt, "cublas")
    rng = np.random.default_rng(2)
    a = F.round(fmt, rng.standard_normal((5000, 64)))
    b = F.round(fmt, rng.standard_normal((5000, 64)))
    c = F.round(fmt, rng.standard_normal(5000))
    assert np.array_equal(bits(targets.target("torch:cuda", fmt, fmt, k=64)(a, b, c)),
                          bits(bf.dot(a, b, c, model=preset)))


@pytest.mark.gpu
@needs_cuda
def test_fp32_output_from_fp16_runs_on_the_gpu():
    """The out_dtype path (cuBLAS writing its fp32 accumulator): 1 + 2**-12 survives, as it would not if D
    were rounded to fp16 first."""
    t = targets.target("torch:cuda", "fp16", "fp32", k=16)
    a = np.zeros((1, 16))
    b = np.zeros((1, 16))
    a[0, :2], b[0, :2] = (1.0, 2.0**-6), (1.0, 2.0**-6)
    d = t(a, b, np.zeros(1))
    assert float(d[0]) == 1 + 2.0**-12 and t.formats.d.name == "fp32"
