"""mmaemu (PyPI ``mmaemu``, 0.1.0) side by side with our H100 fp8 chain: the pure parts of
``benchmarks/bench_gpu.py --mmaemu`` (operands, the bit comparison and its line) on the CPU, and, where
mmaemu is installed, mmaemu as an independent oracle of our numpy engine's bits for H100 e4m3fn->fp32
(its preset 'hopper': blocks of 32 products, 13 fraction bits, held by its authors to an H100 PCIe's
cuBLAS); marked gpu, its CUDA kernel against our Triton kernel and numpy engine (bit-exact on an H200,
2026-11-28).  Optional like the MMA-Sim differential: skipped with a reason where torch or mmaemu is absent
(``pip install --no-deps mmaemu==0.1.0``: it needs only numpy and torch)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

import blockfma as bf

from helpers import draw_rows, triton_mode

torch = pytest.importorskip("torch", reason="the side by side compares torch tensors: pip install 'blockfma[torch]'")

ROOT = Path(__file__).resolve().parents[1]
MODEL = bf.device("H100").model("e4m3fn", "fp32")


def _bench():
    """benchmarks/bench_gpu.py as a module (it is a script, not part of the package)."""
    spec = importlib.util.spec_from_file_location("bench_gpu", ROOT / "benchmarks" / "bench_gpu.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def _bits(*values) -> torch.Tensor:
    return torch.tensor(np.array(values, dtype=np.uint32).view(np.int32)).view(torch.float32)


def test_operands_are_finite_e4m3fn_values_of_the_shapes_asked():
    bench = _bench()
    A, B = bench.mmaemu_operands(np.random.default_rng(0), 5, 64, 3)
    assert A.shape == (5, 64) and B.shape == (64, 3) and A.dtype == B.dtype == np.float64
    for x in (A, B):
        assert np.isfinite(x).all() and np.abs(x).max() <= 448
        # exact in e4m3fn: the float8 tensor holds the very values
        assert np.array_equal(torch.from_numpy(x).to(torch.float8_e4m3fn).double().numpy(), x)
    again = bench.mmaemu_operands(np.random.default_rng(0), 5, 64, 3)
    assert all(np.array_equal(x, y) for x, y in zip((A, B), again))


def test_compare_bits_counts_patterns_not_values():
    bench = _bench()
    ours = _bits(0x3F800000, 0x00000000, 0x7FC00000, 0x40000000, 0x40000001, 0x40000000).reshape(2, 3)
    assert bench.compare_bits(ours, ours.clone()) == {"differing": 0, "compared": 6}
    theirs = _bits(0x3F800000, 0x80000000, 0x7FFFFFFF, 0x40000000, 0x40000000, 0x40000000).reshape(2, 3)
    cmp = bench.compare_bits(ours, theirs)  # -0 against +0, two NaN payloads, one ulp
    assert cmp["differing"] == 3 and cmp["compared"] == 6
    assert cmp["first"] == {"row": 0, "col": 1, "ours": 0.0, "ours_bits": "0x00000000", "mmaemu": -0.0,
                            "mmaemu_bits": "0x80000000"}
    assert bench.bits_report(cmp) == ("3 of 6 fp32 bit patterns differ; first at (0, 1): ours 0.0 (0x00000000), "
                                      "mmaemu -0.0 (0x80000000)")
    assert bench.bits_report({"differing": 0, "compared": 6}) == "0 of 6 fp32 bit patterns differ"


def test_compare_bits_refuses_other_shapes_and_dtypes():
    bench = _bench()
    with pytest.raises(ValueError, match=r"ours is \(2, 3\) torch.float32, theirs \(3, 2\) torch.float32: pass two"):
        bench.compare_bits(torch.zeros(2, 3), torch.zeros(3, 2))
    with pytest.raises(ValueError, match="theirs \\(2, 3\\) torch.float64"):
        bench.compare_bits(torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.float64))


def test_without_mmaemu_one_line_and_no_rows(monkeypatch):
    bench = _bench()
    monkeypatch.setitem(sys.modules, "mmaemu", None)  # import mmaemu raises ImportError
    lines = []
    got = bench.mmaemu_rows(None, torch, torch.device("cpu"), [16], 1, lambda: None, lines.append,
                            np.random.default_rng(0))
    assert got == ([], []) and len(lines) == 1 and lines[0].startswith("mmaemu: not installed (")


# --- mmaemu as an oracle (its float64 reference model on the CPU) --------------------------------------------
def _mmaemu():
    return pytest.importorskip("mmaemu", reason="the oracle needs mmaemu: pip install --no-deps mmaemu==0.1.0 "
                                                "(torch >= 2.6 installed)")


def _accumulate(mmaemu, A: np.ndarray, B: np.ndarray) -> torch.Tensor:
    """mmaemu's fp32 accumulator of A (m x k) @ B (k x n) on the inputs where it claims our arithmetic (see
    bench_gpu.mmaemu_rows): one chain (fast accumulation), no split-K, C = +0."""
    a8 = torch.from_numpy(A.astype(np.float32)).to(torch.float8_e4m3fn)
    b8 = torch.from_numpy(np.ascontiguousarray(B.T).astype(np.float32)).to(torch.float8_e4m3fn)
    return mmaemu.accumulate(a8, b8, use_fast_accum=True, profile="hopper", splitk=1)


@pytest.mark.parametrize("k", [16, 32, 64, 100, 256])
def test_mmaemu_holds_our_numpy_engine_bits(k):
    """draw_rows' styles (random codes, ties near 1, a wide spread, cancelling pairs, subnormals, signed zeros,
    ...) as the rows of A and the columns of B, every product of them compared; NaN (and rows C would steer:
    C is +0 here) aside, where the two write different NaN patterns by design."""
    mmaemu, bench = _mmaemu(), _bench()
    a, b, _ = draw_rows(MODEL, 16, k, seed=k)
    a, b = (np.where(np.isfinite(x), x, 0.0) for x in (a, b))
    ours = bf.gemm(a, b.T, np.zeros((16, 16)), model=MODEL, backend="numpy")
    cmp = bench.compare_bits(torch.from_numpy(np.asarray(ours, dtype=np.float32)), _accumulate(mmaemu, a, b.T))
    assert cmp["differing"] == 0, bench.bits_report(cmp)


def test_mmaemu_holds_our_bits_on_the_benchmark_operands():
    mmaemu, bench = _mmaemu(), _bench()
    A, B = bench.mmaemu_operands(np.random.default_rng(3), 24, 96, 20)
    ours = bf.gemm(A, B, np.zeros((24, 20)), model=MODEL, backend="numpy")
    cmp = bench.compare_bits(torch.from_numpy(np.asarray(ours, dtype=np.float32)), _accumulate(mmaemu, A, B))
    assert cmp["differing"] == 0, bench.bits_report(cmp)


def test_side_by_side_on_the_cpu(tmp_path, monkeypatch, capsys):
    """The whole --mmaemu path at n = 16: our kernel under Triton's interpreter, mmaemu's reference model;
    rows and a check in the record, the bits equal."""
    _mmaemu()
    pytest.importorskip("triton", reason="our kernel runs under Triton's interpreter: pip install 'blockfma[triton]'")
    triton_mode(monkeypatch, False)
    out = tmp_path / "speed.json"
    code = _bench().main(["--backend", "torch", "--sizes", "16", "--cases", "H100 e4m3fn->fp32", "--tiles", "",
                          "--repeat", "1", "--mmaemu", "--record", str(out)])
    text = capsys.readouterr().out
    assert code == 0, text
    assert "mmaemu 0.1.0 hopper (reference)" in text and "bits: 0 of 256 fp32 bit patterns differ" in text
    record = json.loads(out.read_text())
    peer = [r for r in record["rows"] if r.get("peer") == "mmaemu"]
    assert [r["backend"] for r in peer] == ["mmaemu", "triton-kernel"]
    assert peer[0]["differing"] == 0 and peer[0]["compared"] == 256 and peer[0]["mmaemu_backend"] == "reference"
    assert {"backend": "mmaemu", "n": 16, "bit_exact": True}.items() <= next(
        c for c in record["checks"] if c.get("peer") == "mmaemu").items()


def _cuda() -> bool:
    from blockfma.engine import triton as tr

    return torch.cuda.is_available() and not tr.interpreting()


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason="no CUDA GPU visible to torch (or TRITON_INTERPRET is set)")
@pytest.mark.parametrize("k", [16, 32, 100, 1024])
def test_mmaemu_kernel_ours_and_the_numpy_engine_agree_on_the_gpu(k, monkeypatch):
    """mmaemu's CUDA kernel (h4 where its self-test passes, its reference model on the GPU otherwise),
    our Triton kernel and our numpy engine, on draw_rows' styles as 256 rows of A and 256 columns of B."""
    mmaemu, bench = _mmaemu(), _bench()
    pytest.importorskip("triton", reason="our kernel needs Triton: pip install 'blockfma[triton]'")
    triton_mode(monkeypatch, True)
    a, b, _ = draw_rows(MODEL, 256, k, seed=1000 + k)
    A, B = (np.where(np.isfinite(x), x, 0.0) for x in (a, b.T))
    C = np.zeros((256, 256))
    a8 = torch.from_numpy(A.astype(np.float32)).to(torch.float8_e4m3fn).cuda()
    b8 = torch.from_numpy(np.ascontiguousarray(B.T).astype(np.float32)).to(torch.float8_e4m3fn).cuda()
    theirs = mmaemu.accumulate(a8, b8, use_fast_accum=True, profile="hopper", splitk=1).cpu()
    backend = bench._mmaemu_backend(mmaemu, torch, a8, b8)
    for engine in ("triton", "numpy"):
        ours = torch.from_numpy(np.asarray(bf.gemm(A, B, C, model=MODEL, backend=engine), dtype=np.float32))
        cmp = bench.compare_bits(ours, theirs)
        assert cmp["differing"] == 0, f"{engine} against mmaemu ({backend}): {bench.bits_report(cmp)}"
