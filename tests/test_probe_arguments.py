"""bf.probe, its targets, bf.check, the order prober and `blockfma probe` with bad or edge arguments: each is
refused where it enters, in one line naming the argument, the value and the fix, before any work (issue 19).

The probes that do run are of ``sim:V100`` (k = 4, about 2 s with verify=300); every refusal is held to come
before any work: no engine runs and no large allocation is made (counted, not timed: a loaded machine makes a
refusal slow, not wrong)."""

from __future__ import annotations

import dataclasses
import json
import keyword
import tracemalloc
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import blockfma as bf
from blockfma import cli
from blockfma.arguments import ArgumentError
from blockfma.check import MAX_PRODUCTS
from blockfma.probes import Findings, TargetError, order, probe, target
from blockfma.probes.findings import MAX_VERIFY, PROBE_KEYWORDS
from blockfma.probes.order.tree import MAX_N
from blockfma.probes.targets import MAX_K, OPTIONS

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
V100 = bf.device("V100").model("fp16", "fp32")


def refused(argument: str, call, *args, **kwargs) -> ArgumentError:
    """The ArgumentError ``call`` raises, checked to name ``argument`` on one line, before any work: no engine
    is chosen (every simulation goes through ``registry.choose``) and under 16 MiB is taken at the peak
    (tracemalloc counts numpy's arrays too)."""
    tracemalloc.start()
    try:
        with mock.patch("blockfma.engine.registry.choose", side_effect=AssertionError("an engine ran before the "
                                                                                      "refusal")):
            with pytest.raises(ArgumentError) as info:
                call(*args, **kwargs)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20, f"a refusal must come before any allocation: {peak} bytes at the peak"
    err = info.value
    assert err.argument == argument, str(err)
    assert "\n" not in str(err) and str(err).startswith(f"{argument}="), str(err)
    return err


@pytest.fixture(scope="module")
def v100() -> Findings:
    return probe("sim:V100", verify=300, progress=False)


# --- k ----------------------------------------------------------------------------------------------------
NOT_A_COUNT = st.one_of(st.integers(max_value=0), st.integers(min_value=MAX_K + 1), st.booleans(),
                        st.floats(allow_nan=True), st.text(max_size=4), st.just([4]))


@FAST
@given(NOT_A_COUNT)
def test_bad_k_refused_before_any_work(k):
    refused("k", probe, "sim:V100", k=k)


def test_a_huge_k_is_refused_at_once_with_the_memory_it_would_need():
    err = refused("k", probe, "sim:V100", k=10**8)
    assert f"must be at most {MAX_K} products a row" in str(err)
    assert "would need about 5.59e+09 GiB" in str(err)
    assert refused("k", target, "sim:V100", k=MAX_K + 1).value == MAX_K + 1


def test_k_zero_is_not_replaced_by_the_instruction_k():
    refused("k", probe, "sim:V100", k=0)
    refused("k", target, "sim:V100", k=0)
    assert target("sim:V100", k=MAX_K).k == MAX_K  # the limit itself is taken


# --- verify, rounds, seed, priors, progress ------------------------------------------------------------------
@FAST
@given(st.one_of(st.integers(max_value=99), st.integers(min_value=MAX_VERIFY + 1), st.floats(), st.booleans(),
                 st.none()))
def test_bad_verify_refused(verify):
    refused("verify", probe, "sim:V100", verify=verify)


@FAST
@given(st.one_of(st.integers(max_value=-1), st.integers(min_value=101), st.floats(), st.booleans(), st.none()))
def test_bad_rounds_refused(rounds):
    refused("rounds", probe, "sim:V100", rounds=rounds)


@FAST
@given(st.one_of(st.integers(max_value=-1), st.floats(), st.booleans(), st.text(max_size=3)))
def test_bad_seed_refused(seed):
    refused("seed", probe, "sim:V100", seed=seed)


@pytest.mark.parametrize("name, value", [("priors", "nope"), ("priors", None), ("progress", "yes"), ("progress", 1),
                                         ("instruction", 3), ("instruction", ""), ("c_format", "nope")])
def test_other_bad_arguments_refused(name, value):
    refused(name, probe, "sim:V100", **{name: value})


def test_priors_spelled_in_another_case_is_the_same_choice():
    assert probe("sim:V100", verify=100, priors="NONE", progress=False).verified


