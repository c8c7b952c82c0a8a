"""formats: properties, encode/decode, and rounding of every code and midpoint.

Oracles: numpy and ml_dtypes casts (round to nearest even) and the exact Fraction reference
(reference.round_exact) for every rounding mode.  The full all-modes sweep of the 16-bit formats is marked
slow; CI runs it on every 8-bit format exhaustively and on a strided subset of the 16-bit ones.
"""

from __future__ import annotations

import struct
import sys
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blockfma import formats as F
from blockfma import reference
from blockfma.formats import RoundingMode

SMALL = ["fp16", "bf16", "e4m3fn", "e5m2", "e4m3fnuz", "e5m2fnuz"]
MODES = list(RoundingMode)


# --- properties ------------------------------------------------------------------------------------------
MX = ["e2m1fn", "e3m2fn", "e2m3fn", "e8m0fnu"]  # the OCP MX formats ml_dtypes has (tests/test_formats_mx.py)


@pytest.mark.parametrize("name", ["bf16", "e4m3fn", "e5m2", "e4m3fnuz", "e5m2fnuz", *MX])
def test_properties_match_ml_dtypes_finfo(name):
    f = F.get(name)
    fi = ml_dtypes.finfo(f.dtype)
    assert f.max == float(fi.max)
    assert f.smallest_normal == float(fi.smallest_normal)
    assert f.smallest_subnormal == float(fi.smallest_subnormal)
    assert f.eps == float(fi.eps)
    assert f.bits == fi.bits
    assert f.precision == fi.nmant + 1


@pytest.mark.parametrize("name,dtype", [("fp16", np.float16), ("fp32", np.float32), ("fp64", np.float64)])
def test_properties_match_numpy_finfo(name, dtype):
    f = F.get(name)
    fi = np.finfo(dtype)
    assert (f.max, f.smallest_normal, f.smallest_subnormal, f.eps) == (
        float(fi.max), float(fi.smallest_normal), float(fi.smallest_subnormal), float(fi.eps))
    assert (f.emin, f.emax, f.bits) == (fi.minexp, fi.maxexp - 1, fi.bits)


def test_tf32_and_e8m13_properties():
    # TensorFloat-32: binary32's exponent range, binary16's precision (Fasi et al. 2021, Table 3)
    assert (F.tf32.precision, F.tf32.emin, F.tf32.emax) == (11, -126, 127)
    assert F.tf32.eps == 2**-10 and F.tf32.smallest_subnormal == 2**-136
    assert F.tf32.max == (2 - 2**-10) * 2.0**127
    assert (F.e8m13.precision, F.e8m13.max) == (14, (2 - 2**-13) * 2.0**127)


def test_aliases_and_errors():
    assert F.get("binary16") is F.fp16 and F.get("HALF") is F.fp16 and F.get("e4m3") is F.e4m3fn
    assert F.get("bfloat16") is F.bf16 and F.get("double") is F.fp64 and F.get("E5M2") is F.e5m2
    with pytest.raises(ValueError, match="did you mean.*fp16"):
        F.get("fp61")
    with pytest.raises(ValueError, match="unknown rounding mode"):
        RoundingMode.parse("sideways")
    assert RoundingMode.parse("rz") is RoundingMode.TowardZero
    assert RoundingMode.parse("TowardNegative") is RoundingMode.TowardNegative


# --- encode / decode -------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", SMALL + MX)
def test_every_code_decodes_like_the_storage_dtype(name):
    f = F.get(name)
    codes = np.arange(1 << f.bits, dtype=np.uint64)
    ours = F.decode(f, codes)
    storage = F.from_numpy(codes.astype(F.uint_dtype(f.dtype.itemsize * 8)).view(f.dtype))
    same = (ours == storage) & (np.signbit(ours) == np.signbit(storage))
    assert np.all(same | (np.isnan(ours) & np.isnan(storage)))
    finite = ~np.isnan(ours)
    assert np.array_equal(F.encode(f, ours[finite]), codes[finite])
    assert np.array_equal(F.to_numpy(f, ours[finite]).view(F.uint_dtype(f.dtype.itemsize * 8)),
                          codes[finite].astype(F.uint_dtype(f.dtype.itemsize * 8)))


