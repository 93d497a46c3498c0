"""The storage port: what every backend offers its consumers, and the optional capabilities.

Consumers (the runtime, the CLI, a future server or importer) talk to a `Store` and nothing
else. What only some backends can do is a named capability, a `typing.Protocol` of its own,
which a consumer checks with ``isinstance(store, Snapshots)`` (they are all
``@runtime_checkable``), never by asking for a backend class or probing with ``getattr``:

* `Snapshots`: keep and load reduced state, so that opening a long thread reads only its tail.
* `Catalog`: list threads with their projections (status, counts) and remembered facts.
* `LocalHome`: the store lives in a local directory, beside which the runtime keeps the
  records of the processes its tools start.
* `Mailbox`: other processes leave commands (approve, send, cancel…) for the live session
  that holds a thread's lease, which alone may append to it. `MailboxIndex`: which threads
  have mail, in one call.
* `Watch`: deliver the records *other processes* append to a thread to this store's
  listeners too (a scale-out backend, where many workers write one database).
* `Artifacts`: store and fetch blobs by hash (a tool's full output, streamed in with bounded
  memory: 000 §17.2); the records that reference them say so, and `Store.verify` checks them.
* `Transfer`: adopt a thread's records verbatim, as another store holds them (``threadlog
  copy`` between backends: same ids, ordinals, hashes and lineage).
* `Retention`: archive a thread, or delete it for good (what framework adapters and
  ``threadlog gc`` need).

Every backend implements the whole `Store`; `threadlog.testing.StoreContract` is the test
suite that holds one to it (a backend's tests subclass it and say how to make a store).

A runtime check of a protocol looks at method *names* only; the signatures here are what
mypy holds a backend to.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol, Self, runtime_checkable

from threadlog._dataclass import dataclass
from threadlog.errors import IntegrityError, InvalidTransition, StorageError
from threadlog.model.envelope import Record

if TYPE_CHECKING:
    from types import EllipsisType, TracebackType
    from typing import BinaryIO

    from threadlog.model.commands import Command
    from threadlog.model.events import Event
    from threadlog.model.memory import MemoryFact
    from threadlog.model.refs import ArtifactRef
    from threadlog.model.state import ThreadState
    from threadlog.store.embedded.index import IndexedThread
    from threadlog.store.embedded.rollout import TornTail

__all__ = [
    "ArtifactWriter",
    "Artifacts",
    "Catalog",
    "Credential",
    "Credentials",
    "ErrorListener",
    "Listener",
    "LocalHome",
    "Mailbox",
    "MailboxIndex",
    "MailboxMessage",
    "Maintenance",
    "Retention",
    "Snapshots",
    "Store",
    "Transfer",
    "VerifyReport",
    "Watch",
]

Listener = Callable[[str, list[Record]], None]
"""``listener(thread_id, records)``: records that became durable and readable, in order."""
ErrorListener = Callable[[StorageError], None]
"""``listener(error)``: the store stopped acknowledging writes (fail-stop)."""


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """The outcome of verifying one thread's log."""

    thread_id: str
    ok: bool
    records: int
    last_ord: int
    torn: TornTail | None
    """An interrupted write at the end of the log (not damage: readers ignore it)."""
    error: IntegrityError | InvalidTransition | None

    @property
    def first_bad_ord(self) -> int | None:
        """The ordinal of the first record found wrong, if any."""
        err = self.error
        if isinstance(err, IntegrityError):
            return err.ord
        if isinstance(err, InvalidTransition):
            return err.ord
        return None

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data (``threadlog verify --json``)."""
        return {
            "thread": self.thread_id,
            "ok": self.ok,
            "records": self.records,
            "last_ord": self.last_ord,
            "first_bad_ord": self.first_bad_ord,
            "offset": self.error.offset if isinstance(self.error, IntegrityError) else None,
            "error": str(self.error) if self.error else None,
            "torn_tail": (
                {
                    "offset": self.torn.offset,
                    "bytes": self.torn.size,
                    "reason": self.torn.reason,
                    "completes_ord": self.torn.completes.ord if self.torn.completes else None,
                }
                if self.torn
                else None
            ),
        }


@runtime_checkable
class Store(Protocol):
    """The storage port: threads of hash-chained records, appended and read back.

    Thread-safe; a context manager that closes the store. Every method that takes a thread
    id raises `UsageError` for something that is not one, and `ThreadNotFound` for a thread
    the store does not hold; every method raises `UsageError` once the store is closed
    (reads may still work), and `StorageError` when its medium fails.
    """

    def __enter__(self) -> Self:
        """The store itself."""
        ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """`close`."""
        ...

    def create_thread(
        self,
        principal: str = "local",
        *,
        title: str | None = None,
        lineage: dict[str, Any] | None = None,
        thread_id: str | None = None,
        **config: Any,
    ) -> str:
        """A new thread whose durable ord 1 is ``thread.created``; returns its id. Raises
        `UsageError` (bad principal, a lineage only a fork may declare, look-alike refs).

        ``thread_id`` is a caller-chosen id (a UUIDv7 string, e.g. one an adapter derives
        from a framework's own thread name: `threadlog.model.ids.named_thread_id`). Creating
        it again with the same principal, title, lineage and config returns it (idempotent);
        with other settings, or for an id a `Retention.delete_thread` deleted, raises
        `ThreadExists`."""
        ...

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
        """Append one event; returns its record. An ``id`` already stored returns the stored
        record (same content) or raises `DuplicateEventConflict`; ``expect_ord`` raises
        `OrdinalConflict`; bad input raises `InvalidEventType`, `InvalidData`, `UsageError`
        (also for a ``parent`` the thread does not hold); an event the reducer refuses in the
        thread's state (a second ``turn.ended``, a result before its start) raises
        `InvalidTransition` (checked with the ordinal assigned, before ``check``); if either
        raises, nothing is written. Large data may be stored as artifact references
        (`resolve` loads them)."""
        ...

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
        """`append` for asyncio: waits for durability without blocking the event loop."""
        ...

    def read(
        self,
        thread_id: str,
        after: int = 0,
        *,
        limit: int | None = None,
        before: int | None = None,
    ) -> list[Record]:
        """Durable records with ``after < ord < before`` (``before=None``: no upper bound), in
        ascending order. ``limit`` keeps at most that many: the first ones, or, with
        ``before``, the ones nearest ``before`` — so ``read(t, before=2**62, limit=5)`` is the
        thread's last five records, read without reading the log from its start. A
        ``before`` past the last record reads up to the end. Raises `ThreadNotFound`, and
        `IntegrityError` for damage."""
        ...

    def follow(self, thread_id: str, after: int = 0, *, interval: float = 0.2) -> Iterator[Record]:
        """The durable records with ``ord > after``, then each new one as it becomes durable
        (looking every ``interval`` seconds), for as long as the caller iterates: it never
        ends by itself. Verified and chained like `read`; works beside a live writer in
        another process. Raises `ThreadNotFound`, `IntegrityError`."""
        ...

    def state(self, thread_id: str, *, history: bool = True) -> ThreadState:
        """The thread's state, reduced from its whole log. Raises `IntegrityError` naming the
        ordinal if the log holds an event the reducer refuses.

        ``history=False`` lets the store answer with a trimmed state
        (`threadlog.model.state.trim`: past turns and calls without their payloads), which
        may cost the log's tail instead of its length: enough for what the thread is doing
        now (its running turn, open calls, leaf, settings), not for a view of its past."""
        ...

    def exists(self, thread_id: str) -> bool:
        """Whether the store holds the thread (False, never an error, for a malformed id)."""
        ...

    def thread_ids(self) -> list[str]:
        """Every thread the store holds (in no promised order)."""
        ...

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
        """A new thread inheriting ords 2..``at`` (default: all) verbatim, its lineage in
        ``thread.created`` and ``changes`` as a ``config.changed``; returns its id. All or
        nothing.

        ``at`` is the last record to inherit: its ordinal (an ``int``), or its entry id (a
        ``str``: the record's event id, `Record.id`; a string is always taken for an id,
        never parsed as a number). Raises `UsageError` for an ordinal the thread does not
        have, or an entry id none of its records has (the message names the entry)."""
        ...

    def verify(self, thread_id: str, *, check_events: bool = True) -> VerifyReport:
        """Check the log's hashes, chain and ordinals (and, by default, that the reducer
        accepts every event), and that every blob a record references (`Artifacts`) is there
        and matches its hash, naming the record's ordinal. Reports damage; never repairs it."""
        ...

    def resolve(self, data: Any) -> Any:
        """Record data as it was appended: artifact references loaded, escaped look-alikes
        unwrapped. Raises `IntegrityError`/`StorageError` for a missing or damaged artifact."""
        ...

    def acquire(self, thread_id: str) -> None:
        """Open the thread for writing now (take its single-writer lease, repair its tail).
        Raises `LeaseHeld` when another writer holds it."""
        ...

    def release(self, thread_id: str) -> None:
        """Flush the thread and give up writing it (its lease), until the next append."""
        ...

    def take_repairs(self, thread_id: str) -> list[dict[str, Any]]:
        """What the store repaired in the thread since it opened (each a dict with a
        ``kind``); cleared by the call."""
        ...

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(thread_id, records)`` once records are durable, in order per
        thread; a listener that raises is logged, never fails the append."""
        ...

    def remove_listener(self, listener: Listener) -> None:
        """Stop calling ``listener``; raises `ValueError` if it was not added."""
        ...

    def add_error_listener(self, listener: ErrorListener) -> None:
        """Call ``listener(error)`` once if the store stops acknowledging writes (at once
        if it already has)."""
        ...

    def remove_error_listener(self, listener: ErrorListener) -> None:
        """Stop calling ``listener``."""
        ...

    def flush(self) -> None:
        """Make every buffered append durable (and visible to listeners)."""
        ...

    def close(self) -> None:
        """Flush, release every thread and refuse further writes. Idempotent."""
        ...


@runtime_checkable
class Snapshots(Protocol):
    """Reduced state kept beside the log, so that opening a thread reads only its tail."""

    def save_snapshot(
        self, thread_id: str, payload: bytes, *, ord: int, hash: str, version: str
    ) -> bool:
        """Keep ``payload`` as the state after record ``ord`` (which must have ``hash``);
        False, saving nothing, when that cannot be checked."""
        ...

    def load_snapshot(self, thread_id: str, version: str) -> tuple[int, bytes] | None:
        """``(ord, payload)`` of the thread's snapshot if it is of ``version`` and its anchor
        record is still in the log; else None."""
        ...


@runtime_checkable
class Catalog(Protocol):
    """Projections of every thread: listings and remembered facts."""

    def threads(
        self,
        *,
        principal: str | None = None,
        limit: int | None = None,
        archived: bool | None = False,
        metadata: dict[str, Any] | None = None,
    ) -> list[IndexedThread]:
        """Threads, most recently active first: those not archived (``thread.archived``) by
        default, only the archived ones with ``archived=True``, all with None. ``metadata``
        keeps the threads whose ``metadata`` setting (``create_thread(metadata={...})``, a
        dict fixed at creation) has every one of these keys with an equal value."""
        ...

    def thread_info(self, thread_id: str) -> IndexedThread:
        """One thread's row; raises `ThreadNotFound`."""
        ...

    def memories(
        self, *, principal: str | None = None, include_revoked: bool = False
    ) -> list[dict[str, Any]]:
        """Remembered facts of every thread, oldest first."""
        ...

    def shared_memories(self, principal: str, project: str | None = None) -> list[MemoryFact]:
        """Live facts other threads of ``principal`` may be offered: its ``principal`` facts
        and, given ``project``, its ``project`` facts of that project; never another
        principal's (`threadlog.model.memory`)."""
        ...

    def turns(self, thread_id: str) -> list[dict[str, Any]]:
        """The thread's turns (id, status, ordinals, times, input), in order."""
        ...

    def tool_calls(self, thread_id: str) -> list[dict[str, Any]]:
        """The thread's tool calls (id, turn, tool, side effect, status, ordinals), in order."""
        ...


