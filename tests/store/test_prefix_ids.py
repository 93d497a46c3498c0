"""An explicit id is looked for among the records before a log's anchor without reading them
all: the sparse index's id blocks say which blocks may hold it (`threadlog.store.iddigest`)."""

from __future__ import annotations

import os
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator

import pytest

from threadlog import DuplicateEventConflict, open_store
from threadlog.store import iddigest
from threadlog.store.embedded import checkpoint, rolloutlog
from threadlog.store.embedded.store import EmbeddedStore

RECORDS = 1000


@pytest.fixture
def thread(home: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, list[str]]]:
    """A thread of ``RECORDS`` records, checkpointed every 200 with a sparse entry (and an id
    block) every 50; its ids by ordinal (``ids[0]`` is ord 1)."""
    monkeypatch.setattr(checkpoint, "CHECKPOINT_EVERY", 200)
    monkeypatch.setattr(checkpoint, "SPARSE_EVERY", 50)
    with open_store(home) as store:
        thread = store.create_thread("u")
        for i in range(RECORDS - 1):
            store.append(thread, "custom.x", {"i": i, "pad": "y" * 100}, durable=False)
        store.flush()
        ids = [r.id for r in store.read(thread)]
    assert len(ids) == RECORDS
    yield thread, ids


@pytest.fixture
def searched(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The bytes each prefix search reads; a load of the whole prefix fails the test."""
    sizes: list[int] = []
    search = rolloutlog.RolloutLog._search

    def spy(self: rolloutlog.RolloutLog, lo: int, hi: int, needle: bytes, id_: str) -> bool:
        sizes.append(hi - lo)
        return search(self, lo, hi, needle, id_)

    def refuse(self: rolloutlog.RolloutLog) -> None:
        raise AssertionError("the whole prefix was loaded")

    monkeypatch.setattr(rolloutlog.RolloutLog, "_search", spy)
    monkeypatch.setattr(rolloutlog.RolloutLog, "_complete_prefix", refuse)
    return sizes


def _opened(store: EmbeddedStore, thread: str) -> int:
    store.acquire(thread)
    first = store._logs[thread]._first_ord
    assert first > RECORDS - 50  # opened from its last checkpoint
    return first


def _prefix_bytes(store: EmbeddedStore, thread: str) -> int:
    return store._logs[thread]._prefix_end


def test_an_explicit_id_before_the_anchor_replays_or_conflicts_reading_a_block_or_two(
    home: str, thread: tuple[str, list[str]], searched: list[int]
) -> None:
    thread_id, ids = thread
    for k in (1, 37, 500, 949, RECORDS - 3):  # the first block, inside, the last ones
        with open_store(home) as store:
            _opened(store, thread_id)
            prefix = _prefix_bytes(store, thread_id)
            searched.clear()
            again = store.append(thread_id, "custom.x", {"i": k - 1, "pad": "y" * 100}, id=ids[k])
            assert (again.id, again.ord) == (ids[k], k + 1)  # the stored record, nothing added
            assert sum(searched) <= prefix // 5, (k, searched, prefix)
            with pytest.raises(DuplicateEventConflict):
                store.append(thread_id, "custom.x", {"i": -1}, id=ids[k])
    with open_store(home) as store:
        _opened(store, thread_id)
        assert store.read(thread_id)[-1].ord == RECORDS


def test_a_new_explicit_id_reads_only_what_no_block_covers(
    home: str, thread: tuple[str, list[str]], searched: list[int]
) -> None:
    thread_id, ids = thread
    with open_store(home) as store:
        _opened(store, thread_id)
        prefix = _prefix_bytes(store, thread_id)
        new = store.append(thread_id, "custom.x", {"new": 1}, id=str(uuid.uuid4()))
        assert new.ord == RECORDS + 1
        assert sum(searched) <= prefix // 10, (searched, prefix)  # the records after a block
        assert store.append(thread_id, "custom.x", {"new": 1}, id=new.id) == new
    with open_store(home) as store:
        assert store.verify(thread_id).ok


@pytest.mark.parametrize("spoil", ["no blocks", "offsets moved", "not blocks"])
def test_a_sparse_index_that_does_not_describe_the_file_costs_a_search_not_a_duplicate(
    home: str, thread: tuple[str, list[str]], spoil: str
) -> None:
    """No blocks (an index of an older threadlog), offsets that miss their lines (checked),
    blocks that are not blocks: every record is still found, and a new id is still new."""
    thread_id, ids = thread
    db = sqlite3.connect(f"{home}/index.sqlite3")
    with db:
        if spoil == "no blocks":
            db.execute("UPDATE sparse_offsets SET ids = NULL")
        elif spoil == "offsets moved":
            db.execute("UPDATE sparse_offsets SET offset = offset + 7")
        else:
            db.execute("UPDATE sparse_offsets SET ids = ?", (b"\x00\x01\x02",))
    assert spoil in ("no blocks", "offsets moved", "not blocks")
    db.close()
    for k in (2, 600):
        with open_store(home) as store:
            _opened(store, thread_id)
            again = store.append(thread_id, "custom.x", {"i": k - 1, "pad": "y" * 100}, id=ids[k])
            assert (again.id, again.ord) == (ids[k], k + 1)
    with open_store(home) as store:
        _opened(store, thread_id)
        assert store.append(thread_id, "custom.x", {}, id=str(uuid.uuid4())).ord == RECORDS + 1
        assert store.append(thread_id, "custom.x", {}, parent=ids[10]).parent == ids[10]


def test_a_block_holds_its_records_crcs_and_rejects_what_is_not_one() -> None:
    ids = [str(uuid.uuid4()) for _ in range(50)]
    block = iddigest.load(100, iddigest.block(ids))
    assert block is not None and (block.first, block.last) == (51, 100)
    assert all(block.may_hold(iddigest.crc(i)) for i in ids)
    others = [str(uuid.uuid4()) for _ in range(2000)]
    assert sum(block.may_hold(iddigest.crc(i)) for i in others) <= 1
    shifted = iddigest.load(2, b"\x00" + iddigest.crc(ids[0]).to_bytes(4, "big")[:3] + b"\x00" * 4)
    assert shifted is not None and not shifted.may_hold(iddigest.crc(ids[0]))  # (aligned only)
    for bad in (None, b"", b"\x00\x01\x02", iddigest.block(ids * 3)):
        assert iddigest.load(100, bad) is None


def _in_time(call: Callable[[], object], seconds: float = 20) -> list[object]:
    """``call()``'s result in a daemon thread, or ``[]`` if it has not returned in time (a
    search that loops for ever must fail the test, not hang it)."""
    got: list[object] = []
    worker = threading.Thread(target=lambda: got.append(call()), daemon=True)
    worker.start()
    worker.join(seconds)
    return got


@pytest.mark.parametrize("which", ["middle", "new", "first"])
def test_a_line_longer_than_the_search_window_widens_it_instead_of_searching_for_ever(
    home: str, thread: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch, which: str
) -> None:
    """Each window ends at a line start, so its last byte is a newline: a line longer than
    the window (a record over 4 MiB when ``max_record_bytes`` allows it) must widen it."""
    monkeypatch.setattr(rolloutlog, "_SEARCH_CHUNK", 64)  # shorter than any record
    thread_id, ids = thread
    with open_store(home) as store:
        first = _opened(store, thread_id)
        log = store._logs[thread_id]
        id_ = {"middle": ids[500], "new": str(uuid.uuid4()), "first": ids[1]}[which]
        # (called without the log's lock: a search that never ends must not block the close)
        assert _in_time(lambda: log._find_in_prefix(id_)) == [None], "the search never ended"
        assert log._ids.get(id_) == (None if which == "new" else ids.index(id_) + 1)
        assert log._first_ord == first


def test_an_explicit_id_after_a_record_longer_than_the_window_is_answered(home: str) -> None:
    """The same through `append`, at the store's window, with a record over 4 MiB."""
    options = {"max_record_bytes": 8 << 20, "artifact_threshold": 8 << 20}
    with open_store(home, **options) as store:
        thread_id = store.create_thread("u")
        big = store.append(thread_id, "custom.x", {"big": "y" * (5 << 20)})
        for i in range(3):
            store.append(thread_id, "custom.x", {"i": i})
    with open_store(home, **options) as store:
        store.acquire(thread_id)
        log = store._logs[thread_id]
        assert log._first_ord == 6  # opened from the checkpoint taken at the close
        fresh = str(uuid.uuid4())
        assert _in_time(lambda: log._find_in_prefix(fresh)) == [None], "the search never ended"
        assert _in_time(lambda: log._find_in_prefix(big.id)) == [None]
        assert log._ids.get(big.id) == 2
        assert store.append(thread_id, "custom.x", {}, id=fresh).ord == 6
        assert store.append(thread_id, "custom.x", {}, parent=big.id).parent == big.id


