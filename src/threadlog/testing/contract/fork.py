"""The contract of fork: a new thread that inherits a prefix of another, byte for byte.

The child's ``thread.created`` carries a ``lineage`` (source thread, ordinal, entry and hash);
the inherited records keep their ids, hashes and writing thread; settings changes follow as a
``config.changed``; the child verifies and grows on its own while the source is untouched.
Only a fork may declare inherited records.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from threadlog.errors import ThreadNotFound, UsageError
from threadlog.testing.contract._common import EVENT_ID, MISSING_THREAD, OTHER_ID

if TYPE_CHECKING:
    from threadlog.store.protocol import Store

__all__ = ["ForkTests"]


class ForkTests:
    """Forks inherit a verified prefix and then live on their own."""

    def test_only_a_fork_declares_inherited_records(self, store: Store) -> None:
        lineage = {"thread": "p", "ord": 3, "hash": "b" * 64, "copied": {"prev": "a" * 64}}
        with pytest.raises(UsageError, match="fork only"):
            store.create_thread("alice", lineage=lineage)
        assert store.thread_ids() == []

    def test_fork_inherits_the_prefix_verbatim(self, store: Store) -> None:
        source = store.create_thread("alice", title="src", model="m1")
        for i in range(4):
            store.append(source, "custom.n", {"i": i})
        records = store.read(source)
        child = store.fork(source, 3, title="child", changes={"model": "m2"})
        assert child != source and store.exists(child)
        got = store.read(child)
        assert [r.ord for r in got] == [1, 2, 3, 4]
        assert got[1:3] == records[1:3]  # same ids, data, hashes, writer
        head = got[0]
        assert head.type == "thread.created" and head.thread == child
        lineage = head.data["lineage"]
        assert (lineage["thread"], lineage["ord"], lineage["kind"]) == (source, 3, "fork")
        assert lineage["entry"] == records[2].id and lineage["hash"] == records[2].hash
        assert head.data["title"] == "child" and head.data["principal"] == "alice"
        assert got[3].type == "config.changed" and got[3].data == {"changes": {"model": "m2"}}
        assert got[3].prev == records[2].hash
        assert store.state(child).config["model"] == "m2"
        assert store.verify(child).ok
        # the child goes on on its own; the source is untouched
        more = store.append(child, "custom.n", {"i": 99})
        assert more.ord == 5 and more.prev == got[3].hash and more.thread == child
        assert store.read(source) == records
        assert store.verify(child).ok and store.verify(source).ok

    def test_fork_of_a_fork_and_at_the_head(self, store: Store) -> None:
        source = store.create_thread("a")
        store.append(source, "custom.n", {"i": 1})
        child = store.fork(source)
        store.append(child, "custom.n", {"i": 2})
        grandchild = store.fork(child)
        got = store.read(grandchild)
        assert [r.thread for r in got] == [grandchild, source, child]
        assert got[0].data["lineage"]["copied"]["threads"] == sorted([source, child])
        assert store.verify(grandchild).ok
        bare = store.fork(source, 1)  # only the header: nothing inherited
        assert [r.ord for r in store.read(bare)] == [1]
        assert "copied" not in store.read(bare)[0].data["lineage"]
        assert store.append(bare, "custom.n", {}).prev == store.read(bare)[0].hash
        assert store.verify(bare).ok

    def test_fork_refuses_what_the_source_does_not_have(self, store: Store) -> None:
        source = store.create_thread("a")
        store.append(source, "custom.n", {})
        before = set(store.thread_ids())
        for at in (0, 3, -1):
            with pytest.raises(UsageError):
                store.fork(source, at)
        with pytest.raises(ThreadNotFound):
            store.fork(MISSING_THREAD)
        assert set(store.thread_ids()) == before

    def test_fork_at_an_entry_id(self, store: Store) -> None:
        source = store.create_thread("a")
        # ord 2's data spells the id ord 3 is appended with: only a record's own id counts
        store.append(source, "custom.n", {"id": EVENT_ID, "ref": EVENT_ID})
        store.append(source, "custom.n", {"i": 3}, id=EVENT_ID)
        store.append(source, "custom.n", {"i": 4})
        records = store.read(source)
        child = store.fork(source, EVENT_ID, changes={"model": "m2"})
        got = store.read(child)
        assert got[1:3] == records[1:3] and got[3].type == "config.changed"
        lineage = got[0].data["lineage"]
        assert (lineage["ord"], lineage["entry"], lineage["hash"]) == (3, EVENT_ID, records[2].hash)
        assert store.verify(child).ok
        # the entry of ord 1 (thread.created): only the header is inherited
        bare = store.fork(source, records[0].id)
        assert [r.ord for r in store.read(bare)] == [1]
        # an entry the thread inherited from its own fork source
        store.append(child, "custom.n", {"i": 5})
        grandchild = store.fork(child, records[1].id)
        assert store.read(grandchild)[1:] == records[1:2]
        assert store.read(grandchild)[0].data["lineage"]["ord"] == 2
        assert store.verify(grandchild).ok

    def test_fork_refuses_an_entry_the_thread_does_not_have(self, store: Store) -> None:
        source = store.create_thread("a")
        store.append(source, "custom.n", {"i": 1})
        other = store.create_thread("b")
        elsewhere = store.append(other, "custom.n", {}).id
        before = set(store.thread_ids())
        for entry in (elsewhere, OTHER_ID, "2", "not an id"):
            with pytest.raises(UsageError, match="no entry") as info:
                store.fork(source, entry)
            assert repr(entry) in str(info.value)
        assert set(store.thread_ids()) == before