@runtime_checkable
class LocalHome(Protocol):
    """A store in a local directory (`home`), beside which the runtime keeps the records of
    the processes a session's tools start (`threadlog.runtime.procs`)."""

    @property
    def home(self) -> str:
        """The store's directory (absolute)."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class MailboxMessage:
    """A command waiting in a thread's mailbox (`Mailbox.pending`)."""

    id: str
    """The message id `Mailbox.post` returned (time-ordered)."""
    thread_id: str
    command: Command


@runtime_checkable
class Mailbox(Protocol):
    """Commands other processes leave for the live session of a thread.

    Only the lease holder may append to a thread, so a command from elsewhere (``threadlog
    approve`` beside a running agent) is posted here; the session watching the mailbox
    (`threadlog.runtime.mailbox_watch`) applies it through its own checks, then marks it
    done. A message is durable once `post` returns and stays pending until `done`.
    """

    def post(self, thread_id: str, command: Command) -> str:
        """Durably leave ``command`` for the thread; its message id (`ThreadNotFound` for
        no such thread, `UsageError` for a command with ill-typed fields)."""
        ...

    def pending(self, thread_id: str) -> list[MailboxMessage]:
        """The thread's messages not done yet, oldest first; a malformed or untrusted one
        is set aside (logged), never returned."""
        ...

    def done(self, message: MailboxMessage) -> None:
        """Remove a handled message so that `pending` never returns it again (idempotent)."""
        ...


