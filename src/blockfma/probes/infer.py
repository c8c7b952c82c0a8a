"""Inference: from a target's outputs on the feature tests to a verified, executable Model.

The search keeps a version space of candidate Models and every (input, output) pair seen so far:

1. **stages** in a decision order (structure: family, L, F, rounding, alignment; specials; zero signs;
   subnormals; e_zero; details: carry bits, product exponents, output bits, C entry, product order, unpack
   and accumulator formats).  Each stage sends its feature tests' rows to the target in one call, builds
   candidates that vary its parameters around the current best Model, and keeps those that reproduce
   every output seen (early stages compare values, treating ±0 and NaN payloads alike; from the zero-sign
   stage on, bits);
2. **separation**: when several candidates survive, the simulator finds inputs on which they disagree
   (random rows of every input family) and the target decides, one call a round, until the survivors agree
   on every row tried;
3. **verification**: the chosen Model against the target on ``verify`` fresh random and adversarial rows
   (adversarial: rows that tell the Model from its one-parameter neighbours).  A mismatch starts a repair
   round (the neighbours that fit everything seen, then verification again); a Model that still fails is
   never reported as the target's model.
"""

from __future__ import annotations

import itertools
import math
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import formats as _formats
from ..devices import devices as _devices
from ..engine import dot
from ..formats import RoundingMode, bits
from ..literals import bits_hex, hex_float
from ..model import Alignment, Family, Model, NaNStyle
from . import inputs as _inputs
from .features import FEATURE_TESTS, Context, Row, arrays
from .targets import Target

__all__ = ["Evidence", "Stage", "STAGES", "search", "candidates_agree", "neighbours", "disagreements",
           "DEFAULT_VERIFY"]

DEFAULT_VERIFY = 10_000
SMT_TIMEOUT = 4.0  # seconds the SMT layer may spend on one pair of candidates that no random row separates
SMT_MAX_K = 32  # longer rows: bitwuzla gave no answer within SMT_TIMEOUT at k = 64 (16-blocks, fp16), so none is asked
ROUNDINGS = (RoundingMode.TiesToEven, RoundingMode.TowardZero, RoundingMode.TowardNegative,
             RoundingMode.TowardPositive)

# comparison levels: 0 values (±0 alike, NaNs alike), 1 bits but ±0 alike, 2 bits
LOOSE, NAN_BITS, STRICT = 0, 1, 2


@dataclass
class Evidence:
    """Every row sent to the target and the bits it returned."""

    k: int
    a: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    b: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    c: np.ndarray = field(default_factory=lambda: np.zeros(0))
    d: np.ndarray | None = None  # bits
    source: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.a = np.zeros((0, self.k))
        self.b = np.zeros((0, self.k))

    def add(self, a: np.ndarray, b: np.ndarray, c: np.ndarray, d: np.ndarray, source: str) -> None:
        self.a = np.concatenate([self.a, a])
        self.b = np.concatenate([self.b, b])
        self.c = np.concatenate([self.c, c])
        self.d = bits(d).copy() if self.d is None else np.concatenate([self.d, bits(d)])
        self.source += [source] * len(c)

    def __len__(self) -> int:
        return len(self.c)


def _mask(fmt_bits: int) -> tuple[int, int]:
    sign = 1 << (fmt_bits - 1)
    return sign, sign - 1


def _agree(x: np.ndarray, y: np.ndarray, level: int, dtype: np.dtype) -> np.ndarray:
    """Rows where candidate bits ``x`` and target bits ``y`` agree at the comparison level."""
    same = x == y
    if level == STRICT:
        return same
    nb = dtype.itemsize * 8
    _, mag = _mask(nb)
    m = x.dtype.type(mag)
    both_zero = ((x & m) == 0) & ((y & m) == 0)
    same |= both_zero
    if level == LOOSE:
        vx, vy = x.view(dtype).astype(np.float64), y.view(dtype).astype(np.float64)
        same |= np.isnan(vx) & np.isnan(vy)
    return same


def _run(m: Model, a: np.ndarray, b: np.ndarray, c: np.ndarray, c_format: Any) -> np.ndarray | None:
    """The model's bits on rows, or None where the engine cannot run it (the candidate is dropped)."""
    try:
        with np.errstate(all="ignore"):
            return bits(dot(a, b, c, model=m, check=False, c_format=c_format)).copy()
    except (ValueError, NotImplementedError, OverflowError, ArithmeticError):
        return None


