"""blockfma.multiword's arguments, held to issue 19's standard: every bad value a one-line ArgumentError naming
the argument, the value and the fix (in the CLI's spelling on the command line); inputs of every real dtype
taken exactly; overflow warned, with the exact product's sign; RangeWarnings only where the loss matters;
sizes refused before allocation; the hardware backend under its own name; progress per word product."""

from __future__ import annotations

import warnings
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import blockfma as bf
from blockfma import multiword as mw
from blockfma.arguments import ArgumentError
from blockfma.cli import main

ONES_A, ONES_B = np.ones((2, 8)), np.ones((8, 3))


def _exact(A, B):
    """A @ B with Fractions: the oracle for signs and magnitudes."""
    return [[sum((Fraction(float(a)) * Fraction(float(b)) for a, b in zip(row, col)), Fraction(0))
             for col in np.asarray(B).T] for row in np.asarray(A)]


def _quiet(fn, *args, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mw.RangeWarning)
        return fn(*args, **kw)


# --- 1. overflow ---------------------------------------------------------------------------------------------
def test_overflow_warning_is_a_runtime_warning_exported():
    assert issubclass(mw.OverflowWarning, RuntimeWarning) and mw.OverflowWarning.__module__.startswith("blockfma")


@pytest.mark.parametrize("method,device", [("bf16", "A100"), ("double-bf16", "A100"), ("3xtf32", "A100"),
                                           ("4xtf32", "A100"), ("bf16x9", "A100"), ("tf32", "A100")])
@pytest.mark.parametrize("sign", [1, -1])
def test_an_overflowing_product_is_an_infinity_of_the_exact_sign(method, device, sign):
    """Beyond fp32's range the answer is +-inf with the exact product's sign (3xtf32 gave +inf for a
    negative product: its small products overflowed positive before A1B1 overflowed negative)."""
    A = np.full((2, 4), 1e38)
    B = sign * np.full((4, 3), -1e38)
    A[1] = -A[1]
    with pytest.warns(mw.OverflowWarning, match=rf"^{method} on A100 \w+->fp32: A\d+B\d+ overflowed in \d+ entries"):
        C = mw.matmul(A, B, method=method, device=device)
    want = _exact(A, B)
    for i in range(2):
        for j in range(3):
            assert C[i, j] == (np.inf if want[i][j] > 0 else -np.inf), (i, j)


def test_overflow_on_an_fp16_output_unit_is_nan_and_says_how_to_scale():
    """fp16 x fp16 -> fp16 (V100): the words' products overflow fp16 though the product fits fp32, so the
    method cannot compute it there: NaN, not an infinity, and the warning gives the scaling that works."""
    unit = bf.device("V100").model("fp16", "fp16")
    A = np.array([[60000.0, 60000.0], [-60000.0, 1.0]])
    B = np.array([[60000.0, 0.5], [1.0, 0.25]])
    with pytest.warns(mw.OverflowWarning, match=r"A \* 2\*\*-(\d+) and B \* 2\*\*-\1 \(exact\), and the product"):
        C = mw.matmul(A, B, method="double-fp16", model=unit)
    assert np.isnan(C[0, 0]) and np.isnan(C[1, 0])
    # the other entries as the unit gives them: one fp16 rounding of the exact sums (ml_dtypes-free oracle)
    assert C[0, 1] == float(np.float16(60000.0 * 0.5 + 60000.0 * 0.25)) == 44992.0
    assert C[1, 1] == float(np.float16(-30000 + 0.25)) == -30000.0
    k = int(__import__("re").search(r"A \* 2\*\*-(\d+)", str(_last_overflow(A, B, unit))).group(1))
    with warnings.catch_warnings():  # the scaling the warning proposes: every |A||B| entry then fits fp16
        warnings.simplefilter("error")
        S = mw.matmul(np.ldexp(A, -k), np.ldexp(B, -k), method="double-fp16", model=unit)
    exact = 60000.0 * 60000.0 + 60000.0
    assert abs(np.ldexp(S[0, 0], 2 * k) - exact) <= 2.0**-10 * exact


