"""blockfma.files: the one atomic writer.  Oracles: the file system itself (contents, modes, leftovers)."""

from __future__ import annotations

import json
import os
import stat

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


# --- every writer against every kind of path ------------------------------------------------------------------
# Each writer writes one result to a path; its check says what the file must then hold.  The kinds of path
# are what a user may name: a regular file (replaced), a symbolic link to a file (the link stays, the target
# is replaced), a link to a missing file in an existing folder (the target is made), a folder, a FIFO and a
# device (refused, left as they are), a file in a missing folder (refused; made where the writer takes
# parents=True), a file in a folder this process cannot write (refused) and '-' (standard output where the
# result is text; refused for a binary file and for atomic_path, which hands out a file to write).

def _findings():
    from blockfma.probes.findings import Findings

    return Findings(target="sim:test", formats="fp16->fp32", k=4, metadata={"instruction": "mma"}, verified=False,
                    candidate=None, verification=[], stages=[], readings={}, observations={}, calls=3, rows=12,
                    seconds=0.5, target_seconds=0.25)


def _save_findings(path):
    return _findings().save(path)


def _save_devices(path):
    import importlib

    devices = importlib.import_module("blockfma.devices")  # the module (blockfma.devices is also a function)
    return devices.save(path, [devices.device("V100")])


def _save_figure(path):
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    from blockfma import plot

    fig = Figure(figsize=(1, 1))
    fig.subplots().plot([0, 1], [1, 0])
    return plot.save(fig, path)


def _write_csv(path):
    from blockfma.experiments import multiword

    rows = [{"n": 64, "figure": "fig_3_1", "extra": None}, {"n": 128, "figure": "fig_3_1", "componentwise": 0.25}]
    return multiword.write_csv(rows, path)


def _atomic(path, **kw):
    with files.atomic_path(path, **kw) as tmp:
        tmp.write_text("atomic\n")
    return path


def _cli(*command: str):
    def write(path):
        from blockfma.cli import main

        return main([*command, "--json", os.fspath(path)])
    return write


PNG = b"\x89PNG\r\n\x1a\n"
WRITERS = {  # name: (write(path[, parents=True]), check of the bytes written, takes parents=, text)
    "write_text": (lambda p, **kw: files.write_text(p, "hello\n", **kw), lambda b: b == b"hello\n", True, True),
    "write_json": (lambda p, **kw: files.write_json(p, {"x": 1.5, "y": [float("nan")]}, **kw),
                   lambda b: b == b'{\n  "x": 1.5,\n  "y": [\n    "nan"\n  ]\n}\n', True, True),
    "atomic_path": (_atomic, lambda b: b == b"atomic\n", True, False),
    "Findings.save": (_save_findings, lambda b: json.loads(b) == {**json.loads(files.dumps(_findings().to_json()))}
                      and json.loads(b)["target"] == "sim:test" and json.loads(b)["verified"] is False, False, True),
    "devices.save": (_save_devices, lambda b: json.loads(b)["schema"] == "blockfma-devices/1"
                     and [d["name"] for d in json.loads(b)["devices"]] == ["V100"], False, True),
    "plot.save": (_save_figure, lambda b: b[:8] == PNG, False, False),
    "multiword.write_csv": (_write_csv, lambda b: b == b"figure,n,componentwise,extra\nfig_3_1,64,,\nfig_3_1,128,0.25,\n",
                            False, True),
    "cli devices --json": (_cli("devices", "V100"), lambda b: json.loads(b)["name"] == "V100", False, True),
    "cli dot --json": (_cli("dot", "V100", "--a", "1,1,1,1", "--b", "2^-24,2^-24,2^-24,2^-24", "--c", "1-2^-24"),
                       lambda b: json.loads(b)["result"]["bits"] == "0x3f800001", False, True),
}
KINDS = ["file", "symlink", "dangling symlink", "folder", "fifo", "device", "missing folder", "unwritable folder",
         "stdout"]
