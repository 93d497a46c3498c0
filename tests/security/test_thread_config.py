"""A thread's working directory is fixed when it is created (issue 9, point 12b).

A relative ``cwd`` would be resolved against whatever directory the process that opens the
thread later happens to run in: tools would read and write somewhere else after a resume.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from threadlog import EmbeddedStore
from threadlog.runtime import Runtime
from threadlog.store.inmemory import MemoryStore

if TYPE_CHECKING:
    from collections.abc import Iterator

    from threadlog.store.protocol import Store


@pytest.fixture(params=["embedded", "memory"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "memory":
        yield MemoryStore()
    else:
        with EmbeddedStore(str(tmp_path / "home")) as store:
            yield store


# test_a_relative_cwd_is_stored_absolute: now in StoreContract


# test_a_cwd_that_is_not_a_path_is_refused: now in StoreContract


def test_tools_of_a_resumed_thread_run_where_it_was_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "elsewhere").mkdir()
    home = str(tmp_path / "home")

    async def create() -> str:
        monkeypatch.chdir(tmp_path)
        async with Runtime(home) as runtime:
            session = await runtime.create("u", cwd="ws")
            return session.thread_id

    async def reopen(thread: str) -> Path:
        monkeypatch.chdir(tmp_path / "elsewhere")
        async with Runtime(home) as runtime:
            session = await runtime.open(thread)
            return session._cwd()

    thread = asyncio.run(create())
    assert asyncio.run(reopen(thread)) == tmp_path / "ws"
    assert os.getcwd() == str(tmp_path / "elsewhere")
