"""Summation order (probes/order/): trees, shapes, FPRev-style inference and the closed loop.

Known trees are recovered from targets written here in exact Python arithmetic (Fractions, one rounding
per node), from the blockfma simulator (chains of fused L-blocks of the V100, A100 and H100 presets) and
from torch's CPU matmul; targets that are not summations get a clear error.
"""

from __future__ import annotations

import math
import random
from fractions import Fraction

import numpy as np
import pytest

import blockfma as bf
from blockfma import formats
from blockfma.probes import order
from blockfma.probes.order import OrderError, SumTree


# --- targets in exact Python arithmetic ----------------------------------------------------------------------
def _ieee_node(fmt: str = "fp32", mode: str = "rne"):
    """One IEEE addition per child, in order: the exact sum of two values, rounded once."""
    def add(values: list[Fraction]) -> Fraction:
        acc = values[0]
        for v in values[1:]:
            acc = Fraction(formats.round_fraction(fmt, acc + v, mode))
        return acc
    return add


def _truncated_fused_node(fraction_bits: int = 24):
    """A tensor-core block (docs/semantics.md, truncated-fused): align every term to the largest exponent,
    cut it toward zero below 2**(e_max - F), add exactly, round toward zero to fp32."""
    def add(values: list[Fraction]) -> Fraction:
        nonzero = [v for v in values if v]
        if not nonzero:
            return Fraction(0)
        e_max = max(math.frexp(float(v))[1] - 1 for v in nonzero)  # the values are binary64 numbers
        q = Fraction(2) ** (e_max - fraction_bits)
        total = sum((math.trunc(v / q) * q for v in values), Fraction(0))
        return Fraction(formats.round_fraction("fp32", total, "rz"))
    return add


def _python_target(tree: SumTree, node, n: int | None = None, **kw) -> order.SumTarget:
    """A target that adds each row in the order of ``tree`` with ``node`` (a function of the children's
    exact values), row by row in Python."""
    nested = tree.to_nested()

    def total(row: list[Fraction]) -> Fraction:
        stack: list = [(nested, False)]
        done: list[Fraction] = []
        while stack:  # post-order without recursion
            item, expanded = stack.pop()
            if isinstance(item, int):
                done.append(row[item])
            elif expanded:
                k = len(item)
                vals = done[-k:]
                del done[-k:]
                done.append(node(vals))
            else:
                stack.append((item, True))
                stack.extend((c, False) for c in reversed(item))
        return done[0]

    def fn(x: np.ndarray) -> np.ndarray:
        return np.array([float(total([Fraction(float(v)) for v in row])) for row in x])

    return order.sum_target(fn, tree.size if n is None else n, **kw)


def _random_tree(n: int, seed: int, wide: float = 0.0) -> SumTree:
    """Random merges of any two (not necessarily adjacent) subtrees; with probability ``wide`` three or
    four at once."""
    rng = random.Random(seed)
    items: list = list(range(n))
    while len(items) > 1:
        k = min(len(items), rng.choice((3, 4))) if rng.random() < wide else 2
        picked = [items.pop(rng.randrange(len(items))) for _ in range(k)]
        items.append(SumTree(tuple(picked)))
    return items[0]


def _seq(leaves) -> SumTree:
    """The inputs added one at a time in the order given."""
    leaves = list(leaves)
    node = SumTree((leaves[0], leaves[1]))
    for leaf in leaves[2:]:
        node = SumTree((node, leaf))
    return node


# --- the tree type -------------------------------------------------------------------------------------------
def test_tree_text_parse_and_canonical_order():
    t = SumTree(((3, 4), SumTree((1, 0)), 2))
    assert str(t) == "((0 1) 2 (3 4))"
    assert SumTree.parse("((0 1) 2 (3 4))") == t
    assert SumTree.parse("(2, (4+3), (1 0))") == t  # commas and '+' separate children too
    assert eval(repr(t), {"SumTree": SumTree}) == t
    assert SumTree.from_nested(((0, 1), 2, (3, 4))) == t and t.to_nested() == ((0, 1), 2, (3, 4))
    assert (t.size, t.n, t.low, t.depth, t.arity, t.leaves()) == (5, 5, 0, 2, 3, (0, 1, 2, 3, 4))
    assert t != SumTree.parse("((0 1 2) (3 4))") and hash(t) == hash(SumTree.parse(str(t)))
    assert len({t, SumTree.parse(str(t))}) == 1


