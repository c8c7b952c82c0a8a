"""Exact number forms for the command line: parse them without round-off, print values exactly.

:func:`parse` reads the forms people write for floating-point values, exactly:

    0.1  -2.5  1e-3  42           decimals and integers (0.1 is 1/10, not the float nearest it)
    2^-24  2**-24                 powers with an integer exponent
    1-2^-11  1+2^-10-2^-20        sums and differences
    3*2^-5  -3*2^-5  1/3          products and quotients
    0x1.8p-3  -0x1p+4  0x.8p1     C99 hexadecimal floats (what ``float.hex`` writes)
    0b1.01p-2                     binary, the same way (what :func:`exact_binary` writes, ``0b1.01 * 2^-2``)
    inf  -inf  nan  -0            special values; the sign of zero is kept

Parentheses group.  A power binds tighter than a unary sign (``-2^2`` is -4), ``*`` and ``/`` tighter than
``+`` and ``-``; powers do not chain (write ``(2^3)^2``).  Nothing is evaluated by Python's ``eval``.

Values are :data:`Value`: a :class:`fractions.Fraction` for every finite number except negative zero, and a ``float``
for the values a Fraction cannot hold (-0.0, infinities, NaN).  Arithmetic is exact on Fractions and follows IEEE 754
where a special value takes part (``-0 * 3`` is -0.0, ``inf - inf`` is NaN, ``0 - 0`` is +0).  ``float(parse(text))`` is
therefore always meaningful; :func:`to_float` converts with a check (or a rounding mode) instead of a silent rounding.

The printers are exact too: :func:`exact_decimal` (every binary float has a finite decimal expansion),
:func:`exact_binary`, :func:`hex_float` and :func:`bits_hex` (the bit pattern in a format).
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from fractions import Fraction
from itertools import accumulate
from typing import Any

import numpy as np

from . import formats as _formats
from .formats import Format, RoundingMode

__all__ = ["Value", "parse", "to_float", "NotRepresentable", "exact_decimal", "exact_binary", "hex_float",
           "bits_hex", "FORMS"]

Value = Fraction | float  # float only for -0.0, +-inf and NaN

FORMS = ("decimals (0.1, -2.5, 1e-3), integers, powers (2^-24, 2**-24), sums and products of them "
         "(1-2^-11, 3*2^-5, 1/3), C99 hex floats (0x1.8p-3), binary (0b1.01p-2), inf, -inf, nan, -0")

_MAX_EXPONENT = 10_000  # |exponent| accepted in powers and literals (float64 needs at most ~1100)
_MAX_TEXT, _MAX_DEPTH = 2_000, 100  # characters (a float64's exact decimal has at most ~1100); nested parentheses

_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<hex>0[xX](?:[0-9a-fA-F]+(?:\.[0-9a-fA-F]*)?|\.[0-9a-fA-F]+)(?:[pP][+-]?[0-9]+)?)
  | (?P<bin>0[bB](?:[01]+(?:\.[01]*)?|\.[01]+)(?:[pP][+-]?[0-9]+)?)
  | (?P<dec>(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)
  | (?P<word>[A-Za-z]+)
  | (?P<op>\*\*|[-+*/^()])
""", re.VERBOSE)

_SYNONYMS = {"\u2212": "-", "\u00d7": "*", "\u00b7": "*", "\u2009": " ", "\u00a0": " "}
_WORDS = {"inf": math.inf, "infinity": math.inf, "nan": math.nan}


class _ParseError(ValueError):
    pass


def _bad(text: str, detail: str) -> ValueError:
    shown = repr(text) if len(text) <= 80 else f"{text[:40]!r}... ({len(text)} characters)"
    return ValueError(f"cannot read {shown} as an exact number: {detail}; accepted forms: {FORMS}")


def _tokens(text: str) -> list[tuple[str, str]]:
    s = "".join(_SYNONYMS.get(ch, ch) for ch in text)
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(s):
        m = _TOKEN.match(s, pos)
        if m is None:
            raise _ParseError(f"unexpected {s[pos:pos + 8]!r} at position {pos}")
        kind = m.lastgroup or ""
        if kind != "space":
            out.append((kind, m.group()))
        pos = m.end()
    return out


def _check_exponent(e: int) -> int:
    if abs(e) > _MAX_EXPONENT:
        raise _ParseError(f"exponent {e} is out of range (|exponent| <= {_MAX_EXPONENT})")
    return e


