"""The probe suite's hardware records (data/hardware/h100-probe-cuda.json.gz) against the presets.

Each path of the record holds what ``blockfma.probe`` saw through the H100's ``mma.sync`` (every feature
test's rows with the GPU's outputs, in exact hex), the model it inferred and its verification on 10^6 rows.
The presets must reproduce every recorded row, and each inferred model must equal the preset on one
instruction.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import numpy as np
import pytest

import blockfma as bf
from blockfma import replay
from blockfma.model import Model
from blockfma.probes.infer import disagreements

RECORD = Path(__file__).resolve().parents[1] / "data" / "hardware" / "h100-probe-cuda.json.gz"
DOC = json.loads(gzip.open(RECORD).read()) if RECORD.exists() else {"paths": []}
PATHS = {p["target"]: p for p in DOC["paths"]}


def preset(p: dict) -> Model:
    """The H100 preset of one path of the record (:func:`blockfma.replay.probe_preset`)."""
    return replay.probe_preset(RECORD.name, p)


def test_record_holds_the_paths():
    assert len(PATHS) >= 20
    for p in PATHS.values():
        last = p["verification"][-1]
        assert p["verified"] and last["mismatches"] == 0 and last["rows"] >= 1_000_000, p["target"]


@pytest.mark.parametrize("target", sorted(PATHS))
def test_preset_reproduces_every_probe_row(target):
    """Every row the probe sent to the GPU through the preset (:func:`blockfma.replay.probe_path`): the
    same value with the same sign, or NaN for NaN."""
    r = replay.probe_path(RECORD.name, PATHS[target])
    assert r.rows > 500
    assert r.mismatches == 0, f"{r.mismatches} of {r.rows} rows differ, e.g. {r.examples[0]}"


@pytest.mark.parametrize("target", sorted(PATHS))
def test_inferred_model_is_the_preset_on_one_instruction(target):
    p = PATHS[target]
    assert disagreements(Model.from_dict(p["model"]), preset(p), p["k"], 3000, seed=2) == 0


# --- cuBLAS (torch.baddbmm) with fp16 output: the record keeps the probe's readings, not its rows ---------------
TORCH_RECORD = RECORD.with_name("h100-torch-order.json.gz")
TORCH = json.loads(gzip.open(TORCH_RECORD).read())["per_dot_probe"] if TORCH_RECORD.exists() else []


def _normal(x):
    """Readings with hex floats as floats (the record wrote 0x1.0080000000000p+0, today's code 0x1.008p+0)."""
    if isinstance(x, dict):
        return {k: _normal(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_normal(v) for v in x]
    if isinstance(x, str):
        return re.sub(r"-?0x[0-9a-f.]+p[+-]\d+", lambda h: repr(float.fromhex(h.group(0))), x.lower())
    return x


@pytest.mark.skipif(not TORCH, reason=f"{TORCH_RECORD.name} is absent")
def test_cublas_preset_reproduces_the_torch_probe_readings():
    """The H100 'cublas' preset (fp32 accumulation over all of K, the sum stored in fp16, then C added:
    c_entry='end') gives every one of the 522 feature-test readings that torch.baddbmm gave on the H100, and
    its first counterexample to the C-after fp16 chain the probe had settled on.  The rows are rebuilt as
    the probe built them: the structure tests first, then the rest knowing F from the structure stage."""
    from blockfma.probes import features as feat
    from blockfma.probes.infer import STAGES
    from blockfma.inputs import Formats

    rec = TORCH[0]
    assert rec["formats"].startswith("fp16 -> fp16") and not rec["verified"]
    m = bf.device("H100").model("fp16", "fp16", "cublas")
    fm, k = Formats.of("fp16", "fp16", "fp16", "fp16"), rec["k"]
    F = rec["stages"][0]["chosen"]["fraction_bits"]
    got = {}
    for i, stage in enumerate(STAGES):
        ctx = feat.Context(fm, k, {} if i == 0 else {"F": F})
        for name in stage.tests:
            rows = feat.FEATURE_TESTS[name].build(ctx)
            a, b, c = feat.arrays(rows)
            got[name] = feat.FEATURE_TESTS[name].read(ctx, rows, bf.dot(a, b, c, model=m))
    want, got = _normal(rec["readings"]), _normal(got)
    differ = [(name, key) for name in want for key in want[name] if got[name].get(key) != want[name][key]]
    assert sum(len(v) for v in want.values()) == 522
    assert not differ, f"{len(differ)} readings differ, e.g. {differ[0]}: H100 {want[differ[0][0]][differ[0][1]]}, " \
                       f"preset {got[differ[0][0]][differ[0][1]]}"
    ce = rec["verification"][-1]["first_counterexample"]
    d = bf.dot([float.fromhex(x) for x in ce["a"]], [float.fromhex(x) for x in ce["b"]], float.fromhex(ce["c"]),
               model=m)
    want_bits = int(re.search(r"\((0x[0-9A-Fa-f]+)\)", ce["target"]).group(1), 16)
    assert int(np.asarray(d, dtype=np.float16).view(np.uint16)) == want_bits == 0x5452


# --- the run of 2026-11-25 (commit 7a879bb): wgmma and the fp8 mma.m16n8k16 fp16-output paths, cuBLAS ----------
RUN_1125 = [RECORD.with_name(n) for n in ("h100-probe-cuda-wgmma-fp8.json.gz", "h100-probe-cuda-wgmma-fp8-1e6.json.gz",
                                          "h100-probe-torch.json.gz")]


def _load(path: Path) -> list[dict]:
    """The probe results of one record: ``paths`` (cuda) or ``runs`` (torch), each with the record's name."""
    if not path.exists():
        return []
    doc = json.loads(gzip.open(path).read())
    return [{**p, "record": path.name} for p in doc.get("paths", doc.get("runs", []))]


PROBES_1125 = {f"{p['record']}:{p['target']}:{p['formats']}": p for path in RUN_1125 for p in _load(path)}


def preset_1125(p: dict) -> Model:
    """The H100 preset of one recorded path: wgmma, the fp8 mma.m16n8k16 instruction, or cuBLAS (torch)."""
    return replay.probe_preset(p["record"], p)


def test_run_1125_holds_its_paths():
    """What the README says of the run: 8 + 5 cuda paths and 3 torch runs, each verified with 0 mismatches on
    200,000, 10^6 and 100,000 rows, on an H100 (sm_90)."""
    by = {}
    for p in PROBES_1125.values():
        by.setdefault(p["record"], []).append(p)
        last = p["verification"][-1]
        assert p["verified"] and last["mismatches"] == 0, p["target"]
        assert p["metadata"]["gpu"] == "NVIDIA H100 80GB HBM3" and p["metadata"]["compute_capability"] == "90"
        assert p["metadata"]["date"].startswith("2026-11-25")
    want = {"h100-probe-cuda-wgmma-fp8.json.gz": (8, 200_000), "h100-probe-cuda-wgmma-fp8-1e6.json.gz": (5, 1_000_000),
            "h100-probe-torch.json.gz": (3, 100_000)}
    assert {r: len(ps) for r, ps in by.items()} == {r: n for r, (n, _) in want.items()}
    for r, ps in by.items():
        assert all(p["verification"][-1]["rows"] >= want[r][1] for p in ps), r


@pytest.mark.parametrize("key", sorted(PROBES_1125))
def test_run_1125_inferred_model_is_the_preset(key):
    """The model inferred from the GPU's outputs alone is the H100 preset: equal as a Model, or (names and
    how tf32 is read from binary32 registers aside) giving the same bits on 3,000 rows at three times k."""
    p = PROBES_1125[key]
    got, want = Model.from_dict(p["model"]), preset_1125(p)
    if got != want:
        assert disagreements(got, want, 3 * p["k"], 3000, seed=3) == 0


@pytest.mark.parametrize("key", sorted(PROBES_1125))
def test_run_1125_preset_reproduces_every_probe_row(key):
    """Every row the probe sent to the GPU (exact hex inputs), through bf.dot with the preset, gives the bits
    the GPU returned."""
    p = PROBES_1125[key]
    r = replay.probe_path(p["record"], p)
    assert r.rows > 500
    assert r.mismatches == 0, f"{r.mismatches} of {r.rows} rows differ: {r.examples[0]}"


# --- the run of 2026-11-26 on an H200 (tree of commit 70d98d3): the wgmma fp8 -> fp16 paths left on 11-25 -------
RECORD_1126 = RECORD.with_name("h200-probe-cuda-wgmma-fp8-f16.json.gz")
PROBES_1126 = {f"{p['target']}:{p['formats']}": p for p in _load(RECORD_1126)}


def test_run_1126_holds_its_paths():
    """What data/hardware/README.md says of the run: two wgmma fp8 -> fp16 paths (e4m3 x e5m2 and e5m2 x e4m3),
    each verified on 10^6 rows with 0 mismatches, on an H200 (sm_90)."""
    if not PROBES_1126:
        pytest.skip(f"{RECORD_1126.name} is not in this checkout")
    assert sorted(p["target"] for p in PROBES_1126.values()) == [
        "cuda:wgmma.m64n64k32.f16.e4m3.e5m2", "cuda:wgmma.m64n64k32.f16.e5m2.e4m3"]
    for p in PROBES_1126.values():
        last = p["verification"][-1]
        assert p["verified"] and last["mismatches"] == 0 and last["rows"] == 1_000_000, p["target"]
        assert p["metadata"]["gpu"] == "NVIDIA H200" and p["metadata"]["compute_capability"] == "90"
        assert p["metadata"]["date"].startswith("2026-11-26")


@pytest.mark.parametrize("key", sorted(PROBES_1126))
def test_run_1126_inferred_model_is_the_preset(key):
    """The model inferred from the H200's outputs alone is the H100 wgmma preset of those formats (the same
    chip), equal as a Model or giving the same bits on 3,000 rows at three times k."""
    p = PROBES_1126[key]
    got, want = Model.from_dict(p["model"]), replay.probe_preset(RECORD_1126.name, p)
    assert want.block_width == 32 and want.fraction_bits == 13 and want.output_format.name == "fp16"
    if got != want:
        assert disagreements(got, want, 3 * p["k"], 3000, seed=3) == 0


@pytest.mark.parametrize("key", sorted(PROBES_1126))
def test_run_1126_preset_reproduces_every_probe_row(key):
    """Every row the probe sent to the H200 gives, through bf.dot with the H100 preset, the bits it returned."""
    p = PROBES_1126[key]
    r = replay.probe_path(RECORD_1126.name, p)
    assert r.rows > 500
    assert r.mismatches == 0, f"{r.mismatches} of {r.rows} rows differ: {r.examples[0]}"
