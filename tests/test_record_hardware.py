"""scripts/record_hardware.py with the engine in place of the GPU: the whole pipeline, on a CPU."""

from __future__ import annotations

import json
import sys

from helpers import REPO

sys.path.insert(0, str(REPO / "scripts"))
import record_hardware as R


def test_simulated_run_matches_its_own_model(tmp_path):
    out = tmp_path / "rec.json"
    only = r"^mma\.m16n8k16\.f16\.f16|^mma\.m16n8k32\.f32\.e4m3\.e5m2|^wgmma\.m64n128k8\.|^mma\.m8n8k4"
    assert R.main(["--simulate", "--per-path", "1500", "--only", only, "--out", str(out)]) == 0
    rec = json.loads(out.read_text())
    assert len(rec["paths"]) == 4
    for name, entry in rec["paths"].items():
        assert "error" not in entry, entry.get("error")
        assert entry["layout_check"]["ok"]
        first = entry["models"][0]
        assert first["match"] == first["rows"] == entry["dot_products"] > 0, name
        assert set(entry["families"]) >= {"normal", "cancel", "underflow", "specials", "random-bits"}
        assert all(first["label"] in t["agree"] for t in entry["targeted"])
    # the variants do differ somewhere: the comparison is not vacuous
    assert any(m["match"] < m["rows"] for e in rec["paths"].values() for m in e["models"][1:])


def test_families_give_codes_of_the_format():
    import numpy as np

    from blockfma import formats as F

    p = {q.name: q for q in R.own_paths()}["mma.m16n8k8.f32.tf32.tf32.f32"]
    rng = np.random.default_rng(0)
    for fam in R.families(p):
        A, B, C = R.family_inputs(fam, p, rng, 3)
        assert A.shape == (3, 16, 8) and B.shape == (3, 8, 8) and C.shape == (3, 16, 8)
        if fam != "fp32-raw":  # tf32 values: the 13 low bits of each binary32 operand are zero
            finite = np.isfinite(R.decode("tf32", A))
            assert not (A[finite] & 0x1FFF).any(), fam
        assert F.is_representable(F.fp32, R.decode("fp32", C)).all()