class _CountedReads:
    """`os` for `rolloutlog`, counting the bytes its ``pread``s return."""

    def __init__(self) -> None:
        self.bytes = 0

    def pread(self, fd: int, n: int, offset: int) -> bytes:
        data = os.pread(fd, n, offset)
        self.bytes += len(data)
        return data

    def __getattr__(self, name: str) -> object:
        return getattr(os, name)


def test_many_new_explicit_ids_read_about_the_prefix_in_all_not_each(
    home: str, thread: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What no block covers (here the 30 records after the last block) is indexed at the
    first lookup, not searched again at each (an adapter that gives every event its id must
    not pay a search an append), and the prefix is never loaded."""
    thread_id, ids = thread
    with open_store(home) as store:
        for i in range(30):
            store.append(thread_id, "custom.x", {"i": i, "pad": "y" * 100}, durable=False)
    reads = _CountedReads()
    monkeypatch.setattr(rolloutlog, "os", reads)

    def refuse(self: rolloutlog.RolloutLog) -> None:
        raise AssertionError("the whole prefix was loaded")

    with open_store(home) as store:
        _opened(store, thread_id)
        prefix = _prefix_bytes(store, thread_id)
        monkeypatch.setattr(rolloutlog.RolloutLog, "_complete_prefix", refuse)
        reads.bytes = 0
        for _ in range(300):
            store.append(thread_id, "custom.x", {}, id=str(uuid.uuid4()), durable=False)
        assert reads.bytes <= prefix // 10, (reads.bytes, prefix)
        with pytest.raises(DuplicateEventConflict):
            store.append(thread_id, "custom.x", {"i": -1}, id=ids[500])
        again = store.append(thread_id, "custom.x", {"i": 49, "pad": "y" * 100}, id=ids[50])
        assert again.ord == 51
    with open_store(home) as store:
        assert store.verify(thread_id).ok
        assert len(store.read(thread_id)) == RECORDS + 30 + 300
