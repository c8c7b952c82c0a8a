"""Algorithm families: one place for what a datapath family is, which parameters it has and who runs it.

A :class:`Family` holds everything the rest of the package needs to know about one family of datapaths:

* its **parameters**: the :class:`~blockfma.model.Model` fields that belong to it (``fraction_bits``,
  ``e_zero``, ...; the shared fields, formats, rounding, zeros, NaNs, C entry, apply to every family), the
  ones it requires, its own checks of a model, and its own extra parameters (:class:`Option`, held in
  ``Model.options``) where a user's family needs one the Model lacks;
* its **traits**: whether C is one of a block's terms (``fused``: then C may also enter after the blocks),
  whether a block's products may be permuted without changing its result (``symmetric``, used by the SMT
  layer's symmetry breaking), whether a model may leave ``block_width`` unset (one block for the whole dot
  product), whether it passes input NaN payloads on;
* its **implementations**, one block each, by engine (:data:`ENGINES`): the exact reference (required),
  the numpy engine, the array kernel that numpy and torch share, the compiled numba kernels, the SMT
  encoding.  Built-in families name them as ``"module:function"`` strings, loaded on first use, so that
  defining a family imports nothing heavy;
* how the **probe search** starts it: ``base(a, b, d, k)``, a model of the family for those formats.

What happens around a block over the K products (padding, product order, where C enters, what is stored) is the step
plan (:mod:`blockfma.plan`), the same for every family.  The built-in families (docs/semantics.md spells each out) are
registered below, in the order the probe search tries them; :func:`register` adds a user's own (docs/extending.md).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .formats import Format
    from .model import Model

__all__ = ["Family", "Option", "ENGINES", "SCALE_FORMATS", "register", "unregister", "families", "EngineMissing"]

#: the engines a family may give a block to, and what each expects (``a``, ``b``: the block's L inputs;
#: ``c``: its C, a value of ``model.c_format`` (C's exponent is read in that format); the result: a value of
#: ``model.output_format``, as the next block's C):
#:
#: * ``"reference"``: ``block(model, a, b, c) -> float``, Python floats in, every step exact (Fractions):
#:   the oracle, required;
#: * ``"numpy"``: ``block(model, a, b, c) -> ndarray``, float64 arrays ``(..., L)``, ``(..., L)``, ``(...)``
#:   (broadcasting), the result float64 ``(...)``; NaN as any float64 NaN;
#: * ``"array"``: ``kernel(xp, model, a, b, c, *, ea=None, eb=None, products=True, overflow=False)``, the
#:   same on numpy arrays (``xp`` is numpy) and torch tensors (``xp`` is torch): the GPU engine's kernel;
#: * ``"numba"``: an object with ``supports(model) -> bool`` and ``run(model, A, B, C, out, L)`` (compiled
#:   kernels over batches, see :mod:`blockfma.engine.fast`);
#: * ``"smt"``: ``block(model, a, b, c) -> Sym`` over :class:`blockfma.smt.encode.Sym` values.
ENGINES = ("reference", "numpy", "array", "numba", "smt")

Implementation = str | Callable[..., Any] | Any


class EngineMissing(LookupError):
    """A family has no implementation for an engine (the message names the family, the engine and what
    runs it instead)."""


@dataclass(frozen=True)
class Option:
    """A parameter a family adds to the Model's fields, held in ``Model.options`` (name -> value).

    ``default``: its value when a model leaves it out; ``domain(formats, k, model)``: the values the probe
    search tries (``formats`` has ``a``, ``b``, ``d``), or a fixed sequence; ``check(value)``: a message
    saying what is wrong with a value, or None."""

    name: str
    default: Any
    doc: str = ""
    domain: Callable[..., Iterable[Any]] | tuple[Any, ...] = ()
    check: Callable[[Any], str | None] | None = None

    def values(self, formats: Any, k: int, model: Model) -> list[Any]:
        """The values the probe search tries for this option."""
        return list(self.domain(formats, k, model) if callable(self.domain) else self.domain)


class _Registry(type):
    """Family's metaclass: ``Family("late-c")`` (one argument) looks a registered family up by name, as an
    Enum would, and ``iter(Family)`` walks the registered families; any other call defines a family."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs:
            return cls.get(args[0])
        return super().__call__(*args, **kwargs)

    def __iter__(cls) -> Iterator[Family]:
        return iter(list(_REGISTRY.values()))

    def __len__(cls) -> int:
        return len(_REGISTRY)

    def __contains__(cls, item: object) -> bool:
        return any(item is f for f in _REGISTRY.values())


