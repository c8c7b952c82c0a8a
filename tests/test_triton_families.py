"""The Triton kernel of the FMA chain, pairwise and exact-fused families (blockfma.engine.triton_families,
backend="triton"), run by Triton's interpreter on the CPU, held bit for bit to the numpy engine (whole
GEMMs) and to the exact reference (blockfma.reference, row by row)."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

pytest.importorskip("torch", reason="backend='triton' takes torch tensors: torch is not installed")
pytest.importorskip("triton", reason="triton is not installed (pip install 'blockfma[triton]')")

from hypothesis import given, settings, strategies as st

import blockfma as bf
from blockfma import formats, reference
from blockfma.devices import devices
from blockfma.engine import triton as tr
from blockfma.model import Family, Model, NaNStyle
import test_triton_engine as engine_tests
from test_triton_engine import _cuda, _random_codes, check, same_bits, values

interpreter = engine_tests.interpreter  # its autouse fixture: the interpreter on, off for gpu tests

RM = formats.RoundingMode
STEP = (Family.FMA_CHAIN, Family.PAIRWISE, Family.EXACT_FUSED)

PRESETS = [  # (device, input, output, instruction): every preset of the three families within binary32, and
    # a sample of the reference devices' (exact: one exact-fused block over all of K; ieee-sequential: FMAs)
    ("A100", "fp16", "fp32", "mma.m8n8k4"), ("A100", "fp16", "fp16", "mma.m8n8k4"),
    ("MI100", "fp16", "fp32", None), ("MI100", "bf16", "fp32", None), ("MI100", "fp32", "fp32", None),
    ("MI100", "fp16", "fp16", None), ("MI100", "bf16", "bf16", None),
    ("MI250X", "fp16", "fp32", None), ("MI250X", "bf16", "fp32", None), ("MI250X", "fp32", "fp32", None),
    ("MI250X", "fp16", "fp16", None), ("MI250X", "bf16", "bf16", None),
    ("MI250X", "bf16", "fp32", "mfma.bf16"), ("MI250X", "bf16", "bf16", "mfma.bf16"),
    ("MI250X-fttn", "fp16", "fp32", None), ("MI250X-fttn", "bf16", "fp32", None),
    ("MI300X", "fp32", "fp32", None), ("Arm BFDOT EBF=1", "bf16", "fp32", None),
    ("exact", "fp16", "fp32", None), ("exact", "bf16", "fp16", None), ("exact", "e4m3fn", "fp32", None),
    ("exact", "fp32", "fp32", None), ("exact", "e5m2fnuz", "fp16", None),
    ("ieee-sequential", "fp32", "fp32", None), ("ieee-sequential", "bf16", "fp16", None),
    ("ieee-sequential", "e4m3fnuz", "fp32", None), ("ieee-sequential", "tf32", "fp16", None)]


def test_every_preset_of_the_families_runs_or_is_refused_for_fp64():
    """The kernel runs every preset of the three families but those with fp64 operands, which it refuses
    in one clause naming binary32; PRESETS lists every device preset it runs."""
    import importlib
    from pathlib import Path

    D = importlib.import_module("blockfma.devices")  # the package (bf.devices is its function)

    here = Path(D.__file__).parent  # the shipped presets only: other tests register devices loaded from files
    shipped = {d.name for f in D._VENDOR_FILES for d in D.load(here / f)}
    listed = {(d, i, o) for d, i, o, _ in PRESETS}
    run = set()
    for dev in devices():
        if dev.name in ("exact", "ieee-sequential") or (dev.variant_of or dev.name) not in shipped:
            continue
        for ins in dev.instructions:
            for (fin, fout), model in ins.models.items():
                if model.arithmetic_model().family not in STEP:
                    continue
                why = tr.unsupported_reason(model)
                if "fp64" in (fin, fout):
                    assert why is not None and "within binary32" in why, (dev.name, fin, fout, why)
                else:
                    assert why is None, (dev.name, fin, fout, why)
                    run.add((dev.name, fin, fout))
    assert run <= listed, run - listed


@pytest.mark.parametrize("dev,fin,fout,instruction", PRESETS)
def test_presets_against_reference(dev, fin, fout, instruction):
    model = bf.device(dev).model(fin, fout, instruction)
    assert tr.supports(model), tr.unsupported_reason(model)
    rng = np.random.default_rng(zlib.crc32(f"{dev} {fin} {fout} {instruction}".encode()))
    step = model.arithmetic_model().block_width or 8
    m, k, n = 6, step + step // 2 + 3, 5  # more than one block, the last one padded
    A, B = values(rng, model.input_format, (m, k)), values(rng, model.b_format, (k, n))
    C = values(rng, model.c_format, (m, n))
    D = check(model, A, B, C)
    for i, j in [(0, 0), (3, 2), (5, 4)]:  # the exact reference, row by row
        want = reference.dot_bits(model, list(A[i]), list(B[:, j]), C[i, j])
        assert int(formats.bits(D)[i, j]) == want, (i, j, D[i, j])


def _model(family, fin="fp16", fout="fp32", **changes) -> Model:
    L = {Family.FMA_CHAIN: 1, Family.PAIRWISE: 4, Family.EXACT_FUSED: 4}[family]
    return Model(family, formats.get(fin), formats.get(fout), **{"block_width": L, **changes})


VARIANTS = {
    "fma-rz": _model(Family.FMA_CHAIN, output_rounding=RM.TowardZero),
    "fma-down": _model(Family.FMA_CHAIN, "bf16", output_rounding=RM.TowardNegative),
    "fma-up-fp16": _model(Family.FMA_CHAIN, "fp16", "fp16", output_rounding=RM.TowardPositive),
    "fma-odd-inf": _model(Family.FMA_CHAIN, "fp32", output_rounding=RM.ToOdd, overflow="inf"),
    "fma-away-ftz": _model(Family.FMA_CHAIN, "fp16", "fp16", output_rounding=RM.TiesAway, subnormals=False),
    "fma-positive-zero": _model(Family.FMA_CHAIN, exact_zero="positive", output_rounding=RM.TowardNegative),
    "fma-fnuz-in": _model(Family.FMA_CHAIN, "e4m3fnuz", "fp16", output_rounding=RM.TowardNegative),
    "pairwise-rz": _model(Family.PAIRWISE, output_rounding=RM.TowardZero),
    "pairwise-down-L8": _model(Family.PAIRWISE, "bf16", block_width=8, output_rounding=RM.TowardNegative),
    "pairwise-fp16-L2-odd": _model(Family.PAIRWISE, "fp16", "fp16", block_width=2, output_rounding=RM.ToOdd),
    "pairwise-ftz-up": _model(Family.PAIRWISE, "fp16", "fp16", subnormals=False, output_rounding=RM.TowardPositive),
    "pairwise-L1-away": _model(Family.PAIRWISE, "bf16", "bf16", block_width=1, output_rounding=RM.TiesAway),
    "exact-rz-L3": _model(Family.EXACT_FUSED, block_width=3, output_rounding=RM.TowardZero),
    "exact-down-L20": _model(Family.EXACT_FUSED, "bf16", block_width=20, output_rounding=RM.TowardNegative),
    "exact-one-block-up": _model(Family.EXACT_FUSED, "fp32", block_width=None, output_rounding=RM.TowardPositive),
    "exact-ftz-odd": _model(Family.EXACT_FUSED, "fp16", "fp16", subnormals=False, output_rounding=RM.ToOdd),
    "exact-positive-zero": _model(Family.EXACT_FUSED, "e5m2", "bf16", exact_zero="positive", overflow="inf"),
    "exact-fraction-bits": _model(Family.EXACT_FUSED, "fp16", "fp32", output_fraction_bits=13,
                                  output_rounding=RM.TowardZero),
    "exact-after": _model(Family.EXACT_FUSED, "fp16", "fp32", c_entry="after", instruction_k=8,
                          product_order="halves", output_rounding=RM.TowardNegative),
    "exact-end-accumulator": _model(Family.EXACT_FUSED, "bf16", "bf16", c_entry="end",
                                    accumulator_format=formats.get("fp32")),
}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_variants(name):
    model = VARIANTS[name]
    assert tr.supports(model), tr.unsupported_reason(model)
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    k = 2 * (model.block_width or 8) + 3
    A, B = values(rng, model.input_format, (5, k), 0.01), values(rng, model.b_format, (k, 4), 0.01)
    C = values(rng, model.c_format, (5, 4), 0.01)
    D = check(model, A, B, C)
    for i, j in [(0, 0), (4, 3)]:
        assert int(formats.bits(D)[i, j]) == reference.dot_bits(model, list(A[i]), list(B[:, j]), C[i, j])


@pytest.mark.parametrize("family", STEP, ids=lambda f: f.name)
def test_specials(family):
    """NaN in, inf * 0, inf - inf, infinities of one sign, and finite rows, in one GEMM per family."""
    model = _model(family, block_width=2 if family is not Family.FMA_CHAIN else 1)
    inf, nan = np.inf, np.nan
    A = np.array([[inf, 1.0], [inf, 1.0], [nan, 1.0], [1.0, -inf], [1.0, 2.0], [inf, -inf], [-0.0, 0.0]])
    B = np.array([[0.0, 1.0], [1.0, 1.0]])
    C = np.array([[1.0, 1.0], [-inf, -inf], [0.0, 0.0], [0.0, inf], [3.0, nan], [0.0, 0.0], [-0.0, 0.0]])
    D = check(model, A, B, C)
    assert np.isnan(D[0, 0]) and D[0, 1] == inf  # inf * 0; inf + 1 + 1
    assert np.isnan(D[1, 1]) and np.isnan(D[2, 0])  # inf - inf; NaN in
    assert D[3, 0] == D[3, 1] == -inf or np.isnan(D[3, 1])  # -inf; -inf + inf
    assert D[4, 0] == 5.0 and np.isnan(D[4, 1])
    for i in range(A.shape[0]):
        for j in range(2):
            assert int(formats.bits(D)[i, j]) == reference.dot_bits(model, list(A[i]), list(B[:, j]), C[i, j])


def test_exact_fused_spans_beyond_64_bits():
    """Exact-fused sums whose terms span far more than 64 bits: big products that cancel exactly leave a
    tiny C (or a tiny product) that decides the result, its sign, or a directed rounding."""
    model = _model(Family.EXACT_FUSED, "bf16", "fp32", block_width=4, output_rounding=RM.TowardZero)
    A = np.array([[2.0**100, -(2.0**100), 2.0**-130, 0.0], [2.0**120, 0.0, 0.0, 0.0],
                  [2.0**120, -(2.0**120), 2.0**-120, 2.0**-120], [1.0, -(2.0**-130), 0.0, 0.0]])
    B = np.ones((4, 1))
    C = np.array([[2.0**-140], [-(2.0**-140)], [-(2.0**-149)], [0.0]])
    D = check(model, A, B, C)
    below = [np.nextafter(np.float32(x), np.float32(0)) for x in (2.0**120, 1.0)]
    assert D[:, 0].tolist() == [2.0**-130 + 2.0**-140, below[0], 2.0**-119 - 2.0**-143, below[1]]
    for i in range(A.shape[0]):
        assert int(formats.bits(D)[i, 0]) == reference.dot_bits(model, list(A[i]), list(B[:, 0]), C[i, 0])
    # a sticky bit far below the leading limbs: 1 + 2**-130 rounds up, and breaks the tie 1 + 2**-24 upward
    for mode, a, want in [(RM.TowardPositive, [1.0, 2.0**-130, 0.0], 1.0 + 2.0**-23),
                          (RM.TiesToEven, [1.0, 2.0**-24, 2.0**-130], 1.0 + 2.0**-23),
                          (RM.TiesToEven, [1.0, 2.0**-24, 0.0], 1.0)]:
        model = _model(Family.EXACT_FUSED, "bf16", "fp32", block_width=3, output_rounding=mode)
        D = check(model, np.array([a]), np.ones((3, 1)), np.zeros((1, 1)))
        assert D[0, 0] == want, (mode, a)


def test_fma_sticky_and_zero_signs():
    """One FMA: a tiny addend far below the product moves a directed rounding by one unit; exact zeros
    take the IEEE sign (+0 for 1 - 1, -0 rounding down; -0 for (-0) + (-0))."""
    for mode, want in [(RM.TowardZero, np.nextafter(np.float32(1), np.float32(0))), (RM.TiesToEven, 1.0),
                       (RM.TowardPositive, 1.0)]:
        model = _model(Family.FMA_CHAIN, "fp32", output_rounding=mode)
        D = check(model, np.array([[1.0]]), np.array([[1.0]]), np.array([[-(2.0**-100)]]))
        assert D[0, 0] == want, mode
    for mode, bits in [(RM.TiesToEven, [0x00000000, 0x80000000]), (RM.TowardNegative, [0x80000000, 0x80000000])]:
        model = _model(Family.FMA_CHAIN, "fp32", output_rounding=mode)
        D = check(model, np.array([[1.0], [-0.0]]), np.array([[1.0]]), np.array([[-1.0], [-0.0]]))
        assert formats.bits(D)[:, 0].tolist() == bits, mode


def test_pairwise_rounds_products_and_sums_in_the_c_format():
    """Pairwise: (2**24 + 1) * 1 rounds to 2**24 as a product; the tree's IEEE additions round each sum;
    an exact-fused block of the same products keeps what pairwise loses."""
    A = np.array([[2.0**12 + 1, 2.0**-20, -(2.0**12), 0.0]])
    B = np.array([[2.0**12 + 1], [1.0], [2.0**12], [0.0]])
    pair = check(_model(Family.PAIRWISE, "fp32", "fp32"), A, B, np.zeros((1, 1)))
    fused = check(_model(Family.EXACT_FUSED, "fp32", "fp32"), A, B, np.zeros((1, 1)))
    assert pair[0, 0] == 2.0**13 and fused[0, 0] == 2.0**13 + 1 + 2.0**-20


CODES = [p for p in PRESETS if p[0] != "A100"] + [("exact", "fp16", "fp16", None)] + list(VARIANTS)


@settings(max_examples=16, deadline=None)
@given(preset=st.sampled_from(CODES), seed=st.integers(0, 2**32 - 1), specials=st.sampled_from([0.0, 0.02, 0.3]),
       m=st.integers(1, 6), n=st.integers(1, 6), k=st.integers(1, 24))
def test_random_codes(preset, seed, specials, m, n, k):
    """Uniform random codes (every exponent: spans beyond 64 bits, subnormals, overflow) and shapes, on the
    presets and the variants (directed roundings, flush, zero signs)."""
    model = VARIANTS[preset] if isinstance(preset, str) else bf.device(preset[0]).model(*preset[1:])
    rng = np.random.default_rng(seed)
    A = _random_codes(rng, model.input_format, (m, k), specials)
    B = _random_codes(rng, model.b_format, (k, n), specials)
    C = _random_codes(rng, model.c_format, (m, n), specials)
    check(model, A, B, C)


def test_refusals():
    dmma = bf.device("H100").model("fp64", "fp64")
    assert tr.unsupported_reason(dmma) == ("its fma-chain inputs, C and results must lie within binary32 "
                                           "(fp64 ones run on the CPU engines)")
    with pytest.raises(ValueError, match="within binary32 .fp64 ones run on the CPU engines.; backend='auto'"):
        bf.gemm(np.ones((2, 3)), np.ones((3, 2)), model=dmma, backend="triton")
    propagate = _model(Family.FMA_CHAIN, "fp32", nan=NaNStyle.PROPAGATE)
    assert tr.unsupported_reason(propagate) == "it does not carry NaN payloads (nan='propagate')"
    wide = _model(Family.PAIRWISE, block_width=512)
    assert tr.unsupported_reason(wide) == "it runs pairwise blocks of at most 256 products"
    amx = bf.device("Intel AMX").model("bf16", "fp32")
    assert tr.unsupported_reason(amx) == ("it runs the truncated-fused, late-c, exact-fused, pairwise and "
                                          "fma-chain families only, not amx")


@pytest.mark.parametrize("preset", [("MI250X", "fp16", "fp32"), ("H100", "fp16", "fp32")], ids="-".join)
def test_interpreter_after_the_compiler_was_asked_for(monkeypatch, preset):
    """Interpreter, compiler, interpreter again: the kernel is defined once per process (Triton fixes the
    mode then, no module is re-imported), a call in the other mode is refused by name, and the kernel then
    still runs in its own mode (the compiled kernel is checked in a subprocess, below)."""
    model = bf.device(preset[0]).model(*preset[1:])
    A, B, C = np.ones((2, 4)), np.ones((4, 2)), np.zeros((2, 2))
    check(model, A, B, C)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(RuntimeError, match="one mode per process"):
        tr._kernel()
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert check(model, A, B, C)[0, 0] == 4.0


COMPILE = """
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
import blockfma as bf
from blockfma.engine import triton as tr
from blockfma.engine import triton_gemm
runtime = ["a_ptr", "b_ptr", "c_ptr", "d_ptr", "order_ptr", "ea_ptr", "sa_ptr", "sb_ptr", "M", "N", "K", "KP", "W",
           "BL"]
