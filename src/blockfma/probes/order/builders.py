"""Builders of the common summation trees: sequential, pairwise, a chain of fused L-blocks, split-K.

    >>> str(split_k(8, 2))
    '((((0 1) 2) 3) (((4 5) 6) 7))'
"""

from __future__ import annotations

from typing import Any, Literal, Sequence

from ...arguments import ArgumentError, choice
from .tree import MAX_N, SumTree, check_count

__all__ = ["sequential", "pairwise", "blocked", "split_k"]


def _chain(leaves: Sequence[int], block: int) -> SumTree:
    """Blocks of ``block`` inputs in order, each added to the running sum in one node (block 1: sequential)."""
    if block == 1:
        node: SumTree | int = leaves[0]
        for leaf in leaves[1:]:
            node = SumTree((node, leaf))
        if isinstance(node, int):
            raise ValueError("a chain needs at least 2 inputs")
        return node
    first = tuple(leaves[:block])
    node = SumTree(first) if len(first) >= 2 else first[0]
    for start in range(block, len(leaves), block):
        node = SumTree((node, *leaves[start:start + block]))
    if isinstance(node, int):
        raise ValueError("a chain needs at least 2 inputs")
    return node


def sequential(n: int) -> SumTree:
    """``(...((x0 + x1) + x2) + ...) + x_{n-1}``: one addition per input, in index order."""
    return _chain(range(check_count(n, "n", most=MAX_N)), 1)


def _pairwise(items: Sequence[Any]) -> Any:
    """Balanced binary tree over ``items`` (halves of equal size, the first the larger one when odd)."""
    if len(items) == 1:
        return items[0]
    mid = (len(items) + 1) // 2
    return SumTree((_pairwise(items[:mid]), _pairwise(items[mid:])))


def pairwise(n: int) -> SumTree:
    """Pairwise (cascade) summation: each node adds the sums of two halves of its range, the first half the
    larger by one when the range is odd: ``((x0 + x1) + (x2 + x3))``."""
    return _pairwise(list(range(check_count(n, "n", most=MAX_N))))


def blocked(n: int, block: int) -> SumTree:
    """A chain of fused blocks: the first node adds inputs 0..L-1, each later node adds the running sum and
    the next L inputs at once (a matrix unit's d = a·b + c over k > L); the last block may be shorter."""
    n = check_count(n, "n", most=MAX_N)
    return _chain(range(n), check_count(block, "block (the block width L)", least=1, most=MAX_N))


def split_k(n: int, ways: int, block: int = 1, combine: Literal["sequential", "fused", "pairwise"] = "sequential"
            ) -> SumTree:
    """Split-K: the inputs cut into ``ways`` contiguous parts of ``ceil(n / ways)`` (the last may be
    shorter), each summed as a chain of ``block``-blocks (1: sequentially), and the partial sums added
    ``combine``: one after the other, in one fused node, or pairwise."""
    n = check_count(n, "n", most=MAX_N)
    ways = check_count(ways, "ways", most=MAX_N)
    block = check_count(block, "block (the block width L)", least=1, most=MAX_N)
    combine = choice("combine", combine, ("sequential", "fused", "pairwise"))
    part = -(-n // ways)
    if part < 2 or (ways - 1) * part >= n:
        raise ArgumentError("ways", ways, f"cuts {n} inputs into parts of {part}, and split_k needs {ways} parts of at "
                            "least 2 inputs each", fix="use fewer ways")
    parts = [_chain(range(s, min(s + part, n)), block) for s in range(0, n, part)]
    if combine == "sequential":
        return _chain(parts, 1)
    if combine == "fused":
        return SumTree(tuple(parts))
    return _pairwise(parts)

