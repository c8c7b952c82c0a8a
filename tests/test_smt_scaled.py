"""The SMT encoding of block-scaled MMA (the scaled-fused family: PTX ``mma.block_scale``, ``tcgen05.mma.
block_scale``) held to the exact reference ``reference.scaled_fused_block``, the independent oracle here.

* every block-scaled preset kind of B200 and RTX 5090: the formula, with inputs and scales fixed to random
  codes (NaN, zero and extreme scales, fp8 specials, signed zeros, C over a wide range), gives the
  reference's bits, folded by z3's simplifier and, for one row a kind, solved by a solver;
* the scale formats decode as ``blockfma.formats`` does on every code;
* a distinguishing input the solver finds really distinguishes (the reference recomputes both results);
* equivalences that must hold are proved: a kind against another instruction of the same arithmetic, and
  F against a larger F where nothing can be cut;
* the question users ask: inputs that tell the B200 mxf4 accumulator's F = 34..37 apart, checked by the
  reference.
"""

from __future__ import annotations

import numpy as np
import pytest
import z3

import blockfma as bf
from blockfma import formats as F
from blockfma import reference as R
from blockfma import smt
from blockfma.arguments import ArgumentError
from blockfma.model import Model
from blockfma.smt import constraints as C
from blockfma.smt import encode, queries, solve

needs_bitwuzla = pytest.mark.skipif(not smt.available("bitwuzla"),
                                    reason="bitwuzla not installed (pip install bitwuzla; the test extra has it)")
# timeout=None on every query a test holds to an answer: these are small and fast, and a solver stopped by a
# time limit on a loaded machine would fail a right answer (a test that expects "unknown" passes a tiny limit)


def _scaled_presets() -> list[tuple[str, str, Model]]:
    """(device, instruction, model) for every block-scaled preset of B200 and RTX 5090."""
    out = []
    for dev in ("B200", "RTX 5090"):
        for ins in bf.device(dev).instructions:
            for model in ins.models.values():
                if model.family.name == "scaled-fused":
                    out.append((dev, ins.name, model))
    return out


PRESETS = _scaled_presets()
# one model per kind (the k = 32 kind with each input format once), the representative subset
KINDS = {}
for _dev, _ins, _m in PRESETS:
    KINDS.setdefault((_dev, _ins, _m.input_format.name), _m)


def _id(p) -> str:
    return f"{p[0]}:{p[1]}:{p[2].input_format.name}*{p[2].b_format.name}"


def _scale_codes(rng, fs: F.Format, n: int, row: int) -> np.ndarray:
    """Scale codes, one mode a row: random; a narrow spread about 1; the extremes; with one NaN in row 3."""
    e8 = fs.name == "e8m0fnu"
    modes = [lambda: rng.integers(0, 0xFF if e8 else 0x7F, n),
             lambda: rng.integers(117, 138, n) if e8 else rng.choice([0x30, 0x38, 0x40, 0x48], n),
             lambda: rng.choice([0, 1, 127, 253, 254] if e8 else [0, 1, 7, 0x38, 0x7E], n),
             lambda: rng.integers(0, 0xFF if e8 else 0x7F, n)]
    codes = np.asarray(modes[row % 4]())
    if row % 4 == 3:
        codes[rng.integers(n)] = 0xFF if e8 else 0x7F
    return codes


def _rows(model: Model, k: int, n: int, seed: int):
    """n rows of codes (a, b, c, scales of A and B) for a block-scaled model."""
    rng = np.random.default_rng(seed)
    fa, fb, fc, fs = model.input_format, model.b_format, model.c_format, model.scale_format
    blocks = k // model.option("scale_block")
    rows = []
    for r in range(n):
        a = rng.integers(0, 1 << fa.bits, k)
        b = rng.integers(0, 1 << fb.bits, k)
        if r % 2 == 0:  # no specials in half the rows: the arithmetic, not the NaN rule, decides
            a[~np.isfinite(F.decode(fa, a))] = 0
            b[~np.isfinite(F.decode(fb, b))] = 0
        x = np.float32(rng.standard_normal() * 2.0 ** int(rng.integers(-40, 40)))
        c = [x, np.float32(0.0), np.float32(-0.0), np.float32(2.0 ** int(rng.integers(-30, 30)))][r % 4]
        rows.append((a, b, int(F.encode(fc, np.float64(c))), _scale_codes(rng, fs, blocks, r),
                     _scale_codes(rng, fs, blocks, r + 1)))
    return rows


