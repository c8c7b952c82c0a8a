"""Exact number forms (src/blockfma/literals.py): hand-derived values, errors, round trips."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from blockfma.literals import (NotRepresentable, bits_hex, exact_binary, exact_decimal, hex_float, parse,
                               to_float)


def negative_zero(x: object) -> bool:
    return isinstance(x, float) and x == 0 and math.copysign(1.0, x) < 0


@pytest.mark.parametrize("text, value", [
    ("0.1", Fraction(1, 10)),
    ("1e-3", Fraction(1, 1000)),
    ("-2.5", Fraction(-5, 2)),
    ("42", Fraction(42)),
    (".5", Fraction(1, 2)),
    ("5.", Fraction(5)),
    ("1E3", Fraction(1000)),
    ("2^-24", Fraction(1, 2**24)),
    ("2**-24", Fraction(1, 2**24)),
    ("2^(-24)", Fraction(1, 2**24)),
    ("1-2^-11", Fraction(2047, 2048)),
    ("1+2^-10-2^-20", Fraction(2**20 + 2**10 - 1, 2**20)),
    ("3*2^-5", Fraction(3, 32)),
    ("-3*2^-5", Fraction(-3, 32)),
    ("0x1.8p-3", Fraction(3, 16)),
    ("-0x1p+4", Fraction(-16)),
    ("0x.8p1", Fraction(1)),
    ("0x10", Fraction(16)),
    ("0X1.FFCp15", Fraction(65504)),
    ("0b1.01p-2", Fraction(5, 16)),
    ("+0b1.1 * 2^-3", Fraction(3, 16)),
    ("1/3", Fraction(1, 3)),
    ("1/2/2", Fraction(1, 4)),          # left to right
    ("2-1-1", Fraction(0)),
    ("-2^2", Fraction(-4)),             # a power binds tighter than a sign
    ("(-2)^2", Fraction(4)),
    ("2*3^2", Fraction(18)),
    ("(2^3)^2", Fraction(64)),
    ("(1+2^-10) * (1-2^-10)", Fraction(2**20 - 1, 2**20)),
    ("  1 - 2^-11 ", Fraction(2047, 2048)),
    ("1 \u2212 2^\u221211", Fraction(2047, 2048)),  # typographic minus
    ("3 \u00d7 2^-5", Fraction(3, 32)),             # multiplication sign
])
def test_exact_values(text: str, value: Fraction) -> None:
    got = parse(text)
    assert isinstance(got, Fraction)
    assert got == value


def test_zero_signs() -> None:
    assert negative_zero(parse("-0"))
    assert negative_zero(parse("-0.0"))
    assert negative_zero(parse("-0x0p+0"))
    assert negative_zero(parse("-0*3"))        # IEEE: the sign of a product is the xor of the signs
    assert negative_zero(parse("-0-0"))        # -0 + -0 = -0
    assert parse("0") == 0 and isinstance(parse("0"), Fraction)
    assert parse("0-0") == 0 and isinstance(parse("0-0"), Fraction)  # +0 - +0 = +0
    assert parse("-0*-1") == 0 and isinstance(parse("-0*-1"), Fraction)
    assert parse("-0+2^-3") == Fraction(1, 8)


def test_specials() -> None:
    assert parse("inf") == math.inf
    assert parse("-inf") == -math.inf
    assert parse("Infinity") == math.inf
    assert math.isnan(parse("nan"))
    assert math.isnan(parse("inf-inf"))
    assert math.isnan(parse("0*inf"))
    assert parse("inf+1") == math.inf
    assert negative_zero(parse("-1/inf"))


@pytest.mark.parametrize("text", ["", "   ", "abc", "1+", "2^3^2", "2^0.5", "2^x", "(1", "1)", "1/0", "0^-1",
                                  "1,2", "2^100000", "__import__('os')", "1 2", "--", "0x", "0b2"])
def test_errors_name_text_and_forms(text: str) -> None:
    with pytest.raises(ValueError) as info:
        parse(text)
    msg = str(info.value)
    assert repr(text) in msg
    assert "0x1.8p-3" in msg and "2^-24" in msg  # the accepted forms


def test_nesting_and_length_are_bounded() -> None:
    """Deep nesting is refused in one line, not a RecursionError; a run of signs is a loop (any number of
    them within the length bound); a text longer than any exact float64 needs is refused before parsing."""
    assert parse("(" * 100 + "-2^-3" + ")" * 100) == Fraction(-1, 8)
    with pytest.raises(ValueError, match=r"^cannot read '\(\(\(.*\.\.\. \(203 characters\) as an exact number: "
                                         r"more than 100 nested parentheses; accepted forms"):
        parse("(" * 101 + "1" + ")" * 101)
    assert parse("-" * 1999 + "0") == 0 and negative_zero(parse("-" * 1001 + "0")) and parse("+-" * 998 + "3") == 3
    with pytest.raises(ValueError, match=r"^cannot read a number of 2001 characters \(at most 2000\)"):
        parse("1" * 2001)
    assert parse(exact_decimal(5e-324)) == Fraction(5e-324)  # the longest exact decimal of a float64 fits


def test_to_float_exact_and_checked() -> None:
    assert to_float("1-2^-24") == 1 - 2**-24
    assert to_float("2^-24", "fp16") == 2**-24          # smallest binary16 subnormal
    assert to_float("65504", "fp16") == 65504.0
    assert negative_zero(to_float("-0", "fp16"))
    with pytest.raises(NotRepresentable) as info:
        to_float("0.1", "fp16")
    # 0.1 * 2^14 = 1638.4: the binary16 neighbours are 1638 * 2^-14 and 1639 * 2^-14
    assert info.value.below == 1638 * 2**-14 == 0.0999755859375
    assert info.value.above == 1639 * 2**-14 == 0.10003662109375
    assert "0.1 is not representable in fp16" in str(info.value)
    with pytest.raises(ValueError, match="fp64"):
        to_float("1/3")
    with pytest.raises(ValueError, match="fp16"):
        to_float("2^-25", "fp16")
    with pytest.raises(ValueError, match="65520"):
        to_float("65520", "fp16")
    with pytest.raises(ValueError, match="negative zero"):
        to_float("-0", "e4m3fnuz")
    with pytest.raises(ValueError, match="infinities"):
        to_float("inf", "e4m3fn")


def test_to_float_rounds_once() -> None:
    # 1/3 in [2^-2, 2^-1): binary16 quantum 2^-12, 4096/3 = 1365.33...
    assert to_float("1/3", "fp16", "rne") == 1365 / 4096
    assert to_float("1/3", "fp16", "rz") == 1365 / 4096
    assert to_float("1/3", "fp16", "ru") == 1366 / 4096
    assert to_float("-1/3", "fp16", "rd") == -1366 / 4096
    # just above the midpoint between 1 and 1 + 2^-10: binary64 would round it to the midpoint and a
    # second rounding to binary16 would then go to even (1); one rounding gives 1 + 2^-10
    assert to_float("1+2^-11+2^-70", "fp16", "rne") == 1 + 2**-10
    assert to_float("1+2^-11", "fp16", "rne") == 1.0
    assert to_float("1+2^-11", "fp16", "rna") == 1 + 2**-10
    assert to_float("1/3", None, "rz") == 0.3333333333333333


def test_printers() -> None:
    x = 1 + 2**-23
    assert exact_decimal(x) == "1.00000011920928955078125"
    assert exact_decimal(1.0) == "1.0"
    assert exact_decimal(2**-3) == "0.125"
    assert exact_decimal(-0.0) == "-0.0"
    assert exact_binary(x) == "+0b1.00000000000000000000001 * 2^0"
    assert exact_binary(1.0) == "+0b1 * 2^0"
    assert exact_binary(1.0, "fp32") == "+0b1." + "0" * 23 + " * 2^0"
    assert exact_binary(-3 / 16) == "-0b1.1 * 2^-3"
    assert exact_binary(3 * 2**-24, "fp16") == "+0b1.1 * 2^-23"     # subnormal: 2 significant bits
    assert exact_binary(2**-24, "fp16") == "+0b1 * 2^-24"
    assert exact_binary(0.0) == "+0" and exact_binary(-0.0) == "-0"
    assert exact_binary(-math.inf) == "-inf" and exact_binary(math.nan) == "nan"
    assert hex_float(x) == "0x1.000002p+0"
    assert hex_float(1.0) == "0x1p+0"
    assert hex_float(-0.0) == "-0x0p+0"
    assert hex_float(-3 / 16) == "-0x1.8p-3"
    assert bits_hex(x, "fp32") == "0x3f800001"
    assert bits_hex(1.0, "fp16") == "0x3c00"
    assert bits_hex(-2.0, "bf16") == "0xc000"
    assert bits_hex(-0.0, "fp32") == "0x80000000"
    assert bits_hex(1.0, "fp64") == "0x3ff0000000000000"
    assert bits_hex(math.nan, "fp32") == "0x7fc00000"               # the format's default NaN
    canonical = np.array(0x7FFFFFFF, dtype=np.uint32).view(np.float32)
    assert bits_hex(canonical, "fp32") == "0x7fffffff"              # raw bits of a device's NaN
    assert bits_hex(np.float16(1.0), "fp16") == "0x3c00"


finite = st.floats(allow_nan=False, allow_infinity=False)


def same(x: float, y: float) -> bool:
    return x == y and math.copysign(1.0, x) == math.copysign(1.0, y)


@given(finite)
def test_round_trips(x: float) -> None:
    # exact forms give back x exactly
    for text in (float.hex(x), exact_binary(x), exact_decimal(x), hex_float(x)):
        got = parse(text)
        assert got == x, text
        assert same(float(got), x), text
        assert same(to_float(text), x), text
    # repr is the shortest decimal that rounds to x (not x itself): rounding its exact value to
    # nearest gives x back, and where it is exact, parse gives x
    r = repr(x)
    assert same(to_float(r, "fp64", "rne"), x)
    assert same(float(parse(r)), x)
    if Fraction(r) == Fraction(x):
        assert parse(r) == x
    else:
        with pytest.raises(NotRepresentable):
            to_float(r)


@given(st.floats(width=32, allow_nan=False))
def test_fp32_round_trip_through_bits(x: float) -> None:
    assert to_float(hex_float(x), "fp32") == x
    code = int(bits_hex(x, "fp32"), 16)
    assert np.array(code, dtype=np.uint32).view(np.float32) == np.float32(x)


def test_special_round_trips() -> None:
    for x in (math.inf, -math.inf):
        assert parse(float.hex(x)) == x and parse(repr(x)) == x
    assert math.isnan(parse(float.hex(math.nan)))
