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


import numpy as np
import pytest

from blockfma import formats as F
from blockfma import reference as R
from blockfma.model import Model

torch = pytest.importorskip("torch", reason="MMA-Sim needs torch")
pytest.importorskip("mmasim", reason="the differential test needs MMA-Sim: pip install --no-deps mmasim==2.1.1")
from mmasim.nv_ptx.sim import MMABlockScale, TCGen05MMABlockScale  # noqa: E402

PTX = {"e4m3fn": "e4m3", "e5m2": "e5m2", "e3m2fn": "e3m2", "e2m3fn": "e2m3", "e2m1fn": "e2m1",
       "e8m0fnu": "ue8m0", "ue4m3": "ue4m3"}
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


def _codes(rng, fmt: F.Format, shape, specials: bool) -> np.ndarray:
    """Random codes of fmt; without ``specials`` NaN and infinity codes are redrawn as zeros."""
    codes = rng.integers(0, 1 << fmt.bits, shape)
    if not specials:
        v = F.decode(fmt, codes)
        codes[~np.isfinite(v)] = 0
    return codes


def _scales(rng, fs: str, vectors: int, blocks: int, nan: bool) -> np.ndarray:
    """Scales of fs for ``vectors`` rows of A (or columns of B), ``blocks`` each, one mode a vector in turn:
    random codes; a wide spread between blocks (F cuts the terms of the smaller blocks); tiny (ue8m0 near
    2**-127: the products lie below e_zero); the extremes (2**-127 and 2**127 for ue8m0; 0, the least
    subnormal and 448 for ue4m3).  With ``nan`` one scale is NaN."""
    e8 = fs == "e8m0fnu"
    modes = [lambda: rng.integers(0, 255 if e8 else 0x7F, blocks),
             lambda: rng.integers(97, 158, blocks) if e8 else rng.choice([1, 2, 8, 0x60, 0x70, 0x7E], blocks),
             lambda: rng.integers(0, 12, blocks) if e8 else rng.integers(0, 8, blocks),
             lambda: rng.choice([0, 254, 127] if e8 else [0, 1, 0x7E, 0x38], blocks)]
    codes = np.array([modes[v % 4]() for v in range(vectors)]).reshape(vectors, blocks)
    if nan and codes.size:
        codes.flat[rng.integers(codes.size)] = 0xFF if e8 else 0x7F
    return F.decode(F.get(fs), codes)


def _c(rng, shape) -> np.ndarray:
    c = (rng.standard_normal(shape) * 2.0 ** rng.integers(-45, 45, shape)).astype(np.float32)
    pick = rng.random(shape)
    c[pick < 0.1] = 0.0
    c[(pick >= 0.1) & (pick < 0.15)] = -0.0
    c[(pick >= 0.15) & (pick < 0.2)] = np.float32(1e-40)
    return c


def _operand(x: np.ndarray, name: str, packed: bool) -> torch.Tensor:
    """A (rows along K) as MMA-Sim takes it: torch fp8; fp6/fp4 one code a byte (bits 5:0, fp4 in 5:2);
    for mxf4 kinds two fp4 codes a byte along K, the first in the high nibble (unpack_uint8_to_fp4)."""
    fmt = F.get(name)
    if name in ("e4m3fn", "e5m2"):
        return torch.from_numpy(x.astype(np.float32)).to({"e4m3fn": torch.float8_e4m3fn,
                                                         "e5m2": torch.float8_e5m2}[name])
    codes = F.encode(fmt, x).astype(np.uint8)
    if packed:
        return torch.from_numpy((codes[..., 0::2] << 4) | codes[..., 1::2])
    return torch.from_numpy(codes << np.uint8(6 - fmt.bits))


def _scale_tensor(s: np.ndarray, fs: str) -> torch.Tensor:
    t = torch.from_numpy(s.astype(np.float32))
    return t.to(torch.float8_e8m0fnu if fs == "e8m0fnu" else torch.float8_e4m3fn)


def mmasim_d(device: str, cfg, A, B, C, SA, SB) -> np.ndarray:
    """D = A B + C with scales SA (M x K/block), SB (K/block x N) by MMA-Sim, one instruction after another
    over K (MMA_ST_FDPA takes one instruction's scales at a time), as fp32 codes."""
    kind, fa, fb, block, fs = cfg
    k = 64 if kind != "mxf8f6f4" else 32
    m, n = C.shape
    shape = (f"m16n8k{k}.kind::{kind}.block{block}.f32.{PTX[fa]}.{PTX[fb]}.f32.{PTX[fs]}" if device == "RTX 5090"
             else f"m128n{n}k{k}.kind::{kind}.block{block}.f32.{PTX[fa]}.{PTX[fb]}.{PTX[fs]}")
    op = MMABlockScale("RTX Blackwell", shape) if device == "RTX 5090" else TCGen05MMABlockScale("Blackwell", shape)
    d = torch.from_numpy(C.astype(np.float32))
    packed = kind != "mxf8f6f4"
    per = k // block
    for i in range(0, A.shape[1], k):
        j = i // block
        a = _operand(A[:, i:i + k], fa, packed)
        b = _operand(B[i:i + k].T, fb, packed).T
        d = op(a, b, d, _scale_tensor(SA[:, j:j + per], fs), _scale_tensor(SB[j:j + per], fs))
    return d.numpy().view(np.uint32)


def _compare(device: str, cfg, rows: int, k_mult: int, seed: int) -> tuple[int, int]:
    kind, fa, fb, block, fs = cfg
    model = scaled_model(*cfg)
    rng = np.random.default_rng(seed)
    m, n, k = rows, 8, model.block_width * k_mult
    specials = fa in ("e4m3fn", "e5m2")
    A = F.decode(F.get(fa), _codes(rng, F.get(fa), (m, k), specials and seed % 2 == 0))
    B = F.decode(F.get(fb), _codes(rng, F.get(fb), (k, n), False))
    C = _c(rng, (m, n))
    SA = _scales(rng, fs, m, k // block, nan=seed % 3 == 0)
    SB = _scales(rng, fs, n, k // block, nan=False).T
    D = mmasim_d(device, cfg, A, B, C, SA, SB)
    bad = 0
    for i in range(m):
        for j in range(n):
            got = R.dot_bits(model, list(A[i]), list(B[:, j]), float(C[i, j]), list(SA[i]), list(SB[:, j]))
            bad += got != int(D[i, j])
    return m * n - bad, m * n


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
