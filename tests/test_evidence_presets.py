"""What backs every preset model and every rule of ``bf.torch.emulate``'s routes (``devices/evidence.json``).

The table's counts are facts recounted here from where they come from: the project's records (data/hardware:
dot products per path, probe rows verified, torch.matmul elements, TF32 register rows, mmaemu's comparison),
Khattak & Mikaitis' data (../shared/golden, skipped with a reason where absent), the seed papers' cases
(blockfma.probes.seeds) and MMA-Sim's census (tests/test_mmasim.py, where mmasim is installed).  The instruction
a recorded path ran is named here from the path's name, as the record's own scripts named it, independently of
the table.
"""

from __future__ import annotations

import fnmatch
import gzip
import json
import subprocess
import sys
from collections import defaultdict

import pytest

import blockfma as bf
from blockfma import formats as F
from blockfma import replay
from blockfma.devices import EVIDENCE, devices, load, rule_evidence
from blockfma.evidence import Basis, Evidence, Unbacked, strongest, weakest

from helpers import REPO

MODELS = [(d, ins, pair) for d in devices() for ins in d.instructions for pair in ins.models]


def counted(source_prefix: str) -> dict[tuple[str, str, str], int]:
    """(device, instruction, pair) -> the table's count, for the model entries whose source starts so."""
    out = {}
    for e in EVIDENCE["models"]:
        if e["source"].startswith(source_prefix):
            out.update({(e["device"], e["instruction"], p): n for p, n in e["rows"].items()})
    return out


def _pair(m) -> str:
    return f"{m.input_name}->{m.output_format.name}"


def _h100_instruction(name: str, fa: str) -> str:
    """The H100 instruction a recorded path ran, from the path's name (``wgmma.*``, ``mma.*``; fp8 mma.sync: the
    instruction of its shape)."""
    if name.startswith(("wgmma", "cuda:wgmma")):
        return "wgmma"
    if fa in ("e4m3fn", "e5m2"):
        return "mma.m16n8k16.fp8" if ".m16n8k16." in name else "mma.m16n8k32.fp8"
    return "mma"


# --- every model has evidence, and every entry of the table names real models -----------------------------------
@pytest.mark.parametrize("dev", devices(), ids=lambda d: d.name)
def test_every_preset_model_has_evidence(dev):
    for ins in dev.instructions:
        for i, o in ins.models:
            ev = dev.evidence(i, o, ins.name)
            assert ev, f"{dev.name} {ins.name} {i}->{o} has no evidence: add it to devices/evidence.json"
            assert all(isinstance(e, Evidence) and e.source and (e.count is None or e.count > 0) for e in ev)
            claim = f"{dev.variant_of or dev.name} {ins.name} {i}->{o} model"
            assert claim in strongest(ev) or dev.variant_of, [e.claim for e in ev]  # the model itself is backed


def test_every_table_entry_names_models():
    for e in EVIDENCE["models"]:
        found = [(d, ins) for d, ins, _ in MODELS if d.variant_of is None and fnmatch.fnmatchcase(d.name, e["device"])
                 and fnmatch.fnmatchcase(ins.name, e["instruction"])]
        assert found, f"no preset instruction matches {e}"
        for pair in e.get("rows", {}):
            i, o = pair.split("->")
            assert any((i, o) in ins.models for _, ins in found), (e["device"], e["instruction"], pair)
    for name, rule in EVIDENCE["rules"].items():
        assert any(e["device"] == "*" for e in rule["evidence"]), f"rule {name} needs an entry for every device"


