"""The engine registry (blockfma.engine.registry): what each engine says it runs, the one choice of engine
for a call, and explain's account of it.  Expected reasons are written out here, from what each engine is
documented to run (docs/engines.md), not read back from the code."""

from __future__ import annotations

import numpy as np
import pytest

import blockfma as bf
from blockfma.engine import registry
from blockfma.engine.registry import Operands, choose, engine, explain
from blockfma.optional import available
from blockfma.plan import plan

from helpers import FAST

H100 = bf.device("H100").model("fp16", "fp32")
DMMA = bf.device("H100").model("fp64", "fp64")  # 53-bit results: no compiled kernel, no Triton kernel
AMX = bf.device("Intel AMX").model("bf16", "fp32")
PAIRWISE = bf.device("MI250X").model("fp16", "fp32")
SCALED = bf.device("B200").model(("e2m1fn", "e2m1fn"), "fp32", instruction="tcgen05.mxf4.block32")
WIDE = SCALED.replace(name="", input_format="e5m2")  # beyond the block-scaled engines' exact float64 bounds


def gemm_ops(m=2, k=4, n=3, value=1.0, scaled=False):
    sa, sb = (np.ones((m, k // 32)), np.ones((k // 32, n))) if scaled else (None, None)
    return Operands.matrix(np.full((m, k), value), np.ones((k, n)), np.zeros((m, n)), sa, sb)


def test_operands_of_dot_and_gemm():
    dot = Operands.rows(np.ones((5, 8)), np.ones((5, 8)), np.zeros(5))
    assert (dot.shape, dot.work, dot.gemm, dot.scaled) == ((5, 1, 8, 1), 40, False, False)
    g = gemm_ops(2, 64, 3, scaled=True)
    assert (g.shape, g.work, g.gemm, g.scaled) == ((1, 2, 64, 3), 384, True, True)
    assert g.sa.shape == (1, 2, 2) and g.sb.shape == (1, 2, 3)  # B's scales as B: K first
    assert g.finite and not gemm_ops(value=np.inf).finite


def test_every_engine_says_why_it_does_not_run_a_call(monkeypatch):
    ops = gemm_ops()
    assert engine("numpy").supports(plan(H100, 4), ops) is None
    assert engine("numpy").supports(plan(WIDE, 64), gemm_ops(k=64, scaled=True)) == \
        "the block-scaled model lies beyond its exact float64 bounds"
    assert engine("reference").supports(plan(WIDE, 64), gemm_ops(k=64, scaled=True)) is None
    if FAST:
        assert engine("numba").supports(plan(H100, 4), ops) is None
        assert engine("numba").supports(plan(DMMA, 4), ops) == "no compiled kernel for this model"
        assert engine("numba").supports(plan(H100, 4), gemm_ops(value=np.nan)) == "it takes finite A, B and C only"
    monkeypatch.setattr(registry, "_FAST", False)
    assert engine("numba").supports(plan(H100, 4), ops).startswith("numba is not installed (pip install")
    assert engine("triton").supports(plan(H100, 4), None) == "it runs bf.gemm only (its kernel tiles a matrix product)"
    assert engine("triton").supports(plan(AMX, 4), ops) == ("it runs the truncated-fused, late-c, exact-fused, "
                                                            "pairwise and fma-chain families only, not amx")
    if available("torch"):
        assert engine("torch").supports(plan(H100, 4), ops) is None
        assert engine("cuda:1").supports(plan(PAIRWISE, 4), ops) == "no array kernel for this model"
        assert engine("cuda").supports(plan(WIDE, 64), gemm_ops(k=64, scaled=True)) == \
            "it lies beyond the block-scaled engines' exact float64 bounds"
    with pytest.raises(KeyError, match="no engine named 'fpga'"):
        engine("fpga")


def test_auto_passes_over_what_it_does_not_take():
    ops, p = gemm_ops(), plan(H100, 4)
    assert engine("triton").auto(p, ops) == "fewer than GPU_MIN_WORK = 16777216 products"
    assert engine("cuda").auto(p, ops) == "fewer than GPU_MIN_WORK = 16777216 products"
    assert engine("torch").auto(p, ops) == "it runs only when asked for by name"
    z = np.zeros(())  # 1024 products of 128 x 4 x 128: 4 GPU_MIN_WORK in all, but each a launch of its own
    batch = Operands(*(np.broadcast_to(z, s) for s in ((1024, 128, 4), (1024, 4, 128), (1024, 128, 128))), gemm=True)
    assert batch.work == 1 << 26 and engine("triton").auto(p, batch) == "fewer than GPU_MIN_WORK = 16777216 products"
    scaled = gemm_ops(k=64, scaled=True)
    assert engine("triton").auto(plan(SCALED, 64), scaled) == \
        "block-scaled calls go to the Triton kernel only when asked for by name"
    assert engine("cuda").auto(plan(SCALED, 64), scaled) == \
        "block-scaled calls go to the GPU only when asked for by name"


def test_choose_follows_the_auto_policy_and_names_refusals():
    assert choose(plan(H100, 4), gemm_ops()).name == ("numba" if FAST else "numpy")
    assert choose(plan(H100, 4), gemm_ops(value=np.inf)).name == "numpy"  # numba takes finite values only
    assert choose(plan(PAIRWISE, 4), gemm_ops(), "numpy").name == "numpy"
    assert choose(plan(WIDE, 64), gemm_ops(k=64, scaled=True)).name == "reference"
    assert choose(plan(WIDE, 64), gemm_ops(k=64, scaled=True), "numpy").name == "reference"  # its fallback
    with pytest.raises(ValueError, match=r"^backend='triton' runs bf.gemm only"):
        choose(plan(H100, 4), Operands.rows(np.ones((1, 4)), np.ones((1, 4)), np.zeros(1)), "triton")
    with pytest.raises(ValueError, match=r"^backend='triton' does not run .*not amx; backend='auto' runs it$"):
        choose(plan(AMX, 4), gemm_ops(), "triton")
    if FAST:
        with pytest.raises(ValueError, match=r"^the compiled kernels do not run .* use backend='numpy' or 'auto'$"):
            choose(plan(DMMA, 4), gemm_ops(), "numba")


def test_explain_says_what_each_engine_did():
    e = bf.engine.explain(np.ones((2, 4)), np.ones((4, 3)), model=H100, backend="numpy")
    assert e.chosen == "numpy"
    assert str(e).splitlines() == ["triton: not asked for", "numba: not asked for", "cuda: not asked for",
                                   "torch: not asked for", "numpy: runs it (backend='numpy')",
                                   "reference: not asked for"]
    e = bf.engine.explain(np.ones((2, 4)), np.ones((4, 3)), model=DMMA)
    assert e.line("triton") == ("triton: does not run it: its fma-chain inputs, C and results must lie within "
                                "binary32 (fp64 ones run on the CPU engines)")
    assert e.line("numpy") == "numpy: runs it" and e.chosen == "numpy"
    assert e.line("reference") == "reference: not tried: numpy comes first"
    if FAST:
        assert e.line("numba") == "numba: does not run it: no compiled kernel for this model"
    e = bf.engine.explain(np.zeros((1, 64)), np.zeros((64, 1)), model=WIDE, scale_a=np.ones((1, 2)),
                          scale_b=np.ones((2, 1)), backend="numpy")
    assert e.chosen == "reference"
    assert e.line("numpy") == ("numpy: does not run it: the block-scaled model lies beyond its exact float64 "
                               "bounds; reference does")
    with pytest.raises(ValueError, match="runs bf.gemm only|does not run"):
        bf.engine.explain(np.ones((2, 4)), np.ones((4, 3)), model=AMX, backend="triton")


def test_the_engine_chosen_is_the_one_that_ran():
    A, B = np.ones((2, 4)), np.ones((4, 3))
    for backend in ("auto", "numpy"):
        want = bf.engine.explain(A, B, model=PAIRWISE, backend=backend).chosen
        bf.gemm(A, B, model=PAIRWISE, backend=backend)
        assert bf.engine.last_backend() == want


def test_check_asks_the_registry():
    c = bf.check(DMMA, rows=2)
    assert "numba" not in c.backends and "triton" not in c.backends
    assert "triton (it runs bf.gemm only (its kernel tiles a matrix product))" in c.skipped
    if FAST:
        assert "numba (no compiled kernel for this model)" in c.skipped
    with pytest.raises(bf.arguments.ArgumentError, match="triton does not run this model here: it runs bf.gemm only"):
        bf.check(H100, rows=2, backends=("triton",))


def test_tensors_are_taken_where_they_lie_or_left_to_the_host(monkeypatch):
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    a, b, c = torch.ones((2, 4)), torch.ones((4, 3)), torch.zeros((2, 3))
    ops, p = Operands.matrix(a, b, c), plan(H100, 4)
    assert ops.device == "cpu" and Operands.matrix(a.numpy(), b.numpy(), c.numpy()).device is None
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert choose(p, ops) is None and choose(p, ops, "triton") is None and choose(p, ops, "numpy") is None
    assert explain(p, ops).lines == ("triton: does not run it: it runs CPU tensors under Triton's interpreter only "
                                     "(TRITON_INTERPRET=1)", "numba: does not run it: runs on host arrays only",
                                     "cuda: does not run it: runs on host arrays only",
                                     "torch: does not run it: runs on host arrays only",
                                     "numpy: does not run it: runs on host arrays only",
                                     "reference: does not run it: runs on host arrays only")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert choose(p, ops) is None  # auto leaves CPU tensors to the host: the interpreter is slow
    assert choose(p, ops, "triton").name == "triton"
    assert choose(plan(AMX, 4), ops, "triton") is None  # refused where they lie: the host path says why


@pytest.mark.skipif(not FAST, reason="needs numba (the gemm must run on an engine explain never names for these)")
def test_explain_computes_nothing_and_records_no_engine():
    bf.gemm(np.ones((2, 4)), np.ones((4, 3)), device="H100", backend="numba")
    for shape_a, shape_b in (((2, 4), (4, 3)), ((2, 0), (0, 3)), ((0, 4), (4, 3))):
        bf.engine.explain(np.ones(shape_a), np.ones(shape_b), device="H100", backend="numpy")
        assert bf.engine.last_backend() == "numba"  # the gemm's, not anything explain looked at
