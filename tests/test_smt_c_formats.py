"""blockfma.smt compares models whose C formats nest: Volta's m8n8k4 with fp16 C as MMA-Sim reads it (a
subnormal C at exponent -14, ``c_input_format``) against the same unit given that C as fp32.

The shared C is an fp16 input, widened exactly for the model that takes fp32.  Every answer is held to
oracles outside the formula: the exact reference (``blockfma.reference.dot_bits``) for the witness, the
engine on random rows for the proof's side condition (C normal or zero in fp16: the readings agree; C
subnormal: they can part).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import z3

import blockfma as bf
from blockfma import formats, smt
from blockfma.reference import dot_bits
from blockfma.smt import constraints as C
from blockfma.smt import encode, queries

from helpers import bits

needs_bitwuzla = pytest.mark.skipif(not smt.available("bitwuzla"),
                                    reason="bitwuzla not installed (pip install bitwuzla; the test extra has it)")
# timeout=None on every query a test holds to an answer: these are small and fast, and a solver stopped by a
# time limit on a loaded machine would fail a right answer (a test that expects "unknown" passes a tiny limit)


def _narrow():
    """MMA-Sim's reading: C an fp16 input whose exponent the first block takes in fp16."""
    return bf.device("V100").instruction("mma.f16c").models[("fp16", "fp32")]


def _wide():
    """The same unit given C as fp32: a subnormal fp16 value is a normal fp32 one, at its own exponent."""
    return bf.device("V100").model("fp16", "fp32")


def test_the_shared_c_is_the_narrower_format():
    narrow, wide = _narrow(), _wide()
    assert (narrow.c_format.name, wide.c_format.name) == ("fp16", "fp32")
    assert smt.shared_c_format([narrow, wide]) is formats.fp16
    assert smt.shared_c_format([wide, narrow, wide]) is formats.fp16
    assert smt.shared_c_format([wide, wide]) is formats.fp32


@needs_bitwuzla
def test_discriminate_finds_the_subnormal_c_that_parts_the_two_readings():
    narrow, wide = _narrow(), _wide()
    w = smt.discriminate(narrow, wide, k=4, solver="bitwuzla", timeout=None)
    assert isinstance(w, smt.Witness), w
    assert w.formats == ("fp16", "fp16", "fp16", "fp32")
    assert w.c_formats == ("fp16", "fp32")
    # independently: C is an fp16 value, subnormal there (the only place the readings differ) ...
    assert formats.is_representable("fp16", w.c).all()
    assert w.c != 0 and abs(w.c) < 2.0**-14
    # ... and the exact reference gives the two results the engine gave, and they differ
    ref_narrow = dot_bits(narrow, list(w.a), list(w.b), w.c)
    ref_wide = dot_bits(wide, list(w.a), list(w.b), w.c)
    assert ref_narrow != ref_wide
    assert (ref_narrow, ref_wide) == (int(bits(w.d_a)), int(bits(w.d_b)))
    text = str(w)
    assert "(fp16; V100 fp16->fp32 (fp16 C) reads it as fp16, V100 fp16->fp32 reads it as fp32)" in text
    js = w.to_json()
    assert js["formats"]["c"] == "fp16" and [x["format"] for x in js["c_formats"]] == ["fp16", "fp32"]


