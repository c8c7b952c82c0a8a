"""blockfma.multiword: splitting, and the methods on simulated units, held to independent oracles
(ml_dtypes casts for the words, the exact scalar reference and numpy float32/float64 IEEE arithmetic for the
products and their sums)."""

from __future__ import annotations

import warnings
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blockfma as bf
from blockfma import multiword as mw
from blockfma import reference

from helpers import bits


def _fp32(x):
    return np.asarray(x, dtype=np.float32).astype(np.float64)


def _data(m, n, q, dist, seed=0):
    rng = np.random.default_rng(seed)
    if dist == "uniform01":
        A, B = 1.0 - rng.random((m, n)), 1.0 - rng.random((n, q))  # (0, 1]
    else:
        A, B = 0.5 - rng.random((m, n)), 0.5 - rng.random((n, q))  # (-0.5, 0.5]
    return _fp32(A), _fp32(B)


# --- splitting ---------------------------------------------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(min_value=2.0**-10, max_value=2.0**10), min_size=4, max_size=4),
       st.sampled_from(["fp16", "bf16"]), st.integers(1, 3))
def test_split_words_are_the_oracle_casts(vals, fmt, p):
    """Word 1 is the ml_dtypes cast (round to nearest even); each next word the cast of the exact
    residual; the words' sum is within u_low^p |A| of A (Fasi et al., eq. 2.3)."""
    A = _fp32(np.array(vals).reshape(2, 2))
    dtype = {"fp16": np.float16, "bf16": ml_dtypes.bfloat16}[fmt]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mw.RangeWarning)
        words = mw.split(A, fmt, p)
    residual = A.copy()
    for w in words:
        want = residual.astype(dtype).astype(np.float64)
        assert bits(w) .tolist() == bits(want).tolist()
        residual = residual - w
    u = 2.0 ** -bf.formats.get(fmt).precision
    err = np.abs(A - sum(words))
    if p == 1 or fmt == "bf16":  # fp16's later words may be subnormal (|A| >= 2^-10), and lose more than u
        assert (err <= u**p * np.abs(A) * (1 + 1e-12)).all()


def test_split_with_scale_keeps_small_words_normal():
    A = _fp32(np.array([[0.1, 0.3], [0.7, 0.9]]))
    w1, w2 = mw.split(A, "fp16", 2, scale=11)
    assert (np.abs(w2[w2 != 0]) >= 2.0**-14).all()
    assert np.abs(A - (w1 + np.ldexp(w2, -11))).max() <= 2.0**-22


def test_split_errors():
    with pytest.raises(ValueError, match=r"A\[0, 1\] = nan is not finite"):
        mw.split(np.array([[1.0, np.nan]]), "fp16", 2)
    with pytest.raises(ValueError, match="beyond fp16's largest value"):
        mw.split(np.array([[1e5]]), "fp16", 2)
    with pytest.raises(ValueError, match="p=0: must be an integer from 1 to 64"):
        mw.split(np.ones((2, 2)), "fp16", 0)
    with pytest.warns(mw.RangeWarning, match="underflow"):  # the row's largest entry is tiny too: it matters
        mw.split(_fp32(np.array([[1e-3, 2e-3]])), "fp16", 2)
    with warnings.catch_warnings():  # a subnormal second word next to 0.5: below u^2 of the row's largest
        warnings.simplefilter("error", mw.RangeWarning)
        mw.split(_fp32(np.array([[1e-3, 0.5]])), "fp16", 2)


# --- the methods against an independent composition ---------------------------------------------------------
def _ref_gemm(model, A, B, C=None):
    """The unit's product element by element with the exact reference (reference.dot)."""
    m, q = A.shape[0], B.shape[1]
    out = np.zeros((m, q))
    for r in range(m):
        for c in range(q):
            out[r, c] = reference.dot(model, list(A[r]), list(B[:, c]), 0.0 if C is None else C[r, c])
    return out


