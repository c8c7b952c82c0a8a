"""Timing for the benchmark scripts: the best of several synchronised runs.  (Performance is measured by
scripts that time a baseline in the same run, never asserted in tests.)"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

__all__ = ["best_time", "synchronizer"]


def best_time(fn: Callable[[], Any], repeat: int, sync: Callable[[], None] = lambda: None) -> float:
    """The least wall-clock seconds of ``repeat`` runs of ``fn`` (at least one), each between two calls of
    ``sync`` (a GPU's synchronisation, so that queued work is counted)."""
    best = float("inf")
    for _ in range(max(1, repeat)):
        sync()
        t = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - t)
    return best


def synchronizer(torch: Any, device: Any) -> Callable[[], None]:
    """A function that waits for a CUDA ``device``'s queued work (nothing to wait for on the CPU)."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return lambda: torch.cuda.synchronize(dev)
    return lambda: None
