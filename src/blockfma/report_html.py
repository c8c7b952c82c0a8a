"""The report as one self-contained HTML page: ``blockfma report --html FILE``.

The page renders the same JSON-ready dict that ``--json`` writes (:func:`blockfma.report.as_json` with its
provenance), so the data gathering (:mod:`blockfma.report`, :mod:`blockfma.replay`) stays apart from the
rendering here.  Everything travels inside the file: the CSS inline, the figures as ``data:`` PNG images
(drawn by :mod:`blockfma.plot`; without matplotlib the page says so and keeps its tables), no script, no
font and no link that leaves the page, so it opens offline and makes no network request.

    >>> from blockfma import report, report_html
    >>> page = report_html.html(report.as_json(report.sections(["V100"], probes=False, verdict=False,
    ...                                                        smt_timeout=None, progress=False)), figures=False)
    >>> page.startswith("<!DOCTYPE html>") and "<table" in page
    True
"""

from __future__ import annotations

import base64
import html as _html
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import files, report

__all__ = ["html", "write", "figure_html", "HEATMAP_PAIRS", "GLANCE", "LONG"]

LONG = 40
"""Tables longer than this many rows are folded (one click opens them); their figure stays in view."""
HEATMAP_PAIRS = ("fp16->fp32", "bf16->fp32", "tf32->fp32", "e4m3fn->fp32")
"""The format pairs the feature table at a glance shows (every pair is in the feature table)."""
GLANCE = ("L", "F", "e_zero", "alignment", "rounding", "subnormals", "nan")
_PALETTE = ("#c6dbef", "#fdd0a2", "#c7e9c0", "#fcbba1", "#dadaeb", "#fff7bc", "#d9d9d9", "#f2c4de", "#a6dba0",
            "#ffe4b3")

_CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;margin:0 auto;max-width:1400px;
padding:0 1.5em 3em;color:#1b1b1b;line-height:1.4}
h1{font-size:1.6em;margin:.8em 0 .2em}h2{font-size:1.25em;margin-top:2em;border-bottom:2px solid #ccd;
padding-bottom:.2em}
table{border-collapse:collapse;font-size:12px;margin:.6em 0}th,td{border:1px solid #ccd;padding:2px 6px;
text-align:left;vertical-align:top}th{background:#eef0f6;position:sticky;top:0}tr:nth-child(even) td{background:#fafafd}
td.num{text-align:right;font-variant-numeric:tabular-nums}code,.hex{font-family:ui-monospace,Menlo,Consolas,monospace;
font-size:11px;word-break:break-all}
.verdict{background:#eef8ee;border:1px solid #8c8;border-radius:6px;padding:.6em 1em;font-size:14px}
.verdict.bad{background:#fdeeee;border-color:#c88}.note{color:#555;font-size:13px}
.ok{color:#176317;font-weight:600}.bad{color:#a11}.prov td:first-child{font-weight:600}
nav a{margin-right:1em}figure{margin:1em 0}figcaption{font-size:13px;color:#444}img{max-width:100%}
.glance tbody th{background:#fff;font-weight:400;position:static}.glance td{text-align:center}
.key{font-size:12px;list-style:none;padding:0}.key span{border:1px solid #ccd;padding:0 5px;margin-right:2px}
"""


def _e(x: Any) -> str:
    return _html.escape(str(x), quote=True)


def _text(value: Any) -> str:
    return format(value, ",") if isinstance(value, int) and not isinstance(value, bool) else report.cell(value)


def _cell(value: Any) -> str:
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return f"<td{' class=num' if number else ''}>{_e(_text(value))}</td>"


def _glance(rows: Sequence[dict[str, Any]], columns: Sequence[str] = GLANCE) -> str:
    """The feature table at a glance: a row per device, instruction and format pair, each feature's values in
    colours of their own (within a column, one colour per value), and the key under it."""
    colours = {c: {v: _PALETTE[i % len(_PALETTE)] for i, v in enumerate(dict.fromkeys(_text(r.get(c)) for r in rows))}
               for c in columns}
    body = "".join("<tr>" + "".join(f"<th>{_e(r[c])}</th>" for c in ("device", "instruction", "pair")) + "".join(
        f'<td style="background:{colours[c][_text(r.get(c))]}">{_e(_text(r.get(c)))}</td>' for c in columns)
        + "</tr>" for r in rows)
    key = "".join(f"<li><b>{_e(c)}</b>: " + " ".join(f'<span style="background:{colour}">{_e(v)}</span>'
                                                        for v, colour in colours[c].items()) + "</li>" for c in columns)
    return (_table([], ["device", "instruction", "pair", *columns], "glance", body)
            + f"<ul class=key><li>Key: a colour stands for one value within its column.</li>{key}</ul>")


def _table(rows: Sequence[dict[str, Any]], columns: Sequence[str], cls: str = "", body: str = "") -> str:
    if not rows and not body:
        return "<p class=note>(none)</p>"
    head = "".join(f"<th>{_e(c)}</th>" for c in columns)
    body = body or "".join("<tr>" + "".join(_cell(r.get(c)) for c in columns) + "</tr>" for r in rows)
    return f"<table{f' class={cls}' if cls else ''}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _provenance(p: dict[str, Any] | None) -> str:
    if not p:
        return ""
    rows = [{"what": k, "value": "none seen" if v is None and k == "gpu" else v} for k, v in p.items()]
    return _table(rows, ["what", "value"], "prov")


def _figure(png: bytes, alt: str, caption: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return (f'<figure><img alt="{_e(alt)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{_e(caption)}</figcaption></figure>")


def figure_html(data: dict[str, Any]) -> dict[str, str]:
    """The page's figures as HTML (section key -> ``<figure>``): the porting GEMM per device.  Empty where
    matplotlib is missing."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        return {}
    from . import plot
    from .experiments import fttn as _fttn

    rows = data.get("sections", {}).get("fttn", {}).get("rows")
    if not rows:
        return {}
    alt = "D per device: " + "; ".join(f"{r['device']} {r['D_fp16']!r}" for r in rows if r.get("D_fp16") is not None)
    return {"fttn": _figure(plot.png_bytes(plot.porting_bars(rows, exact=_fttn.EXACT)), alt,
                            f"D of FTTN's porting GEMM per device, as its distance from the exact answer "
                            f"{_fttn.EXACT!r} on a symmetric log axis, each bar labelled with D; FTTN's "
                            "measurements as marks.")}


def _mismatches(details: Sequence[dict[str, Any]]) -> str:
    bad = [{"data": d["dataset"], **d, **ex} for d in details for ex in d.get("examples", [])]
    if not bad:
        return ("<p class=ok>No mismatch: every recorded row above gives the hardware's bits through the current "
                "preset.</p>")
    return _table(bad, ["device", "data", "path", "row", "a", "b", "c", "hardware", "preset"], "hex")


def _section(key: str, s: dict[str, Any], figs: dict[str, str]) -> str:
    parts = [f'<section id="{_e(key)}"><h2>{_e(s["title"])}</h2>']
    notes = "<ul class=note>" + "".join(f"<li>{_e(n)}</li>" for n in s.get("notes", [])) + "</ul>"
    if key == "verdict":  # the verdict in one line, then what it rests on
        bad = sum(r.get("mismatches", 0) for r in s["rows"])
        parts.append(f'<div class="verdict{" bad" if bad else ""}"><b>{_e(s["intro"])}</b>{notes}</div>')
    elif s.get("intro"):
        parts.append(f"<p>{_e(s['intro'])}</p>")
    parts.append(figs.get(key, ""))
    if key == "features" and (glance := [r for r in s["rows"] if r.get("pair") in HEATMAP_PAIRS]):
        parts.append(_glance(glance))
    table = _table(s["rows"], s["columns"])
    if len(s["rows"]) > LONG:
        table = f"<details><summary>The table: {len(s['rows'])} rows</summary>{table}</details>"
    parts.append(table)
    if key == "discriminate":
        for r in s["rows"]:
            if "a" in r:
                parts.append(f"<p><b>{_e(r['pair'])}</b> ({_e(r['formats'])}, k = {_e(r['k'])}): "
                             f"<code>a = [{_e(', '.join(r['a']))}]</code>, <code>b = [{_e(', '.join(r['b']))}]"
                             f"</code>, <code>c = {_e(r['c'])}</code></p>")
    elif s.get("notes") and key != "verdict":
        parts.append(notes)
    if key == "verdict":
        details = s.get("details", [])
        parts.append("<h3>Mismatches, with their inputs in exact hex</h3>" + _mismatches(details))
        parts.append("<details><summary>Every replayed set</summary>" + _table(
            details, ["source", "dataset", "device", "path", "model", "rows", "mismatches", "skipped", "note"])
            + "</details>")
    parts.append("</section>")
    return "".join(parts)


def html(data: dict[str, Any], *, figures: bool = True) -> str:
    """The page of a report (:func:`blockfma.report.as_json`'s dict, with its provenance), as one string."""
    from . import __version__

    secs = data.get("sections", {})
    figs = figure_html(data) if figures else {}
    prov = data.get("provenance") or {}
    nav = "".join(f'<a href="#{_e(k)}">{_e(s["title"].split(":")[0])}</a>' for k, s in secs.items())
    title = f"blockfma {data.get('blockfma', __version__)} report"
    body = "".join(_section(k, s, figs) for k, s in secs.items())
    missing = "" if figs or not figures else ("<p class=note>Figures left out: matplotlib is not installed "
                                               "(pip install 'blockfma[plot]').</p>")
    return (f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>{_e(title)}</title>"
            f"<meta name=viewport content='width=device-width,initial-scale=1'><style>{_CSS}</style></head><body>"
            f"<header><h1>{_e(title)}</h1><p class=note>{_e(data.get('data_path', ''))}</p>"
            f"{_provenance(prov)}<nav>{nav}</nav></header>{missing}{body}</body></html>\n")


def write(path: str | os.PathLike[str], data: dict[str, Any], *, figures: bool = True) -> Path | None:
    """Write the page of ``data`` to ``path`` atomically (:func:`blockfma.files.write_text`)."""
    return files.write_text(path, html(data, figures=figures))
