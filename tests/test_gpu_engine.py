"""The GPU engine (torch) against the exact reference and the CPU engines, bit for bit.

The kernels are device-independent torch code built from exact operations only, so they are held to the
reference here on the CPU (``backend="torch"``), in every CI run; the tests marked ``gpu`` run the same
comparisons on a CUDA GPU (``backend="cuda"``) and skip with a reason where there is none.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

torch = pytest.importorskip("torch", reason="the GPU engine needs torch: pip install 'blockfma[torch]'")

import blockfma as bf  # noqa: E402
from blockfma import formats as F  # noqa: E402
from blockfma.engine import array, gpu  # noqa: E402
from blockfma.formats import RoundingMode  # noqa: E402
from blockfma.model import Family, Model  # noqa: E402

from helpers import bits  # noqa: E402
from helpers import MODELS, check_against_reference, dot_cases, draw_rows, finite_inputs  # noqa: E402

GPU_MODELS = [m for m in MODELS if gpu.supports(m)]
GPU_IDS = [m.name or m.summary() for m in GPU_MODELS]
HAVE_CUDA = gpu.available()
needs_cuda = pytest.mark.skipif(not HAVE_CUDA, reason="no CUDA GPU visible to torch")


def test_gpu_engine_covers_the_fused_presets():
    """Every fused preset of the GPUs runs on the GPU engine; fp64 and the step families do not."""
    fused = [m for name in ("V100", "T4", "A100", "Ada", "H100", "B200", "RTX 5090", "MI100", "MI300X")
             for ins in bf.device(name).instructions for m in ins.models.values() if "fp64" not in m.summary()
             and m.family not in (Family.FMA_CHAIN, Family.SCALED_FUSED)  # block-scaled: the reference only, so far
             and m.c_entry == "fused" and m.accumulator_format is None]
    assert len(fused) > 40 and all(gpu.supports(m) for m in fused), [m.summary() for m in fused
                                                                      if not gpu.supports(m)]
    assert {m.family for m in fused} == {Family.TRUNCATED_FUSED, Family.LATE_C, Family.EXACT_FUSED}
    assert not gpu.supports(bf.device("MI250X").model("fp16", "fp32"))
    assert not gpu.supports(bf.device("A100").model("fp64", "fp64"))
    assert not gpu.supports(bf.device("exact").model("fp64", "fp64"))


@pytest.mark.parametrize("model", GPU_MODELS, ids=GPU_IDS)
def test_torch_engine_matches_reference(model: Model):
    """Specials, subnormals, cancellation, ties, overflow: the torch kernels on the CPU, row by row."""
    L = model.block_width or 6
    for k, seed in ((L, 21), (2 * L + 1, 22), (1, 23)):
        a, b, c = draw_rows(model, 40, k, seed)
        check_against_reference(model, a, b, c, ["torch"])


@pytest.mark.slow
@pytest.mark.parametrize("model", GPU_MODELS, ids=GPU_IDS)
def test_torch_engine_matches_reference_long(model: Model):
    L = model.block_width or 6
    for seed in range(3):
        a, b, c = draw_rows(model, 300, 3 * L - 1, 200 + seed)
        check_against_reference(model, a, b, c, ["torch"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dot_cases().filter(lambda case: gpu.supports(case[0])))
def test_torch_engine_matches_reference_hypothesis(case):
    model, a, b, c = case
    check_against_reference(model, np.array([a]), np.array([b]), np.array([c]), ["torch"])


@pytest.mark.parametrize("model", GPU_MODELS, ids=GPU_IDS)
def test_torch_gemm_equals_numpy_gemm(model: Model, monkeypatch):
    """Whole GEMMs with k not a multiple of L, tiled in rows and columns (tiles made small on purpose)."""
    L = model.block_width or 8
    A, B, C = finite_inputs(model, (13, 3 * L + 5, 11), 31)
    monkeypatch.setitem(gpu._TILE, "cpu", array.width(model, L) * 4 * 3)  # 3 columns x 4 rows per step
    got = bits(bf.gemm(A, B, C, model=model, backend="torch"))
    want = bits(bf.gemm(A, B, C, model=model, backend="numpy"))
    assert np.array_equal(got, want), np.argwhere(got != want)[:5]


def test_torch_gemm_with_specials_and_overflow_in_the_chain():
    """Infinite and NaN inputs, and a chain whose running C overflows to infinity after its first block."""
    model = bf.device("H100").model("fp16", "fp16")
    rng = np.random.default_rng(3)
    A = F.round("fp16", rng.normal(size=(6, 40)) * 10)
    B = F.round("fp16", rng.normal(size=(40, 5)) * 10)
    A[0, 3], A[1, 20], B[7, 2] = np.inf, np.nan, -np.inf
    A[2, :] = 255.0
    B[:, 4] = 255.0  # row 2, column 4: 16 products of 65025 exceed binary16's 65504
    C = F.round("fp16", rng.normal(size=(6, 5)))
    D = bf.gemm(A, B, C, model=model, backend="torch")
    assert np.array_equal(bits(D), bits(bf.gemm(A, B, C, model=model, backend="numpy")))
    assert D[2, 4] == np.inf and np.isnan(D[1, 0]) and np.isnan(D[0, 2])


def test_late_c_product_overflow_on_torch():
    """bf16 products beyond binary32's range are infinite terms in late-c (MI300X)."""
    model = bf.device("MI300X").model("bf16", "fp32")
    a = np.array([[2.0**100, 1.0, 0.0, 0.0, 0, 0, 0, 0], [2.0**100, -(2.0**100), 0, 0, 0, 0, 0, 0]])
    b = np.array([[2.0**50, 1.0, 0, 0, 0, 0, 0, 0], [2.0**50, 2.0**50, 0, 0, 0, 0, 0, 0]])
    check_against_reference(model, a, b, np.array([1.0, 0.0]), ["torch"])


