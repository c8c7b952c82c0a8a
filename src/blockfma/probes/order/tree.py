"""The summation tree: :class:`SumTree` (nodes of inputs and sub-sums, its text form and the pair sizes a
probe measures) and its shape by name (:class:`Shape`, :func:`describe`).

    >>> t = SumTree.parse("((0 1) 2 3)")
    >>> t.size, t.depth, str(describe(t))
    (4, 2, 'chain of fused 2-blocks')
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterator, Literal, Sequence

import numpy as np

from ...arguments import ArgumentError

__all__ = ["SumTree", "Shape", "describe", "check_count", "few", "MAX_N"]


def _low(child: int | SumTree) -> int:
    return child if isinstance(child, int) else child.low


def _mask(child: int | SumTree) -> int:
    return 1 << child if isinstance(child, int) else child.mask


@dataclass(frozen=True, eq=False)
class SumTree:
    """One node of a summation tree: its children, input indices (ints) or sub-sums (SumTrees, or nested
    tuples of ints), are added in one step.

    A node with two children is one addition; a node with more is a fused multi-term adder (a matrix
    unit's block: L products and the running accumulator).  Children are kept in canonical order, by their
    smallest input index, so two trees are equal when they add the same groups (addition at one node is
    commutative).  ``size`` is the number of inputs below the node, ``low`` the smallest of them.
    ``str(tree)`` is the canonical text, nested parentheses: ``((0 1) 2 3)``; :meth:`parse` reads it back.
    """

    children: tuple[int | SumTree, ...]
    size: int = field(init=False, repr=False)
    low: int = field(init=False, repr=False)
    mask: int = field(init=False, repr=False)  # bit i set for each input i below the node
    _hash: int = field(init=False, repr=False)

    def __post_init__(self) -> None:
        kids = list(self.children) if isinstance(self.children, (tuple, list)) else None
        if kids is None or len(kids) < 2:
            raise ValueError(f"a SumTree node needs a tuple of at least 2 children, not {self.children!r} "
                             "(a single input is its own index, not a node)")
        for k, c in enumerate(kids):
            if isinstance(c, (int, np.integer)) and not isinstance(c, (bool, np.bool_)) and c >= 0:
                kids[k] = int(c)
            elif isinstance(c, (tuple, list)):
                kids[k] = SumTree.from_nested(c)
            elif not isinstance(c, SumTree):
                raise ValueError(f"SumTree child {c!r} is neither an input index (an int >= 0) nor a SumTree "
                                 "(or a nested tuple of them)")
        kids.sort(key=_low)
        mask = 0
        for c in kids:
            m = _mask(c)
            if mask & m:
                dup = ((mask & m) & -(mask & m)).bit_length() - 1
                raise ValueError(f"input {dup} appears more than once in the tree; each input is one leaf")
            mask |= m
        set_ = object.__setattr__
        set_(self, "children", tuple(kids))
        set_(self, "size", sum(1 if isinstance(c, int) else c.size for c in kids))
        set_(self, "low", _low(kids[0]))
        set_(self, "mask", mask)
        set_(self, "_hash", hash(tuple((0, c) if isinstance(c, int) else (1, c._hash) for c in kids)))

    # equality without recursion (a sequential tree of n inputs is n - 1 levels deep)
    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SumTree):
            return NotImplemented
        stack: list[tuple[Any, Any]] = [(self, other)]
        while stack:
            a, b = stack.pop()
            if isinstance(a, int) or isinstance(b, int):
                if a != b:
                    return False
                continue
            if a is b:
                continue
            if a._hash != b._hash or a.mask != b.mask or len(a.children) != len(b.children):
                return False
            stack.extend(zip(a.children, b.children))
        return True

    @property
    def n(self) -> int:
        """Number of inputs (leaves) of the tree; the same as ``size``."""
        return self.size

    def leaves(self) -> tuple[int, ...]:
        """The input indices below this node, in increasing order."""
        return tuple(int(i) for i in _mask_indices(self.mask))

    def nodes(self) -> Iterator[SumTree]:
        """Every node, children before their parent (post-order), this node last."""
        stack: list[tuple[SumTree, bool]] = [(self, False)]
        while stack:
            node, expanded = stack.pop()
            if expanded:
                yield node
                continue
            stack.append((node, True))
            stack.extend((c, False) for c in reversed(node.children) if isinstance(c, SumTree))

    @property
    def depth(self) -> int:
        """Additions on the longest path from an input to the root."""
        depth: dict[int, int] = {}
        for node in self.nodes():
            depth[id(node)] = 1 + max((depth[id(c)] for c in node.children if isinstance(c, SumTree)), default=0)
        return depth[id(self)]

    @property
    def arity(self) -> int:
        """The largest number of children of a node (2 for a tree of binary additions)."""
        return max(len(node.children) for node in self.nodes())

    def text(self) -> str:
        """Canonical text: nested parentheses, children separated by spaces, e.g. ``((0 1) 2 3)``."""
        out: list[str] = []
        stack: list[Any] = [self]
        while stack:
            item = stack.pop()
            if isinstance(item, str):
                out.append(item)
            elif isinstance(item, int):
                out.append(str(item))
            else:
                stack.append(")")
                for k, c in enumerate(reversed(item.children)):
                    stack.append(c)
                    if k < len(item.children) - 1:
                        stack.append(" ")
                stack.append("(")
        return "".join(out)

    def __str__(self) -> str:
        return self.text()

    def __repr__(self) -> str:
        return f"SumTree.parse({self.text()!r})"

    @classmethod
    def parse(cls, text: str) -> SumTree:
        """Read a tree from nested parentheses: ``((0 1) 2 3)``; commas or ``+`` may separate children."""
        stack: list[list[Any]] = []
        root: SumTree | None = None
        for m in _TOKEN.finditer(text.replace(",", " ").replace("+", " ")):
            tok = m.group(0)
            if tok.isspace():
                continue
            if root is not None:
                raise ValueError(f"SumTree.parse: text continues after the tree ends, at {tok!r} (offset "
                                 f"{m.start()}) in {text!r}")
            if tok == "(":
                stack.append([])
            elif tok == ")":
                if not stack:
                    raise ValueError(f"SumTree.parse: unbalanced ')' at offset {m.start()} in {text!r}")
                node = cls(tuple(stack.pop()))
                if stack:
                    stack[-1].append(node)
                else:
                    root = node
            elif tok.isdigit():
                if not stack:
                    raise ValueError(f"SumTree.parse: the tree must be a parenthesised node, not {text!r}")
                stack[-1].append(int(tok))
            else:
                raise ValueError(f"SumTree.parse: unexpected {tok!r} at offset {m.start()} in {text!r}; write "
                                 "nodes as '(' children ')' with input indices as non-negative integers")
        if root is None:
            raise ValueError(f"SumTree.parse: no complete tree in {text!r} (unbalanced parentheses?)")
        return root

    @classmethod
    def from_nested(cls, nested: Sequence[Any]) -> SumTree:
        """A tree from nested tuples or lists of input indices: ``((0, 1), 2, 3)``."""
        if not isinstance(nested, (tuple, list)):
            raise ValueError(f"SumTree.from_nested takes nested tuples or lists of ints, not {nested!r}")
        built: dict[int, SumTree] = {}
        stack: list[tuple[Any, bool]] = [(nested, False)]
        while stack:
            item, expanded = stack.pop()
            if expanded:
                built[id(item)] = cls(tuple(built[id(c)] if isinstance(c, (tuple, list)) else c for c in item))
                continue
            stack.append((item, True))
            stack.extend((c, False) for c in item if isinstance(c, (tuple, list)))
        return built[id(nested)]

    def to_nested(self) -> tuple[Any, ...]:
        """Nested tuples of input indices (the inverse of :meth:`from_nested`)."""
        built: dict[int, tuple[Any, ...]] = {}
        for node in self.nodes():
            built[id(node)] = tuple(c if isinstance(c, int) else built[id(c)] for c in node.children)
        return built[id(self)]

    def lca_sizes(self) -> np.ndarray:
        """Matrix ``D`` (n x n, n = largest index + 1) with ``D[i, j]`` the number of inputs below the
        smallest subtree holding inputs i and j (1 on the diagonal): what a probe of the pair measures."""
        n = self.mask.bit_length()
        out = np.zeros((n, n), dtype=np.int32)
        np.fill_diagonal(out, 1)
        for node in self.nodes():
            below = _mask_indices(node.mask, n)
            for c in node.children:
                mine = np.array([c]) if isinstance(c, int) else _mask_indices(c.mask, n)
                others = np.setdiff1d(below, mine, assume_unique=True)
                out[np.ix_(mine, others)] = node.size
        return out

    def shape(self) -> Shape:
        """The recognised shape of this tree (see :func:`describe`)."""
        return describe(self)


_TOKEN = re.compile(r"\(|\)|\d+|\s+|[^()\d\s]+")


def _bits(indices: Any) -> int:
    """The mask with the given bit positions set."""
    out = 0
    for i in indices:
        out |= 1 << int(i)
    return out


def _mask_indices(mask: int, n: int | None = None) -> np.ndarray:
    """Positions of the set bits of ``mask``, increasing (as an int64 array)."""
    nbits = mask.bit_length() if n is None else n
    raw = np.frombuffer(mask.to_bytes((nbits + 7) // 8 or 1, "little"), dtype=np.uint8)
    return np.flatnonzero(np.unpackbits(raw, bitorder="little")).astype(np.int64)


MAX_N = 16_384
"""The most summands the order prober takes (a tree, a target, an inference).  Its memory grows as n squared:
an inference keeps a round of up to n - 1 probe rows of n summands and the n x n matrix of subtree sizes
(about 6 GB at this n), a sequential tree's nodes n bits each (n**2 / 16 bytes); the documented surveys go to
K = 1024.  Counts are exact in the output format only up to 2**p summands besides (2048 for fp16)."""


def check_count(n: Any, what: str, least: int = 2, most: int | None = None) -> int:
    """``n`` as an int from ``least`` to ``most``, or an :class:`~blockfma.arguments.ArgumentError` naming the
    argument (the first word of ``what``; the rest says what it is)."""
    name, _, about = what.partition(" ")
    ok = isinstance(n, (int, np.integer)) and not isinstance(n, (bool, np.bool_))
    if not ok or n < least or (most is not None and n > most):
        rng = f"from {least} to {most}" if most is not None else f"of at least {least}"
        raise ArgumentError(name, n, f"must be an integer {rng}" + (f" {about}" if about else ""))
    return int(n)


def few(items: Sequence[int], k: int = 6) -> str:
    """The first ``k`` items, comma-separated, with "..." where there are more (for messages)."""
    return ", ".join(map(str, items[:k])) + (", ..." if len(items) > k else "")


# --- recognising shapes --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Shape:
    """A tree's shape by name (docs/probes-order.md, "Shapes"): ``kind`` ``"sequential"``, ``"blocks"`` (a
    chain of fused blocks of ``block`` = L inputs), ``"split-k"`` (``ways`` contiguous parts, each a chain of
    L-blocks, their partial sums added as ``combine`` says: ``"sequential"``, ``"fused"``, ``"pairwise"`` or
    ``"other"``), ``"interleaved"`` (part k holds the chunks of ``chunk`` inputs numbered k, k + ways, ...),
    ``"pairwise"`` or ``"other"``."""

    kind: Literal["sequential", "blocks", "split-k", "interleaved", "pairwise", "other"]
    block: int | None = None
    ways: int | None = None
    combine: str | None = None
    chunk: int | None = None

    def __str__(self) -> str:
        if self.kind == "blocks":
            return f"chain of fused {self.block}-blocks"
        if self.kind in ("split-k", "interleaved"):
            inner = "sequential sums" if self.block == 1 else f"chained {self.block}-blocks"
            how = {"fused": "in one fused node", "sequential": "one after the other",
                   "pairwise": "pairwise"}.get(self.combine or "", "in another order")
            what = f"split-K {self.ways} ways" if self.kind == "split-k" else f"interleaved {self.ways} ways"
            if self.kind == "interleaved" and self.chunk != 1:
                what += f" (chunks of {self.chunk})"
            return f"{what} of {inner}, partial sums added {how}"
        return self.kind


def _contiguous(node: SumTree) -> bool:
    return node.mask == ((1 << node.size) - 1) << node.low


def _chain_width(node: SumTree) -> int | None:
    """L when ``node`` is a chain of L-blocks that takes its inputs in increasing order (1: sequential; a
    single node of k inputs gives k), else None."""
    spine = [node]
    while True:
        internal = [c for c in spine[-1].children if isinstance(c, SumTree)]
        if not internal:
            break
        if len(internal) != 1 or spine[-1].children[0] is not internal[0]:
            return None  # a chain has one sub-sum per node: the running sum, which holds the earlier inputs
        spine.append(internal[0])
    spine.reverse()
    order = [c for node_ in spine for c in node_.children if isinstance(c, int)]
    if order != [int(i) for i in _mask_indices(node.mask)]:
        return None
    widths = [len(spine[0].children)] + [len(s.children) - 1 for s in spine[1:]]
    if len(spine) == 1:
        return 1 if widths[0] == 2 else widths[0]
    if widths[0] == 2 and all(w == 1 for w in widths[1:]):
        return 1
    width = widths[0]
    if all(w == width for w in widths[1:-1]) and 1 <= widths[-1] <= width:
        return width
    return None


def _is_pairwise(tree: SumTree) -> bool:
    for node in tree.nodes():
        if len(node.children) != 2 or not _contiguous(node):
            return False
        a, b = (1 if isinstance(c, int) else c.size for c in node.children)
        if abs(a - b) > 1:
            return False
    return True


def describe(tree: SumTree) -> Shape:
    """Name the shape of ``tree`` (a :class:`Shape`): sequential, a chain of fused L-blocks, split-K s ways of chained
    L-blocks (with how the partial sums are added), the same interleaved (strided lanes), pairwise, or other.  Chains
    must take their inputs in increasing order (a chain over another permutation is "other")."""
    if not isinstance(tree, SumTree):
        raise TypeError(f"describe takes a SumTree, not {type(tree).__name__}")
    width = _chain_width(tree)
    if width == 1:
        return Shape("sequential")
    if width is not None:
        return Shape("blocks", block=width)
    if _is_pairwise(tree):
        return Shape("pairwise")
    parts, top = _parts(tree)
    ways, n = len(parts), tree.size
    if ways < 2:
        return Shape("other")
    chunk = None
    kind: Literal["split-k", "interleaved"] = "split-k"
    if not all(_contiguous(p) for p in parts):  # interleaved: part k takes chunks k, k + ways, ...
        kind, first = "interleaved", _mask_indices(parts[0].mask)
        gaps = np.flatnonzero(np.diff(first) != 1)
        chunk = int(gaps[0]) + 1 if len(gaps) else 0
        lanes = (np.arange(n) // max(chunk, 1)) % ways
        if chunk < 1 or any(p.mask != _bits(np.flatnonzero(lanes == k)) for k, p in enumerate(parts)):
            return Shape("other")
    block = _parts_block(parts)
    return Shape("other") if block is None else Shape(kind, block=block, ways=ways,
                                                       combine=_combine(tree, parts, top), chunk=chunk)


def _parts(tree: SumTree) -> tuple[list[SumTree], list[SumTree]]:
    """The parts of a split-K tree, by their first input, and the nodes above them: descend through nodes
    that add only sub-sums; the first nodes with an input are the parts."""
    parts: list[SumTree] = []
    stack = [tree]
    top: list[SumTree] = []
    while stack:
        node = stack.pop()
        if all(isinstance(c, SumTree) for c in node.children):
            top.append(node)
            stack.extend(c for c in node.children if isinstance(c, SumTree))
        else:
            parts.append(node)
    parts.sort(key=lambda p: p.low)
    return parts, top


def _parts_block(parts: list[SumTree]) -> int | None:
    """L where every part is a chain of L-blocks, all of one size but a smaller last one, else None."""
    sizes = [p.size for p in parts]
    found = [_chain_width(p) for p in parts]
    widths = [w for w in found if w is not None]
    if any(s != sizes[0] for s in sizes[:-1]) or sizes[-1] > sizes[0] or len(widths) != len(parts):
        return None
    # a part of several blocks fixes L; a part of one node of w inputs fits any L >= w
    multi = {w for p, w in zip(parts, widths) if isinstance(p.children[0], SumTree)}
    single = [w for p, w in zip(parts, widths) if not isinstance(p.children[0], SumTree)]
    block = multi.pop() if len(multi) == 1 else None if multi else max(single)
    return block if block is not None and all(w <= block for w in single) else None


def _combine(tree: SumTree, parts: list[SumTree], top: list[SumTree]) -> str:
    """How the partial sums are added: the tree of the nodes above the parts, with part k as input k."""
    index = {id(p): k for k, p in enumerate(parts)}
    built: dict[int, Any] = {}
    for node in reversed(top):  # children of a top node were appended after it
        built[id(node)] = SumTree(tuple(index[id(c)] if id(c) in index else built[id(c)] for c in node.children))
    skeleton = built[id(tree)]
    if len(skeleton.children) == len(parts):
        return "sequential" if len(parts) == 2 else "fused"
    return "sequential" if _chain_width(skeleton) == 1 else "pairwise" if _is_pairwise(skeleton) else "other"

