"""blockfma.smt: the bit-vector encoding is the engine's model, bit for bit; discriminate, equivalent and
worst_error answer correctly and check their witnesses; the seed's named queries give the seed's answers.

The encoding is held to the engine (itself held to reference.py and to hardware) by evaluating the formula on
concrete inputs of every input family (specials, subnormals, cancellation): z3's simplifier folds it to a
constant, which must be the engine's bit pattern.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import z3
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import blockfma as bf
from blockfma import formats, smt
from blockfma.formats import RoundingMode
from blockfma.model import Alignment, Family, Model
from blockfma.inputs import Formats, mixed_rows
from blockfma.smt import encode, queries, solve

from helpers import bits

needs_bitwuzla = pytest.mark.skipif(not smt.available("bitwuzla"),
                                    reason="bitwuzla not installed (pip install bitwuzla; the test extra has it)")
# timeout=None on every query a test holds to an answer: these are small and fast, and a solver stopped by a
# time limit on a loaded machine would fail a right answer (a test that expects "unknown" passes a tiny limit)


def _evaluate(model: Model, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> list[int]:
    """The formula's output bits on each row, folded to constants by z3's simplifier."""
    ca = formats.encode(model.input_format, a)
    cb = formats.encode(model.b_format, b)
    cc = formats.encode(model.c_format, c)
    out = []
    for r in range(len(c)):
        e = encode.dot(model, [z3.BitVecVal(int(x), model.input_format.bits) for x in ca[r]],
                       [z3.BitVecVal(int(x), model.b_format.bits) for x in cb[r]],
                       z3.BitVecVal(int(cc[r]), model.c_format.bits))
        out.append(z3.simplify(e).as_long())
    return out


def _hold(model: Model, k: int, n: int, seed: int) -> None:
    f = Formats.of(model.input_format, model.b_format, model.c_format, model.output_format)
    a, b, c = mixed_rows(f, k, n, np.random.default_rng(seed))
    want = bits(bf.dot(a, b, c, model=model)).astype(np.int64).tolist()
    got = _evaluate(model, a, b, c)
    bad = [r for r in range(n) if got[r] != want[r]]
    assert not bad, (f"{model.name}: formula != engine on {len(bad)} of {n} rows; first: a = {list(a[bad[0]])}, "
                     f"b = {list(b[bad[0]])}, c = {c[bad[0]]}: formula {got[bad[0]]:#x}, engine {want[bad[0]]:#x}")


def _preset(dev: str, inp, out: str, instruction: str | None = None) -> Model:
    return bf.device(dev).model(inp, out, instruction=instruction)


# One preset per family and per feature the encoding has a branch for.
FAST = [
    ("V100", "fp16", "fp32", None),  # truncated-fused, RZ output, L = 4
    ("V100", "fp16", "fp32", "mma.f16c"),  # C read in fp16 (16-bit C) in the first block, fp32 D
    ("A100", "bf16", "fp32", None),
    ("A100", "tf32", "fp32", None),  # tf32 (19-bit codes)
    ("H100", "fp16", "fp16", None),  # RN into fp16
    ("H100", "e4m3fn", "fp32", None),  # e8m13 output (output_fraction_bits)
    ("H100", ("e4m3fn", "e5m2"), "fp16", "mma.m16n8k32.fp8"),  # unpack to fp16, halves order, C after the blocks
    ("B200", "e4m3fn", "fp32", "mma"),
    ("B200", ("e2m1fn", "e3m2fn"), "fp32", "tcgen05"),  # fp4 x fp6: formats without NaN (kind::f8f6f4)
    ("RTX 5090", "e2m3fn", "fp16", None),
    ("MI100", "fp16", "fp16", None),  # exact-fused with an fp32 accumulator stored as fp16
    ("MI250X", "fp16", "fp32", None),  # pairwise, flushing
    ("MI250X", "fp32", "fp32", None),  # fma-chain in fp32
    ("AMX", "bf16", "fp32", None),
    ("Arm BFDOT", "bf16", "fp32", None),
    ("MI300X", "fp16", "fp32", None),  # late-c, leading cut
    ("MI300X", "e4m3fnuz", "fp32", None),  # late-c with even/odd groups (groups=2)
    ("MI300X", ("e4m3fnuz", "e5m2fnuz"), "fp32", None),  # mixed fp8, groups=2
]


@pytest.mark.parametrize("dev,inp,out,instruction", FAST, ids=[f"{d}-{i}-{o}-{n}" for d, i, o, n in FAST])
def test_encoding_is_the_engine_on_presets(dev, inp, out, instruction):
    m = _preset(dev, inp, out, instruction)
    _hold(m, 2 * (m.step_width or 4), 24, seed=1)


@pytest.mark.slow
def test_encoding_is_the_engine_on_every_preset():
    from blockfma.probes.targets import sim_jobs

    for _, _, _, m in sim_jobs():  # block-scaled presets take scales: tests/test_smt_scaled.py holds them
        if encode.unsupported(m) is None and not m.block_scaled:
            _hold(m, min(2 * (m.step_width or 4), 32), 60, seed=2)


_FORMAT_PAIRS = [("fp16", "fp32"), ("bf16", "fp32"), ("fp16", "fp16"), ("e4m3fn", "fp32"), ("e5m2", "bf16"),
                 ("fp16", "bf16")]


@st.composite
def _models(draw):
    inp, out = draw(st.sampled_from(_FORMAT_PAIRS))
    family = draw(st.sampled_from([Family.TRUNCATED_FUSED] * 3 + [Family.EXACT_FUSED, Family.PAIRWISE,
                                                                    Family.FMA_CHAIN]))
    rounding = draw(st.sampled_from(list(RoundingMode)))
    common = dict(output_rounding=rounding, subnormals=draw(st.booleans()),
                  overflow=draw(st.sampled_from(["ieee", "inf"])))
    if family is Family.TRUNCATED_FUSED:
        exact_zero = draw(st.sampled_from(["positive", "ieee"]))
        return Model(family, inp, out, block_width=draw(st.sampled_from([1, 2, 3, 4, 8])),
                     fraction_bits=draw(st.integers(3, 30)), e_zero=draw(st.integers(-140, 0)),
                     alignment=draw(st.sampled_from(list(Alignment))),
                     carry_bits=draw(st.sampled_from([None, 0, 1, 2, 3])),
                     product_exponent=draw(st.sampled_from(["sum", "normalized"])), exact_zero=exact_zero,
                     rounded_zero=draw(st.sampled_from(["signed", "positive"])) if exact_zero == "positive"
                     else "signed", name="drawn", **common)
    if family is Family.FMA_CHAIN:
        return Model(family, inp, out, block_width=1, name="drawn", **common)
    return Model(family, inp, out, block_width=draw(st.sampled_from([1, 2, 4])), name="drawn", **common)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=_models(), seed=st.integers(0, 2**16))
def test_encoding_is_the_engine_on_drawn_models(model, seed):
    """Models the presets do not have (any F, e_zero, floor alignment, carry bits, normalised product
    exponents, every rounding mode, flushing) are encoded as the engine runs them."""
    _hold(model, 2 * (model.block_width or 2) + 1, 10, seed)


# --- the questions -----------------------------------------------------------------------------------------
def _v100():
    return _preset("V100", "fp16", "fp32")


@needs_bitwuzla
def test_discriminate_returns_a_witness_the_engine_confirms():
    m = _v100()
    other = m.replace(output_rounding=RoundingMode.TiesToEven, name="V100 with RN")
    w = smt.discriminate(m, other, k=4, solver="bitwuzla", timeout=None)
    assert isinstance(w, smt.Witness)
    a, b, c = w.a[None], w.b[None], np.array([w.c])
    da, db = bf.dot(a, b, c, model=m), bf.dot(a, b, c, model=other)
    assert bits(da)[0] == bits(np.asarray(w.d_a))[()] and bits(db)[0] == bits(np.asarray(w.d_b))[()]
    assert bits(da)[0] != bits(db)[0]
    assert "checked by the engine" in str(w) and "0x" in str(w)


@needs_bitwuzla
def test_constraints_hold_on_the_witness():
    m = _v100()
    cons = smt.constraints.all_of(smt.constraints.positive(), smt.constraints.exponents(-4, 4, "ab"))
    w = smt.discriminate(m, m.replace(carry_bits=2), k=4, constraints=cons, solver="bitwuzla", timeout=None)
    assert isinstance(w, smt.Witness)
    assert (w.a > 0).all() and (w.b > 0).all() and w.c > 0
    assert ((w.a >= 2.0**-4) & (w.a < 2.0**5)).all() and ((w.b >= 2.0**-4) & (w.b < 2.0**5)).all()


@needs_bitwuzla
def test_equivalence_proofs():
    h100, b200 = _preset("H100", "fp16", "fp32"), _preset("B200", "fp16", "fp32")
    v = smt.equivalent(h100, b200, k=16, solver="bitwuzla", timeout=None)
    assert v.status == "proved" and bool(v)
    # an A100 k=16 instruction is not one 16-block (test_a100_instruction_is_two_chained_blocks: it is two)
    a100 = _preset("A100", "fp16", "fp32")
    v16 = smt.equivalent(a100, a100.replace(block_width=16, name="one 16-block"), k=16, solver="bitwuzla",
                         timeout=None)
    assert v16.status == "refuted" and not v16 and v16.witness is not None


@needs_bitwuzla
@pytest.mark.slow
def test_a100_instruction_is_two_chained_blocks():
    """The A100 model over k = 16 equals its k = 8 dot product applied twice, C chained (25 s)."""
    a100 = _preset("A100", "fp16", "fp32")
    a, b, c = encode.input_vars(a100, 16)
    whole = encode.dot(a100, a, b, c)
    chained = encode.dot(a100, a[8:], b[8:], encode.dot(a100, a[:8], b[:8], c))
    assert solve.check([whole != chained], [*a, *b, c], solver="bitwuzla", timeout=None).status == "unsat"


@pytest.mark.parametrize("solver", ["z3", "bitwuzla", "cvc5"])
def test_every_solver_answers(solver):
    if not smt.available(solver):
        pytest.skip(f"{solver} not installed (pip install {solver})")
    m = _v100()
    w = smt.discriminate(m, m.replace(output_rounding=RoundingMode.TiesToEven), k=4, solver=solver, timeout=None,
                         constraints=smt.constraints.zeros(a=[1, 2, 3], b=[1, 2, 3]))
    assert isinstance(w, smt.Witness) and bits(np.asarray(w.d_a)) != bits(np.asarray(w.d_b))
    v = smt.equivalent(m, m.replace(name="same"), k=2, solver=solver, timeout=None)
    assert v.status == "proved"


@needs_bitwuzla
def test_a_timeout_is_unknown_with_the_time_spent():
    m = _v100()
    v = smt.equivalent(m, m, k=4, order_b=[3, 2, 1, 0], solver="bitwuzla", timeout=0.2)
    assert v.status == "unknown" and v.unknown and not v
    assert v.seconds > 0 and "unknown" in str(v)


def test_a_narrow_c_is_a_16_bit_input_read_in_fp16_by_the_first_block():
    """V100's m8n8k4 with fp16 C and fp32 D (c_input_format): C is a 16-bit input whose exponent the first
    block reads in fp16: a = b = (1 + 2^-10) 2^-10, C = 2^-20 gives 0x1.004p-19 (the product's 2^-40 cut at
    2^(-14 - 23)), and 0x1.004008p-19 where the first block passes C on to the second, which reads it as
    fp32, as the fp32-C model does; on rows of small products and C often subnormal in fp16 the formula is
    the engine."""
    m = bf.device("V100").instruction("mma.f16c").models[("fp16", "fp32")]
    assert encode.input_vars(m, 4)[2].size() == 16
    x = (1 + 2**-10) * 2**-10
    row, zeros = [x, 0.0, 0.0, 0.0], [0.0] * 4
    narrow, wide = (int(bits(np.float32(float.fromhex(h)))) for h in ("0x1.004p-19", "0x1.004008p-19"))
    assert _evaluate(m, np.array([row]), np.array([row]), np.array([2.0**-20])) == [narrow]
    assert _evaluate(m, np.array([zeros + row]), np.array([zeros + row]), np.array([2.0**-20])) == [wide]
    assert _evaluate(_v100(), np.array([row]), np.array([row]), np.array([2.0**-20])) == [wide]
    rng = np.random.default_rng(4)
    def codes(shape, top):
        return rng.integers(0, 1 << 16, shape) & 0x83FF | (rng.integers(0, top + 1, shape) << 10)
    a, b, c = (formats.decode(formats.fp16, codes((16, 8), 8)), formats.decode(formats.fp16, codes((16, 8), 8)),
               formats.decode(formats.fp16, codes(16, 1)))
    assert _evaluate(m, a, b, c) == bits(bf.dot(a, b, c, model=m)).astype(np.int64).tolist()


def test_what_is_not_encoded_is_refused_in_one_line():
    fp64_mfma = _preset("MI300X", "fp64", "fp64")
    with pytest.raises(NotImplementedError, match="float64 values in an exact sum"):
        smt.discriminate(fp64_mfma, fp64_mfma, k=4)
    dmma = _preset("H100", "fp64", "fp64")
    with pytest.raises(NotImplementedError, match="propagate"):
        smt.equivalent(dmma, dmma, k=4)
    with pytest.raises(ValueError, match="the models differ in"):
        smt.equivalent(_v100(), _preset("V100", "fp16", "fp16"), k=4)
    with pytest.raises(ValueError, match="k=0: must be an integer of at least 1"):
        smt.equivalent(_v100(), _v100(), k=0)
    with pytest.raises(ValueError, match="solver='yices': must be one of 'auto', 'bitwuzla', 'cvc5', 'z3'"):
        smt.equivalent(_v100(), _v100(), k=2, solver="yices")


@needs_bitwuzla
def test_worst_error_of_a_correctly_rounded_unit_is_under_the_unit_roundoff():
    """An exact-fused block rounding to nearest has relative error at most 2**-24 against |a·b + c|, so at
    most that against sum |a_i b_i| + |c|; the search's best input is recomputed here with Fractions."""
    m = Model(Family.EXACT_FUSED, "fp16", "fp32", block_width=2, name="correctly rounded")
    w = smt.worst_error(m, k=2, solver="bitwuzla", timeout=4, total_timeout=10, digits=2, seed_rows=500)
    assert 0 < w.value <= Fraction(1, 2**24)
    x = sum((Fraction(float(p)) * Fraction(float(q)) for p, q in zip(w.a, w.b)), Fraction(w.c))
    mag = sum((abs(Fraction(float(p)) * Fraction(float(q))) for p, q in zip(w.a, w.b)), abs(Fraction(w.c)))
    d = bf.dot(w.a[None], w.b[None], np.array([w.c]), model=m)[0]
    assert abs(Fraction(float(d)) - x) / mag == w.value
    assert w.bound is None or w.value <= w.bound


