"""`blockfma report --html FILE`: one self-contained page, opened in a real browser (headless Chromium).

The report runs once for the module (four presets, no probes: some seconds) through the command line, with
--html and --json.  The browser tests skip, with the reason, where Debian's ``chromium`` is not installed
(.ci/run installs it where it can).
"""

from __future__ import annotations

import base64
import html
import html.parser
import io
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from blockfma import report_html
from blockfma.cli import main

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y "
                                                             "chromium; .ci/run does it where it can)")
REPORT = ["report", "--devices", "V100,A100,H100,B200", "--fttn-inputs", "fp16", "--no-probes", "--quiet",
          "--smt-timeout", "10"]
# the browser alone, with everything that talks to the network by itself switched off, and no name resolved
BROWSER = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run",
           "--disable-sync", "--disable-component-update", "--disable-default-apps", "--disable-extensions",
           "--host-resolver-rules=MAP * ~NOTFOUND"]


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The report written by the command line as HTML and JSON (once for the module)."""
    folder = tmp_path_factory.mktemp("report")
    html_file, json_file = folder / "report.html", folder / "report.json"
    out = io.StringIO()
    import contextlib

    with contextlib.redirect_stdout(out):
        assert main([*REPORT, "--html", str(html_file), "--json", str(json_file)]) == 0
    return {"html": html_file.read_text(), "path": html_file, "data": json.loads(json_file.read_text()),
            "text": out.getvalue(), "folder": folder}


class _Tags(html.parser.HTMLParser):
    """Every start tag with its attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def _tags(text: str) -> list[tuple[str, dict[str, str | None]]]:
    p = _Tags()
    p.feed(text)
    return p.tags


def _chromium(*args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, *BROWSER, *args], capture_output=True, text=True, timeout=timeout)


def _page_requests(netlog: Path) -> list[str]:
    """The URLs the page itself asked for (network isolation key file://), from Chromium's net log; the
    browser's own requests (time, accounts) are not the page's."""
    doc = json.loads(netlog.read_text())
    start = doc["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    return [e["params"]["url"] for e in doc["events"] if e["type"] == start
            and "file://" in e["params"].get("network_isolation_key", "")
            and not e["params"]["url"].startswith(("file:", "data:"))]


# --- the page as written ---------------------------------------------------------------------------------------
def test_page_holds_the_verdict_first_then_the_sections(page: dict) -> None:
    text = page["html"]
    ids = [a["id"] for t, a in _tags(text) if t == "section"]
    assert ids == ["verdict", "features", "fttn", "discriminate", "questions", "confidence"]
    assert ids == list(page["data"]["sections"])  # --json: the same data
    verdict = page["data"]["sections"]["verdict"]
    assert {r["device"] for r in verdict["rows"]} <= {"V100", "A100", "H100", "B200"}
    assert sum(r["rows"] for r in verdict["rows"] if r["source"] == "record") > 1000
    for row in verdict["rows"]:
        assert f"<td>{row['dataset']}</td>" in text and f"{row['rows']:,}" in text
    assert "all bit for bit" in verdict["intro"] and "all bit for bit" in text


def test_provenance_header(page: dict) -> None:
    prov = page["data"]["provenance"]
    assert {"blockfma", "commit", "dirty", "date", "python", "numpy", "machine", "cpu", "cpus", "gpu"} <= set(prov)
    assert re.fullmatch(r"[0-9a-f]{40}", prov["commit"] or "0" * 40)
    header = page["html"].split("<section", 1)[0]
    for key in ("blockfma", "commit", "date", "python", "numpy", "cpu", "gpu"):
        assert f"<td>{key}</td>" in header
    assert prov["date"] in header


def test_smt_inputs_per_neighbouring_generation_in_exact_hex(page: dict) -> None:
    rows = page["data"]["sections"]["discriminate"]["rows"]
    assert [r["pair"] for r in rows] == ["V100 -> A100", "A100 -> H100", "H100 -> B200"]
    import blockfma as bf

    for r in rows:
        if r["result"] != "differ":
            assert r["result"].startswith("unknown"), r  # a time-out on a loaded machine, said as such
            continue
        inp = r["formats"].split("->")[0]
        a, b, c = ([float.fromhex(x) for x in r["a"]], [float.fromhex(x) for x in r["b"]], float.fromhex(r["c"]))
        old, new = (bf.dot(a, b, c, device=d, input_format=inp, output_format="fp32") for d in r["pair"].split(" -> "))
        assert old.view("uint32") != new.view("uint32")
        assert f"<code>c = {r['c']}</code>" in page["html"]
    # no "at least one differs": each query has --smt-timeout 10, and three time-outs are a right answer on a
    # loaded machine (test_smt.py holds discriminate's witnesses without a time limit)


