"""Artifacts under adversarial conditions (issue 9, points 12a and 12c).

12a: a blob that is already on disk is not trusted to be durable: another process may have
renamed it into place and died before syncing its directory. 12c: caller data that merely
looks like an artifact reference is stored escaped, so that it is never loaded as one.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from typing import TYPE_CHECKING, Any

import orjson
import pytest

from threadlog import EmbeddedStore
from threadlog.model.context import Context, tool_result_text
from threadlog.model.refs import is_artifact_ref
from threadlog.store._fileops import FileOps
from threadlog.store.inmemory import MemoryStore
from threadlog.testing.contract._common import start_call
from threadlog.testing.crashsim import CrashSimFS, SimulatedCrash

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from threadlog.store.protocol import Store

DIGEST = "ab" * 32
LOOKALIKE: dict[str, Any] = {"$artifact": {"sha256": DIGEST, "size": 3}}
"""User data with the form of an artifact reference, naming a blob nobody stored."""


class SyncLog(FileOps):
    """Records what is fsynced: files by (device, inode), directories by path."""

    def __init__(self) -> None:
        self.files: list[tuple[int, int]] = []
        self.dirs: list[str] = []

    def fsync(self, fd: int) -> None:
        st = os.fstat(fd)
        self.files.append((st.st_dev, st.st_ino))
        super().fsync(fd)

    def fsync_dir(self, path: str) -> None:
        self.dirs.append(os.path.abspath(path))
        super().fsync_dir(path)

    def clear(self) -> None:
        self.files.clear()
        self.dirs.clear()


def inode(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino


def plant_blob(store: EmbeddedStore, content: bytes) -> str:
    """Put a blob where `put` would, as a writer that died before any fsync leaves it."""
    path = store.artifacts.path(hashlib.sha256(content).hexdigest())
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(content)
    return path


# -- 12a: a blob already present is made durable before a record references it ---------------


def test_put_syncs_a_blob_another_process_left_unsynced(tmp_path: Path) -> None:
    ops = SyncLog()
    content = b"a blob renamed into place by a writer that crashed before its fsyncs"
    with EmbeddedStore(str(tmp_path / "home"), fops=ops) as store:
        path = plant_blob(store, content)
        ops.clear()
        ref = store.artifacts.put(content)
        assert store.artifacts.path(ref.sha256) == path
        # the blob and the directory entries leading to it, before put returned
        assert inode(path) in ops.files
        assert os.path.dirname(path) in ops.dirs
        assert os.path.dirname(os.path.dirname(path)) in ops.dirs
        # once this process made it durable, later puts trust it (one stat, no sync)
        ops.clear()
        store.artifacts.put(content)
        assert inode(path) not in ops.files
        assert ops.dirs == []


def test_a_second_store_in_another_process_syncs_the_blob_it_finds(tmp_path: Path) -> None:
    """The brief's shape: the first store's process is gone (here: its cache is forgotten);
    a fresh store's put of the same content must sync the blob it finds."""
    from threadlog.store.embedded import artifacts as artifacts_module

    content = b"stored by an earlier process"
    home = str(tmp_path / "home")
    with EmbeddedStore(home) as store:
        path = store.artifacts.path(store.artifacts.put(content).sha256)
    artifacts_module._DURABLE.discard(path)  # a new process knows nothing of it
    ops = SyncLog()
    with EmbeddedStore(home, fops=ops) as store:
        ops.clear()
        store.artifacts.put(content)
    assert inode(path) in ops.files
    assert os.path.dirname(path) in ops.dirs


def test_put_replaces_a_damaged_blob_of_the_same_size(tmp_path: Path) -> None:
    content = b"the real content"
    with EmbeddedStore(str(tmp_path / "home")) as store:
        plant_blob(store, content)
        path = store.artifacts.path(hashlib.sha256(content).hexdigest())
        with open(path, "wb") as f:
            f.write(b"X" * len(content))  # same size, wrong bytes
        ref = store.artifacts.put(content)
        assert store.artifacts.get(ref.sha256) == content


