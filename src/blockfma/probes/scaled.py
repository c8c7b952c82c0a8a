"""Probes of block-scaled units (PTX ``mma.block_scale``, ``tcgen05.mma.block_scale``): a target that takes
scales, the feature tests of the scale path, and the inference of a ``scaled-fused`` Model.

A :class:`ScaledTarget` computes ``d = sum_i a_i b_i sa[i // block] sb[i // block] + c`` for rows of k
products, ``sa`` and ``sb`` of shape ``(n, k // scale_block)`` holding values of its scale format (ue8m0 as
``e8m0fnu``, or ``ue4m3``; NaN allowed).  The feature tests (:data:`SCALED_TESTS`: blocks, extremes, nan,
zero, precision, rounding, group, e_zero), how their readings become a verified Model, and what the fp32
output cannot show (``readings["unresolved"]``) are in docs/probes.md, "Block-scaled units"."""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from .. import formats as _formats
from ..arguments import ArgumentError, choice, integer
from ..engine import dot
from ..formats import Format, RoundingMode, bits
from ..literals import hex_float
from ..model import Family, Model, NaNStyle
from .features import holds, product_of, read_bits
from ..inputs import Formats, Row
from ..inputs import rows as _rows
from .targets import BlackBox, call_user

__all__ = ["ScaledTarget", "SimScaledTarget", "CallableScaledTarget", "ScaledRow", "ScaledContext", "SCALED_TESTS",
           "scaled_target", "probe_scaled", "ScaledFindings", "random_rows", "disagreements"]

NAN = float("nan")


