"""The lease notice's durable end: published after every commit, read by other processes.

The holder publishes through a shared map of the notice's first line (no system call per
commit), or with ``pwrite`` where no map can be made; readers ``pread`` the file either way
(`threadlog.store.embedded.leases`).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from threadlog import EmbeddedStore
from threadlog.store.embedded import leases
from threadlog.store.embedded.leases import Lease, read_durable_end


def _locks(home: Path) -> str:
    return str(home / "locks")


def test_every_durable_append_publishes_the_files_durable_end(tmp_path: Path) -> None:
    with EmbeddedStore(tmp_path) as store:
        thread = store.create_thread("tester")
        for i in range(5):
            store.append(thread, "custom.note", {"i": i}, durable=True)
            size = os.path.getsize(store.path_of(thread))
            assert read_durable_end(_locks(tmp_path), thread) == size
        store.release(thread)
        assert read_durable_end(_locks(tmp_path), thread) is None  # no holder: no notice


def test_the_end_is_published_through_a_shared_map(tmp_path: Path) -> None:
    rollout = tmp_path / "r.jsonl"
    rollout.write_bytes(b"")
    (tmp_path / "locks").mkdir()
    lease = Lease(_locks(tmp_path), "t1", str(rollout))
    try:
        assert lease._map is not None
        assert lease._notice is None  # the map's own descriptor is the only one kept
        lease.publish(12345)
        # what another process's pread sees: the page cache the map writes into; and a live
        # holder's, so the map's descriptor holds the notice's lock
        assert read_durable_end(_locks(tmp_path), "t1") == 12345
        notice = (tmp_path / "locks" / "t1.lock").read_bytes()
        assert notice.startswith(b"durable 00000000000000012345 00000000000000012345\n")
        assert b"pid " in notice  # the holder's line after it is kept
    finally:
        lease.release()
    lease.publish(99)  # released: nothing to announce, and no error
    assert not (tmp_path / "locks" / "t1.lock").exists()


def test_without_a_map_the_end_is_written_with_pwrite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_map(*args: object, **kwargs: object) -> None:
        raise OSError("no shared maps here")

    monkeypatch.setattr(leases.mmap, "mmap", no_map)
    rollout = tmp_path / "r.jsonl"
    rollout.write_bytes(b"")
    (tmp_path / "locks").mkdir()
    lease = Lease(_locks(tmp_path), "t1", str(rollout))
    try:
        assert lease._map is None
        lease.publish(777)
        assert read_durable_end(_locks(tmp_path), "t1") == 777
    finally:
        lease.release()
