"""Block-scaled MMA in the engines (the scaled-fused family: the numpy engine, :mod:`blockfma.engine.scaled`,
the compiled kernels, :mod:`blockfma.engine.fast.scaled`, and the torch engine on the CPU,
:func:`blockfma.engine.gpu.scaled`): ``bf.gemm`` and
``bf.dot`` with ``scale_a``/``scale_b`` held bit for bit (uint32 codes) to the exact reference
(:func:`blockfma.reference.dot_bits`, Fractions; itself held to MMA-Sim in tests/test_mx_scaled.py) on
every block-scaled preset of the B200 and the RTX 5090: random codes over the whole formats (fp8 NaN and
infinities included), scales at their extremes (ue8m0 2**-127 and 2**127, ue4m3 0, its least subnormal
and 448), NaN scales, C with zeros, subnormals and specials, one to three chained instructions; hypothesis
over the codes; the reference as the fallback beyond the engine's bounds."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import blockfma as bf
from blockfma import formats as F
from blockfma import reference as R
from blockfma.arguments import ArgumentError
from blockfma.engine import last_backend
from blockfma.engine import scaled
from blockfma import optional
from blockfma.model import Model

NUMBA = optional.available("numba")
TORCH = optional.available("torch")


def engines(model: Model, finite: bool = True) -> tuple[str, ...]:
    """The engines that run a block-scaled model: numpy; numba for a scale per product and finite inputs;
    torch (the GPU engine's code on the CPU) where torch is installed."""
    numba = NUMBA and finite and model.option("scale_group") is None
    return ("numpy",) + (("numba",) if numba else ()) + (("torch",) if TORCH else ())

F8F6F4 = ("e4m3fn", "e5m2", "e3m2fn", "e2m3fn", "e2m1fn")
PREFIX = {"B200": "tcgen05", "RTX 5090": "mma"}
# (instruction without its device prefix, A, B): every block-scaled preset
KINDS = ([("mxf8f6f4.block32", a, b) for a in F8F6F4 for b in F8F6F4]
         + [(kind, "e2m1fn", "e2m1fn") for kind in ("mxf4.block32", "mxf4nvf4.block32", "mxf4nvf4.block16.ue8m0",
                                                      "mxf4nvf4.block16.ue4m3")])
CASES = [(device, *kind) for device in PREFIX for kind in KINDS]


def preset(device: str, kind: str, fa: str, fb: str) -> Model:
    return bf.device(device).model((fa, fb), "fp32", instruction=f"{PREFIX[device]}.{kind}")


def _codes(rng: np.random.Generator, fmt: F.Format, shape: tuple[int, ...]) -> np.ndarray:
    """Values of every code of fmt, uniformly (NaN and infinities where fmt has them)."""
    return F.decode(fmt, rng.integers(0, 1 << fmt.bits, shape))


def scales(rng: np.random.Generator, fs: F.Format, shape: tuple[int, ...], mode: int) -> np.ndarray:
    """Scales of fs by mode: 0 random codes; 1 the extremes (ue8m0: 2**-127, 2**127, 1; ue4m3: 0, the least
    subnormal 2**-9, 448, 1); 2 near 1 (so that the products decide e_max); 3 as 2 with one NaN."""
    e8 = fs.name == "e8m0fnu"
    if mode == 0:
        codes = rng.integers(0, 0xFF if e8 else 0x7F, shape)
    elif mode == 1:
        codes = rng.choice([0, 254, 127] if e8 else [0, 1, 0x7E, 0x38], shape)
    else:
        codes = rng.integers(124, 131, shape) if e8 else rng.choice([0x30, 0x38, 0x3C, 0x40], shape)
        if mode == 3:
            codes.flat[rng.integers(codes.size)] = 0xFF if e8 else 0x7F
    return F.decode(fs, codes)


def c_values(rng: np.random.Generator, shape: tuple[int, ...], specials: bool) -> np.ndarray:
    c = (rng.standard_normal(shape) * 2.0 ** rng.integers(-40, 40, shape)).astype(np.float32).astype(np.float64)
    pick = rng.random(shape)
    c[pick < 0.15] = 0.0
    c[(pick >= 0.15) & (pick < 0.25)] = -0.0
    c[(pick >= 0.25) & (pick < 0.3)] = 2.0**-140  # a binary32 subnormal
    if specials:
        c[(pick >= 0.3) & (pick < 0.33)] = np.inf
        c[(pick >= 0.33) & (pick < 0.35)] = np.nan
    return c


def problem(model: Model, m: int, n: int, steps: int, seed: int, mode: int, specials: bool = True):
    """A (m, k), B (k, n), C, SA (m, k/block), SB (k/block, n) for ``steps`` chained instructions."""
    rng = np.random.default_rng(seed)
    k = model.block_width * steps
    fs, block = model.scale_format, model.option("scale_block")
    A = _codes(rng, model.input_format, (m, k))
    B = _codes(rng, model.b_format, (k, n))
    if not specials:
        A[~np.isfinite(A)] = 0.0
        B[~np.isfinite(B)] = 0.0
    SA = scales(rng, fs, (m, k // block), mode)
    SB = scales(rng, fs, (k // block, n), mode if mode != 3 else 2)
    return A, B, c_values(rng, (m, n), specials), SA, SB


def reference_bits(model: Model, A, B, C, SA, SB) -> np.ndarray:
    return np.array([[R.dot_bits(model, list(A[i]), list(B[:, j]), float(C[i, j]), list(SA[i]), list(SB[:, j]))
                      for j in range(B.shape[1])] for i in range(A.shape[0])], dtype=np.uint32)


def _id(case) -> str:
    return "-".join(case).replace(" ", "")


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_gemm_and_dot_match_reference(case):
    """Every preset: a gemm of 1 to 3 chained instructions in the numpy engine, and the same as bf.dot,
    bit for bit the reference; one scale mode per case in turn (random, extremes, near 1, a NaN)."""
    device, kind, fa, fb = case
    model = preset(device, kind, fa, fb)
    assert scaled.supports(model)
    seed = CASES.index(case)
    A, B, C, SA, SB = problem(model, 3, 4, 1 + seed % 3, seed, seed % 4, specials=seed % 2 == 0)
    want = reference_bits(model, A, B, C, SA, SB)
    finite = all(np.isfinite(x).all() for x in (A, B, C))
    D = bf.gemm(A, B, C, model=model, scale_a=SA, scale_layout="kn", scale_b=SB)
    assert last_backend() == ("numba" if "numba" in engines(model, finite) else "numpy")
    np.testing.assert_array_equal(D.view(np.uint32), want)
    for backend in engines(model, finite):
        D = bf.gemm(A, B, C, model=model, scale_a=SA, scale_layout="kn", scale_b=SB, backend=backend)
        assert last_backend() == backend
        np.testing.assert_array_equal(D.view(np.uint32), want)
        d = bf.dot(A[:, None, :], B.T[None], C, model=model, scale_a=SA[:, None, :], scale_b=SB.T[None],
                   backend=backend)
        assert last_backend() == backend
        np.testing.assert_array_equal(d.view(np.uint32), want)


@pytest.mark.parametrize("kind", ["mxf8f6f4.block32", "mxf4nvf4.block16.ue4m3", "mxf4.block32"])
@pytest.mark.parametrize("mode", [0, 1, 3])
def test_scale_modes_every_kind(kind, mode):
    """The three scale shapes (per product; G = 16 with ue8m0; G = 16 with ue4m3) under each scale mode,
    on rows of two chained instructions; extremes put terms below e_zero and beyond binary32's range."""
    fa = "e4m3fn" if kind.startswith("mxf8") else "e2m1fn"
    model = preset("B200", kind, fa, fa)
    A, B, C, SA, SB = problem(model, 4, 3, 2, 100 + mode, mode, specials=False)
    want = reference_bits(model, A, B, C, SA, SB)
    for backend in engines(model):
        D = bf.gemm(A, B, C, model=model, scale_a=SA, scale_layout="kn", scale_b=SB, backend=backend)
        np.testing.assert_array_equal(D.view(np.uint32), want)


def test_zero_scales_and_nan_scales():
    """ue4m3 has a zero: a block with a zero scale is a zero term at e_zero (C alone survives), and a NaN
    scale gives the canonical NaN 0x7FFFFFFF even where all its products are zero; ue8m0 has no zero."""
    model = preset("B200", "mxf4nvf4.block16.ue4m3", "e2m1fn", "e2m1fn")
    A = np.zeros((2, 64))
    A[:, 0], A[:, 20] = 6.0, 1.0
    B = A.T.copy()
    SA = np.ones((2, 4))
    SA[0, 0] = 0.0  # row 0: the 36 of the first group scaled away
    SA[1, 3] = np.nan  # row 1: a NaN scale over zero products
    for backend in engines(model):
        D = bf.gemm(A, B, np.zeros((2, 2)), model=model, scale_a=SA, scale_layout="kn", scale_b=np.ones((4, 2)), backend=backend)
        assert last_backend() == backend
        assert D[0, 0] == 1.0 and D.view(np.uint32)[1, 0] == 0x7FFFFFFF and D.view(np.uint32)[1, 1] == 0x7FFFFFFF
    with pytest.raises(ArgumentError, match=r"scale_b\[0, 0\] = 0.0 is not a value of e8m0fnu"):
        mx = preset("B200", "mxf4.block32", "e2m1fn", "e2m1fn")
        bf.gemm(A, B, None, model=mx, scale_a=np.ones((2, 2)), scale_layout="kn", scale_b=np.zeros((2, 2)))


def test_cancelling_group_keeps_its_scales_exponent():
    """A group whose products cancel (6*6 - 6*6) is a zero term, but at its scales' exponent (2**20), not at
    e_zero: it sets e_max = 20, and F = 35 then cuts the next group's 2**-20 to nothing."""
    model = preset("B200", "mxf4.block32", "e2m1fn", "e2m1fn")
    A = np.zeros((1, 64))
    A[0, :2], A[0, 32] = 6.0, 1.0
    B = np.zeros((64, 1))
    B[:2, 0], B[32, 0] = (6.0, -6.0), 1.0
    SA, SB = np.array([[2.0**20, 2.0**-20]]), np.ones((2, 1))
    for backend in engines(model):
        D = bf.gemm(A, B, None, model=model, scale_a=SA, scale_layout="kn", scale_b=SB, backend=backend)
        assert D[0, 0] == 0.0
    assert bf.gemm(A, B, None, model=model, scale_a=np.array([[1.0, 2.0**-20]]), scale_layout="kn", scale_b=SB)[0, 0] == 2.0**-20
    np.testing.assert_array_equal(D.view(np.uint32), reference_bits(model, A, B, np.zeros((1, 1)), SA, SB))


def test_extreme_scales_exact():
    """ue8m0 at 2**127 * 2**127 times 6 * 6 overflows binary32: TowardZero with overflow='inf' gives
    infinity, as the reference; 2**-127 * 2**-127 puts the products below e_zero (a cut to +0)."""
    model = preset("RTX 5090", "mxf4.block32", "e2m1fn", "e2m1fn")
    A = np.full((1, 64), 6.0)
    for s, want in ((2.0**127, np.inf), (2.0**-127, 0.0)):
        for backend in engines(model):
            D = bf.gemm(A, A.T, None, model=model, scale_a=np.full((1, 2), s), scale_layout="kn", scale_b=np.full((2, 1), s),
                        backend=backend)
            assert D[0, 0] == np.float32(want)
        assert D.view(np.uint32)[0, 0] == reference_bits(model, A, A.T, np.zeros((1, 1)),
                                                          np.full((1, 2), s), np.full((2, 1), s))[0, 0]


def test_ieee_zero_signs_and_other_roundings():
    """Models beside the presets: IEEE signs of exact zeros under TowardNegative (a group that cancels keeps
    the scales' exponent; a group of -0 products is a negative zero term), and floor alignment with
    nearest-even results, per product and per group."""
    for kind, fa in (("mxf4nvf4.block16.ue4m3", "e2m1fn"), ("mxf8f6f4.block32", "e3m2fn")):
        base = preset("B200", kind, fa, fa)
        for changes in (dict(exact_zero="ieee", rounded_zero="signed", output_rounding="TowardNegative"),
                        dict(exact_zero="ieee", rounded_zero="signed", output_rounding="TiesToEven",
                             alignment="floor")):
            model = base.replace(name="", **changes)
            assert scaled.supports(model)
            A, B, C, SA, SB = problem(model, 3, 3, 2, 7, 2, specials=False)
            A[0] = -0.0
            A[1, ::2] = -A[1, 1::2]  # products that cancel in pairs
            B[:, 1] = 1.0
            C[:, 0] = -0.0
            D = bf.gemm(A, B, C, model=model, scale_a=SA, scale_layout="kn", scale_b=SB)
            assert last_backend() == "numpy"  # the compiled kernels write +0 for exact zeros only
            want = reference_bits(model, A, B, C, SA, SB)
            np.testing.assert_array_equal(D.view(np.uint32), want)
            if TORCH:
                D = bf.gemm(A, B, C, model=model, scale_a=SA, scale_layout="kn", scale_b=SB, backend="torch")
                np.testing.assert_array_equal(D.view(np.uint32), want)
            if NUMBA:
                with pytest.raises(ValueError, match="the compiled kernels do not run"):
                    bf.gemm(A, B, C, model=model, scale_a=SA, scale_layout="kn", scale_b=SB, backend="numba")


@pytest.mark.parametrize("kind,fa", [("mxf4nvf4.block16.ue4m3", "e2m1fn"), ("mxf8f6f4.block32", "e5m2")])
def test_floor_alignment_and_carry_bits_every_engine(kind, fa):
    """Beside the presets, with +0 exact zeros (so the compiled kernels run them too): floor alignment
    (negative terms cut toward minus infinity), and carry bits that wrap the sum, in each engine."""
    base = preset("B200", kind, fa, fa)
    for changes in (dict(alignment="floor"), dict(alignment="floor", carry_bits=1, output_rounding="TiesToEven")):
        model = base.replace(name="", **changes)
        A, B, C, SA, SB = problem(model, 3, 4, 2, 11, 2, specials=False)
        A[0], A[0, :2], B[:2, 0] = 0.0, 4.0, (4.0, -4.0)  # D[0, 0]: products that cancel set e_max ...
        C[:, 0] = -(1 + 2.0**-20) * 2.0**-30  # ... over a negative C whose last bits the cut drops
        want = reference_bits(model, A, B, C, SA, SB)
        for backend in engines(model):
            D = bf.gemm(A, B, C, model=model, scale_a=SA, scale_layout="kn", scale_b=SB, backend=backend)
            assert last_backend() == backend
            np.testing.assert_array_equal(D.view(np.uint32), want)


def test_reference_fallback_and_backends():
    """A model beyond the engines' float64 bounds (group-scaled e5m2: its group sums span 68 bits) runs in
    the exact reference, and says so; the engines that do not run it refuse it by name (torch, triton)."""
    base = preset("B200", "mxf4.block32", "e2m1fn", "e2m1fn")
    wide = base.replace(name="", input_format="e5m2")
    assert not scaled.supports(wide)
    A, B, C, SA, SB = problem(wide, 2, 2, 1, 3, 0, specials=False)
    D = bf.gemm(A, B, C, model=wide, scale_a=SA, scale_layout="kn", scale_b=SB)
    assert last_backend() == "reference"
    np.testing.assert_array_equal(D.view(np.uint32), reference_bits(wide, A, B, C, SA, SB))
    if TORCH:
        with pytest.raises(ValueError, match="the GPU engine does not run .* beyond the block-scaled engines'"):
            bf.gemm(A, B, C, model=wide, scale_a=SA, scale_layout="kn", scale_b=SB, backend="torch")
    with pytest.raises(ValueError, match="backend='triton' does not run .* exact bounds"):
        bf.gemm(A, B, C, model=wide, scale_a=SA, scale_layout="kn", scale_b=SB, backend="triton")


def test_short_k_pads_with_unit_scales():
    """k = 32 under a k = 64 instruction (block16): the plan pads with +0 products of scale 1, as the
    reference does."""
    model = preset("B200", "mxf4nvf4.block16.ue8m0", "e2m1fn", "e2m1fn")
    rng = np.random.default_rng(1)
    A, B = _codes(rng, F.e2m1fn, (3, 32)), _codes(rng, F.e2m1fn, (32, 2))
    SA, SB = scales(rng, F.e8m0fnu, (3, 2), 0), scales(rng, F.e8m0fnu, (2, 2), 2)
    C = c_values(rng, (3, 2), False)
    want = reference_bits(model, A, B, C, SA, SB)
    for backend in engines(model):
        D = bf.gemm(A, B, C, model=model, scale_a=SA, scale_layout="kn", scale_b=SB, backend=backend)
        np.testing.assert_array_equal(D.view(np.uint32), want)


HYPO = [("B200", "mxf4nvf4.block16.ue4m3", "e2m1fn", "e2m1fn"), ("RTX 5090", "mxf8f6f4.block32", "e5m2", "e2m3fn"),
        ("B200", "mxf4.block32", "e2m1fn", "e2m1fn")]


@pytest.mark.parametrize("case", HYPO, ids=_id)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_hypothesis_codes(case, data):
    """One dot product of one or two instructions, every code drawn by hypothesis (operands, scales, C)."""
    model = preset(*case)
    steps = data.draw(st.integers(1, 2))
    k, block = model.block_width * steps, model.option("scale_block")
    fa, fb, fs = model.input_format, model.b_format, model.scale_format
    a = F.decode(fa, np.array(data.draw(st.lists(st.integers(0, (1 << fa.bits) - 1), min_size=k, max_size=k))))
    b = F.decode(fb, np.array(data.draw(st.lists(st.integers(0, (1 << fb.bits) - 1), min_size=k, max_size=k))))
    top = 0xFF if fs.name == "e8m0fnu" else 0x7F
    sa = F.decode(fs, np.array(data.draw(st.lists(st.integers(0, top), min_size=k // block, max_size=k // block))))
    sb = F.decode(fs, np.array(data.draw(st.lists(st.integers(0, top), min_size=k // block, max_size=k // block))))
    c = float(np.uint32(data.draw(st.integers(0, 2**32 - 1))).view(np.float32))
    want = R.dot_bits(model, list(a), list(b), c, list(sa), list(sb))
    finite = np.isfinite(a).all() and np.isfinite(b).all() and np.isfinite(c)
    for backend in engines(model, finite):
        d = bf.dot(a, b, c, model=model, scale_a=sa, scale_b=sb, backend=backend)
        assert last_backend() == backend
        assert int(d.view(np.uint32)) == want


def test_elementwise_group_block_matches_reference():
    """The elementwise block (:func:`scaled.block`, which numpy runs for non-finite operands and torch can run)
    on group-scaled presets, against the reference, beside the matrix-product path bf.gemm takes; and
    backend='numba' says that the compiled kernels leave group-scaled models to numpy."""
    from blockfma.engine.api import finish

    for kind in ("mxf4nvf4.block16.ue4m3", "mxf4.block32"):
        model = preset("RTX 5090", kind, "e2m1fn", "e2m1fn")
        A, B, C, SA, SB = problem(model, 4, 3, 1, 21, 3 if kind.endswith("ue4m3") else 1)
        block = model.option("scale_block")
        sa, sb = np.repeat(SA, block, axis=1), np.repeat(SB.T, block, axis=1)
        with np.errstate(invalid="ignore", over="ignore"):
            d = scaled.block(np, model, A[:, None, :], B.T[None], C, sa[:, None, :], sb[None])
        np.testing.assert_array_equal(finish(model, d).view(np.uint32), reference_bits(model, A, B, C, SA, SB))
        if NUMBA:
            with pytest.raises(ValueError, match="group-scaled ones run in the numpy engine"):
                bf.gemm(A, B, C, model=model, scale_a=SA, scale_layout="kn", scale_b=SB, backend="numba")


@pytest.mark.parametrize("kind", ["mxf8f6f4.block32", "mxf4nvf4.block16.ue4m3"])
def test_empty_gemms(kind):
    """No rows or no columns: an empty result of the right shape, in each engine."""
    model = preset("B200", kind, "e2m1fn", "e2m1fn")
    L, nb = model.block_width, model.block_width // model.option("scale_block")
    for backend in engines(model):
        D = bf.gemm(np.zeros((0, L)), np.zeros((L, 3)), None, model=model, scale_a=np.ones((0, nb)),
                    scale_layout="kn", scale_b=np.ones((nb, 3)), backend=backend)
        assert D.shape == (0, 3) and D.dtype == np.float32
        D = bf.gemm(np.zeros((2, L)), np.zeros((L, 0)), None, model=model, scale_a=np.ones((2, nb)),
                    scale_layout="kn", scale_b=np.ones((nb, 0)), backend=backend)
        assert D.shape == (2, 0)


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=_id)
def test_more_rows_every_engine(case):
    """More rows of every preset, every scale mode, one to three instructions, each engine, finite and not."""
    model = preset(*case)
    for seed in range(4):
        A, B, C, SA, SB = problem(model, 6, 5, 1 + seed % 3, 1000 + 7 * CASES.index(case) + seed, seed,
                                  specials=seed % 2 == 1)
        want = reference_bits(model, A, B, C, SA, SB)
        finite = all(np.isfinite(x).all() for x in (A, B, C))
        for backend in engines(model, finite):
            D = bf.gemm(A, B, C, model=model, scale_a=SA, scale_layout="kn", scale_b=SB, backend=backend)
            np.testing.assert_array_equal(D.view(np.uint32), want, err_msg=f"{case} seed {seed} {backend}")


@pytest.mark.skipif(not TORCH, reason="the torch engine needs torch")
def test_torch_engine_refuses_what_does_not_fit(monkeypatch):
    """The GPU engine's block-scaled path counts A, B, their per-product scales, C and D before anything
    moves, and refuses a call that does not fit the device's free memory, with the sizes and the fix."""
    from blockfma.engine import triton

    model = preset("B200", "mxf4nvf4.block16.ue4m3", "e2m1fn", "e2m1fn")
    A, B, C, SA, SB = problem(model, 3, 4, 1, 5, 0, specials=False)
    monkeypatch.setattr(triton, "free_bytes", lambda device: 1024)
    with pytest.raises(MemoryError, match=r"gemm 3x64x4 on cpu needs about .* scale per product.* split the call"):
        bf.gemm(A, B, C, model=model, scale_a=SA, scale_layout="kn", scale_b=SB, backend="torch")


def test_dask_arrays_with_scales_run_tile_by_tile():
    """Block-scaled GEMMs on dask operands: the scales reach every tile (tests/test_distributed.py holds the
    chunked case to the in-memory call), and a missing scale is named before any tile runs."""
    da = pytest.importorskip("dask.array", reason="dask is not installed")
    model = preset("B200", "mxf4.block32", "e2m1fn", "e2m1fn")
    A, B, C, SA, SB = problem(model, 2, 2, 1, 3, 0, specials=False)
    want = bf.gemm(A, B, C, model=model, scale_a=SA, scale_layout="kn", scale_b=SB)
    got = bf.gemm(da.from_array(A), B, C, model=model, scale_a=SA, scale_layout="kn", scale_b=SB)
    got = got.compute(scheduler="synchronous")
    assert (got.view(np.uint32) == want.view(np.uint32)).all()
    with pytest.raises(ArgumentError, match=r"scale_b=None: .* is block-scaled"):
        bf.gemm(da.from_array(A), B, C, model=model, scale_a=SA)
