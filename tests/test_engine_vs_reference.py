"""The fast engine against the exact reference, bit for bit, for every family and preset.

Inputs are drawn to hit what breaks fused datapaths: zeros of both signs, subnormals, wide exponent
spreads, heavy cancellation (products that cancel exactly, C against the products), values on a coarse
grid so that sums land on ties and on the alignment cut, and NaN/infinity.  Two drivers: a bulk numpy
driver (hundreds of rows per model in one engine call) and a hypothesis driver that shrinks failures.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import blockfma as bf
from blockfma import formats as F
from blockfma import reference
from blockfma.model import Alignment, Family, Model

from helpers import (FAST, IDS, MODELS, bits, check_against_reference, dot_cases, draw_rows, sanitize,
                     finite_inputs, preset_models)


@pytest.mark.parametrize("model", MODELS, ids=IDS)
def test_engine_matches_reference_bulk(model: Model):
    L = model.block_width or 6
    for k, seed in ((L, 1), (2 * L + 1, 2), (1, 3)):
        rows = 48 if L <= 16 else 24
        a, b, c = draw_rows(model, rows, k, seed + zlib.crc32(model.summary().encode()) % 1000)
        check_against_reference(model, a, b, c)


@pytest.mark.slow
@pytest.mark.parametrize("model", MODELS, ids=IDS)
def test_engine_matches_reference_bulk_long(model: Model):
    L = model.block_width or 6
    for seed in range(4):
        a, b, c = draw_rows(model, 400, 3 * L - 1, 100 + seed)
        check_against_reference(model, a, b, c)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dot_cases())
def test_engine_matches_reference_hypothesis(case):
    model, a, b, c = case
    check_against_reference(model, np.array([a]), np.array([b]), np.array([c]))


PROPAGATE = [m for m in MODELS if m.nan.value == "propagate"]


@st.composite
def nan_rich_cases(draw):
    """A model with nan='propagate' and rows where NaNs of random sign, payload and kind (quiet or
    signalling, as codes of A's, B's and C's formats) meet infinities, zeros and finite values."""
    model = draw(st.sampled_from(PROPAGATE))
    k = draw(st.integers(1, 6))

    def value(fmt):
        kind = draw(st.sampled_from(["nan", "nan", "inf", "zero", "finite"]))
        t = fmt.fraction_bits
        if kind == "nan":
            code = (draw(st.integers(0, 1)) << (fmt.bits - 1)) | (((1 << fmt.exponent_bits) - 1) << t) \
                | draw(st.integers(1, (1 << t) - 1))
            return float(F.decode(fmt, code))
        if kind == "inf":
            return draw(st.sampled_from([np.inf, -np.inf]))
        if kind == "zero":
            return draw(st.sampled_from([0.0, -0.0]))
        return float(F.decode(fmt, draw(st.integers(0, (1 << (fmt.bits - 1)) - 1))))  # any positive code

    a = [value(model.input_format) for _ in range(k)]
    b = [value(model.b_format) for _ in range(k)]
    return model, a, b, value(model.c_format)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nan_rich_cases())
def test_propagated_nans_engine_matches_reference_hypothesis(case):
    """nan='propagate': which NaN an FMA passes on, with its payload, engine and reference alike."""
    model, a, b, c = case
    check_against_reference(model, np.array([a]), np.array([b]), np.array([c]))


def test_propagate_models_are_covered():
    """The NaN-propagating models the property tests draw from: the NVIDIA fp64 presets and two variants
    whose payloads change format (fp16 -> fp32) or run in the compiled kernels (fp32)."""
    assert bf.device("H100").model("fp64", "fp64") in PROPAGATE  # a preset (one of equal NVIDIA DMMA models)
    assert {"fma chain fp32 NaN-propagate", "fma chain fp16 NaN-propagate"} <= {m.name for m in PROPAGATE}


