"""Fasi, Higham, Lopez, Mary, Mikaitis, "Matrix multiplication in multiword arithmetic", SISC 45 (2023):
Figs. 3.1 and 4.1-4.5 as reproductions (``blockfma reproduce fasi2023-fig3.1`` ...).

The rows come from :mod:`blockfma.experiments.multiword` (simulated units; the figures in :mod:`blockfma.plot`); this
module adds the paper's claims about each figure as :class:`~blockfma.experiments.result.Comparison` objects: which
arithmetic is more accurate, by about how much.  The paper states its claims in words (sec. 3 and 4.2-4.4); each claim
here quotes its page and turns it into a test on our rows: "paper" is the claim, "ours" the ratio we measure.  Fig. 4.1
is a throughput plot of real GPUs: it runs where torch sees a CUDA GPU, and is a note elsewhere.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..engine.gpu import available
from . import multiword as mw
from .result import Comparison, Result, check_scale, result

__all__ = ["fig_3_1", "fig_4_1", "fig_4_2", "fig_4_3", "fig_4_4", "fig_4_5", "pick", "ratio", "figure_of",
           "SHOWN", "claim", "result_of", "from_rows"]

#: the columns shown first (the CSV keeps every column of the rows)
SHOWN = ("figure", "panel", "series", "distribution", "device", "n", "componentwise", "l2", "bound")
_U01, _UH = "uniform(0,1]", "uniform(-0.5,0.5]"


def pick(rows: Sequence[dict[str, Any]], key: str = "componentwise", **match: Any) -> list[float]:
    """The ``key`` values of the rows matching every ``match`` (in row order)."""
    return [float(r[key]) for r in rows if all(r.get(k) == v for k, v in match.items())]


def ratio(rows: Sequence[dict[str, Any]], top: dict[str, Any], bottom: dict[str, Any], *, n: int | None = None,
          key: str = "componentwise") -> float:
    """error(top) / error(bottom) at inner dimension ``n`` (default: the largest in the rows)."""
    n = max(int(r["n"]) for r in rows) if n is None else n
    a, b = pick(rows, key, n=n, **top), pick(rows, key, n=n, **bottom)
    if not a or not b or b[0] == 0:
        return math.nan
    return a[0] / b[0]


def claim(what: str, paper: str, value: float, ok: bool, why: str = "") -> Comparison:
    """A claim of the paper beside our measured value (shown to 3 digits)."""
    return Comparison(what, paper, float(f"{value:.3g}") if math.isfinite(value) else repr(value), bool(ok), why)


def figure_of(name: str, rows: Sequence[dict[str, Any]]) -> Callable[[Any], Any]:
    """The drawing of :mod:`blockfma.plot`'s figure ``name`` for ``rows`` (a Result's ``figure``)."""
    def draw(fig: Any) -> Any:
        from .. import plot

        return getattr(plot, name)(rows)
    return draw


def result_of(name: str, title: str, rows: list[dict[str, Any]], comps: list[Comparison], notes: Sequence[str],
            scale: str, figure: Callable[[Any], Any] | None) -> Result:
    """A Result of multiword rows: the shown columns first, the sizes appended to the notes."""
    sizes = mw.sizes_note(rows) if rows else ""
    notes = tuple(notes) + ((f"Sizes here: {sizes} (scale {scale}).",) if sizes else ())
    return result(name, title, rows, columns=tuple(mw.columns(rows, SHOWN)), comparisons=tuple(comps), notes=notes,
                  figure=figure, scale=scale)


def from_rows(name: str, title: str, figure: str, notes: Sequence[str]
              ) -> Callable[[Callable[[list[dict[str, Any]]], list[Comparison]]], Callable[..., Result]]:
    """A decorator that turns the paper's claims about a multiword figure (a function of its rows, returning
    Comparisons; its docstring says what the figure is) into the reproduction ``name``, a function ``run(*, scale="ci",
    progress=None) -> Result``: the rows of :mod:`blockfma.experiments.multiword`'s function ``figure`` at ``scale``
    ("ci" or "paper"), the claims, the notes and the sizes, drawn by :mod:`blockfma.plot`'s function ``figure``."""
    def reproduction(claims: Callable[[list[dict[str, Any]]], list[Comparison]]) -> Callable[..., Result]:
        def run(*, scale: str = "ci", progress: Any = None) -> Result:
            scale = check_scale(scale)
            rows = getattr(mw, figure)(scale=scale, progress=progress)
            return result_of(name, title, rows, claims(rows), notes, scale, figure_of(figure, rows))

        run.__name__ = run.__qualname__ = claims.__name__
        run.__doc__ = claims.__doc__
        return run
    return reproduction


