"""multiword.matmul on torch tensors (:mod:`blockfma.multiword.tensors`): tensors in, a tensor out, every step
on the tensors' device.  On CPU torch (CI), the oracle is the numpy path on the same unit
(``backend="hardware:cpu"``, its own split and CRT on the host): the bits must be equal; accuracy is held to
the exact product (``multiword.reference(exact=True)``) and each method's bound; bad input must fail with an
ArgumentError naming the argument, before any work.  The CUDA tests are marked ``gpu`` and skip without one."""

from __future__ import annotations

import math
import warnings
from fractions import Fraction

import numpy as np
import pytest

from blockfma import multiword as mw
from blockfma.arguments import ArgumentError
from blockfma.multiword import arrays, ozaki as oz

torch = pytest.importorskip("torch", reason="tensors need torch: pip install 'blockfma[torch]'")
HAVE_CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not HAVE_CUDA, reason="no CUDA GPU visible to torch")

CPU = "hardware:cpu"
WORDS = ["fp16", "bf16", "tf32", "double-fp16", "double-bf16", "triple-bf16", "markidis", "ootomo", "3xtf32",
         "4xtf32", "bf16x9"]
FP64_LEVEL = ["fp64", "ozaki1", "ozaki2"]
HARDWARE = WORDS + ["fp32"] + FP64_LEVEL


def _data(method, dist, m=24, k=96, n=20, seed=0):
    """fp32 data for the word methods (their inputs), float64 (with a wide range for 'wide') for the rest."""
    rng = np.random.default_rng([seed, HARDWARE.index(method), len(dist)])
    if dist == "uniform01":
        A, B = 1.0 - rng.random((m, k)), 1.0 - rng.random((k, n))
    elif dist == "uniform-half":
        A, B = 0.5 - rng.random((m, k)), 0.5 - rng.random((k, n))
    else:  # wide: normal with exponents spread over 2**-20 .. 2**20
        A = rng.standard_normal((m, k)) * 2.0 ** rng.integers(-20, 21, (m, k))
        B = rng.standard_normal((k, n)) * 2.0 ** rng.integers(-20, 21, (k, n))
    if method not in FP64_LEVEL:
        A, B = A.astype(np.float32).astype(np.float64), B.astype(np.float32).astype(np.float64)
    return A, B


def _bound(method, n):
    """The method's componentwise bound; ozaki2 has none of its own: DGEMM's (n u_fp64), the accuracy it is for."""
    if method == "ozaki1":
        return mw.bound(method, n, slices=mw.bounds.ozaki_slices(53))  # matmul's default slices
    return mw.bound("fp64" if method == "ozaki2" else method, n)


def _quiet(fn, *args, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mw.RangeWarning)
        return fn(*args, **kw)


def _bits(x):
    x = x.numpy() if hasattr(x, "numpy") else np.asarray(x)
    return np.asarray(x, dtype=np.float64).view(np.uint64)


# --- the tensor path is the numpy path, bit for bit ---------------------------------------------------------
@pytest.mark.parametrize("method,dist", [(m, d) for m in HARDWARE for d in ("uniform01", "uniform-half", "wide")
                                         if d != "wide" or m in FP64_LEVEL + ["bf16", "bf16x9", "3xtf32"]])
def test_tensors_give_the_numpy_paths_bits(method, dist):
    A, B = _data(method, dist)
    want, info_np = _quiet(mw.matmul, A, B, method=method, backend=CPU, return_info=True)
    C, info = _quiet(mw.matmul, torch.from_numpy(A), torch.from_numpy(B), method=method, return_info=True)
    assert isinstance(C, torch.Tensor) and C.device.type == "cpu" and C.dtype == torch.float64
    assert C.shape == (A.shape[0], B.shape[1]) and not C.requires_grad
    assert np.array_equal(_bits(C), _bits(want)), f"{method}: {np.count_nonzero(_bits(C) != _bits(want))} differ"
    assert info["calls"] == info_np["calls"] and info["device"] == "cpu"
    if method in WORDS:
        assert info["products"] == info_np["products"] and info["hardware"]["path"] == "fp32"


@pytest.mark.parametrize("kw", [{"n_moduli": 4}, {"n_moduli": 20, "scaling": "accurate"},
                                {"moduli": (7, 11, 13, 17, 19)}, {"slices": 3}, {"slices": 5, "width": 5}])
