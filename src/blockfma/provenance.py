"""Where a result comes from: the versions, the date, the commit and the machine, for every record written
(benchmarks, reproductions, the report, hardware runs).  One place, so that every record says the same
things the same way.  It imports no other blockfma module but :mod:`.optional` and :mod:`.version`, so
that anything may use it (the probes' and the multiword units' device metadata is :func:`device_info`)."""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

from .optional import require
from .version import __version__

__all__ = ["git_commit", "provenance", "now", "cpu_name", "device_info"]

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


def cpu_name() -> str:
    """The CPU's model name (Linux: /proc/cpuinfo), else what platform knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name") and ":" in line:
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "CPU"


def device_info(device: Any) -> dict[str, Any]:
    """What a torch device is: device, name (``torch.cuda.get_device_name`` on CUDA), compute capability,
    multiprocessors and memory on CUDA, the torch and CUDA versions, torch's CPU threads."""
    torch = require("torch", extra="torch", needed_by="device_info", what="PyTorch, which is not installed")
    dev = torch.device(device)
    info: dict[str, Any] = {"device": str(dev), "torch": torch.__version__}
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev)
        info.update(name=torch.cuda.get_device_name(dev), compute_capability=f"{props.major}.{props.minor}",
                    multiprocessors=props.multi_processor_count, memory_gib=round(props.total_memory / 2**30, 2),
                    cuda=torch.version.cuda)
    else:
        info.update(name=cpu_name(), threads=torch.get_num_threads())
    return info


def provenance(device: Any = None) -> dict[str, Any]:
    """The date, blockfma's version and commit, Python's, numpy's and ml_dtypes' versions, the host, its system and
    architecture, its CPU and core count; with a torch ``device`` (``"cuda"``, ``"cpu"``, a torch.device) also what
    :func:`device_info` says of it (GPU name, compute capability, memory, torch and CUDA versions)."""
    import ml_dtypes
    import numpy as np

    meta: dict[str, Any] = {"date": now(), "blockfma": __version__, **git_commit(),
                            "python": platform.python_version(), "numpy": np.__version__,
                            "ml_dtypes": ml_dtypes.__version__, "host": platform.node(),
                            "machine": f"{platform.system()} {platform.machine()}", "cpu": cpu_name(),
                            "cpus": os.cpu_count()}
    if device is not None:
        meta.update(device_info(device))
    return meta