@dataclass(frozen=True, eq=False)
class Family(metaclass=_Registry):
    """One family of datapaths: its parameters, traits and implementations (see the module docstring).

    Families compare by identity (each is registered once, by name); ``name`` is what JSON records hold."""

    name: str
    doc: str
    reference: Implementation
    parameters: tuple[str, ...] = ()
    required: tuple[str, ...] = ()
    options: tuple[Option, ...] = ()
    fused: bool = False
    symmetric: bool | Callable[[Model], bool] = False
    unblocked: bool = False
    propagates_nan: bool = False
    check: Callable[[Model], Iterable[str]] | None = None
    numpy: Implementation | None = None
    array: Implementation | None = None
    numba: Implementation | None = None
    smt: Implementation | None = None
    base: Callable[[Format, Format, Format, int], Model | None] | None = None
    searched: tuple[str, ...] = ()
    _loaded: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip() or self.name != self.name.strip().lower():
            raise ValueError(f"a family's name is a lower-case word like 'tree-fused', not {self.name!r}")
        if self.reference is None:
            raise ValueError(f"family {self.name!r}: an exact reference block is required (reference=...)")
        names = [o.name for o in self.options]
        if len(set(names)) != len(names):
            raise ValueError(f"family {self.name!r}: option names repeat: {names}")

    # --- Enum-like spelling -------------------------------------------------------------------------------
    @property
    def value(self) -> str:
        """The family's name (as ``Family`` members had it when Family was an Enum)."""
        return self.name

    def __repr__(self) -> str:
        return f"<Family {self.name}>"

    def __reduce__(self) -> tuple[Any, ...]:  # pickles (dask, multiprocessing) as a lookup by name
        return (Family.get, (self.name,))

    @classmethod
    def get(cls, family: Family | str) -> Family:
        """A registered family by name (or the family itself); ValueError naming the known ones."""
        if isinstance(family, Family):
            return family
        key = family.strip().lower() if isinstance(family, str) else family
        if key in _REGISTRY:
            return _REGISTRY[key]
        raise ValueError(f"unknown family {family!r}; registered: {', '.join(_REGISTRY)} "
                         "(blockfma.family.register adds one)")

    # --- implementations ----------------------------------------------------------------------------------
    def has(self, engine: str) -> bool:
        """Whether the family gives a block to ``engine`` (one of :data:`ENGINES`)."""
        return getattr(self, _engine(engine)) is not None

    def implementation(self, engine: str) -> Any:
        """The family's code for ``engine`` (loaded on first use); :class:`EngineMissing` if it has none."""
        attr = _engine(engine)
        if attr not in self._loaded:
            impl = getattr(self, attr)
            if impl is None:
                raise EngineMissing(f"the {self.name} family has no {engine} implementation (it has: "
                                    f"{', '.join(self.engines)})")
            self._loaded[attr] = _load(impl) if isinstance(impl, str) else impl
        return self._loaded[attr]

    @property
    def engines(self) -> tuple[str, ...]:
        """The engines that run the family's blocks."""
        return tuple(e for e in ENGINES if self.has(e))

    def option(self, name: str) -> Option:
        for o in self.options:
            if o.name == name:
                return o
        raise KeyError(name)

    def is_symmetric(self, model: Model) -> bool:
        """Whether permuting the products inside one block of ``model`` leaves the block's result unchanged."""
        return self.symmetric(model) if callable(self.symmetric) else bool(self.symmetric)


def _engine(name: str) -> str:
    if name not in ENGINES:
        raise ValueError(f"unknown engine {name!r}; engines: {', '.join(ENGINES)}")
    return name


def _load(spec: str) -> Any:
    module, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module), attr)


@dataclass(frozen=True)
class _Named:
    """A function named as implementations are (``"module:attr"``), imported at its first call: a family's
    ``base`` builds a Model, whose module imports this one."""

    spec: str

    def __call__(self, *args: Any) -> Any:
        return _load(self.spec)(*args)


_REGISTRY: dict[str, Family] = {}


def register(family: Family, *, replace: bool = False) -> Family:
    """Add a family to the registry (by its name) and return it; ``replace=True`` swaps a family of the same
    name (a user's redefinition in a notebook), otherwise a second family of a taken name is an error."""
    if not isinstance(family, Family):
        raise TypeError(f"register takes a blockfma.family.Family, not {type(family).__name__}")
    old = _REGISTRY.get(family.name)
    if old is not None and old is not family and not replace:
        raise ValueError(f"a family named {family.name!r} is registered already; pick another name or pass "
                         "replace=True")
    _REGISTRY[family.name] = family
    return family


def unregister(family: Family | str) -> None:
    """Remove a user's family (built-in families stay)."""
    fam = Family.get(family)
    if fam in _BUILTIN:
        raise ValueError(f"{fam.name} is a built-in family and stays registered")
    del _REGISTRY[fam.name]


