"""blockfma.probes.cuda: fragment maps (checked here, without a GPU) and real mma.sync runs (marked gpu)."""

from __future__ import annotations

import numpy as np
import pytest

import blockfma as bf
from blockfma import formats as F
from blockfma.probes import cuda

from helpers import bits

PATHS = list(cuda.PATHS.values())


@pytest.mark.parametrize("p", PATHS, ids=[p.name for p in PATHS])
def test_fragments_cover_every_element_once(p):
    """Each element of A (M x K), B (K x N) and C (M x N) sits in exactly one register slot of one lane."""
    for op, (rows, cols) in (("a", (p.m, p.k)), ("b", (p.k, p.n)), ("c", (p.m, p.n))):
        fm = cuda.fragment_map(p, op).reshape(-1, 2)
        assert len(fm) == rows * cols
        seen = np.zeros((rows, cols), int)
        np.add.at(seen, (fm[:, 0], fm[:, 1]), 1)
        assert (seen == 1).all(), (op, np.argwhere(seen != 1)[:3])


def test_fragment_layout_of_m16n8k16_follows_the_ptx_isa():
    """Spot values from the PTX ISA's figures: lane 5 (group 1, thread 1) of mma.m16n8k16 .f16."""
    p = cuda.path("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32")
    a = cuda.fragment_map(p, "a")[5]
    assert a.tolist() == [[[1, 2], [1, 3]], [[9, 2], [9, 3]], [[1, 10], [1, 11]], [[9, 10], [9, 11]]]
    assert cuda.fragment_map(p, "b")[5].tolist() == [[[2, 1], [3, 1]], [[10, 1], [11, 1]]]
    assert cuda.fragment_map(p, "c")[5].tolist() == [[[1, 2]], [[1, 3]], [[9, 2]], [[9, 3]]]
    tf = cuda.fragment_map(cuda.path("mma.m16n8k8.f32.tf32.tf32.f32"), "a")[5]
    assert tf.reshape(-1, 2).tolist() == [[1, 1], [9, 1], [1, 5], [9, 5]]


def test_kernel_source_issues_the_named_instruction():
    src = cuda.kernel_source("mma.m16n8k32.f16.e4m3.e5m2.f16")
    assert "mma.sync.aligned.m16n8k32.row.col.f16.e4m3.e5m2.f16" in src
    assert src.count('"r"(ra[') == 4 and src.count('"r"(rb[') == 2


# --- wgmma: layout checked without a GPU ----------------------------------------------------------------------
WGMMA = list(cuda.WGMMA_PATHS.values())


@pytest.mark.parametrize("p", WGMMA, ids=[p.name for p in WGMMA])
def test_wgmma_accumulator_holds_every_element_of_d_once(p):
    acc = cuda.accumulator_map(p).reshape(-1, 2)
    assert len(acc) == 64 * p.n
    seen = np.zeros((64, p.n), int)
    np.add.at(seen, (acc[:, 0], acc[:, 1]), 1)
    assert (seen == 1).all()


def test_wgmma_accumulator_layout_follows_the_ptx_isa():
    """The PTX ISA's figure of the m64nNk16 D fragment: warp w holds rows 16w..16w+15; lane 5 (row 1,
    columns 2 and 3 of each 8-column group); fp32 registers d0, d1 on row r, d2, d3 on row r + 8."""
    f32 = cuda.accumulator_map(cuda.path("wgmma.m64n64k16.f32.f16.f16"))
    assert f32[5, :6, 0].tolist() == [[1, 2], [1, 3], [9, 2], [9, 3], [1, 10], [1, 11]]
    assert f32[32 + 5, 0, 0].tolist() == [17, 2] and f32[127, -1, 0].tolist() == [63, 63]
    f16 = cuda.accumulator_map(cuda.path("wgmma.m64n64k16.f16.f16.f16"))
    assert f16[5, :3].tolist() == [[[1, 2], [1, 3]], [[9, 2], [9, 3]], [[1, 10], [1, 11]]]


@pytest.mark.parametrize("rows", [64, cuda.WGMMA_N])
def test_wgmma_shared_layout_is_what_the_descriptor_reads(rows):
    """Every byte of a row-major operand (rows of 32 bytes) lands on its own shared-memory byte, and the
    descriptor the kernels build (start, LBO, SBO, no swizzle) reads each one back from that byte."""
    r, y = np.divmod(np.arange(rows * cuda.WGMMA_ROW_BYTES), cuda.WGMMA_ROW_BYTES)
    off = cuda.smem_offset(r, y)
    assert sorted(off.tolist()) == list(range(rows * 32))
    start = 0x2400
    desc = cuda.wgmma_descriptor(start)
    assert desc == (start >> 4) | (8 << 16) | (16 << 32)
    assert np.array_equal(cuda.descriptor_address(desc, r, y), start + off)
    # the wrong offsets (LBO and SBO swapped) read other bytes: the check can fail
    swapped = cuda.wgmma_descriptor(start, lbo=cuda.WGMMA_SBO, sbo=cuda.WGMMA_LBO)
    assert not np.array_equal(cuda.descriptor_address(swapped, r, y), start + off)
    with pytest.raises(ValueError, match="multiple of 16"):
        cuda.wgmma_descriptor(start + 8)