def _scaled(mantissa: int, base: int, exp: int) -> Fraction:
    _check_exponent(exp)
    return Fraction(mantissa * base**exp) if exp >= 0 else Fraction(mantissa, base**-exp)


def _literal(kind: str, tok: str) -> Fraction | float:
    if kind == "word":
        word = tok.lower()
        if word not in _WORDS:
            raise _ParseError(f"unknown word {tok!r}")
        return _WORDS[word]
    if kind == "dec":
        m = re.fullmatch(r"([0-9]*)(?:\.([0-9]*))?(?:[eE]([+-]?[0-9]+))?", tok)
        assert m is not None
        whole, frac, exp = m.group(1), m.group(2) or "", int(m.group(3) or 0)
        return _scaled(int(whole + frac or "0"), 10, exp - len(frac))
    # hex or bin: 0x<digits>[.<digits>][p<exp>]
    digits_per, base = (4, 16) if kind == "hex" else (1, 2)
    m = re.fullmatch(r"0[xXbB]([0-9a-fA-F]*)(?:\.([0-9a-fA-F]*))?(?:[pP]([+-]?[0-9]+))?", tok)
    assert m is not None
    whole, frac, exp = m.group(1), m.group(2) or "", int(m.group(3) or 0)
    return _scaled(int(whole + frac or "0", base), 2, _check_exponent(exp) - digits_per * len(frac))


# --- IEEE-aware exact arithmetic on Value -----------------------------------------------------------------
def _norm(x: Fraction | float) -> Value:
    """Fractions for every finite value but -0.0."""
    if isinstance(x, float) and math.isfinite(x) and not (x == 0 and math.copysign(1.0, x) < 0):
        return Fraction(x)
    return x


def _proxy(x: Value) -> float:
    """A float with the sign and zero-ness of x: enough wherever a special value takes part."""
    if isinstance(x, float):
        return x
    return float((x > 0) - (x < 0))


def _neg(x: Value) -> Value:
    if isinstance(x, Fraction) and x == 0:
        return -0.0
    return _norm(-x)


def _add(x: Value, y: Value) -> Value:
    if isinstance(x, Fraction) and isinstance(y, Fraction):
        return x + y
    if math.isinf(_proxy(x)) or math.isinf(_proxy(y)) or math.isnan(_proxy(x)) or math.isnan(_proxy(y)):
        return _norm(_proxy(x) + _proxy(y))
    # no infinity or NaN: at least one operand is -0.0
    if isinstance(x, float) and isinstance(y, float):
        return -0.0
    return x if isinstance(y, float) else y


def _mul(x: Value, y: Value) -> Value:
    if isinstance(x, Fraction) and isinstance(y, Fraction):
        return x * y
    return _norm(_proxy(x) * _proxy(y))


def _div(x: Value, y: Value) -> Value:
    if y == 0:
        raise _ParseError("division by zero")
    if isinstance(x, Fraction) and isinstance(y, Fraction):
        return x / y
    return _norm(_proxy(x) / _proxy(y))


_MAX_POWER_BITS = 1 << 17  # a power's exact result may have this many bits (float64 needs about 1100)


def _pow(x: Value, e: int) -> Value:
    _check_exponent(e)
    if x == 0 and e < 0:
        raise _ParseError("zero to a negative power")
    if isinstance(x, Fraction):
        size = (x.numerator.bit_length() + x.denominator.bit_length()) * abs(e)
        if size > _MAX_POWER_BITS:
            raise _ParseError(f"the power's exact value would have about {size} bits, beyond the {_MAX_POWER_BITS} "
                              "this parser keeps (every format here is far narrower); write a smaller number")
        return x**e
    return _norm(x**e)