def _last_overflow(A, B, unit):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mw.matmul(A, B, method="double-fp16", model=unit)
    (w,) = caught
    return w.message


@pytest.mark.parametrize("method", ["fp32", "fp64", "ozaki2"])
def test_the_other_methods_overflow_with_the_exact_sign(method):
    big = 1e38 if method == "fp32" else 1e300
    A = np.array([[big, big], [-big, 1.0]])
    B = np.array([[big, -1.0], [-big / 2, 1.0]])  # row 0 col 0: big^2 / 2 > 0; row 1 col 0: -big^2 < 0
    if method == "ozaki2":
        A, B = A / 2**20, B / 2**20  # ozaki2's scaling needs headroom; the products still overflow
    with pytest.warns(mw.OverflowWarning):
        C = mw.matmul(A, B, method=method)
    assert C[0, 0] == np.inf and C[1, 0] == -np.inf and np.isfinite(C[:, 1]).all()


def test_tf64_words_must_hold_the_entries():
    """tf64's fp32 words cannot overflow fp64 (n * 2**256 at most), but entries beyond fp32 are refused."""
    with pytest.raises(ArgumentError, match=r"^A=<1x2 float64 array>: A\[0, 0\] = 1e\+300 is beyond fp32's largest "
                                            r"value .*; scale A by a power of two first \(A \* 2\*\*-869, exact"):
        mw.matmul(np.array([[1e300, 1.0]]), np.ones((2, 2)), method="tf64")


def test_no_overflow_warning_on_ordinary_data():
    rng = np.random.default_rng(1)
    A, B = rng.random((4, 32)) - 0.5, rng.random((32, 4)) - 0.5
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for method in ("double-fp16", "3xtf32", "ootomo"):
            mw.matmul(A, B, method=method, device="A100")


# --- 2. order ------------------------------------------------------------------------------------------------
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["double-fp16", "triple-bf16", "markidis", "4xtf32", "bf16x9"]), st.data())
def test_every_permutation_of_the_products_is_taken_in_its_order(method, data):
    m = mw.METHODS[method]
    perm = data.draw(st.permutations(list(m.products)))
    device = "A100"
    _, info = _quiet(mw.matmul, ONES_A, ONES_B, method=method, device=device, order=perm, return_info=True)
    assert list(info["products"]) == [tuple(t) for t in perm] and info["calls"] == len(perm)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(-1, 3), st.integers(-1, 3)), max_size=5))
def test_an_order_that_is_no_permutation_is_refused(pairs):
    m = mw.METHODS["double-fp16"]
    every = [(i, j) for i in range(2) for j in range(2)]
    ok = sorted(pairs) in (sorted(m.products), every)
    if ok:
        _quiet(mw.matmul, ONES_A, ONES_B, method="double-fp16", order=pairs)
        return
    with pytest.raises(ArgumentError, match=r"^order=.*: must hold each of double-fp16's word products "
                                            r"\[\(0, 0\), \(0, 1\), \(1, 0\)\] exactly once, in any order, or all 4"):
        mw.matmul(ONES_A, ONES_B, method="double-fp16", order=pairs)


@pytest.mark.parametrize("order,match", [
    ("alg21", r"^order='alg21': must be one of 'alg2.1', 'cublas'; pass order='alg2.1'$"),
    ([(0, 0), "ab", (1, 0)], r"must be 'alg2.1', 'cublas' or a list of 0-based \(i, j\) pairs"),
    ([(0, 0), (0, 1.0), (1, 0)], r"list of 0-based \(i, j\) pairs"),
    ([(0, 0), (0, True), (1, 0)], r"list of 0-based \(i, j\) pairs"),
    (5, r"list of 0-based \(i, j\) pairs"),
])
def test_bad_orders(order, match):
    with pytest.raises(ArgumentError, match=match):
        mw.matmul(ONES_A, ONES_B, method="double-fp16", order=order)


def test_ootomo_fixes_its_order():
    with pytest.raises(ArgumentError, match=r"^order='cublas': ootomo fixes its order .*; leave order out$"):
        mw.matmul(ONES_A, ONES_B, method="ootomo", order="cublas")


