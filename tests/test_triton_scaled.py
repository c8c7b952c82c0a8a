"""The block-scaled Triton kernel (backend="triton" with scale_a/scale_b: blockfma.engine.triton_scaled), run
by Triton's interpreter on the CPU, held bit for bit (uint32 codes) to the exact reference
(blockfma.reference.dot_bits, Fractions) and to the numpy engine on every block-scaled preset of the B200 and
the RTX 5090: one and two chained instructions, scales at their extremes (ue8m0 2**-127 and 2**127, ue4m3 0,
its least subnormal 2**-9 and 448), zero and NaN scales, zero operands of both signs, C's special values,
hypothesis over random codes; every block-scaled preset of every device is run or refused by name."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

pytest.importorskip("torch", reason="backend='triton' takes torch tensors: torch is not installed")
pytest.importorskip("triton", reason="triton is not installed (pip install 'blockfma[triton]')")

import triton.language as tl
from hypothesis import HealthCheck, given, settings, strategies as st

import blockfma as bf
from blockfma import formats as F, reference as R
from blockfma.arguments import ArgumentError
from blockfma.devices import devices as all_devices
from blockfma.engine import last_backend, scaled, triton as tr
from blockfma.model import Model
from helpers import block_scaled_rows, triton_mode

INTERPRETED_AT_START = tr.interpreting()  # triton imported in interpreter mode: no GPU compilation here

F8F6F4 = ("e4m3fn", "e5m2", "e3m2fn", "e2m3fn", "e2m1fn")
PREFIX = {"B200": "tcgen05", "RTX 5090": "mma"}
# (instruction without its device prefix, A, B, scale block, scale format): every block-scaled preset
KINDS = ([("mxf8f6f4.block32", a, b, 32, "e8m0fnu") for a in F8F6F4 for b in F8F6F4]
         + [("mxf4.block32", "e2m1fn", "e2m1fn", 32, "e8m0fnu"),
            ("mxf4nvf4.block32", "e2m1fn", "e2m1fn", 32, "e8m0fnu"),
            ("mxf4nvf4.block16.ue8m0", "e2m1fn", "e2m1fn", 16, "e8m0fnu"),
            ("mxf4nvf4.block16.ue4m3", "e2m1fn", "e2m1fn", 16, "ue4m3")])
CASES = [(device, *kind) for device in PREFIX for kind in KINDS]


@pytest.fixture(autouse=True)
def interpreter(request, monkeypatch):
    """Triton's interpreter on (off for the tests marked gpu), one mode per process (helpers.triton_mode)."""
    triton_mode(monkeypatch, bool(request.node.get_closest_marker("gpu")))


def preset(device: str, kind: str, fa: str, fb: str) -> Model:
    return bf.device(device).model((fa, fb), "fp32", instruction=f"{PREFIX[device]}.{kind}")


def reference_bits(model: Model, A, B, C, SA, SB) -> np.ndarray:
    return np.array([[R.dot_bits(model, list(A[i]), list(B[:, j]), float(C[i, j]), list(SA[i]), list(SB[:, j]))
                      for j in range(B.shape[1])] for i in range(A.shape[0])], dtype=np.uint32)


def triton_bits(model: Model, A, B, C, SA, SB) -> np.ndarray:
    D = bf.gemm(A, B, C, model=model, scale_a=SA, scale_layout="kn", scale_b=SB, backend="triton")
    assert last_backend() == "triton"
    assert D.dtype == np.float32
    return D.view(np.uint32)


def assert_general_path_agrees(model: Model, got: np.ndarray, A, B, C, SA, SB) -> None:
    """The general path's results (fast=False) are ``got``'s bits, NaN where ``got`` is NaN (whose pattern
    bf.gemm writes afterwards, per the model)."""
    D = tr.gemm(model, A, B, C, SA, SB, fast=False).astype(np.float32)
    nan = np.isnan(got.view(np.float32))
    np.testing.assert_array_equal(np.isnan(D), nan)
    np.testing.assert_array_equal(D.view(np.uint32)[~nan], got[~nan])