def test_decode_refuses_codes_that_are_not_integers():
    """A code is a bit pattern: a fraction (was truncated: 3.5 decoded as code 3), NaN, infinity or a negative
    code is refused, naming it; integer dtypes and integral floats decode as the same code (ml_dtypes' bits)."""
    three = np.uint8(3).view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    for code in (3, np.uint8(3), 3.0, np.float32(3.0), np.array([3.0])):
        assert np.array_equal(np.atleast_1d(F.decode("e4m3fn", code)), [three])
    for code, shown in ((3.5, "3.5"), (np.nan, "nan"), (np.inf, "inf"), (-1, "-1"), ([1, 2.25], "2.25"),
                        (256.0, "256.0"), (np.array(["3"]), "'3'")):
        with pytest.raises(ValueError, match=rf"^decode: code {shown} is not a bit pattern of e4m3fn \(an integer "
                           r"from 0 to 255\)$"):
            F.decode("e4m3fn", code)


def test_nan_codes_keep_sign_and_payload():
    """An IEEE NaN code decodes to the float64 NaN numpy's own widening gives (payload left-aligned), quieted,
    and encodes back to its code, quieted; float64 NaNs move into narrower formats the same way."""
    codes = np.arange(0x7C01, 0x8000, dtype=np.uint64)
    codes = np.concatenate([codes, codes | np.uint64(0x8000)])  # every binary16 NaN, both signs
    widened = codes.astype(np.uint16).view(np.float16).astype(np.float64)  # numpy keeps signalling NaNs so
    quiet_bit = np.uint64(1 << 51)
    assert np.array_equal(F.decode("fp16", codes).view(np.uint64), widened.view(np.uint64) | quiet_bit)
    assert np.array_equal(F.encode("fp16", F.decode("fp16", codes)), codes | np.uint64(0x0200))
    assert F.encode("fp32", -np.nan) == 0xFFC00000 and F.encode("fp32", np.nan) == 0x7FC00000
    x = np.array([0xFFF0000020000001, 0x7FF0000000000001], dtype=np.uint64).view(np.float64)
    assert F.nan_codes("fp32", x).tolist() == [0xFFC00001, 0x7FC00000]  # bits below binary32's 23 dropped
    assert F.round("fp32", x).view(np.uint64).tolist() == [0xFFF8000020000000, 0x7FF8000000000000]
    with np.errstate(all="raise"):  # widening quiets signalling NaNs without a floating-point exception
        quiet = F.from_numpy(np.array([0x7F800001], dtype=np.uint32).view(np.float32))
        assert quiet.view(np.uint64).tolist() == [0x7FF8000020000000]
        assert F.from_numpy(x).view(np.uint64).tolist() == [0xFFF8000020000001, 0x7FF8000000000001]


def test_read_register_truncates_codes():
    """tf32 read from binary32 registers by truncation (the H100, data/hardware): the 13 low bits of the code
    go, so a NaN whose payload lies only there is an infinity; a float64 NaN is cut at its own width."""
    b32 = np.array([0x7F800001, 0xFF801FFF, 0x7F802000, 0x7FC00001, 0xFFA00000, 0x3F801FFF, 0xBF800001,
                    0x7F800000], dtype=np.uint32).view(np.float32)
    got = F.read_register("tf32", b32, "rz")
    assert got[:2].tolist() == [np.inf, -np.inf]
    assert np.isnan(got[2:5]).all() and np.signbit(got[4])
    assert got[5:].tolist() == [1.0, -1.0, np.inf]  # 1 + 8191 * 2^-23 and -(1 + 2^-23) lose their low bits
    b64 = np.array([0x7FF8000000000000, 0x7FF0000000000001, 0xFFF0000000200000, 0x7FF0040000000000],
                   dtype=np.uint64).view(np.float64)
    got = F.read_register("tf32", b64, "rz")  # tf32 keeps binary64 fraction bits 51..42
    assert np.isnan(got[0]) and got[1:3].tolist() == [np.inf, -np.inf] and np.isnan(got[3])
    assert np.isnan(F.read_register("tf32", b32[:1], "rne")).all()  # a rounding, not the unit's read