# --- 3. dtypes -----------------------------------------------------------------------------------------------
FLOATS = ["bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e4m3b11fnuz",
          "float8_e3m4", "float8_e4m3", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn", "float8_e8m0fnu"]
FLOATS = [f for f in FLOATS if hasattr(ml_dtypes, f)]


@settings(max_examples=80, deadline=None)
@given(st.sampled_from([f for f in FLOATS if f.startswith(("bfloat16", "float8"))]),
       st.lists(st.integers(0, 255), min_size=8, max_size=8))
@example("bfloat16", [0, 0, 0, 0, 0, 0, 129, 127])  # a signalling NaN (0x7f81), found by CI
def test_every_ml_dtypes_float_is_taken_exactly(name, codes):
    """Random bit patterns of bfloat16 and each fp8 type: the finite ones come out as their exact values
    (the oracle: ml_dtypes' float32 cast read as a Fraction), the NaNs and infinities as a clear error."""
    dt = np.dtype(getattr(ml_dtypes, name))
    X = np.array(codes, dtype=np.uint8).view(np.uint16 if dt.itemsize == 2 else np.uint8).view(dt).reshape(2, -1)
    with np.errstate(invalid="ignore"):  # a signalling NaN's cast warns (an error under filterwarnings)
        vals = X.astype(np.float64)
    if not np.isfinite(vals).all():
        with pytest.raises(ArgumentError, match=r"^A=<2x\d+ \w+ array>: A\[\d+, \d+\] = [-a-z]+ is not finite"):
            mw.split(X, "bf16", 1)
        return
    got = mw.split(X, "fp32", 1)[0]  # every value of these types is an fp32 value: one word holds it
    assert [Fraction(float(g)) for g in got.ravel()] == [Fraction(float(v)) for v in X.astype(np.float32).ravel()]
    assert np.array_equal(got, vals)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(FLOATS), st.lists(st.floats(-8, 8), min_size=4, max_size=4))
def test_every_ml_dtypes_float_rounds_then_is_held(name, values):
    """Values rounded to each type (fp6 and fp4 included) are held exactly by one fp32 word."""
    dt = np.dtype(getattr(ml_dtypes, name))
    X = np.array(values).reshape(2, 2).astype(dt)
    if not np.isfinite(X.astype(np.float64)).all():
        return
    got = mw.split(X, "fp32", 1)[0]
    assert [Fraction(float(g)) for g in got.ravel()] == [Fraction(float(v)) for v in X.astype(np.float32).ravel()]


def test_bfloat16_and_fp8_matrices_give_the_float64_results():
    rng = np.random.default_rng(4)
    A64, B64 = rng.standard_normal((3, 16)), rng.standard_normal((16, 2))
    for dt in (ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2):
        A, B = A64.astype(dt), B64.astype(dt)
        want = _quiet(mw.matmul, A.astype(np.float64), B.astype(np.float64), method="double-bf16", device="A100")
        got = _quiet(mw.matmul, A, B, method="double-bf16", device="A100")
        assert np.array_equal(got, want)
        assert np.array_equal(mw.reference(A, B, exact=True), mw.reference(A.astype(float), B.astype(float), exact=True))


@pytest.mark.parametrize("X,value", [
    (np.array([[3, -4]], dtype=np.int8), [[3.0, -4.0]]),
    (np.array([[2**53, 7]], dtype=np.int64), [[2.0**53, 7.0]]),
    (np.array([[5, 1]], dtype=np.uint16), [[5.0, 1.0]]),
    (np.array([[3, -4]], dtype=ml_dtypes.int4), [[3.0, -4.0]]),
    (np.array([[1, 2]], dtype=ml_dtypes.uint2), [[1.0, 2.0]]),
    ([[1, 2.5]], [[1.0, 2.5]]),
])
def test_integer_arrays_are_their_values(X, value):
    assert mw.split.__module__ and mw.metrics.check_input(X).tolist() == value


