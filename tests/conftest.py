from __future__ import annotations

import os
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from threadlog import EmbeddedStore, open_store

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


@pytest.fixture
def home(tmp_path: Path) -> str:
    return str(tmp_path / "home")


@pytest.fixture
def store(home: str) -> Iterator[EmbeddedStore]:
    with open_store(home) as s:
        yield s


@pytest.fixture(autouse=True)
def _no_ambient_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Never touch the developer's ~/.threadlog from a test.
    monkeypatch.setenv("THREADLOG_HOME", os.fspath(tmp_path / "ambient-home"))


@pytest.fixture
def dead_pid() -> str:
    """The id of a process that has exited (the writer of an orphaned temporary file)."""
    return subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
