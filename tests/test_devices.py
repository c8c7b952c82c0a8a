"""Devices as data: the vendor tables, the schema a measured device is written in, and its errors."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import blockfma as bf

from helpers import REPO

D = importlib.import_module("blockfma.devices")


@pytest.fixture(autouse=True)
def _registry_restored(monkeypatch):
    """Devices loaded by a test stay out of the other tests' registry."""
    monkeypatch.setattr(D, "_DEVICES", dict(D._DEVICES))
    monkeypatch.setattr(D, "_LOOKUP", dict(D._LOOKUP))
    sources = dict(D.SOURCES)
    yield
    D.SOURCES.clear()
    D.SOURCES.update(sources)


def test_every_vendor_table_loads_and_every_preset_is_registered():
    names = [d.name for f in ("nvidia.json", "amd.json", "cpu.json", "reference.json")
             for d in D.load(D._HERE / f)]
    assert names == D.names()[:len(names)]  # devices other tests load (probed files) come after the presets
    assert {"V100", "H100", "MI300X", "Intel AMX", "exact"} <= set(names)
    assert all(d.sources and all(s in D.SOURCES for s in d.sources) for d in bf.devices() if d.name in names)


def test_templates_and_grids_expand_as_written():
    h = bf.device("H100").model("fp16", "fp32")  # the nvidia template gives the family and the special rules
    assert (h.family.value, h.overflow, h.nan.value, h.exact_zero, h.rounded_zero) == \
        ("truncated-fused", "inf", "canonical", "positive", "positive")
    exact = bf.device("exact").instruction("dot")  # one grid entry: 9 inputs x 3 outputs
    assert len(exact.models) == 27 and exact.models[("e5m2", "fp16")].name == "exact e5m2->fp16"


def test_a_measured_device_round_trips_and_is_known_by_name_after_loading(tmp_path):
    h100 = bf.device("H100")
    measured = D.Device("probe-gpu", "NVIDIA", "sm_90 (measured)", h100.instructions[:1], ("blockfma-probe",),
                        "high", notes="inferred by the probe suite", aliases=("my-gpu",),
                        measured={"gpu": "NVIDIA H100 80GB HBM3", "date": "2026-11-22"})
    path = tmp_path / "probe-gpu.json"
    D.save(path, [measured], sources=[D.Source("blockfma-probe", "a probe run of 2026-11-22", "hardware data")])
    doc = json.loads(path.read_text())
    assert doc["schema"] == D.SCHEMA and doc["devices"][0]["measured"]["gpu"].startswith("NVIDIA")
    got = bf.device(str(path))
    assert got.to_dict() == measured.to_dict()
    assert got.model("bf16", "fp32") == h100.model("bf16", "fp32")
    assert bf.device("my-gpu") is got  # registered: every later call knows it by name
    # and computes as the H100 it copies: products 1, 2^-23 and 2^-24 (fp16 values), exact sum 1 + 3 * 2^-24,
    # 1.5 ulp of binary32 above 1; the H100 keeps all of it (F = 25) and truncates to 1 + 2^-23 (0x3F800001),
    # where a correctly rounded unit would give the even 1 + 2^-22 (0x3F800002)
    x = bf.dot([1.0, 2.0**-23, 2.0**-24], [1.0, 1.0, 1.0], 0.0, device="probe-gpu")
    assert x.dtype == np.float32 and int(x.view(np.uint32)) == 0x3F800001


def test_presets_survive_a_save_and_load(tmp_path):
    path = tmp_path / "all.json"
    D.save(path, bf.devices())
    again = D.load(path)
    assert [d.to_dict() for d in again] == [d.to_dict() for d in bf.devices()]


@pytest.mark.parametrize("change,message", [
    (lambda doc: doc.pop("schema"), "not a devices file"),
    (lambda doc: doc["devices"][0].update(colour="green"), "unknown field 'colour'"),
    (lambda doc: doc["devices"][0]["instructions"][0]["models"][0].update(Lx=3), "unknown field 'Lx'"),
    (lambda doc: doc["devices"][0]["instructions"][0].update(template="amd"), "unknown template 'amd'"),
    (lambda doc: doc["devices"][0].update(sources=["Nobody2030"]), "unknown source 'Nobody2030'"),
    (lambda doc: doc["devices"][0]["instructions"][0]["models"][0].update(L=0), "block_width must be"),
])
def test_schema_errors_name_the_place_and_the_fix(tmp_path, change, message):
    doc = json.loads((D._HERE / "nvidia.json").read_text())
    doc["devices"] = doc["devices"][:1]
    change(doc)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(D.DeviceFileError, match=message) as err:
        D.load(path)
    assert str(path) in str(err.value)


