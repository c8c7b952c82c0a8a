"""Error bounds for matrix products built from low-precision units, per method.

Every bound here is on the componentwise relative error that :func:`.metrics.componentwise` measures,
max_ij |C_hat - C|_ij / (|A||B|)_ij (Fasi et al., eq. 3.1), unless a docstring says otherwise.

Sources:

* [FHLMM] M. Fasi, N. J. Higham, F. Lopez, T. Mary, M. Mikaitis, "Matrix multiplication in multiword
  arithmetic: error analysis and application to GPU tensor cores", SIAM J. Sci. Comput. 45 (2023); HAL
  hal-03543925v2.  Block FMA model eq. (2.1); splitting (2.2)-(2.4); all p**2 products (2.5); word sizes
  (2.6); only the products with i + j <= p + 1 (2.7); Theorem 2.1, eq. (2.8); Table 2.1; probabilistic
  sqrt(n) bounds and round-toward-zero, sec. 4.3; FABsum v1/v2, sec. 4.4.
* [VLJLV] P. Valero-Lara, F. Liu, J. S. Vetter, I. Jorquera, "Mixed-precision S/DGEMM using the TF32 and TF64
  frameworks on low-precision AI tensor cores", SC-W 2023 (3xTF32/4xTF32, TF64).
* [HM19] N. J. Higham, T. Mary, "A new approach to probabilistic rounding error analysis", SIAM J. Sci.
  Comput. 41 (2019) ([FHLMM] ref. 18): the probabilistic constant gamma_tilde_n(lambda).
* [H02] N. J. Higham, "Accuracy and Stability of Numerical Algorithms", 2nd ed., SIAM 2002 ([FHLMM] ref. 17):
  gamma_n = n u / (1 - n u) and Lemma 3.3 (gamma_j + gamma_k + gamma_j gamma_k <= gamma_{j+k}).
* Ozaki schemes I and II (sources: :mod:`.ozaki`): no seed states a bound or slice-count rule for them;
  :func:`ozaki_ratios` derives the bounds per entry (:func:`ozaki_bound`, :func:`ozaki2_bound`) here.

Assumptions throughout (as in [FHLMM]): no underflow or overflow, in the splitting or anywhere else; every
rounding obeys the standard model fl(x) = x (1 + delta), |delta| <= u.  [FHLMM] take u_high = 2**-24 for
the tensor cores although these round toward zero; strictly, round-toward-zero obeys the model only with
u = 2**(1 - precision) (twice the unit roundoff: :func:`unit_roundoff` (fmt, "rz")), so pass that as
``u_high`` for a bound that covers a truncating unit.  The NVIDIA units also truncate while aligning the
addends of a block, which is not the standard model at all; measured errors stay well below these bounds
in practice, but they are not proved bounds for such units.
"""

from __future__ import annotations

import difflib
import math
import operator as _operator
import sys
from collections.abc import Sequence
import dataclasses
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import numpy as np

from .. import formats as _formats
from ..arguments import ArgumentError, Shown, integer, keywords
from . import arrays, ozaki as _ozaki
from .split import check_operands
from .registry import REGISTRY, Fabsum, Method, Mmm, Native, Ozaki, smallest_first

__all__ = [
    "FORMATS",
    "unit_roundoff",
    "gamma",
    "gamma_tilde",
    "mmm_bound",
    "DominantTerm",
    "Table21Row",
    "TABLE_2_1",
    "dominant_term",
    "dominant_expression",
    "fabsum_bound",
    "ozaki_max_inner",
    "ozaki_bound",
    "ozaki_slices",
    "exponent_spread",
    "ozaki2_bound",
    "OzakiRatios",
    "ozaki_ratios",
    "MethodSpec",
    "METHODS",
    "methods",
    "bound",
]

FORMATS = ("fp16", "bf16", "tf32", "fp32", "fp64")
"""The formats whose unit roundoff the tables here use (any name :func:`blockfma.formats.get` knows works)."""

Rounding = Literal["rn", "rz"]
Terms = Literal["theorem", "full", "paper"]


# ------------------------------------------------------------------------------------------- constants

def unit_roundoff(fmt: str | _formats.Format, rounding: str = "rn") -> float:
    """u = 2**-precision of ``fmt`` (precision counting the implicit bit: fp16 2**-11, bf16 2**-8, tf32
    2**-11, fp32 2**-24, fp64 2**-53), the constant of the standard model for round to nearest.
    ``rounding="rz"`` (or any directed rounding: "ru", "rd") gives 2**(1 - precision): a directed rounding
    can err by a whole ulp."""
    p = _formats.get(fmt).precision
    key = str(rounding).strip().lower()
    if key in ("rn", "rne", "nearest"):
        return math.ldexp(1.0, -p)
    if key in ("rz", "ru", "rd", "directed", "truncate"):
        return math.ldexp(1.0, 1 - p)
    raise ValueError(f"rounding must be 'rn' or a directed rounding ('rz', 'ru', 'rd'), not {rounding!r}")


def _count(n: Any, what: str = "n", low: int = 1) -> int:
    """A nonnegative integer count (an integral float such as 1e6 is accepted); an ArgumentError otherwise."""
    v: int | None = None
    if not isinstance(n, bool):
        try:
            v = _operator.index(n)
        except TypeError:
            if isinstance(n, float) and n.is_integer():
                v = int(n)
    if v is None or v < low:
        raise ArgumentError(what, n, f"must be an integer of at least {low}")
    return v


def _u(value: Any, what: str) -> float:
    try:
        u = float(value) if not isinstance(value, (bool, str)) else math.nan
    except (TypeError, ValueError):
        u = math.nan
    if not (0.0 <= u < 1.0):
        raise ArgumentError(what, value, "must be a unit roundoff in [0, 1) such as 2**-24",
                            fix="or pass the format's name as low=/high=")
    return u


