"""Files written whole or not at all, and only where a file belongs: the one writer of results.

Every results file (probe findings, device files, benchmark records, the multiword CSVs and figures) goes through
:func:`atomic_path`: the data is written to a temporary file beside the target and renamed onto it, so an interrupted
run leaves the last complete file, never half of one.  :func:`destination` decides where that is, and is called by every
command *before* its long work, so a bad path fails in a second (the rules: ``-`` is standard output, links are
followed, anything but a regular file is refused, a missing folder too unless ``parents=True``; docs/cli.md).

This module imports nothing of blockfma but :mod:`blockfma.arguments`, so any module may use it.

    >>> from blockfma.files import dumps
    >>> print(dumps({"x": float("inf")}))
    {
      "x": "inf"
    }
"""

from __future__ import annotations

import contextlib
import json as _json
import math
import os
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

from .arguments import ArgumentError

__all__ = ["STDOUT", "destination", "results_option", "atomic_path", "write_text", "dumps", "write_json", "folder"]

STDOUT = "-"
"""The path that means standard output."""


def destination(path: str | os.PathLike, *, parents: bool = False, name: str = "path") -> Path | None:
    """Where a result for ``path`` will be written: None for standard output (``"-"``), else the file's
    real path (symbolic links followed).  Raises :class:`~blockfma.arguments.ArgumentError` (naming the
    argument ``name``) for a path that exists and is not a regular file, a missing parent folder (unless
    ``parents``: then it is made) or a folder this process cannot write.  Cheap; call it before long work."""
    if isinstance(path, str) and path == STDOUT:
        return None
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise ArgumentError(name, path, "must be a file path (or '-' for standard output)")
    real = Path(os.path.realpath(os.fspath(path)))
    try:
        mode = os.stat(real).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise ArgumentError(name, os.fspath(path), f"cannot be used ({exc.strerror or exc})") from None
    if mode is not None and not stat.S_ISREG(mode):
        kind = ("a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else
                "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode)
                else "not a regular file")
        raise ArgumentError(name, os.fspath(path), f"is {kind}; results are written to regular files only",
                            fix="name a file (or '-' for standard output)")
    folder = real.parent
    if not folder.is_dir():
        if not parents:
            raise ArgumentError(name, os.fspath(path), f"folder {str(folder)!r} does not exist", fix="create it first")
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ArgumentError(name, os.fspath(path), f"cannot create folder {str(folder)!r} "
                                f"({exc.strerror or exc})") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ArgumentError(name, os.fspath(path), f"folder {str(folder)!r} is not writable",
                            fix="name a file in a folder you can write")
    return real


def results_option(path: Any, option: str, fail: Callable[[str], Any]) -> TextIO:
    """For a script's results option (``--json FILE|-``, given as ``option``): check ``path`` before the run,
    passing a bad one's one-line message (in the option's spelling) to ``fail`` (e.g. argparse's
    ``parser.error``), and return the stream the script's table goes to: stderr when the results take
    standard output, else stdout.  None (the option not given) passes."""
    if path is not None:
        try:
            destination(path, name=option)
        except ArgumentError as exc:
            fail(exc.message({option: option}))
    return sys.stderr if isinstance(path, str) and path == STDOUT else sys.stdout


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, *, parents: bool = False) -> Iterator[Path]:
    """A temporary file beside ``path`` to write; renamed onto ``path`` when the block ends (removed if it
    raises, leaving the old ``path`` as it was), with the permissions a plain open() gives, so an
    interrupted run leaves the last complete file.  ``path`` is checked by :func:`destination` (regular
    files only, links followed, missing folders made only with ``parents``); ``"-"`` is refused here (a
    binary stream cannot be renamed: :func:`write_text` prints text)."""
    real = destination(path, parents=parents)
    if real is None:
        raise ArgumentError("path", path, "standard output cannot be written atomically", fix="name a file")
    path = real
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_text(path: str | os.PathLike, text: str, *, parents: bool = False) -> Path | None:
    """Write ``text`` (UTF-8) to ``path`` atomically (:func:`atomic_path`), or print it for ``"-"``;
    returns the path written (None for standard output)."""
    if isinstance(path, str) and path == STDOUT:
        sys.stdout.write(text)
        sys.stdout.flush()
        return None
    with atomic_path(path, parents=parents) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def dumps(obj: Any) -> str:
    """JSON text of a report, a record or rows (indent 2, numpy scalars as numbers, non-finite floats as
    strings: "inf", "nan")."""
    return _json.dumps(_jsonable(obj), indent=2)


def write_json(path: str | os.PathLike, obj: Any, *, parents: bool = False) -> Path | None:
    """Write :func:`dumps` of ``obj`` and a newline to ``path`` as :func:`write_text` does."""
    return write_text(path, dumps(obj) + "\n", parents=parents)


def _jsonable(obj: Any) -> Any:
    if hasattr(obj, "item") and hasattr(obj, "dtype") and getattr(obj, "shape", None) == ():  # numpy scalars
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return repr(obj)
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    return obj


def folder(path: str | os.PathLike, *, create: bool = False, name: str = "path") -> Path:
    """The real path of an output folder (a program's ``--out DIR``), checked before any work: it must be a
    folder this process can write (a symbolic link to one is followed); a missing one is made, with its
    parents, only with ``create`` (the caller says so in its help).  Raises
    :class:`~blockfma.arguments.ArgumentError` naming ``name`` otherwise."""
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path) or os.fspath(path) == STDOUT:
        raise ArgumentError(name, path, "must be a folder path")
    real = Path(os.path.realpath(os.fspath(path)))
    if not real.exists():
        if not create:
            raise ArgumentError(name, os.fspath(path), "folder does not exist", fix="create it first")
        try:
            real.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ArgumentError(name, os.fspath(path), f"cannot create the folder ({exc.strerror or exc})") from None
    if not real.is_dir():
        raise ArgumentError(name, os.fspath(path), "is not a folder", fix="name a folder for the output files")
    if not os.access(real, os.W_OK | os.X_OK):
        raise ArgumentError(name, os.fspath(path), "folder is not writable", fix="name a folder you can write")
    return real
