"""Inference: from a target's outputs on the feature tests to a verified, executable Model.

The search keeps a version space of candidate Models and every (input, output) pair seen so far: stages in
a decision order narrow the candidates (each stage's rows in one target call), the simulator separates the
survivors on random rows, then on chained rows of :data:`CHAIN` times k (two Models can agree on every
single instruction yet not on a chain, where C is the previous call's rounded sum), then by SMT; the
chosen Model is verified on random and adversarial rows, single and chained, and a mismatch starts a
repair round.  A Model that still fails is never reported as the target's model.  The stages, the
verification's row counts (:data:`CHAIN_PRODUCTS`) and which targets can chain (:meth:`Target.chain
<blockfma.probes.targets.Target.chain>`) are in docs/probes.md, "Inference" and "Chains of instructions".
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import formats as _formats
from ..devices import devices as _devices
from ..engine import dot
from ..formats import bits
from ..literals import bits_hex, hex_float
from ..model import PARAMS, SEARCHED, Family, Model
from .. import inputs as _inputs
from .features import FEATURE_TESTS, Context, Row, arrays
from .targets import Target, TargetError, holds

__all__ = ["Evidence", "Stage", "STAGES", "search", "candidates_agree", "neighbours", "disagreements",
           "DEFAULT_VERIFY", "CHAIN"]

DEFAULT_VERIFY = 10_000
CHAIN = 3  # instructions per chained row (separation and verification): k = 3 * the target's k
CHAIN_PRODUCTS = 2_000_000  # chained rows drawn at a time: at most 20,000 and this many products (k = 32: 20,000)
CHAIN_MAX_ROWS = 100_000  # the most chained rows one verification sends
CHAIN_CANDIDATES = 16  # the most candidates one round of chained separation runs (each on 20,000 long rows)
SMT_TIMEOUT = 4.0  # seconds the SMT layer may spend on one pair of candidates that no random row separates
SMT_MAX_K = 32  # longer rows: bitwuzla gave no answer within SMT_TIMEOUT at k = 64 (16-blocks, fp16), so none is asked

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


def _agree(x: np.ndarray, y: np.ndarray, level: int, dtype: np.dtype) -> np.ndarray:
    """Rows where candidate bits ``x`` and target bits ``y`` agree at the comparison level."""
    same = x == y
    if level == STRICT:
        return same
    m = x.dtype.type((1 << (dtype.itemsize * 8 - 1)) - 1)  # every bit but the sign
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
def domains(f: _inputs.Formats, k: int, m: Model) -> dict[str, list[Any]]:
    """The values each parameter may take for this target: the domains of the Model's fields
    (:class:`blockfma.model.Param`) that apply to ``m``'s family, the shared fields the family has the search vary
    (``Family.searched``), and the family's own options, in :data:`blockfma.model.SEARCHED` order."""
    fam = m.family
    out: dict[str, list[Any]] = {}
    for name in SEARCHED:
        p = PARAMS[name]
        searched = m.applies(name) and (p.family or p.search or name in fam.searched)
        values = p.domain(f, k, m) if searched and p.domain is not None else None
        if values is not None:
            out[name] = list(values)
    for o in fam.options:
        out[f"options.{o.name}"] = o.values(f, k, m)
    return out


def _get(m: Model, name: str) -> Any:
    """A parameter's value: a field, or ``"options.NAME"`` for one of the family's own options."""
    return m.option(name[len("options."):]) if name.startswith("options.") else getattr(m, name)


def _try(m: Model, **changes: Any) -> Model | None:
    """``m`` with some parameters changed (fields, or ``"options.NAME"``), or None where that is no valid Model."""
    options = {k[len("options."):]: v for k, v in changes.items() if k.startswith("options.")}
    if options:
        changes = {k: v for k, v in changes.items() if not k.startswith("options.")}
        changes["options"] = {**dict(m.options), **options}
    try:
        return m.replace(**changes)
    except (ValueError, TypeError):
        return None


