"""Compiled kernels (numba) for every family the numpy engine runs, bit for bit the same.

``supports(model)`` says whether a model has a compiled kernel; ``batched(model, A, B, C)`` runs one on a
batch of products and returns None when these particular inputs need the numpy engine (for instance a
late-c product overflowing to infinity).  The engine imports this package only when numba is installed
(the ``fast`` extra); see ``families.py`` for why each kernel is exact.
"""

from __future__ import annotations

import numpy as np

from ...formats import Format, RoundingMode
from ...model import Alignment, Family, Model
from ...plan import Index, Plan, plan, run
from ..kernels import add_c, store
from .. import rules
from ..array import late_sum_bits
from ..array import supports as array_supports
from . import families as _k
from .rounding import fmt_params

__all__ = ["supports", "batched"]

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


def supports(model: Model) -> bool:
    """Whether a compiled kernel runs this model (the numpy engine runs every model)."""
    fam, fin, fb, out = model.family, model.input_format, model.b_format, model.result_format
    block = model.block_model()
    if block is not model:  # block by block, see _Compiled
        return supports(block)
    if not fam.has("numba"):
        return False
    ieee_zero_ok = model.exact_zero == "positive" or model.output_rounding is not RoundingMode.TowardNegative
    if not rules.products_exact_in_float64(fin, fb) or out.precision > 51:
        return False
    if fam is Family.TRUNCATED_FUSED:  # sums in float64, powers of two within its reach: the array kernel's bounds
        return model.exact_zero == "positive" and model.product_exponent == "sum" and array_supports(model)
    if fam is Family.LATE_C:  # the same sums in float64 as the array kernel: the same bound on F2
        return ieee_zero_ok and array_supports(model)
    if fam is Family.EXACT_FUSED:
        return ieee_zero_ok
    if fam is Family.FMA_CHAIN:
        return ieee_zero_ok
    rne32 = _binary32(out) and _binary32(model.c_format) and model.exact_zero == "ieee"
    if fam is Family.PAIRWISE:
        return rne32 and model.output_rounding is RoundingMode.TiesToEven
    if fam is Family.AMX:
        return rne32 and model.output_rounding is RoundingMode.TiesToEven
    if fam is Family.BFDOT:
        return rne32 and model.output_rounding is RoundingMode.ToOdd and model.overflow == "ieee"
    return False


def _exponents(fmt: Format, x: np.ndarray, dtype: type = np.int32) -> np.ndarray:
    """E_fmt(x), and _ZERO_EXP for zeros."""
    return _exponents_and_range(fmt, x, dtype)[0]


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


class _NeedsNumpy(Exception):
    """A block of a plan met inputs the compiled kernels do not run (the numpy engine takes the call)."""


class _Compiled:
    """The compiled kernels' :class:`blockfma.plan.Datapath` for plans that are not a plain chain (an
    accumulator format, C after the blocks, a product order): each block by the compiled fused kernel of
    the block model over (batch, m, k) and (batch, k, n) operands, the store and the addition of C by the
    numpy engine's own code."""

    def __init__(self, p: Plan, A: np.ndarray, B: np.ndarray):
        self.p, self.A, self.B = p, A, B

    def block(self, products: Index, c: np.ndarray) -> np.ndarray:
        ix = products if isinstance(products, slice) else list(products)
        out = batched(self.p.block, self.A[:, :, ix], self.B[:, ix, :], c)
        if out is None:
            raise _NeedsNumpy
        return out

    def zero(self, c: np.ndarray) -> np.ndarray:
        return np.zeros(c.shape)

    def store(self, x: np.ndarray) -> np.ndarray:
        return store(self.p.model, x)

    def add_c(self, s: np.ndarray, c: np.ndarray) -> np.ndarray:
        return add_c(self.p.model, s, c)


#: products below which the kernels run on one thread: waking numba's thread pool costs more than the
#: work (measured on the 2-core CI machine under load: 24 ms against 0.3 ms for 256 rows of 32 products)
SMALL_WORK = 1 << 16


