"""The bulk path: a *new* thread's whole log built in memory and written in one go.

Theory of operation
-------------------
Appending an imported session record by record costs the store's whole append path for each
(its checks, a journal entry, a group commit, the index): most of an import's time. A file
seen for the first time becomes a thread nobody else holds yet, so its log can be built in
memory and written whole instead:

* `NewLog` stands in for the store while the file is read: the `Emitter` appends to it as it
  would to the store, and it applies to each record the checks the store's writer applies, in
  the same order (the data encoded as the store stores it, its schema, a replayed id, the
  parent, the line's size, the reducer's verdict on the event), raising the same errors, so
  that what is refused is reported and skipped exactly as on the store. Each record is
  encoded once (`encode_record`: its line and hash chain) as the store's writer would.
* `Bulk` hands each finished file's new threads to the store's batch (the embedded store's
  `NewThreads`: each thread a temporary file), and `Bulk.commit` makes the batch durable and
  visible at once, before the import's ledger may name the files (`threadlog.importers._core`).

A file whose import fails leaves nothing (its logs were never handed over); a crash leaves
the threads of the last batch absent (their temporary files are swept), and the ledger, saved
only after a commit, does not claim them: the next run imports those files again. A grown file
(its thread exists) takes the store's append path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from threadlog._clock import new_id, rfc3339, wall_ns
from threadlog.errors import (
    DuplicateEventConflict,
    InvalidEventType,
    InvalidTransition,
    RecordTooLarge,
    UsageError,
)
from threadlog.model import codec, snapshot
from threadlog.model.envelope import Record, encode_record, valid_type_name
from threadlog.model.eventdata import from_data
from threadlog.model.reducer import apply
from threadlog.store.transfer import Checkpointed, SparseIndex, Spool, Spooled
from threadlog.store.validate import thread_created_data

if TYPE_CHECKING:
    from collections.abc import Sequence
    from types import EllipsisType

    from threadlog.importers._ledger import Ledger
    from threadlog.importers._report import FileReport
    from threadlog.model.projection import Projected
    from threadlog.model.state import ThreadState

__all__ = ["Bulk", "BulkStore", "NewLog", "ThreadBatch"]


class ThreadBatch(Protocol):
    """What a store's batch of new threads offers (`threadlog.store.embedded.NewThreads`)."""

    max_record_bytes: int
    artifact_threshold: int
    checkpoint_records: int
    """A thread of at least this many records is given with its checkpoint (`Checkpointed`)."""
    sparse_every: int
    """The checkpoint's sparse index holds every ``sparse_every``-th record's offset."""

    def encode(self, type_name: str, data: Any, /) -> tuple[Any, bytes]: ...

    def __len__(self) -> int: ...

    def add(
        self,
        thread_id: str,
        lines: Sequence[bytes],
        records: Sequence[Record] | Projected | None = None,
        checkpoint: Checkpointed | None = None,
    ) -> None: ...

    def adopt(
        self,
        thread_id: str,
        spooled: Spooled,
        records: Sequence[Record] | Projected,
        checkpoint: Checkpointed | None = None,
    ) -> None:
        """`add` for a thread another process wrote (`spool`)."""
        ...

    def spool(self) -> Spool | None:
        """Where a worker process writes the threads it builds for this batch (None: it
        sends their lines back)."""
        ...

    def commit(self) -> list[str]: ...

    def sweep(self) -> int:
        """Remove the temporary files workers wrote for this batch that it does not hold."""
        ...

    def drop(self, thread_ids: Sequence[str]) -> None: ...

    def discard(self) -> None: ...


@runtime_checkable
class BulkStore(Protocol):
    """A store that writes new threads whole (the embedded store)."""

    def new_threads(self) -> ThreadBatch: ...


class Written(Protocol):
    """A new thread's finished log: a `NewLog`, or one a worker built
    (`threadlog.importers._parallel.Finished`)."""

    @property
    def thread_id(self) -> str: ...

    @property
    def lines(self) -> Sequence[bytes]: ...

    @property
    def records(self) -> Sequence[Record] | Projected:
        """Its records, or what they change in the index (`project_log` of them all)."""
        ...

    @property
    def spooled(self) -> Spooled | None:
        """Its rollout, if the process that built it wrote it (`ThreadBatch.spool`): its
        `lines` are then empty."""
        ...

    def checkpointed(self, records: int, every: int) -> Checkpointed | None:
        """Its checkpoint (sparse entries every ``every`` records), if it has at least
        ``records`` records."""
        ...