@pytest.mark.parametrize("left", ["blob", "directory"])
def test_a_blob_a_killed_writer_left_unsynced_survives_a_power_cut(
    tmp_path: Path, left: str
) -> None:
    """A writer is killed inside `put`, then a power cut follows a later acknowledged record
    that references the blob. ``blob``: killed after the rename, before the directory sync
    (the blob is in place, its name not durable); ``directory``: killed after creating the
    blob's directory, before syncing its parent. The next writer's put finds the blob (or
    the directory) and must make it durable before the record is acknowledged."""
    value = {"big": "x" * 4000}
    blob_json = orjson.dumps(value["big"])
    blob = hashlib.sha256(blob_json).hexdigest()
    (tmp_path / "a").mkdir()
    fs = CrashSimFS(str(tmp_path / "a"))
    first = EmbeddedStore(
        str(tmp_path / "a" / "home"), commit_interval=3600, artifact_threshold=1024, fops=fs
    )
    try:
        thread = first.create_thread("u")
        blob_dir = os.path.dirname(first.artifacts.path(blob))
        synced = blob_dir if left == "blob" else os.path.dirname(blob_dir)
        fs.crash_at(lambda call, p: call == "fsync_dir" and p == synced)
        with pytest.raises(Exception, match="crash"):
            first.append(thread, "custom.x", value, durable=True)
    finally:
        with contextlib.suppress(SimulatedCrash):  # (the machine is down: close syncs nothing)
            first.close()
    killed = fs.after_kill(str(tmp_path / "b"))
    with EmbeddedStore(
        str(tmp_path / "b" / "home"), commit_interval=3600, artifact_threshold=1024, fops=killed
    ) as second:
        record = second.append(thread, "custom.x", value, durable=True)  # acknowledged
        assert is_artifact_ref(record.data["big"])
        killed.after_power_loss(str(tmp_path / "c"), killed.disk.durable_state())
    with EmbeddedStore(str(tmp_path / "c" / "home")) as third:
        (read,) = third.read(thread, after=1)
        assert third.resolve(read.data) == value


# -- 12c: data that looks like a reference is escaped, never misread -------------------------


@pytest.fixture(params=["embedded", "memory"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "memory":
        yield MemoryStore()
    else:
        with EmbeddedStore(str(tmp_path / "home"), artifact_threshold=1024) as store:
            yield store


LOOKALIKES: list[Any] = [
    LOOKALIKE,  # the whole data
    {"result": LOOKALIKE},  # a top-level value
    {"$escaped": 1},  # the escape itself, whole
    {"x": {"$escaped": LOOKALIKE}},  # an escaped look-alike, as a value
    {"$escaped": {"$escaped": "deep"}},
    {"a": LOOKALIKE, "b": {"$escaped": None}, "c": 1, "d": {"$artifact": 1}},
    {"$artifact": {"sha256": DIGEST, "size": 3, "media_type": "text/plain", "summary": "x"}},
]


# test_lookalike_references_round_trip: now in StoreContract


def test_the_model_is_shown_a_lookalike_result_as_data(any_store: Store) -> None:
    thread = any_store.create_thread("u")
    call = "0190f0f0-0000-7000-8000-000000000001"
    started = start_call(any_store, thread, call)  # (a result before its start is refused)
    record = any_store.append(
        thread, "tool_call.finished", {"call_id": call, "ok": True, "result": LOOKALIKE}
    )
    (read,) = any_store.read(thread, after=started)
    assert read.data == record.data
    text = tool_result_text(read.data["result"])
    assert text == orjson.dumps(LOOKALIKE).decode()
    assert "stored as artifact" not in text
    # through the context too: a tool message carrying the original
    context = Context.from_records(any_store.read(thread))
    node = context.nodes[read.id][1]
    assert node is not None and node["content"] == text


# test_a_lookalike_in_a_text_field_is_refused: now in StoreContract


def test_real_references_still_resolve_next_to_escaped_ones(tmp_path: Path) -> None:
    with EmbeddedStore(str(tmp_path / "home"), artifact_threshold=1024) as store:
        thread = store.create_thread("u")
        big = "y" * 5000
        cases: list[Any] = [
            {"big": big, "fake": LOOKALIKE},  # a real ref beside an escaped look-alike
            {"big": {"$escaped": big}},  # an escaped value large enough to be offloaded
            {"$escaped": big},  # an escaped whole, offloaded whole
            {f"k{i}": "z" * 500 for i in range(10)},  # the whole data offloaded
            {**{f"k{i}": "z" * 500 for i in range(10)}, "fake": LOOKALIKE, "big": big},
        ]
        for data in cases:
            record = store.append(thread, "custom.x", data, durable=True)
            assert len(orjson.dumps(record.data)) < 2048  # something was offloaded
            stored = record.data
            assert is_artifact_ref(stored) or any(is_artifact_ref(v) for v in stored.values())
            assert store.resolve(record.data) == data
        for record, data in zip(store.read(thread, after=1), cases, strict=True):
            assert store.resolve(record.data) == data


# test_a_thread_cannot_be_created_with_lookalike_settings: now in StoreContract
