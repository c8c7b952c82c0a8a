"""Feature tests as data: the inputs that reveal one feature of a matrix unit, built from its formats.

Each :class:`FeatureTest` names the feature, the paper it comes from, the Model parameters it informs, a builder that
turns the target's formats, its k and the findings so far into rows (a, b, c), and a reader that states what the outputs
say in words a numerical analyst would use.  The probe runner (:mod:`blockfma.probes.infer`) feeds every test's rows to
the target and to candidate Models; the ``seeds`` test feeds the seeds' published cases (:mod:`blockfma.probes.seeds`)
that fit a target.  Nothing here is written per GPU: every value follows from the formats.  The tests' rows and the FTTN
and Fasi et al. tests each one covers are tabled in docs/probes.md, "Feature tests as data".
"""

from __future__ import annotations

import math
from functools import lru_cache
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import formats as _formats
from ..formats import Format, bits
from ..literals import bits_hex, hex_float
from . import seeds
from ..inputs import Formats, Row


__all__ = ["Row", "FeatureTest", "FEATURE_TESTS", "feature_test", "Builder", "Context"]

NAN = float("nan")
INF = float("inf")


@dataclass
class Context:
    """What a builder may use: the formats, k, and readings of earlier tests (``F``, ``L``, ...)."""

    formats: Formats
    k: int
    known: dict[str, Any] = field(default_factory=dict)


class Builder:
    """Collects rows, skipping any whose values the formats do not hold (so one builder serves all formats)."""

    def __init__(self, ctx: Context):
        self.ctx = ctx
        self.rows: list[Row] = []

    def add(self, label: str, terms: dict[int, float] | Sequence[float], c: float = 0.0) -> bool:
        """A row whose products at the given positions equal ``terms`` (the rest 0) and whose C is ``c``."""
        k = self.ctx.k
        items = terms.items() if isinstance(terms, dict) else enumerate(terms)
        a, b = [0.0] * k, [0.0] * k
        for pos, value in items:
            if pos >= k:
                return False
            ab = product_of(self.ctx.formats, value)
            if ab is None:
                return False
            a[pos], b[pos] = ab
        if not holds(self.ctx.formats.c, c):
            return False
        self.rows.append(Row(label, tuple(a), tuple(b), c))
        return True

    def raw(self, label: str, a: dict[int, float], b: dict[int, float], c: float = 0.0) -> bool:
        """A row given by its factors (for products that must not be rebuilt, e.g. inf·0)."""
        k = self.ctx.k
        f = self.ctx.formats
        if max([*a, *b], default=0) >= k:  # more positions than the target's k
            return False
        aa, bb = [a.get(i, 0.0) for i in range(k)], [b.get(i, 0.0) for i in range(k)]
        if not (all(holds(f.a, v) for v in aa) and all(holds(f.b, v) for v in bb) and holds(f.c, c)):
            return False
        self.rows.append(Row(label, tuple(aa), tuple(bb), c))
        return True


def holds(fmt: Format, x: float) -> bool:
    """Whether ``fmt`` holds the float ``x`` exactly (:func:`blockfma.formats.is_representable`); a NaN always, -0 only
    where the format has a negative zero (a builder must not place one where the unit cannot receive it).  Zeros and
    NaNs are answered here, not from the cache: a cache key does not tell -0 from +0 (they compare equal)."""
    if math.isnan(x):
        return True
    if x == 0:
        return math.copysign(1.0, x) > 0 or fmt.has_negative_zero
    return _holds_nonzero(fmt, x)


@lru_cache(maxsize=1 << 16)
def _holds_nonzero(fmt: Format, x: float) -> bool:
    """:func:`holds` for a nonzero float, cached: the builders ask about the same powers of two over and over."""
    return bool(_formats.is_representable(fmt, np.float64(x)))