_SMALL = ("Scale ci runs n up to a few hundred, where the paper goes to 2^20: claims about large n are "
          "checked at our largest n.")


@from_rows("fasi2023-fig3.1", "Fasi et al. 2023, Fig. 3.1: double-fp16 on an RN block FMA", "fig_3_1",
           notes=("The paper simulates the unit with CPFloat; here it is blockfma's exact-fused model of width 1 "
                  "(RN1_UNIT).",
                  "'fp32 (FMA chain)' is what the paper computes in fp32; 'fp32 (BLAS)' (numpy) is shown too.", _SMALL))
def fig_3_1(rows: list[dict[str, Any]]) -> list[Comparison]:
    """Fig. 3.1: fp16, double-fp16 and fp32 on an idealised round-to-nearest block FMA of width 1."""
    ns = sorted({int(r["n"]) for r in rows})
    uh = [ratio(rows, {"series": "fp16", "distribution": _UH}, {"series": "double-fp16", "distribution": _UH}, n=n)
          for n in ns]
    four = [ratio(rows, {"series": "double-fp16 (4 products)", "distribution": d}, {"series": "double-fp16",
                                                                                     "distribution": d}, n=n)
            for d in (_U01, _UH) for n in ns]
    worst = max(abs(math.log2(x)) for x in four)
    gain = [ratio(rows, {"series": "fp16", "distribution": _U01}, {"series": "double-fp16", "distribution": _U01},
                  n=n) for n in ns]
    return [
        claim("(-0.5,0.5]: fp16 error / double-fp16 error, smallest over n", "at least 10 (p. 8: 'at least one "
              "order of magnitude more accurate')", min(uh), min(uh) >= 10),
        claim("double-fp16 with 4 products vs 3: largest |log2 ratio| of errors", "indistinguishable (p. 8)",
              worst, worst <= 1.0),
        claim("(0,1]: gain of double-fp16 over fp16, largest n / smallest n", "the benefit shrinks as n grows "
              "(p. 8)", gain[-1] / gain[0], gain[-1] <= gain[0]),
    ]


def fig_4_1(*, scale: str = "ci", progress: Any = None) -> Result:
    """Fig. 4.1: throughput of fp32 and fp16 matrix products (torch on this GPU); without a GPU, a note."""
    scale = check_scale(scale)
    if not available():
        return result("fasi2023-fig4.1", "Fasi et al. 2023, Fig. 4.1: throughput (needs a GPU)", [],
                      columns=("precision", "n", "tflops"), scale=scale,
                      notes=("No CUDA GPU here (torch sees none): Fig. 4.1 measures throughput on real tensor cores, "
                             "so nothing ran. The paper: fp32 14 and 19 Tflop/s, fp16 91 and 158, double-fp16 30 and "
                             "76 effective Tflop/s on the V100 and the A100 (p. 10).",))
    import time

    import torch

    rows = []
    sizes = (1024, 4096) if scale == "ci" else (1024, 2048, 4096, 8192, 16384)
    for n in sizes:
        for name, dt in (("fp32", torch.float32), ("fp16", torch.float16)):
            a = torch.rand(n, n, device="cuda", dtype=dt)
            b = torch.rand(n, n, device="cuda", dtype=dt)
            torch.matmul(a, b)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            reps = 5
            for _ in range(reps):
                torch.matmul(a, b)
            torch.cuda.synchronize()
            dt_s = (time.perf_counter() - t0) / reps
            rows.append({"precision": name, "n": n, "tflops": 2 * n**3 / dt_s / 1e12,
                         "gpu": torch.cuda.get_device_name()})
            if progress is not None:
                progress(f"fasi2023-fig4.1: {name} n={n}: {rows[-1]['tflops']:.1f} Tflop/s")
    top = {p: max(r["tflops"] for r in rows if r["precision"] == p) for p in ("fp32", "fp16")}
    comps = [claim("fp16 / fp32 peak throughput", "6.5 (V100) and 8.3 (A100), p. 10", top["fp16"] / top["fp32"],
                   top["fp16"] > top["fp32"], "" if top["fp16"] > top["fp32"] else "fp16 not faster on this GPU")]
    return result("fasi2023-fig4.1", "Fasi et al. 2023, Fig. 4.1: throughput on this GPU", rows,
                  comparisons=tuple(comps),
                  notes=("torch.matmul (cuBLAS), fp32 without TF32; another GPU than the paper's V100/A100, so the "
                         "ratio is compared only in direction.",), scale=scale)


