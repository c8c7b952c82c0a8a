"""Unit tests of the exact reference (src/blockfma/reference.py) on hand-derived cases.

Every expected value is an exact literal derived by hand from docs/semantics.md or from the text of a seed
paper (the comment quotes the sentence); results are compared as bit patterns, so -0.0 != +0.0 and every
ulp counts.
"""

from __future__ import annotations

import itertools
import math
import struct
from fractions import Fraction

import pytest

from blockfma import formats
from blockfma.formats import RoundingMode
from blockfma.model import Alignment, Family, Model, NaNStyle
from blockfma.reference import cut, dot, dot_bits, encode, exponent, largest_finite, round_exact

from helpers import golden_dir

RNE, RNA, RZ = RoundingMode.TiesToEven, RoundingMode.TiesAway, RoundingMode.TowardZero
RU, RD, RO = RoundingMode.TowardPositive, RoundingMode.TowardNegative, RoundingMode.ToOdd
fp16, fp32, fp64, bf16 = formats.fp16, formats.fp32, formats.fp64, formats.bf16
e4m3fn, e4m3fnuz, e5m2 = formats.e4m3fn, formats.e4m3fnuz, formats.e5m2
INF, NAN = math.inf, math.nan


def b16(x: float) -> int:
    """Bit pattern of a binary16 value (struct would round a value that is not one: refuse)."""
    packed = struct.pack("<e", x)
    assert math.isnan(x) or same(struct.unpack("<e", packed)[0], x), f"{x!r} is not a binary16 value"
    return struct.unpack("<H", packed)[0]


def b32(x: float) -> int:
    """Bit pattern of a binary32 value (refusing values that are not binary32 values)."""
    packed = struct.pack("<f", x)
    assert math.isnan(x) or same(struct.unpack("<f", packed)[0], x), f"{x!r} is not a binary32 value"
    return struct.unpack("<I", packed)[0]


