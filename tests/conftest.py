"""pytest fixtures shared by the tests (plain helpers live in helpers.py)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import settings

# the report's probe rows are computed in the tests, not read from a cache of earlier runs (blockfma.report's
# _probe_cache; tests/test_report_verdict.py tests the cache in a folder of its own)
os.environ["BLOCKFMA_CACHE"] = "off"

from helpers import bits

# no per-example deadline anywhere: a loaded CI machine makes an example slow, not wrong (hypothesis's default
# of 200 ms failed tests that were right); a test's own @settings may still set other things
settings.register_profile("blockfma", deadline=None)
settings.load_profile("blockfma")


@pytest.fixture
def assert_bits():
    """assert_bits(got, value, dtype): got has that dtype and the bit pattern of value in it."""

    def check(got, want_value, dtype=np.float32):
        got = np.asarray(got)
        assert got.dtype == np.dtype(dtype), got.dtype
        want = np.asarray(want_value, dtype=np.float64).astype(dtype)
        assert bits(got).tolist() == bits(want).tolist(), (got, want)

    return check


def pytest_terminal_summary(terminalreporter) -> None:
    """One line on the MMA-Sim differential (tests/test_mmasim.py), when it ran in this process (not under
    xdist); with ``BLOCKFMA_MMASIM_RESULTS=path`` also every configuration's rows and mismatches as JSON (the
    agreement table of a closing note: ``-m "slow or not slow" -p no:xdist -k presets_agree``)."""
    import os
    import sys

    module = sys.modules.get("test_mmasim")
    results = getattr(module, "RESULTS", None)
    if not results:
        return
    kinds = ("zero sign", "nan bits", "special inputs", "value")
    total = {k: sum(r[k] for r in results.values() if not r["departure"]) for k in kinds}
    departed = sum(r["value"] for r in results.values() if r["departure"])
    rows = sum(r["rows"] for r in results.values())
    terminalreporter.write_line(
        f"MMA-Sim differential: {len(results)} configurations, {rows} rows; mismatches " +
        ", ".join(f"{k} {v}" for k, v in total.items()) + f"; values where a preset departs on purpose: {departed}")
    path = os.environ.get("BLOCKFMA_MMASIM_RESULTS")
    if path:
        from importlib.metadata import version

        from blockfma.files import write_json

        write_json(path, {"mmasim": version("mmasim"), "configurations": results})
        terminalreporter.write_line(f"MMA-Sim differential per configuration: {path}")
