"""Summation order: infer the reduction tree of a black-box sum from its outputs.

The method is that of FPRev (Xie, Gao, Wang and Xue, "FPRev: Revealing the Order of Floating-Point
Summation", USENIX ATC 2025; arXiv:2411.00442).  A probe puts a large power of two ``M`` at input ``i``,
``-M`` at input ``j`` and a small power of two (the *unit*) everywhere else.  Every unit that meets ``M``
or ``-M`` before the two cancel is absorbed; the two cancel exactly in the smallest subtree holding both,
and every unit outside that subtree survives.  So the output counts ``n - l(i, j)`` units, where
``l(i, j)`` is the number of inputs under the lowest common ancestor of ``i`` and ``j``.  Those sizes
determine the tree, multi-way nodes included: a fused block of a matrix unit (L products and the running
accumulator added at once, everything below ``2**(e_max - F)`` cut) is one node with L + 1 children.

The probe and the aim (O(n^2) target calls at most, where trying candidate trees would cost O(4^n)) are
FPRev's; the recursion and the batching into rounds are this module's.  :func:`infer_order` probes one
input of a set (the pivot) against all the others; the sizes group the others by the ancestor at which
they join the pivot, the groups must fill those ancestors exactly, and each group is solved the same
way, under the ancestor's size.  Every probe of one round goes to the target in one call (one kernel
launch on a GPU; a GEMM of fixed shape takes m rows a call).  A sequential sum costs n - 1 probes in one
round, a pairwise tree O(n log n) in log2 n rounds, a chain of fused L-blocks about n L / 2 in about L
rounds; no pair is probed twice, so no tree costs more than n (n - 1) / 2.  ``method="all-pairs"`` probes
every pair in one round instead.

Targets are :class:`SumTarget` objects: a batched ``f(X) -> y`` over rows of summands, with the formats the
probe needs to choose ``M`` (:func:`probe_scale`).  Adapters make them from plain sums
(:func:`sum_target`), dot products (:func:`dot_target`), any matmul (:func:`matmul_target`), ``torch.matmul``
(:func:`torch_matmul_target`) and the blockfma simulator (:func:`sim_target`).  :func:`evaluate` adds
inputs in a tree's order with a given rounding per node, and :func:`verify` holds a recovered tree to its
target on fresh inputs (the closed loop); :func:`torch_orders` surveys torch.matmul over dtypes, switches,
K and shapes.  The page ``docs/probes-order.md`` explains the choices and lists what was found.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Callable, Iterator, Literal, Sequence

import numpy as np

from .. import formats as _formats
from ..formats import Format, RoundingMode
from ..optional import require

__all__ = [
    "SumTree",
    "Shape",
    "OrderError",
    "SumTarget",
    "ProbeScale",
    "OrderResult",
    "Verification",
    "sequential",
    "pairwise",
    "blocked",
    "split_k",
    "describe",
    "sum_target",
    "dot_target",
    "matmul_target",
    "torch_matmul_target",
    "sim_target",
    "probe_scale",
    "infer_order",
    "evaluate",
    "block_op",
    "verify",
    "torch_orders",
]


class OrderError(ValueError):
    """The target's outputs fit no summation tree (or the probe values cannot be built for it)."""


# --- the tree ------------------------------------------------------------------------------------------------
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


# --- builders of the common shapes ---------------------------------------------------------------------------
def _check_n(n: Any, what: str, least: int = 2) -> int:
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < least:
        raise ValueError(f"{what} must be an integer >= {least}, not {n!r}")
    return int(n)


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
    return _chain(range(_check_n(n, "n")), 1)


def _pairwise(items: Sequence[Any]) -> Any:
    """Balanced binary tree over ``items`` (halves of equal size, the first the larger one when odd)."""
    if len(items) == 1:
        return items[0]
    mid = (len(items) + 1) // 2
    return SumTree((_pairwise(items[:mid]), _pairwise(items[mid:])))


def pairwise(n: int) -> SumTree:
    """Pairwise (cascade) summation: each node adds the sums of two halves of its range, the first half the
    larger by one when the range is odd: ``((x0 + x1) + (x2 + x3))``."""
    return _pairwise(list(range(_check_n(n, "n"))))


def blocked(n: int, block: int) -> SumTree:
    """A chain of fused blocks: the first node adds inputs 0..L-1, each later node adds the running sum and
    the next L inputs at once (a matrix unit's d = a·b + c over k > L); the last block may be shorter."""
    n = _check_n(n, "n")
    return _chain(range(n), _check_n(block, "block (L)", least=1))


