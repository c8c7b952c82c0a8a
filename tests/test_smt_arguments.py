"""blockfma.smt's arguments and answers: every public argument checked where it enters (one line naming the
argument, the value and the fix), answers that cannot be misread (a time-out is an "unknown" Verdict, never
None; contradictory constraints are "vacuous", never "proved"), one timeout convention, JSON forms of every
result, and the exit status of each ``blockfma smt`` action.

The checks run before any formula is built, so the refusals take milliseconds; the few solver calls here
are tiny (k = 1 or 2, or a 1 ms limit).
"""

from __future__ import annotations

import inspect
import json
import math
from fractions import Fraction

import numpy as np
import pytest
import z3
from hypothesis import given, settings
from hypothesis import strategies as st

import blockfma as bf
from blockfma import smt
from blockfma.arguments import TIMEOUT, ArgumentError
from blockfma.smt import api, queries, solve

needs_bitwuzla = pytest.mark.skipif(not smt.available("bitwuzla"),
                                    reason="bitwuzla not installed (pip install bitwuzla; the test extra has it)")


def _v100():
    return bf.device("V100").model("fp16", "fp32")


def _cli(capsys, *argv):
    from blockfma.cli import main

    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


# --- timeouts: one convention ------------------------------------------------------------------------------
BAD_SECONDS = [0, 0.0, -0.0, -1, -1e-9, -math.inf, math.nan, True, False, "60", "inf", [60], 1j]


def _refused(call, argument: str, value) -> ArgumentError:
    with pytest.raises(ArgumentError) as info:
        call()
    assert info.value.argument == argument
    assert str(info.value).startswith(f"{argument}=")
    return info.value


@pytest.mark.parametrize("value", BAD_SECONDS, ids=repr)
def test_bad_timeouts_are_refused_by_every_entry_point(value):
    m = _v100()
    for call in (lambda: smt.equivalent(m, m, k=1, timeout=value),
                 lambda: smt.discriminate(m, m, k=1, timeout=value),
                 lambda: smt.worst_error(m, k=1, timeout=value),
                 lambda: queries.run("carry-3", timeout=value),
                 lambda: solve.check([z3.BoolVal(True)], [], timeout=value)):
        err = _refused(call, "timeout", value)
        assert "must be a positive number of seconds (None for no limit)" in str(err)
    err = _refused(lambda: smt.worst_error(m, k=1, total_timeout=value), "total_timeout", value)
    assert "must be a positive number of seconds" in str(err)


@settings(max_examples=60, deadline=None)
@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**12, 10**12), st.booleans(),
                 st.text(max_size=4), st.none(), st.sampled_from([1e308, 5e-324, 1e10, -0.0, 0.0])))
def test_timeout_values(value):
    """Positive finite numbers are seconds, None and inf mean no limit, everything else is refused."""
    fine = value is None or (isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0)
    if fine:
        for solver in solve.installed():
            assert solve.check([z3.BoolVal(True)], [], solver=solver, timeout=value).status == "sat"
    else:
        _refused(lambda: solve.check([z3.BoolVal(True)], [], solver="z3", timeout=value), "timeout", value)


def test_one_default_timeout_everywhere():
    for f in (smt.discriminate, smt.equivalent, smt.worst_error, queries.run, solve.check):
        assert inspect.signature(f).parameters["timeout"].default == TIMEOUT == 60.0
    assert inspect.signature(smt.worst_error).parameters["total_timeout"].default == smt.TOTAL_TIMEOUT == 600.0
    from blockfma import cli

    assert cli._SMT_TOTAL_TIMEOUT == smt.TOTAL_TIMEOUT
    parser = cli.build_parser()
    for argv in (["smt", "diff", "A", "B"], ["smt", "prove", "A", "B"], ["smt", "worst", "A"], ["smt", "query", "x"]):
        assert parser.parse_args(argv).timeout == 60.0
    assert parser.parse_args(["smt", "worst", "A"]).total_timeout is None  # the API's TOTAL_TIMEOUT
    assert parser.parse_args(["smt", "worst", "A", "--timeout", "inf"]).timeout == math.inf