def test_ozaki_parameters_on_tensors(kw):
    method = "ozaki1" if "slices" in kw else "ozaki2"
    A, B = _data(method, "wide", m=9, k=40, n=7, seed=5)
    want = mw.matmul(A, B, method=method, backend=CPU, **kw)
    got = mw.matmul(torch.from_numpy(A), torch.from_numpy(B), method=method, backend="hardware", **kw)
    assert np.array_equal(_bits(got), _bits(want))


@pytest.mark.parametrize("kw", [{"order": "cublas"}, {"accumulate": "inside"}, {"summation": "fabsum-v1", "block": 32},
                                {"summation": "fabsum-v2", "block": 40}, {"split_rounding": "rz"}])
def test_word_method_options_on_tensors(kw):
    method = "tf32" if "split_rounding" in kw else "double-bf16"
    A, B = _data(method, "uniform-half", seed=7)
    want = mw.matmul(A, B, method=method, backend=CPU, **kw)
    got = mw.matmul(torch.from_numpy(A), torch.from_numpy(B), method=method, **kw)
    assert np.array_equal(_bits(got), _bits(want))


@pytest.mark.parametrize("method", ["double-fp16", "ozaki2"])
def test_float32_half_and_integer_tensors_are_their_values(method):
    A, B = _data(method, "uniform-half", m=6, k=24, n=5, seed=1)
    A16 = torch.from_numpy(A).to(torch.float16)
    B16 = torch.from_numpy(B).to(torch.float16)
    want = mw.matmul(A16.double(), B16.double(), method=method)
    assert np.array_equal(_bits(mw.matmul(A16, B16, method=method)), _bits(want))
    assert np.array_equal(_bits(mw.matmul(A16.float(), B16.float(), method=method)), _bits(want))
    Ai = torch.arange(-30, 30, dtype=torch.int32).reshape(6, 10)
    Bi = torch.arange(20, dtype=torch.int32).reshape(10, 2) - 7
    exact = (Ai.long() @ Bi.long()).double()
    assert torch.equal(mw.matmul(Ai, Bi, method=method), exact)  # small integers: every step is exact


def test_tensors_that_require_grad_give_a_differentiable_product():
    """The same bits as without grad; the backward is the product's formula (grad_A = G @ B^T, grad_B = A^T @ G):
    small integers, so every step is exact and int64 products are the oracle."""
    A, B = _data("3xtf32", "uniform01", m=4, k=16, n=3)
    a = torch.from_numpy(A).requires_grad_()
    C = mw.matmul(a, torch.from_numpy(B), method="3xtf32")
    assert C.requires_grad and np.array_equal(_bits(C.detach()), _bits(mw.matmul(A, B, method="3xtf32", backend=CPU)))
    with torch.no_grad():
        assert not mw.matmul(a, torch.from_numpy(B), method="3xtf32").requires_grad
    Ai = (torch.arange(12, dtype=torch.float32).reshape(3, 4) - 6).requires_grad_()
    Bi = (torch.arange(8, dtype=torch.float32).reshape(4, 2) - 3).requires_grad_()
    G = torch.arange(6, dtype=torch.int64).reshape(3, 2) - 2
    for kw in ({"method": "ozaki1"}, {"accuracy": "fp64"}):
        Ai.grad = Bi.grad = None
        (mw.matmul(Ai, Bi, **kw) * G).sum().backward()
        assert Ai.grad.dtype == torch.float32 and torch.equal(Ai.grad, (G @ Bi.detach().long().T).float())
        assert torch.equal(Bi.grad, (Ai.detach().long().T @ G).float())


# --- accuracy against the exact product ------------------------------------------------------------------------
@pytest.mark.parametrize("method", HARDWARE)
def test_tensor_results_are_within_the_methods_bounds(method):
    A, B = _data(method, "uniform-half", k=128, seed=3)
    C = _quiet(mw.matmul, torch.from_numpy(A), torch.from_numpy(B), method=method)
    err = mw.errors(C.numpy(), mw.reference(A, B, exact=True), A, B)["componentwise"]
    limit = _bound(method, A.shape[1])
    assert 0 <= err <= limit, (method, err, limit)
    if method in FP64_LEVEL:
        assert err <= 2.0**-50  # fp64-level: within a few ulps of |A||B|


