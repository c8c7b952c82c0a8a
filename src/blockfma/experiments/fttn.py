"""FTTN's "porting danger" GEMM (Li et al., FTTN, sec. V).

D = C - A·B with C = 2**20 everywhere; row i of A is (2**10, -2**-2, -2**-3, -2**-2, -2**-3, ...) (odd
columns -2**-2, even columns after the first -2**-3) and column j of B is (2**10, 2**-3, 2**-3, ...), so
the exact answer is 2**7 + 2**6 - 2**-6 = 191.984375.  The small products are negative so that
C - A·B is positive, as the paper's expansion shows.  FTTN's kernel starts from acc = 0, accumulates the
512 tiles of 16x16x16 over K = 8192 on the matrix unit (each tile's result is the next tile's C), then
computes D = C - acc in fp32 on ordinary cores.  Published results: 0 on V100, A100 and MI250X,
255.875 on MI100, 191.875 on H100.  Every element of D is the same, so one dot product tells.
"""

from __future__ import annotations

import numpy as np

from ..engine import dot
from ..model import Model

K = 8192
C_VALUE = 2.0**20
EXACT = 2.0**7 + 2.0**6 - 2.0**-6

#: FTTN's published values of D (Table in sec. V; MI250X as FTTN measured it).
PUBLISHED = {"V100": 0.0, "A100": 0.0, "MI250X": 0.0, "MI100": 255.875, "H100": 191.875}


def operands(k: int = K) -> tuple[np.ndarray, np.ndarray]:
    """Row of A and column of B of FTTN's matrices (binary16-representable)."""
    j = np.arange(k)
    a = np.where(j % 2 == 1, -(2.0**-2), -(2.0**-3))
    a[0] = 2.0**10
    b = np.full(k, 2.0**-3)
    b[0] = 2.0**10
    return a, b


def run(device: str | None = None, *, model: Model | None = None, input_format: str = "fp16",
        k: int = K) -> float:
    """D = C - acc for one device preset (or model), as FTTN's kernel computes it."""
    a, b = operands(k)
    if model is None:
        acc = dot(a, b, 0.0, device=device, input_format=input_format, output_format="fp32")
    else:
        acc = dot(a, b, 0.0, model=model)
    return float(np.float32(np.float32(C_VALUE) - np.float32(acc)))
