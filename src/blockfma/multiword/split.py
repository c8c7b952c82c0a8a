"""Splitting a matrix into words of a low-precision format (multiword arithmetic): :func:`split` (Fasi et
al., eq. 2.2, with Ootomo and Yokota's scaled residuals), and the input checks of every multiword function.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import formats as _formats
from ..arguments import ArgumentError, Shown, integer
from ..formats import Format, RoundingMode
from . import arrays

__all__ = ["RangeWarning", "split", "check_input", "check_operands", "check_format", "check_rounding",
           "MAX_WORDS", "MAX_SCALE"]

MAX_WORDS = 64
"""The most words :func:`split` makes: 64 words of even a 2-bit format hold more bits than binary64 has."""
MAX_SCALE = 1100
"""The largest residual scale s (2**s): beyond binary64's whole exponent range (2**-1074 to 2**1024)."""


class RangeWarning(UserWarning):
    """Words lost bits to underflow beyond the split's own accuracy (see :func:`split`): the product is not
    as accurate as the method's bound promises."""


def _ml_dtypes_kind(dtype: np.dtype) -> str:
    """"f" for an ml_dtypes float type (bfloat16, the fp8/fp6/fp4 types), "i" for its integer types (int4,
    uint2, ...), "c" for its complex types, "" for a dtype that is not ml_dtypes'."""
    if getattr(dtype.type, "__module__", "") != "ml_dtypes":
        return ""
    import ml_dtypes

    if "complex" in dtype.name:  # complex32, bcomplex32: finfo answers for their parts
        return "c"
    for kind, info in (("f", ml_dtypes.finfo), ("i", ml_dtypes.iinfo)):
        try:
            info(dtype)
        except (TypeError, ValueError):
            continue
        return kind
    return "c"


def check_input(A: Any, name: str = "A") -> np.ndarray:
    """A as a 2-D float64 array of finite real values, or an :class:`~blockfma.arguments.ArgumentError`
    naming the argument (and the first bad entry): the one input rule of every multiword function.

    Taken exactly: numpy's float16/32/64 (a long double that binary64 holds), every float dtype of
    ml_dtypes (bfloat16, float8_e4m3fn, float8_e5m2, the fnuz and fp6/fp4 types, ...), and integer arrays
    (numpy's or ml_dtypes' int4/uint4/...) as their values, up to 2**53 or beyond where binary64 holds
    them.  Refused: complex, bool (a mask, not a matrix: pass ``A.astype(float)`` for 0/1 values), object
    arrays (Python objects: convert them first, ``np.asarray(A, dtype=float)``, where rounding is meant),
    strings, dates and times."""
    try:
        arr = np.asarray(A)
    except (TypeError, ValueError) as exc:  # ragged nested lists
        raise ArgumentError(name, Shown(f"<{type(A).__name__}>"),
                            f"is not a rectangular array of numbers ({exc})") from None
    kind = _ml_dtypes_kind(arr.dtype) or arr.dtype.kind
    if kind not in "fiu":
        what = {"c": "multiword products take real matrices (pass A.real if that is meant)",
                "b": "a mask, not a matrix of numbers (pass A.astype(float) for 0/1 values)",
                "O": "Python objects; convert them first (np.asarray(A, dtype=float) rounds to binary64: "
                     "Fractions and big integers are not taken exactly)",
                }.get(kind, "multiword products take real matrices (float or integer dtypes)")
        raise ArgumentError(name, arr, f"has dtype {arr.dtype}: {what}")
    if arr.ndim != 2:
        raise ArgumentError(name, arr, f"must be a 2-D matrix; got shape {arr.shape}")
    if kind == "i" and arr.dtype.kind not in "iu":  # ml_dtypes' int4, uint2, ...: exact in int64
        arr = arr.astype(np.int64)
    try:
        x = _formats.from_numpy(arr, name)
    except ValueError:  # an integer (or long double) binary64 cannot hold exactly
        bad = np.argwhere(arr.astype(np.float64).astype(arr.dtype) != arr)
        idx = tuple(int(t) for t in bad[0]) if len(bad) else ()
        raise ArgumentError(name, arr, f"{name}{list(idx)} = {arr[idx].item()!r} has more significant bits than "
                            "binary64 holds, so it cannot be taken exactly",
                            fix=f"round it first ({name}.astype(float) rounds to nearest)") from None
    bad = np.argwhere(~np.isfinite(x))
    if len(bad):
        i, j = (int(t) for t in bad[0])
        raise ArgumentError(name, arr, f"{name}[{i}, {j}] = {float(x[i, j])!r} is not finite "
                            f"({len(bad)} non-finite entries): multiword products and their error measures "
                            "take finite matrices")
    return x