# --- the CRT and the exact ldexp on both array modules ---------------------------------------------------------
@pytest.mark.parametrize("n_moduli", [1, 2, 8, 16, 20])
def test_crt_rounds_once_to_nearest_even_on_numpy_and_torch(n_moduli):
    """Integers with every rounding case (exact, below, above and at ties, odd and even, near the range's ends):
    both modules' CRT gives float(X), Python's correctly rounded conversion."""
    mods = oz.MODULI[:n_moduli]
    P = math.prod(mods)
    H = P // 2
    rng = np.random.default_rng(n_moduli)
    xs = [-H, P - 1 - H, 0, 1, -1]
    for _ in range(60):
        x = int(rng.integers(0, 2**62)) * int(rng.integers(1, 2**62)) * int(rng.integers(1, 2**40)) % P - H
        b = max(x.bit_length() - 54, 0)
        for t in (x, (x >> b) << b, ((x >> b) | 1) << b, (((x >> b) | 1) << b) + 1, (((x >> b) | 1) << b) - 1):
            if -H <= t <= P - 1 - H:
                xs += [t, -t] if -H <= -t <= P - 1 - H else [t]
    want = np.array([float(x) for x in xs])
    for xp, conv in ((np, np.asarray), (torch, torch.tensor)):
        crt = oz.CRT(xp, mods)
        for mo in mods[::-1]:  # any order
            crt.add(mo, conv([x % mo for x in xs]))
        got = crt.value()
        got = got.numpy() if xp is torch else got
        assert np.array_equal(_bits(got), _bits(want)), xp.__name__
    limbs = crt.limbs()  # the torch CRT's integers, read exactly
    assert [sum(int(x[j]) << (oz.LIMB * i) for i, x in enumerate(limbs)) for j in range(len(xs))] == xs


def test_torch_ldexp_is_numpys_at_the_ends_of_the_range():
    x = np.array([1.0, -1.5, 2.0**-1074, 0.75, -0.0, 1 - 2.0**-53, 3.0, 2.0**1023, 5e-324, 1.0 + 2.0**-52] * 8)
    e = np.array([-1074, -1075, 1000, 1024, -3, -1073, -1076, 1, 2000, -1060] * 8)
    e = e + np.repeat(np.arange(8) - 4, 10)
    with np.errstate(over="ignore", under="ignore"):
        want = np.ldexp(x, e)
    got = arrays.ldexp(torch, torch.from_numpy(x), torch.from_numpy(e))
    assert np.array_equal(_bits(got), _bits(want))
    e = np.clip(e, -1022, 1023)  # the shortcut (2**e normal): still one rounding into the subnormals
    with np.errstate(over="ignore", under="ignore"):
        want = np.ldexp(x, e)
    assert np.array_equal(_bits(arrays.ldexp(torch, torch.from_numpy(x), torch.from_numpy(e))), _bits(want))
    half_way = float(arrays.ldexp(torch, torch.tensor([3.0]), -1075)[0])  # 1.5 ulps: to even (2)
    assert Fraction(half_way) == Fraction(2) ** -1073


# --- bad input --------------------------------------------------------------------------------------------------
def _ones(*shape, dtype=None, device="cpu"):
    return torch.ones(*shape, dtype=torch.float64 if dtype is None else dtype, device=device)


def _T(X):
    return torch.as_tensor(np.asarray(X, dtype=np.float64))


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("method", ["3xtf32", "ozaki2"])
def test_nan_and_inf_are_refused_naming_the_entry(method, value):
    A, B = torch.ones(3, 4, dtype=torch.float64), torch.ones(4, 2, dtype=torch.float64)
    B[2, 1] = value
    with pytest.raises(ArgumentError, match=r"^B=.*B\[2, 1\] = -?(nan|inf) is not finite \(1 non-finite"):
        mw.matmul(A, B, method=method)


def test_values_the_words_cannot_hold_are_refused_naming_the_entry():
    A = torch.ones(3, 4, dtype=torch.float64)
    A[1, 2] = 1e6  # beyond fp16's 65504
    with pytest.raises(ArgumentError, match=r"^A=.*A\[1, 2\] = 1000000.0 is beyond fp16's largest value 65504.0"
                                            r".*\(A \* 2\*\*-4, exact"):
        mw.matmul(A, torch.ones(4, 2, dtype=torch.float64), method="double-fp16")


