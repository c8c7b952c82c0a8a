"""Ozaki I and II fused into Triton kernels (:mod:`blockfma.multiword.ozaki_fused`), the device paths of
``matmul(method="ozaki1")`` and ``matmul(method="ozaki2")`` on tensors: under Triton's interpreter on the CPU,
held bit for bit (float64 patterns, -0 included) to the unfused paths (:func:`.ozaki.ozaki1_steps`,
:func:`.ozaki.ozaki2_steps` on the same tensors) and to oracles in Python integers and Fractions (Ozaki II: the
scaled integers' exact product, rounded by ``float`` and scaled by ``math.ldexp``; Ozaki I: the slices in
Python integers, their products in int64, each level scaled by ``math.ldexp`` and added by Python's float
addition); the compiled kernels on a GPU (marked gpu) to the same."""

from __future__ import annotations

import math
import os
import sys
import types
import warnings
from fractions import Fraction

import numpy as np
import pytest

pytest.importorskip("torch", reason="tensors need torch: pip install 'blockfma[torch]'")
pytest.importorskip("triton", reason="triton is not installed (pip install 'blockfma[triton]')")

import torch
from hypothesis import given, settings, strategies as st

from blockfma import multiword as mw
from blockfma.arguments import ArgumentError
from blockfma.multiword import hardware, ozaki as oz, tensors
from helpers import triton_mode

MODULI = oz.MODULI + (167, 163)  # 22 pairwise coprime moduli: as many as the fused kernels take
KERNELS = (("blockfma.multiword.ozaki_fused", "crt_kernel"), ("blockfma.engine.triton_kernel", "lead"))
SLICES = st.integers(1, 12)
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU visible to torch")


@pytest.fixture(autouse=True)
def interpreter(request, monkeypatch):
    """Triton's interpreter on (off for the tests marked gpu); one mode per process for the engine's kernel
    and for these."""
    gpu = bool(request.node.get_closest_marker("gpu"))
    triton_mode(monkeypatch, gpu)
    for name, fn in KERNELS:
        if name in sys.modules and (type(getattr(sys.modules[name], fn)).__name__ == "InterpretedFunction") == gpu:
            pytest.skip("the fused kernels were defined in the other mode in this process (one mode per process)")


def _bits(x):
    return np.asarray(x.cpu().numpy() if hasattr(x, "cpu") else x, dtype=np.float64).view(np.uint64)


def _oracle(A, B, mods, scaling):
    """The scheme's result from its shifts (torch's, as the tensor paths compute them: their norms are summed in
    torch's order) by Python integers: A' = trunc(2**sa A), B' likewise (Fractions), X = A' @ B' exactly
    (|X| < P/2 checked), rounded once by ``float`` and scaled by ``math.ldexp`` (one rounding; beyond
    binary64: +-inf)."""
    unit = hardware.Int8Unit("hardware:cpu").product
    sa, sb = (s.tolist() for s in oz.shifts(torch, torch.from_numpy(A), torch.from_numpy(B), math.prod(mods), scaling,
                                           unit))
    Ai = [[int(Fraction(float(x)) * Fraction(2) ** int(s)) for x in row] for row, s in zip(A, sa)]
    Bi = [[int(Fraction(float(x)) * Fraction(2) ** int(s)) for x, s in zip(row, sb)] for row in B]
    out = np.zeros((A.shape[0], B.shape[1]))
    for i in range(A.shape[0]):
        for j in range(B.shape[1]):
            X = sum(Ai[i][t] * Bi[t][j] for t in range(A.shape[1]))
            assert 2 * abs(X) < math.prod(mods)
            try:
                out[i, j] = math.ldexp(float(X), -int(sa[i] + sb[j]))
            except OverflowError:
                out[i, j] = math.copysign(math.inf, X)
    return out


def _run(A, B, mods, scaling="fast"):
    """(fused, unfused, the fused kernels' own result): matmul on CPU tensors under the interpreter (the fused
    path, checked to have run) and without it (the unfused path), both with the overflow settled, and
    :func:`.ozaki_fused.ozaki2` itself (before settling)."""
    from blockfma.multiword import ozaki_fused

    T, U = torch.from_numpy(A), torch.from_numpy(B)
    (fused, info), (unfused, plain) = _both(T, U, method="ozaki2", moduli=mods, scaling=scaling)
    assert info["unit"].endswith("fused (Triton)") and not plain["unit"].endswith("fused (Triton)")
    assert info["calls"] == plain["calls"] == len(mods) + (scaling == "accurate")
    return fused, unfused, ozaki_fused.ozaki2(torch, T, U, mods, scaling, hardware.Int8Unit("hardware:cpu"))


