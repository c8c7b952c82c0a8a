"""Figures from the rows of :mod:`blockfma.experiments.multiword`, one function per figure (matplotlib).

matplotlib is imported when a figure is drawn, not with this module; without it every function raises ImportError with
the hint ``pip install 'blockfma[plot]'``.  Each function takes the rows (as the experiment returns them or as
:func:`blockfma.experiments.multiword.read_csv` reads them back), returns a ``matplotlib.figure.Figure`` (no pyplot, no
global state) and, given ``path``, saves it as PNG atomically. Axes are log-log as in the papers (the Ozaki sweep:
linear slice counts, log errors); every figure notes the sizes simulated here, which are smaller than the seeds'.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .optional import hint, require

__all__ = ["HINT", "save", "fig_3_1", "fig_4_3", "fig_4_4", "fig_4_5", "valero_lara_fig_4",
           "valero_lara_fig_5", "ozaki_slices", "accuracy_table", "porting_bars", "png_bytes"]

HINT = hint("plot")
Rows = Sequence[dict[str, Any]]

_COLORS = {
    "fp16": "#d62728", "double-fp16": "#1f77b4", "double-fp16 (4 products)": "#17becf",
    "fp32 (FMA chain)": "#2ca02c", "fp32 (BLAS)": "#555555", "double-fp16 (Alg. 4.1)": "#000000",
    "SGEMM": "#555555", "DGEMM": "#000000", "1xFP16": "#d62728", "1xTF32": "#ff7f0e", "3xTF32": "#1f77b4",
    "4xTF32": "#17becf", "1xTF64": "#ff7f0e", "3xTF64": "#1f77b4", "4xTF64": "#17becf",
    "Ozaki I": "#1f77b4", "Ozaki II": "#d62728",
}
_MARKERS = "os^vD<>ph*x+"


def _figure(nrows: int, ncols: int, width: float = 5.2, height: float = 4.0) -> Any:
    """A constrained-layout Figure with an nrows x ncols grid of axes (always a 2-D array)."""
    figure = require("matplotlib.figure", extra="plot", needed_by="blockfma.plot", what="matplotlib")
    fig = figure.Figure(figsize=(width * ncols, height * nrows + 0.6), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def save(fig: Any, path: str | os.PathLike[str]) -> Path:
    """Save ``fig`` as PNG at ``path``, atomically (a temporary file in the same folder, then renamed), through
    :func:`blockfma.files.atomic_path`: a regular file (a symbolic link is followed) in a folder that exists;
    ``"-"`` (standard output) is refused, a PNG not being text."""
    from .arguments import ArgumentError
    from .files import STDOUT, atomic_path, destination

    if isinstance(path, str) and path == STDOUT:
        raise ArgumentError("path", path, "a figure is a PNG image, not text for standard output",
                            fix="name a .png file")
    destination(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    return Path(path)


def _num(v: Any) -> float:
    """A cell as a float (None or '' -> nan)."""
    return math.nan if v is None or v == "" else float(v)


def _select(rows: Rows, **match: Any) -> list[dict[str, Any]]:
    return [r for r in rows if all(r.get(k) == v or (v == "" and r.get(k) is None) for k, v in match.items())]


def _unique(rows: Rows, key: str) -> list[Any]:
    return list(dict.fromkeys(r.get(key) for r in rows))


def _curve(rows: Rows, x: str, y: str) -> tuple[list[float], list[float]]:
    """(x, y) sorted by x, dropping points whose y is missing or not positive (log axes)."""
    pts = sorted((_num(r[x]), _num(r.get(y))) for r in rows)
    pts = [(a, b) for a, b in pts if not math.isnan(b) and b > 0]
    return [a for a, _ in pts], [b for _, b in pts]


def _line(ax: Any, rows: Rows, label: str, *, x: str = "n", y: str = "componentwise", color: str | None = None,
          marker: str = "o", linestyle: str = "-", **kw: Any) -> None:
    xs, ys = _curve(rows, x, y)
    if xs:
        ax.plot(xs, ys, marker=marker, linestyle=linestyle, color=color, label=label, markersize=4, linewidth=1.3, **kw)


def _loglog(ax: Any, title: str, xlabel: str = "n (inner dimension)", ylabel: str = "componentwise error") -> None:
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="major", alpha=0.3)


def _legend(ax: Any, fontsize: int = 7) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=fontsize, loc="best", framealpha=0.75)


def _note(fig: Any, title: str, rows: Rows, seed_text: str) -> None:
    """The figure's title and a footnote: the sizes simulated here, and the seed's."""
    from .experiments.multiword import sizes_note

    fig.suptitle(title, fontsize=11)
    scale = _unique(rows, "scale")
    fig.supxlabel(f"simulated here: {sizes_note(rows)} (scale {', '.join(map(str, scale))}); {seed_text}",
                  x=0.01, ha="left", fontsize=7.5, color="#444444")  # constrained layout keeps room for it


def _empty(rows: Rows, name: str) -> None:
    if not rows:
        raise ValueError(f"no rows to plot for {name}")


# --------------------------------------------------------------------------------------------- Fasi et al.

def fig_3_1(rows: Rows, path: str | os.PathLike[str] | None = None) -> Any:
    """Fasi et al. Fig. 3.1: componentwise error against n, one panel per distribution; Theorem 2.1's
    bounds dashed (fp16, double-fp16)."""
    _empty(rows, "fig_3_1")
    dists = _unique(rows, "distribution")
    fig, axes = _figure(1, len(dists))
    for ax, dist in zip(axes[0], dists):
        sub = _select(rows, distribution=dist)
        for i, series in enumerate(_unique(sub, "series")):
            srows = _select(sub, series=series)
            c = _COLORS.get(series)
            _line(ax, srows, series, color=c, marker=_MARKERS[i % len(_MARKERS)])
            if series in ("fp16", "double-fp16"):
                _line(ax, srows, f"bound {series}", y="bound", color=c, marker="", linestyle="--", alpha=0.6)
        _loglog(ax, f"entries uniform on {dist.removeprefix('uniform')}")
        _legend(ax)
    _note(fig, "Fasi et al. Fig. 3.1 (simulated): RN block FMA of width 1, fp16 words, fp32 accumulation",
          rows, "seed: m = q = 16, n = 2^9..2^20 with CPFloat")
    return _done(fig, path)


def fig_4_3(rows: Rows, path: str | os.PathLike[str] | None = None) -> Any:
    """Fasi et al. Fig. 4.3: rows of panels per distribution, columns per simulated unit (RZ V100, RN,
    ...); fp32 (BLAS) in grey in every panel."""
    _empty(rows, "fig_4_3")
    dists = _unique(rows, "distribution")
    units = [p for p in _unique(rows, "panel") if p != "baseline"]
    fig, axes = _figure(len(dists), len(units), width=4.6, height=3.6)
    for i, dist in enumerate(dists):
        base = _select(rows, distribution=dist, panel="baseline")
        for j, unit in enumerate(units):
            ax = axes[i][j]
            sub = _select(rows, distribution=dist, panel=unit)
            for k, series in enumerate(_unique(sub, "series")):
                srows = _select(sub, series=series)
                _line(ax, srows, series, color=_COLORS.get(series), marker=_MARKERS[k])
                _line(ax, srows, "", y="bound", color=_COLORS.get(series), marker="", linestyle="--", alpha=0.6)
            _line(ax, base, "fp32 (BLAS)", color=_COLORS["fp32 (BLAS)"], marker=".", alpha=0.8)
            _loglog(ax, f"{unit}; {dist.removeprefix('uniform')}")
            _legend(ax)
    split = _unique(rows, "split_k")
    _note(fig, "Fasi et al. Fig. 4.3 (simulated): block FMAs of width 4, truncation (V100) against round to "
          f"nearest; dashed: Theorem 2.1; split-K = {', '.join(map(str, split))}", rows,
          "seed: m = q = 16, n to 2^20, (0,1] only, CPFloat")
    return _done(fig, path)


def _fabsum_blocks(rows: Rows) -> list[int]:
    """The FABsum block sizes of the rows (not the split-K blocks of Algorithm 4.1), ascending."""
    return sorted({int(_num(r["block"])) for r in rows if r.get("fabsum") and not math.isnan(_num(r.get("block")))})


def _fabsum_style(series: str, blocks: list[Any]) -> tuple[str, str, str]:
    """(color, linestyle, marker) for a FABsum series, the marker by block size as in the seed."""
    block = series.split("b=")[-1] if "b=" in series else ""
    idx = blocks.index(int(block)) if block.isdigit() and int(block) in blocks else 0
    marker = "s*^Dvo"[idx % 6]
    if series.startswith("FABsum-v1"):
        return "#6baed6", "-", marker
    if series.startswith("FABsum-v2") or series.startswith("double-fp16 FABsum"):
        return "#08306b", "--", marker
    if series.startswith("fp16 FABsum"):
        return "#d62728", ":", marker
    if series.startswith("double-fp16 (Alg. 4.1, split-K"):
        return "#7f7f7f", "-.", "o"
    return _COLORS.get(series, "#000000"), "-", "o"


def fig_4_4(rows: Rows, path: str | os.PathLike[str] | None = None) -> Any:
    """Fasi et al. Fig. 4.4 (right panel, accuracy): one panel per device; FABsum-v1 solid, v2 dashed,
    markers by block size; Algorithm 4.1 (cuBLAS order) black; fp32 grey."""
    _empty(rows, "fig_4_4")
    devices = [p for p in _unique(rows, "panel") if p != "baseline"]
    base = _select(rows, panel="baseline")
    blocks = _fabsum_blocks(rows)
    fig, axes = _figure(1, len(devices))
    for ax, dev in zip(axes[0], devices):
        sub = _select(rows, panel=dev)
        for series in _unique(sub, "series"):
            c, ls, mk = _fabsum_style(series, blocks)
            _line(ax, _select(sub, series=series), series, color=c, linestyle=ls, marker=mk)
        _line(ax, base, "fp32 (BLAS)", color=_COLORS["fp32 (BLAS)"], marker=".")
        _loglog(ax, f"{dev}: double-fp16 on (0,1]")
        _legend(ax)
    _note(fig, "Fasi et al. Fig. 4.4 (simulated, accuracy only): MMM with FABsum for A1B1 (Alg. 4.4) vs cuBLAS "
          "order (Alg. 4.1)", rows, "seed: 512 x n times n x 512 on V100 and A100 GPUs")
    return _done(fig, path)


def fig_4_5(rows: Rows, path: str | os.PathLike[str] | None = None) -> Any:
    """Fasi et al. Fig. 4.5 (right panel, accuracy): FABsum-v2 in fp16 for several b against double-fp16
    FABsum-v2 with b = 256, on the A100 preset."""
    _empty(rows, "fig_4_5")
    blocks = _fabsum_blocks(rows)
    fig, axes = _figure(1, 1, width=6.0)
    ax = axes[0][0]
    for series in _unique(rows, "series"):
        c, ls, mk = _fabsum_style(series, blocks)
        _line(ax, _select(rows, series=series), series, color=c, linestyle=ls, marker=mk)
    dev = ", ".join(p for p in _unique(rows, "panel") if p)
    _loglog(ax, f"{dev}: FABsum-v2, fp16 vs double-fp16, (0,1]")
    _legend(ax)
    _note(fig, "Fasi et al. Fig. 4.5 (simulated, accuracy only)", rows, "seed: 512 x n times n x 512, A100 GPU")
    return _done(fig, path)


# ------------------------------------------------------------------------------------ Valero-Lara et al.

def _valero(rows: Rows, path: Any, title: str, base: str, seed_text: str) -> Any:
    fig, axes = _figure(1, 2)
    left, right = axes[0]
    styles = ("-", "--", "-.", ":")  # curves that coincide (1xFP16 and 1xTF32, 3x and 4x) stay visible
    for i, series in enumerate(_unique(rows, "series")):
        srows = _select(rows, series=series)
        style = dict(color=_COLORS.get(series), marker=_MARKERS[i % len(_MARKERS)], linestyle=styles[i % 4])
        _line(left, srows, series, y="l2", **style)
        if series != base:
            _line(right, srows, f"|{base} - {series}|", y="vs_baseline_l2", **style)
    _loglog(left, "forward error against the exact product", "matrix size n (n x n)",
            "l2 error ||C - C^||_F / (||A||_F ||B||_F)")
    _loglog(right, f"distance to {base}", "matrix size n (n x n)", f"||{base} - C^||_F / (||A||_F ||B||_F)")
    _legend(left)
    _legend(right)
    _note(fig, title, rows, seed_text)
    return _done(fig, path)


def valero_lara_fig_4(rows: Rows, path: str | os.PathLike[str] | None = None) -> Any:
    """Valero-Lara et al. Fig. 4: l2 error of SGEMM, 1xFP16 and 1x/3x/4xTF32 (left) and their distance to
    SGEMM (right) against n."""
    _empty(rows, "valero_lara_fig_4")
    dev = ", ".join(d for d in _unique(rows, "device") if d)
    return _valero(rows, path, f"Valero-Lara et al. Fig. 4 (simulated {dev}): SGEMM and TF32 multiword", "SGEMM",
                   "seed: n = 128..32768 on an A100")


def valero_lara_fig_5(rows: Rows, path: str | os.PathLike[str] | None = None) -> Any:
    """Valero-Lara et al. Fig. 5: l2 error of DGEMM, SGEMM and 1x/3x/4xTF64 (left) and their distance to
    DGEMM (right) against n."""
    _empty(rows, "valero_lara_fig_5")
    return _valero(rows, path, "Valero-Lara et al. Fig. 5 (simulated): DGEMM and the proposed TF64", "DGEMM",
                   "seed: n = 128..16384, TF64 mimicked on a CPU")


# ------------------------------------------------------------------------------------------------- Ozaki

def ozaki_slices(rows: Rows, path: str | os.PathLike[str] | None = None) -> Any:
    """Ozaki I against slices and Ozaki II against moduli (componentwise solid, normwise dashed), one panel
    per distribution, with the fp64 reference lines."""
    _empty(rows, "ozaki_slices")
    dists = _unique(rows, "distribution")
    fig, axes = _figure(1, len(dists))
    for ax, dist in zip(axes[0], dists):
        sub = _select(rows, distribution=dist)
        for series, x in (("Ozaki I", "slices"), ("Ozaki II", "moduli")):
            srows = _select(sub, series=series)
            c = _COLORS[series]
            _line(ax, srows, f"{series} (componentwise)", x=x, color=c)
            _line(ax, srows, f"{series} (normwise ||.||_F / ||C||_F)", x=x, y="normwise_2", color=c,
                  linestyle="--", marker="x")
        for i, series in enumerate(s for s in _unique(sub, "series") if s.startswith("fp64")):
            r = _select(sub, series=series)[0]
            ax.axhline(_num(r["componentwise"]), color="#000000" if i == 0 else "#2ca02c",
                       linestyle="-" if i == 0 else ":", linewidth=1.0, label=f"{series} (componentwise)")
        ax.set_yscale("log")
        ax.set_xlabel("slices (Ozaki I) / moduli (Ozaki II)")
        ax.set_ylabel("error")
        ax.set_title(f"{dist}, exponent spread {_unique(sub, 'exponent_spread')[0]}", fontsize=10)
        ax.grid(True, alpha=0.3)
        _legend(ax)
    notes = [n for n in _unique(rows, "note") if n]
    _note(fig, "Ozaki schemes on an exact int8 unit: accuracy against slices and moduli", rows,
          "; ".join(notes) if notes else "no seed figure")
    return _done(fig, path)


def accuracy_table(rows: Rows, path: str | os.PathLike[str] | None = None) -> Any:
    """Every method's componentwise error (log scale), one marker per device and one panel per distribution; the
    worst-case bound as a dash where there is one; a device without the method's unit has no marker."""
    _empty(rows, "accuracy_table")
    dists = _unique(rows, "distribution")
    methods = _unique(rows, "method")
    devices = _unique(rows, "device")
    fig, axes = _figure(1, len(dists), width=7.5)
    for ax, dist in zip(axes[0], dists):
        sub = _select(rows, distribution=dist)
        for j, dev in enumerate(devices):
            pts = [(i + (j - (len(devices) - 1) / 2) * 0.22, _num(r.get("componentwise")))
                   for i, m in enumerate(methods) for r in _select(sub, method=m, device=dev)]
            pts = [(x, y) for x, y in pts if not math.isnan(y) and y > 0]
            ax.plot([x for x, _ in pts], [y for _, y in pts], linestyle="", marker=_MARKERS[j], markersize=5, label=dev)
        bounds = [(i, _num(r.get("bound"))) for i, m in enumerate(methods) for r in _select(sub, method=m)]
        bounds = sorted({(x, y) for x, y in bounds if not math.isnan(y) and y > 0})
        ax.plot([x for x, _ in bounds], [y for _, y in bounds], linestyle="", marker="_", markersize=14,
                color="#555555", label="worst-case bound")
        ax.set_yscale("log")
        ax.set_xticks(range(len(methods)), [str(m) for m in methods], rotation=60, ha="right", fontsize=8)
        ax.set_ylabel("componentwise error")
        ax.set_title(dist, fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
        _legend(ax)
    _note(fig, "Every method on the presets' units (fp16: each device; bf16, tf32: where the device has them)",
          rows, "the seeds' distributions; fp64-level methods on fp64 matrices against the exact product")
    return _done(fig, path)


# ---------------------------------------------------------------------------------------------- the report

def porting_bars(rows: Rows, exact: float, path: str | os.PathLike[str] | None = None) -> Any:
    """FTTN's porting GEMM per device (:func:`blockfma.report.fttn_rows`): D with fp16 (and bf16) inputs as
    horizontal bars of D - ``exact`` on a symmetric log axis, so that 191.875, 191.8125 and 192 stand apart as
    clearly as 0 and 255.875, each bar labelled with D; FTTN's published value as a mark."""
    fig, axes = _figure(1, 1, width=8.0, height=0.45 * max(len(rows), 4) + 1.2)
    ax = axes[0][0]
    ys = range(len(rows))
    for shift, key, color in ((-0.2, "D_fp16", "#1f77b4"), (0.2, "D_bf16", "#ff7f0e")):
        vals = [_num(r.get(key)) for r in rows]
        ax.barh([y + shift for y in ys], [0.0 if math.isnan(v) else v - exact for v in vals], height=0.38,
                color=color, label=key.replace("D_", "D, ") + " inputs")
        for y, v in zip(ys, vals):
            if not math.isnan(v):
                ax.annotate(f" {v!r} ", (v - exact, y + shift), va="center", ha="left" if v >= exact else "right",
                            fontsize=8.5)
    ax.plot([_num(r.get("FTTN")) - exact for r in rows], [y - 0.2 for y in ys], "k|", markersize=12,
            label="FTTN's measurement")  # nan (not measured by FTTN): no mark
    ax.set_xscale("symlog", linthresh=2**-6, linscale=0.5)
    ax.set_xticks(ticks := [-100, -10, -1, -0.1, 0, 0.1, 1, 10, 100], [f"{t:g}" for t in ticks])
    ax.set_xlim(-2**10, 2**9)
    ax.axvline(0, color="#2ca02c", linestyle="--", linewidth=1, label=f"exact {exact!r}")
    ax.set_yticks(list(ys), [r["device"] for r in rows], fontsize=9)
    ax.invert_yaxis()
    ax.set_xlabel(f"D - {exact!r} (symmetric log scale; D = C - A·B, C = 2^20, K = 8192)")
    ax.set_title("FTTN's porting GEMM on each device: what each loses of the exact answer", fontsize=10)
    _legend(ax, fontsize=8.5)
    return _done(fig, path)


def png_bytes(fig: Any, dpi: int = 110) -> bytes:
    """The figure as PNG bytes (for a page that carries its figures inline)."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def _done(fig: Any, path: str | os.PathLike[str] | None) -> Any:
    if path is not None:
        save(fig, path)
    return fig
