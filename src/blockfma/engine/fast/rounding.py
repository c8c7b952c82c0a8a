"""Rounding inside compiled kernels: one value (:func:`round_int`, the scalar twin of
``formats.round_integer``) and whole rows at once on float64 bit patterns (:func:`round_row`).

Every function takes the target format as the scalars ``fmt_params`` returns:
``p, emin, maxval, has_inf, neg_zero, subnormals, mode, overflow``, the last two as the codes of
:class:`Mode` and :class:`OverflowPolicy` (ints: numba folds a test against a member to a constant).
"""

from __future__ import annotations

import enum
import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from ...formats import Format, Overflow, RoundingMode


class Mode(enum.IntEnum):
    """A rounding mode as the kernels see it, named by RoundingMode's short name."""

    RNE = 0  # TiesToEven
    RNA = 1  # TiesAway
    RZ = 2  # TowardZero
    RU = 3  # TowardPositive
    RD = 4  # TowardNegative
    RO = 5  # ToOdd


class OverflowPolicy(enum.IntEnum):
    """Where an overflowing result goes, as the kernels see it (``formats.Overflow``'s names)."""

    IEEE = 0  # by the rounding direction (IEEE 754): infinity, or the largest finite value
    INF = 1  # infinity whatever the rounding
    SATURATE = 2  # the largest finite value


MODES: dict[RoundingMode, Mode] = {m: Mode[m.value.upper()] for m in RoundingMode}  # TiesToEven ("rne") -> RNE
OVERFLOW: dict[Overflow, OverflowPolicy] = {o.name.lower(): o for o in OverflowPolicy}  # "ieee" -> IEEE

EXP_MASK = np.int64(0x7FF)
MAG_MASK = np.int64(0x7FFFFFFFFFFFFFFF)
SIGN_BIT = np.int64(-0x8000000000000000)


def fmt_params(fmt: Format, mode: RoundingMode, subnormals: bool, overflow: str) -> tuple:
    """The scalars the rounding functions take for a format and a rounding."""
    return (fmt.precision, fmt.emin, fmt.max, fmt.has_infinities, fmt.has_negative_zero, subnormals,
            int(MODES[mode]), int(OVERFLOW[overflow]))


@njit(cache=True, inline="always")
def bitlen(x):
    """Bit length of a non-negative int64."""
    if x == 0:
        return 0
    _, e = math.frexp(float(x))
    if e > 63:
        return 63
    if x < (np.int64(1) << (e - 1)):
        return e - 1
    return e


@njit(cache=True, inline="always")
def pow2_bits(e):
    """Bit pattern of 2.0**e, -1022 <= e <= 1023 (built directly, so loops using it vectorise)."""
    return np.int64(e + 1023) << 52


def _bitcast(name: str, src: type, width: int, dst: types.Type, doc: str):
    """An intrinsic ``name`` reinterpreting a value of numba type class ``src`` and ``width`` bits as ``dst``
    (the same width): a bitcast, free."""
    def cast(typingctx, x):
        if isinstance(x, src) and x.bitwidth == width:
            def codegen(context, builder, signature, args):
                return builder.bitcast(args[0], context.get_value_type(dst))
            return dst(x), codegen
        return None

    cast.__name__ = cast.__qualname__ = name
    cast.__doc__ = doc
    return intrinsic(cast)


bits_of = _bitcast("bits_of", types.Float, 64, types.int64, "The bit pattern of a float64 as an int64.")
float_of = _bitcast("float_of", types.Integer, 64, types.float64, "The float64 with a given bit pattern.")
bits32_of = _bitcast("bits32_of", types.Float, 32, types.int32, "The bit pattern of a float32 as an int32.")
float32_of = _bitcast("float32_of", types.Integer, 32, types.float32, "The float32 with a given bit pattern.")


@intrinsic
def fma32(typingctx, a, b, c):
    """fl32(a * b + c) of three float32 values, one rounding to nearest even (llvm.fma: IEEE
    fusedMultiplyAdd, a vfmadd instruction where the CPU has one)."""
    if all(isinstance(x, types.Float) and x.bitwidth == 32 for x in (a, b, c)):
        def codegen(context, builder, signature, args):
            f32 = context.get_value_type(types.float32)
            fn = builder.module.declare_intrinsic("llvm.fma", [f32], ir.FunctionType(f32, [f32, f32, f32]))
            return builder.call(fn, args)
        return types.float32(types.float32, types.float32, types.float32), codegen
    return None


