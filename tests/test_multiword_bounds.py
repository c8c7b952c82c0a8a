"""blockfma.multiword.metrics and .bounds: Fasi et al.'s Table 2.1 and Theorem 2.1, the probabilistic and
FABsum forms, the Ozaki I rule, the error measures on hand-made cases, the exact reference against
Fractions, and measured errors of simulated methods under their bounds."""

from __future__ import annotations

import importlib
import math
import warnings
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blockfma as bf
from blockfma.formats import round_fraction
from blockfma.multiword import bounds, metrics

U16, U8, U24, U53 = 2**-11, 2**-8, 2**-24, 2**-53


def gam(k: int, u: float) -> float:
    return k * u / (1 - k * u)


# ------------------------------------------------------------------------------------------ Table 2.1

def test_table_2_1_rows():
    rows = {r.name: r for r in bounds.TABLE_2_1}
    assert list(rows) == ["fp16", "double-fp16", "bf16", "double-bf16", "triple-bf16"]
    want = {  # (low, p, products, constant, per n, text) as printed in the seed
        "fp16": ("fp16", 1, 1, 2 * 2**-11, 2**-24, "2 x 2^-11 + n x 2^-24"),
        "double-fp16": ("fp16", 2, 3, 0.0, 2**-24, "n x 2^-24"),
        "bf16": ("bf16", 1, 1, 2 * 2**-8, 2**-24, "2 x 2^-8 + n x 2^-24"),
        "double-bf16": ("bf16", 2, 3, 3 * 2**-16, 2**-24, "3 x 2^-16 + n x 2^-24"),
        "triple-bf16": ("bf16", 3, 6, 0.0, 2**-24, "n x 2^-24"),
    }
    for name, (low, p, nprod, const, per_n, text) in want.items():
        r = rows[name]
        assert (r.high, r.low, r.p, r.products, r.constant, r.per_n, r.text) == (
            "fp32", low, p, nprod, const, per_n, text)
        assert r.products == p * (p + 1) // 2  # i + j <= p + 1
        assert bounds.unit_roundoff(r.low) == (U16 if low == "fp16" else U8)
        # the table's entries are Theorem 2.1's (p+1) u_low^p + n u_high, the constant kept where it is not O(u)
        if const:
            assert const == (p + 1) * bounds.unit_roundoff(low) ** p
        expr = bounds.dominant_expression(name)
        assert (expr.constant, expr.per_n, str(expr)) == (const, per_n, text)
        assert bounds.dominant_term(name, 1000) == const + 1000 * per_n
        assert bounds.dominant_term((low, p), 1000) == const + 1000 * per_n
        assert bounds.dominant_term((bounds.unit_roundoff(low), p), 1000) == const + 1000 * per_n
        assert r.term(1000) == const + 1000 * per_n


def test_dominant_terms_beyond_the_table():
    assert str(bounds.dominant_expression("3xtf32")) == "n x 2^-24"
    assert str(bounds.dominant_expression("tf64")) == "3 x 2^-48 + n x 2^-53"
    assert bounds.dominant_term("tf64", 2**10) == 3 * 2**-48 + 2**10 * 2**-53
    assert bounds.dominant_term(("fp16", 2), 10**4, probabilistic=True) == 100 * 2**-24
    assert bounds.dominant_term("fabsum-v1", 2**20, b=256) == (256 + 4096) * 2**-24
    assert bounds.dominant_term("fabsum-v2", 2**20, b=256, probabilistic=True) == 256 * 2**-24 + 64 * 2**-53
    with pytest.raises(ValueError, match="needs p="):
        bounds.dominant_expression("mmm")


# -------------------------------------------------------------------------------------- Theorem 2.1

def test_unit_roundoffs():
    assert [bounds.unit_roundoff(f) for f in bounds.FORMATS] == [2**-11, 2**-8, 2**-11, 2**-24, 2**-53]
    assert bounds.unit_roundoff("fp32", "rz") == 2**-23
    with pytest.raises(ValueError):
        bounds.unit_roundoff("fp32", "sideways")
    assert bounds.gamma(0, U24) == 0.0
    assert bounds.gamma(2**24, U24) == math.inf


