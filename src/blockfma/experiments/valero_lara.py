"""Valero-Lara, Liu, Vetter, Jorquera, "Mixed-precision S/DGEMM using the TF32 and TF64 frameworks", SC-W
2023: Figs. 4 and 5 as reproductions (``blockfma reproduce valero-lara-fig4`` and ``-fig5``).

The rows come from :mod:`blockfma.experiments.multiword` (the A100 preset's units, the proposed TF64 unit);
the paper's claims about each figure (sec. 3.2 and 3.3, p. 5-6) are :class:`~blockfma.experiments.result.
Comparison` objects on the normwise error ``l2`` (||C - C_hat||_F / (||A||_F ||B||_F), as their artifact).
"""

from __future__ import annotations

import math
from typing import Any

from .fasi2023 import claim, from_rows, ratio
from .result import Comparison

__all__ = ["fig_4", "fig_5"]

_SMALL = ("Their sizes run from 128 to 32768; scale ci runs n = 16 and 32 (paper: up to 4096), so the "
          "magnitudes compare, not the trend over n.")


@from_rows("valero-lara-fig4", "Valero-Lara et al. 2023, Fig. 4: SGEMM and TF32", "valero_lara_fig_4",
           notes=("The 3x/4xTF32 here chain the word products in the unit's accumulator (NVIDIA's 3xTF32, the paper's "
                  "pseudocode); their artifact adds separate products in fp32.", _SMALL))
def fig_4(rows: list[dict[str, Any]]) -> list[Comparison]:
    """Fig. 4: SGEMM, 1xFP16, 1xTF32, 3xTF32 and 4xTF32 on the A100 preset."""
    four = ratio(rows, {"series": "1xFP16"}, {"series": "1xTF32"}, key="l2")
    tf32 = max(float(r["l2"]) for r in rows if r["series"] == "1xTF32")
    near = ratio(rows, {"series": "4xTF32"}, {"series": "SGEMM"}, key="l2")
    three = ratio(rows, {"series": "3xTF32"}, {"series": "4xTF32"}, key="l2")
    return [
        claim("1xFP16 error / 1xTF32 error", "about 4 (p. 5: 'an improvement of about 4x')", four, 2 <= four <= 8,
              "" if 2 <= four <= 8 else "their 1xFP16 is HGEMM, accumulating in fp16 (p. 6 compares '1xTF32 GEMM vs. "
              "HGEMM'); ours runs the A100's fp16 unit with fp32 accumulation, and fp16 and tf32 words have the same "
              "11-bit significand, so both errors are the inputs' rounding and the ratio is about 1"),
        claim("1xTF32 error (l2), largest n", "1e-6 to 1e-5 (p. 5)", tf32, 1e-7 <= tf32 <= 1e-4,
              "" if 1e-6 <= tf32 <= 1e-5 else "within a factor 10 of the stated range: the error grows with n and "
              "ours are far smaller matrices"),
        claim("4xTF32 error / SGEMM error", "about 1: 'close to the error of the SGEMM' (p. 5)", near,
              0.1 <= near <= 10),
        claim("3xTF32 error / 4xTF32 error", "about 1: the fourth product has 'no noticeable effect' (p. 5)", three,
              0.5 <= three <= 2),
    ]


@from_rows("valero-lara-fig5", "Valero-Lara et al. 2023, Fig. 5: DGEMM and TF64", "valero_lara_fig_5",
           notes=("TF64 is a proposed unit (exact products of fp32 words, fp64 accumulation: "
                  "blockfma.multiword.TF64_UNIT); "
                  "their artifact splits by truncation and adds separate products in fp64, blockfma's tf64 rounds to "
                  "nearest and chains the products.", _SMALL))
def fig_5(rows: list[dict[str, Any]]) -> list[Comparison]:
    """Fig. 5: DGEMM, SGEMM, 1xTF64, 3xTF64 and 4xTF64 (the proposed TF64 unit)."""
    dg = ratio(rows, {"series": "3xTF64"}, {"series": "DGEMM"}, key="l2")
    gain = ratio(rows, {"series": "1xTF64"}, {"series": "3xTF64"}, key="l2")
    sg = ratio(rows, {"series": "SGEMM"}, {"series": "1xTF64"}, key="l2")
    return [
        claim("3xTF64 error / DGEMM error", "about 1: 'an error equivalent in magnitude to that of DGEMM' (p. 6)",
              dg, 0.1 <= dg <= 10),
        claim("1xTF64 error / 3xTF64 error", "about 1e7: 'an error reduction on the order of 10^7' (p. 6)", gain,
              1e6 <= gain <= 1e8 if math.isfinite(gain) else False),
        claim("SGEMM error / 1xTF64 error", "above 1: 'more precision than SGEMM' (p. 6)", sg, sg > 1),
    ]
