"""Binary floating-point formats and exact, vectorised rounding to them.

One frozen :class:`Format` describes a format (precision, exponent range, how it encodes infinities and
NaNs, whether it has subnormals); named presets live in a registry with aliases (``fp16``, ``binary16``,
``half``, ...).  The functions below are pure and take the format first, in the style of gfloat: rounding
(:func:`round` of float64 arrays, :func:`round_integer` of exact integer-encoded values, which the engine
uses for wide fixed-point sums), bit patterns (:func:`encode`, :func:`decode`, :func:`bits`, :func:`storage`),
checks and conversions of storage arrays (:func:`is_representable`, :func:`to_numpy`, :func:`from_numpy`),
and A's and B's formats read and named (:func:`pair`, :func:`pair_name`).

Values travel as float64 throughout: every value of every format here (up to binary64) is a float64.
"""

from __future__ import annotations

import difflib
import enum
from dataclasses import dataclass, field
from typing import Any, Literal

from fractions import Fraction

import numpy as np

__all__ = ["holds_codes", "of_dtype", "RoundingMode", "Format", "get", "names", "pair", "pair_name", "storage",
           "storage_mask", "uint_dtype", "bits", "round", "round_integer", "encode", "decode", "is_representable",
           "to_numpy", "from_numpy", "read_register", "quiet_nans", "cut_nans", "nan_codes", "bit_length", "fp64",
           "fp32", "tf32", "bf16", "fp16", "e4m3fn", "e5m2", "e4m3fnuz", "e5m2fnuz", "e8m13", "e2m1fn", "e3m2fn",
           "e2m3fn", "e8m0fnu", "ue4m3", "pack", "unpack"]


class RoundingMode(enum.Enum):
    """Rounding-direction attributes of IEEE 754-2019 (sec. 4.3), plus round-to-odd.

    ``ToOdd`` (von Neumann rounding, "jamming") truncates and sets the last kept bit when anything
    nonzero was dropped; Arm's BFDOT with FPCR.EBF = 0 uses it.
    """

    TiesToEven = "rne"
    TiesAway = "rna"
    TowardZero = "rz"
    TowardPositive = "ru"
    TowardNegative = "rd"
    ToOdd = "ro"

    @classmethod
    def parse(cls, value: RoundingMode | str) -> RoundingMode:
        """Accept a member, its IEEE name or a short name (rne, rz, ru, rd, rna, ro, ...)."""
        if isinstance(value, cls):
            return value
        key = str(value).strip().lower().replace("-", "").replace("_", "")
        for member in cls:
            if key == member.name.lower() or key in _MODE_ALIASES[member]:
                return member
        known = sorted({a for aliases in _MODE_ALIASES.values() for a in aliases} | {m.name for m in cls})
        raise ValueError(f"unknown rounding mode {value!r}; use one of {', '.join(known)}")


_MODE_ALIASES = {
    RoundingMode.TiesToEven: {"rne", "rn", "nearest", "nearesteven", "tiestoeven", "even"},
    RoundingMode.TiesAway: {"rna", "tiesaway", "nearestaway", "away"},
    RoundingMode.TowardZero: {"rz", "rtz", "zero", "towardzero", "truncate", "trunc", "chop"},
    RoundingMode.TowardPositive: {"ru", "rup", "up", "towardpositive", "ceil", "ceiling", "rp"},
    RoundingMode.TowardNegative: {"rd", "rdn", "down", "towardnegative", "floor", "rm"},
    RoundingMode.ToOdd: {"ro", "odd", "toodd", "roundtoodd", "jam"},
}

NaNEncoding = Literal["ieee", "fn", "fnuz", "none"]
Overflow = Literal["ieee", "inf", "saturate"]


@dataclass(frozen=True)
class Format:
    """A binary floating-point format.

    ``precision`` counts the significand bits including the implicit bit (p = 11 for binary16). ``nan`` says how NaN is
    encoded: ``"ieee"`` (all-ones exponent, nonzero fraction; infinities have a zero fraction), ``"fn"`` (finite-only:
    only the all-ones code is NaN, e.g. e4m3fn) or ``"fnuz"`` (finite, unsigned zero: the negative-zero code 0x80 is the
    only NaN, e.g. e4m3fnuz) or ``"none"`` (no NaN and no infinities: every code is a number, e.g. the OCP MX element
    formats e2m1fn, e3m2fn, e2m3fn). ``signed=False``: no sign bit (the scale formats e8m0fnu and ue4m3; ``bits`` is one
    less), so negative values have no code.  ``has_zero=False``: the exponent field 0 is an ordinary binade (e8m0fnu:
    2**-127), so no code is zero and there are no subnormals.
    """

    name: str
    exponent_bits: int
    precision: int
    bias: int
    nan: NaNEncoding = "ieee"
    subnormals: bool = True
    dtype_name: str = "float32"
    aliases: tuple[str, ...] = field(default=(), compare=False)
    description: str = field(default="", compare=False)
    signed: bool = True
    has_zero: bool = True

    def __post_init__(self) -> None:
        if self.exponent_bits < 1 or self.precision < 1:
            raise ValueError(f"format {self.name!r}: exponent_bits and precision must be positive")
        if self.nan not in ("ieee", "fn", "fnuz", "none"):
            raise ValueError(f"format {self.name!r}: nan must be 'ieee', 'fn', 'fnuz' or 'none', not {self.nan!r}")
        if not self.has_zero and self.subnormals:
            raise ValueError(f"format {self.name!r}: has_zero=False makes the exponent field 0 a normal binade, so "
                             "there are no subnormals; pass subnormals=False")
        if not self.signed and self.nan not in ("ieee", "fn"):
            raise ValueError(f"format {self.name!r}: an unsigned format needs a NaN code (nan='ieee' or 'fn') for "
                             f"negative values, which it cannot hold; nan={self.nan!r} has none")
        if self.precision > 53 or self.emax > 1023 or self.emin - self.precision + 1 < -1074:
            raise ValueError(f"format {self.name!r} does not fit in float64, which carries all values here")

    # --- finfo-style properties -------------------------------------------------------------------
    @property
    def bits(self) -> int:
        """Storage width: sign (where the format is signed), exponent and fraction bits."""
        return int(self.signed) + self.exponent_bits + self.fraction_bits

    @property
    def fraction_bits(self) -> int:
        return self.precision - 1

    @property
    def has_infinities(self) -> bool:
        return self.nan == "ieee"

    @property
    def has_nan(self) -> bool:
        return self.nan != "none"

    @property
    def has_negative_zero(self) -> bool:
        return self.signed and self.has_zero and self.nan != "fnuz"

    @property
    def emin(self) -> int:
        """Exponent of the smallest normal number (the exponent field 1, or 0 where no code is zero)."""
        return (1 if self.has_zero else 0) - self.bias

    @property
    def emax(self) -> int:
        """Exponent of the largest finite number."""
        top = (1 << self.exponent_bits) - 1
        # IEEE formats give the top binade to infinities and NaNs; fn formats only its all-ones code, which is
        # the whole binade where there are no fraction bits (e8m0fnu: 0xFF is NaN)
        lost = self.nan == "ieee" or (self.nan == "fn" and self.fraction_bits == 0)
        return top - int(lost) - self.bias

    @property
    def max(self) -> float:
        """Largest finite value."""
        ulps = 2 if self.nan == "fn" and self.fraction_bits > 0 else 1  # fn: the all-ones significand is NaN
        return float(np.ldexp((1 << self.precision) - ulps, self.emax - self.precision + 1))

    @property
    def eps(self) -> float:
        """Distance from 1 to the next larger number, 2**(1 - p)."""
        return float(np.ldexp(1.0, 1 - self.precision))

    @property
    def smallest_normal(self) -> float:
        return float(np.ldexp(1.0, self.emin))

    @property
    def smallest_subnormal(self) -> float:
        """Smallest positive value (the smallest normal where the format has no subnormals)."""
        if not self.subnormals:
            return self.smallest_normal
        return float(np.ldexp(1.0, self.emin - self.precision + 1))

    @property
    def dtype(self) -> np.dtype:
        """The numpy storage dtype (ml_dtypes types for bf16, fp8, fp6, fp4 and e8m0; float32 holds tf32 and
        e8m13, float8_e4m3fn holds ue4m3)."""
        return _dtype(self.dtype_name)

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"Format({self.name!r}, p={self.precision}, emin={self.emin}, emax={self.emax})"


