"""The report's verdict: recorded hardware outputs replayed through the presets (blockfma.replay).

The replays must agree with the tests that hold the presets to the same data (tests/test_golden.py,
test_hardware_records.py, test_probe_records.py), and must see a wrong model: a mismatch is counted, and its
inputs, kept in exact hex, give the hardware's bits through the preset and the wrong bits through the model.
"""

from __future__ import annotations

import numpy as np
import pytest

import blockfma as bf
from blockfma import replay, report, report_html

from helpers import golden_dir


@pytest.fixture(scope="module")
def replays() -> list[replay.Replay]:
    return replay.records() + replay.probe_records()


def test_records_and_probe_records_replay_bit_for_bit(replays) -> None:
    records = [r for r in replays if r.source == "record"]
    probes = [r for r in replays if r.source == "probe record"]
    assert len(records) >= 60 and sum(r.rows for r in records) > 2000
    assert len(probes) >= 35 and sum(r.rows for r in probes) > 30_000
    assert all(r.agrees for r in replays), [(r.dataset, r.path, r.mismatches) for r in replays if not r.agrees]
    # rows not rebuilt: only where the record says it did not keep its NaN codes
    assert {r.dataset for r in replays if r.skipped} == {"h100-mma-wgmma-run2.json"}


def test_a_wrong_model_is_seen_with_its_inputs_in_exact_hex() -> None:
    rec, name, entry, _ = next(p for p in replay.record_paths() if p[1] == "mma.m16n8k16.f32.f16.f16.f32"
                               and p[0] == "h100-mma-wgmma.json")
    wrong = bf.device("V100").model("fp16", "fp32")  # L = 4, F = 23 in place of the H100's 16 and 25
    r = replay.record_path(rec, name, entry, model=wrong)
    assert 0 < r.mismatches <= r.rows and not r.agrees
    assert len(r.examples) == min(r.mismatches, replay.EXAMPLES)
    for ex in r.examples:
        a, b, c = ([float.fromhex(x) for x in ex["a"]], [float.fromhex(x) for x in ex["b"]], float.fromhex(ex["c"]))
        right = bf.dot(a, b, c, model=replay.record_preset(name, entry["formats"]))
        assert f"0x{int(np.float32(right).view(np.uint32)):08x}" == ex["hardware"]
        assert f"0x{int(np.float32(bf.dot(a, b, c, model=wrong)).view(np.uint32)):08x}" == ex["preset"]


def test_verdict_says_what_differs_and_the_page_shows_each_mismatch_in_hex() -> None:
    rec, name, entry, _ = replay.record_paths()[0]
    bad = replay.record_path(rec, name, entry, model=bf.device("V100").model("fp16", "fp32"))
    good = replay.record_path(rec, name, entry)
    lines = report.verdict_lines([good], [bf.device("H100"), bf.device("MI100")], [])
    assert "all bit for bit" in lines[0] and "No hardware data here for MI100" in lines[1]
    lines = report.verdict_lines([bad], [bf.device("H100")], [])
    assert f"{bad.mismatches:,} rows differ, in H100 {name}" in lines[0]
    rows = report.verdict_rows([good, bad])
    assert rows[0]["mismatches"] == bad.mismatches and rows[0]["verdict"].startswith(f"{bad.mismatches} rows differ")
    sec = report.Section("verdict", "Verdict", report.VERDICT_COLUMNS, rows, intro=" ".join(lines),
                         details=[bad.row()])
    page = report_html.html(report.as_json([sec]), figures=False)
    assert 'class="verdict bad"' in page and "No mismatch" not in page
    for ex in bad.examples:
        assert ex["hardware"] in page and ex["preset"] in page and ex["c"] in page
        assert ", ".join(ex["a"]) in page


def test_verdict_headline_is_one_line_and_names_no_path_of_this_machine() -> None:
    """The section's intro is the verdict in one line (what differs counted); the lines it rests on follow as
    notes, the missing golden data said without the folder searched on this machine."""
    from types import SimpleNamespace

    rec, name, entry, _ = replay.record_paths()[0]
    bad = replay.record_path(rec, name, entry, model=bf.device("V100").model("fp16", "fp32"))
    fake = SimpleNamespace(replay_all=lambda *args, **kwargs: [bad],
                           golden_missing=lambda: "golden data not found at /home/someone/golden (BLOCKFMA_GOLDEN unset)")
    sec = report._verdict_section([bf.device("H100")], [], None, fake)
    assert sec.intro == (f"{bad.rows:,} recorded hardware rows of H100 replayed through the presets: "
                         f"{bad.mismatches:,} of them differ.")
    assert any(n.startswith("Not replayed: the golden data of Khattak & Mikaitis, not found here") for n in sec.notes)
    assert "/home" not in sec.intro + " ".join(sec.notes)


def test_golden_data_replayed_where_present() -> None:
    golden_dir("khattak-mikaitis")  # skips with the reason where absent
    sets = replay.golden(devices=["V100", "A100"])
    assert sorted((r.device, r.path) for r in sets) == [("A100", "bf16->fp32"), ("A100", "fp16->fp16"),
                                                        ("A100", "fp16->fp32"), ("A100", "tf32->fp32"),
                                                        ("V100", "fp16->fp16"), ("V100", "fp16->fp32")]
    assert all(r.agrees and r.rows == 5000 for r in sets)
    normalised = bf.device("V100").model("fp16", "fp32").replace(product_exponent="normalized")
    wrong = replay.golden_set("V100", "fp16", "fp32", model=normalised)
    assert wrong.mismatches > 100 and len(wrong.examples) == replay.EXAMPLES


