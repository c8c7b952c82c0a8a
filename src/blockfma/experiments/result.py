"""What a reproduction returns: its numbers as rows, the paper's claims beside ours, and a figure apart.

Every reproduction (:mod:`blockfma.experiments.reproduce` lists them) is a function
``run(*, scale="ci", progress=None) -> Result``: ``scale`` is ``"ci"`` (small sizes, seconds) or ``"paper"``
(the paper's sizes), ``progress`` as everywhere (:mod:`blockfma.progress`).  Data first, plots apart (as
FPRev keeps them): the rows are the record (CSV/JSON), the figure a function that draws them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Comparison", "Result", "SCALES", "check_scale", "result"]

SCALES = ("ci", "paper")


def check_scale(scale: Any) -> str:
    """``scale`` as given if it is one of :data:`SCALES`, else a clear error naming them."""
    from ..arguments import choice

    return str(choice("scale", scale, SCALES))


@dataclass(frozen=True)
class Comparison:
    """One value the paper states, beside ours: ``what`` (e.g. "V100, test 3"), the paper's value and
    ours as they read (numbers or short text), whether they agree, and, where they do not (or agree only
    in part), ``why``: the reason with its evidence (a record, a later measurement, a different size)."""

    what: str
    paper: Any
    ours: Any
    agrees: bool
    why: str = ""


@dataclass(frozen=True)
class Result:
    """A reproduction's outcome.

    ``name`` and ``title`` (seed and table/figure); ``rows``: the numbers, one dict per row with the keys ``columns``
    (what the CSV holds); ``comparisons``: the paper's values beside ours; ``notes``: where and why the reproduction
    differs from the paper's setting (sizes, devices, what it could not rerun); ``figure``: None, or a function drawing
    the rows onto a matplotlib Figure it is given; ``scale``: the scale it ran at."""

    name: str
    title: str
    columns: tuple[str, ...]
    rows: tuple[dict[str, Any], ...]
    comparisons: tuple[Comparison, ...] = ()
    notes: tuple[str, ...] = ()
    figure: Callable[[Any], None] | None = field(default=None, compare=False)
    scale: str = "ci"

    @property
    def differences(self) -> tuple[Comparison, ...]:
        """The comparisons where ours differs from the paper."""
        return tuple(c for c in self.comparisons if not c.agrees)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict of everything but the figure."""
        return {"name": self.name, "title": self.title, "scale": self.scale, "columns": list(self.columns),
                "rows": [dict(r) for r in self.rows],
                "comparisons": [{"what": c.what, "paper": c.paper, "ours": c.ours, "agrees": c.agrees,
                                 "why": c.why} for c in self.comparisons],
                "notes": list(self.notes)}


def result(name: str, title: str, rows: Sequence[dict[str, Any]], *, columns: Sequence[str] | None = None,
           **rest: Any) -> Result:
    """A :class:`Result` from any sequence of row dicts; ``columns`` default to the keys in first-seen order."""
    if columns is None:
        seen: dict[str, None] = {}
        for r in rows:
            seen.update(dict.fromkeys(r))
        columns = tuple(seen)
    return Result(name, title, tuple(columns), tuple(dict(r) for r in rows), **rest)
