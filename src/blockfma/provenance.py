"""Where a result comes from: the versions, the date, the commit and the machine, for every record written
(benchmarks, reproductions, the report, hardware runs).  One place, so that every record says the same
things the same way."""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

__all__ = ["git_commit", "provenance", "now"]

_SOURCE = Path(__file__).resolve().parent  # src/blockfma: inside the repository in a checkout


def now() -> str:
    """The UTC date and time to the second, ISO 8601."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def git_commit(where: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """``{"commit": HEAD, "dirty": whether tracked files differ from it}`` of the git checkout that holds
    ``where`` (default: blockfma's own source); both None outside a checkout or without git."""
    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", *args], cwd=Path(where) if where is not None else _SOURCE,
                                 capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    head = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no") if head else None
    return {"commit": head, "dirty": None if status is None else bool(status)}


def provenance(device: Any = None) -> dict[str, Any]:
    """The date, blockfma's version and commit, Python's, numpy's and ml_dtypes' versions, the host, its system and
    architecture, its CPU and core count; with a torch ``device`` (``"cuda"``, ``"cpu"``, a torch.device) also what
    :func:`blockfma.probes.runtime.device_info` says of it (GPU name, compute capability, memory, torch and
    CUDA versions)."""
    import ml_dtypes
    import numpy as np

    from . import __version__
    from .probes.runtime import cpu_name

    meta: dict[str, Any] = {"date": now(), "blockfma": __version__, **git_commit(),
                            "python": platform.python_version(), "numpy": np.__version__,
                            "ml_dtypes": ml_dtypes.__version__, "host": platform.node(),
                            "machine": f"{platform.system()} {platform.machine()}", "cpu": cpu_name(),
                            "cpus": os.cpu_count()}
    if device is not None:
        from .probes.runtime import device_info

        meta.update(device_info(device))
    return meta