def test_the_labels_of_the_preset_families():
    """What the closing note of issue 34 reports per family, held here."""
    label = {(d.name, ins.name, f"{i}->{o}"): weakest(d.evidence(i, o, ins.name)).value for d, ins, (i, o) in MODELS}
    assert label["H100", "wgmma", "e4m3fn->fp32"] == label["H100", "mma", "fp16->fp32"] == "recorded"
    assert label["H100", "cublas", "fp16->fp16"] == label["H100", "mma.m16n8k32.fp8", "e5m2->fp16"] == "recorded"
    assert label["A100", "mma", "fp16->fp32"] == label["V100", "mma", "fp16->fp16"] == "published"
    assert label["B200", "mma", "e4m3fn->fp32"] == "published"
    assert label["B200", "tcgen05.mxf4.block32", "e2m1fn->fp32"] == label["MI300X", "mfma", "fp16->fp32"] == "peer"
    assert label["MI100", "mfma", "fp16->fp16"] == label["Intel AMX", "tdpbf16ps", "bf16->fp32"] == "assumed"
    assert label["A100", "mma.m8n8k4", "fp16->fp32"] == label["exact", "dot", "fp64->fp64"] == "assumed"


# --- the counts, recounted from the records -----------------------------------------------------------------------
def test_recorded_dot_products_are_the_records():
    want = defaultdict(int)
    for rec, name, entry, _ in replay.record_paths():
        model = replay.record_preset(name, entry["formats"])
        want[rec, _h100_instruction(name, entry["formats"]["a"]), _pair(model)] += entry["dot_products"]
    for rec in {r for r, _, _ in want}:
        got = {("H100", ins, p): n for (ins, p), n in
               {(k[1], k[2]): v for k, v in counted(rec + " ").items()}.items()}
        assert got == {("H100", ins, p): n for (r, ins, p), n in want.items() if r == rec}, rec


def test_probe_rows_are_the_probe_records():
    for name in replay.PROBE_RECORDS:
        want = defaultdict(int)
        doc = json.loads(gzip.open(replay.HARDWARE / name).read())
        for p in doc.get("paths", doc.get("runs", [])):
            assert p["verified"] and p["verification"][-1]["mismatches"] == 0
            m = replay.probe_preset(name, p)
            ins = "cublas" if p["target"].startswith("torch") else _h100_instruction(
                p["target"].removeprefix("cuda:"), m.input_format.name)
            if ins.endswith("fp8") and name != replay.PROBE_RECORDS[0]:
                ins = "mma.m16n8k16.fp8"  # the later runs probed the k16 shape only
            want["H100", ins, _pair(m)] += p["verification"][-1]["rows"]
        assert counted(name + " ") == dict(want), name


def test_torch_matmul_tf32_and_mmaemu_counts_are_the_records():
    doc = json.loads((replay.HARDWARE / "h100-torch-matmul.json").read_text())
    whole = defaultdict(int)  # elements where the fp32 chain stored once (the cublas model with C = 0) fits all
    for r in doc["torch_matmul"]:
        fit = [v for k, v in r["candidates"].items() if k.startswith("fp32 chain of 16-blocks")]
        if fit and fit[0]["equal"] == fit[0]["of"]:
            whole[f"{r['input']}->{r['input']}"] += fit[0]["of"]
    assert counted("h100-torch-matmul.json") == {("H100", "cublas", p): n for p, n in whole.items()}
    raw = sum(e["families"].get("fp32-raw", 0) for rec in ("h100-mma-wgmma.json", "h100-mma-wgmma-run2.json")
              for e in json.loads((replay.HARDWARE / rec).read_text())["paths"].values() if "superseded_by" not in e)
    assert [e.count for e in rule_evidence("H100", "tf32-read")] == [raw]
    mmaemu = json.loads((replay.HARDWARE / "h200-mmaemu-2026-11-28.json").read_text())["rows"]
    peer = [r for r in mmaemu if r.get("backend") == "mmaemu"]
    assert all(r["differing"] == 0 and r["call"].startswith("accumulate(use_fast_accum=True") for r in peer)
    assert [e.count for e in rule_evidence("H100", "fp8-fast-accum")] == [sum(r["compared"] for r in peer)]


def test_published_rows_are_khattak_and_mikaitis_data():
    from helpers import golden_dir

    root = golden_dir("khattak-mikaitis").parent
    want = {}
    for d, fmt, out in replay.golden_sets(root):
        inp = {"E4M3": "e4m3fn", "E5M2": "e5m2"}.get(fmt, fmt)
        path = next((root / "khattak-mikaitis" / d / fmt).glob(f"d_{d}_{out}*.txt"))
        want[d, bf.device(d).instruction_for(inp, out).name, f"{inp}->{out}"] = len(path.read_text().split())
    assert counted("Khattak & Mikaitis") == want


