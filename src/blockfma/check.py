"""The engines held to the exact reference for one model: the check a new datapath needs first.

:func:`check` draws rows built to break fused datapaths (:mod:`blockfma.inputs`: moderate and wide exponents,
cancellation, underflow, signed zeros, special values, extremes, random bit patterns), runs :func:`blockfma.dot` on
every backend that runs the model, and compares the bits with :func:`blockfma.reference.dot_bits` (Python Fractions, one
row at a time).  A family of one's own (docs/extending.md) is right when its fast code agrees with its reference here;
the test suite holds the built-in families to the same standard with many more rows.

    >>> import blockfma as bf
    >>> m = bf.device("V100").model("fp16", "fp32")
    >>> bf.check(m, rows=20).ok
    True
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import reference
from .arguments import ArgumentError, choice, integer, seed as _seed
from .model import Model
from .plan import plan

__all__ = ["check", "Check", "Mismatch", "MAX_PRODUCTS"]


@dataclass(frozen=True)
class Mismatch:
    """One row on which a backend's bits differ from the reference's."""

    backend: str
    family: str  # the input family the row came from
    a: tuple[float, ...]
    b: tuple[float, ...]
    c: float
    got: int
    want: int

    def __str__(self) -> str:
        return (f"{self.backend}, {self.family} row: a={list(self.a)} b={list(self.b)} c={self.c!r}: got "
                f"0x{self.got:x}, the reference 0x{self.want:x}")


@dataclass(frozen=True)
class Check:
    """What :func:`check` compared: the model, k, the rows per backend, and the mismatches (the first few)."""

    model: Model
    k: int
    rows: int
    backends: tuple[str, ...]
    mismatches: tuple[Mismatch, ...] = field(default=())
    skipped: tuple[str, ...] = field(default=())  # backends that do not run the model, with why

    @property
    def ok(self) -> bool:
        """Every backend gave the reference's bits on every row."""
        return not self.mismatches

    def __str__(self) -> str:
        head = (f"{self.model.summary()}: {self.rows} rows of k = {self.k} on {', '.join(self.backends)}: "
                + ("the reference's bits on every row" if self.ok else f"{len(self.mismatches)} mismatch(es)"))
        return "\n".join([head] + [f"  {m}" for m in self.mismatches[:5]] + [f"  skipped {s}" for s in self.skipped])


#: the engines a check compares by default, where they run the model (the GPU engine's code on the CPU)
CHECKED = ("numpy", "numba", "torch", "triton")


def _why_not(model: Model, k: int, backend: str) -> str | None:
    """Why ``backend`` does not run ``model``'s dot products (the engine registry's answer), or None."""
    from .engine import registry

    return None if backend == "auto" else registry.engine(backend).supports(plan(model, k), None)


MAX_PRODUCTS = 10_000_000
"""The most products (k times rows) a check takes: the reference adds each row in Python Fractions, about
ten thousand products a second, so this is already some minutes; more is refused before any row is drawn."""


def check(model: Model, *, k: int | None = None, rows: int = 200, seed: int | None = 0,
          backends: tuple[str, ...] | None = None) -> Check:
    """Every backend that runs ``model`` against :func:`blockfma.reference.dot_bits` on ``rows`` rows of
    length ``k`` (default: two blocks and a bit, so that chaining and padding show), spread evenly over the
    input families.  ``backends``: the engines to compare (default: numpy, and numba and torch on the CPU where
    they run the model); one that does not run the model is refused, not skipped.  ``seed``: of the rows
    (None: fresh entropy).  ``k * rows`` is at most :data:`MAX_PRODUCTS`.  Every argument is checked before
    any row is drawn (:class:`~blockfma.arguments.ArgumentError` naming it)."""
    if not isinstance(model, Model):
        raise TypeError(f"check takes a blockfma.Model, not {type(model).__name__}")
    k = integer("k", k, least=1, none=True)
    rows = integer("rows", rows, least=1)
    seed = _seed("seed", seed)
    if k is None:
        k = 2 * (model.instruction_k or model.block_width or 4) + 1
    if k * rows > MAX_PRODUCTS:
        name, value = ("rows", rows) if rows >= k else ("k", k)
        raise ArgumentError(name, value, f"makes k * rows = {k * rows} products, more than the {MAX_PRODUCTS} a check "
                            f"takes (the reference adds them in Python Fractions: hours)",
                            fix=f"take fewer rows or a shorter k (k = {k}, rows = {rows})")
    why = {b: _why_not(model, k, b) for b in CHECKED}
    run, skipped = [b for b in CHECKED if why[b] is None], [f"{b} ({why[b]})" for b in CHECKED if why[b]]
    if backends is not None:
        run = _listed(backends, run, model, k)
    mismatches, total = _compare(model, k, rows, seed, run)
    return Check(model, k, total, tuple(run), tuple(mismatches), tuple(skipped))


