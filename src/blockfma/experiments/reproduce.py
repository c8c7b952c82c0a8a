"""The registry of reproductions: every seed's table or figure one command away (``blockfma reproduce``).

A :class:`Reproduction` names one table or figure of one seed paper (or of the project's own data), how long
it takes at ``scale="ci"`` on a two-core machine (measured, stated here), whether CI runs it, and its function
as a ``"module:function"`` string, imported on first use (as :mod:`blockfma.family` loads implementations), so
listing the reproductions imports none of them.  Every function is ``run(*, scale="ci", progress=None) ->
Result`` (:mod:`blockfma.experiments.result`).

    >>> from blockfma.experiments import reproduce
    >>> reproduce.get("fttn-porting").what
    'Sec. V (porting GEMM)'

:func:`write` puts a :class:`~blockfma.experiments.result.Result` in a folder (CSV, JSON, PNG).
"""

from __future__ import annotations

import difflib
import importlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..arguments import ArgumentError
from ..provenance import provenance
from .multiword import csv_text
from .result import Result, check_scale

__all__ = ["Reproduction", "REPRODUCTIONS", "reproductions", "get", "load", "run", "write", "provenance",
           "files_for", "Missing"]


class Missing(ImportError):
    """A reproduction whose module is not installed (yet): its name and the import error."""


@dataclass(frozen=True)
class Reproduction:
    """One reproduction: ``name`` ("fasi2021-table2"), the seed (``authors``, ``year``, ``title``), ``what``
    (its table or figure), ``seconds`` at ``scale="ci"`` (measured on two busy cores), ``ci`` (whether CI
    runs it) and ``function`` ("module:function", imported on first use)."""

    name: str
    authors: str
    year: int
    title: str
    what: str
    seconds: float
    ci: bool
    function: str

    @property
    def seed(self) -> str:
        """'Authors (year)'."""
        return f"{self.authors} ({self.year})"


_FASI21 = ("Fasi, Higham, Mikaitis, Pranesh", 2021, "Numerical behavior of NVIDIA tensor cores")
_FTTN = ("Li et al. (FTTN)", 2024, "FTTN: Feature-targeted testing for numerical properties of NVIDIA & AMD "
                                   "matrix accelerators")
_VALPEY = ("Valpey, Li, Pai, Gopalakrishnan", 2024, "An SMT formalization of mixed-precision matrix "
                                                    "multiplication")
_VALERO = ("Valero-Lara, Liu, Vetter, Jorquera", 2023, "Mixed-precision S/DGEMM using the TF32 and TF64 "
                                                       "frameworks")
_FASI23 = ("Fasi, Higham, Lopez, Mary, Mikaitis", 2023, "Matrix multiplication in multiword arithmetic")
_OWN = ("blockfma", 2026, "the project's own data and methods")
_E = "blockfma.experiments"


def _r(name: str, seed: tuple[str, int, str], what: str, seconds: float, function: str, ci: bool = True
       ) -> Reproduction:
    return Reproduction(name, seed[0], seed[1], seed[2], what, seconds, ci, function)


#: every reproduction, in seed order; seconds: one cold ``blockfma reproduce NAME`` at scale "ci" on the
#: project's busy two-core machine, imports included (Valpey et al.'s: estimates until their module lands)
REPRODUCTIONS: tuple[Reproduction, ...] = (
    _r("fasi2021-table2", _FASI21, "Table 2 (tests by section)", 1.5, f"{_E}.fasi2021:table_2"),
    _r("fttn-table4", _FTTN, "Table IV", 3.8, f"{_E}.fttn:table_4"),
    _r("fttn-porting", _FTTN, "Sec. V (porting GEMM)", 1.3, f"{_E}.fttn:porting"),
    _r("valpey-table1", _VALPEY, "Table 1", 0.7, f"{_E}.valpey:table_1"),
    _r("valpey-table3", _VALPEY, "Table 3", 0.2, f"{_E}.valpey:table_3"),
    # valpey-table4 runs in CI by test_reproduce_valpey
    _r("valpey-table4", _VALPEY, "Table 4 (query times)", 12.0, f"{_E}.valpey:table_4"),
    _r("valpey-table5", _VALPEY, "Table 5", 4.0, f"{_E}.valpey:table_5"),
    _r("valero-lara-fig4", _VALERO, "Fig. 4 (TF32)", 1.3, f"{_E}.valero_lara:fig_4"),
    _r("valero-lara-fig5", _VALERO, "Fig. 5 (TF64)", 0.7, f"{_E}.valero_lara:fig_5"),
    _r("fasi2023-fig3.1", _FASI23, "Fig. 3.1", 1.6, f"{_E}.fasi2023:fig_3_1"),
    _r("fasi2023-fig4.1", _FASI23, "Fig. 4.1 (throughput; needs a GPU)", 2.4, f"{_E}.fasi2023:fig_4_1"),
    _r("fasi2023-fig4.2", _FASI23, "Fig. 4.2 (simulated units)", 1.6, f"{_E}.fasi2023:fig_4_2"),
    _r("fasi2023-fig4.3", _FASI23, "Fig. 4.3", 1.5, f"{_E}.fasi2023:fig_4_3"),
    _r("fasi2023-fig4.4", _FASI23, "Fig. 4.4 (accuracy panel)", 1.5, f"{_E}.fasi2023:fig_4_4"),
    _r("fasi2023-fig4.5", _FASI23, "Fig. 4.5 (accuracy panel)", 1.2, f"{_E}.fasi2023:fig_4_5"),
    _r("multiword-accuracy", _OWN, "every multiword method on every unit", 0.9, f"{_E}.project:multiword_accuracy"),
    _r("ozaki-slices", _OWN, "Ozaki I and II against slices and moduli", 1.5, f"{_E}.project:ozaki_slices"),
    _r("h100-probe-records", _OWN, "probe table of the H100 records (data/hardware)", 1.6,
       f"{_E}.project:h100_probe_records"),
)


