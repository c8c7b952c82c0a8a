"""A datapath of your own, in one file: a fused block whose products are added in a tree of aligning adders.

The design: the L products of a block are exact; they are added pairwise in a balanced binary tree
((p0 + p1) + (p2 + p3)) + ..., and every adder of the tree aligns its two inputs to the larger of their
exponents and cuts both at F bits below it (toward zero, or toward minus infinity with
``alignment="floor"``) before adding them exactly.  C joins at the root, by one more such adder, and the
root's sum is rounded once into the output format.  One option of the family's own, ``normalize``: whether
an adder's result takes its own exponent (a normalising adder), or the larger input exponent plus one
(room for the carry, whatever cancelled) as a cheaper adder would.

Compared with the built-in families: truncated-fused aligns every product of a block to one exponent (one
wide adder); pairwise rounds every node to an IEEE format; here each node keeps F bits of its own.

Importing this file registers the family ``tree-fused``; then, as for any built-in family::

    import blockfma as bf
    m = bf.Model("tree-fused", "fp16", "fp32", block_width=8, fraction_bits=24, output_rounding="rz")
    bf.dot(a, b, c, model=m)                 # the numpy engine, through numpy_block below
    bf.check(m).ok                           # the engines against the exact reference_block, bit for bit
    bf.probe(m)                              # the model as a black box: the probe search recovers it

docs/extending.md walks through it; tests/test_extending.py runs it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from fractions import Fraction

import numpy as np

from blockfma import reference
from blockfma.engine import array, rules
from blockfma.family import Family, Option, register
from blockfma.model import Alignment, Model

NO_EXPONENT = -(1 << 20)  # the exponent of "no term" in the numpy block: below every real one


# --- the exact reference: Python Fractions, written to read like the description above ---------------------------
def _node(x: Fraction, ex: int | None, y: Fraction, ey: int | None, model: Model) -> tuple[Fraction, int | None]:
    """One adder: both inputs cut at F bits below the larger exponent, added exactly; the result with its
    exponent (None for no term: both inputs were zero)."""
    if ex is None and ey is None:
        return Fraction(0), None
    e = max(v for v in (ex, ey) if v is not None)
    q = reference.pow2(e - model.fraction_bits)
    s = reference.cut(x, q, model.alignment) + reference.cut(y, q, model.alignment)
    if model.option("normalize"):
        return s, reference.floor_log2(abs(s)) if s != 0 else None
    return s, e + 1


def reference_block(model: Model, a: Sequence[float], b: Sequence[float], c: float) -> float:
    """One block, exactly: special values as the fused families have them, the tree, C at the root, one
    rounding (with the model's zero signs)."""
    special = reference.special_result(list(zip(a, b)), [c])
    if special is not None:
        return special
    terms = [reference.product(x, y) for x, y in zip(a, b)]
    level = [(p, reference.floor_log2(abs(p)) if p != 0 else None) for p, _ in terms]
    while len(level) > 1:
        level = [_node(*level[i], *level[i + 1], model) for i in range(0, len(level), 2)]
    cv = reference.to_fraction(c)
    total, _ = _node(*level[0], cv, reference.floor_log2(abs(cv)) if cv != 0 else None, model)
    return reference.round_result(model, total, terms + [reference.term(c)])


# --- the same on numpy arrays, for bf.dot and bf.gemm -----------------------------------------------------------
def _exponent(x: np.ndarray) -> np.ndarray:
    """floor(log2 |x|) of float64 values, NO_EXPONENT for zeros."""
    return np.where(x == 0, NO_EXPONENT, np.frexp(x)[1] - 1)


def _node_np(x: np.ndarray, ex: np.ndarray, y: np.ndarray, ey: np.ndarray, model: Model
             ) -> tuple[np.ndarray, np.ndarray]:
    """_node on arrays.  Exact in float64: scaling by powers of two is exact, and the two cut inputs are
    multiples of 2**(e - F) below 2**(e + 1) in magnitude, so their sum has at most F + 2 <= 52 bits."""
    e = np.maximum(ex, ey)
    none = e == NO_EXPONENT
    e = np.where(none, 0, e)
    cut = np.floor if model.alignment is Alignment.FLOOR else np.trunc
    scale = np.ldexp(1.0, model.fraction_bits - e)
    s = (cut(x * scale) + cut(y * scale)) * np.ldexp(1.0, e - model.fraction_bits)
    if model.option("normalize"):
        return s, _exponent(s)
    return s, np.where(none, NO_EXPONENT, e + 1)


def numpy_block(model: Model, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """One block for whole arrays: a, b (..., L), c (...), float64 values of the model's formats."""
    with np.errstate(invalid="ignore", over="ignore"):
        mask, special = rules.fused_specials(np, a, b, c)
    a, b, c = array.finite(np, a), array.finite(np, b), array.finite(np, c)
    p = a * b  # exact: inputs of at most 26 bits (Family check below)
    level = [(p[..., i], _exponent(p[..., i])) for i in range(p.shape[-1])]
    while len(level) > 1:
        level = [_node_np(*level[i], *level[i + 1], model) for i in range(0, len(level), 2)]
    total, _ = _node_np(*level[0], c, _exponent(c), model)
    value = array.round_to(np, model.result_format, total, model.output_rounding, subnormals=model.subnormals,
                           overflow=model.overflow)
    value = rules.exact_zero(np, model, a, b, c, total == 0, value)
    return np.where(mask, special, value)


# --- the family: its parameters, checks, code and where the probe search starts it --------------------------------
def _check(m: Model) -> Iterator[str]:
    L, F = m.block_width, m.fraction_bits
    if L is not None and L & (L - 1):
        yield "the tree-fused family needs a power-of-two block_width"
    if F is not None and not 1 <= F <= 50:
        yield f"fraction_bits must lie in [1, 50] (the numpy block sums in float64), not {F}"
    if not rules.products_exact_in_float64(m.input_format, m.b_format):
        yield "inputs of at most 26 bits (fp16, bf16, tf32, fp8, fp32): the products must be exact in float64"


def _base(a, b, d, k: int) -> Model | None:
    """Where the probe search starts this family for inputs a, b and output d: blocks of up to 8 products,
    one bit more than the output keeps."""
    L = 1 << min(k.bit_length() - 1, 3)
    try:
        return Model(TREE_FUSED, a, d, block_width=L, fraction_bits=min(d.precision + 1, 50), b_input_format=b)
    except ValueError:
        return None


TREE_FUSED = register(Family(
    "tree-fused",
    "products added in a binary tree of aligning adders, F bits kept at each node, C at the root, one rounding",
    reference=reference_block,
    numpy=numpy_block,
    parameters=("fraction_bits", "alignment"),
    required=("fraction_bits",),
    options=(Option("normalize", True, "each adder's result takes its own exponent (else the larger input's + 1)",
                    domain=(True, False), check=lambda v: None if isinstance(v, bool) else "must be True or False"),),
    fused=True,
    check=_check,
    base=_base,
), replace=True)