REFUSED = {"folder": "is a folder", "fifo": "is a FIFO", "device": "is a device",
           "missing folder": "does not exist", "unwritable folder": "is not writable"}


def _device_node(folder, name: str = "null", minor: int = 3):
    """A character device to be refused: /dev/<name> itself for a user who cannot replace it; for root, which
    could (a broken writer run as root once replaced /dev/null with a regular file), a node of the same
    device made in the test's own folder, so that a failing test replaces only that node."""
    if os.geteuid() != 0:
        return f"/dev/{name}"
    node = folder / name
    try:
        os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, minor))
    except OSError as exc:
        pytest.skip(f"root cannot make a device node here ({exc.strerror}); /dev/{name} is not to be risked")
    return node


def _path_of_kind(kind: str, work):
    target = work / "out.dat"
    if kind == "file":
        target.write_text("old\n")
        return target
    if kind in ("symlink", "dangling symlink"):
        if kind == "symlink":
            target.write_text("old\n")
        (work / "link").symlink_to(target)
        return work / "link"
    if kind == "folder":
        (work / "sub").mkdir()
        return work / "sub"
    if kind == "fifo":
        os.mkfifo(work / "pipe")
        return work / "pipe"
    if kind == "device":
        return _device_node(work)
    if kind == "missing folder":
        return work / "no" / "such" / "out.dat"
    if kind == "unwritable folder":
        if os.geteuid() == 0:
            pytest.skip("root can write to any folder")
        (work / "locked").mkdir()
        (work / "locked").chmod(0o500)
        return work / "locked" / "out.dat"
    return "-"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", list(WRITERS))
def test_every_writer_on_every_kind_of_path(tmp_path, capsys, name, kind):
    write, holds, takes_parents, text = WRITERS[name]
    cli = name.startswith("cli")
    work = tmp_path / "work"
    work.mkdir()
    path = _path_of_kind(kind, work)
    before = sorted(p.name for p in work.iterdir())
    mode = os.lstat(path).st_mode if kind in ("folder", "fifo", "device") else None

    if kind in REFUSED or (kind == "stdout" and not text):
        if cli:
            assert write(path) == 2
            out, err = capsys.readouterr()
            assert out == ""  # refused before the work: not even the text was printed
            assert err.startswith(f"blockfma {name.split()[1]}: error: --json {path}: ")
            assert REFUSED[kind] in err.split(";")[0]
            assert err.count("\n") == 1 and "Traceback" not in err
        else:
            with pytest.raises(ValueError) as info:  # an ArgumentError: names the argument, the value, the fix
                write(path)
            message = str(info.value)
            assert message.startswith(f"path={os.fspath(path)!r}: ") and REFUSED.get(kind, "") in message.split(";")[0]
            if kind == "stdout":
                assert ("PNG image" if name == "plot.save" else "standard output cannot") in message
            assert "; " in message  # and the fix
        assert sorted(p.name for p in work.iterdir()) == before  # nothing made, nothing left behind
        if mode is not None:
            assert os.lstat(path).st_mode == mode  # the folder, FIFO or device is still what it was
        if kind == "folder":
            assert list(path.iterdir()) == []
        if kind == "missing folder" and takes_parents:  # asked for, the folders are made
            write(path, parents=True)
            assert holds(path.read_bytes())
        return

    result = write(path)
    out, _ = capsys.readouterr()
    if kind == "stdout":
        assert result == (0 if cli else None)
        assert holds(out.encode())  # --json - prints the JSON instead of the text: stdout is JSON alone
        assert sorted(p.name for p in work.iterdir()) == before
        return
    if cli:  # the text was printed, and the JSON written to the file
        assert result == 0 and out.startswith("V100")
    else:
        assert result is not None and os.fspath(result) == os.fspath(path)
    assert holds((work / "out.dat").read_bytes())
    if kind in ("symlink", "dangling symlink"):
        assert path.is_symlink() and os.readlink(path) == os.fspath(work / "out.dat")  # the link stays
    assert sorted(p.name for p in work.iterdir()) == sorted(set(before) | {"out.dat"})  # no temporary left