def reproductions() -> list[Reproduction]:
    """Every registered reproduction, in seed order."""
    return list(REPRODUCTIONS)


def get(name: Any) -> Reproduction:
    """The reproduction called ``name`` (case-insensitive); an unknown name is an
    :class:`~blockfma.arguments.ArgumentError` that suggests the nearest one."""
    names = [r.name for r in REPRODUCTIONS]
    if isinstance(name, str):
        for r in REPRODUCTIONS:
            if r.name == name.strip().lower():
                return r
    close = difflib.get_close_matches(str(name).lower(), names, n=1, cutoff=0.3) if isinstance(name, str) else []
    raise ArgumentError("name", name, "is no reproduction",
                        fix=(f"did you mean {close[0]}? " if close else "")
                        + "blockfma reproduce --list names them all")


def load(entry: Reproduction) -> Callable[..., Result]:
    """The function of ``entry``, imported now; :class:`Missing` where its module is not installed."""
    module, _, attr = entry.function.partition(":")
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and module.startswith(exc.name):
            raise Missing(f"reproduction {entry.name}: module {module} is not in this installation") from None
        raise
    return getattr(mod, attr)


def run(name: str | Reproduction, scale: str = "ci", progress: Any = None) -> Result:
    """Run one reproduction at ``scale`` ("ci" or "paper"); ``progress`` as everywhere
    (:func:`blockfma.progress.reporter`)."""
    from ..progress import reporter

    entry = name if isinstance(name, Reproduction) else get(name)
    scale = check_scale(scale)
    say = reporter(progress)
    return load(entry)(scale=scale, progress=say)


# --- writing ---------------------------------------------------------------------------------------------
def files_for(name: str, out_dir: str | os.PathLike[str], *, figure: bool = True) -> list[Path]:
    """The files :func:`write` makes for reproduction ``name`` in ``out_dir`` (CSV, JSON and, with
    ``figure``, PNG), each checked now (:func:`blockfma.files.destination`), so a bad folder fails first."""
    from ..files import destination

    base = Path(out_dir)
    paths = [base / f"{name}.{ext}" for ext in ("csv", "json") + (("png",) if figure else ())]
    for p in paths:
        destination(p, name="out")
    return paths


def write(result: Result, out_dir: str | os.PathLike[str], *, note: Callable[[str], None] | None = None) -> list[Path]:
    """Write ``result`` into the folder ``out_dir`` (made if missing): ``NAME.csv`` (the rows), ``NAME.json``
    (the Result and :func:`provenance`) and, where the Result has a figure, ``NAME.png``.  Without matplotlib
    the PNG is skipped and ``note`` (if given) receives one line saying so.  The Result's figure function is
    given a fresh Figure: it may draw on it (and return None) or return a Figure of its own (the
    :mod:`blockfma.plot` functions make theirs), which is the one saved.  Returns the paths written."""
    from ..files import folder, write_json, write_text
    from ..optional import available, hint

    base = folder(out_dir, create=True, name="out")
    draw = result.figure is not None
    if draw and not available("matplotlib"):
        draw = False
        if note is not None:
            note(f"no figure for {result.name}: matplotlib is missing ({hint('plot')})")
    csv_path, json_path, *png = files_for(result.name, base, figure=draw)
    written = [Path(write_text(csv_path, csv_text(result.rows, result.columns)) or csv_path)]
    doc = {**result.to_dict(), "agreeing": sum(c.agrees for c in result.comparisons),
           "compared": len(result.comparisons), "provenance": provenance()}
    written.append(Path(write_json(json_path, doc) or json_path))
    if png:
        from matplotlib.figure import Figure

        from ..plot import save

        fig = Figure(figsize=(8, 5), layout="constrained")
        drawn = result.figure(fig)  # type: ignore[misc]
        written.append(save(drawn if drawn is not None else fig, png[0]))
    return written