def _expand(params: Iterable[str], dom: dict[str, list[Any]]) -> list[str]:
    """Parameter names with ``"options"`` standing for every option of the family (``"options.NAME"``)."""
    out: list[str] = []
    for p in params:
        out += [q for q in dom if q.startswith("options.")] if p == "options" else [p]
    return out


def neighbours(m: Model, f: _inputs.Formats, k: int, params: Iterable[str] | None = None) -> list[Model]:
    """Models one parameter away from ``m`` (over :func:`domains`)."""
    dom = domains(f, k, m)
    out: dict[Model, None] = {}
    for p in _expand(params, dom) if params else dom:
        for v in dom.get(p, []):
            if _get(m, p) != v:
                n = _try(m, **{p: v})
                if n is not None and n != m:
                    out[n] = None
    return list(out)


def grid(m: Model, f: _inputs.Formats, k: int, params: Iterable[str]) -> list[Model]:
    """Every combination of the given parameters' values around ``m``."""
    dom = domains(f, k, m)
    names = [p for p in _expand(params, dom) if p in dom]
    out: dict[Model, None] = {}
    # each parameter's domain, with the base's own value (e.g. a preset's round-to-odd) kept in it
    values_of = [list(dict.fromkeys([_get(m, p)] + list(dom[p]))) for p in names]
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
    Model per registered family fitted to the formats (its ``Family.base``, else its first preset with the
    formats replaced), in the registry's order, to be varied by the structure stage."""
    presets: list[Model] = []
    per_family: dict[Family, Model] = {}
    for dev in _devices():
        if dev.vendor == "reference" and dev.name != "exact":
            continue
        for ins in dev.instructions:
            for m in ins.models.values():
                # block-scaled: a dot-product target passes no scales (probes.scaled)
                if m.family is Family.SCALED_FUSED:
                    continue
                if priors == "presets" and (m.input_format, m.b_format, m.output_format) == (f.a, f.b, f.d) \
                        and m.input_rounding is None and m not in presets:
                    presets.append(m)
                per_family.setdefault(m.family, m)
    generic: list[Model] = []
    fitted = {"input_format": f.a, "b_input_format": f.b, "output_format": f.d, "input_rounding": None,
              "accumulator_format": None, "unpack_format": None, "instruction_k": None, "name": ""}
    for fam in Family:  # the registry's order: the exact families first (fewer parameters win a tie)
        if fam.base is not None:
            g = fam.base(f.a, f.b, f.d, k)
        else:
            g = _try(per_family[fam], **fitted) if fam in per_family else None
        if g is not None:
            generic.append(g)
    if f.d.precision < 24:  # AMD units with fp16/bf16 outputs compute in fp32, then round (rocWMMA)
        for g in list(generic):
            if g.family in (Family.EXACT_FUSED, Family.LATE_C, Family.PAIRWISE):
                h = _try(g, accumulator_format=_formats.fp32)
                if h is not None:
                    generic.append(h)
    return presets, generic


# --- stages ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Stage:
    """One step of the decision order: its feature tests, the parameters it varies (``"options"``: every
    option of the family's own), how it compares."""

    name: str
    tests: tuple[str, ...]
    params: tuple[str, ...]
    level: int
    joint: bool = True  # vary the parameters jointly (grid) or one at a time (neighbours)