def product_of(f: Formats, value: float) -> tuple[float, float] | None:
    """(a, b) in A's and B's formats with a·b = value exactly; normal factors where possible.  A zero (of
    either sign) or a non-finite value is value * 1, answered outside the cache (see :func:`holds`)."""
    if value == 0 or not math.isfinite(value):
        return (value, 1.0) if holds(f.a, value) else None
    return _product_nonzero(f, value)


@lru_cache(maxsize=65536)
def _product_nonzero(f: Formats, value: float) -> tuple[float, float] | None:
    m, e = math.frexp(abs(value))  # value = m 2^e, m in [0.5, 1)
    sig, ex = m * 2, e - 1  # sig in [1, 2)
    best = None
    a_lo, a_hi = f.a.emin - f.a.fraction_bits, f.a.emax
    for eb in range(max(f.b.emin - f.b.fraction_bits, ex - a_hi), min(f.b.emax, ex - a_lo) + 1):
        a = math.copysign(math.ldexp(sig, ex - eb), value)
        b = math.ldexp(1.0, eb)
        if holds(f.a, a) and holds(f.b, b):
            normal = abs(a) >= f.a.smallest_normal and b >= f.b.smallest_normal
            score = (normal, -abs((ex - eb) - eb))
            if best is None or score > best[0]:
                best = (score, a, b)
    return None if best is None else (best[1], best[2])


def _product_range(f: Formats) -> tuple[int, int]:
    """Exponents e for which 2^e is a product of normal inputs."""
    return f.a.emin + f.b.emin, f.a.emax + f.b.emax


def _top(ctx: Context) -> int:
    """A large product exponent E whose cancellation M - M stays clear of overflow in the C/D formats."""
    f = ctx.formats
    lo, hi = _product_range(f)
    return max(lo, min(hi - 1, f.d.emax - 2, f.c.emax - 2))


def _ulp_exp(fmt: Format) -> int:
    return 1 - fmt.precision  # ulp(1) = 2^(1-p)


# --- the tests -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FeatureTest:
    """One feature test: rows from the formats (``build``) and a reading of the target's outputs (``read``);
    ``params``: the Model parameters the reading settles, ``source``: where the test comes from."""

    id: str
    title: str
    source: str
    params: tuple[str, ...]
    build: Callable[[Context], list[Row]]
    read: Callable[[Context, list[Row], np.ndarray], Any]


def _build_specials(ctx: Context) -> list[Row]:
    B = Builder(ctx)
    f = ctx.formats
    if f.a.has_nan:  # fp6 and fp4 have no NaN code to send
        B.raw("NaN in a", {0: NAN, 1: 1.0}, {0: 1.0, 1: 1.0}, 1.0)
    if f.b.has_nan:
        B.raw("NaN in b", {0: 1.0}, {0: NAN}, 1.0)
    B.raw("NaN in c", {0: 1.0}, {0: 1.0}, NAN)
    if f.a.has_infinities and f.b.has_infinities:
        B.raw("inf * 0", {0: INF}, {0: 0.0}, 1.0)
        B.raw("inf - inf (products)", {0: INF, 1: INF}, {0: 1.0, 1: -1.0}, 1.0)
        B.raw("inf product", {0: INF}, {0: 1.0}, 1.0)
        B.raw("-inf product", {0: INF}, {0: -1.0}, 1.0)
        B.raw("inf product + (-inf) c", {0: INF}, {0: 1.0}, -INF)
    B.raw("inf c", {0: 1.0}, {0: 1.0}, INF)
    B.raw("largest * largest (overflow)", {0: f.a.max, 1: f.a.max}, {0: f.b.max, 1: f.b.max}, 0.0)
    B.raw("-largest * largest (overflow)", {0: -f.a.max, 1: -f.a.max}, {0: f.b.max, 1: f.b.max}, 0.0)
    return B.rows


def read_bits(ctx: Any, rows: list[Any], d: np.ndarray) -> dict[str, str]:
    """Each row's label -> its result as a hex float and its bit pattern in the output format (the reading
    of the feature tests whose answer is the bits themselves: specials, NaN scales, zeros)."""
    return {r.label: f"{hex_float(float(x))} ({bits_hex(x, ctx.formats.d)})" for r, x in zip(rows, d)}