def test_a_file_with_several_devices_needs_a_name(tmp_path):
    path = tmp_path / "two.json"
    D.save(path, [bf.device("V100"), bf.device("T4")])
    with pytest.raises(ValueError, match="holds 2 devices"):
        bf.device(str(path))


def test_device_path_variable_loads_files_for_every_command(tmp_path):
    measured = D.Device("lab-gpu", "NVIDIA", "measured", bf.device("A100").instructions, ("KM",), "medium")
    D.save(tmp_path / "lab.json", [measured])
    env = dict(os.environ, BLOCKFMA_DEVICE_PATH=str(tmp_path), PYTHONPATH=str(REPO / "src"))
    out = subprocess.run([sys.executable, "-m", "blockfma", "devices", "lab-gpu"], capture_output=True, text=True,
                         env=env, check=True).stdout
    assert "lab-gpu" in out and "truncated-fused fp16->fp32 L=8" in out


def test_open_questions_name_real_devices_and_their_variants_run():
    """Every open question names presets that exist; where its other reading is a Model parameter the
    variant '<device>~<id>' loads, changes at least one model, and runs."""
    import importlib

    D = importlib.import_module("blockfma.devices")
    assert len(D.OPEN_QUESTIONS) >= 8
    for q in D.OPEN_QUESTIONS:
        for name in q.devices:
            dev = bf.device(name)
            assert dev.name == name, (q.id, name)
            if not q.change:
                with pytest.raises(ValueError, match="not one value of a Model parameter"):
                    bf.device(f"{name}~{q.id}")
                continue
            variant = bf.device(f"{name}~{q.id}")
            assert variant.variant_of == name and variant.name == f"{name}~{q.id}"
            changed = [key for ins, vins in zip(dev.instructions, variant.instructions)
                       for key in ins.models if ins.models[key] != vins.models[key]]
            assert changed, (q.id, name)
            model = variant.model(*changed[0])
            k = model.block_width or 4
            bf.dot(np.ones(k), np.ones(k), model=model)
    with pytest.raises(ValueError, match="has no open question 'nope'"):
        bf.device("MI100~nope")


def test_all_zero_block_sign_variant_gives_plus_zero():
    """MI100 fp16, one block of four -0 products and C = -0: the preset follows IEEE (-0), the variant
    gives +0 (MMA-Sim's reading)."""
    a, b = [1.0, 1.0, 1.0, 1.0], [-0.0, -0.0, -0.0, -0.0]
    assert bf.dot(a, b, -0.0, device="MI100").view(np.uint32) == 0x80000000
    assert bf.dot(a, b, -0.0, device="MI100~all-zero-block-sign").view(np.uint32) == 0x00000000


def test_devices_command_lists_open_questions(capsys):
    from blockfma.cli import main

    assert main(["devices", "MI300X"]) == 0
    out = capsys.readouterr().out
    assert "open question late-c-cut" in out and "variant: 'MI300X~late-c-cut'" in out and "to settle:" in out
    assert main(["devices"]) == 0
    assert "open questions: rounded-zero-sign" in capsys.readouterr().out


def test_reprs_are_one_summary_line_and_equality_is_the_dataclass_s():
    """repr(Device) and repr(Model) are one line each (they were 2-31 kB); the full form is behind
    describe()/to_dict(); a class-body __repr__ leaves the dataclass's __eq__ and __hash__ alone."""
    assert repr(bf.device("V100")) == "Device('V100': NVIDIA Volta sm_70, 2 instructions, 2 format pairs)"
    v100 = bf.device("V100").model("fp16", "fp32")
    assert repr(v100) == "Model('V100 fp16->fp32': truncated-fused fp16->fp32 L=4 F=23 e_zero=-131 out=TowardZero)"
    assert repr(v100.replace(name="")) == "Model(truncated-fused fp16->fp32 L=4 F=23 e_zero=-131 out=TowardZero)"
    assert str(v100) == repr(v100)
    for dev in bf.devices():
        assert len(repr(dev)) < 200 and "\n" not in repr(dev), dev.name
        assert repr(dev).startswith(f"Device({dev.name!r}: ")
        for ins in dev.instructions:
            for model in ins.models.values():
                assert len(repr(model)) < 200 and "\n" not in repr(model), model.name
                assert model.summary() in repr(model)
    # equality and hashing: field by field, as before
    same = bf.Model.from_dict(v100.to_dict())
    assert same == v100 and hash(same) == hash(v100) and same is not v100
    assert v100.replace(fraction_bits=24) != v100
    assert len({v100, same, v100.replace(fraction_bits=24)}) == 2
    h100 = bf.device("H100")
    assert h100 == bf.device("H200") and hash(h100) == hash(bf.device("H200"))  # an alias: the same preset
    assert h100 != bf.device("V100")
    assert "instructions" in h100.describe() and "instructions" in h100.to_dict()  # the full form