@pytest.mark.parametrize("X,match", [
    (np.array([[1 + 2j]]), r"^A=<1x1 complex128 array>: has dtype complex128: multiword products take real matrices"),
    (np.array([[True, False]]), r"^A=<1x2 bool array>: has dtype bool: a mask, not a matrix of numbers \(pass "),
    (np.array([[1, None]], dtype=object), r"^A=<1x2 object array>: has dtype object: Python objects; convert them"),
    (np.array([[Fraction(1, 3)]], dtype=object), r"has dtype object"),
    (np.array([["1"]]), r"^A=<1x1 <U1 array>: has dtype <U1: multiword products take real matrices"),
    (np.array([[np.datetime64(1, "s")]]), r"has dtype datetime64\[s\]"),
    (np.array([[1 + 1j]], dtype=ml_dtypes.complex32) if hasattr(ml_dtypes, "complex32") else np.array([[1j]]),
     r"multiword products take real matrices"),
    (np.array([[2**60 + 1]], dtype=np.int64), r"^A=<1x1 int64 array>: A\[0, 0\] = 1152921504606846977 has more "
                                              r"significant bits than binary64 holds"),
    (np.ones(3), r"^A=<3 float64 array>: must be a 2-D matrix; got shape \(3,\)$"),
    (np.ones((2, 2, 2)), r"must be a 2-D matrix"),
    (2.0, r"^A=<scalar float64 2.0>: must be a 2-D matrix"),
    ([[1, 2], [3]], r"is not a rectangular array of numbers"),
    (np.array([[np.inf, 1.0]]), r"^A=<1x2 float64 array>: A\[0, 0\] = inf is not finite \(1 non-finite entries\)"),
])
def test_what_is_not_a_real_matrix_is_refused(X, match):
    with pytest.raises(ArgumentError, match=match):
        mw.matmul(X, ONES_B[:2], method="fp16")


# --- 4. memory -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["double-fp16", "ozaki2", "fp32", "tf64"])
def test_a_product_that_cannot_fit_is_refused_at_once(method):
    """2**20 x 2**20 operands (views of one number: nothing allocated) need terabytes: refused in well under
    a second, before any conversion, with the size they would need (no clock: converting them would fail on memory,
    not with this error)."""
    A = np.broadcast_to(np.float32(1), (2**20, 2**20))
    with pytest.raises(ArgumentError, match=rf"^A=<1048576x1048576 float32 array>: needs about [\d.e+]+ GiB for "
                                            rf"{method} on a 1048576x1048576 @ 1048576x1048576 product, and"):
        mw.matmul(A, A, method=method)


def test_too_many_slices_are_refused():
    with pytest.raises(ArgumentError, match=r"^slices=5000: must be an integer from 1 to 2100$"):
        mw.matmul(ONES_A, ONES_B, method="ozaki1", slices=5000)
    with pytest.raises(ArgumentError, match=r"^slices=2000: needs about"):
        mw.ozaki.ozaki1(np.broadcast_to(1.0, (2**16, 2**16)), np.broadcast_to(1.0, (2**16, 2**16)), slices=2000)


def test_cli_refuses_a_huge_n_before_generating(capsys):
    assert main(["multiword", "double-fp16", "--n", "10000000000", "-q"]) == 2  # generating would need TBs
    err = capsys.readouterr().err
    assert err.startswith("blockfma multiword: error: --n 10000000000: needs about ") and "GiB" in err
    assert err.rstrip().endswith("pass a smaller --n (or --m)") and err.count("\n") == 1