def candidates_agree(cands: list[Model], ev: Evidence, level: int, c_format: Any, dtype: np.dtype,
                     first: np.ndarray | None = None) -> tuple[list[Model], dict[Model, int]]:
    """The candidates that reproduce every row of the evidence, and mismatch counts.

    With ``first`` (row indices, e.g. the stage's own rows), every candidate is first run on those rows
    alone; only the ones that fit them best are run on all the evidence (most candidates fall at once)."""
    pool = cands
    if first is not None and len(first) < len(ev):
        sub = np.asarray(first)
        pre: dict[Model, int] = {}
        for m in cands:
            out = _run(m, ev.a[sub], ev.b[sub], ev.c[sub], c_format)
            if out is not None:
                pre[m] = int(np.count_nonzero(~_agree(out, ev.d[sub], level, dtype)))
        if not pre:
            return [], {}
        least = min(pre.values())
        pool = [m for m, n in pre.items() if n == least]
        if least > 0:  # nothing fits even these rows: the counts on them rank the candidates
            return [], pre
    ok, misses = [], {}
    for m in pool:
        out = _run(m, ev.a, ev.b, ev.c, c_format)
        if out is None:
            continue
        n = int(np.count_nonzero(~_agree(out, ev.d, level, dtype)))
        misses[m] = n
        if n == 0:
            ok.append(m)
    return ok, misses


# --- candidate spaces ----------------------------------------------------------------------------------------
def _has_f(m: Model) -> bool:
    return m.family in (Family.TRUNCATED_FUSED, Family.LATE_C)


def domains(f: _inputs.Formats, k: int, m: Model) -> dict[str, list[Any]]:
    """The values each parameter may take for this target (those that apply to ``m``'s family)."""
    d = f.d
    Ls = sorted({2 ** i for i in range(8) if 2 ** i <= k} | {k})
    out: dict[str, list[Any]] = {
        "block_width": Ls,
        "output_rounding": list(ROUNDINGS),
        "nan": list(NaNStyle),
        "overflow": ["inf", "ieee"],
        "exact_zero": ["positive", "ieee"],
        "rounded_zero": ["signed", "positive"],
        "subnormals": [True, False],
        "flush_zero": ["signed", "positive"],
        "c_entry": ["fused", "after", "end"],
    }
    if k % 4 == 0 and k >= 4:
        out["product_order"] = ["natural", "halves"]
    if _has_f(m):
        out["fraction_bits"] = list(range(max(1, d.precision - 14), 41))
        out["alignment"] = [Alignment.TRUNCATE, Alignment.FLOOR]
    if m.family is Family.TRUNCATED_FUSED:
        lo = d.emin - d.fraction_bits
        out["e_zero"] = list(range(lo - 12, 2))
        out["carry_bits"] = [None, 0, 1, 2, 3, 4]
        out["product_exponent"] = ["sum", "normalized"]
        if d.precision > 12:
            out["output_fraction_bits"] = [None] + list(range(8, d.fraction_bits))
    if m.family is Family.LATE_C:
        out["late_fraction_bits"] = list(range(d.precision, 40))
        out["groups"] = [g for g in (1, 2, 4) if (m.block_width or 1) % g == 0]
        out["late_cut"] = ["leading", "common"]
    if f.d.precision < 24:
        out["accumulator_format"] = [None, _formats.fp32]
    if max(f.a.bits, f.b.bits) == 8:
        out["unpack_format"] = [None, _formats.get("fp16")]
    return out


def _try(m: Model, **changes: Any) -> Model | None:
    try:
        return m.replace(**changes)
    except (ValueError, TypeError):
        return None


def neighbours(m: Model, f: _inputs.Formats, k: int, params: Iterable[str] | None = None) -> list[Model]:
    """Models one parameter away from ``m`` (over :func:`domains`)."""
    dom = domains(f, k, m)
    out: dict[Model, None] = {}
    for p in (params or dom):
        for v in dom.get(p, []):
            if getattr(m, p) != v:
                n = _try(m, **{p: v})
                if n is not None and n != m:
                    out[n] = None
    return list(out)


