"""The Triton kernel (backend="triton"), run by Triton's interpreter on the CPU, held bit for bit to the
exact reference (blockfma.reference, row by row) and to the numpy engine (whole GEMMs)."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

pytest.importorskip("torch", reason="backend='triton' takes torch tensors: torch is not installed")
pytest.importorskip("triton", reason="triton is not installed (pip install 'blockfma[triton]')")

from hypothesis import given, settings, strategies as st

import blockfma as bf
from blockfma import formats, reference
from blockfma.engine import triton as tr
from blockfma.model import Alignment, Family, Model, NaNStyle
from blockfma.plan import schedule
from helpers import triton_mode

PRESETS = [("H100", "fp16", "fp32", None), ("H100", "bf16", "fp32", None), ("H100", "tf32", "fp32", None),
           ("H100", "e4m3fn", "fp32", None), ("H100", "e5m2", "fp32", None), ("H100", "fp16", "fp16", None),
           ("H100", "e4m3fn", "fp16", None), ("V100", "fp16", "fp32", None), ("V100", "fp16", "fp16", None),
           ("A100", "fp16", "fp32", None), ("A100", "bf16", "fp32", None), ("A100", "tf32", "fp32", None),
           # C added after the blocks: Hopper's fp8 mma.sync emulation (two blocks over the register halves),
           # B200's fp8, and cuBLAS (fp32 accumulation over all of K, stored to fp16/bf16, then C)
           ("H100", "e4m3fn", "fp16", "mma.m16n8k32.fp8"), ("H100", "e5m2", "fp32", "mma.m16n8k16.fp8"),
           ("B200", "e4m3fn", "fp32", None), ("H100", "fp16", "fp16", "cublas"), ("H100", "bf16", "bf16", "cublas"),
           # late-c (AMD CDNA3): one group, two groups (fp8), and a block result stored from fp32 into fp16
           ("MI300X", "fp16", "fp32", None), ("MI300X", "bf16", "fp32", None), ("MI300X", "tf32", "fp32", None),
           ("MI300X", "e4m3fnuz", "fp32", None), ("MI300X", "fp16", "fp16", None),
           # fp16 C, fp32 D (Volta's m8n8k4.f32.f16.f16.f16): the first block reads C in fp16 (c_input_format)
           ("V100", "fp16", "fp32", "mma.f16c")]


INTERPRETED_AT_START = tr.interpreting()  # triton imported in interpreter mode: no GPU compilation here


@pytest.fixture(autouse=True)
def interpreter(request, monkeypatch):
    """Triton's interpreter on (off for the tests marked gpu), one mode per process (helpers.triton_mode)."""
    triton_mode(monkeypatch, bool(request.node.get_closest_marker("gpu")))


def values(rng: np.random.Generator, fmt, shape, specials: float = 0.0, finite: bool = False) -> np.ndarray:
    """Values of ``fmt``: normal-looking ones over a wide exponent range, with zeros of both signs,
    subnormals and, at rate ``specials``, infinities and NaN; beyond fmt's range they round to its overflow
    (NaN or infinity for the fp8 formats), unless ``finite``: then they are held to +-fmt.max."""
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-12, 12, shape))
    if finite:
        x = np.clip(x, -fmt.max, fmt.max)
    r = rng.random(shape)
    tiny = r < 0.15
    x[tiny] = x[tiny] * fmt.smallest_normal * 2.0 ** -6
    x = formats.round(fmt, x, "rne")
    x[(r > 0.15) & (r < 0.22)] = 0.0
    x[(r > 0.22) & (r < 0.26)] = -0.0 if fmt.has_negative_zero else 0.0
    s = (r > 0.5) & (r < 0.5 + specials)
    if fmt.has_infinities:
        x[s & (r < 0.5 + specials / 3)] = np.inf
        x[s & (r > 0.5 + 2 * specials / 3)] = -np.inf
    x[s & (r > 0.5 + specials / 3) & (r < 0.5 + 2 * specials / 3)] = np.nan
    return x


