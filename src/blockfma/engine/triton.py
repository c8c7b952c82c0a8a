"""A GPU kernel of our own, in Triton: tiled GEMMs of the truncated-fused and late-c families, of the
FMA chain, pairwise and exact-fused families, and of the block-scaled models (``backend="triton"``); this
module is the host side (support, compile-time structures, launch).  docs/engines.md describes the kernel.

One kernel, :func:`.triton_gemm.gemm_kernel`: one program computes a ``BLOCK_M x BLOCK_N`` tile of D and
walks the model's step plan (:mod:`blockfma.plan`) over K: steps of W products, each in blocks of L, with C
fused into every block (the block's result, held in binary32 registers, is the next block's C), or the step's
blocks chained from +0, their sum stored into the output format where the model accumulates in a wider one,
and C added by one IEEE addition rounded to nearest even; a step's products enter its blocks in the model's
``product_order``.  A truncated-fused block, on the general path (integer arithmetic only):

* A, B and C arrive as binary32 values (exact: the model's formats all lie inside binary32); their
  significands, last-place exponents and ``E_fmt`` (``max(floor(log2|x|), emin)``) are read from the bits,
  C's at the emin of the format the block reads it in (the first step's: :attr:`blockfma.plan.Plan.first`);
* a product is the int64 ``ma * mb`` (at most 48 bits) at exponent ``la + lb``; its exponent is
  ``E_a + E_b`` (or the product's own, ``product_exponent="normalized"``), ``e_zero`` for zeros;
* every product and C is shifted to the unit ``2**(emax - F)`` of the block's largest exponent, cut
  toward zero (``alignment="truncate"``) or minus infinity (``"floor"``), and the cut terms summed in
  int64, wrapped at ``F + 1 + carry_bits`` bits where the model says;
* the sum is rounded once into the block's result format, by integer rounding of its significand in the
  output rounding mode, with the format's subnormals or flush-to-zero and its overflow policy.

The fast path (:func:`fast_constants`, where it holds the call's operands exactly) computes the same block with one
register tile per lane: the largest exponent from the codes, then each term as the exact binary32 product ``a*b`` scaled
by ``2**(F - emax)`` and converted to int32 (the conversion is the cut).  A late-c block follows
:func:`blockfma.engine.array.late_c` on the same integer products.  Special values follow
:func:`blockfma.engine.rules.fused_specials` and :func:`~.rules.exact_zero`; the host
(:func:`blockfma.engine.api.finish`) writes NaN bit patterns and ``rounded_zero`` afterwards.  The other families'
blocks: :mod:`.triton_families`; the block-scaled ones: :mod:`.triton_scaled` (:func:`gemm` with scales).  Models with
fp64 operands and ``nan="propagate"`` are refused (:func:`unsupported_reason`).

The model's parameters travel as one compile-time structure (:class:`Kernel`, :class:`Block`,
:class:`Rounding`), the shapes and strides as run-time arguments.  Without a GPU it runs under Triton's
interpreter (``TRITON_INTERPRET=1``, read when a kernel is defined: at first use, once per process).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

import numpy as np

from .. import optional
from ..arguments import ArgumentError, Shown, integer
from ..formats import RoundingMode, overflow_to_infinity
from ..model import Alignment, Family, Model, NaNStyle
from ..optional import require
from ..plan import Plan, plan, schedule
from . import array, rules, scaled

__all__ = ["supports", "available", "interpreting", "gemm", "gemm_tensors", "unsupported_reason", "free_bytes",
           "check_fits", "GEMM_BYTES", "OPERAND_DTYPES", "STORAGE_LOADS", "scaled_gemm_tensors", "fast_constants",
           "scaled_fast_constants", "grid_path", "Kernel", "Block", "Rounding", "defined_interpreted", "gpu_visible"]

STEP_FAMILIES = (Family.FMA_CHAIN, Family.PAIRWISE, Family.EXACT_FUSED)  # their blocks: triton_families
LIMB_BITS = 32  # bits per limb of the exact-fused Kulisch accumulator (triton_families)
_MODES = {RoundingMode.TowardZero: 0, RoundingMode.TiesToEven: 1, RoundingMode.TiesAway: 2,
          RoundingMode.TowardPositive: 3, RoundingMode.TowardNegative: 4, RoundingMode.ToOdd: 5}


def interpreting() -> bool:
    """Whether Triton's interpreter is on (``TRITON_INTERPRET=1``): kernels then run on the CPU."""
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "on", "yes")


def _triton() -> Any:
    return require("triton", extra="triton", needed_by="backend='triton'")


def _torch() -> Any:
    return require("torch", extra="torch", needed_by="backend='triton'")


def available() -> bool:
    """Whether Triton imports and can run here: under its interpreter, or with torch seeing a CUDA GPU."""
    try:
        _triton()
        torch = _torch()
    except ImportError:
        return False
    return interpreting() or bool(torch.cuda.is_available())


@lru_cache(maxsize=512)
def unsupported_reason(model: Model) -> str | None:
    """Why the Triton kernels do not run ``model`` (one clause), or None where they do (cached per model)."""
    m = model.arithmetic_model()
    if m.family in STEP_FAMILIES:
        return _step_reason(m)
    if m.block_scaled:
        return _scaled_reason(m)
    if m.family not in (Family.TRUNCATED_FUSED, Family.LATE_C):
        return ("it runs the truncated-fused, late-c, exact-fused, pairwise and fma-chain families only, "
                f"not {m.family.value}")
    if m.family is Family.LATE_C and m.groups not in (1, 2):
        return "it runs late-c with one or two groups"
    L = m.block_width
    if L is None or L > 256:
        return "it needs blocks of at most 256 products"
    block = schedule(m).block
    if not (array.supports(block) and array.supports(schedule(m).first)):
        return "its products, C and result must lie within binary32 and the block sums below 2**53"
    if m.nan is NaNStyle.PROPAGATE:
        return "it does not carry NaN payloads (nan='propagate')"
    if max(m.input_format.precision, m.b_format.precision, block.result_format.precision) > 24:
        return "its inputs and results must be binary32 values"
    if not (rules.values_in_binary32(m.output_format) and rules.values_in_binary32(m.c_format)):
        return "its C and output formats must lie within binary32"
    return None