def _build_zeros(ctx: Context) -> list[Row]:
    B = Builder(ctx)
    k = ctx.k
    for sa in (0.0, -0.0):
        for sc in (0.0, -0.0):
            B.raw(f"every product {sa!r}*1, c={sc!r}", dict.fromkeys(range(k), sa), dict.fromkeys(range(k), 1.0), sc)
            B.raw(f"product {sa!r}*1 at 0, the rest +0*1, c={sc!r}", {0: sa}, {0: 1.0}, sc)
    for sc in (0.0, -0.0):
        B.add(f"1 - 1, c={sc!r}", {0: 1.0, 1: -1.0}, sc)
        B.add(f"-1 + 1, c={sc!r}", {0: -1.0, 1: 1.0}, sc)
        B.raw(f"1*1 with c=-1, then {sc!r}", {0: 1.0}, {0: 1.0}, -1.0)
    x = (ctx.known.get("F") or 30) + 8  # below the alignment cut of 1 - 1
    for s in (1.0, -1.0):
        for sc in (0.0, -0.0):
            B.add(f"1 - 1 {'+' if s > 0 else '-'} 2^-{x} (cut by the alignment), c={sc!r}",
                  {0: 1.0, 1: -1.0, 2: s * math.ldexp(1.0, -x)}, sc)
    f = ctx.formats
    d = f.d
    # a nonzero sum that rounds to zero: a quarter of the output's smallest subnormal, or the smallest
    # product where the inputs reach no lower (half the smallest subnormal still ties to zero)
    least = math.ldexp(1.0, f.a.emin - f.a.fraction_bits + f.b.emin - f.b.fraction_bits)
    tiny = max(math.ldexp(1.0, d.emin - d.fraction_bits - 3), least)
    if tiny <= math.ldexp(1.0, d.emin - d.fraction_bits - 1):
        for s in (1.0, -1.0):
            for sc in (0.0, -0.0):
                B.add(f"nonzero sum {s * tiny!r} rounds to zero, c={sc!r}", {0: s * tiny}, sc)
    return B.rows


def _read_signs(ctx: Context, rows: list[Row], d: np.ndarray) -> dict[str, str]:
    return {r.label: hex_float(float(x)) for r, x in zip(rows, d)}


def _build_products(ctx: Context) -> list[Row]:
    B = Builder(ctx)
    f = ctx.formats
    ua, ub = math.ldexp(1.0, -f.a.fraction_bits), math.ldexp(1.0, -f.b.fraction_bits)
    for s in (1.0, -1.0):
        B.raw(f"(1+ulp_a)(1+ulp_b), sign {s:+.0f}", {0: s * (1 + ua)}, {0: 1 + ub}, 0.0)
        B.raw(f"(1+ulp_a)(1+ulp_b) - 1, sign {s:+.0f}", {0: s * (1 + ua)}, {0: 1 + ub}, -s)
        B.raw(f"(2-ulp_a)(2-ulp_b) - 4, sign {s:+.0f}", {0: s * (2 - 2 * ua)}, {0: 2 - 2 * ub}, -4.0 * s)
    return B.rows


def _read_products(ctx: Context, rows: list[Row], d: np.ndarray) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for r, x in zip(rows, d):
        exact = sum(a * b for a, b in zip(r.a, r.b)) + r.c  # float64 holds these products and sums exactly
        out[r.label] = {"output": hex_float(float(x)), "exact": hex_float(exact), "exact_kept": float(x) == exact}
    out["products exact"] = all(v["exact_kept"] for v in out.values() if isinstance(v, dict))
    return out


