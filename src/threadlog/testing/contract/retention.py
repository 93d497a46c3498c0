"""The contract of caller-chosen thread ids and of the optional `Retention` capability.

``create_thread(thread_id=…)`` is idempotent for the same settings and raises `ThreadExists`
for others; a deleted thread is gone from reads, listings and `exists`, and its id is never
handed out again; an archived thread leaves the default listing and starts no turn until it
is restored. A store without `Retention` skips the archive and delete tests.
"""

from __future__ import annotations

import pytest

from threadlog.errors import InvalidTransition, ThreadExists, ThreadNotFound, UsageError
from threadlog.model.ids import named_thread_id
from threadlog.store.protocol import Catalog, Retention, Store
from threadlog.testing.contract._common import check_chain

__all__ = ["RetentionTests"]


def _retention(store: Store) -> Retention:
    if not isinstance(store, Retention):
        pytest.skip("this store cannot delete threads (an optional capability)")
    return store


class RetentionTests:
    """Named threads, archive, delete."""

    def test_a_named_thread_is_created_once(self, store: Store) -> None:
        name = named_thread_id("contract", "one")
        assert store.create_thread("a", thread_id=name, title="t", model="m") == name
        store.append(name, "custom.contract.note", {"n": 1})
        assert store.create_thread("a", thread_id=name, title="t", model="m") == name
        assert [r.type for r in store.read(name)] == ["thread.created", "custom.contract.note"]
        with pytest.raises(ThreadExists):
            store.create_thread("b", thread_id=name, title="t", model="m")
        with pytest.raises(ThreadExists):
            store.create_thread("a", thread_id=name, title="t", model="other")
        assert name in store.thread_ids()

    def test_a_thread_id_must_be_a_uuid7(self, store: Store) -> None:
        for bad in ("thread-1", "../x", "00000000-0000-4000-8000-000000000000"):
            with pytest.raises(UsageError):
                store.create_thread("a", thread_id=bad)
        assert store.thread_ids() == []

    def test_a_deleted_thread_is_gone_and_its_id_stays_taken(self, store: Store) -> None:
        retention = _retention(store)
        name = named_thread_id("contract", "gone")
        kept = store.create_thread("a")
        store.create_thread("a", thread_id=name)
        store.append(name, "custom.contract.note", {"n": 1})
        store.flush()
        assert retention.delete_thread(name) is True
        assert not store.exists(name)
        assert retention.deleted(name) and not retention.deleted(kept)
        assert store.thread_ids() == [kept]
        with pytest.raises(ThreadNotFound):
            store.read(name)
        if isinstance(store, Catalog):
            assert [t.thread_id for t in store.threads()] == [kept]
        with pytest.raises(ThreadExists, match="deleted"):
            store.create_thread("a", thread_id=name)
        assert retention.delete_thread(name) is False  # idempotent
        assert [r.type for r in store.read(kept)] == ["thread.created"]

    def test_deleting_nothing_sensible(self, store: Store) -> None:
        retention = _retention(store)
        with pytest.raises(UsageError):
            retention.delete_thread("../elsewhere")
        assert retention.delete_thread(named_thread_id("contract", "never")) is False

    def test_an_archived_thread_leaves_the_listing_and_starts_no_turn(self, store: Store) -> None:
        retention = _retention(store)
        kept, old = store.create_thread("a"), store.create_thread("a")
        store.append(old, "turn.started", {"turn_id": "t", "input": "go"})
        with pytest.raises(InvalidTransition, match="running"):
            retention.archive_thread(old)
        store.append(old, "turn.ended", {"turn_id": "t", "outcome": "completed"})
        assert retention.archive_thread(old) is True
        assert retention.archive_thread(old) is False  # already archived: nothing written
        assert [r.type for r in store.read(old)][-1] == "thread.archived"
        assert store.state(old).archived
        with pytest.raises(InvalidTransition, match="archived"):
            store.append(old, "turn.started", {"turn_id": "t2", "input": "again"})
        store.append(old, "custom.contract.note", {"n": 1})  # the log stays writable
        if isinstance(store, Catalog):
            store.flush()
            assert [t.thread_id for t in store.threads()] == [kept]
            assert [t.thread_id for t in store.threads(archived=True)] == [old]
            assert {t.thread_id for t in store.threads(archived=None)} == {kept, old}
        assert retention.archive_thread(old, archived=False) is True
        assert not store.state(old).archived
        store.append(old, "turn.started", {"turn_id": "t2", "input": "again"})
        check_chain(store.read(old))

    def test_threads_are_listed_by_metadata(self, store: Store) -> None:
        if not isinstance(store, Catalog):
            pytest.skip("this store has no catalog (an optional capability)")
        one = store.create_thread("a", metadata={"app": "x", "user": "u1", "n": 1})
        two = store.create_thread("a", metadata={"app": "x", "user": "u2"})
        store.create_thread("a", metadata={"app": "y"})
        store.create_thread("a")
        store.flush()
        assert {t.thread_id for t in store.threads(metadata={"app": "x"})} == {one, two}
        assert [t.thread_id for t in store.threads(metadata={"app": "x", "user": "u1"})] == [one]
        assert [t.thread_id for t in store.threads(metadata={"n": 1})] == [one]
        assert store.threads(metadata={"n": "1"}) == []  # values compare as JSON
        assert len(store.threads()) == 4
        with pytest.raises(UsageError, match="metadata"):
            store.create_thread("a", metadata=["not", "a", "dict"])