@pytest.mark.parametrize("solver", ["z3", "bitwuzla", "cvc5"])
def test_no_limit_reaches_every_solver(solver):
    """None, inf and limits past what the solvers hold (bitwuzla and cvc5 gave up at once on 10**10 s,
    1e308 s overflowed) all mean no limit."""
    if not smt.available(solver):
        pytest.skip(f"{solver} not installed")
    x = z3.BitVec("x", 8)
    for t in (None, math.inf, 1e308, 1e10, 2.0**31 / 1000):
        out = solve.check([x * 3 == 9], [x], solver=solver, timeout=t)
        assert out.status == "sat" and (out.values["x"] * 3) % 256 == 9


# --- k -----------------------------------------------------------------------------------------------------
@settings(max_examples=80, deadline=None)
@given(st.one_of(st.integers(-10**12, 10**12), st.floats(allow_nan=True), st.booleans(), st.text(max_size=3),
                 st.just(np.int64(8)), st.just(np.int32(0))))
def test_k_values(k):
    ok = isinstance(k, (int, np.integer)) and not isinstance(k, bool) and 1 <= k <= smt.MAX_K
    if ok:
        assert api.check_k(k) == int(k) and type(api.check_k(k)) is int
        return
    with pytest.raises(ArgumentError) as info:
        api.check_k(k)
    assert info.value.argument == "k" and str(info.value).startswith("k=")
    if isinstance(k, (int, np.integer)) and not isinstance(k, bool) and k > smt.MAX_K:
        assert "MB of SMT-LIB text" in str(info.value) and f"pass k={smt.MAX_K}" in str(info.value)


def test_a_long_k_is_refused_before_any_formula():
    """(No clock: a formula of 10**8 products could not be built at all, so the refusal is what ends the call.)"""
    m = _v100()
    with pytest.raises(ArgumentError, match=r"^k=100000000: is too long for a formula: 100000000 products would "
                                            r"need about 600,000 MB of SMT-LIB text"):
        smt.discriminate(m, m, k=10**8)
    with pytest.raises(ArgumentError, match="k=257: is too long"):
        smt.worst_error(m, k=257)
    assert api.check_k(None) is None and api.check_k(256) == 256


# --- every other argument ----------------------------------------------------------------------------------
def test_arguments_are_checked_where_they_enter():
    m = _v100()
    C = smt.constraints
    bad = [
        (lambda: smt.equivalent(m, m, k=2, solver="yices"), "solver",
         "solver='yices': must be one of 'auto', 'bitwuzla', 'cvc5', 'z3'"),
        (lambda: smt.equivalent(m, m, k=2, solver=3), "solver", "solver=3: must be one of"),
        (lambda: smt.equivalent(m, m, k=2, constraints=5), "constraints", "constraints=5: must be a constraint"),
        (lambda: smt.equivalent(m, m, k=2, constraints="positive"), "constraints", "constraints='positive'"),
        (lambda: smt.equivalent(m, m, k=2, constraints=[C.positive(), 3]), "constraints",
         "which is not a constraint"),
        (lambda: smt.equivalent(m, m, k=4, order_b=[0, 1, 2]), "order_b",
         "order_b=[0, 1, 2]: must hold each of [0, 1, 2, 3] exactly once"),
        (lambda: smt.equivalent(m, m, k=4, order_b=[0, 0, 1, 2]), "order_b", "exactly once"),
        (lambda: smt.equivalent(m, m, k=4, order_b=[0.0, 1.0, 2.0, 3.0]), "order_b",
         "must hold the positions 0 to 3 as integers"),
        (lambda: smt.equivalent(m, m, k=2, order_b=[True, False]), "order_b", "as integers"),
        (lambda: smt.equivalent(m, m, k=2, order_b=5), "order_b", "order_b=5"),
        (lambda: smt.equivalent(m, m, k=2, symmetry="yes"), "symmetry", "symmetry='yes': must be True or False"),
        (lambda: smt.equivalent(m, m, k=2, input_format="fp16"), "input_format",
         "is for a device named as a string"),
        (lambda: smt.equivalent("V100", "T4", k=2), "input_format", "input_format=None: is needed"),
        (lambda: smt.equivalent("V100", "T4", k=2, input_format="fp17"), "input_format",
         "input_format='fp17': unknown format 'fp17'"),
        (lambda: smt.equivalent("V100", "T4", k=2, input_format="fp16", output_format="fp99"), "output_format",
         "output_format='fp99': unknown format"),
        (lambda: smt.equivalent(42, m, k=2), "model_a", "model_a=42: must be a blockfma.Model or a device name"),
        (lambda: smt.discriminate(m, "", k=2), "model_b", "model_b='': must be"),
        (lambda: smt.worst_error(m, k=1, reference="fp64"), "reference", "reference='fp64': must be one of 'exact'"),
        (lambda: smt.worst_error(m, k=1, relative=1), "relative", "relative=1: must be True or False"),
        (lambda: smt.worst_error(m, k=1, normal_inputs=None), "normal_inputs", "must be True or False"),
        (lambda: smt.worst_error(m, k=1, digits=-1), "digits", "digits=-1: must be an integer from 0 to 64"),
        (lambda: smt.worst_error(m, k=1, digits=2.5), "digits", "digits=2.5"),
        (lambda: smt.worst_error(m, k=1, seed_rows=10**9), "seed_rows",
         "seed_rows=1000000000: must be an integer from 0 to 1000000"),
        (lambda: smt.worst_error(m, k=1, progress="yes"), "progress", "progress='yes': must be True, False, None"),
        (lambda: smt.worst_error(m, k=1, solver="Yices"), "solver", "solver='Yices'"),
        (lambda: queries.run("carry3"), "name", "name='carry3': is not a named query; pass name='carry-3'"),
        (lambda: queries.run(None), "name", "name=None: is not a named query"),
        (lambda: queries.run("carry-3", solver="bitwuzlla"), "solver", "pass solver='bitwuzla'"),
        (lambda: queries.run("carry-3", progress=2), "progress", "progress=2"),
        (lambda: api.resolve(m, output_format="fp16"), "output_format", "is for a device named as a string"),
    ]
    for call, argument, text in bad:
        with pytest.raises(ArgumentError) as info:
            call()
        assert info.value.argument == argument, (argument, str(info.value))
        assert text in str(info.value), str(info.value)
        assert "\n" not in str(info.value)