def _dtype(name: str) -> np.dtype:
    if hasattr(np, name) and name.startswith("float"):
        return np.dtype(getattr(np, name))
    import ml_dtypes

    return np.dtype(getattr(ml_dtypes, name))


# --- registry ------------------------------------------------------------------------------------------
fp64 = Format("fp64", 11, 53, 1023, dtype_name="float64", aliases=("binary64", "double", "float64", "f64"),
              description="IEEE 754 binary64")
fp32 = Format("fp32", 8, 24, 127, dtype_name="float32", aliases=("binary32", "single", "float32", "f32"),
              description="IEEE 754 binary32")
tf32 = Format("tf32", 8, 11, 127, dtype_name="float32", aliases=("tensorfloat32", "tensorfloat-32", "xf32"),
              description="NVIDIA TensorFloat-32: binary32 range, binary16 precision (stored in float32)")
bf16 = Format("bf16", 8, 8, 127, dtype_name="bfloat16", aliases=("bfloat16", "brainfloat16"), description="bfloat16")
fp16 = Format("fp16", 5, 11, 15, dtype_name="float16", aliases=("binary16", "half", "float16", "f16"),
              description="IEEE 754 binary16")
e4m3fn = Format("e4m3fn", 4, 4, 7, nan="fn", dtype_name="float8_e4m3fn",
                aliases=("e4m3", "float8_e4m3fn", "fp8_e4m3", "fp8e4m3", "ocp_e4m3"),
                description="OCP FP8 E4M3 (no infinities, one NaN per sign)")
e5m2 = Format("e5m2", 5, 3, 15, dtype_name="float8_e5m2", aliases=("float8_e5m2", "fp8_e5m2", "fp8e5m2", "ocp_e5m2"),
              description="OCP FP8 E5M2 (IEEE-like)")
e4m3fnuz = Format("e4m3fnuz", 4, 4, 8, nan="fnuz", dtype_name="float8_e4m3fnuz",
                  aliases=("float8_e4m3fnuz", "fp8_e4m3fnuz"),
                  description="FP8 E4M3 of AMD MI300 (bias 8, no infinities, no negative zero)")
e5m2fnuz = Format("e5m2fnuz", 5, 3, 16, nan="fnuz", dtype_name="float8_e5m2fnuz",
                  aliases=("float8_e5m2fnuz", "fp8_e5m2fnuz"),
                  description="FP8 E5M2 of AMD MI300 (bias 16, no infinities, no negative zero)")
e8m13 = Format("e8m13", 8, 14, 127, dtype_name="float32", aliases=("fp32_e8m13",),
               description="binary32 with 13 fraction bits kept: the fp8 accumulator output of Ada and Hopper "
                           "tensor cores (stored in float32)")

# OCP Microscaling Formats (MX) Specification v1.0, sec. 5.3: the element formats FP6 (E3M2, E2M3) and FP4
# (E2M1) have no infinities and no NaN; sec. 5.4: the scale format E8M0 is unsigned, has no zero and one NaN
# (0xFF).  ue4m3 is the scale of NVFP4 (PTX ISA, "Block Scaling for mma.sync" / tcgen05.mma block scale: an
# unsigned e4m3, 7 bits).  ml_dtypes spells the first four float4_e2m1fn, float6_e3m2fn, float6_e2m3fn and
# float8_e8m0fnu and holds their codes in the low bits of a byte.
e2m1fn = Format("e2m1fn", 2, 2, 1, nan="none", dtype_name="float4_e2m1fn",
                aliases=("e2m1", "float4_e2m1fn", "fp4", "fp4_e2m1", "mxfp4_e2m1"),
                description="OCP MX FP4 E2M1 (no infinities, no NaN; largest value 6)")
e3m2fn = Format("e3m2fn", 3, 3, 3, nan="none", dtype_name="float6_e3m2fn",
                aliases=("e3m2", "float6_e3m2fn", "fp6_e3m2", "mxfp6_e3m2"),
                description="OCP MX FP6 E3M2 (no infinities, no NaN; largest value 28)")
e2m3fn = Format("e2m3fn", 2, 4, 1, nan="none", dtype_name="float6_e2m3fn",
                aliases=("e2m3", "float6_e2m3fn", "fp6_e2m3", "mxfp6_e2m3"),
                description="OCP MX FP6 E2M3 (no infinities, no NaN; largest value 7.5)")
