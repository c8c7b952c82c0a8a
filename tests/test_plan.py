"""The step plan (blockfma.plan): the schedules, written out by hand from the sources the presets cite, and
every engine running the same plan.

The schedules below are literal: which products each block of each step takes, where C enters, what is
stored.  They come from the devices' documentation and records (docs/semantics.md, "Blocks and chaining";
Hopper's fp8 mma.sync runs as two fp16 HMMAs on register halves; cuBLAS adds beta*C once after all of K),
not from the code under test.
"""

from __future__ import annotations

import numpy as np
import pytest

import blockfma as bf
from blockfma import reference
from blockfma.model import Family, Model
from blockfma.optional import available
from blockfma.plan import Plan, plan, run

from helpers import FAST, bits


def schedule(p: Plan) -> list[tuple[str, list[list[int]]]]:
    """Each step as ("fused" | "after", the products of each of its blocks)."""
    out = []
    for step in range(p.steps):
        blocks = [list(range(ix.start, ix.stop)) if isinstance(ix, slice) else list(ix) for ix in p.blocks(step)]
        out.append(("fused" if p.c_fused else "after", blocks))
    return out


def test_fused_blocks_of_16_padded():
    p = plan(bf.device("H100").model("fp16", "fp32"), 40)  # L = 16, C fused into every block
    assert (p.steps, p.padded, p.width, p.block_width, p.store, p.is_chain) == (3, 48, 16, 16, False, True)
    assert schedule(p) == [("fused", [list(range(0, 16))]), ("fused", [list(range(16, 32))]),
                           ("fused", [list(range(32, 48))])]


def test_hopper_fp8_instruction_of_two_halves():
    """mma.m16n8k32 e4m3: each instruction of 32 runs as two fp16 HMMAs of 16 on register halves (products
    with index mod 4 in {0, 1} first), chained from +0, then C added once."""
    m = bf.device("H100").model("e4m3fn", "fp32", "mma.m16n8k32.fp8")
    p = plan(m, 64)
    first = [i for i in range(32) if i % 4 in (0, 1)]
    second = [i for i in range(32) if i % 4 in (2, 3)]
    assert schedule(p) == [("after", [first, second]),
                           ("after", [[32 + i for i in first], [32 + i for i in second]])]
    assert not p.is_chain and p.model.input_format.name == "fp16"  # the datapath reads fp8 unpacked to fp16


def test_cublas_epilogue_one_step_stored():
    """cuBLAS fp16 GEMM on the H100: 16-blocks chained from +0 over all of K in fp32, the sum stored in
    fp16, C added once at the end."""
    p = plan(bf.device("H100").model("fp16", "fp16", "cublas"), 40)
    assert schedule(p) == [("after", [list(range(0, 16)), list(range(16, 32)), list(range(32, 48))])]
    assert p.store and p.block.output_format.name == "fp32" and p.block.c_entry == "fused"


def test_only_the_first_step_reads_a_narrow_c():
    """V100's m8n8k4 with fp16 C and fp32 D (c_input_format): the first step's block model reads C in fp16,
    every later one in fp32 (the previous block's result), and Plan.unit hands each block its model; in
    the order "halves" the first step's block is the one holding product 0.  A model without a narrower C
    has one block model."""
    m = bf.device("V100").instruction("mma.f16c").models[("fp16", "fp32")]
    p = plan(m, 10)
    assert p.narrow_c and p.is_chain and (p.steps, p.width) == (3, 4)
    assert p.first.c_format.name == "fp16" and p.block.c_format.name == "fp32"
    assert [p.unit(ix) is p.first for step in range(p.steps) for ix in p.blocks(step)] == [True, False, False]
    halves = plan(m.replace(block_width=8, product_order="halves"), 16)
    assert [p2 is halves.first for p2 in (halves.unit(ix) for s in range(2) for ix in halves.blocks(s))] == \
        [True, False]
    assert halves.blocks(0)[0][0] == 0
    wide = plan(bf.device("V100").model("fp16", "fp32"), 10)
    assert not wide.narrow_c and wide.first is wide.block and wide.unit(slice(0, 4)) is wide.block


def test_whole_dot_product_and_chains():
    exact = Model(Family.EXACT_FUSED, "fp16", "fp32")  # block_width=None: one block of every product
    assert schedule(plan(exact, 5)) == [("fused", [[0, 1, 2, 3, 4]])]
    chain = Model(Family.FMA_CHAIN, "fp32", "fp32", block_width=1)
    assert schedule(plan(chain, 3)) == [("fused", [[0]]), ("fused", [[1]]), ("fused", [[2]])]
    assert plan(chain, 0).steps == 0 and plan(exact, 0).padded == 0
    with pytest.raises(ValueError, match="k must be a non-negative integer"):
        plan(chain, -1)