def check_operands(A: Any, B: Any) -> tuple[np.ndarray, np.ndarray]:
    """:func:`check_input` on A and B, and A's columns equal to B's rows."""
    A_, B_ = check_input(A, "A"), check_input(B, "B")
    if A_.shape[1] != B_.shape[0]:
        raise ArgumentError("B", B_, f"inner dimensions differ: A is {A_.shape}, B is {B_.shape} (A's "
                            "columns must equal B's rows)")
    return A_, B_


def check_format(name: str, value: Any) -> Format:
    """A format argument (a name such as "fp16", or a Format) as a Format, or an ArgumentError."""
    if isinstance(value, Format):
        return value
    if not isinstance(value, str):
        raise ArgumentError(name, value, "must be a format name such as 'fp16', 'bf16' or 'tf32'")
    try:
        return _formats.get(value)
    except ValueError as exc:
        raise ArgumentError(name, value, str(exc)) from None


def check_rounding(name: str, value: Any) -> RoundingMode:
    """A rounding-mode argument ("rne", "rz", a RoundingMode, ...) as a RoundingMode, or an ArgumentError."""
    if isinstance(value, RoundingMode):
        return value
    try:
        return RoundingMode.parse(value)
    except (ValueError, TypeError):
        raise ArgumentError(name, value, "must be a rounding mode such as 'rne' (to nearest, ties to even), "
                            "'rz' (toward zero), 'rna', 'ru' or 'rd'") from None


@dataclass(frozen=True)
class _Loss:
    """Underflow losses of one matrix's split beyond the split's own accuracy (see :func:`split`)."""

    name: str
    entries: int  # entries that lost bits to underflow and whose error exceeds u^p of their line's largest
    largest: float  # the largest error over the line's largest entry, over all lines
    where: tuple[int, int] | None  # one such entry
    line_max: float  # the largest entry of that entry's line (row of A, column of B)


def summary(xp: Any, *xs: Any) -> list[tuple[float, float, bool]]:
    """(largest |x|, smallest nonzero |x| (inf for none), whether x holds binary32 values) of each finite
    float64 array x (numpy, or torch with ``xp``): four passes over x, read by the host at once (on a device,
    one synchronisation for all of them)."""
    parts: list[Any] = []
    for x in xs:
        ax = xp.abs(x)
        empty = not ax.shape[0] * ax.shape[1]
        with np.errstate(over="ignore"):  # beyond binary32's range: inf, not equal
            parts += [0.0 if empty else ax.max(), math.inf if empty else xp.where(ax == 0, math.inf, ax).min(),
                      (arrays.to(xp, arrays.to(xp, x, "float32"), "float64") == x).all()]
    got = [float(t) for t in parts] if arrays.is_numpy(xp) else \
        xp.stack([xp.as_tensor(t, dtype=xp.float64, device=xs[0].device) for t in parts]).tolist()
    return [(hi, lo, bool(b)) for hi, lo, b in zip(got[::3], got[1::3], got[2::3])]


