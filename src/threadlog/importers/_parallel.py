"""New threads built in worker processes, written by the importing one.

Theory of operation
-------------------
Building a new thread (`threadlog.importers._bulk`) reads, parses, maps, checks and encodes
its file without touching the store: its cost is the import's, and files are independent.
So `import_paths(workers=N)` hands the files that may be new to ``N`` worker processes
(`build`), each of which imports its file as the importing process would, into a store that
holds nothing and a ledger that knows nothing, and sends back the finished threads' lines
(the first, and the rest joined in one) and what their records change in the index
(`threadlog.model.projection.project_log`: plain values, a third of what pickling the records
cost), the report, and the import keys it asked for. The importing process takes the results
in the files' order and writes them as its own (`Bulk.add`, the ledger), so the threads, the
reports, the ledger and the crash safety are those of an import in one process. Where the
importing batch offers a spool (the embedded store's: `NewThreads.spool`), a worker writes
each thread's lines to the temporary file the importing process would have written and sends
back its name and size instead (`Finished.spooled`): the importing process takes the file
(`NewThreads.adopt`), fsyncs and links it at its commit as its own, and removes the files of
an answer it drops.

A worker's answer is dropped, and the file imported in the importing process instead, when
it cannot be the same: the worker asked for an import key the importing process knows (the
session continues a thread, or names a parent: a fork's or a sub-agent's file), it would have
moved a value to the artifact store (a worker has none), or the worker failed.
"""

from __future__ import annotations

import gc
import os
import select
import threading
import time
from dataclasses import field
from typing import TYPE_CHECKING, Any, NamedTuple

from threadlog._dataclass import dataclass
from threadlog.importers._bulk import Bulk
from threadlog.importers._ledger import Ledger
from threadlog.model.projection import Projected, as_projected
from threadlog.store.offload import encode_data

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from threadlog.importers._report import FileReport
    from threadlog.model.envelope import Record
    from threadlog.store.transfer import Checkpointed, Spool, Spooled

__all__ = ["Built", "Finished", "build", "watch"]


class Finished(NamedTuple):
    """A new thread a worker built: its lines, and what its records change in the index
    (plain values: cheaper to send back than the records)."""

    thread_id: str
    lines: list[bytes]
    """Its first line, and the others joined in one (the same bytes for `ThreadBatch.add`,
    which writes them one after another): two objects to pickle instead of one a line."""
    records: Projected
    taken: Checkpointed | None = None
    """Its checkpoint, made in the worker (a long thread's: `NewLog.checkpointed`)."""
    spooled: Spooled | None = None
    """Its rollout, written by the worker to the importing batch's temporary file
    (`threadlog.store.transfer.Spool`); ``lines`` is empty then."""

    def checkpointed(self, records: int, every: int) -> Checkpointed | None:
        """`Written.checkpointed`: the one the worker made."""
        return self.taken


@dataclass(slots=True)
class Built:
    """A worker's import of one file (see the module docstring)."""

    report: FileReport | None
    """None: the file must be imported by the importing process."""
    threads: list[Finished] = field(default_factory=list)
    keys: dict[str, str] = field(default_factory=dict)
    """Import keys of the threads it created → their ids."""
    asked: list[str] = field(default_factory=list)
    """Import keys it looked up (and did not find: it knows none)."""
    entry: dict[str, Any] | None = None
    """The file's ledger entry."""


class _Offloaded(Exception):
    """A value is over the artifact threshold: only the importing process can move it."""