def same_bits(got: np.ndarray, want: np.ndarray) -> int:
    """The number of outputs whose bit patterns differ (dtypes must agree)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    return int(np.sum(formats.bits(got) != formats.bits(want)))


def check(model: Model, A: np.ndarray, B: np.ndarray, C: np.ndarray) -> np.ndarray:
    D = bf.gemm(A, B, C, model=model, backend="triton")
    assert bf.engine.last_backend() == "triton"
    assert same_bits(D, bf.gemm(A, B, C, model=model, backend="numpy")) == 0
    return D


@pytest.mark.parametrize("dev,fin,fout,instruction", PRESETS)
def test_presets_against_reference(dev, fin, fout, instruction):
    model = bf.device(dev).model(fin, fout, instruction)
    assert tr.supports(model)
    rng = np.random.default_rng(zlib.crc32(f"{dev} {fin} {fout} {instruction}".encode()))
    arith = model.arithmetic_model()
    step = arith.instruction_k or arith.block_width or 8
    m, k, n = 8, step + step // 2 + 3, 8  # more than one step, the last one padded
    A, B = values(rng, model.input_format, (m, k)), values(rng, model.b_format, (k, n))
    C = values(rng, model.c_format, (m, n))
    D = check(model, A, B, C)
    out = model.output_format
    for i, j in [(0, 0), (1, 5), (3, 2), (7, 7), (5, 1), (6, 4)]:  # the exact reference, row by row
        want = reference.dot_bits(model, list(A[i]), list(B[:, j]), C[i, j])
        assert int(formats.bits(D)[i, j]) == want, (i, j, D[i, j])
    assert D.dtype == formats.to_numpy(out, np.zeros(1), check=False).dtype


@pytest.mark.parametrize("dev,fin,fout", [("H100", "fp16", "fp32"), ("H100", "bf16", "fp32"),
                                          ("H100", "e5m2", "fp16"), ("A100", "tf32", "fp32")])
def test_specials(dev, fin, fout):
    model = bf.device(dev).model(fin, fout)
    rng = np.random.default_rng(7)
    A = values(rng, model.input_format, (9, 24), specials=0.01)
    B = values(rng, model.b_format, (24, 13), specials=0.01)
    C = values(rng, model.c_format, (9, 13), specials=0.03)
    D = check(model, A, B, C)
    assert np.isnan(D).any() and np.isinf(D).any() and (np.isfinite(D) & (D != 0)).any()  # all three kinds met


def test_inf_times_zero_and_opposite_infinities():
    model = bf.device("H100").model("fp16", "fp32")
    A = np.array([[np.inf, 0.0, 1.0], [np.inf, 1.0, 1.0], [1.0, -np.inf, 1.0], [1.0, 2.0, 3.0]])
    B = np.array([[0.0, 1.0], [1.0, 1.0], [1.0, 1.0]])
    C = np.array([[1.0, 1.0], [-np.inf, -np.inf], [0.0, 0.0], [np.inf, np.nan]])
    D = check(model, A, B, C)
    nan, inf = np.nan, np.inf
    want = np.array([[nan, inf], [nan, nan], [-inf, -inf], [inf, nan]], dtype=np.float32)
    assert np.array_equal(D, want, equal_nan=True)  # the NaN bits: check() held them to the numpy engine


def _variant(**changes) -> Model:
    base = dict(family=Family.TRUNCATED_FUSED, input_format=formats.get("fp16"), output_format=formats.get("fp32"),
                block_width=4, fraction_bits=23, e_zero=-30, output_rounding=formats.RoundingMode.TowardZero)
    base.update(changes)
    return Model(**base)


VARIANTS = {
    "floor": _variant(alignment=Alignment.FLOOR),
    "carry": _variant(carry_bits=1, fraction_bits=12),
    "normalized": _variant(product_exponent="normalized"),
    "rne-ieee-zero": _variant(output_rounding=formats.RoundingMode.TiesToEven, exact_zero="ieee"),
    "down-ieee-zero": _variant(output_rounding=formats.RoundingMode.TowardNegative, exact_zero="ieee"),
    "up": _variant(output_rounding=formats.RoundingMode.TowardPositive),
    "odd": _variant(output_rounding=formats.RoundingMode.ToOdd),
    "away-fp16": _variant(output_rounding=formats.RoundingMode.TiesAway, output_format=formats.get("fp16"),
                          e_zero=-20, fraction_bits=13),
    "L3": _variant(block_width=3),
    "L12-ftz": _variant(block_width=12, subnormals=False, output_format=formats.get("fp16"), fraction_bits=13,
                        e_zero=-20, output_rounding=formats.RoundingMode.TiesToEven),
    "bf16-ieee-overflow": _variant(input_format=formats.get("bf16"), output_format=formats.get("bf16"),
                                   overflow="ieee", fraction_bits=10, e_zero=-140),
    "fp16-small-F": _variant(output_format=formats.get("fp16"), fraction_bits=8, e_zero=-20,
                             output_rounding=formats.RoundingMode.TiesToEven, nan=NaNStyle.DEFAULT),
}


VARIANTS["late-common"] = Model(Family.LATE_C, formats.get("fp16"), formats.get("fp32"), block_width=8,
                               fraction_bits=24, late_fraction_bits=31, late_cut="common")
VARIANTS["late-groups-rz"] = Model(Family.LATE_C, formats.get("bf16"), formats.get("fp32"), block_width=8,
                                   fraction_bits=20, late_fraction_bits=26, groups=2,
                                   output_rounding=formats.RoundingMode.TowardZero)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_options(name):
    model = VARIANTS[name]
    assert tr.supports(model), tr.unsupported_reason(model)
    rng = np.random.default_rng(len(name))
    k = 3 * (model.block_width or 1) + 1
    A, B = values(rng, model.input_format, (6, k), 0.01), values(rng, model.b_format, (k, 5), 0.01)
    C = values(rng, model.c_format, (6, 5), 0.01)
    D = check(model, A, B, C)
    for i, j in [(0, 0), (2, 3), (5, 4)]:
        assert int(formats.bits(D)[i, j]) == reference.dot_bits(model, list(A[i]), list(B[:, j]), C[i, j])


def test_carry_bits_wrap():
    """Four equal products overflow F + 1 + carry_bits bits: the sum wraps (the reference says to what)."""
    model = VARIANTS["carry"]
    A, B = np.full((1, 4), 1.5), np.full((4, 1), 1.5)
    D = check(model, A, B, np.zeros((1, 1)))
    assert int(formats.bits(D)[0, 0]) == reference.dot_bits(model, [1.5] * 4, [1.5] * 4, 0.0)
    assert D[0, 0] != 9.0  # 4 * 2.25 without the wrap


def test_flush_of_tiny_results():
    """subnormals=False: a sum below the smallest normal (fp16: 2**-14) becomes zero; one above stays."""
    model = VARIANTS["L12-ftz"]
    A = np.array([[2.0**-8] * 3, [2.0**-7] * 3])
    B = np.full((3, 1), -(2.0**-8))
    D = check(model, A, B, np.zeros((2, 1)))
    assert D[0, 0] == 0 and D[1, 0] == -3 * 2.0**-15
    for i in range(2):
        assert int(formats.bits(D)[i, 0]) == reference.dot_bits(model, list(A[i]), list(B[:, 0]), 0.0)


def test_c_after_zero_signs():
    """C added after the blocks by an IEEE addition: (-0) + (+0) is +0, (-0) + (-0) is -0 (the step's sum is
    -0 here by cancellation under rounding down, with IEEE zero signs)."""
    model = _variant(c_entry="after", instruction_k=8, exact_zero="ieee",
                     output_rounding=formats.RoundingMode.TowardNegative)
    A = np.array([[1.0, -1.0] + [0.0] * 6] * 2)
    B = np.ones((8, 1))
    C = np.array([[0.0], [-0.0]])
    D = check(model, A, B, C)
    assert formats.bits(D)[:, 0].tolist() == [0x00000000, 0x80000000]
    for i in range(2):
        assert int(formats.bits(D)[i, 0]) == reference.dot_bits(model, list(A[i]), list(B[:, 0]), C[i, 0])


def test_late_c_product_overflow():
    """late-c: a finite product of 2**128 or more is an infinity of its sign (NaN against the other sign)."""
    model = bf.device("MI300X").model("bf16", "fp32")
    A = np.array([[2.0**100, 1.0], [2.0**100, -(2.0**100)], [2.0**60, 1.0]])
    B = np.array([[2.0**30], [2.0**100]])
    D = check(model, A, B, np.zeros((3, 1)))
    assert D[0, 0] == np.inf and np.isnan(D[1, 0]) and D[2, 0] == 2.0**100 + 2.0**90  # rows: 2**130, +-2**200, finite
    for i in range(3):
        assert int(formats.bits(D)[i, 0]) == reference.dot_bits(model, list(A[i]), list(B[:, 0]), 0.0)


def test_late_c_edges():
    """late-c's own steps, each decided by one row: a product of exactly 2**128 overflows even where the
    sum would not; the sum cut at F2 bits below its leading bit turns a sticky bit into a tie (to even);
    with two groups a C far below the products is dropped (floored it would take one unit off)."""
    cases = [(bf.device("MI300X").model("bf16", "fp32"), [2.0**100, -(2.0**100)], [2.0**28, 2.0**27], 0.0, np.inf),
             (bf.device("MI300X").model("fp16", "fp32"), [2.0**-8, 2.0**-12], [2.0**-8, 2.0**-12], 256.0, 256.0),
             (bf.device("MI300X").model("e4m3fnuz", "fp32"), [1.0, 0.0], [1.0, 0.0], -(2.0**-26), 1.0)]
    for model, a, b, c, want in cases:
        D = check(model, np.array([a]), np.array([b]).T, np.array([[c]]))
        assert D[0, 0] == want, (model.summary(), D[0, 0])
        assert int(formats.bits(D)[0, 0]) == reference.dot_bits(model, a, b, c)


def test_cancellation_and_overflow():
    """Exact cancellation (the sign of an exactly zero sum), sums beyond the output's range."""
    model = _variant(output_rounding=formats.RoundingMode.TiesToEven, exact_zero="ieee",
                     output_format=formats.get("fp16"), fraction_bits=13, e_zero=-20)
    A = np.array([[1.0, -1.0, 0.5, -0.5], [-0.0, 0.0, -0.0, -0.0], [60000.0, 60000.0, 60000.0, 60000.0],
                  [-0.0, -0.0, -0.0, -0.0]])
    B = np.array([[1.0], [1.0], [1.0], [1.0]])
    D = check(model, A, B, np.array([[0.0], [-0.0], [0.0], [-0.0]]))
    assert formats.bits(D)[:, 0].tolist() == [0x0000, 0x0000, 0x7C00, 0x8000]


def _random_codes(rng: np.random.Generator, fmt, shape, specials: float) -> np.ndarray:
    """Values of uniformly drawn codes of ``fmt`` (every exponent, subnormals, zeros, and infinities and
    NaN), non-finite ones kept at rate ``specials`` (else +0)."""
    x = formats.decode(fmt, rng.integers(0, 1 << fmt.bits, shape, dtype=np.uint64)) \
        if fmt.bits <= 16 else rng.standard_normal(shape).astype(np.float32).astype(np.float64)
    x = formats.round(fmt, x, "rne") if fmt.bits > 16 else x
    drop = ~np.isfinite(x) & (rng.random(shape) >= specials)
    return np.where(drop, 0.0, x)


@settings(max_examples=10, deadline=None)
@given(preset=st.sampled_from(PRESETS), seed=st.integers(0, 2**32 - 1),
       specials=st.sampled_from([0.0, 0.01, 0.2]), m=st.integers(1, 9), n=st.integers(1, 9),
       k=st.integers(1, 40))
