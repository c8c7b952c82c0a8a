"""The public contract of bf.dot / bf.gemm / bf.device: shapes, dtypes, bad input, special values."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import blockfma as bf
from blockfma import formats as F
from blockfma.model import Family, Model

from helpers import bits


# --- bad input gets a clear error ------------------------------------------------------------------------
def test_unrepresentable_input_names_index_value_and_fix():
    with pytest.raises(ValueError) as err:
        bf.dot([[1.0, 0.5], [0.25, 0.1]], [[1.0, 1.0], [1.0, 1.0]], [0.0, 0.0], device="V100")
    msg = str(err.value)
    assert "a[1, 1]" in msg and "0.1" in msg and "fp16" in msg
    assert "blockfma.formats.round" in msg and "round_inputs" in msg


def test_unrepresentable_c_is_named():
    with pytest.raises(ValueError, match=r"c\[2\] = 0\.1 is not representable in fp32"):
        bf.dot(np.ones((3, 4)), np.ones((3, 4)), [0.0, 0.5, 0.1], device="A100")


def test_round_inputs():
    a = [0.1, 0.2]
    got = bf.dot(a, [1.0, 1.0], 0.0, device="exact", round_inputs="rne")
    a16 = np.array(a).astype(np.float16).astype(np.float64)  # numpy's cast rounds to nearest even
    assert float(got) == float(np.float32(a16[0] + a16[1]))  # the fp16 sum is exact in float64
    # tf32 read from fp32 registers by truncation (round_inputs="device") versus to nearest
    x = 1 + 2**-10 + 2**-11 + 2**-20  # an fp32 value between two tf32 values, above their midpoint
    assert float(bf.dot([x], [1.0], 0.0, device="A100", input_format="tf32", round_inputs="device")) == 1 + 2**-10
    assert float(bf.dot([x], [1.0], 0.0, device="A100", input_format="tf32", round_inputs="rne")) == 1 + 2**-9


def test_shape_errors_name_both_shapes():
    with pytest.raises(ValueError, match=r"\(3, 4\) and \(3, 5\)"):
        bf.dot(np.ones((3, 4)), np.ones((3, 5)), 0.0)
    with pytest.raises(ValueError, match=r"a \(3, 4\), b \(3, 4\), c \(2,\)"):
        bf.dot(np.ones((3, 4)), np.ones((3, 4)), np.zeros(2))
    with pytest.raises(ValueError, match=r"A is \(2, 3\), B is \(4, 2\)"):
        bf.gemm(np.ones((2, 3)), np.ones((4, 2)))
    with pytest.raises(ValueError, match=r"C has shape \(3,\)"):
        bf.gemm(np.ones((2, 3)), np.ones((3, 2)), np.zeros(3))
    with pytest.raises(ValueError, match="last axis"):
        bf.dot(1.0, 1.0, 0.0)


def test_unknown_names_list_the_closest():
    with pytest.raises(ValueError, match="did you mean.*H100"):
        bf.dot([1.0], [1.0], 0.0, device="H10")
    with pytest.raises(ValueError, match="did you mean.*bf16"):
        bf.dot([1.0], [1.0], 0.0, input_format="bf61")
    with pytest.raises(ValueError, match="V100 has no model for bf16 inputs with fp32 output; available: fp16->fp32"):
        bf.dot([1.0], [1.0], 0.0, device="V100", input_format="bf16")
    with pytest.raises(ValueError, match="contradicts the model"):
        bf.dot([1.0], [1.0], 0.0, model=bf.device("V100").model(), input_format="bf16")
    with pytest.raises(ValueError, match="strings"):
        bf.dot(["1"], [1.0], 0.0)


# --- dtypes and shapes -----------------------------------------------------------------------------------
def test_dtypes_in_and_out():
    a16 = np.array([1.0, 2.0], dtype=np.float16)
    assert bf.dot(a16, a16, np.float32(1.0), device="H100").dtype == np.float32
    assert bf.dot(a16, a16, np.float16(1.0), device="H100", output_format="fp16").dtype == np.float16
    abf = np.array([1.0, 2.0], dtype=ml_dtypes.bfloat16)
    assert float(bf.dot(abf, abf, 0.0, device="H100", input_format="bf16")) == 5.0
    assert bf.dot([1, 2], [3, 4], 0, device="A100", input_format="fp64", output_format="fp64").dtype == np.float64


def test_broadcasting_and_empty():
    a = np.ones((2, 3, 4))
    assert bf.dot(a, np.arange(4.0), 0.0).shape == (2, 3)
    assert bf.dot(a, np.arange(4.0), np.zeros((2, 3))).tolist() == [[6.0] * 3] * 2
    assert bf.dot(np.zeros((2, 0)), np.zeros((2, 0)), [1.5, -0.0]).tolist() == [1.5, -0.0]
    assert bf.gemm(np.zeros((2, 0)), np.zeros((0, 3)), 2.0).tolist() == [[2.0] * 3] * 2


def test_chaining_blocks_equals_chaining_calls():
    # A100 fp16: k = 16 is two chained 8-blocks, each block's result the next block's C
    rng = np.random.default_rng(3)
    a = F.round("fp16", rng.normal(size=(200, 16)) * 2.0 ** rng.integers(-10, 10, size=(200, 16)))
    b = F.round("fp16", rng.normal(size=(200, 16)))
    c = F.round("fp32", rng.normal(size=200))
    whole = bf.dot(a, b, c, device="A100")
    first = bf.dot(a[:, :8], b[:, :8], c, device="A100")
    twice = bf.dot(a[:, 8:], b[:, 8:], first, device="A100")
    assert bits(whole).tolist() == bits(twice).tolist()
    # and a short last block is padded with zero products (at e_zero): k = 5 on V100 is 4 + 1
    v = bf.dot(a[:, :5], b[:, :5], c, device="V100")
    w = bf.dot(np.c_[a[:, :5], np.zeros((200, 3))], np.c_[b[:, :5], np.zeros((200, 3))], c, device="V100")
    assert bits(v).tolist() == bits(w).tolist()


# --- special values follow the modelled hardware ---------------------------------------------------------
@pytest.mark.parametrize("device,out,pattern", [
    ("H100", "fp32", 0x7FFFFFFF), ("H100", "fp16", 0x7FFF),  # NVIDIA canonical NaN
    ("MI100", "fp32", 0x7FC00000), ("exact", "fp32", 0x7FC00000),  # IEEE default NaN
])
def test_nan_patterns(device, out, pattern):
    inf, nan = np.inf, np.nan
    cases = ([[inf, 1.0], [0.0, 1.0], 0.0],  # inf * 0
             [[inf, -inf], [1.0, 1.0], 0.0],  # inf - inf
             [[nan, 1.0], [1.0, 1.0], 0.0],
             [[1.0, 1.0], [1.0, 1.0], nan],
             [[inf, 1.0], [1.0, 1.0], -inf])
    for a, b, c in cases:
        assert int(bits(bf.dot(a, b, c, device=device, output_format=out))) == pattern, (a, b, c)


def _codes(dtype, *codes):
    uint = {4: np.uint32, 8: np.uint64}[np.dtype(dtype).itemsize]
    return np.array(codes, dtype=uint).view(dtype)


def test_dmma_nans_carry_the_input_payload():
    """H100 fp64 DMMA (data/hardware): B's NaN, else the accumulator's, else A's, quieted; inf * 0 gives
    0xFFF8000000000000.  dot and gemm alike, whatever else is in the GEMM."""
    qa, sb, qc = _codes(np.float64, 0x7FF800000000000A, 0xFFF000000000000B, 0x7FF800000000000C)
    def dot(a, b, c):
        return int(bits(bf.dot(a, b, c, device="H100", input_format="fp64", output_format="fp64")))
    assert dot([qa, 1.0], [1.0, sb], qc) == 0xFFF800000000000B
    assert dot([qa, 1.0], [1.0, 1.0], qc) == 0x7FF800000000000C
    assert dot([qa, 1.0], [1.0, 1.0], 0.0) == 0x7FF800000000000A
    assert dot([np.inf, 1.0], [0.0, 1.0], 0.0) == 0xFFF8000000000000
    A = np.array([[qa, 1.0], [np.inf, 2.0]])
    B = np.array([[1.0, 0.0], [sb, 3.0]])
    D = bits(bf.gemm(A, B, np.array([[qc, 1.0], [qc, 0.0]]), device="H100", input_format="fp64",
                     output_format="fp64"))
    assert D.tolist() == [[0xFFF800000000000B, 0x7FF800000000000A], [0xFFF800000000000B, 0xFFF8000000000000]]


def test_propagate_runs_on_the_compiled_kernels():
    """The compiled kernels take finite inputs only, from which an FMA chain makes no NaN (an FMA's exact
    product of finite values is finite, and inf + finite stays inf): they run nan='propagate' as they are."""
    from blockfma.engine import last_backend
    from helpers import FAST

    m = Model(Family.FMA_CHAIN, "fp32", "fp32", block_width=1, nan="propagate")
    a, b = [2.0**100, 2.0**100], [2.0**100, -(2.0**100)]  # +inf after the first step, and it stays
    for backend in ["numpy"] + (["numba"] if FAST else []):
        assert int(bits(bf.dot(a, b, 0.0, model=m, backend=backend))) == 0x7F800000, backend
        assert last_backend() == backend


def test_tf32_register_read_drops_the_low_bits_of_nans_too():
    """The H100 reads a binary32 register as tf32 by dropping its 13 low bits (data/hardware): a NaN whose
    payload lies only there is an infinity.  float32 arrays keep those bits; float64 NaNs are cut at their
    own width (numpy.nan stays NaN)."""
    a = _codes(np.float32, 0x7F800001, 0x3F800000, 0x3F800000, 0x3F800000, 0, 0, 0, 0)
    ones = np.ones(8, np.float32)
    tf32 = dict(device="H100", input_format="tf32", round_inputs="device")
    assert int(bits(bf.dot(a, ones, 1.0, **tf32))) == 0x7F800000
    assert int(bits(bf.dot(a, -ones, 1.0, **tf32))) == 0xFF800000
    assert int(bits(bf.dot(a, np.r_[np.float32(0), ones[1:]], 1.0, **tf32))) == 0x7FFFFFFF  # inf * 0
    a[0] = _codes(np.float32, 0x7FC00001)[0]  # the quiet bit is among the kept bits: NaN
    assert int(bits(bf.dot(a, ones, 1.0, **tf32))) == 0x7FFFFFFF
    a64 = a.astype(np.float64)
    a64[0] = _codes(np.float64, 0x7FF0000000000001)[0]
    assert int(bits(bf.dot(a64, ones, 1.0, **tf32))) == 0x7F800000
    a64[0] = np.nan
    assert int(bits(bf.dot(a64, ones, 1.0, **tf32))) == 0x7FFFFFFF
    B = np.ones((8, 2), np.float32)
    B[0, 1] = _codes(np.float32, 0xFF800001)[0]  # B read in place: the column's -inf times 1, plus 1
    D = bf.gemm(np.ones((1, 8), np.float32), B, np.ones((1, 2)), **tf32)
    assert bits(D).tolist() == [[0x41100000, 0xFF800000]]
    # without the device read a NaN is a NaN (values must be tf32 values; a NaN's payload is not checked)
    assert int(bits(bf.dot(_codes(np.float32, 0x7F800001), [1.0], 1.0, device="H100", input_format="tf32"))) \
        == 0x7FFFFFFF


def test_amx_nan_is_x86_indefinite():
    assert int(bits(bf.dot([np.inf, 0.0], [0.0, 0.0], 0.0, device="AMX", input_format="bf16"))) == 0xFFC00000


def test_infinities_propagate():
    assert float(bf.dot([np.inf, 1.0], [2.0, 1.0], 1.0, device="H100")) == np.inf
    assert float(bf.dot([1.0], [1.0], -np.inf, device="V100")) == -np.inf


def test_nvidia_overflow_is_infinite_even_when_truncating():
    # K&M and MMA-Sim: a result beyond binary32's range becomes +-Inf although fp32 output truncates;
    # IEEE round-toward-zero would give the largest finite value.  bf16 products reach 2^254.
    big = 2.0**127
    assert float(bf.dot([big], [4.0], 0.0, device="A100", input_format="bf16")) == np.inf
    assert float(bf.dot([-big], [4.0], 0.0, device="A100", input_format="bf16")) == -np.inf
    ieee_rz = bf.device("A100").model("bf16", "fp32").replace(overflow="ieee")
    assert float(bf.dot([big], [4.0], 0.0, model=ieee_rz)) == F.fp32.max


def test_exact_zero_signs():
    # NVIDIA: an exact zero result is +0, also from -0 terms; IEEE families keep -0 + -0 = -0
    assert int(bits(bf.dot([-1.0, 1.0], [1.0, 1.0], 0.0, device="H100"))) == 0
    assert int(bits(bf.dot([-0.0], [1.0], -0.0, device="H100"))) == 0
    assert int(bits(bf.dot([-0.0], [1.0], -0.0, device="ieee-sequential"))) == 0x80000000
    assert int(bits(bf.dot([-1.0], [1.0], 1.0, device="ieee-sequential"))) == 0
    # a nonzero sum that rounds to zero: +0 on NVIDIA (an H100 gave 0x0000 for -2^-26 rounded to binary16,
    # data/hardware/h100-mma-wgmma.json), the sum's sign with rounded_zero="signed"
    assert int(bits(bf.dot([-(2.0**-24)], [2.0**-4], 0.0, device="H100", output_format="fp16"))) == 0
    signed = bf.device("H100").model("fp16", "fp16").replace(rounded_zero="signed")
    assert int(bits(bf.dot([-(2.0**-24)], [2.0**-4], 0.0, model=signed))) == 0x8000
    # bf16 -> fp32: -2^-80 * 2^-80 rounds (toward zero) to +0 on an H100
    assert int(bits(bf.dot([-(2.0**-80)], [2.0**-80], 0.0, device="H100", input_format="bf16"))) == 0


# --- devices ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("alias,name", [("A30", "A100"), ("a2", "A100"), ("RTX 3090", "A100"), ("H200", "H100"),
                                        ("H800", "H100"), ("L40S", "Ada"), ("rtx-4090", "Ada"),
                                        ("MI210", "MI250X"), ("MI250", "MI250X"), ("MI300A", "MI300X"),
                                        ("RTX PRO 6000", "RTX 5090"), ("Volta", "V100"), ("amx", "Intel AMX")])
def test_aliases(alias, name):
    assert bf.device(alias).name == name


def test_every_preset_is_documented():
    from blockfma.devices import SOURCES

    for dev in bf.devices():
        assert dev.sources and all(s in SOURCES for s in dev.sources), dev.name
        assert dev.confidence in ("high", "medium", "low")
        assert dev.notes
        assert dev.pairs(), dev.name
        for v in dev.variants:
            assert bf.device(v).variant_of == dev.name
        for ins in dev.instructions:
            for (i, o), m in ins.models.items():
                assert (m.input_name, m.output_format.name) == (i, o)
                L = m.block_width
                if L and i in ins.k:
                    assert ins.k[i] % L == 0 or L % ins.k[i] == 0, (dev.name, ins.name, i)
                assert Model.from_dict(m.to_dict()) == m
    assert bf.device("Intel AMX").specification_only and bf.device("Arm BFDOT").specification_only
    assert not bf.device("H100").specification_only


def test_conflicting_sources_keep_both_readings():
    mi = bf.device("MI250X")
    assert "FTTN" in mi.notes and mi.variants == ("MI250X-fttn",)
    assert mi.model("fp16", "fp32").family is Family.PAIRWISE
    assert bf.device("MI250X-fttn").model("fp16", "fp32").family is Family.FMA_CHAIN


def test_instruction_paths():
    h = bf.device("H100")
    assert h.model("e4m3", "fp32").block_width == 32  # fp8 exists on wgmma only
    assert h.instruction_for("e4m3fn", "fp32").name == "wgmma"
    assert h.model("fp16", "fp32", instruction="wgmma") == h.model("fp16", "fp32", instruction="mma")
    with pytest.raises(ValueError, match="instruction 'mma' of H100 has no model for e4m3fn"):
        h.model("e4m3fn", "fp32", instruction="mma")
    assert bf.device("T4").model(instruction="mma.m8n8k4") == bf.device("V100").model()


def test_model_validation():
    with pytest.raises(ValueError, match="e_zero must be given"):
        Model(Family.TRUNCATED_FUSED, "fp16", "fp32", block_width=4, fraction_bits=23)
    with pytest.raises(ValueError, match="block_width"):
        Model(Family.PAIRWISE, "fp16", "fp32", block_width=3)
    with pytest.raises(ValueError, match="no infinities"):
        Model(Family.EXACT_FUSED, "fp16", "e4m3fn", block_width=4)
    m = bf.device("Ada").model("e4m3", "fp32")
    assert m.result_format is F.e8m13 and m.output_format is F.fp32


def _have_torch() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.parametrize("backend", ["auto", "numpy", pytest.param("torch", marks=pytest.mark.skipif(
    not _have_torch(), reason="torch is not installed"))])
def test_gemm_progress_on_stderr(capsys, backend):
    A = np.ones((40, 32))
    D = bf.gemm(A, A.T, None, device="H100", progress=True, backend=backend)
    assert float(D[0, 0]) == 32.0
    err = capsys.readouterr().err
    assert "100.0%" in err and "40x32x40" in err and err.endswith("\n")
    bf.gemm(A, A.T, None, device="H100", progress=False, backend=backend)
    assert capsys.readouterr().err == ""


def test_without_numba_the_numpy_engine_runs(monkeypatch):
    """With numba missing, 'auto' falls back to numpy and gives the exact reference's bits (where numba is
    installed, its kernels give them too); 'numba' says what to install."""
    from blockfma import reference
    from blockfma.engine import last_backend, registry

    A = F.round("fp16", np.linspace(-3, 5, 64).reshape(8, 8))
    h100 = bf.device("H100").model("fp16", "fp32")
    want = [[reference.dot_bits(h100, A[i].tolist(), A[j].tolist(), 0.0) for j in range(8)] for i in range(8)]
    if registry._fast_module():
        assert bf.gemm(A, A.T, None, device="H100", backend="numba").view(np.uint32).tolist() == want
    monkeypatch.setattr(registry, "_FAST", False)
    got = bf.gemm(A, A.T, None, device="H100")
    assert last_backend() == "numpy"
    assert got.view(np.uint32).tolist() == want
    with pytest.raises(ValueError, match=r"pip install 'blockfma\[fast\]'"):
        bf.gemm(A, A.T, None, device="H100", backend="numba")


def test_trusted_path_skips_only_the_check():
    """check=False gives the same bits on values of the format and does not look at them otherwise."""
    rng = np.random.default_rng(5)
    A = F.round("fp16", rng.standard_normal((7, 40)))
    B = F.round("fp16", rng.standard_normal((40, 5)))
    C = F.round("fp32", rng.standard_normal((7, 5)))
    for backend in ("numpy", "auto"):
        want = bf.gemm(A, B, C, device="H100", backend=backend)
        assert np.array_equal(bits(bf.gemm(A, B, C, device="H100", backend=backend, check=False)), bits(want))
    a, b, c = A[:5], B.T, C[:5, 0]
    assert np.array_equal(bits(bf.dot(a, b, c, check=False)), bits(bf.dot(a, b, c)))
    with pytest.raises(ValueError, match="not representable in fp16"):
        bf.gemm(A + 2.0**-20, B)
    bf.gemm(A + 2.0**-20, B, check=False)  # no error: the caller vouched for the values


def test_dispatch_says_what_ran_and_never_falls_back_silently():
    from blockfma.engine import last_backend
    from helpers import FAST

    bf.dot([1.0, 2.0], [3.0, 4.0], 0.0, device="H100")
    assert last_backend() == ("numba" if FAST else "numpy")
    bf.dot([np.nan, 2.0], [3.0, 4.0], 0.0, device="H100")  # non-finite inputs: the numpy engine
    assert last_backend() == "numpy"
    bf.gemm(np.ones((2, 16)), np.ones((16, 2)), backend="numpy")
    assert last_backend() == "numpy"
    if not FAST:
        pytest.skip("the rest needs numba (pip install 'blockfma[fast]')")
    # MI300X bf16: a product beyond binary32's range sends late-c to numpy; forcing numba says so
    a, b = [2.0**100, 1.0], [2.0**50, 1.0]
    assert float(bf.dot(a, b, 0.0, device="MI300X", input_format="bf16")) == np.inf
    assert last_backend() == "numpy"
    with pytest.raises(ValueError, match="compiled kernels do not run"):
        bf.dot(a, b, 0.0, device="MI300X", input_format="bf16", backend="numba")
    with pytest.raises(ValueError, match="compiled kernels do not run"):
        bf.gemm(np.array([a]), np.array([b]).T, device="MI300X", input_format="bf16", backend="numba")


def test_empty_dot_product_gives_c_as_given_even_where_zeros_are_positive():
    assert int(bits(bf.dot(np.zeros((0,)), np.zeros((0,)), -0.0, device="H100"))) == 0x80000000
    assert int(bits(bf.gemm(np.zeros((1, 0)), np.zeros((0, 1)), -0.0, device="H100"))[0, 0]) == 0x80000000


# --- bad input, tried as a new user would (issue 8, item 7) ----------------------------------------------------
def test_model_fields_are_checked_by_type_and_range():
    base = dict(block_width=8, fraction_bits=24, e_zero=-133)
    for change, message in ((dict(carry_bits=1.5), "carry_bits must be an integer"),
                            (dict(block_width=True), "block_width must be an integer"),
                            (dict(subnormals="no"), "subnormals must be True or False"),
                            (dict(e_zero=2**14), r"e_zero must lie in \[-2400, 2400\]")):
        with pytest.raises(ValueError, match=message):
            Model(Family.TRUNCATED_FUSED, "fp16", "fp32", **{**base, **change})
    with pytest.raises(ValueError, match="late_fraction_bits above 52"):
        Model(Family.LATE_C, "fp16", "fp32", block_width=8, fraction_bits=24, late_fraction_bits=62)
    assert Model(Family.TRUNCATED_FUSED, "fp16", "fp32", **{**base, "block_width": np.int64(8)}).block_width == 8
    d = bf.device("V100").model().to_dict()
    assert Model.from_dict({**d, "output_rounding": "rz"}) == bf.device("V100").model()


def test_models_beyond_the_engines_range_raise_instead_of_returning_garbage():
    for model in (Model(Family.LATE_C, "fp64", "fp64", block_width=2, fraction_bits=24, late_fraction_bits=31),
                  Model(Family.TRUNCATED_FUSED, "fp16", "fp32", block_width=1024, fraction_bits=52, e_zero=-133),
                  Model(Family.TRUNCATED_FUSED, "fp16", "fp32", block_width=8, fraction_bits=24, e_zero=2000)):
        for backend in ("auto", "numpy"):
            with pytest.raises(ValueError, match="blockfma.reference.dot"):
                bf.dot(np.ones(4), np.ones(4), 0.0, model=model, backend=backend)


def test_exact_numbers_are_read_exactly_or_refused():
    from fractions import Fraction

    a100 = dict(device="A100", input_format="bf16")
    with pytest.raises(ValueError, match=r"a\[0\] = 1152921504606846977 is not exactly a binary64 value"):
        bf.dot([2**60 + 1], [1], 0.0, **a100)  # float64 would round it to 2**60, a bf16 value
    assert bf.dot([2**60], [1], 0.0, **a100) == np.float32(2.0**60)
    with pytest.raises(ValueError, match=r"b\[0\] = 1.000000000000000000\d* is not exactly a binary64"):
        bf.dot([1.0], np.array([np.longdouble(1) + np.longdouble(2) ** -60]), **a100)
    assert bits(bf.dot([Fraction(3, 4), Fraction(1, 8)], [2, 8], Fraction(1, 2**20), **a100)) == \
        bits(np.float32(1.5 + 1 + 2.0**-20))
    with pytest.raises(ValueError, match=r"a\[0\] = Fraction\(1, 3\) is not exactly a binary64"):
        bf.dot([Fraction(1, 3)], [1], **a100)
    with pytest.raises(ValueError, match=r"a\[1\] = None is not a number"):
        bf.dot([1.0, None], [1, 1], **a100)
    assert bits(bf.dot([1.0], [-0.0])) == 0x00000000  # c=None is +0, as gemm's C=None


def test_gemm_names_the_index_of_b_as_given():
    B = np.ones((8, 5))
    B[0, 4] = 1 / 3
    with pytest.raises(ValueError, match=r"B\[0, 4\] = 0.333"):
        bf.gemm(np.ones((2, 8)), B)


def test_smaller_surprises_are_errors_or_right():
    with pytest.raises(ValueError, match="masked array"):
        bf.dot(np.ma.masked_array([1.0, 2.0], [0, 1]), [1.0, 1.0])
    for name in ("input_format", "instruction"):
        with pytest.raises(ValueError, match=f"{name}='' names nothing"):
            bf.dot([1.0], [1.0], **{name: ""})
    with pytest.raises(ValueError, match="either model= or device="):
        bf.dot([1.0], [1.0], device="A100", model=bf.device("V100").model())
    bf.dot([1.0], [1.0], backend="NumPy")
    assert bf.engine.last_backend() == "numpy"


def test_one_nan_leaves_the_other_rows_of_a_gemm_alone():
    """A NaN sends a GEMM to another engine path; every other row must keep its bits (all presets)."""
    from helpers import preset_models

    rng = np.random.default_rng(1)
    for m in preset_models():
        L = m.block_width or 8
        A = F.round(m.input_format, rng.normal(size=(4, 2 * L + 3)) * 4, saturate=True)
        B = F.round(m.b_format, rng.normal(size=(2 * L + 3, 3)) * 4, saturate=True)
        C = F.round(m.c_format, rng.normal(size=(4, 3)))
        clean = bits(bf.gemm(A, B, C, model=m))
        if m.input_format.has_nan:
            A[0, 0] = np.nan
        else:  # fp6 and fp4 have no NaN code: the NaN comes in C
            C[0, 0] = np.nan
        assert np.array_equal(bits(bf.gemm(A, B, C, model=m))[1:], clean[1:]), m.summary()


def test_formats_round_reads_exact_numbers_once():
    from fractions import Fraction

    # 1 + 2^-11 + 2^-40 lies just above the fp16 midpoint 1 + 2^-11: up, where float64 would see a tie
    assert F.round("fp16", [Fraction(2049, 2048) + Fraction(1, 2**40)])[0] == 1 + 2.0**-10
    assert F.round("bf16", [Fraction(1) + Fraction(1, 2**8) + Fraction(1, 2**60)])[0] == 1 + 2.0**-7
    assert np.signbit(F.round("fp16", [Fraction(-1, 2**40)])[0])  # rounds to -0
    with pytest.raises(ValueError, match="None is not a number"):
        F.round("fp16", [None])
    assert F.round_integer("fp16", False, 1, 2**40) == np.inf  # exponents no longer wrap through int32
    assert F.round_integer("fp16", False, 1, -2**40) == 0.0
    with pytest.raises(ValueError, match="not a value of fp16"):
        F.to_numpy("fp16", [0.1])


def test_calls_that_cannot_fit_are_refused_up_front(monkeypatch):
    from blockfma.engine import api

    monkeypatch.setattr(api, "_available_memory", lambda: 2**30)  # a machine with 1 GiB free
    with pytest.raises(MemoryError, match=r"gemm 20000x16x20000 needs about 2[0-9.]+ GiB .* 1.0 GiB available; "
                                          "pass dask arrays"):
        bf.gemm(np.ones((20000, 16)), np.ones((16, 20000)))
    with pytest.raises(MemoryError, match="dot of 40000000 rows of length 16"):
        bf.dot(np.ones((40000, 1, 16)), np.ones((1, 1000, 16)))
    assert bf.gemm(np.ones((100, 16)), np.ones((16, 100)))[0, 0] == 16  # small calls run


def test_ampere_m8n8k4_is_a_chain_of_fmas():
    """Volta's mma.m8n8k4 on an A100 runs as CUDA-core FMAs (Valpey et al. sec. 3.1).  Fasi et al.'s row
    a = (1, 1, 1, 1), b = 2^-24 each, c = 1 - 2^-24: the FMA chain rounds to nearest at every step
    (1 - 2^-24 + 2^-24 = 1, then 1 + 2^-24 is a tie that stays at 1), the tensor-core block keeps all four
    products (quantum 2^-25) and truncates 1 + 3 * 2^-24 to 1 + 2^-23."""
    a, b, c = [1.0] * 4, [2.0**-24] * 4, 1 - 2.0**-24
    assert bits(bf.dot(a, b, c, device="A100", instruction="mma.m8n8k4")) == 0x3F800000
    assert bits(bf.dot(a, b, c, device="A100")) == 0x3F800001


def test_new_configurations_have_models():
    """Issue 8's missing configurations: Ada and RTX 5090 fp64 mma, RTX 5090 tf32 and fp8 (fp32 and fp16
    outputs, MMA-Sim's sm_120 reading: one 32-product block, F = 25), B200 tcgen05 fp8 with fp16 output."""
    rtx = bf.device("RTX 5090")
    assert rtx.model("e4m3fn", "fp32").block_width == 32 and rtx.model("e4m3fn", "fp32").fraction_bits == 25
    assert rtx.model("e5m2", "fp16").output_rounding is F.RoundingMode.TiesToEven
    assert rtx.model("tf32", "fp32").block_width == 8
    for name in ("Ada", "RTX 5090"):
        assert bf.device(name).model("fp64", "fp64").family is Family.FMA_CHAIN
    assert bf.device("B200").instruction("tcgen05").models[("e5m2", "fp16")].e_zero == -21