@njit(cache=True, inline="always")
def exponent_bits(b):
    """Unbiased exponent field of a float64 bit pattern (its floor(log2 |x|) for normal x)."""
    return ((b >> 52) & EXP_MASK) - 1023


@njit(cache=True, inline="always")
def _round_kept(mode, neg, keep, above, tie, inexact):
    """The kept significand rounded in mode, given where the dropped bits are above half a unit (``above``),
    exactly half (``tie``) or not zero (``inexact``)."""
    if mode == Mode.RNE:
        up = above or (tie and (keep & 1) == 1)
    elif mode == Mode.RNA:
        up = above or tie
    elif mode == Mode.RZ:
        up = False
    elif mode == Mode.RU:
        up = inexact and not neg
    elif mode == Mode.RD:
        up = inexact and neg
    else:  # Mode.RO
        return keep | 1 if inexact else keep
    return keep + 1 if up else keep


@njit(cache=True, inline="always")
def _to_infinity(mode, neg, overflow):
    """Whether an overflow gives infinity: never (saturate), always (inf), else as IEEE 754 sec. 7.4."""
    if overflow == OverflowPolicy.SATURATE:
        return False
    if overflow == OverflowPolicy.INF or mode == Mode.RNE or mode == Mode.RNA:
        return True
    if mode == Mode.RU:
        return not neg
    if mode == Mode.RD:
        return neg
    return False


@njit(cache=True)
def round_int(neg, mag, exp, p, emin, maxval, has_inf, neg_zero, subnormals, mode, overflow):
    """(-1)**neg * mag * 2**exp (int64 mag >= 0) rounded once: formats.round_integer for one value."""
    if mag == 0:
        return -0.0 if (neg and neg_zero) else 0.0
    lead = exp + bitlen(mag) - 1
    if not subnormals and lead < emin:
        return -0.0 if (neg and neg_zero) else 0.0
    q = (max(lead, emin) if subnormals else lead) - (p - 1)
    drop = q - exp
    keep = mag
    scale = exp
    if drop > 0:
        scale = q
        if drop >= 64:
            keep = np.int64(0)
            rem = mag
            above = False
            tie = False
        else:
            keep = mag >> drop
            rem = mag - (keep << drop)
            half = np.int64(1) << (drop - 1)
            above = rem > half
            tie = rem == half
        keep = _round_kept(mode, neg, keep, above, tie, rem != 0)
    value = math.ldexp(float(keep), scale)
    if value > maxval:
        to_inf = _to_infinity(mode, neg, overflow)
        if to_inf:
            value = np.inf if has_inf else np.nan
        else:
            value = maxval
    if neg:
        value = -value
    if value == 0.0 and not neg_zero:
        value = 0.0
    return value


@njit(cache=True, inline="always")
def round_float(y, p, emin, maxval, has_inf, neg_zero, subnormals, mode, overflow):
    """An exact float64 value rounded to the format (zeros and non-finite values pass through)."""
    if y == 0.0 or not math.isfinite(y):
        return y
    fr, e = math.frexp(abs(y))
    return round_int(y < 0, np.int64(math.ldexp(fr, 53)), e - 53, p, emin, maxval, has_inf, neg_zero,
                     subnormals, mode, overflow)


@njit(cache=True, inline="always")
def round_pair(s, err, p, emin, maxval, has_inf, neg_zero, subnormals, mode, overflow):
    """The exact value s + err (s = fl(s + err), a TwoSum pair) rounded once to a format of p <= 51
    bits: err only tells on which side of s the value lies.  s = 0 (then err = 0) passes through."""
    if s == 0.0 or not math.isfinite(s):
        return s
    fr, e = math.frexp(abs(s))
    m = np.int64(math.ldexp(fr, 53)) << 2
    if err != 0.0:
        m += 1 if (err > 0) == (s > 0) else -1
    return round_int(s < 0, m, e - 55, p, emin, maxval, has_inf, neg_zero, subnormals, mode, overflow)


@njit(cache=True, inline="always")
def two_sum(x, y):
    s = x + y
    bp = s - x
    return s, (x - (s - bp)) + (y - bp)