def test_encode_nan_and_bad_values():
    assert F.encode("fp16", np.nan) == 0x7E00
    assert F.encode("e4m3fn", [np.nan, -448.0]).tolist() == [0x7F, 0xFE]
    assert F.encode("e4m3fnuz", [np.nan, 0.0, -1.0]).tolist() == [0x80, 0x00, 0xC0]
    assert F.encode("tf32", [1.0, -2.0]).tolist() == [127 << 10, 1 << 18 | 128 << 10]  # 19-bit codes
    with pytest.raises(ValueError, match=r"index \(1,\).*fp16"):
        F.encode("fp16", [1.0, 0.1])
    with pytest.raises(ValueError, match="not representable"):
        F.encode("e4m3fn", np.inf)
    with pytest.raises(ValueError, match="not representable in e4m3fnuz"):
        F.encode("e4m3fnuz", -0.0)  # fnuz formats have no negative zero


# --- rounding: every code, midpoint and quarter point ---------------------------------------------------
def _points(f: F.Format, stride: int = 1) -> np.ndarray:
    """Finite values, midpoints and quarter points between neighbours, beyond max, below the smallest
    subnormal, both signs, specials."""
    codes = np.arange(1 << f.bits, dtype=np.uint64)
    v = np.unique(F.decode(f, codes))
    v = v[np.isfinite(v) & (v >= 0)][::stride]
    gaps = np.diff(v)
    ulp_max = 2.0 ** (f.emax - f.precision + 1)
    edges = [f.max + ulp_max / 4, f.max + ulp_max / 2, f.max + 3 * ulp_max / 4, f.max + ulp_max, 4 * f.max,
             f.smallest_subnormal / 2, f.smallest_subnormal / 4, 3 * f.smallest_subnormal / 4]
    pos = np.concatenate([v, v[:-1] + gaps / 2, v[:-1] + gaps / 4, v[:-1] + 3 * gaps / 4, edges])
    return np.concatenate([pos, -pos, [np.inf, -np.inf, np.nan]])


def _same(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return ((x == y) & (np.signbit(x) == np.signbit(y))) | (np.isnan(x) & np.isnan(y))


@pytest.mark.parametrize("name", SMALL)
def test_round_to_nearest_matches_numpy_and_ml_dtypes(name):
    f = F.get(name)
    pts = _points(f)
    ours = F.round(f, pts)
    with np.errstate(over="ignore"):
        if name == "fp16":
            theirs = pts.astype(np.float16).astype(np.float64)
        else:  # every point within float32's range is exact in float32, so the cast rounds once
            in_range = ~(np.abs(pts) > np.finfo(np.float32).max)
            assert np.all(_same(pts[in_range].astype(np.float32).astype(np.float64), pts[in_range]))
            theirs = F.from_numpy(pts.astype(np.float32).astype(f.dtype))
    bad = np.flatnonzero(~_same(ours, theirs))
    assert bad.size == 0, [(pts[i], ours[i], theirs[i]) for i in bad[:5]]


def _check_against_reference(f: F.Format, pts: np.ndarray, mode: RoundingMode, **kw) -> None:
    ours = F.round(f, pts, mode, **kw)
    overflow = "saturate" if kw.get("saturate") else "ieee"
    for x, got in zip(pts.tolist(), ours.tolist()):
        if not np.isfinite(x):
            continue
        want = reference.round_exact(f, Fraction(x), mode, negative=np.signbit(x),
                                     subnormals=kw.get("subnormals"), overflow=overflow)
        assert _same(np.float64(got), np.float64(want)), (f.name, mode, kw, x, got, want)


@pytest.mark.parametrize("name", ["e4m3fn", "e5m2", "e4m3fnuz", "e5m2fnuz"])
@pytest.mark.parametrize("mode", MODES)
def test_all_modes_match_reference_fp8_exhaustive(name, mode):
    f = F.get(name)
    pts = _points(f)
    _check_against_reference(f, pts, mode)
    _check_against_reference(f, pts, mode, subnormals=False)
    _check_against_reference(f, pts, mode, saturate=True)


@pytest.mark.parametrize("name", ["fp16", "bf16"])
@pytest.mark.parametrize("mode", MODES)
def test_all_modes_match_reference_16bit_subset(name, mode):
    f = F.get(name)
    _check_against_reference(f, _points(f, stride=61), mode)
    _check_against_reference(f, _points(f, stride=257), mode, subnormals=False)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["fp16", "bf16"])