class NewLog:
    """A new thread's log, built in memory: what an `Emitter` appends to in place of the store
    (module docstring).

    Args:
        batch: the store's batch (its encoding of data, its record size limit).
        principal, title, lineage, config: as `Store.create_thread` takes them.
    """

    __slots__ = ("_batch", "_ids", "lines", "records", "state", "thread_id")

    spooled: Spooled | None = None
    """(Its lines are written by the batch it is added to.)"""

    def __init__(
        self,
        batch: ThreadBatch,
        principal: str,
        *,
        title: str | None,
        lineage: dict[str, Any] | None,
        config: dict[str, Any],
    ) -> None:
        self._batch = batch
        data = thread_created_data(principal, title, lineage, config)
        data_json = codec.canonical(data)
        now = wall_ns()
        self.thread_id = new_id(now)
        first_id = new_id(now)
        ts = rfc3339(now)
        line, digest = encode_record(
            id=first_id,
            thread=self.thread_id,
            ord=1,
            parent=None,
            ts=ts,
            type="thread.created",
            data_json=data_json,
            prev=None,
        )
        first = Record(
            1, first_id, self.thread_id, 1, None, ts, "thread.created", data, None, digest
        )
        self.records: list[Record] = [first]
        self.lines: list[bytes] = [line]
        self._ids: dict[str, int] = {first_id: 1}
        self.state: ThreadState = apply(None, first)

    @property
    def root(self) -> str:
        """The id of the ``thread.created`` record."""
        return self.records[0].id

    def checkpointed(self, records: int, every: int) -> Checkpointed | None:
        """`Written.checkpointed`: the log's trimmed state after its last record, and the
        offsets of every ``every``-th line (a long session's first open then starts there)."""
        if len(self.records) < records:
            return None
        sparse = SparseIndex(every)
        sparse.add(self.records, self.lines)
        last = self.records[-1]
        # (the log is finished: nothing is checked against its state any more)
        return Checkpointed(last.ord, last.hash, snapshot.dump_trimmed(self.state), sparse.entries)

    def append(
        self,
        thread_id: str,
        type: str,
        data: Any = None,
        *,
        durable: bool | None = None,
        id: str | None = None,
        parent: str | None | EllipsisType = ...,
    ) -> Record:
        """`Store.append`'s checks and result, the record kept here (``durable`` is moot:
        the whole log is durable once its batch is committed)."""
        if thread_id != self.thread_id:
            raise UsageError(f"thread {thread_id} is not the new thread {self.thread_id}")
        if type not in _TYPES:
            if not valid_type_name(type) or type == "thread.created":
                raise InvalidEventType(f"invalid event type name {type!r}")
            _TYPES.add(type)
        if data is None:
            data = {}
        # The store's encoding (look-alike references escaped, large values moved out), of
        # which most records need nothing: no ``$`` in their JSON, and under the threshold.
        data_json = codec.canonical_decoded(data)  # (an import's data: decoded JSON)
        if b"$" in data_json or len(data_json) > self._batch.artifact_threshold:
            data, data_json = self._batch.encode(type, data)
        event = from_data(type, data)  # the schema (InvalidData / InvalidEventType)
        now = wall_ns()
        if id is None:
            id = new_id(now)
        existing = self._ids.get(id)
        last = self.records[-1]
        if existing is not None:
            stored = self.records[existing - 1]
            want = stored.parent if parent is ... else parent
            if (
                stored.type == type
                and stored.parent == want
                and codec.canonical(stored.data) == data_json  # (a replay: rare)
            ):
                return stored
            raise DuplicateEventConflict(self.thread_id, id, existing)
        parent_id = last.id if parent is ... else parent
        if parent_id is not None and parent_id not in self._ids:
            raise UsageError(f"thread {self.thread_id} has no record {parent_id!r:.80} to continue")
        ord_ = last.ord + 1
        ts = rfc3339(now)
        line, digest = encode_record(
            id=id,
            thread=self.thread_id,
            ord=ord_,
            parent=parent_id,
            ts=ts,
            type=type,
            data_json=data_json,
            prev=last.hash,
        )
        if len(line) > self._batch.max_record_bytes:
            raise RecordTooLarge(
                f"record of {len(line)} bytes is over the limit of {self._batch.max_record_bytes}"
            )
        record = _new_record(
            Record, (1, id, self.thread_id, ord_, parent_id, ts, type, data, last.hash, digest)
        )
        try:
            self.state = apply(self.state, record, event)  # refused: the state is unchanged
        except InvalidTransition as exc:
            raise InvalidTransition(
                f"thread {self.thread_id}: refused {type}: {exc.reason}; nothing was written"
            ) from None
        self.records.append(record)
        self.lines.append(line)
        self._ids[id] = ord_
        return record