def test_figures_are_inline_pngs_that_decode(page: dict) -> None:
    from matplotlib import image

    imgs = [a for t, a in _tags(page["html"]) if t == "img"]
    assert len(imgs) == 1
    for a in imgs:
        assert a["src"].startswith("data:image/png;base64,") and a["alt"]
        pixels = image.imread(io.BytesIO(base64.b64decode(a["src"].split(",", 1)[1])), format="png")
        assert pixels.shape[0] > 200 and pixels.shape[1] > 400 and pixels.std() > 0.05


def test_verdict_is_one_line_first_without_a_path_of_this_machine(page: dict) -> None:
    verdict = page["data"]["sections"]["verdict"]
    assert re.fullmatch(r"[\d,]+ recorded hardware rows of [A-Z0-9, ]+ replayed through the presets: all bit for "
                        r"bit\.", verdict["intro"]), verdict["intro"]
    box = page["html"].split('<div class="verdict">', 1)[1].split("</div>", 1)[0]
    assert box.startswith(f"<b>{verdict['intro']}</b><ul")
    text = page["html"] + page["text"] + json.dumps(page["data"]["sections"])
    assert str(Path.home()) not in text and str(Path(__file__).resolve().parents[1]) not in text
    assert not re.search(r"(?<![\w.])/(work|home|tmp|usr|root)/", text)


def _glance(page: dict) -> tuple[list[list[str]], dict[str, dict[str, str]], dict[str, dict[str, str]]]:
    """The feature table at a glance: its rows (cells' text), each column's colour per value in the cells, and the
    key's colour per value."""
    part = page["html"].split("<table class=glance>", 1)[1]
    table, key = part.split("</table>", 1)
    head = re.findall(r"<th>([^<]*)</th>", table.split("</thead>")[0])
    rows = [[html.unescape(c) for c in re.findall(r"<t[hd][^>]*>([^<]*)</t[hd]>", r)]
            for r in table.split("</thead>")[1].split("<tr>")[1:]]
    styles = [re.findall(r'<td style="background:(#[0-9a-f]{6})">', r) for r in table.split("<tr>")[2:]]
    cells: dict[str, dict[str, str]] = {c: {} for c in head[3:]}
    for row, colours in zip(rows, styles, strict=True):
        for c, v, colour in zip(head[3:], row[3:], colours, strict=True):
            assert cells[c].setdefault(v, colour) == colour, (c, v)  # one value, one colour
    keyed = {m[0]: {c: html.unescape(v) for c, v in re.findall(r'<span style="background:(#[0-9a-f]{6})">([^<]*)</span>',
                                                             m[1])}
             for m in re.findall(r"<li><b>([^<]*)</b>: (.*?)</li>", key.split("</ul>")[0])}
    return rows, cells, {c: {v: k for k, v in d.items()} for c, d in keyed.items()}


def test_feature_glance_has_categorical_colours_a_key_and_rows_told_apart(page: dict) -> None:
    """Each value of a column has one colour, different values different colours, the key gives the same colour
    for every value; every row's label (device, instruction, pair) is its own."""
    rows, cells, key = _glance(page)
    assert len(rows) >= 10 and len({tuple(r[:3]) for r in rows}) == len(rows)
    assert {("V100", "mma", "fp16->fp32"), ("V100", "mma.f16c", "fp16->fp32")} <= {tuple(r[:3]) for r in rows}
    assert key == cells and list(key) == list(report_html.GLANCE)
    for values in cells.values():
        assert len(set(values.values())) == len(values)  # a colour stands for one value
    assert {"4", "8", "16"} <= set(cells["L"]) and {"TowardZero", "TowardZero@13b"} <= set(cells["rounding"])


def test_text_of_the_page_and_its_figure_is_at_least_11_px(page: dict) -> None:
    """The CSS sizes of the page's text, and every text of the FTTN figure at the resolution the page embeds it
    (which the 1400 px window of the browser tests shows unscaled)."""
    from matplotlib import image
    from matplotlib.text import Text

    from blockfma import plot
    from blockfma.experiments import fttn

    sizes = [float(x) for x in re.findall(r"font-size:([\d.]+)px", page["html"].split("</style>")[0])]
    assert sizes and min(sizes) >= 11
    fig = plot.porting_bars(page["data"]["sections"]["fttn"]["rows"], exact=fttn.EXACT)
    texts = [t for t in fig.findobj(Text) if t.get_text().strip()]
    assert len(texts) > 10 and min(t.get_fontsize() for t in texts) * 110 / 72 >= 11
    img = next(a for t, a in _tags(page["html"]) if t == "img")
    width = image.imread(io.BytesIO(base64.b64decode(img["src"].split(",", 1)[1])), format="png").shape[1]
    assert width <= 1400 - 2 * 24  # the page's content width at 1400 px: the figure is not scaled down


