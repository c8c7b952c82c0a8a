"""The multiword figures of the seed papers, as rows of data (plots apart, in :mod:`blockfma.plot`): Fasi,
Higham, Lopez, Mary, Mikaitis, SISC 45 (2023), :func:`fig_3_1`, :func:`fig_4_3`, :func:`fig_4_4`,
:func:`fig_4_5`; Valero-Lara, Liu, Vetter, Jorquera, SC-W 2023, :func:`valero_lara_fig_4`,
:func:`valero_lara_fig_5`; and :func:`ozaki_slices`, :func:`accuracy_table` (no seed figure).

Every function returns a list of rows (dicts, one per point) with the same core columns (:data:`COLUMNS`), takes
``sizes=``, ``seed=`` and ``scale=`` ("ci": seconds, "small": a few minutes on two cores, "paper": as close to the seed
as is practical), and is deterministic for a given seed except for the ``seconds`` column.  The inputs of one point are
the same for every series.  Words that underflow (:class:`blockfma.multiword.RangeWarning`) are caught here, only those,
and counted in ``range_warnings`` (warnings) and ``underflowed_entries`` (entries).

Error columns are the keys of :func:`blockfma.multiword.errors` but ``spectral`` (:func:`measures`).
``bound`` is the worst-case bound of :func:`blockfma.multiword.bound` on the componentwise error, where the
seed states one, and ``bound_probabilistic`` its sqrt(n) form (sec. 4.3).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
import os
import re
import time
import warnings
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from .. import formats as _formats
from ..formats import RoundingMode
from ..model import Family, Model
from ..multiword import METHODS, RangeWarning, TF64_UNIT, bound, errors, matmul, methods, metrics, ozaki, reference
from ..multiword import bounds as _bounds
from ..multiword.registry import REGISTRY

__all__ = ["SCALES", "COLUMNS", "DISTRIBUTIONS", "RN1_UNIT", "RN4_UNIT", "FP32_FMA_UNIT", "sample", "csv_cell",
           "double_fp16", "measures", "fig_3_1", "fig_4_3", "fig_4_3_units", "fig_4_4", "fig_4_5", "valero_lara_fig_4",
           "valero_lara_fig_5", "ozaki_slices", "accuracy_table", "write_csv", "read_csv", "sizes_note"]

SCALES = ("ci", "small", "paper")
FASI = "Fasi, Higham, Lopez, Mary, Mikaitis, SISC 45 (2023)"

COLUMNS = ("figure", "panel", "series", "method", "distribution", "m", "n", "q", "device", "model", "products",
           "unit_calls", "componentwise", "normwise_1", "normwise_2", "normwise_inf", "l1", "l2", "linf", "bound",
           "bound_probabilistic", "reference", "range_warnings", "underflowed_entries", "seconds", "seed", "scale")
"""The columns every row has, in CSV order (a figure's own columns follow)."""

Progress = Callable[[str], None] | None

# The idealised units of sec. 3 and 4.3.
RN1_UNIT = Model(Family.EXACT_FUSED, "fp16", "fp32", block_width=1,
                 name="RN block FMA, width 1 (fp16 -> fp32; Fasi et al. sec. 3)")
RN4_UNIT = Model(Family.EXACT_FUSED, "fp16", "fp32", block_width=4,
                 name="RN block FMA, width 4 (fp16 -> fp32; Fasi et al. sec. 4.3)")
FP32_FMA_UNIT = Model(Family.FMA_CHAIN, "fp32", "fp32", block_width=1,
                      name="fp32 FMA chain (block FMA of width 1 in fp32; Fasi et al. sec. 3)")


# ------------------------------------------------------------------------------------------------- data

def _rng(seed: int, *keys: Any) -> np.random.Generator:
    """A generator for (seed, keys): stable across runs and platforms (crc32 of each key's text)."""
    words = [int(seed) & 0xFFFFFFFF] + [zlib.crc32(str(k).encode()) for k in keys]
    return np.random.default_rng(np.random.SeedSequence(words))


def _double_fp16_pair(rng: np.random.Generator, dist: str, m: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Double-fp16 matrices A (m x n) and B (n x m) drawn from ``dist``, A first."""
    return double_fp16(sample(dist, (m, n), rng)), double_fp16(sample(dist, (n, m), rng))


DISTRIBUTIONS: dict[str, Callable[[np.random.Generator, tuple[int, ...]], np.ndarray]] = {
    "uniform(0,1]": lambda rng, shape: 1.0 - rng.random(shape),
    "uniform(-0.5,0.5]": lambda rng, shape: 0.5 - rng.random(shape),
    # Valero-Lara et al.'s generator (src/gemm_testing.c): (rand() + rand()) / (2 RAND_MAX), mapped to (-0.5, 0.5)
    "triangular(-0.5,0.5)": lambda rng, shape: (rng.random(shape) + rng.random(shape)) / 2.0 - 0.5,
    "normal(0,1)": lambda rng, shape: rng.standard_normal(shape),
    # Ozaki et al.'s test matrices: (U - 0.5) exp(4 N(0, 1)), some 40 binades
    "wide(phi=4)": lambda rng, shape: (rng.random(shape) - 0.5) * np.exp(4.0 * rng.standard_normal(shape)),
}
"""Entry distributions by name: the seed's two uniform ones, Valero-Lara et al.'s mean of two uniforms,
the standard normal, and Ozaki et al.'s wide-range (U - 0.5) exp(4 N(0, 1))."""


def sample(distribution: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Entries drawn from ``distribution`` (a key of :data:`DISTRIBUTIONS`), as float64."""
    try:
        gen = DISTRIBUTIONS[distribution]
    except KeyError:
        raise ValueError(f"unknown distribution {distribution!r}; known: {', '.join(DISTRIBUTIONS)}") from None
    return gen(rng, shape)


def double_fp16(X: np.ndarray) -> np.ndarray:
    """The seed's "double-fp16 matrix" nearest X: X1 + X2 with X1 = fl16(X), X2 = fl16(X - X1), exactly (so
    that fl64 = fl32 = X1 + X2 and the two-word split of sec. 2 is exact)."""
    X1 = _formats.round("fp16", X, RoundingMode.TiesToEven)
    X2 = _formats.round("fp16", X - X1, RoundingMode.TiesToEven)
    return X1 + X2


def _pow2(lo: int, hi: int, step: int = 1) -> tuple[int, ...]:
    return tuple(2**e for e in range(lo, hi + 1, step))


def _sizes_text(ns: Sequence[int]) -> str:
    ns = sorted(set(int(n) for n in ns))
    if not ns:
        return "-"

    def one(n: int) -> str:
        return f"2^{n.bit_length() - 1}" if n & (n - 1) == 0 else str(n)

    return one(ns[0]) if len(ns) == 1 else f"{one(ns[0])}..{one(ns[-1])}"


# ------------------------------------------------------------------------------------ measures and rows

def measures(C_hat: Any, C: Any, A: Any, B: Any) -> dict[str, float]:
    """The measures of :func:`blockfma.multiword.errors` but ``spectral``."""
    return errors(C_hat, C, A, B, spectral=False)


@dataclasses.dataclass
class _Warned:
    warnings: int = 0
    entries: int = 0


@contextmanager
def _range_warnings() -> Iterator[_Warned]:
    """Catch RangeWarnings (only those: others go on as they would) and count them and their entries."""
    got = _Warned()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RangeWarning)
        yield got
    for w in caught:
        if issubclass(w.category, RangeWarning):
            got.warnings += 1
            hit = re.match(r"\s*(\d+) entries", str(w.message))
            got.entries += int(hit.group(1)) if hit else 0
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


@dataclasses.dataclass
class _Result:
    C: np.ndarray
    unit: str
    calls: int
    seconds: float
    warned: _Warned


def _timed(fn: Callable[[], Any]) -> _Result:
    """Run fn() (a matmul with return_info=True: (C, info)) and time it, counting RangeWarnings."""
    with _range_warnings() as warned:
        t0 = time.perf_counter()
        C, info = fn()
        dt = time.perf_counter() - t0
    calls = info.get("calls")
    return _Result(np.asarray(C, dtype=np.float64), str(info.get("unit", "")), 1 if calls is None else int(calls),
                   dt, warned)


def _row(figure: str, series: str, method: str, distribution: str, A: np.ndarray, B: np.ndarray,
         res: _Result, C_ref: np.ndarray, *, panel: str = "", device: str = "", model: str | None = None,
         products: int = 1, bound: float | None = None, bound_probabilistic: float | None = None,
         ref: str = "", seed: int = 0, scale: str = "", **extra: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "figure": figure, "panel": panel, "series": series, "method": method, "distribution": distribution,
        "m": A.shape[0], "n": A.shape[1], "q": B.shape[1], "device": device,
        "model": res.unit if model is None else model, "products": products, "unit_calls": res.calls,
    }
    row.update(measures(res.C, C_ref, A, B))
    row.update({"bound": bound, "bound_probabilistic": bound_probabilistic, "reference": ref,
                "range_warnings": res.warned.warnings, "underflowed_entries": res.warned.entries,
                "seconds": round(res.seconds, 4), "seed": seed, "scale": scale})
    row.update(extra)
    return row


def _reference(A: np.ndarray, B: np.ndarray, exact: bool | str) -> tuple[np.ndarray, str]:
    """The reference product and its name: exact (correctly rounded) or one float64 BLAS product.
    ``exact="auto"``: exact while m n q <= 2**20 (seconds at most), float64 beyond (its error, about
    1e-15 of |A||B|, is far below the fp32-level errors measured against it; Fasi et al. use fp64)."""
    if exact == "auto":
        exact = A.shape[0] * A.shape[1] * B.shape[1] <= 2**20
    if exact:
        return reference(A, B, exact=True), "exact"
    return reference(A, B), "fp64"


def _say(progress: Progress, text: str) -> None:
    if progress is not None:
        progress(text)


def _pick(value: Any, defaults: dict[str, Any], scale: str) -> Any:
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {', '.join(SCALES)}; got {scale!r}")
    return defaults[scale] if value is None else value


def _bound(method: str, n: int, **kw: Any) -> float | None:
    try:
        return float(bound(method, n, **kw))
    except (ValueError, TypeError):
        return None


def _bound_cols(method: str, n: int, **kw: Any) -> dict[str, float | None]:
    """A row's ``bound`` and ``bound_probabilistic`` (None where the method has none)."""
    return {"bound": _bound(method, n, **kw), "bound_probabilistic": _bound(method, n, probabilistic=True, **kw)}


def _fp32_baseline(fig: str, A: np.ndarray, B: np.ndarray, C: np.ndarray, **extra: Any) -> dict[str, Any]:
    """The "fp32 (BLAS)" row (numpy's float32 matmul) with its worst-case and probabilistic bounds."""
    n = A.shape[1]
    res = _timed(lambda: matmul(A, B, method="fp32", return_info=True))
    return _row(fig, "fp32 (BLAS)", "fp32", A=A, B=B, res=res, C_ref=C, model="numpy float32 matmul",
                **_bound_cols("fp32", n, input_format="fp32"), **extra)


# ------------------------------------------------------------------------------------------ Fasi Fig 3.1

_SIZES_3_1 = {"ci": (64, 256), "small": _pow2(9, 16), "paper": _pow2(9, 20)}


def fig_3_1(sizes: Sequence[int] | None = None, *, seed: int = 0, scale: str = "small",
            distributions: Sequence[str] = ("uniform(0,1]", "uniform(-0.5,0.5]"), m: int = 16,
            four_products: bool = True, exact_reference: bool | str = "auto",
            progress: Progress = None) -> list[dict[str, Any]]:
    """Fasi et al., Fig. 3.1: componentwise error against n of fp16, double-fp16 and fp32 on an idealised
    block FMA of width 1 that rounds to nearest (:data:`RN1_UNIT`; the seed simulates it with CPFloat).

    A (m x n) and B (n x m), m = 16, are double-fp16 matrices (:func:`double_fp16`) with entries from each
    distribution.  Series: "fp16", "double-fp16" (Algorithm 2.1, 3 products), "double-fp16 (4 products)"
    (with A2B2: the variant the seed tried and found indistinguishable), "fp32 (FMA chain)" (what the seed
    computes: fp32 FMAs in k order, :data:`FP32_FMA_UNIT`) and "fp32 (BLAS)" (numpy's float32 matmul, a
    blocked SIMD summation, so more accurate).  The seed's n: 2^9 to 2^20."""
    sizes = tuple(_pick(sizes, _SIZES_3_1, scale))
    fig = "fig_3_1"
    rows: list[dict[str, Any]] = []
    rn1 = RN1_UNIT.name
    for dist in distributions:
        for n in sizes:
            A, B = _double_fp16_pair(_rng(seed, fig, dist, n), dist, m, n)
            C, ref = _reference(A, B, exact_reference)
            common = dict(distribution=dist, ref=ref, seed=seed, scale=scale, panel=dist)
            runs: list[tuple[str, str, Callable[[], Any], str, int, dict[str, Any]]] = [
                ("fp16", "fp16", lambda: matmul(A, B, method="fp16", model=RN1_UNIT, return_info=True), rn1, 1, {}),
                ("double-fp16", "double-fp16",
                 lambda: matmul(A, B, method="double-fp16", model=RN1_UNIT, return_info=True), rn1, 3, {}),
            ]
            if four_products:
                runs.append(("double-fp16 (4 products)", "double-fp16",
                             lambda: matmul(A, B, method="double-fp16", model=RN1_UNIT, return_info=True,
                                            order=((0, 0), (0, 1), (1, 0), (1, 1))), rn1, 4, {"products": "all"}))
            runs += [
                ("fp32 (FMA chain)", "fp32", lambda: _engine_gemm(A, B, FP32_FMA_UNIT), FP32_FMA_UNIT.name, 1,
                 {"input_format": "fp32"}),
                ("fp32 (BLAS)", "fp32", lambda: matmul(A, B, method="fp32", return_info=True), "numpy float32 matmul",
                 1, {"input_format": "fp32"}),
            ]
            for series, method, fn, unit, products, bkw in runs:
                res = _timed(fn)
                rows.append(_row(fig, series, method, A=A, B=B, res=res, C_ref=C, model=unit, products=products,
                                 **_bound_cols(method, n, **bkw), **common))
                _say(progress, f"{fig} {dist} n={n} {series}: {rows[-1]['componentwise']:.3g} ({res.seconds:.2f} s)")
    return rows


def _engine_gemm(A: np.ndarray, B: np.ndarray, model: Model) -> tuple[np.ndarray, dict[str, Any]]:
    from ..engine import gemm

    return np.asarray(gemm(A, B, None, model=model), dtype=np.float64), {"unit": model.name, "calls": 1}


# ------------------------------------------------------------------------------------------ Fasi Fig 4.3

def fig_4_3_units() -> dict[str, tuple[Model, str]]:
    """The units of :func:`fig_4_3`: name -> (model, how it rounds in the bounds' terms, "rz" or "rn")."""
    from ..devices import device

    v100 = device("V100").model("fp16", "fp32")
    rn_out = dataclasses.replace(v100, output_rounding=RoundingMode.TiesToEven,
                                 name="V100 fp16->fp32, RN output (alignment still truncates)")
    return {"RZ (V100)": (v100, "rz"), "RN": (RN4_UNIT, "rn"), "V100, RN output only": (rn_out, "rz")}


def fig_4_3(sizes: Sequence[int] | None = None, *, seed: int = 0, scale: str = "small",
            distributions: Sequence[str] = ("uniform(0,1]", "uniform(-0.5,0.5]"), m: int = 16,
            split_k: int = 16, units: Sequence[str] | None = None, exact_reference: bool | str = "auto",
            progress: Progress = None) -> list[dict[str, Any]]:
    """Fasi et al., Fig. 4.3: fp16 and double-fp16 on simulated block FMAs of width 4, the V100's (its
    preset: truncated alignment, round-toward-zero output, blocks chained) against one that rounds to
    nearest (:data:`RN4_UNIT`), and a third unit, the V100 with only its output rounding changed to RN.

    As in sec. 4.3, m = q = 16 and each dot product is cut into ``split_k`` = 16 blocks of ceil(n/16)
    (cublasGemmEx's split-K; the blocks added in fp32, rounding to nearest: FABsum-v1 with b = n/16 on the
    leading product, which dominates); ``split_k=1`` chains the unit over all of n.  The seed shows (0,1]
    data only; (-0.5,0.5] is added.  "fp32 (BLAS)" is numpy's float32 matmul, panel "baseline".  The
    bounds: Theorem 2.1 with u_fp32 = 2^-23 for units that truncate (the standard model's u for RZ) and
    2^-24 for RN; the probabilistic one keeps the unit's n for truncating units (sec. 4.3)."""
    sizes = tuple(_pick(sizes, _SIZES_3_1, scale))
    fig = "fig_4_3"
    table = fig_4_3_units()
    chosen = list(table) if units is None else list(units)
    for u in chosen:
        if u not in table:
            raise ValueError(f"unknown unit {u!r}; known: {', '.join(table)}")
    rows: list[dict[str, Any]] = []
    for dist in distributions:
        for n in sizes:
            A, B = _double_fp16_pair(_rng(seed, fig, dist, n), dist, m, n)
            C, ref = _reference(A, B, exact_reference)
            block = -(-n // split_k) if split_k > 1 else None
            summ = "fabsum-v1" if block is not None and block < n else None
            common = dict(distribution=dist, ref=ref, seed=seed, scale=scale, split_k=split_k,
                          block=block if summ else None)
            for uname in chosen:
                unit, rnd = table[uname]
                uh = 2.0**-23 if rnd == "rz" else 2.0**-24
                for method, products in (("fp16", 1), ("double-fp16", 3)):
                    res = _timed(lambda: matmul(A, B, method=method, model=unit, summation=summ,
                                                block=block if summ else None, return_info=True))
                    rows.append(_row(fig, method, method, A=A, B=B, res=res, C_ref=C, panel=uname,
                                     device="V100" if "V100" in uname else "", model=unit.name, products=products,
                                     **_bound_cols(method, n, u_high=uh, rounding=rnd), rounding=rnd, **common))
                    _say(progress, f"{fig} {dist} n={n} {uname} {method}: {rows[-1]['componentwise']:.3g} "
                                   f"({res.seconds:.2f} s)")
            rows.append(_fp32_baseline(fig, A, B, C, panel="baseline", rounding="rn", **common))
    return rows


# ------------------------------------------------------------------------------------ Fasi Figs 4.4, 4.5

_SIZES_4_4 = {"ci": (256, 1024), "small": _pow2(10, 16, 2), "paper": _pow2(10, 20, 2)}
_OUTER_4_4 = {"ci": 8, "small": 32, "paper": 32}
_BLOCKS_4_4 = {"ci": (32, 128), "small": (128, 256, 512), "paper": (128, 256, 512)}
_BLOCKS_4_5 = {"ci": (32, 128), "small": (128, 256, 512, 1024), "paper": (128, 256, 512, 1024)}


def _fabsum_problems(sizes: Sequence[int] | None, outer: int | None, scale: str, distribution: str, seed: int,
                     exact_reference: bool | str) -> Iterator[tuple[int, np.ndarray, np.ndarray, np.ndarray, str]]:
    """Figs. 4.4 and 4.5's matrices (the same for both): (n, A, B, the reference product, its kind) for each
    inner dimension n, A outer x n and B n x outer double-fp16 matrices."""
    outer = int(_pick(outer, _OUTER_4_4, scale))
    for n in tuple(_pick(sizes, _SIZES_4_4, scale)):
        A, B = _double_fp16_pair(_rng(seed, "fig_4_4", distribution, n, outer), distribution, outer, n)
        yield (n, A, B, *_reference(A, B, exact_reference))


def fig_4_4(sizes: Sequence[int] | None = None, *, seed: int = 0, scale: str = "small",
            devices: Sequence[str] = ("V100", "A100"), blocks: Sequence[int] | None = None,
            outer: int | None = None, split_k: Sequence[int] = (1, 16), distribution: str = "uniform(0,1]",
            exact_reference: bool | str = "auto", progress: Progress = None) -> list[dict[str, Any]]:
    """Fasi et al., Fig. 4.4 (right panel; accuracy only): double-fp16 by Algorithm 4.1 (cuBLAS order, every
    product chained in the unit) against Algorithm 4.4 (A2B1 and A1B2 as 4.1, A1B1 by FABsum-v1 or -v2 with
    block size b) and fp32, on each device's preset fp16 unit.

    The seed: double-fp16 matrices 512 x n and n x 512 on (0,1].  Here the outer dimension is ``outer``
    (small: 32) so that the simulation fits the time; the maximum over fewer entries is a little smaller.
    Algorithm 4.1 is run for each ``split_k``: 1 chains the unit over all of n; 16 is how sec. 4.3 models
    cublasGemmEx (A1B1 in 16 blocks of n/16 added in fp32, i.e. FABsum-v1 with b = n/16).  ``bound``:
    Theorem 2.1 for Algorithm 4.1, the sec. 4.4 form b u + (n/b) u_acc for FABsum."""
    blocks = tuple(_pick(blocks, _BLOCKS_4_4, scale))
    fig = "fig_4_4"
    rows: list[dict[str, Any]] = []
    for n, A, B, C, ref in _fabsum_problems(sizes, outer, scale, distribution, seed, exact_reference):
        common = dict(distribution=distribution, ref=ref, seed=seed, scale=scale)
        rows.append(_fp32_baseline(fig, A, B, C, panel="baseline", block=None, fabsum=None, **common))
        for dev in devices:
            for sk in split_k:
                blk = -(-n // sk)
                summ = "fabsum-v1" if blk < n else None
                res = _timed(lambda: matmul(A, B, method="double-fp16", device=dev, order="cublas", summation=summ,
                                            block=blk if summ else None, return_info=True))
                series = "double-fp16 (Alg. 4.1)" if sk == 1 else f"double-fp16 (Alg. 4.1, split-K {sk})"
                rows.append(_row(fig, series, "double-fp16", A=A, B=B, res=res, C_ref=C, panel=dev, device=dev,
                                 products=3, **_bound_cols("double-fp16", n, rounding="rz"),
                                 block=blk if summ else None, fabsum=None, **common))
                _say(progress, f"{fig} n={n} {dev} {series}: {rows[-1]['componentwise']:.3g} ({res.seconds:.2f} s)")
            for version in (1, 2):
                for b in blocks:
                    res = _timed(lambda: matmul(A, B, method="double-fp16", device=dev, order="cublas",
                                                summation=f"fabsum-v{version}", block=b, return_info=True))
                    rows.append(_row(fig, f"FABsum-v{version} b={b}", "double-fp16", A=A, B=B, res=res, C_ref=C,
                                     panel=dev, device=dev, products=3, **_bound_cols(f"fabsum-v{version}", n, b=b),
                                     block=b, fabsum=f"v{version}", **common))
                    _say(progress, f"{fig} n={n} {dev} FABsum-v{version} b={b}: {rows[-1]['componentwise']:.3g} "
                                   f"({res.seconds:.2f} s)")
    return rows


def fig_4_5(sizes: Sequence[int] | None = None, *, seed: int = 0, scale: str = "small", device: str = "A100",
            blocks: Sequence[int] | None = None, double_block: int = 256, outer: int | None = None,
            distribution: str = "uniform(0,1]", exact_reference: bool | str = "auto",
            progress: Progress = None) -> list[dict[str, Any]]:
    """Fasi et al., Fig. 4.5 (right panel; accuracy only): FABsum-v2 in plain fp16 (one word) for several
    block sizes against FABsum-v2 in double-fp16 with b = 256 (Algorithm 4.4), on the A100's preset, with
    fp32 for reference.  Matrices as :func:`fig_4_4` (the seed: 512 x n, (0,1])."""
    blocks = tuple(_pick(blocks, _BLOCKS_4_5, scale))
    fig = "fig_4_5"
    rows: list[dict[str, Any]] = []
    for n, A, B, C, ref in _fabsum_problems(sizes, outer, scale, distribution, seed, exact_reference):
        common = dict(distribution=distribution, ref=ref, seed=seed, scale=scale, panel=device)
        rows.append(_fp32_baseline(fig, A, B, C, block=None, fabsum=None, **common))
        res = _timed(lambda: matmul(A, B, method="double-fp16", device=device, order="cublas",
                                    summation="fabsum-v2", block=double_block, return_info=True))
        rows.append(_row(fig, f"double-fp16 FABsum-v2 b={double_block}", "double-fp16", A=A, B=B, res=res,
                         C_ref=C, device=device, products=3, **_bound_cols("fabsum-v2", n, b=double_block),
                         block=double_block, fabsum="v2", **common))
        for b in blocks:
            res = _timed(lambda: matmul(A, B, method="fp16", device=device, summation="fabsum-v2", block=b,
                                        return_info=True))
            fb = _bound("fabsum-v2", n, b=b)
            fbp = _bound("fabsum-v2", n, b=b, probabilistic=True)
            split = 2 * 2.0**-11  # A and B rounded to fp16: Table 2.1's constant
            rows.append(_row(fig, f"fp16 FABsum-v2 b={b}", "fp16", A=A, B=B, res=res, C_ref=C, device=device,
                             products=1, bound=None if fb is None else split + fb,
                             bound_probabilistic=None if fbp is None else split + fbp, block=b, fabsum="v2",
                             **common))
            _say(progress, f"{fig} n={n} fp16 FABsum-v2 b={b}: {rows[-1]['componentwise']:.3g} ({res.seconds:.2f} s)")
    return rows


# -------------------------------------------------------------------------------- Valero-Lara Figs 4, 5

_SIZES_VL4 = {"ci": (16, 32), "small": _pow2(6, 10), "paper": _pow2(7, 12)}
_SIZES_VL5 = {"ci": (8, 16), "small": _pow2(6, 10), "paper": _pow2(7, 11)}


def _vs(C_hat: np.ndarray, C_base: np.ndarray, A: np.ndarray, B: np.ndarray) -> dict[str, float]:
    """||C_hat - C_base|| / (||A|| ||B||), elementwise norms: the seed's |SGEMM - 3xTF32| panel."""
    return {f"vs_baseline_{k}": metrics.normwise(C_hat, C_base, o, A=A, B=B)
            for k, o in (("l1", 1), ("l2", 2), ("linf", np.inf))}


def valero_lara_fig_4(sizes: Sequence[int] | None = None, *, seed: int = 0, scale: str = "small",
                      device: str = "A100", distribution: str = "triangular(-0.5,0.5)",
                      progress: Progress = None) -> list[dict[str, Any]]:
    """Valero-Lara et al., Fig. 4: SGEMM (numpy float32), 1xFP16, 1xTF32, 3xTF32 and 4xTF32 on the A100's
    preset units, for square fp32 matrices n x n; their error ``l2`` (||C - C_hat||_F / (||A||_F ||B||_F)),
    with ``l1``/``linf`` too, against the exact product; ``vs_baseline_*`` is the right panel,
    ||SGEMM - method|| / (||A|| ||B||).  Data as their artifact: the mean of two uniforms on (-0.5, 0.5),
    rounded to fp32; their sizes 128 to 32768.  The 3x/4xTF32 here chain the products in the unit's
    accumulator (NVIDIA's 3xTF32; the seed's pseudocode); their artifact adds separate products in fp32."""
    sizes = tuple(_pick(sizes, _SIZES_VL4, scale))
    fig = "valero_lara_fig_4"
    rows: list[dict[str, Any]] = []
    for n in sizes:
        rng = _rng(seed, fig, distribution, n)
        A = sample(distribution, (n, n), rng).astype(np.float32).astype(np.float64)
        B = sample(distribution, (n, n), rng).astype(np.float32).astype(np.float64)
        C = reference(A, B, exact=True)
        common = dict(distribution=distribution, ref="exact", seed=seed, scale=scale, panel="")
        base = _timed(lambda: matmul(A, B, method="fp32", return_info=True))
        runs = [("SGEMM", "fp32", base, "", 1, {"input_format": "fp32"})]
        for series, method, products in (("1xFP16", "fp16", 1), ("1xTF32", "tf32", 1), ("3xTF32", "3xtf32", 3),
                                         ("4xTF32", "4xtf32", 4)):
            res = _timed(lambda: matmul(A, B, method=method, device=device, return_info=True))
            runs.append((series, method, res, device, products, {}))
        for series, method, res, dev, products, bkw in runs:
            rows.append(_row(fig, series, method, A=A, B=B, res=res, C_ref=C, device=dev,
                             model="numpy float32 matmul" if method == "fp32" else None, products=products,
                             **_bound_cols(method, n, **bkw), **_vs(res.C, base.C, A, B), **common))
            _say(progress, f"{fig} n={n} {series}: l2 {rows[-1]['l2']:.3g} ({res.seconds:.2f} s)")
    return rows


def valero_lara_fig_5(sizes: Sequence[int] | None = None, *, seed: int = 0, scale: str = "small",
                      distribution: str = "triangular(-0.5,0.5)", progress: Progress = None) -> list[dict[str, Any]]:
    """Valero-Lara et al., Fig. 5: DGEMM (numpy float64), SGEMM, 1xTF64, 3xTF64 and 4xTF64 (fp32 words on
    the proposed TF64 unit, :data:`blockfma.multiword.TF64_UNIT`: exact products, fp64 accumulation) for
    square fp64 matrices; error ``l2`` against the exact product (theirs: quad precision), and
    ``vs_baseline_*`` = ||DGEMM - method|| / (||A|| ||B||).  Their sizes 128 to 16384; the TF64 unit runs
    on blockfma's numpy engine here, so the sizes are small.  (Their artifact splits by truncating to fp32
    and adds separate products in fp64; blockfma's tf64 rounds to nearest and chains the products.)"""
    sizes = tuple(_pick(sizes, _SIZES_VL5, scale))
    fig = "valero_lara_fig_5"
    four = ((1, 1), (1, 0), (0, 1), (0, 0))
    rows: list[dict[str, Any]] = []
    for n in sizes:
        rng = _rng(seed, fig, distribution, n)
        A = sample(distribution, (n, n), rng)
        B = sample(distribution, (n, n), rng)
        C = reference(A, B, exact=True)
        common = dict(distribution=distribution, ref="exact", seed=seed, scale=scale, panel="")
        base = _timed(lambda: matmul(A, B, method="fp64", return_info=True))
        runs: list[tuple[str, str, _Result, int, dict[str, float | None]]] = [
            ("DGEMM", "fp64", base, 1, _bound_cols("fp64", n))]
        res = _timed(lambda: matmul(A, B, method="fp32", return_info=True))
        runs.append(("SGEMM", "fp32", res, 1, _bound_cols("fp32", n)))
        res = _timed(lambda: matmul(A, B, method="mmm", p=1, low="fp32", model=TF64_UNIT, return_info=True))
        runs.append(("1xTF64", "mmm", res, 1, _bound_cols("mmm", n, p=1, low="fp32", high="fp64")))
        res = _timed(lambda: matmul(A, B, method="tf64", return_info=True))
        runs.append(("3xTF64", "tf64", res, 3, _bound_cols("tf64", n)))
        res = _timed(lambda: matmul(A, B, method="tf64", order=four, return_info=True))
        runs.append(("4xTF64", "tf64", res, 4, _bound_cols("tf64", n, products="all")))
        for series, method, res, products, bds in runs:
            rows.append(_row(fig, series, method, A=A, B=B, res=res, C_ref=C, products=products, **bds,
                             model=res.unit or f"numpy {'float64' if method == 'fp64' else 'float32'} matmul",
                             **_vs(res.C, base.C, A, B), **common))
            _say(progress, f"{fig} n={n} {series}: l2 {rows[-1]['l2']:.3g} ({res.seconds:.2f} s)")
    return rows


# --------------------------------------------------------------------------------------------- Ozaki

_SIZES_OZ = {"ci": (32,), "small": (256,), "paper": (512,)}
_SLICES_OZ = {"ci": (1, 2, 4, 8), "small": tuple(range(1, 13)), "paper": tuple(range(1, 15))}
_MODULI_OZ = {"ci": (4, 8, 16), "small": tuple(range(2, 21)), "paper": tuple(range(2, 21))}


def _fp64_units(devices: Iterable[str]) -> tuple[list[tuple[Model, list[str]]], list[str]]:
    """The presets' fp64 matrix units, merged where they compute the same (same family, formats, width and
    rounding); and the devices without one."""
    from ..devices import device as _device

    merged: dict[tuple[Any, ...], tuple[Model, list[str]]] = {}
    missing: list[str] = []
    for name in devices:
        try:
            mdl = _device(name).model("fp64", "fp64")
        except ValueError:
            missing.append(name)
            continue
        key = (mdl.family, mdl.input_format.name, mdl.output_format.name, mdl.block_width, mdl.output_rounding)
        merged.setdefault(key, (mdl, []))[1].append(name)
    return list(merged.values()), missing


def ozaki_slices(sizes: Sequence[int] | None = None, *, seed: int = 0, scale: str = "small",
                 distributions: Sequence[str] = ("normal(0,1)", "wide(phi=4)"), slices: Sequence[int] | None = None,
                 moduli: Sequence[int] | None = None, devices: Sequence[str] = ("V100", "A100", "H100", "MI300X"),
                 progress: Progress = None) -> list[dict[str, Any]]:
    """Ozaki scheme I against the number of int8 slices and scheme II against the number of moduli, for
    square n x n fp64 matrices on standard normal and wide-range data, against the exact product.

    The int8 unit is exact on every device (int32 accumulation), so the device does not change these numbers.  Reference
    lines: "fp64 (BLAS)" (numpy float64) and each preset's fp64 matrix unit where it has one (DMMA on A100/H100, MFMA on
    MI300X: the same FMA chain, so one row naming them all; the V100 preset has none, which the row's ``note`` says).
    ``products`` counts int8 GEMMs: s(s+1)/2 for scheme I (s slices), one per modulus for scheme II.  ``bound``:
    :func:`blockfma.multiword.bounds.ozaki_bound` with the data's exponent spread."""
    sizes = tuple(_pick(sizes, _SIZES_OZ, scale))
    slices = tuple(_pick(slices, _SLICES_OZ, scale))
    moduli = tuple(_pick(moduli, _MODULI_OZ, scale))
    fig = "ozaki_slices"
    units, missing = _fp64_units(devices)
    note = f"no fp64 matrix unit in the preset: {', '.join(missing)}" if missing else ""
    rows: list[dict[str, Any]] = []
    for dist in distributions:
        for n in sizes:
            rng = _rng(seed, fig, dist, n)
            A = sample(dist, (n, n), rng)
            B = sample(dist, (n, n), rng)
            C = reference(A, B, exact=True)
            spread = _bounds.exponent_spread(A, B)
            width = ozaki.slice_width(n)
            common = dict(distribution=dist, ref="exact", seed=seed, scale=scale, panel=dist)
            res = _timed(lambda: matmul(A, B, method="fp64", return_info=True))
            rows.append(_row(fig, "fp64 (BLAS)", "fp64", A=A, B=B, res=res, C_ref=C, model="numpy float64 matmul",
                             **_bound_cols("fp64", n), slices=None, moduli=None, exponent_spread=spread, note=note,
                             **common))
            for mdl, names in units:
                res = _timed(lambda: _engine_gemm(A, B, mdl))
                rows.append(_row(fig, f"fp64 unit ({', '.join(names)})", "fp64", A=A, B=B, res=res, C_ref=C,
                                 device=" ".join(names), model=mdl.name, **_bound_cols("fp64", n), slices=None,
                                 moduli=None, exponent_spread=spread, note=note, **common))
                _say(progress, f"{fig} {dist} n={n} fp64 unit {names}: {rows[-1]['componentwise']:.3g} "
                               f"({res.seconds:.2f} s)")
            for s in slices:
                res = _timed(lambda: matmul(A, B, method="ozaki1", slices=s, return_info=True))
                res.calls = s * (s + 1) // 2  # int8 GEMMs: the pairs with s + t <= slices + 1
                rows.append(_row(fig, "Ozaki I", "ozaki1", A=A, B=B, res=res, C_ref=C, products=s * (s + 1) // 2,
                                 **_bound_cols("ozaki1", n, slices=s, slice_bits=width, exponent_spread=spread),
                                 slices=s, moduli=None, exponent_spread=spread, note=note, **common))
            for k in moduli:
                res = _timed(lambda: matmul(A, B, method="ozaki2", n_moduli=k, return_info=True))
                res.calls = k * -(-n // 131071)  # one int8 GEMM per modulus and k-chunk
                rows.append(_row(fig, "Ozaki II", "ozaki2", A=A, B=B, res=res, C_ref=C, products=k, slices=None,
                                 moduli=k, exponent_spread=spread, note=note, **common))
            _say(progress, f"{fig} {dist} n={n}: Ozaki I {len(slices)} slice counts, II {len(moduli)} moduli counts")
    return rows


# ------------------------------------------------------------------------------------ accuracy table

_SIZES_TABLE = {"ci": (64,), "small": (1024,), "paper": (4096,)}
_OUTER_TABLE = {"ci": 16, "small": 64, "paper": 256}


def _device_free(name: str) -> bool:
    """Whether method ``name``'s unit does not depend on the device (the TF64 unit, Ozaki's exact int8
    unit, the native GEMMs)."""
    entry = REGISTRY[name]
    return entry.high == "fp64" or entry.kind == "native"


def accuracy_table(sizes: Sequence[int] | None = None, *, seed: int = 0, scale: str = "small",
                   devices: Sequence[str] = ("V100", "A100", "H100"),
                   distributions: Sequence[str] = ("uniform(0,1]", "uniform(-0.5,0.5]"), outer: int | None = None,
                   progress: Progress = None) -> list[dict[str, Any]]:
    """Every method of :func:`blockfma.multiword.methods` (but "mmm") on each device's preset units, for A (outer x n)
    and B (n x outer) fp32 matrices from the seeds' two distributions (fp64 matrices for the fp64-level methods: tf64,
    Ozaki, fp64).  A method whose word format the device has no unit for (the V100 has no bf16 or tf32) gives no row.
    tf64, Ozaki (exact int8 units) and the fp32/fp64 baselines do not depend on the device: they are computed once per
    distribution and repeated on each device's rows.  Reference: exact for the fp64-level methods; for the others exact
    while outer^2 n <= 2**20, else float64 BLAS (see ``reference`` column)."""
    sizes = tuple(_pick(sizes, _SIZES_TABLE, scale))
    q = int(_pick(outer, _OUTER_TABLE, scale))
    fig = "accuracy_table"
    names = [x for x in methods() if x != "mmm"]
    rows: list[dict[str, Any]] = []
    for dist in distributions:
        for n in sizes:
            rng = _rng(seed, fig, dist, n)
            A64, B64 = sample(dist, (q, n), rng), sample(dist, (n, q), rng)
            A32, B32 = (X.astype(np.float32).astype(np.float64) for X in (A64, B64))
            refs = {False: _reference(A32, B32, "auto"), True: _reference(A64, B64, True)}
            once: dict[str, dict[str, Any]] = {}
            for dev in devices:
                for name in names:
                    fp64 = REGISTRY[name].high == "fp64"  # fp64 data, against the exact product
                    A, B = (A64, B64) if fp64 else (A32, B32)
                    C, ref = refs[fp64]
                    common = dict(distribution=dist, ref=ref, seed=seed, scale=scale, panel=dist, device=dev)
                    if name in once:
                        rows.append({**once[name], "device": dev})
                        continue
                    kw: dict[str, Any] = {} if _device_free(name) else {"device": dev}
                    try:
                        res = _timed(lambda: matmul(A, B, method=name, return_info=True, **kw))
                    except ValueError as exc:  # the device has no unit for these words: no row
                        if "unit" not in str(exc):
                            raise
                        _say(progress, f"{fig} {dist} n={n} {dev} {name}: {str(exc).split(' (')[0]}")
                        continue
                    prod = len(METHODS[name].products) if name in METHODS else 1
                    row = _row(fig, name, name, A=A, B=B, res=res, C_ref=C, products=prod, **_bound_cols(name, n),
                               **common)
                    rows.append(row)
                    if _device_free(name):
                        once[name] = row
                    _say(progress, f"{fig} {dist} n={n} {dev} {name}: {row['componentwise']:.3g} "
                                   f"({res.seconds:.2f} s)")
    return rows


# ---------------------------------------------------------------------------------------------------- CSV

def columns(rows: Sequence[dict[str, Any]], first: Sequence[str] = COLUMNS) -> list[str]:
    """The rows' columns: those of ``first`` that some row has, then the others in order of appearance."""
    cols = [c for c in first if any(c in r for r in rows)]
    for r in rows:
        cols.extend(k for k in r if k not in cols)
    return cols


def csv_cell(v: Any) -> str:
    """A CSV cell of a record's value: empty for None, floats exactly (``repr``, "nan"), lists and tuples
    joined by "; ", anything else by ``str``."""
    if isinstance(v, (list, tuple)):
        return "; ".join(map(str, v))
    if v is None:
        return ""
    if isinstance(v, float):
        return "nan" if math.isnan(v) else repr(v)
    return str(v)


def write_csv(rows: Sequence[dict[str, Any]], path: str | os.PathLike[str]) -> Path | None:
    """Write rows as CSV with a header (the core :data:`COLUMNS` first, empty cells for None), atomically
    through :func:`blockfma.files.write_text`: a regular file (a symbolic link is followed) in a folder that
    exists, or ``"-"`` for standard output (then None is returned, else the path)."""
    from ..files import destination, write_text

    destination(path)  # a bad path fails before the rows are formatted
    return write_text(path, csv_text(rows, columns(rows)))


def csv_text(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """The rows as CSV text: a header of ``columns``, then one line per row (cells by :func:`csv_cell`)."""
    buf = io.StringIO(newline="")
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    for r in rows:
        w.writerow([csv_cell(r.get(c)) for c in columns])
    return buf.getvalue()


def _parse(text: str) -> Any:
    if text == "":
        return None
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def read_csv(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Rows back from :func:`write_csv` (numbers as int or float, empty cells as None)."""
    with open(path, newline="") as f:
        return [{k: _parse(v) for k, v in r.items()} for r in csv.DictReader(f)]


def sizes_note(rows: Sequence[dict[str, Any]]) -> str:
    """'m x n x q' ranges of the rows, for a figure's note (e.g. "m = q = 16, n = 2^9..2^16")."""
    ms = {r["m"] for r in rows}
    qs = {r["q"] for r in rows}
    ns = [r["n"] for r in rows]
    if ms == qs and len(ms) == 1 and ms != set(ns):
        return f"m = q = {ms.pop()}, n = {_sizes_text(ns)}"
    if all(r["m"] == r["n"] == r["q"] for r in rows):
        return f"n x n, n = {_sizes_text(ns)}"
    return f"m = {_sizes_text(list(ms))}, n = {_sizes_text(ns)}, q = {_sizes_text(list(qs))}"
