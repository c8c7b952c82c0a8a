"""The probe's chained rows: targets chain an instruction over rows of several times its k, and separation
and verification use such rows, so that a Model right on one instruction but wrong on a chain is rejected.

The case that asked for it (issue 20): with ``priors="none"`` the B200 ``tcgen05`` and RTX 5090
e5m2 x e4m3 -> fp16 probes ended in a late-C model (products summed to 31 bits, C added after) that gives
the preset's bits on every one of 30,000 random single instructions but not on chains: there a C, the
previous instructions' rounded sum, nearly cancels products with many bits.
"""

from __future__ import annotations

import numpy as np
import pytest

import blockfma as bf
from blockfma.model import Family, Model
from blockfma.probes import TargetError, probe, target
from blockfma.probes.infer import CHAIN, Search, disagreements
from blockfma.probes.targets import holds
from blockfma.formats import bits, get

B200 = bf.device("B200").model(("e5m2", "e4m3fn"), "fp16", "tcgen05")
# what the probe chose before chained rows (the diff to the preset it reported)
LATE_C = Model.from_dict({**B200.to_dict(), "family": "late-c", "e_zero": None, "overflow": "ieee",
                          "late_fraction_bits": 31, "groups": 1, "product_exponent": None, "late_cut": "leading",
                          "accumulator": "fp32", "name": ""})


def test_late_c_candidate_fits_one_instruction_but_not_a_chain():
    """The premise: 0 of 30,000 single rows (k = 32) tell the two apart, some chained rows (k = 96) do."""
    assert LATE_C.family is Family.LATE_C
    assert disagreements(LATE_C, B200, 32, 30_000, seed=5) == 0
    assert disagreements(LATE_C, B200, 96, 30_000, seed=5) > 0


def test_callable_of_fixed_k_chains_its_calls_through_c():
    """A callable that takes only k products: a chain is one call per k, each output the next C."""
    seen = []

    def unit(a, b, c):
        if a.shape[1] != 8:
            raise ValueError("k must be 8")
        seen.append(a.shape)
        return bf.dot(a, b, c, model=B200.replace(block_width=8))

    t = target(unit, ("e5m2", "e4m3fn"), "fp16", k=8)
    rng = np.random.default_rng(0)
    a = rng.integers(-3, 4, (5, 24)).astype(float)
    b = rng.integers(-3, 4, (5, 24)).astype(float)
    c = rng.integers(-3, 4, 5).astype(float)
    d = t.chain(a, b, c)
    assert t.chaining == "calls" and seen[-3:] == [(5, 8)] * 3
    want = c
    for s in range(0, 24, 8):
        want = bf.dot(a[:, s:s + 8], b[:, s:s + 8], want, model=B200.replace(block_width=8)).astype(float)
    assert np.array_equal(bits(d), bits(want.astype(np.float16)))
    with pytest.raises(ValueError, match="s\\*8"):
        t.chain(a[:, :20], b[:, :20], c)


def test_targets_say_how_they_chain():
    """sim: the engine at the longer k (the Model's own plan, e.g. cuBLAS's C in the epilogue); a callable that
    takes any k: itself at the longer k; C narrower than D: no chain; torch: none (one call is a GEMM)."""
    t = target("sim:H100:cublas", "fp16", "fp16")
    assert t.chaining == "k"
    a = np.full((2, 3 * t.k), 0.5)
    assert np.array_equal(bits(t.chain(a, a, np.ones(2))), bits(bf.dot(a, a, np.ones(2), model=t.model)))
    anyk = target(lambda a, b, c: bf.dot(a, b, c, model=B200), ("e5m2", "e4m3fn"), "fp16", k=32)
    anyk.chain(np.zeros((1, 96)), np.zeros((1, 96)), np.zeros(1))
    assert anyk.chaining == "k" and anyk.calls == 1
    assert holds(get("fp32"), get("fp16")) and holds(get("fp16"), get("fp16")) and not holds(get("fp16"), get("fp32"))
    assert not holds(get("bf16"), get("fp16")) and not holds(get("fp16"), get("bf16"))

    def fixed(a, b, c):
        assert a.shape[1] == 4
        return bf.dot(a, b, c, model=bf.device("V100").model("fp16", "fp32"), c_format="fp16")
    narrow = target(fixed, "fp16", "fp32", k=4, c_format="fp16")
    with pytest.raises(TargetError, match="does not hold"):
        narrow.chain(np.zeros((1, 12)), np.zeros((1, 12)), np.zeros(1))
    assert narrow.chaining is None


def _unit_of_fixed_k(m: Model, k: int):
    """A black box that computes ``m`` on exactly k products (an instruction)."""
    def unit(a, b, c):
        if a.shape[1] != k:
            raise ValueError(f"this unit takes {k} products")
        return bf.dot(a, b, c, model=m)
    return unit


def test_chained_verification_rejects_a_model_right_on_one_instruction():
    """Verification against a black box of fixed k = 32 (the B200 preset): the late-C model passes every
    single row but fails on chained rows of k = 96; the preset passes both."""
    t = target(_unit_of_fixed_k(B200, 32), ("e5m2", "e4m3fn"), "fp16", k=32)
    s = Search(t, seed=1)
    res = s.verify(LATE_C, 1000)
    assert res["chained_k"] == CHAIN * 32 == 96 and res["chained_rows"] >= 40_000
    assert res["mismatches"] == res["chained_mismatches"] > 0, res
    assert len(res["first_counterexample"]["a"]) == 96
    ok = s.verify(B200, 1000)
    assert ok["mismatches"] == 0 and ok["chained_rows"] >= 40_000, ok
    assert t.chaining == "calls"  # the unit refused 96 products: chained through C


@pytest.mark.parametrize("spec", ["sim:B200:tcgen05", "sim:RTX 5090:mma"])
def test_formerly_late_c_configurations_recovered_without_priors(spec):
    """The two probes that ended in the late-C model now recover the preset: no difference on chained rows."""
    f = probe(spec, ("e5m2", "e4m3fn"), "fp16", verify=1000, priors="none")
    preset = bf.device(spec.split(":")[1]).model(("e5m2", "e4m3fn"), "fp16", spec.split(":")[2])
    assert f.verified, f.verification
    assert f.model().family is Family.TRUNCATED_FUSED
    assert disagreements(f.model(), preset, 3 * f.k, n=3000) == 0
    assert disagreements(f.model(), preset, 3 * f.k, n=30_000, seed=5) == 0