class _Parser:
    """Recursive descent over the tokens:

        expr   := term (('+' | '-') term)*
        term   := factor (('*' | '/') factor)*
        factor := ('+' | '-') factor | power
        power  := atom (('^' | '**') exponent)?
        atom   := number | 'inf' | 'nan' | '(' expr ')'
        exponent := ['+' | '-'] integer | '(' ['+' | '-'] integer ')'
    """

    def __init__(self, tokens: list[tuple[str, str]]):
        self.toks = tokens
        self.i = 0

    def peek(self) -> str | None:
        return self.toks[self.i][1] if self.i < len(self.toks) else None

    def take(self) -> tuple[str, str]:
        if self.i >= len(self.toks):
            raise _ParseError("unexpected end")
        tok = self.toks[self.i]
        self.i += 1
        return tok

    def expect(self, op: str) -> None:
        tok = self.take()[1]
        if tok != op:
            raise _ParseError(f"expected {op!r}, found {tok!r}")

    def expr(self) -> Value:
        value = self.term()
        while self.peek() in ("+", "-"):
            op = self.take()[1]
            rhs = self.term()
            value = _add(value, rhs if op == "+" else _neg(rhs))
        return value

    def term(self) -> Value:
        value = self.factor()
        while self.peek() in ("*", "/"):
            op = self.take()[1]
            rhs = self.factor()
            value = _mul(value, rhs) if op == "*" else _div(value, rhs)
        return value

    def factor(self) -> Value:
        minus = 0  # a loop, not recursion: a long run of signs cannot exhaust the stack
        while self.peek() in ("+", "-"):
            minus += self.take()[1] == "-"
        return _neg(self.power()) if minus % 2 else self.power()

    def power(self) -> Value:
        base = self.atom()
        if self.peek() in ("^", "**"):
            self.take()
            base = _pow(base, self.exponent())
            if self.peek() in ("^", "**"):
                raise _ParseError("powers do not chain; use parentheses, e.g. (2^3)^2")
        return base

    def exponent(self) -> int:
        paren = self.peek() == "("
        if paren:
            self.take()
        sign = 1
        while self.peek() in ("+", "-"):
            sign = -sign if self.take()[1] == "-" else sign
        kind, tok = self.take()
        if kind != "dec" or not tok.isdigit():
            raise _ParseError(f"an exponent must be an integer, not {tok!r}")
        if paren:
            self.expect(")")
        return sign * int(tok)

    def atom(self) -> Value:
        kind, tok = self.take()
        if tok == "(":
            value = self.expr()
            self.expect(")")
            return value
        if kind in ("dec", "hex", "bin", "word"):
            return _norm(_literal(kind, tok))
        raise _ParseError(f"expected a number, found {tok!r}")


def parse(text: str) -> Value:
    """The exact value of ``text`` (see the module docstring for the forms).

    Returns a Fraction for every finite value except -0, which comes back as ``-0.0``; infinities and NaN
    come back as floats.  Raises ValueError naming the text and the accepted forms on anything else.
    """
    if not isinstance(text, str):
        raise TypeError(f"parse takes a str, not {type(text).__name__}")
    if len(text) > _MAX_TEXT:
        raise ValueError(f"cannot read a number of {len(text)} characters (at most {_MAX_TEXT}); write it shorter")
    try:
        tokens = _tokens(text)
        if not tokens:
            raise _ParseError("empty")
        if max(accumulate((t == "(") - (t == ")") for _, t in tokens)) > _MAX_DEPTH:  # before any recursion
            raise _ParseError(f"more than {_MAX_DEPTH} nested parentheses")
        p = _Parser(tokens)
        value = p.expr()
        if p.i != len(tokens):
            raise _ParseError(f"unexpected {tokens[p.i][1]!r}")
        return value
    except _ParseError as exc:
        raise _bad(text, str(exc)) from None


# --- conversion ----------------------------------------------------------------------------------------------
def _show(x: float) -> str:
    return f"{x!r} ({hex_float(x)})"


def to_float(text: str | Value, fmt: Format | str | None = None, mode: RoundingMode | str | None = None) -> float:
    """The value of ``text`` (or of a parsed Value) as a float, without silent rounding.

    Without ``mode`` the value must be exactly a value of ``fmt`` (default binary64), else
    :class:`NotRepresentable` (a ValueError) naming the text and its two neighbours in ``fmt``.  With
    ``mode`` the exact value is rounded once to ``fmt`` in that mode (no double rounding through binary64).
    """
    f = _formats.fp64 if fmt is None else _formats.get(fmt)
    value = parse(text) if isinstance(text, str) else _norm(text)
    shown = text if isinstance(text, str) else repr(text)
    if isinstance(value, float):  # -0.0, inf, nan
        if mode is None and not bool(_formats.is_representable(f, value)):
            raise ValueError(f"{shown} is not a value of {f.name} (it has no "
                             f"{'infinities' if math.isinf(value) else 'negative zero'})")
        return float(_formats.round(f, value, mode)) if mode is not None else value
    if mode is not None:
        return _formats.round_fraction(f, value, RoundingMode.parse(mode))
    nearest = _formats.round_fraction(f, value, RoundingMode.TiesToEven)
    if math.isfinite(nearest) and Fraction(nearest) == value:
        return nearest
    raise NotRepresentable(shown, f, _formats.round_fraction(f, value, RoundingMode.TowardNegative),
                           _formats.round_fraction(f, value, RoundingMode.TowardPositive))