def test_wgmma_data_flow_gives_d_equal_a_b_plus_c():
    """The kernel's data movement replayed in numpy (fp16 -> fp32, exact small integers): A and B bytes
    into shared memory by smem_offset, read back through the descriptor into 64 x 16 and 16 x N
    matrices, C into the accumulator by accumulator_map and D out the same way."""
    p = cuda.path("wgmma.m64n64k16.f32.f16.f16")
    rng = np.random.default_rng(4)
    A = rng.integers(-3, 4, (64, p.k)).astype(np.float16)
    Bt = rng.integers(-3, 4, (p.n, p.k)).astype(np.float16)  # B stored N x K
    C = rng.integers(-9, 10, (64, p.n)).astype(np.float32)

    def through_smem(X: np.ndarray) -> np.ndarray:
        raw = X.view(np.uint8).reshape(X.shape[0], 32)
        r, y = np.divmod(np.arange(raw.size), 32)
        smem = np.zeros(raw.size, np.uint8)
        smem[cuda.smem_offset(r, y)] = raw.ravel()
        desc = cuda.wgmma_descriptor(0)
        back = smem[cuda.descriptor_address(desc, r, y)].reshape(raw.shape)
        return back.view(np.float16).astype(np.float64)

    acc = cuda.accumulator_map(p)
    regs = C[acc[..., 0], acc[..., 1]].astype(np.float64)  # the registers, loaded from C
    product = through_smem(A) @ through_smem(Bt).T
    regs = regs + product[acc[..., 0], acc[..., 1]]  # what the instruction adds to each register
    D = np.zeros((64, p.n))
    D[acc[..., 0], acc[..., 1]] = regs
    assert np.array_equal(D, A.astype(np.float64) @ Bt.T.astype(np.float64) + C)


@pytest.mark.parametrize("name,regs,trans", [("wgmma.m64n64k16.f32.f16.f16", 32, True),
                                             ("wgmma.m64n64k16.f16.f16.f16", 16, True),
                                             ("wgmma.m64n64k8.f32.tf32.tf32", 32, False),
                                             ("wgmma.m64n64k32.f16.e4m3.e5m2", 16, False)])
def test_wgmma_kernel_source(name, regs, trans):
    src = cuda.kernel_source(name)
    p = cuda.path(name)
    assert f"{p.ptx} {{%0, " in src and f"%{regs - 1}}}, %{regs}, %{regs + 1}, p, 1, 1" in src
    assert src.count(", 0, 0;") == (1 if trans else 0)  # imm-trans-a/b only for fp16/bf16
    assert src.count('"+f"(acc[' if p.d_format == "fp32" else '"+r"(acc[') == regs
    assert f"* {cuda.WGMMA_SBO}u + (y >> 4) * {cuda.WGMMA_LBO}u" in src
    assert "(8ull << 16) | (16ull << 32)" in src  # the descriptor fields of wgmma_descriptor
    assert "wgmma.fence.sync.aligned" in src and "wgmma.wait_group.sync.aligned 0" in src


def test_wgmma_paths_resolve_and_name_their_architecture():
    p = cuda.path("wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3")
    assert p is cuda.WGMMA_PATHS["wgmma.m64n64k32.f32.e4m3.e4m3"]
    assert p.runs_on(90) and not p.runs_on(100) and not p.runs_on(89)
    assert cuda.path("mma.m16n8k16.f32.f16.f16.f32").runs_on(100)
    from blockfma.probes.targets import _cuda_path

    assert _cuda_path(cuda, "fp16", "fp32", None, "wgmma") == "wgmma.m64n64k16.f32.f16.f16"
    assert _cuda_path(cuda, "fp16", "fp32", None) == "mma.m16n8k16.f32.f16.f16.f32"


def test_unknown_path_names_the_known_ones():
    with pytest.raises(ValueError, match="known: mma.m16n8k16.f32.f16.f16.f32"):
        cuda.path("mma.m16n8k64.f32.f16.f16.f32")