def test_solver_names_are_case_blind_and_a_missing_one_names_the_installed(monkeypatch):
    assert solve.pick("Z3") == "z3" and solve.pick(" auto ") in smt.SOLVERS
    monkeypatch.setattr(solve.optional, "available", lambda name: False)
    assert solve.installed() == ["z3"] and solve.pick("auto") == "z3"
    with pytest.raises(ArgumentError, match=r"^solver='cvc5': is not installed here; installed: z3 \(or 'auto'\); "
                                            r"install it with pip install cvc5"):
        solve.pick("cvc5")


# --- answers that cannot be misread ------------------------------------------------------------------------
def _contradiction(v):
    """An input equal to two different values: c is both +0 and 1.0."""
    return [v.bits_c == 0, v.bits_c == 0x3F800000]


def test_vacuous_constraints_are_not_a_proof():
    m = _v100()
    v = smt.equivalent(m, m.replace(carry_bits=2), k=2, constraints=_contradiction, solver="z3")
    assert v.status == "vacuous" and v.vacuous and not v and not v.unknown
    assert v.reason == "no input of length 2 meets the constraints"
    assert "nothing proved" in str(v) and "vacuous for k = 2" in str(v)
    w = smt.discriminate(m, m.replace(carry_bits=2), k=2, constraints=_contradiction, solver="z3")
    assert w is not None and isinstance(w, smt.Verdict) and w.status == "vacuous" and not w
    cons = smt.constraints.all_of(smt.constraints.zeros(a=[0]), smt.constraints.positive("a"))
    assert smt.equivalent(m, m, k=2, constraints=cons, solver="z3").status == "vacuous"
    assert smt.equivalent(m, m, k=2, constraints=[smt.constraints.positive()], solver="z3").status == "proved"


def test_worst_error_refuses_vacuous_constraints():
    with pytest.raises(ArgumentError, match=r"constraints=<function _contradiction .*>: no input of length 1 meets "
                                            r"them \(with finite inputs, normal ones, and a finite result\)"):
        smt.worst_error(_v100(), k=1, constraints=_contradiction, solver="z3", timeout=None)