def split_k(n: int, ways: int, block: int = 1, combine: Literal["sequential", "fused", "pairwise"] = "sequential"
            ) -> SumTree:
    """Split-K: the inputs cut into ``ways`` contiguous parts of ``ceil(n / ways)`` (the last may be
    shorter), each summed as a chain of ``block``-blocks (1: sequentially), and the partial sums added
    ``combine``: one after the other, in one fused node, or pairwise."""
    n = _check_n(n, "n")
    ways = _check_n(ways, "ways")
    block = _check_n(block, "block (L)", least=1)
    part = -(-n // ways)
    if part < 2 or (ways - 1) * part >= n:
        raise ValueError(f"split_k: {n} inputs do not make {ways} parts of at least 2 inputs each "
                         f"(parts of {part}); use fewer ways")
    parts = [_chain(range(s, min(s + part, n)), block) for s in range(0, n, part)]
    if combine == "sequential":
        return _chain(parts, 1)
    if combine == "fused":
        return SumTree(tuple(parts))
    if combine == "pairwise":
        return _pairwise(parts)
    raise ValueError(f"combine must be 'sequential', 'fused' or 'pairwise', not {combine!r}")


# --- recognising shapes --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Shape:
    """A tree's shape by name.

    ``kind``: ``"sequential"`` (one input at a time, in index order), ``"blocks"`` (a chain of fused blocks
    of ``block`` = L inputs, each node adding the running sum and the next L inputs), ``"split-k"``
    (``ways`` contiguous parts, each a chain of L-blocks, L = 1 meaning sequential, their partial sums added
    as ``combine`` says: ``"sequential"``, ``"fused"``, ``"pairwise"`` or ``"other"``), ``"interleaved"``
    (the same with interleaved parts: part k holds the chunks of ``chunk`` inputs numbered k, k + ways,
    k + 2 ways, ...; chunk 1 gives the lanes of a vectorised loop), ``"pairwise"`` (balanced binary
    halves) or ``"other"``.
    """

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
    """Name the shape of ``tree`` (a :class:`Shape`): sequential, a chain of fused L-blocks, split-K s ways
    of chained L-blocks (with how the partial sums are added), the same interleaved (strided lanes),
    pairwise, or other.  Chains must take their inputs in increasing order (a chain over another
    permutation is "other")."""
    if not isinstance(tree, SumTree):
        raise TypeError(f"describe takes a SumTree, not {type(tree).__name__}")
    width = _chain_width(tree)
    if width == 1:
        return Shape("sequential")
    if width is not None:
        return Shape("blocks", block=width)
    if _is_pairwise(tree):
        return Shape("pairwise")
    # split-K: descend through nodes that add only sub-sums; the first nodes with an input are the parts
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
    sizes = [p.size for p in parts]
    if any(s != sizes[0] for s in sizes[:-1]) or sizes[-1] > sizes[0]:
        return Shape("other")
    found = [_chain_width(p) for p in parts]
    widths = [w for w in found if w is not None]
    if len(widths) != len(parts):
        return Shape("other")
    # a part of several blocks fixes L; a part of one node of w inputs fits any L >= w
    multi = {w for p, w in zip(parts, widths) if isinstance(p.children[0], SumTree)}
    if len(multi) > 1:
        return Shape("other")
    block = multi.pop() if multi else max(widths)
    if any(w > block for p, w in zip(parts, widths) if not isinstance(p.children[0], SumTree)):
        return Shape("other")
    # the tree of the partial sums, with part k as input k
    index = {id(p): k for k, p in enumerate(parts)}
    built: dict[int, Any] = {}
    for node in reversed(top):  # children of a top node were appended after it
        built[id(node)] = SumTree(tuple(index[id(c)] if id(c) in index else built[id(c)] for c in node.children))
    skeleton = built[id(tree)]
    if len(skeleton.children) == len(parts):
        combine = "sequential" if len(parts) == 2 else "fused"
    elif _chain_width(skeleton) == 1:
        combine = "sequential"
    elif _is_pairwise(skeleton):
        combine = "pairwise"
    else:
        combine = "other"
    return Shape(kind, block=block, ways=ways, combine=combine, chunk=chunk)


# --- targets -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SumTarget:
    """A batched black-box summation: ``fn(X) -> y`` with ``X`` of shape (rows, n), ``y`` of shape (rows,).

    ``fn`` takes float64 summands and returns the sums (any array-like of numbers).  The probe needs to
    know what it may feed and how the target adds: the summands must be values of ``input_format`` times
    ``2**scale`` (a dot product whose other factor is ``2**scale``; 0 for a plain sum), sums are formed in
    ``accumulator`` (its precision sets ``M``) and returned in ``output_format``; ``fraction_bits``, where
    known, is the number of bits a fused block keeps below its largest exponent (``Model.fraction_bits``).
    ``max_batch`` caps the rows of one call (a GEMM of fixed shape takes m rows); ``name`` appears in
    errors and records.
    """

    fn: Callable[[np.ndarray], Any]
    n: int
    input_format: Format
    accumulator: Format
    output_format: Format
    scale: int = 0
    fraction_bits: int | None = None
    max_batch: int | None = None
    name: str = "target"

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        if not callable(self.fn):
            raise TypeError(f"SumTarget.fn must be callable f(X) -> y, not {self.fn!r}")
        set_(self, "n", _check_n(self.n, "n (the number of summands)"))
        for name in ("input_format", "accumulator", "output_format"):
            set_(self, name, _formats.get(getattr(self, name)))
        if self.max_batch is not None:
            set_(self, "max_batch", _check_n(self.max_batch, "max_batch", least=1))
        if self.fraction_bits is not None:
            set_(self, "fraction_bits", _check_n(self.fraction_bits, "fraction_bits", least=0))

    def summand_exponents(self) -> tuple[int, int]:
        """The least and largest k such that ``2**k`` is a summand this target takes."""
        f = self.input_format
        low = f.emin - f.precision + 1 if f.subnormals else f.emin
        return low + self.scale, f.emax + self.scale

    def random_summands(self, rng: np.random.Generator, rows: int) -> np.ndarray:
        """Random summands the target takes: normal values times 2**k, rounded to the input format after
        the factor ``2**scale``.  Each row draws its k uniformly from its own window of 1 to 41 exponents
        (narrow rows have few roundings, wide ones many), inside the range where the input format is normal
        (full precision) and n summands cannot overflow the output, around 2**0 where that range allows."""
        f, s = self.input_format, self.scale
        room = min(self.output_format.max, self.accumulator.max) / (8 * self.n)
        hi_ok = min(f.emax + s, math.floor(math.log2(room)))
        lo_ok = min(f.emin + s, hi_ok)
        mid = min(max(0, lo_ok), hi_ok)
        lo, hi = max(lo_ok, mid - 20), min(hi_ok, mid + 20)
        width = rng.integers(0, hi - lo + 1, size=(rows, 1))
        start = lo + np.floor(rng.random((rows, 1)) * (hi - lo - width + 1)).astype(np.int64)
        k = start + np.floor(rng.random((rows, self.n)) * (width + 1)).astype(np.int64)
        x = rng.standard_normal((rows, self.n)) * np.exp2(k - s)
        return _formats.round(f, x) * 2.0 ** s

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """One checked call: float64 sums of shape (rows,), or OrderError naming the target."""
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.n:
            raise ValueError(f"target {self.name} takes rows of {self.n} summands, not an array of shape {x.shape}")
        try:
            y = self.fn(x)
        except OrderError:
            raise
        except Exception as exc:
            raise OrderError(f"target {self.name} raised {type(exc).__name__} on {x.shape[0]} rows of {self.n} "
                             f"summands: {exc}") from exc
        y = np.asarray(y)
        if y.dtype.kind not in "fiu" and y.dtype.kind != "V":
            try:
                y = y.astype(np.float64)
            except (TypeError, ValueError):
                raise OrderError(f"target {self.name} returned {y.dtype} values; it must return numbers") from None
        y = _formats.from_numpy(y, "y")
        if y.shape not in ((x.shape[0],), (x.shape[0], 1)):
            raise OrderError(f"target {self.name} returned shape {y.shape} for {x.shape[0]} rows; it must return "
                             f"one sum per row, shape ({x.shape[0]},)")
        return y.reshape(x.shape[0])


def sum_target(fn: Callable[[np.ndarray], Any], n: int, *, input_format: str | Format = "fp32",
               accumulator: str | Format | None = None, output_format: str | Format | None = None,
               fraction_bits: int | None = None, max_batch: int | None = None, name: str = "sum") -> SumTarget:
    """A plain summation ``fn(X) -> y`` over rows of ``n`` values of ``input_format`` (accumulator and
    output default to the input format)."""
    acc = input_format if accumulator is None else accumulator
    return SumTarget(fn, n, _formats.get(input_format), _formats.get(acc),
                     _formats.get(acc if output_format is None else output_format), 0, fraction_bits,
                     max_batch, name)


def _ratio(n: int, accumulator: Format, fraction_bits: int | None) -> int:
    """log2(M / unit): see :func:`probe_scale`."""
    p = accumulator.precision
    f = p + 2 if fraction_bits is None else fraction_bits
    return max(p + 1, f) + max(1, math.ceil(math.log2(n))) + 1


def _default_scale(n: int, input_format: Format, accumulator: Format, fraction_bits: int | None) -> int:
    """The exponent s of the second factor 2**s of a dot-product target: 0 (b = ones) where the input
    format holds 2**r itself, else as much as it takes (at most the format's largest exponent) so that
    products a * 2**s reach M."""
    r = _ratio(n, accumulator, fraction_bits)
    if input_format.emax >= r:
        return 0
    return min(input_format.emax, r - input_format.emax)


def dot_target(fn: Callable[[np.ndarray, np.ndarray], Any], n: int, *, input_format: str | Format = "fp16",
               accumulator: str | Format = "fp32", output_format: str | Format | None = None,
               fraction_bits: int | None = None, scale: int | None = None, max_batch: int | None = None,
               name: str = "dot") -> SumTarget:
    """A batched dot product ``fn(a, b) -> y`` (a, b of shape (rows, n), y of shape (rows,)) probed as the
    sum of its products: ``b`` is ``2**scale`` everywhere (1 where the input format holds M itself; else,
    e.g. for fp16, ``2**15`` so that products ``2**15 * 2**15`` reach ``2**30``) and the summand ``x`` is
    fed as ``a = x / 2**scale``."""
    fin, acc = _formats.get(input_format), _formats.get(accumulator)
    n = _check_n(n, "n (the number of summands)")
    s = _default_scale(n, fin, acc, fraction_bits) if scale is None else int(scale)
    if not _formats.is_representable(fin, 2.0 ** s):
        raise ValueError(f"dot_target: b = 2**{s} is not a value of {fin.name}; choose scale in "
                         f"[{fin.emin - fin.precision + 1}, {fin.emax}]")
    factor = 2.0 ** s

    def summed(x: np.ndarray) -> Any:
        return fn(x / factor, np.full_like(x, factor))

    return SumTarget(summed, n, fin, acc, _formats.get(acc if output_format is None else output_format), s,
                     fraction_bits, max_batch, name)


def matmul_target(matmul: Callable[[np.ndarray, np.ndarray], Any], n: int, *, m: int = 64, n_cols: int = 64,
                  column: int = 0, input_format: str | Format = "fp32", accumulator: str | Format = "fp32",
                  output_format: str | Format | None = None, fraction_bits: int | None = None,
                  scale: int | None = None, name: str = "matmul") -> SumTarget:
    """The reduction over K = ``n`` of ``matmul(A, B) -> C``, A of shape (m, n), B of shape (n, n_cols),
    both float64 arrays of values of ``input_format``: each probe is one row of A (at most m per call, the
    rest of A zero), B is ``2**scale`` everywhere and column ``column`` of C is read.  The GEMM keeps its
    shape in every call, since a library may pick another kernel (another order) for another shape."""
    m = _check_n(m, "m", least=1)
    n_cols = _check_n(n_cols, "n_cols", least=1)
    if not 0 <= column < n_cols:
        raise ValueError(f"column must lie in [0, {n_cols}), not {column!r}")

    def rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        A = np.zeros((m, a.shape[1]))
        A[: a.shape[0]] = a
        B = np.repeat(b[:1].T, n_cols, axis=1)
        C = np.asarray(matmul(A, B))
        if C.shape != (m, n_cols):
            raise OrderError(f"target {name}: matmul of ({m}, {a.shape[1]}) by ({a.shape[1]}, {n_cols}) returned "
                             f"shape {C.shape}")
        return C[: a.shape[0], column]

    return dot_target(rows, n, input_format=input_format, accumulator=accumulator, output_format=output_format,
                      fraction_bits=fraction_bits, scale=scale, max_batch=m, name=name)


_TORCH_DTYPES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}