def _build_precision(ctx: Context) -> list[Row]:
    """[2^E, -2^E, ±2^(E-x)]: the third term survives iff it lies above the cut; also with 1.5·1.5 leading."""
    B = Builder(ctx)
    E = _top(ctx)
    for x in range(1, 60):
        for s in (1.0, -1.0):
            small = s * math.ldexp(1.0, E - x)
            B.add(f"2^E - 2^E {'+' if s > 0 else '-'} 2^(E-{x})", {0: math.ldexp(1.0, E), 1: -math.ldexp(1.0, E),
                                                                     2: small})
            B.add(f"2.25*2^(E-2) - 2.25*2^(E-2) {'+' if s > 0 else '-'} 2^(E-{x})",
                  {0: 2.25 * math.ldexp(1.0, E - 2), 1: -2.25 * math.ldexp(1.0, E - 2), 2: small})
            B.add(f"2^E {'+' if s > 0 else '-'} 2^(E-{x}), c=-2^E", {0: math.ldexp(1.0, E), 1: small},
                  -math.ldexp(1.0, E))
            # the same three terms at positions 0, 1 and 4: one block also where a unit feeds the products
            # by register halves (k mod 4 in {0, 1} first, Hopper's fp8 mma.sync)
            B.add(f"2^E at 0, -2^E at 4, {'+' if s > 0 else '-'}2^(E-{x}) at 1",
                  {0: math.ldexp(1.0, E), 4: -math.ldexp(1.0, E), 1: small})
    # products that reach fewer bits below the top than a cut may lie (25 on the fp6/fp4 units), or than the
    # output holds: C supplies the far term (only fp6 and fp4 inputs, alone or paired, come this short)
    if E - _least_product_exponent(ctx.formats) < max(ctx.formats.d.precision + 4, 28):
        _precision_c_rows(B, ctx)
    return B.rows


def _least_product_exponent(f: Formats) -> int:
    """The exponent of the smallest nonzero product (subnormal factors where the formats have them)."""
    return sum(x.emin - (x.fraction_bits if x.subnormals else 0) for x in (f.a, f.b))


def _precision_c_rows(B: Builder, ctx: Context) -> None:
    """Where the products span too few binades to reach the alignment cut among themselves (fp6, fp4: a
    product of two such inputs spans some 14 binades), C is one of the two far-apart terms.

    C largest: C = 2^Y, one product ±2^(Y-x) and, for a rounding to nearest, another at half an output ulp of C,
    2^(Y-p); Y is placed so that 2^(Y-x) is the smallest product the inputs form.  C smallest (where C reaches far below
    the products, e.g. fp16): products summing to 2^Y (several lanes where no one product is that large) and the
    half-ulp product, C = ±2^(Y-x).  In both the two signs of the small term give different outputs exactly when it lies
    above the cut (toward zero: 2^Y against its predecessor; to nearest: the tie at half an ulp broken up or down)."""
    f = ctx.formats
    p = f.d.precision
    lo = _least_product_exponent(f)
    for x in range(1, 60):
        for half in (False, True):
            if half and x <= p:
                continue
            for s in (1.0, -1.0):
                sign = "+" if s > 0 else "-"
                Y = lo + x
                terms = {0: s * math.ldexp(1.0, Y - x)}
                if half:
                    terms[1] = math.ldexp(1.0, Y - p)
                B.add(f"C = 2^Y{', 2^(Y-p)' if half else ''}, {sign}2^(Y-{x}) (C largest)", terms, math.ldexp(1.0, Y))
                Y = lo + p  # the half-ulp product the smallest one
                big = _products_summing_to(f, math.ldexp(1.0, Y), ctx.k - 1)
                if big is not None:
                    terms = dict(enumerate(big))
                    if half:
                        terms[len(big)] = math.ldexp(1.0, Y - p)
                    below = math.frexp(big[0])[1] - 1 - (Y - x)  # bits below the largest product
                    B.add(f"products 2^Y{', 2^(Y-p)' if half else ''}, C = {sign}2^(Y-{x}), {below} bits below the "
                          "largest product (C smallest)", terms, s * math.ldexp(1.0, Y - x))


