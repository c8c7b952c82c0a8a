"""Optional dependencies: import one, or say in one line how to install it.

blockfma's core needs numpy, ml_dtypes and z3; the rest comes with an extra (pyproject.toml): ``torch`` (the GPU engine,
torch targets, ``backend='torch'``), ``dask``, ``plot`` (matplotlib), ``cuda`` (CuPy), ``smt`` (bitwuzla, cvc5),
``fast`` (numba), ``triton`` (Triton and torch: ``backend='triton'``). Every module that needs one asks :func:`require`,
so the error reads the same everywhere: what needs it, then the install command.

    >>> hint("torch")
    "pip install 'blockfma[torch]'"
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

__all__ = ["hint", "available", "require"]


def hint(extra: str) -> str:
    """The command that installs blockfma's optional dependency group ``extra``."""
    return f"pip install 'blockfma[{extra}]'"


def available(module: str) -> bool:
    """Whether ``module`` (e.g. "torch", "dask.array") can be imported, found without importing it (a
    dotted name imports its parent packages)."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def require(module: str, *, extra: str, needed_by: str, what: str | None = None, note: str = "") -> ModuleType:
    """``module`` imported, or an ImportError of one line: "{needed_by} needs {what}: pip install
    'blockfma[{extra}]'{note}" (``what`` defaults to the module's name)."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(f"{needed_by} needs {what or module}: {hint(extra)}{note}") from None