def _torch() -> Any:
    return require("torch", extra="torch", needed_by="torch_matmul_target")


def torch_matmul_target(n: int, dtype: Literal["fp16", "bf16", "fp32"] = "fp32", device: str = "cpu", *,
                        allow_reduced_precision_reduction: bool | None = None, allow_tf32: bool | None = None,
                        m: int = 64, n_cols: int = 64, column: int = 0) -> SumTarget:
    """The reduction over K = ``n`` of ``torch.matmul`` on (m, n) x (n, n_cols) tensors of ``dtype`` on
    ``device`` ("cpu", "cuda", "cuda:1", ...).

    ``allow_reduced_precision_reduction`` sets ``torch.backends.cuda.matmul.allow_fp16_reduced_precision_
    reduction`` (fp16) or ``allow_bf16_reduced_precision_reduction`` (bf16), ``allow_tf32`` sets
    ``allow_tf32`` (fp32), for each call only; None leaves torch's setting.  Sums are taken to be formed in
    fp32 (CPU kernels and tensor cores alike); where split-K partial sums are kept in fp16 or bf16 instead
    (reduced-precision reduction), M overflows or no longer absorbs, and the inference says so.  fp16 inputs
    cannot hold M, so B is ``2**15`` and the probe values are products (``2**15 * 2**15 = 2**30``).
    """
    torch = _torch()
    if dtype not in _TORCH_DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(map(repr, _TORCH_DTYPES))}, not {dtype!r}")
    tdtype = getattr(torch, _TORCH_DTYPES[dtype])
    if str(device).startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"device {device!r}: torch sees no CUDA GPU (torch {torch.__version__}, "
                           f"CUDA build {torch.version.cuda}); use device='cpu' or a CUDA build of torch on a GPU")
    from ..torch_switches import matmul_switches, tf32_enabled

    settings: dict[str, bool] = {}
    if allow_reduced_precision_reduction is not None and dtype != "fp32":
        settings[f"allow_{dtype}_reduced_precision_reduction"] = bool(allow_reduced_precision_reduction)
    if allow_tf32 is not None and dtype == "fp32":
        settings["allow_tf32"] = bool(allow_tf32)
    tf32 = dtype == "fp32" and str(device).startswith("cuda") and (
        allow_tf32 if allow_tf32 is not None else tf32_enabled(torch))
    switches = {"tf32": settings.get("allow_tf32"),
                "reduced": settings.get(f"allow_{dtype}_reduced_precision_reduction")}  # None: torch's own

    def matmul(A: np.ndarray, B: np.ndarray) -> np.ndarray:
        At = torch.from_numpy(A).to(device=device, dtype=tdtype)
        Bt = torch.from_numpy(B).to(device=device, dtype=tdtype)
        with matmul_switches(torch, **switches):
            C = torch.matmul(At, Bt)
        return C.to(torch.float64).cpu().numpy()

    flags = ", ".join(f"{k}={v}" for k, v in settings.items())
    name = f"torch.matmul {dtype} {device} ({m}x{n})@({n}x{n_cols}){' ' + flags if flags else ''}"
    return matmul_target(matmul, n, m=m, n_cols=n_cols, column=column, input_format="tf32" if tf32 else dtype,
                         accumulator="fp32", output_format=dtype, name=name)


