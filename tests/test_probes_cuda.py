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
