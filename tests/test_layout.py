"""The shape of the source tree: docs/layout.md names every module, no module imports itself round a cycle,
and src/ stays within its growth gates (docs/contributing.md says why).

The oracle is the source itself, read with ast (nothing is imported).

The import graph has an edge from a module to every blockfma module one of its import statements runs,
wherever the statement stands (in a function too: a lazy import is still a dependency), except under
``if TYPE_CHECKING:`` (never run).  ``from .m import name`` is an edge to ``m.name`` where that is a module,
else to ``m`` (a package's ``__init__``); ``from . import x`` likewise.  Importing a module of another
package runs that package's ``__init__`` first, so ``from ..probes.runtime import x`` is an edge to
``probes`` as well as to ``probes.runtime`` (the importer's own packages are running already: no edge).
"""

from __future__ import annotations

import ast
import re
from collections import deque
from pathlib import Path

from helpers import REPO

SRC = REPO / "src" / "blockfma"

# The growth gates of issue 30.  Functions of 60 lines or more: 33 when this gate came in, none once issue
# 30 was done.  Lower a limit when the code goes below it, so that it holds what was won.
LONG_FUNCTION = 60
MAX_LONG_FUNCTIONS = 0
MAX_SRC_LINES = 32_322  # issue 31 added engine/tensors.py (bf.gemm on tensors where they lie) and the grid path;
# issue 33 added 80 (torch semantics: create_graph, out=, meta/fake tensors, threads, mw.matmul autograd), +22
# (the report's probe cache and glance table), +22 (CLI scales, parser bounds), -11 (one scale-shape check, one
# batched engine call); issue 32 part 2 (+67): the chooser's Ozaki bound on the data (multiword.bounds.ozaki_ratios);
# issue 31 (+22): the exponent pass two lanes per word; issue 33 (+21): gemm's scale_layout for a square scale_b
# issue 34 part 2 (+156): divergence's model-level summary (KL, top-1, perplexity, first layer/step apart, generate=)
# issue 34 part 1 (+130): library plans with their evidence (torch.orders), explain, split_k for every routed dtype
# issue 34 part 3 (+76): evidence per preset model and route rule (Device.evidence, rule_evidence, report(evidence=True))
# issue 34 part 4 (+28): small calls (one thread below SMALL_WORK, per-model answers cached, numpy casts for store)
# issue 32 part 1 (+190): Ozaki II's fused Triton kernels (multiword/ozaki_fused.py, 180; a test-only CRT helper moved out)
# issue 32 part 1 (+91): Ozaki I fused (ozaki_fused's slicing and levels kernels, 75; its chooser cost, dispatch)
# issue 32, the word methods' passes (+156): the split's one look at the operands (split.summary), the float32 split
# of binary32 data, fp32 sums of unscaled words, tf32/bf16 words in one Triton pass (multiword/words_fused.py, 79),
# the overflow rerun, the unit calls timed together (two synchronisations, not two a call)
# issue 31 (+37): the kernel reads A and B in their storage dtype (fp8, fp16, bf16), widened in registers
# clean-up (-256): statements, headers, __all__s, docstrings and comments filled to 120 columns; small dedups