def grid(m: Model, f: _inputs.Formats, k: int, params: Iterable[str]) -> list[Model]:
    """Every combination of the given parameters' values around ``m``."""
    dom = domains(f, k, m)
    names = [p for p in params if p in dom]
    out: dict[Model, None] = {}
    # each parameter's domain, with the base's own value (e.g. a preset's round-to-odd) kept in it
    values_of = [list(dict.fromkeys([getattr(m, p)] + list(dom[p]))) for p in names]
    for values in itertools.product(*values_of):
        n = _try(m, **dict(zip(names, values)))
        if n is not None:
            out[n] = None
    return list(out)


#: parameters that act together (each alone may fit no better than the current reading)
PAIRS = (("output_rounding", "output_fraction_bits"), ("fraction_bits", "output_fraction_bits"),
         ("block_width", "fraction_bits"), ("output_rounding", "fraction_bits"), ("exact_zero", "rounded_zero"))


def pair_moves(m: Model, f: _inputs.Formats, k: int) -> list[Model]:
    """Models that change one of :data:`PAIRS` jointly around ``m``."""
    out: dict[Model, None] = {}
    for pair in PAIRS:
        out.update(dict.fromkeys(grid(m, f, k, pair)))
    out.pop(m, None)
    return list(out)


def bases(f: _inputs.Formats, k: int, priors: str) -> tuple[list[Model], list[Model]]:
    """(presets, generic bases): the presets that take these formats (with ``priors="presets"``), and one
    Model per family fitted to the formats, to be varied by the structure stage."""
    presets: list[Model] = []
    per_family: dict[Family, Model] = {}
    for dev in _devices():
        if dev.vendor == "reference" and dev.name != "exact":
            continue
        for ins in dev.instructions:
            for m in ins.models.values():
                if priors == "presets" and (m.input_format, m.b_format, m.output_format) == (f.a, f.b, f.d) \
                        and m.input_rounding is None and m not in presets:
                    presets.append(m)
                per_family.setdefault(m.family, m)
    d = f.d
    generic: list[Model] = []
    fitted = {"input_format": f.a, "b_input_format": f.b, "output_format": d, "input_rounding": None,
              "accumulator_format": None, "unpack_format": None, "instruction_k": None, "name": ""}
    # the exact families first: where the rows cannot tell them from a truncating datapath with a wide
    # alignment (an FMA chain against L = 1 with F = 34), the model with fewer parameters is kept
    for fam in (Family.FMA_CHAIN, Family.EXACT_FUSED):
        if fam in per_family:
            g = _try(per_family[fam], **fitted)
            if g is not None:
                generic.append(g)
    try:  # the engine holds truncated-fused sums in 64-bit integers: no such model for fp64 outputs
        generic.append(Model(Family.TRUNCATED_FUSED, f.a, d, block_width=min(k, 8),
                             fraction_bits=min(d.precision + 1, 40),
                             e_zero=max(min(d.emin - d.fraction_bits, f.a.emin + f.b.emin) - 12, -900),
                             b_input_format=f.b, name=""))
    except ValueError:
        pass
    for fam in (Family.LATE_C, Family.PAIRWISE, Family.BFDOT, Family.AMX):
        if fam in per_family:
            g = _try(per_family[fam], **fitted)
            if g is not None:
                generic.append(g)
    if d.precision < 24:  # AMD units with fp16/bf16 outputs compute in fp32, then round (rocWMMA)
        for g in list(generic):
            if g.family in (Family.EXACT_FUSED, Family.LATE_C, Family.PAIRWISE):
                h = _try(g, accumulator_format=_formats.fp32)
                if h is not None:
                    generic.append(h)
    return presets, generic


# --- stages ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Stage:
    """One step of the decision order: its feature tests, the parameters it varies, how it compares."""

    name: str
    tests: tuple[str, ...]
    params: tuple[str, ...]
    level: int
    joint: bool = True  # vary the parameters jointly (grid) or one at a time (neighbours)