def test_the_cli_refuses_a_bad_json_path_before_the_work(tmp_path, capsys, monkeypatch):
    """`blockfma report --json /dev/full` ends at once with status 2 (it ran the whole report, then failed),
    and so does a path in a missing folder; the report's sections are never computed."""
    from blockfma import report
    from blockfma.cli import main

    def no_work(*args, **kwargs):
        raise AssertionError("the report ran before its --json path was checked")

    monkeypatch.setattr(report, "sections", no_work)
    full = _device_node(tmp_path, "full", 7)
    assert main(["report", "--json", os.fspath(full)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == (f"blockfma report: error: --json {full}: is a device; results are written to "
                                 "regular files only; name a file (or '-' for standard output)\n")
    assert stat.S_ISCHR(os.lstat(full).st_mode)
    missing = tmp_path / "no" / "r.json"
    assert main(["report", "--json", os.fspath(missing)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == (f"blockfma report: error: --json {missing}: folder {str(missing.parent)!r} does "
                                 "not exist; create it first\n")
    assert not missing.parent.exists()


def test_the_cli_prints_the_text_before_it_writes_the_file(tmp_path, capsys, monkeypatch):
    """With --json FILE the text comes first: a results file that cannot be written (the disk filled up
    after the check) still leaves the answer on the screen."""
    from blockfma.cli import main

    seen = []

    def write_json(path, obj, **kw):
        seen.append(capsys.readouterr().out)  # what was printed when the file is written
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files, "write_json", write_json)
    path = tmp_path / "v100.json"
    code = main(["devices", "V100", "--json", os.fspath(path)])
    assert len(seen) == 1 and seen[0].startswith("V100  NVIDIA Volta")
    assert code == 1 and capsys.readouterr() == ("", f"blockfma devices: error: cannot write --json {path} (No space "
                                                     "left on device); the results are printed above\n")
    assert not (tmp_path / "v100.json").exists()


def test_a_command_s_other_results_files_are_checked_before_the_work(tmp_path, capsys, monkeypatch):
    """A command lists its results options besides --json in set_defaults(results=(...)); main() checks
    them all before the command runs (here probe's --record, with a command that must not run)."""
    from blockfma import cli

    parser = cli.build_parser()
    probe = parser._subparsers._group_actions[0].choices["probe"]

    def no_work(args):
        raise AssertionError("the probe ran before its --record path was checked")

    probe.set_defaults(func=no_work, results=("record",))
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    folder = tmp_path / "a folder"
    folder.mkdir()
    assert cli.main(["probe", "sim:V100", "--record", str(folder)]) == 2
    assert capsys.readouterr() == ("", f"blockfma probe: error: --record {folder}: is a folder; results are written "
                                       "to regular files only; name a file (or '-' for standard output)\n")


def test_folder_checks_an_output_folder(tmp_path):
    """files.folder, the check of a program's --out DIR: a folder (a link to one followed), made with its
    parents only when asked; a file, '-' or a missing folder is refused."""
    (tmp_path / "f.txt").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "d", target_is_directory=True)
    (tmp_path / "d").mkdir()
    assert files.folder(tmp_path / "link") == tmp_path / "d"
    with pytest.raises(ValueError, match=r"^out='.*f\.txt': is not a folder; name a folder for the output files$"):
        files.folder(tmp_path / "f.txt", create=True, name="out")
    with pytest.raises(ValueError, match=r"^out='-': must be a folder path$"):
        files.folder("-", name="out")
    with pytest.raises(ValueError, match=r"^path='.*new/er': folder does not exist; create it first$"):
        files.folder(tmp_path / "new" / "er")
    assert not (tmp_path / "new").exists()
    assert files.folder(tmp_path / "new" / "er", create=True) == tmp_path / "new" / "er"
    assert (tmp_path / "new" / "er").is_dir()
