"""Every result the seed papers state per device, reproduced by the presets.

Sources (shared/seeds): Fasi, Higham, Mikaitis, Pranesh, "Numerical behavior of NVIDIA tensor cores" (2021);
Valpey, Li, Pai, Gopalakrishnan, "An SMT formalization of mixed-precision matrix multiplication";
Li et al., "FTTN" (2024).  The (a, b, c) -> d cases are data in :mod:`blockfma.probes.seeds` (each with the
paper's sentence and, where a value is derived by hand, the derivation); none is output of this code.  Here
every (case, device) pair runs through ``bf.dot`` and is compared bit for bit; what is not one dot product
(FTTN's porting GEMM, a model with two carry bits, the Ootomo-Yokota add outside the unit) stays below.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import blockfma as bf
from blockfma.experiments import fttn
from blockfma.probes.features import Row
from blockfma.probes.seeds import SEED_CASES, SeedCase, cases, expected_bits, rows, seed_case

from helpers import bits

PAIRS = [pytest.param(c, d, id=f"{c.id}@{d}") for c in SEED_CASES for d in c.expected]


def run(case: SeedCase, device: str | None = None, **kw) -> np.ndarray:
    """d of one seed case on a device (or ``model=``), in the case's formats."""
    if "model" not in kw:
        kw.update(device=device, input_format=case.input_format, output_format=case.output_format)
    return bf.dot(np.array(case.a, dtype=np.float64), np.array(case.b, dtype=np.float64), case.c, **kw)


# --- the published cases, bit for bit ------------------------------------------------------------------------
@pytest.mark.parametrize("case,device", PAIRS)
def test_seed_case(case: SeedCase, device: str) -> None:
    out = run(case, device)
    assert out.dtype == bf.formats.get(case.output_format).dtype
    assert int(bits(out)) == expected_bits(case, device), (case.id, device, float(out).hex(), case.expected[device])


@pytest.mark.parametrize("device", sorted({d for c in SEED_CASES for d in c.expected}))
def test_seed_rows_in_one_batch(device: str) -> None:
    # the same cases as the probe runner takes them: rows of k = 8 products (zeros after the printed
    # positions), one batch per format pair; padding must not change a bit
    pairs = sorted({(c.input_format, c.output_format) for c in cases(device)})
    for fin, fout in pairs:
        chosen = cases(device, fin, fout)
        rs = rows(chosen, 8)
        assert [r.label for r in rs] == [c.id for c in chosen if c.k <= 8]
        out = bf.dot(np.array([r.a for r in rs]), np.array([r.b for r in rs]), np.array([r.c for r in rs]),
                     device=device, input_format=fin, output_format=fout)
        want = [expected_bits(seed_case(r.label), device) for r in rs]
        assert bits(out).tolist() == want, (device, fin, fout)


# --- what is not one (a, b, c) -> d case on a preset -----------------------------------------------------------
def test_fasi_third_carry_bit_needs_three():
    # "If only two extra bits were present, on the other hand, overflow would occur and the adder would
    # incorrectly return d11 = 0" (the inputs of fasi-carry-3, on V100 with one carry bit fewer)
    case = seed_case("fasi-carry-3")
    two_carries = bf.device("V100").model("fp16", "fp32").replace(carry_bits=2)
    assert int(bits(run(case, model=two_carries))) == int(bits(np.float32(0.0)))


def test_valpey_table1_transcription():
    # the case holds Table 1's printed numbers: a = 1.2587890625 * 2^-15 read as the binary16 subnormal with
    # fraction field .2587890625 (times 2^-14), b = 1.3681640625 * 2^-1, result 1.4162635803222656 * 2^-17,
    # "Result (half)" 1.1767578125 * 2^-15 read the same way as a
    case, half = seed_case("valpey-t1-products-exact"), seed_case("valpey-t1-products-exact-fp16")
    assert case.a == ((1.2587890625 - 1) * 2.0**-14,) and case.b == (1.3681640625 * 2.0**-1,)
    assert set(case.expected.values()) == {1.4162635803222656 * 2.0**-17}
    assert set(half.expected.values()) == {(1.1767578125 - 1) * 2.0**-14}