def check(model: Model, A, B, C, SA, SB, general: bool = False) -> np.ndarray:
    """The kernel's bits (bf.gemm: the fast path where it holds), held to the exact reference and to the numpy
    engine; ``general``: and to the general path's (fast=False: no longer bf.gemm's default)."""
    got = triton_bits(model, A, B, C, SA, SB)
    if general:
        assert tr.scaled_fast_constants(model)["FAST"]
        assert_general_path_agrees(model, got, A, B, C, SA, SB)
    np.testing.assert_array_equal(got, reference_bits(model, A, B, C, SA, SB))
    want = bf.gemm(A, B, C, model=model, scale_a=SA, scale_layout="kn", scale_b=SB, backend="numpy").view(np.uint32)
    np.testing.assert_array_equal(got, want)
    return got


def _id(case) -> str:
    return "-".join(str(x) for x in case).replace(" ", "")


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_every_preset_matches_reference(case):
    """Every block-scaled preset, one and two chained instructions (K = L, 2L), m and n from 3 to 8: random
    codes (fp8 NaN and infinities in even seeds), scales random, spread, tiny or at their extremes (a NaN
    in every third seed), C over a wide range with zeros and a subnormal; bf.gemm's fast path held to the
    exact reference and the numpy engine, and to the general path on one instruction."""
    device, kind, fa, fb, block, fs = case
    model = preset(device, kind, fa, fb)
    assert tr.supports(model), tr.unsupported_reason(model)
    seed = zlib.crc32(_id(case).encode())
    for steps in (1, 2):
        m = 3 + (seed + steps) % 6
        A, B, C, SA, SB = block_scaled_rows((kind, fa, fb, block, fs), m, steps * model.block_width, seed + steps)
        n = 3 + seed % 6
        check(model, A, B[:, :n], C[:, :n], SA, SB[:, :n], general=steps == 1)


def _scale_cases():
    return [preset("B200", "mxf8f6f4.block32", "e4m3fn", "e5m2"),
            preset("RTX 5090", "mxf4.block32", "e2m1fn", "e2m1fn"),
            preset("B200", "mxf4nvf4.block16.ue4m3", "e2m1fn", "e2m1fn")]