@pytest.mark.parametrize("mode", MODES)
def test_all_modes_match_reference_16bit_exhaustive(name, mode):
    f = F.get(name)
    pts = _points(f)
    _check_against_reference(f, pts, mode)
    _check_against_reference(f, pts, mode, subnormals=False)


def test_round_hand_cases():
    # ties to even at 1 + 2^-11 (fp16), away from zero, directed modes, round to odd
    x = np.array([1 + 2**-11, 1 + 3 * 2**-11, -(1 + 2**-11)])
    assert F.round("fp16", x).tolist() == [1.0, 1 + 2**-9, -1.0]
    assert F.round("fp16", x, "rna").tolist() == [1 + 2**-10, 1 + 2**-9, -(1 + 2**-10)]
    assert F.round("fp16", x, "ru").tolist() == [1 + 2**-10, 1 + 2**-9, -1.0]
    assert F.round("fp16", x, "rd").tolist() == [1.0, 1 + 2**-10, -(1 + 2**-10)]
    assert F.round("fp16", x, "ro").tolist() == [1 + 2**-10, 1 + 2**-10, -(1 + 2**-10)]
    # overflow: RNE to infinity, RZ to max, fn formats to NaN, saturate to max
    assert F.round("fp16", [65520.0, -65520.0], "rne").tolist() == [np.inf, -np.inf]
    assert F.round("fp16", [65520.0, -1e9], "rz").tolist() == [65504.0, -65504.0]
    assert F.round("e4m3fn", 464.0) == 448.0  # the tie between 448 and (the unrepresentable) 480 goes even
    assert np.isnan(F.round("e4m3fn", 465.0))
    assert F.round("e4m3fn", 1e6, saturate=True) == 448.0
    # flushing: below the smallest normal goes to a signed zero, even when it would round up to it
    tiny = 2**-14 - 2**-26
    assert F.round("fp16", tiny).tolist() == 2**-14
    assert np.signbit(F.round("fp16", -tiny, subnormals=False)) and F.round("fp16", -tiny, subnormals=False) == 0
    # no negative zero in fnuz formats
    assert not np.signbit(F.round("e4m3fnuz", -2.0**-20))


def test_round_binary32_matches_numpy_cast():
    rng = np.random.default_rng(7)
    x = np.ldexp(rng.uniform(-1, 1, 200_000), rng.integers(-160, 130, 200_000))
    with np.errstate(over="ignore"):
        assert np.all(_same(F.round("fp32", x), x.astype(np.float32).astype(np.float64)))


@settings(max_examples=300, deadline=None)
@given(mag=st.integers(0, 2**63 - 1), exp=st.integers(-1200, 1100), negative=st.booleans(),
       mode=st.sampled_from(MODES), name=st.sampled_from(["fp32", "fp64", "tf32", "fp16", "e8m13", "e5m2"]),
       overflow=st.sampled_from(["ieee", "inf", "saturate"]))
def test_round_integer_matches_reference(mag, exp, negative, mode, name, overflow):
    f = F.get(name)
    got = F.round_integer(f, negative, mag, exp, mode, overflow=overflow)
    value = Fraction(mag) * Fraction(2) ** exp * (-1 if negative else 1)
    want = reference.round_exact(f, value, mode, negative=negative, overflow=overflow)
    assert _same(np.float64(got), np.float64(want))


def test_is_representable():
    assert F.is_representable("fp16", [1.0, 2**-24, 65504.0, np.inf, np.nan]).all()
    assert not F.is_representable("fp16", [0.1, 2**-25, 65536.0]).any()
    assert F.is_representable("tf32", [1 + 2**-10]).all() and not F.is_representable("tf32", [1 + 2**-11]).any()
    assert not F.is_representable("e4m3fn", [np.inf]).any()
    assert not F.is_representable("e4m3fnuz", [-0.0]).any()