@pytest.mark.parametrize("name", ["V100", "H100", "MI300X", "MI250X", "MI100"])
def test_gemm_equals_dot_per_element(name):
    """gemm is dot per output element (tiling and broadcasting change nothing)."""
    model = bf.device(name).model("fp16", "fp32")
    rng = np.random.default_rng(5)
    A = F.round("fp16", rng.normal(size=(7, 37)) * 2.0 ** rng.integers(-8, 8, size=(7, 37)))
    B = F.round("fp16", rng.normal(size=(37, 5)))
    C = F.round("fp32", rng.normal(size=(7, 5)))
    D = bf.gemm(A, B, C, model=model)
    per = np.array([[bf.dot(A[i], B[:, j], C[i, j], model=model) for j in range(5)] for i in range(7)])
    assert bits(D).tolist() == bits(per.astype(np.float32)).tolist()


COMPILED = [m for m in MODELS if FAST and FAST.supports(m)]


@pytest.mark.skipif(not FAST, reason="numba is not installed (pip install 'blockfma[fast]')")
@pytest.mark.parametrize("model", COMPILED, ids=[m.name or m.summary() for m in COMPILED])
def test_compiled_kernels_equal_numpy_engine_on_gemm(model: Model):
    """The compiled kernels against the numpy engine (itself held to the reference above) on whole GEMMs:
    many more elements than the reference could check, including k not a multiple of L."""
    L = model.block_width or 8
    A, B, C = finite_inputs(model, (23, 3 * L + 5, 19), 11)
    fast = bits(bf.gemm(A, B, C, model=model, backend="numba"))
    slow = bits(bf.gemm(A, B, C, model=model, backend="numpy"))
    assert np.array_equal(fast, slow), np.argwhere(fast != slow)[:5]


def test_compiled_kernels_cover_every_preset_family():
    """Every family has a compiled kernel for its presets (fp64 FMA chains excepted: their products are
    not exact in float64); the numpy engine runs the rest."""
    if not FAST:
        pytest.skip("numba is not installed (pip install 'blockfma[fast]')")
    uncovered = {m.summary() for m in preset_models() if not FAST.supports(m)}
    assert all("fp64" in name for name in uncovered), sorted(uncovered)
    # the block-scaled family runs in the exact reference only so far (issue 23)
    assert {m.family for m in COMPILED} == set(Family) - {Family.SCALED_FUSED}