e8m0fnu = Format("e8m0fnu", 8, 1, 127, nan="fn", subnormals=False, dtype_name="float8_e8m0fnu",
                 aliases=("e8m0", "ue8m0", "float8_e8m0fnu"), signed=False, has_zero=False,
                 description="OCP MX scale E8M0: the powers of two 2**-127 to 2**127, no sign, no zero, NaN 0xFF")
ue4m3 = Format("ue4m3", 4, 4, 7, nan="fn", dtype_name="float8_e4m3fn", aliases=("e4m3fnu",), signed=False,
               description="unsigned E4M3 (7 bits, NaN 0x7F, largest value 448): NVFP4's block scale "
                           "(held in float8_e4m3fn codes with the sign bit zero)")

_REGISTRY: dict[str, Format] = {}
for _f in (fp64, fp32, tf32, bf16, fp16, e4m3fn, e5m2, e4m3fnuz, e5m2fnuz, e8m13, e2m1fn, e3m2fn, e2m3fn, e8m0fnu,
           ue4m3):
    for _key in (_f.name, *_f.aliases):
        _REGISTRY[_key.lower()] = _f


def names() -> list[str]:
    """Canonical names of the registered formats."""
    return list(dict.fromkeys(f.name for f in _REGISTRY.values()))


def get(fmt: Format | str) -> Format:
    """Look up a format by name or alias (case-insensitive); a Format passes through."""
    if isinstance(fmt, Format):
        return fmt
    key = str(fmt).strip().lower()
    if key in _REGISTRY:
        return _REGISTRY[key]
    close = difflib.get_close_matches(key, list(_REGISTRY), n=4, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise ValueError(f"unknown format {fmt!r}{hint} (known: {', '.join(names())})")


def pair(spec: Format | str | tuple[Format | str, Format | str] | list[Format | str]) -> tuple[Format, Format]:
    """A's and B's formats: one format for both (``"fp16"``), ``"A*B"`` (``"e4m3fn*e5m2"``) or a pair
    (A's, B's) of names or Formats.  The one reader of the inputs' formats."""
    if isinstance(spec, (tuple, list)):
        if len(spec) != 2:
            raise ValueError(f"input_format takes one format or a pair (A's, B's), not {spec!r}")
        return get(spec[0]), get(spec[1])
    if isinstance(spec, str) and "*" in spec:
        a, b = spec.split("*", 1)
        if not a.strip() or not b.strip() or "*" in b:
            raise ValueError(f"input_format {spec!r}: write one format ('fp16') or A's and B's joined by one '*' "
                             "('e4m3fn*e5m2')")
        return get(a), get(b)
    f = get(spec)
    return f, f


def pair_name(a: Format | str, b: Format | str | None = None) -> str:
    """The inputs' name as models are filed: ``"fp16"`` where A and B share a format (or ``b`` is None),
    ``"e4m3fn*e5m2"`` where they differ.  The one writer of :func:`pair`'s text."""
    a = get(a)
    b = a if b is None else get(b)
    return a.name if a == b else f"{a.name}*{b.name}"


def _held_in(fmt: Format) -> Format | None:
    """The registered format of ``fmt.dtype`` where its codes hold ``fmt``'s values (same exponent field,
    bias, NaN encoding and zero, at least ``fmt``'s precision, a sign bit where ``fmt`` has one), else None."""
    held = _REGISTRY.get(fmt.dtype_name.lower())
    if held is None or held.exponent_bits != fmt.exponent_bits or held.bias != fmt.bias or held.nan != fmt.nan \
            or held.precision < fmt.precision or held.has_zero != fmt.has_zero or (fmt.signed and not held.signed):
        return None
    return held


def storage(fmt: Format | str) -> Format:
    """The format whose codes carry ``fmt``'s values in its numpy dtype: fp32 for tf32 and e8m13 (binary32
    codes whose low fraction bits are zero, :func:`storage_mask`: tf32 values in fp32 registers), ``fmt``
    itself for a format that is its dtype's own (fp16, bf16, e4m3fn, ...).  The one statement of that rule."""
    fmt = get(fmt)
    held = _held_in(fmt)
    if held is None:
        raise ValueError(f"storage: the {fmt.dtype_name} codes of format {fmt.name!r} are not those of a registered "
                         "format with its exponent field, bias and NaN encoding; give the Format a dtype_name whose "
                         f"codes hold its values (known formats: {', '.join(names())})")
    return held


def storage_mask(fmt: Format | str) -> int:
    """The code bits of :func:`storage` (``fmt``) that values of ``fmt`` may set: 0xFFFFE000 for tf32 (binary32
    with the low 13 fraction bits zero), 0x7F for ue4m3 (e4m3fn codes without the sign bit), all ``fmt.bits``
    ones for a format stored as itself."""
    fmt = get(fmt)
    held = storage(fmt)
    mask = ((1 << held.bits) - 1) ^ ((1 << (held.precision - fmt.precision)) - 1)
    if held.signed and not fmt.signed:
        mask &= ~(1 << (held.bits - 1))
    return mask


_UINTS = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}


def uint_dtype(bits: int) -> type[np.unsignedinteger]:
    """The numpy unsigned integer type of ``bits`` bits (8, 16, 32 or 64): what codes that wide are held in."""
    if bits not in _UINTS:
        raise ValueError(f"uint_dtype: bits={bits!r}; numpy has unsigned integers of 8, 16, 32 and 64 bits")
    return _UINTS[bits]


def bits(x: Any) -> np.ndarray:
    """The bit patterns of a float array (numpy or ml_dtypes: float64 to the fp8 types) as the unsigned
    integers of its own width, a view (no copy): for bit-for-bit comparisons and reading codes."""
    x = np.asarray(x)
    return x.view(uint_dtype(x.dtype.itemsize * 8))


# --- exact rounding --------------------------------------------------------------------------------------
def bit_length(mag: np.ndarray) -> np.ndarray:
    """Bit length of non-negative int64 values (0 for 0), exactly, elementwise."""
    mag = np.asarray(mag, dtype=np.int64)
    _, e = np.frexp(mag.astype(np.float64))
    e = e.astype(np.int64)
    # float64 conversion may round up to the next power of two: correct that case
    shift = np.minimum(np.maximum(e - 1, 0), 63)
    too_big = (mag > 0) & ((mag >> shift) == 0)
    return np.where(too_big, e - 1, e)