def _step_reason(m: Model) -> str | None:
    """unsupported_reason for the FMA chain, pairwise and exact-fused (:mod:`.triton_families`)."""
    block = m.block_model()
    formats = (block.input_format, block.b_format, block.c_format, block.result_format, m.output_format)
    if not all(rules.values_in_binary32(f) for f in formats):
        return (f"its {m.family.value} inputs, C and results must lie within binary32 (fp64 ones run on the "
                "CPU engines)")
    if m.nan is NaNStyle.PROPAGATE:
        return "it does not carry NaN payloads (nan='propagate')"
    if m.family is Family.PAIRWISE and (m.block_width is None or m.block_width > 256):
        return "it runs pairwise blocks of at most 256 products"
    return None


def _scaled_reason(m: Model) -> str | None:
    """unsupported_reason for a block-scaled model (:mod:`.triton_scaled`)."""
    L, G = m.block_width, m.option("scale_group")
    if L is None or L > 256 or L & (L - 1) or (G is not None and (G & (G - 1) or L % G)):
        return "it runs block-scaled blocks of a power of two of at most 256 products, in whole groups"
    p = schedule(m)
    if not p.c_fused or p.ordered:
        return "it runs block-scaled plans whose blocks chain C in order (c_entry='fused', natural product order)"
    block = p.block
    if not scaled.supports(block):
        return "it lies beyond the block-scaled engines' exact bounds (blockfma.engine.scaled.supports)"
    if m.nan is NaNStyle.PROPAGATE:
        return "it does not carry NaN payloads (nan='propagate')"
    formats = (block.input_format, block.b_format, block.scale_format, block.c_format, block.result_format,
               m.output_format)
    if not all(rules.values_in_binary32(f) for f in formats) or min(f.emin for f in formats[:3]) < -127:
        return ("its inputs, scales, C and results must lie within binary32, the inputs' and scales' least "
                "exponents at -127 or above")
    return None


def supports(model: Model) -> bool:
    """Whether ``backend="triton"`` runs this model (:func:`unsupported_reason` says why not): every
    truncated-fused, late-c, FMA chain, pairwise, exact-fused and block-scaled preset but the fp64 ones."""
    return unsupported_reason(model) is None


@dataclass(frozen=True)
class Rounding:
    """How the kernel rounds into a format (:func:`.triton_kernel.round_value`), a compile-time structure:
    precision P, least exponent EMIN, largest finite value FMAX, MODE (0 toward zero, 1 nearest even, 2 nearest
    away, 3 up, 4 down, 5 odd), SUBNORMALS (else flush to zero), beyond FMAX what OVER_POS / OVER_NEG say
    (0 FMAX, 1 infinity, 2 NaN), NEG_ZERO (the format has -0)."""

    P: int
    EMIN: int
    FMAX: float
    MODE: int = 1
    SUBNORMALS: bool = True
    OVER_POS: int = 1
    OVER_NEG: int = 1
    NEG_ZERO: bool = True


@dataclass(frozen=True)
class Block:
    """The compile-time parameters of one block of the kernel (:mod:`.triton_gemm`), by name: every
    family's, and the fields only some families read (the others keep the defaults, so that models differing
    only there share a compilation)."""

    FAMILY: str  # the family's name: picks the block function
    R: Rounding  # how the block's result rounds into its format
    L: int  # products per block (exact-fused: lanes per chunk)
    LP: int  # lanes: L rounded up to a power of two
    A_EMIN: int = -126  # the emins at which the operands' exponents are read (C's: the format the block reads C in)
    B_EMIN: int = -126
    C_EMIN: int = -126
    IEEE_ZERO: bool = True  # an exactly zero sum takes the IEEE sign (else +0)
    SPECIALS: bool = True  # some input may be NaN or infinite
    ORDERED: bool = False  # the step's products enter its blocks in the plan's product order
    FAST: bool = False  # the fast path (fast_constants, scaled_fast_constants), else the general one
    F: int = 0  # truncated-fused, late-c, block-scaled: the cut's fraction bits, e_zero, floor alignment, the
    EZ: int = 0  # sum's wrap (F + 1 + carry bits, 0: none) and normalized product exponents
    FLOOR: bool = False
    WRAP: int = 0
    NORMALIZED: bool = False
    F2: int = 0  # late-c: the second cut, its groups, the leading cut, C's emax (products beyond overflow)
    GROUPS: int = 1
    LEADING: bool = False
    C_EMAX: int = 0
    CHUNK: int = 1  # the truncated-fused and late-c fast path: int32 sums of CHUNK terms, int64 sums, e_zero
    SUM64: bool = False  # may be a block's largest exponent where some term is not zero
    EZ_LIVE: bool = False
    GRID: bool = False  # truncated-fused fast path: one FMA per product on the cut's grid (grid_path), its count's
    CBIAS: int = 0  # code biases (cutting toward zero), and STANDIN: the interpreter's exact stand-ins (fma.rz, widen)
    STANDIN: bool = False
    U: int = 1  # block-scaled: lanes per unit of its fast path, products per group (0: a term per product),
    G: int = 0  # term slots, products per scale, the operands' and scales' precisions and emins
    T: int = 1
    SB: int = 1
    A_P: int = 24
    B_P: int = 24
    S_EMIN: int = 0
    S_P: int = 1
    LO: int = 0  # block-scaled, exact-fused: the lowest last place of a product (or C)
    LOG2L: int = 0  # pairwise, exact-fused: log2 LP; exact-fused: its limbs (NL, padded to NLP = 2**LOG2NL),
    NL: int = 1  # all lanes in one chunk
    NLP: int = 1
    LOG2NL: int = 0
    ONE_CHUNK: bool = True
    FC: Rounding | None = None  # pairwise: products and additions rounded into the C format


