"""The store's answers that append nothing: reads, verification, snapshots, the catalog.

`Queries` is the half of `EmbeddedStore`'s public surface that adds nothing to any thread's
log (the catalog's queries and `catch_up` may bring the index up to date first). Each method
is one call to the collaborator that knows the answer (`Reader`, `SnapshotKeeper`, `Indexer`,
`Recovery`, `Layout`); the class holds no state of its own. It is a base class of the facade
(`threadlog.store.embedded.store`) only so that the facade's module keeps to wiring,
lifecycle, the append path and the listeners.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from threadlog.errors import UsageError
from threadlog.model import codec
from threadlog.model.legality import replay_log
from threadlog.model.refs import resolve as resolve_refs
from threadlog.store.embedded.checkpoint import state_at

if TYPE_CHECKING:
    from collections.abc import Iterator

    from threadlog.model.commands import Command
    from threadlog.model.envelope import Record
    from threadlog.model.memory import MemoryFact
    from threadlog.model.refs import ArtifactRef
    from threadlog.model.state import ThreadState
    from threadlog.store.embedded.artifacts import ArtifactStore
    from threadlog.store.embedded.checkpoint import Checkpoints
    from threadlog.store.embedded.credentials import CredentialFile
    from threadlog.store.embedded.index import IndexedThread
    from threadlog.store.embedded.indexer import Indexer
    from threadlog.store.embedded.layout import Layout
    from threadlog.store.embedded.mailbox import MailboxDir
    from threadlog.store.embedded.reader import Reader
    from threadlog.store.embedded.recovery import Recovery
    from threadlog.store.embedded.snapshots import SnapshotKeeper
    from threadlog.store.protocol import Credential, MailboxMessage, VerifyReport

__all__ = ["Queries"]


class Queries:
    """Reads, verification, snapshots loaded, repairs taken and the catalog (module
    docstring); the collaborators are `EmbeddedStore`'s."""

    artifacts: ArtifactStore
    _layout: Layout
    _reader: Reader
    _snapshots: SnapshotKeeper
    _checkpoints: Checkpoints
    _recovery: Recovery
    _indexer: Indexer
    _mailbox: MailboxDir
    _credentials: CredentialFile
    _closed: bool
    _closed_why: str

    # -- the mailbox (`threadlog.store.embedded.mailbox`): files beside the log, not records

    def post(self, thread_id: str, command: Command) -> str:
        """See `threadlog.store.protocol.Mailbox.post`."""
        return self._mailbox.post(thread_id, command)

    def pending(self, thread_id: str) -> list[MailboxMessage]:
        """See `threadlog.store.protocol.Mailbox.pending`."""
        return self._mailbox.pending(thread_id)

    def addressed(self) -> set[str]:
        """See `threadlog.store.protocol.MailboxIndex.addressed`."""
        return self._mailbox.addressed()

    def done(self, message: MailboxMessage) -> None:
        """See `threadlog.store.protocol.Mailbox.done`."""
        self._mailbox.done(message)

    # -- the service's tokens (`threadlog.store.embedded.credentials`): a file in the home

    def add_credential(self, credential: Credential) -> None:
        """See `threadlog.store.protocol.Credentials.add_credential`."""
        if self._closed:
            raise UsageError(self._closed_why)
        self._credentials.add(credential)

    def credentials(self) -> list[Credential]:
        """See `threadlog.store.protocol.Credentials.credentials`."""
        return self._credentials.read()

    def remove_credential(self, token_id: str) -> bool:
        """See `threadlog.store.protocol.Credentials.remove_credential`."""
        if self._closed:
            raise UsageError(self._closed_why)
        return self._credentials.remove(token_id)

    def path_of(self, thread_id: str) -> str:
        """The rollout file of a thread (which need not exist)."""
        return self._layout.path_of(thread_id)

    def exists(self, thread_id: str) -> bool:
        """Whether the thread has a rollout file (False for a malformed id)."""
        return self._layout.exists(thread_id)

    def thread_ids(self) -> list[str]:
        """Every thread with a rollout file, from the file system (`Layout.thread_ids`)."""
        return self._layout.thread_ids()

    def read(
        self,
        thread_id: str,
        after: int = 0,
        *,
        limit: int | None = None,
        before: int | None = None,
    ) -> list[Record]:
        """Durable records of a thread with ``after < ord < before``, verified, in order
        (`Reader.read`; ``limit`` as `Store.read`).

        A torn tail (an interrupted write) is not returned; damage raises `IntegrityError`.
        """
        return self._reader.read(thread_id, after, limit=limit, before=before)

    def follow(self, thread_id: str, after: int = 0, *, interval: float = 0.2) -> Iterator[Record]:
        """`Store.follow`: the durable records after ``after``, then each new one."""
        return self._reader.follow(thread_id, after, interval=interval)

    def iter_records(self, thread_id: str, after: int = 0) -> Iterator[Record]:
        """`read`, as an iterator."""
        yield from self.read(thread_id, after)

    def state(self, thread_id: str, *, history: bool = True) -> ThreadState:
        """The thread's state, reduced from its log; `IntegrityError` (with its ordinal) if
        the log holds an event the reducer refuses (written by an older threadlog).

        It starts from the store's checkpoint and reduces only the records after it, unless
        the checkpoint's state is trimmed (`threadlog.model.state.trim`: a thread with
        finished turns) and ``history`` asks for every past turn and call whole."""
        row = self._checkpoints.get(thread_id)
        if row is not None:
            base = state_at(row)  # the store's checkpoint, then the records after it
            if base is not None and not (history and base.trimmed):
                tail = self.read(thread_id, after=row.ord)
                if not tail or tail[0].prev == row.hash:
                    return replay_log(thread_id, tail, base)
        return replay_log(thread_id, self.read(thread_id))

    def durable_end(self, thread_id: str) -> int | None:
        """How far the thread's rollout is known durable while a live writer holds it; None
        when nobody writes it (`Reader.durable_end`)."""
        return self._reader.durable_end(thread_id)

    def verify(self, thread_id: str, *, check_events: bool = True) -> VerifyReport:
        """Check a thread's framing, hashes, chain and ordinals (and, by default, that every
        event is legal for the reducer), and that every blob a record references is there
        and matches its hash. Reports; never repairs."""
        return self._reader.verify(
            thread_id, check_events=check_events, check_artifact=self.artifacts.check
        )

    def missing_threads(self) -> list[str]:
        """Threads with acknowledged records whose rollout file is gone."""
        return self._reader.missing_threads()

    def resolve(self, data: Any) -> Any:
        """Record data as it was appended: every artifact reference (top level or one level
        down) loaded, and every escaped look-alike unwrapped (`threadlog.model.refs`)."""
        return resolve_refs(data, self._load_ref)

    def _load_ref(self, ref: ArtifactRef) -> Any:
        return codec.loads(self.artifacts.get(ref.sha256))

    # -- snapshots and repairs ------------------------------------------------------------

    def load_snapshot(self, thread_id: str, version: str) -> tuple[int, bytes] | None:
        """``(ord, payload)`` of the thread's snapshot, if it is of ``version`` and its anchor
        record is still in the rollout with the same hash."""
        return self._snapshots.load(thread_id, version, self._reader.durable_end)

    def take_repairs(self, thread_id: str) -> list[dict[str, Any]]:
        """What this store repaired in the thread's files since it opened (torn tails cut,
        records replayed from a crashed store's journal); cleared by the call."""
        return self._recovery.take_repairs(thread_id)

    # -- the catalog (`indexer`) ----------------------------------------------------------

    def catch_up(self) -> int:
        """Bring the index up to date with the rollouts; returns the records applied."""
        return self._indexer.catch_up()

    def threads(
        self,
        *,
        principal: str | None = None,
        limit: int | None = None,
        archived: bool | None = False,
        metadata: dict[str, Any] | None = None,
    ) -> list[IndexedThread]:
        """Threads from the index, most recently active first: not archived by default
        (`Catalog.threads`)."""
        return self._indexer.threads(
            principal=principal, limit=limit, archived=archived, metadata=metadata
        )

    def thread_info(self, thread_id: str) -> IndexedThread:
        """One thread's row from the index; raises `ThreadNotFound`."""
        return self._indexer.thread_info(thread_id)

    def memories(
        self, *, principal: str | None = None, include_revoked: bool = False
    ) -> list[dict[str, Any]]:
        """Remembered facts of every thread (from the index), oldest first."""
        return self._indexer.memories(principal=principal, include_revoked=include_revoked)

    def shared_memories(self, principal: str, project: str | None = None) -> list[MemoryFact]:
        """Live facts other threads of ``principal`` may be offered: its ``principal`` facts
        and, given ``project``, its ``project`` facts of that project; never another
        principal's (`threadlog.model.memory`)."""
        return self._indexer.shared_memories(principal, project)

    def turns(self, thread_id: str) -> list[dict[str, Any]]:
        """The thread's turns from the index, in order."""
        return self._indexer.turns(thread_id)

    def tool_calls(self, thread_id: str) -> list[dict[str, Any]]:
        """The thread's tool calls from the index, in order."""
        return self._indexer.tool_calls(thread_id)
