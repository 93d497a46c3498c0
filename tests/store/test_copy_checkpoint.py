"""A long thread copied into the embedded store (`Transfer.adopt_thread`, what ``threadlog
copy`` writes with) is kept with a checkpoint and its sparse index, id blocks included, as
if the store had written it: opening it for writing, reading after an ordinal and naming an
early id never read the whole log (and ``threadlog copy``'s own check of the copy, a page at
a time, stays linear)."""

from __future__ import annotations

from typing import Any

import pytest

from threadlog import open_store
from threadlog.store.copy import copy_thread
from threadlog.store.embedded import reader as reader_module
from threadlog.store.embedded import rolloutlog
from threadlog.store.embedded import store as store_module


def test_a_copied_long_thread_opens_reads_and_finds_ids_without_reading_it_whole(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "CHECKPOINT_EVERY", 200)
    monkeypatch.setattr(store_module, "SPARSE_EVERY", 50)
    source_home, dest_home = str(tmp_path / "a"), str(tmp_path / "b")
    with open_store(source_home) as source:
        thread = source.create_thread("u")
        source.append(thread, "turn.started", {"turn_id": "t1", "input": "go"})
        for i in range(600):
            source.append(thread, "custom.x", {"i": i, "pad": "y" * 50}, durable=False)
        source.flush()
        records = source.read(thread)
        with open_store(dest_home) as dest:
            assert copy_thread(source, dest, thread).status == "copied"
    rows = None
    with open_store(dest_home) as dest:
        rows = dest.index.run("SELECT ord FROM checkpoints WHERE thread_id = ?", (thread,))
        blocks = dest.index.run(
            "SELECT count(*) FROM sparse_offsets WHERE thread_id = ? AND ids IS NOT NULL",
            (thread,),
        )
    assert rows == [(len(records),)] and blocks == [(len(records) // 50,)]

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the whole rollout was read")

    monkeypatch.setattr(reader_module, "scan_file", refuse)
    monkeypatch.setattr(reader_module.Reader, "scan_whole", refuse)
    monkeypatch.setattr(rolloutlog.RolloutLog, "_complete_prefix", refuse)
    with open_store(dest_home) as dest:
        assert [r.hash for r in dest.read(thread, after=300, limit=5)] == [
            r.hash for r in records[300:305]
        ]
        early = records[10]
        again = dest.append(thread, early.type, early.data, id=early.id)  # a replay
        assert again == early
        assert dest._logs[thread]._first_ord == len(records) + 1  # opened from the checkpoint
        ended = dest.append(thread, "turn.ended", {"turn_id": "t1", "outcome": "completed"})
        assert ended.ord == len(records) + 1  # the turn the checkpoint's state knows is open


def test_a_short_copied_thread_gets_no_checkpoint(tmp_path: Any) -> None:
    with open_store(str(tmp_path / "a")) as source, open_store(str(tmp_path / "b")) as dest:
        thread = source.create_thread("u")
        source.append(thread, "custom.x", {})
        assert copy_thread(source, dest, thread).status == "copied"
        assert dest.index.run("SELECT ord FROM checkpoints WHERE thread_id = ?", (thread,)) == []


def test_copy_holds_a_page_of_the_thread_at_a_time(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`copy_thread` reads the source a page at a time and hands the destination pages
    (`Transfer.adopt_pages`); nothing reads the whole log into a list."""
    from threadlog.store import copy as copy_module

    monkeypatch.setattr(copy_module, "PAGE", 7)
    with open_store(str(tmp_path / "a")) as source, open_store(str(tmp_path / "b")) as dest:
        thread = source.create_thread("u")
        for i in range(40):
            source.append(thread, "custom.x", {"i": i}, durable=False)
        source.flush()
        records = source.read(thread)
        sizes: list[int] = []
        adopt = dest.adopt_pages

        def spy(pages: Any) -> bool:
            def counted() -> Any:
                for page in pages:
                    sizes.append(len(page))
                    yield page

            return adopt(counted())

        monkeypatch.setattr(dest, "adopt_pages", spy)
        read = source.read

        def bounded(thread_id: str, after: int = 0, **kw: Any) -> Any:
            assert kw.get("limit") is not None, "the whole log was read"
            return read(thread_id, after, **kw)

        monkeypatch.setattr(source, "read", bounded)
        assert copy_thread(source, dest, thread).records == len(records)
        assert sizes == [7] * 5 + [len(records) - 35]
        assert dest.read(thread) == records and dest.verify(thread).ok
        assert copy_thread(source, dest, thread).status == "skipped"  # run again: nothing
