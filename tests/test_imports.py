"""The package's import structure: no private names across modules, no engine.api <-> engine.distributed cycle.

The oracle is the source itself, read with ast (nothing is imported)."""

from __future__ import annotations

import ast

from helpers import REPO

SRC = REPO / "src" / "blockfma"


def _tree(path):
    return ast.parse(path.read_text(), str(path))


def test_no_private_names_imported_across_modules():
    found = []
    for path in sorted(SRC.rglob("*.py")):
        tree = _tree(path)
        modules = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        found.append(f"{path.relative_to(SRC)}:{node.lineno}: from {node.module} import {alias.name}")
                    if node.level:  # names bound to our own modules
                        modules.add(alias.asname or alias.name)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules \
                    and node.attr.startswith("_") and not node.attr.startswith("__"):
                found.append(f"{path.relative_to(SRC)}:{node.lineno}: {node.value.id}.{node.attr}")
    assert not found, "\n".join(found)


def test_engine_distributed_imports_no_engine_module():
    imported = [node.module or "" for node in ast.walk(_tree(SRC / "engine" / "distributed.py"))
                if isinstance(node, ast.ImportFrom) and node.level == 1]
    imported += [alias.name for node in ast.walk(_tree(SRC / "engine" / "distributed.py"))
                 if isinstance(node, ast.ImportFrom) and node.level == 1 and not node.module for alias in node.names]
    assert not imported, imported
