"""The README's Python examples run as written (docs are executable)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.harness.service import ServerProcess

README = Path(__file__).resolve().parents[1] / "README.md"
SERVICE = "http://127.0.0.1:8765"
"""The address the README's service examples use."""


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_readme_has_examples() -> None:
    assert python_blocks()


@pytest.mark.parametrize("index", range(len(python_blocks())))
def test_readme_example_runs(index: int, tmp_path: Path) -> None:
    code = python_blocks()[index].replace("/tmp/threadlog-quickstart", str(tmp_path / "qs"))
    if SERVICE not in code:
        exec(compile(code, f"README.md block {index}", "exec"), {})
        return
    # The service example talks to `threadlog serve`: start one (open mode, loopback).
    with ServerProcess(str(tmp_path / "served")) as server:
        code = code.replace(SERVICE, server.url)
        exec(compile(code, f"README.md block {index}", "exec"), {"token": None})


def test_readme_starts_with_the_two_commands() -> None:
    text = README.read_text()
    first_block = re.search(r"```bash\n(.*?)```", text, re.S)
    assert first_block is not None
    commands = [line.split("#")[0].strip() for line in first_block.group(1).splitlines()]
    assert commands == ["make demo", "make test"]
    assert "make test" in (README.parent / ".ci" / "run").read_text()
