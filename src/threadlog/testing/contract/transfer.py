"""The contract of the optional `Transfer` capability: a thread adopted verbatim from elsewhere.

The records come from another store (an in-memory one, the reference backend) and must come
back from this one unchanged: the same ids, ordinals, parents, timestamps, writing threads and
hashes; the copy verifies, reduces to the same state and grows on its own, chained on the
last imported hash. A second import of the same records writes nothing; a thread held with
other content (shorter, longer, different) is refused with `ConflictError`; records that do
not verify (a changed byte, a gap, a broken chain, a foreign record) are refused with
`IntegrityError` and leave nothing behind. Forks keep their lineage and inherited prefix. Each
test runs twice: the thread given whole (`Transfer.adopt_thread`) and in pages
(`Transfer.adopt_pages`). A store without the capability skips these tests.
"""

from __future__ import annotations

import pytest

from threadlog.errors import ConflictError, IntegrityError, UsageError
from threadlog.model import codec
from threadlog.model.envelope import Record, encode_record
from threadlog.store.inmemory import MemoryStore
from threadlog.store.protocol import Store, Transfer

__all__ = ["TransferTests"]


def _transfer(store: Store) -> Transfer:
    if not isinstance(store, Transfer):
        pytest.skip("this store cannot import threads (an optional capability)")
    return store


def _source_thread(source: MemoryStore, n: int = 4) -> list[Record]:
    """A thread with a turn, a tool call and a branch point: every envelope field in use."""
    thread = source.create_thread("alice", title="to copy", model="m1")
    source.append(thread, "turn.started", {"turn_id": "t1", "input": "go"})
    call = {"turn_id": "t1", "call_id": "c1", "tool": "read", "args": {"p": "é✓"}}
    source.append(thread, "tool_call.proposed", {**call, "side_effect": "read_only"})
    root = source.read(thread)[1].id
    for i in range(n):
        source.append(thread, "custom.note", {"i": i, "f": 0.1 * i, "s": "x\u2028y"})
    source.append(thread, "custom.note", {"branch": True}, parent=root)
    return source.read(thread)


def _adopt(dest: Transfer, records: list[Record], how: str) -> bool:
    """``dest.adopt_thread(records)``, or (``how == "pages"``) the same records given to
    ``adopt_pages`` three at a time, an empty page among them."""
    if how == "whole":
        return dest.adopt_thread(records)
    pages = [records[i : i + 3] for i in range(0, len(records), 3)]
    pages.insert(1, [])
    return dest.adopt_pages(iter(pages))


