"""The presets against the project's own hardware records (data/hardware/*.json), bit for bit.

Each record keeps, per instruction path, the rows where some model disagreed with the GPU (inputs in exact
hex form, the GPU's bits) and the targeted rows of the open questions.  Every such row must match the
current preset bit for bit, NaN payloads included.  A record writes a NaN input as ``"nan"``; the codes of
those inputs (which decide the fp64 DMMA's NaN and the tf32 read) come from ``*-nan-inputs.json`` beside it
(scripts/recover_nan_inputs.py replays the record's seeded generator), C's from the row's ``c_bits``, and the
targeted rows' NaNs are the default quiet NaN they were encoded from.  Inputs travel as the unit's
registers hold them: in the storage format's numpy dtype (binary32 for tf32), from their codes.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import blockfma as bf
from blockfma import formats as F

HARDWARE = Path(__file__).resolve().parents[1] / "data" / "hardware"
RECORDS = sorted(p for p in HARDWARE.glob("*.json") if not p.name.endswith("-nan-inputs.json"))
H100 = bf.device("H100")
PAYLOAD_MATTERS = ("fp64", "tf32")  # input formats whose NaN codes change a result (DMMA payloads, tf32 reads)


def _nan_inputs() -> dict[tuple[str, str], dict[tuple, tuple[list[str], list[str]]]]:
    """(record file, path) -> {(a, b, c) as recorded: (A's codes, B's codes)} from the *-nan-inputs files."""
    out: dict = {}
    for f in sorted(HARDWARE.glob("*-nan-inputs.json")):
        doc = json.loads(f.read_text())
        for path, rows in doc["paths"].items():
            out[(doc["record"], path)] = {(tuple(r["a"]), tuple(r["b"]), r["c"]): (r["a_codes"], r["b_codes"])
                                          for r in rows}
    return out


NAN_INPUTS = _nan_inputs()


def _storage(fmt: str) -> F.Format:
    """The format whose codes a register holds (tf32 travels in binary32)."""
    return F.fp32 if fmt == "tf32" else F.get(fmt)


def _operand(fmt: str, values: list[str], codes: list[str] | None) -> np.ndarray:
    """A recorded operand as the register held it: from its codes where known, else from its exact values
    (a NaN without codes: the default quiet NaN, as the targeted rows were encoded)."""
    st = _storage(fmt)
    if codes is None:
        return np.array([_value(x) for x in values])
    uint = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}[st.bits]
    return np.array([int(x, 16) for x in codes], dtype=uint).view(st.dtype)


def _value(h: str) -> float:
    return float("nan") if h == "nan" else float.fromhex(h)


def _preset(name: str, formats: dict):
    """The current preset model for a recorded path."""
    fa, fb, fd = formats["a"], formats["b"], formats["d"]
    instruction = "wgmma" if name.startswith("wgmma") else "mma"
    if instruction == "mma" and fa in ("e4m3fn", "e5m2"):  # fp16 HMMAs (the SASS), per shape
        instruction = "mma.m16n8k16.fp8" if ".m16n8k16." in name else "mma.m16n8k32.fp8"
    return H100.model((fa, fb), fd, instruction)


def _rows(entry: dict):
    """(label, a, b, c, C's code or None, the GPU's bits) of the recorded rows, each once."""
    seen = set()
    for m in entry.get("models", []):
        for ex in m.get("examples", []):
            key = (tuple(ex["a"]), tuple(ex["b"]), ex["c"], ex["hardware"])
            if key not in seen:
                seen.add(key)
                codes = (ex["a_codes"], ex["b_codes"]) if "a_codes" in ex else None  # newer records keep them
                yield "example", ex["a"], ex["b"], ex["c"], ex.get("c_bits"), ex["hardware"], codes
    for t in entry.get("targeted", []):
        if "a" in t:
            yield t["case"], t["a"], t["b"], t["c"], None, t["hardware"], None


CASES = []
NO_NAN_CODES = set()  # records that say their NaN inputs were not kept (rows that need them are skipped)
for _rec in RECORDS:
    _data = json.loads(_rec.read_text())
    if str(_data.get("nan_inputs", "")).startswith("not recorded"):
        NO_NAN_CODES.add(_rec.name)
    for _name, _entry in _data.get("paths", {}).items():
        if "formats" in _entry and "superseded_by" not in _entry:
            CASES.append(pytest.param(_rec.name, _name, _entry, id=f"{_rec.stem}:{_name}"))


def test_records_are_present():
    assert RECORDS, "data/hardware holds the project's GPU records"
    assert len(CASES) >= 20


@pytest.mark.parametrize("record,name,entry", CASES)
def test_preset_matches_recorded_rows(record, name, entry):
    model = _preset(name, entry["formats"])
    fa, fb, fc, fd = (entry["formats"][x] for x in "abcd")
    kw = {"round_inputs": "device"} if fa == "tf32" else {}
    uint = {16: np.uint16, 32: np.uint32, 64: np.uint64}[F.get(fd).bits]
    codes = NAN_INPUTS.get((record, name), {})
    wrong = []
    n = skipped = 0
    for label, a, b, c, c_bits, hw, own in _rows(entry):
        n += 1
        a_codes, b_codes = own or codes.get((tuple(a), tuple(b), c), (None, None))
        if label == "example" and "nan" in a + b and a_codes is None and (fa in PAYLOAD_MATTERS or
                                                                          fb in PAYLOAD_MATTERS):
            assert record in NO_NAN_CODES, \
                f"{name}: no codes for the NaN inputs of {a} {b} (run scripts/recover_nan_inputs.py)"
            skipped += 1
            continue
        A, B = _operand(fa, a, a_codes), _operand(fb, b, b_codes)
        C = _operand(fc, [c], None if c_bits is None else [c_bits])[0]
        got = int(np.asarray(bf.dot(A, B, C, model=model, **kw)).view(uint))
        if got != int(hw, 16):
            wrong.append((label, a, b, c, hw, hex(got)))
    assert n > skipped
    assert not wrong, f"{len(wrong)} of {n} recorded rows differ from the preset, e.g. {wrong[:2]}"