def test_words_that_underflow_warn_as_for_arrays():
    A, B = _data("double-fp16", "uniform01", m=4, k=8, n=3)
    A[0] *= 2.0**-20
    with pytest.warns(mw.RangeWarning, match="lose bits to underflow") as got:
        C = mw.matmul(_T(A), _T(B), method="double-fp16")
    assert got[0].filename == __file__  # at the user's call
    assert np.array_equal(_bits(C), _bits(_quiet(mw.matmul, A, B, method="double-fp16", backend=CPU)))


def test_overflow_is_settled_as_for_arrays():
    A, B = np.full((2, 3), 2.0**100), np.full((3, 2), 2.0**100)
    A[1] = 1.0
    with pytest.warns(mw.OverflowWarning) as w_np:
        want = mw.matmul(A, B, method="bf16", backend=CPU)
    with pytest.warns(mw.OverflowWarning) as w_t:
        got = mw.matmul(_T(A), _T(B), method="bf16")
    assert np.isinf(want[0]).all() and np.isfinite(want[1]).all()
    assert np.array_equal(_bits(got), _bits(want)) and str(w_t[0].message) == str(w_np[0].message)


@pytest.mark.parametrize("shape_a,shape_b", [((0, 4), (4, 3)), ((3, 0), (0, 2)), ((2, 5), (5, 0))])
@pytest.mark.parametrize("method", ["3xtf32", "ozaki1", "ozaki2", "fp64"])
def test_empty_operands_give_zeros_of_the_products_shape(method, shape_a, shape_b):
    C = mw.matmul(_ones(*shape_a) * 0, _ones(*shape_b) * 0, method=method)
    assert C.shape == (shape_a[0], shape_b[1]) and C.dtype == torch.float64 and not C.any()


@pytest.mark.parametrize("A,B,name,text", [
    (_ones(4), _ones(4, 2), "A", r"must be a 2-D matrix; got shape \(4,\).*reshape"),
    (_ones(2, 4), _ones(3, 2), "B", "inner dimensions differ"),
    (_ones(2, 4), _ones(4, 2, dtype=torch.float32), "B", r"has dtype torch.float32 and A torch.float64"),
    (_ones(2, 4), np.ones((4, 2)), "B", "is not a torch tensor, and A is one"),
    (np.ones((2, 4)), _ones(4, 2), "A", "is not a torch tensor, and B is one"),
    (_ones(2, 4), _ones(4, 2, device="meta"), "B", "is on meta and A on cpu"),
    (_ones(2, 4, dtype=torch.bool), _ones(4, 2, dtype=torch.bool), "A", "torch.bool: a mask"),
    (_ones(2, 4, dtype=torch.complex128), _ones(4, 2, dtype=torch.complex128), "A", "real matrices"),
    (torch.full((2, 4), 2**53 + 1, dtype=torch.int64), _ones(4, 2, dtype=torch.int64), "A",
     r"A\[0, 0\] = 9007199254740993 has more significant bits than binary64"),
])
@pytest.mark.parametrize("method", ["double-bf16", "ozaki2"])
def test_bad_operands_are_refused_naming_the_argument(method, A, B, name, text):
    with pytest.raises(ArgumentError, match=rf"^{name}=.*{text}"):
        mw.matmul(A, B, method=method)


@pytest.mark.parametrize("kw,name,text", [
    ({"backend": "numpy"}, "backend", "simulator's engine, which takes numpy arrays.*backend='hardware'"),
    ({"backend": "hardware:cuda"} if not HAVE_CUDA else {"backend": "hardware:cpu", "method": "fp16"}, "backend",
     "needs a CUDA GPU" if not HAVE_CUDA else "names cpu"),
    ({"device": "A100"}, "device", "picks a simulated unit"),
    ({"method": "tf64"}, "method", "no GPU has"),
    ({"method": "ozaki2", "unit": oz.exact_unit}, "unit", "torch._int_mm on their device"),
    ({"method": "ozaki2", "moduli": (4, 6)}, "moduli", "coprime"),
    ({"method": "ozaki1", "slices": 0}, "slices", ""),
])
def test_bad_arguments_with_tensors_are_refused(kw, name, text):
    kw = {"method": "bf16", **kw}
    A = torch.ones(2, 4, dtype=torch.float64, device="cuda" if "names cpu" in text else "cpu")
    with pytest.raises(ArgumentError, match=rf"^{name}=.*{text}"):
        mw.matmul(A, torch.ones_like(A.T), **kw)


