"""bf.torch.emulate, issue 20 part 3: torch._scaled_mm, split-K plans, the tensors' own device (the Triton
kernel under its interpreter on the CPU), bad input, and the GPU engine's up-front memory refusal.

Oracles: ``bf.gemm`` with the numpy engine on the operands' values (ml_dtypes arrays for fp8), the
documented epilogue steps in numpy binary32, exact powers of two; results compared as bit patterns."""

from __future__ import annotations

import importlib

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import blockfma as bf  # noqa: E402
from blockfma.arguments import ArgumentError  # noqa: E402
from blockfma.torch_switches import matmul_switches  # noqa: E402

INT = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32}
NP8 = {torch.float8_e4m3fn: ml_dtypes.float8_e4m3fn, torch.float8_e5m2: ml_dtypes.float8_e5m2}


def same_bits(x, y):
    assert x.dtype == y.dtype and x.shape == y.shape, (x.dtype, y.dtype, x.shape, y.shape)
    assert torch.equal(x.contiguous().view(INT[x.dtype]), y.contiguous().view(INT[y.dtype]))


def data(*shape, dtype=torch.float16, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).to(dtype)


def np8(t):
    """An fp8 tensor's codes as an ml_dtypes array (bits unchanged)."""
    return t.contiguous().view(torch.uint8).numpy().view(NP8[t.dtype])


def f32(x):
    return torch.from_numpy(np.ascontiguousarray(np.asarray(x, dtype=np.float32)))


# --- torch._scaled_mm -----------------------------------------------------------------------------------------
H100_FP8 = bf.device("H100").model("e4m3fn", "fp32")
PROMOTED = H100_FP8.replace(c_entry="after", instruction_k=128)


def fp8_operands(k=256, dtype_b=torch.float8_e4m3fn):
    a = data(6, k, scale=8.0, seed=1).float().to(torch.float8_e4m3fn)
    b = data(5, k, scale=0.5, seed=2).float().to(dtype_b).t()  # column-major, as cuBLAS takes mat2
    return a, b


def test_scaled_mm_power_of_two_scales_are_exact_and_promotion_matters():
    a, b = fp8_operands()
    sa, sb = torch.tensor(2.0**-3), torch.tensor(4.0)
    with bf.torch.emulate("H100") as emu:
        fast = torch._scaled_mm(a, b, sa, sb, out_dtype=torch.float32, use_fast_accum=True)
        slow = torch._scaled_mm(a, b, sa, sb, out_dtype=torch.float32)
    want_fast = bf.gemm(np8(a), np8(b), model=H100_FP8, backend="numpy") * np.float32(0.5)
    want_slow = bf.gemm(np8(a), np8(b), model=PROMOTED, backend="numpy") * np.float32(0.5)
    same_bits(fast, f32(want_fast))
    same_bits(slow, f32(want_slow))
    assert not torch.equal(fast, slow)  # K = 256: the 13-bit accumulator against fp32 sums every 128
    assert [o.op for o in emu.log] == ["_scaled_mm", "_scaled_mm"]
    assert "promoted" in emu.log[1].route.note and "use_fast_accum" in emu.log[0].route.note
    exact = np8(a).astype(np.float64) @ np8(b).astype(np.float64) * 0.5
    assert np.abs(slow.numpy() - exact).max() < np.abs(fast.numpy() - exact).max()  # promotion helps


def test_scaled_mm_rowwise_scales_bias_and_bf16_output_follow_the_documented_steps():
    a, b = fp8_operands(k=96, dtype_b=torch.float8_e5m2)  # mixed e4m3 x e5m2
    sa = torch.linspace(0.3, 1.7, 6).reshape(6, 1)
    sb = torch.linspace(0.11, 0.9, 5).reshape(1, 5)
    bias = data(5, dtype=torch.bfloat16, seed=3)
    with bf.torch.emulate("H100"):
        got = torch._scaled_mm(a, b, sa, sb, bias=bias, out_dtype=torch.bfloat16, use_fast_accum=True)
    model = bf.device("H100").model("e4m3fn*e5m2", "fp32")
    P = bf.gemm(np8(a), np8(b), model=model, backend="numpy").astype(np.float32)
    d = P * (sa.numpy() * sb.numpy()) + bias.float().numpy()  # binary32 steps, nearest even
    want = torch.from_numpy(d.astype(ml_dtypes.bfloat16).view(np.int16)).view(torch.bfloat16)
    same_bits(got, want)
    native = torch._scaled_mm(a, b, sa, sb, bias=bias, out_dtype=torch.float32)  # torch's CPU kernel: exact sums
    assert torch.allclose(got.float(), native, rtol=2e-2, atol=2e-2)  # the same scales on the same axes


