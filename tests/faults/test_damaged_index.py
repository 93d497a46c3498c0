"""A damaged index is caught at open, set aside and rebuilt; `threadlog rebuild` works from
any state of the index file; waiting for another process's lock on it is bounded and says so
(issue 9, point 8)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from threadlog import StorageError, open_store
from threadlog.cli import cli
from threadlog.cli import inspect as _inspect  # noqa: F401 - registers commands
from threadlog.store.embedded import index as index_module

DAMAGE = [
    "garbage",
    "zero bytes",
    "truncated",
    "a page overwritten",
    "a folder",
    "a symlink",
    "stale wal and shm",
]


def _home_with_threads(tmp_path: Path) -> tuple[Path, list[str]]:
    home = tmp_path / "home"
    with open_store(home) as store:
        threads = [store.create_thread("a", title=f"t{i}") for i in range(3)]
        for thread in threads:  # enough rows that the index has several pages
            for i in range(40):
                store.append(thread, "custom.x", {"i": i, "pad": "p" * 100}, durable=False)
            store.append(
                thread,
                "memory.written",
                {
                    "memory_id": thread,
                    "fact": "f" * 3000,
                    "source_event": thread,
                    "scope": "thread",
                    "written_at": "2026-01-01T00:00:00Z",
                },
            )
    return home, threads


def _damage(path: Path, damage: str) -> None:
    size = path.stat().st_size
    if damage == "garbage":
        path.write_bytes(os.urandom(size))
    elif damage == "zero bytes":
        path.write_bytes(b"")
    elif damage == "truncated":
        os.truncate(path, size // 2 + 100)
    elif damage == "a page overwritten":
        with open(path, "r+b") as f:  # a page in the middle: opening alone does not notice
            f.seek((size // 4096 // 2) * 4096)
            f.write(os.urandom(4096))
    elif damage == "a folder":
        path.unlink()
        path.mkdir()
    elif damage == "a symlink":
        path.unlink()
        path.symlink_to("/dev/null")
    else:
        for suffix in ("-wal", "-shm"):
            Path(f"{path}{suffix}").write_bytes(os.urandom(33_000))


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_index_is_set_aside_and_rebuilt_at_open(tmp_path: Path, damage: str) -> None:
    home, threads = _home_with_threads(tmp_path)
    _damage(home / "index.sqlite3", damage)
    with open_store(home) as store:
        assert sorted(t.thread_id for t in store.threads()) == sorted(threads)
        assert all(t.last_ord == 42 for t in store.threads())
        assert len(store.memories()) == 3


@pytest.mark.parametrize("damage", DAMAGE)
def test_rebuild_works_from_any_state_of_the_index(tmp_path: Path, damage: str) -> None:
    home, threads = _home_with_threads(tmp_path)
    _damage(home / "index.sqlite3", damage)
    result = CliRunner().invoke(cli, ["rebuild", "--home", str(home), "--json"])
    assert result.exit_code == 0, (result.output, result.exception)
    assert '"threads": 3' in result.stdout


def test_rebuild_of_an_index_damaged_under_an_open_store(tmp_path: Path) -> None:
    home, threads = _home_with_threads(tmp_path)
    with open_store(home) as store:
        _damage(home / "index.sqlite3", "garbage")
        assert store.rebuild() == 3 * 42
        assert len(store.threads()) == 3


def test_a_lock_held_by_another_process_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, _ = _home_with_threads(tmp_path)
    monkeypatch.setattr(index_module, "BUSY_TIMEOUT", 0.2)
    other = sqlite3.connect(home / "index.sqlite3", isolation_level=None)
    try:
        other.execute("BEGIN EXCLUSIVE")  # e.g. a long `threadlog rebuild` elsewhere
        with pytest.raises(StorageError, match="locked by another process"):
            open_store(home)
        result = CliRunner().invoke(cli, ["ls", "--home", str(home)])
        assert result.exit_code == 3
        assert "locked by another process" in result.stderr
    finally:
        other.close()
