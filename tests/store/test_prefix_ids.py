"""An explicit id is looked for among the records before a log's anchor without reading them
all: the sparse index's id blocks say which blocks may hold it (`threadlog.store.iddigest`)."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator

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
