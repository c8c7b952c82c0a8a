"""Progress of long runs on stderr: one convention for the report, probes, SMT searches and multiword runs.

Every long entry point takes ``progress``: ``None`` (the default) reports where stderr is a terminal, and
stays quiet in pipes, CI logs and tests; ``True`` always; ``False`` never; or a function of one line of
text, which receives every line (a GUI, a logger, a test).  :func:`reporter` turns that value into the
function to call, or None.  Lines go to stderr, so the results on stdout stay clean for pipes and ``--json -``.

    >>> from blockfma.progress import reporter
    >>> lines = []
    >>> say = reporter(lines.append)
    >>> say("stage 1 of 3")
    >>> lines
    ['stage 1 of 3']
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from .arguments import progress as _check

__all__ = ["reporter", "stderr", "on_terminal"]


def stderr(text: str) -> None:
    """Print one progress line on stderr, flushed."""
    print(text, file=sys.stderr, flush=True)


def on_terminal() -> bool:
    """Whether stderr is an interactive terminal."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stderr
        return False


def reporter(progress: Any, name: str = "progress") -> Callable[[str], None] | None:
    """The function that prints progress lines for ``progress`` (see the module docstring), or None for no
    progress; ``name`` is the argument's name in the error for a value of the wrong kind."""
    progress = _check(name, progress)
    if progress is None:
        return stderr if on_terminal() else None
    if progress is True:
        return stderr
    if progress is False:
        return None
    return progress