def test_seed_case_counts_are_the_seed_papers_cases():
    from blockfma.probes.seeds import SEED_CASES

    want = defaultdict(int)
    for case in SEED_CASES:
        for d in set(case.expected) - {"exact"}:
            fin, fout = F.get(case.input_format).name, F.get(case.output_format).name
            want[d, bf.device(d).instruction_for(fin, fout).name, f"{fin}->{fout}"] += 1
    assert counted("the seed papers' cases") == dict(want)


def test_peer_evidence_is_where_mmasim_answers():
    """MMA-Sim's reading is cited exactly for the preset models its census answers (tests/test_mmasim.py),
    naming the operation and architecture of the configuration."""
    pytest.importorskip("torch", reason="MMA-Sim needs torch")
    pytest.importorskip("mmasim", reason="the census needs MMA-Sim: pip install --no-deps mmasim==2.1.1")
    import test_mmasim as t

    answered = {t.preset(sim): f"{sim.op} {sim.arch}" for sim in t.census().values() if t.preset(sim)}
    cited = {}
    for d, ins, (i, o) in MODELS:
        peer = [e for e in d.evidence(i, o, ins.name) if e.basis is Basis.PEER and e.source.startswith("MMA-Sim")]
        if peer and d.variant_of is None:
            cited[d.name, ins.name, i, o] = peer[0].source
    assert set(cited) == set(answered), set(cited) ^ set(answered)
    assert all(cited[key].startswith(f"MMA-Sim 2.1.1, {op_arch}") for key, op_arch in answered.items())


# --- the basis of an answer: each claim at its strongest source ------------------------------------------------
def test_a_claim_counts_at_its_strongest_source_and_details_give_way():
    model = "X mma fp16->fp32 model"
    rec, peer = Evidence(model, Basis.RECORDED, "r.json", 10), Evidence(model, Basis.PEER, "MMA-Sim")
    seed = Evidence(f"{model}: features", Basis.PUBLISHED, "seeds", 3, part_of=model)
    assert weakest([peer, rec]) is Basis.RECORDED and weakest([rec, seed]) is Basis.RECORDED
    assert weakest([peer, seed]) is Basis.PEER  # a detail neither lifts nor lowers its model
    assert weakest([seed]) is Basis.PUBLISHED and seed.label == "published: seeds, 3 rows"
    assert Evidence("c", Basis.RECORDED, "r", 1).label == "recorded: r, 1 row"


def test_a_variant_adds_its_reading_and_a_measured_device_is_recorded(tmp_path):
    ev = bf.device("MI100~all-zero-block-sign").evidence("fp16", "fp32")
    assert weakest(ev) is Basis.ASSUMED and "MI100~all-zero-block-sign" in ev[-1].claim
    doc = {"schema": "blockfma-devices/1", "devices": [{
        "name": "my-gpu-evidence", "vendor": "measured", "arch": "X", "measured": {
            "gpu": "NVIDIA H100 80GB HBM3", "verification": {"rows": 1000, "mismatches": 0}},
        "instructions": [{"name": "mma", "models": [bf.device("H100").model().to_dict()]}]}]}
    (tmp_path / "my.json").write_text(json.dumps(doc))
    (e,) = load(tmp_path / "my.json")[0].evidence("fp16", "fp32")  # load: not registered for later tests
    assert e.label == "recorded: blockfma.probe on NVIDIA H100 80GB HBM3, 1,000 rows"
    with pytest.raises(ValueError, match="H100 has no model for e2m1fn inputs with fp32 output"):
        bf.device("H100").evidence("e2m1fn", "fp32")


