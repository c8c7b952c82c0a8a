"""Random and adversarial dot-product inputs, values exactly representable in their formats.

Each family is built to break one part of a fused datapath: ``normal`` (moderate exponents), ``wide`` (the whole
exponent range, subnormals too), ``cancel`` (the second half of a row mirrors the first with B negated, C cancels the
rest, one term nudged), ``underflow`` (everything near the smallest normal), ``zeros`` (signed zeros everywhere),
``specials`` (NaN, infinities, largest values, signed zeros), ``extremes`` (near the largest exponents) and
``random-bits`` (uniform bit patterns).  Values come back as float64 arrays (every format here fits in binary64), so
they feed :func:`blockfma.dot` and every probe target alike.  A :class:`Row` is one labelled dot product, as the feature
tests and the seeds' cases give them.

    >>> rng = np.random.default_rng(1)
    >>> a, b, c = rows("cancel", Formats.of("fp16", "fp16", "fp32", "fp32"), 16, 100, rng)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import formats as _formats
from .formats import Format

__all__ = ["Formats", "Row", "FAMILIES", "values", "rows", "mixed_rows"]

FAMILIES = ("normal", "wide", "cancel", "underflow", "zeros", "specials", "extremes", "random-bits")


@dataclass(frozen=True)
class Formats:
    """The four formats of d = a·b + c: A's, B's, C's and D's."""

    a: Format
    b: Format
    c: Format
    d: Format

    @classmethod
    def of(cls, a: Format | str, b: Format | str, c: Format | str, d: Format | str) -> Formats:
        return cls(*(_formats.get(f) for f in (a, b, c, d)))

    @property
    def input_name(self) -> str:
        return _formats.pair_name(self.a, self.b)


@dataclass(frozen=True)
class Row:
    """One dot product: a label saying what it tests, a and b (k values each) and c."""

    label: str
    a: tuple[float, ...]
    b: tuple[float, ...]
    c: float


def values(fmt: Format, rng: np.random.Generator, shape: tuple[int, ...], e_lo: int, e_hi: int,
           zeros: float = 0.0) -> np.ndarray:
    """Random finite values of ``fmt`` with exponent in [e_lo, e_hi] (clipped to the format; exponents below emin give
    subnormals where the format has them), random signs and fractions, a share ``zeros`` of signed zeros."""
    t = fmt.fraction_bits
    lo = fmt.emin - (t if fmt.subnormals else 0)
    e = rng.integers(max(e_lo, lo), max(min(e_hi, fmt.emax), max(e_lo, lo)) + 1, size=shape)
    m = rng.integers(0, 1 << t, size=shape) if t else np.zeros(shape, np.int64)
    v = np.ldexp((1 << t) + m.astype(np.float64), (e - t).astype(np.int32))
    sub = e < fmt.emin  # subnormals: keep the multiples of the smallest subnormal
    if sub.any():
        q = np.ldexp(1.0, fmt.emin - t)
        v[sub] = np.maximum(np.floor(np.ldexp(v[sub], t - fmt.emin)), 1.0) * q
    v = np.minimum(v, fmt.max)
    sign = rng.integers(0, 2, size=shape).astype(bool)
    v = np.where(sign, -v, v)
    if zeros:
        v = np.where(rng.random(shape) < zeros, np.where(sign, -0.0, 0.0), v)
    if not fmt.has_negative_zero:
        v = np.where(v == 0, 0.0, v)
    return v


def _random_bits(fmt: Format, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    store = _formats.storage(fmt)
    code = rng.integers(0, 1 << store.bits, size=shape, dtype=np.uint64) & np.uint64(_formats.storage_mask(fmt))
    v = _formats.decode(store, code)
    return v if fmt.subnormals else np.where(np.abs(v) < fmt.smallest_normal, 0.0 * v, v)


def _specials(fmt: Format, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    pool = ([np.nan] if fmt.has_nan else []) + [fmt.max, -fmt.max, 0.0, -0.0 if fmt.has_negative_zero else 0.0]
    if fmt.has_infinities:
        pool += [np.inf, -np.inf]
    return np.array(pool)[rng.integers(0, len(pool), size=shape)]


def rows(family: str, f: Formats, k: int, n: int, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """``n`` dot products of length ``k`` from one input family: a (n, k), b (n, k), c (n,)."""
    if family not in FAMILIES:
        raise ValueError(f"unknown input family {family!r}; choose from {', '.join(FAMILIES)}")
    sa, sc = (n, k), (n,)
    low = lambda x: x.emin - x.fraction_bits  # noqa: E731 - the subnormal range too
    if family == "normal":
        return values(f.a, rng, sa, -3, 3, 0.05), values(f.b, rng, sa, -3, 3, 0.05), values(f.c, rng, sc, -4, 6, 0.1)
    if family == "wide":
        mid = (low(f.a) + f.a.emax) // 2 + (low(f.b) + f.b.emax) // 2
        c = values(f.c, rng, sc, max(low(f.c), low(f.a) + low(f.b)), min(f.c.emax, mid + 8), 0.1)
        return values(f.a, rng, sa, low(f.a), f.a.emax), values(f.b, rng, sa, low(f.b), f.b.emax), c
    if family == "cancel":
        a, b = values(f.a, rng, sa, -3, 3), values(f.b, rng, sa, -3, 3)
        h = k // 2
        if h:
            a[:, h:2 * h] = a[:, :h]
            b[:, h:2 * h] = _formats.round(f.b, -b[:, :h])  # B's format holds -b
            nudge = np.nonzero(rng.random(n) < 0.7)[0]
            col = rng.integers(0, k, size=n)
            a[nudge, col[nudge]] = values(f.a, rng, (len(nudge),), min(-4, f.a.emin + 2), -4)
        with np.errstate(all="ignore"):
            s = np.einsum("nk,nk->n", a, b)
        c = -_formats.round(f.c, s)
        return a, b, np.where(rng.random(n) < 0.4, np.where(rng.random(n) < 0.5, 0.0, -0.0), c)
    if family == "underflow":
        return (values(f.a, rng, sa, low(f.a), f.a.emin + 2, 0.1), values(f.b, rng, sa, low(f.b), f.b.emin + 2, 0.1),
                values(f.c, rng, sc, low(f.c), f.c.emin + 1, 0.5))
    if family == "zeros":
        return values(f.a, rng, sa, -3, 3, 0.6), values(f.b, rng, sa, -3, 3, 0.6), values(f.c, rng, sc, -3, 3, 0.6)
    if family == "specials":
        def mix(fmt: Format, shape: tuple[int, ...], share: float) -> np.ndarray:
            return np.where(rng.random(shape) < share, _specials(fmt, rng, shape), values(fmt, rng, shape, -3, 3, 0.05))
        return mix(f.a, sa, 0.03), mix(f.b, sa, 0.03), mix(f.c, sc, 0.05)
    if family == "extremes":
        return (values(f.a, rng, sa, f.a.emax - 3, f.a.emax), values(f.b, rng, sa, f.b.emax - 3, f.b.emax),
                values(f.c, rng, sc, f.c.emax - 4, f.c.emax, 0.2))
    c = _random_bits(f.c, rng, sc)
    if f.c.bits >= 32:  # half the time keep C's exponent near the products' range
        near = values(f.c, rng, sc, 2 * min(f.a.emin, -20), 2 * max(f.a.emax, 20))
        c = np.where(rng.random(sc) < 0.5, near, c)
    return _random_bits(f.a, rng, sa), _random_bits(f.b, rng, sa), c


def mixed_rows(f: Formats, k: int, n: int, rng: np.random.Generator,
               families: tuple[str, ...] = FAMILIES) -> tuple[np.ndarray, ...]:
    """``n`` rows spread evenly over ``families`` (shuffled together)."""
    parts = [rows(fam, f, k, -(-n // len(families)), rng) for fam in families]
    a, b, c = (np.concatenate([p[i] for p in parts])[:n] for i in range(3))
    order = rng.permutation(len(c))
    return a[order], b[order], c[order]
