"""Side conditions on the inputs of a query (Valpey et al.'s "all inputs positive", exponent ranges, zeros at
given positions, products not representable in fp16, ...).

A constraint is any callable ``f(inputs) -> BoolRef | list[BoolRef]`` over an :class:`Inputs` (the symbolic
inputs of one query); the functions here build the common ones, and ``all_of`` joins several.

    >>> from blockfma import smt
    >>> cons = smt.constraints.all_of(smt.constraints.positive(), smt.constraints.zeros(a=[2, 3]))
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import z3

from .. import formats as _formats
from ..arguments import ArgumentError
from ..formats import Format
from . import encode as _enc
from .bv import conj, disj, exponent, msb, shl, shr
from .encode import Sym

__all__ = ["Inputs", "Constraint", "apply", "all_of", "finite", "positive", "nonnegative", "exponents", "zeros",
           "nonzero", "normal", "scales", "check_positions", "product_not_in", "product_in_range", "sum_in",
           "representable"]


@dataclass(frozen=True)
class Inputs:
    """The symbolic inputs of a query: bit-vectors (``bits_a``, ``bits_b``, ``bits_c``) and their decoded
    values (``a``, ``b``: lists of :class:`~blockfma.smt.encode.Sym`; ``c``)."""

    bits_a: Sequence[z3.BitVecRef]
    bits_b: Sequence[z3.BitVecRef]
    bits_c: z3.BitVecRef
    a: Sequence[Sym]
    b: Sequence[Sym]
    c: Sym
    # a block-scaled model's scales of A and B (one per scale block; empty for other models)
    bits_sa: Sequence[z3.BitVecRef] = ()
    bits_sb: Sequence[z3.BitVecRef] = ()
    sa: Sequence[Sym] = ()
    sb: Sequence[Sym] = ()

    @classmethod
    def of(cls, fa: Format, fb: Format, fc: Format, bits_a: Sequence[z3.BitVecRef],
           bits_b: Sequence[z3.BitVecRef], bits_c: z3.BitVecRef, fs: Format | None = None,
           bits_sa: Sequence[z3.BitVecRef] = (), bits_sb: Sequence[z3.BitVecRef] = ()) -> Inputs:
        sa = [_enc.decode(fs, x) for x in bits_sa] if fs is not None else []
        sb = [_enc.decode(fs, x) for x in bits_sb] if fs is not None else []
        return cls(bits_a, bits_b, bits_c, [_enc.decode(fa, x) for x in bits_a], [_enc.decode(fb, y) for y in bits_b],
                   _enc.decode(fc, bits_c), list(bits_sa), list(bits_sb), sa, sb)

    @property
    def variables(self) -> list[z3.BitVecRef]:
        """Every input bit-vector: a, b, c, then the scales."""
        return [*self.bits_a, *self.bits_b, self.bits_c, *self.bits_sa, *self.bits_sb]

    @property
    def k(self) -> int:
        return len(self.a)

    def values(self, which: str = "abc") -> list[Sym]:
        """The inputs named by ``which`` ("a", "b", "c" or a combination)."""
        _which(which)
        out: list[Sym] = []
        if "a" in which:
            out += list(self.a)
        if "b" in which:
            out += list(self.b)
        if "c" in which:
            out.append(self.c)
        return out


Constraint = Callable[[Inputs], "z3.BoolRef | Sequence[z3.BoolRef]"]


def _which(which: str) -> str:
    """``which`` checked: a non-empty combination of "a", "b" and "c" (a typo must not constrain nothing)."""
    if not isinstance(which, str) or not which or set(which) - set("abc"):
        raise ArgumentError("which", which, 'must name inputs: "a", "b", "c" or a combination such as "ab"')
    return which


def check_positions(name: str, positions: Iterable[int] | None, k: int) -> list[int]:
    """Positions 0..k-1 (all of them for None), each checked to be an integer in range."""
    if positions is None:
        return list(range(k))
    listed = list(positions)
    for i in listed:
        if isinstance(i, bool) or not isinstance(i, numbers.Integral) or not 0 <= i < k:
            raise ArgumentError(name, listed, f"must hold positions 0 to {k - 1} (k = {k}), not {i!r}")
    return [int(i) for i in listed]


def apply(constraints: Constraint | Iterable[Constraint] | None, inputs: Inputs) -> list[z3.BoolRef]:
    """The formulas of one or several constraints over ``inputs``."""
    if constraints is None:
        return []
    if callable(constraints):
        constraints = [constraints]
    out: list[z3.BoolRef] = []
    for con in constraints:
        if not callable(con):
            raise ArgumentError("constraints", con, "is not a constraint (a function of the symbolic inputs)")
        got = con(inputs)
        listed = [got] if isinstance(got, z3.BoolRef) else list(got) if isinstance(got, (list, tuple)) else None
        if listed is None or not all(isinstance(x, z3.BoolRef) for x in listed):
            raise ArgumentError("constraints", con, f"returned {got!r}, not a z3 formula (BoolRef) or a list of "
                                "them")
        out += listed
    return out


def all_of(*constraints: Constraint) -> Constraint:
    """Every one of ``constraints``."""
    return lambda v: apply(list(constraints), v)


def finite(which: str = "abc") -> Constraint:
    """No NaN or infinity among the inputs ``which``."""
    _which(which)
    return lambda v: [z3.Not(disj(x.nan, x.inf)) for x in v.values(which)]


def nonzero(which: str = "abc") -> Constraint:
    """The inputs ``which`` are finite and nonzero."""
    _which(which)
    return lambda v: [z3.Not(disj(x.nan, x.inf, x.zero)) for x in v.values(which)]


def positive(which: str = "abc", positions: Iterable[int] | None = None) -> Constraint:
    """The inputs ``which`` (of a and b only those at ``positions``, default all) are finite and > 0
    (Valpey et al.'s Property 4)."""
    _which(which)
    positions = None if positions is None else list(positions)

    def f(v: Inputs) -> list[z3.BoolRef]:
        xs = [v.c] if "c" in which else []
        for name, vec in (("a", v.a), ("b", v.b)):
            if name in which:
                xs += [vec[i] for i in check_positions("positions", positions, v.k)]
        return [z3.Not(disj(x.nan, x.inf, x.zero, x.neg)) for x in xs]
    return f


def nonnegative(which: str = "abc") -> Constraint:
    """The inputs ``which`` are finite and +0 or > 0."""
    _which(which)
    return lambda v: [z3.Not(disj(x.nan, x.inf, x.neg)) for x in v.values(which)]


def normal(which: str = "abc") -> Constraint:
    """The nonzero inputs ``which`` are normal numbers (no subnormals)."""
    _which(which)

    def f(v: Inputs) -> list[z3.BoolRef]:
        out = []
        for x in v.values(which):
            top = z3.Extract(x.fmt.precision - 1, x.fmt.precision - 1, x.sig) == 1
            out.append(disj(x.zero, x.nan, x.inf, top))
        return out
    return f


def exponents(lo: int, hi: int, which: str = "ab") -> Constraint:
    """Every nonzero finite input ``which`` lies in [2**lo, 2**(hi + 1)) in magnitude (its exponent in
    [lo, hi]); Valpey et al. bound Property 5's inputs to 2**-15 .. 2**14."""
    if lo > hi:
        raise ValueError(f"exponents({lo}, {hi}): lo must not exceed hi")
    _which(which)

    def f(v: Inputs) -> list[z3.BoolRef]:
        out = []
        for x in v.values(which):
            lead = x.lsb + msb(x.sig)  # floor(log2 |x|), subnormals too
            out.append(disj(x.zero, conj(lead >= lo, lead <= hi)))
        return out
    return f


def zeros(a: Iterable[int] = (), b: Iterable[int] = (), c: bool = False) -> Constraint:
    """+0 at the given positions of a and b (and in C with ``c=True``)."""
    a, b = list(a), list(b)

    def f(v: Inputs) -> list[z3.BoolRef]:
        for i in a + b:
            if not 0 <= i < v.k:
                raise ValueError(f"zeros: position {i} is outside 0..{v.k - 1} (k = {v.k})")
        out = [v.bits_a[i] == 0 for i in a] + [v.bits_b[i] == 0 for i in b]
        if c:
            out.append(v.bits_c == 0)
        return out
    return f


def scales(lo: int | None = None, hi: int | None = None, *, nan: bool = False) -> Constraint:
    """A block-scaled model's scales: no NaN (unless ``nan``), and every nonzero scale's exponent in
    [lo, hi] (None: no bound); nothing for models without scales."""
    def f(v: Inputs) -> list[z3.BoolRef]:
        out = []
        for x in list(v.sa) + list(v.sb):
            lead = x.lsb + msb(x.sig)
            ok = [z3.BoolVal(True)]
            if lo is not None:
                ok.append(lead >= lo)
            if hi is not None:
                ok.append(lead <= hi)
            out.append(disj(x.zero, x.nan if nan else z3.BoolVal(False), conj(z3.Not(x.nan), *ok)))
        return out
    return f


def representable(fmt: Format | str, sig: z3.BitVecRef, lsb: z3.BitVecRef) -> z3.BoolRef:
    """Whether sig * 2**lsb (sig > 0) is a finite value of ``fmt``."""
    f = _formats.get(fmt)
    lead = lsb + msb(sig)
    quantum = z3.If(lead < f.emin, exponent(f.emin), lead) - (f.precision - 1)
    gap = quantum - lsb  # bits of sig below the format's quantum: they must be zero
    mask = shl(z3.BitVecVal(1, sig.size()), gap) - 1
    mask = z3.If(z3.UGE(gap, exponent(sig.size())), z3.BitVecVal((1 << sig.size()) - 1, sig.size()), mask)
    fits = disj(gap <= 0, (sig & mask) == 0)
    top = lead <= f.emax
    if f.nan == "fn":  # the all-ones significand of the top binade is NaN
        big = (1 << f.precision) - 1
        top = conj(top, z3.Not(conj(lead == f.emax, shr(sig, gap) == big)))
    return conj(fits, top)


def product_not_in(fmt: Format | str, positions: Iterable[int] | None = None) -> Constraint:
    """The products a_i * b_i (at ``positions``, default all) are nonzero, finite and not values of ``fmt``
    (Valpey et al.'s Property 1: a·b, c·d not in FP16)."""
    positions = None if positions is None else list(positions)

    def f(v: Inputs) -> list[z3.BoolRef]:
        out = []
        for i in check_positions("positions", positions, v.k):
            p = _enc.product(v.a[i], v.b[i])
            out.append(z3.Not(disj(v.a[i].nan, v.a[i].inf, v.b[i].nan, v.b[i].inf, p.zero)))
            out.append(z3.Not(representable(fmt, p.sig, p.lsb)))
        return out
    return f


def product_in_range(fmt: Format | str, positions: Iterable[int] | None = None) -> Constraint:
    """The products a_i * b_i (at ``positions``, default all) are finite and nonzero, and their magnitude
    lies in ``fmt``'s normal range [2**emin, 2**(emax + 1))."""
    f = _formats.get(fmt)
    positions = None if positions is None else list(positions)

    def g(v: Inputs) -> list[z3.BoolRef]:
        out = []
        for i in check_positions("positions", positions, v.k):
            p = _enc.product(v.a[i], v.b[i])
            lead = p.lsb + msb(p.sig)
            out += [z3.Not(disj(v.a[i].nan, v.a[i].inf, v.b[i].nan, v.b[i].inf, p.zero)),
                    lead >= f.emin, lead <= f.emax]
        return out
    return g


def sum_in(fmt: Format | str, with_c: bool = True) -> Constraint:
    """The exact a·b (+ c with ``with_c``) of finite inputs is a nonzero value of ``fmt``."""
    def f(v: Inputs) -> list[z3.BoolRef]:
        terms = [_enc.product(x, y) for x, y in zip(v.a, v.b)] + ([_enc.addend(v.c)] if with_c else [])
        N, LSB = _enc.exact_sum(terms)
        absN = z3.If(N < 0, -N, N)
        return [N != 0, representable(fmt, absN, exponent(LSB))]
    return f
