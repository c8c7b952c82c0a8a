"""bf.torch.emulate learns MX (issue 23 part 6): block-scaled torch._scaled_mm and F.scaled_mm (MXFP8, MXFP4,
NVFP4) run the B200's tcgen05 block_scale models chained over K; blockfma.torch.mx's layouts and quantisers.

Oracles: ``bf.gemm`` with the named preset on the same codes and scales, decoded by ml_dtypes (not by the
code under test), compared as bit patterns; the cuBLAS documentation's swizzle formula written as a loop;
exact sums of powers of two (Fractions); a chain worked by hand."""

from __future__ import annotations

import runpy
import sys
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import blockfma as bf  # noqa: E402
from blockfma.arguments import ArgumentError  # noqa: E402
from blockfma.torch import mx  # noqa: E402
from helpers import REPO  # noqa: E402

F = torch.nn.functional
FP4 = getattr(torch, "float4_e2m1fn_x2", None)
pytestmark = pytest.mark.skipif(FP4 is None or not hasattr(torch, "float8_e8m0fnu"),
                                reason="this torch has no float4_e2m1fn_x2 / float8_e8m0fnu")
B200 = bf.device("B200")
MXF8 = B200.instruction("tcgen05.mxf8f6f4.block32")
MXF4 = B200.instruction("tcgen05.mxf4.block32").models[("e2m1fn", "fp32")]
NVF4 = B200.instruction("tcgen05.mxf4nvf4.block16.ue4m3").models[("e2m1fn", "fp32")]
ML = {torch.float8_e4m3fn: ml_dtypes.float8_e4m3fn, torch.float8_e5m2: ml_dtypes.float8_e5m2}


# --- operands from codes, decoded by ml_dtypes ----------------------------------------------------------------
def rng(seed):
    return np.random.default_rng(seed)


def fp8_codes(g, shape, dtype=torch.float8_e4m3fn):
    """Random finite codes of an fp8 format (no NaN or infinity codes)."""
    codes = g.integers(0, 256, size=shape).astype(np.uint8)
    if dtype == torch.float8_e4m3fn:
        return np.where((codes & 0x7F) == 0x7F, codes & 0xFE, codes).astype(np.uint8)
    return np.where((codes & 0x7C) == 0x7C, codes & 0xBB, codes).astype(np.uint8)  # e5m2: clear an exponent bit


def fp8_tensor(codes, dtype=torch.float8_e4m3fn):
    return torch.from_numpy(np.ascontiguousarray(codes, dtype=np.uint8)).view(dtype)


def fp8_values(codes, dtype=torch.float8_e4m3fn):
    return np.ascontiguousarray(codes, dtype=np.uint8).view(ML[dtype]).astype(np.float64)


def fp4_tensor(codes):
    """(rows, K) e2m1 codes packed along K, element 2i in the low nibble (torch's pack_uint4)."""
    c = np.ascontiguousarray(codes, dtype=np.uint8)
    return torch.from_numpy(np.ascontiguousarray(c[:, 0::2] | (c[:, 1::2] << 4))).view(FP4)


def fp4_values(codes):
    return np.ascontiguousarray(codes, dtype=np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float64)


def e8m0(codes):
    return torch.from_numpy(np.ascontiguousarray(codes, dtype=np.uint8)).view(torch.float8_e8m0fnu)


def e8m0_values(codes):
    return np.ascontiguousarray(codes, dtype=np.uint8).view(ml_dtypes.float8_e8m0fnu).astype(np.float64)


def ue4m3(codes):
    return torch.from_numpy(np.ascontiguousarray(codes, dtype=np.uint8)).view(torch.float8_e4m3fn)


def bits(t):
    assert t.dtype == torch.float32
    return t.contiguous().view(torch.int32)


def want(model, A, B, SA, SB):
    """bf.gemm on the decoded values: A (m, K), B (K, n), SA (m, kb), SB (n, kb) in torch's layout."""
    return torch.from_numpy(np.asarray(bf.gemm(A, B, model=model, scale_a=SA, scale_layout="kn", scale_b=SB.T), dtype=np.float32))


