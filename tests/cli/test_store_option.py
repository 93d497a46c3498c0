"""``--store`` (alias ``--home``, ``$THREADLOG_STORE``): which store a command works on."""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING

import pytest
from click.testing import CliRunner

from threadlog import Runtime, open_store
from threadlog.cli import cli
from threadlog.cli import inspect as _inspect  # noqa: F401 - registers commands

if TYPE_CHECKING:
    from pathlib import Path


def _thread_in(home: Path) -> str:
    with open_store(home) as store:
        return store.create_thread("u", title="here")


def test_store_home_and_the_environment_name_the_same_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    thread = _thread_in(tmp_path / "h")
    for args in (["--store", str(tmp_path / "h")], ["--home", str(tmp_path / "h")]):
        result = CliRunner().invoke(cli, ["ls", "--json", *args])
        assert result.exit_code == 0, result.output
        assert thread in result.output
    result = CliRunner().invoke(cli, ["ls", "--json", "--store", f"file://{tmp_path}/h"])
    assert result.exit_code == 0 and thread in result.output
    monkeypatch.setenv("THREADLOG_STORE", str(tmp_path / "h"))
    result = CliRunner().invoke(cli, ["ls", "--json"])
    assert result.exit_code == 0 and thread in result.output


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("memory://", "store on disk"),
        ("postgresql:/x", "threadlog[postgres]"),
    ],
)
def test_a_store_the_command_line_cannot_use_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str, message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["ls", "--store", target])
    assert result.exit_code == 2
    assert message in result.output
    assert os.listdir(tmp_path) == []


def test_an_ephemeral_runtime_forks() -> None:
    async def main() -> None:
        async with Runtime(ephemeral=True) as runtime:
            session = await runtime.create("u", title="t")
            child = await runtime.fork(session.thread_id, title="child")
            assert child.thread_id != session.thread_id
            assert child.state.title == "child"

    asyncio.run(main())
