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

import pytest

from blockfma import replay

RECORDS = replay.record_files()
NAN_CODES = replay.nan_codes()
CASES = [pytest.param(rec, name, entry, kept, id=f"{rec.removesuffix('.json')}:{name}")
         for rec, name, entry, kept in replay.record_paths()]


def test_records_are_present():
    assert RECORDS, "data/hardware holds the project's GPU records"
    assert len(CASES) >= 20


@pytest.mark.parametrize("record,name,entry,kept", CASES)
def test_preset_matches_recorded_rows(record, name, entry, kept):
    """Every kept row of the path through the current H100 preset (:func:`blockfma.replay.record_path`: inputs
    from their codes where the record or its NaN-codes file keeps them, tf32 read from binary32 registers)."""
    r = replay.record_path(record, name, entry, NAN_CODES.get((record, name)))
    assert not r.skipped or not kept, f"{name}: no codes for {r.skipped} rows' NaN inputs (run " \
                                      "scripts/recover_nan_inputs.py)"
    assert r.rows > 0
    assert r.mismatches == 0, f"{r.mismatches} of {r.rows} recorded rows differ from the preset, e.g. {r.examples[:2]}"