def families() -> list[Family]:
    """Every registered family, built-in ones first, in the order the probe search tries them."""
    return list(_REGISTRY.values())


def family_parameters() -> Mapping[str, tuple[Family, ...]]:
    """For every family-specific Model field, the registered families that have it."""
    out: dict[str, list[Family]] = {}
    for fam in _REGISTRY.values():
        for p in fam.parameters:
            out.setdefault(p, []).append(fam)
    return {p: tuple(fs) for p, fs in out.items()}


# --- the built-in families ------------------------------------------------------------------------------------
def _fraction_bits(m: Model) -> Iterator[str]:
    F = m.fraction_bits
    if not (isinstance(F, int) and F >= 0):
        yield f"fraction_bits (F) must be a non-negative integer, not {F!r}"
    elif F > 52:
        yield "fraction_bits above 52 are not supported (the engine keeps sums in 64-bit integers)"


def _check_truncated_fused(m: Model) -> Iterator[str]:
    yield from _fraction_bits(m)
    if not isinstance(m.e_zero, int):
        yield "e_zero must be given (the exponent of zero terms)"
    elif not -2400 <= m.e_zero <= 2400:
        yield f"e_zero must lie in [-2400, 2400] (the presets use -133 to -19), not {m.e_zero}"
    if m.carry_bits is not None and m.carry_bits < 0:
        yield "carry_bits must be None or >= 0"


def _check_late_c(m: Model) -> Iterator[str]:
    yield from _fraction_bits(m)
    F2 = m.late_fraction_bits
    if not (isinstance(F2, int) and F2 >= (m.fraction_bits or 0)):
        yield "late_fraction_bits (F2) must be an integer >= fraction_bits"
    elif F2 > 52:
        yield "late_fraction_bits above 52 are not supported (the engine keeps sums in float64)"
    if m.groups not in (1, 2):
        yield "groups must be 1 or 2 (even/odd products)"
    elif m.block_width is None or m.block_width % m.groups:
        yield "block_width must be a multiple of groups"


def _check_pairwise(m: Model) -> Iterator[str]:
    bw = m.block_width or 0
    if bw & (bw - 1):
        yield "the pairwise family needs a power-of-two block_width"


def _check_fma_chain(m: Model) -> Iterator[str]:
    if m.block_width != 1:
        yield "an FMA chain has block_width 1"


def _check_amx(m: Model) -> Iterator[str]:
    if m.block_width is None or m.block_width % 2:
        yield "AMX needs an even block_width"


def _check_bfdot(m: Model) -> Iterator[str]:
    if m.block_width != 2:
        yield "BFDOT has block_width 2"


#: the scale formats a block-scaled unit reads (PTX ISA, "Block scaling": .ue8m0 for MX, .ue4m3 for NVFP4)
SCALE_FORMATS = ("e8m0fnu", "ue4m3")


def _check_scale_format(x: Any) -> str | None:
    return None if x in SCALE_FORMATS else f"must be one of {', '.join(SCALE_FORMATS)}, not {x!r}"


def _check_scale_block(x: Any) -> str | None:
    ok = isinstance(x, int) and not isinstance(x, bool) and x >= 1
    return None if ok else f"must be a positive integer (16 or 32 on the hardware), not {x!r}"


def _check_scale_group(x: Any) -> str | None:
    ok = x is None or (isinstance(x, int) and not isinstance(x, bool) and x >= 1)
    return None if ok else f"must be None (each product scaled alone) or a positive integer, not {x!r}"


def _no_base(a: Format, b: Format, d: Format, k: int) -> Model | None:
    """No start for the plain probe search: block-scaled models take scales, which its targets do not send
    (:func:`blockfma.probes.scaled.probe_scaled` infers them, with feature tests of the scale path)."""
    return None


def _check_scaled_fused(m: Model) -> Iterator[str]:
    yield from _check_truncated_fused(m)
    block, group = m.option("scale_block"), m.option("scale_group")
    if m.block_width is None or not isinstance(block, int) or m.block_width % block:
        yield f"block_width must be a multiple of the scale block ({block})"
    if isinstance(group, int) and isinstance(block, int) and block % group:
        yield f"option scale_group: {group} must divide the scale block {block}"
    if m.c_entry != "fused" or m.accumulator_format is not None or m.instruction_k is not None \
            or m.product_order != "natural" or m.unpack_format is not None:
        yield "a block-scaled model fuses C into each block (c_entry='fused', no accumulator_format, " \
              "instruction_k, product_order or unpack_format)"


def _late_c_symmetric(m: Model) -> bool:
    return m.groups == 1  # with groups=2 a product's place (even or odd) matters