for dev, fin, fout in [("MI300X", "fp32", "fp32"), ("MI250X", "fp16", "fp32"), ("MI100", "fp16", "fp32"),
                       ("exact", "e4m3fn", "fp32")]:
    model = bf.device(dev).model(fin, fout)
    const = dict(S=tr._config(model.arithmetic_model(), True), BLOCK_M=16, BLOCK_N=16, EVEN=False)
    sig = {n: "*i32" if n == "order_ptr" else "*fp32" if n.endswith("_ptr") else "i32" for n in runtime}
    sig.update(strides=("i32",) * 14, **dict.fromkeys(const, "constexpr"))
    kernel = triton.compile(ASTSource(triton_gemm.gemm_kernel, sig, constexprs=const),
                            target=GPUTarget("cuda", 90, 32))
    assert "gemm_kernel" in kernel.asm["ptx"], dev
    print(dev, fin, fout, "cubin", len(kernel.asm["cubin"]))
"""


@pytest.mark.slow
def test_kernel_compiles_for_a_gpu_without_one(tmp_path):
    """The jitted code lowers through Triton's compiler to PTX and a cubin for sm_90 (its own ptxas), one
    preset of each family and both exact-fused paths: what the interpreter, which runs the kernel's Python,
    cannot check.  In a subprocess with the interpreter off."""
    import importlib.util
    import os
    import subprocess
    import sys

    from helpers import REPO

    if importlib.util.find_spec("triton.backends.nvidia") is None:
        pytest.skip("this triton has no NVIDIA backend")
    env = dict(os.environ, TRITON_INTERPRET="0", TRITON_CACHE_DIR=str(tmp_path), TRITON_DEFAULT_FP_FUSION="0",
               PYTHONPATH=os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run([sys.executable, "-c", COMPILE], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.count("cubin") == 4, run.stdout


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
        A = values(rng, model.input_format, (70, 150), specials)
        B = values(rng, model.b_format, (150, 45), specials)
        C = values(rng, model.c_format, (70, 45), specials)
        got = bf.gemm(A, B, C, model=model, backend="triton")
        assert same_bits(got, bf.gemm(A, B, C, model=model, backend="auto")) == 0


def test_storage_dtype_operands():
    """The families' blocks on A and B of their storage dtype (fp16 for the MI100's exact-fused model, bf16 for
    the MI250X's pairwise one, e4m3fn for the exact device's), with NaN, infinities, zeros and subnormals: the
    numpy engine's bits."""
    import torch

    for dev, fin, dtype in (("MI100", "fp16", torch.float16), ("MI250X", "bf16", torch.bfloat16),
                            ("exact", "e4m3fn", torch.float8_e4m3fn)):
        model = bf.device(dev).model(fin, "fp32")
        rng = np.random.default_rng(zlib.crc32(f"storage {dev} {fin}".encode()))
        A, B = values(rng, model.input_format, (4, 12), 0.1), values(rng, model.b_format, (12, 4), 0.1)
        C = values(rng, model.c_format, (4, 4), 0.1)
        a, b = (torch.from_numpy(x.astype(np.float32)).to(dtype) for x in (A, B))
        d = tr.gemm_tensors(model, a, b, torch.from_numpy(C.astype(np.float32)))
        want = bf.gemm(A, B, C, model=model, backend="numpy")
        assert same_bits(bf.engine.api.finish(model.arithmetic_model(), d.numpy().astype(np.float64)), want) == 0