@pytest.mark.parametrize("xp", ["numpy", "torch"])
@pytest.mark.parametrize("fmt", ["fp32", "fp16", "bf16", "e4m3fn", "e5m2fnuz", "e8m13"])
@pytest.mark.parametrize("mode", list(RoundingMode))
def test_round_to_matches_round_integer(fmt, mode, xp):
    """array.round_to (on numpy arrays and on torch tensors) against formats.round_integer: every mode,
    subnormals kept or flushed, each overflow policy, on values near ties, near the subnormal range and
    beyond the largest finite value."""
    fmt = F.get(fmt)
    rng = np.random.default_rng(7)
    mag = rng.integers(1, 1 << 40, size=3000)
    mag[:500] = (rng.integers(1, 1 << 12, size=500) << 3) | 4  # ties and near-ties at a few bits
    exp = rng.integers(fmt.emin - fmt.precision - 45, fmt.emax - 30, size=mag.size)
    sign = rng.random(mag.size) < 0.5
    x = np.where(sign, -1.0, 1.0) * np.ldexp(mag.astype(np.float64), exp)
    for subnormals in (True, False):
        for overflow in ("ieee", "inf", "saturate"):
            want = F.round_integer(fmt, sign, mag, exp, mode, subnormals=subnormals, overflow=overflow)
            if xp == "torch":
                got = array.round_to(torch, fmt, torch.from_numpy(x), mode, subnormals=subnormals,
                                     overflow=overflow).numpy()
            else:
                got = array.round_to(np, fmt, x, mode, subnormals=subnormals, overflow=overflow)
            assert np.array_equal(bits(got), bits(want)), (subnormals, overflow, x[bits(got) != bits(want)][:3])


def test_backend_errors_are_clear():
    A = np.ones((2, 16))
    B = np.ones((16, 2))
    with pytest.raises(ValueError, match="backend must be one of"):
        bf.gemm(A, B, backend="gpu")
    with pytest.raises(ValueError, match="does not run"):
        bf.gemm(A, B, device="MI250X", backend="torch")
    if not HAVE_CUDA:
        with pytest.raises(ValueError, match="needs a CUDA GPU"):
            bf.gemm(A, B, backend="cuda")