_SIZES_4_2 = {"ci": (64, 256), "paper": (512, 2048, 8192, 32768)}


def _fig_4_2_rows(scale: str, progress: Any) -> list[dict[str, Any]]:
    """fp16, double-fp16 (FABsum-v1 with 16 blocks, on the V100 and A100 presets) and fp32, m = q = 16."""
    from ..multiword import bound, matmul, reference

    rows: list[dict[str, Any]] = []
    for dist in (_U01, _UH):
        for n in _SIZES_4_2[scale]:
            rng = np.random.default_rng([0, n, 1 if dist == _U01 else 2])
            A = mw.double_fp16(mw.sample(dist, (16, n), rng))
            B = mw.double_fp16(mw.sample(dist, (n, 16), rng))
            C = reference(A, B, exact=True)
            block = -(-n // 16)
            runs: list[tuple[str, str, Any]] = [("fp32", "", lambda: matmul(A, B, method="fp32"))]
            for dev in ("V100", "A100"):
                for method in ("fp16", "double-fp16"):
                    runs.append((method, dev, lambda m=method, d=dev: matmul(A, B, method=m, device=d,
                                                                             summation="fabsum-v1", block=block)))
            for series, dev, fn in runs:
                C_hat = np.asarray(fn(), dtype=np.float64)
                try:
                    bd = float(bound(series, n)) if series != "fp32" else float(bound("fp32", n, input_format="fp32"))
                except (TypeError, ValueError):
                    bd = math.nan
                rows.append({"figure": "fig_4_2", "panel": dev or "baseline", "series": series, "distribution": dist,
                             "device": dev, "m": 16, "n": n, "q": 16, **mw.measures(C_hat, C, A, B), "bound": bd})
            if progress is not None:
                progress(f"fasi2023-fig4.2: {dist} n={n}")
    return rows


def _fig_4_2_claims(rows: list[dict[str, Any]], scale: str) -> list[Comparison]:
    over = [r for r in rows if math.isfinite(r["bound"]) and r["componentwise"] > r["bound"]]
    comps = [claim("rows above the worst-case bound (Table 2.1)", "none: 'the worst-case error bounds ... are not "
                   "violated' (p. 12)", len(over), not over)]
    for dev in ("V100", "A100"):
        x = ratio(rows, {"series": "fp16", "device": dev, "distribution": _UH},
                  {"series": "double-fp16", "device": dev, "distribution": _UH})
        comps.append(claim(f"{dev}, (-0.5,0.5]: fp16 error / double-fp16 error", "above 1: double-fp16 'often "
                           "significantly more accurate' (p. 12)", x, x > 1))
        y = ratio(rows, {"series": "double-fp16", "device": dev, "distribution": _U01},
                  {"series": "fp32", "distribution": _U01})
        small = max(_SIZES_4_2[scale]) < 4096
        comps.append(claim(f"{dev}, (0,1]: double-fp16 error / fp32 error", "above 1: 'much less accurate than "
                           "fp32' (p. 12)", y, y > 1, "" if y > 1 or not small else
                           f"a claim about large n: double-fp16's error grows linearly with n on (0,1] (its n 2^-24 "
                           f"term, Table 2.1) and passes fp32's only for n in the thousands, beyond scale ci's "
                           f"n = {max(_SIZES_4_2[scale])}; --scale paper runs n up to 32768"))
    return comps


def _fig_4_2_draw(rows: list[dict[str, Any]]) -> Callable[[Any], Any]:
    def draw(fig: Any) -> Any:
        axes = fig.subplots(1, 2, squeeze=False)[0]
        for ax, dist in zip(axes, (_U01, _UH)):
            for dev in ("V100", "A100", ""):
                for series in (("fp32",) if not dev else ("fp16", "double-fp16")):
                    pts = sorted((r["n"], r["componentwise"]) for r in rows
                                 if r["distribution"] == dist and r["device"] == dev and r["series"] == series)
                    ax.loglog([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"{series} {dev}".strip())
            ax.set_title(dist)
            ax.set_xlabel("n")
            ax.set_ylabel("componentwise error")
            ax.legend(fontsize=7)
        fig.suptitle("Fasi et al. 2023, Fig. 4.2 on simulated V100/A100 units (split-K 16)")
        return None
    return draw


def fig_4_2(*, scale: str = "ci", progress: Any = None) -> Result:
    """Fig. 4.2 on simulated units: fp16, double-fp16 and fp32 on the V100 and A100 presets (the dot products
    split into 16 blocks added in fp32, as sec. 4.3 models cublasGemmEx), both distributions, m = q = 16."""
    scale = check_scale(scale)
    rows = _fig_4_2_rows(scale, progress)
    notes = ("The paper's Fig. 4.2 is measured on real V100 and A100 GPUs through cublasGemmEx; here the presets' "
             "units run in the simulator, with each dot product cut into 16 blocks added in fp32 (sec. 4.3's model "
             "of cublasGemmEx). fp32 is numpy's float32 matmul.", _SMALL)
    return result_of("fasi2023-fig4.2", "Fasi et al. 2023, Fig. 4.2 (simulated units)", rows,
                     _fig_4_2_claims(rows, scale), notes, scale, _fig_4_2_draw(rows))


@from_rows("fasi2023-fig4.3", "Fasi et al. 2023, Fig. 4.3: RZ against RN", "fig_4_3",
           notes=("As sec. 4.3: m = q = 16, split-K 16 (blocks added in fp32); the RN unit is blockfma's exact-fused "
                  "width-4 model (the paper: CPFloat).", _SMALL))
def fig_4_3(rows: list[dict[str, Any]]) -> list[Comparison]:
    """Fig. 4.3: the simulated V100 (RZ) against the same unit rounding to nearest."""
    rz = ratio(rows, {"series": "double-fp16", "panel": "RZ (V100)", "distribution": _U01},
               {"series": "double-fp16", "panel": "RN", "distribution": _U01})
    rn = ratio(rows, {"series": "double-fp16", "panel": "RN", "distribution": _U01},
               {"series": "fp32 (BLAS)", "panel": "baseline", "distribution": _U01})
    return [claim("(0,1]: double-fp16 error, RZ unit / RN unit", "above 1: RZ is the cause (p. 13)", rz, rz > 1),
            claim("(0,1]: double-fp16 on the RN unit / fp32", "about 1: 'comparable accuracy' (p. 13)", rn, rn <= 4)]


@from_rows("fasi2023-fig4.4", "Fasi et al. 2023, Fig. 4.4: FABsum (accuracy)", "fig_4_4",
           notes=("Accuracy panel only (no GPU throughput). The paper's outer dimension is 512; here it is smaller "
                  "(the maximum over fewer entries is a little smaller).", _SMALL))
def fig_4_4(rows: list[dict[str, Any]]) -> list[Comparison]:
    """Fig. 4.4 (accuracy panel): FABsum-v1/v2 against block size, on the V100 and A100 presets."""
    blocks = sorted({int(r["block"]) for r in rows if r.get("fabsum")})
    comps = []
    for dev in ("V100", "A100"):
        v = ratio(rows, {"series": f"FABsum-v2 b={blocks[-1]}", "panel": dev},
                  {"series": f"FABsum-v1 b={blocks[-1]}", "panel": dev})
        comps.append(claim(f"{dev}: FABsum-v2 / FABsum-v1 error (b={blocks[-1]}, largest n)", "at most 1: v2 "
                           "'preserves a high accuracy even when n is very large' (p. 15)", v, v <= 1))
        b = ratio(rows, {"series": f"FABsum-v1 b={blocks[0]}", "panel": dev},
                  {"series": f"FABsum-v1 b={blocks[-1]}", "panel": dev})
        comps.append(claim(f"{dev}: FABsum-v1 error, b={blocks[0]} / b={blocks[-1]}", "at most 1: 'a smaller block "
                           "size b reduces ... error' (p. 15)", b, b <= 1))
    return comps


@from_rows("fasi2023-fig4.5", "Fasi et al. 2023, Fig. 4.5: FABsum in fp16 (accuracy)", "fig_4_5",
           notes=("Accuracy panel only; the paper's smallest fp16 block (128) matches double-fp16 only at n near 10^6, "
                  "far beyond scale ci.", _SMALL))
def fig_4_5(rows: list[dict[str, Any]]) -> list[Comparison]:
    """Fig. 4.5 (accuracy panel): FABsum-v2 in fp16 against double-fp16 FABsum-v2 with b = 256 (A100)."""
    blocks = sorted({int(r["block"]) for r in rows if r.get("fabsum") and r["method"] == "fp16"})
    comps = []
    for b in blocks:
        x = ratio(rows, {"series": f"fp16 FABsum-v2 b={b}"}, {"series": "double-fp16 FABsum-v2 b=256"})
        comps.append(claim(f"fp16 FABsum-v2 b={b} / double-fp16 FABsum-v2 b=256 error", "above 1 (p. 16: fp16 "
                           "'does not reach the same level of accuracy')", x, x > 1))
    return comps