@pytest.mark.parametrize("name", F.names())
def test_is_representable_by_storage_cast_equals_rounding(name):
    """The fast check (a cast to the storage dtype and back) against the general one (x == its own rounding
    toward zero), on every code's value and its float64 neighbours, binary32 bit patterns, specials."""
    fmt = F.get(name)
    rng = np.random.default_rng(11)
    vals = [np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e300, -1e-300, 2.0**-1074])]
    codes = np.arange(1 << min(fmt.bits, 16), dtype=np.uint64)
    if fmt.bits > 16:
        codes = rng.integers(0, 1 << min(fmt.bits, 63), size=60000, dtype=np.uint64)
        if name in ("tf32", "e8m13"):  # storage is binary32: draw binary32 patterns, some with low bits zero
            codes = codes & np.uint64(0xFFFFFFFF)
            codes[::2] &= np.uint64(~((1 << (24 - fmt.precision)) - 1) & 0xFFFFFFFF)
            v = np.frombuffer(codes.astype(np.uint32).tobytes(), np.float32).astype(np.float64)
            vals.append(v)
        else:
            vals.append(F.decode(fmt, codes & np.uint64((1 << fmt.bits) - 1)))
    else:
        vals.append(F.decode(fmt, codes))
    base = np.concatenate(vals)
    with np.errstate(over="ignore"):
        x = np.concatenate([base, np.nextafter(base, np.inf), np.nextafter(base, -np.inf), base * 3.0, base / 3.0,
                            rng.standard_normal(20000) * 2.0 ** rng.integers(-160, 160, 20000)])
    fast = F._storage_round_trip(fmt, x)
    assert fast is not None, "every registered format has a storage type that decides it"
    with np.errstate(over="ignore"):
        slow = F._representable_by_rounding(fmt, x)
    assert np.array_equal(fast, slow), x[fast != slow][:5]


@pytest.mark.parametrize("name", ["fp64", "fp32", "tf32", "bf16", "fp16", "e4m3fn", "e5m2", "e4m3fnuz", "e8m13"])
@pytest.mark.parametrize("mode", list(RoundingMode))
def test_round_fraction_matches_reference(name, mode):
    """formats.round_fraction (62 bits and a sticky bit) against the reference's exact rounding, on rationals
    with long expansions, near ties, below the smallest subnormal and beyond the largest value."""
    from fractions import Fraction

    from blockfma.reference import round_exact

    fmt = F.get(name)
    rng = np.random.default_rng(3)
    xs = [Fraction(1, 3), Fraction(-2, 3), Fraction(10**40 + 1, 10**40), Fraction(1, 10**400), -Fraction(10**400)]
    for _ in range(300):
        e = int(rng.integers(fmt.emin - fmt.precision - 3, fmt.emax + 3))
        m = int(rng.integers(1, 1 << 62))
        x = Fraction(m, 1 << 61) * (Fraction(2) ** e)
        if rng.random() < 0.3:  # near a tie of the format: half an ulp, nudged by a tiny odd amount
            x = Fraction(2 * int(rng.integers(1, 1 << fmt.precision)) + 1, 2) * Fraction(2) ** (e - fmt.precision)
            x += Fraction(int(rng.integers(-1, 2)), 3 * 10**30)
        xs.append(-x if rng.random() < 0.5 else x)
    for x in xs:
        got, want = F.round_fraction(fmt, x, mode), round_exact(fmt, x, mode)
        if want != want:  # formats without infinities overflow to NaN (its sign means nothing)
            assert got != got, (x, got)
        else:
            assert got == want and np.signbit(got) == np.signbit(want), (x, got, want)


# --- bit views, storage, the A*B reader --------------------------------------------------------------------
ONE_CODES = {"fp64": 0x3FF0000000000000, "fp32": 0x3F800000, "tf32": 0x3F800000, "e8m13": 0x3F800000,
             "bf16": 0x3F80, "fp16": 0x3C00, "e4m3fn": 0x38, "e5m2": 0x3C, "e4m3fnuz": 0x40, "e5m2fnuz": 0x40,
             "e2m1fn": 0x2, "e3m2fn": 0xC, "e2m3fn": 0x8, "e8m0fnu": 0x7F, "ue4m3": 0x38}