_TYPES: set[str] = set()
"""Event type names already checked."""
_new_record = tuple.__new__
"""Builds a `Record` from its ten fields without the named tuple's Python-level ``__new__``
(as `threadlog.model.envelope` reads do): 0.33 -> 0.19 us a record."""


class Bulk:
    """An import's batch of new threads and the files they came from (module docstring).

    Args:
        batch: the store's batch (`BulkStore.new_threads`).
        ledger: the import's ledger: a thread in the batch is held (`Ledger.pending`), and
            a file whose threads a failed commit did not write is forgotten.
    """

    def __init__(self, batch: ThreadBatch, ledger: Ledger) -> None:
        self.batch = batch
        self.ledger = ledger
        self.files: list[tuple[FileReport, list[str]]] = []
        """The reports of the files whose threads are in the batch, and those threads."""

    def open(
        self,
        principal: str,
        *,
        title: str | None,
        lineage: dict[str, Any] | None,
        config: dict[str, Any],
    ) -> NewLog:
        """A new thread's log (handed to the batch by `add`)."""
        return NewLog(self.batch, principal, title=title, lineage=lineage, config=config)

    def add(self, report: FileReport, logs: Sequence[Written]) -> None:
        """Hand a finished file's new threads to the batch (all or none of them)."""
        added: list[str] = []
        batch = self.batch
        handed = 0  # the logs handed to the batch: an `adopt` that fails removes its own file
        try:  # (or leaves it, when it is not the thread's), so only those after it are ours
            for log in logs:
                taken = log.checkpointed(batch.checkpoint_records, batch.sparse_every)
                spooled = log.spooled
                handed += 1
                if spooled is None:
                    batch.add(log.thread_id, log.lines, log.records, taken)
                else:
                    batch.adopt(log.thread_id, spooled, log.records, taken)
                added.append(log.thread_id)
        except BaseException:
            self.batch.drop(added)  # all or none of a file's threads
            for log in logs[handed:]:  # the files of those not handed to the batch
                if log.spooled is not None:
                    log.spooled.remove()
            raise
        self.files.append((report, added))
        self.ledger.pending.update(added)

    def pending(self, thread_id: str) -> bool:
        """Whether ``thread_id`` is in the batch, not committed yet."""
        return thread_id in self.ledger.pending

    def commit(self) -> None:
        """Make the batch durable and visible. If that fails, each file it held is marked
        failed and left out of the ledger (its threads were not written), and the error
        is raised."""
        files, self.files = self.files, []
        try:
            self.batch.commit()
        except BaseException as exc:
            for report, threads in files:
                self.ledger.files.pop(report.path, None)
                report.status = "failed"
                report.problem(0, "error", f"{type(exc).__name__}: {exc}")
                self.ledger.pending.difference_update(threads)
            raise
        for _, threads in files:
            self.ledger.pending.difference_update(threads)

    def discard(self) -> None:
        """Drop what was not committed (its files left out of the ledger)."""
        files, self.files = self.files, []
        for report, threads in files:
            self.ledger.files.pop(report.path, None)
            self.ledger.pending.difference_update(threads)
        self.batch.discard()