def _modules() -> dict[str, Path]:
    """Every module of blockfma by dotted name below the package ("" is blockfma itself; a package is its
    ``__init__.py``)."""
    out = {}
    for path in sorted(SRC.rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


MODULES = _modules()


def _parents(name: str) -> list[str]:
    """The packages that hold module ``name``, outermost first ("" included)."""
    parts = name.split(".") if name else []
    return [".".join(parts[:i]) for i in range(len(parts))]


def _run_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement of ``tree`` that can run (those under ``if TYPE_CHECKING:`` cannot)."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) and id(n) not in skipped]


def _imports(name: str) -> set[str]:
    """The blockfma modules that importing module ``name`` may run (see the module's docstring)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = set()
    for node in _run_imports(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level:  # relative: below blockfma by construction
            up = package.split(".") if package else []
            up = up[:len(up) - (node.level - 1)]
            imported = [(".".join(up + ([node.module] if node.module else [])), [a.name for a in node.names])]
        else:
            imported = [(a.name, []) for a in node.names] if isinstance(node, ast.Import) else \
                [(node.module or "", [a.name for a in node.names])]
            imported = [(base.removeprefix("blockfma").removeprefix("."), names) for base, names in imported
                        if base == "blockfma" or base.startswith("blockfma.")]
        for base, names in imported:
            subs = [f"{base}.{n}".lstrip(".") for n in names]
            targets.update(sub for sub in subs if sub in MODULES)
            if not names or any(sub not in MODULES for sub in subs):
                targets.add(base)
    targets = {t for t in targets if t in MODULES}
    own = set(_parents(name)) | {name}
    targets |= {p for t in targets for p in _parents(t) if p not in own}
    return targets - {name}


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules its import statements run."""
    return {name: _imports(name) for name in MODULES}


def _components(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of ``graph`` of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, edges = work[-1]
            w = next(edges, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = set()
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.add(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def _shortest_cycle(graph: dict[str, set[str]], component: set[str]) -> str:
    """A shortest cycle through the first module of ``component``, as "a -> b -> a"."""
    start = min(component)
    came: dict[str, str] = {}
    queue = deque([start])
    while queue:
        v = queue.popleft()
        for w in sorted(graph[v] & component):
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(came[path[-1]])
                return " -> ".join(_shown(m) for m in [*reversed(path), start])
            if w not in came:
                came[w] = v
                queue.append(w)
    raise AssertionError(f"no cycle through {start}")  # a component of two or more always has one


def _shown(name: str) -> str:
    return name or "blockfma"


def _label(component: set[str]) -> str:
    return "{" + ", ".join(sorted(map(_shown, component))) + "}"


def test_import_graph_reads_lazy_and_package_imports():
    graph = import_graph()
    assert "progress" in graph["replay"]  # from .progress import reporter, inside a function
    assert {"plot", "experiments.fttn", "experiments", ""} <= graph["report_html"]  # from . import plot (a
    # module), from .experiments import fttn (a module of a package: its __init__ too), from . import __version__
    assert {"probes.order", "probes"} <= graph["experiments.torch_orders"]  # probes/__init__ runs first
    assert "probes" not in graph["probes.order.targets"]  # its own package is running already
    assert not any(name.startswith("blockfma") for deps in graph.values() for name in deps)


def test_no_import_cycles():
    graph = import_graph()
    lines = [f"import cycle: {_shortest_cycle(graph, c)} (modules {_label(c)})" for c in _components(graph)]
    assert not lines, "\n".join(lines)


def test_provenance_imports_only_leaves():
    # every record's writer uses it, so it must not pull in the probes, the engines or torch's front
    assert import_graph()["provenance"] <= {"optional", "version"}


def _layout_rows() -> list[str]:
    text = (REPO / "docs" / "layout.md").read_text()
    section = text.split("\n## Modules\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([^`]+)` \|", section, flags=re.M)


def test_layout_page_names_every_module_once():
    rows = _layout_rows()
    names = {name: path.relative_to(SRC).as_posix() for name, path in MODULES.items() if name}
    expected = {p.removesuffix("__init__.py") for p in names.values()} | {"__init__.py"}
    missing = sorted(expected - set(rows))
    stale = sorted(set(rows) - expected)
    twice = sorted({r for r in rows if rows.count(r) > 1})
    lines = [f"docs/layout.md lacks a row for it: | `{m}` | what it is |" for m in missing]
    lines += [f"docs/layout.md names a module that is not there: `{s}`" for s in stale]
    lines += [f"docs/layout.md names it twice: `{t}`" for t in twice]
    assert not lines, "\n".join(lines)


def long_functions(root: Path = SRC) -> list[str]:
    """``path:line name (lines)`` of every function of ``LONG_FUNCTION`` lines or more under ``root``."""
    rows = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length >= LONG_FUNCTION:
                    rows.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.name} ({length} lines)")
    return rows


def test_growth_gate_long_functions():
    rows = long_functions()
    assert len(rows) <= MAX_LONG_FUNCTIONS, (
        f"{len(rows)} functions of {LONG_FUNCTION}+ lines in src/ (at most {MAX_LONG_FUNCTIONS}):\n" + "\n".join(rows))


def test_growth_gate_source_lines():
    lines = sum(len(path.read_text().splitlines()) for path in (REPO / "src").rglob("*.py"))
    assert lines <= MAX_SRC_LINES, f"src/ has {lines} lines of Python (at most {MAX_SRC_LINES})"