def test_random_codes(preset, seed, specials, m, n, k):
    """Uniform random codes (wide exponent spreads: truncation at every distance) and random shapes."""
    model = bf.device(preset[0]).model(*preset[1:])
    rng = np.random.default_rng(seed)
    A = _random_codes(rng, model.input_format, (m, k), specials)
    B = _random_codes(rng, model.b_format, (k, n), specials)
    C = _random_codes(rng, model.c_format, (m, n), specials)
    check(model, A, B, C)


def test_refusals(monkeypatch):
    amx = Model(Family.AMX, formats.get("bf16"), formats.get("fp32"), block_width=2)
    assert not tr.supports(amx)
    with pytest.raises(ValueError, match="pairwise and fma-chain families only, not amx"):
        bf.gemm(np.ones((2, 4)), np.ones((4, 2)), model=amx, backend="triton")
    f16c = bf.device("V100").instruction("mma.f16c").models[("fp16", "fp32")]
    assert tr.supports(f16c), tr.unsupported_reason(f16c)  # C read in fp16 in the first block: run (below)
    with pytest.raises(ValueError, match="runs bf.gemm only"):
        bf.dot(np.ones(4), np.ones(4), backend="triton")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    import torch

    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="TRITON_INTERPRET=1"):
            bf.gemm(np.ones((2, 4)), np.ones((4, 2)), backend="triton")


def test_shapes_and_empty():
    model = bf.device("H100").model("fp16", "fp32")
    rng = np.random.default_rng(3)
    A, B = values(rng, model.input_format, (20, 1)), values(rng, model.b_format, (1, 17))
    check(model, A, B, np.zeros((20, 17)))  # k = 1, m and n past one tile
    assert bf.gemm(np.ones((0, 4)), np.ones((4, 3)), backend="triton").shape == (0, 3)


def test_tensors_with_any_strides():
    """gemm_tensors on torch tensors as they come (a transposed view of B): the numpy engine's bits."""
    import torch

    model = bf.device("H100").model("bf16", "fp32")
    rng = np.random.default_rng(11)
    A, B = values(rng, model.input_format, (5, 20)), values(rng, model.b_format, (20, 6))
    C = values(rng, model.c_format, (5, 6))
    bt = torch.from_numpy(np.ascontiguousarray(B.T, dtype=np.float32))
    d = tr.gemm_tensors(model, torch.from_numpy(A.astype(np.float32)), bt.T, torch.from_numpy(C.astype(np.float32)))
    want = bf.gemm(A, B, C, model=model, backend="numpy")
    assert same_bits(bf.engine.api.finish(model.arithmetic_model(), d.numpy().astype(np.float64)), want) == 0


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available() and not INTERPRETED_AT_START


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason="no CUDA GPU visible to torch (or TRITON_INTERPRET was set before triton "
                    "was imported)")
@pytest.mark.parametrize("dev,fin,fout,instruction", PRESETS)
def test_gpu_kernel_equals_cpu_engine(dev, fin, fout, instruction):
    """The compiled kernel on a CUDA GPU, bit for bit against the CPU engine, at a shape of several tiles
    in each direction and K of many blocks, with and without special values."""
    model = bf.device(dev).model(fin, fout, instruction)
    rng = np.random.default_rng(zlib.crc32(f"gpu {dev} {fin} {fout} {instruction}".encode()))
    for specials in (0.0, 0.001):
        A = values(rng, model.input_format, (130, 300), specials)
        B = values(rng, model.b_format, (300, 97), specials)
        C = values(rng, model.c_format, (130, 97), specials)
        got = bf.gemm(A, B, C, model=model, backend="triton")
        assert same_bits(got, bf.gemm(A, B, C, model=model, backend="auto")) == 0



def test_a_gemm_that_cannot_fit_the_device_is_refused_before_anything_moves(monkeypatch):
    """64x512x64 in float32 takes 4 (64*512 + 512*64 + 2*64*64) = 294,912 bytes of A, B, C and D."""
    import torch

    cuda = torch.device("cuda")  # only named: check_fits reads free_bytes, stood in here
    monkeypatch.setattr(tr, "free_bytes", lambda device: 294_912)
    tr.check_fits(64, 512, 64, cuda)  # exactly enough
    monkeypatch.setattr(tr, "free_bytes", lambda device: 294_911)  # one byte short
    with pytest.raises(MemoryError, match=r"^gemm 64x512x64 on cuda needs about 0.00 GiB of device memory "):
        tr.check_fits(64, 512, 64, cuda)
    moved: list = []
    monkeypatch.setattr(torch, "from_numpy", lambda *a: moved.append(a))
    with pytest.raises(MemoryError, match="split the call into blocks of rows of A"):
        bf.gemm(np.ones((64, 512)), np.ones((512, 64)), device="H100", input_format="fp16", output_format="fp32",
                backend="triton")
    assert moved == []  # refused before any operand became a tensor


# ---- the fast path (float32 products, int32 cut terms; triton_kernel's header says when it is exact) ----------


def _tensors(*xs):
    import torch

    return [torch.from_numpy(np.asarray(x, dtype=np.float32)) for x in xs]


def both_paths(model: Model, A: np.ndarray, B: np.ndarray, C: np.ndarray, grid_only: bool = False,
               dtype=None, **launch) -> np.ndarray:
    """The kernel on the fast path (which must hold these operands: with its grid sum where that holds too, and
    with int32 terms) and on the general one: each the numpy engine's bits.  ``grid_only``: the grid sum alone
    (which must hold), for the tests of its own edge cases (the interpreter's time is the suite's).  ``dtype``:
    the torch dtype A and B are handed over in (None: float32)."""
    a, b, c = _tensors(A, B, C)
    a, b = (a, b) if dtype is None else (a.to(dtype), b.to(dtype))  # exact: values of that dtype
    assert tr.fast_constants(model, a, b)["FAST"]
    want = bf.gemm(A, B, C, model=model, backend="numpy")
    arith = model.arithmetic_model()
    width = schedule(model.arithmetic_model()).width(A.shape[1])
    grid = True if tr.grid_path(model, width) and np.isfinite(A).all() and np.isfinite(B).all() else None
    assert grid or not grid_only, model.name
    paths = ({"fast": True, "grid": grid}, {"fast": True, "grid": False}, {"fast": False})
    for path in paths[:1] if grid_only else paths:
        d = tr.gemm_tensors(model, a, b, c, **path, **launch)
        assert same_bits(bf.engine.api.finish(arith, d.numpy().astype(np.float64)), want) == 0, path
    return want


def _in_range(rng: np.random.Generator, fmt, shape, lo: int, hi: int, specials: float = 0.0) -> np.ndarray:
    """Values of ``fmt`` with exponents drawn from [lo, hi] (lo and hi themselves among them), zeros of both
    signs, and non-finite ones at rate ``specials``."""
    e = rng.integers(lo, hi + 1, shape)
    e.flat[:2] = [lo, hi]
    x = formats.round(fmt, np.ldexp(rng.uniform(1, 2, shape), e) * rng.choice([-1, 1], shape), "rz")
    r = rng.random(shape)
    x[r < 0.1] = 0.0
    x[(r > 0.1) & (r < 0.15)] = -0.0 if fmt.has_negative_zero else 0.0
    if fmt.has_infinities:
        x[(r > 0.5) & (r < 0.5 + specials / 2)] = np.inf
    x[(r > 0.6) & (r < 0.6 + specials / 2)] = np.nan
    return x


# --- C narrower than D (c_input_format): the first step's block reads the C given in that format ------------------
NARROW_C = {"V100": "mma.f16c", "T4": "mma.m8n8k4.f16c"}  # fp16 C, fp32 D; without ".f16c": the fp32-C instruction
X = (1 + 2**-10) * 2**-10  # X * X = 2**-20 (1 + 2**-9 + 2**-20): its last bit 2**-40 lies below 2**(-14 - 23)