# --- unknown keywords and each target kind's options ---------------------------------------------------------
@FAST
@given(st.from_regex(r"[a-z_][a-z0-9_]{0,11}", fullmatch=True).filter(
    lambda s: s not in PROBE_KEYWORDS and s not in OPTIONS["torch"] and not keyword.iskeyword(s)))
def test_unknown_keywords_refused(name):
    err = refused(name, probe, "sim:V100", **{name: 1})
    assert f"probe() takes no argument {name!r}" in str(err)


def test_a_misspelt_keyword_names_the_right_one():
    err = refused("verfy", probe, "sim:V100", verfy=10)
    assert str(err) == "verfy=10: probe() takes no argument 'verfy'; did you mean verify=?"


@pytest.mark.parametrize("spec", ["sim:V100", V100, lambda a, b, c: c.astype(np.float32)])
def test_torch_options_refused_for_other_targets(spec):
    err = refused("allow_tf32", probe, spec, k=4, allow_tf32=True)
    assert "is an option of 'torch' targets only" in str(err)


def test_torch_options_must_be_true_or_false():
    refused("allow_tf32", target, "torch:cpu", "fp32", "fp32", allow_tf32="yes")


# --- what a Model, a Target, a callable bring themselves --------------------------------------------------------
def test_a_model_keeps_its_formats_and_refuses_others():
    refused("input_format", probe, V100, "bf16")
    refused("output_format", probe, V100, output_format="fp16")
    refused("instruction", probe, V100, instruction="mma")
    assert target(V100, "fp16", "fp32").k == 8  # the same formats, passed on purpose


def test_a_target_keeps_its_k_and_formats():
    t = target("sim:V100")
    refused("k", probe, t, k=8)
    refused("input_format", target, t, "bf16")
    refused("c_format", target, t, c_format="fp32")
    assert target(t) is t


def test_a_callable_needs_k():
    refused("k", probe, lambda a, b, c: c)


# --- target specs ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("spec, argument, words", [
    ("sim:NOPE", "target", "unknown device 'NOPE'"), ("sim:", "target", "needs a device name"),
    ("", "target", "names no probe target"), ("fpga", "target", "names no probe target"),
    (42, "target", "is not a probe target (a int)"), ("torch:tpu", "target", "names no torch device ('tpu')"),
    ("missing.json", "target", "cannot read a devices file"), ("sim:missing.json", "target", "cannot read"),
    ("cuda:mma.nope", "target", "names no mma.sync or wgmma path 'mma.nope'"),
    ("sim:V100:nope", "instruction", "V100 has no instruction 'nope'")])
def test_bad_target_specs_name_the_spec_and_the_fix(spec, argument, words):
    err = refused(argument, probe, spec)
    assert words in str(err)


def test_a_pair_the_device_lacks_names_the_format():
    err = refused("input_format", probe, "sim:V100", "bf16")
    assert "V100 has no model for bf16 inputs with fp32 output; available: fp16->fp32, fp16->fp16" in str(err)
    refused("output_format", probe, "sim:V100", "fp16", "fp64")
    refused("input_format", probe, "sim:V100", "nope")


def test_cuda_without_a_gpu_says_what_is_missing():
    try:
        from blockfma.probes import cuda
        have_gpu = cuda.available()
    except ImportError:
        have_gpu = False
    if have_gpu:
        pytest.skip("a GPU is here: the cuda target is reachable")
    with pytest.raises(TargetError) as info:
        probe("cuda", "fp16", "fp32")
    assert str(info.value).startswith("target 'cuda' needs an NVIDIA GPU and CuPy: pip install")


def test_a_devices_file_is_a_target(v100, tmp_path):
    path = v100.save(tmp_path / "v100.json", name="probed V100 file")
    f = probe(str(path), verify=200, progress=False)
    assert f.verified and f.target == "sim:probed V100 file" and f.model() == v100.model().replace(
        name=f.model().name)


# --- rounds -----------------------------------------------------------------------------------------------
def test_rounds_zero_keeps_a_model_that_passes_its_first_check(v100):
    f = probe("sim:V100", verify=300, rounds=0, progress=False)
    assert f.verified and len(f.verification) == 1
    assert f.model() == v100.model() == V100