@needs_bitwuzla
def test_worst_error_of_v100_beats_the_engine_rows():
    m = _v100()
    w = smt.worst_error(m, k=4, solver="bitwuzla", timeout=4, total_timeout=10, digits=1, seed_rows=300)
    assert w.value > Fraction(1, 2**24)  # truncation costs more than one rounding
    assert w.value < Fraction(8, 2**23)  # and at most a few units of 2**-23 on normal inputs
    assert "worst error" in str(w)


# --- the named queries -------------------------------------------------------------------------------------
FAST_QUERIES = [q.name for q in queries.queries() if not q.slow]
SLOW_QUERIES = [q.name for q in queries.queries() if q.slow]


@needs_bitwuzla
@pytest.mark.parametrize("name", FAST_QUERIES)
def test_named_query(name):
    r = queries.run(name, solver="bitwuzla", timeout=None)
    assert r.ok, str(r)


@needs_bitwuzla
@pytest.mark.slow
@pytest.mark.parametrize("name", SLOW_QUERIES)
def test_named_query_slow(name):
    r = queries.run(name, solver="bitwuzla", timeout=None)
    assert r.ok, str(r)


def test_query_list_covers_the_seed():
    names = {q.name for q in queries.queries()}
    for need in ("exact-multiplication", "exact-addition-fp16", "rounding-final-result", "rounding-accumulator",
                 "accumulation-order", "normalisation", "carry-3", "carry-4-as-3", "carry-4-ampere",
                 "markidis-vs-ootomo"):
        assert need in names
    with pytest.raises(ValueError, match="name='nope': is not a named query"):
        queries.get("nope")