def _narrow_c(dev: str) -> tuple[Model, Model]:
    """The preset that reads C in fp16 (``c_input_format``) and its instruction's fp32-C model."""
    ins = NARROW_C[dev]
    return (bf.device(dev).instruction(ins).models[("fp16", "fp32")],
            bf.device(dev).instruction(ins.removesuffix(".f16c")).models[("fp16", "fp32")])


def _small_fp16(rng: np.random.Generator, shape, top: int, subnormal: float = 0.0) -> np.ndarray:
    """fp16 values of random sign and fraction with exponent fields 0 .. top (products of two of them with
    top 8 lie below 2**-12), a share ``subnormal`` of them (at least) subnormal or zero."""
    field = np.where(rng.random(shape) < subnormal, 0, rng.integers(0, top + 1, shape))
    codes = rng.integers(0, 1 << 16, shape) & 0x83FF | (field << 10)
    return formats.decode(formats.get("fp16"), codes.astype(np.uint64))


@pytest.mark.parametrize("dev", list(NARROW_C))
def test_narrow_c_presets(dev):
    """The ``.f16c`` presets at k = 4, 8, 12 (one to three blocks) on small products and a C mostly subnormal
    in fp16 (where reading its exponent at fp16's emin -14 decides the block's e_max): the kernel on its
    fast and general paths and through bf.gemm gives the numpy engine's bits and the exact reference's on
    every output; the fp32-C model differs on some of them, each with a C subnormal in fp16."""
    model, wide_c = _narrow_c(dev)
    assert model.c_format is formats.get("fp16") and tr.supports(model)
    rng = np.random.default_rng(zlib.crc32(dev.encode()))
    differ = 0
    for k in (4, 8, 12):
        A, B = _small_fp16(rng, (6, k), 8), _small_fp16(rng, (k, 5), 8)
        C = _small_fp16(rng, (6, 5), 5, subnormal=0.6)
        want = both_paths(model, A, B, C)
        check(model, A, B, C)
        ref = [[reference.dot_bits(model, list(A[i]), list(B[:, j]), C[i, j]) for j in range(5)] for i in range(6)]
        assert formats.bits(want).astype(np.int64).tolist() == ref, k
        other = formats.bits(bf.gemm(A, B, C, model=wide_c, backend="numpy"))
        subnormal = (C != 0) & (np.abs(C) < 2.0**-14)
        assert not np.any((other != formats.bits(want)) & ~subnormal)
        differ += int(np.sum(other != formats.bits(want)))
    assert differ > 0  # the rows tell the two readings of C apart


@pytest.mark.parametrize("dev", list(NARROW_C))
def test_narrow_c_pinned_rows(dev):
    """a = b = X at position 0, C = 2**-20 (subnormal in fp16): read in fp16 C's exponent is -14, the quantum
    2**-37 cuts the product's last bit (2**-40): 0x1.004p-19; the fp32-C model reads -20 and keeps it:
    0x1.004008p-19.  With X at position 4 the first block only carries C on (its result 2**-20, the second
    block's C, read in fp32): 0x1.004008p-19 under both models."""
    model, wide_c = _narrow_c(dev)
    A = np.zeros((2, 8))
    A[0, 0] = A[1, 4] = X
    C = np.full((2, 2), 2.0**-20)
    first, later = float.fromhex("0x1.004p-19"), float.fromhex("0x1.004008p-19")
    for m, want in ((model, first), (wide_c, later)):
        D = both_paths(m, A[:, :4], A[:, :4].T, C)  # one block
        assert D[0, 0] == want and D[1, 1] == 2.0**-20
        D = both_paths(m, A, A.T, C)  # two blocks
        assert D[0, 0] == want and D[1, 1] == later
        assert reference.dot_bits(m, list(A[0]), list(A[0]), 2.0**-20) == int(np.float32(want).view(np.uint32))
        assert reference.dot_bits(m, list(A[1]), list(A[1]), 2.0**-20) == int(np.float32(later).view(np.uint32))


NARROW_C_VARIANTS = [  # beside the presets: the floor cut with carry bits, and a product order (ORDERED)
    Model(Family.TRUNCATED_FUSED, "fp16", "fp32", block_width=4, fraction_bits=23, e_zero=-140,
          alignment=Alignment.FLOOR, carry_bits=2, exact_zero="positive", c_input_format="fp16", name="f16c floor"),
    Model(Family.TRUNCATED_FUSED, "fp16", "fp32", block_width=8, fraction_bits=25, e_zero=-133,
          product_order="halves", exact_zero="positive", c_input_format="fp16", name="f16c halves")]


@settings(max_examples=8, deadline=None)
@given(which=st.integers(0, len(NARROW_C) + len(NARROW_C_VARIANTS) - 1), seed=st.integers(0, 2**32 - 1),
       m=st.integers(1, 4), n=st.integers(1, 4), blocks=st.integers(1, 3), short=st.integers(0, 3))
def test_narrow_c_hypothesis(which, seed, m, n, blocks, short):
    """Models with an fp16 c_input_format on small products and a mostly fp16-subnormal C, any k: the
    kernel's bits (both paths) are the exact reference's."""
    models = [_narrow_c(dev)[0] for dev in NARROW_C] + NARROW_C_VARIANTS
    model = models[which]
    rng = np.random.default_rng(seed)
    k = max(blocks * model.block_width - short, 1)
    A, B = _small_fp16(rng, (m, k), 8, 0.1), _small_fp16(rng, (k, n), 8, 0.1)
    C = _small_fp16(rng, (m, n), 5, subnormal=0.7)
    D = formats.bits(both_paths(model, A, B, C))
    for i in range(m):
        for j in range(n):
            assert int(D[i, j]) == reference.dot_bits(model, list(A[i]), list(B[:, j]), C[i, j]), (i, j)


def test_fast_path_where_it_holds():
    """fp16 and fp8 inputs by their formats; bf16/tf32 by their values: a binary32 subnormal, or products
    beyond [2**(F - 127), 2**128), send the call down the general path; so do fp32 inputs (48-bit products)
    and normalized product exponents."""
    ones = _tensors(np.ones((2, 2)))[0]
    for preset in [("H100", "fp16", "fp32"), ("H100", "e4m3fn", "fp16"), ("V100", "fp16", "fp16"),
                   ("B200", "e4m3fn", "fp32"), ("MI300X", "e4m3fnuz", "fp32")]:
        assert tr.fast_constants(bf.device(preset[0]).model(*preset[1:]))["FAST"], preset
    h100 = bf.device("H100").model("bf16", "fp32")  # F = 25: products down to 2**-102
    assert not tr.fast_constants(h100)["FAST"]  # the format alone does not say
    for a, b, fast in [(2.0**-51, 2.0**-51, True), (2.0**-52, 2.0**-51, False), (2.0**63, 2.0**63, True),
                       (2.0**64, 2.0**63, False), (2.0**-130, 1.0, False)]:
        a_, b_ = _tensors([[1.0, a]], [[1.0], [b]])
        assert tr.fast_constants(h100, a_, b_)["FAST"] is fast, (a, b)
    assert tr.fast_constants(h100, *_tensors([[0.0, -0.0]], [[1.0], [2.0**-130]]))["FAST"]  # no nonzero product
    late16 = Model(Family.LATE_C, formats.get("fp16"), formats.get("fp16"), block_width=8, fraction_bits=24,
                   late_fraction_bits=31)  # C in fp16: a product of 2**16 or more overflows, the general path's
    assert tr._config(late16.arithmetic_model(), False).BLOCK.C_EMAX == 15 and not tr.fast_constants(late16)["FAST"]
    assert tr.fast_constants(late16, *_tensors([[2.0**7]], [[2.0**7]]))["FAST"]
    assert not tr.fast_constants(late16, *_tensors([[2.0**8]], [[2.0**7]]))["FAST"]
    const = tr.fast_constants(h100, ones, ones)
    assert const["FAST"] and const["CHUNK"] == 16 and const["SUM64"]  # 16 terms below 2**27 fit int32, C not
    fp32 = _variant(input_format=formats.get("fp32"))
    assert not tr.fast_constants(fp32, ones, ones)["FAST"]
    assert not tr.fast_constants(VARIANTS["normalized"], ones, ones)["FAST"]
    with pytest.raises(bf.arguments.ArgumentError, match=r"^fast=True: the fast path does not hold .*pass fast=None"):
        tr.gemm_tensors(fp32, ones, ones, ones, fast=True)


