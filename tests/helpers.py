"""Helpers shared by the tests: bit patterns, the recorded data's location, the models every engine test
covers, input generators built to break fused datapaths, and the check of any backend against the exact
reference.  Tests import from here, never from one another."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import strategies as st

import blockfma as bf
from blockfma import formats as F
from blockfma import reference
from blockfma.model import Alignment, Family, Model

try:  # the compiled kernels (numba), where installed
    from blockfma.engine import fast as FAST
except ImportError:
    FAST = None

REPO = Path(__file__).resolve().parents[1]


GOLDEN_DEFAULT = REPO.parent / "shared" / "golden"


def golden_root() -> Path:
    """The recorded GPU outputs: $BLOCKFMA_GOLDEN where set (and not empty), else ../shared/golden beside the
    checkout.  They are never copied into the repository."""
    env = os.environ.get("BLOCKFMA_GOLDEN")
    return Path(env) if env else GOLDEN_DEFAULT


def golden_dir(*parts: str, module: bool = False) -> Path:
    """The folder ``parts`` under :func:`golden_root`, or a skip whose reason names where it was looked for
    (BLOCKFMA_GOLDEN and the default beside the checkout).  ``module=True`` skips the whole test module (at
    import, as ``pytest.skip(allow_module_level=True)``)."""
    path = golden_root().joinpath(*parts)
    if not path.is_dir():
        env = os.environ.get("BLOCKFMA_GOLDEN")
        where = f"BLOCKFMA_GOLDEN={env}" if env else f"BLOCKFMA_GOLDEN unset, so the default {GOLDEN_DEFAULT}"
        pytest.skip(f"golden hardware data not found at {path} ({where}; set BLOCKFMA_GOLDEN to the folder that "
                    f"holds khattak-mikaitis/, or put it at ../shared/golden beside the checkout)",
                    allow_module_level=module)
    return path


def bits(x) -> np.ndarray:
    """Raw bit patterns of a float16/float32/float64 array (so -0 and NaN payloads count)."""
    x = np.asarray(x)
    return x.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[x.dtype.itemsize])


def f32bits(value: float) -> int:
    return int(np.float32(value).view(np.uint32))


# --- models ---------------------------------------------------------------------------------------------
def preset_models() -> list[Model]:
    """Every distinct preset the engines run; the block-scaled ones (scaled-fused: they take scales, which
    only the exact reference computes so far) are tested in test_mx_scaled.py."""
    seen: dict[tuple, Model] = {}
    for dev in bf.devices():
        for ins in dev.instructions:
            for m in ins.models.values():
                if m.family is Family.SCALED_FUSED:
                    continue
                key = tuple(sorted(m.features().items(), key=lambda kv: kv[0]))
                seen.setdefault(key, m)
    return list(seen.values())


def variant_models() -> list[Model]:
    v100 = bf.device("V100").model("fp16", "fp32")
    h100 = bf.device("H100").model("bf16", "fp32")
    mi300 = bf.device("MI300X").model("bf16", "fp32")
    return [
        v100.replace(alignment=Alignment.FLOOR, name="V100 floor"),
        v100.replace(carry_bits=1, name="V100 1 carry"),
        v100.replace(carry_bits=2, name="V100 2 carries"),
        v100.replace(carry_bits=3, name="V100 3 carries"),
        v100.replace(exact_zero="ieee", rounded_zero="signed", name="V100 ieee zero"),
        v100.replace(rounded_zero="signed", name="V100 signed rounded zero"),
        v100.replace(output_rounding="rne", overflow="ieee", name="V100 rne out"),
        v100.replace(product_exponent="normalized", name="V100 normalised products"),
        h100.replace(product_exponent="normalized", alignment=Alignment.FLOOR, name="H100 bf16 normalised floor"),
        h100.replace(output_fraction_bits=13, output_rounding="rne", name="H100 bf16 e8m13 rne"),
        h100.replace(alignment=Alignment.FLOOR, output_rounding="rd", name="H100 floor rd"),
        h100.replace(block_width=5, name="odd block width"),
        v100.replace(c_entry="end", name="V100 C at the end"),
        mi300.replace(c_entry="end", name="MI300 bf16 C at the end"),
        Model(Family.EXACT_FUSED, "fp16", "fp16", block_width=4, accumulator_format="fp32", c_entry="after",
              name="exact fp32 accumulator, C after"),
        mi300.replace(groups=2, name="MI300 bf16 grouped"),
        mi300.replace(output_rounding="rz", name="MI300 rz"),
        Model(Family.PAIRWISE, "fp16", "fp32", block_width=8, name="pairwise with subnormals"),
        Model(Family.PAIRWISE, "bf16", "fp16", block_width=2, subnormals=False, name="pairwise fp16 out"),
        Model(Family.FMA_CHAIN, "bf16", "fp32", block_width=1, subnormals=False, name="fma chain FTZ"),
        Model(Family.FMA_CHAIN, "fp16", "fp32", block_width=1, output_rounding="rz", exact_zero="positive",
              name="fma chain rz +0"),
        Model(Family.FMA_CHAIN, "fp32", "fp32", block_width=1, nan="propagate", name="fma chain fp32 NaN-propagate"),
        Model(Family.FMA_CHAIN, "fp16", "fp32", block_width=1, nan="propagate", name="fma chain fp16 NaN-propagate"),
        Model(Family.EXACT_FUSED, "fp16", "fp16", block_width=3, output_rounding="rd", name="exact rd"),
        Model(Family.EXACT_FUSED, "e5m2", "fp32", block_width=None, output_rounding="ro", name="exact odd"),
        Model(Family.AMX, "bf16", "fp32", block_width=4, subnormals=False, name="amx small"),
        Model(Family.BFDOT, "bf16", "fp32", block_width=2, output_rounding="ro", subnormals=True, name="bfdot subn"),
    ]


MODELS = preset_models() + variant_models()
IDS = [m.name or m.summary() for m in MODELS]


# --- input generators --------------------------------------------------------------------------------
def _from_codes(fmt: F.Format, rng: np.random.Generator, size) -> np.ndarray:
    codes = rng.integers(0, 1 << fmt.bits, size=size, dtype=np.uint64) if fmt.bits < 64 else \
        rng.integers(0, 1 << 63, size=size, dtype=np.uint64) | (rng.integers(0, 2, size=size, dtype=np.uint64) << np.uint64(63))
    return F.decode(fmt, codes)


def _grid(fmt: F.Format, rng: np.random.Generator, size, lo: int, hi: int) -> np.ndarray:
    """Small integers times powers of two in [2**lo, 2**hi]: sums land on ties and cut points."""
    k = rng.integers(1, 1 << min(fmt.precision, 4), size=size)
    e = rng.integers(lo, hi + 1, size=size) - 3  # k < 16 = 2**4: k * 2**(e - 3) stays below 2**(hi + 1)
    x = np.ldexp(k.astype(np.float64), e) * rng.choice([-1.0, 1.0], size=size)
    return F.round(fmt, x, "rz")


def _subnormals(fmt: F.Format, rng: np.random.Generator, size) -> np.ndarray:
    k = rng.integers(0, 1 << (fmt.precision - 1), size=size)
    return np.ldexp(k.astype(np.float64), fmt.emin - fmt.precision + 1) * rng.choice([-1.0, 1.0], size=size)


def sanitize(fmt: F.Format, x: np.ndarray, allow_special: bool) -> np.ndarray:
    if not allow_special:
        x = np.where(np.isfinite(x), x, 1.0)
    if not fmt.has_negative_zero:
        x = np.where(x == 0, 0.0, x)
    return x


def draw_rows(model: Model, rows: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """rows x k inputs, one style per row (see module docstring)."""
    rng = np.random.default_rng(seed)
    fin, fb, fc = model.input_format, model.b_format, model.c_format  # A's, B's and C's formats
    a = np.empty((rows, k))
    b = np.empty((rows, k))
    c = np.empty(rows)
    for r in range(rows):
        style = r % 8
        special = rng.random() < 0.15
        if style == 0:  # random codes: anything, specials included
            a[r], b[r], c[r] = _from_codes(fin, rng, k), _from_codes(fb, rng, k), _from_codes(fc, rng, ())
        elif style == 1:  # coarse grid near 1: ties and alignment cuts
            a[r], b[r] = _grid(fin, rng, k, -3, 3), _grid(fb, rng, k, -3, 3)
            c[r] = _grid(fc, rng, (), -2, 4)[()] if rng.random() < 0.7 else F.round(fc, rng.normal() * 8, "rz")
        elif style == 2:  # wide spread: one big product, many tiny ones
            a[r], b[r] = _grid(fin, rng, k, fin.emin, 2), _grid(fb, rng, k, fb.emin, 2)
            big = rng.uniform(1, 2) * 2.0**min(8, fin.emax, fb.emax)
            a[r, 0], b[r, 0] = F.round(fin, [big], "rz")[0], F.round(fb, [big], "rz")[0]
            c[r] = F.round(fc, rng.choice([0.0, -1.0, 2.0**-20, rng.normal()]), "rne")
        elif style == 3:  # heavy cancellation: products in cancelling pairs, C near minus their sum
            x, y = _grid(fin, rng, k, -6, 6), _grid(fb, rng, k, -6, 6)
            half = k // 2
            x[half:2 * half], y[half:2 * half] = x[:half], -y[:half]
            perm = rng.permutation(k)
            a[r], b[r] = x[perm], y[perm]
            c[r] = F.round(fc, -float(np.sum(a[r] * b[r])) + rng.choice([0.0, 2.0**-24, -(2.0**-30)]), "rne")
        elif style == 4:  # subnormal inputs and C
            a[r], b[r] = _subnormals(fin, rng, k), _grid(fb, rng, k, -2, 10)
            c[r] = _subnormals(fc, rng, ())[()] if rng.random() < 0.5 else 0.0
        elif style == 5:  # zeros of both signs
            a[r] = rng.choice([0.0, -0.0, 1.0, -2.0], size=k)
            b[r] = rng.choice([0.0, -0.0, 0.5], size=k)
            c[r] = rng.choice([0.0, -0.0, 1.0])
        elif style == 6:  # large values: overflow of sums and products
            a[r], b[r] = _grid(fin, rng, k, fin.emax - 3, fin.emax), _grid(fb, rng, k, fb.emax - 3, fb.emax)
            c[r] = F.round(fc, rng.choice([fc.max, -fc.max, 0.0]), "rz")
        else:  # C dominating, products around its last bits
            c[r] = F.round(fc, rng.uniform(0.5, 2) * rng.choice([1.0, -1.0]), "rz")
            a[r], b[r] = _grid(fin, rng, k, -14, -8), _grid(fb, rng, k, -14, -8)
        if special:
            for arr, fmt in ((a[r], fin), (b[r], fb)):
                if rng.random() < 0.5:
                    if fmt.has_nan:  # fp4 and fp6 have no special values
                        arr[rng.integers(k)] = rng.choice([np.nan, np.inf, -np.inf]) if fmt.has_infinities else np.nan
        a[r], b[r] = sanitize(fin, a[r], special or style == 0), sanitize(fb, b[r], special or style == 0)
        c[r] = sanitize(fc, np.array(c[r]), special or style == 0)
    return a, b, c


def check_against_reference(model: Model, a: np.ndarray, b: np.ndarray, c: np.ndarray, backends: list[str] | None = None) -> None:
    """Every row of ``dot`` on each backend against the reference.  By default numpy on every row and, where
    numba is installed and runs the model, the compiled kernels on every row whose inputs are finite (the
    kernels take finite inputs; the dispatcher sends the others to numpy)."""
    rows = a.shape[0]
    everything = np.ones(rows, bool)
    if backends:
        plan = {be: everything for be in backends}
    else:
        plan = {"numpy": everything}
        fast = FAST
        if fast and fast.supports(model):
            finite = np.isfinite(a).all(axis=-1) & np.isfinite(b).all(axis=-1) & np.isfinite(c)
            if finite.any():
                plan["numba"] = finite
    results = {}
    for be, sel in plan.items():
        got = np.zeros(rows, np.uint64)
        try:
            got[sel] = bits(bf.dot(a[sel], b[sel], c[sel], model=model, backend=be)).astype(np.uint64)
        except ValueError as exc:  # the compiled kernels refuse some of these rows: run them one by one
            if be != "numba" or "do not run" not in str(exc):
                raise
            sel = sel.copy()
            for r in np.flatnonzero(sel):
                try:
                    got[r] = bits(bf.dot(a[r], b[r], c[r], model=model, backend=be)).astype(np.uint64)
                except ValueError:
                    sel[r] = False
        results[be] = (got, sel)
    for r in range(rows):
        want = reference.dot_bits(model, a[r].tolist(), b[r].tolist(), float(c[r]))
        for be, (got, sel) in results.items():
            if not sel[r]:
                continue
            assert int(got[r]) == want, (
                f"{model.summary()} ({be}): row {r} a={a[r].tolist()} b={b[r].tolist()} c={float(c[r])!r}: "
                f"engine {int(got[r]):#x}, reference {want:#x}")


@st.composite
def dot_cases(draw):
    model = draw(st.sampled_from(MODELS))
    L = model.block_width or 5
    k = draw(st.integers(1, min(2 * L + 1, 40)))
    fin, fb, fc = model.input_format, model.b_format, model.c_format

    def value(fmt):
        code = draw(st.integers(0, (1 << fmt.bits) - 1))
        v = float(F.decode(fmt, code))
        return 0.0 if (v == 0 and not fmt.has_negative_zero) else v

    a = [value(fin) for _ in range(k)]
    b = [value(fb) for _ in range(k)]
    if draw(st.booleans()):  # make two products cancel
        i, j = draw(st.integers(0, k - 1)), draw(st.integers(0, k - 1))
        a[j], b[j] = a[i], -b[i] if (b[i] != 0 or fb.has_negative_zero) else b[i]
    return model, a, b, value(fc)


def finite_inputs(model: Model, shape: tuple[int, int, int], seed: int):
    rng = np.random.default_rng(seed)
    m, k, n = shape
    fin, fb, fc = model.input_format, model.b_format, model.c_format
    spread = max(1, min(12, fin.emax - 2))  # fp4 and fp6: emax 2 to 4
    A = F.round(fin, rng.standard_normal((m, k)) * 2.0 ** rng.integers(-spread, spread, (m, k)), saturate=True)
    B = F.round(fb, rng.standard_normal((k, n)) * 2.0 ** rng.integers(-4, 4, (k, n)), saturate=True)
    A[rng.random((m, k)) < 0.05] = 0.0
    if fb.has_negative_zero:
        B[rng.random((k, n)) < 0.05] = -0.0
    C = F.round(fc, rng.standard_normal((m, n)) * 2.0 ** rng.integers(-20, 4, (m, n)), saturate=True)
    C[rng.random((m, n)) < 0.05] = 0.0
    return A, B, C


# --- block-scaled MMA: inputs that break it, and MMA-Sim's D (tests/test_mx_scaled.py, tests/test_mmasim.py) ---
# PTX's names of the block-scaled kinds' operand and scale formats
MX_PTX = {"e4m3fn": "e4m3", "e5m2": "e5m2", "e3m2fn": "e3m2", "e2m3fn": "e2m3", "e2m1fn": "e2m1",
          "e8m0fnu": "ue8m0", "ue4m3": "ue4m3"}


def _mx_codes(rng, fmt: F.Format, shape, specials: bool) -> np.ndarray:
    """Random codes of fmt; without ``specials`` NaN and infinity codes are redrawn as zeros."""
    codes = rng.integers(0, 1 << fmt.bits, shape)
    if not specials:
        v = F.decode(fmt, codes)
        codes[~np.isfinite(v)] = 0
    return codes


def _mx_scales(rng, fs: str, vectors: int, blocks: int, nan: bool) -> np.ndarray:
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


def _mx_c(rng, shape) -> np.ndarray:
    c = (rng.standard_normal(shape) * 2.0 ** rng.integers(-45, 45, shape)).astype(np.float32)
    pick = rng.random(shape)
    c[pick < 0.1] = 0.0
    c[(pick >= 0.1) & (pick < 0.15)] = -0.0
    c[(pick >= 0.15) & (pick < 0.2)] = np.float32(1e-40)
    powers = (pick >= 0.2) & (pick < 0.45)  # C a power of two: a term cut at F shows across its binade
    c[powers] = (np.where(rng.random(shape) < 0.5, -1.0, 1.0) * 2.0 ** rng.integers(-40, 40, shape))[powers]
    return c


def _mx_operand(x: np.ndarray, name: str, packed: bool):
    """A (rows along K) as MMA-Sim takes it: torch fp8; fp6/fp4 one code a byte (bits 5:0, fp4 in 5:2);
    for mxf4 kinds two fp4 codes a byte along K, the first in the high nibble (unpack_uint8_to_fp4)."""
    import torch

    fmt = F.get(name)
    if name in ("e4m3fn", "e5m2"):
        return torch.from_numpy(x.astype(np.float32)).to({"e4m3fn": torch.float8_e4m3fn,
                                                         "e5m2": torch.float8_e5m2}[name])
    codes = F.encode(fmt, x).astype(np.uint8)
    if packed:
        return torch.from_numpy((codes[..., 0::2] << 4) | codes[..., 1::2])
    return torch.from_numpy(codes << np.uint8(6 - fmt.bits))


def _mx_scale_tensor(s: np.ndarray, fs: str):
    import torch

    t = torch.from_numpy(s.astype(np.float32))
    return t.to(torch.float8_e8m0fnu if fs == "e8m0fnu" else torch.float8_e4m3fn)


def mmasim_d(device: str, cfg, A, B, C, SA, SB) -> np.ndarray:
    """D = A B + C with scales SA (M x K/block), SB (K/block x N) by MMA-Sim, one instruction after another
    over K (MMA_ST_FDPA takes one instruction's scales at a time), as fp32 codes.  ``device``: "B200"
    (``tcgen05.mma.block_scale``) or "RTX 5090" (``mma.block_scale``).  Needs torch and mmasim."""
    import torch
    from mmasim.nv_ptx.sim import MMABlockScale, TCGen05MMABlockScale

    kind, fa, fb, block, fs = cfg
    k = 64 if kind != "mxf8f6f4" else 32
    _m, n = C.shape
    types = f"{MX_PTX[fa]}.{MX_PTX[fb]}"
    shape = (f"m16n8k{k}.kind::{kind}.block{block}.f32.{types}.f32.{MX_PTX[fs]}" if device == "RTX 5090"
             else f"m128n{n}k{k}.kind::{kind}.block{block}.f32.{types}.{MX_PTX[fs]}")
    op = MMABlockScale("RTX Blackwell", shape) if device == "RTX 5090" else TCGen05MMABlockScale("Blackwell", shape)
    d = torch.from_numpy(C.astype(np.float32))
    packed = kind != "mxf8f6f4"
    per = k // block
    for i in range(0, A.shape[1], k):
        j = i // block
        a = _mx_operand(A[:, i:i + k], fa, packed)
        b = _mx_operand(B[i:i + k].T, fb, packed).T
        d = op(a, b, d, _mx_scale_tensor(SA[:, j:j + per], fs), _mx_scale_tensor(SB[j:j + per], fs))
    return d.numpy().view(np.uint32)


def block_scaled_rows(cfg, rows: int, k: int, seed: int):
    """A (rows x k), B (k x 8), C, SA, SB for one configuration: random codes (fp8 A with NaN and
    infinities in even seeds), C over a wide range with zeros and a subnormal, scales by :func:`_mx_scales`
    (one NaN in every third seed)."""
    _kind, fa, fb, block, fs = cfg
    rng = np.random.default_rng(seed)
    specials = fa in ("e4m3fn", "e5m2") and seed % 2 == 0
    A = F.decode(F.get(fa), _mx_codes(rng, F.get(fa), (rows, k), specials))
    B = F.decode(F.get(fb), _mx_codes(rng, F.get(fb), (k, 8), False))
    SA = _mx_scales(rng, fs, rows, k // block, nan=seed % 3 == 0)
    SB = _mx_scales(rng, fs, 8, k // block, nan=False).T
    return A, B, _mx_c(rng, (rows, 8)), SA, SB


def triton_mode(monkeypatch, gpu: bool) -> None:
    """TRITON_INTERPRET for a test of the Triton kernel: 0 for the tests marked gpu, else 1.  Triton fixes the
    mode when a process first defines the kernel, so a test of the other mode is skipped there (run
    ``pytest -m gpu`` and the interpreter's tests in separate processes)."""
    from blockfma.engine import triton as tr

    if tr.defined_interpreted() is gpu:
        pytest.skip("the Triton kernel was defined in the other mode in this process (one mode per process)")
    monkeypatch.setenv("TRITON_INTERPRET", "0" if gpu else "1")
