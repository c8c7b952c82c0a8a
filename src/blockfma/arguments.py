"""Public arguments checked where they enter: one error type and the validators every entry point uses.

An :class:`ArgumentError` names the argument, the value given and the fix, in the caller's spelling: the Python API
reads ``timeout=0: must be positive seconds; pass ...`` and the command line, which maps Python names to its options
(:meth:`ArgumentError.message`), ``--timeout 0: must be positive seconds; ...``.  It is a ``ValueError``.

The validators return the value in its canonical type (``integer`` an int, ``seconds`` a float or None) so
that code behind them meets only checked values.  This module imports nothing else of blockfma.

    >>> from blockfma.arguments import integer
    >>> integer("k", 0, least=1)
    Traceback (most recent call last):
    ...
    blockfma.arguments.ArgumentError: k=0: must be an integer of at least 1
"""

from __future__ import annotations

import difflib
import math
import numbers
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

import numpy as np

__all__ = ["ArgumentError", "Shown", "integer", "seconds", "choice", "flag", "seed", "progress", "keywords",
           "permutation", "memory", "available_memory", "TIMEOUT"]

TIMEOUT = 60.0
"""Seconds one solver query may take unless told otherwise (``bf.smt``, the probes' separations, the CLI)."""


class Shown:
    """A value an error message shows by a text of its own (``Shown("<Model fp16->fp32>")``), for values
    whose repr would be long or unhelpful."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _render(value: Any, cli: bool) -> str:
    if isinstance(value, np.ndarray):  # its shape and dtype, not its entries
        shape = "x".join(str(d) for d in value.shape)
        return f"<{shape} {value.dtype} array>" if value.ndim else f"<scalar {value.dtype} {value.item()!r}>"
    if cli and isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return str(value)
    text = repr(value)
    return text if len(text) <= 80 or isinstance(value, str) else text[:77] + "..."


class ArgumentError(ValueError):
    """A public argument with a bad value: ``argument`` (the Python name), ``value``, ``problem`` (what is
    wrong) and ``use`` (arguments that would fix it, ``{name: value}``) or ``fix`` (free text)."""

    def __init__(self, argument: str, value: Any, problem: str, *, use: Mapping[str, Any] | None = None,
                 fix: str = "") -> None:
        self.argument, self.value, self.problem = argument, value, problem
        self.use, self.fix = dict(use or {}), fix
        super().__init__(self.message())

    def message(self, options: Mapping[str, str] | None = None) -> str:
        """The one-line message; ``options`` maps Python names to command-line options (``{"k": "--k"}``),
        and names it holds are written as the command line spells them (``--k 0``, ``pass --device A100``)."""
        cli = options is not None

        def spell(name: str, value: Any) -> str:
            if cli and name in options:
                opt = options[name]
                return opt if value is True else f"{opt} {_render(value, True)}"
            return f"{name}={_render(value, False)}"

        text = f"{spell(self.argument, self.value)}: {self.problem}"
        if self.use:
            text += "; pass " + " and ".join(spell(n, v) for n, v in self.use.items())
        if self.fix:
            text += f"; {self.fix}"
        return text


def integer(name: str, value: Any, *, least: int | None = None, most: int | None = None, none: bool = False) -> Any:
    """``value`` as an int in [least, most] (None passes with ``none=True``).  bool and non-integral numbers
    are refused: ``k=2.5`` or ``k=True`` is a mistake, not a request."""
    if value is None and none:
        return None
    ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if ok:
        value = int(value)
        ok = (least is None or value >= least) and (most is None or value <= most)
    if not ok:
        if least is not None and most is not None:
            rng = f" from {least} to {most}"
        elif least is not None:
            rng = f" of at least {least}"
        elif most is not None:
            rng = f" of at most {most}"
        else:
            rng = ""
        raise ArgumentError(name, value, f"must be an integer{rng}" + (" or None" if none else ""))
    return value


def seconds(name: str, value: Any, *, none: bool = True) -> float | None:
    """A time limit in seconds: a positive finite number; None or ``math.inf`` mean no limit (returned as
    None) where ``none`` allows it.  0, negatives, NaN, bool and strings are refused."""
    if value is None or (isinstance(value, numbers.Real) and not isinstance(value, bool) and value == math.inf):
        if none:
            return None
        raise ArgumentError(name, value, "must be a positive number of seconds (this one has no 'no limit')")
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or not (0 < float(value) < math.inf):
        hint = "None for no limit" if none else "a positive number"
        raise ArgumentError(name, value, f"must be a positive number of seconds ({hint})")
    return float(value)


def choice(name: str, value: Any, choices: Iterable[str], *, none: bool = False) -> Any:
    """``value`` if it is one of ``choices`` (strings, compared case-insensitively; returned as listed)."""
    listed = list(choices)
    if value is None and none:
        return None
    if isinstance(value, str):
        for c in listed:
            if value.strip().lower() == c.lower():
                return c
    close = difflib.get_close_matches(str(value), listed, n=1) if isinstance(value, str) else []
    raise ArgumentError(name, value, f"must be one of {', '.join(map(repr, listed))}" + (" or None" if none else ""),
                        use={name: close[0]} if close else None)


def flag(name: str, value: Any) -> bool:
    """A True/False switch (numpy's bool too); anything else (``"no"``, 0.5) is refused."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise ArgumentError(name, value, "must be True or False")


def seed(name: str, value: Any) -> int | None:
    """A random seed: a non-negative integer, or None (fresh entropy)."""
    return integer(name, value, least=0, none=True)


def progress(name: str, value: Any) -> bool | Callable[[str], None] | None:
    """A progress switch: None (the default: on where stderr is a terminal), True, False, or a function
    taking one line of text."""
    if value is None or isinstance(value, bool) or callable(value):
        return value
    raise ArgumentError(name, value, "must be True, False, None (on a terminal) or a function of one string")


def keywords(function: str, given: Mapping[str, Any], known: Collection[str]) -> None:
    """Refuse keywords ``function`` does not take (a misspelt ``verfy=`` must not run the default), naming
    the closest known one."""
    for key in given:
        if key not in known:
            close = difflib.get_close_matches(key, list(known), n=1)
            raise ArgumentError(key, given[key], f"{function}() takes no argument {key!r}",
                                fix=f"did you mean {close[0]}=?" if close else
                                f"it takes {', '.join(sorted(known))}")


def permutation(name: str, value: Any, items: Collection[Any]) -> list[Any]:
    """``value`` as a list holding each of ``items`` exactly once (any order)."""
    try:
        listed = list(value)
    except TypeError:
        listed = None
    expected = list(items)
    if listed is None or len(listed) != len(expected) or any(listed.count(x) != 1 for x in expected):
        raise ArgumentError(name, value, f"must hold each of {expected} exactly once, in any order")
    return listed


def available_memory() -> int | None:
    """Bytes of memory available now (Linux's MemAvailable), or None where it cannot be read."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def memory(name: str, value: Any, need: float, what: str, *, fix: str = "") -> None:
    """Refuse, before any allocation, a request ``name=value`` whose working set (``need`` bytes, for
    ``what``) exceeds the memory available now (or 2**60 bytes where that cannot be read)."""
    have = available_memory()
    limit = have if have is not None else 2**60
    if need > limit:
        gib = 2.0**30
        avail = f"{have / gib:.1f} GiB are available" if have is not None else "no machine has that"
        raise ArgumentError(name, value, f"needs about {need / gib:.3g} GiB for {what}, and {avail}", fix=fix)