def b64(x: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def same(x: float, y: float) -> bool:
    """Equal as float64 bit patterns (NaN equals NaN of any payload: results carry no payload)."""
    if math.isnan(x) or math.isnan(y):
        return math.isnan(x) and math.isnan(y)
    return b64(x) == b64(y)


# --- models of the seeds ---------------------------------------------------------------------------------
V100 = Model(Family.TRUNCATED_FUSED, "fp16", "fp32", block_width=4, fraction_bits=23, e_zero=-131,
             output_rounding=RZ, overflow="inf", nan=NaNStyle.CANONICAL, exact_zero="positive")
V100_16 = V100.replace(output_format="fp16", e_zero=-19, output_rounding=RNE)
T4 = V100.replace(block_width=8, fraction_bits=24, e_zero=-132)
T4_16 = T4.replace(output_format="fp16", e_zero=-20, output_rounding=RNE)
A100 = T4  # Fasi et al.: "In binary16/binary32 mode, we found no differences between the Ampere and Turing"
A100_BF16 = A100.replace(input_format="bf16")

ONES = [1.0, 1.0, 1.0, 1.0]


# --- exact helpers -------------------------------------------------------------------------------------------
def test_exponent_and_cut() -> None:
    assert exponent(fp16, 1.0) == 0
    assert exponent(fp16, 1.99951171875) == 0  # 2 - 2**-11 is not fp16, but E is defined for any value
    assert exponent(fp16, -0.75) == -1
    assert exponent(fp16, 2.0**-24) == -14  # subnormals take emin
    assert exponent(fp32, 2.0**-149) == -126
    assert exponent(fp32, Fraction(3, 2**130)) == -126
    assert exponent(fp64, 2.0**-1000) == -1000
    q = Fraction(1, 4)
    assert cut(Fraction(7, 8), q, Alignment.TRUNCATE) == Fraction(3, 4)
    assert cut(Fraction(-7, 8), q, Alignment.TRUNCATE) == Fraction(-3, 4)
    assert cut(Fraction(7, 8), q, Alignment.FLOOR) == Fraction(3, 4)
    assert cut(Fraction(-7, 8), q, Alignment.FLOOR) == Fraction(-1)
    assert cut(Fraction(-1, 2), q, "floor") == Fraction(-1, 2)
    assert largest_finite(fp16) == 65504
    assert largest_finite(e4m3fn) == 448
    assert largest_finite(e4m3fnuz) == 240
    assert largest_finite(e5m2) == 57344
    assert largest_finite(fp32) == (2**24 - 1) * Fraction(2) ** 104


# --- round_exact -----------------------------------------------------------------------------------------------
def r16(x: Fraction | int, mode: RoundingMode, **kw: object) -> int:
    return b16(round_exact(fp16, x, mode, **kw))  # type: ignore[arg-type]


TIE = 1 + Fraction(1, 2**11)  # halfway between 1 and 1 + 2**-10 (fp16)


@pytest.mark.parametrize(("mode", "pos", "neg"), [
    (RNE, 0x3C00, 0xBC00),  # tie to even: 1
    (RNA, 0x3C01, 0xBC01),  # tie away: 1 + 2**-10
    (RZ, 0x3C00, 0xBC00),
    (RU, 0x3C01, 0xBC00),  # +: up to 1 + 2**-10; -: toward +inf gives -1
    (RD, 0x3C00, 0xBC01),
    (RO, 0x3C01, 0xBC01),  # 1 has an even last bit and something was dropped: set it
])
def test_round_ties_every_mode(mode: RoundingMode, pos: int, neg: int) -> None:
    assert r16(TIE, mode) == pos
    assert r16(-TIE, mode) == neg


def test_round_nearest_details() -> None:
    # 1 + 3 * 2**-11 lies halfway between 1 + 2**-10 (odd) and 1 + 2**-9 (even)
    assert r16(1 + Fraction(3, 2**11), RNE) == 0x3C02
    assert r16(1 + Fraction(3, 2**11), RNA) == 0x3C02
    assert r16(1 + Fraction(1, 2**11) + Fraction(1, 2**30), RNE) == 0x3C01  # just above the tie
    assert r16(1 + Fraction(1, 2**11) - Fraction(1, 2**30), RNA) == 0x3C00  # just below the tie
    # ToOdd: an odd last bit stays; exact values stay
    assert r16(1 + Fraction(1, 2**10) + Fraction(1, 2**12), RO) == 0x3C01
    assert r16(1 + Fraction(1, 2**12), RO) == 0x3C01
    assert r16(Fraction(1), RO) == 0x3C00
    assert r16(2 + Fraction(1, 2**20), RO) == 0x4001
    # binary32, bfloat16, binary64
    assert b32(round_exact(fp32, 1 + Fraction(1, 2**24), RNE)) == 0x3F800000
    assert b32(round_exact(fp32, 1 + Fraction(3, 2**24), RNE)) == 0x3F800002
    assert b32(round_exact(bf16, 1 + Fraction(3, 2**8), RNE)) == 0x3F820000  # bf16 1 + 2**-6
    assert round_exact(fp64, 1 + Fraction(1, 2**53), RU) == 1 + 2.0**-52


def test_round_subnormal_boundary() -> None:
    half_min = Fraction(1, 2**25)  # half the smallest fp16 subnormal 2**-24
    assert r16(half_min, RNE) == 0x0000  # tie between 0 (even) and 2**-24
    assert r16(-half_min, RNE) == 0x8000  # a nonzero value rounding to zero keeps its sign
    assert r16(half_min, RNA) == 0x0001
    assert r16(half_min + Fraction(1, 2**40), RNE) == 0x0001
    assert r16(half_min, RU) == 0x0001
    assert r16(half_min, RD) == 0x0000
    assert r16(-half_min, RD) == 0x8001
    assert r16(Fraction(1, 2**40), RO) == 0x0001
    assert r16(Fraction(3, 2**25), RNE) == 0x0002  # 1.5 * 2**-24: tie to even 2 * 2**-24
    # just below the smallest normal: (2**-14 - 2**-25) is a tie between 1023 * 2**-24 and 2**-14
    below_normal = Fraction(1, 2**14) - Fraction(1, 2**25)
    assert r16(below_normal, RNE) == 0x0400
    assert r16(below_normal, RZ) == 0x03FF
    # flush: tininess before rounding, so it flushes although it would round to 2**-14
    assert r16(below_normal, RNE, subnormals=False) == 0x0000
    assert r16(-Fraction(1, 2**20), RNE, subnormals=False) == 0x8000
    assert r16(Fraction(1, 2**14), RNE, subnormals=False) == 0x0400
    # subnormals in binary32 and binary64
    assert b32(round_exact(fp32, Fraction(1, 2**150), RNE)) == 0x00000000
    assert b32(round_exact(fp32, Fraction(3, 2**150), RNE)) == 0x00000002
    assert b32(round_exact(fp32, Fraction(1, 2**149), RNE, subnormals=False)) == 0x00000000
    assert b64(round_exact(fp64, Fraction(1, 2**1075), RU)) == 0x0000000000000001
    assert b64(round_exact(fp64, Fraction(1, 2**1075), RNE)) == 0x0000000000000000


def test_round_zero_sign() -> None:
    assert r16(0, RNE) == 0x0000
    assert r16(0, RNE, negative=True) == 0x8000
    assert r16(Fraction(0), RD, negative=False) == 0x0000
    assert b32(round_exact(e4m3fnuz, 0, RNE, negative=True)) == 0x00000000  # fnuz: no negative zero
    assert b32(round_exact(e4m3fnuz, -Fraction(1, 2**20), RNE)) == 0x00000000
    assert b32(round_exact(e4m3fn, 0, RNE, negative=True)) == 0x80000000


@pytest.mark.parametrize(("x", "mode", "overflow", "expected"), [
    (65520, RNE, "ieee", 0x7C00),  # halfway between 65504 (odd significand 2047) and 65536: up, overflow
    (65519, RNE, "ieee", 0x7BFF),
    (65520, RNA, "ieee", 0x7C00),
    (10**6, RZ, "ieee", 0x7BFF),  # IEEE 7.4: TowardZero gives the largest finite value
    (10**6, RZ, "inf", 0x7C00),
    (10**6, RO, "ieee", 0x7BFF),
    (70000, RU, "ieee", 0x7C00),
    (-70000, RU, "ieee", 0xFBFF),
    (70000, RD, "ieee", 0x7BFF),
    (-70000, RD, "ieee", 0xFC00),
    (-70000, RNE, "ieee", 0xFC00),
    (10**6, RNE, "saturate", 0x7BFF),
    (-10**6, RU, "inf", 0xFC00),
    (-10**6, RNE, "saturate", 0xFBFF),
])
def test_round_overflow_fp16(x: int, mode: RoundingMode, overflow: str, expected: int) -> None:
    assert r16(x, mode, overflow=overflow) == expected


def test_round_fn_formats() -> None:
    # e4m3fn: max 448 = 1.110b * 2**8; 480 = 1.111b * 2**8 would be the NaN code
    assert round_exact(e4m3fn, 448, RNE) == 448.0
    assert round_exact(e4m3fn, 464, RNE) == 448.0  # tie between 448 (even significand 14) and 480
    assert math.isnan(round_exact(e4m3fn, 465, RNE))  # rounds to 480 > 448: overflow, no infinity
    assert math.isnan(round_exact(e4m3fn, 464, RNA))
    assert round_exact(e4m3fn, 1000, RZ) == 448.0
    assert round_exact(e4m3fn, -1000, RZ) == -448.0
    assert math.isnan(round_exact(e4m3fn, 1000, RZ, overflow="inf"))
    assert round_exact(e4m3fn, 1000, RNE, overflow="saturate") == 448.0
    assert round_exact(e4m3fn, 470, RO) == 448.0  # ToOdd gives 480 (odd), above max: largest finite
    assert round_exact(e4m3fnuz, 250, RZ) == 240.0
    assert math.isnan(round_exact(e4m3fnuz, 10**4, RNE))
    assert round_exact(e4m3fnuz, Fraction(1, 2**10), RNE) == 2.0**-10  # emin -7, 3 fraction bits
    assert round_exact(e5m2, 10**6, RNE) == INF
    assert round_exact(e5m2, 61440, RNE) == INF  # halfway between 57344 (odd) and 65536
    assert round_exact(formats.e8m13, 1 + Fraction(3, 2**14), RZ) == 1 + 2.0**-13


def test_encode_matches_struct() -> None:
    for x in (0.0, -0.0, 1.0, -2.5, 2.0**-24, -(2.0**-14), 65504.0, INF, -INF):
        assert encode(fp16, x) == b16(x)
    for x in (0.0, -0.0, 1.0, 2.0**-149, 2.0**-126, -(2.0**127) * 1.5, INF):
        assert encode(fp32, x) == b32(x)
    for x in (-0.0, 5e-324, 2.0**-1022, 1.7976931348623157e308, -INF):
        assert encode(fp64, x) == b64(x)
    assert encode(bf16, 1.0 + 2.0**-7) == b32(1.0 + 2.0**-7) >> 16
    assert encode(e4m3fn, 448.0) == 0x7E
    assert encode(e4m3fnuz, -(2.0**-10)) == 0x81


# --- Fasi et al. 2021, "Numerical behavior of NVIDIA tensor cores" (shared/seeds/000_*) ---------------------
def test_fasi_subnormals() -> None:
    # "setting a11 = 2^-24, b11 = 2^2 ... The tensor cores return the subnormal result a11 b11 = 2^-22 in both
    # binary16 and binary32 mode"
    for m in (V100, V100_16, T4, T4_16):
        assert same(dot(m, [2.0**-24, 0, 0, 0], [4.0, 0, 0, 0], 0.0), 2.0**-22)
    # "setting c11 to the smallest positive binary32 subnormal 2^-149 and all the elements of A and B to zero
    # yields d11 = 2^-149"
    assert dot_bits(V100, [0.0] * 4, [0.0] * 4, 2.0**-149) == 0x00000001
    assert dot_bits(T4, [0.0] * 8, [0.0] * 8, 2.0**-149) == 0x00000001
    # "set a11 to 2^-14 ... and b11 to 2^-1, and confirm that tensor cores return the binary16 subnormal 2^-15
    # in both binary16 and binary32 modes"
    assert dot_bits(V100, [2.0**-14], [0.5], 0.0) == 0x38000000
    assert dot_bits(V100_16, [2.0**-14], [0.5], 0.0) == 0x0200
    # "set a11 = 2^-14, b11 = 1, and c11 = -2^-15, which produces the subnormal binary16 number d11 = 2^-15"
    assert dot_bits(V100_16, [2.0**-14], [1.0], -(2.0**-15)) == 0x0200
    assert dot_bits(V100, [2.0**-14], [1.0], -(2.0**-15)) == 0x38000000
    # "set a11 and a12 to 1, b11 to the binary16 subnormal 2^-23 + 2^-24, b21 to 2 ... This computation
    # returned the value 2"
    assert dot_bits(V100, [1.0, 1.0, 0, 0], [3 * 2.0**-24, 2.0, 0, 0], 0.0) == 0x40000000
    # A100 bf16: "we set a11 = 2^-126, b11 = 2^-1 ... the tensor cores correctly produce the subnormal binary32
    # result d11 = 2^-127"
    assert dot_bits(A100_BF16, [2.0**-126], [0.5], 0.0) == 0x00400000


def test_fasi_products_exact() -> None:
    # "we set the first row of A and the first column of B to 1 - 2^-11 and c11 to 0 ... tensor cores produce
    # the exact binary32 answer d11 = 4 * (1 - 2^-10 + 2^-22)"
    x = 1 - 2.0**-11
    expected = 4 * (1 - 2.0**-10 + 2.0**-22)  # exact in binary64
    assert dot_bits(V100, [x] * 4, [x] * 4, 0.0) == b32(expected) == 0x407FC004  # 4 - 2^-8 + 4 ulps of 2^-22
    assert dot_bits(T4, [x] * 4, [x] * 4, 0.0) == 0x407FC004
    # "set a11 = b11 = a12 = 1 - 2^-11, b21 = 2^-11 ... we found that tensor cores output the exact value"
    # 1 - 2^-10 + 2^-11 = 1 - 2^-11, in binary16 mode
    assert dot_bits(V100_16, [x, x, 0, 0], [x, 2.0**-11, 0, 0], 0.0) == b16(1 - 2.0**-11) == 0x3BFF


def test_fasi_order_of_accumulation() -> None:
    # "run 5 different cases with one of the addends in (3) set to 1 and the rest set to 2^-24 ... All
    # permutations return d11 = 1"
    tiny = 2.0**-24
    for where in range(5):
        terms = [tiny] * 5
        terms[where] = 1.0
        assert dot_bits(V100, ONES, terms[:4], terms[4]) == 0x3F800000
    # T4: "the constant 2^-24 should be replaced by 2^-25" (a product 2^-1 * 2^-24; C may be 2^-25)
    half = [0.5] * 4
    assert dot_bits(T4, half, [2.0, tiny, tiny, tiny], 2.0**-25) == 0x3F800000
    assert dot_bits(T4, half, [tiny, 2.0, tiny, tiny], 2.0**-25) == 0x3F800000
    # ... and "the operation 1 + 2^-24 + 2^-24, for example, can now be performed exactly" (T4), not on V100
    assert dot_bits(T4, [1.0, 1.0], [tiny, tiny], 1.0) == 0x3F800001  # 1 + 2^-23
    assert dot_bits(V100, [1.0, 1.0], [tiny, tiny], 1.0) == 0x3F800000


def test_fasi_rounding_toward_zero() -> None:
    # "set in (3) b11 = 2, b21 = 2^-23 + 2^-24 ... Running this experiment on tensor cores returns c11 = 2"
    b = [2.0, 3 * 2.0**-24, 0.0, 0.0]
    assert dot_bits(V100, ONES, b, 0.0) == 0x40000000
    assert dot_bits(T4, ONES, b, 0.0) == 0x40000000
    # "changing the sign of the nonzero elements in B. This experiment produces c11 = -2"
    assert dot_bits(V100, ONES, [-x for x in b], 0.0) == 0xC0000000
    # binary16 mode: "we set a11 = a12 = 2^-24, b11 = 2^-1, b21 = 2^-2 ... tensor cores return 2^-24"
    assert dot_bits(V100_16, [2.0**-24, 2.0**-24], [0.5, 0.25], 0.0) == 0x0001
    assert dot_bits(T4_16, [2.0**-24, 2.0**-24], [0.5, 0.25], 0.0) == 0x0001
    # "by replacing one of the 2^-23 by 1 ... the rounding mode in the final normalization step ... is
    # round-towards-zero": c = 1 + 2^-22 + 2^-23 and b = [1, 1, 1, 1] give exactly 5 + 3 * 2^-23, which lies
    # between 5 and 5 + 2^-21 (binary32 spacing in [4, 8)), nearer the top: RZ gives 5
    assert dot_bits(V100, ONES, ONES, 1 + 2.0**-22 + 2.0**-23) == b32(5.0)


def test_fasi_no_guard_digit() -> None:
    # "If in (3) we set b11 = 1 and c11 = -1 + 2^-24, the tensor cores return d11 = 2^-23"
    assert dot_bits(V100, ONES, [1.0, 0, 0, 0], -1 + 2.0**-24) == b32(2.0**-23)
    # "If in (3) we set c11 = -1 + 2^-24, and two of the elements of the first column of B to 1 and -2^-24 ...
    # running this experiment on tensor cores yields d11 = 2^-23"
    assert dot_bits(V100, ONES, [1.0, -(2.0**-24), 0, 0], -1 + 2.0**-24) == b32(2.0**-23)
    assert dot_bits(V100, ONES, [0.0, -(2.0**-24), 0, 1.0], -1 + 2.0**-24) == b32(2.0**-23)


def test_fasi_non_monotonic() -> None:
    # "d11 = c11 + 2^-24 + 2^-24 + 2^-24 + 2^-24 = 1 + 2^-23 when c11 = 1 - 2^-24, ... = 1 when c11 = 1"
    tiny = [2.0**-24] * 4
    assert dot_bits(V100, ONES, tiny, 1 - 2.0**-24) == b32(1 + 2.0**-23) == 0x3F800001
    assert dot_bits(V100, ONES, tiny, 1.0) == 0x3F800000
    # T4 version ("replaced by 2^-25"): eight products 2^-1 * 2^-24 fill its 8-wide block;
    # c = 1 - 2^-24: q = 2^-25, sum 1 - 2^-24 + 8 * 2^-25 = 1 + 3 * 2^-24, RZ 1 + 2^-23; c = 1: q = 2^-24, all cut
    assert dot_bits(T4, [0.5] * 8, [2.0**-24] * 8, 1 - 2.0**-24) == 0x3F800001
    assert dot_bits(T4, [0.5] * 8, [2.0**-24] * 8, 1.0) == 0x3F800000


def test_fasi_carry_bits() -> None:
    # "we take c11 = 1 + 2^-22 + 2^-23 ... assign to the first column of B a permutation of the values 1, 1, 1,
    # and 2^-23 ... all four possible orderings of the first column of B will return the exact result
    # 4 + 2^-21"
    c = 1 + 2.0**-22 + 2.0**-23
    for b in set(itertools.permutations([1.0, 1.0, 1.0, 2.0**-23])):
        for m in (V100, V100.replace(carry_bits=2), T4):
            assert dot_bits(m, ONES, list(b), c) == b32(4 + 2.0**-21) == 0x40800001
    # "c11 = 1 + 2^-1 + 2^-2 + 2^-3, b11 = 1, b21 = 1 + 2^-1, b31 = 1 + 2^-1 + 2^-2, b41 = 1 + 2^-1 + 2^-2 + 2^-3
    # and observe that the tensor core returns d11 = 8. If only two extra bits were present ... d11 = 0"
    b = [1.0, 1.5, 1.75, 1.875]
    assert dot_bits(V100, ONES, b, 1.875) == 0x41000000
    assert dot_bits(V100.replace(carry_bits=3), ONES, b, 1.875) == 0x41000000
    assert dot_bits(V100.replace(carry_bits=2), ONES, b, 1.875) == 0x00000000
    # the lost carry keeps the sign: -8 mod 8 is -0, written +0 (exact_zero positive); -7.5 wraps to itself
    assert dot_bits(V100.replace(carry_bits=2), ONES, [-x for x in b], -1.875) == 0x00000000


# --- Valpey et al. (shared/seeds/002_*) ----------------------------------------------------------------------
def test_valpey_table1_products_exact() -> None:
    # Table 1: a = 1.2587890625 * 2^-15 (printed with the normal-number convention; fraction field 265 of a
    # binary16 subnormal: 265 * 2^-24), b = 1.3681640625 * 2^-1 = 1401 * 2^-11; exact and hardware result
    # 1.4162635803222656 * 2^-17 = 371265 * 2^-35 (binary32 mode)
    a, b = 265 * 2.0**-24, 1401 * 2.0**-11
    assert dot(V100, [a], [b], 0.0) == 371265 * 2.0**-35
    assert dot_bits(V100, [a], [b], 0.0) == b32(371265 * 2.0**-35)
    # "Result (half)" 1.1767578125 * 2^-15: fraction field 181, i.e. 181 * 2^-24 (371265 * 2^-35 =
    # 181.28... * 2^-24 rounds to nearest 181 * 2^-24) -- the binary16-mode output
    assert dot_bits(V100_16, [a], [b], 0.0) == 181


def test_valpey_table3_truncation() -> None:
    # "If a and c are 2^1 and -2^-40 (and b is one), ... On the Volta and Turing tensor cores, adding the
    # aforementioned example, 2^1 and -2^-40, results in 2^1"
    assert dot_bits(V100, [2.0], [1.0], -(2.0**-40)) == 0x40000000
    assert dot_bits(T4, [2.0], [1.0], -(2.0**-40)) == 0x40000000
    # "the result in round-to-zero mode should return the value 2 - 2^-23": an exactly rounded RZ dot
    exact_rz = Model(Family.EXACT_FUSED, "fp16", "fp32", block_width=4, output_rounding=RZ)
    assert dot_bits(exact_rz, [2.0], [1.0], -(2.0**-40)) == b32(2 - 2.0**-23) == 0x3FFFFFFF


# --- truncated-fused details -------------------------------------------------------------------------------
def test_truncated_fused_e_zero() -> None:
    # product 17 * 2^-24 (exponent 0 + -14): with e_zero = 0 the zero C and the padding products set
    # e_max = 0, q = 2^-23, and the product is cut to 8 * 2^-23 = 2^-20; with e_zero = -131 it is exact
    b = [17 * 2.0**-24]
    assert dot_bits(V100.replace(e_zero=0), [1.0], b, 0.0) == b32(2.0**-20)
    assert dot_bits(V100, [1.0], b, 0.0) == b32(17 * 2.0**-24)
    # a zero C takes part with e_zero: a full block (no padding) of four such products and C = 0 gives
    # e_max = max(-14, 0) = 0, each product is cut to 2^-20 and the sum is 2^-18 (not 17 * 2^-22)
    assert dot_bits(V100.replace(e_zero=0), ONES, b * 4, 0.0) == b32(2.0**-18)
    assert dot_bits(V100, ONES, b * 4, 0.0) == b32(17 * 2.0**-22)
    # the padding products are zeros too: C = 2^-30 is cut away with e_max = 0
    assert dot_bits(V100.replace(e_zero=0), [1.0], b, 2.0**-30) == b32(2.0**-20)
    # a full block of nonzero products and a nonzero C: e_max = max(-14, -30), q = 2^-37, all exact
    assert dot_bits(V100.replace(e_zero=0), ONES, b * 4, 2.0**-30) == b32(17 * 2.0**-22 + 2.0**-30)


def test_truncated_fused_product_exponent_is_not_normalised() -> None:
    # (1 - 2^-11)^2 = 1 - 2^-10 + 2^-22 has exponent -1 + -1 = -2 as a product although its value is in
    # [0.5, 1): with F = 23 the quantum is 2^-25, so C = -0.5 + 2^-25 is kept whole and the sum
    # 0.5 - 2^-10 + 2^-22 + 2^-25 is exact; a normalised exponent -1 (q = 2^-24) would cut C to -0.5 + 2^-24
    x = 1 - 2.0**-11
    assert dot_bits(V100, [x], [x], -0.5 + 2.0**-25) == b32(0.5 - 2.0**-10 + 2.0**-22 + 2.0**-25)


def test_truncated_fused_floor_alignment() -> None:
    # terms 1, -2^-24, -1 + 2^-24 with q = 2^-23: floor gives 1, -2^-23, -1; sum -2^-23 (truncate: 2^-23)
    floor = V100.replace(alignment=Alignment.FLOOR)
    assert dot_bits(floor, ONES, [1.0, -(2.0**-24), 0, 0], -1 + 2.0**-24) == b32(-(2.0**-23))


def test_truncated_fused_output_fraction_bits() -> None:
    # Hopper fp8: results kept with 13 fraction bits (e8m13, RZ). 1 + 1 + 2^-4 * 2^-9 = 2 + 2^-13: the e8m13
    # spacing in [2, 4) is 2^-12, so 2; with the full binary32 output it stays 2 + 2^-13
    h100_fp8 = Model(Family.TRUNCATED_FUSED, "e4m3fn", "fp32", block_width=32, fraction_bits=13,
                     e_zero=-133, output_rounding=RZ, output_fraction_bits=13, overflow="inf",
                     nan=NaNStyle.CANONICAL, exact_zero="positive")
    a, b = [1.0, 1.0, 2.0**-4], [1.0, 1.0, 2.0**-9]
    assert dot_bits(h100_fp8, a, b, 0.0) == 0x40000000
    assert dot_bits(h100_fp8.replace(output_fraction_bits=None, fraction_bits=25), a, b, 0.0) == 0x40000200


def test_chaining_and_padding() -> None:
    # k = 8 on V100 is two blocks of 4: each adds four 2^-24 to 1 and cuts them all; T4 has one 8-wide block
    # (q = 2^-24) and gets 1 + 8 * 2^-24 exactly
    assert dot_bits(V100, [1.0] * 8, [2.0**-24] * 8, 1.0) == 0x3F800000
    assert dot_bits(T4, [1.0] * 8, [2.0**-24] * 8, 1.0) == b32(1 + 2.0**-21)
    # k = 5: block 1 = 1 - 2^-24 + 3 * 2^-24 -> RZ 1 + 2^-23; block 2 (padded): 1 + 2^-23 + 2^-24 -> cut
    assert dot_bits(V100, [1.0] * 5, [2.0**-24] * 5, 1 - 2.0**-24) == 0x3F800001
    # k = 0 returns C unchanged
    assert dot_bits(V100, [], [], -1.5) == b32(-1.5)
    assert same(dot(V100, [], [], -0.0), -0.0)


def test_inputs_must_be_in_format() -> None:
    with pytest.raises(ValueError, match="a\\[0\\]"):
        dot(V100, [1 + 2.0**-11], [1.0], 0.0)
    with pytest.raises(ValueError, match="c"):
        dot(V100_16, [1.0], [1.0], 1 + 2.0**-11)
    with pytest.raises(ValueError):
        dot(V100, [Fraction(1, 3)], [1.0], 0.0)
    assert dot(V100, [Fraction(3, 4)], [2], Fraction(1, 2**20)) == 1.5 + 2.0**-20


# --- special values, zeros, NaN patterns ------------------------------------------------------------------------
@pytest.mark.parametrize("model", [V100, V100_16, T4])
def test_fused_special_values(model: Model) -> None:
    fc = model.output_format
    nan_bits = encode(fc, NAN, NaNStyle.CANONICAL)
    assert nan_bits == (0x7FFFFFFF if fc is fp32 else 0x7FFF)
    assert dot_bits(model, [INF, 1.0], [0.0, 1.0], 0.0) == nan_bits  # inf * 0
    assert dot_bits(model, [INF, 1.0], [1.0, 1.0], -INF) == nan_bits  # +inf + -inf
    assert dot_bits(model, [INF, INF], [1.0, -1.0], 0.0) == nan_bits
    assert dot_bits(model, [1.0], [NAN], 0.0) == nan_bits
    assert dot_bits(model, [1.0], [1.0], NAN) == nan_bits
    assert dot(model, [INF], [-1.0], 5.0) == -INF
    assert dot(model, [-INF, 2.0], [-1.0, 3.0], INF) == INF
    assert dot(model, [1.0], [1.0], -INF) == -INF
    # NaN from the first block is the second block's C
    assert dot_bits(model, [INF] + [1.0] * 8, [0.0] + [1.0] * 8, 0.0) == nan_bits


def test_fused_overflow() -> None:
    # binary16 output: 65504 + 65504 = 131008 exceeds 65504; NVIDIA gives inf whatever the rounding
    big = [65504.0, 65504.0]
    assert dot_bits(V100_16, big, [1.0, 1.0], 0.0) == 0x7C00
    assert dot_bits(V100_16.replace(output_rounding=RZ), big, [1.0, 1.0], 0.0) == 0x7C00
    assert dot_bits(V100_16.replace(output_rounding=RZ, overflow="ieee"), big, [1.0, 1.0], 0.0) == 0x7BFF
    assert dot_bits(V100_16.replace(output_rounding=RZ, overflow="ieee"), big, [-1.0, -1.0], 0.0) == 0xFBFF


@pytest.mark.parametrize(("out", "style", "expected"), [
    ("fp32", NaNStyle.CANONICAL, 0x7FFFFFFF),
    ("fp32", NaNStyle.DEFAULT, 0x7FC00000),
    ("fp32", NaNStyle.INDEFINITE, 0xFFC00000),
    ("fp16", NaNStyle.CANONICAL, 0x7FFF),
    ("fp16", NaNStyle.DEFAULT, 0x7E00),
    ("fp16", NaNStyle.INDEFINITE, 0xFE00),
    ("fp64", NaNStyle.CANONICAL, 0x7FFFFFFFFFFFFFFF),
    ("fp64", NaNStyle.DEFAULT, 0x7FF8000000000000),
    ("fp64", NaNStyle.INDEFINITE, 0xFFF8000000000000),
    ("bf16", NaNStyle.CANONICAL, 0x7FFF),
    ("bf16", NaNStyle.DEFAULT, 0x7FC0),
    ("bf16", NaNStyle.INDEFINITE, 0xFFC0),
])
def test_nan_bit_patterns(out: str, style: NaNStyle, expected: int) -> None:
    m = Model(Family.EXACT_FUSED, "bf16", out, block_width=2, nan=style)
    assert dot_bits(m, [INF, 1.0], [0.0, 1.0], 0.0) == expected
    fma = Model(Family.FMA_CHAIN, "bf16", out, block_width=1, nan=style)
    assert dot_bits(fma, [INF], [1.0], -INF) == expected


def f64(code: int) -> float:
    """The Python float of a binary64 code (NaN payloads kept)."""
    return struct.unpack("<d", struct.pack("<Q", code))[0]


def test_propagated_nan_payloads() -> None:
    """nan='propagate' ("Special values", the H100's DMMA): in each FMA B's NaN, else the accumulator's,
    else A's, quieted with sign and payload kept; an invalid operation gives the indefinite NaN."""
    m = Model(Family.FMA_CHAIN, "fp64", "fp64", block_width=1, nan=NaNStyle.PROPAGATE)
    qa, sb, qc = f64(0x7FF800000000000A), f64(0xFFF000000000000B), f64(0x7FF800000000000C)
    assert dot_bits(m, [qa], [2.0], 1.0) == 0x7FF800000000000A  # A's NaN alone
    assert dot_bits(m, [1.0], [sb], 1.0) == 0xFFF800000000000B  # B's signalling NaN, quieted, sign kept
    assert dot_bits(m, [1.0], [1.0], qc) == 0x7FF800000000000C  # C's
    assert dot_bits(m, [qa], [sb], qc) == 0xFFF800000000000B  # B first
    assert dot_bits(m, [qa], [1.0], qc) == 0x7FF800000000000C  # then the accumulator, then A
    assert dot_bits(m, [f64(0x7FF0000000000001)], [1.0], qc) == 0x7FF800000000000C  # no signalling priority
    # in a chain a later B NaN replaces the accumulated NaN, a later A NaN does not
    assert dot_bits(m, [qa, 1.0], [1.0, sb], 0.0) == 0xFFF800000000000B
    assert dot_bits(m, [1.0, qa], [sb, 1.0], 0.0) == 0xFFF800000000000B
    # invalid operations, then a B NaN replacing their NaN; a NaN operand wins over the invalid product
    assert dot_bits(m, [INF], [0.0], 1.0) == 0xFFF8000000000000
    assert dot_bits(m, [INF, INF], [1.0, -1.0], 0.0) == 0xFFF8000000000000
    assert dot_bits(m, [INF, 1.0], [0.0, sb], 0.0) == 0xFFF800000000000B
    assert dot_bits(m, [INF], [0.0], qc) == 0x7FF800000000000C
    assert dot_bits(m, [], [], f64(0x7FF0000000000001)) == 0x7FF8000000000001  # k = 0: C, quieted
    # between formats the payload is left-aligned: binary16 0x7C01 (its last fraction bit) is binary64
    # 0x7FF8040000000000 once quieted, and binary32 0x7FC02000 (quiet bit and fraction bit 13)
    m16 = Model(Family.FMA_CHAIN, "fp16", "fp32", block_width=1, nan=NaNStyle.PROPAGATE)
    assert dot_bits(m16, [f64(0x7FF0040000000000)], [1.0], 0.0) == 0x7FC02000
    assert dot_bits(m16, [INF], [0.0], 0.0) == 0xFFC00000
    # binary64 payload bits below binary32's 23 are dropped: 0xFFF0000020000001 -> 0xFFC00001
    m32 = Model(Family.FMA_CHAIN, "fp32", "fp32", block_width=1, nan=NaNStyle.PROPAGATE)
    assert dot_bits(m32, [1.0], [1.0], f64(0xFFF0000020000001)) == 0xFFC00001


def test_propagate_is_for_fma_chains_only() -> None:
    with pytest.raises(ValueError, match="fma-chain family only"):
        Model(Family.EXACT_FUSED, "fp16", "fp32", block_width=4, nan="propagate")


def test_exact_zero_signs() -> None:
    ieee1 = Model(Family.EXACT_FUSED, "fp16", "fp32", block_width=1)
    assert dot_bits(ieee1, [-0.0], [1.0], -0.0) == 0x80000000  # every term -0
    assert dot_bits(ieee1, [-0.0], [-1.0], -0.0) == 0x00000000  # the product is +0 (xor of signs)
    assert dot_bits(ieee1, [0.0], [-1.0], 0.0) == 0x00000000
    assert dot_bits(ieee1.replace(output_rounding=RD), [0.0], [-1.0], 0.0) == 0x80000000  # any -0 in RD
    assert dot_bits(ieee1, [1.0], [1.0], -1.0) == 0x00000000  # nonzero terms cancel: +0
    assert dot_bits(ieee1.replace(output_rounding=RD), [1.0], [1.0], -1.0) == 0x80000000  # RD: -0
    # padding: with L = 2 a (+0) * (+0) product joins the block, so the sum of zeros is +0
    assert dot_bits(ieee1.replace(block_width=2), [-0.0], [1.0], -0.0) == 0x00000000
    # NVIDIA: an exact zero is +0
    assert dot_bits(V100, [-0.0], [1.0], -0.0) == 0x00000000
    assert dot_bits(V100.replace(output_rounding=RD), [1.0], [1.0], -1.0) == 0x00000000
    # a nonzero sum that rounds to zero keeps its sign: -2^-24 * 2^-2 = -2^-26 -> -0 in binary16
    assert dot_bits(V100_16, [-(2.0**-24)], [0.25], 0.0) == 0x8000
    assert dot_bits(ieee1.replace(output_format="fp16"), [-(2.0**-24)], [0.25], 0.0) == 0x8000
    # ... or gives +0 with rounded_zero="positive" (the NVIDIA presets), also after a chain of blocks
    assert dot_bits(V100_16.replace(rounded_zero="positive"), [-(2.0**-24)], [0.25], 0.0) == 0x0000
    assert dot_bits(V100_16.replace(rounded_zero="positive"), [-(2.0**-24)] + [0.0] * 4, [0.25] * 5, -0.0) == 0
    with pytest.raises(ValueError, match="rounded_zero='positive' needs"):
        ieee1.replace(rounded_zero="positive")


def test_flush_inputs() -> None:
    ftz = Model(Family.EXACT_FUSED, "bf16", "fp32", block_width=2, subnormals=False)
    assert dot_bits(ftz, [2.0**-130], [2.0**10], 0.0) == 0x00000000  # subnormal bf16 input flushed
    assert dot_bits(ftz.replace(subnormals=True), [2.0**-130], [2.0**10], 0.0) == b32(2.0**-120)
    assert dot_bits(ftz, [-(2.0**-130)], [1.0], -0.0) == 0x00000000  # -0 * 1 + (+0 pad) + -0 = +0
    assert dot_bits(ftz.replace(block_width=1), [-(2.0**-130)], [1.0], -0.0) == 0x80000000
    assert dot_bits(ftz, [INF], [2.0**-130], 0.0) == 0x7FC00000  # inf * (flushed) 0 = NaN
    # results: 2^-70 * 2^-70 = 2^-140 is below 2^-126: flushed to +0 (sign kept)
    assert dot_bits(ftz, [2.0**-70], [-(2.0**-70)], 0.0) == 0x80000000
    # C: a subnormal binary32 C is flushed before it is added
    assert dot_bits(ftz, [1.0], [1.0], 2.0**-140) == 0x3F800000


# --- the other families ---------------------------------------------------------------------------------------
def test_exact_fused() -> None:
    mi100 = Model(Family.EXACT_FUSED, "fp16", "fp32", block_width=4, output_rounding=RNE)
    tiny = 2.0**-24
    # 1 + 3 * 2^-24 lies halfway between 1 + 2^-23 and 1 + 2^-22: to even, 1 + 2^-22
    assert dot_bits(mi100, ONES, [tiny, tiny, tiny, 0.0], 1.0) == 0x3F800002
    assert dot_bits(mi100, ONES, [tiny, tiny, 0.0, 0.0], 1.0) == 0x3F800001
    # chaining: blocks (1, 2^-24, 0, 0) + 0 -> 1 (tie to even), then (2^-24, pad...) + 1 -> 1
    b = [1.0, tiny, 0.0, 0.0, tiny]
    assert dot_bits(mi100, [1.0] * 5, b, 0.0) == 0x3F800000
    # one block for the whole dot product: correctly rounded, 1 + 2 * 2^-24 exactly
    assert dot_bits(mi100.replace(block_width=None), [1.0] * 5, b, 0.0) == 0x3F800001
    # products exact before the one rounding: (1 + 2^-10)^2 - 1 = 2^-9 + 2^-20
    x = 1 + 2.0**-10
    assert dot_bits(mi100, [x], [x], -1.0) == b32(2.0**-9 + 2.0**-20)


def test_pairwise() -> None:
    cdna2 = Model(Family.PAIRWISE, "fp16", "fp32", block_width=4, subnormals=False, output_rounding=RNE)
    t = 2.0**-12  # normal in binary16; t * t = 2^-24
    a = [1.0, t, t, 1.0]
    # (1 + 2^-24) + (2^-24 + 0): the first add ties to even 1, the second add 1 + 2^-24 ties to 1 again
    assert dot_bits(cdna2, a, [1.0, t, t, 0.0], 0.0) == 0x3F800000
    # order of the tree: (2^-24 + 2^-24) + (1 + 0) = 2^-23 + 1, exact
    assert dot_bits(cdna2, [t, t, 1.0, 1.0], [t, t, 1.0, 0.0], 0.0) == 0x3F800001
    # C last: R(c + s) with s = 2^-23: c = 1 gives 1 + 2^-23
    assert dot_bits(cdna2, [t, t, 0.0, 0.0], [t, t, 0.0, 0.0], 1.0) == 0x3F800001
    # binary16 subnormal inputs are flushed: 1 * 2^-24 is 1 * 0
    assert dot_bits(cdna2, [1.0, 1.0], [2.0**-24, 2.0**-24], 1.0) == 0x3F800000
    assert dot_bits(cdna2.replace(subnormals=True), [1.0, 1.0], [2.0**-24, 2.0**-24], 1.0) == 0x3F800001
    # the tree is balanced: (1 + 2^-24) + (2^-24 + 2^-24) = 1 + 2^-23; in a sequential order every 2^-24 is lost
    assert dot_bits(cdna2, [1.0, t, t, t], [1.0, t, t, t], 0.0) == 0x3F800001
    # flushing: bf16 products 2^-70 * 2^-70 = 2^-140 are flushed by P; without flushing 2^-139
    bf = cdna2.replace(input_format="bf16")
    assert dot_bits(bf, [2.0**-70, 2.0**-70], [2.0**-70, 2.0**-70], 0.0) == 0x00000000
    tiny_products = ([2.0**-70, 2.0**-70], [2.0**-70, 2.0**-70])
    assert dot_bits(bf.replace(subnormals=True), *tiny_products, 0.0) == 0x00000400  # 2^10 * 2^-149
    # each product 2^-63 * 2^-64 = 2^-127 is flushed by P, so their sum is 0, not 2^-126
    assert dot_bits(bf, [2.0**-63, 2.0**-63], [2.0**-64, 2.0**-64], 0.0) == 0x00000000
    assert dot_bits(bf.replace(subnormals=True), [2.0**-63, 2.0**-63], [2.0**-64, 2.0**-64], 0.0) == 0x00800000
    # a flushed sum: the normal products 2^-125 and -1.5 * 2^-126 add up to the subnormal 2^-127: flushed,
    # so with C = 2^-126 the result is 2^-126 (not 1.5 * 2^-126)
    assert dot_bits(bf, [2.0**-60, -(2.0**-60)], [2.0**-65, 1.5 * 2.0**-66], 0.0) == 0x00000000
    assert dot_bits(bf, [2.0**-60, -(2.0**-60)], [2.0**-65, 1.5 * 2.0**-66], 2.0**-126) == 0x00800000
    assert dot_bits(bf.replace(subnormals=True), [2.0**-60, -(2.0**-60)], [2.0**-65, 1.5 * 2.0**-66], 0.0) \
        == b32(2.0**-127)
    # IEEE special values per operation
    assert math.isnan(dot(cdna2, [INF, 1.0], [0.0, 1.0], 0.0))
    assert math.isnan(dot(cdna2, [INF, INF], [1.0, -1.0], 0.0))
    assert dot(cdna2, [INF, 1.0], [1.0, 1.0], 0.0) == INF
    assert dot_bits(cdna2, [-0.0, -0.0], [1.0, 1.0], -0.0) == 0x00000000  # (-0 + -0) + (+0 + +0) = +0


def test_late_c_groups1() -> None:
    cdna3 = Model(Family.LATE_C, "fp16", "fp32", block_width=8, fraction_bits=24, late_fraction_bits=31,
                  output_rounding=RNE)
    # products 1 (exponent 0) and 1.5 * 2^-24 (exponent 0 + -14): q = 2^-24 cuts the second to 2^-24;
    # S = 1 + 2^-24, a tie, rounds to 1; the exact 1 + 1.5 * 2^-24 would round to 1 + 2^-23
    assert dot_bits(cdna3, [1.0, 1.5], [1.0, 2.0**-24], 0.0) == 0x3F800000
    exact = Model(Family.EXACT_FUSED, "fp16", "fp32", block_width=8)
    assert dot_bits(exact, [1.0, 1.5], [1.0, 2.0**-24], 0.0) == 0x3F800001
    # C late: products 2^-24 and 2^-35 (exponents -14, -25; q = 2^-38) give S = 2^-24 + 2^-35; C = 1 sets
    # E = 0 and S is floored at 2^-31 to 2^-24: 1 + 2^-24 is a tie -> 1 (the exact value rounds up)
    assert dot_bits(cdna3, [1.0, 2.0**-11], [2.0**-24, 2.0**-24], 1.0) == 0x3F800000
    assert dot_bits(exact, [1.0, 2.0**-11], [2.0**-24, 2.0**-24], 1.0) == 0x3F800001
    # floor is toward minus infinity: S = -(2^-25 + 2^-35) with C = 1 floors to -(2^-25 + 2^-31)
    # (exponent -14 + -1 = -15, q = 2^-39 keeps S); 1 - 2^-25 - 2^-31 rounds to 1 - 2^-24 either way
    assert dot_bits(cdna3, [2.0**-24], [-(1 + 2.0**-10) * 0.5], 1.0) == b32(1 - 2.0**-24)
    # C is floored at 2^(E - F): E = 7 (product 2^7), C = -2^-20 floors to -2^-17; 128 - 2^-17 is exact
    assert dot_bits(cdna3, [128.0], [1.0], -(2.0**-20)) == b32(128 - 2.0**-17)


def test_late_c_cut_after_carry_and_cancellation() -> None:
    """MI300X's late-C cut as MMA-Sim 2.1.1 computes it (tr_fdpa; its authors hold it to MI300X hardware):
    S kept to 32 bits below the common exponent, the sum S + C then floored at 31 bits below its own leading
    bit.  The expected bits are MMA-Sim's outputs for these inputs (MFMA CDNA3 f32_16x16x16_f16, run
    2026-11-22); ``late_cut="common"`` is blockfma's first reading (S and the sum at 31 bits below E)."""
    h = float.fromhex
    mi300 = Model(Family.LATE_C, "fp16", "fp32", block_width=8, fraction_bits=24, late_fraction_bits=31,
                  output_rounding=RNE)
    common = mi300.replace(late_cut="common")
    # carry: S = 2^-5 + 2^-23 + 2^-31, C = 0x1.f8p+0; the sum 2 + 2^-23 + 2^-31 carries to 2^1 and is cut at
    # 2^-30 to 2 + 2^-23, a tie that rounds to 2 (issue 8's example); cut at 2^-31 it rounds up
    a = [h("0x1.8p-4"), h("0x1.cp-4"), 2.0**-12, 2.0**-16]
    b = [h("0x1.8p-3"), 2.0**-3, 2.0**-11, 2.0**-15]
    assert dot_bits(mi300, a, b, h("0x1.f8p+0")) == 0x40000000
    assert dot_bits(common, a, b, h("0x1.f8p+0")) == 0x40000001
    # cancellation: C near -1 and products near 2^-8 and 2^-32; the sum falls below 1, so the bit of S at
    # 2^-32, which the common cut floors away, decides the rounding
    for a, b, c, want, want_common in (
            ([h("0x1.d6p-4"), h("0x1.c3p-16")], [h("0x1.6ecp-4"), h("0x1.01p-16")], h("-0x1.0247c8p+0"),
             0xBF7FA673, 0xBF7FA674),
            ([h("0x1.7ep-4"), h("0x1.61p-16")], [h("0x1.a5cp-4"), h("0x1.34p-16")], h("-0x1.000514p+0"),
             0xBF7D8FBF, 0xBF7D8FC0)):
        assert dot_bits(mi300, a, b, c) == want
        assert dot_bits(common, a, b, c) == want_common


def test_late_c_groups2() -> None:
    fp8 = Model(Family.LATE_C, "e4m3fnuz", "fp32", block_width=16, fraction_bits=24, late_fraction_bits=31,
                groups=2, output_rounding=RNE)
    one = fp8.replace(groups=1)
    # even products 256 (16 * 16, exponent 8), odd product -2^-20 (2^-10 * -2^-10, exponent -14):
    # groups=2: the odd sum -2^-20 is floored at 2^(8 - 24) to -2^-16: 256 - 2^-16 (exact in binary32);
    # groups=1: -2^-20 is cut toward zero at 2^-16 to 0: 256
    a, b = [16.0, 2.0**-10], [16.0, -(2.0**-10)]
    assert dot_bits(fp8, a, b, 0.0) == b32(256 - 2.0**-16)
    assert dot_bits(one, a, b, 0.0) == b32(256.0)
    # C dropped when e_c < E - F - 1: product 128 * 128 = 2^14 (E = 14); C = -2^-12 (e_c = -12 < -11) is
    # dropped, C = -2^-11 (e_c = -11) is kept and floored at 2^-10 to -2^-10: 2^14 - 2^-10 (exact)
    assert dot_bits(fp8, [128.0], [128.0], -(2.0**-12)) == b32(2.0**14)
    assert dot_bits(fp8, [128.0], [128.0], -(2.0**-11)) == b32(2.0**14 - 2.0**-10)
    assert dot_bits(one, [128.0], [128.0], -(2.0**-12)) == b32(2.0**14 - 2.0**-10)  # groups=1 keeps C
    # no nonzero product: S = 0 and E = e_c
    assert dot_bits(fp8, [0.0, 0.0], [1.0, 1.0], 1.5) == b32(1.5)


def test_late_c_specials() -> None:
    m = Model(Family.LATE_C, "bf16", "fp32", block_width=2, fraction_bits=24, late_fraction_bits=31,
              output_rounding=RNE, nan=NaNStyle.CANONICAL)
    # a product of magnitude >= 2^128 is an infinity: 2^100 * 2^28 = 2^128 exactly
    assert dot(m, [2.0**100], [2.0**28], 0.0) == INF
    assert dot(m, [2.0**100], [-(2.0**28)], 0.0) == -INF
    assert dot_bits(m, [2.0**100], [2.0**27], 0.0) == b32(2.0**127)
    # 2^128 - 2^127 = 2^127 would be finite, but the first product is already an infinity
    assert dot(m, [2.0**100, 2.0**100], [2.0**28, -(2.0**27)], 0.0) == INF
    # two overflowing products of opposite signs: NaN although the exact sum is 0
    assert dot_bits(m, [2.0**100, 2.0**100], [2.0**100, -(2.0**100)], 0.0) == 0x7FFFFFFF
    # ... and an overflowing product against an infinite C of the other sign
    assert dot_bits(m, [2.0**100], [2.0**100], -INF) == 0x7FFFFFFF
    assert dot_bits(m, [INF], [0.0], 1.0) == 0x7FFFFFFF
    # signs of zero: every term -0 gives -0 (ieee), cancelling products +0
    assert dot_bits(m, [-0.0, -0.0], [1.0, 1.0], -0.0) == 0x80000000
    assert dot_bits(m, [1.0, 1.0], [1.0, -1.0], 0.0) == 0x00000000


def test_fma_chain() -> None:
    dmma = Model(Family.FMA_CHAIN, "fp64", "fp64", block_width=1, output_rounding=RNE)
    # each step rounds: 1 + 2^-53 ties to 1, twice; the exact sum 1 + 2^-52 is lost
    assert dot_bits(dmma, [1.0, 1.0], [2.0**-53, 2.0**-53], 1.0) == b64(1.0)
    # ... while in the other order 2^-53 + 2^-53 = 2^-52 first: 0 + 2^-53 -> 2^-53 -> 2^-52 -> +1 exact
    assert dot_bits(dmma, [1.0, 1.0, 1.0], [2.0**-53, 2.0**-53, 1.0], 0.0) == b64(1 + 2.0**-52)
    # fused: (1 + 2^-52)(1 - 2^-52) - 1 = -2^-104 exactly (a separate multiply would round it away)
    assert dot_bits(dmma, [1 + 2.0**-52], [1 - 2.0**-52], -1.0) == b64(-(2.0**-104))
    # IEEE specials per step
    assert dot(dmma, [2.0**1023], [2.0], 0.0) == INF
    assert dot(dmma, [INF, 1.0], [1.0, 1.0], 0.0) == INF
    assert math.isnan(dot(dmma, [INF, -INF], [1.0, 1.0], 0.0))
    assert math.isnan(dot(dmma, [0.0], [INF], 1.0))
    assert dot_bits(dmma, [1.0], [1.0], -1.0) == 0  # cancellation: +0
    assert dot_bits(dmma, [-0.0], [1.0], -0.0) == 0x8000000000000000
    mfma32 = Model(Family.FMA_CHAIN, "fp32", "fp32", block_width=1, output_rounding=RNE)
    # (1 + 2^-12)^2 - 1 = 2^-11 + 2^-24, exact in binary32 (rounding the product first would give 2^-11)
    x = 1 + 2.0**-12
    assert dot_bits(mfma32, [x], [x], -1.0) == b32(2.0**-11 + 2.0**-24)
    assert dot_bits(mfma32, [x, 1.0], [x, 2.0**-30], -1.0) == b32(2.0**-11 + 2.0**-24 + 2.0**-30)
    assert dot_bits(mfma32, [2.0**100], [2.0**100], 0.0) == 0x7F800000


def test_amx() -> None:
    amx = Model(Family.AMX, "bf16", "fp32", block_width=4, output_rounding=RNE, subnormals=False,
                nan=NaNStyle.INDEFINITE)
    tiny = 2.0**-24
    # even: 1, then 1 + 2^-24 -> 1 (tie to even); odd: 2^-24, then 2^-23; even + odd = 1 + 2^-23 exactly.
    # (A sequential FMA chain gives 1; the exact sum 1 + 3 * 2^-24 rounds to 1 + 2^-22.)
    assert dot_bits(amx, ONES, [1.0, tiny, tiny, tiny], 0.0) == 0x3F800001
    chain = Model(Family.FMA_CHAIN, "bf16", "fp32", block_width=1)
    assert dot_bits(chain, ONES, [1.0, tiny, tiny, tiny], 0.0) == 0x3F800000
    assert dot_bits(Model(Family.EXACT_FUSED, "bf16", "fp32", block_width=4), ONES, [1.0, tiny, tiny, tiny],
                    0.0) == 0x3F800002
    # C last: R(c + R(even + odd)) with c = -1: 1 + 2^-23 - 1 = 2^-23
    assert dot_bits(amx, ONES, [1.0, tiny, tiny, tiny], -1.0) == b32(2.0**-23)
    # flushing: a subnormal bf16 input, a subnormal product
    assert dot_bits(amx, [2.0**-130, 0.0], [2.0**10, 0.0], 0.0) == 0x00000000
    assert dot_bits(amx, [2.0**-70, 0.0], [2.0**-70, 0.0], 0.0) == 0x00000000
    assert dot_bits(amx, [INF, 1.0], [0.0, 1.0], 0.0) == 0xFFC00000
    assert dot_bits(amx, [INF, 1.0], [1.0, 1.0], -INF) == 0xFFC00000


def test_bfdot_round_to_odd() -> None:
    bfdot = Model(Family.BFDOT, "bf16", "fp32", block_width=2, output_rounding=RO, subnormals=False)
    # p0 = 1, p1 = 2^-30; s = RO(1 + 2^-30) = 1 + 2^-23 (inexact: last bit set); c + s = 1 + 2^-23
    assert dot_bits(bfdot, [1.0, 1.0], [1.0, 2.0**-30], 0.0) == 0x3F800001
    # c = -1: -1 + (1 + 2^-23) = 2^-23, where the exact result is 2^-30
    assert dot_bits(bfdot, [1.0, 1.0], [1.0, 2.0**-30], -1.0) == b32(2.0**-23)
    # with RNE instead the sum would be 1, and c = -1 would give +0
    assert dot_bits(bfdot.replace(output_rounding=RNE), [1.0, 1.0], [1.0, 2.0**-30], -1.0) == 0x00000000
    # round to odd does not overflow to infinity (IEEE 7.4: largest finite value)
    big = 2.0**127
    assert dot_bits(bfdot, [big, big], [1.0, 1.0], 0.0) == 0x7F7FFFFF
    # chaining over pairs: (1 + 1) + 0 = 2, then (2^-30 + pad) + 2 = RO(2 + 2^-30) = 2 + 2^-22
    assert dot_bits(bfdot, [1.0, 1.0, 1.0], [1.0, 1.0, 2.0**-30], 0.0) == 0x40000001
    # flushed input and default NaN
    assert dot_bits(bfdot, [2.0**-130, 0.0], [2.0**10, 0.0], 0.0) == 0x00000000
    assert dot_bits(bfdot, [INF, 1.0], [0.0, 1.0], 0.0) == 0x7FC00000


# --- published hardware data ($BLOCKFMA_GOLDEN or ../shared/golden), when present ------------------------------


def _f32(hex_word: str) -> float:
    return struct.unpack(">f", struct.pack(">I", int(hex_word, 16)))[0]


@pytest.mark.parametrize(("device", "fmt", "model"), [
    ("V100", "fp16", V100),
    ("A100", "fp16", A100),
    ("A100", "bf16", A100_BF16),
    ("H100", "fp16", V100.replace(block_width=16, fraction_bits=25, e_zero=-133)),
])
def test_golden_hardware_rows(device: str, fmt: str, model: Model) -> None:
    folder = golden_dir("khattak-mikaitis", device, fmt)
    n = 40

    def lines(name: str) -> list[str]:
        with open(folder / name) as f:
            return [line for _, line in zip(range(n), f)]

    rows_a = lines(f"a_{device}_{fmt}.txt")
    rows_b = lines(f"b_{device}_{fmt}.txt")
    rows_c = lines(f"c_{device}_fp32.txt")
    rows_d = lines(f"d_{device}_fp32.txt")
    for ra, rb, rc, rd in zip(rows_a, rows_b, rows_c, rows_d):
        a = [_f32(w) for w in ra.split()]
        b = [_f32(w) for w in rb.split()]
        c = struct.unpack(">f", struct.pack(">I", int(rc.strip(), 2)))[0]
        assert dot_bits(model, a, b, c) == int(rd.strip(), 2)


def test_c_added_after_the_block() -> None:
    """c_entry="after": the block sums its products from +0 and rounds (here toward zero), then C is added
    by an IEEE addition rounded to nearest even.  Products 1 and 3 * 2^-25 (0.75 ulp of binary32 at 1),
    C = 2^-24 (half an ulp): after, the block gives 1 and 1 + 2^-24 is a tie that stays at 1; fused, the
    sum 1 + 1.25 ulp is cut toward zero to 1 + 2^-23."""
    fused = Model(Family.TRUNCATED_FUSED, "fp16", "fp32", block_width=2, fraction_bits=25, e_zero=-133,
                  output_rounding=RoundingMode.TowardZero)
    after = fused.replace(c_entry="after")
    a, b = [1.0, 3 * 2.0**-13], [1.0, 2.0**-12]
    assert dot_bits(fused, a, b, 2.0**-24) == 0x3F800001
    assert dot_bits(after, a, b, 2.0**-24) == 0x3F800000
    # chained blocks: each block from +0, then its own addition (k = 4: two blocks of 2)
    assert dot_bits(after, a + a, b + b, 2.0**-24) == b32(2.0)  # 1 + (1 + 2^-24 -> 1) = 2
    # the addition follows IEEE: -0 + -0 = -0 (the block of zero products gives +0 here, so +0)
    assert dot_bits(after, [0.0, 0.0], [1.0, 1.0], -0.0) == 0x00000000
    assert math.isnan(dot(after, [INF, 1.0], [1.0, 1.0], -INF))
    with pytest.raises(ValueError, match="c_entry='after' needs a fused family"):
        Model(Family.FMA_CHAIN, "fp16", "fp32", block_width=1, c_entry="after")


def test_fp16_output_through_an_fp32_accumulator() -> None:
    """AMD MFMA with an fp16 D (FTTN's Table IV, through rocWMMA): the block in fp32, then rounded to
    nearest even into fp16.  Products 1, 2^-11 and 2^-30 (MI100, exact-fused): the fp32 sum is 1 + 2^-11
    (2^-30 lies below half an ulp), a tie in fp16 that goes to the even 1.0; rounding the exact sum to
    fp16 at once would give 1 + 2^-10."""
    mi100 = Model(Family.EXACT_FUSED, "fp16", "fp16", block_width=4, accumulator_format="fp32")
    a, b = [1.0, 2.0**-11, 2.0**-15], [1.0, 1.0, 2.0**-15]
    assert dot_bits(mi100, a, b, 0.0) == 0x3C00
    assert dot_bits(mi100.replace(accumulator_format=None), a, b, 0.0) == 0x3C01
    assert dot_bits(mi100, [1.0] * 4, [-0.0] * 4, -0.0) == 0x8000  # the sign of zero survives the store
    with pytest.raises(ValueError, match="accumulator_format must be at least as wide"):
        Model(Family.EXACT_FUSED, "fp16", "fp32", block_width=4, accumulator_format="fp16")


def test_c_at_the_end_after_an_fp32_accumulator_is_stored() -> None:
    """c_entry="end" (cuBLAS with fp16 D on the H100): every block chains from +0 in the fp32 accumulator,
    the sum is stored (RNE) into fp16, then C is added in fp16.  (2 - 2^-9)^2 - 4 is -2^-7 + 2^-18, an fp16
    value; the stored product 4 - 2^-7 + 2^-18 -> 4 - 2^-7 loses the 2^-18, so the result is -2^-7 (as the
    H100 gave, data/hardware/h100-torch-order.json.gz), where C fused into the block keeps it."""
    m = Model(Family.TRUNCATED_FUSED, "fp16", "fp16", block_width=16, fraction_bits=25, e_zero=-133,
              output_rounding=RoundingMode.TowardZero, accumulator_format="fp32", c_entry="end")
    x = 2 - 2.0**-9
    assert dot(m, [x], [x], -4.0) == -(2.0**-7)
    assert dot(m.replace(c_entry="fused"), [x], [x], -4.0) == -(2.0**-7) + 2.0**-18
    assert m.step_width is None and m.step(20) == 32 and m.step(0) == 1
    # the whole dot product is one step: 1 + 2^-11 in the first block and 2^-11 in the second sum to
    # 1 + 2^-10 in fp32 before the store, where C after each block ("after") rounds twice to 1
    a = [1.0, 2.0**-11] + [0.0] * 14 + [2.0**-11]
    b = [1.0] * 17
    assert dot(m, a, b, 0.0) == 1 + 2.0**-10
    assert dot(m.replace(c_entry="after"), a, b, 0.0) == 1.0
    # the store keeps the sign of a tiny negative sum (-2^-27 -> -0), and -0 + -0 is -0
    assert dot_bits(m.replace(rounded_zero="signed", exact_zero="ieee"), [-(2.0**-14)], [2.0**-13], -0.0) == 0x8000
    with pytest.raises(ValueError, match="instruction_k needs c_entry='after'"):
        m.replace(instruction_k=16)
    with pytest.raises(ValueError, match="c_entry='end' has none"):
        m.replace(product_order="halves")


def test_flushed_inputs_keep_their_sign_or_become_plus_zero() -> None:
    """MI250X flushes subnormal inputs and C: four products of -2^-24 (a subnormal fp16) and 1 with C = -0
    give -0 when the flushed zeros keep their sign, +0 with flush_zero="positive" (MMA-Sim's reading)."""
    mi250 = Model(Family.PAIRWISE, "fp16", "fp32", block_width=4, subnormals=False)
    a, b = [-(2.0**-24)] * 4, [1.0] * 4
    assert dot_bits(mi250, a, b, -0.0) == 0x80000000
    assert dot_bits(mi250.replace(flush_zero="positive"), a, b, -0.0) == 0x00000000


def test_instruction_steps_product_order_and_unpacking() -> None:
    """Hopper's fp8 mma.sync (held to 491 hardware rows by tests/test_hardware_records.py): products in the
    order of the register halves, index mod 4 in {0, 1} first; the fields are checked on construction."""
    m = Model(Family.TRUNCATED_FUSED, "fp16", "fp32", block_width=4, fraction_bits=25, e_zero=-133,
              output_rounding=RoundingMode.TowardZero, c_entry="after", instruction_k=8, product_order="halves")
    assert m.order(8) == [0, 1, 4, 5, 2, 3, 6, 7] and m.step_width == 8
    # one step of two chained blocks from +0, then C: 2^-20 enters the second block (index 2) after 1
    # (index 0) was rounded alone, so the block sums are 1 and 1 + 2^-20, then + C = 2^-30 (RNE: 1 + 2^-20)
    a = [1.0, 0.0, 2.0**-10, 0.0, 0.0, 0.0, 0.0, 0.0]
    b = [1.0, 0.0, 2.0**-10, 0.0, 0.0, 0.0, 0.0, 0.0]
    assert dot_bits(m, a, b, 2.0**-30) == b32(1 + 2.0**-20)
    with pytest.raises(ValueError, match="instruction_k needs c_entry='after'"):
        Model(Family.TRUNCATED_FUSED, "fp16", "fp32", block_width=2, fraction_bits=23, e_zero=-133, instruction_k=4)
    with pytest.raises(ValueError, match="unpack_format must hold every value"):
        Model(Family.TRUNCATED_FUSED, "fp16", "fp32", block_width=2, fraction_bits=23, e_zero=-133,
              unpack_format="e4m3fn")


# --- C narrower than D: c_input_format (Volta's and Turing's m8n8k4.f32.f16.f16.f16) ----------------------------
def _v100_f16c() -> Model:
    return Model(Family.TRUNCATED_FUSED, "fp16", "fp32", block_width=4, fraction_bits=23, e_zero=-131,
                 output_rounding=RoundingMode.TowardZero, c_input_format="fp16")


def test_narrow_c_takes_its_exponent_in_its_own_format_in_the_first_block_only() -> None:
    """a = b = x = (1 + 2^-10) 2^-10, C = 2^-20 (subnormal in fp16).  Read in fp16, C's exponent is -14, the
    quantum 2^(-14 - 23) and x^2 = 2^-20 + 2^-29 + 2^-40 loses its 2^-40: D = 2^-19 (1 + 2^-10).  Read in
    fp32 (no c_input_format), C sits at -20, nothing is cut: D = 2^-19 (1 + 2^-10 + 2^-21).  In the second
    block C is the first block's result, an fp32 value read at its own exponent: the fp32 reading again."""
    x = float((1 + Fraction(1, 2**10)) * Fraction(1, 2**10))
    narrow, wide = Fraction(1, 2**19) * (1 + Fraction(1, 2**10)), \
        Fraction(1, 2**19) * (1 + Fraction(1, 2**10) + Fraction(1, 2**21))
    m = _v100_f16c()
    a = [x, 0.0, 0.0, 0.0]
    assert Fraction(dot(m, a, a, 2.0**-20)) == narrow
    assert Fraction(dot(m.replace(c_input_format=None), a, a, 2.0**-20)) == wide
    zeros = [0.0] * 4  # the first block passes C = 2^-20 on unchanged, as an fp32 value
    assert Fraction(dot(m, zeros + a, zeros + a, 2.0**-20)) == wide
    assert Fraction(dot(m, a + zeros, a + zeros, 2.0**-20)) == narrow
    assert dot(m, [], [], 2.0**-20) == 2.0**-20  # no block: C as given
    # a normal fp16 C has the same exponent in both formats
    assert dot(m, a, a, 2.0**-14) == dot(m.replace(c_input_format=None), a, a, 2.0**-14)


def test_narrow_c_must_be_a_value_of_its_format() -> None:
    m = _v100_f16c()
    with pytest.raises(ValueError, match="fp16"):
        dot(m, [1.0] * 4, [1.0] * 4, 1 + 2.0**-20)  # an fp32 value, not an fp16 one


def test_c_input_format_field() -> None:
    """The field's JSON key, summary word and checks: truncated-fused with C fused, a narrower format than
    the output, no accumulator; the output format itself means no narrower C (None)."""
    m = _v100_f16c()
    assert m.c_format is formats.fp16 and m.block_model().c_format is formats.fp32
    assert m.first_block_model().c_format is formats.fp16
    d = m.to_dict()
    assert d["c_input"] == "fp16" and Model.from_dict(d) == m and Model.from_dict(d).c_input_format is formats.fp16
    assert "C=fp16" in m.summary() and "C=" not in m.replace(c_input_format=None).summary()
    assert m.replace(c_input_format="fp32").c_input_format is None
    with pytest.raises(ValueError, match="c_input_format applies to the truncated-fused family only"):
        Model(Family.LATE_C, "fp16", "fp32", block_width=8, fraction_bits=24, late_fraction_bits=31,
              c_input_format="fp16")
    with pytest.raises(ValueError, match="c_input_format needs c_entry='fused'"):
        m.replace(c_entry="after")
    with pytest.raises(ValueError, match="c_input_format fp64 must be narrower than the output format fp32"):
        m.replace(c_input_format="fp64")
    with pytest.raises(ValueError, match="c_input_format with an accumulator_format"):
        Model(Family.TRUNCATED_FUSED, "fp16", "fp16", block_width=4, fraction_bits=23, e_zero=-131,
              accumulator_format="fp32", c_input_format="e5m2")