def test_valpey_table5_markidis_versus_ootomo_yokota():
    # the walk-through's products: a1b1 + a2b2 = 1 - 2^-24 exactly, a3b3 = a4b4 = 2^-24
    case = seed_case("valpey-t5-inside")
    p = [Fraction(x) * Fraction(y) for x, y in zip(case.a, case.b)]
    assert p[0] + p[1] == 1 - Fraction(1, 2**24) and p[2] == p[3] == Fraction(1, 2**24)
    assert seed_case("valpey-t5-markidis").a == case.a and seed_case("valpey-t5-markidis").b == case.b
    # O-Y: the tensor core's result (C = 0), then "1.0 is accumulated with 2^-24 outside tensor cores. The
    # result is 1.0" (round to nearest in fp32)
    inside = run(case, "V100")
    ootomo = np.float32(inside) + np.float32(2.0**-24)
    assert int(bits(np.float32(ootomo))) == int(bits(np.float32(1.0)))


def test_fttn_extra_bits_cases_follow_table4():
    # FTTN Table IV, "Extra bit present? How many?": V100 0, A100 1, H100 >= 2: the product -2^-(24 + n)
    # survives (d < 1) exactly for n below that count
    for n in range(4):
        want = seed_case(f"fttn-extra-bits-fp16-n{n}").expected
        assert [want[d] < 1 for d in ("V100", "A100", "H100")] == [n < 0, n < 1, n < 2]


# --- FTTN's porting GEMM ------------------------------------------------------------------------------------
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


# --- the data module itself -----------------------------------------------------------------------------------
def test_rows_place_cases_and_skip_what_does_not_fit():
    case = seed_case("fasi-no-guard-digit")  # four positions
    assert rows([case], 3) == []
    assert rows([case], 6) == [Row(case.id, (1.0, 1.0, 1.0, 1.0, 0.0, 0.0), (1.0, 0.0, 0.0, 0.0, 0.0, 0.0),
                                   -1 + 2.0**-24)]
    assert {r.label for r in rows(SEED_CASES, 1)} == {"fasi-subnormal-input-fp32", "fasi-subnormal-input-fp16",
                                                      "fasi-subnormal-output-fp32", "fasi-subnormal-output-fp16",
                                                      "fasi-subnormal-output-c-fp16", "fasi-subnormal-output-c-fp32",
                                                      "fasi-bf16-subnormal-output", "valpey-t1-products-exact",
                                                      "valpey-t1-products-exact-fp16", "valpey-t3-truncation",
                                                      *(f"fttn-extra-bits-{f}-n{n}" for f, m in
                                                        (("fp16", 4), ("bf16", 2), ("tf32", 2)) for n in range(m)),
                                                      *(f"fttn-t-prod-{f}-{s}" for f in ("fp64", "fp32")
                                                        for s in ("positive", "negative"))}
    with pytest.raises(ValueError):
        rows([case], 0)


def test_cases_filter_by_device_alias_and_format_alias():
    h100 = [c for c in SEED_CASES if "H100" in c.expected]
    assert cases("H200") == h100 and h100  # H200 is an alias of the H100 preset
    assert cases("V100", "half", "binary32") == [c for c in SEED_CASES if "V100" in c.expected
                                                 and c.input_format == "fp16" and c.output_format == "fp32"]
    assert cases("no such device") == []


def test_seed_case_checks_its_values():
    one_up = SeedCase("x", "Fasi et al. 2021, test", "t", "fp16", "fp32", (1.0,), (1.0,), 2.0**-23,
                      {"V100": "0x3F800001", "T4": 1 + 2.0**-23})
    assert expected_bits(one_up, "V100") == expected_bits(one_up, "T4") == 0x3F800001
    with pytest.raises(ValueError):  # 1 + 2^-11 is not a binary16 value
        SeedCase("x", "Fasi et al. 2021", "t", "fp16", "fp32", (1 + 2.0**-11,), (1.0,), 0.0, {"V100": 1.0})
    with pytest.raises(ValueError):  # a and b of different lengths
        SeedCase("x", "Fasi et al. 2021", "t", "fp16", "fp32", (1.0,), (1.0, 1.0), 0.0, {"V100": 1.0})
    with pytest.raises(ValueError):  # a 33-bit pattern for a binary32 output
        SeedCase("x", "Fasi et al. 2021", "t", "fp16", "fp32", (1.0,), (1.0,), 0.0, {"V100": "0x13F800000"})
    with pytest.raises(ValueError):  # no source named
        SeedCase("x", "a blog", "t", "fp16", "fp32", (1.0,), (1.0,), 0.0, {"V100": 1.0})
    with pytest.raises(ValueError):
        seed_case("no-such-case")
