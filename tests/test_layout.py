"""The package's shape (issue 11): no import circle, and consumers reach the store through its
port, never by backend class or ``getattr``."""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def _modules() -> dict[str, Path]:
    found = {}
    for path in SRC.rglob("*.py"):
        name = ".".join(path.relative_to(SRC).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that ``name`` imports, type-checking-only imports included."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in modules)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                if full in modules:
                    found.add(full)
                elif base in modules:
                    found.add(base)
    return found


def test_no_import_circle() -> None:
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert cycles == [], [" -> ".join(c) for c in cycles[:5]]


def test_consumers_reach_the_store_through_its_port() -> None:
    backend_checks = re.compile(
        r"isinstance\([^)]*EmbeddedStore|getattr\((self\.)?(runtime\.)?store"
    )
    offenders = [
        f"{path.relative_to(SRC)}:{number}"
        for path in SRC.rglob("*.py")
        if "store" not in path.relative_to(SRC).parts
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if backend_checks.search(line)
    ]
    assert offenders == []


def test_the_cli_and_the_runtime_import_no_backend() -> None:
    modules = _modules()

    def backends(found: set[str]) -> list[str]:
        return sorted(
            m
            for m in found
            if m == "threadlog.store.inmemory"
            or m == "threadlog.store.embedded"
            or m.startswith("threadlog.store.embedded.")
        )

    offenders = {
        name: backends(_imports(name, path, modules))
        for name, path in modules.items()
        if name.startswith(("threadlog.cli", "threadlog.runtime"))
    }
    assert {name: found for name, found in offenders.items() if found} == {}