# --- the findings, short ----------------------------------------------------------------------------------
def test_findings_print_short_with_the_evidence_behind_a_method(v100):
    r, s = repr(v100), str(v100)
    assert len(r) < 300 and len(s) < 2000, (len(r), len(s))
    assert r.startswith("<Findings sim:V100: fp16 -> fp32 (C in fp32), k=4: verified on 300 rows: "
                        "truncated-fused fp16->fp32 L=4 F=23 e_zero=-131 out=TowardZero (")
    assert s.splitlines()[0] == r[len("<Findings "):-1]
    assert "  check 1: 300 rows (60 adversarial) and 40000 chained rows of k = 12, 0 mismatches" in s.splitlines()
    full = v100.details()
    assert len(full) > 50_000 and json.loads(full)["verified"] is True


def test_an_unverified_findings_shows_the_first_counterexample(v100):
    ce = {"a": ["0x1p+0"] * 4, "b": ["0x1p+0"] * 4, "c": "0x0p+0", "target": "0x1p+2 (0x40800000)",
          "model": "0x1.000002p+2 (0x40800001)"}
    check = {"rows": 300, "adversarial": 60, "mismatches": 7, "first_counterexample": ce}
    bad = dataclasses.replace(v100, verified=False, _model=None, verification=[check])
    assert repr(bad).startswith("<Findings sim:V100: fp16 -> fp32 (C in fp32), k=4: NOT verified (7 of 300 rows "
                                "differ; first: target 0x1p+2 (0x40800000), model 0x1.000002p+2 (0x40800001)) (")
    assert len(repr(bad)) < 300


# --- bf.check -----------------------------------------------------------------------------------------------
@FAST
@given(st.sampled_from(["k", "rows", "seed"]), st.one_of(st.integers(max_value=-1), st.floats(), st.booleans()))
def test_check_arguments_refused(name, value):
    refused(name, bf.check, V100, **{name: value})


@pytest.mark.parametrize("backends, words", [((), "non-empty tuple"), ("numpy", "non-empty tuple"),
                                             (("numpy", "numpy"), "names 'numpy' twice"),
                                             (("nmba",), "'nmba' is no backend; did you mean 'numba'?")])
def test_check_backends_refused(backends, words):
    assert words in str(refused("backends", bf.check, V100, backends=backends))


def test_check_bounds_its_products_and_checks_exactly_the_rows_asked():
    err = refused("k", bf.check, V100, k=10**8)
    assert f"more than the {MAX_PRODUCTS} a check takes" in str(err)
    refused("rows", bf.check, V100, k=1, rows=MAX_PRODUCTS + 1)
    c = bf.check(V100, rows=3, backends=("numpy",))
    assert (c.rows, c.backends, c.ok) == (3, ("numpy",), True)


# --- the order prober --------------------------------------------------------------------------------------
@FAST
@given(st.sampled_from([order.sequential, order.pairwise, lambda n: order.blocked(n, 2)]),
       st.one_of(st.integers(max_value=1), st.integers(min_value=MAX_N + 1), st.floats(), st.booleans()))
def test_order_tree_sizes_refused(build, n):
    refused("n", build, n)


def test_order_arguments_refused():
    plain = order.sum_target(lambda x: x.sum(axis=1), 16, input_format="fp64")
    refused("block", order.blocked, 8, 0)
    refused("combine", order.split_k, 8, 2, combine="nope")
    refused("ways", order.split_k, 8, 8)
    refused("n", order.sum_target, np.sum, 10**9)
    refused("scale", order.dot_target, lambda a, b: (a * b).sum(axis=1), 8, scale=2.5)
    refused("column", order.matmul_target, lambda A, B: A @ B, 8, column=1.5)
    refused("method", order.infer_order, plain, method="nope")
    refused("ratio", order.probe_scale, plain, ratio=2.5)
    refused("trials", order.verify, order.sequential(16), plain, trials=0)
    refused("seed", order.verify, order.sequential(16), plain, seed=-1)


def test_order_sizes_bounded_before_allocation():
    wide = order.sum_target(lambda x: x.sum(axis=1), MAX_N, input_format="fp32")
    err = refused("method", order.infer_order, wide, method="all-pairs")
    assert "GiB for the probe rows of n = 16384 summands (all-pairs: n**3 values)" in str(err)
    assert "GiB" in str(refused("m", order.matmul_target, lambda A, B: A @ B, 8, m=10**12))
    plain = order.sum_target(lambda x: x.sum(axis=1), 16, input_format="fp64")
    assert "GiB" in str(refused("trials", order.verify, order.sequential(16), plain, trials=10**13))


# --- blockfma probe --------------------------------------------------------------------------------------------
@pytest.fixture
def no_probe(monkeypatch):
    """The probe, replaced by one that fails the test if called: a refusal must come before it."""

    def called(*args, **kwargs):
        raise AssertionError("probed before the arguments were checked")
    monkeypatch.setattr("blockfma.probes.probe", called)