def sim_target(n: int, device: str = "H100", input_format: str = "fp16", output_format: str = "fp32", *,
               model: Any = None, instruction: str | None = None) -> SumTarget:
    """The blockfma simulator as a target: ``blockfma.dot(a, b, 0)`` over k = ``n`` for the device's model
    (or ``model``), blocks chained as the engine chains them."""
    from .. import device as _device, dot as _dot

    mdl = model if model is not None else _device(device).model(input_format, output_format,
                                                                instruction=instruction)
    acc = mdl.accumulator

    def fn(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return _dot(a, b, np.zeros(a.shape[0]), model=mdl)

    return dot_target(fn, n, input_format=mdl.input_format, accumulator=acc, output_format=mdl.output_format,
                      fraction_bits=mdl.fraction_bits, name=f"sim:{mdl.name or mdl.family.value}")


# --- the probe values ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ProbeScale:
    """The probe values: ``M = 2**big`` and the unit ``2**unit`` (summands; for a dot-product target each
    is a product with the factor ``2**scale``)."""

    big: int
    unit: int

    @property
    def ratio(self) -> int:
        """log2(M / unit)."""
        return self.big - self.unit


def probe_scale(target: SumTarget, *, ratio: int | None = None) -> ProbeScale:
    """Choose M and the unit for ``target``.

    Let p be the accumulator's precision, F the bits a fused block keeps below its largest exponent
    (``target.fraction_bits``; p + 2 where unknown, above every NVIDIA preset: 23 to 25 for fp32
    accumulation) and c = ceil(log2 n).  Before M and -M cancel, a partial sum of M or -M meets at most
    n - 2 < 2**c units.  A rounded-to-nearest addition of precision p keeps ``-2**b`` when the units add
    less than half its spacing below, ``2**(b - p - 1)``; a fused block cuts every term below
    ``2**(b - F)``.  So ``M / unit = 2**r`` with ``r = max(p + 1, F) + c + 1`` (one bit of margin) makes
    both absorb.  The unit is 1 where the summands allow (outputs then count directly), else as large as
    lets M fit: fp16 products reach ``2**30``, so fp16 with an fp32 accumulator and n = 256 (r = 35) gets
    ``M = 2**30`` and the unit ``2**-5`` (``a = 2**-20``, a subnormal, times ``b = 2**15``).  ``ratio``
    overrides r.  Additions rounded toward zero step by step absorb units into M but not into -M (each
    unit moves ``-M`` one step toward zero, at any ratio); where -M meets units before M the count comes
    out far beyond n - 2 and the inference says so.
    """
    r = _ratio(target.n, target.accumulator, target.fraction_bits) if ratio is None else int(ratio)
    low, high = target.summand_exponents()
    out = target.output_format
    out_low = out.emin - out.precision + 1 if out.subnormals else out.emin
    acc = target.accumulator
    acc_low = acc.emin - acc.precision + 1 if acc.subnormals else acc.emin
    if high - low < r:
        raise OrderError(f"target {target.name}: M / unit must be 2**{r} for n = {target.n} with a "
                         f"{acc.name} accumulator, but its summands span only 2**{low} .. 2**{high}; probe fewer "
                         "summands, or use a dot-product target so that products reach further")
    unit = min(max(0, low, out_low, acc_low), high - r)
    big = unit + r
    if unit < max(out_low, acc_low) or big > min(acc.emax, high):
        raise OrderError(f"target {target.name}: no M = 2**b and unit = 2**u with b - u = {r} fit the summands "
                         f"(2**{low} .. 2**{high}), the {acc.name} accumulator and the {out.name} output")
    if target.n > 2 ** min(out.precision, acc.precision):
        raise OrderError(f"target {target.name}: counts up to n = {target.n} are not exact in {out.name} "
                         f"(p = {out.precision}); probe at most {2 ** out.precision} summands")
    return ProbeScale(big, unit)


def _probe_rows(n: int, pairs: np.ndarray, scale: ProbeScale) -> np.ndarray:
    x = np.full((len(pairs), n), 2.0 ** scale.unit)
    rows = np.arange(len(pairs))
    x[rows, pairs[:, 0]] = 2.0 ** scale.big
    x[rows, pairs[:, 1]] = -(2.0 ** scale.big)
    return x


# --- inference -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class OrderResult:
    """What :func:`infer_order` found: the tree and its shape, the cost (``calls`` to the target,
    ``probes`` rows, ``rounds`` of dependent calls) and every measurement (``pairs`` probed, the ``sizes``
    of their smallest common subtree, the target's raw ``outputs``)."""

    tree: SumTree
    shape: Shape
    target: str
    n: int
    calls: int
    probes: int
    rounds: int
    scale: ProbeScale
    method: str
    output_format: Format = field(repr=False)
    pairs: np.ndarray = field(repr=False, compare=False)
    sizes: np.ndarray = field(repr=False, compare=False)
    outputs: np.ndarray = field(repr=False, compare=False)

    def probe_inputs(self) -> np.ndarray:
        """The probe rows (one per pair) as they were fed to the target."""
        return _probe_rows(self.n, self.pairs, self.scale)

    def replay(self, node: str | Callable[..., np.ndarray] = "fp32") -> Verification:
        """The tree, evaluated with ``node`` (see :func:`evaluate`) and rounded to the target's output format,
        on the probe rows, against the target's recorded outputs (no target calls)."""
        return _compare(self.tree, self.probe_inputs(), self.outputs, node, calls=0, output=self.output_format)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able record."""
        return {"target": self.target, "n": self.n, "shape": str(self.shape), "kind": self.shape.kind,
                "block": self.shape.block, "ways": self.shape.ways, "combine": self.shape.combine,
                "chunk": self.shape.chunk,
                "tree": self.tree.text(), "calls": self.calls, "probes": self.probes, "rounds": self.rounds,
                "method": self.method, "M": f"2^{self.scale.big}", "unit": f"2^{self.scale.unit}"}


class _Prober:
    """Builds probe rows, calls the target in batches of at most max_batch rows, checks every count."""

    def __init__(self, target: SumTarget, scale: ProbeScale) -> None:
        self.target, self.scale, self.n = target, scale, target.n
        self.calls = self.rows = self.rounds = 0
        self.pairs: list[np.ndarray] = []
        self.sizes: list[np.ndarray] = []
        self.outputs: list[np.ndarray] = []

    def _call(self, x: np.ndarray) -> np.ndarray:
        step = self.target.max_batch or len(x)
        out = []
        for start in range(0, len(x), step):
            out.append(self.target(x[start:start + step]))
            self.calls += 1
        self.rows += len(x)
        return np.concatenate(out)

    def measure(self, pairs: np.ndarray) -> np.ndarray:
        """l(i, j) for each pair, in one round (the first adds a row of units only, every round repeats
        its first probe as its last row, so a target that is not deterministic shows)."""
        n, unit, name = self.n, 2.0 ** self.scale.unit, self.target.name
        x = _probe_rows(n, pairs, self.scale)
        first = self.rounds == 0
        parts = ([np.full((1, n), unit)] if first else []) + [x, x[:1]]
        y = self._call(np.concatenate(parts))
        self.rounds += 1
        if first:
            if y[0] != n * unit:
                raise OrderError(f"target {name} returned {float(y[0])!r} for {n} summands all equal to "
                                 f"2^{self.scale.unit}; a sum gives {n * unit!r}: it is not a plain sum of its "
                                 "inputs (a mean, a weighted or non-linear function?), or it does not read them "
                                 "as given")
            y = y[1:]
        y, repeat = y[:-1], y[-1]
        if not (repeat == y[0] or (np.isnan(repeat) and np.isnan(y[0]))):
            raise OrderError(f"target {name} returned {float(y[0])!r} and then {float(repeat)!r} for the same "
                             f"input (M at {pairs[0, 0]}, -M at {pairs[0, 1]}): it is not deterministic, so no "
                             "one order describes it")
        counts = y / unit
        bad = ~(np.isfinite(counts) & (counts == np.round(counts)) & (counts >= 0) & (counts <= n - 2))
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            i, j = int(pairs[k, 0]), int(pairs[k, 1])
            why = ("a partial sum overflowed: M is too large for a format the target keeps partial sums in "
                   "(e.g. fp16 split-K partials with reduced-precision reduction); probe fewer summands or "
                   "turn that reduction off" if not np.isfinite(y[k]) else
                   "the target is not a summation, is not deterministic, or does not absorb the units into "
                   f"M (additions rounded toward zero step by step, or an accumulator wider than "
                   f"{self.target.accumulator.name}: declare it, or pass scale=probe_scale(target, ratio=...))")
            raise OrderError(f"target {name}: the probe with M = 2^{self.scale.big} at {i}, -M at {j} and "
                             f"2^{self.scale.unit} elsewhere returned {float(y[k])!r}, which is "
                             f"{float(counts[k])!r} units, not a whole number between 0 and n - 2 = {n - 2}: {why}")
        sizes = n - counts.astype(np.int64)
        self.pairs.append(pairs)
        self.sizes.append(sizes)
        self.outputs.append(y)
        return sizes


def _inconsistent(name: str, detail: str) -> OrderError:
    return OrderError(f"target {name}: the probe outputs fit no summation tree ({detail}); the target is not "
                      "deterministic, not a summation, adds several terms exactly in one step (an exact "
                      "multi-term adder does not absorb, so probes cannot resolve it), or adds in a wider "
                      "accumulator than declared (M too small to absorb: declare it, or pass "
                      "scale=probe_scale(target, ratio=...))")


def infer_order(target: SumTarget, *, method: Literal["adaptive", "all-pairs"] = "adaptive",
                scale: ProbeScale | None = None) -> OrderResult:
    """Infer the summation tree of ``target`` (FPRev's probes; see the module docstring).

    ``method="adaptive"``: the pivot recursion, one target call (or one per ``max_batch`` rows) per
    round; ``"all-pairs"``: every pair in one round.  ``scale``: the probe values (default
    :func:`probe_scale`).  Every measurement is checked against the tree at the end; a target whose outputs
    fit no tree raises :class:`OrderError` saying why.
    """
    if not isinstance(target, SumTarget):
        raise TypeError(f"infer_order takes a SumTarget (see sum_target, dot_target, matmul_target, "
                        f"torch_matmul_target, sim_target), not {type(target).__name__}")
    if method not in ("adaptive", "all-pairs"):
        raise ValueError(f"method must be 'adaptive' or 'all-pairs', not {method!r}")
    scale = probe_scale(target) if scale is None else scale
    n, name = target.n, target.name
    prober = _Prober(target, scale)
    table: np.ndarray | None = None
    if method == "all-pairs":
        pairs = np.array(list(itertools.combinations(range(n), 2)), dtype=np.int64)
        table = np.zeros((n, n), dtype=np.int64)
        got = prober.measure(pairs)
        table[pairs[:, 0], pairs[:, 1]] = got
        table[pairs[:, 1], pairs[:, 0]] = got

    # a task: (members, ceiling): find the subtrees that are children of the node of `ceiling` inputs and
    # hold exactly `members`.  The root task has the ceiling n + 1 (no node is that large).
    members: list[list[int]] = [list(range(n))]
    ceiling: list[int] = [n + 1]
    plans: list[Any] = [None]
    pending = [0]
    while pending:
        ready = [t for t in pending if len(members[t]) >= 2]
        for t in pending:
            if len(members[t]) == 1:
                plans[t] = ("leaf", members[t][0])
        pending = []
        if not ready:
            break
        pairs = np.array([(members[t][0], q) for t in ready for q in members[t][1:]], dtype=np.int64)
        got = table[pairs[:, 0], pairs[:, 1]] if table is not None else prober.measure(pairs)
        start = 0
        for t in ready:
            pivot, others = members[t][0], members[t][1:]
            sizes = got[start:start + len(others)]
            start += len(others)
            top = ceiling[t]
            if (sizes > top).any():
                k = int(np.flatnonzero(sizes > top)[0])
                raise _inconsistent(name, f"inputs {pivot} and {others[k]} join in a subtree of {sizes[k]} inputs, "
                                          f"inside one of {top}")
            groups: dict[int, list[int]] = {}
            for q, s in zip(others, sizes.tolist()):
                groups.setdefault(s, []).append(q)
            path = []
            below = 1
            for s in sorted(groups):
                if s == top:
                    continue
                below += len(groups[s])
                if below != s:
                    raise _inconsistent(name, f"input {pivot} joins {len(groups[s])} inputs ({_few(groups[s])}) "
                                              f"in a subtree of {s} inputs, but {below} inputs lie in or below it")
                members.append(groups[s])
                ceiling.append(s)
                plans.append(None)
                path.append((s, len(members) - 1))
                pending.append(len(members) - 1)
            rest = None
            if top in groups:
                members.append(groups[top])
                ceiling.append(top)
                plans.append(None)
                rest = len(members) - 1
                pending.append(rest)
            plans[t] = ("path", pivot, path, rest)

    # assemble bottom-up: a task's sub-tasks were created after it
    forests: list[list[Any]] = [[] for _ in plans]
    for t in range(len(plans) - 1, -1, -1):
        plan = plans[t]
        if plan[0] == "leaf":
            forests[t] = [plan[1]]
            continue
        _, pivot, path, rest = plan
        node: Any = pivot
        for _s, sub in path:
            node = SumTree((node, *forests[sub]))
        forests[t] = [node] + (forests[rest] if rest is not None else [])
    root = forests[0]
    if len(root) != 1 or not isinstance(root[0], SumTree) or root[0].size != n:
        raise _inconsistent(name, "the subtrees found do not join in one root")
    tree = root[0]
    all_pairs = np.concatenate(prober.pairs) if prober.pairs else np.zeros((0, 2), np.int64)
    all_sizes = np.concatenate(prober.sizes) if prober.sizes else np.zeros(0, np.int64)
    predicted = tree.lca_sizes()[all_pairs[:, 0], all_pairs[:, 1]]
    if (predicted != all_sizes).any():
        k = int(np.flatnonzero(predicted != all_sizes)[0])
        raise _inconsistent(name, f"inputs {all_pairs[k, 0]} and {all_pairs[k, 1]} measured a common subtree of "
                                  f"{all_sizes[k]} inputs, the tree built from the other probes has {predicted[k]}")
    outputs = np.concatenate(prober.outputs) if prober.outputs else np.zeros(0)
    return OrderResult(tree, describe(tree), name, n, prober.calls, prober.rows, prober.rounds, scale, method,
                       target.output_format, all_pairs, all_sizes, outputs)


def _few(items: Sequence[int], k: int = 6) -> str:
    return ", ".join(map(str, items[:k])) + (", ..." if len(items) > k else "")


# --- evaluation in a given order -----------------------------------------------------------------------------
NodeOp = Callable[[SumTree, list], np.ndarray]


def _sequential_op(fmt: Format, mode: RoundingMode) -> NodeOp:
    """Children added one at a time in canonical order, each addition rounded to ``fmt`` (a float64 sum
    of two values of a format of p <= 25 bits rounds once correctly, since 53 >= 2p + 2; fp64 adds
    directly)."""
    wide = fmt.precision == 53
    if fmt.precision > 25 and not (wide and mode is RoundingMode.TiesToEven):
        raise ValueError(f"node='{fmt.name}:{mode.value}': sequential adds are supported for formats of up to "
                         "25 bits in any rounding mode, and for binary64 rounded to nearest")

    def op(node: SumTree, values: list) -> np.ndarray:
        acc = values[0]
        for v in values[1:]:
            acc = acc + v if wide else _formats.round(fmt, acc + v, mode)
        return acc

    return op


def _exact_op(fmt: Format, mode: RoundingMode) -> NodeOp:
    """The exact sum of the children, rounded once to ``fmt`` (an exact multi-term adder)."""

    def op(node: SumTree, values: list) -> np.ndarray:
        stacked = np.stack(values, axis=-1)
        out = np.empty(stacked.shape[0])
        for r, row in enumerate(stacked):
            if not np.all(np.isfinite(row)):
                out[r] = float(np.sum(row))
                continue
            out[r] = _formats.round_fraction(fmt, sum((Fraction(float(v)) for v in row), Fraction(0)), mode)
        return out

    return op


def _node_op(node: str | Callable[..., np.ndarray]) -> NodeOp:
    if callable(node):
        return node
    if not isinstance(node, str):
        raise ValueError(f"node must be a format name ('fp32'), 'exact:fp32[:rz]' or a callable, not {node!r}")
    parts = node.split(":")
    exact = parts[0] in ("exact", "fused")
    if exact:
        parts = parts[1:]
    if not 1 <= len(parts) <= 2:
        raise ValueError(f"node={node!r}: write a format ('fp32'), optionally with a rounding mode "
                         "('fp32:rz'), or 'exact:fp32' for one rounding per node")
    fmt = _formats.get(parts[0])
    mode = RoundingMode.parse(parts[1]) if len(parts) == 2 else RoundingMode.TiesToEven
    return _exact_op(fmt, mode) if exact else _sequential_op(fmt, mode)


def evaluate(tree: SumTree, x: Any, node: str | Callable[..., np.ndarray] = "fp32") -> np.ndarray:
    """Sum the rows of ``x`` (shape (rows, n) or (n,)) in the order of ``tree``.

    ``node`` says how one node adds its children: a format name (``"fp32"``, ``"fp16"``, ``"bf16"``,
    ``"fp64"``; with a rounding mode, ``"fp32:rz"``): the children one at a time in canonical order, each
    addition rounded; ``"exact:fp32"``: their exact sum, rounded once; or a callable ``op(node, values)``
    taking the node and its children's values (float64 arrays of shape (rows,)) and returning the node's
    (:func:`block_op` makes one from a blockfma Model).  Returns float64 values of shape (rows,) or ().
    """
    arr = np.asarray(x, dtype=np.float64)
    single = arr.ndim == 1
    arr = arr[None, :] if single else arr
    if arr.ndim != 2 or arr.shape[1] < tree.mask.bit_length():
        raise ValueError(f"evaluate: x must have shape (rows, n) with n >= {tree.mask.bit_length()} "
                         f"(the tree's largest input + 1), not {np.shape(x)}")
    op = _node_op(node)
    values: dict[int, np.ndarray] = {}
    for nd in tree.nodes():
        kids = [arr[:, c] if isinstance(c, int) else values.pop(id(c)) for c in nd.children]
        values[id(nd)] = np.asarray(op(nd, kids), dtype=np.float64)
    out = values[id(tree)]
    return out[0] if single else out


def block_op(model: Any, scale: int = 0, between: str = "fp32", *, backend: str = "auto") -> NodeOp:
    """A node operation that runs each node with inputs among its children as one block of a blockfma
    ``Model`` (``blockfma.dot``): the inputs as products ``(x / 2**scale) * 2**scale``, the node's one
    sub-sum child (if any) as C; nodes that add only sub-sums (split-K partials) add them with ``between``
    (a format name or ``"exact:fp32"``, as in :func:`evaluate`).  ``backend`` goes to ``blockfma.dot``."""
    from .. import dot as _dot

    width = model.block_width
    combine = _node_op(between)
    factor = 2.0 ** scale

    def op(node: SumTree, values: list) -> np.ndarray:
        leaves = [v for c, v in zip(node.children, values) if isinstance(c, int)]
        subs = [v for c, v in zip(node.children, values) if not isinstance(c, int)]
        if not leaves:
            return combine(node, values)
        if len(subs) > 1 or (width is not None and len(leaves) > width):
            raise ValueError(f"block_op: node {node} adds {len(leaves)} inputs and {len(subs)} sub-sums; one "
                             f"block of {model.name or model.family.value} takes at most {width} inputs and one C")
        a = np.stack(leaves, axis=-1) / factor
        c = subs[0] if subs else np.zeros(a.shape[0])
        return _formats.from_numpy(_dot(a, np.full_like(a, factor), c, model=model, backend=backend))

    return op


# --- closed loop ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Verification:
    """The outcome of holding a tree to a target: ``ok`` when all ``trials`` rows agree bit for bit; else
    ``mismatches`` rows differ and the first is row ``first`` with ``inputs``, the tree's value
    ``expected`` and the target's ``got``."""

    ok: bool
    trials: int
    mismatches: int
    calls: int
    node: str
    first: int | None = None
    inputs: np.ndarray | None = field(default=None, repr=False, compare=False)
    expected: float | None = None
    got: float | None = None

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        if self.ok:
            return f"{self.trials} rows agree bit for bit (node arithmetic {self.node})"
        assert self.inputs is not None and self.first is not None
        nz = [(k, float(v).hex()) for k, v in enumerate(self.inputs) if v != 0][:8]
        shown = ", ".join(f"x[{k}]={h}" for k, h in nz) + (", ..." if np.count_nonzero(self.inputs) > 8 else "")
        return (f"{self.mismatches} of {self.trials} rows differ (node arithmetic {self.node}); first: row "
                f"{self.first}, tree {float(self.expected).hex()} ({self.expected!r}), target "
                f"{float(self.got).hex()} ({self.got!r}); inputs {shown}")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able record (values in hexadecimal float form)."""
        out: dict[str, Any] = {"ok": self.ok, "trials": self.trials, "mismatches": self.mismatches,
                               "calls": self.calls, "node": self.node}
        if not self.ok and self.inputs is not None:
            out.update(first=self.first, expected=float(self.expected).hex(), got=float(self.got).hex(),
                       inputs=[float(v).hex() for v in self.inputs])
        return out


def _same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a == b) & (np.signbit(a) == np.signbit(b)) | (np.isnan(a) & np.isnan(b))


def _compare(tree: SumTree, x: np.ndarray, got: np.ndarray, node: Any, calls: int,
             output: Format | None = None) -> Verification:
    want = evaluate(tree, x, node)
    if output is not None:
        want = _formats.round(output, want)
    same = _same(want, got)
    label = node if isinstance(node, str) else getattr(node, "__name__", "custom")
    if same.all():
        return Verification(True, len(x), 0, calls, label)
    k = int(np.flatnonzero(~same)[0])
    return Verification(False, len(x), int((~same).sum()), calls, label, k, x[k].copy(), float(want[k]),
                        float(got[k]))


def verify(tree: SumTree, target: SumTarget, *, trials: int = 1000, node: str | Callable[..., np.ndarray] = "fp32",
           inputs: Any = None, seed: int = 0) -> Verification:
    """Hold ``tree`` to ``target``: the target's sums of ``inputs`` (default: ``trials`` random rows of
    summands it takes, see :meth:`SumTarget.random_summands`) against :func:`evaluate` with ``node``, its
    result rounded to nearest in the target's output format (an fp16 GEMM that adds in fp32 rounds once
    at the end), bit for bit (NaN matches NaN).  Returns a :class:`Verification` with the first mismatch."""
    if tree.size != target.n or tree.mask.bit_length() != target.n:
        raise ValueError(f"verify: the tree has inputs {_few(tree.leaves())}, the target {target.n} summands")
    if inputs is None:
        x = target.random_summands(np.random.default_rng(seed), _check_n(trials, "trials", least=1))
    else:
        x = np.asarray(inputs, dtype=np.float64).reshape(-1, target.n)
    step = target.max_batch or len(x)
    got = np.concatenate([target(x[s:s + step]) for s in range(0, len(x), step)])
    return _compare(tree, x, got, node, calls=-(-len(x) // step), output=target.output_format)


# --- a survey of torch.matmul --------------------------------------------------------------------------------
def _preset_for(name: str) -> Any:
    """The blockfma preset whose name appears in a GPU's name ('NVIDIA H100 80GB HBM3' -> H100), or None."""
    from .. import device as _device

    for token in re.split(r"[\s_-]+", name):
        try:
            return _device(token)
        except (KeyError, ValueError):
            continue
    return None


