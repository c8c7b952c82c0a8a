"""blockfma.provenance and blockfma.timing: what every record says of where it comes from."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

import blockfma as bf
from blockfma.provenance import git_commit, now, provenance
from blockfma.timing import best_time


def test_provenance_names_versions_date_and_machine():
    meta = provenance()
    assert meta["blockfma"] == bf.__version__
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", meta["date"])
    for key in ("python", "numpy", "ml_dtypes", "host", "cpu", "cpus", "commit", "dirty"):
        assert key in meta
    json.dumps(meta)  # a record's header: JSON as it is
    assert now()[:4] == meta["date"][:4]


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_git_commit_of_a_checkout_and_outside_one(tmp_path):
    assert git_commit(tmp_path) == {"commit": None, "dirty": None}  # not a checkout
    run = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*run, "init", "-q"], check=True)
    (tmp_path / "f").write_text("1")
    subprocess.run([*run, "add", "f"], check=True)
    subprocess.run([*run, "commit", "-qm", "one"], check=True)
    head = subprocess.run([*run, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    assert git_commit(tmp_path) == {"commit": head, "dirty": False}
    (tmp_path / "f").write_text("2")
    assert git_commit(tmp_path) == {"commit": head, "dirty": True}
    (tmp_path / "untracked").write_text("x")  # untracked files do not make a record dirty
    (tmp_path / "f").write_text("1")
    assert git_commit(tmp_path)["dirty"] is False


def test_provenance_with_a_torch_device():
    pytest.importorskip("torch", reason="torch is not installed")
    meta = provenance("cpu")
    assert meta["device"] == "cpu" and meta["torch"] and meta["threads"] >= 1


def test_best_time_is_the_least_of_the_runs_and_syncs_around_each(monkeypatch):
    import types

    import blockfma.timing as timing

    calls = []
    times = iter([0.0, 5.0, 10.0, 11.0, 20.0, 23.0])  # runs of 5, 1 and 3 seconds
    monkeypatch.setattr(timing, "time", types.SimpleNamespace(perf_counter=lambda: next(times)))
    assert best_time(lambda: calls.append("run"), 3, lambda: calls.append("sync")) == 1.0
    assert calls == ["sync", "run", "sync"] * 3