@pytest.mark.parametrize("dev,fin,fout", [("H100", "bf16", "fp32"), ("A100", "tf32", "fp32"),
                                          ("MI300X", "bf16", "fp32")])
def test_fast_path_at_the_edges_of_its_range(dev, fin, fout):
    """bf16/tf32 values whose exponents reach both ends of the fast path's range (products from 2**(F - 127)
    to just below 2**128, in one block: the scale 2**(F - emax) at binary32's ends), with zeros and
    specials: the fast path and the general one, bit for bit, and the exact reference."""
    model = bf.device(dev).model(fin, fout)
    F = model.arithmetic_model().block_model().fraction_bits
    rng = np.random.default_rng(zlib.crc32(f"edges {dev} {fin}".encode()))
    lo = -((127 - F) // 2)
    A = _in_range(rng, model.input_format, (4, 19), lo, 63, 0.02)
    B = _in_range(rng, model.b_format, (19, 3), F - 127 - lo, 63, 0.02)
    C = values(rng, model.c_format, (4, 3), 0.05)
    # row 3 x column 2: every product near 2**(F - 127), C zero: emax = F - 127, the scale 2**127
    A[3] = formats.round(model.input_format, np.ldexp(rng.uniform(1, 2, 19), lo) * rng.choice([-1, 1], 19), "rz")
    B[:, 2] = formats.round(model.b_format, np.ldexp(rng.uniform(1, 2, 19), F - 127 - lo), "rz")
    C[3, 2] = 0.0
    D = both_paths(model, A, B, C)
    assert D[3, 2] != 0
    for i, j in [(0, 0), (1, 2), (3, 1), (3, 2)]:
        assert int(formats.bits(D)[i, j]) == reference.dot_bits(model, list(A[i]), list(B[:, j]), C[i, j])


def test_fast_floor_of_an_underflowing_term():
    """alignment='floor': a negative product 2**-48 far below C = 2**126 scales to -2**-151, which binary32
    cannot hold (it becomes -0, or flushes): its floor is still -1 unit (2**103 here)."""
    model = VARIANTS["floor"]
    A = np.array([[2.0**-24, 0.0, 0.0, 0.0], [2.0**-24, 0.0, 0.0, 0.0]])
    B = np.array([[-(2.0**-24)], [0.0], [0.0], [0.0]])
    C = np.array([[2.0**126], [-(2.0**126)]])
    D = both_paths(model, A, B, C)
    assert D[:, 0].tolist() == [2.0**126 - 2.0**103, -(2.0**126 + 2.0**103)]  # both floored one unit down
    for i in range(2):
        assert int(formats.bits(D)[i, 0]) == reference.dot_bits(model, list(A[i]), list(B[:, 0]), C[i, 0])


def test_fast_sum_beyond_int32():
    """16 products of fp16's largest significand (1.999 * 1.999, 2**27 - 2**17 units each) and C of the same
    exponent: their sum passes 2**31, so the int32 sum of the 16 terms goes on in int64 with C."""
    model = bf.device("H100").model("fp16", "fp32")
    big = 2.0 - 2.0**-10
    A = np.array([[big] * 16, [-big] * 16])
    B = np.full((16, 1), big)
    C = np.array([[2.0 - 2.0**-23], [-(2.0 - 2.0**-23)]])
    D = both_paths(model, A, B, C)
    for i in range(2):
        assert int(formats.bits(D)[i, 0]) == reference.dot_bits(model, list(A[i]), list(B[:, 0]), C[i, 0])


def test_fast_zero_products_e_zero():
    """e_zero above C's emin (a made-up model): a block of zero products puts its largest exponent at e_zero,
    above a tiny C, which is then cut at e_zero - F (the fast path's EZ_LIVE flags); with no zero product it
    is not."""
    model = _variant(output_format=formats.get("fp16"), fraction_bits=8, e_zero=-10,
                     output_rounding=formats.RoundingMode.TiesToEven)
    assert tr.fast_constants(model)["EZ_LIVE"] and not tr.fast_constants(bf.device("H100").model())["EZ_LIVE"]
    c = 2.0**-14 * (1 + 2.0**-6)  # its last bit at 2**-20: kept at the unit 2**(-14 - F), cut at 2**(-10 - F)
    A = np.array([[0.0, 0.0, 0.0, 0.0], [2.0**-14, 2.0**-14, 2.0**-14, 2.0**-14]])
    B = np.full((4, 1), 2.0**-10)
    D = both_paths(model, A, B, np.array([[c], [c]]))
    assert D[0, 0] == 2.0**-14  # cut at 2**-18
    for i in range(2):
        assert int(formats.bits(D)[i, 0]) == reference.dot_bits(model, list(A[i]), list(B[:, 0]), c)


def test_fast_exponents_at_emin():
    """A's exponent codes (read once per value on the fast path) at fp16's emin: 2**-14 (1 + 2**-8) and a
    subnormal, both E = -14, the block's largest exponent: with F = 8 the unit is 2**-22, which keeps the
    last bit of the first (one exponent higher would cut it)."""
    model = VARIANTS["fp16-small-F"]
    A = np.array([[2.0**-14 * (1 + 2.0**-8), 0.0], [3 * 2.0**-24, 2.0**-14 * (1 + 2.0**-8)]])
    B = np.array([[1.0], [0.0]])
    D = both_paths(model, A, B, np.zeros((2, 1)))
    assert D[0, 0] == 2.0**-14 * (1 + 2.0**-8)
    for i in range(2):
        assert int(formats.bits(D)[i, 0]) == reference.dot_bits(model, list(A[i]), list(B[:, 0]), 0.0)


def test_launch_parameters():
    """Tiles of any power-of-two shape and warps give the same bits; a bad one is refused by name first."""
    model = bf.device("H100").model("fp16", "fp32")
    rng = np.random.default_rng(5)
    A, B = values(rng, model.input_format, (9, 20)), values(rng, model.b_format, (20, 5))
    C = values(rng, model.c_format, (9, 5))
    both_paths(model, A, B, C, block_m=8, block_n=4, num_warps=2)
    a, b, c = _tensors(A, B, C)
    for name, bad in [("block_m", 24), ("block_n", 0), ("num_warps", 3)]:
        with pytest.raises(bf.arguments.ArgumentError, match=rf"^{name}={bad}: must be "):
            tr.gemm_tensors(model, a, b, c, **{name: bad})


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason="no CUDA GPU visible to torch (or TRITON_INTERPRET was set before triton "
                    "was imported)")
@pytest.mark.parametrize("dev,fin,fout", [("H100", "fp16", "fp32"), ("H100", "bf16", "fp32"),
                                          ("H100", "e4m3fn", "fp32"), ("B200", "e4m3fn", "fp32"),
                                          ("MI300X", "fp16", "fp32"), ("MI300X", "e4m3fnuz", "fp32")])
