"""blockfma.arguments and blockfma.progress: the validators every entry point uses, and their messages.

Oracles: Python's own number tower (what is an integer, a finite positive real) and the literal texts the
messages promise (the argument's name, the value, the fix), in Python and in command-line spelling."""

from __future__ import annotations

import math
import sys
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, strategies as st

from blockfma import arguments as A, progress as P
from blockfma.arguments import ArgumentError


def test_an_argument_error_is_a_value_error_naming_argument_value_and_fix():
    e = ArgumentError("device", None, "this method's words are tf32", use={"device": "A100"})
    assert isinstance(e, ValueError)
    assert str(e) == "device=None: this method's words are tf32; pass device='A100'"
    assert e.message({"device": "--device"}) == "--device None: this method's words are tf32; pass --device A100"
    assert e.message({}) == str(e)  # names the CLI does not have keep the Python spelling
    flag = ArgumentError("k", 0, "must be positive", use={"compare": True, "k": 4})
    assert flag.message({"compare": "--compare", "k": "--k"}) == "--k 0: must be positive; pass --compare and --k 4"


def test_long_values_are_cut_in_the_message_but_paths_are_not():
    e = ArgumentError("A", list(range(1000)), "must be 2-D")
    assert len(str(e)) < 120 and str(e).startswith("A=[0, 1, 2")
    path = "/" + "x" * 200
    assert path in str(ArgumentError("path", path, "is a folder"))


@given(st.one_of(st.integers(-10**30, 10**30), st.floats(allow_nan=True), st.booleans(), st.text(max_size=3),
                 st.none(), st.fractions()))
def test_integer_takes_exactly_the_integers_in_range(v):
    ok = isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 10**6
    if ok:
        assert A.integer("k", v, least=1, most=10**6) == v
    else:
        with pytest.raises(ArgumentError, match=r"^k=.*: must be an integer from 1 to 1000000$"):
            A.integer("k", v, least=1, most=10**6)


def test_integer_takes_numpy_integers_and_none_where_allowed():
    assert type(A.integer("n", np.int64(7), least=0)) is int
    assert A.integer("k", None, none=True) is None
    with pytest.raises(ArgumentError, match="must be an integer or None"):
        A.integer("k", 2.0, none=True)
    with pytest.raises(ArgumentError, match="of at least 0"):
        A.integer("seed", -1, least=0)
    with pytest.raises(ArgumentError, match="of at most 3"):
        A.integer("rounds", 4, most=3)


@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-5, 10**9), st.booleans(),
                 st.text(max_size=2), st.none(), st.fractions()))
def test_seconds_are_positive_finite_or_no_limit(v):
    positive = isinstance(v, (int, float, Fraction)) and not isinstance(v, bool) and not math.isnan(v) and v > 0
    if v is None or (positive and v == math.inf):
        assert A.seconds("timeout", v) is None
        with pytest.raises(ArgumentError, match="^timeout=.*no limit"):
            A.seconds("timeout", v, none=False)
    elif positive:
        assert A.seconds("timeout", v) == float(v) and type(A.seconds("timeout", v)) is float
    else:
        with pytest.raises(ArgumentError, match=r"^timeout=.*: must be a positive number of seconds"):
            A.seconds("timeout", v)


def test_choice_is_case_blind_and_suggests_the_closest():
    assert A.choice("solver", " Z3 ", ["auto", "z3", "cvc5"]) == "z3"
    with pytest.raises(ArgumentError) as info:
        A.choice("solver", "cvc4", ["auto", "z3", "cvc5"])
    assert str(info.value) == "solver='cvc4': must be one of 'auto', 'z3', 'cvc5'; pass solver='cvc5'"
    with pytest.raises(ArgumentError, match="must be one of 'a', 'b'$"):
        A.choice("x", 3, ["a", "b"])
    assert A.choice("x", None, ["a"], none=True) is None


@pytest.mark.parametrize("v, ok", [(True, True), (False, True), (np.bool_(True), True), (1, False), ("no", False),
                                   (None, False), (0.5, False)])
def test_flag(v, ok):
    if ok:
        assert A.flag("exact", v) is bool(v)
    else:
        with pytest.raises(ArgumentError, match="^exact=.*: must be True or False$"):
            A.flag("exact", v)


def test_seed_and_progress():
    assert A.seed("seed", None) is None and A.seed("seed", 2**70) == 2**70
    with pytest.raises(ArgumentError):
        A.seed("seed", -3)
    for v in (None, True, False, print):
        assert A.progress("progress", v) is v
    with pytest.raises(ArgumentError, match="function of one string"):
        A.progress("progress", "yes")


def test_unknown_keywords_are_refused_with_the_closest_name():
    A.keywords("probe", {"verify": 1}, ["verify", "rounds"])
    with pytest.raises(ArgumentError) as info:
        A.keywords("probe", {"verfy": 10}, ["verify", "rounds", "seed"])
    assert str(info.value) == "verfy=10: probe() takes no argument 'verfy'; did you mean verify=?"
    with pytest.raises(ArgumentError, match="it takes rounds, verify$"):
        A.keywords("probe", {"zzz": 1}, ["verify", "rounds"])


@given(st.permutations(range(5)), st.integers(0, 4), st.integers(0, 4))
def test_permutation(perm, i, j):
    assert A.permutation("order", perm, range(5)) == list(perm)
    if i != j:
        bad = list(perm)
        bad[i] = bad[j]  # a repeat, so one item is missing
        with pytest.raises(ArgumentError, match=r"must hold each of \[0, 1, 2, 3, 4\] exactly once"):
            A.permutation("order", bad, range(5))
    with pytest.raises(ArgumentError):
        A.permutation("order", list(perm)[:4], range(5))
    with pytest.raises(ArgumentError):
        A.permutation("order", 5, range(5))


def test_memory_is_refused_before_allocation(monkeypatch):
    monkeypatch.setattr(A, "available_memory", lambda: 2**30)
    A.memory("n", 10, 2**29, "the data")
    with pytest.raises(ArgumentError, match=r"^n=10000000000: needs about 8 GiB for A and B, and 1.0 GiB are "
                                            r"available; make n smaller$"):
        A.memory("n", 10**10, 2**33, "A and B", fix="make n smaller")
    monkeypatch.setattr(A, "available_memory", lambda: None)
    A.memory("n", 10, 2**50, "the data")  # unknown memory: only the absurd is refused
    with pytest.raises(ArgumentError, match="no machine has that"):
        A.memory("n", 10, 2**61, "the data")


def test_progress_reporter_follows_the_convention(monkeypatch, capsys):
    lines: list[str] = []
    assert P.reporter(lines.append) is not None
    P.reporter(lines.append)("x")
    assert lines == ["x"]
    assert P.reporter(False) is None
    P.reporter(True)("to stderr")
    assert capsys.readouterr().err == "to stderr\n"
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    assert P.reporter(None) is None  # not a terminal: quiet by default
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    assert P.reporter(None) is P.stderr
    with pytest.raises(ArgumentError, match="^verbose=1:"):
        P.reporter(1, "verbose")


def test_gemm_takes_a_progress_switch_not_any_truthy_value():
    import blockfma as bf

    with pytest.raises(ArgumentError, match="^progress='yes': must be True or False$"):
        bf.gemm(np.ones((2, 2)), np.ones((2, 2)), device="V100", progress="yes")
    D = bf.gemm(np.ones((2, 2)), np.ones((2, 2)), device="V100", progress=False)
    assert D.tolist() == [[2.0, 2.0], [2.0, 2.0]]