@needs_bitwuzla
def test_equivalent_proves_the_readings_agree_when_c_is_normal_or_zero_in_fp16():
    """A proof at k = 4 (one m8n8k4 step; about 8 s with bitwuzla on 2 cores), its side condition met by
    some input (not vacuous), and the engine agreeing on random rows of the same kind."""
    narrow, wide = _narrow(), _wide()
    v = smt.equivalent(narrow, wide, k=4, constraints=C.normal("c"), solver="bitwuzla", timeout=None)
    assert v.status == "proved", str(v)
    # the engine on random rows: normal (or zero) fp16 C agrees, subnormal C parts somewhere
    rng = np.random.default_rng(11)
    n = 4000
    def codes(shape, lo, hi):
        return (rng.integers(0, 2, shape) << 15) | (rng.integers(lo, hi + 1, shape) << 10) | \
            rng.integers(0, 1 << 10, shape)
    a = formats.decode("fp16", codes((n, 4), 1, 12)).astype(np.float64)
    b = formats.decode("fp16", codes((n, 4), 1, 12)).astype(np.float64)
    c_normal = formats.decode("fp16", codes(n, 1, 12)).astype(np.float64)
    c_normal[::7] = 0.0
    c_sub = formats.decode("fp16", codes(n, 0, 0)).astype(np.float64)
    def same(c):
        return bits(bf.dot(a, b, c, model=narrow)) == bits(bf.dot(a, b, c, model=wide))
    assert same(c_normal).all()
    assert not same(c_sub).all()


def test_the_formula_widens_a_narrow_c_exactly():
    """encode.dot(wide, c_format=fp16) is the engine given the fp16 value as an fp32 C, on subnormal,
    normal, zero and special fp16 codes."""
    wide = _wide()
    x = (1 + 2**-10) * 2**-10
    a = b = [x, 2.0**-3, 0.0, -1.5]
    ca = formats.encode("fp16", np.array(a))
    for c in (2.0**-24, -3 * 2.0**-20, 2.0**-14, 0.0, -0.0, 65504.0, np.inf, np.nan):
        want = int(bits(bf.dot(np.array([a]), np.array([b]), np.array([c]), model=wide))[0])
        code = int(formats.encode("fp16", np.array([c]))[0])
        got = encode.dot(wide, [z3.BitVecVal(int(t), 16) for t in ca], [z3.BitVecVal(int(t), 16) for t in ca],
                         z3.BitVecVal(code, 16), c_format=formats.fp16)
        assert z3.simplify(got).as_long() == want, c
    with pytest.raises(ValueError, match="does not hold every code of fp32"):
        encode.dot(_narrow(), [z3.BitVecVal(0, 16)], [z3.BitVecVal(0, 16)], z3.BitVecVal(0, 32),
                   c_format=formats.fp32)


def test_c_formats_that_do_not_nest_and_different_outputs_are_refused():
    bf16_c = _wide().replace(c_input_format="bf16", name="V100 with bf16 C")
    with pytest.raises(ValueError, match=r"C formats \(fp16 and bf16\) do not nest: neither holds every value"):
        smt.equivalent(_narrow(), bf16_c, k=4)
    with pytest.raises(ValueError, match=r"C formats \(fp16 and bf16\) do not nest"):
        queries.separate([_narrow(), _wide(), bf16_c], k=4)
    with pytest.raises(ValueError, match=r"differ in output format \(fp32 and fp16\)"):
        smt.discriminate(_narrow(), bf.device("V100").model("fp16", "fp16"), k=4)


@needs_bitwuzla
def test_separate_reports_the_shared_c_format():
    sep = queries.separate([_wide(), _narrow()], k=4, solver="bitwuzla", timeout=None)
    assert isinstance(sep, queries.Separation), sep
    assert sep.c_format == "fp16" and sep.c != 0 and abs(sep.c) < 2.0**-14
    assert [dot_bits(m, list(sep.a), list(sep.b), sep.c) for m in (_wide(), _narrow())] == list(sep.bits)
    assert "(fp16)" in "\n".join(sep.lines())


@needs_bitwuzla
def test_the_cli_tells_the_two_v100_readings_apart(capsys):
    from blockfma.cli import main

    code = main(["smt", "diff", "V100:mma.f16c", "V100", "--input", "fp16", "--output", "fp32", "--k", "4",
                 "--solver", "bitwuzla", "--json", "-"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["status"] == "refuted"
    assert out["witness"]["formats"]["c"] == "fp16"
    c = float.fromhex(out["witness"]["c"])
    assert c != 0 and abs(c) < 2.0**-14
