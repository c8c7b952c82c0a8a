"""The compiled kernels of each family behind one interface: what ``Family.numba`` names.

A :class:`Runner` says whether its family's compiled kernel runs a model (``supports``: the bounds within
which the kernel is exact, beyond the checks every family shares in :func:`blockfma.engine.fast.supports`)
and runs it (``run``) on finite, checked operands padded to whole blocks: A (batch, m, k), B (batch, k, n),
C (batch, m, n), all float64, writing ``out``; it returns False where these inputs need the numpy engine
after all.  Each runner picks its kernel's lanes (binary32 where the inputs allow it, see
``families.py``) and prepares what the kernel reads (exponents, zero flags, integer significands).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ...formats import Format, RoundingMode
from ...model import Alignment, Model
from .. import rules
from ..array import late_sum_bits
from ..array import supports as array_supports
from . import families as _k
from .rounding import fmt_params

__all__ = ["Runner", "TRUNCATED_FUSED", "truncated_fused_given", "LATE_C", "EXACT_FUSED", "FMA_CHAIN", "PAIRWISE",
           "AMX", "BFDOT"]


@dataclass(frozen=True)
class Runner:
    """One family's compiled kernel: ``supports(model)`` and ``run(model, A, B, C, out, L) -> bool``."""

    supports: Callable[[Model], bool]
    run: Callable[[Model, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int], bool]


_ZERO_EXP = -(1 << 14)  # exponent stored for a zero input: far below any real one, fits int16


def _binary32(fmt: Format) -> bool:
    return (fmt.precision, fmt.emin, fmt.emax) == (24, -126, 127)


def _normal_binary32_products(fmt: Format, a_range: tuple[int, int], b_range: tuple[int, int],
                              fb: Format | None = None) -> bool:
    """Every nonzero product of a value of A (``fmt``) and one of B (``fb``, default ``fmt``) (a_range,
    b_range: the least and greatest floor(log2 |x|) of their nonzero values) is an exact binary32 normal
    value: at most 24 significant bits, 2**-126 <= |a*b| < 2**128 (below the largest finite value)."""
    narrow = fmt.precision + (fb or fmt).precision <= 24
    if a_range[0] > a_range[1] or b_range[0] > b_range[1]:  # A or B all zeros: so is every product
        return narrow
    return narrow and a_range[0] + b_range[0] >= -126 and a_range[1] + b_range[1] + 2 <= 128


def _binary32_products(fmt: Format, F: int, e_zero: int, floor: bool, a_range: tuple[int, int],
                       b_range: tuple[int, int], fb: Format | None = None) -> tuple[int, int, int] | None:
    """(kmin, kmax, G) when truncated-fused can cut these products in binary32 and sum them in int32, else
    None.  a_range, b_range: the least and greatest floor(log2 |x|) of the nonzero values of A and of B.
    Late-c asks the same with e_zero = 0 and no floor: its cut is toward zero at 2**(top - F), top the
    group's largest E_a + E_b over nonzero products, so the argument below holds with e_max = top.

    Needs every nonzero product a*b to be an exact binary32 normal value: at most 24 significant bits,
    2**pmin <= |a*b| < 2**pmax within binary32's normal range (always so for fp16 and fp8; for bf16 and
    tf32 when the values are not too large or too small).  The term a*b * 2**(F - e_max) is then
    computed as fl32(fl32(a*b) * 2**k), k = F - e_max clamped to [kmin, kmax], kmin = -pmax:

    * unclamped and |term| >= 2**-126 it is exact; |term| < 2**(F + 2) (|a*b| < 2**(E_a + E_b + 2) and
      e_max >= E_a + E_b), so F <= 28 keeps it an exact int32 after the cut (toward zero, or floor);
    * a smaller term lies below 1, and so does its rounded binary32 value: cut toward zero to 0 as the
      exact one.  The floor cuts a negative one to -1 where the rounded value is not zero: so with
      ``floor`` its magnitude must be at least 2**-149 (k >= kmin and pmin + kmin >= -149);
    * k < kmin (e_max > F - kmin): every exact term is below 2**(pmax + kmin) = 1, and so is the clamped
      one (at least 2**-149 with ``floor``): the same cut;
    * k > kmax: e_max < F - kmax <= E_a + E_b of every nonzero product (E is floor(log2 |x|) or emin, so
      at least the range's least), so every product is zero and any scale gives 0; kmax = 127 keeps 2**k
      a binary32 value.

    G products of magnitude below 2**(F + 2) sum to less than 2**31 (no int32 overflow) before the sum
    is moved to float64.  Exponents fit int16 (zeros at -2**14 sum to -2**15 at least)."""
    if a_range[0] > a_range[1] or b_range[0] > b_range[1]:  # A or B all zeros: so is every product
        a_range = b_range = (0, 0)
    pmin = a_range[0] + b_range[0]
    pmax = a_range[1] + b_range[1] + 2
    kmin, kmax = -pmax, 127
    fb = fb or fmt  # B's format (A's unless the operands' formats differ)
    least_sum = max(a_range[0], fmt.emin) + max(b_range[0], fb.emin)
    if (fmt.precision + fb.precision > 24 or pmin < -126 or pmax > 128 or floor and pmin + kmin < -149
            or F - kmax > least_sum
            or not 0 <= F <= 28 or not -(1 << 14) < e_zero < (1 << 14)):
        return None
    return kmin, kmax, ((1 << 31) - 1) // ((1 << (F + 2)) - 1)