def _reference_bits(model: Model, a, b, c, sa, sb) -> int:
    fa, fb, fc, fs = model.input_format, model.b_format, model.c_format, model.scale_format
    return R.dot_bits(model, list(F.decode(fa, a)), list(F.decode(fb, b)), float(F.decode(fc, np.array([c]))[0]),
                      list(F.decode(fs, sa)), list(F.decode(fs, sb)))


def _symbols(model: Model, k: int):
    a, b, c = encode.input_vars(model, k)
    sa, sb = encode.scale_vars(model, k)
    return a, b, c, sa, sb, encode.dot(model, a, b, c, sa, sb)


def _fixed(symbols, row) -> list[tuple[z3.BitVecRef, z3.BitVecRef]]:
    a, b, c, sa, sb, _ = symbols
    ca, cb, cc, csa, csb = row
    pairs = list(zip(a, ca)) + list(zip(b, cb)) + [(c, cc)] + list(zip(sa, csa)) + list(zip(sb, csb))
    return [(x, z3.BitVecVal(int(v), x.size())) for x, v in pairs]


def _hold(model: Model, k: int, n: int, seed: int) -> None:
    """The formula folded on n rows of fixed codes gives the reference's bits."""
    symbols = _symbols(model, k)
    for row in _rows(model, k, n, seed):
        got = z3.simplify(z3.substitute(symbols[-1], *_fixed(symbols, row))).as_long()
        want = _reference_bits(model, *row)
        assert got == want, (f"{model.name}: formula {got:#010x}, reference {want:#010x} on a = {list(row[0])}, "
                             f"b = {list(row[1])}, c = {row[2]:#x}, scales {list(row[3])}, {list(row[4])}")


def test_every_preset_kind_is_covered():
    """B200 and RTX 5090 each list the block-scaled kinds: mxf8f6f4 (k = 32), mxf4 and mxf4nvf4 (k = 64)."""
    names = {(dev, ins) for dev, ins, _ in PRESETS}
    assert ("B200", "tcgen05.mxf4.block32") in names and ("RTX 5090", "mma.mxf4nvf4.block16.ue4m3") in names
    assert len({ins for _, ins, _ in PRESETS}) >= 10
    assert {m.option("scale_group") for _, _, m in PRESETS} == {None, 16}


@pytest.mark.parametrize("key", list(KINDS), ids=lambda k: f"{k[0]}:{k[1]}:{k[2]}")
def test_formula_matches_reference(key):
    """One instruction of every kind and input format, 8 rows: the formula's bits are the reference's."""
    model = KINDS[key]
    _hold(model, model.block_width, 8, seed=hash(key) % 1000)


def test_formula_matches_reference_chained():
    """Two instructions chained (k = 2 x 64 and 2 x 32): the first block's result is the second's C."""
    for dev, ins in (("B200", "tcgen05.mxf4nvf4.block16.ue4m3"), ("RTX 5090", "mma.mxf8f6f4.block32")):
        model = bf.device(dev).model("e2m1fn", "fp32", instruction=ins)
        _hold(model, 2 * model.block_width, 4, seed=5)


VARIANTS = [dict(exact_zero="ieee", rounded_zero="signed"), dict(alignment="floor"), dict(carry_bits=1),
            dict(output_rounding="TiesToEven", overflow="ieee"), dict(subnormals=False), dict(fraction_bits=3)]


