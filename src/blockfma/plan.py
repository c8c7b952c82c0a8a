"""The step plan: what a Model does over the K products of one dot product, written once.

A matrix unit takes its products in **steps** (a block of ``block_width`` products, an instruction of
``instruction_k`` products, or with ``c_entry="end"`` the whole of K), a short last step padded with
+0 * +0 products.  Inside a step the products enter in the model's ``product_order`` and fall into
**blocks** of L = ``block_width``, each summed by the family's block (:mod:`blockfma.family`).  Then either
C is fused into the step's one block (``c_entry="fused"``), or the step's blocks chain from +0 and C is
added by one IEEE addition rounded to nearest even; with a wider ``accumulator_format`` the blocks' result
is **stored** (rounded to nearest even into the output format, before C where C comes after).
docs/semantics.md, "Blocks and chaining", spells the rules out; the first step's block reads a narrower
``c_input_format`` C (:attr:`Plan.first`, handed out by :meth:`Plan.unit`: the one rule, written here once).

:class:`Schedule` is what of it does not depend on K (made once per model: :func:`schedule`, cached),
:class:`Plan` the schedule of one call, and :func:`run` walks it.  Every engine (the exact reference, the
numpy and GPU engines, the SMT encoding) runs the same plan and supplies only the four operations of
:class:`Datapath`: sum a block, a zero to start from, store, add C (the compiled kernels walk it in whole
chains and batches of steps: :mod:`blockfma.engine.fast`).  Products are named by their index
in the padded operands; an engine pads its operands to :attr:`Plan.padded` with +0 first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from .model import Model

__all__ = ["Plan", "Schedule", "Datapath", "plan", "schedule", "run", "take", "pad", "array_index", "Index",
           "block_model", "first_block_model", "step_width", "order"]

V = TypeVar("V")

#: the products of one block: a slice of the padded operands, or their indices in the order they enter
Index = slice | tuple[int, ...]


@dataclass(frozen=True)
class Plan:
    """The schedule of one dot product of ``k`` products under a model (see the module docstring).

    ``model``: the model the datapath runs (:meth:`Model.arithmetic_model`: operands unpacked where the model says);
    ``block``: the model of one block (:meth:`Model.block_model`: C fused, in the accumulator format); ``width``:
    products per step; ``block_width``: products per block (``width`` is a multiple of it); ``order``: the order in
    which one step's products enter its blocks (None: as given); ``c_fused``: each step is one block with C among its
    terms (else C is added after the step's blocks); ``store``: the blocks' result is rounded to nearest even from the
    accumulator into the output format; ``first``: the model of the first step's block, the only block whose C is the C
    given (:meth:`Model.first_block_model`: C read in ``c_input_format`` where the model has one; else ``block``
    itself).  A datapath takes each block's model from :meth:`unit`; a compiled chain (:attr:`is_chain`) runs the first
    step with ``first`` where :attr:`narrow_c` says it differs."""

    model: Model
    block: Model
    k: int
    width: int
    block_width: int
    order: tuple[int, ...] | None
    c_fused: bool
    store: bool
    first: Model

    @property
    def narrow_c(self) -> bool:
        """The first step's block reads C in a narrower format than the later blocks (``c_input_format``)."""
        return self.first is not self.block

    def unit(self, products: Index) -> Model:
        """The model of the block over ``products``: :attr:`first` for the first step's block (it holds
        product 0: with C fused each step is one block), else :attr:`block`."""
        if not self.narrow_c:
            return self.block
        start = products.start if isinstance(products, slice) else min(products)
        return self.first if start < self.width else self.block

    @property
    def steps(self) -> int:
        """The number of steps (0 for an empty dot product)."""
        return -(-self.k // self.width)

    @property
    def padded(self) -> int:
        """Products after padding the last step with +0 * +0: ``steps * width``."""
        return self.steps * self.width

    @property
    def is_chain(self) -> bool:
        """Each step is one block in its natural order, C fused, nothing stored: a plain chain of blocks of
        ``block_width`` over the padded operands, which compiled kernels may run in one call."""
        return self.c_fused and not self.store and self.order is None

    def blocks(self, step: int) -> list[Index]:
        """The products of each block of step ``step``, in the order the blocks run."""
        start, L = step * self.width, self.block_width
        if self.order is None:
            return [slice(start + j, start + j + L) for j in range(0, self.width, L)]
        idx = [start + i for i in self.order]
        return [tuple(idx[j:j + L]) for j in range(0, self.width, L)]


# --- the schedule's rules, read from the model's parameters ------------------------------------------------
def step_width(model: Model) -> int | None:
    """Products per step of the chain: an instruction (``instruction_k``) where C is added after its blocks, else a
    block (``block_width``); None: the whole dot product (``c_entry="end"``, or one exact-fused block)."""
    if model.c_entry == "end":
        return None
    return model.instruction_k or model.block_width


def order(model: Model, n: int) -> list[int]:
    """The order in which one step's n products enter its blocks (``product_order``)."""
    if model.product_order == "halves":
        return [i for i in range(n) if i % 4 < 2] + [i for i in range(n) if i % 4 >= 2]
    return list(range(n))


def block_model(model: Model) -> Model:
    """One block as a fused kernel computes it: C fused, products in their given order, written in the
    accumulator format where there is one.  What a step does around its blocks (``c_entry="after"``,
    ``instruction_k``, ``product_order``, the store into ``output_format``) is the plan's job; a model with
    none of these is its own block model."""
    if (model.accumulator_format is None and model.c_entry == "fused" and model.instruction_k is None
            and model.product_order == "natural" and model.c_input_format is None):
        return model
    return model.replace(output_format=model.accumulator, accumulator_format=None, c_entry="fused",
                         instruction_k=None, product_order="natural", c_input_format=None)


def first_block_model(model: Model) -> Model:
    """The block of the first step, the only one whose C is the C given: :func:`block_model` reading C in
    ``c_input_format`` (its exponent taken there: a subnormal at that format's emin).  Every later block's C
    is the previous block's result, in the output format.  Without ``c_input_format``, the block model."""
    block = block_model(model)
    return block if model.c_input_format is None else block.replace(c_input_format=model.c_input_format)


@dataclass(frozen=True)
class Schedule:
    """What a model does over any K (see the module docstring), made once per model by :func:`schedule`
    from ``model``, the datapath's (:meth:`Model.arithmetic_model`); :meth:`plan` makes a call's plan."""

    model: Model

    @cached_property
    def block(self) -> Model:
        """The model of a block (:func:`block_model`)."""
        return block_model(self.model)

    @cached_property
    def first(self) -> Model:
        """The model of the first step's block (:func:`first_block_model`; :attr:`block` where they agree)."""
        first = first_block_model(self.model)
        return self.block if first == self.block else first

    @property
    def step_width(self) -> int | None:
        """Products per step (:func:`step_width`; None: the whole dot product is one step)."""
        return step_width(self.model)

    @property
    def c_fused(self) -> bool:
        """Each step is one block with C among its terms (else C is added after the step's blocks)."""
        return self.model.c_entry == "fused"

    @property
    def store(self) -> bool:
        """The blocks' result is rounded to nearest even from the accumulator into the output format."""
        return self.model.accumulator_format is not None

    @property
    def narrow_c(self) -> bool:
        """The first step's block reads C in a narrower format than the later blocks (``c_input_format``)."""
        return self.first is not self.block

    @property
    def ordered(self) -> bool:
        """A step's products may enter its blocks in another order than given (``product_order``; whether
        they do at a given width is the call's :attr:`Plan.order`)."""
        return self.model.product_order != "natural"

    def width(self, k: int) -> int:
        """Products per step of a dot product of k products: :attr:`step_width`, else the whole dot product
        rounded up to whole blocks (a short last block is padded with +0 products)."""
        if self.step_width is not None:
            return self.step_width
        L = self.model.block_width or max(k, 1)
        return max(-(-k // L) * L, 1)

    def plan(self, k: int) -> Plan:
        """The plan of a dot product of ``k`` products."""
        if not isinstance(k, int) or isinstance(k, bool) or k < 0:
            raise ValueError(f"k must be a non-negative integer (the number of products), not {k!r}")
        width = self.width(k)
        ordered = tuple(order(self.model, width)) if self.ordered else None  # natural: no list of K
        return Plan(model=self.model, block=self.block, k=k, width=width, block_width=self.model.block_width or width,
                    order=None if ordered is None or ordered == tuple(range(width)) else ordered, c_fused=self.c_fused,
                    store=self.store, first=self.first)


@lru_cache(maxsize=512)
def schedule(model: Model) -> Schedule:
    """The schedule of ``model`` (cached: models are frozen and hashable)."""
    return Schedule(model.arithmetic_model())


def plan(model: Model, k: int) -> Plan:
    """The plan of a dot product of ``k`` products under ``model`` (its :func:`schedule` at k)."""
    return schedule(model).plan(k)


class Datapath(Protocol[V]):
    """What an engine supplies to :func:`run` for its own values ``V`` (floats, arrays, bit-vectors)."""

    def block(self, products: Index, c: V) -> V:
        """The block model of these products (:meth:`Plan.unit`; indices into the padded operands), ``c`` its C."""

    def zero(self, c: V) -> V:
        """+0 of the accumulator, shaped like ``c``: where a step's blocks start when C comes after."""

    def store(self, x: V) -> V:
        """A result of the accumulator rounded to nearest even into the output format (NaN, infinities
        and the sign of zero kept)."""

    def add_c(self, s: V, c: V) -> V:
        """``s + c`` by one IEEE addition rounded to nearest even into the output format."""


def run(p: Plan, datapath: Datapath[V], c: V, progress: Callable[[float], None] | None = None) -> V:
    """Walk the plan: every step's blocks in order, C where the plan puts it; the last step's result.
    ``progress(done)`` is called after each step with the fraction of steps done."""
    d = c
    for step in range(p.steps):
        blocks = p.blocks(step)
        if p.c_fused:
            (only,) = blocks
            d = datapath.block(only, d)
            if p.store:
                d = datapath.store(d)
        else:
            s = datapath.zero(d)
            for products in blocks:
                s = datapath.block(products, s)
            d = datapath.add_c(datapath.store(s) if p.store else s, d)
        if progress is not None:
            progress((step + 1) / p.steps)
    return d


def array_index(products: Index) -> slice | list[int]:
    """A block's products as an index of an array axis (numpy, torch): the slice, or the indices as a list
    (a tuple would index several axes)."""
    return products if isinstance(products, slice) else list(products)


def take(x: Sequence[Any], products: Index) -> list[Any]:
    """The elements of a list at a block's products (for engines that hold operands as lists)."""
    return list(x[products]) if isinstance(products, slice) else [x[i] for i in products]


def pad(x: Sequence[V], n: int, zero: V) -> list[V]:
    """A list of operands padded with ``zero`` (+0) to ``n`` elements (:attr:`Plan.padded`)."""
    return list(x) + [zero] * (n - len(x))