def swizzled_by_formula(plain):
    """cuBLAS's 1D block scaling factors layout, entry by entry (cuBLAS documentation 3.1.4.3.2)."""
    rows, cols = plain.shape
    R, C = -(-rows // 128) * 128, -(-cols // 4) * 4
    out = np.zeros(R * C, dtype=np.uint8)
    for i in range(rows):
        for j in range(cols):
            tile = (i // 128) * (C // 4) + j // 4
            out[tile * 512 + (i % 32) * 16 + ((i % 128) // 32) * 4 + j % 4] = plain[i, j]
    return out


# --- layouts ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("rows, blocks", [(1, 1), (130, 7), (128, 4), (256, 9)])
def test_swizzle_is_cublas_layout_and_unswizzle_inverts_it(rows, blocks):
    plain = rng(rows * 100 + blocks).integers(1, 255, size=(rows, blocks)).astype(np.uint8)
    t = e8m0(plain)
    sw = mx.swizzle(t)
    assert sw.dtype == torch.float8_e8m0fnu and sw.numel() == mx.swizzled_size(rows, blocks)
    assert np.array_equal(sw.view(torch.uint8).numpy(), swizzled_by_formula(plain))
    assert np.array_equal(mx.unswizzle(sw, rows, blocks).view(torch.uint8).numpy(), plain)
    shaped = sw.reshape(-(-rows // 128) * 128, -1)  # torchao's 2-D form of the same bytes
    assert np.array_equal(mx.unswizzle(shaped, rows, blocks).view(torch.uint8).numpy(), plain)


def test_unswizzle_refuses_a_wrong_count():
    with pytest.raises(ArgumentError, match=r"scale_a=.*take 512 one-byte entries.*NO_SWIZZLE"):
        mx.unswizzle(e8m0(np.ones((3, 2), np.uint8)), 3, 2, "scale_a")


# --- emulated results equal bf.gemm with the named preset, bit for bit ------------------------------------------
@pytest.mark.parametrize("db", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_mxfp8_is_the_mxf8f6f4_preset_chained_over_k(db):
    g = rng(1)
    m, n, k = 5, 3, 128  # four k = 32 instructions chained
    ca, cb = fp8_codes(g, (m, k)), fp8_codes(g, (n, k), db)
    sa, sb = g.integers(118, 136, size=(m, k // 32)), g.integers(118, 136, size=(n, k // 32))
    a, b = fp8_tensor(ca), fp8_tensor(cb, db).t()  # mat2 (K, n), column-major as cuBLAS takes it
    with bf.torch.emulate("B200") as emu:
        got = torch._scaled_mm(a, b, mx.swizzle(e8m0(sa)), mx.swizzle(e8m0(sb)), out_dtype=torch.float32)
        plain = F.scaled_mm(a, b, e8m0(sa), F.ScalingType.BlockWise1x32, e8m0(sb), F.ScalingType.BlockWise1x32,
                            output_dtype=torch.float32)
        got16 = torch._scaled_mm(a, b, mx.swizzle(e8m0(sa)), mx.swizzle(e8m0(sb)), out_dtype=torch.bfloat16)
    key = "e4m3fn" if db == torch.float8_e4m3fn else "e4m3fn*e5m2"
    expect = want(MXF8.models[(key, "fp32")], fp8_values(ca), fp8_values(cb, db).T, e8m0_values(sa), e8m0_values(sb))
    assert torch.equal(bits(got), bits(expect)) and torch.equal(bits(plain), bits(expect))
    assert torch.equal(got16.view(torch.int16), expect.to(torch.bfloat16).view(torch.int16))  # one RNE conversion
    assert all(o.route.model.name.startswith("B200 tcgen05.mxf8f6f4.block32") for o in emu.log)


@pytest.mark.parametrize("recipe", ["mxfp4", "nvfp4"])
def test_fp4_recipes_are_their_presets_with_the_global_scale_last(recipe):
    g = rng(2)
    m, n, k = 4, 3, 128  # two k = 64 instructions chained
    block = 32 if recipe == "mxfp4" else 16
    ca, cb = g.integers(0, 16, size=(m, k)), g.integers(0, 16, size=(n, k))
    a, b = fp4_tensor(ca), fp4_tensor(cb).t()
    if recipe == "mxfp4":
        sa, sb = g.integers(120, 134, size=(m, k // block)), g.integers(120, 134, size=(n, k // block))
        ta, tb, SA, SB, model = e8m0(sa), e8m0(sb), e8m0_values(sa), e8m0_values(sb), MXF4
    else:
        sa, sb = g.integers(0, 0x7F, size=(m, k // block)), g.integers(0, 0x7F, size=(n, k // block))  # no NaN
        ta, tb, model = ue4m3(sa), ue4m3(sb), NVF4
        SA, SB = fp8_values(sa), fp8_values(sb)
    product = want(model, fp4_values(ca), fp4_values(cb).T, SA, SB)
    with bf.torch.emulate("B200") as emu:
        got = torch._scaled_mm(a, b, mx.swizzle(ta), mx.swizzle(tb), out_dtype=torch.float32)
        assert torch.equal(bits(got), bits(product))
        if recipe == "nvfp4":
            ga, gb = torch.tensor(0.1), torch.tensor(3.0)
            two = [F.ScalingType.BlockWise1x16, F.ScalingType.TensorWise]
            got2 = F.scaled_mm(a, b, [mx.swizzle(ta), ga], two, [mx.swizzle(tb), gb], two,
                               swizzle_a=[F.SwizzleType.SWIZZLE_32_4_4], swizzle_b=[F.SwizzleType.SWIZZLE_32_4_4],
                               output_dtype=torch.float32)
            s = np.float32(np.float32(0.1) * np.float32(3.0))  # binary32 product of the global scales
            assert torch.equal(bits(got2), bits(torch.from_numpy(product.numpy() * s)))
    name = "B200 tcgen05.mxf4.block32" if recipe == "mxfp4" else "B200 tcgen05.mxf4nvf4.block16.ue4m3"
    assert emu.log[0].route.model.name.startswith(name)


def test_the_rtx_5090_runs_its_mma_block_scale_kind():
    q = mx.to_mx(torch.ones(2, 64), "e2m1fn")
    with bf.torch.emulate("RTX 5090") as emu:
        got = torch._scaled_mm(q.data, q.data.t(), q.swizzled_scales(), q.swizzled_scales(), out_dtype=torch.float32)
    assert emu.log[0].route.model.name.startswith("RTX 5090 mma.mxf4.block32")
    assert torch.equal(got, torch.full((2, 2), 64.0))


def test_chaining_rounds_each_instruction_toward_zero_in_fp32():
    """K = 64 MXFP8: instruction 1 sums 2**24 + 1 (F = 25 keeps both), its fp32 result cut toward zero to
    2**24; instruction 2 adds 1 to that C: 2**24 + 1, cut to 2**24 again.  The exact sum 2**24 + 2 is an fp32
    value: a single fused sum over K (or promotion to an exact sum) would give it."""
    ca = np.zeros((1, 64), np.float64)
    cb = np.zeros((1, 64), np.float64)
    ca[0, :2], cb[0, :2] = [256.0, 2.0**-4], [256.0, 2.0**-4]
    ca[0, 32], cb[0, 32] = 1.0, 1.0
    a = torch.from_numpy(ca).to(torch.float8_e4m3fn)
    b = torch.from_numpy(cb).to(torch.float8_e4m3fn).t()
    s = e8m0(np.array([[127 + 4, 127]]))  # block 0 scaled by 2**4 for each operand: 2**16 * 2**8 = 2**24
    with bf.torch.emulate("B200"):
        got = F.scaled_mm(a, b, s, F.ScalingType.BlockWise1x32, s, F.ScalingType.BlockWise1x32,
                          output_dtype=torch.float32)
    exact = sum(Fraction(x) * Fraction(y) * (16 * 16 if i < 32 else 1) for i, (x, y) in enumerate(zip(ca[0], cb[0])))
    assert exact == 2**24 + 2
    assert got.item() == 2.0**24


# --- NaN and zero scales -----------------------------------------------------------------------------------------
def test_nan_scale_makes_its_row_nan_and_leaves_the_rest():
    g = rng(3)
    ca, cb = fp8_codes(g, (3, 64)), fp8_codes(g, (2, 64))
    sa, sb = np.full((3, 2), 127), np.full((2, 2), 127)
    sa[1, 1] = 0xFF  # e8m0's NaN
    with bf.torch.emulate("B200"):
        got = torch._scaled_mm(fp8_tensor(ca), fp8_tensor(cb).t(), mx.swizzle(e8m0(sa)), mx.swizzle(e8m0(sb)),
                               out_dtype=torch.float32)
        got16 = torch._scaled_mm(fp8_tensor(ca), fp8_tensor(cb).t(), mx.swizzle(e8m0(sa)), mx.swizzle(e8m0(sb)),
                                 out_dtype=torch.bfloat16)
    expect = want(MXF8.models[("e4m3fn", "fp32")], fp8_values(ca), fp8_values(cb).T, e8m0_values(sa),
                  e8m0_values(sb))
    assert torch.isnan(got[1]).all() and not torch.isnan(got[[0, 2]]).any()
    assert torch.equal(bits(got), bits(expect))  # the NaN's code too: the model's canonical NaN
    assert (bits(got)[1] == 0x7FFFFFFF).all()  # NVIDIA's canonical NaN, all ones, in fp32 ...
    assert (got16[1].view(torch.int16) == 0x7FFF).all()  # ... and in bf16


def test_zero_ue4m3_scale_drops_its_block():
    g = rng(4)
    ca, cb = g.integers(0, 16, size=(2, 64)), g.integers(0, 16, size=(2, 64))
    sa, sb = np.full((2, 4), 0x38), np.full((2, 4), 0x38)  # 0x38: 1.0
    sa[0, 2] = 0x00  # +0: the products of block 2 of row 0 count for nothing
    with bf.torch.emulate("B200"):
        got = torch._scaled_mm(fp4_tensor(ca), fp4_tensor(cb).t(), mx.swizzle(ue4m3(sa)), mx.swizzle(ue4m3(sb)),
                               out_dtype=torch.float32)
        dropped = ca.copy()
        dropped[0, 32:48] = 0
        ref = torch._scaled_mm(fp4_tensor(dropped), fp4_tensor(cb).t(), mx.swizzle(ue4m3(np.full((2, 4), 0x38))),
                               mx.swizzle(ue4m3(sb)), out_dtype=torch.float32)
        zero = torch._scaled_mm(fp4_tensor(ca), fp4_tensor(cb).t(), mx.swizzle(ue4m3(np.zeros((2, 4)))),
                                mx.swizzle(ue4m3(sb)), out_dtype=torch.float32)
    assert torch.equal(bits(got), bits(want(NVF4, fp4_values(ca), fp4_values(cb).T, fp8_values(sa), fp8_values(sb))))
    assert torch.equal(got[0], ref[0])
    assert torch.equal(bits(zero), torch.zeros(2, 2, dtype=torch.int32))  # +0 everywhere


# --- an oracle independent of blockfma: exact sums of powers of two -------------------------------------------
@pytest.mark.parametrize("recipe", ["mxfp8", "nvfp4"])
def test_powers_of_two_give_the_exact_product(recipe):
    """Elements +-2**e and power-of-two scales keep every product and partial sum exact (terms 2**-8 to 2**7,
    sums below 2**13: well inside F = 25 / 35 and fp32), so D is the exact sum in Fractions."""
    g = rng(5)
    m, n, k = 3, 4, 64
    if recipe == "mxfp8":
        A = g.choice([-1.0, 1.0], (m, k)) * 2.0 ** g.integers(-2, 2, (m, k))
        B = g.choice([-1.0, 1.0], (n, k)) * 2.0 ** g.integers(-2, 2, (n, k))
        ea, eb = g.integers(-2, 3, (m, 2)), g.integers(-2, 3, (n, 2))
        a, b = torch.from_numpy(A).to(torch.float8_e4m3fn), torch.from_numpy(B).to(torch.float8_e4m3fn)
        ta, tb, block, glob = e8m0(ea + 127), e8m0(eb + 127), 32, Fraction(1)
    else:
        A = g.choice([-1.0, 1.0], (m, k)) * 2.0 ** g.integers(-1, 3, (m, k))  # 0.5 to 4: e2m1 values
        B = g.choice([-1.0, 1.0], (n, k)) * 2.0 ** g.integers(-1, 3, (n, k))
        ea, eb = g.integers(-2, 2, (m, 4)), g.integers(-2, 2, (n, 4))
        enc = {-2: 0x28, -1: 0x30, 0: 0x38, 1: 0x40}  # ue4m3 codes of 2**e
        a, b = fp4_tensor(np.vectorize(lambda v: {0.5: 1, 1.0: 2, 2.0: 4, 4.0: 6}[abs(v)] | (8 * (v < 0)))(A)), None
        b = fp4_tensor(np.vectorize(lambda v: {0.5: 1, 1.0: 2, 2.0: 4, 4.0: 6}[abs(v)] | (8 * (v < 0)))(B))
        ta, tb = ue4m3(np.vectorize(enc.get)(ea)), ue4m3(np.vectorize(enc.get)(eb))
        block, glob = 16, Fraction(1, 4) * Fraction(8)
    with bf.torch.emulate("B200"):
        if recipe == "mxfp8":
            got = torch._scaled_mm(a, b.t(), mx.swizzle(ta), mx.swizzle(tb), out_dtype=torch.float32)
        else:
            two = [F.ScalingType.BlockWise1x16, F.ScalingType.TensorWise]
            got = F.scaled_mm(a, b.t(), [ta, torch.tensor(0.25)], two, [tb, torch.tensor(8.0)], two,
                              output_dtype=torch.float32)
    for i in range(m):
        for j in range(n):
            exact = glob * sum(Fraction(A[i, t]) * Fraction(B[j, t]) * Fraction(2) ** int(ea[i, t // block] +
                                                                                           eb[j, t // block])
                               for t in range(k))
            assert Fraction(got[i, j].item()) == exact


# --- bad input ---------------------------------------------------------------------------------------------------
def mxfp8_pair(k=64):
    q = mx.to_mx(torch.ones(2, k))
    return q.data, q.data.t(), q.scales


@pytest.mark.parametrize("case, match", [
    ("plain to _scaled_mm", r"scale_a=.*take 512 one-byte entries"),
    ("transposed plain", r"scale_a=.*shape \(2, 4\).*transposed layout: pass its \.t\(\)"),
    ("fp8 with e4m3 scales", r"no block-scaled instruction takes this recipe"),
    ("fp4 with fp8", r"mat2=.*packed fp4 operands go with packed fp4"),
    ("scales of two formats", r"scale_b=.*both operands' scales must have one format"),
    ("k not a multiple", r"K = 48 must be a multiple of the scale block 32"),
    ("negative ue4m3", r"scale_a=.*row 1, block 0 is -1.0: ue4m3 scales are unsigned"),
    ("fp8 output", r"out_dtype=torch.float8_e4m3fn: an fp8 or fp4 output"),
    ("no blackwell", r"H100 has no mxf8f6f4.block32 instruction"),
])
def test_bad_block_scaled_calls_are_named(case, match):
    a, b, s = mxfp8_pair()
    blk = F.ScalingType.BlockWise1x32
    device = "H100" if case == "no blackwell" else "B200"
    with bf.torch.emulate(device), pytest.raises(ArgumentError, match=match):
        if case == "plain to _scaled_mm":
            torch._scaled_mm(a, b, s, s, out_dtype=torch.float32)
        elif case == "transposed plain":
            a4 = torch.cat([a, a])  # 4 rows, 2 blocks: (2, 4) is the transpose
            F.scaled_mm(a4, b, torch.cat([s, s]).t(), blk, s, blk, output_dtype=torch.float32)
        elif case == "fp8 with e4m3 scales":
            e4 = ue4m3(np.full((2, 4), 0x38))
            F.scaled_mm(a, b, e4, F.ScalingType.BlockWise1x16, e4, F.ScalingType.BlockWise1x16,
                        output_dtype=torch.float32)
        elif case == "fp4 with fp8":
            q = mx.to_mx(torch.ones(2, 128), "e2m1fn")
            F.scaled_mm(q.data, b, q.scales, blk, s, blk, output_dtype=torch.float32)
        elif case == "scales of two formats":
            F.scaled_mm(a, b, s, blk, ue4m3(np.full((2, 2), 0x38)), blk, output_dtype=torch.float32)
        elif case == "k not a multiple":
            a48 = a[:, :48]
            F.scaled_mm(a48, a48.t(), s, blk, s, blk, output_dtype=torch.float32)
        elif case == "negative ue4m3":
            q = mx.to_nvfp4(torch.ones(2, 64))
            neg = q.scales.view(torch.uint8).clone()
            neg[1, 0] = 0xB8  # -1.0
            F.scaled_mm(q.data, q.data.t(), neg.view(torch.float8_e4m3fn), F.ScalingType.BlockWise1x16, q.scales,
                        F.ScalingType.BlockWise1x16, output_dtype=torch.float32)
        elif case == "fp8 output":
            F.scaled_mm(a, b, s, blk, s, blk, output_dtype=torch.float8_e4m3fn)
        else:
            F.scaled_mm(a, b, s, blk, s, blk, output_dtype=torch.float32)


# --- quantisation ------------------------------------------------------------------------------------------------
def test_to_mx_scale_rules_by_hand():
    x = torch.tensor([[448.0, 1.0] + [0.0] * 30, [449.0, -2.0**-3] + [0.0] * 30, [float("nan")] + [1.0] * 31])
    ceil, floor = mx.to_mx(x), mx.to_mx(x, scale_rounding="floor")
    # ceil: the least 2**e with amax <= 448 * 2**e: 448 -> 2**0; 449 -> 2**1.  floor: 2**(8 - 8) for both.
    assert ceil.scales.view(torch.uint8).tolist() == [[127], [128], [0xFF]]
    assert floor.scales.view(torch.uint8).tolist() == [[127], [127], [0xFF]]
    assert ceil.data.float()[1, :2].tolist() == [224.0, -2.0**-4]  # 449 / 2 = 224.5 -> 224 (nearest even)
    assert floor.data.float()[1, 0].item() == 448.0  # saturated
    assert (ceil.data.float()[2] == 0).all()  # a NaN block: NaN scale, +0 elements
    fp4 = mx.to_mx(torch.tensor([[6.0, -3.0, 0.25, 5.0] + [0.0] * 28]), "e2m1fn")
    assert fp4.scales.view(torch.uint8).item() == 127
    assert fp4.data.view(torch.uint8)[0, :2].tolist() == [0x7 | (0xD << 4), 0x0 | (0x6 << 4)]  # 6, -3; 0.25 -> 0, 4


def test_to_nvfp4_two_level_scales():
    x = torch.zeros(1, 32)
    x[0, 0], x[0, 1], x[0, 16] = 2688.0, 100.0, 6.0  # amax = 6 * 448: g = 1
    q = mx.to_nvfp4(x)
    assert q.global_scale.item() == 1.0
    assert q.scales.view(torch.uint8).tolist() == [[0x7E, 0x38]]  # 448 and 1 in e4m3
    vals = q.dequantize()[0]
    assert vals[0].item() == 2688.0 and vals[1].item() == 0.0 and vals[16].item() == 6.0  # 100 / 448 -> 0


def test_to_nvfp4_beyond_float32_keeps_its_global_scale_finite():
    """float64 values beyond NVFP4's range (6 * 448 * float32's largest) gave an infinite global scale and NaN
    on dequantisation; the float32 global scale is now held to float32's largest and they saturate, as block
    scales and elements do; far below its range, g is held to float32's least subnormal (was 0: no NaN but
    an infinite quotient) and the values become +0."""
    top = float(np.finfo(np.float32).max)
    x = torch.zeros(2, 32, dtype=torch.float64)
    x[0, 0], x[0, 1], x[0, 16], x[1, 0] = 1e300, -3e299, 1e39, 1.0
    q = mx.to_nvfp4(x)
    assert q.global_scale.dtype == torch.float32 and q.global_scale.item() == top
    vals = q.dequantize().numpy()
    assert np.isfinite(vals).all()
    assert vals[0, 0] == 6 * 448 * top and vals[0, 1] == -6 * 448 * top  # saturated: element 6, scale 448
    assert vals[0, 16] == 6 * 0.5 * top  # 1e39 / (6 g) = 0.4898 -> ue4m3 0.5; 1e39 / (0.5 g) = 5.88 -> e2m1 6
    assert (vals[1] == 0).all() and not np.signbit(vals[1]).any()  # 1.0 is below 2**-9 * g: +0
    tiny = mx.to_nvfp4(torch.full((1, 16), 1e-300, dtype=torch.float64))
    assert tiny.global_scale.item() == 2.0**-149 and (tiny.dequantize().numpy() == 0).all()


def test_quantised_matmul_error_is_small_and_dequantize_is_what_the_emulation_multiplies():
    g = torch.Generator().manual_seed(7)
    x, w = torch.randn(8, 64, generator=g), torch.randn(4, 64, generator=g)
    for qa, qb in ((mx.to_mx(x), mx.to_mx(w)), (mx.to_nvfp4(x), mx.to_nvfp4(w))):
        exact = qa.dequantize() @ qb.dequantize().t()
        with bf.torch.emulate("B200"):
            if qa.recipe == "mxfp8":
                got = torch._scaled_mm(qa.data, qb.data.t(), qa.swizzled_scales(), qb.swizzled_scales(),
                                       out_dtype=torch.float32)
            else:
                two = [F.ScalingType.BlockWise1x16, F.ScalingType.TensorWise]
                got = F.scaled_mm(qa.data, qb.data.t(), [qa.scales, qa.global_scale], two,
                                  [qb.scales, qb.global_scale], two, output_dtype=torch.float32)
        assert (got.double() - exact).abs().max().item() <= 2.0**-20 * exact.abs().max().item()
        rel = ((qa.dequantize() - x.double()).norm() / x.double().norm()).item()
        assert 0 < rel < (0.05 if qa.recipe == "mxfp8" else 0.15)


def test_the_nvfp4_example_runs(capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["nvfp4_matmul.py", "--m", "2", "--n", "2", "--k", "64"])
    runpy.run_path(str(REPO / "examples" / "nvfp4_matmul.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "NVFP4" in out and "MXFP8" in out and "quantisation" in out


def test_model_argument_bias_and_the_block16_e8m0_kind():
    g = rng(8)
    ca, cb = g.integers(0, 16, size=(3, 64)), g.integers(0, 16, size=(2, 64))
    a, b = fp4_tensor(ca), fp4_tensor(cb).t()
    sa, sb = g.integers(124, 130, size=(3, 2)), g.integers(124, 130, size=(2, 2))
    product = want(MXF4, fp4_values(ca), fp4_values(cb).T, e8m0_values(sa), e8m0_values(sb))
    bias = torch.tensor([0.1, -3.0], dtype=torch.bfloat16)
    with bf.torch.emulate(model=MXF4) as emu:
        got = torch._scaled_mm(a, b, mx.swizzle(e8m0(sa)), mx.swizzle(e8m0(sb)), bias=bias, out_dtype=torch.bfloat16)
    assert torch.equal(got.view(torch.int16), (product + bias.float()).to(torch.bfloat16).view(torch.int16))
    assert emu.log[0].route.model is MXF4
    with bf.torch.emulate(model=NVF4), pytest.raises(ArgumentError, match=r"model=.*needs a block-scaled"):
        torch._scaled_mm(a, b, mx.swizzle(e8m0(sa)), mx.swizzle(e8m0(sb)), out_dtype=torch.float32)
    # a block-scaled model= has no scales for a plain matmul: refused naming model= (was an error about a
    # scale_a never passed); one in overrides= is refused by emulate itself; an MXFP8 model is no model for
    # fp8 _scaled_mm with fp32 scales either
    x = torch.ones(2, 64, dtype=torch.bfloat16)
    with bf.torch.emulate(model=MXF4), pytest.raises(ArgumentError, match=r"^model=scaled-fused e2m1fn.*: is "
                                                     r"block-scaled: .* not bf16 matmuls; for those emulate a device"):
        x @ x.T
    with pytest.raises(ArgumentError, match=r"^overrides=scaled-fused .*: is block-scaled"):
        bf.torch.emulate("B200", overrides={torch.float16: MXF4})
    mxf8 = B200.model("e4m3fn", "fp32", instruction="tcgen05.mxf8f6f4.block32")
    e4 = torch.ones(16, 32).to(torch.float8_e4m3fn)
    with bf.torch.emulate(model=mxf8), pytest.raises(ArgumentError, match=r"^model=.*without block scales"):
        torch._scaled_mm(e4, e4.T, torch.tensor(1.0), torch.tensor(1.0), out_dtype=torch.float32)
    # e8m0 scales per 16 (PTX's mxf4nvf4.block16 with ue8m0; torch's own checks refuse this pairing)
    s16a, s16b = g.integers(124, 130, size=(3, 4)), g.integers(124, 130, size=(2, 4))
    blk16 = F.ScalingType.BlockWise1x16
    with bf.torch.emulate("B200") as emu:
        got16 = F.scaled_mm(a, b, e8m0(s16a), blk16, e8m0(s16b), blk16, output_dtype=torch.float32)
    model16 = B200.instruction("tcgen05.mxf4nvf4.block16.ue8m0").models[("e2m1fn", "fp32")]
    expect = want(model16, fp4_values(ca), fp4_values(cb).T, e8m0_values(s16a), e8m0_values(s16b))
    assert torch.equal(bits(got16), bits(expect)) and emu.log[0].route.model is model16