# --- on a GPU ------------------------------------------------------------------------------------------
needs_gpu = pytest.mark.skipif(not cuda.available(), reason="no CUDA GPU visible to CuPy")


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("p", PATHS, ids=[p.name for p in PATHS])
def test_small_integers_come_back_exact(p):
    if cuda.compute_capability() < p.sm:
        pytest.skip(f"{p.name} needs sm_{p.sm}")
    rng = np.random.default_rng(1)
    A = rng.integers(-2, 3, size=(9, p.m, p.k)).astype(float)
    B = rng.integers(-2, 3, size=(9, p.k, p.n)).astype(float)
    C = rng.integers(-8, 9, size=(9, p.m, p.n)).astype(float)
    D = cuda.run(p, A, B, C)
    assert np.array_equal(D.astype(np.float64), np.einsum("tmk,tkn->tmn", A, B) + C)


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("name", ["mma.m16n8k16.f32.f16.f16.f32", "mma.m16n8k16.f16.f16.f16.f16",
                                  "mma.m16n8k16.f32.bf16.bf16.f32", "mma.m16n8k8.f32.tf32.tf32.f32"])
def test_hardware_equals_the_preset(name):
    """The H100 record in small: random tiles through the tensor cores and through bf.dot."""
    p = cuda.path(name)
    rng = np.random.default_rng(2)
    A = F.round(p.a_format, rng.standard_normal((64, p.m, p.k)))
    B = F.round(p.b_format, rng.standard_normal((64, p.k, p.n)))
    C = F.round(p.c_format, rng.standard_normal((64, p.m, p.n)))
    D = cuda.run(p, A, B, C)
    want = bf.dot(A[:, :, None, :], np.swapaxes(B, 1, 2)[:, None, :, :], C, device="H100",
                  input_format=p.a_format, output_format=p.d_format)
    assert np.array_equal(bits(D), bits(want))


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("name", ["mma.m16n8k16.f32.f16.f16.f32", "mma.m16n8k8.f32.tf32.tf32.f32"])
def test_probe_infers_the_preset_from_the_gpu(name):
    """The probe suite through this GPU's mma.sync: the inferred model, verified on the hardware, is the
    H100 preset on one instruction (data/hardware/h100-probe-cuda.json.gz holds the 10^6-row runs)."""
    if cuda.compute_capability() != 90:
        pytest.skip("the presets compared are the H100's")
    p = cuda.path(name)
    f = bf.probe(f"cuda:{name}", verify=20_000)
    assert f.verified, f.verification
    m = f.model()
    rng = np.random.default_rng(3)
    a = F.round(p.a_format, rng.standard_normal((2000, p.k)))
    b = F.round(p.b_format, rng.standard_normal((2000, p.k)))
    c = F.round(p.c_format, rng.standard_normal(2000))
    preset = bf.device("H100").model(p.a_format, p.d_format)
    assert np.array_equal(bits(bf.dot(a, b, c, model=m)), bits(bf.dot(a, b, c, model=preset)))


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("p", WGMMA, ids=[p.name for p in WGMMA])
def test_wgmma_small_integers_come_back_exact(p):
    """The first run of our wgmma kernels checks their layout: small integers give the exact A B + C."""
    if not p.runs_on(cuda.compute_capability()):
        pytest.skip(f"{p.name} is sm_90a code")
    rng = np.random.default_rng(5)
    A = rng.integers(-2, 3, size=(3, 64, p.k)).astype(float)
    B = rng.integers(-2, 3, size=(3, p.k, p.n)).astype(float)
    C = rng.integers(-8, 9, size=(3, 64, p.n)).astype(float)
    D = cuda.run(p, A, B, C)
    assert np.array_equal(D.astype(np.float64), np.einsum("tmk,tkn->tmn", A, B) + C)


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("p", WGMMA, ids=[p.name for p in WGMMA])
def test_wgmma_equals_the_preset(p):
    """Random tiles through our wgmma kernels and through bf.dot on the H100 wgmma preset, every element."""
    if not p.runs_on(cuda.compute_capability()):
        pytest.skip(f"{p.name} is sm_90a code")
    rng = np.random.default_rng(6)
    A = F.round(p.a_format, rng.standard_normal((4, 64, p.k)))
    B = F.round(p.b_format, rng.standard_normal((4, p.k, p.n)))
    C = F.round(p.c_format, rng.standard_normal((4, 64, p.n)))
    D = cuda.run(p, A, B, C)
    inp = p.a_format if p.a_format == p.b_format else (p.a_format, p.b_format)
    model = bf.device("H100").model(inp, p.d_format, "wgmma")
    want = bf.dot(A[:, :, None, :], np.swapaxes(B, 1, 2)[:, None, :, :], C, model=model)
    assert np.array_equal(bits(D), bits(want))
