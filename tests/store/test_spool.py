"""A new thread written by another process (an import's worker) and taken into a batch.

`NewThreads.spool` names where a worker writes a thread's rollout (the temporary file the
batch would have written itself, named for the batch's process), and `NewThreads.adopt`
takes it: the same file from there, made durable and linked by the batch's commit. What it
takes must be exactly what was written for it; anything else is refused and removed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from threadlog.errors import ConflictError, StorageError, UsageError
from threadlog.importers._bulk import NewLog
from threadlog.store._fileops import remove_orphan_temps
from threadlog.store.embedded import EmbeddedStore
from threadlog.store.embedded.transfer import FolderSpool, NewThreads
from threadlog.store.transfer import Spooled


def _log(batch: NewThreads, records: int = 3) -> NewLog:
    log = NewLog(batch, "local", title="spooled", lineage=None, config={})
    for n in range(records):
        log.append(log.thread_id, "custom.note", {"n": n})
    return log


def _temporaries(home: Path) -> list[str]:
    return [f for _, _, fs in os.walk(home / "threads") for f in fs if f.endswith(".tmp")]


def test_a_spooled_thread_is_adopted_committed_and_read_back(tmp_path: Path) -> None:
    with EmbeddedStore(tmp_path / "s") as store:
        batch = store.new_threads()
        log = _log(batch)
        spooled = batch.spool().write(log.thread_id, log.lines)
        assert spooled.size == sum(len(line) for line in log.lines)
        batch.adopt(log.thread_id, spooled, log.records)
        assert batch.pending(log.thread_id)
        assert batch.commit() == [log.thread_id]
        store.flush()
        assert [r.hash for r in store.read(log.thread_id)] == [r.hash for r in log.records]
        assert store.verify(log.thread_id).ok
        assert log.thread_id in store.thread_ids()
        assert _temporaries(tmp_path / "s") == []
        batch.discard()


def test_a_spool_names_the_batchs_own_temporary_file(tmp_path: Path) -> None:
    """The name `add` would have written (a sweep tells by it whether its owner lives)."""
    with EmbeddedStore(tmp_path / "s") as store:
        batch = store.new_threads()
        log = _log(batch)
        spool = batch.spool()
        name = os.path.basename(spool.temporary_of(log.thread_id))
        assert name == f".{log.thread_id}.new.{os.getpid()}.tmp"
        batch.discard()


@pytest.mark.parametrize(
    ("case", "error", "match", "removed"),
    [
        ("changed", StorageError, "not the", True),  # written, then changed behind the batch
        # under another thread's name: refused, and not removed (it is not this thread's)
        ("another's", UsageError, "not its temporary file", False),
    ],
)
def test_a_file_not_as_written_for_the_thread_is_refused(
    tmp_path: Path, case: str, error: type[Exception], match: str, removed: bool
) -> None:
    with EmbeddedStore(tmp_path / "s") as store:
        batch = store.new_threads()
        log, other = _log(batch), _log(batch)
        owner = other if case == "another's" else log
        spooled = batch.spool().write(owner.thread_id, log.lines)
        if case == "changed":
            with open(spooled.path, "ab") as f:
                f.write(b"more\n")
        with pytest.raises(error, match=match):
            batch.adopt(log.thread_id, spooled, log.records)
        assert os.path.exists(spooled.path) is not removed
        spooled.remove()
        assert len(batch) == 0 and batch.commit() == []
        assert store.thread_ids() == []
        batch.discard()


def test_discarding_a_batch_removes_what_it_adopted(tmp_path: Path) -> None:
    with EmbeddedStore(tmp_path / "s") as store:
        batch = store.new_threads()
        log = _log(batch)
        spooled = batch.spool().write(log.thread_id, log.lines)
        batch.adopt(log.thread_id, spooled, log.records)
        batch.discard()
        assert not os.path.exists(spooled.path)
        assert store.thread_ids() == []


def test_a_spooled_file_lives_as_long_as_the_process_it_was_written_for(
    tmp_path: Path,
) -> None:
    """Written for a live importer, a sweep leaves it (the importer will take it); written
    for one that died (killed mid-import), a sweep removes it: it was never a thread."""
    with EmbeddedStore(tmp_path / "s") as store:
        batch = store.new_threads()
        log = _log(batch)
        ours = batch.spool().write(log.thread_id, log.lines)
        dead = subprocess.run(
            [sys.executable, "-c", "import os; print(os.getpid())"], check=True, capture_output=True
        )
        gone = FolderSpool(batch.spool().layout, int(dead.stdout))
        lost = _log(batch)
        theirs = gone.write(lost.thread_id, lost.lines)
        folder = os.path.dirname(ours.path)
        assert os.path.dirname(theirs.path) == folder
        assert remove_orphan_temps(folder) == 1
        assert os.path.exists(ours.path) and not os.path.exists(theirs.path)
        ours.remove()
        batch.discard()


def test_a_refused_adopt_never_removes_a_file_that_is_not_the_threads_own(tmp_path: Path) -> None:
    """A spooled path naming a committed rollout, or the temporary file of a thread pending in
    the batch (the same thread adopted twice), is refused and left as it is: the committed
    thread stays, and the pending one is still committed."""
    with EmbeddedStore(tmp_path / "s") as store:
        batch = store.new_threads()
        done = _log(batch)
        batch.add(done.thread_id, done.lines, done.records)
        assert batch.commit() == [done.thread_id]
        store.flush()
        rollout = store._layout.path_of(done.thread_id)
        with pytest.raises(UsageError, match="not its temporary file"):
            batch.adopt(done.thread_id, Spooled(rollout, os.path.getsize(rollout)), done.records)
        assert os.path.exists(rollout) and store.thread_ids() == [done.thread_id]
        log = _log(batch)
        spooled = batch.spool().write(log.thread_id, log.lines)
        batch.adopt(log.thread_id, spooled, log.records)
        with pytest.raises(ConflictError):
            batch.adopt(log.thread_id, spooled, log.records)
        assert os.path.exists(spooled.path)
        assert batch.commit() == [log.thread_id]
        store.flush()
        assert store.verify(log.thread_id).ok
        assert _temporaries(tmp_path / "s") == []


def test_a_sweep_removes_what_workers_left_and_keeps_what_the_batch_holds(tmp_path: Path) -> None:
    """`NewThreads.sweep` (run once an import's workers are done): a file a worker wrote and
    nobody took (killed after writing, or its answer given up) is removed; the batch's own
    pending files, and other temporary files of this process (a fork's), are kept."""
    with EmbeddedStore(tmp_path / "s") as store:
        batch = store.new_threads()
        kept, lost = _log(batch), _log(batch)
        taken = batch.spool().write(kept.thread_id, kept.lines)
        batch.adopt(kept.thread_id, taken, kept.records)
        left = batch.spool().write(lost.thread_id, lost.lines)  # never adopted
        folder = os.path.dirname(left.path)
        other = os.path.join(folder, f".{lost.thread_id}.{os.getpid()}.tmp")  # a fork's, say
        with open(other, "wb") as f:
            f.write(b"x")
        assert batch.sweep() == 1
        assert not os.path.exists(left.path)
        assert os.path.exists(taken.path) and os.path.exists(other)
        assert batch.commit() == [kept.thread_id]
        assert store.verify(kept.thread_id).ok
        os.unlink(other)
        batch.discard()