class TransferTests:
    """adopt_thread and adopt_pages: verbatim, idempotent, refusing what differs or does not
    verify (each test runs with the whole thread and with it in pages of three)."""

    @pytest.fixture(params=["whole", "pages"])
    def how(self, request: pytest.FixtureRequest) -> str:
        return str(request.param)

    def test_an_imported_thread_is_the_same_log(self, store: Store, how: str) -> None:
        dest = _transfer(store)
        with MemoryStore() as source:
            records = _source_thread(source)
            thread = records[0].thread
            assert _adopt(dest, records, how) is True
            assert store.exists(thread) and thread in store.thread_ids()
            assert store.read(thread) == records
            assert store.verify(thread).ok
            assert store.state(thread) == source.state(thread)
            # the copy grows on its own, chained on the last imported record
            more = store.append(thread, "custom.note", {"after": "copy"})
            assert (more.ord, more.prev, more.thread) == (
                len(records) + 1,
                records[-1].hash,
                thread,
            )
            assert store.verify(thread).ok
            assert source.read(thread) == records

    def test_importing_the_same_records_again_writes_nothing(self, store: Store, how: str) -> None:
        dest = _transfer(store)
        with MemoryStore() as source:
            records = _source_thread(source)
            assert _adopt(dest, records, how) is True
            assert _adopt(dest, records, how) is False
            assert store.read(records[0].thread) == records

    def test_a_thread_held_with_other_content_is_refused(self, store: Store, how: str) -> None:
        dest = _transfer(store)
        with MemoryStore() as source:
            records = _source_thread(source)
            thread = records[0].thread
            _adopt(dest, records[:5], how)
            source.append(thread, "custom.note", {"later": 1})
            longer = source.read(thread)
            for other in (longer, records, records[:3]):
                with pytest.raises(ConflictError, match="ord"):
                    _adopt(dest, other, how)
            assert store.read(thread) == records[:5]
            store.append(thread, "custom.note", {"diverged": 1})
            with pytest.raises(ConflictError, match="ord 6"):
                _adopt(dest, records[:6], how)

    @pytest.mark.parametrize(
        "damage", ["data", "gap", "chain", "foreign", "ord1", "duplicate_id", "illegal"]
    )
    def test_records_that_do_not_verify_are_refused(
        self, store: Store, damage: str, how: str
    ) -> None:
        dest = _transfer(store)
        with MemoryStore() as source:
            records = list(_source_thread(source))
            thread = records[0].thread
            other = source.read(source.create_thread("bob"))[0]
            if damage == "data":
                records[3] = records[3]._replace(data={"i": 99})
            elif damage == "gap":
                del records[4]
            elif damage == "chain":
                records[4] = records[4]._replace(prev=records[2].hash)
            elif damage == "foreign":
                records[3] = records[3]._replace(thread=other.thread)
            elif damage == "ord1":
                records = records[1:]
            elif damage == "duplicate_id":
                records[4] = records[4]._replace(id=records[3].id)
            else:  # an event the reducer refuses, properly hashed: a second turn.started
                records = _illegal(records)
            with pytest.raises((IntegrityError, UsageError)):
                _adopt(dest, records, how)
            assert not store.exists(thread)
        with pytest.raises(UsageError):
            dest.adopt_thread([])
        with pytest.raises(UsageError):
            dest.adopt_pages(iter([[], []]))

    def test_forks_keep_their_lineage_and_inherited_prefix(self, store: Store, how: str) -> None:
        dest = _transfer(store)
        with MemoryStore() as source:
            parent = _source_thread(source)[0].thread
            child = source.fork(parent, 4, changes={"model": "m2"})
            source.append(child, "custom.note", {"child": 1})
            grandchild = source.fork(child)
            for thread in (grandchild, child):  # a fork before its source: no order needed
                assert _adopt(dest, source.read(thread), how) is True
                assert store.read(thread) == source.read(thread)
                assert store.verify(thread).ok
            got = store.read(grandchild)
            assert got[0].data["lineage"] == source.read(grandchild)[0].data["lineage"]
            assert {r.thread for r in got} == {grandchild, parent, child}
            # a fork of the copy inherits from it as from the original
            again = store.fork(grandchild, 3)
            assert store.read(again)[1:3] == got[1:3] and store.verify(again).ok

    def test_a_copy_copies_back_unchanged(self, store: Store, how: str) -> None:
        dest = _transfer(store)
        with MemoryStore() as source, MemoryStore() as back:
            records = _source_thread(source)
            _adopt(dest, records, how)
            assert back.adopt_thread(store.read(records[0].thread)) is True
            assert back.read(records[0].thread) == records


def _illegal(records: list[Record]) -> list[Record]:
    """``records`` plus a second ``turn.started`` of the running turn, hashed and chained
    correctly (so that only the reducer can refuse it)."""
    last = records[-1]
    data = {"turn_id": "t1", "input": "again"}
    event_id, ord_ = "0190a000-0000-7000-8000-00000000beef", last.ord + 1
    _, digest = encode_record(
        id=event_id,
        thread=last.thread,
        ord=ord_,
        parent=last.id,
        ts=last.ts,
        type="turn.started",
        data_json=codec.canonical(data),
        prev=last.hash,
    )
    record = Record(
        last.v,
        event_id,
        last.thread,
        ord_,
        last.id,
        last.ts,
        "turn.started",
        data,
        last.hash,
        digest,
    )
    return [*records, record]
