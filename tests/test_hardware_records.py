"""The presets against the project's own hardware records (data/hardware/*.json), bit for bit.

Each record keeps, per instruction path, the rows where some model disagreed with the GPU (inputs in exact
hex form, the GPU's bits) and the targeted rows of the open questions.  Every such row must match the
current preset, except rows of a finding the presets do not model yet; those are named in OPEN with the
reason, so that the day a preset models them the test shows it (an OPEN kind that no longer occurs fails).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import blockfma as bf
from blockfma import formats as F

RECORDS = sorted((Path(__file__).resolve().parents[1] / "data" / "hardware").glob("*.json"))
H100 = bf.device("H100")

# findings recorded on the H100 that no preset models yet (see data/hardware/README.md)
OPEN = {
    "fp64-nan-payload": "DMMA propagates an input NaN's payload (quieted) and writes 0xFFF8000000000000 for an "
                        "invalid operation; the fp64 presets write the default NaN",
    "nan-input-payload": "the record keeps NaN inputs as 'nan' without their payload, and tf32 reads a NaN "
                         "whose payload lies in the 13 dropped bits as an infinity",
}


def _value(h: str) -> float:
    return float("nan") if h == "nan" else float.fromhex(h)


def _preset(name: str, formats: dict):
    """The current preset model for a recorded path, or a reason why there is none."""
    fa, fb, fd = formats["a"], formats["b"], formats["d"]
    instruction = "wgmma" if name.startswith("wgmma") else "mma"
    if instruction == "mma" and fa in ("e4m3fn", "e5m2"):  # fp16 HMMAs (the SASS), per shape
        instruction = "mma.m16n8k16.fp8" if ".m16n8k16." in name else "mma.m16n8k32.fp8"
    return H100.model((fa, fb), fd, instruction), None


def _rows(entry: dict):
    seen = set()
    for m in entry.get("models", []):
        for ex in m.get("examples", []):
            key = (tuple(ex["a"]), tuple(ex["b"]), ex["c"], ex["hardware"])
            if key not in seen:
                seen.add(key)
                yield "example", ex["a"], ex["b"], ex["c"], ex["hardware"]
    for t in entry.get("targeted", []):
        if "a" in t:
            yield t["case"], t["a"], t["b"], t["c"], t["hardware"]


def _open_kind(fd: str, a: list, b: list, c: str, hw: int) -> str | None:
    fmt = F.get(fd)
    hw_nan = bool(np.isnan(F.decode(fmt, np.uint64(hw))))
    if fd == "fp64" and hw_nan:
        return "fp64-nan-payload"
    if "nan" in a or "nan" in b or c == "nan":
        return "nan-input-payload"
    return None


CASES = []
for _rec in RECORDS:
    _data = json.loads(_rec.read_text())
    for _name, _entry in _data.get("paths", {}).items():
        if "formats" in _entry and "superseded_by" not in _entry:
            CASES.append(pytest.param(_rec.name, _name, _entry, id=f"{_rec.stem}:{_name}"))


def test_records_are_present():
    assert RECORDS, "data/hardware holds the project's GPU records"
    assert len(CASES) >= 20


@pytest.mark.parametrize("record,name,entry", CASES)
def test_preset_matches_recorded_rows(record, name, entry):
    model, why = _preset(name, entry["formats"])
    if model is None:
        pytest.skip(why)
    fd = entry["formats"]["d"]
    kw = {"round_inputs": "device"} if entry["formats"]["a"] == "tf32" else {}
    uint = {16: np.uint16, 32: np.uint32, 64: np.uint64}[F.get(fd).bits]
    wrong, opened = [], set()
    n = 0
    for label, a, b, c, hw in _rows(entry):
        n += 1
        got = bf.dot(np.array([_value(x) for x in a]), np.array([_value(x) for x in b]), _value(c), model=model, **kw)
        if int(np.asarray(got).view(uint)) == int(hw, 16):
            continue
        kind = _open_kind(fd, a, b, c, int(hw, 16))
        if kind:
            opened.add(kind)
        else:
            wrong.append((label, a, b, c, hw, hex(int(np.asarray(got).view(uint)))))
    assert n > 0
    assert not wrong, f"{len(wrong)} of {n} recorded rows differ from the preset, e.g. {wrong[:2]}"
    assert opened <= set(OPEN)
