"""The multiword methods, one registry: every method :func:`blockfma.multiword.matmul` runs and
:func:`blockfma.multiword.bound` bounds is one frozen object here, with its parameters: :class:`Method` (words
of a low format, the word products on a unit), :class:`Mmm` (a Method for any ``p`` and ``low``),
:class:`Native` (the fp32/fp64 GEMMs), :class:`Ozaki` (schemes I and II), :class:`Fabsum` (a summation,
bounded here).  Each layer reads an entry by ``kind`` (the bound, the cost in :mod:`.choose`, the run); how to
add one: docs/multiword.md, "Adding a method or a reproduction".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from ..model import Family, Model

__all__ = ["Method", "Mmm", "Native", "Ozaki", "Fabsum", "REGISTRY", "METHODS", "TF64_UNIT", "FASI", "triangle",
           "smallest_first"]

Pair = tuple[int, int]

# A unit that multiplies fp32 words exactly and accumulates in fp64 (Valero-Lara et al.'s proposed TF64):
# an fp64 FMA chain with fp32 inputs (every fp32 x fp32 product is exact in fp64).
TF64_UNIT = Model(Family.FMA_CHAIN, "fp32", "fp64", block_width=1,
                  name="TF64 unit (fp32 x fp32 exact, fp64 FMA chain)")

FASI = "Fasi, Higham, Lopez, Mary, Mikaitis 2022 (Algorithm 2.1)"
_THEOREM = "[FHLMM] Theorem 2.1, Table 2.1"


def smallest_first(pairs: tuple[Pair, ...] | list[Pair]) -> tuple[Pair, ...]:
    """The cuBLAS order of Algorithm 4.1: the smallest products first, A1B1 last (0- or 1-based pairs)."""
    return tuple(sorted(pairs, key=lambda t: (-(t[0] + t[1]), -t[0])))


def triangle(p: int) -> tuple[Pair, ...]:
    """Products A_i B_j with i + j <= p + 1 (1-based) as 0-based pairs, in Algorithm 2.1's loop order (i,
    then j)."""
    return tuple((i, j) for i in range(p) for j in range(p) if i + j <= p - 1)


@dataclass(frozen=True)
class Method:
    """One method: words of ``low`` (``p`` of them, residuals scaled by 2**``scale``), the word products
    (0-based (i, j), in the order computed), where they are accumulated, the high format, the source."""

    name: str
    low: str
    p: int
    products: tuple[Pair, ...]
    accumulate: str  # "outside" | "inside"
    high: str = "fp32"
    scale: int = 0
    split_rounding: str = "rne"
    outside_groups: tuple[tuple[int, ...], ...] = ()  # ootomo: products summed inside, groups added outside
    source: str = ""
    description: str = ""
    bound_source: str = field(default=_THEOREM, repr=False, compare=False)
    bound_notes: str = field(default="", repr=False, compare=False)

    kind: ClassVar[str] = "words"
    runs: ClassVar[bool] = True

    @property
    def n_products(self) -> int:
        return len(self.products)

    @property
    def pattern(self) -> str:
        """"all" where the method computes all p**2 products (eq. 2.5), else "triangle" (i + j <= p + 1)."""
        return "all" if self.p > 1 and self.n_products == self.p * self.p else "triangle"

    def groups(self, products: tuple[Pair, ...] | None = None) -> tuple[tuple[Pair, ...], ...]:
        """The word products (0-based, in ``products``' order; default the method's) in groups, in the
        order run: each group chained in the unit's accumulator, the groups' sums added outside rounding
        to nearest (Ootomo's groups: the one holding the smallest product first)."""
        products = self.products if products is None else products
        if self.outside_groups:
            ordered = sorted(self.outside_groups, key=lambda g: -min(sum(products[t]) for t in g))
            return tuple(tuple(products[t] for t in g) for g in ordered)
        if self.accumulate == "inside":
            return (tuple(products),)
        return tuple((t,) for t in products)


@dataclass(frozen=True)
class _Scheme:
    """What every entry but a word method holds: its name, its source, what it is, the source of its bound
    and notes on it."""

    name: str
    source: str = ""
    description: str = ""
    bound_source: str = ""
    bound_notes: str = ""

    runs: ClassVar[bool] = True  # whether matmul(method=name) runs it


@dataclass(frozen=True)
class Mmm(_Scheme):
    """Algorithm 2.1 with any ``p`` words of any ``low`` format (``method="mmm", p=, low=``)."""

    kind: ClassVar[str] = "mmm"

    def method(self, p: int, low: str) -> Method:
        """The :class:`Method` of ``p`` words of ``low`` (checked by the caller)."""
        return Method(f"mmm-{low}-p{p}", low, p, triangle(p), "outside", source=FASI)


@dataclass(frozen=True)
class Native(_Scheme):
    """The native GEMM of the format ``name`` (fp32: SGEMM, inputs rounded to fp32; fp64: DGEMM);
    ``input_format``: the inputs its bound assumes (None: any, rounded to the format)."""

    input_format: str | None = None

    kind: ClassVar[str] = "native"

    @property
    def high(self) -> str:
        return self.name


@dataclass(frozen=True)
class Ozaki(_Scheme):
    """Ozaki scheme I ("ozaki1": int8 slices) or II ("ozaki2": residues, the CRT) on an exact int8 unit,
    with the keywords matmul takes for it (``parameters``) and whether :func:`.bounds.bound` bounds it."""

    parameters: tuple[str, ...] = ()
    bounded: bool = True

    @property
    def kind(self) -> str:
        return self.name

    @property
    def high(self) -> str:
        return "fp64"


@dataclass(frozen=True)
class Fabsum(_Scheme):
    """FABsum (Algorithms 4.2/4.3): the leading product in blocks on the unit, the blocks added in fp32
    (v1, ``acc_u`` 2**-24) or fp64 (v2, 2**-53).  Run as matmul's ``summation=``; a method of its own for
    :func:`.bounds.bound`."""

    version: int = 1
    acc_u: float = 2**-24

    kind: ClassVar[str] = "fabsum"
    runs: ClassVar[bool] = False


Entry = Method | Mmm | Native | Ozaki | Fabsum

_VALERO = "Valero-Lara et al. 2023"
REGISTRY: dict[str, Entry] = {e.name: e for e in [
    Method("fp16", "fp16", 1, ((0, 0),), "outside", source=FASI, description="one fp16 word",
           bound_notes="fp16 inputs (rounded from any format) to a block FMA accumulating in fp32: 2 u_fp16 + "
           "gamma_n(u_fp32); input_format='fp16' leaves gamma_n"),
    Method("bf16", "bf16", 1, ((0, 0),), "outside", source=FASI, description="one bf16 word"),
    Method("tf32", "tf32", 1, ((0, 0),), "outside", source=f"{_VALERO} (1xTF32)", description="one tf32 word",
           bound_source="[FHLMM] Theorem 2.1 with u_low = 2^-11; [VLJLV] 1xTF32"),
    Method("double-fp16", "fp16", 2, triangle(2), "outside", source=FASI,
           description="p = 2 fp16 words, 3 products (i + j <= 3)"),
    Method("double-bf16", "bf16", 2, triangle(2), "outside", source=FASI,
           description="p = 2 bf16 words, 3 products"),
    Method("triple-bf16", "bf16", 3, triangle(3), "outside", source=FASI,
           description="p = 3 bf16 words, 6 products (i + j <= 4)"),
    Method("markidis", "fp16", 2, ((0, 0), (0, 1), (1, 0), (1, 1)), "inside",
           source="Markidis et al. 2018", description="fp16 words and residuals, 4 products in the unit",
           bound_source="Markidis et al. 2018 as [FHLMM] sec. 2 describe it: all four products; eq. (2.5)",
           bound_notes="the four products chained in the unit with A1B1 first (as blockfma.multiword.methods "
           "runs it), so A1B1's terms go through 4 unit calls: gamma_{4n+3} where Algorithm 2.1 has "
           "gamma_{n+3}"),
    Method("ootomo", "fp16", 2, ((0, 0), (0, 1), (1, 0)), "outside", scale=11,
           outside_groups=((0,), (1, 2)), source="Ootomo and Yokota 2022",
           description="residuals scaled by 2^11, the corrections summed in the unit, added outside (RN)",
           bound_source="Ootomo and Yokota 2022; [FHLMM] Theorem 2.1 (residual scaling only avoids underflow)",
           bound_notes="corrections chained in the unit, then added to A1B1 outside, rounding to nearest"),
    Method("3xtf32", "tf32", 2, ((1, 0), (0, 1), (0, 0)), "inside",
           source=f"{_VALERO}; NVIDIA CUTLASS 3xTF32",
           description="big and small tf32 words, small products first, in the unit's accumulator",
           bound_source="[VLJLV] 3xTF32; [FHLMM] Theorem 2.1 with u_low = 2^-11"),
    Method("4xtf32", "tf32", 2, ((1, 1), (1, 0), (0, 1), (0, 0)), "inside", source=_VALERO,
           description="3xtf32 and the small x small product", bound_source="[VLJLV] 4xTF32; [FHLMM] eq. (2.5)"),
    Method("bf16x9", "bf16", 3, smallest_first([(i, j) for i in range(3) for j in range(3)]), "inside",
           source="cuBLAS FP32 emulation on Blackwell (CUBLAS_COMPUTE_32F_EMULATED_16BFX9)",
           description="3 bf16 words each, all 9 products, the smallest first, in the unit's accumulator",
           bound_source="cuBLAS FP32 emulation with 9 bf16 products; [FHLMM] eq. (2.5) with p = 3",
           bound_notes="fp32 inputs fit in three bf16 words: input_format='fp32' drops the splitting error"),
    Method("tf64", "fp32", 2, ((1, 0), (0, 1), (0, 0)), "inside", high="fp64", source=f"{_VALERO} (3xTF64)",
           description="fp64 through 2 fp32 words on a unit that accumulates in fp64, 3 products",
           bound_source="[VLJLV] TF64 (3 products; products='all' for their 4dsgemm); [FHLMM] Theorem 2.1 with "
           "u_low = 2^-24, u_high = 2^-53",
           bound_notes="assumes the proposed TF64 unit: fp32 x fp32 products exact in fp64 (48 <= 53 bits), "
           "accumulated in fp64 rounding to nearest (eq. 2.1 with u_high = 2^-53)"),
    Mmm("mmm", source=FASI, description="p words of a low format, the products with i + j <= p + 1, added outside",
        bound_source="[FHLMM] Theorem 2.1 (p= and low= required)"),
    Ozaki("ozaki1", source="Ozaki, Ogita, Oishi, Rump 2012; Mukunoki et al. 2020; Ootomo, Ozaki, Yokota 2024",
          description="int8 slices of A's rows and B's columns, the slice products added in float64",
          bound_source="derived here (see ozaki_bound)", parameters=("slices", "unit", "width")),
    Ozaki("ozaki2", source="Uchino, Ozaki, Imamura 2025 (GEMMul8)",
          description="residues modulo small integers, one int8 product per modulus, the CRT",
          parameters=("moduli", "n_moduli", "unit", "scaling"), bounded=False),
    Native("fp32", bound_source="[FHLMM] eq. (2.1) with a scalar FMA (b = 1); [H02] sec. 3.1",
           description="the native fp32 GEMM, inputs rounded to fp32, the result back",
           bound_notes="plain fp32 GEMM: gamma_n(2^-24) for fp32 inputs (recursive summation in any order, with "
           "or without FMA), plus 2 u + u^2 for rounding inputs of another format to fp32"),
    Native("fp64", bound_source="[H02] sec. 3.1", description="the native fp64 GEMM", input_format="fp64",
           bound_notes="plain fp64 GEMM: gamma_n(2^-53)"),
    Fabsum("fabsum-v1", bound_source="[FHLMM] sec. 4.4, Algorithm 4.2", version=1, acc_u=2**-24),
    Fabsum("fabsum-v2", bound_source="[FHLMM] sec. 4.4, Algorithm 4.3", version=2, acc_u=2**-53),
]}
"""Every method, by name: the word methods first (in :data:`METHODS`' order), then the others."""

METHODS: dict[str, Method] = {n: e for n, e in REGISTRY.items() if isinstance(e, Method)}
"""The word methods (:class:`Method`) by name."""