def _listed(backends: Any, run: list[str], model: Model, k: int) -> list[str]:
    """The backends a caller listed, each checked: a backend name, named once, running the model here."""
    from .engine.api import BACKENDS

    if isinstance(backends, str) or not isinstance(backends, (tuple, list)) or not backends:
        raise ArgumentError("backends", backends, "must be a non-empty tuple of backend names",
                            use={"backends": tuple(run)})
    listed: list[str] = []
    for b in backends:
        if not (isinstance(b, str) and b.startswith("cuda:")):
            try:
                b = choice("backends", b, BACKENDS)
            except ArgumentError as exc:
                close = f"; did you mean {exc.use['backends']!r}?" if exc.use else ""
                raise ArgumentError("backends", backends, f"{b!r} is no backend{close}",
                                    fix=f"choose from {', '.join(BACKENDS)}") from None
        if b in listed:
            raise ArgumentError("backends", backends, f"names {b!r} twice", fix="name each backend once")
        why = _why_not(model, k, b)
        if why is not None:
            raise ArgumentError("backends", backends, f"{b} does not run this model here: {why}",
                                use={"backends": tuple(run)})
        listed.append(b)
    return listed


def _compare(model: Model, k: int, rows: int, seed: Any, run: list[str]) -> tuple[list[Mismatch], int]:
    """The mismatches of each backend in ``run`` against the reference on ``rows`` rows spread evenly over
    the input families, and the rows compared."""
    from .engine import dot
    from . import inputs

    f = inputs.Formats.of(model.input_format, model.b_format, model.c_format, model.output_format)
    rng = np.random.default_rng(seed)
    uint = {2: np.uint16, 4: np.uint32, 8: np.uint64}[model.output_format.dtype.itemsize]
    mismatches: list[Mismatch] = []
    per, extra = divmod(rows, len(inputs.FAMILIES))
    total = 0
    for i, family in enumerate(inputs.FAMILIES):
        n = per + (i < extra)  # rows spread evenly: exactly ``rows`` in all
        if n == 0:
            continue
        a, b, c = inputs.rows(family, f, k, n, rng)
        total += len(c)
        want = np.array([reference.dot_bits(model, a[i].tolist(), b[i].tolist(), float(c[i]))
                         for i in range(len(c))], dtype=np.uint64)
        finite = np.isfinite(a).all(axis=1) & np.isfinite(b).all(axis=1) & np.isfinite(c)
        for backend in run:
            sel = finite if backend == "numba" else np.ones_like(finite)  # numba takes finite inputs only
            got = np.asarray(dot(a[sel], b[sel], c[sel], model=model, backend=backend, check=False))
            got = got.view(uint).astype(np.uint64)
            for j in np.flatnonzero(sel)[np.flatnonzero(got != want[sel])][:3]:
                mismatches.append(Mismatch(backend, family, tuple(a[j].tolist()), tuple(b[j].tolist()),
                                           float(c[j]), int(got[j]), int(want[j])))
    return mismatches, total