def test_scaled_mm_nan_and_inf_follow_the_device_model():
    a, b = fp8_operands(k=64)
    a = a.clone()
    a.view(torch.uint8)[0, 3] = 0x7F  # e4m3fn NaN
    a.view(torch.uint8)[1, 0] = 0x7E  # 448, with a large scale below: overflow to inf in fp16
    with bf.torch.emulate("H100"):
        got32 = torch._scaled_mm(a, b, torch.tensor(1.0), torch.tensor(1.0), out_dtype=torch.float32,
                                 use_fast_accum=True)
        got16 = torch._scaled_mm(a, b, torch.tensor(2.0**10), torch.tensor(1.0), out_dtype=torch.float16,
                                 use_fast_accum=True)
    P = bf.gemm(np8(a), np8(b), model=H100_FP8, backend="numpy")
    same_bits(got32, f32(P))
    assert torch.isnan(got32[0]).all() and torch.isinf(got16[1]).any()
    nan16 = bf.formats.bits(bf.gemm(np.full((1, 1), np.nan), np.ones((1, 1)), model=bf.device("H100").model(
        "fp16", "fp16"), backend="numpy"))[0, 0]
    assert set(got16[0].view(torch.int16).numpy().astype(np.uint16).tolist()) == {int(nan16)}


def test_scaled_mm_on_a_device_without_fp8():
    a, b = fp8_operands(k=32)
    with bf.torch.emulate("A100"):
        with pytest.raises(ArgumentError, match="A100 has no e4m3fn -> fp32 matrix model") as e:
            torch._scaled_mm(a, b, torch.tensor(1.0), torch.tensor(1.0), out_dtype=torch.float32)
    assert "emulate a device with fp8 units" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("kw,match", [
    (dict(out_dtype=None), "^out_dtype=None: an fp8 .*pass out_dtype=torch.bfloat16"),
    (dict(out_dtype=torch.float32, scale_result=torch.tensor(1.0)), "^scale_result=a tensor: scales an fp8"),
    (dict(out_dtype=torch.float32, scale_a=torch.ones(3, 1)), r"^scale_a=shape \(3, 1\): must hold one value .*"
                                                              r"shape \(6, 1\)"),
    (dict(out_dtype=torch.float32, scale_b=torch.tensor(1.0, dtype=torch.float16)), "^scale_b=torch.float16: must"),
    (dict(out_dtype=torch.float32, bias=torch.ones(4)), r"^bias=\(4,\) torch.float32: must be a 1-D .* of 5 values"),
])
def test_scaled_mm_bad_arguments(kw, match):
    a, b = fp8_operands(k=32)
    args = dict(scale_a=torch.tensor(1.0), scale_b=torch.tensor(1.0))
    args.update(kw)
    with bf.torch.emulate("H100"), pytest.raises(ArgumentError, match=match):
        torch._scaled_mm(a, b, **args)


# --- split-K --------------------------------------------------------------------------------------------------
H100_FP16_ACC = bf.device("H100").instruction("mma").models[("fp16", "fp16")]  # sums in fp16: no fp32 partials