@runtime_checkable
class MailboxIndex(Protocol):
    """A `Mailbox` that can say at once which threads have mail (optional, on top of it): a
    worker's scan for work asks once per poll instead of calling `Mailbox.pending` for every
    thread (a query each on a database)."""

    def addressed(self) -> set[str]:
        """The threads with messages pending. It may name a thread whose only messages
        `Mailbox.pending` would set aside; it never leaves out one whose messages it would
        return."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Credential:
    """An API token's stored half (`Credentials`): never the token itself, only its digest."""

    token_id: str
    """A short public id (``threadlog token rm`` takes it)."""
    principal: str
    """Who the token speaks for."""
    digest: str
    """The SHA-256 of the token, hex; the server compares it in constant time."""
    created_at: str
    """RFC 3339, UTC."""


@runtime_checkable
class Credentials(Protocol):
    """The service's bearer tokens, kept in the store they open (`threadlog.server`).

    The store keeps digests only: whoever reads the store cannot act as a principal. Every
    change is durable when the call returns (the embedded store writes its file atomically
    and fsyncs it and its directory)."""

    def add_credential(self, credential: Credential) -> None:
        """Keep ``credential``; `UsageError` if its ``token_id`` or ``digest`` is taken."""
        ...

    def credentials(self) -> list[Credential]:
        """Every stored credential, oldest first."""
        ...

    def remove_credential(self, token_id: str) -> bool:
        """Forget the credential ``token_id``; whether there was one."""
        ...


