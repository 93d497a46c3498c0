"""The contract of a store's lifecycle: verify, leases, flush, snapshots, close.

``verify`` reports a sound log (a log holding an event the reducer refuses cannot be made
through the port: see ``legality``; each backend's own tests plant one); ``acquire``/``release``
take and give up the writer's lease; ``flush`` makes everything durable; a store that keeps
snapshots (the optional `Snapshots` capability) saves them only against a real record; a
closed store still reads, and refuses to fork.
"""

from __future__ import annotations

import pytest

from threadlog.errors import ThreadNotFound, UsageError
from threadlog.store.protocol import Snapshots, Store
from threadlog.testing.contract._common import MISSING_THREAD

__all__ = ["LifecycleTests"]


class LifecycleTests:
    """Verification, leases, snapshots and close."""

    def test_verify_reports_a_sound_log(self, store: Store) -> None:
        thread = store.create_thread("a")
        store.append(thread, "turn.started", {"turn_id": "t1", "input": "hi"})
        store.append(thread, "custom.n", {"i": 1}, durable=False)
        store.flush()
        report = store.verify(thread)
        assert report.ok and report.error is None and report.first_bad_ord is None
        assert (report.thread_id, report.records, report.last_ord) == (thread, 3, 3)
        assert report.to_dict()["ok"] is True
        with pytest.raises(ThreadNotFound):
            store.verify(MISSING_THREAD)

    def test_acquire_release_flush(self, store: Store) -> None:
        thread = store.create_thread("a")
        store.acquire(thread)
        store.append(thread, "custom.n", {}, durable=False)
        store.release(thread)
        assert len(store.read(thread)) == 2
        store.append(thread, "custom.n", {})  # writable again after a release
        store.flush()
        assert store.take_repairs(thread) == []
        with pytest.raises(ThreadNotFound):
            store.acquire(MISSING_THREAD)

    def test_snapshots_when_the_store_keeps_them(self, store: Store) -> None:
        if not isinstance(store, Snapshots):
            pytest.skip("this store keeps no snapshots (an optional capability)")
        thread = store.create_thread("a")
        store.acquire(thread)
        last = store.append(thread, "custom.n", {})
        assert not store.save_snapshot(thread, b"x", ord=2, hash="0" * 64, version="v1")
        assert store.save_snapshot(thread, b"state", ord=2, hash=last.hash, version="v1")
        assert store.load_snapshot(thread, "v1") == (2, b"state")
        assert store.load_snapshot(thread, "v2") is None
        store.append(thread, "custom.n", {})
        assert store.load_snapshot(thread, "v1") == (2, b"state")

    def test_closed_store_still_reads(self, store: Store) -> None:
        thread = store.create_thread("a")
        record = store.append(thread, "custom.n", {"v": 1})
        store.close()
        assert store.read(thread)[-1] == record
        with pytest.raises(UsageError, match="closed"):
            store.fork(thread)