def test_tree_errors_name_the_value():
    with pytest.raises(ValueError, match="input 1 appears more than once"):
        SumTree(((0, 1), 1))
    with pytest.raises(ValueError, match="at least 2 children"):
        SumTree((0,))
    with pytest.raises(ValueError, match="neither an input index"):
        SumTree((0, -1))
    with pytest.raises(ValueError, match="unexpected 'x'"):
        SumTree.parse("(0 x)")
    with pytest.raises(ValueError, match="no complete tree"):
        SumTree.parse("((0 1) 2")
    with pytest.raises(ValueError, match="continues after the tree"):
        SumTree.parse("(0 1) 2")


def test_deep_trees_need_no_recursion():
    t = order.sequential(3000)
    assert t == order.sequential(3000) and t.depth == 2999
    assert SumTree.parse(t.text()) == t
    assert order.describe(t).kind == "sequential"


def test_lca_sizes_of_a_pairwise_tree():
    assert order.pairwise(4).lca_sizes().tolist() == [[1, 2, 4, 4], [2, 1, 4, 4], [4, 4, 1, 2], [4, 4, 2, 1]]


# --- shapes --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("tree, text", [
    (order.sequential(16), "sequential"),
    (order.pairwise(13), "pairwise"),
    (order.blocked(64, 8), "chain of fused 8-blocks"),
    (order.blocked(30, 16), "chain of fused 16-blocks"),
    (order.split_k(64, 4, 8), "split-K 4 ways of chained 8-blocks, partial sums added one after the other"),
    (order.split_k(96, 3, 16, "fused"), "split-K 3 ways of chained 16-blocks, partial sums added in one fused node"),
    (order.split_k(64, 8, 1, "pairwise"), "split-K 8 ways of sequential sums, partial sums added pairwise"),
    (SumTree.parse("(((0 2) 4) ((1 3) 5))"), "interleaved 2 ways of sequential sums, partial sums added one "
                                             "after the other"),
    (SumTree.parse("((((0 1) 4 5) ((2 3) 6 7)) 8)"), "other"),
    (SumTree((_seq([0, 1, 2, 3, 8]), _seq([4, 5, 6, 7]))),
     "interleaved 2 ways (chunks of 4) of sequential sums, partial sums added one after the other"),
    (SumTree((_seq([0, 1, 2, 3, 9]), _seq([4, 5, 6, 7, 8]))), "other"),
    (SumTree((_seq(range(8)), _seq(range(8, 16)))),
     "split-K 2 ways of sequential sums, partial sums added one after the other"),
    (SumTree((_seq([0, 1, 2, 3, 8, 9, 10, 11]), _seq([4, 5, 6, 7, 12, 13, 14, 15]))),
     "interleaved 2 ways (chunks of 4) of sequential sums, partial sums added one after the other"),
    (SumTree.parse("((((1 0) 2) 3) 4)"), "sequential"),  # (1 0) is (0 1): one addition is commutative
    (SumTree.parse("((((0 1) 3) 2) 4)"), "other"),       # a chain in another order
    (SumTree.parse("(0 1 2 3)"), "chain of fused 4-blocks"),
])
def test_describe(tree, text):
    assert str(order.describe(tree)) == text


def test_shape_fields():
    shape = order.describe(order.split_k(256, 2, 16, "fused"))
    assert (shape.kind, shape.block, shape.ways, shape.combine) == ("split-k", 16, 2, "sequential")
    assert order.describe(order.blocked(64, 4)) == order.Shape("blocks", block=4)


# --- probe values --------------------------------------------------------------------------------------------
def test_probe_scale():
    plain = order.sum_target(lambda x: x.sum(1), 256)
    assert order.probe_scale(plain) == order.ProbeScale(35, 0)  # fp32: max(p + 1, p + 2) + 8 + 1
    fp16 = order.dot_target(lambda a, b: (a * b).sum(1), 256, input_format="fp16")
    assert fp16.scale == 15 and order.probe_scale(fp16) == order.ProbeScale(30, -5)  # 2^30 = 2^15 * 2^15
    a100 = order.sim_target(64, "A100")
    assert a100.fraction_bits == 24 and order.probe_scale(a100) == order.ProbeScale(30, -2)
    bf16 = order.dot_target(lambda a, b: (a * b).sum(1), 64, input_format="bf16")
    assert bf16.scale == 0 and order.probe_scale(bf16) == order.ProbeScale(33, 0)  # bf16 holds 2^33: b = 1
    with pytest.raises(OrderError, match="summands span only"):
        order.probe_scale(order.sum_target(lambda x: x.sum(1), 2**14, input_format="fp16", accumulator="fp32"))
    fp16_sum = order.sum_target(lambda x: x.sum(1), 256, input_format="fp16", accumulator="fp32")
    assert order.probe_scale(fp16_sum) == order.ProbeScale(15, -20)  # fp16 summands span 2^-24 .. 2^15
    with pytest.raises(OrderError, match="not exact in bf16"):
        order.probe_scale(order.dot_target(lambda a, b: (a * b).sum(1), 512, input_format="bf16",
                                           output_format="bf16"))