@njit(cache=True, inline="always")
def odd_toward(s, err):
    """Round-to-odd at 53 bits of s + err (s = fl(s + err)): s itself if exact or already odd, else its
    neighbour on err's side, which is odd (branch-free)."""
    b = bits_of(s)
    move = np.int64((err != 0.0) & ((b & 1) == 0))
    away = np.int64((err > 0) == (s > 0))  # err points away from zero: the magnitude grows
    return float_of(b + move * (2 * away - 1))


@njit(cache=True, inline="always")
def to_f32_nearest(x, ftz_exact_tiny):
    """A float64 value rounded to nearest binary32 (numpy/LLVM cast), flushed to a signed zero when
    ``ftz_exact_tiny`` says its exact value lies below binary32's smallest normal."""
    y = np.float64(np.float32(x))
    return math.copysign(0.0, x) if ftz_exact_tiny else y


@njit(cache=True, inline="always")
def _round_bits_row(Y, D, flags, p, emin, maxval, mode, zero_sign):
    """The loop of round_row for one rounding mode (a literal at each call, so that the mode tests fold
    away and the loop body is only the work of that mode); returns whether any value needs the slow path."""
    Yi = Y.view(np.int64)
    Di = D.view(np.int64)
    shift = 53 - p
    low_mask = (np.int64(1) << shift) - 1
    half = np.int64(1) << (shift - 1)
    unit = np.int64(1) << shift
    top = bits_of(maxval)
    any_slow = False
    for j in range(Y.shape[0]):
        b = Yi[j]
        neg = b < 0
        mag = b & MAG_MASK
        low = mag & low_mask
        base = mag - low
        inexact = low != 0
        odd = ((base >> shift) & 1) == 1
        up = (((mode == Mode.RNE) & ((low > half) | ((low == half) & odd)))  # branch-free: the loop vectorises
              | ((mode == Mode.RNA) & (low >= half))
              | ((mode == Mode.RU) & inexact & (~neg))
              | ((mode == Mode.RD) & inexact & neg))
        base = base | (np.int64((mode == Mode.RO) & inexact) << shift)
        r = base + np.int64(up) * unit
        slow = ((exponent_bits(mag) < emin) | (r > top)) & (mag != 0)
        flags[j] = slow
        any_slow = any_slow | slow
        zero = (b & SIGN_BIT) if zero_sign else np.int64(0)
        Di[j] = zero if mag == 0 else (Di[j] if slow else (r | (b & SIGN_BIT)))
    return any_slow


@njit(cache=True)
def round_row(Y, D, flags, p, emin, maxval, has_inf, neg_zero, subnormals, mode, overflow, zero_sign=False):
    """D[j] = Y[j] rounded to the format, for exact float64 values Y (a zero gives +0, or keeps its sign
    with ``zero_sign``).

    The common case, a result in the format's normal range, rounds on the bit pattern (branch-free, so
    the loop vectorises, one copy of the loop per rounding mode); the rest (subnormal or overflowing
    results, non-finite values) goes through :func:`round_int`.  Where D[j] is already non-finite (a NaN
    or infinity carried along a chain) it is left alone."""
    if mode == Mode.RNE:
        any_slow = _round_bits_row(Y, D, flags, p, emin, maxval, Mode.RNE, zero_sign)
    elif mode == Mode.RNA:
        any_slow = _round_bits_row(Y, D, flags, p, emin, maxval, Mode.RNA, zero_sign)
    elif mode == Mode.RZ:
        any_slow = _round_bits_row(Y, D, flags, p, emin, maxval, Mode.RZ, zero_sign)
    elif mode == Mode.RU:
        any_slow = _round_bits_row(Y, D, flags, p, emin, maxval, Mode.RU, zero_sign)
    elif mode == Mode.RD:
        any_slow = _round_bits_row(Y, D, flags, p, emin, maxval, Mode.RD, zero_sign)
    else:
        any_slow = _round_bits_row(Y, D, flags, p, emin, maxval, Mode.RO, zero_sign)
    if any_slow:
        for j in range(Y.shape[0]):
            if flags[j] and math.isfinite(D[j]):
                D[j] = round_float(Y[j], p, emin, maxval, has_inf, neg_zero, subnormals, mode, overflow)
