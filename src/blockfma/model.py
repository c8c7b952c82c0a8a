"""Model: one frozen, executable description of how a matrix unit computes d = a·b + c.

A Model fixes the algorithm family (:mod:`blockfma.family`) and its parameters (block width L, fraction bits
kept F, e_zero, alignment rounding, carry bits, output rounding, subnormal and NaN handling) for one input
format and one output format.  The vocabulary is that of shared/DEVICE-FACTS.md; ``reference.py`` spells
out each family exactly, ``plan.py`` what happens over K, and ``engine`` runs it fast.

Every field carries a :class:`Param` (its JSON key, how a given value is read, its allowed values, whether it
belongs to some families only, the values the probe search tries, its word in :meth:`Model.summary`), so that
reading, writing, checking and summarising a Model are each written once, for every field.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from . import formats as _formats, plan as _plan
from .arguments import ArgumentError, Shown
from .family import Family, family_parameters
from .formats import Format, RoundingMode

if TYPE_CHECKING:
    from .plan import Plan

__all__ = ["Family", "Alignment", "NaNStyle", "Model", "Param", "params", "PARAMS", "SEARCHED"]


class Alignment(enum.Enum):
    """How bits below the alignment point are dropped."""

    TRUNCATE = "truncate"  # toward zero on the magnitude (sign-magnitude datapath)
    FLOOR = "floor"  # toward minus infinity (two's complement datapath)


class NaNStyle(enum.Enum):
    """Bit pattern of a NaN result.

    The first three write one fixed pattern whatever made the NaN.  ``PROPAGATE`` (fma-chain only) keeps an input NaN's
    payload, as the H100's fp64 DMMA does (data/hardware/h100-mma-wgmma.json, all four DMMA shapes): in each step ``d =
    fma(a_i, b_i, d)`` a NaN result is B's NaN if ``b_i`` is one, else the accumulator's if ``d`` is one (C for the
    first step), else A's, always quieted (quiet bit set, sign and the rest of the payload kept; a signalling NaN has no
    priority over a quiet one); with no NaN operand (``inf * 0``, ``inf - inf``) it is the indefinite NaN (negative
    quiet: 0xFFF8000000000000); the order B, accumulator, A is the one rule of 16 tried that fits the record
    (data/hardware/h100-mma-wgmma-nan-inputs.json).  A payload moves between formats left-aligned (the quiet bit onto
    the quiet bit; bits the narrower format lacks are dropped)."""

    CANONICAL = "canonical"  # positive, all payload bits set: 0x7FFFFFFF, 0x7FFF (NVIDIA; AMD CDNA3)
    DEFAULT = "default"  # IEEE default quiet NaN, positive: 0x7FC00000, 0x7E00 (Arm default NaN)
    INDEFINITE = "indefinite"  # x86 "QNaN floating-point indefinite": 0xFFC00000
    PROPAGATE = "propagate"  # an input NaN's payload, quieted (B, then the accumulator, then A); else indefinite


# --- field metadata ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Param:
    """How one Model field is read, written, checked, summarised and searched.

    ``key``: its name in JSON records (default: the field's); ``parse``: turns a given value (a name, a
    numpy integer) into the field's type; ``dump``: the JSON-ready value; ``choices``: the allowed values;
    ``integer``: an int (never a bool) or None; ``family``: the field belongs to the families that list it in
    ``Family.parameters`` and stays at its default elsewhere; ``domain(formats, k, model)``: the values the
    probe search tries (``formats`` has ``a``, ``b``, ``d``; None: the search leaves it alone); ``search``:
    False for a shared field the search varies only for the families that ask (``Family.searched``); ``label``:
    its word in :meth:`Model.summary`, or None where it says nothing."""

    key: str | None = None
    parse: Callable[[Any], Any] | None = None
    dump: Callable[[Any], Any] | None = None
    choices: tuple[Any, ...] | None = None
    integer: bool = False
    family: bool = False
    domain: Callable[[Any, int, Model], Iterable[Any] | None] | None = None
    search: bool = True
    label: Callable[[Model], str | None] | None = None


def _param(default: Any, **meta: Any) -> Any:
    return field(default=default, metadata={"param": Param(**meta)})


def _name(x: Any) -> Any:
    return None if x is None else x.name


def _value(x: Any) -> Any:
    return None if x is None else x.value


def _format(x: Any) -> Format | None:
    return None if x is None else _formats.get(x)


def _mode(x: Any) -> RoundingMode | None:
    return None if x is None else RoundingMode.parse(x)


_ROUNDINGS = (RoundingMode.TiesToEven, RoundingMode.TowardZero, RoundingMode.TowardNegative,
              RoundingMode.TowardPositive)  # the directions the probe search tries (a base keeps its own too)


def _block_widths(f: Any, k: int, m: Model) -> list[int]:
    return sorted({2 ** i for i in range(8) if 2 ** i <= k} | {k})


def _output_fraction_bits(f: Any, k: int, m: Model) -> list[int | None] | None:
    return [None] + list(range(8, f.d.fraction_bits)) if f.d.precision > 12 else None


def _c_entry_label(m: Model) -> str | None:
    if m.c_entry == "fused":
        return None
    if m.c_entry == "end":
        return "C-at-end"
    return "C-after" if m.instruction_k is None else f"C-after-{m.instruction_k}"


def _out_label(m: Model) -> str:
    bits = "" if m.output_fraction_bits is None else f"@{m.output_fraction_bits}b"
    return f"out={m.output_rounding.name}{bits}"


@dataclass(frozen=True)
class Model:
    """Parameters of one matrix-unit dot-product datapath for one (input, output) format pair.

    ``block_width`` (L): products fused into one alignment and rounding; a longer dot product is a chain of blocks, each
    block's rounded result being the next block's C, and a short last block is padded with zero products.
    ``fraction_bits`` (F): bits kept below the block's largest exponent.  ``e_zero``: the exponent a zero product or a
    zero C takes part with when e_max is taken.  ``carry_bits``: ``None`` means enough headroom; ``n`` keeps the sum's
    magnitude modulo 2**(e_max + 1 + n) (Fasi et al.'s carry test).  ``output_fraction_bits``: fraction bits kept in the
    output (13 for Ada/Hopper fp8, "e8m13"). ``input_rounding``: how the unit reads a value that is wider than the input
    format (tf32 read from an fp32 register drops 13 bits: TowardZero); ``None`` means values must already be in the
    input format. ``subnormals=False`` flushes subnormal inputs, intermediate results and outputs to zero (sign kept).
    ``product_exponent``: ``"sum"`` gives a product the sum of its factors' exponents (significand in [1, 4), what the
    NVIDIA hardware data fit); ``"normalized"`` its own exponent floor(log2 |p|). ``overflow``: ``"inf"`` gives infinity
    on overflow whatever the rounding (NVIDIA), ``"ieee"`` follows IEEE 754.  ``exact_zero``: sign of an exactly zero
    result, ``"positive"`` (+0, NVIDIA) or ``"ieee"``. ``rounded_zero``: sign of a zero result that comes from rounding
    a nonzero sum, ``"signed"`` (the sum's sign, IEEE) or ``"positive"`` (+0: every zero result is +0; H100 record and
    MMA-Sim). ``late_cut`` (late-c only): where the sum of S and C is cut before its rounding, ``"leading"`` (S kept to
    F2 + 1 bits below the common exponent, the sum then floored at F2 bits below its own leading bit: MMA-Sim's reading,
    held to MI300X hardware) or ``"common"`` (S and the sum at F2 bits below the common exponent, blockfma's first
    reading); they differ when the sum carries out or cancels. ``c_entry`` (fused families): ``"fused"``, C is one of
    the block's terms; ``"after"``, the block sums its products from +0 (rounded as above) and C is then added by one
    IEEE addition rounded to nearest even in the output format (B200 fp8 hardware rows; Hopper's mma.sync fp8 also ends
    in such an FADD); with an ``accumulator_format`` the blocks' sum is stored (rounded to nearest even into the output
    format) before C is added; ``"end"``, the same once for the whole dot product: every block chains from +0 and C is
    added after the last (a GEMM library's epilogue, beta·C: cuBLAS with fp16/bf16 outputs on the H100, which sums in
    fp32, stores the sum in fp16, then adds C in fp16). ``b_input_format``: B's format where it differs from A's
    (``input_format``): fp8 units take e4m3 x e5m2. ``accumulator_format``: where the unit computes in a wider format
    than it stores (AMD MFMA through rocWMMA with fp16/bf16 outputs): each block is computed as the model says with this
    output format, then rounded to nearest even into ``output_format``. ``instruction_k`` (with ``c_entry="after"``):
    products per instruction, a multiple of block_width; its blocks chain from +0 and C is added after the last
    (default: after each block).  ``product_order``: ``"halves"`` feeds each instruction's products with index mod 4 in
    {0, 1} first, then those in {2, 3} (Hopper's fp8 mma.sync, which runs as two fp16 HMMAs on register halves).
    ``unpack_format``: the format the unit converts A and B to (exactly) before any arithmetic, whose exponents and
    datapath then apply (Hopper's fp8 mma.sync unpacks fp8 to fp16, F2FP). ``flush_zero`` (with ``subnormals=False``): a
    flushed subnormal input or C becomes a zero of its own sign (``"signed"``) or +0 (``"positive"``, MMA-Sim's MI250X).
    ``nan``: how a NaN result is written (:class:`NaNStyle`: a fixed pattern, or the input NaN's payload).
    ``c_input_format`` (truncated-fused, ``c_entry="fused"``): C's format where the instruction takes C narrower than D
    (Volta's and Turing's ``mma.m8n8k4.f32.f16.f16.f16``: fp16 C, fp32 D): the C given must be representable in it and
    takes its exponent in it (a subnormal at the format's emin: MMA-Sim's reading); later blocks' C is the previous
    block's result, in the output format. ``options``: the values of the family's own parameters
    (:class:`blockfma.family.Option`; a user's family may declare some), given as a mapping, held as (name, value) pairs
    in the family's order, defaults filled in.

    Which fields belong to which family, and the family's own checks, are the family's (:mod:`blockfma.family`); how
    each field is read, written to JSON, checked, summarised and searched by the probes is its :class:`Param` metadata.
    What happens over K (padding, order, where C enters, what is stored) is :meth:`plan`.
    """

    family: Family = _param(None, parse=Family.get, dump=_name)
    input_format: Format = _param(None, key="input", parse=_formats.get, dump=_name)
    output_format: Format = _param(None, key="output", parse=_formats.get, dump=_name)
    block_width: int | None = _param(None, key="L", integer=True, domain=_block_widths,
                                     label=lambda m: f"L={m.block_width if m.block_width is not None else 'k'}")
    fraction_bits: int | None = _param(None, key="F", integer=True, family=True,
                                       domain=lambda f, k, m: range(max(1, f.d.precision - 14), 41),
                                       label=lambda m: None if m.fraction_bits is None else f"F={m.fraction_bits}")
    e_zero: int | None = _param(None, integer=True, family=True,
                                domain=lambda f, k, m: range(f.d.emin - f.d.fraction_bits - 12, 2),
                                label=lambda m: None if m.e_zero is None else f"e_zero={m.e_zero}")
    alignment: Alignment = _param(Alignment.TRUNCATE, parse=Alignment, dump=_value, family=True,
                                  domain=lambda f, k, m: [Alignment.TRUNCATE, Alignment.FLOOR],
                                  label=lambda m: None if m.alignment is Alignment.TRUNCATE else
                                  f"align={m.alignment.value}")
    carry_bits: int | None = _param(None, integer=True, family=True, domain=lambda f, k, m: [None, 0, 1, 2, 3, 4],
                                    label=lambda m: None if m.carry_bits is None else f"carry={m.carry_bits}")
    output_rounding: RoundingMode = _param(RoundingMode.TiesToEven, parse=RoundingMode.parse, dump=_name,
                                           domain=lambda f, k, m: _ROUNDINGS, label=_out_label)
    output_fraction_bits: int | None = _param(None, integer=True, domain=_output_fraction_bits, search=False)
    input_rounding: RoundingMode | None = _param(None, parse=_mode, dump=_name)
    subnormals: bool = _param(True, domain=lambda f, k, m: [True, False],
                              label=lambda m: None if m.subnormals else "FTZ")
    overflow: Literal["ieee", "inf"] = _param("ieee", choices=("ieee", "inf"), domain=lambda f, k, m: ["inf", "ieee"])
    nan: NaNStyle = _param(NaNStyle.DEFAULT, parse=NaNStyle, dump=_value, domain=lambda f, k, m: list(NaNStyle),
                           label=lambda m: "NaN-propagate" if m.nan is NaNStyle.PROPAGATE else None)
    exact_zero: Literal["positive", "ieee"] = _param("ieee", choices=("positive", "ieee"),
                                                     domain=lambda f, k, m: ["positive", "ieee"])
    rounded_zero: Literal["signed", "positive"] = _param("signed", choices=("signed", "positive"),
                                                         domain=lambda f, k, m: ["signed", "positive"])
    late_fraction_bits: int | None = _param(None, integer=True, family=True,
                                            domain=lambda f, k, m: range(f.d.precision, 40),
                                            label=lambda m: None if m.late_fraction_bits is None else
                                            f"F2={m.late_fraction_bits}")
    groups: int = _param(1, integer=True, family=True,
                         domain=lambda f, k, m: [g for g in (1, 2, 4) if (m.block_width or 1) % g == 0],
                         label=lambda m: None if m.groups == 1 else f"groups={m.groups}")
    product_exponent: Literal["sum", "normalized"] = _param("sum", choices=("sum", "normalized"), family=True,
                                                            domain=lambda f, k, m: ["sum", "normalized"],
                                                            label=lambda m: None if m.product_exponent == "sum"
                                                            else "normalized-products")
    late_cut: Literal["leading", "common"] = _param("leading", choices=("leading", "common"), family=True,
                                                    domain=lambda f, k, m: ["leading", "common"],
                                                    label=lambda m: None if m.late_cut == "leading" else
                                                    f"cut={m.late_cut}")
    c_entry: Literal["fused", "after", "end"] = _param("fused", choices=("fused", "after", "end"),
                                                       domain=lambda f, k, m: ["fused", "after", "end"],
                                                       label=_c_entry_label)
    b_input_format: Format | None = _param(None, key="input_b", parse=_format, dump=_name)
    accumulator_format: Format | None = _param(None, key="accumulator", parse=_format, dump=_name,
                                               domain=lambda f, k, m: [None, _formats.fp32] if f.d.precision < 24
                                               else None,
                                               label=lambda m: None if m.accumulator_format is None else
                                               f"via {m.accumulator_format.name}")
    flush_zero: Literal["signed", "positive"] = _param("signed", choices=("signed", "positive"),
                                                       domain=lambda f, k, m: ["signed", "positive"])
    instruction_k: int | None = _param(None, integer=True)
    product_order: Literal["natural", "halves"] = _param("natural", choices=("natural", "halves"),
                                                         domain=lambda f, k, m: ["natural", "halves"]
                                                         if k % 4 == 0 and k >= 4 else None,
                                                         label=lambda m: None if m.product_order == "natural" else
                                                         f"order={m.product_order}")
    unpack_format: Format | None = _param(None, key="unpack", parse=_format, dump=_name,
                                          domain=lambda f, k, m: [None, _formats.get("fp16")]
                                          if max(f.a.bits, f.b.bits) == 8 else None,
                                          label=lambda m: None if m.unpack_format is None else
                                          f"as {m.unpack_format.name}")
    c_input_format: Format | None = _param(None, key="c_input", parse=_format, dump=_name, family=True,
                                           domain=lambda f, k, m: [None, f.c] if getattr(f, "c", f.d) != f.d
                                           else None,
                                           label=lambda m: None if m.c_input_format is None else
                                           f"C={m.c_input_format.name}")
    options: tuple[tuple[str, Any], ...] = _param((), label=lambda m: " ".join(
        f"{k}={v}" for k, v in m.options if v != m.family.option(k).default) or None)
    name: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        for f, p in params():
            value = getattr(self, f.name)
            if isinstance(value, np.integer):  # numpy integers (from arrays, JSON readers) become ints
                set_(self, f.name, value := int(value))
            if p.parse is not None and value is not None:
                set_(self, f.name, p.parse(value))
        if self.family is None:
            raise ValueError("Model needs a family (blockfma.family.families() lists them)")
        if self.b_input_format == self.input_format:
            set_(self, "b_input_format", None)
        if self.c_input_format == self.output_format:
            set_(self, "c_input_format", None)
        set_(self, "options", self._read_options(self.options))
        self._validate()

    def _read_options(self, given: Any) -> tuple[tuple[str, Any], ...]:
        """The family's options as (name, value) pairs in its order, defaults filled in."""
        fam = self.family
        try:
            items = dict(given.items() if isinstance(given, Mapping) else given or ())
        except (TypeError, ValueError):
            raise ValueError(f"Model({fam.name}): options takes a mapping of the family's options to values, "
                             f"such as {{'name': value}}, not {given!r}") from None
        unknown = sorted(set(items) - {o.name for o in fam.options})
        if unknown:
            have = ", ".join(o.name for o in fam.options) or "none"
            raise ValueError(f"Model({fam.name}): unknown option {unknown[0]!r} (the {fam.name} family's options: "
                             f"{have})")
        return tuple((o.name, items.get(o.name, o.default)) for o in fam.options)

    def _validate(self) -> None:
        for problem in self.problems():
            raise ValueError(f"Model({self.family.value}, {self.input_name} -> {self.output_format.name}): "
                             f"{problem}")

    def problems(self) -> Iterator[str]:
        """What is wrong with this combination of parameters, one message at a time (none for a valid model): the
        fields' types and choices, the family's parameters and checks, then the rules that tie fields together."""
        yield from self._field_problems()
        yield from self._rule_problems()

    def _field_problems(self) -> Iterator[str]:
        """Each field's type and choices, and the family's parameters, required fields and options."""
        fam = self.family
        for f, p in params():
            value = getattr(self, f.name)
            if p.integer and not (value is None and f.default is None) and \
                    not (isinstance(value, int) and not isinstance(value, bool)):
                yield (f"{f.name} must be an integer{'' if f.default is not None else ' or None'}, not {value!r} "
                       f"({type(value).__name__})")
            if p.choices is not None and value not in p.choices:
                yield f"{f.name} must be {_choices(p.choices)}, not {value!r}"
            if p.family and f.name not in fam.parameters and value != f.default:
                names = [g.name for g in family_parameters().get(f.name, ())]
                yield (f"{f.name} applies to the {' and '.join(names) or 'no registered'} "
                       f"famil{'ies' if len(names) > 1 else 'y'} only")
        if not isinstance(self.subnormals, (bool, np.bool_)):
            yield f"subnormals must be True or False, not {self.subnormals!r}"
        for name in fam.required:
            if getattr(self, name) is None:
                yield f"{name} must be given for the {fam.name} family"
        for o in fam.options:
            why = o.check(self.option(o.name)) if o.check is not None else None
            if why:
                yield f"option {o.name}: {why}"

    def _rule_problems(self) -> Iterator[str]:
        """The rules that tie fields together, the family's own checks among them."""
        fam = self.family
        if self.block_width is not None and self.block_width < 1:
            yield f"block_width must be a positive integer or None, not {self.block_width!r}"
        if self.block_width is None and not fam.unblocked:
            unblocked = [g.name for g in Family if g.unblocked]
            yield (f"only the {' and '.join(unblocked)} family may leave block_width unset (one block for the whole "
                   "dot product)")
        if fam.check is not None:
            yield from fam.check(self)
        if self.nan is NaNStyle.PROPAGATE and not fam.propagates_nan:
            names = " and ".join(g.name for g in Family if g.propagates_nan)
            yield (f"nan='propagate' is defined for the {names} family only (measured on the H100's fp64 DMMA); "
                   "no data say which of several NaNs a fused block or another step family passes on")
        if self.output_fraction_bits is not None and \
                not 0 <= self.output_fraction_bits <= self.output_format.fraction_bits:
            yield f"output_fraction_bits must lie in [0, {self.output_format.fraction_bits}]"
        if self.instruction_k is not None and not (self.c_entry == "after" and self.block_width is not None
                                                   and self.instruction_k % self.block_width == 0):
            yield "instruction_k needs c_entry='after' and a multiple of block_width"
        if self.product_order != "natural" and self.c_entry == "end":
            yield "product_order='halves' orders the products of one instruction; c_entry='end' has none"
        elif self.product_order != "natural" and (self.step_width is None or self.step_width % 4):
            yield "product_order='halves' needs instructions of a multiple of 4 products"
        up = self.unpack_format
        if up is not None and not (_formats.holds(up, self.input_format) and _formats.holds(up, self.b_format)):
            yield "unpack_format must hold every value of the input formats exactly"
        acc = self.accumulator_format
        if acc is not None and not _formats.holds(acc, self.output_format):
            yield f"accumulator_format must be at least as wide as the output format {self.output_format.name}"
        ci = self.c_input_format
        if ci is not None and not _formats.holds(self.output_format, ci):
            yield (f"c_input_format {ci.name} must be narrower than the output format {self.output_format.name} "
                   "(it names the format of a C the unit widens exactly: fp16 C with fp32 D)")
        if ci is not None and self.c_entry != "fused":
            yield ("c_input_format needs c_entry='fused': C added after the blocks by an IEEE addition takes no "
                   "exponent of its own (check a narrower C's values with bf.dot(c_format=...) instead)")
        if ci is not None and self.accumulator_format is not None:
            yield ("c_input_format with an accumulator_format is not modelled (no device is known to read a "
                   "narrow C into a wider accumulator)")
        if self.c_entry != "fused" and not fam.fused:
            yield f"c_entry={self.c_entry!r} needs a fused family ({_fused_names()})"
        if self.rounded_zero == "positive" and not (self.exact_zero == "positive" and fam.fused):
            yield f"rounded_zero='positive' needs a fused family ({_fused_names()}) with exact_zero='positive'"
        if not self.output_format.has_infinities:
            yield (f"output format {self.output_format.name} has no infinities; matrix units here write "
                   "fp16, bf16, fp32 or fp64")

    # --- derived ----------------------------------------------------------------------------------
    @property
    def step_width(self) -> int | None:
        """Products per step of the chain (:func:`blockfma.plan.step_width`)."""
        return _plan.step_width(self)

    def step(self, k: int) -> int:
        """Products per step of a dot product of length k (:meth:`blockfma.plan.Schedule.width`)."""
        return _plan.schedule(self).width(k)

    def plan(self, k: int) -> Plan:
        """What this model does over a dot product of k products (:class:`blockfma.plan.Plan`): the steps,
        the blocks of each, where C enters and what is stored; every engine runs it."""
        return _plan.plan(self, k)

    @property
    def accumulator(self) -> Format:
        """The format the unit's blocks round into before their results are stored: ``accumulator_format``,
        else the output format."""
        return self.accumulator_format or self.output_format

    def order(self, n: int) -> list[int]:
        """The order in which one step's n products enter its blocks (:func:`blockfma.plan.order`)."""
        return _plan.order(self, n)

    def arithmetic_model(self) -> Model:
        """The model the datapath runs: with ``unpack_format``, this model with A and B in that format
        (their values unchanged, their exponents read in it); else the model itself."""
        if self.unpack_format is None:
            return self
        return self.replace(input_format=self.unpack_format, b_input_format=None, unpack_format=None)

    def block_model(self) -> Model:
        """One block as a fused kernel computes it (:func:`blockfma.plan.block_model`)."""
        return _plan.block_model(self)

    def first_block_model(self) -> Model:
        """The block of the first step, whose C is the C given (:func:`blockfma.plan.first_block_model`)."""
        return _plan.first_block_model(self)

    def option(self, name: str) -> Any:
        """The value of one of the family's own parameters (:class:`blockfma.family.Option`)."""
        for key, value in self.options:
            if key == name:
                return value
        have = ", ".join(o.name for o in self.family.options) or "none"
        raise KeyError(f"the {self.family.name} family has no option {name!r} (its options: {have})")

    @property
    def block_scaled(self) -> bool:
        """Whether the model takes scales of A and B (the scaled-fused family: block-scaled MMA)."""
        return self.family is Family.SCALED_FUSED

    @property
    def scale_format(self) -> Format | None:
        """The format of a block-scaled model's scales (its ``scale_format`` option: e8m0fnu or ue4m3); None
        for a model that takes no scales."""
        return _formats.get(self.option("scale_format")) if self.block_scaled else None

    def scale_shapes(self, k: int, given: tuple[Any, Any], leads: tuple[tuple[int, ...], ...], gemm: bool,
                     stated: bool = False) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
        """The shapes the scales ``given`` (numpy or dask arrays, or None) broadcast to, by the one rule of bf.dot,
        bf.gemm and dask: a scale is laid out as its operand, k // scale_block scales on K's axis (gemm's scale_b,
        as B: (k // block, n)), never broadcast along K, its other axes broadcast to ``leads``; None: no scales.
        A square 2-D scale_b (n = k // block > 1) only with its layout ``stated`` (gemm's ``scale_layout``)."""
        if not self.block_scaled:
            for name, x in zip(("scale_a", "scale_b"), given):
                if x is not None:
                    raise ArgumentError(name, Shown("<given>"), f"{self.summary()} is not block-scaled and takes no "
                                        "scales", fix="pass a block-scaled instruction (a B200 or RTX 5090 mxf8f6f4, "
                                        "mxf4 or mxf4nvf4 kind) or leave the scales out")
            return None
        block, nb = self.option("scale_block"), k // self.option("scale_block")
        if k % block:
            raise ArgumentError("A" if gemm else "a", Shown(f"<k = {k}>"), f"k = {k} must be a multiple of the scale "
                                f"block {block}", fix=f"pad A and B with zeros to a multiple of {block} along K")
        out = []
        for name, x, lead, flip in zip(("scale_a", "scale_b"), given, leads, (False, gemm)):  # flip: K's axis first
            if x is None:
                raise ArgumentError(name, None, f"{self.summary()} is block-scaled: it needs {nb} scales of "
                                    f"{self.scale_format.name} along K (one per {block} products)")
            shape, want = tuple(x.shape[::-1] if flip else x.shape), lead + (nb,)
            if shape[-1:] != (nb,) or len(shape) > len(want) or any(s not in (1, w) for s, w in zip(shape[::-1],
                                                                                                  want[::-1])):
                raise ArgumentError(name, x if isinstance(x, np.ndarray) else Shown(f"<shape {tuple(x.shape)}>"),
                                    f"must have shape {want[::-1] if flip else want}: {nb} scales along K (one per "
                                    f"{block} products of k = {k}) for each " + ("column of B" if flip else "row of A"
                                    if gemm else "dot product") + f" (an axis of 1 broadcasts), not {tuple(x.shape)}"
                                    + (": that is torch's layout (n, k // block); bf.gemm's scale_b is laid out as B, "
                                       "pass scale_b.T" if flip and x.ndim == 2 and shape == want[::-1] else ""))
            if flip and x.ndim == 2 and x.shape[0] == x.shape[1] > 1 and not stated:
                raise ArgumentError(name, x if isinstance(x, np.ndarray) else Shown(f"<shape {tuple(x.shape)}>"),
                                    f"is square ({nb} x {nb}): its shape cannot tell B's layout (k // block, n) from "
                                    "torch's (n, k // block)", fix='pass scale_layout="kn" (as B) or "nk" (torch\'s)')
            out.append(want[::-1] if flip else want)
        return out[0], out[1]

    @property
    def b_format(self) -> Format:
        """B's format: ``b_input_format``, or A's (``input_format``) when they are the same."""
        return self.b_input_format or self.input_format

    @property
    def input_name(self) -> str:
        """The inputs' name: ``"fp16"``, or ``"e4m3fn*e5m2"`` for A and B in different formats."""
        return _formats.pair_name(self.input_format, self.b_format)

    @property
    def c_format(self) -> Format:
        """Format of the C given: ``c_input_format`` where the instruction takes C narrower than D, else the
        output format (which is also that of each block's result, the next block's C)."""
        return self.c_input_format or self.output_format

    @property
    def result_format(self) -> Format:
        """The format results are rounded to: the output format, or a narrower one when
        ``output_fraction_bits`` is set (e8m13 for Ada/Hopper fp8 with fp32 output)."""
        out = self.output_format
        if self.output_fraction_bits is None or self.output_fraction_bits == out.fraction_bits:
            return out
        if out.name == "fp32" and self.output_fraction_bits == 13:
            return _formats.e8m13
        return Format(f"{out.name}_m{self.output_fraction_bits}", out.exponent_bits,
                      self.output_fraction_bits + 1, out.bias, dtype_name=out.dtype_name)

    def replace(self, **changes: Any) -> Model:
        """A copy with some parameters changed (validated anew)."""
        return dataclasses.replace(self, **changes)

    def applies(self, name: str) -> bool:
        """Whether the field ``name`` means something for this model's family (the shared fields always;
        a family's own fields for the families that list them)."""
        p = PARAMS[name]
        return not p.family or name in self.family.parameters

    def features(self) -> dict[str, Any]:
        """The model's parameters as plain values (a row of the feature table; JSON-ready); a family's own
        field is None where it does not apply, and ``options`` appears for families that have some."""
        out: dict[str, Any] = {}
        for f, p in params():
            if f.name == "options":
                if self.family.options:
                    out["options"] = dict(self.options)
                continue
            value = getattr(self, f.name)
            if not self.applies(f.name):
                value = None
            out[p.key or f.name] = p.dump(value) if p.dump is not None else value
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dictionary that :meth:`from_dict` turns back into the same Model."""
        return {**self.features(), "name": self.name}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Model:
        """The Model of a dictionary :meth:`to_dict` wrote (a JSON record, a device file's entry): keys as
        there, a missing key or None meaning the field's default."""
        if not isinstance(d, Mapping):
            raise TypeError(f"Model.from_dict takes a mapping (what to_dict wrote), not {type(d).__name__}")
        keys = {p.key or f.name: f for f, p in params()}
        unknown = sorted(set(d) - set(keys) - {"name"})
        if unknown:
            raise ValueError(f"unknown Model field {unknown[0]!r} (known: {', '.join(sorted(keys))})")
        for need in ("family", "input", "output"):
            if d.get(need) is None:
                raise ValueError(f"a Model needs {need!r}")
        given = {f.name: d[key] for key, f in keys.items() if d.get(key) is not None}
        return cls(**given, name=d.get("name", "") or "")

    def __repr__(self) -> str:
        """One line, the name and :meth:`summary`: ``Model('V100 fp16->fp32': truncated-fused fp16->fp32 L=4
        F=23 e_zero=-131 out=TowardZero)``.  Every field: :meth:`to_dict` (or :func:`dataclasses.fields`).
        (Defined in the class body, so the dataclass keeps it; equality and hashing stay the dataclass's.)"""
        return f"Model({f'{self.name!r}: ' if self.name else ''}{self.summary()})"

    def summary(self) -> str:
        """One line: family and the parameters that matter for it."""
        parts = [self.family.value, f"{self.input_name}->{self.output_format.name}"]
        for name in _SUMMARY:
            word = PARAMS[name].label(self)  # type: ignore[misc]
            if word:
                parts.append(word)
        return " ".join(parts)


def _fused_names() -> str:
    return " and ".join(g.name for g in Family if g.fused)


def _choices(choices: tuple[Any, ...]) -> str:
    words = [repr(c) for c in choices]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def params() -> Iterator[tuple[dataclasses.Field, Param]]:
    """Every Model field with its :class:`Param`, in field order (``name`` has none)."""
    for f in dataclasses.fields(Model):
        if "param" in f.metadata:
            yield f, f.metadata["param"]


#: every field's Param by the field's name
PARAMS: dict[str, Param] = {f.name: p for f, p in params()}

#: the order of the words of :meth:`Model.summary` after the family and the formats
_SUMMARY = ("block_width", "fraction_bits", "late_fraction_bits", "e_zero", "alignment", "carry_bits",
            "output_rounding", "subnormals", "groups", "product_exponent", "late_cut", "c_entry", "product_order",
            "unpack_format", "nan", "accumulator_format", "c_input_format", "options")

#: the parameters the probe search varies, in the order it tries them (a field's values: its Param's domain)
SEARCHED = ("block_width", "output_rounding", "nan", "overflow", "exact_zero", "rounded_zero", "subnormals",
            "flush_zero", "c_entry", "product_order", "fraction_bits", "alignment", "e_zero", "carry_bits",
            "product_exponent", "output_fraction_bits", "late_fraction_bits", "groups", "late_cut",
            "accumulator_format", "unpack_format", "c_input_format")


def truncated_fused_base(a: Format, b: Format, d: Format, k: int) -> Model | None:
    """A truncated-fused start for the probe search (the family's ``base``): blocks of up to 8, F one bit
    above the output's precision, e_zero below every exponent the inputs and output reach."""
    try:  # the engine holds truncated-fused sums in 64-bit integers: no such model for fp64 outputs
        return Model(Family.TRUNCATED_FUSED, a, d, block_width=min(k, 8), fraction_bits=min(d.precision + 1, 40),
                     e_zero=max(min(d.emin - d.fraction_bits, a.emin + b.emin) - 12, -900), b_input_format=b)
    except ValueError:
        return None