def batched(model: Model, A: np.ndarray, B: np.ndarray, C: np.ndarray) -> np.ndarray | None:
    """float64 D (batch, m, n) for finite A (batch, m, k), B (batch, k, n), C (batch, m, n), values already
    checked, flushed and in the model's formats; None if these inputs need the numpy engine."""
    import numba

    threads = numba.get_num_threads()
    if threads == 1 or A.shape[0] * A.shape[1] * A.shape[2] * B.shape[2] >= SMALL_WORK:
        return _batched(model, A, B, C)
    numba.set_num_threads(1)
    try:
        return _batched(model, A, B, C)
    finally:
        numba.set_num_threads(threads)


def _batched(model: Model, A: np.ndarray, B: np.ndarray, C: np.ndarray) -> np.ndarray | None:
    p = plan(model, A.shape[2])
    kp, L = p.padded, p.block_width
    if kp != A.shape[2]:
        A = rules.pad(A, kp)
        B = np.swapaxes(rules.pad(np.swapaxes(B, 1, 2), kp), 1, 2)
    if not p.is_chain:  # blocks by the compiled kernels, the rest of each step by numpy
        try:
            return run(p, _Compiled(p, A, B), np.asarray(C, dtype=np.float64))
        except _NeedsNumpy:
            return None
    fam = model.family
    # contiguous and writable: numba compiles a kernel anew for read-only arrays (broadcast views are),
    # which doubled the kernels compiled in a test run
    A, B, C = (np.require(x, np.float64, ("C", "W")) for x in (A, B, C))
    out = np.empty(C.shape)
    fin, fb, fc = model.input_format, model.b_format, model.c_format
    rp = fmt_params(model.result_format, model.output_rounding, model.subnormals, model.overflow)
    ieee_zero = model.exact_zero == "ieee"
    ftz = not model.subnormals
    if fam is Family.TRUNCATED_FUSED:
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
        _k.truncated_fused(f32 is not None)(A, EA, ZA, B, EB, ZB, C, out, L, group, model.fraction_bits, kmin,
                                            kmax, model.e_zero, fc.emin, floor, carry_mod, *rp)
    elif fam is Family.LATE_C:
        if A.size and B.size and np.max(np.abs(A)) * np.max(np.abs(B)) >= 2.0 ** (fc.emax + 1):
            return None  # a product may overflow to infinity: the numpy engine handles it
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
        _k.late_c(lanes32)(A, EA, B, EB, C, out, L, F, F2, G, groups, kmin, kmax, fc.emin, ieee_zero, *rp)
    elif fam is Family.EXACT_FUSED:
        MA, LA, HA = _integers(fin, A)
        MB, LB, HB = _integers(fb, B)
        _k.exact_fused(A, MA, LA, HA, B, MB, LB, HB, C, out, L, fin.precision + fb.precision - 2, fc.emin,
                       fc.precision, ieee_zero, *rp)
    elif fam is Family.FMA_CHAIN:
        positive_zero = model.exact_zero == "positive"
        res = model.result_format
        lanes32 = (_binary32(res) and _binary32(fc) and model.output_rounding is RoundingMode.TiesToEven
                   and rules.values_in_binary32(fin) and rules.values_in_binary32(fb))
        if lanes32:
            A, B = A.astype(np.float32), B.astype(np.float32)
        _k.fma_chain(lanes32)(A, B, C, out, ftz, positive_zero, *rp)
    elif fam is Family.PAIRWISE:
        _k.pairwise(A, B, C, out, L, ftz)
    elif fam is Family.AMX:
        lanes32 = rules.values_in_binary32(fin) and rules.values_in_binary32(fb)
        if lanes32:
            A, B = A.astype(np.float32), B.astype(np.float32)
        _k.amx(lanes32)(A, B, C, out, L, ftz)
    elif fam is Family.BFDOT:
        lanes32 = False
        if ftz:
            a_range = _exponents_and_range(fin, A)[1]
            b_range = _exponents_and_range(fb, B)[1]
            lanes32 = _binary32(fc) and _normal_binary32_products(fin, a_range, b_range, fb)
        if lanes32:
            A, B = A.astype(np.float32), B.astype(np.float32)
        _k.bfdot(lanes32, ftz)(A, B, C, out)
    else:  # pragma: no cover - supports() rules it out
        raise NotImplementedError(fam)
    return out
