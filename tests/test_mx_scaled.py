"""Block-scaled MMA (PTX ``mma.block_scale`` on sm_120, ``tcgen05.mma.block_scale`` on B200): the scaled-fused
family's exact reference against MMA-Sim 2.1.1 (``MMABlockScale``, ``TCGen05MMABlockScale``, an independent
simulator: mmasim/arithmetic/fdpa.py ``st_fdpa`` for k = 32, ``gst_fdpa`` with G = 16, F = 35 for k = 64),
bit for bit on random inputs and scales (extremes, zero, NaN), and against a Fraction computation of its own
for power-of-two scaling; bad scales are clear errors.

Every configuration MMA-Sim lists for the block-scaled instructions is run (mxf8f6f4 with all 25 input
pairs, mxf4, mxf4nvf4 block32/block16 with ue8m0 and ue4m3), one instruction (k) and two chained (2k);
the slow mark runs more rows of each.
"""

from __future__ import annotations


import math
from fractions import Fraction

import numpy as np
import pytest

from blockfma import formats as F
from blockfma import reference as R
from blockfma.model import Model

pytest.importorskip("torch", reason="MMA-Sim needs torch")
pytest.importorskip("mmasim", reason="the differential test needs MMA-Sim: pip install --no-deps mmasim==2.1.1")
from helpers import MX_PTX as PTX, block_scaled_rows as _rows, mmasim_d

F8F6F4 = ("e4m3fn", "e5m2", "e3m2fn", "e2m3fn", "e2m1fn")

# (kind, A, B, scale block, scale format): MMA-Sim's mma_block_scale_shape_and_type_from_sm_120 and
# blackwell_tcgen05mma_block_scale_shape_and_type (the same kinds on both)
CONFIGS = ([("mxf8f6f4", a, b, 32, "e8m0fnu") for a in F8F6F4 for b in F8F6F4]
           + [("mxf4", "e2m1fn", "e2m1fn", 32, "e8m0fnu"), ("mxf4nvf4", "e2m1fn", "e2m1fn", 32, "e8m0fnu"),
              ("mxf4nvf4", "e2m1fn", "e2m1fn", 16, "e8m0fnu"), ("mxf4nvf4", "e2m1fn", "e2m1fn", 16, "ue4m3")])


def scaled_model(kind: str, fa: str, fb: str, block: int, fs: str) -> Model:
    """MMA-Sim's reading (mmasim/nv_ptx/sim.py, MMABlockScale and TCGen05MMABlockScale): k = 32 kinds
    MMA_ST_FDPA(F=25, RZ-FP32, L=32, e_zero=-133); k = 64 kinds MMA_GST_FDPA(G=16, F=35, RZ-FP32, L=64,
    e_zero=-139)."""
    k64 = kind != "mxf8f6f4"
    return Model(family="scaled-fused", input_format=fa, b_input_format=fb, output_format="fp32",
                 block_width=64 if k64 else 32, fraction_bits=35 if k64 else 25, e_zero=-139 if k64 else -133,
                 output_rounding="TowardZero", overflow="inf", nan="canonical", exact_zero="positive",
                 rounded_zero="positive",
                 options={"scale_format": fs, "scale_block": block, "scale_group": 16 if k64 else None})


def _differ(model: Model, device: str, cfg, A, B, C, SA, SB) -> int:
    """How many entries of D the reference under ``model`` and MMA-Sim give different bits."""
    D = mmasim_d(device, cfg, A, B, C, SA, SB)
    return sum(R.dot_bits(model, list(A[i]), list(B[:, j]), float(C[i, j]), list(SA[i]), list(SB[:, j]))
               != int(D[i, j]) for i in range(C.shape[0]) for j in range(C.shape[1]))


def _compare(device: str, cfg, rows: int, k_mult: int, seed: int) -> tuple[int, int]:
    model = scaled_model(*cfg)
    data = _rows(cfg, rows, model.block_width * k_mult, seed)
    return rows * 8 - _differ(model, device, cfg, *data), rows * 8


def _name(cfg) -> str:
    kind, fa, fb, block, fs = cfg
    return f"{kind}.block{block}.{fa}*{fb}.{fs}"