def _products_summing_to(f: Formats, value: float, lanes: int) -> list[float] | None:
    """At most ``lanes`` products of A's and B's values (largest first) that sum to ``value`` exactly."""
    out: list[float] = []
    rest = value
    for v in _products(f):
        while v <= rest and len(out) < lanes:
            out.append(v)
            rest -= v
    return out if rest == 0 else None


@lru_cache(maxsize=64)
def _products(f: Formats) -> tuple[float, ...]:
    """The positive products of a value of A's format and one of B's, largest first (small formats only)."""
    def values(fmt: Format) -> set[float]:
        t = fmt.fraction_bits
        lo = fmt.emin - (t if fmt.subnormals else 0)
        cands = {math.ldexp(m, e - t) for e in range(lo, fmt.emax + 1) for m in range(1, 1 << (t + 1))}
        return {v for v in cands if holds(fmt, v)}
    # those the Builder can place (:func:`product_of`: one factor a power of two)
    return tuple(sorted({v for v in {a * b for a in values(f.a) for b in values(f.b)} if product_of(f, v)},
                        reverse=True))


def _read_precision(ctx: Context, rows: list[Row], d: np.ndarray) -> dict[str, Any]:
    kept = [int(r.label.split("E-")[1].split(")")[0]) for r, x in zip(rows, d)
            if r.label.startswith("2^E - 2^E +") and float(x) != 0]
    # C largest or smallest: the two signs of the small term give different outputs while it lies above the cut
    out = {r.label: int(u) for r, u in zip(rows, bits(d)) if r.label.endswith(("(C largest)", "(C smallest)"))}
    for label, u in out.items():
        if "+2^(Y-" in label:
            x = int(label.split(", ")[-1].split(" bits below")[0]) if "bits below" in label else \
                int(label.split("2^(Y-")[-1].split(")")[0])
            if out.get(label.replace("+2^(Y-", "-2^(Y-")) not in (None, u):
                kept.append(x)
    return {"bits kept below the largest term (F)": max(kept) if kept else 0}


