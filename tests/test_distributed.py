"""gemm on dask arrays, tile by tile on a dask.distributed LocalCluster: bit-identical to the in-memory call."""

from __future__ import annotations

import numpy as np
import pytest

import blockfma as bf
from blockfma import formats as F
from blockfma.arguments import ArgumentError

from helpers import bits

da = pytest.importorskip("dask.array", reason="dask is not installed: pip install 'blockfma[dask]'")
distributed = pytest.importorskip("distributed", reason="dask.distributed is not installed")


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  silence_logs=40) as cluster, distributed.Client(cluster) as c:
        yield c


@pytest.mark.parametrize("device,fin,fout", [("H100", "fp16", "fp32"), ("V100", "fp16", "fp16"),
                                             ("MI250X", "fp16", "fp32"), ("MI300X", "bf16", "fp32")])
def test_dask_gemm_is_bit_identical_on_a_cluster(client, device, fin, fout):
    rng = np.random.default_rng(7)
    A = F.round(fin, rng.standard_normal((70, 300)) * 2.0 ** rng.integers(-6, 6, (70, 300)))
    B = F.round(fin, rng.standard_normal((300, 50)))
    C = F.round(fout, rng.standard_normal((70, 50)))
    want = bf.gemm(A, B, C, device=device, input_format=fin, output_format=fout)
    lazy = bf.gemm(da.from_array(A, chunks=(16, 64)), da.from_array(B, chunks=(100, 12)),
                   da.from_array(C, chunks=(30, 30)), device=device, input_format=fin, output_format=fout)
    assert lazy.chunks[0] == (16, 16, 16, 16, 6) and lazy.dtype == want.dtype
    got = lazy.compute()
    assert np.array_equal(bits(got), bits(want))


def test_dask_gemm_without_c_and_with_numpy_operands(client):
    rng = np.random.default_rng(8)
    A = F.round("bf16", rng.standard_normal((20, 40)))
    B = F.round("bf16", rng.standard_normal((40, 9)))
    got = bf.gemm(da.from_array(A, chunks=(7, 40)), B, device="A100", input_format="bf16").compute()
    assert np.array_equal(bits(got), bits(bf.gemm(A, B, device="A100", input_format="bf16")))


def test_dask_gemm_errors(client):
    A = da.ones((4, 5), chunks=2)
    with pytest.raises(ValueError, match="inner dimensions differ"):
        bf.gemm(A, da.ones((4, 3)))
    bad = bf.gemm(A + 2.0**-20, da.ones((5, 3)))  # values are looked at when the tiles run
    with pytest.raises(ValueError, match="not representable in fp16"):
        bad.compute()


def test_c_format_reaches_the_tiles():
    """c_format (an fp16 C for an fp32 D, Volta's m8n8k4.f32.f16.f16.f16) is checked on dask arrays too:
    1 + 2**-20 is an fp32 value but no fp16 one."""
    A = da.from_array(np.ones((4, 8)), chunks=2)
    B = da.from_array(np.ones((8, 4)), chunks=2)
    C = np.full((4, 4), 1 + 2.0**-20)
    with pytest.raises(ValueError, match="not representable in fp16"):
        bf.gemm(A, B, C, device="V100", c_format="fp16").compute(scheduler="synchronous")
    D = bf.gemm(A, B, np.full((4, 4), 0.5), device="V100", c_format="fp16").compute(scheduler="synchronous")
    assert np.array_equal(bits(D), bits(np.full((4, 4), 8.5, dtype=np.float32)))


@pytest.mark.parametrize("instruction,fin", [("tcgen05.mxf4nvf4.block16.ue4m3", "e2m1fn"),
                                             ("tcgen05.mxf8f6f4.block32", "e4m3fn*e2m1fn")])