def _fp16_words(A, B):
    """Two fp16 words of A and of B by numpy's own casts (the oracle): A1, A2, B1, B2."""
    A1 = A.astype(np.float16).astype(np.float64)
    B1 = B.astype(np.float16).astype(np.float64)
    return A1, (A - A1).astype(np.float16).astype(np.float64), B1, (B - B1).astype(np.float16).astype(np.float64)


def test_double_fp16_is_algorithm_2_1_bit_for_bit():
    """Three products from zero on the V100 unit, added in fp32 to nearest, in the order (1,1), (1,2),
    (2,1): the same bits as the scalar reference composed with numpy float32 additions."""
    A, B = _data(3, 9, 2, "uniform01", seed=3)
    v100 = bf.device("V100").model("fp16", "fp32")
    A1, A2, B1, B2 = _fp16_words(A, B)
    G = [_ref_gemm(v100, X, Y).astype(np.float32) for X, Y in ((A1, B1), (A1, B2), (A2, B1))]
    want = (G[0] + G[1]) + G[2]  # float32 additions: IEEE, to nearest
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mw.RangeWarning)
        got = mw.matmul(A, B, method="double-fp16", device="V100")
    assert bits(got.astype(np.float32)).tolist() == bits(want).tolist()


def test_inside_accumulation_chains_the_unit():
    """Algorithm 4.1's order (A2B1, A1B2, A1B1) with C chained through the unit: gemm(A1, B1,
    gemm(A1, B2, gemm(A2, B1, 0))) element by element with the reference."""
    A, B = _data(2, 8, 2, "uniform01", seed=5)
    v100 = bf.device("V100").model("fp16", "fp32")
    A1, A2, B1, B2 = _fp16_words(A, B)
    want = _ref_gemm(v100, A1, B1, _ref_gemm(v100, A1, B2, _ref_gemm(v100, A2, B1)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mw.RangeWarning)
        got, info = mw.matmul(A, B, method="double-fp16", device="V100", order="cublas", return_info=True)
    assert info["products"] == ((1, 0), (0, 1), (0, 0)) and info["accumulate"] == "inside"
    assert bits(got.astype(np.float32)).tolist() == bits(want.astype(np.float32)).tolist()


def test_the_order_changes_the_bits_on_a_truncating_unit():
    A, B = _data(32, 256, 32, "uniform01", seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mw.RangeWarning)
        c1 = mw.matmul(A, B, method="double-fp16", device="V100", accumulate="inside", order="alg2.1")
        c2 = mw.matmul(A, B, method="double-fp16", device="V100", accumulate="inside", order="cublas")
    assert np.count_nonzero(c1 != c2) > 0


@pytest.mark.parametrize("dist", ["uniform01", "uniform-half"])
def test_accuracy_ranks_as_the_analysis_says(dist):
    """Componentwise errors (eq. 3.1) on the seeds' two distributions: double-fp16 beats fp16 by orders of
    magnitude; triple-bf16 beats double-bf16 beats bf16; 3xtf32 beats tf32; tf64 reaches fp64 level."""
    A, B = _data(16, 512, 16, dist)
    C = np.array([[float(sum(Fraction(a) * Fraction(b) for a, b in zip(A[i], B[:, j]))) for j in range(16)]
                  for i in range(16)])
    den = np.abs(A) @ np.abs(B)

    def err(method, device):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", mw.RangeWarning)
            return float(np.max(np.abs(mw.matmul(A, B, method=method, device=device) - C) / den))

    if dist == "uniform-half":
        assert err("double-fp16", "V100") < err("fp16", "V100") / 8
    else:  # the seed's finding (sec. 4.3): on (0, 1] data the V100's truncation eats double-fp16's gain ...
        assert err("fp16", "V100") / 8 < err("double-fp16", "V100") < err("fp16", "V100")
        rn = bf.Model(bf.Family.EXACT_FUSED, "fp16", "fp32", block_width=4, name="block FMA, L = 4, RN")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", mw.RangeWarning)
            e_rn = float(np.max(np.abs(mw.matmul(A, B, method="double-fp16", model=rn) - C) / den))
        assert e_rn < err("double-fp16", "V100") / 4  # ... and a unit rounding to nearest gives it back
    assert err("triple-bf16", "A100") < err("double-bf16", "A100") < err("bf16", "A100")
    assert err("3xtf32", "A100") < err("tf32", "A100") / 8
    A64, B64 = np.random.default_rng(2).random((8, 64)), np.random.default_rng(3).random((64, 8))
    C64 = np.array([[float(sum(Fraction(a) * Fraction(b) for a, b in zip(A64[i], B64[:, j]))) for j in range(8)]
                    for i in range(8)])
    e64 = np.max(np.abs(mw.matmul(A64, B64, method="tf64") - C64) / (np.abs(A64) @ np.abs(B64)))
    assert e64 < 2.0**-45


def test_fabsum_blocks_the_leading_product():
    A, B = _data(8, 1024, 8, "uniform01", seed=4)
    C = A @ B
    den = np.abs(A) @ np.abs(B)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mw.RangeWarning)
        plain, i0 = mw.matmul(A, B, method="double-fp16", device="V100", return_info=True)
        v2, info = mw.matmul(A, B, method="double-fp16", device="V100", summation="fabsum-v2", block=64,
                             return_info=True)
    assert info["calls"] == i0["calls"] - 1 + 1024 // 64
    assert np.max(np.abs(v2 - C) / den) <= np.max(np.abs(plain - C) / den)