def test_mixed_operand_formats_and_a_narrower_c():
    """A in e4m3, B in e5m2 (Hopper wgmma, Ada, Blackwell, MI300X fp8 x bf8): each operand is checked in
    its own format and its exponent read in it.  a = 448 (e4m3's largest) and b = 57344 (e5m2's largest):
    the product 448 * 57344 = 25690112 is exact; neither value is in the other's format."""
    want = bits(np.float32(448.0 * 57344.0))
    got = bf.dot([448.0], [57344.0], 0.0, device="H100", input_format=("e4m3fn", "e5m2"), instruction="wgmma")
    assert bits(got) == want
    got = bf.dot([448.0], [57344.0], 0.0, device="H100", input_format="e4m3fn*e5m2", instruction="wgmma")
    assert bits(got) == want
    with pytest.raises(ValueError, match=r"b\[0\] = 57344.0 is not representable in e4m3fn"):
        bf.dot([448.0], [57344.0], device="H100", input_format="e4m3fn", instruction="wgmma")
    with pytest.raises(ValueError, match="has no model for e5m2\\*e4m3fn inputs"):
        bf.dot([1.0], [1.0], device="V100", input_format=("e5m2", "e4m3fn"))
    # Volta's m8n8k4.f32.f16.f16.f16: C in fp16, D in fp32
    assert bits(bf.dot([1.0], [1.0], 0.5, device="V100", c_format="fp16")) == bits(np.float32(1.5))
    with pytest.raises(ValueError, match=r"c = 0.1 is not representable in fp16"):
        bf.dot([1.0], [1.0], 0.1, device="V100", c_format="fp16")
    with pytest.raises(ValueError, match="c_format='fp64' holds values"):
        bf.dot([1.0], [1.0], 0.5, device="V100", c_format="fp64")
    # the same instruction as the model that reads C in fp16 (c_input_format): C checked against fp16 by
    # default, c_format narrower still only checks, a wider one is refused
    f16c = dict(device="V100", instruction="mma.f16c")
    assert bits(bf.dot([1.0], [1.0], 0.5, **f16c)) == bits(np.float32(1.5))
    with pytest.raises(ValueError, match=r"c = 0.1 is not representable in fp16"):
        bf.dot([1.0], [1.0], 0.1, **f16c)
    with pytest.raises(ValueError, match=r"C\[0, 0\] = 0.1 is not representable in fp16"):
        bf.gemm(np.ones((1, 0)), np.ones((0, 1)), [[0.1]], **f16c)
    assert bits(bf.dot([1.0], [1.0], 0.1, round_inputs="rne", **f16c)) == bits(np.float32(1 + float(np.float16(0.1))))
    assert bits(bf.dot([1.0], [1.0], 0.5, c_format="e5m2", **f16c)) == bits(np.float32(1.5))
    with pytest.raises(ValueError, match=r"c = 0.28125 is not representable in e5m2"):
        bf.dot([1.0], [1.0], 0.28125, c_format="e5m2", **f16c)
    with pytest.raises(ValueError, match="c_format='fp32' holds values the model's C format 'fp16' does not"):
        bf.dot([1.0], [1.0], 0.5, c_format="fp32", **f16c)
    with pytest.raises(ValueError, match=r"C\[0, 0\] = 0.1000000014901\d* is not representable in fp16"):
        bf.gemm(np.ones((1, 1), np.float16), np.ones((1, 1), np.float16), np.full((1, 1), 0.1, np.float32), **f16c)