def test_gpu_fast_path_equals_general_path(dev, fin, fout):
    """On a CUDA GPU: the fast path (at its default tile and at 32 x 32 x 4 warps) and the general path, bit
    for bit against the CPU engine, on operands the fast path holds (bf16 within its range), with specials."""
    import torch

    model = bf.device(dev).model(fin, fout)
    F = model.arithmetic_model().block_model().fraction_bits
    rng = np.random.default_rng(zlib.crc32(f"gpu fast {dev} {fin}".encode()))
    lo = -((127 - F) // 2) if fin == "bf16" else -6
    A = _in_range(rng, model.input_format, (130, 300), lo, 7, 0.001)
    B = _in_range(rng, model.b_format, (300, 97), lo, 7, 0.001)
    C = values(rng, model.c_format, (130, 97), 0.001)
    want = bf.gemm(A, B, C, model=model, backend="auto")
    a, b, c = (torch.from_numpy(np.asarray(x, dtype=np.float32)).cuda() for x in (A, B, C))
    assert tr.fast_constants(model, a, b)["FAST"]
    for launch in ({}, {"block_m": 32, "block_n": 32, "num_warps": 4}, {"grid": False}, {"fast": False}):
        d = tr.gemm_tensors(model, a, b, c, **launch).cpu().numpy().astype(np.float64)
        assert same_bits(bf.engine.api.finish(model.arithmetic_model(), d), want) == 0, launch


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason="no CUDA GPU visible to torch (or TRITON_INTERPRET was set before triton "
                    "was imported)")
@pytest.mark.parametrize("dev", list(NARROW_C))
def test_gpu_narrow_c(dev):
    """On a CUDA GPU: the ``.f16c`` presets on small products and a C mostly subnormal in fp16, at a shape of
    several tiles and K of many blocks, the fast path (two tiles) and the general one against the CPU engine."""
    import torch

    model = _narrow_c(dev)[0]
    rng = np.random.default_rng(zlib.crc32(f"gpu narrow {dev}".encode()))
    A, B = _small_fp16(rng, (130, 300), 8, 0.1), _small_fp16(rng, (300, 97), 8, 0.1)
    C = _small_fp16(rng, (130, 97), 5, subnormal=0.6)
    want = bf.gemm(A, B, C, model=model, backend="numpy")
    a, b, c = (torch.from_numpy(np.asarray(x, dtype=np.float32)).cuda() for x in (A, B, C))
    for launch in ({}, {"block_m": 32, "block_n": 32, "num_warps": 4}, {"grid": False}, {"fast": False}):
        d = tr.gemm_tensors(model, a, b, c, **launch).cpu().numpy().astype(np.float64)
        assert same_bits(bf.engine.api.finish(model.arithmetic_model(), d), want) == 0, launch


# ---- the grid path (one FMA rounding toward zero per product) and its stand-in -------------------------------


def _fma_rz_oracle(a: float, b: float, c: float) -> float:
    """a * b + c rounded toward zero into binary32, by Fractions: the binary32 value next to the exact sum on
    the side of zero (nearest first, then stepped)."""
    from fractions import Fraction

    exact = Fraction(a) * Fraction(b) + Fraction(c)
    r = np.float32(float(exact))
    while r != 0 and abs(Fraction(float(r))) > abs(exact):
        r = np.nextafter(r, np.float32(0))
    return float(r)