def test_bad_input():
    A, B = _data(2, 4, 2, "uniform01")
    with pytest.raises(ValueError, match="inner dimensions differ"):
        mw.matmul(A, B[:3], method="fp16")
    with pytest.raises(ValueError, match="method='fp8': unknown method"):
        mw.matmul(A, B, method="fp8")
    with pytest.raises(ValueError, match="device='V100': has no bf16 -> fp32 unit.*; pass device='A100'"):
        mw.matmul(A, B, method="bf16", device="V100")
    with pytest.raises(ValueError, match="needs block"):
        mw.matmul(A, B, method="fp16", summation="fabsum-v1")
    with pytest.raises(ValueError, match="not finite"):
        mw.matmul(np.array([[np.inf, 1.0]]), B[:2], method="fp16")
    with pytest.raises(ValueError, match="needs p="):
        mw.matmul(A, B, method="mmm")


def test_the_tf64_fast_path_is_the_engine():
    """TF64's unit runs as float64 rank-one updates; bit for bit the engine's FMA chain on TF64_UNIT,
    signed zeros and cancellation included."""
    from blockfma.multiword.steps import _fma_chain_fp64

    rng = np.random.default_rng(9)
    A = _fp32(rng.standard_normal((6, 40)) * np.exp2(rng.integers(-30, 30, (6, 40))))
    B = _fp32(rng.standard_normal((40, 5)) * np.exp2(rng.integers(-30, 30, (40, 5))))
    A[0] = -0.0
    C = rng.standard_normal((6, 5))
    for c in (None, C):
        want = bf.gemm(A, B, c, model=mw.TF64_UNIT)
        assert bits(_fma_chain_fp64(A, B, c)).tolist() == bits(want).tolist()


def _cli(capsys, *argv):
    from blockfma.cli import main

    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_multiword(capsys):
    code, out, err = _cli(capsys, "multiword", "double-fp16", "--device", "V100", "--n", "64", "--m", "8",
                          "--progress")
    assert code == 0 and "double-fp16" in out and "componentwise" in out and "double-fp16 on V100" in err
    code, out, _ = _cli(capsys, "multiword", "--compare", "--n", "32", "--m", "4", "--dist", "uniform-half", "-q")
    assert code == 0
    for name in ("fp16", "3xtf32", "bf16x9", "tf64", "ozaki2", "fp64"):
        assert f"\n{name} " in out
    code, _, err = _cli(capsys, "multiword", "bf16", "--device", "V100", "-q")
    assert code == 2 and "--device V100: has no bf16 -> fp32 unit" in err and "pass --device A100" in err
    code, _, err = _cli(capsys, "multiword", "-q")
    assert code == 2 and "name a METHOD" in err


def test_bf_multiword_is_reachable_from_the_package():
    assert bf.multiword.matmul is mw.matmul