def _both(T, U, **options):
    """(result, info) of ``mw.matmul(T, U, **options)`` on CPU tensors under the interpreter (the fused path
    where it runs) and without it (the unfused path), both with the overflow settled."""
    out = []
    for interpret in ("1", "0"):
        with pytest.MonkeyPatch.context() as mp, warnings.catch_warnings():
            mp.setenv("TRITON_INTERPRET", interpret)
            warnings.simplefilter("ignore", mw.OverflowWarning)
            out.append(mw.matmul(T, U, return_info=True, **options))
    return out


def _data(rng, kind, shape):
    if kind == "normal":
        return rng.standard_normal(shape)
    if kind == "uniform":
        return rng.random(shape)
    if kind == "wide":  # exponents over 2**-60 .. 2**60 within each row and column
        return rng.standard_normal(shape) * 2.0 ** rng.integers(-60, 61, shape)
    if kind == "huge":  # products beyond binary64: +-inf (the overflow settled as unfused)
        return rng.standard_normal(shape) * 2.0**520
    if kind == "tiny":  # subnormal operands and results that underflow to subnormals and to +-0
        return rng.standard_normal(shape) * 2.0 ** rng.integers(-1074, -500, shape)
    X = rng.integers(-3, 4, shape).astype(np.float64)  # "zeros": small integers, zero rows, -0
    X[: shape[0] // 3] = -0.0
    return X


CASES = {"kind": st.sampled_from(["normal", "uniform", "wide", "huge", "tiny", "zeros"]),
         "count": st.integers(1, len(MODULI)), "scaling": st.sampled_from(["fast", "accurate"]),
         "seed": st.integers(0, 2**16)}


@settings(max_examples=6, deadline=None)
@given(m=st.integers(1, 24), k=st.integers(1, 40), n=st.integers(1, 24), **CASES)
def test_fused_is_the_unfused_path_and_the_exact_scheme_bit_for_bit(m, k, n, kind, count, scaling, seed):
    _same(m, k, n, kind, count, scaling, seed)


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(m=st.integers(1, 80), k=st.integers(1, 150), n=st.integers(1, 80), **CASES)
def test_fused_is_the_unfused_path_on_more_shapes(m, k, n, kind, count, scaling, seed):
    _same(m, k, n, kind, count, scaling, seed)


def _same(m, k, n, kind, count, scaling, seed):
    rng = np.random.default_rng(seed)
    A, B = _data(rng, kind, (m, k)), _data(rng, kind, (k, n))
    got, want, raw = _run(A, B, MODULI[:count], scaling)
    assert np.array_equal(_bits(got), _bits(want)), f"{np.count_nonzero(_bits(got) != _bits(want))} differ"
    assert np.array_equal(_bits(raw), _bits(_oracle(A, B, MODULI[:count], scaling)))


@pytest.mark.parametrize("kind,count,scaling", [("tiny", 16, "fast"), ("huge", 22, "accurate"),
                                                ("wide", 20, "fast"), ("zeros", 1, "fast")])
def test_fused_at_the_ends_of_binary64(kind, count, scaling):
    """Pinned cases: -0 and subnormal results, +-inf, 22 moduli (the limbs' widest sums), one modulus."""
    rng = np.random.default_rng([count, len(kind)])
    A, B = _data(rng, kind, (19, 33)), _data(rng, kind, (33, 9))
    got, want, raw = _run(A, B, MODULI[:count], scaling)
    assert np.array_equal(_bits(got), _bits(want)) and np.array_equal(_bits(raw), _bits(_oracle(A, B, MODULI[:count],
                                                                                                 scaling)))
    if kind == "tiny":
        assert (_bits(got) == 2**63).any() and ((got != 0) & (got.abs() < 2.0**-1022)).any()
    if kind == "huge":
        assert torch.isinf(got).any()


@pytest.mark.parametrize("method", ["ozaki1", "ozaki2"])
@pytest.mark.parametrize("layout", ["transposed", "strided"])
def test_non_contiguous_tensors_give_the_contiguous_bits(layout, method):
    rng = np.random.default_rng(3)
    A, B = rng.standard_normal((12, 20)), rng.standard_normal((20, 7))
    want = mw.matmul(torch.from_numpy(A), torch.from_numpy(B), method=method)
    if layout == "transposed":
        T, U = torch.from_numpy(A.T.copy()).T, torch.from_numpy(B.T.copy()).T
    else:
        T, U = torch.from_numpy(np.repeat(A, 2, axis=1))[:, ::2], torch.from_numpy(np.repeat(B, 3, axis=0))[::3]
    assert not T.is_contiguous() and np.array_equal(_bits(mw.matmul(T, U, method=method)), _bits(want))


def test_rows_in_blocks_and_k_in_chunks_keep_the_bits(monkeypatch):
    """A's rows in blocks (the products held under PRODUCT_BYTES) and k in chunks (int64 sums of int32
    products, as for k > 131071): the same bits, one int8 product per modulus, block and chunk."""
    from blockfma.multiword import ozaki_fused

    rng = np.random.default_rng(5)
    A, B = rng.standard_normal((45, 70)), rng.standard_normal((70, 13))
    mods = MODULI[:3]
    _, want, _ = _run(A, B, mods)
    monkeypatch.setattr(ozaki_fused, "PRODUCT_BYTES", 3 * 4 * 16 * 20)  # 20 rows of 16 (padded) columns a block
    got, info = mw.matmul(torch.from_numpy(A), torch.from_numpy(B), method="ozaki2", moduli=mods, return_info=True)
    assert np.array_equal(_bits(got), _bits(want)) and info["calls"] == 3 * 3
    monkeypatch.setattr(oz, "RESIDUE_K", 40)  # 72 (padded) in chunks of 40 and 32; int64: 10 rows a block
    got, info = mw.matmul(torch.from_numpy(A), torch.from_numpy(B), method="ozaki2", moduli=mods, return_info=True)
    assert np.array_equal(_bits(got), _bits(want)) and info["calls"] == 5 * 3 * 2


def test_where_the_fused_path_runs():
    """Compiled Triton on a GPU or the interpreter on the CPU, never the other pairings; more moduli than the
    kernels' limbs hold (23) run unfused, with the same bits."""
    assert tensors.fused_here(torch.device("cpu")) and not tensors.fused_here(torch.device("cuda"))
    with pytest.MonkeyPatch.context() as mp:  # the engine's helpers defined for the GPU in this process: unfused
        mp.setitem(sys.modules, KERNELS[1][0], types.SimpleNamespace(lead=lambda mag: mag))
        assert not tensors.fused_here(torch.device("cpu"))
    mods = MODULI + (157,)
    rng = np.random.default_rng(6)
    A, B = rng.standard_normal((6, 9)), rng.standard_normal((9, 4))
    got, info = mw.matmul(torch.from_numpy(A), torch.from_numpy(B), method="ozaki2", moduli=mods, return_info=True)
    assert info["unit"].endswith(f"{len(mods)} moduli")
    assert np.array_equal(_bits(got), _bits(mw.matmul(A, B, method="ozaki2", moduli=mods)))


def test_without_the_interpreter_the_cpu_runs_unfused(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert not tensors.fused_here(torch.device("cpu"))
    got, info = mw.matmul(torch.ones(3, 4, dtype=torch.float64), torch.ones(4, 2, dtype=torch.float64),
                          method="ozaki2", return_info=True)
    assert info["unit"].endswith("16 moduli") and torch.equal(got, torch.full((3, 2), 4.0, dtype=torch.float64))


@pytest.mark.parametrize("method", ["ozaki1", "ozaki2"])
def test_a_product_beyond_memory_is_refused_before_the_kernels(method):
    huge = torch.ones(1, 1, dtype=torch.float64).expand(2**21, 2**21)  # a view: nothing allocated
    with pytest.raises(ArgumentError, match=r"^A=.*needs about .* GiB on cpu, and .* GiB are free; split the product"):
        mw.matmul(huge, huge, method=method)


# --- Ozaki I ------------------------------------------------------------------------------------------------
def _oracle1(A, B, slices, w):
    """Ozaki I's result by its definition: e_i = frexp's exponent of row i's largest |a_ij| (math.frexp), slice
    s = trunc(a 2**(s w - e)) - 2**w trunc(a 2**((s - 1) w - e)) (Python integers), the pairs' products in int64
    (exact), the levels g = slices + 1 ... 2 each scaled by math.ldexp (one rounding; beyond binary64: +-inf) and
    added by Python's float addition, from +0, smallest first."""
    def trunc(x, j):  # trunc(x 2**j), exactly: x = p / q, q a power of two
        p, q = float(x).as_integer_ratio()
        v = (abs(p) << max(j, 0)) // (q << max(-j, 0))
        return -v if p < 0 else v

    def cut(X):
        e = [math.frexp(max(abs(float(x)) for x in row))[1] for row in X]
        S = [[[trunc(x, s * w - ei) - 2**w * trunc(x, (s - 1) * w - ei) for x in row] for row, ei in zip(X, e)]
             for s in range(1, slices + 1)]
        return np.array(S, dtype=np.int64), e

    SA, ea = cut(A)
    SB, eb = cut(B.T)
    assert np.abs(SA).max() < 2**w and np.abs(SB).max() < 2**w
    levels = {g: sum(SA[s - 1] @ SB[g - s - 1].T for s in range(1, g)) for g in range(slices + 1, 1, -1)}
    out = np.zeros((A.shape[0], B.shape[1]))
    for i, j in np.ndindex(out.shape):
        c = 0.0
        for g, level in levels.items():
            try:
                c = c + math.ldexp(float(level[i, j]), ea[i] + eb[j] - g * w)
            except OverflowError:
                c = c + math.copysign(math.inf, level[i, j])
        out[i, j] = c
    return out


def _run1(A, B, slices, width=None):
    """(fused, unfused, the fused kernels' own result), as :func:`_run` gives them for Ozaki II."""
    from blockfma.multiword import ozaki_fused

    T, U = torch.from_numpy(A), torch.from_numpy(B)
    (fused, info), (unfused, plain) = _both(T, U, method="ozaki1", slices=slices, width=width)
    assert info["unit"].endswith(f"{slices} slices, fused (Triton)") and plain["unit"].endswith(f"{slices} slices")
    w = oz.slice_width(A.shape[1]) if width is None else width
    return fused, unfused, ozaki_fused.ozaki1(torch, T, U, slices, w, hardware.Int8Unit("hardware:cpu"))


def _same1(m, k, n, kind, slices, seed, width=None):
    rng = np.random.default_rng(seed)
    A, B = _data(rng, kind, (m, k)), _data(rng, kind, (k, n))
    got, want, raw = _run1(A, B, slices, width)
    assert np.array_equal(_bits(got), _bits(want)), f"{np.count_nonzero(_bits(got) != _bits(want))} differ"
    assert np.array_equal(_bits(raw), _bits(_oracle1(A, B, slices, oz.slice_width(k) if width is None else width)))
    return got, raw


@settings(max_examples=6, deadline=None)
@given(m=st.integers(1, 24), k=st.integers(1, 40), n=st.integers(1, 24), kind=CASES["kind"], slices=SLICES,
       seed=CASES["seed"])
def test_fused_ozaki1_is_the_unfused_path_and_the_scheme_bit_for_bit(m, k, n, kind, slices, seed):
    _same1(m, k, n, kind, slices, seed)


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(m=st.integers(1, 70), k=st.integers(1, 130), n=st.integers(1, 70), kind=CASES["kind"],
       slices=st.integers(1, 20), seed=CASES["seed"], width=st.sampled_from([None, 1, 3, 5]))
def test_fused_ozaki1_on_more_shapes_and_widths(m, k, n, kind, slices, seed, width):
    _same1(m, k, n, kind, slices, seed, width)


@pytest.mark.parametrize("kind,slices", [("tiny", 9), ("huge", 8), ("wide", 12), ("zeros", 1)])
def test_fused_ozaki1_at_the_ends_of_binary64(kind, slices):
    """Pinned cases: subnormal slices and results, +-inf and NaN (inf - inf between levels; the result settled
    as unfused), slices far below a row's largest element, a single slice."""
    got, raw = _same1(19, 33, 9, kind, slices, [slices, len(kind)])
    if kind == "tiny":
        assert ((got != 0) & (got.abs() < 2.0**-1022)).any()
    if kind == "huge":
        assert torch.isinf(got).any() and torch.isnan(raw).any() and torch.isinf(raw).any()


def test_fused_ozaki1_groups_and_blocks_keep_the_bits(monkeypatch):
    """A level's pairs in several int32 groups (one product each, the slices side by side along k) and A's rows
    in blocks: the same bits, one product per group and block."""
    from blockfma.multiword import bounds, ozaki_fused

    rng = np.random.default_rng(8)
    T, U = torch.from_numpy(rng.standard_normal((45, 70))), torch.from_numpy(rng.standard_normal((70, 13)))
    want = oz.ozaki1_steps(torch, T, U, 4, 7, hardware.Int8Unit("hardware:cpu").product)
    got, info = mw.matmul(T, U, method="ozaki1", slices=4, return_info=True)
    assert np.array_equal(_bits(got), _bits(want)) and info["calls"] == 4  # a level, a product
    monkeypatch.setattr(bounds, "ozaki_max_inner", lambda w: 2 * 70)  # two pairs to a group: 2 + 2 + 1 + 1
    monkeypatch.setattr(ozaki_fused, "PRODUCT_BYTES", 6 * 4 * 16 * 20)  # 20 rows of 16 (padded) columns a block
    got, info = mw.matmul(T, U, method="ozaki1", slices=4, return_info=True)
    assert np.array_equal(_bits(got), _bits(want)) and info["calls"] == 6 * 3


# --- the compiled kernels ----------------------------------------------------------------------------------
@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("shape", [(7, 40, 5), (256, 1000, 200), (513, 2048, 300)])
@pytest.mark.parametrize("count,scaling", [(14, "fast"), (16, "accurate"), (22, "fast")])
def test_cuda_fused_is_the_unfused_path(shape, count, scaling):
    (m, k, n), mods = shape, MODULI[:count]
    rng = np.random.default_rng([m, count])
    for kind in ("uniform", "normal", "wide", "tiny"):
        A, B = _data(rng, kind, (m, k)), _data(rng, kind, (k, n))
        T, U = torch.from_numpy(A).cuda(), torch.from_numpy(B).cuda()
        got, info = mw.matmul(T, U, method="ozaki2", moduli=mods, scaling=scaling, return_info=True)
        assert got.is_cuda and info["unit"].endswith("fused (Triton)")
        want = oz.ozaki2_steps(torch, T, U, mods, scaling, hardware.Int8Unit("hardware:cuda").product)
        assert np.array_equal(_bits(got), _bits(want)), f"{kind}: {np.count_nonzero(_bits(got) != _bits(want))}"


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("shape", [(7, 40, 5), (256, 1000, 200), (513, 20000, 300)])
@pytest.mark.parametrize("slices", [1, 4, 9])
def test_cuda_fused_ozaki1_is_the_unfused_path(shape, slices):
    """k = 20000: 6 pairs to a group, so 9 slices' levels of 7 and 8 pairs take two products each."""
    m, k, n = shape
    rng = np.random.default_rng([m, slices])
    for kind in ("uniform", "normal", "wide", "tiny", "huge"):
        A, B = _data(rng, kind, (m, k)), _data(rng, kind, (k, n))
        T, U = torch.from_numpy(A).cuda(), torch.from_numpy(B).cuda()
        got, info = mw.matmul(T, U, method="ozaki1", slices=slices, return_info=True)
        assert got.is_cuda and info["unit"].endswith("fused (Triton)")
        want = oz.ozaki1_steps(torch, T, U, slices, oz.slice_width(k), hardware.Int8Unit("hardware:cuda").product)
        assert np.array_equal(_bits(got), _bits(want)), f"{kind}: {np.count_nonzero(_bits(got) != _bits(want))}"


@pytest.mark.parametrize("count", [1, 8, 16, 22])
def test_crt_kernel_rounds_once_to_nearest_even_then_scales_once(count):
    """Integers with every rounding case (exact, below, above and at ties, near the range's ends), given as
    products congruent to them (negative ones too), unscaled by 0, into subnormals and beyond binary64:
    Python's float(X) (correctly rounded) and math.ldexp (one more rounding)."""
    from blockfma.multiword import ozaki_fused

    mods = MODULI[:count]
    P = math.prod(mods)
    H = P // 2
    rng = np.random.default_rng(count)
    xs = [-H, P - 1 - H, 0, 1, -1]
    for _ in range(30):
        x = int(rng.integers(0, 2**62)) * int(rng.integers(1, 2**62)) * int(rng.integers(1, 2**40)) % P - H
        b = max(x.bit_length() - 54, 0)
        for t in (x, (x >> b) << b, ((x >> b) | 1) << b, (((x >> b) | 1) << b) + 1, (((x >> b) | 1) << b) - 1):
            xs += [t for t in (t, -t) if -H <= t <= P - 1 - H]
    p = torch.tensor([[[x % m - m * (j % 2) for j, x in enumerate(xs)]] for m in mods], dtype=torch.int32)
    for shift in (0, 1100, -900):
        sb = torch.tensor([shift + j % 7 for j in range(len(xs))], dtype=torch.int64)
        out = torch.empty((1, len(xs)), dtype=torch.float64)
        with np.errstate(over="ignore"):
            ozaki_fused.crt_kernel[(1, -(-len(xs) // 64))](p, torch.zeros(1, dtype=torch.int64), sb, out, 1, len(xs),
                                                          *p.stride(), *out.stride(), S=ozaki_fused.constants(mods),
                                                          BM=64, BN=64)
        want = []
        for x, s in zip(xs, sb.tolist()):
            try:
                want.append(math.ldexp(float(x), -s))
            except OverflowError:
                want.append(math.copysign(math.inf, x))
        assert np.array_equal(_bits(out[0]), _bits(np.array(want))), shift


COMPILE = """
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from blockfma.multiword import ozaki, ozaki_fused as f
K = f.constants(ozaki.MODULI[:3])
for kernel, const, ptrs, options in (
        (f.residues_kernel, {"S": K, "BR": 16, "BC": 16}, {"x_ptr": "*fp64", "s_ptr": "*i64", "out_ptr": "*i8"}, {}),
        (f.crt_kernel, {"S": K, "BM": 16, "BN": 32}, {"p_ptr": "*i32", "sa_ptr": "*i64", "sb_ptr": "*i64",
                                                      "out_ptr": "*fp64"}, {}),
        (f.slices_kernel, {"W": 7, "BR": 32, "BC": 32}, {"x_ptr": "*fp64", "e_ptr": "*i64", "out_ptr": "*i8"}, f.EXACT),
        (f.levels_kernel, {"W": 7, "BM": 32, "BN": 32}, {"p_ptr": "*i32", "ea_ptr": "*i64", "eb_ptr": "*i64",
                                                         "out_ptr": "*fp64"}, f.EXACT)):
    names = list(kernel.arg_names)
    sig = {n: "constexpr" if n in const else ptrs.get(n, "i32") for n in names}
    src = ASTSource(fn=kernel, signature=sig, constexprs={(names.index(n),): v for n, v in const.items()})
    out = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)
    print(kernel.fn.__name__, len(out.asm["cubin"]), "fma.rn.f64" in out.asm["ptx"])
"""


def test_the_kernels_compile_for_sm90(tmp_path):
    """(A few seconds.)  The kernels through Triton's compiler for an H100 (no device needed: Triton's own
    ptxas), in a fresh process without the interpreter, which accepts code the compiler refuses (globals,
    constexprs reassigned, int32 literals); Ozaki I's with the options they are launched with, and no float64
    FMA in them (a contracted multiply-add would round once where the unfused path rounds twice)."""
    import subprocess
    from pathlib import Path

    import triton

    if not (Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas").exists():
        pytest.skip("Triton's nvidia tools are absent")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parents[1] / "src"), env.get("PYTHONPATH", "")])
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.9's default, said aloud (it warns otherwise)
    env["TRITON_CACHE_DIR"] = str(tmp_path)  # compiled here, not read from an earlier run's cache
    out = subprocess.run([sys.executable, "-c", COMPILE], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    names = [line.split()[0] for line in out.stdout.splitlines()]
    assert names == ["residues_kernel", "crt_kernel", "slices_kernel", "levels_kernel"]
    assert [line.split()[2] for line in out.stdout.splitlines()][2:] == ["False", "False"]  # Ozaki I: no FMA