@pytest.mark.parametrize("name, p, u", [("fp16", 1, U16), ("double-fp16", 2, U16), ("bf16", 1, U8),
                                        ("double-bf16", 2, U8), ("triple-bf16", 3, U8), ("3xtf32", 2, U16)])
def test_theorem_2_1(name, p, u):
    n = 1000
    assert bounds.bound(name, n) == (p + 1) * u**p + gam(n + p * p - 1, U24)
    assert bounds.bound("mmm", n, p=p, low="tf32" if name == "3xtf32" else name.split("-")[-1]) == \
        bounds.bound(name, n)
    # eq. (2.7)'s first line as printed, and the rigorous variant: the same to first order
    paper = bounds.bound(name, n, terms="paper")
    full = bounds.bound(name, n, terms="full")
    kept = 1 + sum(u**k for k in range(1, p))
    dropped = sum((p - i) * u ** (p + i - 1) for i in range(1, p))
    assert paper == pytest.approx(2 * u**p + u ** (2 * p) + (gam(n + p * p - 1, U24) * kept + dropped) * (1 + u) ** 2,
                                  rel=1e-15)
    lead = (p + 1) * u**p + gam(n, U24)
    assert full >= lead
    assert abs(full - bounds.bound(name, n)) <= 4 * n * U24 * u + p * p * U24 + 2 * u ** (p + 1)  # the O() of (2.8)


def test_all_products_and_exact_splits():
    n = 500
    assert bounds.bound("4xtf32", n) == 2 * U16**2 + gam(n + 3, U24)  # eq. (2.5): constant 2 u^p
    assert bounds.bound("markidis", n, accumulate="outside") == 2 * U16**2 + gam(n + 3, U24)
    # Markidis as blockfma.multiword runs it chains A1B1 first: its terms see four unit calls
    assert bounds.bound("markidis", n) == 2 * U16**2 + gam(4 * n + 3, U24)
    assert bounds.bound("fp16", n, input_format="fp16") == gam(n, U24)  # eq. (2.1) alone
    assert bounds.bound("fp32", n, input_format="fp32") == gam(n, U24)  # the standard gamma_n
    assert bounds.bound("fp32", n) == 2 * U24 + gam(n, U24)  # inputs rounded to fp32 first
    assert bounds.bound("fp64", n) == gam(n, U53)
    assert bounds.bound("bf16x9", n, input_format="fp32") == gam(n + 8, U24)  # 3 x 8 bits hold fp32
    assert bounds.bound("triple-bf16", n, input_format="fp32") == 2 * U8**3 + gam(n + 8, U24)  # dropped (p-1)u^p
    assert bounds.bound("double-fp16", n, input_format="fp32") == bounds.bound("double-fp16", n)  # 22 < 24 bits
    assert bounds.bound("tf64", n) == 3 * U24**2 + gam(n + 3, U53)