# --- recovering known trees ----------------------------------------------------------------------------------
@pytest.mark.parametrize("tree", [order.sequential(64), order.pairwise(64), order.split_k(64, 4, 1),
                                  order.split_k(60, 3, 1, "pairwise"), SumTree.parse("((((3 0) 1) 2) 4)"),
                                  _random_tree(40, seed=1), _random_tree(41, seed=2)],
                         ids=["sequential", "pairwise", "split-k", "split-k-pairwise", "permuted", "random1",
                              "random2"])
def test_recover_ieee_trees(tree):
    target = _python_target(tree, _ieee_node("fp32"))
    found = order.infer_order(target)
    assert found.tree == tree, (str(found.tree), str(tree))
    assert found.shape == order.describe(tree)
    assert found.calls == found.rounds  # unlimited batch: one call per round
    assert found.probes <= tree.size * (tree.size - 1) // 2 + 2 * found.rounds
    assert found.replay("fp32").ok


@pytest.mark.parametrize("tree, L", [(order.blocked(64, 8), 8), (order.split_k(64, 4, 8, "sequential"), 8),
                                     (order.split_k(64, 2, 16, "fused"), 16), (order.blocked(37, 4), 4),
                                     (_random_tree(40, seed=3, wide=0.4), None)])
def test_recover_fused_block_trees(tree, L):
    target = _python_target(tree, _truncated_fused_node(24), input_format="fp16", accumulator="fp32")
    found = order.infer_order(target)
    assert found.tree == tree and found.shape.block == L


def test_all_pairs_method_agrees():
    tree = order.split_k(32, 2, 4, "sequential")
    target = _python_target(tree, _truncated_fused_node(24))
    found = order.infer_order(target, method="all-pairs")
    assert found.tree == tree and found.rounds == 1 and found.calls == 1
    assert found.probes == 32 * 31 // 2 + 2  # every pair, the row of units and one repeated row


def test_calls_follow_max_batch():
    tree = order.sequential(64)
    target = order.sum_target(lambda x: order.evaluate(tree, x, "fp32"), 64, max_batch=10)
    found = order.infer_order(target)
    assert found.tree == tree and found.rounds == 1 and found.probes == 65 and found.calls == 7


# --- the blockfma simulator ----------------------------------------------------------------------------------
@pytest.mark.parametrize("device, L", [("V100", 4), ("A100", 8), ("H100", 16)])
def test_simulator_chains_fused_blocks(device, L):
    model = bf.device(device).model("fp16", "fp32")
    assert model.block_width == L
    target = order.sim_target(64, device)
    found = order.infer_order(target)
    assert found.tree == order.blocked(64, L)
    assert found.shape == order.Shape("blocks", block=L)
    assert found.calls == found.rounds <= L + 1
    op = order.block_op(model, target.scale)
    assert found.replay(op).ok
    check = order.verify(found.tree, target, trials=200, node=op)
    assert check.ok, str(check)
    # the closed loop is not vacuous: plain fp32 additions in the same order miss
    assert not order.verify(found.tree, target, trials=200, node="fp32").ok


