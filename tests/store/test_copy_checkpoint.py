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


def _no_sparse_index(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stores that keep no checkpoint (so no sparse index) and windows that need one near
    (`tailread`'s constants shrunk): what a thread copied by an older threadlog, or one
    short of `CHECKPOINT_EVERY`, looks like at scale."""
    from threadlog.store.embedded import tailread

    monkeypatch.setattr(store_module, "CHECKPOINT_EVERY", 1 << 40)
    monkeypatch.setattr(tailread, "SPARSE_EVERY", 5)
    monkeypatch.setattr(tailread, "NEAR_END", 10)


def _whole_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths `Reader.scan_whole` reads whole from now on."""
    paths: list[str] = []
    scan_whole = reader_module.Reader.scan_whole

    def spy(self: Any, path: str, *args: Any) -> Any:
        paths.append(path)
        return scan_whole(self, path, *args)

    monkeypatch.setattr(reader_module.Reader, "scan_whole", spy)
    return paths


def test_a_copy_run_again_reads_the_held_thread_once_not_whole_per_page(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run again over a thread the destination holds without a sparse index, the comparison
    streams it once: it read the whole log for every page (200,000 records: 79 s, 340 MB)."""
    from threadlog.store import copy as copy_module

    _no_sparse_index(monkeypatch)
    monkeypatch.setattr(copy_module, "PAGE", 7)
    dest_home = str(tmp_path / "b")
    with open_store(str(tmp_path / "a")) as source, open_store(dest_home) as dest:
        thread = source.create_thread("u")
        for i in range(60):
            source.append(thread, "custom.x", {"i": i}, durable=False)
        source.flush()
        assert copy_thread(source, dest, thread).status == "copied"
        whole = _whole_reads(monkeypatch)
        assert copy_thread(source, dest, thread).status == "skipped"
        assert [p for p in whole if p.startswith(dest_home)] == []
        other = source.create_thread("u")  # still refused when it differs
        for i in range(60):
            source.append(other, "custom.x", {"i": i}, durable=False)
        source.flush()
        assert copy_thread(source, dest, other).status == "copied"
        source.append(other, "custom.x", {"later": 1})
        from threadlog.errors import ConflictError

        with pytest.raises(ConflictError, match="ord 61"):
            dest.adopt_pages(iter([source.read(other)[i : i + 7] for i in range(0, 62, 7)]))


def test_copy_reads_a_source_without_a_sparse_index_a_window_at_a_time(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`Reader.follow` goes on from where its last window ended (`read_forward`), so a source
    thread with no sparse index is never read whole (it was, once its cursor was far from
    any sparse entry: the copy then held it whole)."""
    source_home = str(tmp_path / "a")
    _no_sparse_index(monkeypatch)
    monkeypatch.setattr(reader_module, "FOLLOW_PAGE", 7)
    with open_store(source_home) as source, open_store(str(tmp_path / "b")) as dest:
        thread = source.create_thread("u")
        for i in range(60):
            source.append(thread, "custom.x", {"i": i}, durable=False)
        source.flush()
        whole = _whole_reads(monkeypatch)
        assert copy_thread(source, dest, thread).status == "copied"
        assert [p for p in whole if p.startswith(source_home)] == []


def test_a_thread_adopted_meanwhile_in_the_same_process_meets_at_the_link(
    tmp_path: Any,
) -> None:
    """Two adoptions of one thread at once in one process: the one that links second finds
    the same records (False) or other content (`ConflictError`), and leaves no temporary
    file. Both used the one temporary name ``.<id>.<pid>.tmp``: the second one failed to
    create it (`StorageError`, File exists) while the first, paged, held it."""
    import os

    from threadlog.errors import ConflictError
    from threadlog.store.inmemory import MemoryStore

    home = tmp_path / "b"
    with MemoryStore() as source, open_store(str(home)) as dest:
        same, other = source.create_thread("u"), source.create_thread("u")
        for thread in (same, other):
            for i in range(10):
                source.append(thread, "custom.x", {"i": i})
        records = source.read(same)

        def meanwhile(records: list[Any], held: list[Any]) -> Any:
            yield records[:4]
            assert dest.adopt_thread(held) is True  # another copy, faster
            yield records[4:]

        assert dest.adopt_pages(meanwhile(records, records)) is False
        assert dest.read(same) == records
        others = source.read(other)
        with pytest.raises(ConflictError):
            dest.adopt_pages(meanwhile(others, others[:6]))
        assert dest.read(other) == others[:6]
    assert [n for _, _, names in os.walk(home) for n in names if n.endswith(".tmp")] == []
