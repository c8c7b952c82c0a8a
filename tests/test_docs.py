"""The code examples of README.md and docs/*.md run as tests.

Every fenced block opened with ```python is one test: it runs in a fresh namespace (nothing carries over
from the block before it, so each example is whole) with a temporary directory as the working directory
(files an example writes land there; ``examples/`` is on ``sys.path``). The conventions, stated here for the
authors of the docs:

* ``# doctest: +SKIP <why>`` as the block's first line: the block is not run (it needs a CUDA GPU, a dask
  cluster, or it is a fragment of a longer file); the reason is shown as the skip reason.
* ``# doctest: +SLOW <why>`` as the block's first line: the block runs only with the tests marked ``slow``
  (``make test-all``); used where a block takes more than a few seconds.
* ``expression   # -> TEXT`` at the end of a top-level expression statement: ``str(value)`` must equal
  TEXT, or, where TEXT ends in ``...``, start with what comes before the ``...``. Any other comment is
  prose and is not checked.

Blocks fenced any other way (```python-text, plain ```, ```sh) are not run. A block that needs an optional
dependency this environment lacks (torch, dask, ...: a ModuleNotFoundError for one of ``OPTIONAL``, or
blockfma's own "pip install 'blockfma[extra]'" ImportError) is skipped with that reason, as the other tests
of those extras skip; any other error fails.
"""

from __future__ import annotations

import ast
import os
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
MARKER = re.compile(r"#\s*doctest:\s*\+(SKIP|SLOW)\b\s*(.*)")
ARROW = re.compile(r"#\s*->\s*(.*?)\s*$")
OPTIONAL = {"torch", "dask", "distributed", "matplotlib", "numba", "triton", "cupy", "bitwuzla", "cvc5",
            "PIL", "transformers"}


def missing_optional(error: ImportError) -> str | None:
    """The reason to skip where ``error`` says an optional dependency is missing, else None."""
    name = (getattr(error, "name", None) or "").split(".")[0]
    if isinstance(error, ModuleNotFoundError) and name in OPTIONAL:
        return f"needs {name}, not installed here"
    if "pip install 'blockfma[" in str(error):
        return str(error)
    return None


def blocks(path):
    """(line number, source) of each ```python block of a Markdown file."""
    text = path.read_text(encoding="utf-8")
    for match in FENCE.finditer(text):
        line = text.count("\n", 0, match.start(1)) + 1
        yield line, match.group(1)


def cases():
    for path in FILES:
        for line, source in blocks(path):
            first = source.lstrip().splitlines()[0] if source.strip() else ""
            marker = MARKER.search(first)
            marks = []
            if marker and marker.group(1) == "SKIP":
                marks.append(pytest.mark.skip(reason=marker.group(2) or "marked +SKIP in the docs"))
            elif marker and marker.group(1) == "SLOW":
                marks.append(pytest.mark.slow)
            name = f"{path.relative_to(ROOT)}:{line}"
            yield pytest.param(path, line, source, id=name, marks=marks)


def expected_outputs(source):
    """{line number in the block: expected text} of the ``# ->`` comments."""
    found = {}
    for number, text in enumerate(source.splitlines(), start=1):
        if "#" not in text:
            continue
        # the comment must be a real comment, not inside a string: tokenising is overkill for the docs,
        # which never put "# ->" inside a string literal
        match = ARROW.search(text)
        if match:
            found[number] = match.group(1)
    return found


def matches(value, expected):
    text = str(value)
    if expected.endswith("..."):
        return text.startswith(expected[:-3])
    return text == expected


def run_block(source, label):
    """Run one block statement by statement, checking the ``# ->`` outputs; returns the namespace."""
    tree = ast.parse(source, filename=label)
    wanted = expected_outputs(source)
    namespace = {"__name__": "__docs__"}
    checked = set()
    for statement in tree.body:
        end = statement.end_lineno
        want = wanted.get(end)
        if want is not None and isinstance(statement, ast.Expr):
            code = compile(ast.Expression(statement.value), label, "eval")
            value = eval(code, namespace)
            assert matches(value, want), (
                f"{label}, line {end}: the docs say '# -> {want}', the code gives {str(value)!r}")
            checked.add(end)
        else:
            exec(compile(ast.Module([statement], type_ignores=[]), label, "exec"), namespace)
    stray = set(wanted) - checked
    assert not stray, f"{label}: '# ->' on lines {sorted(stray)} that are not the end of an expression"
    return namespace


