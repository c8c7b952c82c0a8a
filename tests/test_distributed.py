"""gemm on dask arrays, tile by tile on a dask.distributed LocalCluster: bit-identical to the in-memory call."""

from __future__ import annotations

import numpy as np
import pytest

import blockfma as bf
from blockfma import formats as F

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