def overflow_to_infinity(mode: RoundingMode, overflow: Overflow) -> tuple[bool, bool]:
    """(positive, negative): whether a result beyond the largest finite value becomes an infinity (else the largest
    finite value), for positive and for negative results, under ``overflow`` (see :func:`round_integer`)."""
    if overflow == "saturate":
        return False, False
    if overflow == "inf" or mode in (RoundingMode.TiesToEven, RoundingMode.TiesAway):
        return True, True
    return mode is RoundingMode.TowardPositive, mode is RoundingMode.TowardNegative


def signed_result(xp: Any, fmt: Format, magnitude: Any, negative: Any, tiny: Any, mode: RoundingMode,
                  overflow: Overflow, *, subnormals: bool) -> Any:
    """The last steps of every rounding to ``fmt`` (one place for all of them): ``magnitude`` (float64, the rounded |x|)
    beyond the largest finite value becomes an infinity or the largest finite value as :func:`overflow_to_infinity` says
    (NaN for formats without infinities, the largest finite value for formats without NaN either: they saturate, as the
    OCP MX spec v1.0 sec. 5.3.3 and ml_dtypes convert); with ``subnormals=False`` a result whose exact magnitude was
    below the smallest normal (``tiny``) becomes zero; in a format without zero (e8m0fnu) such a result is the smallest
    value instead, and an exact zero NaN (as ml_dtypes converts); then the sign: +0 for formats without -0, NaN for a
    negative nonzero result in an unsigned format.  ``xp`` is the array module (numpy or torch)."""
    pos_inf, neg_inf = overflow_to_infinity(mode, overflow)
    to_inf = (negative & neg_inf) | (~negative & pos_inf)
    big = float("inf") if fmt.has_infinities else float("nan") if fmt.has_nan else fmt.max
    v = xp.where(magnitude > fmt.max, xp.where(to_inf, big, xp.full_like(magnitude, fmt.max)), magnitude)
    if not subnormals:
        v = xp.where(tiny, 0.0, v)
    if not fmt.has_zero:
        v = xp.where(v == 0, xp.where(tiny, fmt.smallest_subnormal, float("nan")), v)
    v = xp.where(negative, -v, v)
    if not fmt.has_negative_zero:
        v = xp.where(v == 0, 0.0, v)
    if not fmt.signed:
        v = xp.where(v < 0, float("nan"), v)
    return v


def _round_kept(mode: RoundingMode, keep: np.ndarray, sign: np.ndarray, above: np.ndarray, tie: np.ndarray,
                inexact: np.ndarray) -> np.ndarray:
    """The kept integer significands rounded in mode, given where the dropped bits are above half a unit
    (``above``), exactly half (``tie``) or not zero (``inexact``)."""
    if mode is RoundingMode.ToOdd:
        return keep | inexact.astype(np.int64)
    if mode is RoundingMode.TiesToEven:
        up = above | (tie & ((keep & 1) == 1))
    elif mode is RoundingMode.TiesAway:
        up = above | tie
    elif mode is RoundingMode.TowardZero:
        up = np.zeros_like(inexact)
    elif mode is RoundingMode.TowardPositive:
        up = inexact & ~sign
    else:  # TowardNegative
        up = inexact & sign
    return keep + up.astype(np.int64)


def round_integer(
    fmt: Format | str,
    sign: Any,
    mag: Any,
    exp: Any,
    mode: RoundingMode | str = RoundingMode.TiesToEven,
    *,
    subnormals: bool | None = None,
    overflow: Overflow = "ieee",
) -> np.ndarray:
    """Round the exact values ``(-1)**sign * mag * 2**exp`` to ``fmt``; returns float64.

    ``mag`` holds non-negative integers below 2**63 (int64), ``exp`` integer exponents, ``sign`` booleans; all broadcast
    together.  One rounding, in ``mode``.  With ``subnormals=False`` (default: the format's own setting) a result whose
    exact magnitude is below the smallest normal is flushed to a zero of the same sign (tininess detected before
    rounding, as Arm's flush-to-zero does).  ``overflow`` says what a result beyond the largest finite value becomes:
    ``"ieee"`` follows IEEE 754 (sec. 7.4: infinity in TiesToEven and TiesAway and in the directed mode pointing away
    from zero, the largest finite value otherwise); ``"inf"`` always gives infinity (NVIDIA tensor cores, even when
    truncating); ``"saturate"`` always gives the largest finite value.  Formats without infinities give NaN where
    infinity is due.
    """
    fmt = get(fmt)
    mode = RoundingMode.parse(mode)
    if overflow not in ("ieee", "inf", "saturate"):
        raise ValueError(f"overflow must be 'ieee', 'inf' or 'saturate', not {overflow!r}")
    sign, mag, exp = np.broadcast_arrays(np.asarray(sign, dtype=bool), np.asarray(mag, dtype=np.int64),
                                         np.asarray(exp, dtype=np.int64))
    if np.any(mag < 0):
        raise ValueError("round_integer: mag must be non-negative (pass the sign separately)")
    keep_subnormals = fmt.subnormals if subnormals is None else subnormals
    p = fmt.precision

    nbits = bit_length(mag)
    lead = exp + nbits - 1  # exponent of the leading bit
    quantum = (np.maximum(lead, fmt.emin) if keep_subnormals else lead) - (p - 1)
    drop = quantum - exp  # number of low bits to remove (<= 0: exact already)

    d = np.minimum(np.maximum(drop, 0), 63)
    keep = np.where(drop >= 64, 0, mag >> d)
    rem = mag - (keep << d)
    half = np.where(d > 0, np.int64(1) << np.maximum(d - 1, 0), 0)
    wide = drop >= 64  # everything dropped, and the half-way point lies above mag
    above = np.where(wide, False, rem > half) & (drop > 0)
    tie = np.where(wide, False, rem == half) & (drop > 0)
    inexact = rem != 0
    keep = _round_kept(mode, keep, sign, above, tie, inexact)
    scale = np.where(drop > 0, quantum, exp)
    with np.errstate(over="ignore"):
        # exponents beyond +-2000 give 0 or infinity either way; the clip keeps them from wrapping in int32
        value = np.ldexp(keep.astype(np.float64), np.clip(scale, -2000, 2000).astype(np.int32))

    return signed_result(np, fmt, value, sign, (mag > 0) & (lead < fmt.emin), mode, overflow,
                         subnormals=keep_subnormals)