def _build_rounding(ctx: Context) -> list[Row]:
    """1 + (j/8) ulp for j = 1..15 on both semi-axes, the fraction spread over power-of-two products; C = ±1
    or a product of 1 (T_1_bit, T_rnd_dir, T_3_bits_fin_rnd)."""
    B = Builder(ctx)
    f = ctx.formats
    p = f.d.precision
    # scale everything by 2^e0 so that the eighths of an ulp are products the input formats reach
    tiny = f.a.emin - f.a.fraction_bits + f.b.emin - f.b.fraction_bits
    e0 = max(0, tiny - (_ulp_exp(f.d) - 3))
    one = math.ldexp(1.0, e0)
    for j in range(1, 16):
        parts = [math.ldexp(one, _ulp_exp(f.d) - 3 + i) for i in range(4) if j >> i & 1]
        for s in (1.0, -1.0):
            frac = {1 + n: s * v for n, v in enumerate(parts)}
            B.add(f"{'-' if s < 0 else ''}(1 + {j}/8 ulp) 2^{e0}, 1 as a product", {0: s * one, **frac})
            B.add(f"{'-' if s < 0 else ''}(1 + {j}/8 ulp) 2^{e0}, 1 as C", dict(enumerate(frac.values())), s * one)
    # ties with a sticky bit far below (round to nearest sees it, a 3-bit design may not)
    for s in (1.0, -1.0):
        B.add(f"{'-' if s < 0 else ''}(1 + ulp/2 + 2^-{p + 8}) 2^{e0}",
              {0: s * one, 1: s * math.ldexp(one, -p), 2: s * math.ldexp(one, -p - 8)})
    # one product of two multi-bit factors just off a rounding midpoint of C = 1 + ulp or 1 + 2 ulp: its
    # low bits (up to 2 t below the midpoint) decide the rounding where the unit keeps them (an FMA does,
    # a truncating alignment may not)
    ta, tb = f.a.fraction_bits, f.b.fraction_bits
    ea = (_ulp_exp(f.d) - 1) // 2
    pairs = [(i, j) for i in sorted({1, 2, ta // 2, ta} - {0}) for j in sorted({1, tb // 2, tb} - {0})]
    pairs += [(i, -i) for i in range(1, min(ta, tb + 1) + 1)]  # (1+2^-i)(1-2^-i) = 1 - 2^-2i: one far bit
    for i, j in pairs:
        for m in (1, 2):
            for s in (1.0, -1.0):
                a = -s * (1 + math.ldexp(1.0, -i)) * math.ldexp(one, ea)
                b = (1 + math.copysign(math.ldexp(1.0, -abs(j)), j)) * math.ldexp(1.0, _ulp_exp(f.d) - 1 - ea)
                B.raw(f"{'-' if s < 0 else ''}(1 + {m} ulp) - (1+2^-{i})(1{'+' if j > 0 else '-'}2^-{abs(j)}) ulp/2, "
                      "C the first term", {0: a}, {0: b}, s * (one + m * math.ldexp(one, _ulp_exp(f.d))))
    return B.rows


def _read_rounding(ctx: Context, rows: list[Row], d: np.ndarray) -> dict[str, Any]:
    out = {}
    for r, x in zip(rows, d):
        if "as a product" in r.label:
            one = abs(r.a[0] * r.b[0])
            ulp = math.ldexp(one, _ulp_exp(ctx.formats.d))
            v = float(x)
            out[r.label] = f"1 + {(abs(v) - one) / ulp:g} ulp" if math.isfinite(v) and v else hex_float(v)
    return out


def _build_order(ctx: Context) -> list[Row]:
    """M = 2^E at position i, -M at j, unit terms u everywhere else (u below the cut when M is present)."""
    B = Builder(ctx)
    k = ctx.k
    E = _top(ctx)
    F = ctx.known.get("F") or 30
    d = ctx.formats.d
    u_exp = max(E - F - max(k, 2).bit_length() - 3, d.emin - d.fraction_bits + 2,
                _product_range(ctx.formats)[0] - 2 * max(ctx.formats.a.fraction_bits, 1))
    u = math.ldexp(1.0, u_exp)
    M = math.ldexp(1.0, E)
    pairs = [(i, j) for i in range(k) for j in range(i + 1, k)]
    if len(pairs) > 600:
        pairs = [(0, j) for j in range(1, k)] + [(i, k - 1) for i in range(1, k - 1)] + \
                [(i, i + 1) for i in range(1, k - 2)]
    for i, j in pairs:
        terms = {p: u for p in range(k)}
        terms[i], terms[j] = M, -M
        B.add(f"M at {i}, -M at {j}, u elsewhere", terms)
    B.add("u everywhere", {p: u for p in range(k)})
    return B.rows


def _read_order(ctx: Context, rows: list[Row], d: np.ndarray) -> dict[str, Any]:
    u = next((v for r in rows if r.label == "u everywhere" for v in [abs(r.a[0] * r.b[0])]), None)
    if not u:
        return {}
    counts = {r.label: float(x) / u for r, x in zip(rows, d)}
    first = [counts.get(f"M at 0, -M at {j}, u elsewhere") for j in range(1, ctx.k)]
    return {"unit terms counted, M at 0 and -M at j = 1..k-1": first, "all unit terms": counts.get("u everywhere")}


def _build_subnormals(ctx: Context) -> list[Row]:
    B = Builder(ctx)
    f = ctx.formats
    sa = f.a.smallest_subnormal if f.a.subnormals else None
    if sa is not None and sa < f.a.smallest_normal:
        for eb in (f.b.emax, f.b.emax // 2, 0):
            for s in (1.0, -1.0):
                B.raw(f"T_si_no: {'-' if s < 0 else ''}subnormal a * 2^{eb}", {0: s * sa},
                      {0: math.ldexp(1.0, eb)}, 0.0)
        B.raw("T_sa: four subnormal products", {i: sa * 3 if 3 * sa < f.a.smallest_normal else sa for i in range(4)},
              {i: 1.0 for i in range(4)}, 0.0)
    sc = f.c.smallest_subnormal
    for s in (1.0, -1.0):
        B.raw(f"subnormal c {'-' if s < 0 else '+'}", {}, {}, s * sc)
        B.raw(f"subnormal c {'-' if s < 0 else '+'} plus 1*1", {0: 1.0}, {0: 1.0}, s * sc)
    d = f.d
    for m in (1, 3, 5):
        v = m * d.smallest_subnormal
        for s in (1.0, -1.0):
            B.add(f"T_ni_so: {'-' if s < 0 else ''}{m} x smallest subnormal of D", {0: s * v})
            B.add(f"T_ni_so: {'-' if s < 0 else ''}{m} x smallest subnormal of D, split", {0: s * 2 * v, 1: -s * v})
    B.add("half the smallest normal of D, twice", {0: d.smallest_normal / 2, 1: d.smallest_normal / 2})
    return B.rows


def _read_subnormals(ctx: Context, rows: list[Row], d: np.ndarray) -> dict[str, Any]:
    res = {r.label: hex_float(float(x)) for r, x in zip(rows, d)}
    si = [float(x) != 0 for r, x in zip(rows, d) if r.label.startswith("T_si_no")]
    so = [float(x) != 0 for r, x in zip(rows, d) if r.label.startswith("T_ni_so") and "split" not in r.label]
    return {"subnormal inputs kept (T_si_no)": all(si) if si else None,
            "subnormal outputs (T_ni_so)": all(so) if so else None, **res}


def _build_e_zero(ctx: Context) -> list[Row]:
    """Tiny products only, C = ±0: 2^y ± 2^(y-x) near the output's smallest subnormal; whether the small one
    survives tells where the alignment cut lies when every term is below the zero-term exponent."""
    B = Builder(ctx)
    d = ctx.formats.d
    lo = d.emin - d.fraction_bits
    F = ctx.known.get("F") or 30
    for y in (lo - 1, lo, lo + 1, lo + 4, d.emin, d.emin + 4):
        for x in range(1, F + 8):
            for s in (1.0, -1.0):
                B.add(f"2^{y} {'+' if s > 0 else '-'} 2^{y - x}",
                      {0: math.ldexp(1.0, y), 1: s * math.ldexp(1.0, y - x)})
    # C alone (every product zero), all its significand bits set: the zero products' exponent decides
    # where C is cut when it lies below it
    cf = ctx.formats.c
    for y in range(cf.emin - cf.fraction_bits, min(cf.emax, cf.emin + F + 40) + 1):
        v = math.ldexp(1.0, y + 1) - math.ldexp(1.0, max(y - cf.fraction_bits, cf.emin - cf.fraction_bits))
        for s in (1.0, -1.0):
            B.add(f"C = {'-' if s < 0 else ''}(2^{y + 1} - ulp) alone", {}, s * v)
    return B.rows


def _build_carry(ctx: Context) -> list[Row]:
    """Every product near the top of one binade, all of one sign (Fasi et al.'s carry-bit test)."""
    B = Builder(ctx)
    f = ctx.formats
    k = ctx.k
    top = (2 - math.ldexp(1.0, -f.a.fraction_bits)) * (2 - math.ldexp(1.0, -f.b.fraction_bits))
    e = min(min(f.d.emax, f.c.emax) - 3 - max(k, 2).bit_length(), f.a.emax + f.b.emax)
    for n in sorted({2, 3, 4, 5, 8, 9, 16, 17, k} & set(range(2, k + 1))):
        v = top * math.ldexp(1.0, e - 2)
        B.add(f"{n} products of (2-ulp)^2 2^{e - 2}", {i: v for i in range(n)})
        B.add(f"{n} products of (2-ulp)^2 2^{e - 2}, C the same", {i: v for i in range(n)},
              float(_formats.round(f.c, np.float64(v))))
        B.add(f"{n} products of 2^{e - 1} and one 1.5 2^{e - 1}", {**{i: math.ldexp(1.0, e - 1) for i in range(n - 1)},
                                                                  n - 1: 1.5 * math.ldexp(1.0, e - 1)})
    return B.rows


def _build_seeds(ctx: Context) -> list[Row]:
    """The seed papers' published cases that fit the target's formats and k (:mod:`.seeds`)."""
    f = ctx.formats
    if f.a != f.b or f.c != f.d:
        return []
    return seeds.rows(seeds.cases(input_format=f.a.name, output_format=f.d.name), ctx.k)


def _read_seeds(ctx: Context, rows: list[Row], d: np.ndarray) -> dict[str, Any]:
    """Per case: the target's output and the devices whose published output it reproduces."""
    out = {}
    for r, x, u in zip(rows, d, bits(d)):
        case = seeds.seed_case(r.label)
        same = [dev for dev in case.expected if seeds.expected_bits(case, dev) == int(u)]
        out[r.label] = {"output": hex_float(float(x)), "as published for": same}
    return out


FEATURE_TESTS: dict[str, FeatureTest] = {t.id: t for t in [
    FeatureTest("precision", "bits kept below the largest term (accumulation precision, extra alignment bits)",
                "Fasi et al. 2021 sec. 4; FTTN T_pres_extra_acc", ("fraction_bits", "alignment", "product_exponent"),
                _build_precision, _read_precision),
    FeatureTest("order", "block width and order of accumulation (T_blk_fma_width, T_acc_order)",
                "FTTN sec. III; FPRev (Xie et al. 2025) for the pair form", ("block_width", "product_order"),
                _build_order, _read_order),
    FeatureTest("rounding", "rounding of the result on both semi-axes (T_1_bit, T_rnd_dir, T_3_bits_fin_rnd)",
                "FTTN Fig. 1 and Table III; Fasi et al. 2021 sec. 4", ("output_rounding", "fraction_bits"),
                _build_rounding, _read_rounding),
    FeatureTest("products", "exact products (T_prod)", "Fasi et al. 2021 sec. 4; FTTN T_prod",
                ("fraction_bits",), _build_products, _read_products),
    FeatureTest("specials", "NaN and infinity results, overflow", "IEEE 754; H100 record (data/hardware)",
                ("nan", "overflow"), _build_specials, read_bits),
    FeatureTest("zeros", "sign of zero results (exact and rounded)", "IEEE 754 sec. 6.3; H100 record",
                ("exact_zero", "rounded_zero"), _build_zeros, _read_signs),
    FeatureTest("subnormals", "subnormal inputs, C and outputs (T_si_no, T_ni_so, T_sa)",
                "FTTN sec. III; Fasi et al. 2021 sec. 4", ("subnormals", "flush_zero"), _build_subnormals,
                _read_subnormals),
    FeatureTest("e_zero", "exponent a zero term takes in the alignment (tiny sums)",
                "Khattak & Mikaitis; H100 record e_zero scan", ("e_zero",), _build_e_zero, _read_signs),
    FeatureTest("carry", "carry bits above the largest term", "Fasi et al. 2021 sec. 4 (carry test); Valpey et al.",
                ("carry_bits",), _build_carry, _read_signs),
    FeatureTest("seeds", "the seed papers' published cases that fit the formats and k",
                "Fasi et al. 2021; FTTN; Valpey et al. (probes/seeds.py)", (), _build_seeds, _read_seeds),
]}


def feature_test(name: str) -> FeatureTest:
    try:
        return FEATURE_TESTS[name]
    except KeyError:
        raise ValueError(f"unknown feature test {name!r}; known: {', '.join(FEATURE_TESTS)}") from None


def arrays(rows: Sequence[Row]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """a (n, k), b (n, k), c (n,) as float64 arrays."""
    if not rows:
        return np.zeros((0, 0)), np.zeros((0, 0)), np.zeros(0)
    return (np.array([r.a for r in rows], dtype=np.float64), np.array([r.b for r in rows], dtype=np.float64),
            np.array([r.c for r in rows], dtype=np.float64))
