"""Every result the seed papers state per device, reproduced by the presets.

Sources (shared/seeds): Fasi, Higham, Mikaitis, Pranesh, "Numerical behavior of NVIDIA tensor cores" (2021);
Valpey, Li, Pai, Gopalakrishnan, "An SMT formalization of mixed-precision matrix multiplication";
Li et al., "FTTN" (2024).  Each expected value is the paper's (or derived by hand from the paper's
sentence quoted beside it); none is output of this code.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import blockfma as bf
from blockfma.experiments import fttn

from helpers import bits, f32bits


def d32(device, a, b, c, **kw) -> int:
    """Bit pattern of the binary32 result."""
    out = bf.dot(np.array(a, dtype=np.float64), np.array(b, dtype=np.float64), c, device=device,
                 output_format="fp32", **kw)
    assert out.dtype == np.float32
    return int(bits(out))


def d16(device, a, b, c, **kw) -> int:
    out = bf.dot(np.array(a, dtype=np.float64), np.array(b, dtype=np.float64), c, device=device,
                 output_format="fp16", **kw)
    assert out.dtype == np.float16
    return int(bits(out))


def f16bits(value: float) -> int:
    return int(np.float16(value).view(np.uint16))


ONES = [1.0, 1.0, 1.0, 1.0]
NVIDIA_FP16 = ["V100", "T4", "A100"]  # the three devices of Fasi et al.


# --- Fasi et al. 2021: "Support for subnormal numbers" ---------------------------------------------------
@pytest.mark.parametrize("device", NVIDIA_FP16)
def test_fasi_subnormal_input(device):
    # "setting a11 = 2^-24, b11 = 2^2 ... The tensor cores return the subnormal result 2^-22 in both
    # binary16 and binary32 mode"
    assert d32(device, [2**-24], [2.0**2], 0.0) == f32bits(2**-22)
    assert d16(device, [2**-24], [2.0**2], 0.0) == f16bits(2**-22)


@pytest.mark.parametrize("device", NVIDIA_FP16)
def test_fasi_subnormal_c_passes_through(device):
    # "setting c11 to ... 2^-149 and all the elements of A and B to zero yields d11 = 2^-149"
    assert d32(device, [0.0] * 4, [0.0] * 4, 2.0**-149) == 1


@pytest.mark.parametrize("device", NVIDIA_FP16)
def test_fasi_subnormal_output(device):
    # "set a11 to 2^-14 ... and b11 to 2^-1 ... return the binary16 subnormal 2^-15 in both modes"
    assert d32(device, [2**-14], [2**-1], 0.0) == f32bits(2**-15)
    assert d16(device, [2**-14], [2**-1], 0.0) == f16bits(2**-15)
    # "a11 = 2^-14, b11 = 1, and c11 = -2^-15, which produces the subnormal binary16 number d11 = 2^-15"
    assert d16(device, [2**-14], [1.0], -(2**-15)) == f16bits(2**-15)


def test_fasi_subnormal_rounded_down_by_tensor_core():
    # "a11 and a12 to 1, b11 to the binary16 subnormal 2^-23 + 2^-24, b21 to 2 ... returned the value 2"
    assert d32("V100", [1.0, 1.0], [2**-23 + 2**-24, 2.0], 0.0) == f32bits(2.0)


# --- "Accuracy of the dot products" ----------------------------------------------------------------------
@pytest.mark.parametrize("device", NVIDIA_FP16)
def test_fasi_products_exact(device):
    # "first row of A and first column of B to 1 - 2^-11 ... produce the exact binary32 answer
    # d11 = 4 (1 - 2^-10 + 2^-22)"
    x = 1 - 2**-11
    assert d32(device, [x] * 4, [x] * 4, 0.0) == f32bits(4 * (1 - 2**-10 + 2**-22))


@pytest.mark.parametrize("device", NVIDIA_FP16)
def test_fasi_products_exact_with_binary16_output(device):
    # "a11 = b11 = a12 = 1 - 2^-11, b21 = 2^-11 ... tensor cores output the exact value 1 - 2^-10 + 2^-11"
    x = 1 - 2**-11
    assert d16(device, [x, x], [x, 2**-11], 0.0) == f16bits(1 - 2**-10 + 2**-11)


@pytest.mark.parametrize("position", range(5))
def test_fasi_four_rounding_errors_and_order(position):
    # "run 5 different cases with one of the addends in (3) set to 1 and the rest set to 2^-24 ...
    # All permutations return d11 = 1"  (V100)
    addends = [2.0**-24] * 5
    addends[position] = 1.0
    assert d32("V100", ONES, addends[:4], addends[4]) == f32bits(1.0)


# --- "Rounding modes in tensor core computations" ---------------------------------------------------------
def test_fasi_rounding_toward_zero():
    # "b11 = 2, b21 = 2^-23 + 2^-24 ... returns 2"; "changing the sign ... produces -2"
    assert d32("V100", ONES, [2.0, 2**-23 + 2**-24, 0.0, 0.0], 0.0) == f32bits(2.0)
    assert d32("V100", ONES, [-2.0, -(2**-23 + 2**-24), 0.0, 0.0], 0.0) == f32bits(-2.0)


@pytest.mark.parametrize("device", NVIDIA_FP16)
def test_fasi_binary16_output_round_to_nearest(device):
    # "a11 = a12 = 2^-24, b11 = 2^-1, b21 = 2^-2 ... tensor cores return 2^-24" (binary16 mode)
    assert d16(device, [2**-24, 2**-24], [2**-1, 2**-2], 0.0) == f16bits(2**-24)


# --- "Features of the accumulator" -----------------------------------------------------------------------
def test_fasi_no_guard_digit():
    # "b11 = 1 and c11 = -1 + 2^-24, the tensor cores return d11 = 2^-23"
    assert d32("V100", ONES, [1.0, 0.0, 0.0, 0.0], -1 + 2**-24) == f32bits(2**-23)


def test_fasi_no_normalisation_of_partial_sums_and_non_monotonicity():
    # "c11 = 1 - 2^-24 and the elements of the first column of B to 2^-24 ... d11 = 1 + 2^-23 ...
    # d11 = 1 when c11 = 1"
    assert d32("V100", ONES, [2**-24] * 4, 1 - 2**-24) == f32bits(1 + 2**-23)
    assert d32("V100", ONES, [2**-24] * 4, 1.0) == f32bits(1.0)


@pytest.mark.parametrize("order", list(itertools.permutations([1.0, -(2**-24), 0.0, 0.0])))
def test_fasi_no_normalisation_in_subtraction(order):
    # "c11 = -1 + 2^-24, and two of the elements of the first column of B to 1 and -2^-24 ... yields 2^-23"
    assert d32("V100", ONES, list(order), -1 + 2**-24) == f32bits(2**-23)


@pytest.mark.parametrize("order", sorted(set(itertools.permutations([1.0, 1.0, 1.0, 2**-23]))))
def test_fasi_two_carry_bits(order):
    # "c11 = 1 + 2^-22 + 2^-23 ... a permutation of the values 1, 1, 1, and 2^-23 ... all four
    # combinations returned the exact result 4 + 2^-21"
    assert d32("V100", ONES, list(order), 1 + 2**-22 + 2**-23) == f32bits(4 + 2**-21)


def test_fasi_third_carry_bit():
    # "c11 = 1 + 2^-1 + 2^-2 + 2^-3, b = 1, 1 + 2^-1, 1 + 2^-1 + 2^-2, 1 + 2^-1 + 2^-2 + 2^-3 ... returns
    # d11 = 8. If only two extra bits were present ... the adder would incorrectly return d11 = 0"
    b = [1.0, 1 + 2**-1, 1 + 2**-1 + 2**-2, 1 + 2**-1 + 2**-2 + 2**-3]
    c = 1 + 2**-1 + 2**-2 + 2**-3
    assert d32("V100", ONES, b, c) == f32bits(8.0)
    two_carries = bf.device("V100").model("fp16", "fp32").replace(carry_bits=2)
    assert int(bits(bf.dot(ONES, b, c, model=two_carries))) == f32bits(0.0)


# --- Turing and Ampere -----------------------------------------------------------------------------------
@pytest.mark.parametrize("device", ["T4", "A100"])
def test_fasi_extra_alignment_bit_on_turing_and_ampere(device):
    # "the operation 1 + 2^-24 + 2^-24, for example, can now be performed exactly because of the presence
    # of the extra bit"; on V100 both halves are lost
    assert d32(device, [1.0, 1.0], [2**-24, 2**-24], 1.0) == f32bits(1 + 2**-23)
    assert d32("V100", [1.0, 1.0], [2**-24, 2**-24], 1.0) == f32bits(1.0)


@pytest.mark.parametrize("device", ["T4", "A100"])
@pytest.mark.parametrize("position", range(5))
def test_fasi_order_test_with_next_bit(device, position):
    # "in the test for the order of operations ... the constant 2^-24 should be replaced by 2^-25"
    # (2^-25 is not a binary16 value: the products 2^-12 * 2^-13 stand for it)
    a, b, c = [2.0**-12] * 4, [2.0**-13] * 4, 2.0**-25
    if position < 4:
        a[position], b[position] = 1.0, 1.0
    else:
        c = 1.0
    assert d32(device, a, b, c) == f32bits(1.0)


def test_fasi_bfloat16_subnormal_output_on_a100():
    # "a11 = 2^-126, b11 = 2^-1 (normalized bfloat16 values) ... produce the subnormal binary32 result
    # d11 = 2^-127"
    assert d32("A100", [2**-126], [2**-1], 0.0, input_format="bf16") == f32bits(2**-127)


def test_fasi_tf32_behaves_as_fp16_on_a100():
    # "the TensorFloat-32/binary32 mode exhibits the same features as the binary16/binary32 configuration"
    for inputs, c, want in [
        ((ONES, [2**-24] * 4), 1 - 2**-24, 1 + 2**-23),
        (([1.0, 1.0], [2**-24, 2**-24]), 1.0, 1 + 2**-23),
        ((ONES, [2.0, 2**-23 + 2**-24, 0.0, 0.0]), 0.0, 2.0),
    ]:
        assert d32("A100", *inputs, c, input_format="tf32") == f32bits(want)
        assert d32("A100", *inputs, c, input_format="fp16") == f32bits(want)


def test_fasi_binary64_is_ieee_on_a100():
    # "in binary64/binary64 mode ... round-to-nearest with ties to even is used, and the normalization is
    # performed after each addition": 1 + 2^-53 + 2^-53 loses both halves one at a time (ties to even),
    # whereas one rounding of the exact sum would give 1 + 2^-52
    out = bf.dot([1.0, 1.0], [2.0**-53, 2.0**-53], 1.0, device="A100", input_format="fp64", output_format="fp64")
    assert out.dtype == np.float64 and float(out) == 1.0
    exact = bf.dot([1.0, 1.0], [2.0**-53, 2.0**-53], 1.0, device="exact", input_format="fp64", output_format="fp64")
    assert float(exact) == 1 + 2**-52


# --- Valpey et al. ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("device", ["V100", "T4", "A100"])
def test_valpey_table1_products_in_full_precision(device):
    # Table 1 prints a = 1.2587890625 * 2^-15 in the normal-number convention; the binary16 value is the
    # subnormal with fraction field 265, i.e. 265 * 2^-24; b = 1.3681640625 * 2^-1 = 1401 * 2^-11.
    # Exact result and hardware result: 1.4162635803222656 * 2^-17 = 371265 * 2^-35; the binary16 product
    # would be 181 * 2^-24 (printed 1.1767578125 * 2^-15 in the same convention).
    a, b = 265 * 2.0**-24, 1401 * 2.0**-11
    assert 371265 * 2.0**-35 == 1.4162635803222656 * 2.0**-17
    assert d32(device, [a], [b], 0.0) == f32bits(371265 * 2.0**-35)
    assert d16(device, [a], [b], 0.0) == f16bits(181 * 2.0**-24)


@pytest.mark.parametrize("device", ["V100", "T4"])
def test_valpey_table3_truncation_not_round_toward_zero(device):
    # Table 3: a = 2^1, c = -2^-40 (b = 1): properly rounded RTZ gives 2 - 2^-23, the tensor core 2^1
    assert d32(device, [2.0], [1.0], -(2.0**-40)) == f32bits(2.0)


def test_valpey_table5_markidis_versus_ootomo_yokota():
    # Table 5 walk-through: four products on a Volta tensor core, the largest exponent -1; a1b1 + a2b2 is
    # exactly 1 - 2^-24 (not normalised), a3b3 = a4b4 = 2^-24, c = 2^-24.  Markidis et al. add c inside the
    # tensor core and get 1 + 2^-23 (the true value); Ootomo-Yokota accumulate outside (c = 0 in the tensor
    # core, then RN(. + 2^-24) in fp32) and get 1.0.  The table's printed inputs do not reproduce its own
    # walk-through, so the products are built here to the walk-through's specification:
    # (1 + 2^-10)(1 - 3 * 2^-11) + (155 * 2^-12)(53 * 2^-12) = 1 - 2^-24.
    a = [1 + 2**-10, 155 * 2.0**-12, 2.0**-12, 2.0**-12]
    b = [1 - 3 * 2**-11, 53 * 2.0**-12, 2.0**-12, 2.0**-12]
    assert (1 + 2**-10) * (1 - 3 * 2**-11) + 155 * 53 * 2.0**-24 == 1 - 2**-24
    markidis = d32("V100", a, b, 2.0**-24)
    assert markidis == f32bits(1 + 2**-23)
    inside = bf.dot(a, b, 0.0, device="V100")
    ootomo = np.float32(inside) + np.float32(2**-24)  # round to nearest in fp32, outside the tensor core
    assert f32bits(float(inside)) == f32bits(1.0) and ootomo == np.float32(1.0)


# --- FTTN -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("device,published", [("V100", 0.0), ("A100", 0.0), ("H100", 191.875),
                                              ("MI100", 255.875), ("MI250X-fttn", 0.0)])
def test_fttn_porting_gemm(device, published):
    # FTTN sec. V: "0 on NVIDIA A100, V100, AMD MI250 ...; 255.875 on AMD MI100; and 191.875 on NVIDIA H100"
    assert fttn.run(device) == published


def test_fttn_porting_gemm_exact_value_and_mi250x_reading():
    # The exact answer is 2^7 + 2^6 - 2^-6; the MI250X preset (AMD's note, MMA-Sim, K&M: pairwise fp32 adds)
    # gives 255.875 on this GEMM, which DEVICE-FACTS records as the conflict with FTTN's 0.
    assert fttn.EXACT == 191.984375
    assert fttn.run("MI250X") == 255.875


def test_fttn_gemm_through_gemm_api():
    # The same porting example as an actual GEMM: 2 x 2 output, K = 8192, on H100 and V100
    a, b = fttn.operands()
    A = np.stack([a, a])
    B = np.stack([b, b], axis=1)
    for device, want in (("H100", 191.875), ("V100", 0.0)):
        acc = bf.gemm(A, B, None, device=device)
        D = np.float32(2.0**20) - acc
        assert D.tolist() == [[want, want], [want, want]]


@pytest.mark.parametrize("device,extra_bits", [("V100", 0), ("A100", 1), ("H100", 2)])
def test_fttn_extra_alignment_bits(device, extra_bits):
    # FTTN Table IV, "Extra bit present? How many?": V100 0, A100 1, H100 >= 2.  c = 1 plus a product of
    # -2^-(24 + n) survives alignment exactly when n < extra bits.
    for n in range(4):
        got = bf.dot([2.0**-12], [-(2.0 ** -(12 + n))], 1.0, device=device)
        kept = float(got) < 1.0
        assert kept == (n < extra_bits), (device, n, float(got))