STAGES = (
    Stage("structure", ("precision", "order", "rounding", "products"),
          ("block_width", "fraction_bits", "output_rounding", "alignment", "groups", "options"), LOOSE),
    Stage("specials", ("specials",), ("nan", "overflow"), NAN_BITS),
    Stage("zeros", ("zeros",), ("exact_zero", "rounded_zero"), STRICT),
    Stage("subnormals", ("subnormals",), ("subnormals", "flush_zero"), STRICT),
    Stage("e_zero", ("e_zero",), ("e_zero",), STRICT),
    Stage("details", ("carry", "seeds"), ("carry_bits", "product_exponent", "output_fraction_bits", "c_entry",
                                  "product_order", "unpack_format", "accumulator_format", "late_fraction_bits",
                                  "groups", "late_cut", "alignment", "c_input_format", "options"), STRICT,
          joint=False),
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


@dataclass(frozen=True)
class Kept:
    """What one narrowing step kept: ``models``, the candidates that fit every row seen (``least`` is 0) or
    else those that miss fewest (``least`` rows; -1 where none could be run), and ``misses``, the mismatch
    counts of the candidates it ran last: the ranking the next :meth:`Search.widen` starts from."""

    models: list[Model]
    least: int
    misses: dict[Model, int] = field(default_factory=dict)


def best_per_family(misses: dict[Model, int]) -> list[Model]:
    """The candidate of each family that missed fewest rows in ``misses``, fewest first."""
    best: dict[Family, tuple[int, Model]] = {}
    for m, n in misses.items():
        if m.family not in best or n < best[m.family][0]:
            best[m.family] = (n, m)
    return [m for _, m in sorted(best.values(), key=lambda t: t[0])]


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
        # chained rows (CHAIN instructions each) and the target's outputs: None where the target cannot chain
        self.chain_ev: Evidence | None = Evidence(CHAIN * self.k) if getattr(target, "chaining", None) else None

    # -- talking to the target ---------------------------------------------------------------------------
    def ask(self, a: np.ndarray, b: np.ndarray, c: np.ndarray, source: str) -> np.ndarray:
        d = self.t(a, b, c)
        self.ev.add(a, b, c, d, source)
        return d

    def ask_chain(self, a: np.ndarray, b: np.ndarray, c: np.ndarray, source: str) -> np.ndarray | None:
        """The target's outputs on chained rows (``CHAIN * k`` products), kept as evidence; None (and no more
        chained rows) where the target turns out unable to chain."""
        assert self.chain_ev is not None
        try:
            d = self.t.chain(a, b, c)
        except TargetError as exc:
            if getattr(self.t, "chaining", None) is not None:
                raise
            # a callable of fixed k whose C cannot hold D: single calls only
            _say(self.progress, f"  chained rows: none ({exc})")
            self.chain_ev = None
            return None
        self.chain_ev.add(a, b, c, d, source)
        return d

    def fits(self, m: Model) -> bool:
        """Whether ``m`` gives every bit seen, on single and on chained rows."""
        if not candidates_agree([m], self.ev, STRICT, self.c_format, self.dtype)[0]:
            return False
        return self.chain_ev is None or not len(self.chain_ev) or \
            bool(candidates_agree([m], self.chain_ev, STRICT, self.c_format, self.dtype)[0])

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
    def keep(self, cands: list[Model], level: int, first: np.ndarray | None = None) -> Kept:
        """The candidates that fit every row seen, else those that miss fewest (:func:`candidates_agree`)."""
        ok, misses = candidates_agree(cands, self.ev, level, self.c_format, self.dtype, first)
        if self.chain_ev is not None and len(self.chain_ev) and misses:
            ok, misses = self._chain_misses(ok, misses, level)
        if ok:
            return Kept(ok, 0, misses)
        if not misses:
            return Kept([], -1, misses)
        least = min(misses.values())
        return Kept([m for m in cands if misses.get(m) == least], least, misses)

    def _chain_misses(self, ok: list[Model], misses: dict[Model, int], level: int
                      ) -> tuple[list[Model], dict[Model, int]]:
        """Add the chained rows' mismatches to those of the candidates that miss fewest single rows (the
        others keep their counts: they cannot be chosen); a candidate the engine cannot run is dropped."""
        least = min(misses.values())
        contenders = [m for m, n in misses.items() if n == least]
        _, more = candidates_agree(contenders, self.chain_ev, level, self.c_format, self.dtype)
        misses = dict(misses)
        for m in contenders:
            if m in more:
                misses[m] += more[m]
            else:
                del misses[m]
        return [m for m in ok if misses.get(m) == 0], misses

    def keep_tiers(self, tiers: Iterable[list[Model]], level: int, first: np.ndarray | None = None) -> Kept:
        """:meth:`keep` over tiers of candidates, the likeliest first: the next tier is tried only while no
        candidate fits; the mismatch counts of every tier tried are kept."""
        ok: list[Model] = []
        least, merged = -1, {}
        for tier in tiers:
            if not tier:
                continue
            kept = self.keep(tier, level, first)
            o, n = kept.models, kept.least
            merged.update(kept.misses)
            if n != -1 and (least == -1 or n < least):
                ok, least = o, n
            elif n != -1 and n == least:
                ok = ok + o
            if least == 0:
                break
        return Kept(ok, least, merged)

    def near_reading(self, cands: list[Model]) -> list[list[Model]]:
        """Two tiers: the candidates whose F lies within one bit of the precision test's reading (and those
        without an F), then the rest: the reading measures F directly, so the first tier usually holds
        the fit and the second (most of a grid) is not run."""
        F = self.log.readings.get("precision", {}).get("bits kept below the largest term (F)")
        if not isinstance(F, int):
            return [cands]
        near = [m for m in cands if not m.applies("fraction_bits") or abs((m.fraction_bits or 0) - F) <= 1]
        far = [m for m in cands if m.applies("fraction_bits") and abs((m.fraction_bits or 0) - F) > 1]
        return [near, far]

    def separate(self, kept: Kept, level: int, families: tuple[str, ...] = _inputs.FAMILIES,
                 rounds: int = 6, pool: int = 4000, ask_at_most: int = 2000, smt: bool = False,
                 smt_rounds: int = 2, chain_rounds: int = 2) -> Kept:
        """Random rows on which the candidates ``kept.models`` disagree go to the target until the survivors agree;
        returns them as the last :meth:`keep` found them (``kept`` itself where no row was asked). Candidates that agree
        on every row of k products are tried on chained rows (:meth:`chain_separate`), at most ``chain_rounds`` times.

        Early stages pass only the finite, moderate families (``normal``, ``cancel``): on the others the candidates
        would differ in parameters that later stages have not set yet.  With ``smt`` (the last stage), candidates that
        agree on every random row go to the SMT layer (:meth:`smt_separate`), at most ``smt_rounds`` times."""
        for _ in range(rounds):
            cands = kept.models
            if len(cands) < 2:
                return kept
            a, b, c = _inputs.mixed_rows(self.f, self.k, pool, self.rng, families)
            outs = [(m, _run(m, a, b, c, self.c_format)) for m in cands]
            outs = [(m, o) for m, o in outs if o is not None]
            ref = outs[0][1]
            differ = np.zeros(len(c), bool)
            for _, o in outs[1:]:
                differ |= ~_agree(o, ref, level, self.dtype)
            idx = np.nonzero(differ)[0]
            if len(idx) == 0 and chain_rounds > 0 and self.chain_ev is not None:
                chain_rounds -= 1
                if self.chain_separate([m for m, _ in outs], level, families, ask_at_most):
                    kept = self.keep([m for m, _ in outs], level)
                    continue
                chain_rounds = 0  # no chained row separates them either
            if len(idx) == 0:
                if not (smt and smt_rounds > 0 and self.smt_separate([m for m, _ in outs])):
                    break
                smt_rounds -= 1
                kept = self.keep([m for m, _ in outs], level)
                continue
            idx = idx[:ask_at_most]
            self.ask(a[idx], b[idx], c[idx], "separation")
            kept = self.keep([m for m, _ in outs], level)
        return kept

    def chain_pool(self) -> int:
        """How many chained rows are drawn at a time (20,000 at most, :data:`CHAIN_PRODUCTS` products)."""
        return max(1, min(20_000, CHAIN_PRODUCTS // (CHAIN * self.k)))

    def chain_rows(self, n: int, families: tuple[str, ...] = _inputs.FAMILIES) -> tuple[np.ndarray, ...]:
        """``n`` random rows of ``CHAIN * k`` products: half of the ``cancel`` family (where a chain's C, the previous
        instructions' rounded sum, meets products that nearly cancel it: there a late C and a fused C differ, about 2
        rows in 10,000 at k = 96 against 1 in 40,000 of the other families), half of ``families``."""
        kk = CHAIN * self.k
        h = n // 2 if "cancel" in families else 0
        parts = [_inputs.rows("cancel", self.f, kk, h, self.rng),
                 _inputs.mixed_rows(self.f, kk, n - h, self.rng, families)]
        a, b, c = (np.concatenate([p[i] for p in parts]) for i in range(3))
        order = self.rng.permutation(len(c))
        return a[order], b[order], c[order]

    def chain_separate(self, cands: list[Model], level: int, families: tuple[str, ...] = _inputs.FAMILIES,
                       ask_at_most: int = 2000) -> bool:
        """Candidates agree on every single row tried: find chained rows (``CHAIN * k`` products, of
        ``families``) on which their plans over the longer k differ (the first :data:`CHAIN_CANDIDATES`
        candidates, the likeliest), and send those to the target's chain.  True if any was sent."""
        a, b, c = self.chain_rows(self.chain_pool(), families)
        outs = [o for o in (_run(m, a, b, c, self.c_format) for m in cands[:CHAIN_CANDIDATES]) if o is not None]
        if len(outs) < 2:
            return False
        differ = np.zeros(len(c), bool)
        for o in outs[1:]:
            differ |= ~_agree(o, outs[0], level, self.dtype)
        idx = np.nonzero(differ)[0][:ask_at_most]
        if len(idx):
            if self.ask_chain(a[idx], b[idx], c[idx], "separation (chained)") is None:
                return False
            _say(self.progress, f"  separation: {len(idx)} chained rows (k = {CHAIN * self.k}) tell "
                 f"{len(cands)} candidates apart that agree on every row of k = {self.k}")
        return bool(len(idx))

    def smt_separate(self, cands: list[Model], pairs: int = 3, timeout: float = SMT_TIMEOUT) -> bool:
        """Candidates agree on every random row: ask the SMT layer (blockfma.smt.discriminate) for an input
        on which the best one and each of the next ``pairs`` differ, and send those inputs to the target.
        True if any was found; a pair proved equivalent is logged (the target cannot tell them apart)."""
        if timeout <= 0 or self.c_format is not None or self.k > SMT_MAX_K:
            return False
        from .. import smt
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

    def _promising_extras(self, g: Model, plain: Kept, level: int, seeds: int = 4) -> list[dict[str, Any]]:
        """The :data:`STRUCTURE_EXTRAS` worth a whole grid: each is first applied to the ``seeds`` truncated-fused
        candidates that missed fewest of the stage's rows in ``plain`` (their L, F and rounding), and only the extras
        whose best variant misses fewest rows are kept (all of them if none does better than ``plain.least``, the plain
        grid's best).  This spares the grids of the extras that cannot help."""
        changes = []
        for ch in STRUCTURE_EXTRAS:
            if "accumulator_format" in ch and self.f.d.precision >= 24:
                continue  # an fp32 accumulator stores fp32 outputs unchanged
            changes.append({p: (self.k if v == "k" else v) for p, v in ch.items()})
        fused = [m for m in plain.misses if m.family is Family.TRUNCATED_FUSED]
        closest = sorted(fused, key=plain.misses.__getitem__)[:seeds] or [g]  # stable: ties in grid order
        best: dict[int, int] = {}
        for j, ch in enumerate(changes):
            variants = [v for v in (_try(m, **ch) for m in closest) if v is not None]
            if not variants:
                continue
            misses = self.keep(variants, level, self.stage_rows).misses
            if misses:
                best[j] = min(misses.values())
        if not best:
            return changes
        top = min(best.values())
        if plain.least != -1 and top >= plain.least:
            return changes
        return [changes[j] for j, n in best.items() if n == top]

    # -- the stages ------------------------------------------------------------------------------------------
    def structure(self, stage: Stage) -> Kept:
        """The first stage: presets and the generic families' grids, near the precision reading first, then
        the extra structures, then the neighbours; returns what :meth:`_settle` kept."""
        presets, generic = bases(self.f, self.k, self.priors)
        cands = list(presets)
        for g in generic:
            cands += grid(g, self.f, self.k, stage.params)
        plain = self.near_reading(cands)
        last = self.keep_tiers(plain[:1], stage.level, self.stage_rows)
        ok, least = last.models, last.least
        if least != 0:  # exotic structure: the grid again with the extras that change how products enter
            extra = []
            for g in [g for g in generic if g.family is Family.TRUNCATED_FUSED][:1]:
                for ch in self._promising_extras(g, last, stage.level):
                    h = _try(g, **ch)
                    if h is not None:
                        extra += grid(h, self.f, self.k, stage.params)
            extras = self.near_reading(extra)
            # near the reading with the extras before the rest of the plain grid, then the rest of both
            last = self.keep_tiers(extras[:1] + plain[1:] + extras[1:], stage.level, self.stage_rows)
            if last.least != -1 and (least == -1 or last.least < least):
                ok, least = last.models, last.least
            cands += extra
        if least != 0:
            last, more = self.widen(ok, stage.level, last.misses)
            ok, least = last.models, last.least
            cands += more
        return self._settle(stage, cands, Kept(ok, least, last.misses))

    def widen(self, best: list[Model], level: int, ranking: dict[Model, int]) -> tuple[Kept, list[Model]]:
        """No candidate fits: try the one- and then two-parameter neighbours (every parameter) of the
        candidates that miss fewest rows, ``best`` and the best of each family in ``ranking`` (a parameter
        of a later stage, e.g. carry bits, can change the structure rows).  Returns what was kept, its
        ``misses`` those of the last candidates run, and every candidate tried."""
        tried: list[Model] = []
        ok, least = best, -1
        for step in range(2):
            seen: dict[Model, None] = {}
            seeds = list(dict.fromkeys(ok[:8] + best_per_family(ranking)))
            for i, m in enumerate(seeds):
                seen.update(dict.fromkeys(neighbours(m, self.f, self.k)))
                if step == 0 and i == 0:
                    seen.update(dict.fromkeys(pair_moves(m, self.f, self.k)))
            cands = [m for m in seen if m not in tried]
            tried += cands
            kept = self.keep(cands, level, self.stage_rows)
            ranking = kept.misses
            if kept.least == -1:
                break
            ok, least = kept.models, kept.least
            if least == 0:
                break
        return Kept(ok, least, ranking), tried

    def vary(self, stage: Stage) -> Kept:
        """A later stage: the grid (or the neighbours) of its parameters around the current readings, then
        the neighbours of every parameter; returns what :meth:`_settle` kept."""
        assert self.best is not None
        base = [self.best] + self.alternatives
        seen: dict[Model, None] = dict.fromkeys(base)  # the current readings first: kept where nothing tells
        for m in base:
            more = grid(m, self.f, self.k, stage.params) if stage.joint else neighbours(m, self.f, self.k, stage.params)
            seen.update(dict.fromkeys(more))
        cands = list(seen)
        kept = self.keep(cands, stage.level, self.stage_rows)
        if kept.least != 0:
            kept, more = self.widen(kept.models, stage.level, kept.misses)
            cands += more
        return self._settle(stage, cands, kept)

    def _settle(self, stage: Stage, cands: list[Model], kept: Kept) -> Kept:
        """Separate the candidates kept, take the first as the current best, log the stage."""
        ok, least = kept.models, kept.least
        n_ok = len(ok)
        if len(ok) > 1 and stage.name == "structure":
            kept = self.separate(kept, stage.level, ("normal", "cancel"))
        elif len(ok) > 1 and stage is STAGES[-1]:
            kept = self.separate(kept, stage.level, smt=True)
        ok = kept.models
        if not ok:
            raise RuntimeError("no candidate Model could be evaluated")
        self.best, self.alternatives = ok[0], ok[1:4]
        entry = {"stage": stage.name, "candidates": len(cands), "consistent": n_ok if least == 0 else 0,
                 "after_separation": len(ok), "best_mismatches": least, "rows_seen": len(self.ev),
                 "chosen": {p: _plain(getattr(self.best, p, None)) for p in stage.params if hasattr(self.best, p)}
                 | {f"options.{k}": _plain(v) for k, v in self.best.options if "options" in stage.params},
                 "family": self.best.family.value, "seconds": round(time.perf_counter() - self.stage_t0, 3)}
        self.log.stages.append(entry)
        fit = "fits every row" if least == 0 else f"best misses {least} rows"
        _say(self.progress, f"  {stage.name}: {len(cands)} candidates, {n_ok if least == 0 else 0} consistent, "
             f"{len(ok)} after separation; {fit}; {entry['family']} "
             + ", ".join(f"{k}={v}" for k, v in entry["chosen"].items()) + f" ({entry['seconds']:.1f} s)")
        return kept

    def other_families(self, structure: list[Model], failed: Model) -> Kept:
        """A repair's last resort: the structure stage kept candidates of several families that its rows cannot tell
        apart (late-C and fused with fp6 inputs and an fp16 C), the later stages followed one, and verification (chained
        rows) rejected it.  Each other family kept there goes through the later stages again, now with every row seen
        (verification's too); the first whose last stage fits every row is returned (``least`` -1 where none does)."""
        for fam in dict.fromkeys(m.family for m in structure if m.family is not failed.family):
            same = [m for m in structure if m.family is fam]
            self.best, self.alternatives = same[0], same[1:4]
            kept = Kept([], -1)
            for stage in STAGES[1:]:
                self.stage_t0 = time.perf_counter()
                kept = self.vary(stage)
            if kept.least == 0 and kept.models:
                _say(self.progress, f"  repair: the structure stage's {fam.value} candidates fit every row seen")
                return kept
        return Kept([], -1)

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
            res["first_counterexample"] = self._counterexample(a, b, c, d, out, int(bad[0]))
        if self.chain_ev is not None and n > 0:
            n_chain = min(max(n // 5, 2 * self.chain_pool()), CHAIN_MAX_ROWS)
            aa, ba, ca = self.chain_adversarial(m, n_chain // 2)
            a, b, c = self.chain_rows(n_chain - len(ca))
            a, b, c = np.concatenate([aa, a]), np.concatenate([ba, b]), np.concatenate([ca, c])
            d = self.ask_chain(a, b, c, "verification (chained)")
            if d is None:
                return res
            out = _run(m, a, b, c, self.c_format)
            bad = np.nonzero(out != bits(d))[0] if out is not None else np.arange(len(c))
            res.update({"chained_rows": int(len(c)), "chained_k": CHAIN * self.k, "chained_adversarial": int(len(ca)),
                        "chained_mismatches": int(len(bad))})
            res["mismatches"] += int(len(bad))
            if len(bad) and "first_counterexample" not in res:
                res["first_counterexample"] = self._counterexample(a, b, c, d, out, int(bad[0]))
        return res

    def chain_adversarial(self, m: Model, n: int) -> tuple[np.ndarray, ...]:
        """Chained rows (``CHAIN * k`` products) on which ``m``'s plan over the longer k differs from ``m``
        called once per k products, each output the next C (where D fits in C), or from the alternatives:
        the rows where a Model that fits every single instruction can still be wrong."""
        kk = CHAIN * self.k
        if n <= 0:
            return np.zeros((0, kk)), np.zeros((0, kk)), np.zeros(0)
        a, b, c = self.chain_rows(self.chain_pool())
        ref = _run(m, a, b, c, self.c_format)
        if ref is None:
            return a[:0], b[:0], c[:0]
        others = [o for o in (_run(x, a, b, c, self.c_format) for x in self.alternatives) if o is not None]
        if holds(self.f.c, self.f.d):
            cc = c
            with np.errstate(all="ignore"):
                for s in range(0, kk, self.k):
                    o = _run(m, a[:, s:s + self.k], b[:, s:s + self.k], cc, self.c_format)
                    if o is None:
                        break
                    cc = o.view(self.dtype).astype(np.float64)
            if o is not None:
                others.append(o)
        differ = np.zeros(len(c), bool)
        for o in others:
            differ |= ~_agree(o, ref, STRICT, self.dtype)
        idx = np.nonzero(differ)[0][:n]
        return a[idx], b[idx], c[idx]

    def _counterexample(self, a: np.ndarray, b: np.ndarray, c: np.ndarray, d: np.ndarray, out: np.ndarray | None,
                        i: int) -> dict[str, Any]:
        """Row ``i`` with the target's and the Model's outputs, in exact hex."""
        return {"a": [hex_float(x) for x in a[i]], "b": [hex_float(x) for x in b[i]], "c": hex_float(c[i]),
                "target": self._shown(d[i:i + 1]),
                "model": self._shown(out[i:i + 1].view(self.dtype)) if out is not None else None}

    def _shown(self, x: np.ndarray) -> str:
        """One output as its value and its bits in the D format."""
        return f"{hex_float(x[0])} ({bits_hex(x[0], self.f.d)})"


def disagreements(m1: Model, m2: Model, k: int, n: int = 4000, seed: int = 11) -> int:
    """Rows, of ``n`` random rows of every input family with length ``k``, where two Models give
    different bits (how the probes' results are held to presets at a k the probe did not see).  C is drawn in
    the narrower of the two models' C formats (``Model.c_format``), which both take."""
    fc = m1.c_format if _formats.holds(m2.c_format, m1.c_format) else m2.c_format
    f = _inputs.Formats.of(m1.input_format, m1.b_format, fc, m1.output_format)
    a, b, c = _inputs.mixed_rows(f, k, n, np.random.default_rng(seed))
    return int(np.count_nonzero(bits(dot(a, b, c, model=m1)) != bits(dot(a, b, c, model=m2))))


def _plain(v: Any) -> Any:
    if isinstance(v, _formats.Format):
        return v.name
    return v.value if hasattr(v, "value") and not isinstance(v, (int, float)) else v


def search(target: Target, *, verify: int = DEFAULT_VERIFY, rounds: int = 2, priors: str = "presets",
           seed: int | None = 0, progress: Callable[[str], None] | None = None
           ) -> tuple[Model | None, Search, list[dict]]:
    """Run the stages, separation and closed-loop verification; returns (verified Model or None, the search
    state, the verification results of each check).  The chosen Model is checked once, and after a failed
    check repaired and checked again, at most ``rounds`` times (``rounds=0``: the first check decides)."""
    s = Search(target, priors=priors, seed=seed, progress=progress)
    ranking: dict[Model, int] = {}  # the mismatch counts of the candidates run last: where a repair starts
    structure: list[Model] = []  # what the structure stage kept: other families a repair may take up
    for stage in STAGES:
        s.run_tests(stage.tests)
        kept = s.structure(stage) if stage.name == "structure" else s.vary(stage)
        ranking = kept.misses
        if stage.name == "structure":
            structure = kept.models
    assert s.best is not None
    verifications = []
    model: Model | None = s.best
    for r in range(rounds + 1):
        res = s.verify(model, verify)
        verifications.append(res)
        chained = f", {res['chained_rows']} chained rows of k = {res['chained_k']} ({res['chained_adversarial']} " \
            f"adversarial, {res['chained_mismatches']} mismatches)" if "chained_rows" in res else ""
        _say(progress, f"  verification {r + 1}: {res['rows']} rows ({res['adversarial']} adversarial){chained}, "
             f"{res['mismatches']} mismatches")
        if res["mismatches"] == 0:
            return _instruction_width(model, s), s, verifications
        if r == rounds:  # no repair round left: a Model that failed its check is never reported
            break
        # repair: the neighbours of the current model (and of the alternatives) that fit everything seen
        kept, _ = s.widen([model] + s.alternatives, STRICT, ranking)
        if kept.least != 0 or not kept.models:
            kept = s.other_families(structure, model)
        if kept.least != 0 or not kept.models:
            _say(progress, "  repair: no Model one or two parameters away fits every row seen")
            return None, s, verifications
        kept = s.separate(kept, STRICT)
        ranking, ok = kept.misses, kept.models
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
            if n is not None and s.fits(n):
                return n
        return m
    if m.block_width is None or m.block_width <= s.k or m.instruction_k is not None:
        return m
    n = _try(m, block_width=s.k)
    if n is None:
        return m
    return n if s.fits(n) else m