STAGES = (
    Stage("structure", ("precision", "order", "rounding", "products"),
          ("block_width", "fraction_bits", "output_rounding", "alignment", "groups"), LOOSE),
    Stage("specials", ("specials",), ("nan", "overflow"), NAN_BITS),
    Stage("zeros", ("zeros",), ("exact_zero", "rounded_zero"), STRICT),
    Stage("subnormals", ("subnormals",), ("subnormals", "flush_zero"), STRICT),
    Stage("e_zero", ("e_zero",), ("e_zero",), STRICT),
    Stage("details", ("carry", "seeds"), ("carry_bits", "product_exponent", "output_fraction_bits", "c_entry",
                                  "product_order", "unpack_format", "accumulator_format", "late_fraction_bits",
                                  "groups", "late_cut", "alignment"), STRICT, joint=False),
)

# tried when no plain candidate fits the structure rows: how products and C enter the blocks
# (instruction_k=None: C after every block; "k": C after the instruction's last block; c_entry="end" with an
# fp32 accumulator, for fp16/bf16 outputs only: a GEMM library's epilogue, cuBLAS on the H100)
STRUCTURE_EXTRAS = ({"product_order": "halves"}, {"unpack_format": "fp16"}, {"c_entry": "after"},
                    {"c_entry": "after", "instruction_k": "k"},
                    {"unpack_format": "fp16", "product_order": "halves", "c_entry": "after", "instruction_k": "k"},
                    {"c_entry": "end", "accumulator_format": "fp32"})


@dataclass
class Log:
    """What the search did, stage by stage (JSON-ready)."""

    stages: list[dict[str, Any]] = field(default_factory=list)
    smt: list[dict[str, Any]] = field(default_factory=list)  # the solver's separating inputs and proofs
    readings: dict[str, Any] = field(default_factory=dict)
    observations: dict[str, list[dict[str, str]]] = field(default_factory=dict)


def _say(progress: Callable[[str], None] | None, text: str) -> None:
    if progress:
        progress(text)


def _hexrow(r: Row, d: Any) -> dict[str, str]:
    nz = [i for i in range(len(r.a)) if r.a[i] != 0 or r.b[i] != 0 or math.copysign(1, r.a[i]) < 0]
    return {"label": r.label, "a": {str(i): hex_float(r.a[i]) for i in nz},
            "b": {str(i): hex_float(r.b[i]) for i in nz}, "c": hex_float(r.c), "d": hex_float(d)}