def test_worst_error_out_of_time_before_its_first_query_is_unknown():
    """A total_timeout spent on building the formula (a loaded machine) leaves no time for a query: "unknown"
    with the zero placeholder (was an ArgumentError on the negative time left, passed on as timeout=)."""
    w = smt.worst_error(_v100(), k=1, constraints=[smt.constraints.positive()], solver="z3", total_timeout=1e-9)
    assert w.status == "unknown" and w.queries == 0 and w.value == 0
    w = smt.worst_error(_v100(), k=1, solver="z3", total_timeout=1e-9, seed_rows=10)
    assert w.status == "lower bound" and w.queries == 0 and w.value > 0  # the engine's rows need no solver


def test_a_timeout_is_unknown_never_none():
    m = _v100()
    w = smt.discriminate(m, m, k=4, order_b=[3, 2, 1, 0], timeout=0.001)
    assert w is not None and isinstance(w, smt.Verdict)
    assert w.status == "unknown" and not w and w.unknown and w.reason
    assert w.to_json()["status"] == "unknown" and w.to_json()["witness"] is None
    v = smt.equivalent(m, m.replace(carry_bits=3), k=4, timeout=0.001)
    assert v.status == "unknown" and not v


def test_a_timed_out_query_says_how_long_it_takes():
    r = queries.run("carry-4-ampere", timeout=0.001)
    assert r.status == "unknown" and not r.ok
    assert "with bitwuzla it takes about 4.3 s on a 2-core machine: pass a longer timeout" in r.lines[0]
    assert "** NO ANSWER **" in str(r)
    assert all(q.expected_seconds is not None for q in queries.queries())


def test_discriminate_still_returns_witness_and_none():
    m = _v100()
    w = smt.discriminate(m, m.replace(output_rounding="rn"), k=1, solver="z3")
    assert isinstance(w, smt.Witness) and w
    assert smt.discriminate(m, m.replace(name="same"), k=1, solver="z3") is None


# --- progress ----------------------------------------------------------------------------------------------
@needs_bitwuzla
def test_worst_error_reports_each_step_with_the_bounds(capsys):
    lines: list[str] = []
    w = smt.worst_error(_v100(), k=1, timeout=0.5, total_timeout=1.5, seed_rows=50, digits=1, solver="bitwuzla",
                        progress=lines.append)
    assert lines[0] == "worst error of V100 fp16->fp32, k = 1: bitwuzla queries of up to 0.5 s each, at most 1.5 s in all"
    assert lines[1].startswith("  the engine on 50 random and adversarial rows: worst so far ")
    assert len(lines) == 2 + w.queries
    assert all("error > " in x and ", proved bound " in x for x in lines[2:])
    smt.worst_error(_v100(), k=1, timeout=0.2, total_timeout=0.4, seed_rows=10, digits=0, solver="bitwuzla")
    assert capsys.readouterr().err == ""  # progress=None: stderr is not a terminal here


# --- JSON --------------------------------------------------------------------------------------------------
def test_results_to_json_exactly():
    w = smt.Witness(np.array([1.0, 0.5]), np.array([2.0**-24, -3.0]), 0.0, np.float32(1.0), np.float32(-1.5),
                    "z3", 0.25, ("m1", "m2"), ("fp16", "fp16", "fp32", "fp32"))
    want = {"a": ["0x1p+0", "0x1p-1"], "b": ["0x1p-24", "-0x1.8p+1"], "c": "0x0p+0",
            "formats": {"a": "fp16", "b": "fp16", "c": "fp32", "d": "fp32"},
            "d": [{"model": "m1", "value": "0x1p+0", "bits": "0x3f800000"},
                  {"model": "m2", "value": "-0x1.8p+0", "bits": "0xbfc00000"}],
            "solver": "z3", "seconds": 0.25, "checked_by_engine": True}
    assert w.to_json() == want
    v = smt.Verdict("refuted", 0.5, "z3", 2, w)
    assert v.to_json() == {"status": "refuted", "k": 2, "solver": "z3", "seconds": 0.5, "reason": None,
                           "witness": want}
    e = smt.WorstError(Fraction(3, 2**25), None, True, np.array([1.0]), np.array([1.0]), 2.0**-30,
                       np.float32(1.0), Fraction(1) + Fraction(1, 2**30), "lower bound", "bitwuzla", 1.23456, 2,
                       [("2^-20", "unknown", 0.5)])
    assert e.to_json() == {"status": "lower bound", "relative": True, "value": "3*2^-25", "value_float": 3 * 2.0**-25,
                           "bound": None, "bound_float": None, "a": ["0x1p+0"], "b": ["0x1p+0"], "c": "0x1p-30",
                           "d": "0x1p+0", "exact": "1073741825*2^-30", "solver": "bitwuzla", "seconds": 1.235,
                           "queries": 2, "log": [{"threshold": "2^-20", "answer": "unknown", "seconds": 0.5}]}
    r = queries.QueryResult("q", "unsat", "unsat", True, "z3", 1.0, ["proved"])
    assert r.to_json() == {"query": "q", "status": "unsat", "expected": "unsat", "ok": True, "solver": "z3",
                           "seconds": 1.0, "lines": ["proved"]}
    for x in (w, v, e, r):
        json.dumps(x.to_json())