def _split_format(fmt: Format, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Finite values of ``fmt`` as ``(m, E)``: ``x == m * 2**(E - p + 1)``, ``E = E_fmt(x)`` (emin for
    subnormals), ``m`` a signed integer with ``|m| < 2**p``.  Zeros give ``m = 0`` (and E = emin)."""
    _, e = np.frexp(x)
    big_e = np.where(x == 0, fmt.emin, np.maximum(e.astype(np.int64) - 1, fmt.emin))
    m = np.ldexp(x, (fmt.precision - 1 - big_e).astype(np.int32)).astype(np.int64)
    return m, big_e


def _exponents_and_range(fmt: Format, x: np.ndarray, dtype: type = np.int32) -> tuple[np.ndarray, tuple[int, int]]:
    """E_fmt(x) (_ZERO_EXP for zeros), and the least and greatest floor(log2 |x|) of the nonzero x (the
    first above the second if there is none)."""
    if fmt.emin - fmt.precision + 1 >= -1022:  # every value of fmt is a float64 normal number: read its bits
        out = np.empty(x.shape, dtype)
        lo, hi = _k.exponents(np.ascontiguousarray(x, dtype=np.float64).reshape(-1), fmt.emin, _ZERO_EXP,
                              out.reshape(-1))
        return out, (int(lo), int(hi))
    nonzero = np.abs(x[x != 0])
    rng = (int(np.frexp(nonzero.min())[1]) - 1, int(np.frexp(nonzero.max())[1]) - 1) if nonzero.size else (1, 0)
    return np.where(x == 0, _ZERO_EXP, _split_format(fmt, x)[1]).astype(dtype), rng


def _any_zero_per_block(x: np.ndarray, L: int, axis: int) -> np.ndarray:
    z = x == 0
    shape = list(z.shape)
    shape[axis:axis + 1] = [shape[axis] // L, L]
    return z.reshape(shape).any(axis=axis + 1)


def _integers(fmt: Format, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(m, lsb, top): x == m * 2**lsb with |m| < 2**p, and |x| < 2**top; a zero gets an empty span
    (lsb far above top) so that it never widens a sum's span."""
    m, big_e = _split_format(fmt, x)
    zero = x == 0
    return (m, np.where(zero, _k.ZERO_LSB // 2, big_e - (fmt.precision - 1)).astype(np.int32),
            np.where(zero, _k.ZERO_TOP // 2, big_e + 1).astype(np.int32))


def _ieee_zero_ok(model: Model) -> bool:
    """The kernels' exact zeros: +0, or IEEE signs in every rounding but TowardNegative."""
    return model.exact_zero == "positive" or model.output_rounding is not RoundingMode.TowardNegative


def _rne32(model: Model) -> bool:
    """Binary32 C and result, IEEE zero signs: the step kernels' lanes."""
    return _binary32(model.result_format) and _binary32(model.c_format) and model.exact_zero == "ieee"


def _params(model: Model) -> tuple:
    return fmt_params(model.result_format, model.output_rounding, model.subnormals, model.overflow)


# --- truncated-fused ----------------------------------------------------------------------------------------
def _truncated_fused(model: Model, A: np.ndarray, B: np.ndarray, C: np.ndarray, out: np.ndarray, L: int) -> bool:
    fin, fb, fc = model.input_format, model.b_format, model.c_format
    carry_mod = 0.0 if model.carry_bits is None else float(2.0 ** (model.fraction_bits + 1 + model.carry_bits))
    EA, a_range = _exponents_and_range(fin, A, np.int16)
    EB, b_range = _exponents_and_range(fb, B, np.int16)
    floor = model.alignment is Alignment.FLOOR
    f32 = _binary32_products(fin, model.fraction_bits, model.e_zero, floor, a_range, b_range, fb)
    ZA, ZB = _any_zero_per_block(A, L, 2), _any_zero_per_block(B, L, 1)
    if f32 is not None:
        kmin, kmax, group = f32
        A = A.astype(np.float32)
    else:  # float64 lanes: the block's cut terms sum exactly in float64, no folding
        kmin, kmax, group = -1022, 1023, L
        EA = EA.astype(np.int32)
    if f32 is not None or rules.values_in_binary32(fb):  # B read as float32 where that loses nothing
        B = B.astype(np.float32)
    _k.truncated_fused(f32 is not None)(A, EA, ZA, B, EB, ZB, C, out, L, group, model.fraction_bits, kmin, kmax,
                                        model.e_zero, fc.emin, floor, carry_mod, *_params(model))
    return True


def truncated_fused_given(model: Model, A: np.ndarray, EA: np.ndarray, B: np.ndarray, EB: np.ndarray,
                          C: np.ndarray, out: np.ndarray, L: int) -> None:
    """The truncated-fused kernel in float64 lanes on operands whose exponents the caller gives (EA, EB,
    int, :data:`rules.NO_EXPONENT` for a zero term) instead of E_fmt of the model's input formats: the
    block-scaled engine's operands folded with their scales (:mod:`..scaled`).  A (batch, m, k), B (batch,
    k, n), C and out (batch, m, n), float64, finite, k whole blocks of L; every cut term below 2**(F + 4)
    so that L + 1 of them sum exactly in float64 (the caller's bounds); +0 exact zeros."""
    carry_mod = 0.0 if model.carry_bits is None else float(2.0 ** (model.fraction_bits + 1 + model.carry_bits))
    EA, EB = (np.ascontiguousarray(np.where(e == rules.NO_EXPONENT, _ZERO_EXP, e), np.int32) for e in (EA, EB))
    A, B = np.ascontiguousarray(A, np.float64), np.ascontiguousarray(B, np.float64)
    ZA, ZB = _any_zero_per_block(A, L, 2), _any_zero_per_block(B, L, 1)
    _k.truncated_fused(False)(A, EA, ZA, B, EB, ZB, C, out, L, L, model.fraction_bits, -1022, 1023, model.e_zero,
                              model.c_format.emin, model.alignment is Alignment.FLOOR, carry_mod, *_params(model))


TRUNCATED_FUSED = Runner(  # sums in float64, powers of two within its reach: the array kernel's bounds
    lambda m: m.exact_zero == "positive" and m.product_exponent == "sum" and array_supports(m), _truncated_fused)


# --- late-c ---------------------------------------------------------------------------------------------------
def _late_c(model: Model, A: np.ndarray, B: np.ndarray, C: np.ndarray, out: np.ndarray, L: int) -> bool:
    fin, fb, fc = model.input_format, model.b_format, model.c_format
    if A.size and B.size and np.max(np.abs(A)) * np.max(np.abs(B)) >= 2.0 ** (fc.emax + 1):
        return False  # a product may overflow to infinity: the numpy engine handles it
    F, F2, groups = model.fraction_bits, model.late_fraction_bits, model.groups
    G = late_sum_bits(model)
    EA, a_range = _exponents_and_range(fin, A, np.int16)
    EB, b_range = _exponents_and_range(fb, B, np.int16)
    f32 = _binary32_products(fin, F, 0, False, a_range, b_range, fb)
    lanes32 = f32 is not None and L // groups <= f32[2]  # a group's int32 sum cannot overflow
    if lanes32:
        kmin, kmax = f32[0], f32[1]
        A, B = A.astype(np.float32), B.astype(np.float32)
    else:
        kmin, kmax = -1022, 1023
        EA, EB = EA.astype(np.int32), EB.astype(np.int32)
    _k.late_c(lanes32)(A, EA, B, EB, C, out, L, F, F2, G, groups, kmin, kmax, fc.emin, model.exact_zero == "ieee",
                       *_params(model))
    return True


LATE_C = Runner(lambda m: _ieee_zero_ok(m) and array_supports(m), _late_c)  # the array kernel's bound on F2


# --- exact-fused ----------------------------------------------------------------------------------------------
def _exact_fused(model: Model, A: np.ndarray, B: np.ndarray, C: np.ndarray, out: np.ndarray, L: int) -> bool:
    fin, fb, fc = model.input_format, model.b_format, model.c_format
    MA, LA, HA = _integers(fin, A)
    MB, LB, HB = _integers(fb, B)
    _k.exact_fused(A, MA, LA, HA, B, MB, LB, HB, C, out, L, fin.precision + fb.precision - 2, fc.emin,
                   fc.precision, model.exact_zero == "ieee", *_params(model))
    return True


EXACT_FUSED = Runner(_ieee_zero_ok, _exact_fused)


# --- the step families ----------------------------------------------------------------------------------------
def _fma_chain(model: Model, A: np.ndarray, B: np.ndarray, C: np.ndarray, out: np.ndarray, L: int) -> bool:
    fin, fb = model.input_format, model.b_format
    # binary32 lanes write +0 for every zero under exact_zero="positive", a rounded-to-zero result too:
    # only the float64 lanes tell an exact zero (+0) from an underflow (its sign)
    lanes32 = (_binary32(model.result_format) and _binary32(model.c_format)
               and model.output_rounding is RoundingMode.TiesToEven and model.exact_zero == "ieee"
               and rules.values_in_binary32(fin) and rules.values_in_binary32(fb))
    if lanes32:
        A, B = A.astype(np.float32), B.astype(np.float32)
    _k.fma_chain(lanes32)(A, B, C, out, not model.subnormals, model.exact_zero == "positive", *_params(model))
    return True


FMA_CHAIN = Runner(_ieee_zero_ok, _fma_chain)


def _pairwise(model: Model, A: np.ndarray, B: np.ndarray, C: np.ndarray, out: np.ndarray, L: int) -> bool:
    _k.pairwise(A, B, C, out, L, not model.subnormals)
    return True


PAIRWISE = Runner(lambda m: _rne32(m) and m.output_rounding is RoundingMode.TiesToEven, _pairwise)


def _amx(model: Model, A: np.ndarray, B: np.ndarray, C: np.ndarray, out: np.ndarray, L: int) -> bool:
    lanes32 = rules.values_in_binary32(model.input_format) and rules.values_in_binary32(model.b_format)
    if lanes32:
        A, B = A.astype(np.float32), B.astype(np.float32)
    _k.amx(lanes32)(A, B, C, out, L, not model.subnormals)
    return True


AMX = Runner(lambda m: _rne32(m) and m.output_rounding is RoundingMode.TiesToEven, _amx)


def _bfdot(model: Model, A: np.ndarray, B: np.ndarray, C: np.ndarray, out: np.ndarray, L: int) -> bool:
    fin, fb = model.input_format, model.b_format
    ftz = not model.subnormals
    lanes32 = False
    if ftz:
        a_range = _exponents_and_range(fin, A)[1]
        b_range = _exponents_and_range(fb, B)[1]
        lanes32 = _binary32(model.c_format) and _normal_binary32_products(fin, a_range, b_range, fb)
    if lanes32:
        A, B = A.astype(np.float32), B.astype(np.float32)
    _k.bfdot(lanes32, ftz)(A, B, C, out)
    return True


BFDOT = Runner(lambda m: _rne32(m) and m.output_rounding is RoundingMode.ToOdd and m.overflow == "ieee", _bfdot)
