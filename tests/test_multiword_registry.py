"""The one registry of multiword methods (blockfma.multiword.registry): matmul, bound, choose and the CLI
read it, and the chooser's peak rates are data with their sources (rates.json)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import blockfma.multiword as mw
from blockfma.multiword import bounds, registry
from blockfma.multiword.choose import RATES


def test_every_runnable_entry_is_a_method_of_matmul_and_the_word_methods_are_METHODS():
    assert mw.methods() == [n for n, e in registry.REGISTRY.items() if e.runs]
    assert mw.METHODS == {n: e for n, e in registry.REGISTRY.items() if e.kind == "words"}
    assert all(n in registry.REGISTRY for n in bounds.methods())


def test_the_chooser_weighs_every_runnable_method_but_mmm():
    c = mw.choose(256, 256, 256, accuracy="fp64")
    weighed = {c.method} | {o.method for o in c.alternatives}
    assert weighed == {n for n, e in registry.REGISTRY.items() if e.runs and e.kind != "mmm"}


def test_rates_are_data_with_a_source_each():
    doc = json.loads((Path(registry.__file__).parent / "rates.json").read_text())
    assert [c["name"] for c in doc["cards"]] == list(RATES)
    for card in doc["cards"]:
        rates = RATES[card["name"]]
        assert card["source"] and rates.source == card["source"]
        for unit in ("fp64", "fp32", "tf32", "fp16", "bf16", "int8"):
            tflops = card[unit]
            assert (rates.rate(unit) is None) if tflops is None else rates.rate(unit) == tflops * 1e12
        assert rates.bandwidth == card["bandwidth"] and math.isfinite(rates.launch)