def test_devices_command_shows_the_evidence():
    run = [sys.executable, "-m", "blockfma", "devices", "MI300X"]
    out = subprocess.run(run, capture_output=True, text=True, env={"PYTHONPATH": str(REPO / "src")}, check=True)
    assert "evidence (peer): peer: MMA-Sim 2.1.1, MFMA CDNA3" in out.stdout
    assert "evidence (assumed): assumed: FTTN Table IV" in out.stdout
    doc = json.loads(subprocess.run(run + ["--json", "-"], capture_output=True, text=True, check=True,
                                    env={"PYTHONPATH": str(REPO / "src")}).stdout)
    assert doc["instructions"][0]["evidence"]["fp16->fp32"][0]["basis"] == "peer"


# --- routes carry it; strict refuses what hardware outputs do not back ------------------------------------------
torch = pytest.importorskip("torch")


def test_h100_fp16_matmul_is_recorded_and_runs_under_strict():
    a, b = torch.ones(16, 64, dtype=torch.float16), torch.ones(64, 16, dtype=torch.float16)  # a recorded plan
    for overrides in (None, {torch.float16: "wgmma"}):  # the cublas model, or the wgmma model chained and stored
        with bf.torch.emulate("H100", strict=True, overrides=overrides) as em:
            assert torch.equal(torch.matmul(a, b), torch.full((16, 16), 64.0, dtype=torch.float16))
        assert weakest(em.log[0].evidence) is Basis.RECORDED
    assert "recorded: h100-probe-torch.json.gz" in bf.torch.emulate("H100").route(torch.float16).evidence[0].label


def test_fp8_scaled_mm_without_fast_accumulation_is_refused_under_strict():
    a = torch.ones(16, 32).to(torch.float8_e4m3fn)
    b = torch.ones(16, 32).to(torch.float8_e4m3fn).t()
    one = torch.tensor(1.0)
    with pytest.raises(Unbacked, match=r"promotion to an fp32 sum every 128 products is peer: mmaemu 0.1.0"):
        with bf.torch.emulate("H100", strict=True):
            torch._scaled_mm(a, b, one, one, out_dtype=torch.bfloat16)
    with bf.torch.emulate("H100") as em:
        torch._scaled_mm(a, b, one, one, out_dtype=torch.bfloat16, use_fast_accum=True)
    claims = strongest(em.log[0].evidence)
    assert claims["H100 wgmma e4m3fn->fp32 model"].basis is Basis.RECORDED
    assert claims["use_fast_accum: one chain of the instruction over all of K"].source.startswith("mmaemu 0.1.0")
    assert weakest(em.log[0].evidence) is Basis.ASSUMED  # the binary32 epilogue
    text = em.report(evidence=True)
    assert "h100-mma-wgmma-run2.json (H100 dot products), 983,040 rows" in text and "binary32 epilogue" in text


def test_block_scaled_and_model_routes_are_refused_under_strict():
    from blockfma.torch import mx

    q = mx.to_mx(torch.ones(2, 64), "e2m1fn")
    with pytest.raises(Unbacked, match=r"B200 tcgen05.mxf4.block32 e2m1fn->fp32 model is peer: MMA-Sim 2.1.1"):
        with bf.torch.emulate("B200", strict=True):
            torch._scaled_mm(q.data, q.data.t(), q.swizzled_scales(), q.swizzled_scales(), out_dtype=torch.float32)
    with pytest.raises(Unbacked, match=r"the model is assumed: given by model="):
        with bf.torch.emulate(model=bf.device("H100").model("e4m3fn", "fp32"), strict=True):
            torch.matmul(torch.ones(2, 4, dtype=torch.bfloat16), torch.ones(4, 2, dtype=torch.bfloat16))


@pytest.mark.parametrize("device,dtype,tf32,claim", [
    ("H100", torch.float32, True, "recorded: fp32-raw rows"), ("A100", torch.float32, True, "assumed: as recorded"),
    ("MI300X", torch.float16, False, "assumed: no library record"), ("V100", torch.float32, False, "assumed: not")])
def test_route_rules_name_their_evidence(device, dtype, tf32, claim):
    route = bf.torch.routes.library(bf.device(device), None, dtype, tf32)
    assert any(e.label.startswith(claim) for e in route.evidence), [e.label for e in route.evidence]
