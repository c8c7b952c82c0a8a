"""Error measures for computed matrix products (:func:`componentwise`, Fasi et al.'s eq. 3.1; :func:`normwise`,
also Valero-Lara et al.'s forms; :func:`errors`, all of them), and the reference products they are measured
against (:func:`reference`: float64, or exact and correctly rounded).  Every function takes array-likes of any
real dtype, converts them exactly to float64 and refuses non-finite values and mismatched shapes with a
ValueError.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from ..arguments import ArgumentError, flag, memory
from .split import check_input, check_operands

__all__ = ["componentwise", "normwise", "errors", "reference", "ORDS"]

ORDS = (1, 2, np.inf, "fro")
"""The ``ord`` values :func:`normwise` takes ("inf" is accepted for np.inf)."""


# ------------------------------------------------------------------------------------------------ inputs


def _same_shape(C_hat: Any, C: Any, shape: tuple[int, int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    Ch, C_ = check_input(C_hat, "C_hat"), check_input(C, "C")
    if Ch.shape != C_.shape:
        raise ArgumentError("C_hat", Ch, f"has shape {Ch.shape} but C has shape {C_.shape}")
    if shape is not None and C_.shape != shape:
        raise ArgumentError("C", C_, f"has shape {C_.shape}, but A @ B has shape {shape}")
    return Ch, C_


def _binade(x: np.ndarray, axis: int) -> np.ndarray:
    """frexp exponent of max |x| along ``axis`` (0 where everything is zero): max |x| < 2**e."""
    if x.shape[axis] == 0:
        return np.zeros(x.shape[1 - axis], dtype=np.int64)
    return np.frexp(np.abs(x).max(axis=axis))[1].astype(np.int64)


# -------------------------------------------------------------------------------------------- the measures

def componentwise(C_hat: Any, C: Any, A: Any, B: Any) -> float:
    """max_ij |C_hat - C|_ij / (|A||B|)_ij: the componentwise relative error of Fasi et al., eq. (3.1).

    C is the reference product (see :func:`reference`).  An entry with (|A||B|)_ij = 0 counts 0 if
    C_hat_ij = C_ij (0/0 -> 0) and inf otherwise (x/0 -> inf).  |A||B| is formed with each row of A and
    each column of B scaled by a power of two, so it neither overflows nor underflows; entries whose scaled
    denominator still underflows to 0 although |A||B| is not zero are evaluated exactly with fractions.
    The quotient is rounded once or twice in float64 (a relative error of order 1e-16 in the result);
    results that are powers of two, such as 2**-24, come out exactly.
    """
    A_, B_ = check_operands(A, B)
    Ch, C_ = _same_shape(C_hat, C, (A_.shape[0], B_.shape[1]))
    if Ch.size == 0:
        return 0.0
    ea, eb = _binade(A_, 1), _binade(B_, 0)
    den = np.ldexp(np.abs(A_), -ea[:, None]) @ np.ldexp(np.abs(B_), -eb[None, :])  # in [0, k]
    with np.errstate(over="ignore"):
        diff = np.abs(Ch - C_)
    shift = -ea[:, None] - eb[None, :]
    if not np.all(np.isfinite(diff)):  # near the overflow threshold: halves cannot overflow
        diff, shift = np.abs(Ch * 0.5 - C_ * 0.5), shift + 1
    out = np.zeros(Ch.shape)
    pos = den > 0
    with np.errstate(over="ignore", under="ignore"):
        out[pos] = np.ldexp(diff[pos] / den[pos], shift[pos])
    zero_den = ~pos
    if zero_den.any():
        structural = ((A_ != 0).astype(np.float64) @ (B_ != 0).astype(np.float64)) > 0
        for i, j in np.argwhere(zero_den & structural):  # |A||B| > 0 but underflowed: exactly
            d = sum((abs(Fraction(a)) * abs(Fraction(b)) for a, b in zip(A_[i], B_[:, j])), Fraction(0))
            out[i, j] = float(abs(Fraction(Ch[i, j]) - Fraction(C_[i, j])) / d)
        truly_zero = zero_den & ~structural
        out[truly_zero] = np.where(Ch[truly_zero] == C_[truly_zero], 0.0, np.inf)
    return float(out.max())


def _ord(ord: Any) -> Any:
    if isinstance(ord, str):
        key = ord.strip().lower()
        if key == "fro":
            return "fro"
        if key in ("inf", "infinity"):
            return np.inf
    elif ord in (1, 2) and not isinstance(ord, bool):
        return int(ord)
    elif ord == np.inf:
        return np.inf
    raise ValueError(f"ord must be one of 1, 2, inf ('inf'), 'fro'; got {ord!r}")


def _norm(X: np.ndarray, ord: Any, operator: bool) -> float:
    """The norm of X, X scaled by a power of two first so that squares neither overflow nor underflow."""
    if X.size == 0:
        return 0.0
    e = int(np.frexp(np.abs(X).max())[1])
    Y = np.ldexp(X, -e)
    if ord == "fro" or (ord == 2 and not operator):
        val = float(np.sqrt(np.sum(Y * Y)))
    elif not operator:
        val = float(np.sum(np.abs(Y))) if ord == 1 else float(np.abs(Y).max())
    else:
        val = float(np.linalg.norm(Y, ord))
    return math.ldexp(val, e)


def _quotient(num: float, den: float) -> float:
    if den == 0.0:
        return 0.0 if num == 0.0 else math.inf
    return num / den


def normwise(C_hat: Any, C: Any, ord: Any = 2, *, A: Any = None, B: Any = None, operator: bool = False) -> float:
    """||C_hat - C|| / ||C||, or with A and B given, ||C_hat - C|| / (||A|| ||B||) (Valero-Lara et al.,
    sec. 3.1, who call these the l1, l2 and l-inf forward errors).

    ``ord``: 1, 2, inf or "fro".  By default (``operator=False``) the norms are those of the matrix read as
    a vector of its elements, as in Valero-Lara et al.'s artifact: 1 -> sum |x_ij|, 2 and "fro" ->
    sqrt(sum x_ij**2) (the Frobenius norm), inf -> max |x_ij|.  ``operator=True``: the induced norms (1 ->
    max column sum, 2 -> spectral norm, inf -> max row sum; "fro" stays Frobenius).  A zero denominator
    gives 0 if C_hat = C and inf otherwise.
    """
    o = _ord(ord)
    if (A is None) != (B is None):
        raise ValueError("give both A and B (denominator ||A|| ||B||) or neither (denominator ||C||)")
    Ch, C_ = _same_shape(C_hat, C)
    diff = Ch - C_
    if not np.all(np.isfinite(diff)):  # only for values near the overflow threshold
        diff = (Ch * 0.5 - C_ * 0.5)
        num = 2.0 * _norm(diff, o, operator)
    else:
        num = _norm(diff, o, operator)
    if A is None:
        return _quotient(num, _norm(C_, o, operator))
    A_, B_ = check_operands(A, B)
    if C_.shape != (A_.shape[0], B_.shape[1]):
        raise ValueError(f"C has shape {C_.shape}, but A @ B has shape {(A_.shape[0], B_.shape[1])}")
    return _quotient(num, _norm(A_, o, operator) * _norm(B_, o, operator))


def errors(C_hat: Any, C: Any, A: Any, B: Any, *, spectral: bool = True) -> dict[str, float]:
    """All the measures of C_hat against the reference C = A @ B:

    ``componentwise`` (Fasi et al., eq. 3.1); ``normwise_1``, ``normwise_2``, ``normwise_inf``
    (||C_hat - C|| / ||C||, elementwise norms: 2 is Frobenius); ``l1``, ``l2``, ``linf`` (Valero-Lara et
    al., sec. 3.1: ||C_hat - C|| / (||A|| ||B||), elementwise norms as in their artifact); ``spectral``
    (||C_hat - C||_2 / ||C||_2 with the spectral norm; left out with ``spectral=False``, an SVD).
    """
    spectral = flag("spectral", spectral)
    A_, B_ = check_operands(A, B)
    Ch, C_ = _same_shape(C_hat, C, (A_.shape[0], B_.shape[1]))
    out = {"componentwise": componentwise(Ch, C_, A_, B_)}
    for name, o in (("1", 1), ("2", 2), ("inf", np.inf)):
        out[f"normwise_{name}"] = normwise(Ch, C_, o)
    for name, o in (("l1", 1), ("l2", 2), ("linf", np.inf)):
        out[name] = normwise(Ch, C_, o, A=A_, B=B_)
    if spectral:
        out["spectral"] = normwise(Ch, C_, 2, operator=True)
    return out


# ------------------------------------------------------------------------------------- reference products

def reference(A: Any, B: Any, C: Any = None, *, exact: bool = False) -> np.ndarray:
    """The reference product A @ B (+ C) as a float64 array.

    ``exact=False``: one float64 matmul (BLAS), whose error is at most gamma_k(2**-53) (|A||B| + |C|)
    elementwise (k the inner dimension): ample for methods of fp32 accuracy or worse (Fasi et al. use fp64
    references, sec. 3), not for TF64, Ozaki or other fp64-level methods.

    ``exact=True``: every entry is the exact value of sum_k a_ik b_kj (+ c_ij), rounded *correctly* (to
    nearest, ties to even) to binary64; an exact zero gives +0.0 and a value beyond the binary64 range
    gives +-inf.  Computed without error (float64 matmuls of integer limbs, exact whatever the summation
    order, or Python integers where that is cheaper), each entry rounded once by CPython's int / int; the
    number of matmuls grows with the dynamic range within the rows of A and columns of B.
    """
    exact = flag("exact", exact)
    A_, B_ = check_operands(A, B)
    m, q = A_.shape[0], B_.shape[1]
    if exact:  # the limbs' products (about 10 levels of int64) and the Python integers of every entry
        memory("A", A_, 8.0 * 12 * m * q + 120.0 * m * q + 8.0 * 4 * (A_.size + B_.size),
               f"the exact {m}x{A_.shape[1]} @ {A_.shape[1]}x{q} product", fix="compute it in blocks of rows of A")
    C_ = None
    if C is not None:
        C_ = check_input(np.atleast_2d(np.asarray(C)), "C")
        try:
            C_ = np.broadcast_to(C_, (m, q))
        except ValueError:
            raise ArgumentError("C", C_, f"has shape {C_.shape}; it must be ({m}, {q}) or broadcast to "
                                "it") from None
    if not exact:
        P = A_ @ B_
        return P + C_ if C_ is not None else P
    return _exact(A_, B_, C_)


def _dyadic(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """x = sign * M * 2**f exactly, M odd (0 for zeros) as uint64 < 2**53; also the top exponent t
    (|x| < 2**t).  Returns (sign, M, f, t)."""
    frac, ex = np.frexp(x)
    N = np.abs(np.ldexp(frac, 53)).astype(np.uint64)
    nz = N != 0
    low = N & (~N + np.uint64(1))  # the lowest set bit
    tz = np.zeros(x.shape, dtype=np.int64)
    tz[nz] = np.frexp(low[nz].astype(np.float64))[1].astype(np.int64) - 1
    M = N >> tz.astype(np.uint64)
    f = ex.astype(np.int64) - 53 + tz
    return np.sign(x), M, f, ex.astype(np.int64)


def _rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per row of x: (sign, M, shift of each element above the row's lowest set bit, that bit's exponent,
    the row's width in bits)."""
    sign, M, f, t = _dyadic(x)
    nz = M != 0
    big = np.iinfo(np.int64).max
    bottom = np.where(nz, f, big).min(axis=1) if x.shape[1] else np.zeros(x.shape[0], dtype=np.int64)
    top = np.where(nz, t, -big).max(axis=1) if x.shape[1] else np.zeros(x.shape[0], dtype=np.int64)
    empty = ~nz.any(axis=1) if x.shape[1] else np.ones(x.shape[0], dtype=bool)
    bottom = np.where(empty, 0, bottom)
    width = np.where(empty, 0, top - bottom)
    shift = np.where(nz, f - bottom[:, None], 0)
    return sign, M, shift, bottom, width