def verdict(result: Result) -> str:
    """One line: how many of the paper's values agree, and how many differences are explained."""
    n = len(result.comparisons)
    diff = result.differences
    unexplained = [c for c in diff if not c.why]
    if not n:
        return f"{result.name}: nothing to compare with the paper ({len(result.rows)} rows; see the notes)"
    own = any(r.name == result.name and r.authors == _OWN[0] for r in REPRODUCTIONS)
    whose = "reference values (bounds, recorded GPU bits)" if own else "paper's values"
    text = f"{result.name}: {n - len(diff)} of {n} of the {whose} agree"
    if diff:
        text += f"; {len(diff) - len(unexplained)} of {len(diff)} differences explained"
    return text


def unexplained(result: Result) -> list[Any]:
    """The comparisons that differ from the paper without a reason."""
    return [c for c in result.differences if not c.why]


def _paired(columns: list[str], rows: list[dict[str, Any]]) -> tuple[list[str], list[dict[str, Any]]]:
    """For display: each pair of columns "X (paper)" and "X (ours)" as one column X, reading "v" where
    both are v and "paper / ours" where they differ."""
    pairs = [c[:-8] for c in columns if c.endswith(" (paper)") and f"{c[:-8]} (ours)" in columns]
    if not pairs:
        return columns, rows
    cols = [c for c in columns if not any(c in (f"{p} (paper)", f"{p} (ours)") for p in pairs)]
    at = min(columns.index(f"{p} (paper)") for p in pairs)
    cols[at:at] = pairs
    out = []
    for r in rows:
        row = {k: v for k, v in r.items()}
        for p in pairs:
            a, b = r.get(f"{p} (paper)"), r.get(f"{p} (ours)")
            row[p] = a if a == b else f"{a} / {b}"
        out.append(row)
    return cols, out


def text(result: Result, columns: Sequence[str] | None = None, *, max_rows: int = 16, max_comparisons: int = 16) -> str:
    """The short table ``blockfma reproduce NAME`` prints: the verdict, the comparisons (every difference with
    its why, then agreeing ones up to ``max_comparisons``), the first ``max_rows`` rows (first nine columns;
    a paper/ours pair of columns as one, "paper / ours" where they differ) and the notes."""
    import textwrap

    from ..report import table

    out = [verdict(result), ""]
    if result.comparisons:
        diff = list(result.differences)
        same = [c for c in result.comparisons if c.agrees][:max(0, max_comparisons - len(diff))]
        rows = [{"": "ok" if c.agrees else ("DIFFERS" if not c.why else "differs"), "what": c.what,
                 "paper": c.paper, "ours": c.ours} for c in diff + same]
        out.append(table(rows, ["", "what", "paper", "ours"]))
        rest = len(result.comparisons) - len(rows)
        if rest:
            out.append(f"... and {rest} more that agree (all in the JSON)")
        out.append("")
        for c in [c for c in result.comparisons if c.why]:
            out += textwrap.wrap(f"{c.what}: {c.why}", 110, initial_indent="* ", subsequent_indent="  ")
        out.append("")
    cols, shown = _paired(list(columns or result.columns), list(result.rows[:max_rows]))
    cols = cols[:9]
    if shown:
        paired = any(f"{c} (paper)" in result.columns for c in cols)
        out.append(f"{result.title}: {len(result.rows)} rows" + (f" (the first {max_rows}; all in the CSV and JSON)"
                                                                 if len(result.rows) > max_rows else "")
                   + ("; a cell 'paper / ours' where they differ" if paired else ""))
        out += [table(shown, cols), ""]
    for n in result.notes:
        out += textwrap.wrap(n, 110, initial_indent="Note: ", subsequent_indent="  ")
    return "\n".join(out).rstrip()