def gamma(k: float, u: float) -> float:
    """gamma_k = k u / (1 - k u) ([H02], sec. 3.1); math.inf where k u >= 1 (the bound says nothing)."""
    if k < 0:
        raise ValueError(f"k must be >= 0; got {k}")
    ku = k * u
    return math.inf if ku >= 1.0 else ku / (1.0 - ku)


def gamma_tilde(k: float, u: float, lam: float = 1.0) -> float:
    """The probabilistic counterpart of gamma_k: min(gamma_k, exp(lam sqrt(k) u + k u**2 / (1 - u)) - 1).

    [HM19]'s gamma_tilde_k(lambda) bounds |theta_k| for k independent mean-zero rounding errors with
    probability at least 1 - 2 exp(-lambda**2 (1 - u)**2 / 2); to first order it is lambda sqrt(k) u,
    which is [FHLMM] sec. 4.3's "replace n by sqrt(n)".  The worst-case gamma_k always holds, hence the
    min (which keeps a probabilistic bound <= its worst-case one, also for tiny k)."""
    if k < 0:
        raise ValueError(f"k must be >= 0; got {k}")
    if lam <= 0:
        raise ValueError(f"lam must be > 0; got {lam}")
    if k == 0:
        return 0.0
    return min(gamma(k, u), math.expm1(lam * math.sqrt(k) * u + k * u * u / (1.0 - u)))


def _g(k: float, u: float, probabilistic: bool, lam: float) -> float:
    return gamma_tilde(k, u, lam) if probabilistic else gamma(k, u)


def _check_rounding(rounding: str) -> str:
    key = str(rounding).strip().lower()
    if key not in ("rn", "rz"):
        raise ValueError(f"rounding must be 'rn' (errors of mean zero assumed) or 'rz'; got {rounding!r}")
    return key


# -------------------------------------------------------------------------------- multiword (Theorem 2.1)

Pair = tuple[int, int]


def _pairs(p: int, products: str) -> list[Pair]:
    if products == "triangle":
        return [(i, j) for i in range(1, p + 1) for j in range(1, p + 1) if i + j <= p + 1]
    if products == "all":
        return [(i, j) for i in range(1, p + 1) for j in range(1, p + 1)]
    raise ValueError(f"products must be 'triangle' (i + j <= p + 1, eq. 2.7) or 'all' (p**2, eq. 2.5); "
                     f"got {products!r}")


def _schedule(pairs: list[Pair], accumulate: str, schedule: Any) -> list[list[Pair]]:
    """Groups of word products (1-based pairs) in execution order: each group chained through the unit's
    accumulator in the listed order, the groups' results added in u_high rounding to nearest."""
    if schedule is not None:
        groups = [[(int(i), int(j)) for i, j in g] for g in schedule]
        flat = sorted(t for g in groups for t in g)
        if flat != sorted(pairs):
            raise ValueError(f"schedule must name each of the products {sorted(pairs)} once; got {groups}")
        return groups
    if accumulate == "outside":
        return [[t] for t in pairs]
    if accumulate == "inside":
        return [list(smallest_first(pairs))]
    raise ValueError(f"accumulate must be 'outside' (Algorithm 2.1) or 'inside' (Algorithm 4.1); got "
                     f"{accumulate!r}")


def _split_state(input_format: Any, p: int, u_low: float) -> str:
    """'general' (eq. 2.3: |Delta A| <= u_low**p |A|), 'exact' (the p words hold A exactly) or 'low' (A is
    already in the low format: one nonzero word)."""
    if input_format is None:
        return "general"
    t = _formats.get(input_format).precision
    if u_low <= 0:
        return "low"
    p_low = -math.log2(u_low)
    if not p_low.is_integer():
        raise ValueError("input_format needs u_low to be a power of two (2**-precision of the low format)")
    if t <= p_low:
        return "low"
    # Rounding to nearest, each word takes at least p_low bits off the significand (the residual of a
    # t-bit number after one p_low-bit word has at most t - p_low bits), so p words hold t <= p p_low bits.
    return "exact" if t <= p * p_low else "general"