class Recorder:
    """A Datapath that writes down what run() asks of it."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def block(self, products, c):
        self.events.append(f"block{products.start if isinstance(products, slice) else products[0]}")
        return c

    def zero(self, c):
        self.events.append("zero")
        return c

    def store(self, x):
        self.events.append("store")
        return x

    def add_c(self, s, c):
        self.events.append("add_c")
        return c


def test_run_order_of_operations():
    rec = Recorder()
    run(plan(bf.device("H100").model("fp16", "fp16", "cublas"), 20), rec, 0.0)
    assert rec.events == ["zero", "block0", "block16", "store", "add_c"]
    rec = Recorder()
    stored = Model(Family.EXACT_FUSED, "fp16", "fp16", block_width=4, accumulator_format="fp32")
    run(plan(stored, 8), rec, 0.0)
    assert rec.events == ["block0", "store", "block4", "store"]


@pytest.mark.parametrize("out, half_ulp, backends", [("fp16", 2.0**-11, ("numpy",)),
                                                     ("fp32", 2.0**-24, ("numpy", "numba"))])
def test_product_order_applies_to_fused_blocks_too(out, half_ulp, backends):
    """product_order orders the products of every step, also where C is fused into the step's one block.
    Pairwise with L = 8: natural order adds ((p0+p1)+(p2+p3)) + ((p4+p5)+(p6+p7)), "halves"
    ((p0+p1)+(p4+p5)) + ((p2+p3)+(p6+p7)).  With p0 = 1 and p2 = p6 = half an ulp of 1 in the output format:
    natural: 1 + half an ulp rounds to even, 1; halves: the two halves make an ulp first, then 1 + ulp."""
    a = [1.0, 0.0, half_ulp, 0.0, 0.0, 0.0, half_ulp, 0.0]
    b = [1.0] * 8
    natural = Model(Family.PAIRWISE, "fp16", out, block_width=8)
    halves = natural.replace(product_order="halves")
    assert reference.dot(natural, a, b, 0.0) == 1.0
    assert reference.dot(halves, a, b, 0.0) == 1.0 + 2 * half_ulp
    for backend in backends:
        if backend == "numba" and FAST is None:
            continue
        got = bf.dot(np.array([a]), np.array([b]), np.zeros(1), model=halves, backend=backend)
        assert bits(got)[0] == bits(np.asarray(1.0 + 2 * half_ulp, dtype=got.dtype)), backend


def test_every_engine_runs_the_same_plan_on_a_stored_after_model():
    """One model with every piece of the plan (an instruction of two blocks, halves, C after, a stored
    accumulator): the numpy and numba engines and the GPU engine's code on the CPU give the reference's
    bits."""
    m = Model(Family.TRUNCATED_FUSED, "fp16", "fp16", block_width=4, fraction_bits=25, e_zero=-133,
              output_rounding="rz", exact_zero="positive", c_entry="after", instruction_k=8, product_order="halves",
              accumulator_format="fp32")
    rng = np.random.default_rng(5)
    a = (rng.integers(-64, 64, (50, 20)) * 2.0 ** rng.integers(-12, 4, (50, 20))).astype(np.float16)
    b = (rng.integers(-64, 64, (50, 20)) * 2.0 ** rng.integers(-12, 4, (50, 20))).astype(np.float16)
    c = (rng.integers(-64, 64, 50) * 2.0 ** rng.integers(-8, 2, 50)).astype(np.float16)
    want = np.array([reference.dot_bits(m, a[i].tolist(), b[i].tolist(), float(c[i])) for i in range(50)])
    backends = ["numpy"] + (["numba"] if FAST is not None else [])
    if available("torch"):
        backends.append("torch")
    for backend in backends:
        got = bf.dot(a, b, c, model=m, backend=backend)
        assert np.array_equal(bits(got), want.astype(np.uint16)), backend


@pytest.mark.skipif(FAST is None, reason="numba is not installed (pip install 'blockfma[fast]')")
def test_steps_summed_from_zero_run_as_one_batch_of_compiled_chains(monkeypatch):
    """Steps that sum their blocks from +0 and add C after (cuBLAS's C in the epilogue; C after an
    instruction of two halves) are independent until C: the compiled kernels sum them all in one call (was
    one call per block of 16: hours at K = 2**17), or one per STEP_SUMS sums held, with the reference's bits."""
    calls = []
    chain = FAST._chain
    monkeypatch.setattr(FAST, "_chain", lambda *args: calls.append(args[1].shape) or chain(*args))
    cublas = bf.device("H100").model("fp16", "fp16", "cublas")
    k = 1 << 17  # 2**17 products of 2**-8: each block and the whole sum exact, 512
    D = bf.gemm(np.full((2, k), 2.0**-8, np.float16), np.ones((k, 3), np.float16), model=cublas, backend="numba")
    assert calls == [(1, 2, k)] and bits(D).tolist() == bits(np.full((2, 3), 512, np.float16)).tolist()
    after = Model(Family.TRUNCATED_FUSED, "fp16", "fp16", block_width=4, fraction_bits=25, e_zero=-133,
                  output_rounding="rz", exact_zero="positive", c_entry="after", instruction_k=8,
                  product_order="halves", accumulator_format="fp32")
    monkeypatch.setattr(FAST, "STEP_SUMS", 12)  # 2 steps of 3 x 2 sums per call
    rng = np.random.default_rng(7)
    A, B = (rng.integers(-64, 64, s) * 2.0 ** rng.integers(-12, 4, s) for s in ((3, 37), (37, 2)))
    C = rng.integers(-64, 64, (3, 2)) * 2.0 ** rng.integers(-8, 2, (3, 2))
    for model, steps in ((cublas, 1), (after, 5)):
        A_, B_, C_ = (x.astype(np.float16) for x in (A, B, C))
        want = [[reference.dot_bits(model, A_[i].tolist(), B_[:, j].tolist(), float(C_[i, j])) for j in range(2)]
                for i in range(3)]
        calls.clear()
        assert bits(bf.gemm(A_, B_, C_, model=model, backend="numba")).tolist() == want
        assert len(calls) == -(-steps // 2), model.summary()