def _fma_rz_cases(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """binary32 a, b, c as the grid path meets them (an accumulator 1.5 * 2**k near its binade's ends, products
    far below its last place, of both signs, exact and inexact) and at large: cancellation, subnormal sums,
    zeros (finite sums: the grid path has no others)."""
    k = rng.integers(-120, 100, n)
    c = np.ldexp(rng.uniform(1, 2, n), k) * rng.choice([-1, 1], n)
    c[: n // 4] = np.ldexp(1.5, k[: n // 4]) * np.sign(c[: n // 4])
    c[n // 4: n // 2] = np.ldexp(1 + rng.integers(0, 8, n // 4) * 2.0**-23, k[n // 4: n // 2])  # a binade's bottom
    ea = rng.integers(-30, 30, n)
    a = np.ldexp(rng.uniform(1, 2, n), ea) * rng.choice([-1, 1], n)
    b = np.ldexp(rng.uniform(1, 2, n), k - 23 - ea + rng.integers(-30, 8, n))  # products 2**-30 to 2**8 units
    a, b, c = (x.astype(np.float32) for x in (a, b, c))
    c[-6:] = [np.float32(2.0**126 * 1.5), np.float32(-(2.0**-126)), 1.0, 0.0, -0.0, 3.0]
    a[-6:] = [np.float32(2.0**124), np.float32(2.0**-60), 1.0, 2.0**-75, -(2.0**-75), -3.0]
    b[-6:] = [np.float32(1.5), np.float32(-(2.0**-90)), -1.0, 2.0**-75, 2.0**-75, 1.0]
    return a, b, c


def _fma_rz_kernel():
    """A kernel of one fma_rz per element (defined at first use, in the process's Triton mode)."""
    import triton
    import triton.language as tl

    tr._kernel()  # the kernel modules, imported in this process's mode
    from blockfma.engine import triton_kernel

    global tk  # a jitted function reads the module's globals (not a closure)
    tk = triton_kernel

    @triton.jit
    def fma_rz_kernel(a_ptr, b_ptr, c_ptr, d_ptr, n, STANDIN: tl.constexpr, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        a = tl.load(a_ptr + i, mask=i < n, other=0.0)
        b = tl.load(b_ptr + i, mask=i < n, other=0.0)
        c = tl.load(c_ptr + i, mask=i < n, other=0.0)
        tl.store(d_ptr + i, tk.fma_rz(a, b, c, STANDIN), mask=i < n)

    return fma_rz_kernel


def _fma_rz_run(a, b, c, standin: bool, device: str) -> np.ndarray:
    import torch

    x = [torch.from_numpy(v).to(device) for v in (a, b, c)]
    d = torch.empty_like(x[2])
    _fma_rz_kernel()[(-(-len(a) // 64),)](*x, d, len(a), STANDIN=standin, BLOCK=64)
    return d.cpu().numpy()


def test_fma_rz_standin_against_fractions():
    """The interpreter's stand-in of fma.rz (no inline assembly there) is the exact product-sum rounded toward
    zero, bit for bit, on the grid path's cases and at large (Fractions the oracle)."""
    a, b, c = _fma_rz_cases(np.random.default_rng(32), 400)
    got = _fma_rz_run(a, b, c, True, "cpu")
    want = np.array([_fma_rz_oracle(float(x), float(y), float(z)) for x, y, z in zip(a, b, c)], dtype=np.float32)
    assert int(np.sum(got.view(np.uint32) != want.view(np.uint32))) == 0


def _max_sum16_run(acc, a, b, standin: bool, device: str) -> np.ndarray:
    """The fast path's first-pass step (max(acc, a + b) in each 16-bit half) on int32 words, by a kernel."""
    import torch
    import triton
    import triton.language as tl

    _fma_rz_kernel()  # tk: the kernel module, in this process's mode

    @triton.jit
    def max_sum16_kernel(acc_ptr, a_ptr, b_ptr, d_ptr, STANDIN: tl.constexpr, N: tl.constexpr):
        i = tl.arange(0, N)
        tl.store(d_ptr + i, tk._max_sum16(tl.load(acc_ptr + i), tl.load(a_ptr + i), tl.load(b_ptr + i), STANDIN))

    x = [torch.from_numpy(v).to(device) for v in (acc, a, b)]
    d = torch.empty_like(x[0])
    max_sum16_kernel[(1,)](*x, d, STANDIN=standin, N=len(a))
    return d.cpu().numpy()


def _max_sum16_cases(rng) -> tuple[np.ndarray, ...]:
    """Words of the first pass's codes (0, 1, E_fmt + CODE_BIAS in [257, 510]) and of their running maxima,
    with the per-half maximum of the sums (numpy, the oracle)."""
    codes = np.concatenate([[0, 1], np.arange(257, 511)])
    a, b = ((rng.choice(codes, 1024) | (rng.choice(codes, 1024) << 16)).astype(np.int32) for _ in range(2))
    acc = (rng.integers(0, 1021, 1024) | (rng.integers(0, 1021, 1024) << 16)).astype(np.int32)
    want = [np.maximum((acc >> s) & 0xFFFF, ((a >> s) & 0xFFFF) + ((b >> s) & 0xFFFF)) << s for s in (0, 16)]
    return acc, a, b, (want[0] | want[1]).astype(np.int32)


def test_max_sum16_standin():
    """The interpreter's stand-in of the first pass's add.u16x2 and max.u16x2 (no inline assembly there): the
    maximum of the sums in each half, bit for bit."""
    acc, a, b, want = _max_sum16_cases(np.random.default_rng(16))
    assert np.array_equal(_max_sum16_run(acc, a, b, True, "cpu"), want)


E4M3_FLOOR = _variant(input_format=formats.get("e4m3fn"), alignment=Alignment.FLOOR, fraction_bits=13,
                      block_width=32, e_zero=-40, exact_zero="ieee", output_rounding=formats.RoundingMode.TiesToEven)


def test_grid_path_and_refusals():
    """The grid path for fp8 models (F = 13, 32 or 16 products): with the count's code biases where the cut is
    toward zero (e4m3: 9 + 9, e5m2: 16 + 16), none where it floors; not for F = 25 (fp16), late-c or normalized
    exponents; grid=True refused by name where it does not hold (NaN among the operands)."""
    assert tr.grid_path(bf.device("H100").model("e4m3fn", "fp32"), 32) == {"GRID": True, "CBIAS": 18}
    assert tr.grid_path(bf.device("H100").model("e5m2", "fp32"), 32) == {"GRID": True, "CBIAS": 32}
    assert tr.grid_path(bf.device("RTX4090").model("e4m3fn", "fp32"), 16) == {"GRID": True, "CBIAS": 18}
    assert tr.grid_path(E4M3_FLOOR, 32) == {"GRID": True, "CBIAS": 0}
    assert tr.grid_path(bf.device("H100").model("e4m3fn", "fp32"), 30) is None  # steps of whole quads only
    for model in (bf.device("H100").model("fp16", "fp32"), bf.device("MI300X").model("e4m3fnuz", "fp32"),
                  VARIANTS["normalized"]):
        assert tr.grid_path(model, 32) is None, model.name
    model = bf.device("H100").model("e4m3fn", "fp32")
    a, b, c = _tensors([[1.0, np.nan]], [[1.0], [2.0]], [[0.0]])
    with pytest.raises(bf.arguments.ArgumentError, match=r"^grid=True: the grid sum does not hold .*pass grid=None"):
        tr.gemm_tensors(model, a, b, c, grid=True)
    with pytest.raises(bf.arguments.ArgumentError, match=r"^grid=1: must be True, False or None"):
        tr.gemm_tensors(model, a, b, c, grid=1)


def test_grid_unit_clamped_at_the_top():
    """C = +-2**126 over e4m3 products: the unit 2**113 lies above the accumulator's range and is clamped to
    2**103, where every product is still below one unit: a negative product floors to -1 unit either way
    (E4M3_FLOOR), and under truncation (the H100 preset, with the count) to 0."""
    A = np.array([[-448.0, 2.0**-9] + [0.0] * 30, [448.0, 1.0] + [0.0] * 30])
    B = np.full((32, 1), 448.0)
    C = np.array([[2.0**126], [-(2.0**126)]])
    for model in (E4M3_FLOOR, bf.device("H100").model("e4m3fn", "fp32")):
        D = both_paths(model, A, B, C, grid_only=True)
        for i in range(2):
            assert int(formats.bits(D)[i, 0]) == reference.dot_bits(model, list(A[i]), list(B[:, 0]), C[i, 0])
    assert both_paths(E4M3_FLOOR, A, B, C, grid_only=True)[0, 0] == 2.0**126 - 2.0**113


def test_grid_count():
    """The count of negative inexact products (fp8 codes, four lanes a word): products that straddle the cut,
    of both signs, a block of the largest products (every smaller one cut), subnormal factors, K padded to a
    whole step: the numpy engine's bits."""
    for model in (bf.device("H100").model("e4m3fn", "fp32"), bf.device("H100").model("e5m2", "fp32")):
        rng = np.random.default_rng(31)
        A, B = values(rng, model.input_format, (6, 70), finite=True), values(rng, model.b_format, (70, 5), finite=True)
        A[0, :32] = -model.input_format.max
        A[1] = model.input_format.smallest_subnormal
        C = values(rng, model.c_format, (6, 5))
        both_paths(model, A, B, C, grid_only=True)


def test_grid_exact_zero_signs():
    """IEEE zero signs on the grid path (its extra pass over a tile with an exactly zero sum): products that
    cancel, products that are all zeros of sign - (with C = -0), zeros of mixed signs, beside rows that are not
    zero; floor and the count, rounding to nearest and down."""
    down = E4M3_FLOOR.replace(alignment=Alignment.TRUNCATE, output_rounding=formats.RoundingMode.TowardNegative)
    for model in (E4M3_FLOOR, down, E4M3_FLOOR.replace(alignment=Alignment.TRUNCATE)):
        L = model.block_width
        A = np.zeros((4, L + 3))
        A[0, :2] = [2.0, -2.0]
        A[1, :] = -0.0
        A[2, 0] = -0.0
        A[3, :] = 1.5
        B = np.ones((L + 3, 2))
        B[:, 1] = 0.5
        C = np.array([[0.0, -0.0], [-0.0, -0.0], [0.0, -0.0], [0.0, 1.0]])
        D = both_paths(model, A, B, C, grid_only=True)
        for i in range(4):
            for j in range(2):
                want = reference.dot_bits(model, list(A[i]), list(B[:, j]), C[i, j])
                assert int(formats.bits(D)[i, j]) == want, (model.name, i, j)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), which=st.sampled_from(["H100 e4m3fn", "H100 e5m2", "floor e4m3"]),
       k=st.integers(1, 80))
def test_grid_path_hypothesis(seed, which, k):
    """Random finite operands over the fp8 formats' whole ranges (subnormals, zeros of both signs, +-max)
    through the grid path (which must hold them): the numpy engine's bits."""
    model = {"H100 e4m3fn": bf.device("H100").model("e4m3fn", "fp32"),
             "H100 e5m2": bf.device("H100").model("e5m2", "fp32"), "floor e4m3": E4M3_FLOOR}[which]
    rng = np.random.default_rng(seed)
    A, B = values(rng, model.input_format, (3, k), finite=True), values(rng, model.b_format, (k, 2), finite=True)
    C = values(rng, model.c_format, (3, 2))
    both_paths(model, A, B, C, grid_only=True)


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason="no CUDA GPU visible to torch (or TRITON_INTERPRET was set before triton "
                    "was imported)")
def test_gpu_fma_rz_instruction_equals_standin():
    """On a CUDA GPU: PTX's fma.rz (the grid path's instruction) and the stand-in the interpreter runs give the
    same bits, the Fractions' cut."""
    a, b, c = _fma_rz_cases(np.random.default_rng(32), 4000)
    got = _fma_rz_run(a, b, c, False, "cuda")
    standin = _fma_rz_run(a, b, c, True, "cuda")
    want = np.array([_fma_rz_oracle(float(x), float(y), float(z)) for x, y, z in zip(a, b, c)], dtype=np.float32)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    assert np.array_equal(standin.view(np.uint32), want.view(np.uint32))


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason="no CUDA GPU visible to torch (or TRITON_INTERPRET was set before triton "
                    "was imported)")
def test_gpu_max_sum16_instruction_equals_standin():
    """On a CUDA GPU: the first pass's instructions (add.u16x2, max.u16x2) and their stand-in give numpy's bits."""
    acc, a, b, want = _max_sum16_cases(np.random.default_rng(16))
    assert np.array_equal(_max_sum16_run(acc, a, b, False, "cuda"), want)
    assert np.array_equal(_max_sum16_run(acc, a, b, True, "cuda"), want)


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason="no CUDA GPU visible to torch (or TRITON_INTERPRET was set before triton "
                    "was imported)")
@pytest.mark.parametrize("dev,fin,fout", [("H100", "e4m3fn", "fp32"), ("H100", "e5m2", "fp32"),
                                          ("RTX4090", "e4m3fn", "fp16")])
def test_gpu_grid_path(dev, fin, fout):
    """On a CUDA GPU, operands without NaN or infinity: the grid path (fp8, the count), at the default tile and
    a small one, the int32 terms and the general path, against the CPU engine."""
    import torch

    model = bf.device(dev).model(fin, fout)
    rng = np.random.default_rng(zlib.crc32(f"gpu grid {dev} {fin} {fout}".encode()))
    A = values(rng, model.input_format, (130, 300), finite=True)
    B, C = values(rng, model.b_format, (300, 97), finite=True), values(rng, model.c_format, (130, 97))
    A[5] = -0.0
    want = bf.gemm(A, B, C, model=model, backend="numpy")
    a, b, c = (torch.from_numpy(np.asarray(x, dtype=np.float32)).cuda() for x in (A, B, C))
    width = schedule(model.arithmetic_model()).width(300)
    assert tr._path(model.arithmetic_model(), a, b, None, None, False, width).get("GRID")
    for launch in ({}, {"block_m": 32, "block_n": 32, "num_warps": 4}, {"grid": False}, {"fast": False}):
        d = tr.gemm_tensors(model, a, b, c, **launch).cpu().numpy().astype(np.float64)
        assert same_bits(bf.engine.api.finish(model.arithmetic_model(), d), want) == 0, launch


# ---- operands in their storage dtype (fp8, fp16, bf16): loaded as they are, widened in registers ---------------

_STORAGE = [("e4m3fn", "float8_e4m3fn"), ("e5m2", "float8_e5m2"), ("fp16", "float16"), ("bf16", "bfloat16")]


def _widen_run(dtype: str, standin: bool, device: str) -> tuple[np.ndarray, np.ndarray]:
    """Every code of a storage dtype (as uint8 / uint16) and the kernel's widening of it (float32), on
    ``device`` (the stand-in under the interpreter, the conversion instruction on a GPU)."""
    import torch
    import triton
    import triton.language as tl

    _fma_rz_kernel()  # tk: the kernel module, in this process's mode

    @triton.jit
    def widen_kernel(x_ptr, y_ptr, STANDIN: tl.constexpr, N: tl.constexpr):
        i = tl.arange(0, N)
        tl.store(y_ptr + i, tk.widen(tl.load(x_ptr + i), STANDIN))

    t = getattr(torch, dtype)
    n = 1 << (8 * t.itemsize)
    codes = np.arange(n, dtype=np.uint8 if n == 256 else np.uint16)
    x = torch.from_numpy(codes.view(np.int8 if n == 256 else np.int16)).view(t).to(device)
    y = torch.empty(n, dtype=torch.float32, device=device)
    widen_kernel[(1,)](x, y, STANDIN=standin, N=n)
    return codes, y.cpu().numpy()


def _widen_want(fmt: str, codes: np.ndarray) -> np.ndarray:
    """The float32 values of ``fmt``'s codes by ml_dtypes (fp16 by numpy): the oracle."""
    return codes.view(np.dtype(formats.get(fmt).dtype) if fmt != "fp16" else np.float16).astype(np.float32)


@pytest.mark.parametrize("fmt,dtype", _STORAGE)
def test_widen_every_code(fmt, dtype):
    """The interpreter's widening (its stand-in: Triton's interpreter turns fp8 NaN and infinities into finite
    values and flushes bf16 subnormals) of every code of each storage dtype: ml_dtypes' float32 bits, NaN as
    NaN."""
    codes, got = _widen_run(dtype, True, "cpu")
    want = _widen_want(fmt, codes)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))
    f = formats.get(fmt)
    assert nan.any() and np.isinf(want).any() == f.has_infinities and (np.abs(want) < f.smallest_normal).sum() > 2


