"""Bit-vector helpers of the SMT encoding: Boolean connectives that every SMT-LIB reader takes, exponent
constants, resizing, shifts by symbolic amounts and the leading-bit position.

Exponents and shift amounts are signed :data:`EW`-bit vectors; shifts by an amount at least the width give
0 (or the sign, for :func:`sar`) instead of the modular results of SMT-LIB's own shifts.
"""

from __future__ import annotations

from collections.abc import Sequence

import z3

__all__ = ["EW", "conj", "disj", "exponent", "resize", "sresize", "shr", "shl", "sar", "maximum", "normalize", "msb"]

EW = 16  # width of the signed exponent arithmetic: every exponent and shift here lies in [-2**15, 2**15)


def conj(*xs: z3.BoolRef) -> z3.BoolRef:
    """Conjunction that SMT-LIB readers take for any number of terms (bitwuzla wants two or more)."""
    return z3.BoolVal(True) if not xs else xs[0] if len(xs) == 1 else z3.And(*xs)


def disj(*xs: z3.BoolRef) -> z3.BoolRef:
    """Disjunction, written as :func:`conj` is."""
    return z3.BoolVal(False) if not xs else xs[0] if len(xs) == 1 else z3.Or(*xs)


def exponent(v: int) -> z3.BitVecRef:
    """An exponent constant."""
    return z3.BitVecVal(v, EW)


def resize(x: z3.BitVecRef, w: int) -> z3.BitVecRef:
    """x (unsigned) zero-extended or cut to w bits."""
    n = x.size()
    if n == w:
        return x
    return z3.ZeroExt(w - n, x) if n < w else z3.Extract(w - 1, 0, x)


def sresize(x: z3.BitVecRef, w: int) -> z3.BitVecRef:
    """x (signed) sign-extended to w bits (never cut)."""
    n = x.size()
    assert n <= w
    return x if n == w else z3.SignExt(w - n, x)


def shr(x: z3.BitVecRef, amount: z3.BitVecRef) -> z3.BitVecRef:
    """x >> amount (logical) for a signed EW-bit amount >= 0; 0 when amount >= width."""
    w = x.size()
    if w >= EW:
        return z3.LShR(x, resize(amount, w))
    big = z3.UGE(amount, exponent(w))
    return z3.If(big, z3.BitVecVal(0, w), z3.LShR(x, resize(amount, w)))


def shl(x: z3.BitVecRef, amount: z3.BitVecRef) -> z3.BitVecRef:
    """x << amount for a signed EW-bit amount >= 0; 0 when amount >= width."""
    w = x.size()
    if w >= EW:
        return x << resize(amount, w)
    big = z3.UGE(amount, exponent(w))
    return z3.If(big, z3.BitVecVal(0, w), x << resize(amount, w))


def maximum(xs: Sequence[z3.BitVecRef]) -> z3.BitVecRef:
    """The largest of signed bit-vectors (one width)."""
    m = xs[0]
    for x in xs[1:]:
        m = z3.If(x > m, x, m)
    return m


def normalize(x: z3.BitVecRef) -> tuple[z3.BitVecRef, z3.BitVecRef]:
    """(x shifted left until its top bit is set, the shift) for x != 0: count-leading-zeros in log2(width)
    stages of a barrel shifter (x = 0 gives x and some shift)."""
    w = x.size()
    lz = exponent(0)
    step = 1
    while step * 2 < w:
        step *= 2
    while step >= 1:
        if step < w:
            top_zero = z3.Extract(w - 1, w - step, x) == 0
            x = z3.If(top_zero, x << step, x)
            lz = z3.If(top_zero, lz + step, lz)
        step //= 2
    return x, lz


def msb(x: z3.BitVecRef) -> z3.BitVecRef:
    """Position of the highest set bit of x != 0 (an EW-bit exponent)."""
    _, lz = normalize(x)
    return exponent(x.size() - 1) - lz


def sar(x: z3.BitVecRef, amount: z3.BitVecRef) -> z3.BitVecRef:
    """floor(x / 2**amount) for a signed x and a signed EW-bit amount >= 0 (-1 or 0 when amount >= width)."""
    w = x.size()
    if w >= EW:
        return x >> resize(amount, w)
    return z3.If(z3.UGE(amount, exponent(w)), x >> (w - 1), x >> resize(amount, w))
