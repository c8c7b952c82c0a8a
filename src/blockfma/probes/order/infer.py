"""Inference of a summation tree from probe outputs (FPRev's probes; the method is described in
:mod:`blockfma.probes.order`): the probe values (:class:`ProbeScale`, :func:`probe_scale`), the recursion
over pivots (:func:`infer_order`) and what it found (:class:`OrderResult`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

import numpy as np

from ...formats import Format
from ...arguments import ArgumentError, choice, integer, memory
from .replay import Verification, compare
from .targets import OrderError, SumTarget, probe_ratio
from .tree import Shape, SumTree, describe, few

__all__ = ["ProbeScale", "probe_scale", "OrderResult", "infer_order"]


@dataclass(frozen=True)
class ProbeScale:
    """The probe values: ``M = 2**big`` and the unit ``2**unit`` (summands; for a dot-product target each
    is a product with the factor ``2**scale``)."""

    big: int
    unit: int

    @property
    def ratio(self) -> int:
        """log2(M / unit)."""
        return self.big - self.unit


def probe_scale(target: SumTarget, *, ratio: int | None = None) -> ProbeScale:
    """Choose M and the unit for ``target``: ``M / unit = 2**r`` with ``r = max(p + 1, F) + c + 1`` (p the
    accumulator's precision, F ``target.fraction_bits`` or p + 2 where unknown, c = ceil(log2 n)), so that a
    rounding to nearest and a fused block's cut both absorb the units (the derivation: docs/probes-order.md,
    "Choosing M").  The unit is 1 where the summands allow (outputs then count directly), else as large as
    lets M fit.  ``ratio`` overrides r.  Additions rounded toward zero step by step absorb units into M but
    not into -M; where -M meets units before M the count comes out far beyond n - 2 and the inference says so.
    """
    r = probe_ratio(target.n, target.accumulator, target.fraction_bits) if ratio is None else \
        integer("ratio", ratio, least=1)
    low, high = target.summand_exponents()
    out = target.output_format
    out_low = out.emin - out.precision + 1 if out.subnormals else out.emin
    acc = target.accumulator
    acc_low = acc.emin - acc.precision + 1 if acc.subnormals else acc.emin
    if high - low < r:
        raise OrderError(f"target {target.name}: M / unit must be 2**{r} for n = {target.n} with a "
                         f"{acc.name} accumulator, but its summands span only 2**{low} .. 2**{high}; probe fewer "
                         "summands, or use a dot-product target so that products reach further")
    unit = min(max(0, low, out_low, acc_low), high - r)
    big = unit + r
    if unit < max(out_low, acc_low) or big > min(acc.emax, high):
        raise OrderError(f"target {target.name}: no M = 2**b and unit = 2**u with b - u = {r} fit the summands "
                         f"(2**{low} .. 2**{high}), the {acc.name} accumulator and the {out.name} output")
    if target.n > 2 ** min(out.precision, acc.precision):
        raise OrderError(f"target {target.name}: counts up to n = {target.n} are not exact in {out.name} "
                         f"(p = {out.precision}); probe at most {2 ** out.precision} summands")
    return ProbeScale(big, unit)


def _probe_rows(n: int, pairs: np.ndarray, scale: ProbeScale) -> np.ndarray:
    x = np.full((len(pairs), n), 2.0 ** scale.unit)
    rows = np.arange(len(pairs))
    x[rows, pairs[:, 0]] = 2.0 ** scale.big
    x[rows, pairs[:, 1]] = -(2.0 ** scale.big)
    return x


# --- inference -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class OrderResult:
    """What :func:`infer_order` found: the tree and its shape, the cost (``calls`` to the target,
    ``probes`` rows, ``rounds`` of dependent calls) and every measurement (``pairs`` probed, the ``sizes``
    of their smallest common subtree, the target's raw ``outputs``)."""

    tree: SumTree
    shape: Shape
    target: str
    n: int
    calls: int
    probes: int
    rounds: int
    scale: ProbeScale
    method: str
    output_format: Format = field(repr=False)
    pairs: np.ndarray = field(repr=False, compare=False)
    sizes: np.ndarray = field(repr=False, compare=False)
    outputs: np.ndarray = field(repr=False, compare=False)

    def probe_inputs(self) -> np.ndarray:
        """The probe rows (one per pair) as they were fed to the target."""
        return _probe_rows(self.n, self.pairs, self.scale)

    def replay(self, node: str | Callable[..., np.ndarray] = "fp32") -> Verification:
        """The tree, evaluated with ``node`` (see :func:`evaluate`) and rounded to the target's output format,
        on the probe rows, against the target's recorded outputs (no target calls)."""
        return compare(self.tree, self.probe_inputs(), self.outputs, node, calls=0, output=self.output_format)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able record."""
        return {"target": self.target, "n": self.n, "shape": str(self.shape), "kind": self.shape.kind,
                "block": self.shape.block, "ways": self.shape.ways, "combine": self.shape.combine,
                "chunk": self.shape.chunk,
                "tree": self.tree.text(), "calls": self.calls, "probes": self.probes, "rounds": self.rounds,
                "method": self.method, "M": f"2^{self.scale.big}", "unit": f"2^{self.scale.unit}"}


class _Prober:
    """Builds probe rows, calls the target in batches of at most max_batch rows, checks every count."""

    def __init__(self, target: SumTarget, scale: ProbeScale) -> None:
        self.target, self.scale, self.n = target, scale, target.n
        self.calls = self.rows = self.rounds = 0
        self.pairs: list[np.ndarray] = []
        self.sizes: list[np.ndarray] = []
        self.outputs: list[np.ndarray] = []

    def _call(self, x: np.ndarray) -> np.ndarray:
        step = self.target.max_batch or len(x)
        out = []
        for start in range(0, len(x), step):
            out.append(self.target(x[start:start + step]))
            self.calls += 1
        self.rows += len(x)
        return np.concatenate(out)

    def measure(self, pairs: np.ndarray) -> np.ndarray:
        """l(i, j) for each pair, in one round (the first adds a row of units only, every round repeats
        its first probe as its last row, so a target that is not deterministic shows)."""
        n, unit, name = self.n, 2.0 ** self.scale.unit, self.target.name
        x = _probe_rows(n, pairs, self.scale)
        first = self.rounds == 0
        parts = ([np.full((1, n), unit)] if first else []) + [x, x[:1]]
        y = self._call(np.concatenate(parts))
        self.rounds += 1
        if first:
            if y[0] != n * unit:
                raise OrderError(f"target {name} returned {float(y[0])!r} for {n} summands all equal to "
                                 f"2^{self.scale.unit}; a sum gives {n * unit!r}: it is not a plain sum of its "
                                 "inputs (a mean, a weighted or non-linear function?), or it does not read them "
                                 "as given")
            y = y[1:]
        y, repeat = y[:-1], y[-1]
        if not (repeat == y[0] or (np.isnan(repeat) and np.isnan(y[0]))):
            raise OrderError(f"target {name} returned {float(y[0])!r} and then {float(repeat)!r} for the same "
                             f"input (M at {pairs[0, 0]}, -M at {pairs[0, 1]}): it is not deterministic, so no "
                             "one order describes it")
        counts = y / unit
        bad = ~(np.isfinite(counts) & (counts == np.round(counts)) & (counts >= 0) & (counts <= n - 2))
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            i, j = int(pairs[k, 0]), int(pairs[k, 1])
            why = ("a partial sum overflowed: M is too large for a format the target keeps partial sums in "
                   "(e.g. fp16 split-K partials with reduced-precision reduction); probe fewer summands or "
                   "turn that reduction off" if not np.isfinite(y[k]) else
                   "the target is not a summation, is not deterministic, or does not absorb the units into "
                   f"M (additions rounded toward zero step by step, or an accumulator wider than "
                   f"{self.target.accumulator.name}: declare it, or pass scale=probe_scale(target, ratio=...))")
            raise OrderError(f"target {name}: the probe with M = 2^{self.scale.big} at {i}, -M at {j} and "
                             f"2^{self.scale.unit} elsewhere returned {float(y[k])!r}, which is "
                             f"{float(counts[k])!r} units, not a whole number between 0 and n - 2 = {n - 2}: {why}")
        sizes = n - counts.astype(np.int64)
        self.pairs.append(pairs)
        self.sizes.append(sizes)
        self.outputs.append(y)
        return sizes


def _inconsistent(name: str, detail: str) -> OrderError:
    return OrderError(f"target {name}: the probe outputs fit no summation tree ({detail}); the target is not "
                      "deterministic, not a summation, adds several terms exactly in one step (an exact "
                      "multi-term adder does not absorb, so probes cannot resolve it), or adds in a wider "
                      "accumulator than declared (M too small to absorb: declare it, or pass "
                      "scale=probe_scale(target, ratio=...))")


def _all_pairs(prober: _Prober, n: int) -> Callable[[np.ndarray], np.ndarray]:
    """Every pair probed in one round; returns the lookup of their sizes."""
    pairs = np.array(list(itertools.combinations(range(n), 2)), dtype=np.int64)
    table = np.zeros((n, n), dtype=np.int64)
    table[pairs[:, 0], pairs[:, 1]] = table[pairs[:, 1], pairs[:, 0]] = prober.measure(pairs)
    return lambda pairs: table[pairs[:, 0], pairs[:, 1]]


def _pivot_rounds(measure: Callable[[np.ndarray], np.ndarray], n: int, name: str) -> list[Any]:
    """The pivot recursion over rounds of probes (``measure``: pairs -> the size of each pair's smallest common
    subtree).  A task is (members, ceiling): find the subtrees that are children of the node of ``ceiling`` inputs and
    hold exactly ``members``; the root task has the ceiling n + 1 (no node is that large).  Returns each task's plan,
    ``("leaf", i)`` or ``("path", pivot, [(size, task), ...], rest)``; a task's sub-tasks come after it."""
    members: list[list[int]] = [list(range(n))]
    ceiling: list[int] = [n + 1]
    plans: list[Any] = [None]
    pending = [0]

    def task(group: list[int], top: int) -> int:
        members.append(group)
        ceiling.append(top)
        plans.append(None)
        pending.append(len(members) - 1)
        return len(members) - 1

    while pending:
        ready = [t for t in pending if len(members[t]) >= 2]
        for t in pending:
            if len(members[t]) == 1:
                plans[t] = ("leaf", members[t][0])
        pending = []
        if not ready:
            break
        pairs = np.array([(members[t][0], q) for t in ready for q in members[t][1:]], dtype=np.int64)
        got = measure(pairs)
        start = 0
        for t in ready:
            pivot, others, top = members[t][0], members[t][1:], ceiling[t]
            sizes = got[start:start + len(others)]
            start += len(others)
            if (sizes > top).any():
                k = int(np.flatnonzero(sizes > top)[0])
                raise _inconsistent(name, f"inputs {pivot} and {others[k]} join in a subtree of {sizes[k]} inputs, "
                                          f"inside one of {top}")
            groups: dict[int, list[int]] = {}
            for q, s in zip(others, sizes.tolist()):
                groups.setdefault(s, []).append(q)
            path = []
            below = 1
            for s in sorted(groups):
                if s == top:
                    continue
                below += len(groups[s])
                if below != s:
                    raise _inconsistent(name, f"input {pivot} joins {len(groups[s])} inputs ({few(groups[s])}) "
                                              f"in a subtree of {s} inputs, but {below} inputs lie in or below it")
                path.append((s, task(groups[s], s)))
            plans[t] = ("path", pivot, path, task(groups[top], top) if top in groups else None)
    return plans


def _assemble(plans: list[Any], n: int, name: str) -> SumTree:
    """The tree of :func:`_pivot_rounds`'s plans, built bottom-up (a task's sub-tasks come after it)."""
    forests: list[list[Any]] = [[] for _ in plans]
    for t in range(len(plans) - 1, -1, -1):
        plan = plans[t]
        if plan[0] == "leaf":
            forests[t] = [plan[1]]
            continue
        _, pivot, path, rest = plan
        node: Any = pivot
        for _s, sub in path:
            node = SumTree((node, *forests[sub]))
        forests[t] = [node] + (forests[rest] if rest is not None else [])
    root = forests[0]
    if len(root) != 1 or not isinstance(root[0], SumTree) or root[0].size != n:
        raise _inconsistent(name, "the subtrees found do not join in one root")
    return root[0]


def infer_order(target: SumTarget, *, method: Literal["adaptive", "all-pairs"] = "adaptive",
                scale: ProbeScale | None = None) -> OrderResult:
    """Infer the summation tree of ``target`` (FPRev's probes; see the module docstring).

    ``method="adaptive"``: the pivot recursion, one target call (or one per ``max_batch`` rows) per
    round; ``"all-pairs"``: every pair in one round.  ``scale``: the probe values (default
    :func:`probe_scale`).  Every measurement is checked against the tree at the end; a target whose outputs
    fit no tree raises :class:`OrderError` saying why.
    """
    if not isinstance(target, SumTarget):
        raise TypeError(f"infer_order takes a SumTarget (see sum_target, dot_target, matmul_target, "
                        f"torch_matmul_target, sim_target), not {type(target).__name__}")
    method = choice("method", method, ("adaptive", "all-pairs"))
    if scale is not None and not isinstance(scale, ProbeScale):
        raise ArgumentError("scale", scale, "must be a ProbeScale", fix="pass probe_scale(target, ratio=...) or None")
    n, name = target.n, target.name
    need = 8.0 * n * n * n / 2 + 16.0 * n * n if method == "all-pairs" else 24.0 * n * n
    memory("method" if method == "all-pairs" else "target", method if method == "all-pairs" else name, need,
           f"the probe rows of n = {n} summands ({method}: n**{3 if method == 'all-pairs' else 2} values)",
           fix="probe fewer summands" + ("; method='adaptive' needs n**2" if method == "all-pairs" else ""))
    scale = probe_scale(target) if scale is None else scale
    prober = _Prober(target, scale)
    measure = _all_pairs(prober, n) if method == "all-pairs" else prober.measure
    tree = _assemble(_pivot_rounds(measure, n, name), n, name)
    all_pairs = np.concatenate(prober.pairs) if prober.pairs else np.zeros((0, 2), np.int64)
    all_sizes = np.concatenate(prober.sizes) if prober.sizes else np.zeros(0, np.int64)
    predicted = tree.lca_sizes()[all_pairs[:, 0], all_pairs[:, 1]]
    if (predicted != all_sizes).any():
        k = int(np.flatnonzero(predicted != all_sizes)[0])
        raise _inconsistent(name, f"inputs {all_pairs[k, 0]} and {all_pairs[k, 1]} measured a common subtree of "
                                  f"{all_sizes[k]} inputs, the tree built from the other probes has {predicted[k]}")
    outputs = np.concatenate(prober.outputs) if prober.outputs else np.zeros(0)
    return OrderResult(tree, describe(tree), name, n, prober.calls, prober.rows, prober.rounds, scale, method,
                       target.output_format, all_pairs, all_sizes, outputs)