@pytest.mark.parametrize("argv, line", [
    (["--k", "0"], "--k 0: must be an integer of at least 1"),
    (["--verify", "5"], "--verify 5: must be an integer from 100 to 10000000"),
    (["--seed", "-1"], "--seed -1: must be an integer of at least 0"),
    (["--record", "-"], "--record -: must be a file: a record is written, not printed; --json - prints the findings"),
    (["--input", "fp16,nope"], "--input fp16,nope: unknown format 'nope'"),
])
def test_cli_errors_in_cli_spelling(argv, line, capsys):
    assert cli.main(["probe", "sim:V100", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"blockfma probe: error: {line}") and err.count("\n") == 1, err


def test_cli_target_errors(capsys):
    assert cli.main(["probe", "sim:NOPE"]) == 2
    assert capsys.readouterr().err.startswith("blockfma probe: error: TARGET sim:NOPE: unknown device 'NOPE'")
    assert cli.main(["probe", "sim:V100", "--input", "bf16"]) == 2
    assert capsys.readouterr().err.startswith("blockfma probe: error: --input bf16: V100 has no model for bf16")


@pytest.mark.parametrize("option", ["--record", "--json"])
def test_cli_destinations_refused_before_probing(option, tmp_path, capsys, no_probe):
    (tmp_path / "link").symlink_to(tmp_path / "missing" / "x.json")
    for path, words in ((tmp_path / "missing" / "r.json", "does not exist"), (tmp_path, "is a folder"),
                        (tmp_path / "link", "does not exist")):
        assert cli.main(["probe", "sim:V100", option, str(path)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"blockfma probe: error: {option} {path}: ") and words in err, err


def test_cli_record_and_json_not_the_same_file(tmp_path, capsys, no_probe):
    same = str(tmp_path / "x.json")
    assert cli.main(["probe", "sim:V100", "--record", same, "--json", same]) == 2
    assert "is also the --json file" in capsys.readouterr().err


@pytest.mark.parametrize("option", [["--record", "r.json"], ["--k", "8"], ["--input", "bf16"],
                                    ["--instruction", "mma"]])
def test_cli_all_refuses_options_it_would_ignore(option, capsys, no_probe):
    assert cli.main(["probe", "--all", "sim:V100", *option]) == 2
    assert f"{option[0]} cannot be combined with --all" in capsys.readouterr().err


def test_cli_json_stdout_is_the_findings_only_and_the_record_comes_after_the_text(tmp_path, capsys, monkeypatch):
    rec = tmp_path / "r.json"
    seen = []
    save = Findings.save
    monkeypatch.setattr(Findings, "save", lambda self, path, name=None: (seen.append(capsys.readouterr().out),
                                                                       save(self, path, name))[1])
    assert cli.main(["probe", "sim:V100", "--verify", "200", "-q", "--json", "-", "--record", str(rec)]) == 0
    printed = seen[0] + capsys.readouterr().out
    doc = json.loads(printed)  # nothing but the JSON on stdout
    assert doc["verified"] is True and doc["target"] == "sim:V100"
    assert seen[0].strip(), "the JSON was printed before the record was written"
    assert json.loads(rec.read_text())["schema"] == "blockfma-devices/1"


def test_cli_exit_status_follows_the_verdict(v100, capsys, monkeypatch):
    failed = dataclasses.replace(v100, verified=False, _model=None,
                                 verification=[{"rows": 300, "adversarial": 60, "mismatches": 2}])
    monkeypatch.setattr("blockfma.probes.probe", lambda *a, **k: failed)
    assert cli.main(["probe", "sim:V100", "-q"]) == 1
    assert "No Model passed verification (2 of 300 rows differ)" in capsys.readouterr().out
    monkeypatch.setattr("blockfma.probes.probe", lambda *a, **k: v100)
    assert cli.main(["probe", "sim:V100", "-q"]) == 0
    calls = iter([v100, failed])
    monkeypatch.setattr("blockfma.probes.probe", lambda *a, **k: next(calls))
    monkeypatch.setattr("blockfma.probes.targets.sim_jobs", lambda devs=None, scaled=None: [("sim:V100", "fp16", "fp32", V100)] * 2)
    assert cli.main(["probe", "--all", "sim:V100", "-q"]) == 1  # one of two did not verify
