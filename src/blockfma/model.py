"""Model: one frozen, executable description of how a matrix unit computes d = a·b + c.

A Model fixes the algorithm family and its parameters (block width L, fraction bits kept F, e_zero, alignment
rounding, carry bits, output rounding, subnormal and NaN handling) for one input format and one output
format.  The vocabulary is that of shared/DEVICE-FACTS.md; ``reference.py`` spells out each family exactly
and ``engine`` runs it fast.

Families
--------
TRUNCATED_FUSED  NVIDIA tensor cores.  Per block of L products: exact products whose exponent is the sum of
                 the factors' exponents; e_max over products and C (zeros at e_zero); every term cut at
                 weight 2**(e_max - F) (``alignment``); exact sum (or modulo the carry bits); one rounding
                 (``output_rounding``, to ``output_fraction_bits`` if given).
EXACT_FUSED      AMD CDNA1 and the CPU "exact" reference: the exact sum of L products and C, rounded once.
                 ``block_width=None`` puts the whole dot product in one block (correctly rounded dot).
PAIRWISE         AMD CDNA2: products rounded to the output format, added in a binary tree of IEEE adds
                 ((p0+p1)+(p2+p3)), then C + that; with ``subnormals=False`` inputs, products, sums and C
                 are flushed to zero (sign kept).
LATE_C           AMD CDNA3: products aligned to their own maximum and cut at F, summed exactly; then the sum
                 and C aligned to their common maximum and floored (sum at ``late_fraction_bits``, C at F),
                 added, rounded once.  ``groups=2`` sums even- and odd-indexed products separately first
                 (CDNA3 fp8).
FMA_CHAIN        a chain of IEEE fused multiply-adds in the output format: d = fma(a_i, b_i, d), i = 0..k-1
                 (fp64 DMMA, fp32 MFMA, and the CPU "ieee-sequential" reference).
AMX              Intel AMX TDPBF16PS (SDM pseudocode): two fp32 partial sums per element, one for the even
                 and one for the odd element of each pair, updated by fp32 FMAs; then C + (even + odd).
BFDOT            Arm BFDOT with FPCR.EBF = 0: per pair, both products rounded to fp32, their sum rounded,
                 then added to C, each step rounded to odd with subnormals flushed.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from . import formats as _formats
from .formats import Format, RoundingMode

__all__ = ["Family", "Alignment", "NaNStyle", "Model"]


class Family(enum.Enum):
    """Algorithm families (see the module docstring)."""

    TRUNCATED_FUSED = "truncated-fused"
    EXACT_FUSED = "exact-fused"
    PAIRWISE = "pairwise"
    LATE_C = "late-c"
    FMA_CHAIN = "fma-chain"
    AMX = "amx"
    BFDOT = "bfdot"


class Alignment(enum.Enum):
    """How bits below the alignment point are dropped."""

    TRUNCATE = "truncate"  # toward zero on the magnitude (sign-magnitude datapath)
    FLOOR = "floor"  # toward minus infinity (two's complement datapath)


class NaNStyle(enum.Enum):
    """Bit pattern of a NaN result.

    The first three write one fixed pattern whatever made the NaN.  ``PROPAGATE`` (fma-chain only) keeps an
    input NaN's payload, as the H100's fp64 DMMA does (data/hardware/h100-mma-wgmma.json, all four DMMA
    shapes): in each step ``d = fma(a_i, b_i, d)`` a NaN result is B's NaN if ``b_i`` is one, else the
    accumulator's if ``d`` is one (C for the first step), else A's, always quieted (quiet bit set, sign and
    the rest of the payload kept; a signalling NaN has no priority over a quiet one); with no NaN operand
    (``inf * 0``, ``inf - inf``) it is the indefinite NaN (negative quiet: 0xFFF8000000000000).  The order
    B, accumulator, A is the only one of the 16 rules tried (six operand orders, each with and without
    signalling NaNs first, and four payload comparisons) that fits the record: the recorded examples bit
    for bit and, with the NaN inputs recovered by replaying the record's seeded generator, the exact number
    of rows per family whose NaN differs from 0x7FF8000000000000 on every DMMA shape
    (data/hardware/h100-mma-wgmma-nan-inputs.json).  A payload moves between formats left-aligned (the
    quiet bit onto the quiet bit; bits the narrower format lacks are dropped)."""

    CANONICAL = "canonical"  # positive, all payload bits set: 0x7FFFFFFF, 0x7FFF (NVIDIA; AMD CDNA3)
    DEFAULT = "default"  # IEEE default quiet NaN, positive: 0x7FC00000, 0x7E00 (Arm default NaN)
    INDEFINITE = "indefinite"  # x86 "QNaN floating-point indefinite": 0xFFC00000
    PROPAGATE = "propagate"  # an input NaN's payload, quieted (B, then the accumulator, then A); else indefinite


_FAMILIES_WITH_F = (Family.TRUNCATED_FUSED, Family.LATE_C)
_FUSED = (Family.TRUNCATED_FUSED, Family.EXACT_FUSED, Family.LATE_C)
_INTEGER_FIELDS = ("block_width", "fraction_bits", "e_zero", "carry_bits", "output_fraction_bits",
                   "late_fraction_bits", "groups", "instruction_k")


@dataclass(frozen=True)
class Model:
    """Parameters of one matrix-unit dot-product datapath for one (input, output) format pair.

    ``block_width`` (L): products fused into one alignment and rounding; a longer dot product is a chain of
    blocks, each block's rounded result being the next block's C, and a short last block is padded with
    zero products.  ``fraction_bits`` (F): bits kept below the block's largest exponent.  ``e_zero``: the
    exponent a zero product or a zero C takes part with when e_max is taken.  ``carry_bits``: ``None``
    means enough headroom; ``n`` keeps the sum's magnitude modulo 2**(e_max + 1 + n) (Fasi et al.'s carry
    test).  ``output_fraction_bits``: fraction bits kept in the output (13 for Ada/Hopper fp8, "e8m13").
    ``input_rounding``: how the unit reads a value that is wider than the input format (tf32 read from an
    fp32 register drops 13 bits: TowardZero); ``None`` means values must already be in the input format.
    ``subnormals=False`` flushes subnormal inputs, intermediate results and outputs to zero (sign kept).
    ``product_exponent``: ``"sum"`` gives a product the sum of its factors' exponents (significand in
    [1, 4), what the NVIDIA hardware data fit); ``"normalized"`` its own exponent floor(log2 |p|).
    ``overflow``: ``"inf"`` gives infinity on overflow whatever the rounding (NVIDIA), ``"ieee"`` follows
    IEEE 754.  ``exact_zero``: sign of an exactly zero result, ``"positive"`` (+0, NVIDIA) or ``"ieee"``.
    ``rounded_zero``: sign of a zero result that comes from rounding a nonzero sum, ``"signed"`` (the
    sum's sign, IEEE) or ``"positive"`` (+0: every zero result is +0; H100 record and MMA-Sim).
    ``late_cut`` (late-c only): where the sum of S and C is cut before its rounding, ``"leading"`` (S kept
    to F2 + 1 bits below the common exponent, the sum then floored at F2 bits below its own leading bit:
    MMA-Sim's reading, held to MI300X hardware) or ``"common"`` (S and the sum at F2 bits below the common
    exponent, blockfma's first reading); they differ when the sum carries out or cancels.
    ``c_entry`` (fused families): ``"fused"``, C is one of the block's terms; ``"after"``, the block sums its
    products from +0 (rounded as above) and C is then added by one IEEE addition rounded to nearest even
    in the output format (B200 fp8 hardware rows; Hopper's mma.sync fp8 also ends in such an FADD); with an
    ``accumulator_format`` the blocks' sum is stored (rounded to nearest even into the output format) before
    C is added; ``"end"``, the same once for the whole dot product: every block chains from +0 and C is
    added after the last (a GEMM library's epilogue, beta·C: cuBLAS with fp16/bf16 outputs on the H100,
    which sums in fp32, stores the sum in fp16, then adds C in fp16).
    ``b_input_format``: B's format where it differs from A's (``input_format``): fp8 units take e4m3 x e5m2.
    ``accumulator_format``: where the unit computes in a wider format than it stores (AMD MFMA through
    rocWMMA with fp16/bf16 outputs): each block is computed as the model says with this output format, then
    rounded to nearest even into ``output_format``.
    ``instruction_k`` (with ``c_entry="after"``): products per instruction, a multiple of block_width; its
    blocks chain from +0 and C is added after the last (default: after each block).  ``product_order``:
    ``"halves"`` feeds each instruction's products with index mod 4 in {0, 1} first, then those in {2, 3}
    (Hopper's fp8 mma.sync, which runs as two fp16 HMMAs on register halves).
    ``unpack_format``: the format the unit converts A and B to (exactly) before any arithmetic, whose
    exponents and datapath then apply (Hopper's fp8 mma.sync unpacks fp8 to fp16, F2FP).
    ``flush_zero`` (with ``subnormals=False``): a flushed subnormal input or C becomes a zero of its own sign
    (``"signed"``) or +0 (``"positive"``, MMA-Sim's MI250X).
    ``nan``: how a NaN result is written (:class:`NaNStyle`: a fixed pattern, or the input NaN's payload).
    """

    family: Family
    input_format: Format
    output_format: Format
    block_width: int | None = None
    fraction_bits: int | None = None
    e_zero: int | None = None
    alignment: Alignment = Alignment.TRUNCATE
    carry_bits: int | None = None
    output_rounding: RoundingMode = RoundingMode.TiesToEven
    output_fraction_bits: int | None = None
    input_rounding: RoundingMode | None = None
    subnormals: bool = True
    overflow: Literal["ieee", "inf"] = "ieee"
    nan: NaNStyle = NaNStyle.DEFAULT
    exact_zero: Literal["positive", "ieee"] = "ieee"
    rounded_zero: Literal["signed", "positive"] = "signed"
    late_fraction_bits: int | None = None
    groups: int = 1
    product_exponent: Literal["sum", "normalized"] = "sum"
    late_cut: Literal["leading", "common"] = "leading"
    c_entry: Literal["fused", "after", "end"] = "fused"
    b_input_format: Format | None = None
    accumulator_format: Format | None = None
    flush_zero: Literal["signed", "positive"] = "signed"
    instruction_k: int | None = None
    product_order: Literal["natural", "halves"] = "natural"
    unpack_format: Format | None = None
    name: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "family", Family(self.family))
        set_(self, "input_format", _formats.get(self.input_format))
        set_(self, "output_format", _formats.get(self.output_format))
        if self.accumulator_format is not None:
            set_(self, "accumulator_format", _formats.get(self.accumulator_format))
        if self.unpack_format is not None:
            set_(self, "unpack_format", _formats.get(self.unpack_format))
        if self.b_input_format is not None:
            b = _formats.get(self.b_input_format)
            set_(self, "b_input_format", None if b == self.input_format else b)
        set_(self, "alignment", Alignment(self.alignment))
        set_(self, "output_rounding", RoundingMode.parse(self.output_rounding))
        if self.input_rounding is not None:
            set_(self, "input_rounding", RoundingMode.parse(self.input_rounding))
        set_(self, "nan", NaNStyle(self.nan))
        for name in _INTEGER_FIELDS:  # numpy integers (from arrays, JSON readers) become ints
            value = getattr(self, name)
            if isinstance(value, np.integer):
                set_(self, name, int(value))
        self._validate()

    def _validate(self) -> None:
        where = f"Model({self.family.value}, {self.input_name} -> {self.output_format.name})"

        def need(cond: bool, msg: str) -> None:
            if not cond:
                raise ValueError(f"{where}: {msg}")

        def integer(x: Any) -> bool:  # an int, not a bool (True is an int to Python, not to a user)
            return isinstance(x, int) and not isinstance(x, bool)

        for name in _INTEGER_FIELDS:
            value = getattr(self, name)
            need(value is None or integer(value), f"{name} must be an integer{'' if name == 'groups' else ' or None'}, "
                 f"not {value!r} ({type(value).__name__})")
        need(isinstance(self.subnormals, (bool, np.bool_)),
             f"subnormals must be True or False, not {self.subnormals!r}")
        need(self.block_width is None or self.block_width >= 1,
             f"block_width must be a positive integer or None, not {self.block_width!r}")
        need(self.block_width is not None or self.family is Family.EXACT_FUSED,
             "only the exact-fused family may leave block_width unset (one block for the whole dot product)")
        if self.family in _FAMILIES_WITH_F:
            need(isinstance(self.fraction_bits, int) and self.fraction_bits >= 0,
                 f"fraction_bits (F) must be a non-negative integer, not {self.fraction_bits!r}")
            need(self.fraction_bits is not None and self.fraction_bits <= 52,
                 "fraction_bits above 52 are not supported (the engine keeps sums in 64-bit integers)")
        if self.family is Family.TRUNCATED_FUSED:
            need(isinstance(self.e_zero, int), "e_zero must be given (the exponent of zero terms)")
            need(self.e_zero is None or -2400 <= self.e_zero <= 2400,
                 f"e_zero must lie in [-2400, 2400] (the presets use -133 to -19), not {self.e_zero}")
            need(self.carry_bits is None or self.carry_bits >= 0, "carry_bits must be None or >= 0")
        else:
            need(self.carry_bits is None, "carry_bits applies to the truncated-fused family only")
        if self.family is Family.LATE_C:
            need(isinstance(self.late_fraction_bits, int) and self.late_fraction_bits >= (self.fraction_bits or 0),
                 "late_fraction_bits (F2) must be an integer >= fraction_bits")
            need(self.late_fraction_bits is None or self.late_fraction_bits <= 52,
                 "late_fraction_bits above 52 are not supported (the engine keeps sums in float64)")
            need(self.groups in (1, 2), "groups must be 1 or 2 (even/odd products)")
            need(self.block_width is not None and self.block_width % self.groups == 0,
                 "block_width must be a multiple of groups")
        else:
            need(self.groups == 1, "groups applies to the late-c family only")
        if self.family is Family.PAIRWISE:
            bw = self.block_width or 0
            need(bw & (bw - 1) == 0, "the pairwise family needs a power-of-two block_width")
        if self.family is Family.FMA_CHAIN:
            need(self.block_width == 1, "an FMA chain has block_width 1")
        need(self.nan is not NaNStyle.PROPAGATE or self.family is Family.FMA_CHAIN,
             "nan='propagate' is defined for the fma-chain family only (measured on the H100's fp64 DMMA); "
             "no data say which of several NaNs a fused block or another step family passes on")
        if self.family is Family.BFDOT:
            need(self.block_width == 2, "BFDOT has block_width 2")
        if self.family is Family.AMX:
            need(self.block_width is not None and self.block_width % 2 == 0, "AMX needs an even block_width")
        if self.output_fraction_bits is not None:
            need(0 <= self.output_fraction_bits <= self.output_format.fraction_bits,
                 f"output_fraction_bits must lie in [0, {self.output_format.fraction_bits}]")
        need(self.overflow in ("ieee", "inf"), "overflow must be 'ieee' or 'inf'")
        need(self.product_exponent in ("sum", "normalized"), "product_exponent must be 'sum' or 'normalized'")
        need(self.late_cut in ("leading", "common"), f"late_cut must be 'leading' or 'common', not {self.late_cut!r}")
        need(self.c_entry in ("fused", "after", "end"),
             f"c_entry must be 'fused', 'after' or 'end', not {self.c_entry!r}")
        need(self.flush_zero in ("signed", "positive"), f"flush_zero must be 'signed' or 'positive', not "
             f"{self.flush_zero!r}")
        need(self.instruction_k is None or (self.c_entry == "after" and self.block_width is not None
                                            and self.instruction_k % self.block_width == 0),
             "instruction_k needs c_entry='after' and a multiple of block_width")
        need(self.product_order in ("natural", "halves"), f"product_order must be 'natural' or 'halves', not "
             f"{self.product_order!r}")
        need(self.product_order == "natural" or self.c_entry != "end",
             "product_order='halves' orders the products of one instruction; c_entry='end' has none")
        need(self.product_order == "natural" or (self.step_width is not None and self.step_width % 4 == 0),
             "product_order='halves' needs instructions of a multiple of 4 products")
        up = self.unpack_format
        need(up is None or (_formats.holds(up, self.input_format) and _formats.holds(up, self.b_format)),
             "unpack_format must hold every value of the input formats exactly")
        acc = self.accumulator_format
        need(acc is None or _formats.holds(acc, self.output_format),
             f"accumulator_format must be at least as wide as the output format {self.output_format.name}")
        need(self.c_entry == "fused" or self.family in _FUSED,
             f"c_entry={self.c_entry!r} needs a fused family (truncated-fused, exact-fused, late-c)")
        need(self.product_exponent == "sum" or self.family is Family.TRUNCATED_FUSED,
             "product_exponent applies to the truncated-fused family only")
        need(self.exact_zero in ("positive", "ieee"), "exact_zero must be 'positive' or 'ieee'")
        need(self.rounded_zero in ("signed", "positive"), "rounded_zero must be 'signed' or 'positive'")
        need(self.rounded_zero == "signed" or (self.exact_zero == "positive" and self.family in _FUSED),
             "rounded_zero='positive' needs a fused family (truncated-fused, exact-fused, late-c) with "
             "exact_zero='positive'")
        need(self.output_format.has_infinities,
             f"output format {self.output_format.name} has no infinities; matrix units here write "
             "fp16, bf16, fp32 or fp64")

    # --- derived ----------------------------------------------------------------------------------
    @property
    def step_width(self) -> int | None:
        """Products per step of the chain: an instruction (``instruction_k``) where C is added after its
        blocks, else a block (``block_width``); None: the whole dot product (``c_entry="end"``, or one
        exact-fused block)."""
        if self.c_entry == "end":
            return None
        return self.instruction_k or self.block_width

    def step(self, k: int) -> int:
        """Products per step of a dot product of length k: :attr:`step_width`, else the whole dot product,
        rounded up to whole blocks (a short last block is padded with +0 products)."""
        if self.step_width is not None:
            return self.step_width
        L = self.block_width or max(k, 1)
        return max(-(-k // L) * L, 1)

    @property
    def accumulator(self) -> Format:
        """The format the unit's blocks round into before their results are stored: ``accumulator_format``,
        else the output format."""
        return self.accumulator_format or self.output_format

    def order(self, n: int) -> list[int]:
        """The order in which one step's n products enter its blocks (``product_order``)."""
        if self.product_order == "halves":
            return [i for i in range(n) if i % 4 < 2] + [i for i in range(n) if i % 4 >= 2]
        return list(range(n))

    def arithmetic_model(self) -> Model:
        """The model the datapath runs: with ``unpack_format``, this model with A and B in that format
        (their values unchanged, their exponents read in it); else the model itself."""
        if self.unpack_format is None:
            return self
        return self.replace(input_format=self.unpack_format, b_input_format=None, unpack_format=None)

    def block_model(self) -> Model:
        """One block as a fused kernel computes it: C fused, products in their given order, written in the
        accumulator format where there is one.  What a step does around its blocks (``c_entry="after"``,
        ``instruction_k``, ``product_order``, the store into ``output_format``) is the chain's job; a model
        with none of these is its own block model."""
        if (self.accumulator_format is None and self.c_entry == "fused" and self.instruction_k is None
                and self.product_order == "natural"):
            return self
        return self.replace(output_format=self.accumulator, accumulator_format=None,
                            c_entry="fused", instruction_k=None, product_order="natural")

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
        """Format of C (and of each block's result, which is the next block's C)."""
        return self.output_format

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

    def features(self) -> dict[str, Any]:
        """The model's parameters as plain values (a row of the feature table; JSON-ready)."""
        return {
            "family": self.family.value,
            "input": self.input_format.name,
            "input_b": None if self.b_input_format is None else self.b_input_format.name,
            "output": self.output_format.name,
            "L": self.block_width,
            "F": self.fraction_bits,
            "e_zero": self.e_zero,
            "alignment": self.alignment.value if self.family in _FAMILIES_WITH_F else None,
            "carry_bits": self.carry_bits,
            "output_rounding": self.output_rounding.name,
            "output_fraction_bits": self.output_fraction_bits,
            "input_rounding": None if self.input_rounding is None else self.input_rounding.name,
            "subnormals": self.subnormals,
            "overflow": self.overflow,
            "nan": self.nan.value,
            "exact_zero": self.exact_zero,
            "rounded_zero": self.rounded_zero,
            "late_fraction_bits": self.late_fraction_bits,
            "groups": self.groups,
            "product_exponent": self.product_exponent,
            "late_cut": self.late_cut if self.family is Family.LATE_C else None,
            "c_entry": self.c_entry,
            "accumulator": None if self.accumulator_format is None else self.accumulator_format.name,
            "flush_zero": self.flush_zero,
            "instruction_k": self.instruction_k,
            "product_order": self.product_order,
            "unpack": None if self.unpack_format is None else self.unpack_format.name,
        }

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dictionary that :meth:`from_dict` turns back into the same Model."""
        d = {k: v for k, v in self.features().items()}
        d["name"] = self.name
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Model:
        return cls(
            family=Family(d["family"]),
            input_format=_formats.get(d["input"]),
            output_format=_formats.get(d["output"]),
            block_width=d.get("L"),
            fraction_bits=d.get("F"),
            e_zero=d.get("e_zero"),
            alignment=Alignment(d.get("alignment") or "truncate"),
            carry_bits=d.get("carry_bits"),
            output_rounding=RoundingMode.parse(d.get("output_rounding", "TiesToEven")),
            output_fraction_bits=d.get("output_fraction_bits"),
            input_rounding=None if d.get("input_rounding") is None else RoundingMode.parse(d["input_rounding"]),
            subnormals=d.get("subnormals", True),
            overflow=d.get("overflow", "ieee"),
            nan=NaNStyle(d.get("nan", "default")),
            exact_zero=d.get("exact_zero", "ieee"),
            rounded_zero=d.get("rounded_zero", "signed"),
            late_fraction_bits=d.get("late_fraction_bits"),
            groups=d.get("groups", 1),
            product_exponent=d.get("product_exponent", "sum"),
            late_cut=d.get("late_cut") or "leading",
            c_entry=d.get("c_entry", "fused"),
            b_input_format=d.get("input_b"),
            accumulator_format=d.get("accumulator"),
            flush_zero=d.get("flush_zero", "signed"),
            instruction_k=d.get("instruction_k"),
            product_order=d.get("product_order", "natural"),
            unpack_format=d.get("unpack"),
            name=d.get("name", ""),
        )

    def summary(self) -> str:
        """One line: family and the parameters that matter for it."""
        f = self.features()
        parts = [self.family.value, f"{self.input_name}->{f['output']}"]
        if self.block_width is not None:
            parts.append(f"L={self.block_width}")
        else:
            parts.append("L=k")
        if self.fraction_bits is not None:
            parts.append(f"F={self.fraction_bits}")
        if self.late_fraction_bits is not None:
            parts.append(f"F2={self.late_fraction_bits}")
        if self.e_zero is not None:
            parts.append(f"e_zero={self.e_zero}")
        if self.family in _FAMILIES_WITH_F and self.alignment is not Alignment.TRUNCATE:
            parts.append(f"align={self.alignment.value}")
        if self.carry_bits is not None:
            parts.append(f"carry={self.carry_bits}")
        out = self.output_rounding.name
        if self.output_fraction_bits is not None:
            out += f"@{self.output_fraction_bits}b"
        parts.append(f"out={out}")
        if not self.subnormals:
            parts.append("FTZ")
        if self.groups != 1:
            parts.append(f"groups={self.groups}")
        if self.product_exponent != "sum":
            parts.append("normalized-products")
        if self.family is Family.LATE_C and self.late_cut != "leading":
            parts.append(f"cut={self.late_cut}")
        if self.c_entry != "fused":
            parts.append({"end": "C-at-end"}.get(self.c_entry) or
                         ("C-after" if self.instruction_k is None else f"C-after-{self.instruction_k}"))
        if self.product_order != "natural":
            parts.append(f"order={self.product_order}")
        if self.unpack_format is not None:
            parts.append(f"as {self.unpack_format.name}")
        if self.nan is NaNStyle.PROPAGATE:
            parts.append("NaN-propagate")
        if self.accumulator_format is not None:
            parts.append(f"via {self.accumulator_format.name}")
        return " ".join(parts)