@pytest.mark.parametrize("name", list(ONE_CODES))
def test_bits_round_trips_every_width(name):
    """formats.bits views any storage dtype (numpy and the ml_dtypes fp8/bf16 types) as the unsigned
    integers of its width, without a copy; the oracle is the raw bytes read as integers."""
    dtype = F.get(name).dtype
    size = dtype.itemsize
    raw = np.random.default_rng(size).integers(0, 256, size=64 * size, dtype=np.uint8)
    x = raw.view(dtype)
    u = F.bits(x)
    assert u.dtype == np.dtype(f"uint{8 * size}") and u.dtype.type is F.uint_dtype(8 * size)
    want = [int.from_bytes(raw[i * size:(i + 1) * size].tobytes(), sys.byteorder) for i in range(64)]
    assert [int(v) for v in u] == want
    assert np.shares_memory(u, x) and u.view(dtype).tobytes() == x.tobytes()
    assert int(F.bits(F.to_numpy(name, [1.0]))[0]) == ONE_CODES[name]  # a scalar code known by heart


def test_uint_dtype_refuses_widths_numpy_lacks():
    assert F.uint_dtype(8) is np.uint8 and F.uint_dtype(64) is np.uint64
    with pytest.raises(ValueError, match=r"bits=12.*8, 16, 32 and 64"):
        F.uint_dtype(12)


def test_storage_is_the_tf32_in_binary32_rule():
    assert F.storage("tf32") is F.fp32 and F.storage_mask("tf32") == 0xFFFFE000
    assert F.storage("e8m13") is F.fp32 and F.storage_mask("e8m13") == 0xFFFFFC00
    for name in ("fp64", "fp32", "bf16", "fp16", "e4m3fn", "e5m2fnuz"):
        f = F.get(name)
        assert F.storage(f) is f and F.storage_mask(f) == (1 << f.bits) - 1
    tf32 = struct.unpack("<I", struct.pack("<f", 1 + 2.0**-10))[0]  # a tf32 value: the low 13 bits are zero
    not_tf32 = struct.unpack("<I", struct.pack("<f", 1 + 2.0**-11))[0]
    assert tf32 & ~F.storage_mask("tf32") & 0xFFFFFFFF == 0 and not_tf32 & ~F.storage_mask("tf32") != 0
    odd = F.Format("odd", 5, 8, 15, dtype_name="float32")  # float32 codes do not hold a 5-bit exponent
    with pytest.raises(ValueError, match=r"storage: the float32 codes of format 'odd'"):
        F.storage(odd)
    assert F.is_representable(odd, [1.0, 1 + 2.0**-7, 1 + 2.0**-8]).tolist() == [True, True, False]


@pytest.mark.parametrize("spec", ["e4m3fn*e5m2", " e4m3 * e5m2 ", ("e4m3fn", "e5m2"), ["float8_e4m3fn", F.e5m2],
                                  (F.e4m3fn, "e5m2")])
def test_pair_reads_a_and_b(spec):
    assert F.pair(spec) == (F.e4m3fn, F.e5m2)
    assert F.pair_name(*F.pair(spec)) == "e4m3fn*e5m2"


def test_pair_of_one_format_and_its_name():
    assert F.pair("fp16") == (F.fp16, F.fp16) and F.pair(F.bf16) == (F.bf16, F.bf16)
    assert F.pair("half*fp16") == (F.fp16, F.fp16)
    assert F.pair_name("half") == F.pair_name("fp16", "binary16") == "fp16"


@pytest.mark.parametrize("spec", ["fp16*", "*fp16", "fp16*fp16*fp16", " * "])
def test_pair_refuses_a_half_written_pair(spec):
    with pytest.raises(ValueError, match=r"input_format .*: write one format \('fp16'\) or A's and B's joined by "
                                         r"one '\*' \('e4m3fn\*e5m2'\)"):
        F.pair(spec)


def test_pair_refuses_other_lengths_and_unknown_names():
    with pytest.raises(ValueError, match=r"one format or a pair \(A's, B's\), not \('fp16',\)"):
        F.pair(("fp16",))
    with pytest.raises(ValueError, match=r"unknown format 'fp17'"):
        F.pair("fp16*fp17")