# --- 5. range warnings ---------------------------------------------------------------------------------------
def test_unit_interval_data_give_no_range_warning():
    """The README's data: (0, 1] fp32 entries; their subnormal second fp16 words err by at most 2**-25,
    below u_fp16**2 = 2**-22 of each row's largest entry, so nothing is said."""
    rng = np.random.default_rng(0)
    A, B = rng.random((16, 256)).astype(np.float32), rng.random((256, 16)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mw.matmul(A, B, method="double-fp16", device="V100")
        mw.split(A, "fp16", 2)


def test_small_rows_give_one_range_warning_per_call_with_count_and_loss():
    rng = np.random.default_rng(0)
    A, B = np.ldexp(rng.random((4, 32)), -12), np.ldexp(rng.random((32, 4)), -12)  # every entry below 2**-12
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mw.matmul(A, B, method="double-fp16", device="V100")
    got = [w for w in caught if issubclass(w.category, mw.RangeWarning)]
    assert len(got) == 1 and len(caught) == 1
    text = str(got[0].message)
    na, nb = (int(x) for x in __import__("re").search(r"\((\d+) of A, (\d+) of B\)", text).groups())
    assert text.startswith(f"{na + nb} entries of A and B ({na} of A, {nb} of B) lose bits to underflow in 2 fp16 "
                           "words: double-fp16: the worst, ")
    assert "more than the split's own accuracy u^2 = 2^-22.0; scale" in text and "* 2**12" in text
    assert na > 0 and nb > 0


def test_scaling_as_the_warning_says_removes_it():
    A = np.full((2, 3), 2.0**-13 + 2.0**-30)
    with pytest.warns(mw.RangeWarning, match=r"A \* 2\*\*12"):
        mw.split(A, "fp16", 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        words = mw.split(np.ldexp(A, 12), "fp16", 2)
    assert np.array_equal(np.ldexp(words[0] + words[1], -12), A)


# --- 6. backend names ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("old,new", [("torch", "hardware"), ("TORCH", "hardware"), ("torch:cpu", "hardware:cpu"),
                                     ("torch:cuda", "hardware:cuda"), (" torch:cuda:2 ", "hardware:cuda:2")])
def test_the_old_torch_spelling_is_refused_with_the_new_one(old, new):
    with pytest.raises(ArgumentError, match=rf"^backend='{old}': is the old name of the real units through torch "
                                            rf".*; pass backend='{new}'$"):
        mw.matmul(ONES_A, ONES_B, method="fp16", backend=old)


@pytest.mark.parametrize("backend,match", [
    ("nmba", r"^backend='nmba': must be 'auto', .*; pass backend='numba'$"),
    ("hardware:gpu", r"^backend='hardware:gpu': names no real unit; use 'hardware'"),
    ("hardware:cuda:x", r"names no real unit"),
    (3, r"^backend=3: must be a string"),
    ("", r"^backend='': must be 'auto'"),
])
def test_bad_backends(backend, match):
    with pytest.raises(ArgumentError, match=match):
        mw.matmul(ONES_A, ONES_B, method="fp16", backend=backend)


@pytest.mark.parametrize("backend", ["auto", "numpy", "NUMPY", None])
def test_simulator_backends_give_the_same_bits(backend):
    want = mw.matmul(ONES_A, ONES_B, method="double-fp16")
    assert np.array_equal(mw.matmul(ONES_A, ONES_B, method="double-fp16", backend=backend), want)


