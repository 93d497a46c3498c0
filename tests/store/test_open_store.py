"""`open_store(target)`: one way to open every backend, and the in-memory store on its own.

The shared behaviour of the backends is `threadlog.testing.StoreContract`
(``test_contract_*.py``); this file checks how a target picks one, and that nothing is
created on disk for a target no backend serves.
"""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING

import pytest

import threadlog
from threadlog import EmbeddedStore, MemoryStore, UsageError, open_store
from threadlog.store import Catalog, LocalHome, Snapshots, Store
from threadlog.testing.contract import EVENT_ID, check_chain

if TYPE_CHECKING:
    from pathlib import Path


def test_a_directory_or_file_url_opens_the_embedded_store(tmp_path: Path) -> None:
    with open_store(tmp_path / "a") as store:
        assert isinstance(store, EmbeddedStore)
        assert store.home == str(tmp_path / "a")
        thread = store.create_thread("u")
    with open_store(f"file://{tmp_path}/a", commit_interval=0.01) as store:
        assert isinstance(store, EmbeddedStore) and store.commit_interval == 0.01
        assert store.exists(thread)
    with open_store(f"file://localhost{tmp_path}/b%20c") as store:
        assert isinstance(store, EmbeddedStore) and store.home == str(tmp_path / "b c")


def test_memory_targets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    one, two = open_store("memory://"), open_store(":memory:")
    assert isinstance(one, MemoryStore) and isinstance(two, MemoryStore) and one is not two
    one.create_thread("u")
    assert two.thread_ids() == []
    shared = open_store("memory://shared-test")
    thread = shared.create_thread("u")
    again = open_store("memory://shared-test")
    assert again is shared and again.exists(thread)
    shared.close()
    fresh = open_store("memory://shared-test")  # a closed store's name opens a new one
    assert fresh is not shared and fresh.thread_ids() == []
    fresh.close()
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    ("target", "match"),
    [
        ("postgresql:/x", r"threadlog\[postgres\]"),
        ("postgres:x", r"postgresql://user@host"),
        ("s3://bucket/x", "no store backend for the scheme 's3'"),
        ("sqlite:x.db", "no store backend"),
        ("file:relative/x", "file:///absolute/path"),
        ("file://otherhost/x", "not a local file URL"),
        ("memory:x", "memory://NAME"),
        ("", "empty"),
    ],
)
def test_other_targets_are_refused_and_create_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str, match: str
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match=match):
        open_store(target)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("scheme", ["postgresql", "postgres", "POSTGRESQL"])
def test_a_postgresql_url_names_the_postgres_store(scheme: str) -> None:
    pytest.importorskip("psycopg")
    from threadlog.errors import StorageError

    # nothing listens on port 1: the open fails at once, as a StorageError naming the target
    with pytest.raises(StorageError, match="cannot open the store at postgresql://127.0.0.1:1"):
        open_store(f"{scheme}://nobody@127.0.0.1:1/db")


def test_a_directory_with_a_colon_opens_when_written_as_a_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with open_store("./db:1") as store:
        assert isinstance(store, EmbeddedStore)
    assert os.listdir(tmp_path) == ["db:1"]


def test_capabilities_are_checked_by_protocol(tmp_path: Path) -> None:
    with open_store(tmp_path / "home") as embedded, open_store("memory://") as memory:
        assert isinstance(embedded, Store) and isinstance(memory, Store)
        assert isinstance(embedded, Snapshots) and isinstance(memory, Snapshots)
        assert isinstance(embedded, Catalog) and not isinstance(memory, Catalog)
        assert isinstance(embedded, LocalHome) and not isinstance(memory, LocalHome)


def test_import_threadlog_does_not_import_pytest() -> None:
    import subprocess
    import sys

    code = (
        "import sys, threadlog, threadlog.store, threadlog.testing\n"
        "threadlog.open_store('memory://').close()\n"
        "assert 'pytest' not in sys.modules, 'pytest imported'\n"
        "threadlog.testing.StoreContract\n"
        "assert 'pytest' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    assert threadlog.Store is Store


def test_memory_store_writes_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    home = cwd / "home"
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("THREADLOG_HOME", os.fspath(home))
    monkeypatch.setenv("THREADLOG_STORE", os.fspath(home))
    before = sorted(p.name for p in tmp_path.iterdir())

    with MemoryStore() as store:
        thread = store.create_thread("alice", title="t", cwd=os.fspath(cwd))
        store.append(thread, "turn.started", {"turn_id": "t1", "input": "hi"})
        big = store.append(thread, "custom.big", {"blob": "x" * 200_000}, durable=True)
        store.append(thread, "custom.x", {}, id=EVENT_ID)
        asyncio.run(store.aappend(thread, "custom.y", {"v": 1}))
        store.flush()
        store.release(thread)
        assert store.state(thread).active_turn == "t1"
        assert store.resolve(big.data) == {"blob": "x" * 200_000}
        assert store.thread_ids() == [thread]
        store.fork(thread)
        check_chain(store.read(thread))

    assert os.listdir(cwd) == []
    assert not home.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_runtime_takes_a_store_or_a_target(tmp_path: Path) -> None:
    """`Runtime(target)` opens what `open_store` opens (and closes it); a `Store` passed in is
    the caller's to close."""
    from threadlog import Runtime

    async def main() -> None:
        async with Runtime(str(tmp_path / "home")) as runtime:
            session = await runtime.create("u")
            assert runtime.store.exists(session.thread_id)
        async with Runtime("memory://") as runtime:
            await runtime.create("u")
        with open_store(tmp_path / "mine") as mine:
            async with Runtime(mine) as runtime:
                session = await runtime.create("u")
            assert mine.read(session.thread_id)  # still open: the runtime did not close it

    asyncio.run(main())
    assert (tmp_path / "home").is_dir()


def test_import_threadlog_never_imports_psycopg() -> None:
    import subprocess
    import sys

    code = (
        "import sys, threadlog, threadlog.cli, threadlog.server.hub, threadlog.store.open\n"
        "print(sorted(m for m in sys.modules if m.startswith('psycopg')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