def _extreme_rows(model: Model, rows: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Inputs at the ends of the ranges: smallest subnormals and largest values of both signs, zeros, and C
    from the largest binary32 values down to its subnormals and zeros."""
    rng = np.random.default_rng(seed)
    fin, fc = model.input_format, model.c_format
    tiny = fin.smallest_normal * 2.0 ** -(fin.precision - 1)
    pool = np.array([tiny, 3 * tiny, fin.smallest_normal, fin.max, fin.max / 2, 1.0, 1.5, 0.0])
    pool = F.round(fin, pool, "rz")
    a = pool[rng.integers(len(pool), size=(rows, k))] * rng.choice([-1.0, 1.0], size=(rows, k))
    b = pool[rng.integers(len(pool), size=(rows, k))] * rng.choice([-1.0, 1.0], size=(rows, k))
    fc_tiny = fc.smallest_normal * 2.0 ** -(fc.precision - 1)
    cpool = np.array([fc.max, fc.max / 3, fc_tiny, fc.smallest_normal, 0.0, 1.0, 2.0**20])
    c = F.round(fc, cpool[rng.integers(len(cpool), size=rows)], "rz") * rng.choice([-1.0, 1.0], size=rows)
    for r in range(1, rows, 2):  # one or two nonzero products of extreme size, the largest or smallest C
        keep = rng.integers(k, size=2)[:rng.integers(1, 3)]
        a[r], b[r] = 0.0, 0.0
        a[r, keep] = pool[rng.choice([0, 1, 3], size=len(keep))] * rng.choice([-1.0, 1.0], size=len(keep))
        b[r, keep] = pool[rng.choice([0, 1, 3], size=len(keep))] * rng.choice([-1.0, 1.0], size=len(keep))
        c[r] = F.round(fc, cpool[rng.choice([0, 2, 4])], "rz") * rng.choice([-1.0, 1.0])
    for r in range(0, rows, 4):  # every product the largest, one sign: the largest exact sums
        a[r], b[r] = fin.max, fin.max * rng.choice([-1.0, 1.0])
    a, b, c = sanitize(fin, a, False), sanitize(fin, b, False), sanitize(fc, c, False)
    return a, b, c


@pytest.mark.parametrize("name,fmt,align", [("V100", "fp16", "truncate"), ("V100", "fp16", "floor"),
                                            ("H100", "fp16", "floor"), ("Ada", "e4m3fn", "floor"),
                                            ("B200", "e5m2", "truncate"), ("B200", "e5m2", "floor")])
def test_truncated_fused_extreme_terms(name, fmt, align):
    """Truncated-fused with narrow inputs (whose compiled kernel cuts binary32 products at a clamped scale):
    tiny products under a huge C (the cut of a tiny negative term by floor is -1), huge products over a
    subnormal or zero C, and the int32 sums of many large terms."""
    model = None
    for ins in bf.device(name).instructions:
        found = ins.models.get((fmt, "fp32"))
        model = found if found is not None and found.family is Family.TRUNCATED_FUSED else model
    model = model.replace(alignment=Alignment(align))
    L = model.block_width
    for k, seed in ((L, 1), (2 * L + 1, 2)):
        check_against_reference(model, *_extreme_rows(model, 160, k, seed))


def _ranged_rows(model: Model, a_range: tuple[int, int], b_range: tuple[int, int], rows: int, k: int,
                 seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Inputs whose nonzero magnitudes have exponents exactly spanning a_range (a) and b_range (b), both
    ends present; every other row has one or two nonzero products only."""
    rng = np.random.default_rng(seed)
    fin, fc = model.input_format, model.c_format

    def pool(lo, hi):
        return F.round(fin, np.array([2.0**lo, 1.5 * 2.0**lo, 1.99 * 2.0**hi, 2.0**hi, 2.0**((lo + hi) // 2), 0.0]), "rz")

    pa, pb = pool(*a_range), pool(*b_range)
    a = pa[rng.integers(len(pa), size=(rows, k))] * rng.choice([-1.0, 1.0], size=(rows, k))
    b = pb[rng.integers(len(pb), size=(rows, k))] * rng.choice([-1.0, 1.0], size=(rows, k))
    for r in range(1, rows, 2):
        keep = rng.integers(k, size=2)[:rng.integers(1, 3)]
        a[r], b[r] = 0.0, 0.0
        a[r, keep] = pa[rng.choice([0, 1, 2], size=len(keep))] * rng.choice([-1.0, 1.0], size=len(keep))
        b[r, keep] = pb[rng.choice([0, 1, 2], size=len(keep))] * rng.choice([-1.0, 1.0], size=len(keep))
    a[0, :2], b[0, :2] = pa[[0, 2]], pb[[0, 2]]  # both ends of both ranges present
    fc_tiny = fc.smallest_normal * 2.0 ** -(fc.precision - 1)
    cpool = np.array([fc.max, fc_tiny, fc.smallest_normal, 0.0, 1.0, 2.0**100, 2.0**-100])
    c = F.round(fc, cpool[rng.integers(len(cpool), size=rows)], "rz") * rng.choice([-1.0, 1.0], size=rows)
    return a, b, sanitize(fc, c, False)


@pytest.mark.parametrize("name,fmt,align,a_range,b_range,binary32", [
    ("H100", "bf16", "truncate", (-51, 63), (-51, 61), True),  # least product exponent F - 127, largest 2**126
    ("H100", "bf16", "truncate", (-52, 63), (-51, 61), False),
    ("H100", "bf16", "truncate", (-51, 64), (-51, 63), False),
    ("H100", "bf16", "truncate", (-90, 10), (-12, 20), True),
    ("H100", "bf16", "floor", (-51, 20), (-51, 25), True),  # floor: products within 149 binades
    ("H100", "bf16", "floor", (-51, 21), (-51, 25), False),
    ("A100", "tf32", "truncate", (-50, 60), (-53, 63), True),
    ("A100", "tf32", "floor", (-50, 30), (-53, 14), True),
    ("H100", "fp16", "floor", (-24, 15), (-24, 15), True),
])
def test_truncated_fused_binary32_range(name, fmt, align, a_range, b_range, binary32):
    """bf16 and tf32 products are cut in binary32 when the inputs' exponent range allows it (see
    engine.fast.runners._binary32_products): inputs at the edges of that range, just inside and just outside."""
    fast = FAST
    if not fast:
        pytest.skip("numba is not installed (pip install 'blockfma[fast]')")
    model = None
    for ins in bf.device(name).instructions:
        found = ins.models.get((fmt, "fp32"))
        model = found if found is not None and found.family is Family.TRUNCATED_FUSED else model
    model = model.replace(alignment=Alignment(align))
    path = fast.runners._binary32_products(model.input_format, model.fraction_bits, model.e_zero, align == "floor",
                                   a_range, b_range)
    assert (path is not None) == binary32
    L = model.block_width
    for k, seed in ((L, 1), (2 * L + 1, 2)):
        a, b, c = _ranged_rows(model, a_range, b_range, 160, k, seed)
        assert fast.runners._exponents_and_range(model.input_format, a)[1] == a_range
        check_against_reference(model, a, b, c)


@pytest.mark.parametrize("model", [bf.device("Intel AMX").model("bf16", "fp32"),
                                   Model(Family.AMX, "bf16", "fp32", block_width=4, subnormals=False)],
                         ids=["Intel AMX", "amx L=4"])
def test_amx_flush_at_the_smallest_normal(model: Model):
    """A partial sum whose exact value lies just below (or above) 2**-126 and rounds to it: flushed to zero
    (or kept) by the exact value, not by the rounded one (the binary32 kernel redoes these steps)."""
    rows = []
    for s0 in (1.0, -1.0):
        for s1 in (1.0, -1.0):
            for tail in (0.0, 2.0**-60):
                a = np.zeros(model.block_width)
                b = np.zeros(model.block_width)
                a[0], b[0] = s0 * 2.0**-63, 2.0**-63  # the even sum is +-2**-126 exactly
                a[2], b[2] = s1 * 2.0**-78, 2.0**-77  # then +-2**-155: rounds back to +-2**-126
                a[1], b[1] = tail, tail  # the odd sum: 0 or 2**-120
                rows.append((a, b))
    a = np.array([r[0] for r in rows])
    b = np.array([r[1] for r in rows])
    c = np.zeros(len(rows))
    check_against_reference(model, a, b, c)


def test_fma_chain_flush_at_the_smallest_normal():
    """As above for an FMA chain that flushes: C = +-2**-126 plus a product of +-2**-155 (then, with k = 3,
    products 0 and 1)."""
    model = Model(Family.FMA_CHAIN, "bf16", "fp32", block_width=1, subnormals=False)
    signs = [(sc, sp) for sc in (1.0, -1.0) for sp in (1.0, -1.0)]
    c = np.array([sc * 2.0**-126 for sc, _ in signs])
    a = np.array([[sp * 2.0**-78, 0.0, 1.0] for _, sp in signs])
    b = np.array([[2.0**-77, 1.0, 0.0] for _ in signs])
    check_against_reference(model, a[:, :1], b[:, :1], c)
    check_against_reference(model, a, b, c)


def test_bfdot_binary32_sums():
    """Arm BFDOT with products that are binary32 normal values (the kernel then rounds to odd in binary32):
    sums that overflow, cancel below 2**-126, land on 2**-126, or drop bits (round to odd)."""
    model = bf.device("Arm BFDOT").model("bf16", "fp32")
    big, t = 1.5 * 2.0**63, 2.0**-60
    rows = [  # (a, b, c)
        ([big, big], [big, big], 0.0), ([big, -big], [big, big], 1.0), ([-big, -big], [big, big], -F.get("fp32").max),
        ([t * (1 + 2.0**-7), -t], [t, t], 0.0), ([-t * (1 + 2.0**-7), t], [t, t], 0.0),
        ([2.0**-63, 0.0], [2.0**-63, 0.0], 0.0), ([2.0**-63, 2.0**-63], [2.0**-63, -(2.0**-63)], 2.0**-126),
        ([2.0**-63, 2.0**-60], [-(2.0**-63), 2.0**-60], 2.0**-126), ([1.0, 2.0**-30], [1.0, 0.5], 0.0),
        ([1.0, -(2.0**-30)], [1.0, 0.5], 2.0**-40), ([3.0, 2.0**-20], [1.5, -(2.0**-20)], -(2.0**30)),
    ]
    a = np.array([r[0] for r in rows] * 2)
    b = np.array([r[1] for r in rows] * 2)
    c = np.array([r[2] for r in rows] + [-r[2] for r in rows])
    ranges = [FAST.runners._exponents_and_range(model.input_format, x)[1] for x in (a, b)] if FAST else []
    if ranges:
        assert FAST.runners._normal_binary32_products(model.input_format, *ranges)
    check_against_reference(model, a, b, c)
    check_against_reference(model, np.concatenate([a, a], axis=1), np.concatenate([b, b], axis=1), c)  # chained over k


@pytest.mark.parametrize("name,fmt,out", [("MI100", "fp16", "fp32"), ("MI100", "bf16", "fp32"),
                                          ("exact", "tf32", "fp16"), ("exact", "e5m2fnuz", "fp32")])
def test_exact_fused_narrow_and_wide_blocks_in_one_batch(name, fmt, out, monkeypatch):
    """The array kernel sums a block in float64 when its terms span at most 53 bits less the carries, and in
    32-bit limbs otherwise: rows of both kinds in one call, at the boundary (spans of 47 to 52 bits next
    to a product), with cancellation down to the last bit and to zero."""
    model = bf.device(name).model(fmt, out)
    fin, fc = model.input_format, model.c_format
    rng = np.random.default_rng(5)
    L = model.block_width or 8
    rows = 240
    a = F.round(fin, rng.normal(size=(rows, L)), "rz")
    b = F.round(fin, rng.normal(size=(rows, L)), "rz")
    span = rng.integers(40, 60, size=rows)  # C's last place against the products' scale
    c = F.round(fc, np.ldexp(rng.choice([-1.0, 1.0], size=rows) * (1 + rng.random(rows)), span - 20), "rz")
    for r in range(0, rows, 3):  # C cancelled by the first product, leaving the small ones
        a[r, 0], b[r, 0] = F.round(fin, np.array([2.0**10]))[0], F.round(fin, np.array([2.0**(span[r] % 6)]))[0]
        c[r] = -a[r, 0] * b[r, 0]
    for r in range(1, rows, 6):  # everything cancels
        a[r, 1:], b[r, 1:] = 0.0, 0.0
        c[r] = -a[r, 0] * b[r, 0]
    a, b, c = sanitize(fin, a, False), sanitize(fin, b, False), sanitize(fc, c, False)
    c = np.where(F.is_representable(fc, c), c, 0.0)
    from blockfma.engine import array

    wide_rows = []
    limb_sum = array._limb_sum
    monkeypatch.setattr(array, "_limb_sum", lambda xp, m, t: wide_rows.append(len(t)) or limb_sum(xp, m, t))
    check_against_reference(model, a, b, c)
    assert 0 < wide_rows[0] < rows, wide_rows  # both kinds of block were in the batch
    for r in range(3):  # one dot product alone (0-d batch) as in the batch, held above to the reference
        one = bf.dot(a[r], b[r], c[r], model=model, backend="numpy")
        assert bits(one) == bits(bf.dot(a[r:r + 1], b[r:r + 1], c[r:r + 1], model=model, backend="numpy"))[0]


def test_engine_names_models_beyond_its_range():
    """A truncated-fused model with fp64 inputs has products beyond float64: the engine says so and points
    at the reference instead of returning wrong bits."""
    model = Model(Family.TRUNCATED_FUSED, "fp64", "fp64", block_width=4, fraction_bits=52, e_zero=-2200)
    with pytest.raises(ValueError, match="blockfma.reference.dot"):
        bf.dot(np.ones(4), np.ones(4), 0.0, model=model, backend="numpy")


@pytest.mark.parametrize("model,a_range,b_range,binary32", [
    (bf.device("MI300X").model("bf16", "fp32"), (-51, 63), (-51, 61), True),  # products from 2**-102 to 2**126
    (bf.device("MI300X").model("bf16", "fp32"), (-51, 64), (-51, 63), False),  # products reach 2**128
    (bf.device("MI300X").model("bf16", "fp32"), (-64, 10), (-63, 10), False),  # and 2**-127
    (bf.device("MI300X").model("bf16", "fp32").replace(groups=2, block_width=16), (-50, 50), (-50, 40), True),
    (bf.device("MI300X").model("e4m3fnuz", "fp32"), (-10, 7), (-10, 7), True),
], ids=["bf16 inside", "bf16 too large", "bf16 too small", "bf16 grouped", "fp8 grouped"])
def test_late_c_binary32_range(model, a_range, b_range, binary32):
    """Late-c cuts products in binary32 and sums a group in int32 when the inputs' exponent range allows it
    (the truncated-fused condition with e_zero 0 and no floor): inputs at the edges of that range."""
    fast = FAST
    if not fast:
        pytest.skip("numba is not installed (pip install 'blockfma[fast]')")
    path = fast.runners._binary32_products(model.input_format, model.fraction_bits, 0, False, a_range, b_range)
    assert (path is not None) == binary32
    L = model.block_width
    fin = model.input_format
    for k, seed in ((L, 1), (2 * L + 1, 2)):
        a, b, c = _ranged_rows(model, a_range, b_range, 160, k, seed)
        a, b = sanitize(fin, a, False), sanitize(fin, b, False)
        assert fast.runners._exponents_and_range(fin, a)[1] == a_range
        check_against_reference(model, a, b, c)


# --- C narrower than D (c_input_format): C's exponent in its own format, in the first block only --------------
NARROW_C = [bf.device("V100").instruction("mma.f16c").models[("fp16", "fp32")],
            Model(Family.TRUNCATED_FUSED, "fp16", "fp32", block_width=8, fraction_bits=24, e_zero=-132,
                  output_rounding=F.RoundingMode.TowardZero, exact_zero="positive", c_input_format="fp16",
                  name="T4-like f16c"),
            Model(Family.TRUNCATED_FUSED, "bf16", "fp32", block_width=4, fraction_bits=23, e_zero=-140,
                  alignment=Alignment.FLOOR, carry_bits=2, exact_zero="positive", c_input_format="bf16",
                  name="bf16 C floor carry"),
            Model(Family.TRUNCATED_FUSED, "fp16", "fp32", block_width=8, fraction_bits=25, e_zero=-133,
                  product_order="halves", exact_zero="positive", c_input_format="fp16", name="f16c halves")]


@st.composite
def narrow_c_cases(draw):
    """A model with c_input_format and a row of small products (exponents near C's format's emin) with a C
    that is mostly subnormal in that format: where reading C's exponent there or in the output format
    decides the block's e_max."""
    model = draw(st.sampled_from(NARROW_C))
    fc, L = model.c_format, model.block_width
    k = draw(st.integers(1, 3 * L))
    half = (fc.emin - 2) // 2  # products between about 2**(emin - 18) and 2**(emin - 2)

    def value(fmt, lo, hi):
        e = draw(st.integers(lo, hi))
        frac = draw(st.integers(0, (1 << (fmt.precision - 1)) - 1))
        v = (1 + frac / 2 ** (fmt.precision - 1)) * 2.0 ** e * draw(st.sampled_from([1.0, -1.0]))
        return float(F.round(fmt, v, "rz"))

    a = [draw(st.sampled_from([0.0, value(model.input_format, half - 8, half)])) if draw(st.booleans())
         else value(model.input_format, half - 8, half) for _ in range(k)]
    b = [value(model.b_format, half - 8, half) for _ in range(k)]
    code = draw(st.integers(1, (1 << (fc.precision - 1)) - 1))  # a subnormal of C's format
    sub = code * 2.0 ** (fc.emin - fc.precision + 1) * draw(st.sampled_from([1.0, -1.0]))
    c = draw(st.sampled_from([sub, sub, sub, 0.0, value(fc, fc.emin, fc.emin + 3)]))
    return model, a, b, c


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(narrow_c_cases())
def test_narrow_c_engines_match_reference_hypothesis(case):
    model, a, b, c = case
    check_against_reference(model, np.array([a]), np.array([b]), np.array([c]))


@pytest.mark.parametrize("model", NARROW_C, ids=[m.name for m in NARROW_C])
def test_narrow_c_engines_match_reference_bulk(model):
    """Rows of draw_rows (C drawn in the model's C format, a sixth subnormal) at one, two and three blocks and a
    short one, on numpy and numba (check_against_reference) and on the GPU engine's code on the CPU (torch)
    and bf.gemm by the numpy and compiled kernels, each against the exact reference."""
    L = model.block_width
    for k, seed in ((L, 1), (2 * L, 2), (3 * L - 1, 3)):
        a, b, c = draw_rows(model, 48, k, seed)
        check_against_reference(model, a, b, c)
        check_against_reference(model, a, b, c, backends=["torch"])
    rng = np.random.default_rng(5)
    A = F.round(model.input_format, rng.normal(size=(6, 2 * L)) * 2.0**-9, "rne")
    B = F.round(model.b_format, rng.normal(size=(2 * L, 5)) * 2.0**-9, "rne")
    C = F.round(model.c_format, rng.normal(size=(6, 5)) * 2.0 ** (model.c_format.emin - 3), "rne")
    want = [[reference.dot_bits(model, list(A[i]), list(B[:, j]), C[i, j]) for j in range(5)] for i in range(6)]
    assert FAST is None or FAST.supports(model)
    for be in ["numpy"] + (["numba"] if FAST else []):
        assert bits(bf.gemm(A, B, C, model=model, backend=be)).astype(np.int64).tolist() == want, be


@pytest.mark.parametrize("out", ["fp16", "bf16", "fp32"])
def test_store_and_add_c_casts_round_as_the_exact_code(out):
    """kernels.store and kernels.add_c round by numpy's casts where the output is fp16, bf16 or fp32
    (kernels._casts): bit for bit what formats.round and wide.ieee_op give, on random binary32 codes (ties,
    subnormals, overflow, zeros and infinities among them) and on sums of values close in exponent."""
    from blockfma.engine import kernels, wide

    model = bf.device("H100").model("fp16", "fp32").replace(output_format=out, accumulator_format="fp32")
    assert kernels._casts(model)
    rng = np.random.default_rng(34)
    u = rng.integers(0, 2**32, 100_000, dtype=np.uint64).astype(np.uint32)
    x = u[(u & 0x7F800000) != 0x7F800000].view(np.float32).astype(np.float64)  # finite codes
    x = np.concatenate([x, [0.0, -0.0, np.inf, -np.inf, 65520.0, 65519.99, 2.0**-25, 2.0**-25 * 3]])
    want = F.round(out, x)
    same = bits(kernels.store(model, x)) == bits(want)
    assert same.all(), x[~same][:3]
    a = F.decode(out, rng.integers(0, 2**F.get(out).bits, 100_000))
    b = F.round(out, np.ldexp(a, -rng.integers(0, 30, a.size)) * rng.choice([-1.0, 1.0], a.size))
    for c in (b, F.decode(out, rng.integers(0, 2**F.get(out).bits, a.size))):
        with np.errstate(invalid="ignore"):
            want = wide.ieee_op(F.get(out), F.RoundingMode.TiesToEven, True, "ieee", [a, c])
        got = kernels.add_c(model, a, c)
        same = (bits(got) == bits(want)) | (np.isnan(got) & np.isnan(want))  # NaN codes: finish writes them
        assert same.all(), (a[~same][:3], c[~same][:3])