def test_arrays_of_a_held_dtype_are_not_looked_at(monkeypatch):
    """A, B and C given as arrays of a dtype whose every code the model's format holds (float16 for fp16
    inputs, float32 or float16 for an fp32 C) skip the per-value check, which costs more than a GEMM's
    transfer to a GPU; any other dtype is still checked value by value, and the results do not change."""
    import ml_dtypes

    from blockfma import formats as fm

    rng = np.random.default_rng(3)
    A = rng.standard_normal((5, 16)).astype(np.float16)
    B = rng.standard_normal((16, 4)).astype(np.float16)
    C = rng.standard_normal((5, 4)).astype(np.float32)
    want = bf.gemm(A, B, C, device="H100", input_format="fp16")
    looked = []
    real = fm.is_representable
    monkeypatch.setattr(fm, "is_representable", lambda f, x: looked.append(f.name) or real(f, x))
    got = bf.gemm(A, B, C, device="H100", input_format="fp16")
    assert looked == [] and (got.view(np.uint32) == want.view(np.uint32)).all()
    assert fm.holds_codes("fp32", "fp16") and not fm.holds_codes("fp16", "bf16")
    assert not fm.holds_codes("e4m3fn", "e5m2") and fm.of_dtype(ml_dtypes.float8_e4m3fn).name == "e4m3fn"
    # bf16 arrays for fp16 inputs, e5m2 ones (infinities) for e4m3fn inputs: looked at, and refused
    with pytest.raises(ValueError, match=r"A\[0, 0\] = 1.00025\d*e\+30 is not representable in fp16"):
        bf.gemm(np.full((2, 16), 1e30).astype(ml_dtypes.bfloat16), B, device="H100", input_format="fp16")
    with pytest.raises(ValueError, match=r"is not representable in e4m3fn"):
        bf.gemm(np.full((2, 32), np.inf).astype(ml_dtypes.float8_e5m2), np.ones((32, 2), ml_dtypes.float8_e4m3fn),
                device="H100", input_format="e4m3fn")
    assert looked == ["fp16", "e4m3fn"]
