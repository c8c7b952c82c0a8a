"""Helpers shared by the tests: bit patterns and the location of the recorded hardware data."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def golden_root() -> Path:
    """shared/golden beside the checkout (or $BLOCKFMA_GOLDEN)."""
    return Path(os.environ.get("BLOCKFMA_GOLDEN", REPO.parent / "shared" / "golden"))


def bits(x) -> np.ndarray:
    """Raw bit patterns of a float16/float32/float64 array (so -0 and NaN payloads count)."""
    x = np.asarray(x)
    return x.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[x.dtype.itemsize])


def f32bits(value: float) -> int:
    return int(np.float32(value).view(np.uint32))