@pytest.mark.parametrize("fmt,dtype", _STORAGE)
def test_storage_dtype_operands(fmt, dtype):
    """gemm_tensors on A and B of their storage dtype, read as they are: the numpy engine's bits with zeros of
    both signs, subnormals, NaN and infinities (fast path with int32 terms, general path); finite fp8 on the
    grid path; bf16 (whose subnormals take the general path) within the fast path's range and at large."""
    import torch

    model = bf.device("H100").model(fmt, "fp32")
    rng = np.random.default_rng(zlib.crc32(f"storage {fmt}".encode()))
    t, fa, C = getattr(torch, dtype), model.input_format, values(rng, model.c_format, (4, 4), 0.1)
    if fmt in ("e4m3fn", "e5m2"):
        both_paths(model, values(rng, fa, (4, 32), finite=True), values(rng, fa, (32, 4), finite=True), C,
                   grid_only=True, dtype=t)
    if fmt == "bf16":  # the fast path holds bf16 products within binary32's range: the GPU test's exponents
        lo = -((127 - model.arithmetic_model().block_model().fraction_bits) // 2)
        A, B = _in_range(rng, fa, (4, 32), lo, 7, 0.1), _in_range(rng, fa, (32, 4), lo, 7, 0.1)
        d = tr.gemm_tensors(model, *(x.to(t) for x in _tensors(A, B)), _tensors(C)[0], fast=True)
        want = bf.gemm(A, B, C, model=model, backend="numpy")
        assert same_bits(bf.engine.api.finish(model.arithmetic_model(), d.numpy().astype(np.float64)), want) == 0
    A, B = values(rng, fa, (4, 32), 0.1), values(rng, fa, (32, 4), 0.1)
    A[0], B[:, 0], C[0, 0] = fa.smallest_subnormal * rng.integers(1, 4, 32), fa.max / 4, 0.0  # D[0, 0]: subnormals'
    assert all(np.isnan(x).any() and (x == 0).any() and ((x != 0) & (np.abs(x) < fa.smallest_normal)).any()
               for x in (A, B))
    a, b, c = *(x.to(t) for x in _tensors(A, B)), _tensors(C)[0]
    want = bf.gemm(A, B, C, model=model, backend="numpy")
    for fast in (False,) if fmt == "bf16" else (True, False):
        d = tr.gemm_tensors(model, a, b, c, fast=fast)
        assert want[0, 0] != 0 and same_bits(bf.engine.api.finish(model.arithmetic_model(), d.numpy().astype(np.float64)), want) == 0


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason="no CUDA GPU visible to torch (or TRITON_INTERPRET was set before triton "
                    "was imported)")
@pytest.mark.parametrize("fmt,dtype", _STORAGE)
def test_gpu_storage_dtype_operands(fmt, dtype):
    """On a CUDA GPU: the conversion instruction widens every code of the storage dtype as ml_dtypes does, and
    the kernel on A and B of that dtype (several tiles, K of many blocks, finite and with NaN and infinities;
    each path) gives the CPU engine's bits."""
    import torch

    codes, got = _widen_run(dtype, False, "cuda")
    want = _widen_want(fmt, codes)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan) and np.array_equal(got[~nan].view(np.uint32),
                                                                 want[~nan].view(np.uint32))
    model = bf.device("H100").model(fmt, "fp32")
    rng = np.random.default_rng(zlib.crc32(f"gpu storage {fmt}".encode()))
    lo = -((127 - model.arithmetic_model().block_model().fraction_bits) // 2) if fmt == "bf16" else -6
    fa, C = model.input_format, values(rng, model.c_format, (130, 97), 0.001)
    for specials in (0.0, 0.001):
        A, B = _in_range(rng, fa, (130, 300), lo, 7, specials), _in_range(rng, fa, (300, 97), lo, 7, specials)
        want = bf.gemm(A, B, C, model=model, backend="auto")
        a, b = (torch.from_numpy(x).to(getattr(torch, dtype)).cuda() for x in (A, B))
        c = torch.from_numpy(C.astype(np.float32)).cuda()
        for launch in ({}, {"block_m": 64, "block_n": 64, "num_warps": 8}, {"grid": False}, {"fast": False}):
            d = tr.gemm_tensors(model, a, b, c, **launch).cpu().numpy().astype(np.float64)
            assert same_bits(bf.engine.api.finish(model.arithmetic_model(), d), want) == 0, launch
