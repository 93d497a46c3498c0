"""An in-memory store: the same records and checks as the embedded store, persisting nothing.

Used for ephemeral sessions (``Runtime(ephemeral=True)``, ``open_store("memory://")``) and as
the executable reference of the store contract (`threadlog.testing.StoreContract`). Records
are encoded and hash-chained exactly as on disk; large values go to in-memory artifacts; a
fork inherits its source's records verbatim, as on disk. It implements the `Store` port and
the `Snapshots`, `Mailbox`, `Credentials`, `Transfer` and `Retention` capabilities (the
middle three in `threadlog.store.memory_mailbox`, `memory_credentials` and `memory_transfer`).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from threadlog._clock import new_id, rfc3339, wall_ns
from threadlog.errors import (
    DuplicateEventConflict,
    IntegrityError,
    InvalidTransition,
    OrdinalConflict,
    ThreadNotFound,
    UsageError,
)
from threadlog.model import codec
from threadlog.model.envelope import FORMAT_VERSION, Record, encode_record, record_hash
from threadlog.model.eventdata import from_data, to_data
from threadlog.model.events import Event, ThreadCreated
from threadlog.model.ids import is_uuid
from threadlog.model.legality import reduce_log, replay_log
from threadlog.model.lineage import Copied, copied_prefix
from threadlog.model.reducer import replay
from threadlog.model.refs import ArtifactRef
from threadlog.model.refs import resolve as resolve_refs
from threadlog.store._forks import child_created
from threadlog.store.admission import Admission
from threadlog.store.artifact_check import first_bad_artifact, worse
from threadlog.store.memory_blobs import MemoryBlobs
from threadlog.store.memory_credentials import MemoryCredentials
from threadlog.store.memory_mailbox import MemoryMailbox
from threadlog.store.memory_transfer import MemoryTransfer
from threadlog.store.named import archive, check_thread_id, same_creation
from threadlog.store.offload import encode_data, summary_of
from threadlog.store.protocol import ErrorListener, Listener, VerifyReport
from threadlog.store.validate import (
    normalize_append,
    thread_created_data,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from types import EllipsisType, TracebackType

    from threadlog.model.state import ThreadState

__all__ = ["MemoryStore"]

log = logging.getLogger("threadlog.store")


def _copy(record: Record, data_json: bytes) -> Record:
    """A record whose data is a fresh decode: handing it out never aliases the log."""
    return record._replace(data=codec.loads(data_json))


class MemoryStore(MemoryBlobs, MemoryMailbox, MemoryCredentials, MemoryTransfer):
    """Threads as lists of records in memory. Thread-safe; use as a context manager.

    Args:
        artifact_threshold: event data (or one of its top-level values) whose canonical JSON
            is larger than this many bytes is kept as an artifact, the record holding a
            reference (as in the embedded store, so that both behave alike).
    """

    def __init__(self, *, artifact_threshold: int = 64 * 1024) -> None:
        MemoryMailbox.__init__(self)
        MemoryCredentials.__init__(self)
        self.artifact_threshold = artifact_threshold
        self._threads: dict[str, list[tuple[Record, bytes]]] = {}
        self._ids: dict[str, dict[str, int]] = {}
        self._artifacts: dict[str, bytes] = {}
        self._snapshots: dict[str, tuple[int, str, str, bytes]] = {}
        self._admissions: dict[str, Admission] = {}
        self._deleted: set[str] = set()
        self._lock = threading.Lock()
        self._listeners: list[Listener] = []
        self._closed = False

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        """Whether `close` was called."""
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError("the store is closed")

    def create_thread(
        self,
        principal: str = "local",
        *,
        title: str | None = None,
        lineage: dict[str, Any] | None = None,
        thread_id: str | None = None,
        **config: Any,
    ) -> str:
        """As `EmbeddedStore.create_thread`."""
        self._check_open()
        data = thread_created_data(principal, title, lineage, config)
        now = wall_ns()
        with self._lock:
            if thread_id is None:
                thread_id = new_id(now)
            else:
                check_thread_id(thread_id, deleted=thread_id in self._deleted)
                held = self._threads.get(thread_id)
                if held is not None:
                    return same_creation(thread_id, held[0][0].data if held else data, data)
            self._threads[thread_id] = []
            self._ids[thread_id] = {}
        self._add(thread_id, "thread.created", data, None, None, None, None)
        return thread_id

    def append(
        self,
        thread_id: str,
        type: str | Event,
        data: Any = None,
        *,
        durable: bool | None = None,
        id: str | None = None,
        parent: str | None | EllipsisType = ...,
        expect_ord: int | None = None,
        check: Callable[[Record], object] | None = None,
    ) -> Record:
        """As `EmbeddedStore.append`; ``durable`` has no meaning here."""
        self._check_open()
        type_name, data = normalize_append(type, data, id, parent)
        return self._add(thread_id, type_name, data, id, parent, expect_ord, check)

    async def aappend(
        self,
        thread_id: str,
        type: str | Event,
        data: Any = None,
        *,
        durable: bool | None = None,
        id: str | None = None,
        parent: str | None | EllipsisType = ...,
        expect_ord: int | None = None,
        check: Callable[[Record], object] | None = None,
    ) -> Record:
        """`append` (nothing to wait for)."""
        return self.append(
            thread_id,
            type,
            data,
            durable=durable,
            id=id,
            parent=parent,
            expect_ord=expect_ord,
            check=check,
        )

    def _add(
        self,
        thread_id: str,
        type_name: str,
        data: Any,
        id: str | None,
        parent: str | None | EllipsisType,
        expect_ord: int | None,
        check: Callable[[Record], object] | None,
    ) -> Record:
        data, data_json = encode_data(type_name, data, self.artifact_threshold, self._offload)
        data = codec.loads(data_json)  # what a later read returns, and no alias of the caller's
        now = wall_ns()
        with self._lock:
            records = self._threads.get(thread_id)
            if records is None:
                raise ThreadNotFound(thread_id)
            ids = self._ids[thread_id]
            if id is not None and id in ids:
                stored = records[ids[id] - 1][0]._replace(data=codec.loads(records[ids[id] - 1][1]))
                want = stored.parent if parent is ... else parent
                if not stored.same_content(type_name, data, want):
                    raise DuplicateEventConflict(thread_id, id, stored.ord)
                return stored
            ord_ = len(records) + 1
            if expect_ord is not None and expect_ord != ord_:
                raise OrdinalConflict(thread_id, expect_ord, ord_)
            last = records[-1][0] if records else None
            event_id = id or new_id(now)
            parent_id = (last.id if last else None) if parent is ... else parent
            if parent_id is not None and parent_id not in ids:
                raise UsageError(
                    f"thread {thread_id} has no record {parent_id!r:.80} to continue: pass "
                    "the id of one of its records as parent, None for a new root, or leave "
                    "it out for the previous record"
                )
            prev = last.hash if last else None
            record = _new_record(
                event_id, thread_id, ord_, parent_id, rfc3339(now), type_name, data, data_json, prev
            )
            admission = self._admissions.get(thread_id)
            if admission is None:  # the state is reduced from the records at the first check
                admission = self._admissions[thread_id] = Admission(
                    thread_id, lambda: reduce_log(thread_id, [r for r, _ in records])
                )
            admission.admit(record, check)  # an illegal event raises: nothing is written
            data_json = codec.kept(data_json)  # (kept: not orjson's whole buffer)
            records.append((record, data_json))
            ids[event_id] = ord_
            # under the lock: listeners see each thread's records in order
            for listener in self._listeners:
                try:
                    listener(thread_id, [_copy(record, data_json)])
                except Exception:
                    log.exception("a store listener failed")
        return _copy(record, data_json)

    def _offload(self, value: Any, value_json: bytes) -> ArtifactRef:
        digest = hashlib.sha256(value_json).hexdigest()
        with self._lock:
            self._artifacts[digest] = value_json
        return ArtifactRef(
            digest, len(value_json), "application/json", summary_of(value, value_json)
        )

    def follow(self, thread_id: str, after: int = 0, *, interval: float = 0.2) -> Iterator[Record]:
        """`Store.follow`: what `read` returns, then each new record, looking every
        ``interval`` seconds."""
        while True:
            records = self.read(thread_id, after)
            yield from records
            if records:
                after = records[-1].ord
            time.sleep(interval)

    def read(
        self,
        thread_id: str,
        after: int = 0,
        *,
        limit: int | None = None,
        before: int | None = None,
    ) -> list[Record]:
        """As `EmbeddedStore.read`."""
        with self._lock:
            records = self._threads.get(thread_id)
            if records is None:
                raise ThreadNotFound(thread_id)
            out = records[max(after, 0) : None if before is None else max(before - 1, 0)]
        if limit is not None:
            out = out[:limit] if before is None else (out[-limit:] if limit > 0 else [])
        return [_copy(r, js) for r, js in out]

    def state(self, thread_id: str, *, history: bool = True) -> ThreadState:
        """The thread's state, reduced from its log; `IntegrityError` (with its ordinal) if
        the log holds an event the reducer refuses (written by an older threadlog)."""
        return replay_log(thread_id, self.read(thread_id))

    def exists(self, thread_id: str) -> bool:
        """Whether the store holds the thread."""
        return is_uuid(thread_id) and thread_id in self._threads

    def delete_thread(self, thread_id: str) -> bool:
        """As `EmbeddedStore.delete_thread` (`Retention`)."""
        self._check_open()
        if not is_uuid(thread_id):
            raise UsageError(f"not a thread id: {thread_id!r:.80}")
        with self._lock:
            if self._threads.pop(thread_id, None) is None:
                return False
            self._ids.pop(thread_id, None)
            self._admissions.pop(thread_id, None)
            self._snapshots.pop(thread_id, None)
            self._deleted.add(thread_id)
        return True

    def deleted(self, thread_id: str) -> bool:
        """Whether ``thread_id`` was deleted (`Retention`)."""
        return thread_id in self._deleted

    def archive_thread(self, thread_id: str, archived: bool = True) -> bool:
        """As `EmbeddedStore.archive_thread` (`Retention`)."""
        return archive(self, thread_id, archived)

    def thread_ids(self) -> list[str]:
        """Every thread, oldest first."""
        with self._lock:
            return list(self._threads)

    def resolve(self, data: Any) -> Any:
        """Record data as it was appended: artifact references loaded, escaped look-alikes
        unwrapped."""
        return resolve_refs(data, self._load_ref)

    def _load_ref(self, ref: ArtifactRef) -> Any:
        content = self._artifacts.get(ref.sha256)
        if content is None:
            raise IntegrityError(
                "-", 0, f"artifact {ref.sha256} is missing (it was made by another store)"
            )
        return codec.loads(content)

    def fork(
        self,
        thread_id: str,
        at: int | str | None = None,
        *,
        principal: str | None = None,
        title: str | None = None,
        kind: str = "fork",
        changes: dict[str, Any] | None = None,
    ) -> str:
        """As `EmbeddedStore.fork`: the child inherits ords 2..``at`` (an ordinal, or the
        entry id of the last record to inherit) verbatim (same ids, data and hashes) and
        records its lineage; all or nothing."""
        self._check_open()
        with self._lock:
            held = self._threads.get(thread_id)
            if held is None:
                raise ThreadNotFound(thread_id)
            source = list(held)
            if isinstance(at, str):
                found = self._ids[thread_id].get(at)
                if found is None:
                    raise UsageError(f"no entry {at!r} in thread {thread_id}")
                at = found
        if at is None:
            at = len(source)
        if not 1 <= at <= len(source):
            raise UsageError(f"thread {thread_id} has no ord {at} (it has {len(source)} records)")
        first = source[0][0]
        created = from_data(first.type, first.data)
        assert isinstance(created, ThreadCreated)
        inherited = _inherited(thread_id, created)
        last = source[at - 1][0]
        head = child_created(
            thread_id,
            created,
            first,
            inherited,
            at,
            last,
            principal=principal,
            title=title,
            kind=kind,
        )
        now = wall_ns()
        child = new_id(now)
        head_data = to_data(head)[1]
        head_json = codec.canonical(head_data)
        header = _new_record(
            new_id(now), child, 1, None, rfc3339(now), head.type, head_data, head_json, None
        )
        records = [(header, head_json), *source[1:at]]
        if changes:
            settings_json = codec.canonical({"changes": changes})
            records.append(
                (
                    _new_record(
                        new_id(now),
                        child,
                        at + 1,
                        last.id,
                        rfc3339(now),
                        "config.changed",
                        codec.loads(settings_json),
                        settings_json,
                        last.hash if at > 1 else header.hash,
                    ),
                    settings_json,
                )
            )
        with self._lock:
            self._threads[child] = records
            self._ids[child] = {r.id: r.ord for r, _ in records}
        return child

    def verify(self, thread_id: str, *, check_events: bool = True) -> VerifyReport:
        """Recompute every hash and check the chain and ordinals (and, by default, that the
        reducer accepts every event). Reports; never repairs."""
        with self._lock:
            held = self._threads.get(thread_id)
            if held is None:
                raise ThreadNotFound(thread_id)
            records = list(held)
        error: IntegrityError | InvalidTransition | None = None
        try:
            created = from_data(records[0][0].type, records[0][0].data)
            inherited = (
                _inherited(thread_id, created) if isinstance(created, ThreadCreated) else None
            )
        except (UsageError, IntegrityError) as exc:
            error = IntegrityError(thread_id, 1, f"ord 1 is not a valid thread.created: {exc}")
            inherited = None
        for i, (record, data_json) in enumerate(records):
            if error is not None:
                break
            ord_ = i + 1
            if i == 0:
                prev: str | None = None
            elif i == 1 and inherited is not None:
                prev = inherited.prev
            else:
                prev = records[i - 1][0].hash
            writers = inherited.threads if inherited and 2 <= ord_ <= inherited.until else ()
            digest = record_hash(record, data_json)
            if record.ord != ord_:
                error = IntegrityError(thread_id, ord_, f"record {ord_} holds ord {record.ord}")
            elif record.prev != prev:
                error = IntegrityError(thread_id, ord_, "the hash chain is broken here")
            elif digest != record.hash:
                error = IntegrityError(thread_id, ord_, "the record's hash does not match it")
            elif record.thread != thread_id and record.thread not in writers:
                error = IntegrityError(thread_id, ord_, f"a record of thread {record.thread}")
        if error is None and check_events:
            try:
                replay([r for r, _ in records])
            except (InvalidTransition, IntegrityError) as exc:
                error = exc
            except UsageError as exc:  # data that does not fit its type
                error = InvalidTransition(str(exc))
        bad = first_bad_artifact(thread_id, [r for r, _ in records], self.check_artifact)
        error = worse(error, bad)
        return VerifyReport(thread_id, error is None, len(records), records[-1][0].ord, None, error)

    def save_snapshot(
        self, thread_id: str, payload: bytes, *, ord: int, hash: str, version: str
    ) -> bool:
        """As `EmbeddedStore.save_snapshot`: kept if record ``ord`` has ``hash``."""
        with self._lock:
            records = self._threads.get(thread_id)
            if records is None or not 1 <= ord <= len(records):
                return False
            if records[ord - 1][0].hash != hash:
                return False
            self._snapshots[thread_id] = (ord, hash, version, payload)
        return True

    def load_snapshot(self, thread_id: str, version: str) -> tuple[int, bytes] | None:
        """As `EmbeddedStore.load_snapshot`."""
        with self._lock:
            snap = self._snapshots.get(thread_id)
            records = self._threads.get(thread_id)
            if snap is None or records is None or snap[2] != version:
                return None
            ord_, hash_, _, payload = snap
            if ord_ > len(records) or records[ord_ - 1][0].hash != hash_:
                return None
        return ord_, payload

    def acquire(self, thread_id: str) -> None:
        """Check that the thread exists (there is no lease to take in one process)."""
        self._check_open()
        if not self.exists(thread_id):
            if not is_uuid(thread_id):
                raise UsageError(f"not a thread id: {thread_id!r:.80}")
            raise ThreadNotFound(thread_id)

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(thread_id, records)`` after each append, in order."""
        self._listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        """Stop calling ``listener``."""
        self._listeners.remove(listener)

    def add_error_listener(self, listener: ErrorListener) -> None:
        """As `EmbeddedStore.add_error_listener`; this store never fails, so never calls it."""

    def remove_error_listener(self, listener: ErrorListener) -> None:
        """Nothing to remove (see `add_error_listener`)."""

    def release(self, thread_id: str) -> None:
        """Nothing to release: no lease, no buffer."""

    def take_repairs(self, thread_id: str) -> list[dict[str, Any]]:
        """Always empty: nothing here is ever torn or replayed."""
        return []

    def flush(self) -> None:
        """Nothing to flush: every append is complete on return."""

    def close(self) -> None:
        """Refuse further writes (reads still work). Idempotent."""
        self._closed = True


def _new_record(
    event_id: str,
    thread_id: str,
    ord_: int,
    parent: str | None,
    ts: str,
    type_name: str,
    data: Any,
    data_json: bytes,
    prev: str | None,
) -> Record:
    """A record with its hash, as the embedded store would write it."""
    _, digest = encode_record(
        id=event_id,
        thread=thread_id,
        ord=ord_,
        parent=parent,
        ts=ts,
        type=type_name,
        data_json=data_json,
        prev=prev,
    )
    return Record(
        FORMAT_VERSION, event_id, thread_id, ord_, parent, ts, type_name, data, prev, digest
    )


def _inherited(thread_id: str, created: ThreadCreated) -> Copied | None:
    """The prefix a thread inherited from its fork source, if any."""
    try:
        return copied_prefix(created.lineage)
    except ValueError as exc:
        raise IntegrityError(thread_id, 1, str(exc)) from None