class Search:
    """State of one inference (see the module docstring)."""

    def __init__(self, target: Target, *, priors: str = "presets", seed: int = 0,
                 progress: Callable[[str], None] | None = None):
        self.t = target
        self.f = target.formats
        self.k = target.k
        self.ev = Evidence(self.k)
        self.rng = np.random.default_rng(seed)
        self.priors = priors
        self.progress = progress
        self.log = Log()
        self.c_format = self.f.c if self.f.c != self.f.d else None
        self.dtype = self.f.d.dtype
        self.best: Model | None = None
        self.alternatives: list[Model] = []
        self.stage_rows: np.ndarray | None = None
        self.stage_t0 = time.perf_counter()
        self.misses: dict[Model, int] = {}

    # -- talking to the target ---------------------------------------------------------------------------
    def ask(self, a: np.ndarray, b: np.ndarray, c: np.ndarray, source: str) -> np.ndarray:
        d = self.t(a, b, c)
        self.ev.add(a, b, c, d, source)
        return d

    def run_tests(self, names: Iterable[str]) -> None:
        self.stage_t0 = time.perf_counter()
        known = {}
        if self.best is not None and self.best.fraction_bits is not None:
            known["F"] = self.best.fraction_bits
        ctx = Context(self.f, self.k, known)
        rows: list[Row] = []
        spans = []
        for name in names:
            rs = FEATURE_TESTS[name].build(ctx)
            spans.append((name, len(rows), len(rows) + len(rs)))
            rows += rs
        if not rows:
            return
        a, b, c = arrays(rows)
        start = len(self.ev)
        d = self.ask(a, b, c, "+".join(n for n, _, _ in spans))
        # the rows a stage's candidates meet first: its own, thinned to at most 256
        self.stage_rows = np.arange(start, len(self.ev))[::max(1, len(rows) // 256)]
        for name, s, e in spans:
            test = FEATURE_TESTS[name]
            self.log.readings[name] = test.read(ctx, rows[s:e], d[s:e])
            self.log.observations[name] = [_hexrow(r, x) for r, x in zip(rows[s:e], d[s:e])]

    # -- narrowing ---------------------------------------------------------------------------------------------
    def keep(self, cands: list[Model], level: int, first: np.ndarray | None = None) -> tuple[list[Model], int]:
        ok, misses = candidates_agree(cands, self.ev, level, self.c_format, self.dtype, first)
        self.misses = misses
        if ok:
            return ok, 0
        if not misses:
            return [], -1
        least = min(misses.values())
        return [m for m in cands if misses.get(m) == least], least

    def keep_tiers(self, tiers: Iterable[list[Model]], level: int, first: np.ndarray | None = None
                   ) -> tuple[list[Model], int]:
        """:meth:`keep` over tiers of candidates, the likeliest first: the next tier is tried only while no
        candidate fits; the mismatch counts of every tier tried are kept."""
        ok: list[Model] = []
        least, merged = -1, {}
        for tier in tiers:
            if not tier:
                continue
            o, n = self.keep(tier, level, first)
            merged.update(self.misses)
            if n != -1 and (least == -1 or n < least):
                ok, least = o, n
            elif n != -1 and n == least:
                ok = ok + o
            if least == 0:
                break
        self.misses = merged
        return ok, least

    def near_reading(self, cands: list[Model]) -> list[list[Model]]:
        """Two tiers: the candidates whose F lies within one bit of the precision test's reading (and those
        without an F), then the rest: the reading measures F directly, so the first tier usually holds
        the fit and the second (most of a grid) is not run."""
        F = self.log.readings.get("precision", {}).get("bits kept below the largest term (F)")
        if not isinstance(F, int):
            return [cands]
        near = [m for m in cands if not _has_f(m) or abs((m.fraction_bits or 0) - F) <= 1]
        far = [m for m in cands if _has_f(m) and abs((m.fraction_bits or 0) - F) > 1]
        return [near, far]

    def best_per_family(self) -> list[Model]:
        """The candidate of each family that missed fewest rows in the last :meth:`keep`."""
        best: dict[Family, tuple[int, Model]] = {}
        for m, n in self.misses.items():
            if m.family not in best or n < best[m.family][0]:
                best[m.family] = (n, m)
        return [m for _, m in sorted(best.values(), key=lambda t: t[0])]

    def separate(self, cands: list[Model], level: int, families: tuple[str, ...] = _inputs.FAMILIES,
                 rounds: int = 6, pool: int = 4000, ask_at_most: int = 2000, smt: bool = False,
                 smt_rounds: int = 2) -> list[Model]:
        """Random rows on which the candidates disagree go to the target until the survivors agree.

        Early stages pass only the finite, moderate families (``normal``, ``cancel``): on the others the
        candidates would differ in parameters that later stages have not set yet.  With ``smt`` (the last
        stage), candidates that agree on every random row go to the SMT layer (:meth:`smt_separate`), at most
        ``smt_rounds`` times."""
        for _ in range(rounds):
            if len(cands) < 2:
                return cands
            a, b, c = _inputs.mixed_rows(self.f, self.k, pool, self.rng, families)
            outs = [(m, _run(m, a, b, c, self.c_format)) for m in cands]
            outs = [(m, o) for m, o in outs if o is not None]
            ref = outs[0][1]
            differ = np.zeros(len(c), bool)
            for _, o in outs[1:]:
                differ |= ~_agree(o, ref, level, self.dtype)
            idx = np.nonzero(differ)[0]
            if len(idx) == 0:
                if not (smt and smt_rounds > 0 and self.smt_separate([m for m, _ in outs])):
                    break
                smt_rounds -= 1
                cands, _ = self.keep([m for m, _ in outs], level)
                continue
            idx = idx[:ask_at_most]
            self.ask(a[idx], b[idx], c[idx], "separation")
            cands, _ = self.keep([m for m, _ in outs], level)
        return cands

    def smt_separate(self, cands: list[Model], pairs: int = 3, timeout: float = SMT_TIMEOUT) -> bool:
        """Candidates agree on every random row: ask the SMT layer (blockfma.smt.discriminate) for an input
        on which the best one and each of the next ``pairs`` differ, and send those inputs to the target.
        True if any was found; a pair proved equivalent is logged (the target cannot tell them apart)."""
        if timeout <= 0 or self.c_format is not None or self.k > SMT_MAX_K:
            return False
        try:
            from .. import smt
        except ImportError:  # pragma: no cover - z3 is a core dependency
            return False
        best = cands[0]
        found = False
        for other in cands[1:1 + pairs]:
            if smt.unsupported(best) or smt.unsupported(other):
                continue
            t0 = time.perf_counter()
            v = smt.equivalent(best, other, k=self.k, timeout=timeout)
            fa, fb = best.features(), other.features()
            entry = {"model": best.summary(), "other": {p: fb[p] for p in fa if fa[p] != fb[p]},
                     "answer": v.status, "seconds": round(time.perf_counter() - t0, 3), "solver": v.solver}
            self.log.smt.append(entry)
            _say(self.progress, f"  smt: {v.status} for the candidate with "
                                + ", ".join(f"{p}={x}" for p, x in entry["other"].items())
                                + f", which agrees on every random row ({entry['seconds']:.1f} s, {v.solver})")
            if v.witness is not None:
                w = v.witness
                self.ask(w.a[None], w.b[None], np.array([w.c]), "smt")
                found = True
        return found

    def _promising_extras(self, g: Model, least: int, level: int, seeds: int = 4) -> list[dict[str, Any]]:
        """The :data:`STRUCTURE_EXTRAS` worth a whole grid: each is first applied to the ``seeds``
        truncated-fused candidates that missed fewest of the stage's rows (their L, F and rounding), and
        only the extras whose best variant misses fewest rows are kept (all of them if none does better
        than ``least``, the plain grid's best).  This spares the grids of the extras that cannot help."""
        changes = []
        for ch in STRUCTURE_EXTRAS:
            if "accumulator_format" in ch and self.f.d.precision >= 24:
                continue  # an fp32 accumulator stores fp32 outputs unchanged
            changes.append({p: (self.k if v == "k" else v) for p, v in ch.items()})
        fused = [m for m in self.misses if m.family is Family.TRUNCATED_FUSED]
        closest = sorted(fused, key=self.misses.__getitem__)[:seeds] or [g]  # stable: ties in grid order
        best: dict[int, int] = {}
        for j, ch in enumerate(changes):
            variants = [v for v in (_try(m, **ch) for m in closest) if v is not None]
            if not variants:
                continue
            self.keep(variants, level, self.stage_rows)
            if self.misses:
                best[j] = min(self.misses.values())
        if not best:
            return changes
        top = min(best.values())
        if least != -1 and top >= least:
            return changes
        return [changes[j] for j, n in best.items() if n == top]

    # -- the stages ------------------------------------------------------------------------------------------
    def structure(self, stage: Stage) -> None:
        presets, generic = bases(self.f, self.k, self.priors)
        cands = list(presets)
        for g in generic:
            cands += grid(g, self.f, self.k, stage.params)
        plain = self.near_reading(cands)
        ok, least = self.keep_tiers(plain[:1], stage.level, self.stage_rows)
        if least != 0:  # exotic structure: the grid again with the extras that change how products enter
            extra = []
            for g in [g for g in generic if g.family is Family.TRUNCATED_FUSED][:1]:
                for ch in self._promising_extras(g, least, stage.level):
                    h = _try(g, **ch)
                    if h is not None:
                        extra += grid(h, self.f, self.k, stage.params)
            extras = self.near_reading(extra)
            # near the reading with the extras before the rest of the plain grid, then the rest of both
            ok2, least2 = self.keep_tiers(extras[:1] + plain[1:] + extras[1:], stage.level, self.stage_rows)
            if least2 != -1 and (least == -1 or least2 < least):
                ok, least = ok2, least2
            cands += extra
        if least != 0:
            ok, least, more = self.widen(ok, stage.level)
            cands += more
        self._settle(stage, cands, ok, least)

    def widen(self, best: list[Model], level: int) -> tuple[list[Model], int, list[Model]]:
        """No candidate fits: try the one- and then two-parameter neighbours (every parameter) of the
        candidates that miss fewest rows (a parameter of a later stage, e.g. carry bits, can change the
        structure rows)."""
        tried: list[Model] = []
        ok, least = best, -1
        for step in range(2):
            seen: dict[Model, None] = {}
            seeds = list(dict.fromkeys(ok[:8] + self.best_per_family()))
            for i, m in enumerate(seeds):
                seen.update(dict.fromkeys(neighbours(m, self.f, self.k)))
                if step == 0 and i == 0:
                    seen.update(dict.fromkeys(pair_moves(m, self.f, self.k)))
            cands = [m for m in seen if m not in tried]
            tried += cands
            ok2, least2 = self.keep(cands, level, self.stage_rows)
            if least2 == -1:
                break
            ok, least = ok2, least2
            if least == 0:
                break
        return ok, least, tried

    def vary(self, stage: Stage) -> None:
        assert self.best is not None
        base = [self.best] + self.alternatives
        seen: dict[Model, None] = dict.fromkeys(base)  # the current readings first: kept where nothing tells
        for m in base:
            more = grid(m, self.f, self.k, stage.params) if stage.joint else neighbours(m, self.f, self.k, stage.params)
            seen.update(dict.fromkeys(more))
        cands = list(seen)
        ok, least = self.keep(cands, stage.level, self.stage_rows)
        if least != 0:
            ok, least, more = self.widen(ok, stage.level)
            cands += more
        self._settle(stage, cands, ok, least)

    def _settle(self, stage: Stage, cands: list[Model], ok: list[Model], least: int) -> None:
        n_ok = len(ok)
        if len(ok) > 1 and stage.name == "structure":
            ok = self.separate(ok, stage.level, ("normal", "cancel"))
        elif len(ok) > 1 and stage is STAGES[-1]:
            ok = self.separate(ok, stage.level, smt=True)
        if not ok:
            raise RuntimeError("no candidate Model could be evaluated")
        self.best, self.alternatives = ok[0], ok[1:4]
        entry = {"stage": stage.name, "candidates": len(cands), "consistent": n_ok if least == 0 else 0,
                 "after_separation": len(ok), "best_mismatches": least, "rows_seen": len(self.ev),
                 "chosen": {p: _plain(getattr(self.best, p, None)) for p in stage.params if hasattr(self.best, p)},
                 "family": self.best.family.value, "seconds": round(time.perf_counter() - self.stage_t0, 3)}
        self.log.stages.append(entry)
        fit = "fits every row" if least == 0 else f"best misses {least} rows"
        _say(self.progress, f"  {stage.name}: {len(cands)} candidates, {n_ok if least == 0 else 0} consistent, "
             f"{len(ok)} after separation; {fit}; {entry['family']} "
             + ", ".join(f"{k}={v}" for k, v in entry["chosen"].items()) + f" ({entry['seconds']:.1f} s)")

    # -- verification ---------------------------------------------------------------------------------------
    def adversarial(self, m: Model, n: int) -> tuple[np.ndarray, ...]:
        """Rows on which ``m``'s one-parameter neighbours disagree with it (found by the simulator)."""
        a, b, c = _inputs.mixed_rows(self.f, self.k, 4 * n, self.rng)
        ref = _run(m, a, b, c, self.c_format)
        differ = np.zeros(len(c), bool)
        for nb in neighbours(m, self.f, self.k):
            o = _run(nb, a, b, c, self.c_format)
            if o is not None:
                new = ~_agree(o, ref, STRICT, self.dtype) & ~differ
                # keep a few rows per neighbour so that every neighbour is challenged
                idx = np.nonzero(new)[0][:max(4, n // 64)]
                differ[idx] = True
        idx = np.nonzero(differ)[0][:n]
        return a[idx], b[idx], c[idx]

    def verify(self, m: Model, n: int) -> dict[str, Any]:
        n_adv = min(n // 5, 2000)
        aa, ba, ca = self.adversarial(m, n_adv)
        a, b, c = _inputs.mixed_rows(self.f, self.k, n - len(ca), self.rng)
        a, b, c = np.concatenate([aa, a]), np.concatenate([ba, b]), np.concatenate([ca, c])
        start = len(self.ev)
        d = self.ask(a, b, c, "verification")
        out = _run(m, a, b, c, self.c_format)
        bad = np.nonzero(out != bits(d))[0] if out is not None else np.arange(len(c))
        self.stage_rows = start + bad[:256]  # a repair's candidates meet these rows first
        res: dict[str, Any] = {"rows": int(len(c)), "adversarial": int(len(ca)), "mismatches": int(len(bad))}
        if len(bad):
            i = int(bad[0])
            res["first_counterexample"] = {
                "a": [hex_float(x) for x in a[i]], "b": [hex_float(x) for x in b[i]], "c": hex_float(c[i]),
                "target": self._shown(d[i:i + 1]),
                "model": self._shown(out[i:i + 1].view(self.dtype)) if out is not None else None}
        return res

    def _shown(self, x: np.ndarray) -> str:
        """One output as its value and its bits in the D format."""
        return f"{hex_float(x[0])} ({bits_hex(x[0], self.f.d)})"


def disagreements(m1: Model, m2: Model, k: int, n: int = 4000, seed: int = 11) -> int:
    """Rows, of ``n`` random rows of every input family with length ``k``, where two Models give
    different bits (how the probes' results are held to presets at a k the probe did not see)."""
    f = _inputs.Formats.of(m1.input_format, m1.b_format, m1.output_format, m1.output_format)
    a, b, c = _inputs.mixed_rows(f, k, n, np.random.default_rng(seed))
    return int(np.count_nonzero(bits(dot(a, b, c, model=m1)) != bits(dot(a, b, c, model=m2))))


def _plain(v: Any) -> Any:
    if hasattr(v, "value") and not isinstance(v, (int, float)):
        return v.value if not hasattr(v, "name") or not isinstance(v, _formats.Format) else v.name
    if isinstance(v, _formats.Format):
        return v.name
    return v


def search(target: Target, *, verify: int = DEFAULT_VERIFY, rounds: int = 3, priors: str = "presets",
           seed: int = 0, progress: Callable[[str], None] | None = None) -> tuple[Model | None, Search, list[dict]]:
    """Run the stages, separation and closed-loop verification; returns (verified Model or None, the search
    state, the verification results of each round)."""
    s = Search(target, priors=priors, seed=seed, progress=progress)
    for stage in STAGES:
        s.run_tests(stage.tests)
        if stage.name == "structure":
            s.structure(stage)
        else:
            s.vary(stage)
    assert s.best is not None
    verifications = []
    model: Model | None = s.best
    for r in range(rounds):
        res = s.verify(model, verify)
        verifications.append(res)
        _say(progress, f"  verification {r + 1}: {res['rows']} rows ({res['adversarial']} adversarial), "
             f"{res['mismatches']} mismatches")
        if res["mismatches"] == 0:
            return _instruction_width(model, s), s, verifications
        # repair: the neighbours of the current model (and of the alternatives) that fit everything seen
        ok, least, _ = s.widen([model] + s.alternatives, STRICT)
        if least != 0 or not ok:
            _say(progress, "  repair: no Model one or two parameters away fits every row seen")
            return None, s, verifications
        ok = s.separate(ok, STRICT)
        model, s.alternatives = ok[0], ok[1:4]
        _say(progress, f"  repair: {len(ok)} candidate(s) fit; trying {model.family.value} "
             f"L={model.block_width} F={model.fraction_bits}")
    return None, s, verifications


def _instruction_width(m: Model, s: Search) -> Model:
    """A block wider than the target's k cannot be seen through it: one instruction rounds its result, so
    as a model of the instruction (chained over a longer k) the block is k wide.  Kept only if it gives the
    same bits on every row seen."""
    if m.instruction_k is not None and m.instruction_k != s.k:  # a prior from an instruction of another k
        for L in dict.fromkeys((m.block_width, s.k // 2, s.k)):
            n = _try(m, instruction_k=s.k, block_width=L)
            if n is not None and candidates_agree([n], s.ev, STRICT, s.c_format, s.dtype)[0]:
                return n
        return m
    if m.block_width is None or m.block_width <= s.k or m.instruction_k is not None:
        return m
    n = _try(m, block_width=s.k)
    if n is None:
        return m
    ok, _ = candidates_agree([n], s.ev, STRICT, s.c_format, s.dtype)
    return n if ok else m


def stderr_progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
