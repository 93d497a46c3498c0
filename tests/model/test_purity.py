"""Rule 1: the model ring does no I/O and reads no clock, so it imports no I/O module."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import threadlog.model

MODEL_DIR = Path(threadlog.model.__file__).parent
SRC_DIR = MODEL_DIR.parent.parent

# Modules that must not be loaded at all after ``import threadlog.model``.
FORBIDDEN_LOADED = ("asyncio", "sqlite3", "socket", "threading", "subprocess", "psycopg")

# Modules the model's own source must not import (``os`` and ``time`` are loaded by the
# interpreter itself, so they can only be checked in the source).
FORBIDDEN_IMPORTS = frozenset(
    {"os", "time", "asyncio", "sqlite3", "threading", "socket", "subprocess", "datetime", "psycopg"}
)


def _modules_after(code: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        check=True,
        text=True,
        cwd=SRC_DIR,
    ).stdout
    modules: list[str] = json.loads(out.splitlines()[-1])
    return modules


def _forbidden(modules: list[str]) -> list[str]:
    return sorted({m.split(".")[0] for m in modules} & set(FORBIDDEN_LOADED))


def test_importing_threadlog_model_loads_no_io_module() -> None:
    modules = _modules_after("import threadlog.model")
    assert "threadlog.model" in modules
    assert _forbidden(modules) == []


def test_model_modules_themselves_load_no_io_module() -> None:
    # Bypass ``threadlog/__init__.py`` (a stub package with the real ``__path__``) to check the
    # model ring on its own, whatever the top-level package re-exports.
    code = (
        "import sys, types\n"
        f"pkg = types.ModuleType('threadlog'); pkg.__path__ = [{str(MODEL_DIR.parent)!r}]\n"
        "sys.modules['threadlog'] = pkg\n"
        + "".join(f"import threadlog.model.{p.stem}\n" for p in sorted(MODEL_DIR.glob("*.py")))
    )
    modules = _modules_after(code)
    assert "threadlog.model.reducer" in modules
    assert "threadlog.store" not in modules
    assert _forbidden(modules) == []


def _imported_names(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name | ast.Attribute)
            and (node.func.id if isinstance(node.func, ast.Name) else node.func.attr)
            in ("__import__", "import_module")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names.add(node.args[0].value)
    return names


MODEL_FILES = sorted(MODEL_DIR.glob("*.py"))


def test_the_scan_sees_every_model_module() -> None:
    stems = {p.stem for p in MODEL_FILES}
    assert {"codec", "envelope", "events", "ids", "reducer", "state", "toolcalls"} <= stems


@pytest.mark.parametrize("path", MODEL_FILES, ids=lambda p: p.name)
def test_model_source_imports_no_io_or_clock_module(path: Path) -> None:
    imported = _imported_names(path)
    bad = sorted(n for n in imported if n.split(".")[0] in FORBIDDEN_IMPORTS)
    assert bad == [], f"{path.name} imports {bad}"


@pytest.mark.parametrize("path", MODEL_FILES, ids=lambda p: p.name)
def test_model_source_imports_only_stdlib_orjson_and_threadlog_core(path: Path) -> None:
    for name in _imported_names(path):
        top = name.split(".")[0]
        if top == "threadlog":
            # (threadlog._dataclass: the stdlib decorator with shared methods, itself pure)
            assert name in (
                "threadlog.errors",
                "threadlog._version",
                "threadlog._dataclass",
            ) or name.startswith("threadlog.model"), name
        else:
            assert top in sys.stdlib_module_names or top in ("__future__", "orjson"), name


def test_scanner_catches_forbidden_imports(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import os.path\nfrom time import monotonic\nimport hashlib\n"
        "def f():\n    import asyncio\n    __import__('socket')\n",
        encoding="utf-8",
    )
    imported = _imported_names(sample)
    assert {n for n in imported if n.split(".")[0] in FORBIDDEN_IMPORTS} == {
        "os.path",
        "time",
        "asyncio",
        "socket",
    }