def round_fraction(fmt: Format | str, x: Fraction | int, mode: RoundingMode | str = RoundingMode.TiesToEven,
                   *, subnormals: bool | None = None) -> float:
    """Round one exact rational ``x`` to ``fmt`` in ``mode`` (one rounding, no detour through binary64).

    The magnitude is cut to 62 significant bits plus a sticky bit, which decides every rounding mode of a format of at
    most 53 bits; :func:`round_integer` does the rest (subnormals, overflow as IEEE 754). A zero gives +0."""
    x = Fraction(x)
    if x == 0:
        return 0.0 if get(fmt).has_zero else float("nan")
    num, den = abs(x.numerator), x.denominator
    shift = 61 - (num.bit_length() - den.bit_length())  # x * 2**shift lies in [2**60, 2**62)
    scaled, rest = divmod(num << shift, den) if shift >= 0 else divmod(num, den << -shift)
    mag, exp = 2 * scaled + (rest != 0), -shift - 1  # the sticky bit below the 62 kept ones
    return float(round_integer(fmt, x < 0, mag, exp, mode, subnormals=subnormals))


def _decompose(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Split finite float64 values into (sign, integer magnitude < 2**53, exponent), exactly."""
    frac, e = np.frexp(np.abs(x))
    mag = np.ldexp(frac, 53).astype(np.int64)
    return np.signbit(x), mag, e.astype(np.int64) - 53


def round(
    fmt: Format | str,
    x: Any,
    mode: RoundingMode | str = RoundingMode.TiesToEven,
    *,
    subnormals: bool | None = None,
    saturate: bool = False,
) -> np.ndarray:
    """Round float64 values to ``fmt`` in ``mode``; returns float64 values of ``fmt`` (same shape).

    NaN stays NaN, quiet, with its sign and the leading payload bits ``fmt`` holds (an IEEE conversion:
    :func:`cut_nans`); infinities stay infinite where ``fmt`` has them, else become NaN (or the largest
    finite value with ``saturate=True``, or where ``fmt`` has no NaN either).  See :func:`round_integer` for
    subnormals and overflow, and :func:`signed_result` for formats without sign or zero.

    A format without NaN (e2m1fn, e3m2fn, e2m3fn) has no code for a NaN: it stays a float64 NaN here, which
    :func:`encode` and :func:`to_numpy` refuse (ml_dtypes turns it into a zero; the OCP MX spec v1.0 leaves
    it to the implementation).  Its overflow saturates in every mode.
    """
    fmt = get(fmt)
    arr = np.asarray(x)
    if arr.dtype.kind == "O":  # exact numbers (ints, Fractions): one rounding each, no detour through float64
        return _round_objects(fmt, arr, RoundingMode.parse(mode), subnormals, saturate)
    x = np.asarray(arr, dtype=np.float64)
    finite = np.isfinite(x)
    sign, mag, exp = _decompose(np.where(finite, x, 0.0))
    out = round_integer(fmt, sign, mag, exp, mode, subnormals=subnormals, overflow="saturate" if saturate else "ieee")
    out = np.where(np.signbit(x) & (out == 0) & fmt.has_negative_zero, -0.0, out)
    if not np.all(finite):
        inf_value = np.where(np.signbit(x), -1.0, 1.0) * (
            np.inf if fmt.has_infinities else (fmt.max if saturate or not fmt.has_nan else np.nan))
        if not fmt.signed:
            inf_value = np.where(inf_value < 0, np.nan, inf_value)
        out = np.where(np.isinf(x), inf_value, out)
        out = np.where(np.isnan(x), cut_nans(fmt, x), out)
    return out


# --- NaN payloads --------------------------------------------------------------------------------------
# A NaN travels in float64 with its payload left-aligned, the way IEEE 754 (sec. 6.2.3) and every common
# conversion move it between binary formats: the quiet bit (the fraction's top bit) onto the quiet bit, the
# rest below it, bits the narrower format lacks dropped.  NaNs are carried quiet: a signalling NaN would
# raise the invalid flag in the first cast or arithmetic it met.
_QUIET64 = np.uint64(1 << 51)


def quiet_nans(x: Any) -> np.ndarray:
    """A float64 copy of ``x`` with every NaN quieted (fraction bit 51 set; sign and payload kept)."""
    return _quiet_in_place(np.array(x, dtype=np.float64))


def _quiet_in_place(out: np.ndarray) -> np.ndarray:
    nan = np.isnan(out)
    if nan.any():
        out.view(np.uint64)[nan] |= _QUIET64
    return out


def cut_nans(fmt: Format | str, x: Any) -> np.ndarray:
    """float64 ``x`` with each NaN replaced by the quiet NaN of ``fmt`` it converts to, still as a float64:
    sign kept, the payload cut to ``fmt``'s fraction bits (left-aligned), the quiet bit set.  Formats
    without IEEE NaNs (fn, fnuz) have one NaN code, so their NaNs lose the payload.  Other values pass."""
    fmt = get(fmt)
    out = quiet_nans(x)
    nan = np.isnan(out)
    if nan.any():
        keep = fmt.fraction_bits if fmt.nan == "ieee" else 1
        out.view(np.uint64)[nan] &= ~np.uint64((1 << (52 - keep)) - 1)
    return out


def nan_codes(fmt: Format | str, x: Any) -> np.ndarray:
    """The codes (uint64) in ``fmt``, an IEEE format, of the float64 NaNs ``x``: sign, all-ones exponent,
    the payload left-aligned into the fraction (bits ``fmt`` lacks dropped), the quiet bit set."""
    fmt = get(fmt)
    if fmt.nan != "ieee":
        raise ValueError(f"nan_codes: {fmt.name} has one NaN code, no payloads")
    t = fmt.fraction_bits
    u = quiet_nans(x).view(np.uint64)
    sign = (u >> np.uint64(63)) << np.uint64(fmt.bits - 1)
    frac = (u & np.uint64((1 << 52) - 1)) >> np.uint64(52 - t)
    return sign | np.uint64(((1 << fmt.exponent_bits) - 1) << t) | frac


def read_register(fmt: Format | str, x: Any, mode: RoundingMode | str) -> np.ndarray:
    """Values of a register wider than ``fmt`` as a unit reads them as ``fmt`` (``Model.input_rounding``);
    float64 results.  What counts is the array's own encoding: a float32 array holds binary32 codes, a
    float16 one binary16 codes, anything else (float64 arrays, Python floats) binary64 codes.

    Numbers and infinities are rounded in ``mode`` (:func:`round`).  With TowardZero the unit drops the low bits of the
    code, NaN or not (the H100's tf32 read of binary32 registers, data/hardware): a NaN keeps its sign and the leading
    payload bits ``fmt`` holds, and a NaN whose payload lies wholly in the dropped bits is read as an infinity of its
    sign (binary32 0x7F800001 as tf32 is +inf).  A float64 NaN is cut the same way at its own width: ``numpy.nan``
    (0x7FF8000000000000, its quiet bit among the kept bits) stays NaN; only one whose leading fraction bits are all zero
    becomes an infinity.  In the other modes a NaN stays NaN (:func:`round`).  NaNs come back quiet."""
    fmt = get(fmt)
    mode = RoundingMode.parse(mode)
    arr = np.asarray(x)
    source = arr if arr.dtype in (np.float16, np.float32, np.float64) else np.asarray(from_numpy(arr))
    values = from_numpy(source)
    out = round(fmt, values, mode)
    nan = np.isnan(values)
    if mode is RoundingMode.TowardZero and fmt.nan == "ieee" and nan.any():
        t_src = np.finfo(source.dtype).nmant
        u = bits(source).astype(np.uint64)
        kept = (u & np.uint64((1 << t_src) - 1)) >> np.uint64(max(t_src - fmt.fraction_bits, 0))
        to_inf = nan & (kept == 0)
        out = np.where(to_inf, np.copysign(np.inf, values), out)
    return out


def _round_objects(fmt: Format, arr: np.ndarray, mode: RoundingMode, subnormals: bool | None,
                   saturate: bool) -> np.ndarray:
    """:func:`round` of an object array: floats as floats, exact numbers (ints, Fractions) by one rounding
    of their exact value (:func:`round_fraction`), the sign of a zero result kept."""
    from numbers import Rational

    out = np.empty(arr.shape)
    for idx, v in np.ndenumerate(arr):
        if isinstance(v, (float, np.floating)):
            out[idx] = round(fmt, np.array(float(v)), mode, subnormals=subnormals, saturate=saturate)[()]
            continue
        if isinstance(v, bool) or not isinstance(v, (Rational, np.integer)):
            raise ValueError(f"x{index_text(idx)} = {v!r} is not a number; formats.round takes floats, ints and "
                             "Fractions")
        exact = Fraction(v)
        value = round_fraction(fmt, exact, mode, subnormals=subnormals)
        if saturate and np.isinf(value):
            value = np.copysign(fmt.max, value)
        if value == 0 and exact < 0 and fmt.has_negative_zero:
            value = -0.0
        out[idx] = value
    return out


def _storage_round_trip(fmt: Format, x: np.ndarray) -> np.ndarray | None:
    """``is_representable`` by a cast to the storage dtype and back, where that decides it: the cast gives a
    value of the storage type, so the round trip returns x exactly when x is one.  Formats narrower than
    their binary32 storage (tf32, e8m13) also need their dropped low bits zero.  None where no storage type
    holds exactly the format's values (another format, or one without subnormals)."""
    held = _held_in(fmt)
    if held is None or held.subnormals != fmt.subnormals:
        return None
    with np.errstate(invalid="ignore", over="ignore"):
        y = x.astype(fmt.dtype)
        back = y.astype(np.float64) if fmt.dtype.itemsize >= 2 and fmt.dtype.kind == "f" else \
            y.astype(np.float32).astype(np.float64)
        same = (back == x) & (np.signbit(back) == np.signbit(x))
    low = ((1 << fmt.dtype.itemsize * 8) - 1) ^ storage_mask(fmt)  # the code bits fmt's values leave zero
    if low:
        codes = bits(y)
        same &= (codes & codes.dtype.type(low)) == 0
    return _finish_representable(fmt, x, same)


def _finish_representable(fmt: Format, x: np.ndarray, same: np.ndarray) -> np.ndarray:
    """The last rules of ``is_representable``, one place: infinities and NaN count where ``fmt`` has them; no
    negative value (-0 included) in an unsigned format, no zero where ``fmt`` has none."""
    if not fmt.signed:
        same = same & ~np.signbit(x)
    if not fmt.has_zero:
        same = same & (x != 0)
    if not fmt.has_infinities:
        same = same & np.isfinite(x)
    return same | (np.isnan(x) & fmt.has_nan)


def is_representable(fmt: Format | str, x: Any) -> np.ndarray:
    """True where the float64 value is exactly a value of ``fmt`` (NaN and infinities where the format has
    them; -0 only where the format has a negative zero)."""
    fmt = get(fmt)
    x = np.asarray(x, dtype=np.float64)
    fast = _storage_round_trip(fmt, x)
    return fast if fast is not None else _representable_by_rounding(fmt, x)


def _representable_by_rounding(fmt: Format, x: np.ndarray) -> np.ndarray:
    """``is_representable`` for any format: x equals its own rounding toward zero (the slow, general way)."""
    with np.errstate(invalid="ignore"):
        rounded = round(fmt, x, RoundingMode.TowardZero)
        same = (rounded == x) & (np.signbit(rounded) == np.signbit(x))
    return _finish_representable(fmt, x, same)


# --- bit patterns ----------------------------------------------------------------------------------------
def encode(fmt: Format | str, x: Any) -> np.ndarray:
    """Bit patterns (uint64, in the low ``fmt.bits`` bits) of values exactly representable in ``fmt``.

    NaN encodes as a quiet NaN of ``fmt`` with the float64 NaN's sign and payload, left-aligned and cut to
    ``fmt``'s width (:func:`nan_codes`; ``numpy.nan`` gives the default NaN, 0x7E00 for binary16); fn
    formats have the all-ones code, fnuz formats 0x80; formats without NaN refuse it.
    """
    fmt = get(fmt)
    x = np.asarray(x, dtype=np.float64)
    ok = is_representable(fmt, x)
    if not np.all(ok):
        idx = tuple(int(i) for i in np.argwhere(~ok)[0])
        raise ValueError(f"encode: value {float(x[idx])!r} at index {idx} is not representable in {fmt.name}; "
                         f"round it first with blockfma.formats.round({fmt.name!r}, x)")
    t = fmt.fraction_bits
    w = fmt.exponent_bits
    sign_bit = np.uint64(1 << (fmt.bits - 1) if fmt.signed else 0)
    finite = np.isfinite(x)
    a = np.abs(np.where(finite, x, 0.0))
    _, e = np.frexp(a)
    lead = e.astype(np.int64) - 1
    normal = a >= fmt.smallest_normal
    exp_field = np.where(normal, lead + fmt.bias, 0)
    scale = np.where(normal, lead, fmt.emin) - t
    sig = np.ldexp(a, (-scale).astype(np.int32)).astype(np.int64)
    frac = np.where(normal, sig - (1 << t), sig)
    code = (exp_field.astype(np.uint64) << np.uint64(t)) | frac.astype(np.uint64)
    negative = np.signbit(x) & ((x != 0) | fmt.has_negative_zero)  # fnuz formats have no -0
    code = np.where(negative, code | sign_bit, code)
    all_ones_exp = np.uint64(((1 << w) - 1) << t)
    if fmt.nan == "ieee":
        code = np.where(np.isinf(x), all_ones_exp | np.where(x < 0, sign_bit, np.uint64(0)), code)
        nan_code = nan_codes(fmt, x)
    elif fmt.nan == "fn":
        nan_code = all_ones_exp | np.uint64((1 << t) - 1)
    elif fmt.nan == "fnuz":
        nan_code = sign_bit
    else:  # no NaN: is_representable refused NaNs above
        return code.astype(np.uint64)
    return np.where(np.isnan(x), np.uint64(nan_code), code).astype(np.uint64)


def decode(fmt: Format | str, code: Any) -> np.ndarray:
    """Values (float64) of bit patterns of ``fmt``; every code decodes.  An IEEE NaN code decodes to a
    quiet float64 NaN with its sign and payload (left-aligned, as numpy widens binary16 and binary32).
    Codes are integers (integral floats too): a fraction, NaN or a negative code is a ValueError."""
    fmt = get(fmt)
    code = np.asarray(code)
    with np.errstate(invalid="ignore"):  # integers (integral floats too) from 0 to 2**bits - 1: nothing cut or wrapped
        bad = ~((code >= 0) & (code < 2.0**fmt.bits) & (code == np.trunc(code))) if code.dtype.kind in "fi" else \
            np.full(code.shape, code.dtype.kind not in "bu")
    if bad.any():
        raise ValueError(f"decode: code {np.atleast_1d(code)[np.atleast_1d(bad)][:1].tolist()[0]!r} is not a bit "
                         f"pattern of {fmt.name} (an integer from 0 to {2**fmt.bits - 1})")
    code = code.astype(np.uint64)
    if np.any(code >> np.uint64(fmt.bits)):
        raise ValueError(f"decode: code wider than the {fmt.bits} bits of {fmt.name}")
    t = fmt.fraction_bits
    w = fmt.exponent_bits
    negative = ((code >> np.uint64(fmt.bits - 1)) & np.uint64(1)).astype(bool) if fmt.signed else \
        np.zeros(code.shape, dtype=bool)
    exp_field = ((code >> np.uint64(t)) & np.uint64((1 << w) - 1)).astype(np.int64)
    frac = (code & np.uint64((1 << t) - 1)).astype(np.int64)
    normal = (exp_field > 0) | (not fmt.has_zero)  # without zero the exponent field 0 is a normal binade
    sig = np.where(normal, frac + (1 << t), frac)
    scale = np.where(normal, exp_field - fmt.bias, fmt.emin) - t
    with np.errstate(over="ignore"):  # the all-ones exponent codes; replaced just below
        value = np.ldexp(sig.astype(np.float64), scale.astype(np.int32))
    top = (1 << w) - 1
    if fmt.nan == "ieee":
        special = exp_field == top
        value = np.where(special, np.where(frac == 0, np.inf, np.nan), value)
    elif fmt.nan == "fn":
        value = np.where((exp_field == top) & (frac == (1 << t) - 1), np.nan, value)
    elif fmt.nan == "fnuz":
        value = np.where(negative & (exp_field == 0) & (frac == 0), np.nan, value)
    value = np.where(negative, -value, value)
    if fmt.nan == "ieee" and t > 0 and np.any(np.isnan(value)):
        payload = (np.where(negative, np.uint64(1 << 63), np.uint64(0)) | np.uint64(0x7FF << 52)
                   | np.uint64(1 << 51) | (frac.astype(np.uint64) << np.uint64(52 - t)))
        value = np.where(np.isnan(value), payload.view(np.float64), value)
    return value


# --- storage arrays ---------------------------------------------------------------------------------------
def to_numpy(fmt: Format | str, x: Any, *, check: bool = True) -> np.ndarray:
    """Store values of ``fmt`` in its numpy dtype, exactly: ValueError for a value ``fmt`` does not hold
    (``check=False`` skips that test for values the caller built in the format)."""
    fmt = get(fmt)
    x = np.asarray(x, dtype=np.float64)
    if check:
        ok = is_representable(fmt, x)  # NaN where fmt has one
        if not np.all(ok):
            idx = tuple(int(i) for i in np.argwhere(~ok)[0])
            raise ValueError(f"x{index_text(idx)} = {float(x[idx])!r} is not a value of {fmt.name}; "
                             f"round it first with blockfma.formats.round({fmt.name!r}, x)")
    if fmt.dtype_name in ("float64", "float32", "float16"):
        return x.astype(fmt.dtype)
    if fmt.name == "bf16" and not np.isnan(x).any():  # bf16 values widen exactly to binary32: no cast rounds
        return x.astype(np.float32).astype(fmt.dtype)
    # other ml_dtypes types: go through the bit patterns so no cast can round
    codes = encode(fmt, x)
    return codes.astype(uint_dtype(fmt.dtype.itemsize * 8)).view(fmt.dtype)


def pack(fmt: Format | str, codes: Any) -> np.ndarray:
    """Two codes of a format of at most 4 bits (e2m1fn) per byte, as registers hold them: along the last axis
    (even length), element ``2i`` in the low nibble of byte ``i`` and ``2i + 1`` in the high nibble.  That is
    the order of PTX's packed types (PTX ISA, cvt: ``cvt.rn.satfinite.e2m1x2.f32 d, a, b`` puts ``b``, the
    first element, in the low 4 bits of ``d``, as ``.f16x2`` puts it in the low half) and of CUDA's
    ``__nv_fp4x2_e2m1``.  Returns uint8; :func:`unpack` undoes it."""
    fmt = get(fmt)
    if fmt.bits > 4:
        raise ValueError(f"pack: {fmt.name} codes are {fmt.bits} bits wide; two fit a byte only for formats of at "
                         "most 4 bits (e2m1fn)")
    codes = np.asarray(codes)
    if codes.dtype.kind not in "iu":
        raise ValueError(f"pack: codes must be integers (the bit patterns of {fmt.name}, e.g. from "
                         f"blockfma.formats.encode({fmt.name!r}, x)), not {codes.dtype}")
    if codes.ndim == 0 or codes.shape[-1] % 2:
        raise ValueError(f"pack: the last axis holds {codes.shape[-1] if codes.ndim else 0} codes; two go in a byte, "
                         "so it needs an even length (pad with the code of +0)")
    if np.any((codes < 0) | (codes >> fmt.bits != 0)):
        idx = tuple(int(i) for i in np.argwhere((codes < 0) | (codes >> fmt.bits != 0))[0])
        raise ValueError(f"pack: codes{index_text(idx)} = {int(codes[idx])} is not a {fmt.bits}-bit code of "
                         f"{fmt.name}")
    c = codes.astype(np.uint8)
    return (c[..., 0::2] | (c[..., 1::2] << np.uint8(4))).astype(np.uint8)


def unpack(fmt: Format | str, packed: Any) -> np.ndarray:
    """The codes (uint8) of bytes that :func:`pack` filled: byte ``i`` gives element ``2i`` (low nibble) and
    ``2i + 1`` (high nibble), so the last axis doubles."""
    fmt = get(fmt)
    if fmt.bits > 4:
        raise ValueError(f"unpack: {fmt.name} codes are {fmt.bits} bits wide; bytes hold two codes only for formats "
                         "of at most 4 bits (e2m1fn)")
    packed = np.asarray(packed)
    if packed.dtype != np.uint8 or packed.ndim == 0:
        raise ValueError(f"unpack: packed must be an array of uint8 bytes, not {packed.dtype} of shape {packed.shape}")
    out = np.empty(packed.shape[:-1] + (2 * packed.shape[-1],), dtype=np.uint8)
    out[..., 0::2] = packed & np.uint8(0x0F)
    out[..., 1::2] = packed >> np.uint8(4)
    return out


def from_numpy(x: Any, what: str = "x") -> np.ndarray:
    """float64 copy of an array of any float dtype (numpy or ml_dtypes) or integer dtype, exactly:
    ValueError (naming ``what`` and the index) for an integer of more than 53 significant bits or a long
    double that float64 cannot hold.  NaNs keep their sign and payload (left-aligned) and come out quiet,
    so that no signalling NaN reaches arithmetic; :func:`read_register` looks at the codes themselves."""
    x = np.asarray(x)
    if x.dtype in (np.float16, np.float32, np.float64) or x.dtype.kind == "b":
        with np.errstate(invalid="ignore"):  # widening quiets a signalling NaN: meant, not an error
            return _quiet_in_place(x.astype(np.float64))
    if x.dtype.kind in "iu":
        out = x.astype(np.float64)
        for idx in np.argwhere(np.abs(out) > 2.0**53):  # only there can float64 have rounded
            idx = tuple(int(i) for i in idx)
            if int(out[idx]) != int(x[idx]):
                not_binary64(what, idx, x[idx])
        return out
    if x.dtype.kind == "f" and x.dtype.itemsize > 8:  # long double
        out = x.astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            bad = (out.astype(x.dtype) != x) & ~np.isnan(x)
        if bad.any():
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            not_binary64(what, idx, x[idx])
        return _quiet_in_place(out)
    with np.errstate(invalid="ignore"):  # ml_dtypes flags NaN in casts; the NaN itself carries over
        return _quiet_in_place(x.astype(np.float32).astype(np.float64))  # ml_dtypes widen exactly to float32


def index_text(idx: tuple) -> str:
    """An element's index as error messages write it: ``[1, 4]``, nothing for a scalar."""
    return f"[{', '.join(str(int(i)) for i in idx)}]" if idx else ""


def holds(wide: Format | str, narrow: Format | str) -> bool:
    """Every value of ``narrow``, subnormals included, is a value of ``wide`` (fp32 holds fp16 and bf16)."""
    wide, narrow = get(wide), get(narrow)
    return (narrow.precision <= wide.precision and narrow.emax <= wide.emax
            and narrow.emin - narrow.precision >= wide.emin - wide.precision)


def holds_codes(wide: Format | str, narrow: Format | str) -> bool:
    """Every code of ``narrow`` is a value of ``wide``: its finite values (:func:`holds`), and its zero, -0,
    infinities and NaN where it has them (fp32 holds the codes of fp16, bf16 and e4m3fn, e4m3fn those of
    e2m1fn; e4m3fnuz does not hold e4m3fn's -0, nor e4m3fn e5m2's infinities)."""
    wide, narrow = get(wide), get(narrow)
    return (holds(wide, narrow) and (wide.signed or not narrow.signed)
            and (wide.has_zero or not narrow.has_zero)
            and (wide.has_negative_zero or not narrow.has_negative_zero)
            and (wide.has_infinities or not narrow.has_infinities) and (wide.has_nan or not narrow.has_nan))


def of_dtype(dtype: Any) -> Format | None:
    """The format whose values are those of a numpy or ml_dtypes floating dtype (float16: fp16, bfloat16:
    bf16, float32: fp32, float8_e4m3fn: e4m3fn): the widest format stored in it; None for other dtypes."""
    try:
        name = np.dtype(dtype).name
    except TypeError:
        return None
    stored = [get(n) for n in names() if get(n).dtype_name == name]
    return max(stored, key=lambda f: f.bits) if stored else None


def not_binary64(what: str, idx: tuple, value: Any) -> None:
    """Raise the error for an input value that float64 (and so every format here) cannot hold."""
    where = index_text(idx)
    shown = repr(value.item()) if isinstance(value, np.integer) else str(value) if isinstance(value, np.floating) \
        else repr(value)
    raise ValueError(f"{what}{where} = {shown} is not exactly a binary64 value (it needs more than 53 "
                     "significant bits or a wider exponent), so no supported format holds it; round it first "
                     "with blockfma.formats.round(fmt, x) or pass round_inputs='rne'")