def test_block_scaled_dask_gemm_is_bit_identical(instruction, fin):
    """Block-scaled GEMMs on dask arrays: the scales follow A's row chunks and B's column chunks (a 1-D
    scale_b serves every column), and the result is the in-memory call's, bit for bit."""
    model = bf.device("B200").model(fin, "fp32", instruction=instruction)
    fa, fb, fs = model.input_format, model.b_format, model.scale_format
    block = model.option("scale_block")
    rng = np.random.default_rng(11)
    m, k, n = 10, 4 * block, 7
    A = F.round(fa, rng.standard_normal((m, k)) * 2)
    B = F.round(fb, rng.standard_normal((k, n)))
    SA = F.round(fs, 2.0 ** rng.integers(-3, 4, (m, k // block)) * (1 if fs.precision == 1 else 1.5))
    SB = F.round(fs, 2.0 ** rng.integers(-3, 4, k // block))
    C = F.round("fp32", rng.standard_normal((m, n)))
    want = bf.gemm(A, B, C, model=model, scale_a=SA, scale_b=SB)
    lazy = bf.gemm(da.from_array(A, chunks=(4, 3 * block)), da.from_array(B, chunks=(block, 3)), C, model=model,
                   scale_a=da.from_array(SA, chunks=(3, 1)), scale_b=SB)
    assert lazy.chunks == ((4, 4, 2), (3, 3, 1))
    assert np.array_equal(bits(lazy.compute(scheduler="synchronous")), bits(want))


def test_block_scaled_dask_gemm_errors():
    model = bf.device("B200").model("e2m1fn", "fp32", instruction="tcgen05.mxf4.block32")
    A, B = da.ones((4, 64), chunks=2), da.ones((64, 3), chunks=2)
    with pytest.raises(ValueError, match="scale_a=None: .* needs 2 scales"):
        bf.gemm(A, B, model=model, scale_b=np.ones(2))
    with pytest.raises(ValueError, match=r"scale_b=<shape \(3,\)>: must have shape \(2, 3\)"):
        bf.gemm(A, B, model=model, scale_a=np.ones((4, 2)), scale_b=np.ones(3))
    with pytest.raises(ValueError, match="k = 40 must be a multiple of the scale block 32"):
        bf.gemm(da.ones((4, 40)), da.ones((40, 3)), model=model, scale_a=np.ones((4, 1)), scale_b=np.ones(1))
    with pytest.raises(ValueError, match=r"scale_a=<shape \(\)>: must have shape \(4, 2\): 2 scales along K"):
        bf.gemm(A, B, model=model, scale_a=1.0, scale_b=np.ones(2))
    with pytest.raises(ValueError, match="is not block-scaled and takes no scales"):
        bf.gemm(A, B, device="H100", input_format="fp16", scale_a=np.ones((4, 2)))
    bad = bf.gemm(A, B, model=model, scale_a=np.full((4, 2), 3.0), scale_b=np.ones(2))  # not an e8m0 value
    with pytest.raises(ValueError, match="scale_a"):
        bad.compute(scheduler="synchronous")


@pytest.mark.parametrize("scales", [
    dict(scale_a=np.ones((4, 1)), scale_b=np.ones((2, 3))),  # one scale along K for two blocks: never broadcast
    dict(scale_a=np.ones((4, 2)), scale_b=np.ones((1, 3))),
    dict(scale_a=np.ones((4, 2)), scale_b=np.ones((3, 2))),  # torch's layout (n, k // block)
    dict(scale_a=np.ones((1, 4, 2)), scale_b=np.ones(2)),
    dict(scale_a=np.ones((4, 2)), scale_b=np.ones(3)),
    dict(scale_a=np.ones((5, 2)), scale_b=np.ones((2, 3)))])
def test_dask_and_in_memory_scales_follow_one_rule(scales):
    """A scale shape the in-memory gemm refuses is refused on dask arrays with the same words (the rule is
    written once, Model.scale_shapes); a scale with one entry along K is never broadcast over K."""
    model = bf.device("B200").model("e2m1fn", "fp32", instruction="tcgen05.mxf4.block32")
    with pytest.raises(ArgumentError, match="must have shape") as memory:
        bf.gemm(np.ones((4, 64)), np.ones((64, 3)), model=model, **scales)
    with pytest.raises(ArgumentError, match="must have shape") as lazy:
        bf.gemm(da.ones((4, 64), chunks=2), da.ones((64, 3), chunks=2), model=model, **scales)
    assert lazy.value.problem == memory.value.problem
