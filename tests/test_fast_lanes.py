"""The compiled kernels' two lane types (engine/fast/families.py): each family's kernel runs in binary32 lanes
where the inputs allow it and in float64 lanes otherwise; both give the same bits where both apply, and the
float64 lanes match the numpy engine on the inputs that need them."""

from __future__ import annotations

import types

import numpy as np
import pytest

import blockfma as bf
from blockfma import formats as F
from blockfma.model import Alignment, Family, Model

from helpers import FAST, bits, finite_inputs

if FAST is not None:
    from blockfma.engine.fast import families, runners

pytestmark = pytest.mark.skipif(not FAST, reason="numba is not installed (pip install 'blockfma[fast]')")

E8M25 = F.Format("e8m25", 8, 26, 127)  # 26-bit values: products exact in float64, values not binary32 values


def _models() -> dict[str, Model]:
    v100 = bf.device("V100").model("fp16", "fp32")
    mi300 = bf.device("MI300X").model("fp16", "fp32")
    return {
        "truncated-fused H100 fp16": bf.device("H100").model("fp16", "fp32"),
        "truncated-fused H100 bf16": bf.device("H100").model("bf16", "fp32"),
        "truncated-fused V100 floor": v100.replace(alignment=Alignment.FLOOR),
        "truncated-fused V100 2 carries": v100.replace(carry_bits=2),
        "truncated-fused H100 e4m3": bf.device("H100").model("e4m3fn", "fp32"),
        "late-c MI300X fp16": mi300,
        "late-c MI300X bf16 grouped": bf.device("MI300X").model("bf16", "fp32").replace(groups=2),
        "fma-chain fp32": bf.device("ieee-sequential").model("fp32", "fp32"),
        "fma-chain bf16 FTZ": Model(Family.FMA_CHAIN, "bf16", "fp32", block_width=1, subnormals=False),
        "amx": bf.device("Intel AMX").model("bf16", "fp32"),
        "amx with subnormals": Model(Family.AMX, "fp16", "fp32", block_width=4),
        "bfdot": bf.device("Arm BFDOT").model("bf16", "fp32"),
    }


MODELS = _models()
FACTORIES = ("truncated_fused", "late_c", "fma_chain", "amx", "bfdot")


@pytest.fixture
def lanes(monkeypatch):
    """The lane types (``lanes32`` of each factory call) the kernels ran with, in call order."""
    seen = []
    for name in FACTORIES:
        factory = getattr(families, name)

        def spy(*key, _factory=factory):
            seen.append(key[0])
            return _factory(*key)

        monkeypatch.setattr(families, name, spy)
    return seen


def _float64_lanes_only(monkeypatch) -> None:
    """Every family's choice of binary32 lanes answered no."""
    monkeypatch.setattr(runners, "_binary32_products", lambda *args, **kw: None)
    monkeypatch.setattr(runners, "_normal_binary32_products", lambda *args, **kw: False)
    rules = types.SimpleNamespace(**vars(runners.rules))  # the runners' view of engine.rules only
    rules.values_in_binary32 = lambda fmt: False
    monkeypatch.setattr(runners, "rules", rules)


@pytest.mark.parametrize("name", list(MODELS))
def test_binary32_and_float64_lanes_give_the_same_bits(name, lanes, monkeypatch):
    """Inputs the binary32 lanes accept, run in them and again in float64 lanes: the same bits (k not a
    multiple of L, zeros of both signs, a spread of exponents)."""
    model = MODELS[name]
    L = model.block_width or 8
    A, B, C = finite_inputs(model, (13, 5 * L + 3, 300), 7)
    in32 = bits(bf.gemm(A, B, C, model=model, backend="numba"))
    assert lanes and all(lanes), lanes
    lanes.clear()
    _float64_lanes_only(monkeypatch)
    in64 = bits(bf.gemm(A, B, C, model=model, backend="numba"))
    assert lanes and not any(lanes), lanes
    assert np.array_equal(in32, in64), np.argwhere(in32 != in64)[:5]


TINY = 2.0**-64  # inputs this small give products below 2**-126: outside the binary32 lanes' range


FLOAT64_CASES = [
    ("truncated-fused H100 bf16 tiny", MODELS["truncated-fused H100 bf16"], TINY),
    ("truncated-fused floor bf16 tiny", MODELS["truncated-fused H100 bf16"].replace(alignment=Alignment.FLOOR),
     TINY),
    ("late-c MI300X bf16 tiny", bf.device("MI300X").model("bf16", "fp32"), TINY),
    ("late-c MI300X bf16 grouped tiny", MODELS["late-c MI300X bf16 grouped"], TINY),
    ("bfdot tiny", MODELS["bfdot"], TINY),
    ("bfdot with subnormals", MODELS["bfdot"].replace(subnormals=True), 1.0),
    ("fma-chain fp16 out", bf.device("ieee-sequential").model("fp16", "fp16"), 1.0),
    ("amx 26-bit inputs", Model(Family.AMX, E8M25, "fp32", block_width=8, subnormals=False), 1.0),
    ("truncated-fused 26-bit inputs", MODELS["truncated-fused H100 bf16"].replace(input_format=E8M25), 1.0),
]


@pytest.mark.parametrize("name, model, scale", FLOAT64_CASES, ids=[case[0] for case in FLOAT64_CASES])
def test_float64_lanes_match_the_numpy_engine(name, model, scale, lanes):
    """Inputs that need the float64 lanes (products outside binary32's normal range, values that are not
    binary32 values, results in other formats, subnormal results kept) run there, bit for bit as numpy."""
    L = model.block_width or 8
    rng = np.random.default_rng(3)
    m, k, n = 11, 4 * L + 2, 270
    A = F.round(model.input_format, rng.standard_normal((m, k)) * scale * 2.0 ** rng.integers(-6, 6, (m, k)),
                saturate=True)
    B = F.round(model.b_format, rng.standard_normal((k, n)) * scale, saturate=True)
    A[rng.random((m, k)) < 0.05] = 0.0
    C = F.round(model.c_format, rng.standard_normal((m, n)) * 2.0 ** rng.integers(-125, 4, (m, n)), saturate=True)
    C[rng.random((m, n)) < 0.1] = 0.0
    fast = bits(bf.gemm(A, B, C, model=model, backend="numba"))
    assert lanes and not any(lanes), lanes
    slow = bits(bf.gemm(A, B, C, model=model, backend="numpy"))
    assert np.array_equal(fast, slow), np.argwhere(fast != slow)[:5]


def test_kernels_are_built_once_per_lane_type():
    """The factories keep their kernels: one numba dispatcher per lane type, so numba compiles (or loads
    from its cache) each once per signature."""
    assert families.amx(True) is families.amx(True)
    assert families.amx(True) is not families.amx(False)
    assert families.bfdot(False, True) is not families.bfdot(False, False)


def test_fma_chain_underflow_keeps_its_sign_under_positive_exact_zeros():
    """exact_zero="positive" makes an exact zero +0, but a product that rounds to zero keeps its sign:
    -2**-100 * 2**-100 = -2**-200 rounds to -0 in binary32 (every engine, the reference included)."""
    m = Model(Family.FMA_CHAIN, "fp32", "fp32", block_width=1, exact_zero="positive")
    a, b = np.array([[-(2.0**-100)]]), np.array([[2.0**-100]])
    for backend in ("numpy", "numba"):
        assert bits(bf.dot(a, b, np.zeros(1), model=m, backend=backend))[0] == 0x80000000, backend
    assert bits(bf.dot(-a, b, np.zeros(1), model=m, backend="numba"))[0] == 0x00000000
