"""Reproductions beyond the seeds: the project's own tables (``blockfma reproduce multiword-accuracy``,
``ozaki-slices``, ``h100-probe-records``): every multiword method, and Ozaki I and II against their slices and
moduli, each error held to its worst-case bound; and the probe table of the project's own H100 records
(``data/hardware``), each path replayed through today's H100 preset.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np

from .fasi2023 import from_rows
from .result import Comparison, Result, check_scale, result

__all__ = ["multiword_accuracy", "ozaki_slices", "h100_probe_records", "RECORDS", "hardware_folder"]

#: the probe records of data/hardware, each with the rule that names a path's preset instruction
RECORDS = ("h100-probe-cuda.json.gz", "h100-probe-cuda-wgmma-fp8.json.gz", "h100-probe-cuda-wgmma-fp8-1e6.json.gz")


def _bounded(rows: list[dict[str, Any]], what: Any) -> list[Comparison]:
    """Each row's componentwise error held to its worst-case bound (rows without one are skipped); ``what``
    names a row."""
    comps = []
    for r in rows:
        if r.get("bound") is None:
            continue
        ok = float(r["componentwise"]) <= float(r["bound"])
        comps.append(Comparison(f"{what(r)}: error <= bound", f"<= {float(r['bound']):.3g}",
                                float(f"{float(r['componentwise']):.3g}"), ok))
    return comps


@from_rows("multiword-accuracy", "Every multiword method on every simulated unit", "accuracy_table",
           notes=("No paper gives this table: the comparisons hold each error to its worst-case bound (Fasi et al. "
                  "2023, Table 2.1; Ozaki schemes have no bound row). A method whose word format a device has no "
                  "unit for (the V100 has no bf16 or tf32) gives no row.",))
def multiword_accuracy(rows: list[dict[str, Any]]) -> list[Comparison]:
    """Every multiword method on the V100, A100 and H100 presets' units, both seed distributions; each
    componentwise error against its worst-case bound."""
    return _bounded(rows, lambda r: f"{r['device']} {r['method']} {r['distribution']}")


@from_rows("ozaki-slices", "Ozaki I and II against slices and moduli", "ozaki_slices",
           notes=("No paper gives this figure: the comparisons hold each error to its worst-case bound "
                  "(blockfma.multiword.bounds.ozaki_bound for Ozaki I with the data's exponent spread; "
                  "gamma_n(2^-53) for fp64; Ozaki II has no bound row).",))
def ozaki_slices(rows: list[dict[str, Any]]) -> list[Comparison]:
    """Ozaki scheme I against its number of int8 slices and scheme II against its number of moduli, with
    native fp64 and the presets' fp64 matrix units as reference lines; each error against its bound."""
    return _bounded(rows, lambda r: f"{r['distribution']} n={r['n']} {r['series']}"
                    + (f" s={r['slices']}" if r.get("slices") else ""))


def hardware_folder() -> Path:
    """data/hardware of the checkout this package runs from."""
    return Path(__file__).resolve().parents[3] / "data" / "hardware"


def _preset(path: dict[str, Any]) -> Any:
    """The H100 preset model of a recorded path (its formats and instruction kind)."""
    from ..devices import device

    m = path["model"]
    fa, fb, fd = m["input"], m["input_b"] or m["input"], m["output"]
    name = path["target"]
    ins = "wgmma" if ":wgmma" in name else "mma"
    if fa in ("e4m3fn", "e5m2") and ins == "mma":
        ins = "mma.m16n8k16.fp8" if ".m16n8k16." in name else "mma.m16n8k32.fp8"
    dev = device("H100")
    try:
        return dev.model((fa, fb) if fa != fb else fa, fd, ins)
    except ValueError:
        return dev.model((fa, fb) if fa != fb else fa, fd)


def _replay(path: dict[str, Any], model: Any) -> tuple[int, int]:
    """(rows the probe recorded, rows where the model gives the GPU's bits) for one path."""
    from ..engine import dot

    obs = [r for o in path["observations"].values() for r in o]
    k = path["k"]

    def val(h: str) -> float:
        return float("nan") if h == "nan" else float.fromhex(h)

    A = np.array([[val(r["a"].get(str(i), "0x0p+0")) for i in range(k)] for r in obs])
    B = np.array([[val(r["b"].get(str(i), "0x0p+0")) for i in range(k)] for r in obs])
    C = np.array([val(r["c"]) for r in obs])
    want = np.array([val(r["d"]) for r in obs])
    got = np.asarray(dot(A, B, C, model=model), dtype=np.float64)
    same = ((got == want) & (np.signbit(got) == np.signbit(want))) | (np.isnan(got) & np.isnan(want))
    return len(obs), int(same.sum())


def h100_probe_records(*, scale: str = "ci", progress: Any = None) -> Result:
    """The probe table of the project's H100 records: one row per recorded path."""
    from ..model import Model

    scale = check_scale(scale)
    base = hardware_folder()
    rows: list[dict[str, Any]] = []
    comps: list[Comparison] = []
    seen: set[str] = set()
    missing = [f for f in RECORDS if not (base / f).exists()]
    for fname in RECORDS:
        if fname in missing:
            continue
        doc = json.loads(gzip.open(base / fname).read())
        for p in doc["paths"]:
            if p["target"] in seen:  # a later record of the same path (fewer rows) repeats it
                continue
            seen.add(p["target"])
            if progress is not None:
                progress(f"h100-probe-records: {p['target']}")
            last = p["verification"][-1] if p["verification"] else {}
            inferred = Model.from_dict(p["model"]) if p.get("model") else None
            preset = _preset(p)
            n, same = _replay(p, preset)
            rows.append({"record": fname, "path": p["target"].removeprefix("cuda:"), "formats": p["formats"],
                         "k": p["k"], "verified": p["verified"], "rows verified": last.get("rows"),
                         "mismatches": last.get("mismatches"),
                         "model": inferred.summary() if inferred is not None else None,
                         "recorded rows": n, "preset gives the GPU's bits": same})
            comps.append(Comparison(f"{p['target'].removeprefix('cuda:')}: recorded rows the H100 preset "
                                    f"reproduces", n, same, same == n))
    notes = ["The 'paper' here is the GPU: each path's recorded probe rows (exact hex inputs and the H100's outputs) "
             "replayed through today's H100 preset; 'rows verified' is the probe's own closed-loop check on the "
             "GPU when recorded (NVIDIA H100 80GB HBM3, 2026-11-22, data/hardware/README.md)."]
    if missing:
        notes.append(f"Not found here (an installed package without data/hardware): {', '.join(missing)}.")
    return result("h100-probe-records", "The probe table of the project's H100 records", rows,
                  comparisons=tuple(comps), notes=tuple(notes), scale=scale)