class NotRepresentable(ValueError):
    """A value that is not exactly a value of the format; ``below`` and ``above`` are its neighbours there."""

    def __init__(self, text: str, fmt: Format, below: float, above: float, hint: str = "pass mode= to round"):
        self.text, self.fmt, self.below, self.above = text, fmt, below, above
        super().__init__(f"{text} is not representable in {fmt.name}: the nearest values are {_show(below)} "
                         f"below and {_show(above)} above; give one of them, or {hint}")

    def with_hint(self, where: str, hint: str) -> NotRepresentable:
        """The same error with the location and the fix phrased for another caller (the command line)."""
        return NotRepresentable(f"{where}{self.text}", self.fmt, self.below, self.above, hint)


# --- printing ------------------------------------------------------------------------------------------------
def exact_decimal(x: Any) -> str:
    """The exact decimal expansion of a float (finite for every binary float): 1.00000011920928955078125.
    Integers keep a '.0' (``1.0``); -0.0, inf and nan print as Python prints them."""
    x = float(x)
    if not math.isfinite(x) or x == 0:
        return repr(x)
    s = format(Decimal(x), "f")
    return s if "." in s else s + ".0"


def exact_binary(x: Any, fmt: Format | str | None = None) -> str:
    """The exact value in binary scientific form, e.g. ``+0b1.00000000000000000000001 * 2^0`` for 1+2**-23.

    With ``fmt`` the fraction shows every bit the format keeps at that exponent (fewer for its subnormals);
    without, trailing zeros are dropped.  The form reads back with :func:`parse`.  Zeros print as ``+0`` or
    ``-0``, infinities as ``+inf``/``-inf``, NaN as ``nan``.
    """
    x = float(x)
    sign = "-" if math.copysign(1.0, x) < 0 else "+"
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return f"{sign}inf"
    if x == 0:
        return f"{sign}0"
    frac, e = math.frexp(abs(x))
    bits = bin(int(frac * 2.0**53))[3:]  # the 52 bits after the leading one
    lead = e - 1
    digits = bits.rstrip("0")
    if fmt is not None:
        f = _formats.get(fmt)
        width = f.fraction_bits - max(0, f.emin - lead)
        digits = digits.ljust(max(width, len(digits)), "0")
    return f"{sign}0b1{'.' + digits if digits else ''} * 2^{lead}"


def hex_float(x: Any) -> str:
    """``float.hex`` without trailing zeros: 0x1.000002p+0, -0x1.8p-3, 0x0p+0; inf and nan as words."""
    x = float(x)
    if not math.isfinite(x):
        return repr(x)
    s = x.hex()
    mant, exp = s.split("p")
    if "." in mant:
        mant = mant.rstrip("0").rstrip(".")
    return f"{mant}p{exp}"


def bits_hex(x: Any, fmt: Format | str) -> str:
    """The bit pattern of x in ``fmt`` as hex with the format's width (0x3f800001 for fp32 1+2**-23).

    A numpy array or scalar whose item has exactly ``fmt.bits`` bits (a float32 result for fp32, float16,
    bfloat16, float64) gives its raw bits, so a NaN shows the payload the device wrote; anything else is
    encoded with :func:`blockfma.formats.encode` (NaN as the format's default NaN).
    """
    f = _formats.get(fmt)
    width = (f.bits + 3) // 4
    if isinstance(x, (np.ndarray, np.generic)) and np.asarray(x).dtype.itemsize * 8 == f.bits:
        code = int(_formats.bits(np.asarray(x).reshape(())))
    else:
        code = int(_formats.encode(f, float(np.asarray(x, dtype=np.float64).reshape(()))))
    return f"0x{code:0{width}x}"
