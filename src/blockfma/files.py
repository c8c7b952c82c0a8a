"""Files written whole or not at all: the one atomic writer of JSON records, CSV tables and figures.

Every results file (probe findings, device files, benchmark records, the multiword CSVs and figures) goes
through :func:`atomic_path`: the data is written to a temporary file beside the target and renamed onto
it, so an interrupted run leaves the last complete file, never half of one.  This module imports nothing
else of blockfma, so any module may use it.

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
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["atomic_path", "write_text", "dumps", "write_json"]


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary file beside ``path`` to write; renamed onto ``path`` when the block ends (removed if it
    raises, leaving the old ``path`` as it was), with the permissions a plain open() gives, so an
    interrupted run leaves the last complete file.  Missing parent folders are made."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
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


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically (:func:`atomic_path`); returns the path."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def dumps(obj: Any) -> str:
    """JSON text of a report, a record or rows (indent 2, numpy scalars as numbers, non-finite floats as
    strings: "inf", "nan")."""
    return _json.dumps(_jsonable(obj), indent=2)


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Write :func:`dumps` of ``obj`` and a newline to ``path`` atomically (:func:`atomic_path`)."""
    return write_text(path, dumps(obj) + "\n")


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