# --- targets ----------------------------------------------------------------------------------------------
class ScaledTarget(BlackBox):
    """A block-scaled dot-product target, ``t(a, b, c, sa, sb) -> d``: subclasses set ``name``, ``formats``,
    ``k``, ``scale_format`` and ``scale_block`` and implement :meth:`_compute`."""

    formats: Formats
    k: int
    scale_format: Format
    scale_block: int

    @property
    def blocks(self) -> int:
        """Scales per row for each of A and B: ``k // scale_block``."""
        return self.k // self.scale_block

    def _compute(self, a: np.ndarray, b: np.ndarray, c: np.ndarray, sa: np.ndarray, sb: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def __call__(self, a: Any, b: Any, c: Any, sa: Any, sb: Any) -> np.ndarray:
        a, b, c, sa, sb = (np.asarray(x, dtype=np.float64) for x in (a, b, c, sa, sb))
        n = c.shape[0] if c.ndim == 1 else -1
        if a.shape != (n, self.k) or b.shape != (n, self.k) or sa.shape != (n, self.blocks) or sb.shape != sa.shape:
            raise ValueError(f"{self.name}: a and b must have shape (n, {self.k}), c shape (n,), sa and sb shape "
                             f"(n, {self.blocks}) (one scale per {self.scale_block} products); got {a.shape}, "
                             f"{b.shape}, {c.shape}, {sa.shape} and {sb.shape}")
        with self.counting(n):
            return self._compute(a, b, c, sa, sb) if n else np.zeros(0, self.formats.d.dtype)

    def describe_formats(self) -> str:
        return f"{super().describe_formats()}, scales {self.scale_format.name} per {self.scale_block}"

    def metadata(self) -> dict[str, Any]:
        return {**super().metadata(), "scale_format": self.scale_format.name, "scale_block": self.scale_block}


class SimScaledTarget(ScaledTarget):
    """The engine running a block-scaled Model (:func:`blockfma.dot` with ``scale_a``, ``scale_b``)."""

    def __init__(self, model: Model, k: int | None = None, name: str | None = None):
        super().__init__()
        if not model.block_scaled:
            raise ArgumentError("model", model.summary(), "is not block-scaled (family scaled-fused)",
                                fix="use blockfma.probes.target for unscaled models")
        self.model = model
        self.k = int(k or model.block_width)
        self.name = name or f"sim:{model.name or model.family.value}"
        self.formats = Formats.of(model.input_format, model.b_format, model.output_format, model.output_format)
        self.scale_format = model.scale_format
        self.scale_block = int(model.option("scale_block"))
        if self.k % self.scale_block:
            raise ArgumentError("k", self.k, f"must be a multiple of the scale block {self.scale_block}")

    def _compute(self, a: np.ndarray, b: np.ndarray, c: np.ndarray, sa: np.ndarray, sb: np.ndarray) -> np.ndarray:
        return dot(a, b, c, model=self.model, scale_a=sa, scale_b=sb, check=False)

    def metadata(self) -> dict[str, Any]:
        return {**super().metadata(), "model": self.model.to_dict()}


class CallableScaledTarget(ScaledTarget):
    """Any callable ``f(a, b, c, sa, sb) -> d`` (a user's emulator, a GPU kernel wrapper)."""

    def __init__(self, f: Callable[..., Any], k: int, formats: Formats, scale_format: Any, scale_block: int,
                 name: str | None = None):
        super().__init__()
        self.f = f
        self.k = integer("k", k, least=1)
        self.formats = formats
        self.scale_format = _scale_format(scale_format)
        self.scale_block = integer("scale_block", scale_block, least=1)
        if self.k % self.scale_block:
            raise ArgumentError("k", self.k, f"must be a multiple of scale_block ({self.scale_block})")
        self.name = name or f"callable:{getattr(f, '__qualname__', type(f).__name__)}"

    def _compute(self, a: np.ndarray, b: np.ndarray, c: np.ndarray, sa: np.ndarray, sb: np.ndarray) -> np.ndarray:
        call = f"call {self.calls + 1} of {self.name} ({len(c)} rows)"
        return call_user(call, self.f, (a, b, c, sa, sb), c.shape, self.formats.d)


def _scale_format(value: Any) -> Format:
    from ..family import SCALE_FORMATS

    try:
        fmt = _formats.get(value)
    except (ValueError, TypeError):
        fmt = None
    if fmt is None or fmt.name not in SCALE_FORMATS:
        raise ArgumentError("scale_format", value, "is not a scale format",
                            fix=f"use one of {', '.join(SCALE_FORMATS)}")
    return fmt


def scaled_target(spec: Any, input_format: Any = None, output_format: Any = "fp32", *, k: int | None = None,
                  instruction: str | None = None, scale_format: Any = None, scale_block: int | None = None
                  ) -> ScaledTarget:
    """A :class:`ScaledTarget` from ``spec``: a ScaledTarget, a block-scaled Model, ``"sim:DEVICE:INSTRUCTION"`` (a
    block-scaled preset, e.g. ``"sim:B200:tcgen05.mxf4.block32"``; ``input_format`` defaults to e2m1fn), or a callable
    ``f(a, b, c, sa, sb)`` (``k``, ``input_format``, ``scale_format`` and ``scale_block`` needed)."""
    if isinstance(spec, ScaledTarget):
        return spec
    if isinstance(spec, Model):
        return SimScaledTarget(spec, k)
    if callable(spec):
        if k is None or scale_format is None or scale_block is None or input_format is None:
            raise ArgumentError("k", k, "a callable block-scaled target needs k, input_format, scale_format and "
                                "scale_block", fix="pass k=64, input_format='e2m1fn', scale_format='e8m0fnu', "
                                                   "scale_block=32 (the instruction's)")
        fa, fb = _formats.pair(input_format)
        d = _formats.get(output_format)
        return CallableScaledTarget(spec, k, Formats.of(fa, fb, d, d), scale_format, scale_block)
    if isinstance(spec, str) and spec.partition(":")[0].strip().lower() == "sim":
        from ..devices import device

        rest = spec.partition(":")[2]
        name, _, ins = rest.partition(":")
        ins = ins.strip() or instruction
        if not ins:
            raise ArgumentError("target", spec, "names no block-scaled instruction",
                                use={"target": "sim:B200:tcgen05.mxf4.block32"})
        try:
            model = device(name.strip()).model(input_format or "e2m1fn", output_format, ins)
        except ValueError as exc:
            raise ArgumentError("target", spec, str(exc), fix="blockfma devices B200 lists the instructions") from None
        if not model.block_scaled:
            raise ArgumentError("target", spec, f"is not a block-scaled instruction ({model.summary()})",
                                fix="use blockfma.probe for unscaled instructions")
        return SimScaledTarget(model, k, name=f"sim:{name.strip()}:{ins}")
    raise ArgumentError("target", spec, "is not a block-scaled probe target",
                        fix="pass a block-scaled Model, 'sim:DEVICE:INSTRUCTION' or a callable f(a, b, c, sa, sb)")


# --- rows ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ScaledRow(Row):
    """One block-scaled dot product: a :class:`~blockfma.inputs.Row` and the scales sa, sb (one a block)."""

    sa: tuple[float, ...]
    sb: tuple[float, ...]


@dataclass
class ScaledContext:
    """What a builder may use: formats, k, the scale format and block, readings so far (``F``)."""

    formats: Formats
    k: int
    scale_format: Format
    scale_block: int
    known: dict[str, Any] = field(default_factory=dict)

    @property
    def blocks(self) -> int:
        return self.k // self.scale_block

    @classmethod
    def of(cls, t: ScaledTarget) -> ScaledContext:
        return cls(t.formats, t.k, t.scale_format, t.scale_block)


@lru_cache(maxsize=8)
def _scale_exponents(fs: Format) -> tuple[int, ...]:
    """The exponents e with 2**e a value of the scale format (e8m0: -127..127; ue4m3: -9..8)."""
    lo = fs.emin - (fs.fraction_bits if fs.subnormals else 0)
    return tuple(e for e in range(lo, fs.emax + 1) if holds(fs, math.ldexp(1.0, e)))


def _split(fs: Format, S: int) -> tuple[float, float] | None:
    """(sa, sb), powers of two of the scale format with sa * sb = 2**S, as even as possible."""
    es = set(_scale_exponents(fs))
    for ea in sorted(es, key=lambda e: (abs(2 * e - S), -e)):
        if S - ea in es:
            return math.ldexp(1.0, ea), math.ldexp(1.0, S - ea)
    return None


def place_block(f: Formats, fs: Format, values: Sequence[float]
                ) -> tuple[list[tuple[float, float]], float, float] | None:
    """Factors (a_i, b_i) and one pair of scales (sa, sb) with a_i b_i sa sb = values[i] exactly, the element
    products as near 1 as the formats allow; None where no power-of-two scale fits them all."""
    nz = [v for v in values if v != 0]
    if not nz:
        return [(product_of(f, v) or (0.0, 1.0)) for v in values], 1.0, 1.0
    e0 = math.frexp(abs(nz[0]))[1] - 1
    es = _scale_exponents(fs)
    for S in sorted(range(2 * es[0], 2 * es[-1] + 1), key=lambda S: (abs(e0 - S), S)):
        pair = _split(fs, S)
        if pair is None:
            continue
        elems = [product_of(f, math.ldexp(v, -S)) if v != 0 else product_of(f, v) for v in values]
        if all(e is not None for e in elems):
            return elems, pair[0], pair[1]  # type: ignore[return-value]
    return None


class ScaledBuilder:
    """Collects rows of terms placed by scale block (a row whose terms the formats cannot hold is skipped)."""

    def __init__(self, ctx: ScaledContext):
        self.ctx = ctx
        self.rows: list[ScaledRow] = []

    def add(self, label: str, terms: dict[int, float], c: float = 0.0) -> bool:
        """A row whose scaled products at the given positions equal ``terms`` (the rest +0 with scale 1)."""
        ctx = self.ctx
        L = ctx.scale_block
        if any(p >= ctx.k for p in terms) or not holds(ctx.formats.c, c):
            return False
        a, b = [0.0] * ctx.k, [0.0] * ctx.k
        sa, sb = [1.0] * ctx.blocks, [1.0] * ctx.blocks
        for blk in range(ctx.blocks):
            pos = sorted(p for p in terms if p // L == blk)
            if not pos:
                continue
            placed = place_block(ctx.formats, ctx.scale_format, [terms[p] for p in pos])
            if placed is None:
                return False
            elems, sa[blk], sb[blk] = placed
            for p, (x, y) in zip(pos, elems):
                a[p], b[p] = x, y
        self.rows.append(ScaledRow(label, tuple(a), tuple(b), c, tuple(sa), tuple(sb)))
        return True

    def raw(self, label: str, a: dict[int, float], b: dict[int, float], sa: Sequence[float], sb: Sequence[float],
            c: float = 0.0) -> bool:
        """A row given by its factors and scales (NaN scales, zero scales, the scales' extremes)."""
        ctx = self.ctx
        f = ctx.formats
        if max([*a, *b], default=0) >= ctx.k:
            return False
        aa, bb = [a.get(i, 0.0) for i in range(ctx.k)], [b.get(i, 0.0) for i in range(ctx.k)]
        sa = list(sa) + [1.0] * (ctx.blocks - len(sa))
        sb = list(sb) + [1.0] * (ctx.blocks - len(sb))
        if not (all(holds(f.a, v) for v in aa) and all(holds(f.b, v) for v in bb) and holds(f.c, c)
                and all(_is_scale(ctx.scale_format, s) for s in sa + sb)):
            return False
        self.rows.append(ScaledRow(label, tuple(aa), tuple(bb), c, tuple(sa), tuple(sb)))
        return True


def _is_scale(fs: Format, s: float) -> bool:
    return math.isnan(s) or bool(_formats.is_representable(fs, s))


def arrays(rows: Sequence[ScaledRow], ctx: ScaledContext) -> tuple[np.ndarray, ...]:
    """a (n, k), b (n, k), c (n,), sa, sb (n, k // scale_block) as float64 arrays."""
    n, k, nb = len(rows), ctx.k, ctx.blocks
    if not rows:
        return np.zeros((0, k)), np.zeros((0, k)), np.zeros(0), np.zeros((0, nb)), np.zeros((0, nb))
    return (np.array([r.a for r in rows]), np.array([r.b for r in rows]), np.array([r.c for r in rows]),
            np.array([r.sa for r in rows]).reshape(n, nb), np.array([r.sb for r in rows]).reshape(n, nb))


# --- the feature tests -----------------------------------------------------------------------------------
def _build_extremes(ctx: ScaledContext) -> list[ScaledRow]:
    """The scale format's largest and smallest values alone, against each other, with C, both signs."""
    B = ScaledBuilder(ctx)
    fs, f = ctx.scale_format, ctx.formats
    hi, lo = fs.max, (fs.smallest_subnormal if fs.subnormals else fs.smallest_normal)
    am, bm = f.a.max, f.b.max
    for s in (1.0, -1.0):
        sign = "-" if s < 0 else ""
        B.raw(f"{sign}1*1, scales max*max", {0: s}, {0: 1.0}, [hi], [hi])
        B.raw(f"{sign}amax*bmax, scales max*max", {0: s * am}, {0: bm}, [hi], [hi])
        B.raw(f"{sign}1*1, scales max*min", {0: s}, {0: 1.0}, [hi], [lo])
        B.raw(f"{sign}1*1, scales max*1", {0: s}, {0: 1.0}, [hi], [1.0])
        B.raw(f"{sign}1*1, scales min*1", {0: s}, {0: 1.0}, [lo], [1.0])
        B.raw(f"{sign}1*1, scales min*min", {0: s}, {0: 1.0}, [lo], [lo])
        B.raw(f"{sign}amax*bmax, scales min*min", {0: s * am}, {0: bm}, [lo], [lo])
        B.raw(f"{sign}1*1, scales min*min, C=1", {0: s}, {0: 1.0}, [lo], [lo], 1.0)
        B.raw(f"{sign}1*1, scales max*max, C=-max", {0: s}, {0: 1.0}, [hi], [hi], -f.c.max)
        B.raw(f"{sign}1*1 scales max*max, C=max (overflow)", {0: s}, {0: 1.0}, [hi], [hi], f.c.max)
    return B.rows


def _read_extremes(ctx: ScaledContext, rows: list[ScaledRow], d: np.ndarray) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for r, x in zip(rows, d):
        exact = sum(a * b * r.sa[i // ctx.scale_block] * r.sb[i // ctx.scale_block] for i, (a, b) in
                    enumerate(zip(r.a, r.b)) if a * b != 0) + r.c
        out[r.label] = {"output": hex_float(float(x)), "exact sum": hex_float(exact) if math.isfinite(exact) else
                        str(exact)}
    return out


def _build_blocks(ctx: ScaledContext) -> list[ScaledRow]:
    """One product 1*1 at position p (each p), the scale of A's block j 2**(j+1): the output says which scale
    block the unit applies to position p (a register layout or a block size other than stated shows)."""
    B = ScaledBuilder(ctx)
    scales = [math.ldexp(1.0, j + 1) for j in range(ctx.blocks)]
    if not all(_is_scale(ctx.scale_format, x) for x in scales):
        return []
    for p in range(ctx.k):
        B.raw(f"1*1 at {p}, scale of A's block j 2^(j+1)", {p: 1.0}, {p: 1.0}, scales, [1.0] * ctx.blocks)
    return B.rows


def _read_blocks(ctx: ScaledContext, rows: list[ScaledRow], d: np.ndarray) -> dict[str, Any]:
    applied = []
    for x in d:
        v = float(x)
        applied.append(int(math.log2(v)) - 1 if v > 0 and math.log2(v).is_integer() else None)
    stated = [p // ctx.scale_block for p in range(len(applied))]
    return {"scale block of each position": applied, "as stated": applied == stated}


def _build_nan(ctx: ScaledContext) -> list[ScaledRow]:
    """A NaN scale (e8m0's 0xFF, ue4m3's 0x7F) of A or B, on a block of nonzero and of zero products."""
    B = ScaledBuilder(ctx)
    if not ctx.scale_format.has_nan:
        return []
    B.raw("NaN scale of A, 1*1, C=1", {0: 1.0}, {0: 1.0}, [NAN], [1.0], 1.0)
    B.raw("NaN scale of B, 1*1, C=1", {0: 1.0}, {0: 1.0}, [1.0], [NAN], 1.0)
    B.raw("NaN scale of A, products zero, C=1", {}, {}, [NAN], [1.0], 1.0)
    B.raw("NaN scale of A and B, -1*1, C=-1", {0: -1.0}, {0: 1.0}, [NAN], [NAN], -1.0)
    if ctx.blocks > 1:
        B.raw("NaN scale of A on the last block (zero products), 1*1 in the first", {0: 1.0}, {0: 1.0},
              [1.0] * (ctx.blocks - 1) + [NAN], [1.0] * ctx.blocks, 0.0)
    B.raw("NaN in C, scales 1", {0: 1.0}, {0: 1.0}, [1.0], [1.0], NAN)
    return B.rows


def _build_zero(ctx: ScaledContext) -> list[ScaledRow]:
    """Zero scales (ue4m3 holds 0; e8m0 has no zero) and zero results: the sign of exact and rounded zeros."""
    B = ScaledBuilder(ctx)
    f = ctx.formats
    if bool(_formats.is_representable(ctx.scale_format, 0.0)):  # (holds takes every +0)
        for s in (1.0, -1.0):
            B.raw(f"scale of A 0, {s:+.0f}*1, C=1", {0: s}, {0: 1.0}, [0.0], [1.0], 1.0)
            B.raw(f"scale of B 0, amax*bmax, C={s:+.0f}", {0: f.a.max}, {0: f.b.max}, [1.0], [0.0], s)
            B.raw(f"scales 0*0, {s:+.0f}*1, C=-0", {0: s}, {0: 1.0}, [0.0], [0.0], -0.0)
    for sc in (0.0, -0.0):
        B.raw(f"every product -0*1, C={sc!r}", dict.fromkeys(range(ctx.k), -0.0), dict.fromkeys(range(ctx.k), 1.0),
              [1.0], [1.0], sc)
        B.raw(f"1*1 - 1*1, C={sc!r}", {0: 1.0, 1: -1.0}, {0: 1.0, 1: 1.0}, [1.0], [1.0], sc)
        tiny = math.ldexp(1.0, f.d.emin - f.d.fraction_bits - 3)
        B.add(f"-{tiny!r} (rounds to zero), C={sc!r}", {0: -tiny}, sc)
    return B.rows


def _top_y(ctx: ScaledContext, x: int) -> int:
    """C's exponent Y for a term at 2**(Y - x): Y >= 0, and Y - x at least the smallest power of two a scaled
    product of one element product reaches."""
    return max(0, _least_term_exponent(ctx) + 2 + x)


def _least_term_exponent(ctx: ScaledContext) -> int:
    """The exponent of the smallest power of two a scaled product reaches (smallest scales, smallest product
    the Builder can place)."""
    es = _scale_exponents(ctx.scale_format)
    return 2 * es[0] + min(e for e in range(-40, 40) if product_of(ctx.formats, math.ldexp(1.0, e)))


def _build_precision(ctx: ScaledContext) -> list[ScaledRow]:
    """C = 2**Y, a term ±2**(Y - x), with and without a term at half an output ulp of C, 2**(Y - p), in the
    last block (last position)."""
    B = ScaledBuilder(ctx)
    p = ctx.formats.d.precision
    last = ctx.k - 1
    for x in range(1, 64):
        Y = _top_y(ctx, x)
        for half in (False, True):
            for s in (1.0, -1.0):
                terms = {0: s * math.ldexp(1.0, Y - x)}
                if half:
                    terms[last] = math.ldexp(1.0, Y - p)
                B.add(f"C = 2^Y{', 2^(Y-p)' if half else ''}, {'+' if s > 0 else '-'}2^(Y-{x})", terms,
                      math.ldexp(1.0, Y))
    return B.rows


def _read_precision(ctx: ScaledContext, rows: list[ScaledRow], d: np.ndarray) -> dict[str, Any]:
    out = {r.label: int(u) for r, u in zip(rows, bits(d))}
    kept = []
    for label, u in out.items():
        if ", +2^(Y-" in label:
            other = out.get(label.replace(", +2^(Y-", ", -2^(Y-"))
            if other is not None and other != u:
                kept.append(int(label.split("2^(Y-")[-1].rstrip(")")))
    return {"bits kept below the largest term (F)": max(kept) if kept else None}


def _build_rounding(ctx: ScaledContext) -> list[ScaledRow]:
    """C = ±2**Y and terms at 2**(Y - p - 2 + i) summing to j/8 ulp of C, j = 1..15."""
    B = ScaledBuilder(ctx)
    u = 1 - ctx.formats.d.precision  # ulp(1)
    Y = _top_y(ctx, -u + 3)
    one = math.ldexp(1.0, Y)
    for j in range(1, 16):
        for s in (1.0, -1.0):
            terms = {1 + i: s * math.ldexp(one, u - 3 + i) for i in range(4) if j >> i & 1}
            B.add(f"{'-' if s < 0 else ''}(1 + {j}/8 ulp) 2^{Y}", terms, s * one)
    return B.rows


def _read_rounding(ctx: ScaledContext, rows: list[ScaledRow], d: np.ndarray) -> dict[str, Any]:
    """The rounding modes that give every output from the sum cut at F (read after ``precision``)."""
    F = ctx.known.get("F")
    out: dict[str, Any] = {r.label: hex_float(float(x)) for r, x in zip(rows, d)}
    if F is None:
        out["modes"] = []
        return out
    L = ctx.scale_block
    modes = []
    for mode in RoundingMode:
        ok = True
        for r, x in zip(rows, d):
            q = math.ldexp(1.0, math.frexp(abs(r.c))[1] - 1 - F)
            cut = r.c + math.fsum(math.copysign(math.floor(abs(t) / q) * q, t) for t in
                                  (a * b * r.sa[i // L] * r.sb[i // L] for i, (a, b) in enumerate(zip(r.a, r.b))))
            if float(_formats.round(ctx.formats.d, cut, mode)) != float(x):
                ok = False
                break
        if ok:
            modes.append(mode.name)
    out["modes"] = modes
    return out


def _build_group(ctx: ScaledContext) -> list[ScaledRow]:
    """Two terms of half a quantum at positions 0 and j of the first block (C = 2**Y, F known), both signs,
    with and without a half-ulp term at the last position; controls: one whole quantum at 0, nothing."""
    B = ScaledBuilder(ctx)
    F = ctx.known.get("F")
    if not F:
        return []
    p = ctx.formats.d.precision
    last = ctx.k - 1
    Y = _top_y(ctx, F + 1)
    q = math.ldexp(1.0, Y - F)
    for half in (False, True):
        extra = {last: math.ldexp(1.0, Y - p)} if half else {}
        tag = ", half ulp" if half else ""
        for s in (1.0, -1.0):
            sg = "+" if s > 0 else "-"
            B.add(f"control {sg}q{tag}", {0: s * q, **extra}, math.ldexp(1.0, Y))
            B.add(f"control 0{tag}", dict(extra), math.ldexp(1.0, Y))
            for j in range(1, ctx.scale_block):
                if j == last:
                    continue
                B.add(f"{sg}q/2 at 0 and {j}{tag}", {0: s * q / 2, j: s * q / 2, **extra}, math.ldexp(1.0, Y))
    return B.rows


def _read_group(ctx: ScaledContext, rows: list[ScaledRow], d: np.ndarray) -> dict[str, Any]:
    """G: the first j where the two half quanta at 0 and j give the output of none (None: at j = 1)."""
    out = {r.label: int(u) for r, u in zip(rows, bits(d))}
    together: dict[int, bool] = {}
    for tag in ("", ", half ulp"):
        for sg in "+-":
            whole, none = out.get(f"control {sg}q{tag}"), out.get(f"control 0{tag}")
            if whole is None or whole == none:
                continue
            for j in range(1, ctx.scale_block):
                got = out.get(f"{sg}q/2 at 0 and {j}{tag}")
                if got is not None:
                    together[j] = together.get(j, True) and got == whole
    if not together:
        return {"group size (G)": "unseen"}
    first_apart = next((j for j in sorted(together) if not together[j]), None)
    G: int | None = ctx.scale_block if first_apart is None else (None if first_apart == 1 else first_apart)
    return {"group size (G)": G, "summed with product 0": {str(j): v for j, v in sorted(together.items())}}


def _build_e_zero(ctx: ScaledContext) -> list[ScaledRow]:
    """C alone (every product zero), all its significand bits set: C = ±(2^(y+1) - ulp) for normal C up from
    C's smallest normal; it is cut where the zero terms' exponent e_zero lies F bits or more above its ulp."""
    B = ScaledBuilder(ctx)
    cf, p = ctx.formats.c, ctx.formats.c.precision
    for y in range(cf.emin, min(cf.emax, cf.emin + 120)):
        for s in (1.0, -1.0):
            B.raw(f"C = {'-' if s < 0 else ''}(2^{y + 1} - ulp) alone, y={y}", {}, {}, [1.0], [1.0],
                  s * (math.ldexp(1.0, y + 1) - math.ldexp(1.0, y + 1 - p)))
    return B.rows


def _read_e_zero(ctx: ScaledContext, rows: list[ScaledRow], d: np.ndarray) -> dict[str, Any]:
    """e_zero = y* + 1 - p + F for the smallest y* whose C comes through exactly (F known); where every C does,
    only a bound: e_zero <= emin + 1 - p + F."""
    F = ctx.known.get("F")
    exact = {}
    for r, x in zip(rows, d):
        y = int(r.label.rsplit("y=", 1)[1])
        exact[y] = exact.get(y, True) and float(x) == r.c
    ys = sorted(y for y, ok in exact.items() if ok)
    if F is None or not ys:
        return {"e_zero": None, "e_zero at most": None}
    p = ctx.formats.c.precision
    if all(exact[y] for y in exact if y >= ys[0]) and ys[0] > min(exact):
        return {"e_zero": ys[0] + 1 - p + F, "smallest exact C exponent": ys[0]}
    return {"e_zero": None, "e_zero at most": ys[0] + 1 - p + F}


@dataclass(frozen=True)
class ScaledTest:
    """One feature test of the scale path: rows from the context, a reading of the outputs."""

    id: str
    title: str
    params: tuple[str, ...]
    build: Callable[[ScaledContext], list[ScaledRow]]
    read: Callable[[ScaledContext, list[ScaledRow], np.ndarray], Any]


SCALED_TESTS: dict[str, ScaledTest] = {t.id: t for t in [
    ScaledTest("extremes", "scales at their extremes (e8m0 2^-127, 2^127; ue4m3 448, 2^-9)", ("overflow",),
               _build_extremes, _read_extremes),
    ScaledTest("blocks", "which scale block applies to each position (the stated scale_block)", ("scale_block",),
               _build_blocks, _read_blocks),
    ScaledTest("nan", "a NaN scale: the result", ("nan",), _build_nan, read_bits),
    ScaledTest("zero", "zero scales (ue4m3) and the sign of zero results", ("exact_zero", "rounded_zero"),
               _build_zero, read_bits),
    ScaledTest("precision", "accumulator width F under scaling", ("fraction_bits",), _build_precision,
               _read_precision),
    ScaledTest("rounding", "rounding of the final result (read with F)", ("output_rounding",), _build_rounding,
               _read_rounding),
    ScaledTest("e_zero", "the exponent of zero terms (C alone, read with F)", ("e_zero",), _build_e_zero,
               _read_e_zero),
    ScaledTest("group", "group size G: products summed exactly before scaling", ("scale_group",), _build_group,
               _read_group),
]}


# --- random rows -----------------------------------------------------------------------------------------
def random_scales(fs: Format, rng: np.random.Generator, shape: tuple[int, ...], nan: float = 0.0) -> np.ndarray:
    """Scales of ``fs``: most near 1, some anywhere in the format, its extremes, a share ``nan`` of NaNs."""
    es = np.array(_scale_exponents(fs))
    near = es[np.abs(es) <= 6]
    e = np.where(rng.random(shape) < 0.7, rng.choice(near, shape), rng.choice(es, shape))
    s = np.ldexp(1.0, e.astype(np.int32))
    if fs.fraction_bits:  # ue4m3: any code, zero and subnormals too
        codes = _formats.decode(_formats.storage(fs), rng.integers(0, 0x7F, size=shape, dtype=np.uint64))
        s = np.where(rng.random(shape) < 0.5, np.abs(codes), s)
    if nan:
        s = np.where(rng.random(shape) < nan, np.nan, s)
    return s


def random_rows(ctx: ScaledContext, n: int, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """``n`` random block-scaled rows over the input families; the cancelling ones keep one scale for all
    blocks (so the mirrored halves cancel), with C the negated rounded sum or a zero."""
    fams = ("normal", "wide", "cancel", "zeros", "random-bits", "underflow", "extremes")
    per = -(-n // len(fams))
    parts = []
    for fam in fams:
        a, b, c = _rows(fam, ctx.formats, ctx.k, per, rng)
        sa = random_scales(ctx.scale_format, rng, (per, ctx.blocks), nan=0.002)
        sb = random_scales(ctx.scale_format, rng, (per, ctx.blocks), nan=0.002)
        if fam == "cancel":
            sa[:] = sa[:, :1]
            sb[:] = sb[:, :1]
            L = ctx.scale_block
            with np.errstate(all="ignore"):
                s = np.einsum("nk,nk->n", a * np.repeat(sa, L, axis=1), b * np.repeat(sb, L, axis=1))
                c = np.where(rng.random(per) < 0.4, 0.0, -_formats.round(ctx.formats.c, np.nan_to_num(s)))
        elif fam not in ("zeros", "underflow"):  # C near the scaled products' size
            with np.errstate(all="ignore"):
                mag = np.abs(a * b * np.repeat(sa * sb, ctx.scale_block, axis=1)).max(axis=1)
            mag = np.where(np.isfinite(mag) & (mag > 0), mag, 1.0)
            c = np.where(rng.random(per) < 0.5, c, _formats.round(ctx.formats.c, mag * rng.uniform(-2, 2, per)))
        parts.append((a, b, c, sa, sb))
    out = [np.concatenate([p[i] for p in parts])[:n] for i in range(5)]
    order = rng.permutation(len(out[2]))
    return tuple(x[order] for x in out)


def disagreements(m1: Model, m2: Model, n: int = 4000, seed: int = 11, k: int | None = None) -> int:
    """Random block-scaled rows (:func:`random_rows`, k the first Model's block width) on which two
    block-scaled Models give different bits."""
    ctx = ScaledContext.of(SimScaledTarget(m1, k))
    rows = random_rows(ctx, n, np.random.default_rng(seed))
    return int(np.sum(_sim(m1, *rows) != _sim(m2, *rows)))


# --- inference -------------------------------------------------------------------------------------------
@dataclass(repr=False)
class ScaledFindings:
    """What a block-scaled probe found: the readings, the candidates, the verification and the Model (only if
    it passed verification: :meth:`model` raises otherwise)."""

    target: str
    formats: str
    k: int
    scale_format: str
    scale_block: int
    readings: dict[str, Any]
    candidates: list[str]
    verification: dict[str, Any]
    calls: int
    rows: int
    seconds: float
    metadata: dict[str, Any] = field(default_factory=dict)
    _model: Model | None = None
    candidate: Model | None = None

    @property
    def verified(self) -> bool:
        return self._model is not None

    def model(self) -> Model:
        from .findings import ProbeError

        if self._model is None:
            raise ProbeError(f"{self.target}: no block-scaled Model passed verification: {self.verification}")
        return self._model

    def summary(self) -> str:
        head = f"{self.target}: {self.formats}, k={self.k}"
        if self._model is None:
            return f"{head}: NOT verified ({self.verification})"
        return (f"{head}: verified on {self.verification['rows']} rows: {self._model.summary()} "
                f"({self.calls} calls, {self.seconds:.1f} s)")

    def __repr__(self) -> str:
        return f"<ScaledFindings {self.summary()}>"

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target, "formats": self.formats, "k": self.k, "scale_format": self.scale_format,
                "scale_block": self.scale_block, "verified": self.verified, "readings": self.readings,
                "candidates": self.candidates, "verification": self.verification, "calls": self.calls,
                "rows": self.rows, "seconds": self.seconds, "metadata": self.metadata,
                "model": None if self.candidate is None else self.candidate.to_dict()}


class _Evidence:
    """Every row sent, by feature test (candidates are run on the small tests first: most fail there)."""

    ORDER = ("nan", "zero", "blocks", "extremes", "e_zero", "rounding", "group", "precision", "random")

    def __init__(self) -> None:
        self.parts: dict[str, list[tuple[np.ndarray, ...]]] = {}

    def add(self, name: str, *arrays_: np.ndarray) -> None:
        self.parts.setdefault(name, []).append(arrays_)

    def __len__(self) -> int:
        return sum(len(p[2]) for parts in self.parts.values() for p in parts)

    def fits(self, m: Model) -> bool:
        """Whether ``m`` gives every row's bits."""
        names = sorted(self.parts, key=lambda n: self.ORDER.index(n) if n in self.ORDER else len(self.ORDER))
        for name in names:
            for a, b, c, sa, sb, d in self.parts[name]:
                if not np.array_equal(_sim(m, a, b, c, sa, sb), d):
                    return False
        return True


def _sim(m: Model, a: np.ndarray, b: np.ndarray, c: np.ndarray, sa: np.ndarray, sb: np.ndarray) -> np.ndarray:
    return bits(dot(a, b, c, model=m, scale_a=sa, scale_b=sb, check=False))


def _presets(ctx: ScaledContext) -> list[Model]:
    from ..devices import devices

    out = []
    for dev in devices():
        for ins in dev.instructions:
            for m in ins.models.values():
                if m.block_scaled and (m.input_format, m.b_format, m.output_format) == \
                        (ctx.formats.a, ctx.formats.b, ctx.formats.d) and m.block_width == ctx.k \
                        and m.scale_format == ctx.scale_format \
                        and m.option("scale_block") == ctx.scale_block and m not in out:
                    out.append(m)
    return out


def _nan_style(u: int | None, fmt: Format) -> list[NaNStyle]:
    """The NaN styles whose pattern is ``u`` (all fixed ones where no NaN was seen)."""
    from ..engine.rules import nan_bits  # the one rule of NaN bit patterns

    fixed = [NaNStyle.CANONICAL, NaNStyle.DEFAULT, NaNStyle.INDEFINITE]
    same = [s for s in fixed if u is not None and nan_bits(fmt, s) == u]
    return same or fixed


def _measure(t: Any, ctx: ScaledContext, say: Callable[[str], None]
             ) -> tuple[_Evidence, dict[str, Any], dict[str, tuple[list[ScaledRow], np.ndarray]]]:
    """Run the feature tests (the blocks, extremes, NaN, zero and precision tests first: F then sets what the
    rounding, group and e_zero tests build); the rows sent, the readings, each test's rows and outputs."""
    ev = _Evidence()
    readings: dict[str, Any] = {}
    outputs: dict[str, tuple[list[ScaledRow], np.ndarray]] = {}

    def run(names: Sequence[str]) -> None:
        built = {nm: SCALED_TESTS[nm].build(ctx) for nm in names}
        rows = [r for nm in names for r in built[nm]]
        if not rows:
            return
        a, b, c, sa, sb = arrays(rows, ctx)
        d = t(a, b, c, sa, sb)
        i = 0
        for nm in names:
            n = len(built[nm])
            ev.add(nm, *(x[i:i + n] for x in (a, b, c, sa, sb)), bits(d[i:i + n]))
            outputs[nm] = (built[nm], d[i:i + n])
            readings[nm] = SCALED_TESTS[nm].read(ctx, built[nm], d[i:i + n])
            i += n
        say(f"{', '.join(names)}: {len(rows)} rows")

    run(["blocks", "extremes", "nan", "zero", "precision"])
    if readings.get("blocks", {}).get("as stated") is False:
        say(f"the scales apply to other products than blocks of {ctx.scale_block}: "
            f"{readings['blocks']['scale block of each position']}")
    ctx.known["F"] = readings["precision"]["bits kept below the largest term (F)"]
    run(["rounding", "group", "e_zero"])
    return ev, readings, outputs


def _e_zero_values(ctx: ScaledContext, reading: dict[str, Any], presets: list[Model]) -> list[int]:
    """e_zero as read, else a preset's where the reading's bound allows it, else below every term (where it
    changes no output)."""
    bound = reading.get("e_zero at most")
    if reading.get("e_zero") is not None:
        return [reading["e_zero"]]
    if presets and (bound is None or presets[0].e_zero <= bound):
        return [presets[0].e_zero]
    least = _least_term_exponent(ctx)
    return [least - 1 if bound is None else min(least - 1, bound)]


def _candidates(ctx: ScaledContext, readings: dict[str, Any], outputs: dict[str, Any],
                presets: list[Model]) -> list[Model]:
    """Every scaled-fused Model the readings leave: the values each reading allows, in every combination."""
    F = readings["precision"]["bits kept below the largest term (F)"]
    G = readings.get("group", {}).get("group size (G)", "unseen")
    F_values = [F] if F is not None else []  # no term ever survived: outside the family, nothing to verify
    divisors = [g for g in (1, 2, 4, 8, 16, 32) if ctx.scale_block % g == 0]
    G_values: list[Any] = [G] if G != "unseen" else [None, *divisors]
    if None in G_values:
        G_values.append(1)  # each product alone: by its own exponent (None) or by its scales' (1)
    modes = [RoundingMode[m] for m in readings["rounding"].get("modes", [])] or list(RoundingMode)
    nan_rows = [u for r, u in zip(*outputs["nan"]) if r.label.startswith("NaN scale of A, 1*1")] \
        if "nan" in outputs else []
    styles = _nan_style(int(bits(np.asarray(nan_rows))[0]) if nan_rows else None, ctx.formats.d)
    zeros = (("positive", "positive"), ("positive", "signed"), ("ieee", "signed"))  # exact, rounded
    cands: list[Model] = []
    for Fv, e_zero, Gv, mode, style, ov, (exact_z, rounded_z) in itertools.product(
            F_values, _e_zero_values(ctx, readings["e_zero"], presets), G_values, modes, styles, ("inf", "ieee"),
            zeros):
        try:
            cands.append(Model(Family.SCALED_FUSED, ctx.formats.a, ctx.formats.d, b_input_format=ctx.formats.b,
                               block_width=ctx.k, fraction_bits=Fv, e_zero=e_zero, alignment="truncate",
                               output_rounding=mode, nan=style, overflow=ov, exact_zero=exact_z,
                               rounded_zero=rounded_z, options={"scale_format": ctx.scale_format.name,
                                                                "scale_block": ctx.scale_block, "scale_group": Gv}))
        except ValueError:
            continue
    return cands


def _separate(keep: list[Model], t: Any, ctx: ScaledContext, ev: _Evidence, verify: int,
              rng: np.random.Generator) -> list[Model]:
    """The models that fit, one of each behaviour, told apart on random rows where several are left (those a
    random row cannot tell apart stay, the simplest first: a preset, else the first)."""
    distinct: list[Model] = []
    for m in keep:
        if not any(m.replace(name="") == x.replace(name="") for x in distinct):
            distinct.append(m)
    if len(distinct) <= 1:
        return distinct
    ra = random_rows(ctx, min(verify, 1000), rng)
    dt = bits(t(*ra))
    ev.add("random", *ra, dt)
    return [m for m in distinct if np.array_equal(_sim(m, *ra), dt)]


def _verify(chosen: Model, t: Any, ctx: ScaledContext, verify: int, rng: np.random.Generator,
            indistinguishable: int) -> tuple[dict[str, Any], bool]:
    """The chosen model against the target on ``verify`` random rows: the verification record (with the
    number of models left that no row told apart), and whether every row agreed."""
    va = random_rows(ctx, verify, rng)
    dv = bits(t(*va))
    got = _sim(chosen, *va)
    bad = np.nonzero(got != dv)[0]
    out: dict[str, Any] = {"rows": int(verify), "mismatches": int(len(bad)), "indistinguishable": indistinguishable}
    if len(bad):
        i = int(bad[0])
        out["first_counterexample"] = {"a": [hex_float(x) for x in va[0][i]], "c": hex_float(va[2][i]),
                                       "sa": [hex_float(x) for x in va[3][i]], "sb": [hex_float(x) for x in va[4][i]],
                                       "target": hex(int(dv[i])), "model": hex(int(got[i]))}
    return out, not len(bad)


def probe_scaled(target: Any, input_format: Any = None, output_format: Any = "fp32", *, k: int | None = None,
                 verify: int = 2000, priors: str = "presets", seed: int = 0,
                 progress: Callable[[str], None] | None = None, instruction: str | None = None,
                 scale_format: Any = None, scale_block: int | None = None) -> ScaledFindings:
    """Measure a block-scaled target through its outputs and infer its ``scaled-fused`` Model, verified on
    ``verify`` random rows (10 to 10**6; the exact reference checks about 500 a second), see the module
    docstring.  ``target`` and the formats, ``k``, ``instruction``, ``scale_format``, ``scale_block``: what
    :func:`scaled_target` takes; ``priors``: ``"presets"`` (a preset that fits is reported itself) or
    ``"none"``; ``seed``: of the random rows; ``progress``: a function of one string."""
    t0 = time.perf_counter()
    priors = choice("priors", priors, ("presets", "none"))
    verify = integer("verify", verify, least=10, most=1_000_000)
    seed = integer("seed", seed, least=0)
    t = scaled_target(target, input_format, output_format, k=k, instruction=instruction, scale_format=scale_format,
                      scale_block=scale_block)
    ctx = ScaledContext.of(t)
    say = progress or (lambda s: None)
    ev, readings, outputs = _measure(t, ctx, say)
    presets = _presets(ctx) if priors == "presets" else []
    cands = presets + _candidates(ctx, readings, outputs, presets)
    keep = [m for m in cands if ev.fits(m)]
    say(f"{len(cands)} candidates from the readings, {len(keep)} reproduce all {len(ev)} rows")
    # separation on random rows, then verification of the first left (a preset first where one fits)
    rng = np.random.default_rng(seed)
    keep = _separate(keep, t, ctx, ev, verify, rng)
    chosen = keep[0] if keep else None
    readings["unresolved"] = {name: sorted({str(m.to_dict()[name]) for m in keep}) for name in
                              ("F", "e_zero", "output_rounding", "overflow", "nan", "exact_zero", "rounded_zero",
                               "options") if len({str(m.to_dict()[name]) for m in keep}) > 1}
    verification: dict[str, Any] = {"rows": 0, "mismatches": None, "why": (
        "no scaled-fused Model reproduces the feature tests' outputs" if ctx.known["F"] is not None else
        "no term below C ever changed the output (precision test): not a scaled-fused datapath")}
    model = None
    if chosen is not None:
        verification, agreed = _verify(chosen, t, ctx, verify, rng, len(keep))
        model = chosen if agreed else None
    return ScaledFindings(t.name, t.describe_formats(), t.k, ctx.scale_format.name, ctx.scale_block, readings,
                          [m.summary() for m in keep], verification, t.calls, t.rows, time.perf_counter() - t0,
                          t.metadata(), model, chosen)