@dataclass(frozen=True)
class Kernel:
    """The kernel's compile-time structure ``S`` (:func:`.triton_gemm.gemm_kernel`): the block's parameters,
    the first step's block's (FIRST: C read at its own emin where NARROW_C), the plan's step (C_FUSED: C
    fused into every block, else added after the step by one IEEE addition; STORE: the step's result stored
    into the output format) and the output format's rounding OUT (nearest even)."""

    BLOCK: Block
    FIRST: Block
    NARROW_C: bool
    C_FUSED: bool
    STORE: bool
    OUT: Rounding

    def path(self, **fields: Any) -> Kernel:
        """This kernel with ``fields`` of its blocks replaced (the path: FAST and its parameters)."""
        return replace(self, BLOCK=replace(self.BLOCK, **fields), FIRST=replace(self.FIRST, **fields))


def _kernel() -> Any:
    """The kernel (:func:`.triton_gemm.gemm_kernel`), its module imported at first use.  Triton decides when it defines
    a kernel whether its interpreter runs it (``TRITON_INTERPRET``), so the process's first use fixes the mode; a call
    in the other mode afterwards is refused (tests that need both modes run them in separate processes)."""
    _triton()
    from . import triton_gemm

    if defined_interpreted() != interpreting():
        raise RuntimeError(f"backend='triton': TRITON_INTERPRET={os.environ.get('TRITON_INTERPRET', '')!r} now, but "
                           "the kernel was defined in the other mode at its first use in this process; Triton fixes "
                           "the mode then: set TRITON_INTERPRET before the first call (one mode per process)")
    return triton_gemm.gemm_kernel


def defined_interpreted() -> bool | None:
    """Whether the kernel that this process defined (at its first use) runs under Triton's interpreter; None
    where it has not been defined yet."""
    module = sys.modules.get(f"{__package__}.triton_gemm")
    return None if module is None else type(module.gemm_kernel).__name__ == "InterpretedFunction"


def _device() -> Any:
    """Where the kernel runs: the CPU under the interpreter, else the current CUDA GPU; ValueError with
    the fix where neither is at hand."""
    torch = _torch()
    if interpreting():
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ValueError("backend='triton' needs a CUDA GPU (torch sees none) or Triton's interpreter on the CPU "
                         "(TRITON_INTERPRET=1: slow, for small shapes and tests); "
                         "backend='auto' runs the CPU engines")
    return torch.device("cuda")


def _overflow_code(fmt: Any, to_inf: bool) -> int:
    return (1 if fmt.has_infinities else 2) if to_inf else 0


def _rounding(fmt: Any, subnormals: Any, mode: RoundingMode = RoundingMode.TiesToEven,
              overflow: Any = None) -> Rounding:
    """The kernel's :class:`Rounding` into ``fmt`` in ``mode`` (overflow: the model's policy; None: to
    infinity, as IEEE rounding to nearest does)."""
    pos, neg = (True, True) if overflow is None else overflow_to_infinity(mode, overflow)
    return Rounding(P=fmt.precision, EMIN=fmt.emin, FMAX=float(fmt.max), MODE=_MODES[mode],
                    SUBNORMALS=bool(subnormals), OVER_POS=_overflow_code(fmt, pos), OVER_NEG=_overflow_code(fmt, neg),
                    NEG_ZERO=fmt.has_negative_zero)


def _config(m: Model, specials: bool) -> Kernel:
    """:class:`Kernel` for the arithmetic model ``m`` (the general path), or ValueError where the kernel does
    not run it."""
    why = unsupported_reason(m)
    if why is not None:
        raise ValueError(f"backend='triton' does not run {m.summary()}: {why}; backend='auto' runs it")
    p = schedule(m)
    block = p.block
    if m.family in STEP_FAMILIES:
        own = _step_fields(block)
    elif block.block_scaled:
        own = dict(_fused_fields(block), **_scaled_fields(block))
    else:
        own = _fused_fields(block)
    B = Block(FAMILY=m.family.name, R=_rounding(block.result_format, block.subnormals, block.output_rounding,
                                                block.overflow), IEEE_ZERO=block.exact_zero != "positive",
              SPECIALS=specials, ORDERED=p.ordered, A_EMIN=block.input_format.emin,
              B_EMIN=block.b_format.emin, C_EMIN=block.c_format.emin,
              STANDIN=interpreting(), **own)  # the interpreter has no inline assembly: fma.rz by its stand-in
    first = replace(B, C_EMIN=p.first.c_format.emin)  # the C given, read in c_input_format where there is one
    return Kernel(BLOCK=B, FIRST=first, NARROW_C=first != B, C_FUSED=p.c_fused, STORE=p.store,
                  OUT=_rounding(m.output_format, m.subnormals))


def _fused_fields(block: Model) -> dict[str, Any]:
    """The :class:`Block` fields of the truncated-fused, late-c and block-scaled blocks: width, cut, carry
    bits, product exponents, late-c's second cut and groups."""
    L = block.block_width
    late = block.family is Family.LATE_C
    assert L is not None and block.fraction_bits is not None and (late or block.e_zero is not None)
    return dict(L=L, LP=1 << (L - 1).bit_length(), F=block.fraction_bits, EZ=block.e_zero or 0,
                FLOOR=block.alignment is Alignment.FLOOR,
                WRAP=0 if block.carry_bits is None else block.fraction_bits + 1 + block.carry_bits,
                NORMALIZED=block.product_exponent == "normalized", F2=block.late_fraction_bits or 0,
                GROUPS=block.groups if late else 1, LEADING=late and block.late_cut == "leading",
                C_EMAX=block.c_format.emax if late else 0)


def _scaled_fields(block: Model) -> dict[str, Any]:
    """The block-scaled block's own fields (:mod:`.triton_scaled`): G (products per group, 0 for a term per
    product), T (term slots per block), SB (products per scale), the operand and scale formats' precisions
    and least exponents, and LO, the lowest last place of a product of A's and B's formats."""
    G = block.option("scale_group") or 0
    L = block.block_width
    assert L is not None
    fa, fb, fs = block.input_format, block.b_format, block.scale_format
    return dict(G=G, T=L // G if G else 1 << (L - 1).bit_length(), SB=block.option("scale_block"),
                A_P=fa.precision, B_P=fb.precision, S_EMIN=fs.emin, S_P=fs.precision,
                LO=scaled.lowest_bit(fa) + scaled.lowest_bit(fb))