def test_fttn_figure_labels_each_d_so_the_differences_show(page: dict) -> None:
    """191.875 (H100, B200) and 0.0 (V100, A100) are written on their bars and in the image's text, on an axis of
    D - exact (symmetric log), where 191.875 and 192 lie apart."""
    from matplotlib.text import Text

    from blockfma import plot
    from blockfma.experiments import fttn

    rows = page["data"]["sections"]["fttn"]["rows"]
    fig = plot.porting_bars(rows, exact=fttn.EXACT)
    labels = [t.get_text().strip() for t in fig.axes[0].findobj(Text)]
    assert labels.count("191.875") == 2 and labels.count("0.0") == 2
    assert fig.axes[0].get_xscale() == "symlog"
    x = fig.axes[0].transData.transform
    assert abs(x((fttn.EXACT - 191.875, 0))[0] - x((192.0 - fttn.EXACT, 0))[0]) > 50  # pixels apart
    more = plot.porting_bars([{"device": "MI300X", "D_fp16": 191.8125}, {"device": "exact", "D_fp16": 192.0}],
                             exact=fttn.EXACT)
    assert {"191.8125", "192.0"} <= {t.get_text().strip() for t in more.axes[0].findobj(Text)}
    img = next(a for t, a in _tags(page["html"]) if t == "img")
    assert "H100 191.875" in img["alt"] and "V100 0.0" in img["alt"]


def test_page_refers_to_nothing_outside_itself(page: dict) -> None:
    tags = _tags(page["html"])
    assert not [t for t, _ in tags if t in ("script", "link", "iframe", "object", "embed")]
    refs = [v for _, a in tags for k, v in a.items() if k in ("src", "href", "srcset", "action") and v]
    assert refs and all(v.startswith(("data:", "#")) for v in refs), [v[:60] for v in refs]
    assert not re.search(r"url\(|@import|https?://", page["html"].split("</style>")[0])


def test_report_html_refuses_a_folder_before_the_work(tmp_path, capsys) -> None:
    assert main(["report", "--devices", "V100", "--no-probes", "--html", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("blockfma report: error: --html ") and "is a folder" in err and err.count("\n") == 1


def test_page_written_atomically_through_blockfma_files(page: dict) -> None:
    assert not [p.name for p in page["folder"].iterdir() if p.name not in ("report.html", "report.json")]


# --- in the browser -------------------------------------------------------------------------------------------
@needs_chromium
def test_chromium_renders_tables_and_figures(page: dict) -> None:
    """The DOM Chromium builds holds every table and both images, and a screenshot of the top of the page is
    not blank (dark text and coloured figure pixels on the white page)."""
    from matplotlib import image

    dom = _chromium("--dump-dom", page["path"].as_uri())
    assert dom.returncode == 0, dom.stderr[-500:]
    assert dom.stdout.count("<table") == page["html"].count("<table") >= 6
    assert dom.stdout.count("<img") == 1
    # the new figures as Chromium built them: the key, labels that tell rows apart, the FTTN values in the image
    assert '<ul class="key"><li>Key: a colour stands for one value within its column.</li>' in dom.stdout
    assert "<th>mma.f16c</th>" in dom.stdout and 'alt="D per device: V100 0.0; A100 0.0; H100 191.875' in dom.stdout
    shot = page["folder"] / "shot.png"
    run = _chromium(f"--screenshot={shot}", "--window-size=1400,2400", page["path"].as_uri())
    assert run.returncode == 0 and shot.exists(), run.stderr[-500:]
    pixels = image.imread(shot)[..., :3]
    assert pixels.shape[:2] == (2400, 1400)
    ink = (pixels.mean(axis=2) < 0.5).mean()  # text, rules and the figure's dark cells
    colour = (pixels.max(axis=2) - pixels.min(axis=2) > 0.3).mean()  # the heat-map's colours
    assert ink > 0.01 and colour > 0.01, (ink, colour)
    shot.unlink()


@needs_chromium
def test_chromium_loads_the_page_without_a_network_request(page: dict, tmp_path) -> None:
    """Chromium's net log, with every host name unresolvable: the page asks for nothing; the same check on a
    page with one remote image and one remote style sheet finds both (so it can fail)."""
    log = tmp_path / "net.json"
    assert _chromium(f"--log-net-log={log}", "--dump-dom", page["path"].as_uri()).returncode == 0
    assert _page_requests(log) == []
    control = tmp_path / "control.html"
    control.write_text('<!DOCTYPE html><img src="http://example.com/x.png">'
                       '<link rel=stylesheet href="https://example.org/a.css">')
    log2 = tmp_path / "net2.json"
    _chromium(f"--log-net-log={log2}", "--dump-dom", control.as_uri())
    assert sorted(_page_requests(log2)) == ["http://example.com/x.png", "https://example.org/a.css"]