_REF, _KER, _ARR, _FAST, _SMT = ("blockfma.reference:", "blockfma.engine.kernels:", "blockfma.engine.array:",
                                 "blockfma.engine.fast.runners:", "blockfma.smt.encode:")

# the exact families first: where the probe's rows cannot tell them from a truncating datapath with a wide
# alignment (an FMA chain against L = 1 with F = 34), the search keeps the model with fewer parameters
FMA_CHAIN = register(Family(
    "fma-chain", "a chain of IEEE fused multiply-adds in the output format: d = fma(a_i, b_i, d)",
    reference=_REF + "fma_chain_block", numpy=_KER + "fma_chain", numba=_FAST + "FMA_CHAIN",
    smt=_SMT + "fma_chain_block", check=_check_fma_chain, propagates_nan=True))
EXACT_FUSED = register(Family(
    "exact-fused", "the exact sum of L products and C, rounded once (block_width=None: one block)",
    reference=_REF + "exact_fused_block", numpy=_KER + "exact_fused", array=_ARR + "exact_fused",
    numba=_FAST + "EXACT_FUSED", smt=_SMT + "exact_fused_block", fused=True, symmetric=True, unblocked=True))
TRUNCATED_FUSED = register(Family(
    "truncated-fused", "exact products aligned to the block's largest exponent, cut at F bits, summed, "
    "rounded once",
    reference=_REF + "truncated_fused_block", array=_ARR + "truncated_fused", numba=_FAST + "TRUNCATED_FUSED",
    smt=_SMT + "truncated_fused_block",
    parameters=("fraction_bits", "e_zero", "alignment", "carry_bits", "product_exponent", "c_input_format"),
    required=("fraction_bits", "e_zero"), searched=("output_fraction_bits",), fused=True, symmetric=True,
    check=_check_truncated_fused, base=_Named("blockfma.model:truncated_fused_base")))
LATE_C = register(Family(
    "late-c", "products cut at F below their own maximum and summed; C added late, at F2 bits",
    reference=_REF + "late_c_block", array=_ARR + "late_c", numba=_FAST + "LATE_C", smt=_SMT + "late_c_block",
    parameters=("fraction_bits", "alignment", "late_fraction_bits", "groups", "late_cut"),
    required=("fraction_bits", "late_fraction_bits"), fused=True, symmetric=_late_c_symmetric,
    check=_check_late_c))
PAIRWISE = register(Family(
    "pairwise", "products rounded to the output format, a binary tree of IEEE additions, then C",
    reference=_REF + "pairwise_block", numpy=_KER + "pairwise", numba=_FAST + "PAIRWISE",
    smt=_SMT + "pairwise_block", check=_check_pairwise))
BFDOT = register(Family(
    "bfdot", "Arm BFDOT (FPCR.EBF = 0): per pair two products and their sum rounded to odd, then C",
    reference=_REF + "bfdot_block", numpy=_KER + "bfdot", numba=_FAST + "BFDOT", smt=_SMT + "bfdot_block",
    check=_check_bfdot))
AMX = register(Family(
    "amx", "Intel AMX TDPBF16PS: even and odd fp32 partial sums of FMAs, then C + (even + odd)",
    reference=_REF + "amx_block", numpy=_KER + "amx", numba=_FAST + "AMX", smt=_SMT + "amx_block",
    check=_check_amx))

SCALED_FUSED = register(Family(
    "scaled-fused", "block-scaled truncated-fused (PTX mma.block_scale, tcgen05.mma.block_scale): each "
    "product, or each exact sum of scale_group products, takes one scale of A and one of B per scale_block "
    "products along K, their exponents added to its own; then aligned, cut at F, summed, rounded once",
    reference=_REF + "scaled_fused_block", smt=_SMT + "scaled_fused_block",
    parameters=("fraction_bits", "e_zero", "alignment", "carry_bits"),
    required=("fraction_bits", "e_zero"), fused=True,
    options=(Option("scale_format", "e8m0fnu", "the scales' format: e8m0fnu (ue8m0, MX) or ue4m3 (NVFP4)",
                    SCALE_FORMATS, _check_scale_format),
             Option("scale_block", 32, "products along K that share one scale of A and one of B", (16, 32),
                    _check_scale_block),
             Option("scale_group", None, "None: each product takes its scales (MMA-Sim's MMA_ST_FDPA); G: "
                    "every G products are summed exactly first, the sum's exponent being the scales' alone "
                    "(MMA_GST_FDPA)", (None, 16), _check_scale_group)),
    check=_check_scaled_fused, base=_no_base))

_BUILTIN = tuple(_REGISTRY.values())

# Family.TRUNCATED_FUSED and the others, as the Enum spelled them
for _fam in _BUILTIN:
    setattr(Family, _fam.name.upper().replace("-", "_"), _fam)