# --- the command line --------------------------------------------------------------------------------------
def test_cli_pair_exit_codes(capsys):
    code, out, _ = _cli(capsys, "smt", "diff", "V100", "V100", "--set", "output_rounding=rn", "--k", "1",
                        "--solver", "z3", "--json", "-")
    doc = json.loads(out)
    assert code == 0 and doc["status"] == "refuted" and doc["action"] == "diff"
    assert doc["witness"]["d"][0]["bits"].startswith("0x")
    code, out, _ = _cli(capsys, "smt", "diff", "V100", "V100", "--k", "1", "--solver", "z3")
    assert code == 1 and "no input of length 1 tells them apart" in out
    code, out, _ = _cli(capsys, "smt", "prove", "V100", "V100", "--k", "1", "--solver", "z3", "--json", "-")
    assert code == 0 and json.loads(out)["status"] == "proved"
    code, out, _ = _cli(capsys, "smt", "prove", "V100", "V100", "--set", "output_rounding=rn", "--k", "1",
                        "--solver", "z3")
    assert code == 1 and "not equivalent for k = 1" in out
    for action in ("diff", "prove"):
        code, out, _ = _cli(capsys, "smt", action, "V100", "V100", "--set", "carry_bits=3", "--timeout", "0.001")
        assert code == 2 and "unknown for k = 4" in out


def test_cli_query_and_list_exit_codes(capsys, monkeypatch):
    # z3 answers in about 5 s alone; no limit, so that a loaded CI machine cannot turn it into "no answer"
    code, out, _ = _cli(capsys, "smt", "query", "exact-multiplication", "--solver", "z3", "--json", "-",
                        "--timeout", "inf")
    assert code == 0 and json.loads(out)["ok"] is True
    code, out, _ = _cli(capsys, "smt", "query", "carry-4-ampere", "--timeout", "0.001")
    assert code == 2 and "NO ANSWER" in out
    q = queries.get("exact-multiplication")
    monkeypatch.setitem(queries._QUERIES, q.name, queries.replace(q, expected="unsat"))
    code, out, _ = _cli(capsys, "smt", "query", "exact-multiplication", "--solver", "z3", "--timeout", "inf")
    assert code == 1 and "NOT AS EXPECTED" in out
    code, out, _ = _cli(capsys, "smt", "list", "--json", "-")
    assert code == 0 and [r["query"] for r in json.loads(out)] == [q.name for q in queries.queries()]


def test_cli_worst_exit_codes_and_progress(capsys, monkeypatch):
    code, out, err = _cli(capsys, "smt", "worst", "V100", "--k", "1", "--timeout", "0.3", "--total-timeout", "0.6",
                          "--progress", "--json", "-")
    doc = json.loads(out)
    assert code == 2 and doc["status"] == "lower bound" and doc["bound"] is None and doc["k"] == 1
    assert err.startswith("worst error of V100 fp16->fp32, k = 1: ")
    code, out, err = _cli(capsys, "smt", "worst", "V100", "--k", "1", "--timeout", "0.3", "--total-timeout", "0.6",
                          "--quiet")
    assert code == 2 and err == "" and "is a lower bound" in out
    proved = smt.WorstError(Fraction(1, 2**24), Fraction(1, 2**24), True, np.ones(1), np.ones(1), 0.0,
                            np.float32(1.0), Fraction(1), "exact", "z3", 0.1, 3)
    monkeypatch.setattr(smt, "worst_error", lambda *a, **kw: proved)
    code, out, _ = _cli(capsys, "smt", "worst", "V100", "--k", "1")
    assert code == 0 and "status exact" in out


