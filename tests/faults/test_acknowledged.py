"""Acknowledged records are never cut, and their loss is never silent (issue 9, points 1-3).

Scan alone cannot tell a log cut at a line boundary from one that was always that short, so
the index keeps, for each thread, the furthest ordinal a writer ever acknowledged (kept across
`rebuild`). Each test damages a home the way an operator or an attacker could.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from threadlog import EmbeddedStore, IntegrityError
from threadlog.cli import cli


def _thread(home: Path, records: int = 6) -> tuple[str, Path]:
    with EmbeddedStore(home) as store:
        thread = store.create_thread("tester")
        for i in range(records - 1):
            store.append(thread, "custom.note", {"i": i}, durable=True)
        return thread, Path(store.path_of(thread))


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def test_a_cut_at_a_line_boundary_fails_verify_and_says_how_many(tmp_path: Path) -> None:
    thread, path = _thread(tmp_path)
    path.write_bytes(b"".join(_lines(path)[:-2]))  # a clean log, two records short
    content = path.read_bytes()
    with EmbeddedStore(tmp_path) as store:
        report = store.verify(thread)
        assert not report.ok
        assert report.first_bad_ord == 5
        assert "2 acknowledged record(s) missing" in str(report.error)
        with pytest.raises(IntegrityError, match="missing"):
            store.read(thread)
        with pytest.raises(IntegrityError, match="missing"):
            store.append(thread, "custom.note", {"reuses": "ord 5"})
        assert store.thread_info(thread).damage is not None
    result = CliRunner().invoke(cli, ["verify", thread, "--json", "--home", str(tmp_path)])
    assert result.exit_code == 1, result.output
    assert "2 acknowledged record(s) missing" in json.loads(result.output)["error"]
    assert path.read_bytes() == content


def test_rebuild_does_not_forget_what_was_acknowledged(tmp_path: Path) -> None:
    thread, path = _thread(tmp_path)
    path.write_bytes(b"".join(_lines(path)[:-1]))
    with EmbeddedStore(tmp_path) as store:
        store.rebuild()
        assert not store.verify(thread).ok
    with EmbeddedStore(tmp_path) as store:  # and after another open's catch-up
        assert not store.verify(thread).ok


def test_a_torn_tail_below_what_was_acknowledged_is_not_cut(tmp_path: Path) -> None:
    """Half of the last acknowledged line gone: it looks torn, but the index knew it."""
    thread, path = _thread(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 40])
    content = path.read_bytes()
    with EmbeddedStore(tmp_path) as store:
        assert not store.verify(thread).ok
        with pytest.raises(IntegrityError, match="acknowledged"):
            store.append(thread, "custom.note", {"would": "reuse ord 6"})
    assert path.read_bytes() == content


def test_a_rollout_restored_from_another_history_is_caught(tmp_path: Path) -> None:
    """A valid log of the same thread with another record at the last acknowledged ordinal
    (an old copy, continued elsewhere, put back): every hash checks, only the index knows."""
    home, other = tmp_path / "home", tmp_path / "other"
    thread, path = _thread(home)
    shutil.copytree(home, other)
    with EmbeddedStore(home) as store:
        store.append(thread, "custom.note", {"history": "acknowledged here"})
    with EmbeddedStore(other) as store:
        store.append(thread, "custom.note", {"history": "written elsewhere"})
        forged = Path(store.path_of(thread)).read_bytes()
    path.write_bytes(forged)
    with EmbeddedStore(home) as store:
        report = store.verify(thread)
        assert not report.ok and report.first_bad_ord == 7
        assert "not the record that was acknowledged" in str(report.error)


def test_a_deleted_rollout_is_reported_not_forgotten(tmp_path: Path) -> None:
    thread, path = _thread(tmp_path)
    os.unlink(path)
    with EmbeddedStore(tmp_path) as store:
        assert store.missing_threads() == [thread]
        report = store.verify(thread)
        assert not report.ok and "6 acknowledged record(s) missing" in str(report.error)
        with pytest.raises(IntegrityError, match="missing"):
            store.append(thread, "custom.note", {})
    result = CliRunner().invoke(cli, ["verify", "--home", str(tmp_path)])
    assert result.exit_code == 1 and thread in result.output


def test_a_damaged_single_record_is_a_damaged_thread_not_no_thread(tmp_path: Path) -> None:
    """Point 2: the only record has one bad byte: never unlinked, reported as damage."""
    with EmbeddedStore(tmp_path) as store:
        thread = store.create_thread("tester")
        path = Path(store.path_of(thread))
    data = bytearray(path.read_bytes())
    data[40] ^= 0x04
    path.write_bytes(bytes(data))
    os.utime(path, (1, 1))  # old: no creator can be at work on it
    for _ in range(2):
        with EmbeddedStore(tmp_path) as store:
            store.rebuild()
            report = store.verify(thread)
            assert not report.ok and report.first_bad_ord == 1
            assert thread in store.thread_ids()
    assert path.read_bytes() == bytes(data)
    result = CliRunner().invoke(cli, ["verify", "--home", str(tmp_path)])
    assert result.exit_code == 1 and "first bad ord 1" in result.output


def test_an_unborn_torn_rollout_is_quarantined_not_deleted(tmp_path: Path) -> None:
    """A creation cut inside its first line held no acknowledged record; its bytes are still
    moved aside, not unlinked."""
    with EmbeddedStore(tmp_path) as store:
        thread = store.create_thread("tester")
        path = Path(store.path_of(thread))
    # an index that never saw the thread, as after a crash inside create_thread
    for name in os.listdir(tmp_path):
        if name.startswith("index.sqlite3"):
            os.unlink(tmp_path / name)
    fragment = path.read_bytes()[:50]
    path.write_bytes(fragment)
    os.utime(path, (1, 1))
    with EmbeddedStore(tmp_path) as store:
        assert thread not in store.thread_ids()
    assert not path.exists()
    (aside,) = (tmp_path / "quarantine").iterdir()
    assert aside.name.startswith(f"{thread}.jsonl.unborn-")
    assert aside.read_bytes() == fragment


def test_records_only_a_journal_knows_are_reported_missing(tmp_path: Path) -> None:
    """A crashed store's journal holds ords 5-9 of a thread whose rollout was cut back to
    ord 3 (line boundary, no index to tell): the journal cannot be chained on, so `verify`
    fails and says how many records are missing; the journal is kept."""
    live, home = tmp_path / "live", tmp_path / "home"
    with EmbeddedStore(live) as store:
        thread = store.create_thread("a")
        other = store.create_thread("b")
        for i in range(3):
            store.append(thread, "custom.note", {"i": i}, durable=True)  # ords 2-4
    store = EmbeddedStore(live, commit_interval=3600)
    for i in range(5):
        store.append(thread, "custom.note", {"j": i}, durable=False)  # ords 5-9
    store.append(other, "custom.note", {}, durable=False)
    store.flush()  # one commit spanning two threads: through the journal
    shutil.copytree(live, home, ignore=shutil.ignore_patterns("index.sqlite3*"))
    store.close()
    (path,) = home.glob(f"threads/*/*/{thread}.jsonl")
    path.write_bytes(b"".join(_lines(path)[:3]))
    with EmbeddedStore(home) as reopened:
        report = reopened.verify(thread)
        assert not report.ok and report.first_bad_ord == 4
        assert "1 record(s) missing" in str(report.error)
        with pytest.raises(IntegrityError):
            reopened.append(thread, "custom.note", {})
    assert list((home / "journal").glob("*.wal"))


def test_acknowledged_marks_outlive_an_index_set_aside(tmp_path: Path) -> None:
    """A damaged index is set aside and rebuilt from the rollouts; the marks, which no
    rollout can give back, are copied from it wherever they can still be read."""
    from threadlog.store.embedded.index import Index

    thread, path = _thread(tmp_path / "home")
    aside = tmp_path / "aside.sqlite3"
    shutil.copy(tmp_path / "home" / "index.sqlite3", aside)
    fresh = Index(str(tmp_path / "new.sqlite3"))
    try:
        assert fresh.salvage_acknowledged(str(aside)) == 1
        assert fresh.acknowledged(thread)[thread][0] == 6
        assert fresh.salvage_acknowledged(str(tmp_path / "no-such-file")) == 0
    finally:
        fresh.close()
    (tmp_path / "garbage").write_bytes(b"not a database" * 100)
    other = Index(str(tmp_path / "other.sqlite3"))
    try:
        assert other.salvage_acknowledged(str(tmp_path / "garbage")) == 0
    finally:
        other.close()