@pytest.mark.parametrize("changes", VARIANTS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
@pytest.mark.parametrize("ins, fmt", [("tcgen05.mxf4nvf4.block16.ue4m3", "e2m1fn"),
                                      ("tcgen05.mxf8f6f4.block32", "e4m3fn")])
def test_variants_match_reference(ins, fmt, changes):
    """The presets' neighbours (zero signs, floor alignment, carry bits, rounding to nearest, flushing,
    a narrow F): the formula follows the reference there too, on random rows and on rows of signed zeros
    (the sign of an exact zero, with zero scales)."""
    model = bf.device("B200").model(fmt, "fp32", instruction=ins).replace(**changes)
    k = model.block_width
    _hold(model, k, 6, seed=17)
    symbols = _symbols(model, k)
    fa, fs = model.input_format, model.scale_format
    neg_zero, minus_one, one = 1 << (fa.bits - 1), *(int(F.encode(fa, np.float64(v))) for v in (-1.0, 1.0))
    blocks = k // model.option("scale_block")
    zero_scale = 0 if fs.name == "ue4m3" else 0x7F  # e8m0fnu has no zero: scale 1 there
    unit = 0x38 if fs.name == "ue4m3" else 0x7F
    for c in (0, 0x80000000):
        for mixed in (False, True):
            a, b = np.full(k, neg_zero), np.zeros(k, dtype=np.int64)  # every product -0
            a[0], b[0] = minus_one, one  # -1, scaled by 0 where the scale format has a zero
            if mixed:
                a[1] = 0  # +0 * +0: this group's products are not all negative
            row = (a, b, c, np.full(blocks, zero_scale), np.full(blocks, unit))
            got = z3.simplify(z3.substitute(symbols[-1], *_fixed(symbols, row))).as_long()
            assert got == _reference_bits(model, *row), (changes, c, mixed, hex(got))


@pytest.mark.slow
@pytest.mark.parametrize("preset", PRESETS, ids=_id)
def test_formula_matches_reference_every_preset(preset):
    """Every block-scaled preset (each input pair of mxf8f6f4 on both devices), 24 rows."""
    model = preset[2]
    _hold(model, model.block_width, 24, seed=11)


@needs_bitwuzla
@pytest.mark.parametrize("key", [k for k in KINDS if k[0] == "B200"], ids=lambda k: f"{k[1]}:{k[2]}")
def test_solved_with_inputs_fixed(key):
    """A solver, given the formula with every input fixed, answers with the reference's output bits."""
    model = KINDS[key]
    symbols = _symbols(model, model.block_width)
    row = _rows(model, model.block_width, 2, seed=3)[1]
    d = z3.BitVec("d", model.output_format.bits)
    form = [d == symbols[-1]] + [x == v for x, v in _fixed(symbols, row)]
    out = solve.check(form, [d], solver="bitwuzla", timeout=None)
    assert out.status == "sat"
    assert out.values["d"] == _reference_bits(model, *row)


@pytest.mark.parametrize("fmt", ["e8m0fnu", "ue4m3"])
def test_scale_formats_decode(fmt):
    """Every code of a scale format decodes to blockfma.formats' value: e8m0fnu 2**(code - 127), 0xFF NaN, no
    zero; ue4m3 unsigned e4m3 with a zero and subnormals, 0x7F NaN."""
    f = F.get(fmt)
    codes = np.arange(1 << f.bits)
    want = F.decode(f, codes)
    for code, value in zip(codes, want):
        x = encode.decode(f, z3.BitVecVal(int(code), f.bits))
        nan, zero, neg = (z3.is_true(z3.simplify(t)) for t in (x.nan, x.zero, x.neg))
        assert not neg
        assert nan == bool(np.isnan(value)), code
        if nan:
            continue
        assert zero == (value == 0), code
        if not zero:
            sig, lsb = z3.simplify(x.sig).as_long(), z3.simplify(x.lsb).as_signed_long()
            assert sig * 2.0 ** lsb == value, (code, sig, lsb, value)


# --- distinguishing inputs, checked by the reference ---------------------------------------------------------
def _short(model: Model, keep: list[int]) -> list:
    """A and B zero outside ``keep``; finite inputs; scales not NaN with exponents in [-20, 20]."""
    others = [i for i in range(model.block_width) if i not in keep]
    return [C.zeros(a=others, b=others), C.finite(), C.scales(-20, 20)]


def _reference_of(model: Model, w) -> int:
    return R.dot_bits(model, list(w.a), list(w.b), w.c, list(w.scale_a), list(w.scale_b))


@needs_bitwuzla
def test_distinguishing_input_mxf4():
    """F = 35 against F = 34 on the B200 mxf4 kind: the solver's input gives different bits, and the
    reference, recomputing both, agrees with each."""
    m = bf.device("B200").model("e2m1fn", "fp32", instruction="tcgen05.mxf4.block32")
    other = m.replace(fraction_bits=34, name="F = 34")
    w = smt.discriminate(m, other, k=64, constraints=_short(m, [0, 16, 32, 48]), timeout=None)
    assert isinstance(w, smt.Witness), w
    assert len(w.scale_a) == len(w.scale_b) == 2 and w.scale_format == "e8m0fnu"
    da, db = _reference_of(m, w), _reference_of(other, w)
    assert da != db
    assert (da, db) == (int(F.bits(w.d_a)), int(F.bits(w.d_b)))


@needs_bitwuzla
@pytest.mark.slow
def test_distinguishing_input_per_term_scaling():
    """The k = 32 kind scales each product: F = 25 against 24 on e4m3 inputs, checked by the reference."""
    m = bf.device("B200").model("e4m3fn", "fp32", instruction="tcgen05.mxf8f6f4.block32")
    other = m.replace(fraction_bits=24, name="F = 24")
    w = smt.discriminate(m, other, k=32, constraints=_short(m, [0, 1, 2]), timeout=None)
    assert isinstance(w, smt.Witness), w
    assert _reference_of(m, w) != _reference_of(other, w)
    assert _reference_of(m, w) == int(F.bits(w.d_a))


@needs_bitwuzla
@pytest.mark.slow
def test_distinguishing_input_nvf4_ue4m3():
    """ue4m3 scales (with zero and subnormals): F = 35 against 36 on mxf4nvf4.block16, no side constraints."""
    m = bf.device("B200").model("e2m1fn", "fp32", instruction="tcgen05.mxf4nvf4.block16.ue4m3")
    other = m.replace(fraction_bits=36, name="F = 36")
    w = smt.discriminate(m, other, k=64, timeout=None)
    assert isinstance(w, smt.Witness), w
    assert len(w.scale_a) == 4 and w.scale_format == "ue4m3"
    assert _reference_of(m, w) != _reference_of(other, w)


# --- equivalences that must hold ------------------------------------------------------------------------------
@needs_bitwuzla
def test_same_arithmetic_proved_equivalent():
    """tcgen05.mxf4.block32 and mxf4nvf4.block32 state the same arithmetic: proved equal on every input."""
    dev = bf.device("B200")
    a = dev.model("e2m1fn", "fp32", instruction="tcgen05.mxf4.block32")
    b = dev.model("e2m1fn", "fp32", instruction="tcgen05.mxf4nvf4.block32")
    verdict = smt.equivalent(a, b, k=64, timeout=None)
    assert verdict.status == "proved", verdict


@needs_bitwuzla
def test_nothing_cut_proved_equivalent():
    """On the k = 32 kind with fp4 inputs (four of them nonzero), C = 0 and every scale 1, no term lies more
    than 6 bits below e_max (products of e2m1 values have exponents 0 to 4 and 2 fraction bits): F = 8 and
    F = 25 give the same bits on every such input, and F = 5 does not."""
    m = bf.device("B200").model("e2m1fn", "fp32", instruction="tcgen05.mxf8f6f4.block32")
    keep = list(range(4))
    others = [i for i in range(32) if i not in keep]
    cons = [C.zeros(a=others, b=others, c=True), C.scales(0, 0)]
    verdict = smt.equivalent(m, m.replace(fraction_bits=8), k=32, constraints=cons, timeout=None)
    assert verdict.status == "proved", verdict
    w = smt.discriminate(m, m.replace(fraction_bits=5), k=32, constraints=cons, timeout=None)
    assert isinstance(w, smt.Witness)
    assert _reference_of(m, w) != _reference_of(m.replace(fraction_bits=5), w)


def test_unit_scales_as_the_unscaled_kind():
    """With every scale 1 the k = 32 block-scaled kind is the unscaled kind::f8f6f4 block (same F, e_zero,
    rounding): the two formulas, folded on random fp4 rows, agree (and the reference agrees with both)."""
    dev = bf.device("B200")
    scaled = dev.model("e2m1fn", "fp32", instruction="tcgen05.mxf8f6f4.block32")
    plain = dev.model("e2m1fn", "fp32", instruction="tcgen05")
    assert (plain.family.name, plain.fraction_bits, plain.e_zero) == ("truncated-fused", 25, -133)
    fs = scaled.scale_format
    one = int(F.encode(fs, np.float64(1.0)))
    a, b, c, sa, sb, d = _symbols(scaled, 32)
    d_plain = encode.dot(plain, a, b, c)
    rng = np.random.default_rng(2)
    for _ in range(8):
        row = (rng.integers(0, 16, 32), rng.integers(0, 16, 32),
               int(F.encode(F.fp32, np.float64(np.float32(rng.standard_normal() * 2.0 ** int(rng.integers(-8, 8)))))),
               np.full(1, one), np.full(1, one))
        fixed = _fixed((a, b, c, sa, sb, d), row)
        got = z3.simplify(z3.substitute(d, *fixed)).as_long()
        assert got == z3.simplify(z3.substitute(d_plain, *fixed)).as_long() == _reference_bits(scaled, *row)


# --- bad arguments ------------------------------------------------------------------------------------------
def test_bad_arguments():
    m = bf.device("B200").model("e2m1fn", "fp32", instruction="tcgen05.mxf4.block32")
    a, b, c = encode.input_vars(m, 64)
    with pytest.raises(ValueError, match="scale_a must hold 2 scales"):
        encode.dot(m, a, b, c)
    with pytest.raises(ValueError, match="multiple of the scale block 32"):
        encode.scale_vars(m, 48)
    with pytest.raises(ArgumentError, match="multiple of .*scale block"):
        smt.equivalent(m, m, k=48)
    unscaled = bf.device("B200").model("e2m1fn", "fp32", instruction="tcgen05")
    with pytest.raises(ValueError, match="block-scaled and the other is not"):
        smt.equivalent(m, unscaled, k=64)
    with pytest.raises(ValueError, match="scale_format"):
        smt.equivalent(m, bf.device("B200").model("e2m1fn", "fp32", instruction="tcgen05.mxf4nvf4.block16.ue4m3"),
                       k=64)
    with pytest.raises(ValueError, match="k = 40 must be a multiple of the scale block 32"):
        smt.worst_error(m, k=40, seed_rows=0)
    with pytest.raises(ArgumentError, match="fractions"):
        queries.accumulator_inputs(m, fractions=(35,))
    with pytest.raises(ArgumentError, match="exponents"):
        queries.accumulator_inputs(m, exponents=(5, -5))
    with pytest.raises(ArgumentError, match="positions"):
        queries.accumulator_inputs(m, positions=[64])
    with pytest.raises(ArgumentError, match="models"):
        queries.separate([m])


# --- the question: the B200 mxf4 accumulator's width ---------------------------------------------------------
@needs_bitwuzla
@pytest.mark.slow
def test_accumulator_inputs_pair():
    """An input that tells F = 35 from F = 36, with its results under both, each checked by the reference
    (accumulator_inputs raises if the reference disagrees)."""
    m = bf.device("B200").model("e2m1fn", "fp32", instruction="tcgen05.mxf4.block32")
    reading = queries.accumulator_inputs(m, (35, 36), joint=False, timeout=None)
    assert list(reading.pairs) == [(35, 36)] and reading.joint_status == "not asked"
    sep = reading.pairs[(35, 36)]
    assert sep.bits[0] != sep.bits[1]
    nonzero = [i for i in range(64) if sep.a[i] != 0 or sep.b[i] != 0]
    assert set(nonzero) <= {0, 16, 32, 48}
    for f, bits in zip((35, 36), sep.bits):
        assert R.dot_bits(m.replace(fraction_bits=f), list(sep.a), list(sep.b), sep.c, list(sep.scale_a),
                          list(sep.scale_b)) == bits


@needs_bitwuzla
@pytest.mark.slow
def test_accumulator_inputs_all():
    """F = 34 to 37: an input for every pair, and one input whose four results are pairwise different."""
    m = bf.device("B200").model("e2m1fn", "fp32", instruction="tcgen05.mxf4.block32")
    reading = queries.accumulator_inputs(m, timeout=None)
    assert len(reading.pairs) == 6
    assert reading.joint_status == "found"
    assert len(set(reading.joint.bits)) == 4


@needs_bitwuzla
def test_worst_error_of_a_block_scaled_model_is_held_to_fractions():
    """worst_error on B200 mxf4 with A and B zero but at the first product of each group, scales and C within
    2**+-8: the input it returns, recomputed here with Fractions (the exact value and its magnitude, each
    product times its scales) and the exact reference (d), has the error it reports.  Each query may stop at
    its time limit (a loaded machine): the test holds whatever the search reports, however far it got; no
    input found at all is "unknown", with the zero input as a placeholder."""
    from fractions import Fraction

    m = bf.device("B200").model("e2m1fn", "fp32", instruction="tcgen05.mxf4.block32")
    others = [i for i in range(64) if i not in (0, 16, 32, 48)]
    cons = [C.zeros(a=others, b=others), C.scales(-8, 8), C.exponents(-8, 8, "c")]
    w = smt.worst_error(m, solver="bitwuzla", timeout=2, total_timeout=8, digits=1, constraints=cons)
    assert w.scale_a is not None and len(w.scale_a) == len(w.scale_b) == 2
    assert w.bound is None or w.value <= w.bound
    if w.status == "unknown":
        assert w.value == 0 and not w.a.any() and not w.b.any() and w.c == 0
        return
    scale = [Fraction(w.scale_a[i // 32]) * Fraction(w.scale_b[i // 32]) for i in range(64)]
    terms = [Fraction(float(x)) * Fraction(float(y)) * s for x, y, s in zip(w.a, w.b, scale)] + [Fraction(w.c)]
    exact, mag = sum(terms), sum(abs(t) for t in terms)
    d = R.dot(m, list(w.a), list(w.b), w.c, list(w.scale_a), list(w.scale_b))
    assert float(d) == float(w.d) and exact == w.exact
    assert abs(Fraction(d) - exact) / (mag or 1) == w.value  # an all-zero input (mag 0) has error 0
    assert "scale_a = [" in str(w) and "scale_a" in w.to_json()