# --- on a GPU ------------------------------------------------------------------------------------------
@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("model", GPU_MODELS, ids=GPU_IDS)
def test_cuda_engine_matches_reference(model: Model):
    L = model.block_width or 8
    a, b, c = draw_rows(model, 64, 2 * L + 1, 41)
    check_against_reference(model, a, b, c, ["cuda"])


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("model", GPU_MODELS, ids=GPU_IDS)
def test_cuda_gemm_equals_cpu_engine_on_random_inputs(model: Model):
    A, B, C = finite_inputs(model, (256, 512, 192), 43)
    got = bits(bf.gemm(A, B, C, model=model, backend="cuda"))
    want = bits(bf.gemm(A, B, C, model=model, backend="auto"))
    assert np.array_equal(got, want), np.argwhere(got != want)[:5]


COMPILED_CASES = [bf.device("H100").model("fp16", "fp32"), bf.device("MI300X").model("bf16", "fp32")]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch's own, raised while compiling
@pytest.mark.parametrize("model", COMPILED_CASES, ids=[m.summary() for m in COMPILED_CASES])
def test_compiled_blocks_equal_numpy_engine(model: Model, monkeypatch):
    """torch.compile fuses each block into one kernel (Triton on a GPU, C++ here): the fused kernel is
    bit for bit the op-by-op one, edge tiles (other shapes) and non-finite inputs included."""
    monkeypatch.setitem(gpu.COMPILE, "cpu", True)
    monkeypatch.setattr(gpu, "_STEPS", {})
    monkeypatch.setitem(gpu._TILE, "cpu", array.width(model, model.block_width) * 64)  # 8 x 8 tiles of 20 x 13
    from torch._dynamo.utils import counters

    counters.clear()
    A, B, C = finite_inputs(model, (20, 2 * model.block_width + 3, 13), 51)
    A[3, 1], B[2, 7] = np.inf, np.nan
    got = bits(bf.gemm(A, B, C, model=model, backend="torch"))
    want = bits(bf.gemm(A, B, C, model=model, backend="numpy"))
    assert np.array_equal(got, want), np.argwhere(got != want)[:5]
    assert gpu._STEPS and all(step is not None for step in gpu._STEPS.values())
    assert not counters["graph_break"], dict(counters["graph_break"])  # one graph per block, no Python between


def test_a_failing_compile_falls_back_to_op_by_op(monkeypatch):
    """No Triton or no C++ compiler: one warning, then the same bits op by op."""
    def broken(fn, **kwargs):
        def run(*args):
            raise RuntimeError("no compiler here")
        return run

    monkeypatch.setitem(gpu.COMPILE, "cpu", True)
    monkeypatch.setattr(gpu, "_STEPS", {})
    monkeypatch.setattr(torch, "compile", broken)
    model = bf.device("H100").model("fp16", "fp32")
    A, B, C = finite_inputs(model, (5, 40, 4), 61)
    with pytest.warns(RuntimeWarning, match="no compiler here"):
        got = bf.gemm(A, B, C, model=model, backend="torch")
    assert np.array_equal(bits(got), bits(bf.gemm(A, B, C, model=model, backend="numpy")))


def test_auto_moves_only_large_calls_that_numba_cannot_run_to_the_gpu(monkeypatch):
    """backend='auto' with a CUDA GPU (simulated here: the 'cuda' device is the CPU): numba keeps what it
    runs; a large call it cannot run goes to the GPU engine, a small one to numpy; last_backend says which."""
    from blockfma.engine import registry

    monkeypatch.setattr(gpu, "available", lambda: True)
    monkeypatch.setattr(gpu, "torch_device", lambda backend: torch.device("cpu"))
    model = bf.device("H100").model("fp16", "fp32")
    A, B, C = finite_inputs(model, (256, 256, 256), 71)  # 2**24 products: registry.GPU_MIN_WORK
    want = bits(bf.gemm(A, B, C, model=model, backend="numpy"))
    if registry._fast_module():
        assert np.array_equal(bits(bf.gemm(A, B, C, model=model)), want)
        assert bf.engine.last_backend() == "numba"
    monkeypatch.setattr(registry, "_FAST", False)  # as without numba
    assert np.array_equal(bits(bf.gemm(A, B, C, model=model)), want)
    assert bf.engine.last_backend() == "cuda"
    bf.gemm(A[:8], B, C[:8], model=model)
    assert bf.engine.last_backend() == "numpy"
    bf.gemm(A, B, C, device="MI250X")  # pairwise: not on the GPU engine
    assert bf.engine.last_backend() == "numpy"