# --- 7. every argument ---------------------------------------------------------------------------------------
BAD = [
    (dict(method="double-fp61"), r"^method='double-fp61': unknown method; the methods are: fp16, .*; "
                                 r"pass method='double-fp16'$"),
    (dict(method=None), r"^method=None: unknown method"),
    (dict(method="fp16", device="V99"), r"^device='V99': unknown device 'V99'"),
    (dict(method="fp16", device=100), r"^device=100: must be a preset name"),
    (dict(method="3xtf32"), r"^device='V100': has no tf32 -> fp32 unit for this method's words; pass device='A100'$"),
    (dict(method="fp16", model="V100"), r"^model=<str>: must be a blockfma.Model"),
    (dict(method="fp16", model=bf.device("A100").model("bf16", "fp32")), r"^model=<Model .*>: takes bf16 inputs, but "
                                                                          r"this method's words are fp16"),
    (dict(method="fp16", device="V100", model=bf.device("V100").model("fp16", "fp32")), r"^device='V100': and model="),
    (dict(method="fp16", summation="fabsum"), r"^summation='fabsum': must be one of 'fabsum-v1', 'fabsum-v2' or None; "
                                              r"pass summation='fabsum-v\d'$"),
    (dict(method="fp16", summation="fabsum-v1"), r"^block=None: summation='fabsum-v1' needs block=.*; pass block=64$"),
    (dict(method="fp16", block=8), r"^block=8: is FABsum's block size and needs summation=; pass summation='fabsum-v2'$"),
    (dict(method="fp16", summation="fabsum-v2", block=0), r"^block=0: must be an integer of at least 1 or None$"),
    (dict(method="fp16", summation="fabsum-v2", block=2.5), r"^block=2.5: must be an integer"),
    (dict(method="fp16", summation="fabsum-v2", block=True), r"^block=True: must be an integer"),
    (dict(method="ootomo", summation="fabsum-v2", block=4), r"^summation='fabsum-v2': ootomo fixes how its products"),
    (dict(method="double-fp16", accumulate="within"), r"^accumulate='within': must be one of 'outside', 'inside'"),
    (dict(method="ootomo", accumulate="inside"), r"^accumulate='inside': ootomo fixes how its products are added"),
    (dict(method="3xtf32", device="A100", split_rounding="sideways"), r"^split_rounding='sideways': must be a rounding"),
    (dict(method="double-fp16", p=3), r"^p=3: is for method='mmm' \(double-fp16 fixes its words\); pass method='mmm'$"),
    (dict(method="double-fp16", low="bf16"), r"^low='bf16': is for method='mmm'"),
    (dict(method="mmm", p=2), r"^low=None: method='mmm' needs p= .* and low= .*; pass p=2 and low='bf16'$"),
    (dict(method="mmm", p=0, low="bf16"), r"^p=0: must be an integer from 1 to 64$"),
    (dict(method="mmm", p=2, low="bf17"), r"^low='bf17': unknown format 'bf17'; did you mean bf16"),
    (dict(method="mmm", p=2, low=16), r"^low=16: must be a format name"),
    (dict(method="fp16", words=2), r"^words=2: matmul\(\) takes no argument 'words'; did you mean order=\?$|"
                                   r"^words=2: matmul\(\) takes no argument 'words'"),
    (dict(method="fp16", summaton="fabsum-v1"), r"^summaton='fabsum-v1': matmul\(\) takes no argument 'summaton'; "
                                                r"did you mean summation=\?$"),
    (dict(method="double-fp16", slices=4), r"^slices=4: is an argument of method='ozaki1', not of method="),
    (dict(method="ozaki1", moduli=(7, 11)), r"^moduli=\(7, 11\): is an argument of method='ozaki2', not of"),
    (dict(method="ozaki2", device="A100"), r"^device='A100': method='ozaki2' does not use device=.*; leave it out$"),
    (dict(method="fp32", order="cublas"), r"^order='cublas': method='fp32' does not use order="),
    (dict(method="tf64", device="A100"), r"^device='A100': tf64 runs on the hypothetical TF64 unit"),
    (dict(method="ozaki2", n_moduli=0), r"^n_moduli=0: must be an integer from 1 to 20$"),
    (dict(method="ozaki2", moduli=(4, 6)), r"^moduli=\(4, 6\): must be pairwise coprime; 4 and 6 share the factor 2$"),
    (dict(method="ozaki2", moduli="7,11"), r"^moduli='7,11': must be a list of pairwise coprime integers"),
    (dict(method="ozaki2", scaling="exact"), r"^scaling='exact': must be one of 'fast', 'accurate'"),
    (dict(method="ozaki2", unit="int8"), r"^unit='int8': must be a function"),
    (dict(method="ozaki1", slices=0), r"^slices=0: must be an integer from 1 to 2100$"),
    (dict(method="ozaki1", width=8), r"^width=8: must be an integer from 1 to 7 or None$"),
    (dict(method="fp16", return_info="yes"), r"^return_info='yes': must be True or False$"),
    (dict(method="fp16", progress="loud"), r"^progress='loud': must be True, False, None"),
]