# --- the command line --------------------------------------------------------------------------------------
def _cli(capsys, *argv):
    from blockfma.cli import main

    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_bf_smt_is_reachable_from_the_package():
    assert bf.smt.discriminate is smt.discriminate


@needs_bitwuzla
def test_cli_smt(capsys):
    code, out, _ = _cli(capsys, "smt", "diff", "V100", "T4", "--k", "8", "--solver", "bitwuzla")
    assert code == 0 and "not equivalent for k = 8" in out and "checked by the engine" in out
    code, out, _ = _cli(capsys, "smt", "prove", "V100", "V100", "--set", "carry_bits=4", "--solver", "bitwuzla")
    assert code == 0 and "proved" in out
    code, out, _ = _cli(capsys, "smt", "query", "carry-3", "--solver", "bitwuzla")
    assert code == 0 and "carry-3: sat" in out and "NOT AS EXPECTED" not in out
    code, out, _ = _cli(capsys, "smt", "list")
    assert code == 0 and "carry-4-ampere" in out


def test_cli_smt_bad_input(capsys):
    code, _, err = _cli(capsys, "smt", "diff", "V100", "V100", "--set", "carry_bitz=3")
    assert code == 2 and "parameters:" in err and "carry_bits" in err
    code, _, err = _cli(capsys, "smt", "diff", "NoSuchGPU", "V100")
    assert code == 2 and "NoSuchGPU" in err
    code, _, err = _cli(capsys, "smt", "query", "nope")
    assert code == 2 and "blockfma smt query nope: is not a named query" in err


@needs_bitwuzla
def test_symmetry_breaking_keeps_the_answers():
    """Sorted products inside each block lose no witness (fused blocks do not depend on the order) and no
    proof: the same answers as without, and the witness comes sorted."""
    m = _v100()
    w = smt.discriminate(m, m.replace(carry_bits=3), k=8, solver="bitwuzla", timeout=None, symmetry=True)
    assert isinstance(w, smt.Witness)
    codes = formats.encode("fp16", w.a).astype(np.int64)
    assert all(codes[i] <= codes[i + 1] for i in (0, 1, 2, 4, 5, 6))
    assert smt.equivalent(m, m.replace(carry_bits=4), k=4, solver="bitwuzla", timeout=None, symmetry=True)
    assert smt.api.symmetry_breaking([_preset("MI250X", "fp16", "fp32")], smt.api.inputs_for(m, 4)) == []
