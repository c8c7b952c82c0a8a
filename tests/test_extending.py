"""A datapath of one's own, from outside the package: examples/tree_fused.py, as docs/extending.md walks
through it.  The family is registered for each test and removed after, so that the other tests see the
built-in families only."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest

import blockfma as bf
from blockfma import reference
from blockfma.family import Family, unregister

from helpers import REPO, bits

EXAMPLE = REPO / "examples" / "tree_fused.py"


@pytest.fixture
def tree():
    """The example module, freshly executed (it registers ``tree-fused``); unregistered afterwards."""
    spec = importlib.util.spec_from_file_location("tree_fused_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    unregister("tree-fused")
    sys.modules.pop(spec.name, None)


def test_a_model_of_the_family(tree):
    m = bf.Model("tree-fused", "fp16", "fp32", block_width=8, fraction_bits=24, output_rounding="rz")
    assert m.family is tree.TREE_FUSED is Family("tree-fused")
    assert m.summary() == "tree-fused fp16->fp32 L=8 F=24 out=TowardZero"
    variant = m.replace(options={"normalize": False})
    assert variant.summary().endswith("normalize=False") and variant != m
    for model in (m, variant):
        assert bf.Model.from_dict(model.to_dict()) == model
    with pytest.raises(ValueError, match="power-of-two block_width"):
        m.replace(block_width=6)
    with pytest.raises(ValueError, match="e_zero applies to the truncated-fused and scaled-fused families only"):
        m.replace(e_zero=-133)
    with pytest.raises(ValueError, match="unknown option 'normalise'"):
        m.replace(options={"normalise": False})
    with pytest.raises(ValueError, match="option normalize: must be True or False"):
        m.replace(options={"normalize": "no"})


def test_the_tree_by_hand(tree):
    """Four products 1, 2**-24, 2**-24 and 0 with F = 24, truncation, round toward zero into fp32.
    Tree: (1 + 2**-24) cuts 2**-24 at 2**(0 - 24): kept, 1 + 2**-24 exactly; (2**-24 + 0) = 2**-24.  Root:
    the larger exponent is 0, so 2**-24 is kept and the sum is 1 + 2**-23, an fp32 value.  Truncated-fused
    (one alignment to e_max = 0 with F = 24) gives the same here; with F = 23 the tree cuts both 2**-24
    at the first adder and the second adder's at the root: 1.  Without normalising, the first adder's
    result takes exponent 1, and the root cuts at 2**(1 - 24): 2**-24 is lost, so 1 + 2**-24 is cut to 1."""
    m = bf.Model("tree-fused", "fp16", "fp32", block_width=4, fraction_bits=24, output_rounding="rz")
    a, b = [1.0, 2.0**-12, 2.0**-12, 0.0], [1.0, 2.0**-12, 2.0**-12, 0.0]
    assert reference.dot(m, a, b, 0.0) == 1.0 + 2.0**-23
    assert reference.dot(m.replace(fraction_bits=23), a, b, 0.0) == 1.0
    assert reference.dot(m.replace(options={"normalize": False}), a, b, 0.0) == 1.0
    for model, want in ((m, 1.0 + 2.0**-23), (m.replace(fraction_bits=23), 1.0),
                        (m.replace(options={"normalize": False}), 1.0)):
        got = bf.dot(np.array([a]), np.array([b]), np.zeros(1), model=model)
        assert bits(got)[0] == bits(np.float32(want))


def test_dot_and_gemm_agree_with_the_reference(tree):
    for m in (bf.Model("tree-fused", "fp16", "fp32", block_width=8, fraction_bits=24, output_rounding="rz"),
              bf.Model("tree-fused", "bf16", "fp32", block_width=4, fraction_bits=12, alignment="floor",
                       options={"normalize": False}, c_entry="after", instruction_k=8, exact_zero="positive")):
        result = bf.check(m, rows=160, seed=3)
        assert result.ok, str(result)
        assert result.backends == ("numpy",)  # no compiled or array kernel: numpy only, said so
        rng = np.random.default_rng(0)
        A = bf.formats.round(m.input_format, rng.standard_normal((5, 20)))
        B = bf.formats.round(m.input_format, rng.standard_normal((20, 3)))
        D = bf.gemm(A, B, model=m)
        want = [[reference.dot_bits(m, A[i].tolist(), B[:, j].tolist(), 0.0) for j in range(3)] for i in range(5)]
        assert np.array_equal(bits(D), np.array(want, dtype=np.uint32))


def test_the_probe_recovers_it_as_a_black_box(tree):
    """The family is a candidate of the probe search (its base), so a tree-fused target is recovered, the
    option included."""
    m = bf.Model("tree-fused", "fp16", "fp32", block_width=8, fraction_bits=24, output_rounding="rz",
                 exact_zero="positive", options={"normalize": False})
    found = bf.probe(m, "fp16", "fp32")
    assert found.verified and found.model() == m


def test_no_smt_encoding_is_said_clearly(tree):
    m = bf.Model("tree-fused", "fp16", "fp32", block_width=4, fraction_bits=24)
    with pytest.raises(NotImplementedError, match="tree-fused family gives no bit-vector encoding"):
        bf.smt.discriminate(m, m.replace(fraction_bits=23), k=4)


def test_registry_hygiene(tree):
    with pytest.raises(ValueError, match="is registered already"):
        bf.family.register(Family("tree-fused", "another", reference=tree.reference_block))
    with pytest.raises(ValueError, match="built-in family"):
        unregister("truncated-fused")
    with pytest.raises(ValueError, match="unknown family 'tree'"):
        bf.Model("tree", "fp16", "fp32", block_width=4)


@pytest.fixture
def wrapped():
    """A user's family that gives every engine's block, the SMT encoding included, by reusing the
    built-in exact-fused blocks: what a family with an ``smt=`` block gets from bf.smt."""
    from blockfma.engine import array, kernels
    from blockfma.smt import encode

    fam = bf.family.register(Family("my-exact", "exact-fused under another name", reference=reference.exact_fused_block,
                                    numpy=kernels.exact_fused, array=array.exact_fused, smt=encode.exact_fused_block,
                                    fused=True, symmetric=True), replace=True)
    yield fam
    unregister(fam)


def test_a_family_with_an_encoding_reaches_the_smt_layer(wrapped):
    mine = bf.Model("my-exact", "fp16", "fp32", block_width=4)
    exact = bf.Model("exact-fused", "fp16", "fp32", block_width=4)
    result = bf.check(mine, rows=40)
    assert result.ok, str(result)
    assert bf.smt.equivalent(mine, exact, k=4, timeout=None).status == "proved"
    w = bf.smt.discriminate(mine, mine.replace(output_rounding="rz"), k=4, timeout=None)
    assert isinstance(w, bf.smt.Witness) and w.d_a != w.d_b
