"""Files written whole or not at all: :func:`atomic_path` (a temporary file beside the target, renamed
onto it when the writing ends) and the JSON records (:func:`dumps`, :func:`write_json`) of the report,
the probes and the scripts.

    >>> write_json("out/record.json", {"x": float("nan")})      # doctest: +SKIP
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

__all__ = ["atomic_path", "dumps", "write_json"]


def dumps(obj: Any) -> str:
    """JSON text of a report or rows (indent 2, non-finite floats as strings)."""
    return _json.dumps(_jsonable(obj), indent=2)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary file beside ``path`` to write; renamed onto ``path`` when the block ends (removed if it
    raises), with the permissions a plain open() gives, so an interrupted run leaves the last complete
    file.  The one atomic writer of JSON records, CSV tables and figures."""
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


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Write :func:`dumps` of ``obj`` to ``path`` atomically (:func:`atomic_path`)."""
    with atomic_path(path) as tmp:
        tmp.write_text(dumps(obj) + "\n")
    return Path(path)


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