class _Batch:
    """A worker's stand-in for the store's batch: it keeps the finished threads."""

    def __init__(
        self,
        threshold: int,
        max_record_bytes: int,
        checkpoint_records: int,
        sparse_every: int,
        spool: Spool | None = None,
    ) -> None:
        self.artifact_threshold = threshold
        self.max_record_bytes = max_record_bytes
        self.checkpoint_records = checkpoint_records
        self.sparse_every = sparse_every
        self.threads: list[Finished] = []
        self._spool = spool
        """Where the finished threads' lines are written (None: they are sent back)."""

    def encode(self, type_name: str, data: Any) -> tuple[Any, bytes]:
        return encode_data(type_name, data, self.artifact_threshold, _refuse_offload)

    def __len__(self) -> int:
        return len(self.threads)

    def add(
        self,
        thread_id: str,
        lines: Sequence[bytes],
        records: Sequence[Record] | Projected | None = None,
        checkpoint: Checkpointed | None = None,
    ) -> None:
        assert records, "a worker's new thread comes with its records"
        projected = as_projected(records)
        if self._spool is not None:
            spooled = self._spool.write(thread_id, lines)
            self.threads.append(Finished(thread_id, [], projected, checkpoint, spooled))
        else:
            lines = [lines[0], b"".join(lines[1:])]
            self.threads.append(Finished(thread_id, lines, projected, checkpoint))

    def adopt(self, *args: Any) -> None:
        raise AssertionError("a worker's batch takes no thread written elsewhere")

    def spool(self) -> None:
        return None  # (a worker's batch hands no work on)

    def commit(self) -> list[str]:
        return [t.thread_id for t in self.threads]

    def sweep(self) -> int:
        return 0  # (a worker's batch hands no work on)

    def drop(self, thread_ids: Sequence[str]) -> None:
        kept = []
        for thread in self.threads:
            if thread.thread_id not in thread_ids:
                kept.append(thread)
            elif thread.spooled is not None:
                thread.spooled.remove()
        self.threads = kept

    def discard(self) -> None:
        self.drop([t.thread_id for t in self.threads])


def _refuse_offload(value: Any, value_json: bytes) -> Any:
    raise _Offloaded


class _Empty:
    """A store that holds nothing (what a worker's import looks threads up in)."""

    def exists(self, thread_id: str) -> bool:
        return False

    def thread_ids(self) -> list[str]:
        return []


@dataclass
class _Asking(Ledger):
    """A ledger that knows nothing and notes every key asked for."""

    asked: list[str] = field(default_factory=list)

    def thread_for(self, store: Any, key: str) -> str | None:
        if key not in self.keys:
            self.asked.append(key)
        return self.keys.get(key)


def build(
    run: Callable[..., FileReport],
    fmt: Any,
    source: str,
    threshold: int,
    max_record_bytes: int,
    checkpoint_records: int,
    sparse_every: int,
    spool: Spool | None = None,
) -> Built:
    """Import ``source`` into new threads in this (worker) process (module docstring):
    ``run`` is `threadlog.importers._core.import_file` (its worker entry) and ``fmt`` the file's
    `SourceFormat`, both handed over by the caller (pickled by reference), so this module
    imports nothing of the package that imports it. With ``spool``, the threads' lines are
    written there (the importing batch's `threadlog.store.transfer.Spool`), not sent back."""
    gc.disable()  # a worker's imports form no cycles (see `import_paths`'s ``pause_gc``)
    ledger = _Asking(None)
    batch = _Batch(threshold, max_record_bytes, checkpoint_records, sparse_every, spool)
    try:
        report = run(_Empty(), fmt, source, ledger, Bulk(batch, ledger))
    except BaseException as exc:
        batch.discard()  # (its files: nothing of this answer is taken)
        if isinstance(exc, _Offloaded):
            return Built(None)
        raise
    return Built(
        report,
        threads=batch.threads,
        keys=dict(ledger.keys),
        asked=ledger.asked,
        entry=ledger.files.get(report.path),
    )


def watch(importer: int) -> None:
    """Run in each worker as it starts: make it exit as soon as the importing process
    (``importer``, a pid) is gone. A worker of a killed import would otherwise wait for work
    from it for ever (its queue's pipe is never closed for it), and so would the forkserver
    it came from; one killed mid-file leaves a partial temporary file named for the dead
    importer, which the next sweep removes."""
    fd: int | None
    try:
        fd = os.pidfd_open(importer)  # (Linux: readable once the process has exited)
    except ProcessLookupError:
        os._exit(1)
    except (AttributeError, OSError):  # another system, or no pidfds: polled instead
        fd = None
    threading.Thread(
        target=_wait_for_exit, args=(importer, fd), name="threadlog-import-watch", daemon=True
    ).start()


def _wait_for_exit(importer: int, fd: int | None) -> None:
    if fd is not None:
        select.select([fd], [], [])
    else:
        while True:
            time.sleep(0.5)
            try:
                os.kill(importer, 0)
            except ProcessLookupError:
                break
            except PermissionError:  # (alive, under another user: it cannot be ours)
                pass
    os._exit(1)