def _lowest_place(fmt: Any) -> int:
    """The lowest last place of a value of ``fmt`` as binary32 encodes it (its smallest subnormal's
    exponent, less binary32's 23 fraction bits, or binary32's own last subnormal place)."""
    return max(fmt.emin - (fmt.precision - 1) - 23, -149)


def _step_fields(block: Model) -> dict[str, Any]:
    """The :class:`Block` fields of the FMA chain, pairwise and exact-fused blocks (:mod:`.triton_families`): lanes, the
    exact-fused Kulisch accumulator's limbs, pairwise's C format (products and additions rounded there)."""
    fc, L = block.c_format, block.block_width
    if block.family is Family.EXACT_FUSED:  # every last place of a product or C, the carries of 2**31 terms
        lo = min(_lowest_place(block.input_format) + _lowest_place(block.b_format), _lowest_place(fc))
        hi = max(block.input_format.emax + block.b_format.emax + 2, fc.emax + 1) + 32
        nl = -(-(hi - lo) // LIMB_BITS) + 1
        lp = min(1 << ((L or 16) - 1).bit_length(), 16)
    else:
        lo, nl, lp = 0, 1, L or 1
    return dict(L=lp, LP=lp, LOG2L=lp.bit_length() - 1,
                NL=nl, NLP=1 << (nl - 1).bit_length(), LOG2NL=(nl - 1).bit_length(),
                ONE_CHUNK=L is not None and L <= lp, LO=lo, FC=_rounding(fc, block.subnormals))
def _exponents(x: Any) -> tuple[int, int] | None:
    """(lowest, highest) floor(log2 |x|) over the finite nonzero values of tensor ``x``, None where there are
    none (every product of x is then zero): one pass over x on its device and one small read back (no
    boolean indexing, which would read its count back first)."""
    torch = _torch()
    v = x.abs()
    live = torch.isfinite(v) & (v > 0)
    lo = torch.where(live, v, torch.full_like(v, float("inf"))).amin()
    hi = torch.where(live, v, torch.zeros_like(v)).amax()
    e = torch.frexp(torch.stack([torch.where(hi > 0, lo, 1.0), hi])).exponent
    small, large, any_live = torch.cat([e, (hi > 0).to(e.dtype)[None]]).tolist()
    return (small - 1, large - 1) if any_live else None


def fast_constants(model: Model, a: Any = None, b: Any = None) -> dict[str, Any]:
    """The kernel's fast-path parameters (:mod:`.triton_kernel`, its fast path): FAST where that path holds
    this model on these operands (torch tensors ``a``, ``b``; None: the formats' whole ranges) bit for bit,
    CHUNK (lanes an int32 sum of cut terms holds, at most L), SUM64 (a block's sum needs int64) and EZ_LIVE
    (a zero product's e_zero may be a block's largest exponent while some term is not zero).

    FAST needs: the product exponent ``"max"`` (not ``"normalized"``); significands whose product fits
    binary32's 24 bits (fp16, bf16, tf32, fp8 inputs, not fp32); 1 <= F <= 28 (a term, at most 2**(F + 2),
    fits int32) and e_zero <= F + 126; every nonzero finite |a|, |b| a binary32 normal and their products in
    [2**(F - 127), 2**128) (late-c: below 2**(C_EMAX + 1), where a product would overflow); late-c groups
    within one int32 sum.  fp16 and fp8 inputs meet the range by their formats; bf16 and tf32 ones are
    looked at (a bf16 subnormal, or products that far apart, take the general path)."""
    m = model.arithmetic_model()
    block = schedule(m).block
    late = block.family is Family.LATE_C
    F, L = block.fraction_bits, m.block_width
    assert F is not None and L is not None
    # the largest |term| (below 2**(F + 2); a floored negative one may reach it) and |C's term| (2**(F + 1))
    per = (1 << (F + 2)) - (block.alignment is not Alignment.FLOOR) if F <= 28 else 1 << 31
    chunk = min(max((2**31 - 1) // per, 1), L)
    sum64 = L * per + (1 << (F + 1)) > 2**31 - 1
    # a zero C brings e_zero in by itself, a nonzero one an exponent of at least C's emin: zero products' e_zero
    # counts only above that (the later blocks' C emin: a first block's c_input_format, narrower, has a higher one)
    const = dict(FAST=False, CHUNK=chunk, SUM64=sum64, EZ_LIVE=not late and (block.e_zero or 0) > block.c_format.emin)
    if (block.product_exponent == "normalized" or block.input_format.precision + block.b_format.precision > 24
            or not 1 <= F <= 28 or (late and (L % block.groups or L // block.groups > chunk))
            or (not late and (block.e_zero or 0) > F + 126)):
        return const
    top = min(block.c_format.emax, 127) - 1 if late else 126  # the largest exponent sum of a product
    ranges = []
    for x, fmt in ((a, block.input_format), (b, block.b_format)):
        lo, hi = int(np.floor(np.log2(fmt.smallest_subnormal))), fmt.emax
        if x is not None and not (lo >= -126 and 2 * lo >= F - 127 and 2 * hi <= top):
            r = _exponents(x)
            if r is None:  # no nonzero finite value: every product is zero
                return dict(const, FAST=True)
            lo, hi = r
        ranges.append((lo, hi))
    (lo_a, hi_a), (lo_b, hi_b) = ranges
    fast = min(lo_a, lo_b) >= -126 and lo_a + lo_b >= F - 127 and hi_a + hi_b <= top
    return dict(const, FAST=fast)


def grid_path(model: Model, width: int) -> dict[str, Any] | None:
    """The :class:`Block` fields of the truncated-fused fast path's grid sum (:mod:`.triton_kernel`, "the grid path",
    where the argument is written) for ``model`` at steps of ``width`` products: GRID and CBIAS (the count's code
    biases, 0 where the cut floors), None where it does not hold.  It needs product exponents ``"max"``, F + ceil(log2
    L) <= 20, the least exponent sum of a nonzero product (the formats' emins) less F at least -149 and every product
    below 2**103; cutting toward zero, the count: products in the plan's order, blocks and steps of whole quads of
    lanes, each format's lowest-set-bit places (biased by its smallest subnormal's) within 0 .. 31 (fp8: e4m3 0 .. 17,
    e5m2 0 .. 31).  The kernel takes it on the fast path where no A or B value is NaN or infinite."""
    m = model.arithmetic_model()
    s = schedule(m)
    block = s.block
    F, L = block.fraction_bits, m.block_width
    if block.family is not Family.TRUNCATED_FUSED or block.product_exponent == "normalized" or F is None or not L:
        return None
    fa, fb = block.input_format, block.b_format
    if F + (L - 1).bit_length() > 20 or fa.emin + fb.emin - F < -149 or fa.emax + fb.emax + 2 > 103:
        return None
    if block.alignment is Alignment.FLOOR:
        return dict(GRID=True, CBIAS=0)
    bias = [-int(np.log2(f.smallest_subnormal)) for f in (fa, fb)]
    if s.ordered or L % 4 or width % 4 or any(f.emax + b > 31 for f, b in zip((fa, fb), bias)):
        return None
    return dict(GRID=True, CBIAS=sum(bias))


def _grid_codes(x: Any, fmt: Any, axis: int, kp: int) -> Any:
    """The count's codes of ``x`` (float32, its values in ``fmt``) along its K axis ``axis`` (1 for A (m, k),
    0 for B (k, n)), K padded with zeros to ``kp`` (the plan's whole steps): per quad of lanes two int32 words
    (interleaved along that axis): the lanes' lowest-set-bit places plus the format's bias (63 for a zero),
    one byte each, lane i in byte i, and their signs in bit 7 of each byte."""
    torch = _torch()
    k = x.shape[axis]
    pad = kp - k
    xt = x if axis == 1 else x.t()
    if pad:
        xt = torch.nn.functional.pad(xt, (0, pad))
    bits = xt.contiguous().view(torch.int32)
    ef = (bits >> 23) & 0xFF
    sig = torch.where(ef > 0, (bits & 0x7FFFFF) | 0x800000, bits & 0x7FFFFF)
    low = torch.frexp((sig & -sig).to(torch.float32)).exponent - 1  # the lowest set bit of the significand
    place = torch.where(ef > 0, ef - 150, torch.full_like(ef, -149)) + low
    code = torch.where(sig == 0, 63, place - int(np.log2(fmt.smallest_subnormal)))
    sign = (bits < 0).to(torch.int32) << 7
    shifts = torch.arange(4, device=x.device, dtype=torch.int32) * 8
    words = [(v.reshape(v.shape[0], -1, 4) << shifts).sum(-1, dtype=torch.int32) for v in (code, sign)]
    out = torch.stack(words, dim=-1).reshape(xt.shape[0], -1)
    return out if axis == 1 else out.t().contiguous()


def scaled_fast_constants(model: Model) -> dict[str, Any]:
    """The block-scaled kernel's fast-path parameters (:mod:`.triton_scaled`, its fast path, where the bounds
    are proved): FAST where that path computes ``model`` bit for bit on every value of its formats (no look at
    the operands), U (lanes per unit: products sharing one pair of scales, or one group), and WHY (None where
    FAST, else the clause that refuses it).  FAST needs a model the kernel runs (:func:`_scaled_reason`),
    exact zeros +0 or a result format without -0 (the fast path keeps no term signs), A's and B's finite
    nonzero values binary32 normals, the lowest last place LO of a product at least -126, the bits of a
    term's significand (the product, Pa + Pb, or a group's exact sum, H - LO with G max|a| max|b| < 2**H)
    plus the scales' 2 Ps at most 24, a scale block of a power of two holding whole groups: every preset."""
    m = model.arithmetic_model()
    if not m.block_scaled:
        return dict(FAST=False, U=1, WHY="it is not block-scaled")
    why = _scaled_reason(m)
    if why is not None:
        return dict(FAST=False, U=1, WHY=why)
    block = schedule(m).block
    fa, fb, fs = block.input_format, block.b_format, block.scale_format
    L, G, SB = block.block_width or 1, block.option("scale_group") or 0, block.option("scale_block") or 1
    lo = scaled.lowest_bit(fa) + scaled.lowest_bit(fb)
    if G:
        h = int(np.floor(np.log2(G * float(fa.max) * float(fb.max)))) + 1  # G max|a| max|b| < 2**h
        bits = h - lo
    else:
        bits = fa.precision + fb.precision
    if block.exact_zero != "positive" and block.result_format.has_negative_zero:
        why = "it keeps no term signs for the IEEE sign of an exact zero (exact_zero='ieee')"
    elif min(fa.smallest_subnormal, fb.smallest_subnormal) < 2.0**-126 or lo < -126:
        why = f"its products reach below binary32's normal range (2**{lo})"
    elif bits + 2 * fs.precision > 24:
        why = f"a term's significand takes {bits} + 2 x {fs.precision} bits, more than binary32's 24"
    elif SB & (SB - 1) or (G and SB % G):
        why = f"its scale block ({SB}) is not a power of two holding whole groups of {G}"
    return dict(FAST=why is None, U=(G or min(SB, L)) if why is None else 1, WHY=why)


def _exponent_codes(a: Any, b: Any, block: Block, p: Plan, specials: bool) -> Any:
    """The fast path's first-pass codes of A and B (:func:`.triton_kernel._pair_max`), each value decoded once:
    ``E_fmt + CODE_BIAS`` (the exponent field raised to emin), 0 for zeros, non-finite values and products past
    K, in the steps' product order, two lanes of a block a word (lane 2i low; 1 high past an odd L); A's (m,
    words padded to 16), then B's (words, N padded to 4), in one buffer, returned as A's view."""
    _kernel()  # the kernel modules, imported in this process's mode
    from . import triton_kernel

    torch, L = _torch(), block.L
    (m, k), n, lw = a.shape, b.shape[1], (L + 1) // 2
    idx = torch.arange(p.padded, device=a.device)
    if p.order is not None:  # lane i of a step reads its product order[i]
        idx = (idx.view(-1, p.width)[:, :1] + _order(tuple(p.order), a.device)[None, :]).reshape(-1)

    def words(x: Any, emin: int) -> Any:  # (k, r) values -> (KP / L * lw, r) words
        ef = (x.view(torch.int32) >> 23) & 0xFF
        none = (ef == 0) | ((ef == 255) & specials)
        c = torch.where(none, 0, ef.clamp(min=emin + 127) + (triton_kernel.CODE_BIAS.value - 127)).short()
        c = torch.cat([c, c.new_zeros(1, c.shape[1])])[idx.clamp(max=k)]  # past K: the zero row
        c = torch.nn.functional.pad(c.view(-1, L, c.shape[1]), (0, 0, 0, 2 * lw - L), value=1)
        return (c[:, 0::2].int() | (c[:, 1::2].int() << 16)).reshape(-1, c.shape[2])

    (wa, wb), nw = (words(a.t(), block.A_EMIN), words(b, block.B_EMIN)), p.padded // L * lw
    start = m * -(-nw // 16) * 16  # rows of A's words padded to 16: their stride specializes as A's does
    e = torch.empty(start + nw * -(-n // 4) * 4, dtype=torch.int32, device=a.device)
    e[:start].view(m, -1)[:, :nw].copy_(wa.t())
    e[start:].view(nw, -1)[:, :n].copy_(wb)
    return e[:start].view(m, -1)


def _path(m: Model, a: Any, b: Any, fast: bool | None, grid: bool | None = None,
          specials: bool = False, width: int = 0) -> dict[str, Any]:
    """The :class:`Block` fields of the path ``fast`` and ``grid`` ask for (see :func:`gemm_tensors`) on these
    operands."""
    if m.family in STEP_FAMILIES:
        if fast:
            raise ArgumentError("fast", True, f"the fast path runs the truncated-fused and late-c families, not "
                                f"{m.family.value}", use={"fast": None})
        return {}
    if m.block_scaled:
        path = scaled_fast_constants(m)
        if fast and not path["FAST"]:
            raise ArgumentError("fast", True, "the block-scaled fast path does not hold "
                                f"{m.summary()}: {path['WHY']}", use={"fast": None})
        return dict(FAST=path["FAST"] and fast is not False, U=path["U"])
    path = fast_constants(m, a, b) if fast is not False else dict(fast_constants(m), FAST=False)
    if fast and not path["FAST"]:
        raise ArgumentError("fast", True, f"the fast path does not hold {m.summary()} on these operands exactly "
                            "(see fast_constants)", use={"fast": None})
    fields = grid_path(m, width) if path["FAST"] and not specials and grid is not False else None
    if grid and fields is None:
        raise ArgumentError("grid", True, f"the grid sum does not hold {m.summary()} on these operands exactly "
                            "(see grid_path: no NaN or infinity in A and B, and the fast path)", use={"grid": None})
    return dict(path, **(fields or {}))


def _tile(B: Block, device: Any, m: int, n: int, block_m: int | None, block_n: int | None,
          num_warps: int | None) -> tuple[int, int, int]:
    """The launch's (BLOCK_M, BLOCK_N, warps): those given, else the block's defaults (on a GPU the best of
    bench_gpu.py's tile sweep and of ptxas's registers, data/hardware/README.md; under the interpreter
    16 x 16, block-scaled no larger than D)."""
    cpu = device.type == "cpu"
    fast = B.FAST and not cpu
    if B.FAMILY == Family.SCALED_FUSED.name:
        big = 64 if fast else 16
        size = (min(big, 1 << (m - 1).bit_length()), min(big, 1 << (n - 1).bit_length())) if cpu else (big, big)
    elif B.FAMILY in (f.name for f in STEP_FAMILIES):
        size = (16, 16) if cpu or B.FAMILY == Family.EXACT_FUSED.name else (32, 32)
    else:
        size = (128, 64) if fast else (16, 16)
    return block_m or size[0], block_n or size[1], num_warps or (8 if fast else 4)


@lru_cache(maxsize=64)
def _order(idx: tuple[int, ...], device: Any) -> Any:
    """The int32 tensor of a product order on ``device``, made once (else a host-to-device copy per call)."""
    return _torch().tensor(idx, dtype=_torch().int32, device=device)


@lru_cache(maxsize=256)
def _configured(m: Model, specials: bool) -> Kernel:
    """:func:`_config` of an arithmetic model, made once per (model, specials): it depends on them only."""
    return _config(m, specials)


#: the torch dtypes of A and B the kernel loads as they are (1, 2 or 4 bytes a value) and widens in registers
#: (:func:`.triton_kernel.widen`: exact, each holds binary32 values only); bf.gemm's other tensors come as float32
OPERAND_DTYPES = ("float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")
#: whether bf.gemm hands its tensors of those dtypes to the kernel as they are (False: as float32 copies).  Off
#: until a GPU measures the trade (ptxas, sm_90: e4m3 1.875 bytes but 4.41 instructions a simulated MAC, against
#: 3.0 and 3.65 from float32; bench_gpu.py's sweep times both): the loads' count is the same, only their width
STORAGE_LOADS = False


def _finite(a: Any, b: Any) -> bool:
    """Whether tensors ``a`` and ``b`` hold no NaN or infinity: one pass over each, one small read back."""
    torch = _torch()
    return bool(torch.isfinite(a).all() & torch.isfinite(b).all())


def _launch(S: Kernel, p: Plan, a: Any, b: Any, c: Any, tile: tuple[int, int, int], ea: Any = None, sa: Any = None,
            sb: Any = None) -> Any:
    """D (a new float32 tensor) = a @ b + c by the kernel of structure ``S`` on the call's plan ``p``; ``ea``
    A's exponent codes (the fast path), ``sa``, ``sb`` the scales (block-scaled models)."""
    torch = _torch()
    (m, k), n = a.shape, b.shape[1]
    d = torch.empty((m, n), dtype=torch.float32, device=a.device)
    if m == 0 or n == 0:
        return d
    idx = p.order if p.order is not None else range(p.width) if S.BLOCK.ORDERED else [0]  # a natural order
    order = _order(tuple(idx), a.device)  # read as given where ORDERED
    ea, sa, sb = (a if x is None else x for x in (ea, sa, sb))  # (unread where absent)
    strides = tuple(s for x in (a, b, c, d, ea, sa, sb) for s in x.stride())
    bm, bn, warps = tile
    even = m % bm == 0 and n % bn == 0 and k == p.padded  # no masks: tiles divide M and N, no product past K
    _kernel()[(-(-m // bm), -(-n // bn))](a, b, c, d, order, ea, sa, sb, m, n, k, p.padded, p.width, p.block_width,
                                         strides, S=S, BLOCK_M=bm, BLOCK_N=bn, EVEN=even, num_warps=warps)
    return d


def _operands(a: Any, b: Any, c: Any, sa: Any = None, sb: Any = None, per: int = 1) -> tuple[int, int, int]:
    """(m, k, n), the operands checked where they enter (the kernel reads any strides, broadcast views too, and
    would read past a short operand): 2-D tensors of one device, float32 (a and b without scales: of
    OPERAND_DTYPES), b (k, n), c (m, n), sa, sb as B, C."""
    torch, named = _torch(), {"a": a, "b": b, "c": c, **({} if sa is None else {"sa": sa, "sb": sb})}
    for name, x in named.items():
        dtypes = OPERAND_DTYPES if name in "ab" and sa is None else ("float32",)
        if not isinstance(x, torch.Tensor) or str(x.dtype).removeprefix("torch.") not in dtypes or x.dim() != 2:
            raise ArgumentError(name, Shown(f"<{x.dim()}-D {x.dtype}>" if isinstance(x, torch.Tensor) else
                                            f"<{type(x).__name__}>"), "must be a 2-D torch tensor of dtype "
                                + " or ".join(dtypes))
        if x.device != a.device or (x.device.type != "cuda" and not interpreting()):
            raise ArgumentError(name, Shown(f"<on {x.device}>"), "every operand on one device, a CUDA GPU (or the CPU "
                                f"under Triton's interpreter, TRITON_INTERPRET=1); a is on {a.device}")
    (m, k), n = a.shape, b.shape[1]
    if k % per:
        raise ArgumentError("a", Shown(f"<shape {(m, k)}>"), f"k = {k} must be a multiple of the scale block {per}")
    for (name, x), want in zip(named.items(), ((m, k), (k, n), (m, n), (m, k // per), (k // per, n))):
        if tuple(x.shape) != want:
            raise ArgumentError(name, Shown(f"<shape {tuple(x.shape)}>"), f"must have shape {want} with a {(m, k)}"
                                + (f" (one scale per {per} products)" if per > 1 else ""))
    return m, k, n


def gemm_tensors(model: Model, a: Any, b: Any, c: Any, *, specials: bool | None = None,
                 block_m: int | None = None, block_n: int | None = None, num_warps: int | None = None,
                 fast: bool | None = None, grid: bool | None = None) -> Any:
    """D = a @ b + c by the kernel, on torch tensors of one device (the GPU, or the CPU under the interpreter):
    ``a`` (m, k) and ``b`` (k, n) float32 or in their storage dtype (OPERAND_DTYPES: fp16, bf16, fp8 e4m3fn
    and e5m2 are loaded as they are, 1-2 bytes a value, and widened in registers), ``c`` (m, n) float32, any
    strides (broadcast views too), shapes, dtypes and devices checked, values already in the model's formats
    and flushed where it flushes (not checked).
    Returns a new float32 tensor (m, n) of the result format's values; NaN results are float32 NaNs, whose bit
    pattern the caller writes per ``model.nan`` (:func:`blockfma.engine.api.finish` for numpy results).
    ``specials``: whether some ``a``/``b`` may be NaN or infinite (None: looked at; False skips that work in
    the kernel).  ``fast``: whether to take the fast path (:func:`fast_constants`; None: where it holds these
    operands exactly, False: the general one, True: refused where it does not hold); ``grid`` likewise for its
    grid sum (:func:`grid_path`; False: the int32 terms).  ``block_m``/``block_n`` (the tile of D one program
    computes, powers of two) and ``num_warps``: launch parameters (defaults: :func:`_tile`)."""
    _launch_arguments(block_m, block_n, num_warps, fast, grid)
    if model.block_scaled:
        raise ArgumentError("model", Shown(model.summary()), "is block-scaled: it takes the scales of A and B",
                            fix="call scaled_gemm_tensors(model, a, b, c, sa, sb)")
    rows, k, n = _operands(a, b, c)
    wa, wb = a.float(), b.float()  # the host's passes read float32 bits (temporaries); the kernel a and b as given
    if specials is None:
        specials = not _finite(wa, wb)
    m = model.arithmetic_model()
    p = plan(m, k)
    S = _configured(m, specials).path(**_path(m, wa, wb, fast, grid, specials, p.width))
    tile = _tile(S.BLOCK, a.device, rows, n, block_m, block_n, num_warps)
    ea = _exponent_codes(wa, wb, S.BLOCK, p, specials) if S.BLOCK.FAST and a.numel() and b.shape[1] else None
    if not S.BLOCK.GRID or S.BLOCK.FLOOR or not (a.numel() and b.shape[1]):
        return _launch(S, p, a, b, c, tile, ea=ea)
    block = schedule(m).block  # the count's codes of A and B
    return _launch(S, p, a, b, c, tile, ea=ea, sa=_grid_codes(wa, block.input_format, 1, p.padded),
                   sb=_grid_codes(wb, block.b_format, 0, p.padded))


def free_bytes(device: Any) -> int | None:
    """Bytes free on a CUDA ``device`` now (``torch.cuda.mem_get_info``), None for the CPU (the engine's
    own host-memory check covers it)."""
    if device.type != "cuda":
        return None
    return int(_torch().cuda.mem_get_info(device)[0])


# what gemm holds on the device: A and B (float32, and their int32 exponent codes on the fast path), C and D in float32
GEMM_BYTES = dict(operand_bytes=8, output_bytes=8, what="A and B with their exponent codes, C and D in float32")


def check_fits(m: int, k: int, n: int, device: Any, *, operand_bytes: int = 4, output_bytes: int = 8,
               what: str = "A, B, C and D in float32", batch: int = 1) -> None:
    """Refuse, before anything moves, a GEMM whose operands (``operand_bytes`` per element of A and B) and
    outputs (``output_bytes`` per element of D: C and D together) do not fit the device's free memory,
    naming the sizes, ``what`` they hold and the fix (MemoryError, as the CPU engine's check).  The
    defaults are this kernel's float32 A, B, C and D; ``batch`` GEMMs of that shape at once."""
    need = batch * (operand_bytes * (m * k + k * n) + output_bytes * m * n)
    have = free_bytes(device)
    if have is not None and need > have:
        gib = 2.0**30
        raise MemoryError(f"gemm {m}x{k}x{n}{f' (x{batch})' if batch > 1 else ''} on {device} needs about "
                          f"{need / gib:.2f} GiB of device memory ({what}) and {have / gib:.2f} GiB are free; split "
                          "the call into blocks of rows of A (or pass dask arrays: bf.gemm runs them tile by tile)")


def gemm(model: Model, A: np.ndarray, B: np.ndarray, C: np.ndarray, SA: np.ndarray | None = None,
         SB: np.ndarray | None = None, *, block_m: int | None = None, block_n: int | None = None,
         fast: bool | None = None) -> np.ndarray:
    """float64 D (m, n) = A (m, k) @ B (k, n) + C under ``model`` by the Triton kernel, with a block-scaled
    model's scales SA (m, k / scale_block) and SB (k / scale_block, n), sent one per scale block; values already
    checked, flushed and in the model's formats (as the engine registry hands them over).  ``fast``: as for
    :func:`gemm_tensors`.  A GEMM that cannot fit the device is refused first (:func:`check_fits`)."""
    _torch()  # torch installed (or its install hint) before anything else
    per = _config(model.arithmetic_model(), False).BLOCK.SB  # an unsupported model is refused before anything moves
    dev, (m, k) = _device(), A.shape
    fits = GEMM_BYTES if SA is None else dict(what="A, B and their scales, C and D in float32")
    check_fits(m, k + (0 if SA is None else k // per), B.shape[1], dev, **fits)
    specials = not (np.isfinite(A).all() and np.isfinite(B).all())
    ops = [_torch().from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(dev)  # exact: formats within binary32
           for x in (A, B, C) + (() if SA is None else (SA, SB))]
    run = gemm_tensors if SA is None else scaled_gemm_tensors
    return run(model, *ops, specials=specials, block_m=block_m, block_n=block_n, fast=fast).cpu().numpy().astype(
        np.float64)


def _launch_arguments(block_m: int | None, block_n: int | None, num_warps: int | None, fast: Any,
                      grid: Any = None) -> None:
    for name, v in (("block_m", block_m), ("block_n", block_n), ("num_warps", num_warps)):
        integer(name, v, least=1, most=256, none=True)
        if v is not None and v & (v - 1):
            raise ArgumentError(name, v, "must be a power of two", use={name: 1 << (v.bit_length() - 1)})
    for name, v in (("fast", fast), ("grid", grid)):
        if v is not None and not isinstance(v, (bool, np.bool_)):  # 0 and 1 are not switches here
            raise ArgumentError(name, v, "must be True, False or None (where it holds)")


def scaled_gemm_tensors(model: Model, a: Any, b: Any, c: Any, sa: Any, sb: Any, *, specials: bool | None = None,
                        block_m: int | None = None, block_n: int | None = None, num_warps: int | None = None,
                        fast: bool | None = None) -> Any:
    """D = a @ b + c of a block-scaled ``model`` by its kernel (:mod:`.triton_scaled`), on torch float32
    tensors of one device: ``a`` (m, k), ``b`` (k, n), ``c`` (m, n), any strides (shapes, dtypes and devices
    checked), values already in the model's formats, k a multiple of the scale block SB; their scales, values of
    the scale format (NaN allowed), one per scale block: ``sa`` (m, k / SB), ``sb`` (k / SB, n).  Returns a
    new float32 tensor (m, n) as :func:`gemm_tensors` does.  ``fast``: whether to take the fast path
    (:func:`scaled_fast_constants`; None: where it holds, False: the general path, True: refused where it
    does not hold).  ``block_m``/``block_n``/``num_warps``: as for :func:`gemm_tensors`."""
    _launch_arguments(block_m, block_n, num_warps, fast)
    if not model.block_scaled:
        raise ArgumentError("model", Shown(model.summary()), "is not block-scaled", fix="call gemm_tensors")
    m, k, n = _operands(a, b, c, sa, sb, model.option("scale_block"))
    if specials is None:
        specials = not _finite(a, b)
    mo = model.arithmetic_model()
    S = _configured(mo, specials).path(**_path(mo, a, b, fast))
    tile = _tile(S.BLOCK, a.device, m, n, block_m, block_n, num_warps)
    return _launch(S, plan(mo, k), a, b, c, tile, sa=sa, sb=sb)


def gpu_visible() -> bool:
    """Whether the compiled kernel can run here: Triton and torch installed, a CUDA GPU visible to torch, and
    Triton's interpreter off (under the interpreter ``backend="auto"`` never picks the kernel: it is slow)."""
    if interpreting() or not (optional.available("triton") and optional.available("torch")):
        return False
    return bool(_torch().cuda.is_available())
