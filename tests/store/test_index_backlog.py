"""The index backlog: each thread's commits since the last drain are applied as one batch.

A drain joins the batches of one thread (one per commit that wrote it) into one, in their
order (`threadlog.store.embedded.indexer`); the index must end exactly as if each had been
applied on its own.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import TYPE_CHECKING

import pytest

from threadlog import EmbeddedStore
from threadlog.store.embedded.indexer import _by_thread

if TYPE_CHECKING:
    from pathlib import Path

    from threadlog.model.envelope import Record

COMMIT_INTERVAL = 3600.0
"""The background committer never drains on its own: the whole backlog waits for the test."""


def test_a_threads_batches_are_joined_in_order_with_the_last_end() -> None:
    a1, a2, a3, b1 = (object(), object(), object(), object())
    backlog = [
        ("a", "pa", [a1], 10),
        ("b", "pb", [b1], 5),
        ("a", "pa", [a2, a3], 30),
    ]
    joined = _by_thread(backlog)  # type: ignore[arg-type]
    assert joined == [("a", "pa", [a1, a2, a3], 30), ("b", "pb", [b1], 5)]
    assert backlog[0][2] == [a1]  # the journal's lists are not changed


def test_many_commits_of_many_threads_index_as_if_applied_one_by_one(tmp_path: Path) -> None:
    with EmbeddedStore(str(tmp_path), commit_interval=COMMIT_INTERVAL) as store:
        threads = [store.create_thread("p", title=f"t{i}") for i in range(4)]
        store.flush()

        errors: list[BaseException] = []

        def work(thread: str) -> None:
            try:
                for i in range(30):
                    store.append(thread, "custom.x", {"i": i}, durable=True)
                    if i % 10 == 9:  # archived, restored, archived: the last one counts
                        store.append(thread, "thread.archived", {"archived": i != 19})
            except BaseException as exc:
                errors.append(exc)

        workers = [threading.Thread(target=work, args=(t,)) for t in threads]
        for w in workers:
            w.start()
        for w in workers:
            w.join(60)
        assert errors == []
        assert store._indexer._backlog  # many commits wait for one drain
        rows = {row.thread_id: row for row in store.threads(archived=None)}  # drains
        for thread in threads:
            records: list[Record] = store.read(thread)
            row = rows[thread]
            assert row.last_ord == records[-1].ord == 34
            assert row.last_hash == records[-1].hash
            assert row.bytes == os.path.getsize(store.path_of(thread))
            assert row.status == "archived"
            mark = store._reader.acknowledged(thread)
            assert mark is not None and mark[0] == 34 and mark[1] == records[-1].hash
    with EmbeddedStore(str(tmp_path)) as store:  # a rebuild from the files agrees
        before = {row.thread_id: row for row in store.threads(archived=None)}
        assert len(before) == 4
        store.rebuild()
        assert {row.thread_id: row for row in store.threads(archived=None)} == before


def test_damage_is_said_once_and_its_rows_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Found at one open, a damaged tail is not re-scanned (nor said again) at the next: the
    index records it, and `threadlog ls` shows it."""
    home = str(tmp_path / "home")
    with EmbeddedStore(home) as store:
        thread = store.create_thread("alice")
        store.append(thread, "custom.note", {"n": 1})
        path = store.path_of(thread)
    with open(path, "ab") as f:
        f.write(b"garbage\n")
    with caplog.at_level(logging.WARNING, logger="threadlog.store"):
        for _ in range(3):
            with EmbeddedStore(home) as store:
                info = store.thread_info(thread)
                assert info.damage is not None and "ord 3" in info.damage
                assert info.last_ord == 2
    said = [r for r in caplog.records if r.getMessage().startswith("index: ")]
    assert len(said) == 1