def test_golden_data_absent_is_said_not_hidden(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("BLOCKFMA_GOLDEN", str(tmp_path))
    assert replay.golden() == []
    why = replay.golden_missing()
    assert why.startswith(f"golden data not found at {tmp_path / 'khattak-mikaitis'} (BLOCKFMA_GOLDEN=")
    lines = report.verdict_lines([], [bf.device("V100")], [], why)
    assert lines[0] == f"Not replayed: {why}."


def test_probes_run_in_worker_processes_as_here(tmp_path, monkeypatch) -> None:
    """Two targets in two spawned processes give the rows one process gives (seconds aside), and a real row
    comes back from the on-disk cache unchanged."""
    here = report.probe_rows(["V100", "MI100"], verify=300, gpu=False, workers=1, progress=False)
    there = report.probe_rows(["V100", "MI100"], verify=300, gpu=False, workers=2, progress=False)
    for a, b in zip(here, there, strict=True):
        assert {k: v for k, v in a.items() if k != "seconds"} == {k: v for k, v in b.items() if k != "seconds"}
    assert [r["target"] for r in here] == ["sim:V100", "sim:MI100"] and all(r["same as preset"] for r in here)
    monkeypatch.setenv("BLOCKFMA_CACHE", str(tmp_path))
    job = ("sim:MI100", "fp16", "fp32", ("MI100", "fp16", "fp32", None))
    assert report._probe_cache(job, 300) is None
    report._probe_cache(job, 300, here[1])
    assert report._probe_cache(job, 300) == here[1] and report._probe_cache(job, 299) is None


def test_smt_timeout_is_checked_before_the_work() -> None:
    with pytest.raises(ValueError, match=r"^smt_timeout=-1: must be a positive number of seconds"):
        report.sections(["V100"], probes=False, smt_timeout=-1)


# --- the probe rows kept on disk ---------------------------------------------------------------------------------
def _fake_probe(calls: list) -> object:
    def probe_row(spec, inp, out, preset, verify=2000):
        calls.append(spec)
        return {"target": spec, "pair": f"{inp}->{out}", "k": 4, "verified": True, "summary": f"{spec} model",
                "seconds": 1.5, "same as preset": True, "F": None}
    return probe_row


def test_probe_rows_are_read_from_the_cache_of_the_same_code(tmp_path, monkeypatch) -> None:
    """A second run reads the rows the first kept (saying so), in the jobs' order; another verify, other code
    (another source hash) or an unreadable file probe again; BLOCKFMA_CACHE=off keeps nothing."""
    calls: list = []
    monkeypatch.setattr(report, "probe_row", _fake_probe(calls))
    monkeypatch.setenv("BLOCKFMA_CACHE", str(tmp_path))
    first = report.probe_rows(["V100", "MI100"], verify=300, gpu=False, workers=1, progress=False)
    assert calls == ["sim:V100", "sim:MI100"] and len(list(tmp_path.glob("probe-*.json"))) == 2
    lines: list = []
    again = report.probe_rows(["MI100", "V100"], verify=300, gpu=False, workers=1, progress=lines.append)
    assert again == first and calls == ["sim:V100", "sim:MI100"]
    assert lines == ["probed sim:V100 fp16->fp32 (1 of 2): sim:V100 model (cached)",
                     "probed sim:MI100 fp16->fp32 (2 of 2): sim:MI100 model (cached)"]
    report.probe_rows(["V100"], verify=301, gpu=False, workers=1, progress=False)
    assert calls[-1] == "sim:V100" and len(calls) == 3
    for f in tmp_path.glob("probe-*.json"):
        f.write_text("{not json")
    report.probe_rows(["MI100"], verify=300, gpu=False, workers=1, progress=False)
    assert len(calls) == 4
    monkeypatch.setattr(report, "_source_hash", lambda: "other code")
    report.probe_rows(["MI100"], verify=300, gpu=False, workers=1, progress=False)
    assert len(calls) == 5
    monkeypatch.setenv("BLOCKFMA_CACHE", "off")
    for f in tmp_path.glob("probe-*.json"):
        f.unlink()
    report.probe_rows(["MI100"], verify=300, gpu=False, workers=1, progress=False)
    report.probe_rows(["MI100"], verify=300, gpu=False, workers=1, progress=False)
    assert len(calls) == 7 and not list(tmp_path.iterdir())


def test_a_long_wait_for_the_probe_workers_is_said_every_30_s(monkeypatch) -> None:
    """While no worker has finished for 30 s, a line names the probes not done yet (no silent minutes)."""
    import queue

    monkeypatch.setattr(report, "probe_row", _fake_probe([]))
    lines: list = []
    run = report._ProbeRun(["V100", "MI100"], 300, False, 1, lines.append)
    waits = []

    class Slow:
        def get(self, timeout):
            waits.append(timeout)
            if len(waits) < 3:
                raise queue.Empty
            return 0, {"summary": "V100 model", "seconds": 61.0}, None

    run.remote, run.done = [0], Slow()
    rows = run.rows()
    assert waits == [30, 30, 30] and rows[0]["seconds"] == 61.0
    assert lines == ["probes not done yet: sim:V100 fp16", "probes not done yet: sim:V100 fp16",
                     "probed sim:V100 fp16->fp32 (1 of 2): V100 model (61.0 s)",
                     "probing sim:MI100 fp16->fp32 (2 of 2) ...", "probed sim:MI100 fp16->fp32 (2 of 2): sim:MI100 model (1.5 s)"]