def test_block_width_only_matters_with_another_internal_precision():
    n = 4096
    base = bounds.mmm_bound(n, p=1, u_low=U16, u_high=U24, input_format="fp16")
    assert base == bounds.mmm_bound(n, p=1, u_low=U16, u_high=U24, b=8, input_format="fp16") == gam(n, U24)
    exact_inside = bounds.mmm_bound(n, p=1, u_low=U16, u_high=U24, b=8, u_block=0.0, input_format="fp16")
    assert exact_inside == pytest.approx(gam(n // 8, U24), rel=1e-12)


def test_bounds_monotone_in_n_and_probabilistic_below():
    ns = [1, 2, 3, 7, 16, 100, 1000, 4096, 10**5, 10**6, 2**23]
    extra = {"mmm": {"p": 2, "low": "bf16"}, "fabsum-v1": {"b": 64}, "fabsum-v2": {"b": 64},
             "ozaki1": {"slices": 5}}
    for name in bounds.methods():
        kw = extra.get(name, {})
        variants = [{}, {"rounding": "rz"}]
        if name in ("fabsum-v1", "fabsum-v2"):
            variants = [{"terms": "paper"}, {"terms": "full"}, {"rounding": "rn"}]
        elif name != "ozaki1":
            variants += [{"terms": "paper"}, {"terms": "full"}, {"terms": "full", "rounding": "rz"}]
        else:
            variants = [{}]
        for v in variants:
            worst = [bounds.bound(name, n, **kw, **v) for n in ns]
            prob = [bounds.bound(name, n, **kw, **v, probabilistic=True) for n in ns]
            assert worst == sorted(worst), (name, v)
            assert prob == sorted(prob), (name, v)
            assert all(pb <= wb for pb, wb in zip(prob, worst)), (name, v)


def test_probabilistic_forms():
    n = 10**6
    # sec. 4.3: n -> sqrt(n); gamma_tilde(lam) = lam sqrt(n) u to first order
    got = bounds.bound("fp32", n, input_format="fp32", probabilistic=True)
    assert got == pytest.approx(math.sqrt(n) * U24, rel=1e-3)
    assert bounds.bound("fp32", n, input_format="fp32", probabilistic=True, lam=3) == pytest.approx(
        3 * math.sqrt(n) * U24, rel=1e-3)
    # a unit rounding toward zero gets no sqrt: its errors do not have mean zero on one-signed data
    assert bounds.bound("double-fp16", n, probabilistic=True, rounding="rz") == bounds.bound("double-fp16", n)
    assert bounds.bound("double-fp16", n, probabilistic=True) == pytest.approx(
        3 * U16**2 + math.sqrt(n + 3) * U24, rel=1e-3)
    assert bounds.gamma_tilde(1, U24) <= bounds.gamma(1, U24)


def test_fabsum_forms():
    n, b = 2**20, 2**8
    assert bounds.fabsum_bound(n, b, version=1) == (b + n // b) * 2**-24
    assert bounds.fabsum_bound(n, b, version=2) == b * 2**-24 + (n // b) * 2**-53
    # sec. 4.4: the inter-block sums round to nearest (sqrt), the tensor cores' blocks do not
    assert bounds.fabsum_bound(n, b, version=1, probabilistic=True) == (b + 64) * 2**-24
    assert bounds.fabsum_bound(n, b, version=2, probabilistic=True) == b * 2**-24 + 64 * 2**-53
    assert bounds.fabsum_bound(n, b, version=1, probabilistic=True, rounding="rn") == (16 + 64) * 2**-24
    assert bounds.bound("fabsum-v1", n, b=b) == bounds.fabsum_bound(n, b, version=1)
    full1 = bounds.fabsum_bound(n, b, version=1, terms="full")
    assert full1 == pytest.approx((1 + gam(b, U24)) * (1 + gam(n // b - 1, U24)) - 1, rel=1e-15)
    full2 = bounds.fabsum_bound(n, b, version=2, terms="full")
    assert full2 > bounds.fabsum_bound(n, b, version=2) + 0.9 * U24  # the final rounding to fp32
    # blocking beats the plain fp16 method (Table 2.1's n u) once n > b
    assert bounds.fabsum_bound(n, b) < bounds.bound("fp16", n, input_format="fp16")


def test_ozaki_rule():
    assert bounds.ozaki_max_inner() == (2**31 - 1) // 127**2 == 133144
    assert bounds.ozaki_slices(53) == 9
    assert bounds.ozaki_slices(53, rule="bits") == 8  # ceil(53 / 7)
    assert bounds.ozaki_slices(24, rule="bits") == 4
    assert bounds.ozaki_slices(53, exponent_spread=10) > bounds.ozaki_slices(53)
    # the truncation part of the bound at spread 0: 2^-7s (2 (2^0 + 1) + (s - 1) 2^2) = s 2^(2 - 7s)
    for s in range(1, 8):
        assert bounds.ozaki_bound(10, s, u_acc=0.0) == s * 2.0 ** (2 - 7 * s)
    vals = [bounds.ozaki_bound(1000, s) for s in range(1, 9)]
    assert vals == sorted(vals, reverse=True)
    # past that the float64 additions (one per level, gamma_{s-1}) dominate and grow with the slices
    assert bounds.ozaki_bound(1000, 12) > bounds.ozaki_bound(1000, 9) > bounds.gamma(8, 2**-53)
    assert bounds.bound("ozaki1", 1000, target_bits=40) == bounds.ozaki_bound(1000, bounds.ozaki_slices(40))
    with pytest.raises(ValueError, match="exactly one of"):
        bounds.bound("ozaki1", 1000)
    assert bounds.exponent_spread([[1.0, 0.5, 0.26]], [[1.0], [1.9], [0.0]]) == 3


def test_dispatcher_errors():
    with pytest.raises(ValueError, match="known methods are: fp16, bf16"):
        bounds.bound("quadruple-fp8", 10)
    with pytest.raises(ValueError, match="needs p="):
        bounds.bound("mmm", 10)
    with pytest.raises(ValueError, match=r"^colour='red': bound\(\) takes no argument 'colour'; it takes accumulate, b"):
        bounds.bound("fp16", 10, colour="red")
    with pytest.raises(ValueError, match=r"^probablistic=True: .*; did you mean probabilistic=\?$"):
        bounds.bound("fp16", 10, probablistic=True)
    with pytest.raises(ValueError, match="needs b="):
        bounds.bound("fabsum-v1", 10)
    with pytest.raises(ValueError):
        bounds.bound("fp16", 0)
    with pytest.raises(ValueError, match="terms"):
        bounds.bound("fp16", 10, terms="some")


def test_methods_match_blockfma_multiword_methods():
    """The products and accumulation bound() assumes are those blockfma.multiword.methods runs."""
    mm = importlib.import_module("blockfma.multiword.methods")
    for name, m in mm.METHODS.items():
        spec = bounds.METHODS[name]
        assert (spec.p, spec.low, spec.high) == (m.p, m.low, m.high), name
        pairs = bounds._pairs(spec.p, spec.products)
        assert sorted(pairs) == sorted((i + 1, j + 1) for i, j in m.products), name
        ours = bounds._schedule(pairs, spec.accumulate, spec.schedule)
        prods = [(i + 1, j + 1) for i, j in m.products]
        if m.outside_groups:
            groups = sorted(m.outside_groups, key=lambda g: -min(sum(m.products[t]) for t in g))
            theirs = [[prods[t] for t in g] for g in groups]
        elif m.accumulate == "inside":
            theirs = [prods]
        else:
            theirs = [[t] for t in prods]
        assert ours == theirs, name


# ------------------------------------------------------------------------------------------- metrics

def test_componentwise_hand_made():
    A = np.array([[1.0, 1.0]])
    B = np.array([[1.0], [1.0]])
    assert metrics.componentwise([[2 + 2**-22]], [[2.0]], A, B) == 2**-23
    assert metrics.componentwise(np.float32([[2.0]]), [[2.0]], A, B) == 0.0
    # (|A||B|)_ij = 0: 0/0 -> 0, x/0 -> inf
    A0, B0 = np.array([[0.0, 1.0]]), np.array([[5.0], [0.0]])
    assert metrics.componentwise([[0.0]], [[0.0]], A0, B0) == 0.0
    assert metrics.componentwise([[2**-30]], [[0.0]], A0, B0) == math.inf
    # |A||B| = 2^-1074 underflows even after scaling rows and columns: evaluated exactly
    A1, B1 = np.array([[1.0, 2**-1074]]), np.array([[0.0], [1.0]])
    assert metrics.componentwise([[0.0]], [[2**-1074]], A1, B1) == 1.0
    # wide ranges: rows and columns are scaled before |A||B| is formed
    A2, B2 = np.array([[2.0**600, 0.0], [0.0, 2.0**-600]]), np.array([[2.0**400, 0.0], [0.0, 2.0**-500]])
    C2 = A2 @ B2
    assert metrics.componentwise(C2 * (1 + 2**-40), C2, A2, B2) == 2**-40


def test_normwise_hand_made():
    C = np.ones((2, 2))
    Ch = C.copy()
    Ch[0, 0] += 2**-20
    assert metrics.normwise(Ch, C, 1) == 2**-22  # sum |x| (elementwise, as Valero-Lara et al.'s code)
    assert metrics.normwise(Ch, C, 2) == 2**-21  # Frobenius
    assert metrics.normwise(Ch, C, "fro") == 2**-21
    assert metrics.normwise(Ch, C, np.inf) == metrics.normwise(Ch, C, "inf") == 2**-20
    assert metrics.normwise(Ch, C, 1, operator=True) == 2**-21  # max column sum
    assert metrics.normwise(Ch, C, 2, operator=True) == pytest.approx(2**-21, rel=1e-14)  # spectral
    A, B = np.ones((2, 2)), np.full((2, 2), 0.5)  # A @ B = C
    assert metrics.normwise(Ch, C, 1, A=A, B=B) == 2**-20 / 8
    assert metrics.normwise(Ch, C, 2, A=A, B=B) == 2**-21
    assert metrics.normwise(Ch, C, np.inf, A=A, B=B) == 2**-19
    assert metrics.normwise(np.zeros((2, 2)), np.zeros((2, 2)), 2) == 0.0
    assert metrics.normwise(C, np.zeros((2, 2)), 2) == math.inf
    e = metrics.errors(Ch, C, A, B)
    # spectral: ||Ch - C||_2 / ||C||_2 = 2^-20 / 2 (C is the 2 x 2 matrix of ones, whose largest singular
    # value is 2), through an SVD: to rounding error
    assert e.pop("spectral") == pytest.approx(2**-21, rel=1e-14)
    assert e == {"componentwise": 2**-20, "normwise_1": 2**-22, "normwise_2": 2**-21, "normwise_inf": 2**-20,
                 "l1": 2**-23, "l2": 2**-21, "linf": 2**-19}
    with pytest.raises(ValueError, match="ord"):
        metrics.normwise(Ch, C, 3)
    with pytest.raises(ValueError, match="both A and B"):
        metrics.normwise(Ch, C, 2, A=A)


def test_metrics_refuse_bad_inputs():
    A, B, C = np.ones((2, 3)), np.ones((3, 2)), np.full((2, 2), 3.0)
    with pytest.raises(ValueError, match="inner dimensions"):
        metrics.componentwise(C, C, A, np.ones((2, 2)))
    with pytest.raises(ValueError, match="shape"):
        metrics.componentwise(np.ones((2, 3)), C, A, B)
    with pytest.raises(ValueError, match="not finite"):
        metrics.componentwise(np.full((2, 2), np.nan), C, A, B)
    bad = A.copy()
    bad[1, 2] = np.inf
    with pytest.raises(ValueError, match=r"A\[1, 2\] = inf is not finite"):
        metrics.reference(bad, B)
    with pytest.raises(ValueError, match="2-D"):
        metrics.reference(np.ones(3), B)
    with pytest.raises(ValueError, match="broadcast"):
        metrics.reference(A, B, np.ones((3, 3)))
    assert np.array_equal(metrics.reference(A, B, 1.0), np.full((2, 2), 4.0))
    assert np.array_equal(metrics.reference(A, B, 1.0, exact=True), np.full((2, 2), 4.0))


# ----------------------------------------------------------------------------------- exact reference

def _fraction_product(A, B, C=None):
    m, _k = A.shape
    out = np.empty((m, B.shape[1]))
    for i in range(m):
        for j in range(B.shape[1]):
            s = sum((Fraction(float(a)) * Fraction(float(b)) for a, b in zip(A[i], B[:, j])), Fraction(0))
            if C is not None:
                s += Fraction(float(C[i, j]))
            out[i, j] = round_fraction("fp64", s)
    return out


def _same(got, want):
    return np.array_equal(got, want) and np.array_equal(np.signbit(got), np.signbit(want))


@st.composite
def _operands(draw, lo=-1074, hi=1023, cancel=True):
    m, k, q = (draw(st.integers(1, 4)) for _ in range(3))

    def entry():
        mant = st.integers(-(2**53) + 1, 2**53 - 1)
        return st.one_of(st.just(0.0), st.builds(math.ldexp,
                                                  mant, st.integers(lo - 53, hi - 53)))

    def matrix(r, c):
        vals = draw(st.lists(entry(), min_size=r * c, max_size=r * c))
        with np.errstate(over="ignore"):
            return np.array([v if math.isfinite(v) else 0.0 for v in vals]).reshape(r, c)

    A, B = matrix(m, k), matrix(k, q)
    if cancel and draw(st.booleans()):  # A B - A B plus a perturbation: heavy cancellation
        A = np.concatenate([A, -A, matrix(m, 1)], axis=1)
        B = np.concatenate([B, B, matrix(1, q)], axis=0)
    C = matrix(m, q) if draw(st.booleans()) else None
    return A, B, C


@settings(max_examples=60, deadline=None)
@given(_operands())
def test_exact_reference_matches_fractions(ops):
    A, B, C = ops
    want = _fraction_product(A, B, C)
    with np.errstate(over="ignore"):
        assert _same(metrics._exact(A, B, C, "objects"), want)
        assert _same(metrics.reference(A, B, C, exact=True), want)


@settings(max_examples=40, deadline=None)
@given(_operands(lo=-300, hi=300))
def test_exact_reference_limbs_match_fractions(ops):
    A, B, C = ops
    assert _same(metrics._exact(A, B, C, "limbs"), _fraction_product(A, B, C))


def test_exact_reference_large_and_hard():
    rng = np.random.default_rng(7)
    A = rng.standard_normal((6, 3000))
    B = rng.standard_normal((3000, 5))
    R = metrics.reference(A, B, exact=True)
    assert metrics.componentwise(A @ B, R, A, B) < 3000 * 2**-53
    assert _same(R[:2, :2], _fraction_product(A[:2], B[:, :2]))
    # the exact sum is tiny next to its terms: float64 matmul gets no digit, the exact reference all
    x = rng.standard_normal(2000)
    A2 = np.concatenate([x, -x, [2.0**-900]])[None, :]
    B2 = np.concatenate([x, x, [3.0]])[:, None]
    assert metrics.reference(A2, B2, exact=True)[0, 0] == 3 * 2.0**-900
    assert _same(metrics._exact(A2, B2, None, "limbs"), metrics._exact(A2, B2, None, "objects"))
    # a subnormal result, rounded once
    A3, B3 = np.array([[2.0**-537, 2.0**-537]]), np.array([[2.0**-537 * 3], [2.0**-590]])
    assert metrics.reference(A3, B3, exact=True)[0, 0] == round_fraction(
        "fp64", Fraction(2) ** -537 * (Fraction(3, 2**537) + Fraction(1, 2**590)))


# ------------------------------------------------------------------------- measured errors under bounds

def test_fp16_unit_under_its_bound():
    """The V100 fp16 unit (blockfma.gemm) on fp16 data: only the accumulation error, gamma_n (eq. 2.1)."""
    rng = np.random.default_rng(3)
    model = bf.device("V100").model("fp16", "fp32")
    for n in (64, 512, 2048):
        for lo, hi in ((0.0, 1.0), (-0.5, 0.5)):
            A16 = bf.formats.round("fp16", rng.uniform(lo, hi, (8, n)))
            B16 = bf.formats.round("fp16", rng.uniform(lo, hi, (n, 8)))
            C_hat = bf.gemm(A16, B16, None, model=model)
            C = metrics.reference(A16, B16, exact=True)
            err = metrics.componentwise(C_hat, C, A16, B16)
            assert 0 < err <= bounds.bound("fp16", n, input_format="fp16")
            assert err <= bounds.bound("fp16", n, input_format="fp16", u_high=bounds.unit_roundoff("fp32", "rz"))
            # fp16 data rounded from fp64: the same unit under the full bound of Table 2.1's "fp16" row
            A = rng.uniform(lo, hi, (8, n))
            A16b = bf.formats.round("fp16", A)
            err_in = metrics.componentwise(bf.gemm(A16b, B16, None, model=model),
                                           metrics.reference(A, B16, exact=True), A, B16)
            assert err_in <= bounds.bound("fp16", n)


@pytest.mark.parametrize("name", ["double-fp16", "ootomo", "markidis", "bf16", "double-bf16", "triple-bf16",
                                  "3xtf32", "4xtf32", "bf16x9", "tf64"])
def test_methods_under_their_bounds(name):
    """blockfma.multiword's simulated methods on (1, 2) data (no word underflows) under Theorem 2.1."""
    from blockfma.multiword import matmul

    rng = np.random.default_rng(11)
    n = 512
    A, B = rng.uniform(1, 2, (4, n)), rng.uniform(1, 2, (n, 4))
    if name != "tf64":
        A, B = bf.formats.round("fp32", A), bf.formats.round("fp32", B)
    device = "A100" if ("bf16" in name or "tf32" in name) else None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        C_hat = matmul(A, B, method=name, device=device)
    err = metrics.componentwise(C_hat, metrics.reference(A, B, exact=True), A, B)
    assert err <= bounds.bound(name, n)
    uh = bounds.unit_roundoff("fp64" if name == "tf64" else "fp32", "rz")
    assert err <= bounds.bound(name, n, terms="full", u_high=uh)


def test_fabsum_v1_simulated_under_its_bound():
    rng = np.random.default_rng(5)
    model = bf.device("V100").model("fp16", "fp32")
    n, b = 4096, 256
    A = bf.formats.round("fp16", rng.uniform(0, 1, (4, n)))
    B = bf.formats.round("fp16", rng.uniform(0, 1, (n, 4)))
    C_hat = np.zeros((4, 4))
    for s in range(0, n, b):  # Algorithm 4.2: blocks on the unit from zero, added in fp32 (RN)
        T = bf.gemm(A[:, s:s + b], B[s:s + b], None, model=model)
        C_hat = bf.formats.round("fp32", C_hat + T)
    err = metrics.componentwise(C_hat, metrics.reference(A, B, exact=True), A, B)
    assert err <= bounds.fabsum_bound(n, b, version=1)
    assert err <= bounds.fabsum_bound(n, b, version=1, terms="full", u_block=bounds.unit_roundoff("fp32", "rz"))
    assert err < metrics.componentwise(bf.gemm(A, B, None, model=model), metrics.reference(A, B, exact=True), A, B)


def _ozaki1_sim(A, B, s, w=7):
    """Ozaki I as ozaki_bound describes it: truncated w-bit slices below 2**e_i, the products with
    t + u <= s + 1 exact (small k), each level added in float64."""
    def slices(X):
        e = np.frexp(np.abs(X).max(axis=1))[1]
        r, out = X.copy(), []
        for t in range(1, s + 1):
            d = np.trunc(np.ldexp(r, (t * w - e)[:, None]))
            out.append(d)
            r = r - np.ldexp(d, (e - t * w)[:, None])
        return out, e
    SA, ea = slices(A)
    SB, eb = slices(B.T)
    C = np.zeros((A.shape[0], B.shape[1]))
    for g in range(s + 1, 1, -1):
        level = sum(SA[t - 1] @ SB[g - t - 1].T for t in range(max(1, g - s), min(s, g - 1) + 1))
        C += np.ldexp(level, ea[:, None] + eb[None, :] - g * w)
    return C


def test_ozaki1_simulated_under_its_bound():
    rng = np.random.default_rng(2)
    n = 64
    for d in (0, 4):
        A = rng.uniform(1, 2, (5, n)) * 2.0 ** -rng.integers(0, d + 1, (5, n))
        B = rng.uniform(-2, 2, (n, 4)) * 2.0 ** -rng.integers(0, d + 1, (n, 4))
        R = metrics.reference(A, B, exact=True)
        spread = bounds.exponent_spread(A, B)
        for s in range(1, 9):
            err = metrics.componentwise(_ozaki1_sim(A, B, s), R, A, B)
            assert err <= bounds.ozaki_bound(n, s, exponent_spread=spread), (d, s)
    # blockfma.multiword.ozaki.ozaki1 computes the same scheme
    oz = importlib.import_module("blockfma.multiword.ozaki")
    for s in (2, 5, 8):
        assert np.array_equal(oz.ozaki1(A, B, slices=s), _ozaki1_sim(A, B, s))
        err = metrics.componentwise(oz.ozaki1(A, B, slices=s), R, A, B)
        assert err <= bounds.ozaki_bound(n, s, slice_bits=oz.slice_width(n), exponent_spread=spread)