@pytest.mark.parametrize("argv,message", [
    (["smt", "diff", "V100", "V100", "--timeout", "0"],
     "argument --timeout: 0: must be a positive number of seconds (inf: no limit)"),
    (["smt", "worst", "V100", "--total-timeout", "nan"], "argument --total-timeout: nan: must be a positive"),
    (["smt", "query", "carry-3", "--timeout", "-5"], "argument --timeout: -5: must be a positive"),
    (["smt", "prove", "V100", "V100", "--k", "0"], "blockfma smt prove: error: --k 0: must be an integer of at least 1"),
    (["smt", "diff", "V100", "V100", "--k", "1000"], "error: --k 1000: is too long for a formula"),
    (["smt", "diff", "V100", "V100", "--input", "fp17"], "error: --input fp17: unknown format 'fp17'"),
    (["smt", "diff", "V100", "V100", "--set", "carry_bitz=3"],
     "error: --set carry_bitz=3: the model has no parameter 'carry_bitz'; did you mean --set carry_bits=3?"),
    (["smt", "diff", "V100", "V100", "--set", "carry_bits=abc"],
     "error: --set carry_bits=abc: Model(truncated-fused, fp16 -> fp32): carry_bits must be an integer or None"),
    (["smt", "diff", "V100", "V100", "--set", "carry_bits"], "error: --set carry_bits: takes PARAM=VALUE"),
    (["smt", "query", "carry3"], "error: blockfma smt query carry3: is not a named query; pass blockfma smt "
                                 "query carry-3"),
    (["smt", "diff", "V100", "NoSuchGPU"], "unknown device 'NoSuchGPU'"),
])
def test_cli_bad_usage_is_one_line_in_cli_spelling(capsys, argv, message):
    code, out, err = _cli(capsys, *argv)
    assert code == 2 and out == "" and message in err
    assert "Traceback" not in err and "=None" not in err.splitlines()[-1]


def test_cli_epilog_documents_the_exit_codes():
    from blockfma.cli import SMT_EXIT, build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command").choices["smt"]
    text = sub.format_help()
    for action, meaning in SMT_EXIT.items():
        assert f"  {action:6s} {meaning}" in text


def test_constraint_arguments_are_checked():
    """A misspelt ``which`` or a position past k must not constrain nothing (or index past the inputs), and a
    constraint that returns something other than z3 formulas is named."""
    m = _v100()
    C = smt.constraints
    with pytest.raises(ArgumentError, match=r'^which=\'d\': must name inputs: "a", "b", "c" or a combination'):
        C.positive("d")
    for make in (C.finite, C.nonzero, C.nonnegative, C.normal):
        with pytest.raises(ArgumentError, match="^which=''"):
            make("")
    with pytest.raises(ArgumentError, match="^which='abd'"):
        C.exponents(-4, 4, "abd")
    cases = [(C.positive(positions=[9]), r"^positions=\[9\]: must hold positions 0 to 1 \(k = 2\), not 9$"),
             (C.product_not_in("fp16", [0, 7]), r"^positions=\[0, 7\]: .* not 7$"),
             (C.product_in_range("fp16", [True]), r"^positions=\[True\]: .* not True$"),
             (lambda v: True, r"^constraints=<function .*: returned True, not a z3 formula \(BoolRef\)"),
             (lambda v: [v.bits_c == 0, "c > 0"], r"returned \[.*'c > 0'\], not a z3 formula")]
    for con, message in cases:
        with pytest.raises(ArgumentError, match=message):
            smt.equivalent(m, m, k=2, constraints=con, solver="z3")
    # positions given as a one-pass iterator hold for every use, not only the first
    once = C.product_in_range("fp16", iter([0]))
    v = api.inputs_for(m, 2)
    assert len(C.apply(once, v)) == len(C.apply(once, v)) == 3


def test_seed_rows_are_bounded_by_memory_before_any_row(monkeypatch):
    import blockfma.arguments as arguments

    monkeypatch.setattr(arguments, "available_memory", lambda: 2**30)
    with pytest.raises(ArgumentError, match=r"^seed_rows=100000: needs about 3.81 GiB for the engine's 200000 rows "
                                            r"of 256 products, and 1.0 GiB are available; pass fewer seed_rows"):
        smt.worst_error(_v100(), k=256, seed_rows=100_000)