def _limbs(sign: np.ndarray, M: np.ndarray, shift: np.ndarray, L: int, beta: int) -> list[np.ndarray]:
    """Signed beta-bit limbs of sign * (M << shift), least significant first, as float64 matrices."""
    mask = np.uint64((1 << beta) - 1)
    out = []
    for t in range(L):
        lo = t * beta - shift
        right = np.clip(lo, 0, 63).astype(np.uint64)
        left = np.clip(-lo, 0, 63).astype(np.uint64)
        d = np.where(lo >= 0, (M >> right) & mask, (M << left) & mask)
        out.append(sign * d.astype(np.float64))
    return out


def _round_dyadic(N: int, e: int) -> float:
    """N * 2**e rounded to nearest-even binary64 (+-inf beyond the range, +0.0 for 0)."""
    if N == 0:
        return 0.0
    try:
        return float(N << e) if e >= 0 else N / (1 << -e)
    except OverflowError:
        return math.inf if N > 0 else -math.inf


def _exact(A: np.ndarray, B: np.ndarray, C: np.ndarray | None, path: str = "auto") -> np.ndarray:
    m, k = A.shape
    q = B.shape[1]
    sa, Ma, sha, ba, wa = _rows(A)
    sbt, Mbt, shbt, bb, wb = _rows(B.T)
    if k > 2**40:
        raise ValueError(f"inner dimension {k} is too long for the exact reference")
    beta = (53 - max(0, (k - 1).bit_length())) // 2
    La = -(-int(wa.max(initial=0)) // beta)
    Lb = -(-int(wb.max(initial=0)) // beta)
    if path == "auto":
        cost_limbs = La * Lb * (m * k * q * 1e-9 + 2e-5)
        cost_objects = m * k * q * 3e-7
        path = "objects" if cost_objects < cost_limbs else "limbs"
    if m * k * q == 0 or La == 0 or Lb == 0:
        S = np.zeros((m, q), dtype=object)
    elif path == "objects":
        Ai = np.zeros((m, k), dtype=object)
        Bi = np.zeros((k, q), dtype=object)
        for i, kk in np.argwhere(Ma != 0):
            Ai[i, kk] = int(sa[i, kk]) * (int(Ma[i, kk]) << int(sha[i, kk]))
        for j, kk in np.argwhere(Mbt != 0):
            Bi[kk, j] = int(sbt[j, kk]) * (int(Mbt[j, kk]) << int(shbt[j, kk]))
        S = Ai.dot(Bi)
    elif path == "limbs":
        DA = _limbs(sa, Ma, sha, La, beta)
        DBt = _limbs(sbt, Mbt, shbt, Lb, beta)
        DB = [np.ascontiguousarray(D.T) for D in DBt]
        live_a = [bool(D.any()) for D in DA]
        live_b = [bool(D.any()) for D in DB]
        Q = np.zeros((La + Lb - 1, m, q), dtype=np.int64)
        for s in range(La):
            if not live_a[s]:
                continue
            for t in range(Lb):
                if live_b[t]:
                    Q[s + t] += (DA[s] @ DB[t]).astype(np.int64)  # exact: every partial sum < 2**53
        S = np.zeros((m, q), dtype=object)
        for lev in range(La + Lb - 2, -1, -1):
            S = S * (1 << beta) + Q[lev].astype(object)
    else:
        raise ValueError(f"path must be 'auto', 'limbs' or 'objects', not {path!r}")
    out = np.empty((m, q))
    if C is not None:
        sc, Mc, fc, _ = _dyadic(C)
    for i in range(m):
        for j in range(q):
            N, e = int(S[i, j]), int(ba[i] + bb[j])
            if C is not None and Mc[i, j] != 0:
                Nc, ec = int(sc[i, j]) * int(Mc[i, j]), int(fc[i, j])
                if N == 0:
                    N, e = Nc, ec
                elif ec >= e:
                    N += Nc << (ec - e)
                else:
                    N, e = (N << (e - ec)) + Nc, ec
            out[i, j] = _round_dyadic(N, e)
    return out
