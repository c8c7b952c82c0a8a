"""Exact arithmetic on arrays of binary floating-point values, rounded once.

The engine's exact families (exact-fused, the IEEE operations of pairwise, fma-chain, amx, bfdot) need sums whose exact
value can span hundreds of bits (binary32 C next to bf16 products, binary64 FMAs).  Here an exact sum of terms ``m_i *
2**e_i`` (int64 ``m_i``, any ``e_i``) is accumulated in 30-bit limbs of int64, carried, and its leading 61 bits plus a
sticky bit handed to :func:`formats.round_integer`, which then rounds exactly as if it saw every bit.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..formats import Format, RoundingMode, bit_length, fp16, fp32, round_integer
from .rules import zero_sign

LIMB = 30
_MASK = (1 << LIMB) - 1
_CHUNK = 1 << 16  # elements per pass, to bound the limb arrays' memory
_NATIVE = (fp32, fp16)  # formats whose numpy cast from float64 rounds to nearest even, once


def split(x: np.ndarray, *, compact: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Finite float64 values as exact ``(m, e)`` int64 pairs, ``x == m * 2**e``.  With ``compact`` ``m`` is
    odd (or 0), so it has no more bits than the value has significant bits (11 at most for binary16);
    without, ``|m|`` has exactly 53 bits (nonzero x)."""
    frac, e = np.frexp(x)
    m = np.ldexp(frac, 53).astype(np.int64)
    if not compact:
        return m, e.astype(np.int64) - 53
    tz = bit_length(m & -m) - 1  # trailing zeros
    tz = np.where(m == 0, 0, tz)
    return m >> tz, e.astype(np.int64) - 53 + tz


def product_terms(ma: np.ndarray, ea: np.ndarray, mb: np.ndarray, eb: np.ndarray
                  ) -> list[tuple[np.ndarray, np.ndarray]]:
    """The exact product of ``ma * 2**ea`` and ``mb * 2**eb`` (|m| < 2**53) as terms with |m| < 2**62."""
    sign = np.where((ma < 0) ^ (mb < 0), -1, 1)
    a, b = np.abs(ma), np.abs(mb)
    if int(np.max(a, initial=0)) < (1 << 31) and int(np.max(b, initial=0)) < (1 << 31):
        return [(sign * a * b, ea + eb)]
    ah, al = a >> 27, a & ((1 << 27) - 1)
    bh, bl = b >> 27, b & ((1 << 27) - 1)
    return [(sign * (ah * bh), ea + eb + 54), (sign * (ah * bl + al * bh), ea + eb + 27), (sign * (al * bl), ea + eb)]