@pytest.mark.parametrize("kw,match", BAD, ids=[f"{i}" for i in range(len(BAD))])
def test_every_bad_argument_is_one_clear_line(kw, match):
    with pytest.raises(ArgumentError, match=match) as info:
        mw.matmul(ONES_A, ONES_B, **kw)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("call,match", [
    (lambda: mw.split(ONES_A, "fp17", 2), r"^fmt='fp17': unknown format"),
    (lambda: mw.split(ONES_A, "fp16", 65), r"^p=65: must be an integer from 1 to 64$"),
    (lambda: mw.split(ONES_A, "fp16", 2, scale=-1), r"^scale=-1: must be an integer from 0 to 1100$"),
    (lambda: mw.split(ONES_A, "fp16", 2, rounding="up-ish"), r"^rounding='up-ish': must be a rounding mode"),
    (lambda: mw.split(ONES_A, "fp16", 2, axis=2), r"^axis=2: must be 1"),
    (lambda: mw.split(np.array([[1e5]]), "fp16", 2), r"^A=<1x1 float64 array>: A\[0, 0\] = 100000.0 is beyond fp16's "
                                                     r"largest value 65504.0.*; scale A by a power of two first \(A \* 2\*\*-1"),
    (lambda: mw.reference(ONES_A, ONES_B, exact="yes"), r"^exact='yes': must be True or False$"),
    (lambda: mw.reference(ONES_A, ONES_B, C=np.ones((3, 3))), r"^C=<3x3 float64 array>: has shape \(3, 3\)"),
    (lambda: mw.errors(ONES_A, ONES_A, ONES_A, ONES_B), r"^C=<2x8 float64 array>: has shape \(2, 8\), but A @ B "
                                                        r"has shape \(2, 3\)$"),
    (lambda: mw.errors(ONES_A[:1], ONES_A, ONES_A, ONES_B), r"^C_hat=<1x8 float64 array>: has shape \(1, 8\) but C"),
    (lambda: mw.errors(np.ones((2, 3)), np.ones((2, 3)), ONES_A, ONES_B, spectral="yes"), r"^spectral='yes': must be True or False$"),
    (lambda: mw.bound("duble-fp16", 10), r"^method='duble-fp16': unknown method; .*; pass method='double-fp16'$"),
    (lambda: mw.bound("fp16", 0), r"^n=0: must be an integer of at least 1$"),
    (lambda: mw.bound("fp16", "ten"), r"^n='ten': must be an integer of at least 1$"),
    (lambda: mw.bound("fp16", 10, u_high="small"), r"^u_high='small': must be a unit roundoff in \[0, 1\)"),
    (lambda: mw.bound("fp16", 10, probablistic=True), r"did you mean probabilistic=\?$"),
    (lambda: mw.ozaki.ozaki2_shifts(ONES_A, ONES_B, 100, scaling="slow"), r"^scaling='slow': must be one of"),
])
def test_the_other_entry_points(call, match):
    with pytest.raises(ArgumentError, match=match):
        call()


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 40))
def test_any_positive_block_size_runs_fabsum_in_its_blocks(b):
    n = 24
    A, B = np.ones((2, n)) / 3, np.ones((n, 2)) / 5
    _, info = _quiet(mw.matmul, A, B, method="double-fp16", summation="fabsum-v1", block=b, return_info=True)
    assert info["calls"] == 2 + -(-n // b) and info["block"] == b


@settings(max_examples=40, deadline=None)
@given(st.one_of(st.integers(-5, 0), st.floats(allow_nan=True), st.text(max_size=3), st.booleans(), st.none()))
def test_no_bad_block_size_runs(b):
    if b is None:
        with pytest.raises(ArgumentError, match=r"^block=None: summation='fabsum-v1' needs block="):
            mw.matmul(ONES_A, ONES_B, method="fp16", summation="fabsum-v1", block=b)
        return
    with pytest.raises(ArgumentError, match=r"^block=.*: must be an integer of at least 1 or None$"):
        mw.matmul(ONES_A, ONES_B, method="fp16", summation="fabsum-v1", block=b)


# --- 8. progress ---------------------------------------------------------------------------------------------
def test_progress_names_each_word_product():
    lines: list[str] = []
    mw.matmul(ONES_A, ONES_B, method="double-fp16", progress=lines.append)
    assert lines == [f"double-fp16: product {t} of 3 ({p}) on V100 fp16->fp32, 2x8 @ 8x3 ..."
                     for t, p in ((1, "A1B1"), (2, "A1B2"), (3, "A2B1"))]
    quiet: list[str] = []
    mw.matmul(ONES_A, ONES_B, method="double-fp16", progress=False)
    assert quiet == []


# --- 9. the command line -------------------------------------------------------------------------------------
def test_cli_json_and_exit_codes(capsys):
    import json

    assert main(["multiword", "3xtf32", "--n", "16", "--m", "2", "--json", "-", "-q"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["parameters"]["n"] == 16 and data["parameters"]["methods"] == ["3xtf32"]
    (row,) = data["rows"]
    assert row["device"] == "A100" and row["unit"] == "A100 tf32->fp32" and row["calls"] == 3  # tf32: A100
    assert isinstance(row["componentwise"], float) and 0 < row["componentwise"] <= row["bound"]
    assert row["underflow"] is False and row["overflow"] is False and row["warnings"] == []


@pytest.mark.parametrize("argv,message", [
    (["3xtf32", "--device", "V100"], "--device V100: has no tf32 -> fp32 unit for this method's words; pass --device A100"),
    (["double-fp16", "--backend", "torch"], "--backend torch: is the old name of the real units through torch"),
    (["double-fp16", "--backend", "torch"], "; pass --backend hardware"),
    (["double-fp16", "--n", "0"], "--n 0: must be an integer of at least 1"),
    (["double-fp16", "--m", "-3"], "--m -3: must be an integer of at least 1 or None"),
    (["double-fp16", "--block", "8"], "--block 8: is FABsum's block size and needs summation=; pass --summation fabsum-v2"),
    (["double-fp16", "--summation", "fabsum-v1"], "--block None: summation='fabsum-v1' needs block="),
    (["duble-fp16"], "METHOD duble-fp16: unknown method; the methods are: "),
    (["ozaki2", "--order", "cublas"], "--order cublas: method='ozaki2' does not use order="),
    (["fp64", "--device", "A100"], "--device A100: method='fp64' does not use device="),
    (["double-fp16", "--seed", "-1"], "--seed -1: must be an integer of at least 0"),
    (["mmm"], "method mmm needs p= and low="),
    (["fp16", "--compare"], "pass a METHOD (fp16) or --compare, not both"),
    ([], "name a METHOD"),
])
def test_cli_bad_usage_is_exit_2_and_one_line(capsys, argv, message):
    assert main(["multiword", *argv, "--n" if "--n" not in argv else "--dist", "8" if "--n" not in argv else
                 "uniform01", "-q"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and err.startswith("blockfma multiword: error: ")


def test_cli_compare_skips_what_a_device_lacks_and_says_so(capsys):
    assert main(["multiword", "--compare", "--n", "8", "--m", "2", "--summation", "fabsum-v2", "--block", "4", "-q",
                 "--json", "-"]) == 0
    import json

    rows = {r["method"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert rows["ootomo"]["skipped"].startswith("summation='fabsum-v2': ootomo fixes how its products")
    assert rows["double-fp16"]["calls"] == 2 + 2 and rows["3xtf32"]["device"] == "A100"


@pytest.mark.parametrize("sa,sb", [((0, 4), (4, 2)), ((2, 0), (0, 3)), ((2, 4), (4, 0))])
@pytest.mark.parametrize("method", ["fp16", "double-fp16", "ootomo", "tf64", "ozaki1", "ozaki2", "fp32", "fp64"])
def test_empty_products(sa, sb, method):
    """Edge shapes: an empty result, or k = 0 (a zero matrix), without warnings."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        C = mw.matmul(np.ones(sa), np.ones(sb), method=method)
    assert C.shape == (sa[0], sb[1]) and not C.any()