@runtime_checkable
class Maintenance(Protocol):
    """Looking after a store's files: the index rebuilt, problems its open skipped, threads
    whose log is gone, and where each thread's log is durable up to (readers of the files
    themselves, such as ``threadlog tail``, stop there)."""

    @property
    def problems(self) -> list[dict[str, Any]]:
        """What the store's open found and skipped (``kind``, ``message``, ``path``,
        ``thread``): a refused journal, a thread a journal names but cannot restore…"""
        ...

    def rebuild(self, *, progress: Callable[[int], None] | None = None) -> int:
        """Rebuild the index from the logs; the records indexed. ``progress(n)``, if given,
        is called as the work advances (n more threads done), for a progress bar."""
        ...

    def missing_threads(self) -> list[str]:
        """Threads with acknowledged records whose log file is gone."""
        ...

    def path_of(self, thread_id: str) -> str:
        """The file holding the thread's log (which need not exist)."""
        ...

    def durable_end(self, thread_id: str) -> int | None:
        """The byte offset up to which the thread's log is known durable while a live writer
        holds it; None when nobody writes it."""
        ...


@runtime_checkable
class Watch(Protocol):
    """Records other processes append, heard by this store's listeners too.

    A store shared by many processes (PostgreSQL) calls its listeners for its own appends
    only, unless a thread is watched: then records another process commits to it are read
    and delivered as well, in order, once each is known (a wake-up from the database; one
    that is lost is made up by the consumer's own reads, so a consumer still reads on a
    timer). Each `watch` is counted and undone by one `unwatch`; neither blocks."""

    def watch(self, thread_id: str) -> None:
        """Start delivering other processes' records of the thread to the listeners."""
        ...

    def unwatch(self, thread_id: str) -> None:
        """Undo one `watch`."""
        ...


@runtime_checkable
class ArtifactWriter(Protocol):
    """A blob being written (`Artifacts.artifact_writer`): bytes in, then one `commit` or
    `abort`. Holds no more than a buffer in memory (a durable backend spools to a file); a
    context manager that aborts what was not committed."""

    def write(self, data: bytes) -> None:
        """Add bytes to the blob."""
        ...

    def commit(self, *, summary: str | None = None) -> ArtifactRef:
        """Store the blob durably (named by its SHA-256) and return its reference."""
        ...

    def abort(self) -> None:
        """Drop what was written (a no-op after `commit`)."""
        ...

    def __enter__(self) -> Self:
        """The writer itself."""
        ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """`abort` unless committed."""
        ...