def split_words(x: Any, f: Format, p: int, scale: int, mode: RoundingMode, xp: Any = np, b32: bool | None = None
                ) -> list[Any]:
    """The p words of x (float64, numpy or torch, ``xp`` its module): the rule of :func:`split`, unchecked.
    (On torch, binary32 data (``b32``: known to be, from :func:`summary`) splits in float32, its words float32
    tensors: its residuals, scaled or not, are binary32 values too, each a multiple of its entry's binary32
    quantum with fewer than 24 bits, so every subtraction and scaling is exact in binary32 and every word's
    rounding can take torch's binary32 conversions, :func:`.arrays.round_to`.)"""
    words: list[Any] = []
    residual = x
    b32 = b32 if not arrays.is_numpy(xp) and f.precision <= 24 and f.emin >= -126 else None
    if b32 and (f.name, mode) in arrays.BINARY32_ROUNDINGS and scale * p <= 100:
        residual = arrays.to(xp, x, "float32")
    for i in range(p):
        w = arrays.round_to(xp, f, arrays.ldexp(xp, residual, scale * i), mode, is_binary32=b32)
        words.append(w)
        if i < p - 1:
            residual = residual - arrays.ldexp(xp, w, -scale * i)  # exact: the error of one rounding
    return words


def underflow_loss(x: Any, words: list[Any], f: Format, p: int, scale: int, axis: int,
                   name: str, xp: Any = np, seen: tuple[float, float, bool] | None = None) -> _Loss:
    """The entries whose words lost bits to underflow by more than the split's own accuracy: error
    |a - sum of words| > u_low**p * (largest |entry| of the entry's line), lines along ``axis`` (1: rows,
    for the left operand; 0: columns, for the right one).  ``xp``: numpy, or torch for tensors; ``seen``:
    x's :func:`summary` if known."""
    lost = _lost_to_underflow(f, words, x, scale, xp, seen or summary(xp, x)[0])
    if lost is None or not bool(lost.any()):
        return _Loss(name, 0, 0.0, None, 0.0)
    words = [arrays.to(xp, w, "float64") for w in words]
    total = words[0]
    for i in range(1, p):
        total = total + arrays.ldexp(xp, words[i], -scale * i)
    err = xp.abs(x - total)
    line = arrays.amax(xp, xp.abs(x), axis, keepdims=True)
    u = math.ldexp(1.0, -f.precision)
    with np.errstate(divide="ignore", invalid="ignore", under="ignore"):
        rel = xp.where(lost, err / line, 0.0)
    over = lost & (rel > u**p)
    if not bool(over.any()):
        return _Loss(name, 0, 0.0, None, 0.0)  # (the largest error matters only for a warning)
    flat = int(xp.argmax(xp.where(over, rel, -1.0)))
    i, j = divmod(flat, int(rel.shape[1]))
    return _Loss(name, arrays.count(xp, over), float(rel[i, j]), (i, j),
                 float(line[0, j] if axis == 0 else line[i, 0]))


def _power(x: float) -> str:
    """x as 2^e with one decimal of e (x > 0)."""
    return f"2^{math.log2(x):.1f}" if x > 0 else "0"


def range_message(losses: list[_Loss], f: Format, p: int, method: str = "") -> str:
    """One RangeWarning's text for the losses of one call (the count first: ``N entries of ...``)."""
    hit = [loss for loss in losses if loss.entries]
    total = sum(loss.entries for loss in hit)
    names = " and ".join(loss.name for loss in losses)
    each = ", ".join(f"{loss.entries} of {loss.name}" for loss in hit)
    worst = max(hit, key=lambda loss: loss.largest)
    line = "row" if worst.name != "B" else "column"
    u = math.ldexp(1.0, -f.precision * p)
    e = -math.frexp(worst.line_max)[1] if worst.line_max > 0 else 0
    who = f"{method}: " if method else ""
    return (f"{total} entries of {names} ({each}) lose bits to underflow in {p} {f.name} words: {who}the worst, "
            f"{worst.name}{list(worst.where or ())}, errs by {_power(worst.largest)} of its {line}'s largest entry, "
            f"more than the split's own accuracy u^{p} = {_power(u)}; scale {worst.name} by a power of two "
            f"(e.g. {worst.name} * 2**{e}: exact, undo it on the product) or use words with a wider exponent "
            "range (bf16, tf32, or Ootomo-Yokota's scaled residuals)")