# --- CUDA ------------------------------------------------------------------------------------------------------
@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("method", HARDWARE)
def test_cuda_tensors_stay_on_the_device_with_the_numpy_paths_bits(method):
    """On the GPU the words and the unit calls are the same (the same cuBLAS / _int_mm calls on the same
    operands), so the device path's bits are the numpy path's on the same GPU; within the method's bound."""
    A, B = _data(method, "uniform-half", m=64, k=256, n=48)
    C = _quiet(mw.matmul, _T(A).cuda(), _T(B).cuda(), method=method)
    assert C.is_cuda and C.dtype == torch.float64
    want = _quiet(mw.matmul, A, B, method=method, backend="hardware:cuda")
    assert np.array_equal(_bits(C.cpu()), _bits(want))
    err = mw.errors(C.cpu().numpy(), mw.reference(A, B, exact=True), A, B)["componentwise"]
    assert err <= _bound(method, A.shape[1])
    if method.startswith("ozaki"):  # integer units are exact: the GPU's bits are the CPU's
        assert np.array_equal(_bits(C.cpu()), _bits(mw.matmul(A, B, method=method, backend=CPU)))


@pytest.mark.parametrize("fmt,mode", [("fp16", "rne"), ("bf16", "rne"), ("tf32", "rne"), ("tf32", "rz"),
                                      ("fp16", "rz")])
def test_torch_rounding_of_binary32_values_is_formats_round(fmt, mode):
    """arrays.round_to on torch (the binary32 shortcut, or the engine's rounding) against formats.round, on
    random binary32 bit patterns (every exponent, subnormals, ties) and on float64 values beyond binary32."""
    from blockfma import formats

    rng = np.random.default_rng(11)
    x = rng.integers(0, 2**32, 40000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    x = x[np.isfinite(x)].astype(np.float64)
    x = np.concatenate([x, [0.0, -0.0, 2.0**-149, 65504.0, 65520.0, 2.0**-24, 3 * 2.0**-26, 3 * 2.0**-137]])
    x = x[np.abs(x) <= formats.get(fmt).max]
    wide = x * (1 + 2.0**-40)  # not binary32: the general path
    for values in (x, wide):
        want = formats.round(fmt, values, mode)
        got = arrays.round_to(torch, fmt, torch.from_numpy(values), formats.RoundingMode.parse(mode))
        assert np.array_equal(_bits(got), _bits(want))


@pytest.mark.parametrize("method", ["3xtf32", "ozaki2"])
def test_a_product_beyond_the_devices_memory_is_refused_before_any_work(method):
    huge = torch.ones(1, 1, dtype=torch.float64).expand(2**21, 2**21)  # a view: nothing allocated
    with pytest.raises(ArgumentError, match=r"^A=.*needs about .* GiB on cpu, and .* GiB are free; split the product"):
        mw.matmul(huge, huge, method=method)


@pytest.mark.parametrize("scale", [2.0**1000, 2.0**-1060])
@pytest.mark.parametrize("method", ["ozaki1", "ozaki2"])
def test_ozaki_at_the_ends_of_binary64_as_for_arrays(method, scale):
    """Products beyond binary64 (+-inf with an OverflowWarning) and subnormal operands: the numpy path's bits."""
    rng = np.random.default_rng(4)
    A, B = rng.standard_normal((10, 12)) * scale, rng.standard_normal((12, 6)) * (2.0**40 if scale > 1 else 1.0)
    with warnings.catch_warnings(record=True) as w_np:
        warnings.simplefilter("always")
        want = mw.matmul(A, B, method=method, backend=CPU)
    with warnings.catch_warnings(record=True) as w_t:
        warnings.simplefilter("always")
        got = mw.matmul(_T(A), _T(B), method=method)
    assert np.array_equal(_bits(got), _bits(want)) and (np.isinf(want).any() == (scale > 1))
    assert [str(w.message) for w in w_t] == [str(w.message) for w in w_np]
