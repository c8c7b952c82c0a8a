"""blockfma.files: the one atomic writer.  Oracles: the file system itself (contents, modes, leftovers)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from blockfma import files, report


def test_write_json_writes_whole_json(tmp_path):
    path = files.write_json(tmp_path / "deep" / "er" / "rec.json", {"x": np.float32(1.5), "bad": [float("inf")]},
                            parents=True)
    assert path == tmp_path / "deep" / "er" / "rec.json"
    assert json.loads(path.read_text()) == {"x": 1.5, "bad": ["inf"]}
    assert path.read_text().endswith("}\n")
    mask = os.umask(0)
    os.umask(mask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~mask  # as a plain open() would make it
    assert sorted(p.name for p in path.parent.iterdir()) == ["rec.json"]


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_a_failed_write_leaves_the_old_file_intact(tmp_path, error):
    path = tmp_path / "rec.json"
    path.write_text("old\n")
    with pytest.raises(error):
        with files.atomic_path(path) as tmp:
            assert tmp.parent == tmp_path and tmp != path
            tmp.write_text("half a reco")
            raise error("interrupted")
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["rec.json"]  # the temporary file is gone


def test_an_unwritable_object_leaves_the_old_file_intact(tmp_path):
    path = tmp_path / "rec.json"
    files.write_text(path, "old\n")
    with pytest.raises(TypeError):
        files.write_json(path, {"x": object()})
    assert path.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["rec.json"]


def test_report_keeps_its_names():
    assert report.atomic_path is files.atomic_path
    assert report.write_json is files.write_json and report.dumps is files.dumps