@pytest.mark.parametrize("path, line, source", list(cases()))
def test_example_runs(path, line, source, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    try:
        run_block(source, f"{path.relative_to(ROOT)}:{line}")
    except ImportError as error:
        reason = missing_optional(error)
        if reason is None:
            raise
        pytest.skip(reason)


# --- the harness itself: it must fail where the docs are wrong --------------------------------------------

def test_harness_finds_blocks_and_markers(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("text\n```python\nx = 1\n```\n```python-text\nnot run\n```\n"
                    "```python\n# doctest: +SKIP needs a GPU\nboom\n```\n", encoding="utf-8")
    found = list(blocks(page))
    assert [line for line, _ in found] == [3, 9]
    assert MARKER.search(found[1][1].splitlines()[0]).group(1) == "SKIP"


def test_harness_checks_outputs():
    run_block("x = 2\nx + 1   # -> 3\n'abcdef'   # -> abc...\n", "ok")
    with pytest.raises(AssertionError, match="the docs say"):
        run_block("x = 2\nx + 1   # -> 4\n", "wrong")
    with pytest.raises(AssertionError, match="not the end of an expression"):
        run_block("x = 2   # -> 2\n", "stray")
    with pytest.raises(NameError):
        run_block("undefined_name + 1\n", "broken")


def test_only_missing_optional_dependencies_skip():
    assert missing_optional(ModuleNotFoundError("No module named 'torch'", name="torch")) is not None
    assert missing_optional(ImportError("bf.torch needs torch: pip install 'blockfma[torch]'")) is not None
    assert missing_optional(ModuleNotFoundError("No module named 'blockfma.nope'", name="blockfma.nope")) is None
    assert missing_optional(ImportError("cannot import name 'nope' from 'blockfma'")) is None


def test_every_page_with_code_is_collected():
    assert any(path.name == "README.md" for path in FILES)
    assert sum(1 for path in FILES for _ in blocks(path)) >= 5
    assert os.path.isdir(ROOT / "examples") and sys.version_info >= (3, 11)


def test_readme_device_table_is_current():
    """The README's device table and open questions are generated from the presets; a preset or question
    changed without rerunning ``python scripts/device_table.py --write README.md`` fails here."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("device_table", ROOT / "scripts" / "device_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert module.update(text) == text, "README.md: run python scripts/device_table.py --write README.md"
    assert "| H100 | NVIDIA Hopper sm_90 |" in text and "`cublas-epilogue`" in text
    stale = text.replace("| V100 | NVIDIA Volta sm_70 |", "| V100 | NVIDIA Volta sm_7x |")
    assert module.update(stale) != stale


LINK = re.compile(r"!?\[[^\]]*\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_local_links_and_figures_exist():
    """Every relative link and image of README.md and docs/*.md names a file of the repository (the data
    path figure, the reproductions' PNGs, the docs pages the README points to)."""
    missing = []
    for path in FILES:
        for target in LINK.findall(path.read_text(encoding="utf-8")):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (path.parent / target).exists():
                missing.append(f"{path.relative_to(ROOT)} -> {target}")
    assert not missing, "links to missing files: " + ", ".join(missing)
    assert (ROOT / "docs" / "datapath.svg").stat().st_size > 1000


def test_datapath_figure_names_model_fields():
    """docs/datapath.svg is labelled with Model's field names (its script refuses names Model lacks), and
    the committed SVG keeps its text as text, each label findable."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("datapath_figure", ROOT / "scripts" / "datapath_figure.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.check_fields()                       # raises SystemExit naming a field Model does not have
    svg = (ROOT / "docs" / "datapath.svg").read_text(encoding="utf-8")
    for name in ("block_width", "fraction_bits", "e_zero", "alignment", "c_entry", "carry_bits",
                 "output_rounding"):
        assert name in svg, f"docs/datapath.svg has no label {name}; rerun scripts/datapath_figure.py"
    module.FIELDS = module.FIELDS + ("no_such_field",)
    with pytest.raises(SystemExit, match="no_such_field"):
        module.check_fields()