@pytest.mark.parametrize("device", ["B200", "RTX 5090"])
@pytest.mark.parametrize("cfg", CONFIGS, ids=_name)
def test_reference_matches_mmasim(device, cfg):
    """Every block-scaled configuration, one instruction and two chained, bit for bit (0 mismatches)."""
    for k_mult, seed in ((1, 0), (2, 1)):
        same, total = _compare(device, cfg, 4, k_mult, seed + 7 * CONFIGS.index(cfg))
        assert same == total, f"{_name(cfg)} on {device}, k x{k_mult}: {total - same} of {total} differ"


@pytest.mark.slow
@pytest.mark.parametrize("cfg", CONFIGS, ids=_name)
def test_reference_matches_mmasim_more(cfg):
    for seed in range(2, 8):
        same, total = _compare("B200", cfg, 8, 1 + seed % 2, 1000 + seed)
        assert same == total


# --- the rows that pin each parameter: the reading matches MMA-Sim and its neighbour does not ---------------
PINNED = [CONFIGS[0], CONFIGS[24], CONFIGS[-4], CONFIGS[-1]]  # e4m3*e4m3, fp4 mxf8f6f4, mxf4, nvf4 ue4m3


def _one(cfg, a: dict, b: dict, c: float, sa: float, sb: float):
    """One row of A and one column of B, zero but at the given positions; every scale sa (sb); C = c."""
    model = scaled_model(*cfg)
    k, block = model.block_width, cfg[3]
    A, B = np.zeros((1, k)), np.zeros((k, 8))
    for i, v in a.items():
        A[0, i] = v
    for i, v in b.items():
        B[i, :] = v
    return A, B, np.full((1, 8), c, dtype=np.float32), np.full((1, k // block), sa), np.full((k // block, 8), sb)


@pytest.mark.parametrize("cfg", PINNED, ids=_name)
def test_fraction_bits_pinned(cfg):
    """A product of -0.25 under C = 2**(F - 2) is kept at F fraction bits and dropped at F - 1: the result
    moves by one ulp, and MMA-Sim's F (25 for k = 32, 35 for k = 64) is the one that agrees."""
    model = scaled_model(*cfg)
    data = _one(cfg, {0: -0.5}, {0: 0.5}, 2.0 ** (model.fraction_bits - 2), 1.0, 1.0)
    assert _differ(model, "B200", cfg, *data) == 0
    assert _differ(model.replace(fraction_bits=model.fraction_bits - 1), "B200", cfg, *data) == 8


@pytest.mark.parametrize("cfg", PINNED[:3], ids=_name)
def test_e_zero_pinned(cfg):
    """C = 0 takes part at e_zero: a product 2.25 * 2**-147 (scales 2**-127 and 2**-20) keeps its last bit
    under MMA-Sim's e_zero and loses it under e_zero = -100 (ue8m0 scales: ue4m3 ones never reach that low)."""
    model = scaled_model(*cfg)
    data = _one(cfg, {0: 1.5}, {0: 1.5}, 0.0, 2.0 ** -127, 2.0 ** -20)
    assert _differ(model, "B200", cfg, *data) == 0
    assert _differ(model.replace(e_zero=-100), "B200", cfg, *data) == 8


def test_groups_pinned():
    """The k = 64 kinds sum 16 products before scaling (G = 16), the k = 32 kind scales each product: on the
    random rows the other reading disagrees with MMA-Sim somewhere, for each of the pinned configurations."""
    for cfg in PINNED[:3]:
        model = scaled_model(*cfg)
        flip = model.replace(options={**dict(model.options),
                                      "scale_group": None if model.option("scale_group") else 16})
        assert sum(_differ(flip, "B200", cfg, *_rows(cfg, 8, model.block_width * 2, 50 + s))
                   for s in range(2)) > 0, _name(cfg)


@pytest.mark.parametrize("cfg", [CONFIGS[0], CONFIGS[-1]], ids=_name)
def test_nan_and_zero_scales(cfg):
    """A NaN scale makes D the canonical NaN 0x7FFFFFFF even where its products are zero (MMA-Sim: the NaN
    enters the term's significand); a zero ue4m3 scale makes its block's products a zero at e_zero."""
    model = scaled_model(*cfg)
    nan = float("nan")
    A, B, C, SA, SB = _one(cfg, {}, {}, 1.0, nan, 1.0)
    assert R.dot_bits(model, list(A[0]), list(B[:, 0]), 1.0, list(SA[0]), list(SB[:, 0])) == 0x7FFFFFFF
    assert _differ(model, "B200", cfg, A, B, C, SA, SB) == 0
    if cfg[4] == "ue4m3":
        A, B, C, SA, SB = _one(cfg, {0: 6.0, 20: 1.0}, {0: 6.0, 20: 1.0}, 0.0, 1.0, 1.0)
        SA[0, 0] = 0.0
        assert R.dot(model, list(A[0]), list(B[:, 0]), 0.0, list(SA[0]), list(SB[:, 0])) == 1.0
        assert _differ(model, "B200", cfg, A, B, C, SA, SB) == 0


# --- power-of-two scaling against Fractions ---------------------------------------------------------------
def _rz_fp32(x: Fraction) -> float:
    """x rounded toward zero to fp32 (normal range), by Fractions alone."""
    if x == 0:
        return 0.0
    e = math.floor(math.log2(abs(x)))
    e += (abs(x) >= Fraction(2) ** (e + 1)) - (abs(x) < Fraction(2) ** e)
    q = Fraction(2) ** (e - 23)
    return float(math.trunc(x / q) * q)


@pytest.mark.parametrize("cfg", [CONFIGS[24], CONFIGS[-4], CONFIGS[-2]], ids=_name)
def test_power_of_two_scales_match_fractions(cfg):
    """fp4 products span few binades, so neither F cuts them: with ue8m0 scales 2**x, 2**y per block, D is
    the exact sum of a_i b_i 2**(x_j + y_j) + C rounded toward zero to fp32, computed here by Fractions."""
    model = scaled_model(*cfg)
    rng = np.random.default_rng(5)
    k, block = model.block_width * 2, cfg[3]
    for _ in range(20):
        a = F.decode(F.e2m1fn, rng.integers(0, 16, k))
        b = F.decode(F.e2m1fn, rng.integers(0, 16, k))
        x = rng.integers(-3, 4, k // block)
        y = rng.integers(-3, 4, k // block)
        c = float(rng.integers(1, 1 << 10)) / 8 * rng.choice([-1, 1])
        exact = sum(Fraction(float(a[i])) * Fraction(float(b[i])) * Fraction(2) ** int(x[i // block] + y[i // block])
                    for i in range(k)) + Fraction(c)
        got = R.dot(model, list(a), list(b), c, [2.0 ** int(v) for v in x], [2.0 ** int(v) for v in y])
        assert got == _rz_fp32(exact), (got, exact)


# --- bad input ---------------------------------------------------------------------------------------------
def test_bad_scales_are_named():
    model = scaled_model(*CONFIGS[-1])  # nvf4, ue4m3, block 16, k = 64
    a, b = [0.5] * 64, [1.0] * 64
    ok = [1.0] * 4
    with pytest.raises(ValueError, match=r"scale_a must hold 4 scales \(one per 16 products of k = 64\), not 3"):
        R.dot(model, a, b, 0.0, [1.0] * 3, ok)
    with pytest.raises(ValueError, match=r"scale_b must hold 4 scales"):
        R.dot(model, a, b, 0.0, ok, None)
    with pytest.raises(ValueError, match=r"scale_a\[2\] = -1.0 is not a value of ue4m3 \(scales are unsigned"):
        R.dot(model, a, b, 0.0, [1.0, 1.0, -1.0, 1.0], ok)
    with pytest.raises(ValueError, match=r"scale_b\[0\] = 1.0625 is not a value of ue4m3"):
        R.dot(model, a, b, 0.0, ok, [1.0625, 1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="k = 40 must be a multiple of the scale block 16"):
        R.dot(model, a[:40], b[:40], 0.0, ok, ok)
    mx = scaled_model(*CONFIGS[0])  # ue8m0
    with pytest.raises(ValueError, match=r"scale_a\[0\] = 3.0 is not a value of e8m0fnu \(a power of two"):
        R.dot(mx, [1.0] * 32, [1.0] * 32, 0.0, [3.0], [1.0])
    with pytest.raises(ValueError, match=r"scale_b\[0\] = 0.0 is not a value of e8m0fnu"):
        R.dot(mx, [1.0] * 32, [1.0] * 32, 0.0, [1.0], [0.0])
    with pytest.raises(ValueError, match="scale_a and scale_b are for block-scaled models"):
        R.dot(model.replace(family="truncated-fused", options={}), a, b, 0.0, ok, ok)


def test_bad_options_are_named():
    model = scaled_model(*CONFIGS[-1])
    with pytest.raises(ValueError, match="option scale_format: must be one of e8m0fnu, ue4m3, not 'fp8'"):
        model.replace(options={**dict(model.options), "scale_format": "fp8"})
    with pytest.raises(ValueError, match=r"block_width must be a multiple of the scale block \(16\)"):
        model.replace(block_width=40)
    with pytest.raises(ValueError, match="scale_group: 32 must divide the scale block 16"):
        model.replace(options={**dict(model.options), "scale_group": 32})


# --- bf.dot and bf.gemm --------------------------------------------------------------------------------------
def test_gemm_and_dot_take_scales():
    """bf.gemm with scale_a (m x k/block) and scale_b (k/block x n) gives MMA-Sim's bits; bf.dot with the
    scales broadcast as a and b gives the same; both run in the engines (tests/test_mx_scaled_engine.py
    holds it to the reference)."""
    import blockfma as bf
    from blockfma.engine import last_backend

    for cfg in (CONFIGS[0], CONFIGS[-1]):
        model = scaled_model(*cfg)
        A, B, C, SA, SB = _rows(cfg, 3, 2 * model.block_width, 3)
        D = bf.gemm(A, B, C, model=model, scale_a=SA, scale_layout="kn", scale_b=SB)
        assert D.dtype == np.float32 and last_backend() in ("numba", "numpy")
        assert (D.view(np.uint32) == mmasim_d("B200", cfg, A, B, C, SA, SB)).all()
        d = bf.dot(A[:, None, :], B.T[None], C, model=model, scale_a=SA[:, None, :], scale_b=SB.T[None])
        assert (d.view(np.uint32) == D.view(np.uint32)).all()
        # one scale vector for every row of A and every column of B (1-D scales) is the same as it repeated
        one = bf.gemm(A, B, C, model=model, scale_a=SA[0], scale_layout="kn", scale_b=SB[:, 0])
        full = bf.gemm(A, B, C, model=model, scale_a=np.tile(SA[0], (len(A), 1)),
                       scale_layout="kn", scale_b=np.tile(SB[:, :1], (1, B.shape[1])))
        assert (one.view(np.uint32) == full.view(np.uint32)).all()


def test_a_square_scale_b_needs_its_layout():
    """n = k // block: B's layout and torch's cannot be told apart by shape, so scale_layout is required there;
    "nk" (torch's) is the transpose of "kn" (B's), bit for bit; dask refuses alike."""
    import blockfma as bf
    from blockfma.arguments import ArgumentError

    cfg = CONFIGS[-1]
    model = scaled_model(*cfg)
    k = 2 * model.block_width
    nb = k // model.option("scale_block")
    A, B, C, SA, SB = _rows(cfg, 2, k, nb)
    assert SB.shape == (nb, nb) and nb > 1
    with pytest.raises(ArgumentError, match=rf"^scale_b=<{nb}x{nb} float64 array>: is square .* pass scale_layout="):
        bf.gemm(A, B, C, model=model, scale_a=SA, scale_b=SB)
    kn = bf.gemm(A, B, C, model=model, scale_a=SA, scale_b=SB, scale_layout="kn")
    nk = bf.gemm(A, B, C, model=model, scale_a=SA, scale_b=np.ascontiguousarray(SB.T), scale_layout="nk")
    assert (kn.view(np.uint32) == nk.view(np.uint32)).all()
    for wrong in ("kj", 1, "", ["kn"]):
        with pytest.raises(ArgumentError, match=r"^scale_layout=.*: must be \"kn\""):
            bf.gemm(A, B, C, model=model, scale_a=SA, scale_b=SB, scale_layout=wrong)
    with pytest.raises(ArgumentError, match=r"^scale_layout='kn': says how scale_b is laid out, and no scale_b"):
        bf.gemm(A, B, C, model=model, scale_a=SA, scale_layout="kn")
    da = pytest.importorskip("dask.array")
    with pytest.raises(ArgumentError, match=r"is square .* pass scale_layout="):
        bf.gemm(da.from_array(A), B, C, model=model, scale_a=SA, scale_b=SB)
    lazy = bf.gemm(da.from_array(A, chunks=(1, k)), B, C, model=model, scale_a=SA, scale_b=SB, scale_layout="kn")
    assert (lazy.compute(scheduler="synchronous").view(np.uint32) == kn.view(np.uint32)).all()


def test_api_scale_errors():
    import blockfma as bf
    from blockfma.arguments import ArgumentError

    cfg = CONFIGS[-1]
    model = scaled_model(*cfg)
    A, B, C, SA, SB = _rows(cfg, 2, 64, 1)
    cases = [(dict(scale_a=SA[:, :3], scale_b=SB), r"scale_a=<2x3 float64 array>: must have shape \(2, 4\): 4 "
              r"scales along K \(one per 16 products of k = 64\) for each row of A .*, not \(2, 3\)$"),
             (dict(scale_a=-np.abs(SA), scale_b=SB), r"scale_a\[0, 0\] = -\d.* is not a value of ue4m3 "
              r"\(scales are unsigned\)"),
             (dict(scale_a=SA, scale_b=np.full((4, 8), 1.0625)), r"scale_b=<4x8 float64 array>: scale_b\[0, 0\] = "
              r"1.0625 is not a value of ue4m3"),
             (dict(scale_b=SB), r"scale_a=None: .* is block-scaled: it needs 4 scales of ue4m3"),
             # torch's layout (n, k // block) of B's scales is refused with the fix: scale_b is laid out as B
             (dict(scale_a=SA, scale_b=SB.T), r"scale_b=<8x4 float64 array>: must have shape \(4, 8\): 4 scales "
              r"along K .* for each column of B .*, not \(8, 4\): that is torch's layout \(n, k // block\); "
              r"bf.gemm's scale_b is laid out as B, pass scale_b.T$"),
             (dict(scale_a=SA[None], scale_b=SB), r"scale_a=<1x2x4 float64 array>: must have shape \(2, 4\)"),
             (dict(scale_a=SA[:, :1], scale_b=SB), r"scale_a=<2x1 float64 array>: must have shape \(2, 4\)"),
             (dict(scale_a=SA, scale_b=SB[:1]), r"scale_b=<1x8 float64 array>: must have shape \(4, 8\)")]
    for kwargs, message in cases:
        with pytest.raises(ArgumentError, match=message):
            bf.gemm(A, B, C, model=model, **kwargs)
    with pytest.raises(ArgumentError, match="is not block-scaled and takes no scales"):
        bf.dot([1.0], [1.0], device="H100", input_format="fp16", scale_a=[1.0])
    with pytest.raises(ArgumentError, match="k = 40 must be a multiple of the scale block 16"):
        bf.dot(np.zeros(40), np.zeros(40), model=model, scale_a=np.ones(2), scale_b=np.ones(2))
    # a dot's scales broadcast to its result's shape (2,), never beyond it (was numpy's broadcasting error)
    with pytest.raises(ArgumentError, match=r"^scale_b=<3x2x4 float64 array>: must have shape \(2, 4\): 4 scales "
                       r"along K \(one per 16 products of k = 64\) for each dot product .*, not \(3, 2, 4\)$"):
        bf.dot(A, B.T[:2], model=model, scale_a=SA, scale_b=np.ones((3, 2, 4)))


# --- presets ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("device,prefix", [("B200", "tcgen05"), ("RTX 5090", "mma")])
def test_presets_are_mmasims_reading(device, prefix):
    """Each block-scaled configuration is an instruction named by its PTX kind and block size (and scale
    format where mxf4nvf4.block16 takes two) whose model is the one held to MMA-Sim above."""
    import blockfma as bf

    dev = bf.device(device)
    for cfg in CONFIGS:
        kind, fa, fb, block, fs = cfg
        name = f"{prefix}.{kind}.block{block}" + (f".{PTX[fs]}" if (kind, block) == ("mxf4nvf4", 16) else "")
        ins = dev.instruction(name)
        assert kind in ins.ptx and f"block{block}" in ins.ptx and PTX[fs] in ins.ptx
        preset = dev.model((fa, fb), "fp32", instruction=name)
        assert preset.replace(name="") == scaled_model(*cfg), (device, name, fa, fb)
        assert ins.k[preset.input_name] == preset.block_width
