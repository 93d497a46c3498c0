"""Recovery from crashes: dead journals, lost rollout pages, THREADLOG_CRASH_AT."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from threadlog import EmbeddedStore, open_store
from threadlog.model.envelope import Record


def _journals(home: str) -> list[str]:
    directory = os.path.join(home, "journal")
    return (
        sorted(n for n in os.listdir(directory) if n.endswith(".wal"))
        if os.path.isdir(directory)
        else []
    )


def _crash_copy(home: str, target: str) -> None:
    """What a crash leaves: the files as they are, with nobody holding the journal's lock."""
    shutil.copytree(home, target)


def journaled(store: EmbeddedStore, thread: str, items: list[dict[str, object]]) -> list[Record]:
    """Append records in one group commit that spans two threads, so that it goes through
    the journal (a commit of one thread's records goes straight to its rollout)."""
    other = store.create_thread("other")
    acked = [store.append(thread, "custom.x", item, durable=False) for item in items]
    store.append(other, "custom.y", {}, durable=False)
    store.flush()
    return acked


def test_records_only_in_the_journal_are_replayed(home: str, tmp_path: Path) -> None:
    with open_store(home) as store:
        thread = store.create_thread("a")
    checkpointed = os.path.getsize(_rollout(home, thread))
    store = open_store(home, commit_interval=3600)
    acked = journaled(store, thread, [{"i": i} for i in range(10)])
    crashed = str(tmp_path / "crashed")
    _crash_copy(home, crashed)
    store.close()
    rollout = _rollout(crashed, thread)
    # Power loss: nothing written to the rollout after its last fsync survived.
    os.truncate(rollout, checkpointed)
    assert len(_journals(crashed)) == 1
    with open_store(crashed) as recovered:
        assert recovered.read(thread)[1:] == acked
        assert recovered.verify(thread).ok
    assert _journals(crashed) == []  # replayed, then deleted


def test_lost_pages_in_the_middle_of_the_unsynced_region(home: str, tmp_path: Path) -> None:
    with open_store(home) as store:
        thread = store.create_thread("a")
    checkpointed = os.path.getsize(_rollout(home, thread))
    store = open_store(home, commit_interval=3600)
    acked = journaled(store, thread, [{"i": i, "pad": "p" * 200} for i in range(20)])
    crashed = str(tmp_path / "crashed")
    _crash_copy(home, crashed)
    store.close()
    rollout = _rollout(crashed, thread)
    data = bytearray(Path(rollout).read_bytes())
    # Earlier unsynced bytes lost (zeros), later ones persisted: looks like mid-log damage.
    start = checkpointed + 100
    data[start : start + 1500] = bytes(1500)
    Path(rollout).write_bytes(bytes(data))
    with open_store(crashed) as recovered:
        assert recovered.read(thread)[1:] == acked
        assert recovered.verify(thread).ok


def test_damage_the_journal_does_not_cover_stays_an_error(home: str, tmp_path: Path) -> None:
    with open_store(home) as store:
        thread = store.create_thread("a")
        for i in range(5):
            store.append(thread, "custom.x", {"i": i})
    store = open_store(home, commit_interval=3600)
    journaled(store, thread, [{"i": 5}])
    crashed = str(tmp_path / "crashed")
    _crash_copy(home, crashed)
    store.close()
    rollout = _rollout(crashed, thread)
    lines = Path(rollout).read_bytes().splitlines(keepends=True)
    lines[2] = lines[2].replace(b'"i":1', b'"i":7')  # bit rot in the checkpointed part
    Path(rollout).write_bytes(b"".join(lines))
    with open_store(crashed) as recovered:
        report = recovered.verify(thread)
        assert not report.ok and report.first_bad_ord == 3
    assert len(_journals(crashed)) == 1  # kept: its records are not in the rollout yet


def test_a_live_stores_journal_is_left_alone(home: str) -> None:
    with open_store(home, commit_interval=3600) as writer:
        thread = writer.create_thread("a")
        journaled(writer, thread, [{}])
        assert len(_journals(home)) == 1
        with open_store(home) as other:
            assert other.read(thread)[-1].type == "custom.x"
        assert len(_journals(home)) == 1
        writer.append(thread, "custom.x", {})
    assert _journals(home) == []


CRASH_CHILD = """
import sys, threadlog
store = threadlog.open_store(sys.argv[1])
thread = store.create_thread("a")
print(thread, flush=True)
for i in range(10):
    store.append(thread, "custom.a", {"i": i})
    store.append(thread, "custom.b", {"i": i})
    print("ACK", i, flush=True)
print("NOT REACHED", flush=True)
"""


def test_crash_at_exits_right_after_the_nth_durable_record(home: str) -> None:
    env = dict(os.environ, THREADLOG_CRASH_AT="custom.b:3")
    child = subprocess.run(
        [sys.executable, "-c", CRASH_CHILD, home], env=env, capture_output=True, text=True
    )
    assert child.returncode == 137
    out = child.stdout.splitlines()
    thread = out[0]
    assert out[1:] == ["ACK 0", "ACK 1"]  # the third custom.b never returned
    assert "THREADLOG_CRASH_AT" in child.stderr
    with open_store(home) as store:
        types = [r.type for r in store.read(thread)]
        assert types == ["thread.created"] + ["custom.a", "custom.b"] * 3
        assert store.verify(thread).ok


def _rollout(home: str, thread: str) -> str:
    # Found by name: opening a store here would already run recovery.
    (path,) = Path(home, "threads").glob(f"*/*/{thread}.jsonl")
    return str(path)