def torch_orders(device: str = "cuda", *, sizes: Sequence[int] = (64, 256, 1024),
                 dtypes: Sequence[str] = ("fp16", "bf16", "fp32"),
                 shapes: Sequence[tuple[int, int]] = ((16, 16), (128, 128), (1024, 1024)),
                 switches: Sequence[bool | None] | None = None, trials: int = 1000,
                 preset: str | None = None) -> dict[str, Any]:
    """Infer and verify the order of ``torch.matmul`` over K for every dtype, switch setting, K in
    ``sizes`` and GEMM shape (m, n_cols) in ``shapes``; returns a JSON-able dict with the environment.

    The switch is ``allow_reduced_precision_reduction`` for fp16/bf16 and ``allow_tf32`` for fp32
    (``switches``: default both ways on CUDA, torch's setting on the CPU).  Each recovered tree is held to
    the target on ``trials`` random rows with fp32 additions per node and, on a GPU whose name names a
    blockfma preset (or ``preset``), with the preset's tensor-core blocks (:func:`block_op`).  A
    configuration that fits no tree records the error instead.
    """
    import time

    torch = _torch()
    on_gpu = str(device).startswith("cuda")
    env: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda, "device": str(device)}
    model_source = None
    if on_gpu and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(torch.device(device))
        env.update(gpu=props.name, capability=f"{props.major}.{props.minor}")
        from .. import device as _device
        model_source = _device(preset) if preset else _preset_for(props.name)
        env["preset"] = model_source.name if model_source is not None else None
    runs = []
    for dtype in dtypes:
        for switch in (switches if switches is not None else ((False, True) if on_gpu else (None,))):
            for n in sizes:
                for m, n_cols in shapes:
                    key = "allow_tf32" if dtype == "fp32" else "allow_reduced_precision_reduction"
                    rec: dict[str, Any] = {"dtype": dtype, key: switch, "n": n, "m": m, "n_cols": n_cols}
                    start = time.perf_counter()
                    try:
                        target = torch_matmul_target(n, dtype, device, m=m, n_cols=n_cols, **{key: switch})
                        found = infer_order(target)
                        rec.update(found.to_dict(), seconds=round(time.perf_counter() - start, 3))
                        rec["verify_fp32"] = verify(found.tree, target, trials=trials, node="fp32").to_dict()
                        if model_source is not None and target.input_format.name != "fp32":
                            model = model_source.model(target.input_format.name, "fp32")
                            try:
                                op = block_op(model, target.scale, "fp32", backend="numpy")
                                rec["verify_preset"] = {"model": model.name, **verify(
                                    found.tree, target, trials=trials, node=op).to_dict()}
                            except ValueError as exc:
                                rec["verify_preset"] = {"model": model.name, "error": str(exc)}
                    except (OrderError, ValueError) as exc:
                        rec.update(error=str(exc), seconds=round(time.perf_counter() - start, 3))
                    runs.append(rec)
    return {"environment": env, "runs": runs}
