"""The Ozaki schemes: fp64-accurate matrix products from int8 matrix units with exact int32 accumulation.

* Scheme I (:func:`ozaki1`): Ozaki, Ogita, Oishi, Rump, Numer. Algorithms 59 (2012); with int8 units
  Mukunoki, Ozaki, Ogita, Imamura, ISC 2020, and Ootomo, Ozaki, Yokota, IJHPCA 2024 (ozIMMU).  Exact int8
  slices of A's rows and B's columns, slices * (slices + 1) / 2 unit GEMMs, about ``w`` bits per slice.
* Scheme II (:func:`ozaki2`): Uchino, Ozaki, Imamura, arXiv:2504.08009 (2025; GEMMul8).  Integers scaled from
  A and B, one unit GEMM per modulus of their residues, the CRT; about 4 bits per modulus.

What each rounds: their docstrings.  Both lose accuracy on rows (columns) of wide dynamic range: bits are
counted below the row's largest element (I) or its norm (II), the schemes' known limitation.  Their steps
(:func:`ozaki1_steps`, :func:`ozaki2_steps`) take the array module first and run on numpy arrays here and on
torch tensors on their device (:mod:`.tensors`), the same code and the same bits.  Units: ``unit=None`` is
:func:`exact_unit`; :func:`model_unit` runs the engine with :func:`int8_model`; :func:`torch_unit` calls
``torch._int_mm``; any callable ``f(Ai8, Bi8) -> int array`` works.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np

from .. import formats as _formats
from ..arguments import ArgumentError, choice, integer, memory
from ..probes.runtime import import_torch
from . import arrays
from .split import check_input, check_operands

__all__ = [
    "MODULI",
    "Unit",
    "exact_unit",
    "int8_model",
    "model_unit",
    "torch_unit",
    "slice_width",
    "slices_needed",
    "row_exponents",
    "slice_rows",
    "ozaki1",
    "ozaki2",
    "ozaki2_shifts",
    "ozaki1_steps",
    "ozaki2_steps",
    "int_mm_shape",
    "pick_moduli",
    "CRT",
    "round_limbs",
    "cut_rows",
    "shifts",
    "integers",
    "residues",
    "chunked",
    "numpy_product",
]

Unit = Callable[[np.ndarray, np.ndarray], Any]
"""An int8 unit: f(A, B) with int8 arrays A (m x k), B (k x n) -> the (m x n) exact integer product."""

INT32_MAX = 2**31 - 1
MODULI: tuple[int, ...] = (256, 255, 253, 251, 247, 241, 239, 233, 229, 227,
                           223, 217, 211, 199, 197, 193, 191, 181, 179, 173)
"""Default moduli of Ozaki II, pairwise coprime, in the order they are used (GEMMul8's int8 table)."""

FUSED_MODULI = 22  # at most this many moduli for the fused kernels (.ozaki_fused): sum r_l c_l < 2**190
DEFAULT_N_MODULI = 16  # fp64-level accuracy on random normal matrices up to k of several thousand (see ozaki2)
RESIDUE_K = INT32_MAX // (128 * 128)  # 131071: products of centred residues (|r| <= 128) summed in int32
_BOUND_BITS = 6  # Ozaki II accurate scaling: |A''| <= 2**6 = 64
_BOUND_K = INT32_MAX // (64 * 64)  # 524287


# --------------------------------------------------------------------------------------------------- inputs

MAX_SLICES = 2100
"""More slices than any float64 row needs (its bits span at most 2**1024 down to 2**-1074: 2098 bits)."""


def _check_unit(unit: Any) -> None:
    if unit is not None and not callable(unit):
        raise ArgumentError("unit", unit, "must be a function f(A_int8, B_int8) -> their integer product, or None "
                            "(the exact unit)", fix="e.g. ozaki.exact_unit, ozaki.model_unit() or ozaki.torch_unit()")


# ---------------------------------------------------------------------------------------------------- units

def exact_unit(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """What an int8 unit with exact int32 accumulation computes: ``A @ B`` exactly, as int64.

    A (m x k) and B (k x n) hold integers in [-128, 127].  The product is computed in float64 BLAS, which is
    exact here whatever the summation order, because every partial sum is an integer of magnitude at most
    k * 2**14 < 2**53 (tests/test_multiword_ozaki.py holds it to the int64 matmul).  OverflowError if an
    element leaves the int32 range [-2**31, 2**31 - 1]: the unit's accumulator would wrap (a two's-complement
    accumulator that wraps in between but ends in range gives the exact result, so only the final value is
    checked)."""
    A, B = np.asarray(A), np.asarray(B)
    for x, what in ((A, "A"), (B, "B")):
        if x.ndim != 2:
            raise ValueError(f"the int8 unit takes 2-D {what}; got shape {x.shape}")
        if x.dtype != np.int8 and (x.dtype.kind not in "iu" or (x.size and (x.min() < -128 or x.max() > 127))):
            raise ValueError(f"the int8 unit takes integers in [-128, 127]; {what} has dtype {x.dtype}")
    if A.shape[1] != B.shape[0]:
        raise ValueError(f"inner dimensions differ: {A.shape} @ {B.shape}")
    k = A.shape[1]
    if k * 2**14 < 2**53:
        C = (A.astype(np.float64) @ B.astype(np.float64)).astype(np.int64)
    else:  # beyond any realistic k, but keep the function exact
        C = A.astype(np.int64) @ B.astype(np.int64)
    _check_int32(C, "the exact int8 unit", k)
    return C


def _check_int32(C: np.ndarray, who: str, k: int) -> None:
    if C.size and (C.max() > INT32_MAX or C.min() < -INT32_MAX - 1):
        idx = tuple(int(i) for i in np.unravel_index(int(np.argmax(np.abs(C))), C.shape))
        raise OverflowError(f"{who}: C{_formats.index_text(idx)} = {int(C[idx])} does not fit the int32 "
                            f"accumulator (k = {k}); use fewer bits per slice (a smaller width) or split k")


def _run_unit(unit: Unit | None, A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """The unit's product of int8 A and B as int64, checked: shape, integers, int32 range."""
    if unit is None:
        return exact_unit(A, B)
    out = unit(A, B)
    if hasattr(out, "detach"):  # a torch tensor
        out = out.detach().cpu().numpy()
    C = np.asarray(out)
    m, n = A.shape[0], B.shape[1]
    if C.shape != (m, n):
        raise ValueError(f"the unit returned shape {C.shape} for a ({m} x {A.shape[1]}) @ ({A.shape[1]} x {n}) "
                         "product")
    if C.dtype.kind == "f":
        if not np.isfinite(C).all() or (C != np.trunc(C)).any() or (C.size and np.abs(C).max() >= 2.0**53):
            raise ValueError("the unit returned non-integer (or inexact) values; an int8 unit's products are "
                             "integers")
        C = C.astype(np.int64)
    elif C.dtype.kind in "iu":
        C = C.astype(np.int64)
    else:
        raise ValueError(f"the unit returned dtype {C.dtype}; it must return integers")
    _check_int32(C, f"the unit {getattr(unit, '__name__', unit)!s}", A.shape[1])
    return C


def numpy_product(unit: Unit | None) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """The int64 product of int8 numpy arrays on ``unit`` (None: :func:`exact_unit`), checked: what the
    schemes' steps (:func:`ozaki1_steps`, :func:`ozaki2_steps`) call on the host."""
    return lambda A, B: _run_unit(unit, A, B)


def chunked(xp: Any, product: Callable[[Any, Any], Any], A: Any, B: Any, chunk: int) -> Any:
    """Sum over k-chunks of at most ``chunk`` of ``product`` (int8 operands, int64 results), in int64
    (exact); ``xp``: numpy or torch."""
    k = A.shape[1]
    if k <= chunk:
        return product(A, B)
    C = arrays.zeros(xp, (A.shape[0], B.shape[1]), "int64", A)
    for lo in range(0, k, chunk):
        C = C + product(arrays.contiguous(xp, A[:, lo:lo + chunk]), arrays.contiguous(xp, B[lo:lo + chunk]))
    return C


def int8_model() -> Any:
    """A :class:`blockfma.Model` that computes an int8 unit's product with the engine.

    int8 values are exactly representable in bf16 (8-bit precision), and ``EXACT_FUSED`` with
    ``block_width=None`` rounds the exact sum of all k products once to float64: exact while the sum stays
    below 2**53 in magnitude, which int32 results always are.  So ``blockfma.gemm(Ai.astype(float),
    Bi.astype(float), None, model=int8_model())`` equals the integer product."""
    from ..model import Family, Model

    return Model(Family.EXACT_FUSED, "bf16", "fp64", block_width=None, name="int8 unit, exact int32 accumulation")


def model_unit(model: Any = None, *, backend: str = "auto") -> Unit:
    """A unit that runs ``blockfma.gemm`` with ``model`` (default :func:`int8_model`) on the int8 operands
    read as floats; its float64 results must be integers (they are for :func:`int8_model`)."""
    from ..engine import gemm

    mdl = int8_model() if model is None else model

    def unit(A: np.ndarray, B: np.ndarray) -> np.ndarray:
        return gemm(np.asarray(A, dtype=np.float64), np.asarray(B, dtype=np.float64), None, model=mdl,
                    backend=backend)

    unit.__name__ = f"model_unit({mdl.summary()})"
    return unit


def int_mm_shape(m: int, k: int, n: int) -> tuple[int, int, int]:
    """The shape (m', k', n') that ``torch._int_mm`` gets for an (m x k) @ (k x n) product: zero-padded to
    what cuBLASLt accepts (m > 16, k and n multiples of 8, k at least 32, as torchao's safe_int_mm advises);
    the padding leaves the product unchanged."""
    return max(m, 17), -(-max(k, 32) // 8) * 8, -(-max(n, 8) // 8) * 8


def int_mm(torch: Any, a: Any, b: Any, out: Any = None) -> Any:
    """``torch._int_mm(a, b)`` (int8 x int8 -> int32, exact; into ``out`` if given) for tensors already padded
    to :func:`int_mm_shape`, with ``b`` handed over column-major: cuBLASLt's int8 kernels want the "TN" layout,
    and a row-major ``b`` takes a slower kernel (pytorch/pytorch#165230; docs/multiword.md).  Views of rows of
    ``a`` (columns of ``b``) with a longer leading dimension go as they are (cuBLAS's lda and ldb)."""
    a, b = a if a.stride(1) == 1 else a.contiguous(), b if b.stride(0) == 1 else b.t().contiguous().t()
    return torch._int_mm(a, b) if out is None else torch._int_mm(a, b, out=out)


def torch_unit(device: str | None = None) -> Unit:
    """A unit that calls ``torch._int_mm`` (int8 x int8 -> int32) on ``device`` (default: "cuda" where torch
    sees a GPU, else "cpu"), the operands zero-padded to :func:`int_mm_shape`.  Checked here on the CPU only."""
    torch = import_torch("ozaki.torch_unit")
    dev = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))

    def unit(A: np.ndarray, B: np.ndarray) -> np.ndarray:
        m, k = A.shape
        n = B.shape[1]
        mp, kp, np_ = int_mm_shape(m, k, n)
        Ap = np.zeros((mp, kp), dtype=np.int8)
        Bp = np.zeros((kp, np_), dtype=np.int8)
        Ap[:m, :k] = A
        Bp[:k, :n] = B
        C = int_mm(torch, torch.from_numpy(Ap).to(dev), torch.from_numpy(Bp).to(dev))
        return C[:m, :n].cpu().numpy()

    unit.__name__ = f"torch_unit({dev})"
    return unit


# ---------------------------------------------------------------------------------------------- Ozaki I

def slice_width(k: int) -> int:
    """Bits per int8 slice for inner dimension k: the largest w <= 7 with 2*w + ceil(log2 k) <= 31.

    Slices hold integers of magnitude at most 2**w - 1 <= 127, so a unit GEMM's element is at most
    k * (2**w - 1)**2 < 2**(ceil(log2 k) + 2*w) <= 2**31: no int32 overflow.  w = 7 up to k = 2**17, 6 up
    to 2**19, ...; ValueError beyond k = 2**29 (w would be 0: split k first)."""
    k = integer("k", k, least=0)
    w = min(7, (31 - max(0, (k - 1).bit_length())) // 2)  # ceil(log2 k)
    if w < 1:
        raise ValueError(f"k = {k} is too long for exact int32 accumulation even with 1-bit slices "
                         "(2*w + ceil(log2 k) <= 31 needs k <= 2**29); split the product along k")
    return w


def slices_needed(bits: int, k: int) -> int:
    """Slices that keep ``bits`` bits below each row's leading bit for inner dimension k:
    ceil(bits / slice_width(k)).  53 bits (a float64 element in the row's top binade) need 8 slices for
    k <= 2**17."""
    bits = integer("bits", bits, least=1)
    return -(-bits // slice_width(k))


def row_exponents(A: Any, xp: Any = np) -> Any:
    """e_i with max_j |a_ij| < 2**e_i <= 2 * max_j |a_ij| (frexp's exponent of the row maximum), as int64;
    0 for an all-zero row.  (ceil(log2 max) except at powers of two, where it is one more, so that the top
    slice stays below 2**w.)  ``xp``: numpy, or torch for a float64 tensor."""
    if arrays.is_numpy(xp):
        A = np.asarray(A, dtype=np.float64)
    if A.shape[1] == 0:
        return arrays.zeros(xp, (A.shape[0],), "int64", A)
    return arrays.frexp(xp, arrays.amax(xp, xp.abs(A), 1))[1]


def slice_rows(A: Any, slices: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Cut each row of A into int8 slices without error: returns ``(S, e)``, S of shape (slices, m, k)
    and int8, e of shape (m,) (:func:`row_exponents`), such that

        A = sum_{s=1..slices} 2**(e_i - s*width) * S[s-1] + R,   |R_ij| < 2**(e_i - slices*width),

    where slice s holds bits e_i - (s-1)*width - 1 down to e_i - s*width of |a_ij| (with a_ij's sign:
    truncation, so every slice and R have the sign of a_ij and |S| <= 2**width - 1).  Everything is exact
    (each step keeps bits of a_ij, which float64 holds); R = 0 once slices*width reaches the distance from
    2**e_i down to the lowest set bit in the row, e.g. 53 bits for a row within one binade."""
    A = check_input(A, "A")
    slices = integer("slices", slices, least=1, most=MAX_SLICES)
    width = integer("width", width, least=1, most=7)
    S, e = cut_rows(np, A, slices, width)
    return (np.stack(S) if S else np.zeros((0,) + A.shape, dtype=np.int8)), e


def cut_rows(xp: Any, A: Any, slices: int, width: int) -> tuple[list[Any], Any]:
    """:func:`slice_rows`'s rule on checked float64 A (numpy, or a torch tensor with ``xp``): the int8
    slices as a list, and the row exponents."""
    e = row_exponents(A, xp)
    out = []
    r = A
    for s in range(1, slices + 1):
        shift = (s * width - e)[:, None]
        with np.errstate(under="ignore"):  # an underflowing value is < 2**-1022 and truncates to 0 anyway
            d = xp.trunc(arrays.ldexp(xp, r, shift))
        out.append(arrays.to(xp, d, "int8"))
        r = r - arrays.ldexp(xp, d, -shift)  # the bits just taken: exactly representable, so exact
    return out, e


def ozaki1(A: Any, B: Any, *, slices: int, unit: Unit | None = None, width: int | None = None) -> np.ndarray:
    """C ~ A @ B in float64 by Ozaki scheme I on an int8 unit.

    A's rows and B's columns are cut by :func:`slice_rows` into ``slices`` slices of ``width`` bits (default
    :func:`slice_width` (k): 7 for k <= 2**17).  For each level g = s + t from slices + 1 down to 2, the
    unit products A_s @ B_t of the pairs with s + t = g (the triangular set s + t <= slices + 1) are summed
    exactly in int64, converted exactly to float64 (|sum| < slices * 2**31 < 2**53) and scaled exactly by
    2**(e_i + f_j - g*width); the levels are added in float64 from the smallest (g = slices + 1) to the
    largest (g = 2).  Rounded: those slices - 1 float64 additions, and the scaling where it under- or
    overflows (a result whose terms overflow comes out inf or nan, as from a float64 GEMM).  Dropped: the
    slice remainders and the pairs with s + t > slices + 1, at most about (slices + 1) * k *
    2**(e_i + f_j - slices*width) in element (i, j); once every row and column is sliced exactly (R = 0 in
    :func:`slice_rows`) and slices >= 2 * (slices used) - 1, nothing nonzero is dropped and only the float64
    additions round.

    ``unit``: a callable ``f(Ai8, Bi8) -> int array`` (default :func:`exact_unit`); OverflowError from the
    unit if an int32 accumulator would overflow (possible only with a ``width`` wider than the rule)."""
    slices = integer("slices", slices, least=1, most=MAX_SLICES)
    width = integer("width", width, least=1, most=7, none=True)
    _check_unit(unit)
    sa, sb = np.shape(A), np.shape(B)
    if len(sa) == 2 and len(sb) == 2:  # before any conversion: the slices and the float64 copies
        m, k, n = sa[0], sa[1], sb[1]
        memory("slices", slices, (slices + 8.0 * 4) * (m * k + k * n) + 8.0 * 4 * m * n,
               f"{slices} int8 slices of a {m}x{k} and a {k}x{n} matrix", fix="use fewer slices")
    A, B = check_operands(A, B)
    (m, k), n = A.shape, B.shape[1]
    w = slice_width(k) if width is None else width
    if m == 0 or n == 0 or k == 0:
        return np.zeros((m, n))
    return ozaki1_steps(np, A, B, slices, w, numpy_product(unit))


def ozaki1_steps(xp: Any, A: Any, B: Any, slices: int, w: int, product: Callable[[Any, Any], Any]) -> Any:
    """:func:`ozaki1`'s steps on checked, non-empty float64 operands (numpy arrays, or torch tensors on one
    device with ``xp`` = torch), ``product`` the unit (int8 operands, int64 result): the one copy of the
    scheme that both paths run."""
    m, n = A.shape[0], B.shape[1]
    SA, ea = cut_rows(xp, A, slices, w)
    SBt, eb = cut_rows(xp, B.T, slices, w)
    SB = [arrays.contiguous(xp, S.T) for S in SBt]
    live_a = [bool(S.any()) for S in SA]
    live_b = [bool(S.any()) for S in SB]
    base = ea[:, None] + eb[None, :]
    C = arrays.zeros(xp, (m, n), "float64", A)
    for g in range(slices + 1, 1, -1):  # smallest terms first
        level = None
        for s in (s for s in range(1, g) if live_a[s - 1] and live_b[g - s - 1]):  # the pairs s + t = g
            T = product(SA[s - 1], SB[g - s - 1])
            level = T if level is None else level + T
        if level is not None and bool(level.any()):
            with np.errstate(under="ignore", over="ignore", invalid="ignore"):  # inf - inf: as float64 GEMM
                C = C + arrays.ldexp(xp, arrays.to(xp, level, "float64"), base - g * w)
    return C


# --------------------------------------------------------------------------------------------- Ozaki II

def pick_moduli(moduli: Sequence[int] | None, n_moduli: int | None) -> tuple[int, ...]:
    if moduli is not None and n_moduli is not None:
        raise ArgumentError("n_moduli", n_moduli, "and moduli= both choose the moduli: pass moduli= or n_moduli=, "
                            "not both")
    if moduli is None:
        n = DEFAULT_N_MODULI if n_moduli is None else integer("n_moduli", n_moduli, least=1, most=len(MODULI))
        return MODULI[:n]
    if isinstance(moduli, (str, bytes)) or not hasattr(moduli, "__iter__"):
        raise ArgumentError("moduli", moduli, "must be a list of pairwise coprime integers in [2, 256]",
                            use={"moduli": MODULI[:4]})
    listed = list(moduli)
    for m in listed:
        if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or not 2 <= m <= 256:
            raise ArgumentError("moduli", moduli, f"holds {m!r}: each modulus must be an integer in [2, 256] "
                                "(the residues are centred into int8)")
    mods = tuple(int(m) for m in listed)
    if not mods:
        raise ArgumentError("moduli", moduli, "is empty; give at least one modulus", use={"n_moduli": 16})
    for i, a in enumerate(mods):
        for b in mods[i + 1:]:
            if math.gcd(a, b) != 1:
                raise ArgumentError("moduli", moduli, f"must be pairwise coprime; {a} and {b} share the factor "
                                    f"{math.gcd(a, b)}")
    return mods


def _norm_shifts(xp: Any, X: Any, L: float) -> Any:
    """s_i = the largest integer with 2**s_i * ||x_i||_2 <= 2**L, from a rigorous upper bound of the norm."""
    k = X.shape[1]
    e = row_exponents(X, xp)
    with np.errstate(under="ignore"):
        Y = arrays.ldexp(xp, X, -e[:, None])  # |y| < 1, max|y| >= 1/2; underflow moves y by < 2**-1074
        sq = arrays.row_squares(xp, Y)  # rounding: relative gamma_k; underflow: < k * 2**-1074 absolute
    ub = sq * (1 + (k + 2) * 2.0**-52) + 2.0**-1000
    s = arrays.to(xp, xp.floor(L - 0.5 * xp.log2(ub)), "int64") - e
    return xp.where(sq > 0, s, 0)


def _max_shifts(xp: Any, C2: Any, L: float, axis: int) -> Any:
    """c with 2**c * sqrt(max C2 along axis) <= 2**L (0 where the maximum is 0); C2 non-empty."""
    mx = arrays.to(xp, arrays.amax(xp, C2, axis), "float64")
    with np.errstate(divide="ignore"):
        c = arrays.to(xp, xp.floor(L - 0.5 * xp.log2(xp.where(mx > 0, mx, 1.0)) * (1 + 2.0**-40)), "int64")
    return xp.where(mx > 0, c, 0)


def ozaki2_shifts(A: Any, B: Any, P: int, scaling: Literal["fast", "accurate"] = "fast",
                  unit: Unit | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Power-of-two shifts (sa, sb) for Ozaki II such that A' = trunc(2**sa_i a_ij), B' = trunc(2**sb_j b_ij)
    give |(A' @ B')_ij| <= sum_l |A'_il| |B'_lj| < P/2, with 2**L = sqrt(P/2) (a hair less):

    ``"fast"`` (GEMMul8's fast mode, Cauchy-Schwarz): 2**sa_i ||a_i||_2 <= 2**L and 2**sb_j ||b_j||_2 <= 2**L,
    from rigorous upper bounds of the 2-norms.
    ``"accurate"`` (Uchino-Ozaki-Imamura's scaling): first A'' = ceil(2**u_i |a_ij|) <= 64 with u_i = 6 - e_i
    (and B'' alike), C'' = A'' @ B'' on the unit (>= 2**(u_i+v_j) (|A| |B|)_ij); then sa_i = u_i + c_i with
    2**c_i sqrt(max_j C''_ij) <= 2**L, sb_j = v_j + d_j with 2**d_j sqrt(max_i C''_ij) <= 2**L; so
    2**(sa_i+sb_j) (|A||B|)_ij <= 2**(2L) C''_ij / sqrt(max_j C''_ij max_i C''_ij) <= 2**(2L).  One more unit
    GEMM; more bits where the Cauchy-Schwarz bound is loose (rows and columns of very different shapes), about
    as many on random dense matrices (the 6-bit bounds cost what Cauchy-Schwarz costs there)."""
    scaling = choice("scaling", scaling, ("fast", "accurate"))
    P = integer("P", P, least=2)
    _check_unit(unit)
    A, B = check_operands(A, B)
    if A.shape[1] == 0 or A.shape[0] == 0 or B.shape[1] == 0:
        return np.zeros(A.shape[0], dtype=np.int64), np.zeros(B.shape[1], dtype=np.int64)
    return shifts(np, A, B, P, scaling, numpy_product(unit))


def shifts(xp: Any, A: Any, B: Any, P: int, scaling: str, product: Callable[[Any, Any], Any]) -> tuple[Any, Any]:
    """:func:`ozaki2_shifts`' rule on checked, non-empty float64 operands (numpy, or torch with ``xp``)."""
    L = (math.log2(P) - 1) / 2 - 2.0**-20  # 2**(2L) < P/2: the margin covers float64's log2
    if scaling == "fast":
        return _norm_shifts(xp, A, L), _norm_shifts(xp, B.T, L)
    ua = _BOUND_BITS - row_exponents(A, xp)
    vb = _BOUND_BITS - row_exponents(B.T, xp)
    with np.errstate(under="ignore"):
        Ab = xp.ceil(arrays.ldexp(xp, xp.abs(A), ua[:, None]))
        Bb = xp.ceil(arrays.ldexp(xp, xp.abs(B), vb[None, :]))
    Ab = arrays.to(xp, xp.where((Ab == 0) & (A != 0), 1.0, Ab), "int8")  # lost to underflow: still counts 1
    Bb = arrays.to(xp, xp.where((Bb == 0) & (B != 0), 1.0, Bb), "int8")
    C2 = chunked(xp, product, Ab, Bb, _BOUND_K)
    return ua + _max_shifts(xp, C2, L, 1), vb + _max_shifts(xp, C2, L, 0)


def integers(xp: Any, X: Any) -> Any:
    """X (integers held in float64) as int64 where every |x| < 2**62 (exact), else X itself."""
    return arrays.to(xp, X, "int64") if X.shape[0] * X.shape[1] and bool((xp.abs(X) < 2.0**62).all()) else X


def residues(xp: Any, X: Any, m: int) -> Any:
    """X (integers: int64 from :func:`integers`, or held in float64) modulo m, centred into [-(m // 2),
    m - 1 - m // 2] (so within int8), as int8: ((X + h) mod m) - h in int64 (|X| < 2**62: no overflow), or
    ``fmod`` in float64, which is exact, and the centring of its result (|fmod| < m)."""
    h = m // 2
    if X.dtype == (np.int64 if arrays.is_numpy(xp) else xp.int64):
        return arrays.to(xp, (X + h) % m - h, "int8")
    y = xp.fmod(X, float(m))
    y = xp.where(y > m - 1 - h, y - m, xp.where(y < -h, y + m, y))
    return arrays.to(xp, y, "int8")


# The CRT in limbs: an integer X as a list of int64 arrays x_i, X = sum_i x_i 2**(LIMB i), every limb but the
# last in [0, 2**LIMB) once normalized (the last carries the sign).  24-bit limbs keep every intermediate of
# the sums below 2**40: residue (< 2**8) times limb (< 2**24), summed over at most 20 moduli.
LIMB = 24
_MASK = (1 << LIMB) - 1


def limbs(v: int, n: int, bits: int = LIMB) -> tuple[int, ...]:
    """A non-negative Python int as n limbs of ``bits`` bits."""
    return tuple((v >> (bits * i)) & ((1 << bits) - 1) for i in range(n))


def _normalize(X: list[Any]) -> list[Any]:
    """Carries propagated: limbs but the last in [0, 2**LIMB) (arithmetic shifts: floor for negatives)."""
    out, carry = [], 0
    for x in X[:-1]:
        x = x + carry
        carry = x >> LIMB
        out.append(x & _MASK)
    out.append(X[-1] + carry)
    return out


class CRT:
    """The Chinese remainder theorem on arrays (numpy, or torch on the residues' device): :meth:`add` the
    residue of X modulo each of ``mods`` (any order, integers in [0, m)), then :meth:`limbs` gives X exactly
    as the integer of [-(P // 2), P - 1 - P // 2] with those residues, :meth:`value` rounds it once to
    float64 (to nearest even).

    No Python integers per element: X = sum_l r_l c_l mod P with c_l = (P/m_l) ((P/m_l)^-1 mod m_l); the
    residues are kept as uint8 and, a block of rows at a time, multiplied by the 24-bit limbs of the c_l in
    one float64 matrix product (L x N @ N x elements: exact, every product below 2**32 and every sum below
    2**37, whatever the summation order); the multiple of P to subtract is estimated in float64 and corrected
    by at most one P each way with two exact comparisons; the rounding takes the top 55 bits with a sticky
    bit (round to odd), which float64's conversion then rounds to nearest even: the correct rounding of X."""

    def __init__(self, xp: Any, mods: Sequence[int]) -> None:
        self.xp, self.mods = xp, tuple(mods)
        self.P = math.prod(self.mods)
        self.n = -(-(self.P.bit_length() + 2 + len(self.mods).bit_length() + 8) // LIMB) + 1
        self.residues: list[Any] = []
        self.limb_rows: list[list[int]] = []  # for each residue added, the limbs of its c_l

    def add(self, m: int, r: Any) -> None:
        """Take r = X mod m (an integer array of values in [0, m))."""
        W = self.P // m
        self.limb_rows.append(limbs(W * pow(W % m, -1, m) % self.P, self.n))
        self.residues.append(arrays.to(self.xp, r, "uint8"))

    def sums(self, rows: slice = slice(None)) -> list[Any]:
        """S = sum_l r_l c_l in (unnormalized) limbs, int64, of the rows ``rows``."""
        xp = self.xp
        assert self.residues, "no residues added"
        R = arrays.to(xp, xp.stack([r[rows] for r in self.residues]), "float64")
        Cm = arrays.constant(xp, [list(t) for t in zip(*self.limb_rows)], "float64", R)  # limbs x moduli
        shape = R.shape[1:]
        S = arrays.to(xp, Cm @ R.reshape(len(self.residues), -1), "int64")  # exact: integers below 2**37
        return [S[i].reshape(shape) for i in range(self.n)]

    def limbs(self, rows: slice = slice(None)) -> list[Any]:
        """X in normalized limbs (see the class), of the rows ``rows`` only (a slice)."""
        xp, P = self.xp, self.P
        S = self.sums(rows)
        approx = S[0] * 0.0
        for i, s in enumerate(S):
            approx = approx + arrays.to(xp, s, "float64") * 2.0 ** (LIMB * i)
        q = arrays.to(xp, xp.round(approx * (1.0 / float(P))), "int64")  # within one of the true quotient
        X = _normalize([s - q * p for s, p in zip(S, limbs(P, self.n))])
        H = P // 2
        over = _normalize([x - c for x, c in zip(X, limbs(P - H, self.n))])[-1] >= 0  # X > P - 1 - H
        X = _normalize([xp.where(over, x - p, x) for x, p in zip(X, limbs(P, self.n))])
        under = _normalize([x + c for x, c in zip(X, limbs(H, self.n))])[-1] < 0  # X < -H
        return _normalize([xp.where(under, x + p, x) for x, p in zip(X, limbs(P, self.n))])

    def value(self, block: int | None = None) -> Any:
        """X rounded once to float64, to nearest even; ``block`` rows at a time (None: all at once), which
        bounds the temporaries (about 30 limb arrays of the block's rows) where memory is short."""
        m = int(self.residues[0].shape[0])
        if block is None or block >= m:
            return round_limbs(self.xp, self.limbs())
        parts = [round_limbs(self.xp, self.limbs(slice(i, i + block))) for i in range(0, m, block)]
        return np.concatenate(parts) if arrays.is_numpy(self.xp) else self.xp.cat(parts)


def round_limbs(xp: Any, X: list[Any]) -> Any:
    """The integer of normalized limbs X (see :class:`CRT`) rounded once to float64, to nearest even."""
    neg = X[-1] < 0
    X = _normalize([xp.where(neg, -x, x) for x in X])  # |X|: every limb in [0, 2**LIMB)
    t = arrays.to(xp, X[0] * 0, "int64")
    top = t
    for i, x in enumerate(X):
        t, top = xp.where(x != 0, i, t), xp.where(x != 0, x, top)
    bits = LIMB * t + arrays.frexp(xp, arrays.to(xp, top, "float64"))[1]  # |X| < 2**bits, exactly
    shift = arrays.clip(xp, bits - 55, 0, None)
    T, sticky = t * 0, t != t
    for i, x in enumerate(X):
        d = LIMB * i - shift
        r = arrays.clip(xp, -d, 0, 62)
        right = x >> r
        T = T + xp.where(d >= 0, x << arrays.clip(xp, d, 0, 62), right)
        sticky = sticky | ((d < 0) & (x - (right << r) != 0))
    T = T | arrays.to(xp, sticky, "int64")  # round to odd at 55 bits: then to nearest even at 53 is exact
    v = arrays.ldexp(xp, arrays.to(xp, T, "float64"), shift)
    return xp.where(neg, -v, v)


def ozaki2(A: Any, B: Any, *, moduli: Sequence[int] | None = None, n_moduli: int | None = None,
           unit: Unit | None = None, scaling: Literal["fast", "accurate"] = "fast") -> np.ndarray:
    """C ~ A @ B in float64 by Ozaki scheme II (integer modular technique, CRT) on an int8 unit.

    ``moduli``: pairwise coprime integers in [2, 256], or ``n_moduli``: the first n of :data:`MODULI`
    (default 16).  With P their product: shifts from :func:`ozaki2_shifts` (``scaling``), A' = trunc(2**sa_i
    a_ij) and B' = trunc(2**sb_j b_ij) (integers held in float64, so |A' @ B'| < P/2); for each modulus one
    unit GEMM of the centred int8 residues (k split into chunks of at most 131071, where 131071 * 128**2 <
    2**31, summed in int64) gives A' @ B' mod m_l; the CRT (:class:`CRT`) gives A' @ B' exactly; it is
    rounded once to float64 (nearest even) and scaled by 2**-(sa_i + sb_j), exactly unless the result
    under- or overflows.  So the only errors are the truncations of 2**sa A and 2**sb B to integers (about
    2**-L relative to each row's and column's 2-norm, L ~ (log2 P - 1)/2 ~ 3.95 bits per modulus) and the
    final rounding.  Bits per element: L minus the element's distance below its row's norm (a wide dynamic
    range costs bits)."""
    mods = pick_moduli(moduli, n_moduli)
    scaling = choice("scaling", scaling, ("fast", "accurate"))
    _check_unit(unit)
    A, B = check_operands(A, B)
    m, k = A.shape
    n = B.shape[1]
    if m == 0 or n == 0 or k == 0:
        return np.zeros((m, n))
    return ozaki2_steps(np, A, B, mods, scaling, numpy_product(unit))


def ozaki2_steps(xp: Any, A: Any, B: Any, mods: tuple[int, ...], scaling: str,
                 product: Callable[[Any, Any], Any], block: int | None = None) -> Any:
    """:func:`ozaki2`'s steps on checked, non-empty float64 operands (numpy arrays, or torch tensors on one
    device with ``xp`` = torch), ``product`` the unit (int8 operands, int64 result): the one copy of the
    scheme that both paths run.  ``block``: rows of the CRT's final rounding at a time (:meth:`CRT.value`)."""
    sa, sb = shifts(xp, A, B, math.prod(mods), scaling, product)
    with np.errstate(under="ignore"):
        Ai = xp.trunc(arrays.ldexp(xp, A, sa[:, None]))
        Bi = xp.trunc(arrays.ldexp(xp, B, sb[None, :]))
    Ai, Bi = integers(xp, Ai), integers(xp, Bi)  # int64 up to 16 moduli: fewer passes per residue
    crt = CRT(xp, mods)
    for mo in mods:
        crt.add(mo, chunked(xp, product, residues(xp, Ai, mo), residues(xp, Bi, mo), RESIDUE_K) % mo)
    Xf = crt.value(block)  # one rounding, to nearest even
    with np.errstate(under="ignore", over="ignore"):
        return arrays.ldexp(xp, Xf, -(sa[:, None] + sb[None, :]))