@runtime_checkable
class Artifacts(Protocol):
    """Blobs by content hash, beside the logs: what a tool stores that is too large for a
    record (000 §17.2). A record that references a blob carries its `ArtifactRef` (hash,
    size, media type, summary); `Store.verify` reports a referenced blob that is missing or
    does not match its hash, with the ordinal of the record that references it."""

    def put_artifact(
        self,
        content: bytes,
        *,
        media_type: str = "application/octet-stream",
        summary: str | None = None,
    ) -> ArtifactRef:
        """Store ``content`` durably (a no-op if it is there already); its reference."""
        ...

    def artifact_writer(self, *, media_type: str = "application/octet-stream") -> ArtifactWriter:
        """A writer that streams a blob in (bounded memory) and commits it by its hash."""
        ...

    def get_artifact(self, sha256: str) -> bytes:
        """A blob's bytes, checked against its hash. Raises `UsageError` (malformed hash, no
        such blob) or `IntegrityError` (the blob does not match its hash)."""
        ...

    def open_artifact(self, sha256: str) -> BinaryIO:
        """A blob opened for reading (seekable, to page through a large one), not checked
        against its hash as a whole (`check_artifact` does that). Raises `UsageError`."""
        ...

    def check_artifact(self, ref: ArtifactRef) -> str | None:
        """What is wrong with a referenced blob (missing, another size, not matching its
        hash), or None when it is there and sound. Reads the blob in chunks."""
        ...


@runtime_checkable
class Transfer(Protocol):
    """Adopting a thread's log verbatim: what ``threadlog copy`` (`threadlog.store.copy`)
    writes with, so a thread moves between backends with its hashes intact.

    `adopt_thread` keeps a whole thread as another store's `Store.read` returned it, record for
    record: the same ids, ordinals, parents, timestamps, writing threads (a fork's inherited
    prefix included) and hashes. **For backend authors:** check the records first with
    `threadlog.store.transfer.check_import` (it refuses, naming the ordinal, whatever
    `Store.verify` would); then a thread the store does not hold is written all or nothing and
    durably (True); one it holds with the same records (`same_log`) is left alone (False: a
    copy run again is a no-op); one it holds with other content is refused (`ConflictError`),
    writing nothing. The blobs the records reference are the caller's to copy first. The
    contract's ``transfer`` topic runs against every store with this capability; the
    PostgreSQL store's is `threadlog.store.postgres.transfer`.
    """

    def adopt_thread(self, records: Sequence[Record]) -> bool:
        """Keep ``records`` (one whole thread, ords 1..n) as they are; whether anything was
        written (False: the store held exactly these records already). Raises `UsageError`
        (no records, records of more than one log), `IntegrityError` (records that do not
        verify), `ConflictError` (the store holds the thread with other content)."""
        ...

    def adopt_pages(self, pages: Iterable[Sequence[Record]]) -> bool:
        """`adopt_thread` of the same records given as consecutive pages (ords 1..n in
        order, split anywhere), for a store to hold one page at a time rather than the whole
        log (``threadlog copy`` of a long thread; `threadlog.store.transfer.ImportCheck`
        checks a page at a time). The same answers, the same all-or-nothing write."""
        ...


@runtime_checkable
class Retention(Protocol):
    """Archiving threads, and deleting them for good: what framework adapters (LangGraph's ``delete_thread``, the
    Agents SDK's sessions) and ``threadlog gc`` need.

    A deleted thread's log is removed (its directory entry made durable), its index rows and
    snapshot go, and its id is remembered as deleted: `Store.create_thread` never silently
    hands it out again (`ThreadExists`). Artifacts are shared by hash and stay (a later
    artifact sweep collects unreferenced blobs). The embedded, in-memory and PostgreSQL stores
    implement it (`threadlog.store.postgres.retention`).
    """

    def delete_thread(self, thread_id: str) -> bool:
        """Delete the thread's log and projections; whether there was one. Raises
        `UsageError` for a malformed id and `LeaseHeld` while another process writes it."""
        ...

    def deleted(self, thread_id: str) -> bool:
        """Whether ``thread_id`` was deleted (its id stays taken)."""
        ...

    def archive_thread(self, thread_id: str, archived: bool = True) -> bool:
        """Archive the thread (a durable ``thread.archived`` record; nothing is removed) or,
        with ``archived=False``, restore it; whether that changed anything. Raises
        `InvalidTransition` while a turn runs, `ThreadNotFound`, `LeaseHeld`."""
        ...
