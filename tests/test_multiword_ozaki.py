"""blockfma.multiword.ozaki: Ozaki schemes I and II on int8 units with exact int32 accumulation.

References are exact: products of Python integers (every float64 is an integer times a power of two),
rounded once to float64 through Fractions."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

import blockfma as bf
from blockfma.multiword import ozaki as oz


# ----------------------------------------------------------------------------------------------- helpers

def _as_ints(X: np.ndarray) -> tuple[np.ndarray, int]:
    """(N, e): X = N * 2**e exactly, N an object array of Python ints."""
    N = np.empty(X.shape, dtype=object)
    exps = [Fraction(float(x)).denominator.bit_length() - 1 for x in X.flat if x != 0]
    e = -max(exps) if exps else 0
    for idx in np.ndindex(X.shape):
        N[idx] = int(Fraction(float(X[idx])) * Fraction(2) ** -e)
    return N, e


def exact_product(A: np.ndarray, B: np.ndarray) -> tuple[np.ndarray, int]:
    """(N, e) with A @ B = N * 2**e exactly."""
    NA, ea = _as_ints(A)
    NB, eb = _as_ints(B)
    return NA.dot(NB), ea + eb


def rounded_product(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """A @ B correctly rounded to float64 (nearest even)."""
    N, e = exact_product(A, B)
    scale = Fraction(2) ** e
    return np.array([[float(Fraction(int(v)) * scale) for v in row] for row in N]).reshape(A.shape[0], B.shape[1])


def normwise(C: np.ndarray, R: np.ndarray, A: np.ndarray, B: np.ndarray) -> float:
    """max |C - R| / (|A| |B|), the error measure of GEMM emulations (R the rounded exact product)."""
    return float(np.max(np.abs(C - R) / (np.abs(A) @ np.abs(B))))


def ulps(C: np.ndarray, R: np.ndarray) -> float:
    return float(np.max(np.abs(C - R) / np.spacing(np.abs(R))))


@pytest.fixture(scope="module")
def normal64():
    rng = np.random.default_rng(20240601)
    A = rng.standard_normal((64, 64))
    B = rng.standard_normal((64, 64))
    return A, B, rounded_product(A, B)


# ------------------------------------------------------------------------------------------- slice rules

def test_slice_width_rule():
    for k, w in ((0, 7), (1, 7), (64, 7), (2**17, 7), (2**17 + 1, 6), (2**19, 6), (2**19 + 1, 5), (2**29, 1)):
        assert oz.slice_width(k) == w, k
        assert 2 * w + max(0, math.ceil(math.log2(k))) <= 31 if k else True
        assert k * (2**w - 1) ** 2 <= 2**31 - 1
    with pytest.raises(ValueError, match="too long"):
        oz.slice_width(2**29 + 1)
    with pytest.raises(ValueError, match="too long"):
        oz.slices_needed(53, 2**40)
    assert oz.slices_needed(53, 64) == 8
    assert oz.slices_needed(53, 2**18) == 9  # 6-bit slices
    assert oz.slices_needed(7, 1) == 1


def test_slicing_is_error_free():
    rng = np.random.default_rng(1)
    A = rng.standard_normal((6, 9)) * 2.0 ** rng.integers(-30, 30, size=(6, 9))
    A[2] = 0.0
    A[3, :] = rng.standard_normal(9) * 2.0**-1040  # subnormals
    A[4, 0] = 2.0**1023 * 1.5  # huge, and a power-of-two row maximum in row 5
    A[5] = [2.0**4, -1.0, 2.0**-3, 0.0, 3.0, -2.0**4, 1.5, 0.25, 5.0]
    for width in (7, 5, 1):
        slices = -(-(1024 + 1074 + 1) // width)  # enough for any float64 range
        S, e = oz.slice_rows(A, slices, width)
        assert S.dtype == np.int8 and S.shape == (slices,) + A.shape
        assert np.abs(S.astype(int)).max() <= 2**width - 1
        assert np.all((S.astype(int) * np.sign(A)[None]) >= 0)  # every slice has a_ij's sign
        for i in range(A.shape[0]):
            for j in range(A.shape[1]):
                total = sum(Fraction(int(S[s, i, j])) * Fraction(2) ** (int(e[i]) - (s + 1) * width)
                            for s in range(slices))
                assert total == Fraction(float(A[i, j])), (width, i, j)
    assert e[2] == 0 and e[5] == 5  # |a| < 2**e: a power of two takes the next exponent


def test_slicing_remainder_bound():
    rng = np.random.default_rng(2)
    A = rng.standard_normal((5, 40))
    for slices in range(1, 9):
        S, e = oz.slice_rows(A, slices, 7)
        approx = sum(np.ldexp(S[s].astype(float), (e - 7 * (s + 1))[:, None]) for s in range(slices))
        R = A - approx  # exact: approx is a truncation of A
        assert np.all(np.abs(R) < np.ldexp(1.0, (e - 7 * slices))[:, None])
        assert np.all(R * A >= 0)


# ---------------------------------------------------------------------------------------------- units

def test_exact_unit_equals_int64_matmul():
    rng = np.random.default_rng(3)
    for m, k, n in ((7, 1000, 5), (1, 1, 1), (3, 0, 2)):
        A = rng.integers(-128, 128, (m, k)).astype(np.int8)
        B = rng.integers(-128, 128, (k, n)).astype(np.int8)
        C = oz.exact_unit(A, B)
        assert C.dtype == np.int64
        assert np.array_equal(C, A.astype(np.int64) @ B.astype(np.int64))
    A = np.full((2, 2**17), -128, dtype=np.int8)
    assert oz.exact_unit(A[:, :2**17 - 1], A.T[:2**17 - 1])[0, 0] == (2**17 - 1) * 2**14  # fits: < 2**31
    with pytest.raises(OverflowError, match="int32"):
        oz.exact_unit(A, A.T)  # 2**17 * 2**14 = 2**31


def test_int8_model_equals_int64_matmul():
    rng = np.random.default_rng(4)
    Ai = rng.integers(-128, 128, (5, 300))
    Bi = rng.integers(-128, 128, (300, 4))
    Ai[0] = -128
    Bi[:, 0] = -128  # the largest element: 300 * 2**14
    D = bf.gemm(Ai.astype(float), Bi.astype(float), None, model=oz.int8_model())
    assert np.array_equal(D, (Ai @ Bi).astype(float))
    assert np.array_equal(oz.model_unit()(Ai.astype(np.int8), Bi.astype(np.int8)), D)


def test_model_unit_gives_the_same_bits():
    rng = np.random.default_rng(5)
    A = rng.standard_normal((6, 24))
    B = rng.standard_normal((24, 5))
    unit = oz.model_unit()
    assert np.array_equal(oz.ozaki1(A, B, slices=3, unit=unit), oz.ozaki1(A, B, slices=3))
    assert np.array_equal(oz.ozaki2(A, B, n_moduli=5, unit=unit), oz.ozaki2(A, B, n_moduli=5))


def test_torch_unit():
    pytest.importorskip("torch", reason="needs torch: pip install 'blockfma[torch]'")
    rng = np.random.default_rng(6)
    unit = oz.torch_unit("cpu")
    A = rng.integers(-128, 128, (3, 13)).astype(np.int8)  # padded to the shapes _int_mm takes
    B = rng.integers(-128, 128, (13, 5)).astype(np.int8)
    assert np.array_equal(np.asarray(unit(A, B), dtype=np.int64), oz.exact_unit(A, B))
    X = rng.standard_normal((9, 20))
    Y = rng.standard_normal((20, 7))
    assert np.array_equal(oz.ozaki2(X, Y, n_moduli=9, unit=unit), oz.ozaki2(X, Y, n_moduli=9))


def test_unit_results_are_checked():
    A = np.ones((2, 3))
    B = np.ones((3, 4))
    with pytest.raises(ValueError, match="shape"):
        oz.ozaki1(A, B, slices=1, unit=lambda a, b: np.zeros((4, 2), dtype=np.int32))
    with pytest.raises(ValueError, match="non-integer"):
        oz.ozaki1(A, B, slices=1, unit=lambda a, b: np.full((2, 4), 0.5))
    with pytest.raises(OverflowError, match="int32"):
        oz.ozaki2(A, B, n_moduli=2, unit=lambda a, b: np.full((2, 4), 2**31, dtype=np.int64))


# ------------------------------------------------------------------------------------------ Ozaki I

def test_ozaki1_overflow_with_a_wrong_width():
    k = 2**18  # the rule gives 6-bit slices; 7-bit slices of 127/128 overflow: 2**18 * 127**2 > 2**31
    A = np.full((2, k), 127 / 128)
    B = np.full((k, 2), 127 / 128)
    with pytest.raises(OverflowError, match="int32"):
        oz.ozaki1(A, B, slices=1, width=7)
    C = oz.ozaki1(A, B, slices=3)  # 6-bit slices: 127/128 takes 2; all pairs with s + t <= 4 are kept
    assert np.array_equal(C, np.full((2, 2), 16129.0 * 16))  # 2**18 * 127**2 / 2**14, exactly


def test_ozaki1_exact_with_enough_slices():
    rng = np.random.default_rng(7)
    A = rng.random((12, 20))
    B = rng.random((20, 9))
    R = rounded_product(A, B)
    C = oz.ozaki1(A, B, slices=2 * oz.slices_needed(53, 20) - 1)  # every nonzero slice pair is kept
    assert ulps(C, R) <= 2  # only the float64 additions of the levels round (positive: no cancellation)
    Ai = rng.integers(-2**20, 2**20, (8, 64)).astype(float)
    Bi = rng.integers(-2**20, 2**20, (64, 8)).astype(float)
    exact = (Ai.astype(np.int64) @ Bi.astype(np.int64)).astype(float)  # |.| < 2**46: exact in float64
    assert np.array_equal(oz.ozaki1(Ai, Bi, slices=5), exact)  # 21-bit integers: 3 slices; 2*3 - 1 = 5
    assert np.array_equal(oz.ozaki2(Ai, Bi), exact)


def test_ozaki1_error_falls_with_slices(normal64):
    A, B, R = normal64
    errors = [normwise(oz.ozaki1(A, B, slices=s), R, A, B) for s in range(1, 9)]
    for s in range(7):
        assert errors[s + 1] <= errors[s] / 32, (s + 1, errors)  # about 2**7 per slice
    assert errors[0] > 2**-10
    assert errors[-1] <= 2**-50  # float64 level (numpy's own A @ B: about 2**-52 here)
    assert normwise(oz.ozaki1(A, B, slices=9), R, A, B) <= 2**-53


# ----------------------------------------------------------------------------------------- Ozaki II

def test_ozaki2_error_falls_with_moduli(normal64):
    A, B, R = normal64
    errors = {n: normwise(oz.ozaki2(A, B, n_moduli=n), R, A, B) for n in range(2, 17)}
    for n in range(2, 14):  # about 2**4 per modulus, down to float64's own rounding (near n = 14)
        assert errors[n + 1] <= errors[n] / 4, (n + 1, errors)
    assert errors[2] > 2**-8
    assert errors[14] <= 2**-50 and errors[16] <= 2**-53  # 16: the default
    assert normwise(oz.ozaki2(A, B), R, A, B) == errors[16]
    acc = {n: normwise(oz.ozaki2(A, B, n_moduli=n, scaling="accurate"), R, A, B) for n in (8, 12, 16)}
    assert acc[8] > 2**12 * acc[12] and acc[16] <= 2**-53


def test_ozaki2_correctly_rounded_when_scaling_is_exact(normal64):
    A, B, R = normal64
    P = math.prod(oz.MODULI)
    sa, sb = oz.ozaki2_shifts(A, B, P)
    scaled_a, scaled_b = np.ldexp(A, sa[:, None]), np.ldexp(B, sb[None, :])
    assert np.array_equal(np.trunc(scaled_a), scaled_a) and np.array_equal(np.trunc(scaled_b), scaled_b)
    assert np.array_equal(oz.ozaki2(A, B, n_moduli=20), R)  # exact integer product, one rounding


def test_ozaki2_scaling_bound():
    rng = np.random.default_rng(8)
    A = rng.standard_normal((10, 50)) * 2.0 ** rng.integers(-20, 20, (10, 50))
    B = rng.standard_normal((50, 7)) * 2.0 ** rng.integers(-20, 20, (50, 7))
    for mods in (oz.MODULI[:3], oz.MODULI[:11], oz.MODULI):
        P = math.prod(mods)
        for scaling in ("fast", "accurate"):
            sa, sb = oz.ozaki2_shifts(A, B, P, scaling)
            Ai, _ = _as_ints(np.trunc(np.ldexp(A, sa[:, None])))
            Bi, _ = _as_ints(np.trunc(np.ldexp(B, sb[None, :])))
            bound = np.abs(Ai).dot(np.abs(Bi))
            assert 2 * max(bound.flat) < P  # |A' @ B'| < P/2: the CRT's symmetric range holds it
            assert 2**5 * max(bound.flat) > P  # ... with less than 4 bits to spare (the shifts' floors: 2)


def test_crt_reconstruction():
    rng = np.random.default_rng(9)
    for n in (1, 7, 8, 15, 20):
        mods = oz.MODULI[:n]
        P = math.prod(mods)
        X = [int(v) for v in rng.integers(-2**62, 2**62, 40)]
        X = [x * (P // 2**63 + 1) % P - P // 2 for x in X] + [-(P // 2) + (P + 1) % 2, P // 2 - (P + 1) % 2, 0]
        crt = oz.CRT(np, mods)
        for mo in mods:
            crt.add(mo, np.array([x % mo for x in X], dtype=np.int64))
        limbs = crt.limbs()  # read exactly as Python integers
        assert [sum(int(x[j]) << (oz.LIMB * i) for i, x in enumerate(limbs)) for j in range(len(X))] == X, n


def test_ozaki2_moduli_arguments(normal64):
    A, B, _ = normal64
    A, B = A[:8, :16], B[:16, :8]
    C = oz.ozaki2(A, B, n_moduli=9)
    assert np.array_equal(oz.ozaki2(A, B, moduli=oz.MODULI[:9]), C)
    assert np.array_equal(oz.ozaki2(A, B, moduli=oz.MODULI[8::-1]), C)  # the order does not matter
    assert np.max(np.abs(oz.ozaki2(A, B, moduli=(7, 11, 13, 17, 19, 23, 29, 31, 37)) - A @ B)) < 2**-5
    with pytest.raises(ValueError, match="coprime"):
        oz.ozaki2(A, B, moduli=(256, 254))
    with pytest.raises(ValueError, match=r"^moduli=\(257,\): holds 257: each modulus must be an integer in \[2, 256\]"):
        oz.ozaki2(A, B, moduli=(257,))
    with pytest.raises(ValueError, match="not both"):
        oz.ozaki2(A, B, moduli=(7,), n_moduli=1)
    with pytest.raises(ValueError, match="n_moduli"):
        oz.ozaki2(A, B, n_moduli=0)
    with pytest.raises(ValueError, match="scaling"):
        oz.ozaki2(A, B, scaling="exact")


# ---------------------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("scheme", [lambda A, B: oz.ozaki1(A, B, slices=8), lambda A, B: oz.ozaki2(A, B)])
def test_bad_input(scheme):
    A = np.ones((3, 4))
    B = np.ones((4, 2))
    A[1, 2] = np.nan
    A[2, 0] = np.inf
    with pytest.raises(ValueError, match=r"A\[1, 2\] = nan is not finite"):
        scheme(A, B)
    B[3, 1] = -np.inf
    with pytest.raises(ValueError, match=r"B\[3, 1\] = -inf is not finite"):
        scheme(np.ones((3, 4)), B)
    with pytest.raises(ValueError, match="inner dimensions"):
        scheme(np.ones((3, 4)), np.ones((3, 2)))
    with pytest.raises(ValueError, match="2-D"):
        scheme(np.ones(4), np.ones((4, 2)))
    with pytest.raises(ValueError, match="complex"):
        scheme(np.ones((3, 4), dtype=complex), np.ones((4, 2)))
    assert scheme(np.ones((0, 4)), np.ones((4, 2))).shape == (0, 2)
    assert np.array_equal(scheme(np.ones((3, 0)), np.ones((0, 2))), np.zeros((3, 2)))
    Z = np.arange(12.0).reshape(3, 4)
    Z[1] = 0.0
    C = scheme(Z, np.arange(8.0).reshape(4, 2))
    assert np.array_equal(C, Z @ np.arange(8.0).reshape(4, 2))  # small integers: exact; zero row: zeros
    assert np.array_equal(scheme([[1.5, 2]], [[2], [0.25]]), np.array([[3.5]]))  # lists work


def test_wide_exponent_ranges():
    rng = np.random.default_rng(10)
    A = rng.standard_normal((16, 32)) * 2.0 ** rng.integers(-4, 5, (16, 32))  # moderate range inside rows
    B = rng.standard_normal((32, 12)) * 2.0 ** rng.integers(-4, 5, (32, 12))
    A[3] *= 2.0**-600  # rows and columns far apart: per-row and per-column scaling absorbs them
    A[4] *= 2.0**500
    B[:, 2] *= 2.0**-400
    R = rounded_product(A, B)
    assert normwise(A @ B, R, A, B) > 2**-53  # numpy's float64 GEMM, for scale
    assert normwise(oz.ozaki1(A, B, slices=8), R, A, B) <= 2**-46  # bits below the row maximum are lost
    assert normwise(oz.ozaki1(A, B, slices=10), R, A, B) <= 2**-53  # ... and come back with more slices
    assert normwise(oz.ozaki2(A, B), R, A, B) <= 2**-52
    assert normwise(oz.ozaki2(A, B, n_moduli=18), R, A, B) <= 2**-53


def test_subnormal_rows():
    rng = np.random.default_rng(11)
    A = rng.standard_normal((4, 16))
    B = rng.standard_normal((16, 5))
    A[1] *= 2.0**-1040  # a subnormal row: the scaling lifts it, the result is a subnormal row
    A[2, 3] = 2.0**-1074  # a subnormal beside normal values is lost (known limitation), harmlessly here
    R = rounded_product(A, B)
    normal = [0, 2, 3]
    for C in (oz.ozaki1(A, B, slices=9), oz.ozaki2(A, B)):
        assert np.max(np.abs(C - R)[1]) <= 2.0**-1074  # at most one subnormal ulp (a double rounding)
        assert normwise(C[normal], R[normal], A[normal], B) <= 2**-52