def split(A: Any, fmt: Format | str, p: int, *, scale: int = 0, rounding: RoundingMode | str = "rne",
          name: str = "A", axis: int = 1) -> list[np.ndarray]:
    """The p words of A in ``fmt``: A ≈ W_1 + 2**-s W_2 + 2**-2s W_3 + ..., returned as [W_1, ..., W_p].

    W_1 = fl(A); W_i = fl(2**((i-1)s) (A - W_1 - 2**-s W_2 - ...)), each fl rounding to ``fmt`` in
    ``rounding`` (to nearest by default; "rz" is how a tf32 unit reads fp32 registers).  ``scale`` = s
    (0 to :data:`MAX_SCALE`), p from 1 to :data:`MAX_WORDS`.  A value beyond ``fmt``'s range is an
    ArgumentError (scale A first).

    Underflow: a word whose input lies below ``fmt``'s smallest normal keeps fewer bits than the format's
    precision.  That matters only where it breaks the split's own accuracy, so a :class:`RangeWarning`
    (one, with the count, the worst entry and the fix) is given only for entries whose error
    |a - sum of words| exceeds u_low**p times the largest |entry| of their line (a row of A, ``axis=1``;
    a column of B, ``axis=0``): below it the split still keeps |Delta a_i| <= u_low**p max|a_i| line by
    line, within Theorem 2.1's splitting term (why (0, 1] data do not warn: docs/multiword.md, "Methods").
    """
    f = check_format("fmt", fmt)
    p = integer("p", p, least=1, most=MAX_WORDS)
    scale = integer("scale", scale, least=0, most=MAX_SCALE)
    mode = check_rounding("rounding", rounding)
    if axis not in (0, 1) or isinstance(axis, bool):
        raise ArgumentError("axis", axis, "must be 1 (lines are rows: the left operand A) or 0 (columns: B)")
    x = check_input(A, name)
    check_range(x, f, name)
    words = split_words(x, f, p, scale, mode)
    loss = underflow_loss(x, words, f, p, scale, axis, name)
    if loss.entries:
        warnings.warn(range_message([loss], f, p), RangeWarning, stacklevel=2)
    return words


def check_range(x: Any, f: Format, name: str, xp: Any = np, largest: float | None = None) -> None:
    """An ArgumentError naming the first entry of x (numpy, or torch with ``xp``) beyond ``f``'s range
    (``largest``: max |x| if known, looked at only where it exceeds the range)."""
    if largest is not None and largest <= f.max:
        return
    big = xp.abs(x) > f.max
    at = arrays.first(xp, big) if bool(big.any()) else None
    if at is not None:
        i, j = at
        e = math.frexp(float(xp.abs(x).max()) / f.max)[1]
        shown = x if xp is np else Shown(f"<{x.dtype} tensor of shape {tuple(x.shape)} on {x.device}>")
        raise ArgumentError(name, shown,
                            f"{name}[{i}, {j}] = {float(x[i, j])!r} is beyond {f.name}'s largest value "
                            f"{f.max!r}: multiword words must hold its entries", fix=f"scale {name} by a power of "
                            f"two first ({name} * 2**-{e}, exact; undo it on the product)")


def _lost_to_underflow(f: Format, words: list[Any], x: Any, scale: int, xp: Any,
                       seen: tuple[float, float, bool]) -> Any:
    """Entries whose some word's input lay below fmt's smallest normal (its significand cut by the range,
    not by the precision), where the entry is not yet exact (``seen``: x's :func:`summary`).  None where
    binary32 data rules it out at once: a word's nonzero input is a multiple of its entry's binary32 quantum
    times 2**(scale i) >= 2**(e - 23), so no entry of exponent e >= emin + 23 can have one below 2**emin."""
    if seen[1] == math.inf or (seen[1] >= 2.0 ** (f.emin + 23) and seen[2]):
        return None
    mask = None
    residual = x
    for i, w in enumerate(words):
        scaled = arrays.ldexp(xp, residual, scale * i)
        tiny = (scaled != 0) & (xp.abs(scaled) < f.smallest_normal) & (w != scaled)
        mask = tiny if mask is None else mask | tiny
        residual = residual - arrays.ldexp(xp, w, -scale * i)
    return mask