def split_oracle(A, B, parts, model, round_inputs=None):
    """Each contiguous part by bf.gemm from +0, partials added one after the other in numpy binary32."""
    k = A.shape[1]
    size = -(-k // parts)
    total = None
    for s in range(0, k, size):
        part = bf.gemm(A[:, s:s + size], B[s:s + size], model=model, round_inputs=round_inputs, backend="numpy")
        total = part if total is None else total + part
    return f32(total)


def test_a_synthetic_split_k_plan():
    g = np.random.default_rng(5)
    A = (g.standard_normal((4, 64)) * 2.0 ** g.integers(-12, 12, (4, 64))).astype(np.float32)
    B = g.standard_normal((64, 3)).astype(np.float32)
    seq = bf.device("ieee-sequential").model("fp32", "fp32")
    with matmul_switches(torch, tf32=False):
        with bf.torch.emulate("V100", split_k={torch.float32: {(4, 3, 64): 4}}, backend="numpy") as emu:
            got = torch.from_numpy(A) @ torch.from_numpy(B)
            unsplit = torch.from_numpy(A[:3]) @ torch.from_numpy(B)  # another shape: not split
        assert emu.route(torch.float32).parts(4, 3, 64) == 4
    same_bits(got, split_oracle(A, B, 4, seq))
    same_bits(unsplit, f32(bf.gemm(A[:3], B, model=seq, backend="numpy")))
    assert not torch.equal(got, f32(bf.gemm(A, B, model=seq, backend="numpy")))  # the split changes bits


def test_recorded_h100_split_k_is_used_at_its_shapes():
    A = data(16, 64, dtype=torch.float32, seed=6, scale=1.0)
    A[:, ::7] *= 2.0**11
    B = data(64, 16, dtype=torch.float32, seed=7)
    tf32 = bf.device("H100").model("tf32", "fp32")
    with matmul_switches(torch, tf32=True), bf.torch.emulate("H100") as emu:
        got = A @ B
        assert emu.route(torch.float32).parts(16, 16, 64) == 2
    assert emu.log[0].plans[0].evidence.basis.value == "recorded" and "2 contiguous parts" in emu.report()
    assert "recorded: h100-torch-order.json.gz (H100 80GB HBM3, torch 2.11.0+cu130" in emu.explain(emu.log[0])
    same_bits(got, split_oracle(A.numpy(), B.numpy(), 2, tf32, "device"))
    whole = f32(bf.gemm(A.numpy(), B.numpy(), model=tf32, round_inputs="device", backend="numpy"))
    assert not torch.equal(got, whole)
    assert bf.torch.emulate("MI300X").route(torch.float16).parts(16, 16, 64) == 1


@pytest.mark.parametrize("kw,match", [
    (dict(split_k={torch.float16: {(4, 3, 64): 2}}, overrides={torch.float16: H100_FP16_ACC}),
     r"^split_k=.*needs a route whose model sums into fp32 .* sums into fp16"),
    (dict(split_k={torch.float32: {(4, 3): 2}}), r"^split_k=\{\(4, 3\): 2\}: each entry must be"),
    (dict(split_k={torch.float32: {(4, 3, 8): 9}}), "1 <= parts <= k"),
    (dict(split_k=[1]), "^split_k=.*must be a dict"),
    (dict(split_k={torch.float64: {(4, 3, 8): 2}}), r"^split_k=\{torch.float64: \.\.\.\}: keys must be torch.float16"),
    (dict(split_k={"fp8": {(4, 3, 8): 2}}), r"^split_k=\{'fp8': \.\.\.\}: keys must be .*torch.float8_e4m3fn"),
    (dict(split_k={(torch.float8_e4m3fn, torch.float16): {(4, 3, 8): 2}}), r"^split_k=.*keys must be .*a pair"),
    (dict(split_k={torch.float8_e4m3fn: {(4, 3, 8): 9}}), "1 <= parts <= k"),
])
def test_bad_split_k_plans(kw, match):
    with pytest.raises(ArgumentError, match=match):
        bf.torch.emulate("H100", **kw)


def test_a_split_k_dtype_the_device_lacks_is_named_by_split_k():
    """(Was dtype=torch.bfloat16, an argument the user never passed.)"""
    with pytest.raises(ArgumentError, match=r"^split_k=\{torch.bfloat16: \.\.\.\}: V100 has no bf16 matrix model"):
        bf.torch.emulate("V100", split_k={torch.bfloat16: {(4, 3, 64): 2}})


# --- the tensors' own device (the Triton kernel, interpreted on the CPU) ---------------------------------------
@pytest.mark.parametrize("dev,dtype,over", [("H100", torch.float16, None), ("MI300X", torch.bfloat16, None),
                                            ("H100", torch.float16, "wgmma")])
def test_tensor_path_equals_the_numpy_path(monkeypatch, dev, dtype, over):
    """The Triton kernel on the tensors where they are (the CPU, interpreted) against the host path: specials,
    batches, C, and a -0 sum that the wgmma model (rounded_zero="positive") finishes as +0."""
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    A, B, C = data(2, 5, 24, dtype=dtype), data(2, 24, 3, dtype=dtype, seed=1), data(2, 5, 3, dtype=dtype, seed=2)
    A[0, 1, 2], A[1, 0, 0], B[1, 3, 1], C[0, 4, 0] = float("nan"), float("inf"), float("-inf"), float("nan")
    A[1, 2], A[1, 3], C[1, 3, 0] = 0.0, 0.0, -0.0
    A[1, 3, 0], B[1, 0, 0] = -(2.0**-14), 2.0**-14  # (1, 3, 0): -2**-28 stored as -0 in fp16, plus C = -0
    overrides = None if over is None else {dtype: over}
    with bf.torch.emulate(dev, backend="numpy", overrides=overrides) as emu:
        want = torch.baddbmm(C, A, B)
        want_mm = A[1] @ B[0]
    if over == "wgmma":  # the kernel's IEEE -0 is finished to +0 by the model's rule
        assert emu.route(dtype).model.rounded_zero == "positive" and not torch.signbit(want[1, 3, 0])
    module = importlib.import_module("blockfma.torch.compute")  # where emulate calls bf.gemm and gemms

    def refuse(*args, **kwargs):
        raise AssertionError("the host path ran")

    monkeypatch.setattr(module, "gemm", refuse)
    monkeypatch.setattr(module, "gemms", refuse)
    with bf.torch.emulate(dev, backend="triton", overrides=overrides):
        got = torch.baddbmm(C, A, B)
        got_mm = A[1] @ B[0]
    same_bits(got, want)
    same_bits(got_mm, want_mm)


# --- bad input and awkward tensors ------------------------------------------------------------------------------
@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a CUDA GPU")
def test_backend_cuda_without_a_gpu_is_refused_at_emulate():
    with pytest.raises(ArgumentError, match="^backend='cuda': needs a CUDA GPU.*use backend='auto'"):
        bf.torch.emulate("H100", backend="cuda")


def test_awkward_tensors_give_the_right_answer():
    base = data(3, 16)
    B = data(16, 4, seed=1)
    with bf.torch.emulate("H100") as emu:
        row = base[1:2].expand(5, 16)  # broadcast rows (stride 0)
        same_bits(row @ B, (base[1:2] @ B).expand(5, 4))
        strided = data(6, 32)[::2, ::2]  # non-contiguous
        same_bits(strided @ B, strided.contiguous() @ B)
        empty_k = torch.addmm(data(3, 4, seed=3), data(3, 0), data(0, 4))  # k = 0: C itself
        same_bits(empty_k, data(3, 4, seed=3))
        assert (data(0, 16) @ B).shape == (0, 4) and (torch.zeros(2, 0, 16, dtype=torch.float16) @ B).shape == (2, 0, 4)
        zeros = data(3, 0) @ data(0, 4)
        ints = torch.arange(6).reshape(2, 3) @ torch.arange(6).reshape(3, 2)
    assert torch.equal(zeros.view(torch.int16), torch.zeros(3, 4, dtype=torch.int16))  # +0, as torch gives
    assert torch.equal(ints, torch.arange(6).reshape(2, 3) @ torch.arange(6).reshape(3, 2))
    assert emu.log[-1].route.model is None and emu.log[-1].dtype == "int64"


def test_a_batched_matmul_is_one_engine_call_with_each_slice_as_bf_gemm(monkeypatch):
    """A batched matmul of 2**23 products (past the former DOT_LIMIT, 2**22, where it became a bf.gemm per
    slice: minutes) is one engine call, each slice with bf.gemm's bits; the numpy engine tiles the batch
    (NaN and inf in it: the compiled kernels take finite values only); a batch that cannot fit is refused
    before anything is allocated."""
    from blockfma.engine import api, registry

    runs = []
    execute = api._execute
    monkeypatch.setattr(api, "_execute", lambda *args: runs.append(args[1].shape) or execute(*args))
    A, B = data(2, 64, 1024), data(2, 1024, 64, seed=1)
    with bf.torch.emulate("H100") as emu:
        got = torch.bmm(A, B)
    assert runs == [(2, 64, 1024, 64)]
    model = emu.route(torch.float16).model
    for t in range(2):
        same_bits(got[t], torch.from_numpy(bf.gemm(A[t].numpy(), B[t].numpy(), model=model)))
    A, B, C = data(5, 2, 40), data(5, 40, 3, seed=1), data(5, 2, 3, seed=2)
    A[1, 0, 3], B[4, 7, 2] = float("nan"), float("inf")
    monkeypatch.setattr(registry, "TILE", 2 * 2 * 3 * 48)  # tiles of 2 batch entries (K padded to 48)
    runs.clear()
    with bf.torch.emulate("H100", backend="numpy"):
        got = torch.baddbmm(C, A, B)
    assert runs == [(5, 2, 40, 3)]
    for t in range(5):
        want = bf.gemm(A[t].numpy(), B[t].numpy(), C[t].numpy(), model=model, backend="numpy")
        same_bits(got[t], torch.from_numpy(want))
    monkeypatch.setattr(api, "_available_memory", lambda: 2**20)  # (calls below api.MEMORY_UNCHECKED all run)
    with pytest.raises(MemoryError, match=r"^2 gemms 1024x1x1024 needs about 0\.1 GiB"):
        with bf.torch.emulate("H100"):
            torch.bmm(data(2, 1024, 1), data(2, 1, 1024, seed=1))


# --- the GPU engine refuses what cannot fit ----------------------------------------------------------------------
def test_gpu_engine_refuses_a_gemm_that_cannot_fit_before_anything_moves(monkeypatch):
    from blockfma.engine import gpu
    from blockfma.engine import triton as tr
    from blockfma.plan import plan

    model = bf.device("H100").model("fp16", "fp32")
    A, Bt, C = np.ones((64, 512)), np.ones((64, 512)), np.zeros((64, 64))
    monkeypatch.setattr(tr, "free_bytes", lambda device: 1_114_111)  # one byte short of 16 (mk + kn + mn)
    moved: list = []
    monkeypatch.setattr(gpu, "_on", lambda *a: moved.append(a))
    with pytest.raises(MemoryError, match=r"^gemm 64x512x64 on cpu needs about .*\(A and B in float64 with their "
                       r"exponents, C and D in float64\) .* split the call"):
        gpu.gemm(plan(model, 512), A, Bt, C, backend="torch")
    assert moved == []
    monkeypatch.undo()
    monkeypatch.setattr(tr, "free_bytes", lambda device: 1_114_112)  # exactly enough: runs
    assert gpu.gemm(plan(model, 512), A, Bt, C, backend="torch")[0, 0] == 512.0


needs_cuda_triton = pytest.mark.skipif(not torch.cuda.is_available() or not bf.engine.triton.available(),
                                       reason="needs a CUDA GPU visible to torch and Triton")


@pytest.mark.gpu
@needs_cuda_triton
@pytest.mark.parametrize("dev,dtype", [("H100", torch.float16), ("MI300X", torch.bfloat16), ("V100", torch.float16)])
def test_cuda_tensors_run_on_the_card_and_equal_the_host_path(monkeypatch, dev, dtype):
    A, B, C = data(3, 64, 96, dtype=dtype), data(3, 96, 48, dtype=dtype, seed=1), data(3, 64, 48, dtype=dtype, seed=2)
    A[0, 1, 2], B[1, 3, 1] = float("nan"), float("inf")
    with bf.torch.emulate(dev, backend="numpy"):
        want = torch.baddbmm(C, A, B)
    module = importlib.import_module("blockfma.torch.compute")
    monkeypatch.setattr(module, "gemm", lambda *a, **k: pytest.fail("the host path ran"))
    monkeypatch.setattr(module, "dot", lambda *a, **k: pytest.fail("the host path ran"))
    with bf.torch.emulate(dev):
        got = torch.baddbmm(C.cuda(), A.cuda(), B.cuda())
    assert got.device.type == "cuda"
    same_bits(got.cpu(), want)


def test_f_scaled_mm_tensor_and_row_wise_run_as_scaled_mm_and_block_scales_are_left_to_torch():
    if not hasattr(torch.nn.functional, "scaled_mm"):
        pytest.skip("this torch has no F.scaled_mm")
    F = torch.nn.functional
    a, b = fp8_operands(k=64)
    sa, sb = torch.full((6, 1), 0.5), torch.full((1, 5), 2.0**-3)
    row = F.ScalingType.RowWise
    with bf.torch.emulate("H100") as emu:
        got = F.scaled_mm(a, b, torch.tensor(2.0), F.ScalingType.TensorWise, sb, row, output_dtype=torch.float32)
        want = torch._scaled_mm(a, b, torch.tensor(2.0), sb, out_dtype=torch.float32)
        got_row = F.scaled_mm(a, b, sa, row, sb, row, output_dtype=torch.bfloat16, use_fast_accum=True)
        want_row = torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True)
    same_bits(got, want)
    same_bits(got_row, want_row)
    same_bits(got, f32(bf.gemm(np8(a), np8(b), model=PROMOTED, backend="numpy") * np.float32(0.25)))
    assert [o.op for o in emu.log] == ["_scaled_mm"] * 4
    v2 = importlib.import_module("blockfma.torch.emulate")._h_scaled_mm_v2
    calls = []
    with bf.torch.emulate("H100") as emu2:  # a 1x128 block-scale recipe (DeepSeek's): handed to torch, logged
        v2(emu2, lambda *args, **kw: calls.append(args) or "native", a, b, [sa], [4], [], [sb], [4], [], None,
           torch.float32)
    assert calls and emu2.log[0].route.model is None and "recipe not modelled" in emu2.log[0].route.note