# --- torch on the CPU ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("n, m, n_cols", [(64, 64, 64), (256, 64, 64), (64, 4, 1)])
def test_torch_cpu_matmul_fp32(n, m, n_cols):
    pytest.importorskip("torch", reason="needs torch: pip install 'blockfma[torch]'")
    target = order.torch_matmul_target(n, "fp32", "cpu", m=m, n_cols=n_cols)
    found = order.infer_order(target)
    tree = found.tree
    assert isinstance(tree, SumTree) and tree.size == n and tree.leaves() == tuple(range(n))
    assert found.replay("fp32").ok  # reproduces every probe output
    check = order.verify(tree, target, trials=300, node="fp32")
    assert check.ok, str(check)
    assert check.calls == -(-300 // m)


def test_torch_cpu_matmul_fp16_products():
    pytest.importorskip("torch", reason="needs torch: pip install 'blockfma[torch]'")
    target = order.torch_matmul_target(64, "fp16", "cpu")
    assert target.scale == 15 and target.max_batch == 64
    found = order.infer_order(target)
    assert found.scale == order.ProbeScale(30, -3)
    assert order.verify(found.tree, target, trials=200, node="fp32").ok  # fp32 adds, one rounding to fp16


def test_torch_orders_survey_is_json():
    pytest.importorskip("torch", reason="needs torch: pip install 'blockfma[torch]'")
    import json

    from blockfma.experiments.torch_orders import torch_orders

    survey = torch_orders("cpu", sizes=(32,), dtypes=("fp32", "bf16"), shapes=((16, 16),), trials=50)
    json.dumps(survey)
    assert survey["environment"]["device"] == "cpu" and len(survey["runs"]) == 2
    for run in survey["runs"]:
        assert run["verify_fp32"]["ok"] and SumTree.parse(run["tree"]).size == 32


def test_torch_cuda_without_gpu_says_so():
    torch = pytest.importorskip("torch", reason="needs torch: pip install 'blockfma[torch]'")
    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is present")
    with pytest.raises(RuntimeError, match="sees no CUDA GPU"):
        order.torch_matmul_target(64, "fp16", "cuda")


# --- targets that are not summations -------------------------------------------------------------------------
def test_not_a_sum():
    with pytest.raises(OrderError, match="not a plain sum of its inputs"):
        order.infer_order(order.sum_target(lambda x: x.mean(axis=1), 32))
    with pytest.raises(OrderError, match=r"returned 8589934622\.0, .* not a whole number .* not a summation"):
        order.infer_order(order.sum_target(lambda x: np.abs(x).sum(axis=1), 32))


def test_not_deterministic():
    rng = np.random.default_rng(0)

    def shuffled(x: np.ndarray) -> np.ndarray:  # a new order on every call
        return order.evaluate(order.sequential(32), x[:, rng.permutation(32)], "fp32")

    with pytest.raises(OrderError, match="fit no summation tree"):
        order.infer_order(order.sum_target(shuffled, 32))

    def per_row(x: np.ndarray) -> np.ndarray:  # a new order for every row
        return np.array([order.evaluate(order.sequential(32), row[rng.permutation(32)], "fp32") for row in x])

    with pytest.raises(OrderError, match="not deterministic"):
        order.infer_order(order.sum_target(per_row, 32))


def test_exact_multi_term_adder_is_reported():
    tree = order.blocked(32, 4)
    target = _python_target(tree, lambda vals: Fraction(formats.round_fraction("fp32", sum(vals, Fraction(0)))))
    with pytest.raises(OrderError, match="exact multi-term adder"):
        order.infer_order(target)


def test_rounding_toward_zero_where_minus_m_comes_first():
    tree = order.pairwise(16)  # -M meets units inside its own half before M
    with pytest.raises(OrderError, match="not a whole number"):
        order.infer_order(_python_target(tree, _ieee_node("fp32", "rz")))


def test_bad_target_outputs():
    with pytest.raises(OrderError, match=r"returned shape \(\d+, 8\)"):
        order.infer_order(order.sum_target(lambda x: x, 8))
    with pytest.raises(OrderError, match="raised ZeroDivisionError"):
        order.infer_order(order.sum_target(lambda x: 1 / 0, 8))
    with pytest.raises(TypeError, match="takes a SumTarget"):
        order.infer_order(lambda x: x.sum(1))  # type: ignore[arg-type]


# --- evaluation ----------------------------------------------------------------------------------------------
def test_evaluate_orders_and_node_arithmetic():
    x = np.array([[1.0, 2.0**-24, 2.0**-24, 0.0], [2.0**-24, 2.0**-24, 1.0, 0.0]])
    seq = order.sequential(4)
    assert order.evaluate(seq, x, "fp32").tolist() == [1.0, 1.0 + 2.0**-23]
    assert order.evaluate(seq, x[0], "fp64") == 1.0 + 2.0**-23
    assert order.evaluate(SumTree.parse("(0 1 2 3)"), x, "exact:fp32").tolist() == [1.0 + 2.0**-23] * 2
    assert order.evaluate(seq, x, "fp32:rz").tolist() == [1.0, 1.0 + 2.0**-23]
    with pytest.raises(ValueError, match="rows, n"):
        order.evaluate(seq, np.ones((2, 3)))
    with pytest.raises(ValueError, match="exact:fp32"):
        order.evaluate(seq, x, "fp32:rz:x")


def test_verify_reports_the_first_mismatch():
    target = order.sum_target(lambda x: order.evaluate(order.pairwise(16), x, "fp32"), 16)
    bad = order.verify(order.sequential(16), target, trials=100)
    assert not bad and bad.mismatches > 0 and bad.first is not None and bad.inputs is not None
    assert bad.expected == order.evaluate(order.sequential(16), bad.inputs, "fp32")
    assert "differ" in str(bad) and bad.to_dict()["ok"] is False
    assert order.verify(order.pairwise(16), target, trials=100).ok
