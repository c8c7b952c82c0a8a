"""Sums in a given order and the closed loop: :func:`evaluate` adds inputs in a tree's order with a given
rounding per node (:func:`block_op`: a blockfma Model's blocks), and :func:`verify` holds a recovered tree
to its target on fresh inputs (:class:`Verification`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Callable

import numpy as np

from ... import formats as _formats
from ... import arguments
from ...engine import dot as _dot
from ...formats import Format, RoundingMode
from .targets import SumTarget
from .tree import SumTree, check_count, few

__all__ = ["NodeOp", "evaluate", "block_op", "Verification", "compare", "verify"]


NodeOp = Callable[[SumTree, list], np.ndarray]


def _sequential_op(fmt: Format, mode: RoundingMode) -> NodeOp:
    """Children added one at a time in canonical order, each addition rounded to ``fmt`` (a float64 sum of two values of
    a format of p <= 25 bits rounds once correctly, since 53 >= 2p + 2; fp64 adds directly)."""
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
    width = model.block_width
    scale = arguments.integer("scale", scale)
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


def compare(tree: SumTree, x: np.ndarray, got: np.ndarray, node: Any, calls: int,
            output: Format | None = None) -> Verification:
    """The rows ``x`` summed in ``tree``'s order with ``node`` (rounded to ``output``, if given) against
    ``got``, bit for bit, as a :class:`Verification` counting ``calls`` target calls."""
    want = evaluate(tree, x, node)
    if output is not None:
        want = _formats.round(output, want)
    same = _same(want, got)
    label = node if isinstance(node, str) else getattr(node, "__name__", "custom")
    if same.all():
        return Verification(True, len(x), 0, calls, label)
    k = int(np.flatnonzero(~same)[0])
    return Verification(False, len(x), int((~same).sum()), calls, label, k, x[k].copy(), float(want[k]), float(got[k]))


def verify(tree: SumTree, target: SumTarget, *, trials: int = 1000, node: str | Callable[..., np.ndarray] = "fp32",
           inputs: Any = None, seed: int = 0) -> Verification:
    """Hold ``tree`` to ``target``: the target's sums of ``inputs`` (default: ``trials`` random rows of
    summands it takes, see :meth:`SumTarget.random_summands`) against :func:`evaluate` with ``node``, its
    result rounded to nearest in the target's output format (an fp16 GEMM that adds in fp32 rounds once
    at the end), bit for bit (NaN matches NaN).  Returns a :class:`Verification` with the first mismatch."""
    if tree.size != target.n or tree.mask.bit_length() != target.n:
        raise ValueError(f"verify: the tree has inputs {few(tree.leaves())}, the target {target.n} summands")
    if inputs is None:
        trials = check_count(trials, "trials", least=1)
        seed = arguments.seed("seed", seed)
        arguments.memory("trials", trials, 64.0 * trials * target.n, f"{trials} rows of {target.n} summands",
                         fix="take fewer trials")
        x = target.random_summands(np.random.default_rng(seed), trials)
    else:
        x = np.asarray(inputs, dtype=np.float64).reshape(-1, target.n)
    step = target.max_batch or len(x)
    got = np.concatenate([target(x[s:s + step]) for s in range(0, len(x), step)])
    return compare(tree, x, got, node, calls=-(-len(x) // step), output=target.output_format)