def stack(terms: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Terms ``(m, e)`` broadcast and stacked on a new last axis."""
    shape = np.broadcast_shapes(*(np.shape(m) for m, _ in terms), *(np.shape(e) for _, e in terms))
    m = np.stack([np.broadcast_to(np.asarray(m, dtype=np.int64), shape) for m, _ in terms], axis=-1)
    e = np.stack([np.broadcast_to(np.asarray(e, dtype=np.int64), shape) for _, e in terms], axis=-1)
    return m, e


def exact_sum(m: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Exact sum over the last axis of ``m * 2**e`` (int64, ``|m| < 2**62``), as ``(negative, mag, exp)``.

    Sums whose terms all lie within 60 bits of each other are added directly in int64 and ``mag * 2**exp`` is the exact
    magnitude.  The others go through 30-bit limbs and ``mag`` holds the leading 61 bits and, as its last bit, a sticky
    bit (set when anything nonzero lies below).  Either way one rounding of ``(negative, mag, exp)`` to a format of
    precision <= 59 is the correct rounding of the exact sum, and ``mag == 0`` exactly when the sum is zero.
    """
    m, e = np.broadcast_arrays(np.asarray(m, dtype=np.int64), np.asarray(e, dtype=np.int64))
    shape, n = m.shape[:-1], m.shape[-1]
    m, e = m.reshape(-1, n), e.reshape(-1, n)
    big = np.iinfo(np.int64).max
    nz = m != 0
    lo = np.where(nz, e, big).min(axis=-1)
    lo = np.where(lo == big, 0, lo)
    hi = np.where(nz, e + bit_length(np.abs(m)), lo[:, None]).max(axis=-1)
    narrow = (hi - lo) <= 61 - n.bit_length()  # the whole sum fits an int64
    total = np.where(nz & narrow[:, None], m << np.minimum(np.maximum(e - lo[:, None], 0), 62), 0).sum(axis=-1)
    neg, mag, exp = total < 0, np.abs(total), lo
    wide_rows = np.flatnonzero(~narrow)
    for start in range(0, wide_rows.size, _CHUNK):
        idx = wide_rows[start:start + _CHUNK]
        neg[idx], mag[idx], exp[idx] = _exact_sum_limbs(m[idx], e[idx], lo[idx])
    return neg.reshape(shape), mag.reshape(shape), exp.reshape(shape)


def _exact_sum_limbs(m: np.ndarray, e: np.ndarray, lo: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """exact_sum of rows (rows, n) of terms spread over more than 60 bits (``lo``: each row's least nonzero
    term's exponent), in 30-bit limbs."""
    rows_n, n = m.shape
    rows = np.arange(rows_n)
    rel = np.where(m != 0, e - lo[:, None], 0)
    top = int(np.max(rel, initial=0))
    # two zero limbs below (so the top three limbs always exist) and headroom above for carries and sign
    nl = 2 + top // LIMB + 4 + 2
    acc = np.zeros((rows_n, nl), dtype=np.int64)
    for i in range(n):
        sign = np.where(m[:, i] < 0, -1, 1)
        a = np.abs(m[:, i])
        j = 2 + rel[:, i] // LIMB
        o = rel[:, i] % LIMB
        for piece in range(3):  # a < 2**62: three 30-bit pieces, each shifted by o < 30
            chunk = ((a >> (LIMB * piece)) & _MASK) << o  # < 2**60
            acc[rows, j + piece] += sign * (chunk & _MASK)
            acc[rows, j + piece + 1] += sign * (chunk >> LIMB)
    _carry(acc)
    negative = acc[:, -1] < 0
    if np.any(negative):
        acc[negative] = -acc[negative]
        _carry(acc)
    nonzero = acc != 0
    any_nz = nonzero.any(axis=1)
    t = nl - 1 - np.argmax(nonzero[:, ::-1], axis=1)
    t = np.where(any_nz, np.maximum(t, 2), 2)
    x2, x1, x0 = acc[rows, t], acc[rows, t - 1], acc[rows, t - 2]
    bl = np.maximum(bit_length(x2), 1)
    mant = (((x2 << LIMB) | x1) << (LIMB + 1 - bl)) | (x0 >> (bl - 1))  # exactly 61 bits
    below = np.logical_or.accumulate(nonzero, axis=1)
    sticky = ((x0 & ((np.int64(1) << (bl - 1)) - 1)) != 0) | np.where(t >= 3, below[rows, np.maximum(t - 3, 0)], False)
    mag = np.where(any_nz, (mant << 1) | sticky.astype(np.int64), 0)
    exp = lo + LIMB * (t - 4) + (bl - 1) - 1
    return negative & any_nz, mag, exp


def _carry(acc: np.ndarray) -> None:
    for i in range(acc.shape[1] - 1):
        c = acc[:, i] >> LIMB
        acc[:, i] -= c << LIMB
        acc[:, i + 1] += c


def round_sum(fmt: Format, m: np.ndarray, e: np.ndarray, mode: RoundingMode, *, subnormals: bool,
              overflow: str) -> tuple[np.ndarray, np.ndarray]:
    """``fmt``-rounding of the exact sum over the last axis of ``m * 2**e``; returns (float64 values,
    exact-zero mask)."""
    neg, mag, exp = exact_sum(m, e)
    value = round_integer(fmt, neg, mag, exp, mode, subnormals=subnormals, overflow=overflow)  # type: ignore[arg-type]
    return value, mag == 0


def two_sum(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Knuth's TwoSum: s = fl(x + y) and the exact error, x + y == s + err (finite float64, no overflow)."""
    s = x + y
    bp = s - x
    return s, (x - (s - bp)) + (y - bp)


def _round_pair(fmt: Format, mode: RoundingMode, s: np.ndarray, err: np.ndarray, *, subnormals: bool,
                overflow: str) -> tuple[np.ndarray, np.ndarray]:
    """Round the exact value ``s + err`` (``s = fl(s + err)``) once to ``fmt``: ``err`` only decides on
    which side of ``s`` the value lies, which is all any rounding of ``s + err`` to p <= 51 bits needs."""
    neg, m, e = np.signbit(s), *split(np.abs(s), compact=False)
    side = np.sign(err) * np.where(neg, -1, 1)  # +1: |value| > |s|
    mag = (m << 2) + side.astype(np.int64)
    value = round_integer(fmt, neg, mag, e - 2, mode, subnormals=subnormals, overflow=overflow)  # type: ignore[arg-type]
    return value, s == 0


def _round_pair_nearest(fmt: Format, s: np.ndarray, err: np.ndarray, *, subnormals: bool
                        ) -> tuple[np.ndarray, np.ndarray]:
    """TiesToEven rounding of ``s + err`` to binary32 or binary16 through a round-to-odd float64:
    rounding to odd at 53 bits, then to nearest at p <= 51 bits, is one correct rounding to nearest."""
    odd = (err != 0) & ((s.view(np.int64) & 1) == 0)
    s_odd = np.where(odd, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
    with np.errstate(over="ignore"):
        value = s_odd.astype(fmt.dtype).astype(np.float64)
    if not subnormals:
        tiny = np.abs(s) < fmt.smallest_normal
        tiny |= (np.abs(s) == fmt.smallest_normal) & (err != 0) & (np.signbit(err) != np.signbit(s))
        value = np.where(tiny, np.copysign(0.0, s), value)
    return value, s == 0


def _round_finite(fmt: Format, mode: RoundingMode, subnormals: bool, overflow: str, fin: list[np.ndarray],
                  af: np.ndarray | None, bf: np.ndarray | None, shape: tuple[int, ...], exact_product: bool
                  ) -> tuple[np.ndarray, np.ndarray]:
    """``R(af*bf + sum(fin))`` of finite operands and where its exact value is zero: through TwoSum where the
    value is a float64 pair (two addends, or an exact product and at most one addend, into a format of at
    most 51 bits and binary32's range), else through the exact limb sum."""
    two_terms = len(fin) == 2 and af is None
    if fmt.precision <= 51 and (two_terms or (exact_product and len(fin) <= 1)) and fmt.emax <= 128:
        if two_terms:
            s, err = two_sum(fin[0], fin[1])
        elif fin:
            s, err = two_sum(af * bf, fin[0])
        else:
            s, err = af * bf, np.zeros(shape)
        s, err = np.broadcast_to(s, shape), np.broadcast_to(err, shape)
        if mode is RoundingMode.TiesToEven and fmt in _NATIVE:
            return _round_pair_nearest(fmt, s, err, subnormals=subnormals)
        return _round_pair(fmt, mode, s, err, subnormals=subnormals, overflow=overflow)
    terms = [split(x) for x in fin]
    if af is not None:
        ma, ea = split(af)
        mb, eb = split(bf)
        terms.extend(product_terms(ma, ea, mb, eb))
    return round_sum(fmt, *stack(terms), mode, subnormals=subnormals, overflow=overflow)


def ieee_op(fmt: Format, mode: RoundingMode, subnormals: bool, overflow: str, addends: Sequence[np.ndarray],
            a: np.ndarray | None = None, b: np.ndarray | None = None, *, exact_product: bool = False,
            positive_zero: bool = False) -> np.ndarray:
    """One operation rounded once into ``fmt``: ``R(a*b + sum(addends))`` (``a*b`` optional).

    Operands are float64 arrays holding exact values; special values follow IEEE 754 (NaN in gives NaN,
    ``inf*0`` and ``inf - inf`` give NaN) and an exact zero takes the IEEE sign (``+0`` always with
    ``positive_zero``).  With ``subnormals=False`` the result is flushed when its exact magnitude is below
    the smallest normal.  ``exact_product`` promises that ``a*b`` is exact in float64 (factors of at most
    26 significant bits within binary32's range), which allows a TwoSum fast path.
    """
    operands = list(addends) + ([a, b] if a is not None else [])
    shape = np.broadcast_shapes(*(np.shape(x) for x in operands))
    finite = np.ones(shape, dtype=bool)
    for x in operands:
        finite &= np.isfinite(x)
    fin = [np.where(finite, x, 0.0) for x in addends]
    af, bf = (np.where(finite, a, 0.0), np.where(finite, b, 0.0)) if a is not None else (None, None)
    value, exact_zero = _round_finite(fmt, mode, subnormals, overflow, fin, af, bf, shape, exact_product)
    if np.any(exact_zero):
        zero_signs = [np.signbit(x) for x in addends]
        is_zero = [x == 0 for x in fin]
        if a is not None:
            zero_signs.append(np.signbit(a) ^ np.signbit(b))
            is_zero.append((af == 0) | (bf == 0))
        only_zeros = np.logical_and.reduce(is_zero)
        neg0 = zero_sign(np.logical_and.reduce(zero_signs), np.logical_or.reduce(zero_signs), only_zeros, mode)
        neg0 = neg0 & fmt.has_negative_zero & (not positive_zero)
        value = np.where(exact_zero, np.where(neg0, -0.0, 0.0), value)
    if not np.all(finite):
        # only the non-finite operands decide a special result; finite ones stand in as zeros
        with np.errstate(invalid="ignore", over="ignore"):
            special = sum((np.where(np.isfinite(x), 0.0, x) for x in addends), start=np.zeros(shape))
            if a is not None:
                special = special + np.where(np.isfinite(a) & np.isfinite(b), 0.0, a * b)
        value = np.where(finite, value, special)
    return value
