"""The probe suite's hardware records (data/hardware/h100-probe-cuda.json.gz) against the presets.

Each path of the record holds what ``blockfma.probe`` saw through the H100's ``mma.sync`` (every feature
test's rows with the GPU's outputs, in exact hex), the model it inferred and its verification on 10^6 rows.
The presets must reproduce every recorded row, and each inferred model must equal the preset on one
instruction.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

import blockfma as bf
from blockfma.model import Model
from blockfma.probes.infer import disagreements

RECORD = Path(__file__).resolve().parents[1] / "data" / "hardware" / "h100-probe-cuda.json.gz"
DOC = json.loads(gzip.open(RECORD).read()) if RECORD.exists() else {"paths": []}
PATHS = {p["target"]: p for p in DOC["paths"]}


def preset(p: dict) -> Model:
    m = p["model"]
    fa, fb, fd = m["input"], m["input_b"] or m["input"], m["output"]
    name = p["target"]
    ins = "mma"
    if fa in ("e4m3fn", "e5m2"):
        ins = "mma.m16n8k16.fp8" if ".m16n8k16." in name else "mma.m16n8k32.fp8"
    return bf.device("H100").model((fa, fb) if fa != fb else fa, fd, ins)


def _value(h: str) -> float:
    return float("nan") if h == "nan" else float.fromhex(h)


def test_record_holds_the_paths():
    assert len(PATHS) >= 20
    for p in PATHS.values():
        last = p["verification"][-1]
        assert p["verified"] and last["mismatches"] == 0 and last["rows"] >= 1_000_000, p["target"]


@pytest.mark.parametrize("target", sorted(PATHS))
def test_preset_reproduces_every_probe_row(target):
    p = PATHS[target]
    m = preset(p)
    k = p["k"]
    rows = [r for obs in p["observations"].values() for r in obs]
    A, B = np.zeros((len(rows), k)), np.zeros((len(rows), k))
    for i, r in enumerate(rows):
        for j, h in r["a"].items():
            A[i, int(j)] = _value(h)
        for j, h in r["b"].items():
            B[i, int(j)] = _value(h)
    C = np.array([_value(r["c"]) for r in rows])
    want = np.array([_value(r["d"]) for r in rows])
    got = bf.dot(A, B, C, model=m).astype(np.float64)
    same = (got == want) & (np.signbit(got) == np.signbit(want)) | (np.isnan(got) & np.isnan(want))
    bad = np.nonzero(~same)[0]
    assert len(rows) > 500
    assert not len(bad), f"{len(bad)} of {len(rows)} rows differ, e.g. {rows[bad[0]]['label']}: GPU " \
                         f"{rows[bad[0]]['d']}, preset {float(got[bad[0]]).hex()}"


@pytest.mark.parametrize("target", sorted(PATHS))
def test_inferred_model_is_the_preset_on_one_instruction(target):
    p = PATHS[target]
    assert disagreements(Model.from_dict(p["model"]), preset(p), p["k"], 3000, seed=2) == 0