@pytest.mark.parametrize("model", _scale_cases(), ids=lambda m: m.name)
def test_scale_extremes_zero_and_nan(model):
    """Scales at their extremes (ue8m0: 2**-127, 2**127; ue4m3: 0, 2**-9, 448), zero scales and one NaN
    scale per operand (its row / column of D is NaN: the hardware's rule, before every other)."""
    fs, block, L = model.scale_format, model.option("scale_block"), model.block_width
    e8 = fs.name == "e8m0fnu"
    rng = np.random.default_rng(5)
    k, m, n = 2 * L, 6, 5
    A = F.decode(model.input_format, rng.integers(0, 1 << model.input_format.bits, (m, k)))
    B = F.decode(model.b_format, rng.integers(0, 1 << model.b_format.bits, (k, n)))
    A[~np.isfinite(A)], B[~np.isfinite(B)] = 0.0, 0.0
    extremes = [2.0**-127, 2.0**127, 1.0] if e8 else [0.0, 2.0**-9, 448.0, 1.0]
    SA = rng.choice(extremes, (m, k // block))
    SB = rng.choice(extremes, (k // block, n))
    SA[0] = 2.0**127 if e8 else 448.0  # a row all at the top ...
    SB[:, 0] = 2.0**127 if e8 else 448.0
    SA[1] = 2.0**-127 if e8 else 2.0**-9  # ... and one all at the bottom
    SB[:, 1] = 2.0**-127 if e8 else 2.0**-9
    SA[2, 0] = np.nan
    SB[-1, 3] = np.nan
    C = np.array(rng.choice([0.0, -0.0, 1.0, -3.5, 2.0**-140, 2.0**100], (m, n)), dtype=np.float64)
    got = check(model, A, B, C, SA, SB, general=True)
    D = got.view(np.float32)
    assert np.isnan(D[2]).all() and np.isnan(D[:, 3]).all()
    assert not np.isnan(np.delete(np.delete(D, 2, axis=0), 3, axis=1)).any()


@pytest.mark.parametrize("model", _scale_cases(), ids=lambda m: m.name)
def test_scales_beyond_binary32_by_hand(model):
    """One product 1.5 * 2 = 3 in the first scale block, its scales far outside binary32's range, worked out by
    hand: 2**127 against 2**-127 cancels exactly (3), 2**127 * 2**-60 is 3 * 2**67, 2**-60 * 2**-60 is
    3 * 2**-120 (a normal: exact), 2**-60 * 2**-127 lies below e_zero (+0); beside C = -2 or 0.25 a term
    of 3 * 2**-127 or 3 * 2**-60 is cut away whole.  ue4m3: 448, 2**-6, 2**-9 and a zero scale (D = C)."""
    e8 = model.scale_format.name == "e8m0fnu"
    block, k = model.option("scale_block"), model.block_width
    A, B = np.zeros((4, k)), np.zeros((k, 2))
    A[:, 0], B[0, :] = 1.5, 2.0
    big, small, mid = (2.0**127, 2.0**-127, 2.0**-60) if e8 else (448.0, 2.0**-9, 2.0**-6)
    SA, SB = np.ones((4, k // block)), np.ones((k // block, 2))
    SA[:3, 0] = [big, mid, 1.0 if e8 else 0.0]
    SB[0, :] = [small, mid]
    C = np.array([[0.0, 0.0], [0.0, 0.0], [-2.0, -2.0], [0.25, 0.25]])
    if e8:
        want = [[3.0, 3 * 2.0**67], [0.0, 3 * 2.0**-120], [-2.0, -2.0], [0.25, 0.25]]
    else:
        want = [[2.625, 21.0], [3 * 2.0**-15, 3 * 2.0**-12], [-2.0, -2.0], [0.25 + 3 * 2.0**-9, 0.25 + 3 * 2.0**-6]]
    got = triton_bits(model, A, B, C, SA, SB)
    np.testing.assert_array_equal(got, np.array(want, dtype=np.float32).view(np.uint32))
    np.testing.assert_array_equal(got, reference_bits(model, A, B, C, SA, SB))


@pytest.mark.parametrize("model", _scale_cases(), ids=lambda m: m.name)
def test_zero_operands_and_c_specials(model):
    """All-zero blocks of both signs (the exact zero's sign: +0 for these presets, exact_zero='positive'),
    C = +0, -0, subnormal, +inf, -inf, NaN; an infinite or NaN operand (fp8 formats) under a zero scale
    stays special."""
    L, block = model.block_width, model.option("scale_block")
    k = L
    A = np.zeros((4, k))
    A[1] = -0.0
    A[2, :3] = [-0.0, 0.0, -0.0]
    A[3, 0] = 1.0
    B = np.full((k, 6), -0.0)
    B[0, 5] = 1.0
    if model.input_format.name == "e4m3fn":
        A[3, 1] = np.nan
    if model.b_format.has_infinities:
        B[2, 4] = -np.inf  # row 2's products with it are -0 * -inf: NaN
        B[3, 3] = np.inf
    SA = np.ones((4, k // block))
    SA[3, 0] = 0.0 if model.scale_format.name == "ue4m3" else 2.0**-127
    SB = np.ones((k // block, 6))
    C = np.array([[0.0, -0.0, 2.0**-140, np.inf, -np.inf, np.nan]] * 4)
    check(model, A, B, C, SA, SB, general=True)


def _codes(draw, fmt, shape, specials):
    codes = np.array(draw(st.lists(st.integers(0, (1 << fmt.bits) - 1), min_size=int(np.prod(shape)),
                                   max_size=int(np.prod(shape))))).reshape(shape)
    x = F.decode(fmt, codes)
    if not specials:
        x[~np.isfinite(x)] = 0.0
    return x


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_random_codes(data):
    """Hypothesis over the codes of A, B, their scales (NaN included) and C (binary32 bit patterns) on a
    preset of each scale shape: the kernel's bits are the reference's and the numpy engine's."""
    device = data.draw(st.sampled_from(sorted(PREFIX)))
    kind = data.draw(st.sampled_from(KINDS))
    model = preset(device, *kind[:3])
    fs, block = model.scale_format, model.option("scale_block")
    m, n = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3))
    k = model.block_width
    specials = data.draw(st.booleans())
    A = _codes(data.draw, model.input_format, (m, k), specials)
    B = _codes(data.draw, model.b_format, (k, n), specials)
    SA = F.decode(fs, np.array(data.draw(st.lists(st.integers(0, (1 << fs.bits) - 1), min_size=m * k // block,
                                                   max_size=m * k // block))).reshape(m, k // block))
    SB = F.decode(fs, np.array(data.draw(st.lists(st.integers(0, (1 << fs.bits) - 1), min_size=n * k // block,
                                                   max_size=n * k // block))).reshape(k // block, n))
    C = np.array(data.draw(st.lists(st.integers(0, 2**32 - 1), min_size=m * n, max_size=m * n)),
                 dtype=np.uint32).view(np.float32).astype(np.float64).reshape(m, n)
    if not specials:
        C[~np.isfinite(C)] = 0.0
    check(model, A, B, C, SA, SB, general=True)


def _block_scaled_presets():
    for dev in all_devices():
        for ins in dev.instructions:
            for model in ins.models.values():
                if model.block_scaled:
                    yield dev.name, ins.name, model


def test_census_every_block_scaled_preset_runs_or_is_refused_by_name():
    """Every block-scaled preset of every device: the kernel runs it (all of today's), or backend='triton'
    refuses it with the kernel's reason; a model beyond the exact bounds (group-scaled e5m2: group sums of
    68 bits) is refused by name, and backend='auto' never moves a block-scaled call to the kernel."""
    found = list(_block_scaled_presets())
    assert len(found) >= 2 * len(KINDS)  # the B200's and the RTX 5090's at least
    refused = {(d, i): tr.unsupported_reason(mdl) for d, i, mdl in found if not tr.supports(mdl)}
    assert refused == {}, refused
    wide = preset("B200", "mxf4.block32", "e2m1fn", "e2m1fn").replace(name="", input_format="e5m2")
    assert "exact bounds" in tr.unsupported_reason(wide)
    A, B, C = np.zeros((2, 64)), np.zeros((64, 2)), np.zeros((2, 2))
    with pytest.raises(ValueError, match=r"backend='triton' does not run .*exact bounds"):
        bf.gemm(A, B, C, model=wide, scale_a=np.ones((2, 2)), scale_layout="kn", scale_b=np.ones((2, 2)), backend="triton")
    model = preset("B200", "mxf4nvf4.block16.ue4m3", "e2m1fn", "e2m1fn")
    bf.gemm(A, B, C, model=model, scale_a=np.ones((2, 4)), scale_layout="kn", scale_b=np.ones((4, 2)))
    assert last_backend() in ("numpy", "numba")
    with pytest.raises(ValueError, match="backend='triton' runs bf.gemm only"):
        bf.dot(A, B.T, model=model, scale_a=np.ones((2, 4)), scale_b=np.ones((2, 4)), backend="triton")


def test_tensor_entry_points_and_sizes(monkeypatch):
    """scaled_gemm_tensors refuses scales of the wrong shape by name; gemm_tensors refuses a block-scaled
    model (it takes no scales); a GEMM beyond the device's free memory is refused before anything moves,
    counting A, B and their scales."""
    import torch

    model = preset("B200", "mxf8f6f4.block32", "e4m3fn", "e4m3fn")
    a, b, c = torch.zeros((3, 64)), torch.zeros((64, 2)), torch.zeros((3, 2))
    with pytest.raises(ArgumentError, match=r"^sa=<shape \(3, 1\)>: must have shape \(3, 2\) with a \(3, 64\) \(one "
                       r"scale per 32 products\)$"):
        tr.scaled_gemm_tensors(model, a, b, c, torch.ones((3, 1)), torch.ones((2, 2)))
    with pytest.raises(ArgumentError, match=r"^sb=<shape \(2, 3\)>: must have shape \(2, 2\)"):
        tr.scaled_gemm_tensors(model, a, b, c, torch.ones((3, 2)), torch.ones((2, 3)))
    with pytest.raises(ArgumentError, match=r"^a=<shape \(3, 40\)>: k = 40 must be a multiple of the scale block 32$"):
        tr.scaled_gemm_tensors(model, a[:, :40], b[:40], c, torch.ones((3, 1)), torch.ones((1, 2)))
    with pytest.raises(ArgumentError, match="is block-scaled"):
        tr.gemm_tensors(model, a, b, c)
    d = tr.scaled_gemm_tensors(model, a, b, c, torch.ones((3, 2)), torch.ones((2, 2)))
    assert d.shape == (3, 2) and bool((d == 0).all())
    monkeypatch.setattr(tr, "free_bytes", lambda device: 1024)
    with pytest.raises(MemoryError, match="A, B and their scales"):
        bf.gemm(np.zeros((30, 64)), np.zeros((64, 30)), model=model, scale_a=np.ones((30, 2)),
                scale_layout="kn", scale_b=np.ones((2, 30)), backend="triton")


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES[::7], ids=_id)
def test_larger_shapes(case):
    """Several tiles each way and four chained instructions, against the numpy engine."""
    device, kind, fa, fb, block, fs = case
    model = preset(device, kind, fa, fb)
    A, B, C, SA, SB = block_scaled_rows((kind, fa, fb, block, fs), 19, 4 * model.block_width, 11)
    D = bf.gemm(A, B, C, model=model, scale_a=SA, scale_layout="kn", scale_b=SB, backend="triton")
    want = bf.gemm(A, B, C, model=model, scale_a=SA, scale_layout="kn", scale_b=SB, backend="numpy")
    np.testing.assert_array_equal(D.view(np.uint32), want.view(np.uint32))


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available() and not INTERPRETED_AT_START


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason="no CUDA GPU visible to torch (or TRITON_INTERPRET was set before triton "
                    "was imported)")
@pytest.mark.parametrize("case", [c for c in CASES if c[0] == "B200"][::4], ids=_id)
def test_gpu_kernel_equals_cpu_engine(case):
    """The compiled kernel on a CUDA GPU, bit for bit against the numpy engine, several tiles each way."""
    device, kind, fa, fb, block, fs = case
    model = preset(device, kind, fa, fb)
    A, B, C, SA, SB = block_scaled_rows((kind, fa, fb, block, fs), 70, 8 * model.block_width, 23)
    D = bf.gemm(A, B, C, model=model, scale_a=SA, scale_layout="kn", scale_b=SB, backend="triton")
    assert last_backend() == "triton"
    want = bf.gemm(A, B, C, model=model, scale_a=SA, scale_layout="kn", scale_b=SB, backend="numpy")
    np.testing.assert_array_equal(D.view(np.uint32), want.view(np.uint32))
    assert scaled.supports(model)


@pytest.mark.parametrize("model", _scale_cases(), ids=lambda m: m.name)
@pytest.mark.parametrize("changes", [dict(exact_zero="ieee", rounded_zero="signed"),
                                     dict(exact_zero="ieee", rounded_zero="signed", output_rounding="rd"),
                                     dict(alignment="floor", output_rounding="rne")], ids=str)
def test_variants_beyond_the_presets(model, changes):
    """Options no preset has yet, the same kernel: IEEE signs of exact zeros (a group's sign - where all its
    products are; toward minus infinity -0 where any term is), cuts toward minus infinity, rounding to
    nearest; on blocks of zeros of both signs, sums that cancel and random codes."""
    variant = model.replace(name="", **changes)
    assert tr.supports(variant) and scaled.supports(variant)
    rng = np.random.default_rng(zlib.crc32(f"{model.name} {changes}".encode()))
    k, block = 2 * model.block_width, model.option("scale_block")
    m, n = 6, 5
    A = F.decode(model.input_format, rng.integers(0, 1 << model.input_format.bits, (m, k)))
    B = F.decode(model.b_format, rng.integers(0, 1 << model.b_format.bits, (k, n)))
    A[~np.isfinite(A)], B[~np.isfinite(B)] = 0.0, 0.0
    A[0], A[1] = -0.0, 0.0  # rows of zeros: the sign of each product is the xor of its factors'
    A[2, 1::2] = -A[2, 0::2]  # with B's pairs equal, products that cancel in pairs
    B[1::2, 0] = B[0::2, 0]
    B[:, 1] = -0.0
    SA = rng.choice([0.5, 1.0, 2.0] if model.scale_format.name == "e8m0fnu" else [0.0, 0.5, 1.0, 1.75], (m, k // block))
    SB = rng.choice([0.5, 1.0, 2.0], (k // block, n))
    C = np.array(rng.choice([0.0, -0.0, 1.0, -0.75, 2.0**-130], (m, n)), dtype=np.float64)
    C[:3, :2] = [[-0.0, -0.0], [-0.0, -0.0], [0.0, -0.0]]  # -0: the zero rows' results are -0 only by the rule
    D = check(variant, A, B, C, SA, SB, general=tr.scaled_fast_constants(variant)["FAST"]).view(np.float32)
    assert (np.signbit(D) & (D == 0)).any() == (variant.exact_zero == "ieee")  # the rule was exercised


@pytest.mark.parametrize("k", [16, 32, 96])
def test_short_k_pads_with_unit_scales(k):
    """K short of the k = 64 instruction (16, 32) or between two (96): the plan pads with +0 products of scale
    1, as the reference does; the kernel reads no scale past K."""
    model = preset("B200", "mxf4nvf4.block16.ue4m3", "e2m1fn", "e2m1fn")
    A, B, C, SA, SB = block_scaled_rows(("mxf4nvf4.block16.ue4m3", "e2m1fn", "e2m1fn", 16, "ue4m3"), 3, k, k)
    check(model, A, B[:, :4], C[:, :4], SA, SB[:, :4])


# ---- the fast path (blockfma.engine.triton_scaled, its fast path: scaled_fast_constants) ---------------------


def test_fast_path_taken_by_every_preset_and_refused_beyond_its_bounds(monkeypatch):
    """Every block-scaled preset takes the fast path (U: a scale block of products, or a group); the kernel is
    launched with FAST by bf.gemm; models beyond the proved bounds are refused by name (fast=True) and run on
    the general path by default: IEEE exact zeros (no term signs kept), bf16 operands (subnormals below
    binary32's normals), fp16 operands with ue4m3 scales (22 + 8 significand bits)."""
    found = list(_block_scaled_presets())
    assert found
    for _, _, mdl in found:
        fc = tr.scaled_fast_constants(mdl)
        assert fc["FAST"] and fc["WHY"] is None, (mdl.name, fc)
        assert fc["U"] == (mdl.option("scale_group") or min(mdl.option("scale_block"), mdl.block_width))
    seen = []
    real = tr._kernel

    class Spy:
        def __init__(self, kernel):
            self.kernel = kernel

        def __getitem__(self, grid):
            launch = self.kernel[grid]

            def run(*args, **kw):
                seen.append(kw["S"].BLOCK.FAST)
                return launch(*args, **kw)
            return run

    monkeypatch.setattr(tr, "_kernel", lambda: Spy(real()))
    model = preset("B200", "mxf4nvf4.block16.ue4m3", "e2m1fn", "e2m1fn")
    args = block_scaled_rows(("mxf4nvf4.block16.ue4m3", "e2m1fn", "e2m1fn", 16, "ue4m3"), 2, 64, 1)
    A, B, C, SA, SB = args
    check(model, A, B[:, :2], C[:, :2], SA, SB[:, :2])
    assert seen == [True]
    ieee = model.replace(name="", exact_zero="ieee", rounded_zero="signed")
    assert "exact_zero" in tr.scaled_fast_constants(ieee)["WHY"]
    check(ieee, A, B[:, :2], C[:, :2], SA, SB[:, :2])
    assert seen == [True, False]
    with pytest.raises(ArgumentError, match="fast"):
        tr.gemm(ieee, A, B, C, SA, SB, fast=True)
    for bad in ("yes", 0, 1):  # a switch, not a number that happens to compare equal to one
        with pytest.raises(ArgumentError, match=f"fast={bad!r}: must be True, False or None"):
            tr.gemm(model, A, B, C, SA, SB, fast=bad)
    base = preset("B200", "mxf8f6f4.block32", "e4m3fn", "e4m3fn")
    bf16 = base.replace(name="", input_format="bf16", b_input_format=None)
    assert "exact bounds" in tr.scaled_fast_constants(bf16)["WHY"]  # the kernel runs it on neither path
    wide = _with_ue4m3(base).replace(name="", input_format="fp16", b_input_format=None)
    assert tr.supports(wide) and "22 + 2 x 4 bits" in tr.scaled_fast_constants(wide)["WHY"]
    fp16 = base.replace(name="", input_format="fp16", b_input_format=None)  # 11 + 11 + 2 x 1 bits: exactly 24
    assert tr.scaled_fast_constants(fp16)["FAST"]
    rng = np.random.default_rng(16)
    A = F.decode(F.get("fp16"), rng.integers(0, 0x7C00, (3, 32)))  # finite and positive ...
    B = F.decode(F.get("fp16"), rng.integers(0, 0x7C00, (32, 2)))
    A[0, ::2] *= -1  # ... and negative
    check(fp16, A, B, np.array([[0.0, 2.0**-140]] * 3), 2.0 ** rng.integers(-127, 128, (3, 1)).astype(float),
          2.0 ** rng.integers(-20, 20, (1, 2)).astype(float), general=True)
    assert tr.scaled_fast_constants(_with_ue4m3(base))["FAST"]  # 4 + 4 + 2 x 4 bits


def _with_ue4m3(model: Model) -> Model:
    """``model`` with ue4m3 scales (no preset has them per product: mxf8f6f4 with ue4m3 is a variant)."""
    return model.replace(name="", options=tuple((key, "ue4m3" if key == "scale_format" else v)
                                                for key, v in model.options))


@pytest.mark.parametrize("model", _scale_cases() + [_with_ue4m3(preset("B200", "mxf8f6f4.block32", "e4m3fn",
                                                                      "e2m3fn"))], ids=lambda m: m.name)
@pytest.mark.parametrize("changes", [{}, dict(alignment="floor"), dict(e_zero=-12)], ids=str)
def test_terms_at_the_cut(model, changes):
    """Rows whose terms land just below, at and just above the cut 2**(e_max - F): C = ±2**(F + t) sets e_max
    (t from -3 to 5), products about 1 under scales whose products are about 1 (2**-127 times 2**127 among
    them, ue4m3's 0, 2**-9 and 448), so terms from 2**-4 to 2**6 units are cut away, kept whole or in part;
    a row of products cancelling in pairs (group sums of 0 at the scales' exponent) and zero C; ue4m3: a row
    whose only products sit under a zero scale beside C = 2**-140 (those are zero terms at e_zero, not at
    their scales' exponent, which would cut C away); ue8m0: a row of tiny terms, a zero product among them,
    beside C = 2**-140.  The presets (and mxf8f6f4 with ue4m3 scales), cut toward minus infinity (rounding
    toward zero shows a -1 of the last unit), and an e_zero above the tiny terms (zero terms set e_max).  Fast
    path, general path, exact reference and numpy engine agree."""
    model = model.replace(name="", **changes) if changes else model
    assert tr.scaled_fast_constants(model)["FAST"]
    e8 = model.scale_format.name == "e8m0fnu"
    rng = np.random.default_rng(zlib.crc32(f"{model.name} {changes}".encode()))
    L, block, Fb = model.block_width, model.option("scale_block"), model.fraction_bits
    k, m, n = L, 8, 4
    A = F.decode(model.input_format, rng.integers(0, 1 << model.input_format.bits, (m, k)))
    B = F.decode(model.b_format, rng.integers(0, 1 << model.b_format.bits, (k, n)))
    A[~np.isfinite(A)], B[~np.isfinite(B)] = 0.0, 0.0
    A[0, 1::2] = -A[0, 0::2]
    B[1::2, :] = B[0::2, :]
    if e8:
        SA = 2.0 ** rng.integers(-2, 3, (m, k // block)).astype(float)
        SB = 2.0 ** rng.integers(-2, 3, (k // block, n)).astype(float)
        SA[1:3], SB[:, 1] = 2.0**-127, 2.0**127
        SA[3], SB[:, 2] = 2.0**127, 2.0**-127
    else:
        choices = [0.0, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.0**-9, 448.0]
        SA, SB = rng.choice(choices, (m, k // block)), rng.choice(choices, (k // block, n))
    C = rng.choice([-1.0, 1.0], (m, n)) * 2.0 ** (Fb + rng.integers(-3, 6, (m, n)).astype(float))
    C[0, :2] = [0.0, 2.0**-140]
    if e8:
        A[2, 5], C[2] = 0.0, 2.0**-140
    else:
        A[1], A[1, :block] = 0.0, 1.0
        SA[1, 0], SB[0], C[1] = 0.0, 448.0, 2.0**-140
    check(model, A, B, C, SA, SB, general=True)


@pytest.mark.filterwarnings("ignore:invalid value encountered in cast")  # the int32 fault's overflow, on numpy
def test_injected_faults_are_caught(monkeypatch):
    """The fast path's cut with one of its two exact scalings dropped, or converted to int32 rather than int64
    (mxf4: F = 35, terms up to 2**37 units), gives other bits than the exact reference, so the tests above
    would catch it; the kernel as written gives the reference's."""
    import sys

    import triton

    model = preset("B200", "mxf4.block32", "e2m1fn", "e2m1fn")
    A, B, C, SA, SB = block_scaled_rows(("mxf4.block32", "e2m1fn", "e2m1fn", 32, "e8m0fnu"), 3, 64, 4)
    B, C, SB = B[:, :3], C[:, :3], SB[:, :3]
    want = reference_bits(model, A, B, C, SA, SB)
    tr._kernel()  # the kernel modules, imported in this process's mode
    module = sys.modules["blockfma.engine.triton_scaled"]
    kept = module._fast_term

    @triton.jit
    def one_scaling(q, f1, f2, FLOOR: tl.constexpr):
        return (q * f1).to(tl.int64)

    @triton.jit
    def in_int32(q, f1, f2, FLOOR: tl.constexpr):
        return ((q * f1) * f2).to(tl.int32).to(tl.int64)

    for fault in (one_scaling, in_int32):
        monkeypatch.setattr(module, "_fast_term", fault)
        got = tr.gemm(model, A, B, C, SA, SB, fast=True).astype(np.float32).view(np.uint32)
        assert (got != want).any(), fault
    monkeypatch.setattr(module, "_fast_term", kept)  # reverted (not undo(): it would drop TRITON_INTERPRET too)
    got = tr.gemm(model, A, B, C, SA, SB, fast=True).astype(np.float32).view(np.uint32)
    np.testing.assert_array_equal(got, want)