@dataclass(frozen=True)
class _Mmm:
    """One :func:`mmm_bound` problem, its arguments checked: n, p, u_low (``u``), u_high (``uh``), the block
    FMA's width and internal precision (None: u_high), the products, the split state, the execution groups,
    whether the unit's gammas are probabilistic, whether the outside additions' are, and lambda."""

    n: int
    p: int
    u: float
    uh: float
    b: int
    ub: float | None
    products: str
    state: str
    groups: list[list[Pair]]
    unit_prob: bool
    prob: bool
    lam: float

    def block(self, r: int) -> float:
        """The relative error factor of r chained unit calls of inner dimension n (eq. 2.1; with a block
        precision u_block != u_high, (1 + gamma_n(u_block)) (1 + gamma_{r ceil(n/b)}(u_high)) - 1)."""
        if self.ub is None or self.ub == self.uh:
            return _g(r * self.n, self.uh, self.unit_prob, self.lam)
        return (1 + _g(r * self.n, self.ub, self.unit_prob, self.lam)) * (
            1 + _g(r * -(-self.n // self.b), self.uh, self.unit_prob, self.lam)) - 1

    def accumulated(self, r: int) -> float:
        """gamma_{r n + p**2 - 1}(u_high): the block FMA's error through r unit calls and the p**2 - 1
        additions of the products (the block precision's form where it differs from u_high)."""
        pp = self.p * self.p - 1
        if self.ub is None or self.ub == self.uh:
            return _g(r * self.n + pp, self.uh, self.unit_prob, self.lam)
        return (1 + self.block(r)) * (1 + _g(pp, self.uh, self.unit_prob, self.lam)) - 1

    @property
    def split(self) -> float:
        """The splitting error 2u**p + u**2p (eq. 2.3), 0 where the words hold the inputs exactly."""
        return 2 * self.u**self.p + self.u ** (2 * self.p) if self.state == "general" else 0.0

    @property
    def dropped(self) -> float:
        """The products with i + j > p + 1 that the triangle leaves out (eq. 2.7); 0 for all p**2."""
        p, u = self.p, self.u
        return sum((p - i) * u ** (p + i - 1) for i in range(1, p)) if self.products == "triangle" else 0.0


def _theorem(q: _Mmm) -> float:
    """Theorem 2.1, eq. (2.8), without its O(u_high u_low + u_low**(p+1)) remainder: (p+1) u_low**p +
    gamma_{n+p**2-1}(u_high); with all p**2 products (eq. 2.5) the constant is 2 u_low**p.  (A schedule that
    chains A_1B_1 through r > 1 unit calls, as Markidis's order does, makes it gamma_{r n + p**2 - 1}.)"""
    r1 = next(len(g) - g.index((1, 1)) for g in q.groups if (1, 1) in g)  # the unit calls A_1B_1 goes through
    if q.products == "triangle":
        const = (q.p + 1 if q.state == "general" else q.p - 1) * q.u**q.p
    else:
        const = 2 * q.u**q.p if q.state == "general" else 0.0
    return const + q.accumulated(r1)


def _paper(q: _Mmm) -> float:
    """The first line of eq. (2.7) exactly as printed: 2u**p + u**2p + (gamma_{n+p**2-1} (1 + sum_{k=1}^{p-1}
    u**k) + sum_{i=1}^{p-1} (p-i) u**(p+i-1)) (1+u)**2 (u = u_low); for all p**2 products, eq. (2.5) with
    (2.6): 2u**p + u**2p + gamma_{n+p**2-1} (sum_{k<p} u**k)**2 (1+u)**2."""
    u = q.u
    kept = 1 + sum(u**k for k in range(1, q.p)) if q.products == "triangle" else sum(u**k for k in range(q.p)) ** 2
    return q.split + (q.accumulated(1) * kept + q.dropped) * (1 + u) ** 2


def _full(q: _Mmm) -> float:
    """A rigorous bound with every term, derived as (2.5)-(2.7) but counting each kept product once (the
    kept products A_iB_j with i + j - 2 = k number k + 1, where (2.7) prints a factor 1 for each k), each
    product with the rounding errors of its own path through the groups instead of the common
    gamma_{n+p**2-1}."""
    G = len(q.groups)
    weighted = 0.0
    for g, group in enumerate(q.groups, start=1):
        outside = G - 1 if g == 1 else G - g + 1  # u_high additions this group's value goes through
        for pos, (i, j) in enumerate(group):
            r = len(group) - pos  # unit calls this product goes through
            phi = (1 + q.block(r)) * (1 + _g(outside, q.uh, q.prob, q.lam)) - 1
            weighted += phi * q.u ** (i + j - 2)
    return q.split + (weighted + q.dropped) * (1 + q.u) ** 2


_TERMS = {"theorem": _theorem, "paper": _paper, "full": _full}


def mmm_bound(n: int, *, p: int, u_low: float, u_high: float, b: int = 1, u_block: float | None = None,
              products: str = "triangle", terms: Terms = "theorem", input_format: Any = None,
              accumulate: str = "outside", schedule: Sequence[Sequence[Pair]] | None = None,
              probabilistic: bool = False, lam: float = 1.0, rounding: Rounding = "rn") -> float:
    """Bound on max_ij |C - C_hat|_ij / (|A||B|)_ij for [FHLMM] Algorithm 2.1: p words of precision u_low,
    the word products on a block FMA satisfying eq. (2.1) with u_high, added in u_high.

    ``terms``: ``"theorem"`` (default; Theorem 2.1, :func:`_theorem`), ``"paper"`` (eq. 2.7 as printed,
    :func:`_paper`) or ``"full"`` (every term, each product along its own path, :func:`_full`);
    ``products``: "triangle" (i + j <= p + 1) or "all" (p**2, eq. 2.5).

    ``input_format``: the format A and B are given in.  None (default): any (eq. 2.3, |Delta A| <=
    u_low**p |A|).  A format that fits in p words (precision <= p * precision(low), e.g. fp32 in three bf16
    words) drops the splitting error 2u**p + u**2p; one that fits in one word (e.g. fp16 data for the fp16
    method) leaves only the block FMA's error, gamma_n(u_high) by eq. (2.1).

    ``b`` and ``u_block``: eq. (2.1) takes the block FMA's internal precision equal to u_high, and then
    the width b of the block does not matter (each entry goes through n additions: gamma_n).  Given
    u_block != u_high (e.g. 0 for a unit that adds a block exactly and rounds once), the block FMA's factor
    is (1 + gamma_n(u_block)) (1 + gamma_{ceil(n/b)}(u_high)) - 1 (derived here in the standard model; the
    seed uses only u_block = u_high).

    ``accumulate`` / ``schedule`` (``terms="full"``; the theorem form only through A_1B_1's depth):
    "outside" (Algorithm 2.1: each product from zero, then C <- C + C_ij in u_high), "inside" (Algorithm
    4.1: every product chained into the unit's C, the smallest first, so that A_1B_1 goes through one unit
    call and the product r-th from the end through r), or an explicit ``schedule``: groups of 1-based
    (i, j) pairs in execution order, each group chained in the unit, the groups added in u_high (rounding
    to nearest).

    ``probabilistic=True`` ([FHLMM] sec. 4.3): every gamma_k over roundings to nearest becomes
    gamma_tilde_k(lam) (about lam sqrt(k) u; see :func:`gamma_tilde`).  ``rounding="rz"`` says the unit
    rounds toward zero: then its errors all have the sign of the partial sums, which for data of one sign
    stays the same throughout, so the mean-zero hypothesis fails and the unit's gammas stay worst-case (the
    paper's explanation of double-fp16's loss on (0, 1] data); additions outside the unit still get sqrt.
    """
    n, p, b, u = _count(n, "n"), _count(p, "p"), _count(b, "b"), _u(u_low, "u_low")
    uh, ub = _u(u_high, "u_high"), None if u_block is None else _u(u_block, "u_block")
    rnd, pairs = _check_rounding(rounding), _pairs(p, products)
    q = _Mmm(n, p, u, uh, b, ub, products, _split_state(input_format, p, u), [], probabilistic and rnd == "rn",
             probabilistic, lam)
    if q.state == "low":  # A = A_1, B = B_1: one nonzero product, the other ones add exact zeros
        return q.block(1)
    q = dataclasses.replace(q, groups=_schedule(pairs, accumulate, schedule))
    if terms not in _TERMS:
        raise ValueError(f"terms must be 'theorem' (eq. 2.8), 'paper' (eq. 2.7 as printed) or 'full'; "
                         f"got {terms!r}")
    return _TERMS[terms](q)


# ------------------------------------------------------------------------------------ Table 2.1, dominant

@dataclass(frozen=True)
class DominantTerm:
    """constant + per_n * n (or per_n * sqrt(n) when ``sqrt_n``): a bound's dominant term, as in Table 2.1.
    ``text`` writes it as the paper does."""

    constant: float
    per_n: float
    sqrt_n: bool = False
    text: str = ""

    def __call__(self, n: float) -> float:
        if n < 0:
            raise ValueError(f"n must be >= 0; got {n}")
        return self.constant + self.per_n * (math.sqrt(n) if self.sqrt_n else n)

    def __str__(self) -> str:
        return self.text or f"{self.constant!r} + {'sqrt(n)' if self.sqrt_n else 'n'} x {self.per_n!r}"


def _pow2_text(x: float) -> str:
    """2^k for a power of two x = 2**k, as Table 2.1 writes them; repr(x) otherwise."""
    frac, e = math.frexp(x)
    return f"2^{e - 1}" if frac == 0.5 else repr(x)


def _dominant(u_low: float, p: int, u_high: float, products: str = "triangle", probabilistic: bool = False,
              negligible: float = 4.0) -> DominantTerm:
    """The dominant term of eq. (2.8): (p+1) u_low**p + n u_high, the constant dropped when u_low**p <=
    ``negligible`` * u_high (it is then O(u_high) and n u_high dominates: [FHLMM] drop 3 x 2^-22 for
    double-fp16, where u_low**2 = 4 u_high, and 4 x 2^-24 for triple-bf16)."""
    coeff = p + 1 if products == "triangle" else 2
    const = coeff * u_low**p
    if u_low**p <= negligible * u_high:
        const = 0.0
    nsym = "sqrt(n)" if probabilistic else "n"
    text = f"{nsym} x {_pow2_text(u_high)}"
    if const:
        text = f"{coeff} x {_pow2_text(u_low**p)} + " + text
    return DominantTerm(const, u_high, probabilistic, text)


@dataclass(frozen=True)
class Table21Row:
    """One row of [FHLMM] Table 2.1: the formats, the number of words p, the number of word products
    p(p+1)/2 (sec. 2: i + j <= p + 1), and the dominant term of the bound (2.8), written as in the table."""

    name: str
    high: str
    low: str
    p: int
    products: int
    constant: float
    per_n: float
    text: str

    @property
    def term(self) -> DominantTerm:
        return DominantTerm(self.constant, self.per_n, False, self.text)


TABLE_2_1: tuple[Table21Row, ...] = (
    Table21Row("fp16", "fp32", "fp16", 1, 1, 2 * 2**-11, 2**-24, "2 x 2^-11 + n x 2^-24"),
    Table21Row("double-fp16", "fp32", "fp16", 2, 3, 0.0, 2**-24, "n x 2^-24"),
    Table21Row("bf16", "fp32", "bf16", 1, 1, 2 * 2**-8, 2**-24, "2 x 2^-8 + n x 2^-24"),
    Table21Row("double-bf16", "fp32", "bf16", 2, 3, 3 * 2**-16, 2**-24, "3 x 2^-16 + n x 2^-24"),
    Table21Row("triple-bf16", "fp32", "bf16", 3, 6, 0.0, 2**-24, "n x 2^-24"),
)
"""[FHLMM] Table 2.1 (u_high = 2^-24, fp32), row by row, with the product counts of sec. 2."""


def dominant_expression(method: str | tuple[Any, int], *, probabilistic: bool = False,
                        **params: Any) -> DominantTerm:
    """The dominant term of a method's bound (Table 2.1's column "Bound", eq. 2.8), as a
    :class:`DominantTerm`.  ``method``: a name of :data:`METHODS` (its p, formats and products) or a pair
    (u_low or low format name, p) with u_high = 2**-24 (``u_high=`` to change it).  ``probabilistic``:
    n -> sqrt(n) (sec. 4.3).  FABsum: b u_block + (n/b) u_acc (sec. 4.4), sqrt(n/b) when probabilistic.
    """
    if isinstance(method, tuple):
        if len(method) != 2:
            raise ValueError("method as a tuple is (u_low or format name, p)")
        low, p = method
        u_low = unit_roundoff(low) if isinstance(low, (str, _formats.Format)) else _u(low, "u_low")
        u_high = _u(params.pop("u_high", 2**-24), "u_high")
        products = params.pop("products", "triangle")
        if params:
            raise TypeError(f"unexpected arguments {sorted(params)}")
        return _dominant(u_low, _count(p, "p"), u_high, products, probabilistic)
    spec = _spec(method)
    if spec.kind == "fabsum":
        if "b" not in params:
            raise ValueError(f"{method} needs b= (the block size)")
        b = _count(params.pop("b"), "b")
        u_blk = _u(params.pop("u_block", 2**-24), "u_block")
        u_acc = _u(params.pop("u_acc", spec.acc_u), "u_acc")
        if params:
            raise TypeError(f"unexpected arguments {sorted(params)}")
        per = u_acc / (math.sqrt(b) if probabilistic else b)
        nsym = "sqrt(n)" if probabilistic else "n"
        text = f"{b} x {_pow2_text(u_blk)} + {nsym}/{math.sqrt(b) if probabilistic else b:g} x {_pow2_text(u_acc)}"
        return DominantTerm(b * u_blk, per, probabilistic, text)
    if spec.kind != "mmm":
        raise ValueError(f"no dominant term for {method!r} (its bound does not grow with n that way)")
    p, u_low, u_high = _mmm_units(spec, params)
    products = params.pop("products", spec.products)
    if params:
        raise TypeError(f"unexpected arguments {sorted(params)}")
    return _dominant(_u(u_low, "u_low"), _count(p, "p"), _u(u_high, "u_high"), products, probabilistic)


def dominant_term(method: str | tuple[Any, int], n: int, *, probabilistic: bool = False, **params: Any) -> float:
    """The dominant term of ``method``'s bound at inner dimension n (see :func:`dominant_expression`)."""
    return dominant_expression(method, probabilistic=probabilistic, **params)(_count(n, "n"))


# ------------------------------------------------------------------------------------------------- FABsum

def fabsum_bound(n: int, b: int, *, version: int = 1, u_block: float = 2**-24, u_acc: float | None = None,
                 terms: Literal["paper", "full"] = "paper", probabilistic: bool = False, lam: float = 1.0,
                 rounding: Rounding = "rz", u_out: float = 2**-24) -> float:
    """Bound on |C - C_hat| / (|A||B|) for FABsum ([FHLMM] sec. 4.4, Algorithms 4.2 and 4.3) on inputs
    already in the unit's format: blocks of b inner products on the block FMA (precision ``u_block``,
    fp32), the n/b block sums added in fp32 (``version=1``) or fp64 (``version=2``) rounding to nearest.

    ``terms="paper"``: the forms of sec. 4.4, (b + n/b) u_fp32 (v1) and b u_fp32 + (n/b) u_fp64 (v2);
    ``probabilistic=True`` replaces n/b by sqrt(n/b) (the inter-block sums round to nearest) and, with
    ``rounding="rn"`` only, b by sqrt(b) (the paper's tensor cores round toward zero, the default, so the
    intra-block term stays b u).  ``terms="full"``: the rigorous (1 + gamma_b') (1 + gamma_{N-1}) - 1, N =
    ceil(n/b) blocks (the first block is added to zero exactly), b' = min(b, n), and for v2 the final
    rounding to fp32 (Algorithm 4.3, line 7): + u_out (1 + that), which the paper's form leaves out.
    """
    n = _count(n, "n")
    b = _count(b, "b")
    if version not in (1, 2):
        raise ValueError(f"version must be 1 (fp32 inter-block sums) or 2 (fp64); got {version!r}")
    ub = _u(u_block, "u_block")
    ua = _u(u_acc if u_acc is not None else (2**-24 if version == 1 else 2**-53), "u_acc")
    rnd = _check_rounding(rounding)
    bb = min(b, n)
    blocks = -(-n // b)
    block_prob = probabilistic and rnd == "rn"
    if terms == "paper":
        x = n / b
        inter = min(x, lam * math.sqrt(x)) if probabilistic else x
        intra = min(bb, lam * math.sqrt(bb)) if block_prob else bb
        return intra * ub + inter * ua
    if terms != "full":
        raise ValueError(f"terms must be 'paper' or 'full'; got {terms!r}")
    err = (1 + _g(bb, ub, block_prob, lam)) * (1 + _g(blocks - 1, ua, probabilistic, lam)) - 1
    if version == 2:
        err = err + _u(u_out, "u_out") * (1 + err)
    return err


# -------------------------------------------------------------------------------------------- Ozaki I

def ozaki_max_inner(slice_bits: int = 7, acc_bits: int = 31) -> int:
    """The longest inner dimension k whose slice products add up exactly in a signed (acc_bits + 1)-bit
    accumulator: k (2**w - 1)**2 <= 2**acc_bits - 1, w = slice_bits (int8 slices of 7 bits and int32:
    133144)."""
    w = _count(slice_bits, "slice_bits")
    return (2 ** _count(acc_bits, "acc_bits") - 1) // (2**w - 1) ** 2


def _ozaki1_cut(r: OzakiRatios, s: int, w: int, products: str) -> float:
    """Ozaki I's truncation and dropped products (:func:`ozaki_bound` without the float64 additions)."""
    return math.ldexp(r.cut + (s - 1) * r.count * (products != "all"), -s * w)


def ozaki_bound(n: int, slices: int, *, slice_bits: int = 7, products: str = "triangle",
                exponent_spread: int = 0, fp64_terms: int | None = None, acc_bits: int = 31,
                u_acc: float = 2**-53, probabilistic: bool = False, lam: float = 1.0,
                ratios: OzakiRatios | None = None) -> float:
    """Bound on |C - C_hat|_ij / (|A||B|)_ij for Ozaki scheme I with truncated slices (derived here; no
    seed states one): 2**-(slices w) (cut + (slices - 1) count) + gamma_{T-1}(u_acc), w = ``slice_bits``, the
    middle term absent for ``products="all"`` (every pair of slices), the ratios from the data (``ratios``:
    :func:`ozaki_ratios`, which derives this) or from ``exponent_spread`` (:meth:`OzakiRatios.spread`).
    T = ``fp64_terms`` float64 terms added per entry (default ``slices``: ozaki1 sums each level t + u =
    const exactly in int64 first), times the chunks of k past :func:`ozaki_max_inner` (blockfma's ozaki1
    narrows the slices instead: pass its ``slice_width(k)`` as slice_bits).  ``probabilistic`` applies to
    the float64 additions only (the rest is truncation, not rounding).
    """
    n = _count(n, "n")
    s = _count(slices, "slices")
    w = _count(slice_bits, "slice_bits")
    spread = _count(exponent_spread, "exponent_spread", low=0)
    chunks = -(-n // ozaki_max_inner(w, acc_bits))
    T = (s if fp64_terms is None else _count(fp64_terms, "fp64_terms")) * chunks
    r = OzakiRatios.spread(n, spread) if ratios is None else ratios
    return _ozaki1_cut(r, s, w, products) + _g(T - 1, _u(u_acc, "u_acc"), probabilistic, lam)


def exponent_spread(A: Any, B: Any) -> int:
    """d_A + d_B for :func:`ozaki_bound`: the least integers with |a_ik| >= 2**-d_A max_k |a_ik| for every
    nonzero a_ik (each row of A) and likewise d_B for the columns of B."""

    def d(X: Any, axis: int) -> int:
        torch = sys.modules.get("torch")
        xp = torch if torch is not None and isinstance(X, torch.Tensor) else np  # a tensor stays on its device
        X = abs(arrays.to(xp, X, "float64") if xp is not np else np.asarray(X, dtype=np.float64))
        if 0 in X.shape or not bool(X.any()):
            return 0
        top = arrays.amax(xp, X, axis, keepdims=True)
        ratio = xp.where(X > 0, top / xp.where(X > 0, X, 1.0), 1.0)
        return int(math.ceil(math.log2(float(ratio.max()))))

    return d(A, 1) + d(B, 0)


def ozaki_slices(target_bits: float, slice_bits: int = 7, *, exponent_spread: int = 0,
                 products: str = "triangle", rule: Literal["bound", "bits"] = "bound") -> int:
    """The number of int8 slices Ozaki scheme I needs for a componentwise error of 2**-target_bits.

    ``rule="bound"`` (default; derived here): the smallest s whose truncation and dropped-product part of
    :func:`ozaki_bound`, 2**-(s w) (2 (2**spread + 1) + (s - 1) 2**(2 + spread)), is at most
    2**-target_bits.  (The float64 additions' gamma_{T-1}(2**-53) part does not shrink with s; fp64-level
    targets are limited by it as by any fp64 GEMM.)  ``rule="bits"``: the bit count
    ceil((target_bits + spread) / slice_bits), i.e. slices that keep that many bits below each row's leading
    bit (:func:`blockfma.multiword.ozaki.slices_needed`), which ignores the constant s and the factor 4 of
    the power-of-two scaling: usually one slice fewer.  For fp64 (target 53) with 7-bit slices: 9 by
    "bound", 8 by "bits".
    """
    if not target_bits > 0:
        raise ValueError(f"target_bits must be > 0; got {target_bits!r}")
    w = _count(slice_bits, "slice_bits")
    spread = _count(exponent_spread, "exponent_spread", low=0)
    if rule == "bits":
        return max(1, math.ceil((target_bits + spread) / w))
    if rule != "bound":
        raise ValueError(f"rule must be 'bound' or 'bits'; got {rule!r}")
    goal = 2.0**-target_bits
    for s in range(1, 2000):
        if _ozaki1_cut(OzakiRatios.spread(1, spread), s, w, products) <= goal:
            return s
    raise ValueError(f"no slice count up to 2000 reaches 2**-{target_bits}")


class OzakiRatios(NamedTuple):
    """The data's ratios (:func:`ozaki_ratios`): Ozaki II's X per scaling, Ozaki I's ``cut`` and ``count``."""

    fast: float
    accurate: float
    cut: float
    count: float

    @classmethod
    def spread(cls, k: int, spread: int) -> OzakiRatios:
        """Ratios for any data whose rows of A and columns of B span d_A and d_B binades, spread = d_A + d_B
        (:func:`exponent_spread`): each error term of :func:`ozaki_ratios` has a_il b_lj != 0 and so
        |a_il| >= 2**-d_A max_l |a_il| >= 2**(e_i - 1 - d_A), likewise b: 2**-sa_i |b_lj| <= c 2**-L sqrt(k)
        2**d_A |a_il b_lj| (c = 2 fast, 4 accurate), 2**f_j |a_il| <= 2**(1 + d_B) |a_il b_lj| and
        2**(e_i + f_j) <= 2**(2 + spread) |a_il b_lj|, each term against its own share of (|A||B|)_ij."""
        x = math.sqrt(k) * (2.0**spread + 1)
        return cls(2 * x, 4 * x, 2 * (2.0**spread + 1), 2.0 ** (2 + spread))


def ozaki_ratios(A: Any, B: Any, product: Any = None) -> OzakiRatios:
    """Upper bounds of the Ozaki errors per entry over a lower bound of (|A||B|)_ij, maxima over (i, j) (inf
    where that is 0 and the error's is not), from passes over A, B, C and ONE int8 product (derived here).

    |A||B| from below: u_i = 7 - e_i, max_l |a_il| < 2**e_i (:func:`.ozaki.row_exponents`), v_j alike for
    B's columns, A^ = 2**u_i |A| < 128, B^ = 2**v_j |B|: FG = floor(A^) @ floor(B^), exact on the int8 unit
    (``product``; default the exact unit, torch._int_mm for tensors), is <= 2**(u_i+v_j) (|A||B|)_ij.  The
    errors (times 2**(u_i+v_j)), with r_i, n_i the 1- and 2-norms of A^'s rows, q_j, p_j of B^'s columns
    (only terms with a_il b_lj != 0 err):

    * Ozaki II (:func:`.ozaki.ozaki2`): A' = trunc(2**sa_i A) errs by <= min(1, 2**sa_i |a|), A'B' is exact
      and rounded once: err_ij <= 2**-sa_i ||b_j||_1 + 2**-sb_j ||a_i||_1 + 2**-53 (|A||B|)_ij.  The fast
      scaling has 2**-sa_i < 2**(1-L) ||a_i||_2 (:func:`.ozaki.ozaki2_shifts`, 2**L = sqrt(P/2)): X_fast =
      max 2 (n_i q_j + r_i p_j) / FG_ij; the accurate one's 6-bit bounds (C'' <= k 64**2) give 2**-sa_i <=
      2**(1-L) 2**e_i sqrt(k): X_accurate = max 2**8 sqrt(k) (r_i + q_j) / FG_ij (:func:`ozaki2_bound`).
    * Ozaki I (:func:`.ozaki.ozaki1`, s slices of w bits, products t + t' <= s + 1): with A_{s+1} the
      remainder, ab - kept = sum_t A_t T_{s+2-t}, T_tau = b's remainder after tau - 1 slices, |T_tau| <
      2**(f_j - (tau-1) w) and <= |b| (truncation keeps signs), |A_t| < 2**(e_i - (t-1) w): per term
      |a| 2**(f_j - sw) + 2**(e_i - sw) |b| + (s-1) 2**(e_i + f_j - sw); the float64 sums of the levels err
      gamma_{s-1}(2**-53) sum |levels| <= gamma_{s-1} (|A||B|)_ij.  So cut = max 2**7 (r_i + q_j) / FG_ij,
      count = max 2**14 k / FG_ij: err_ij <= (2**-sw (cut + (s-1) count) + gamma_{s-1}) (|A||B|)_ij.

    Each ratio is raised by 2**-10 for the float64 rounding of the norms and quotients (relative (k + 4)
    2**-53); no underflow, as for DGEMM's bound gamma_k (|A||B|)_ij ([H02] sec. 3.1) that they are held to."""
    torch = sys.modules.get("torch")
    xp = torch if torch is not None and isinstance(A, torch.Tensor) else np
    if xp is np:
        A, B = check_operands(A, B)
    elif not (isinstance(B, torch.Tensor) and A.dtype == B.dtype == torch.float64 and A.device == B.device and
              A.ndim == B.ndim == 2 and A.shape[1] == B.shape[0] and bool(A.isfinite().all() & B.isfinite().all())):
        raise ArgumentError("A", Shown("<a tensor>"), "and B must be finite 2-D float64 tensors on one device, A's "
                            "columns B's rows", fix="check them with blockfma.multiword.tensors.check_tensors")
    if 0 in A.shape + B.shape:
        return OzakiRatios(0.0, 0.0, 0.0, 0.0)
    if product is None and xp is not np:
        from .hardware import Int8Unit  # torch, loaded lazily

        product = Int8Unit(f"hardware:{A.device}").product
    with np.errstate(under="ignore"):
        Ah = arrays.ldexp(xp, abs(A), 7 - _ozaki.row_exponents(A, xp)[:, None])
        Bh = arrays.ldexp(xp, abs(B), 7 - _ozaki.row_exponents(B.T, xp)[None, :])
    FG = _ozaki.chunked(xp, product or _ozaki.numpy_product(None), arrays.to(xp, xp.floor(Ah), "int8"),
                        arrays.to(xp, xp.floor(Bh), "int8"), ozaki_max_inner())
    r, q, n, p = Ah.sum(1)[:, None], Bh.sum(0)[None, :], *(arrays.row_squares(xp, X) ** 0.5 for X in (Ah, Bh.T))
    with np.errstate(divide="ignore"):  # 1 / FG, inf where FG = 0 on an entry whose row and column are not 0
        inv = xp.where((r > 0) & (q > 0), 1 / arrays.to(xp, FG, "float64"), 0.0) * (1 + 2.0**-10)
    cut, k = 2.0**7 * float(((r + q) * inv).max()), A.shape[1]
    fast = 2 * float(((n[:, None] * q + r * p[None, :]) * inv).max())
    return OzakiRatios(fast, 2 * math.sqrt(k) * cut, cut, 2.0**14 * k * float(inv.max()))


def ozaki2_bound(k: int, n_moduli: int | None = None, *, moduli: Sequence[int] | None = None,
                 scaling: str = "fast", exponent_spread: int = 0, ratios: OzakiRatios | None = None) -> float:
    """Bound on the componentwise error of :func:`.ozaki.ozaki2` (derived here; no seed states one):
    2**-L X (1 + 2**-16) + 2**-53, P the product of the moduli, 2**L = sqrt(P/2), X the ``scaling``'s ratio
    from the data (``ratios``: :func:`ozaki_ratios`, which derives this) or from ``exponent_spread``
    (:meth:`OzakiRatios.spread`: c sqrt(k) (2**spread + 1), c = 2 fast, 4 accurate).  No underflow assumed."""
    k = integer("k", k, least=1)
    mods = _ozaki.MODULI[:integer("n_moduli", n_moduli, least=1, most=len(_ozaki.MODULI))] if moduli is None \
        else tuple(moduli)
    if scaling not in ("fast", "accurate"):
        raise ArgumentError("scaling", scaling, "must be 'fast' or 'accurate'")
    spread = integer("exponent_spread", exponent_spread, least=0)
    X = getattr(OzakiRatios.spread(k, spread) if ratios is None else ratios, scaling)
    return X * (1 + 2.0**-16) / math.sqrt(math.prod(mods) / 2) + 2.0**-53


# ---------------------------------------------------------------------------------------- the dispatcher

@dataclass(frozen=True)
class MethodSpec:
    """How :func:`bound` bounds a method of :mod:`.registry`: its kind ("mmm", "fabsum", "ozaki1"), words and
    formats, the word products ("triangle" or "all") and where they are accumulated (``schedule``: the
    groups as the method runs them, 1-based), its source."""

    name: str
    kind: str
    p: int | None = None
    low: str | None = None
    high: str = "fp32"
    products: str = "triangle"
    accumulate: str = "outside"
    schedule: tuple[tuple[Pair, ...], ...] | None = None
    input_format: str | None = None
    acc_u: float = 2**-24
    source: str = ""
    notes: str = ""


def _of(e: Method | Mmm | Native | Ozaki | Fabsum) -> MethodSpec:
    """The bound's view of a registry entry."""
    if isinstance(e, Method):
        groups = [[(i + 1, j + 1) for i, j in g] for g in e.groups()]
        if groups == _schedule(_pairs(e.p, e.pattern), e.accumulate, None):
            return MethodSpec(e.name, "mmm", e.p, e.low, e.high, e.pattern, e.accumulate, source=e.bound_source,
                              notes=e.bound_notes)
        # its own grouping (Markidis, Ootomo): Algorithm 2.1's where the products or accumulate= are overridden
        return MethodSpec(e.name, "mmm", e.p, e.low, e.high, e.pattern, "outside", tuple(tuple(g) for g in groups),
                          source=e.bound_source, notes=e.bound_notes)
    if isinstance(e, Native):
        return MethodSpec(e.name, "mmm", 1, e.name, e.high, input_format=e.input_format, source=e.bound_source,
                          notes=e.bound_notes)
    if isinstance(e, Fabsum):
        return MethodSpec(e.name, "fabsum", acc_u=e.acc_u, source=e.bound_source)
    return MethodSpec(e.name, e.kind, source=e.bound_source)


METHODS: dict[str, MethodSpec] = {n: _of(e) for n, e in REGISTRY.items() if getattr(e, "bounded", True)}
"""The methods :func:`bound` knows, by name (those of :func:`blockfma.multiword.methods`, where they exist)."""


def methods() -> list[str]:
    """The names :func:`bound` takes."""
    return list(METHODS)


def _spec(method: str) -> MethodSpec:
    key = method.strip().lower() if isinstance(method, str) else None
    if key not in METHODS:
        close = difflib.get_close_matches(str(key), list(METHODS), n=1, cutoff=0.5) if key else []
        raise ArgumentError("method", method, f"unknown method; the known methods are: {', '.join(METHODS)}",
                            use={"method": close[0]} if close else None)
    return METHODS[key]


_MMM_PARAMS = {"p", "low", "high", "u_low", "u_high", "b", "u_block", "products", "terms", "input_format",
               "accumulate", "schedule", "probabilistic", "lam", "rounding"}
_FABSUM_PARAMS = {"b", "u_block", "u_acc", "terms", "probabilistic", "lam", "rounding", "u_out"}
_OZAKI_PARAMS = {"slices", "target_bits", "slice_bits", "products", "exponent_spread", "fp64_terms",
                 "acc_bits", "u_acc", "probabilistic", "lam"}


def _mmm_units(spec: MethodSpec, kw: dict[str, Any]) -> tuple[Any, Any, Any]:
    """p, u_low and u_high of a method :func:`mmm_bound` bounds, taken out of ``kw`` where given (``low=``,
    ``high=``: format names; ``u_low=``, ``u_high=``: numbers), else the method's."""
    p, low, high = kw.pop("p", spec.p), kw.pop("low", spec.low), kw.pop("high", spec.high)
    u_low, u_high = kw.pop("u_low", None), kw.pop("u_high", None)
    if p is None or (low is None and u_low is None):
        raise ValueError("method 'mmm' needs p= (words) and low= (their format) or u_low=")
    return p, unit_roundoff(low) if u_low is None else u_low, unit_roundoff(high) if u_high is None else u_high


def bound(method: str, n: int, **params: Any) -> float:
    """The worst-case (or, with ``probabilistic=True``, probabilistic) bound on the componentwise error
    max |C - C_hat| / (|A||B|) of ``method`` at inner dimension n.

    The word methods, "mmm" and the native "fp32" and "fp64" go to :func:`mmm_bound` with the method's p,
    low format, u_high (fp32; fp64 for "tf64" and "fp64"), products and accumulation; any of
    its arguments can be overridden (``low=``/``high=`` take format names, ``u_low=``/``u_high=`` numbers;
    "mmm" needs ``p=`` and ``low=``).  "fabsum-v1"/"fabsum-v2" go to :func:`fabsum_bound` (``b=`` needed).
    "ozaki1" goes to :func:`ozaki_bound` with ``slices=`` or ``target_bits=`` (then
    :func:`ozaki_slices` picks them).  An unknown method is a ValueError listing the known ones; an argument
    the method does not take is a TypeError.
    """
    spec = _spec(method)
    kw = dict(params)
    keywords("bound", kw, {"mmm": _MMM_PARAMS, "fabsum": _FABSUM_PARAMS}.get(spec.kind, _OZAKI_PARAMS))
    if spec.kind == "mmm":
        p, u_low, u_high = _mmm_units(spec, kw)
        kw.setdefault("products", spec.products)
        kw.setdefault("input_format", spec.input_format)
        if "schedule" not in kw and "accumulate" not in kw and spec.schedule is not None:
            kw["schedule"] = spec.schedule
        kw.setdefault("accumulate", spec.accumulate)
        if kw.get("schedule") is not None and kw.get("products") != spec.products:
            kw["schedule"] = None  # the method's schedule names its own products
        return mmm_bound(n, p=p, u_low=u_low, u_high=u_high, **kw)
    if spec.kind == "fabsum":
        if "b" not in kw:
            raise ValueError(f"{spec.name} needs b= (the block size)")
        b = kw.pop("b")
        return fabsum_bound(n, b, version=1 if spec.name == "fabsum-v1" else 2, **kw)
    slices = kw.pop("slices", None)
    target = kw.pop("target_bits", None)
    if (slices is None) == (target is None):
        raise ValueError("ozaki1 needs exactly one of slices= and target_bits=")
    if slices is None:
        slices = ozaki_slices(target, kw.get("slice_bits", 7), exponent_spread=kw.get("exponent_spread", 0),
                              products=kw.get("products", "triangle"))
    return ozaki_bound(n, slices, **kw)
