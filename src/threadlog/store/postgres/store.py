"""`PostgresStore`: the facade that wires the PostgreSQL backend's parts and owns its lifecycle.

It opens a connection pool (psycopg 3's `ConnectionPool`) for reads and short statements,
checks the schema (`schema.check_schema`), and starts the group committer (`committer`) with
a connection of its own; the lease renewer (`leases`) and the LISTEN thread (`notify`) start
on first need. It holds the append path (normalise, encode, offload large values, find or
open the thread's `Writer`, submit, wait for the commit) and the leases' side of it.
Listeners, ``follow`` and ``watch`` are in `live`; reading, verify, fork and moving threads in
and out in `logs`; the catalog, snapshots, mailbox and credentials in `catalog`; blobs in
`blobs`.

After `close` the pool is closed; reads still work, each on a connection of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
import time
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg_pool import ConnectionPool

from threadlog import _hooks
from threadlog._clock import new_id, random_bits, rfc3339, wall_ns
from threadlog.errors import StorageError, UsageError
from threadlog.model import codec, snapshot
from threadlog.model.ids import is_uuid
from threadlog.model.legality import reduce_log, replay_log
from threadlog.model.policy import durability_of
from threadlog.model.refs import resolve as resolve_refs
from threadlog.store.named import check_thread_id, same_creation
from threadlog.store.offload import encode_data, summary_of
from threadlog.store.postgres.blobs import Blobs
from threadlog.store.postgres.catalog import Tables
from threadlog.store.postgres.committer import LANES, Committer
from threadlog.store.postgres.leases import LeaseKeeper
from threadlog.store.postgres.live import Live
from threadlog.store.postgres.logs import Logs, new_row
from threadlog.store.postgres.projections import insert_records
from threadlog.store.postgres.retention import Retentions
from threadlog.store.postgres.schema import check_schema, parse_url
from threadlog.store.postgres.transfer import Transfers
from threadlog.store.postgres.writer import Pending, Writer, decode_line
from threadlog.store.validate import (
    normalize_append,
    thread_created_data,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from types import EllipsisType, TracebackType

    from threadlog.errors import LeaseLost
    from threadlog.model.envelope import Record
    from threadlog.model.events import Event
    from threadlog.model.refs import ArtifactRef
    from threadlog.model.state import ThreadState

__all__ = ["PostgresStore"]

log = logging.getLogger("threadlog.store")

CHECKPOINT_FROM = 2_000
"""A writer that leaves a thread of at least this many records keeps its checkpoint (fewer
cost less to reduce than to store)."""

_OPENING = 64
"""Stripes of the writers' opening locks (a thread's is ``hash(thread_id) % _OPENING``)."""


class PostgresStore(Live, Logs, Tables, Blobs, Transfers, Retentions):
    """An event store in a PostgreSQL database. Thread-safe; use as a context manager.

    Args:
        url: ``postgresql://user@host:port/db`` (any libpq URL); ``?schema=NAME`` puts the
            tables in that schema (default ``public``).
        schema: the schema, if not in the URL.
        commit_interval: how long a buffered append may wait for its group commit (s).
        lease_duration: how long a thread's lease lasts unrenewed (s, the database's clock).
        renew_interval: how often held leases are renewed (default: a third of the duration).
        artifact_threshold: event data (or a top-level value) larger than this many bytes of
            canonical JSON is kept as an artifact, the record holding a reference.
        pool_size: the most pooled connections (reads, leases, blobs).
        create_schema: migrate a database that has no threadlog tables yet (an older schema is
            always refused: run ``threadlog db upgrade``).
        max_batch: at most this many appends per commit (default: all that are waiting);
            ``1`` turns group commit off, one COMMIT per append (a benchmark's baseline).
        commit_lanes: how many group commits may be in flight at once, each on a connection
            of its own (`threadlog.store.postgres.committer`).
    """

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        commit_interval: float = 0.1,
        lease_duration: float = 30.0,
        renew_interval: float | None = None,
        artifact_threshold: int = 64 * 1024,
        pool_size: int = 8,
        create_schema: bool = True,
        max_batch: int | None = None,
        commit_lanes: int = LANES,
    ) -> None:
        if lease_duration <= 0 or commit_interval < 0:
            raise UsageError("lease_duration must be > 0 and commit_interval >= 0")
        self._target = target = parse_url(url, schema)
        self.artifact_threshold = artifact_threshold
        self.lease_duration = lease_duration
        self._origin = f"{socket.gethostname()}:{os.getpid()}:{random_bits(48):012x}"
        self._checkpoint_from = CHECKPOINT_FROM
        """An adopted thread of this many records or more is kept with a checkpoint."""
        """This store's id: the holder of its leases, the origin of its notifications."""
        self._closed = False
        Live.__init__(self)
        self._writers: dict[str, Writer] = {}
        self._writers_lock = threading.Lock()
        self._opening = [threading.Lock() for _ in range(_OPENING)]
        self._kwargs: dict[str, Any] = {"autocommit": True, "options": target.connect_options()}
        self._pool = ConnectionPool(
            target.conninfo,
            kwargs=self._kwargs,
            min_size=1,
            max_size=max(1, pool_size),
            open=False,
            name="threadlog",
        )
        try:
            with psycopg.connect(target.conninfo, connect_timeout=10, **self._kwargs) as conn:
                _check_durable(conn)
                check_schema(conn, target.schema, create=create_schema)
        except psycopg.Error as exc:
            raise StorageError(f"cannot open the store at {target!r}: {exc}") from exc
        self._pool.open(wait=False)
        idle_ms = max(1000, int(lease_duration * 500))
        committer_options = target.connect_options(
            f"-c idle_in_transaction_session_timeout={idle_ms}"
        )
        self._committer = Committer(
            lambda: psycopg.connect(target.conninfo, autocommit=True, options=committer_options),
            channel=target.channel,
            origin=self._origin,
            interval=commit_interval,
            on_durable=self._on_durable,
            on_failure=self._on_failure,
            max_batch=max_batch,
            lanes=commit_lanes,
        )
        self._leases = LeaseKeeper(
            self._conn,
            self._origin,
            duration=lease_duration,
            renew_interval=renew_interval or lease_duration / 3,
            on_lost=self._on_lost,
            presence=lambda: psycopg.connect(target.conninfo, **self._kwargs),
        )

    # -- lifecycle -------------------------------------------------------------------------

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return repr(self._target)

    @property
    def url(self) -> str:
        """The URL the store was opened with."""
        return self._target.url

    @property
    def holder(self) -> str:
        """This store's id: the holder of its leases, the origin of its notifications."""
        return self._origin

    @property
    def commits(self) -> int:
        """Group-commit transactions so far (each one COMMIT for one or more appends)."""
        return self._committer.commits

    def close(self) -> None:
        """Commit what is queued, release every lease, stop the threads, close the pool.
        Idempotent; reads still work after it."""
        if self._closed:
            return
        self._closed = True
        try:
            self._committer.stop()
            with self._writers_lock:
                writers = list(self._writers.values())
            for writer in writers:
                self._checkpoint(writer)  # (everything queued is committed now)
            self._leases.release_all()
        finally:
            self._stop_notifier()
            self._pool.close()

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError("the store is closed")

    @contextlib.contextmanager
    def _conn(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection: the pool's, or after `close` a fresh one of its own."""
        try:
            if not self._closed:
                with self._pool.connection() as conn:
                    yield conn
                return
            with psycopg.connect(self._target.conninfo, **self._kwargs) as conn:
                yield conn
        except psycopg.Error as exc:
            raise StorageError(f"{self._target!r}: {exc}") from exc

    def flush(self) -> None:
        """Wait until every queued append is committed (and its listeners called)."""
        self._committer.flush()

    # -- writing ---------------------------------------------------------------------------

    def create_thread(
        self,
        principal: str = "local",
        *,
        title: str | None = None,
        lineage: dict[str, Any] | None = None,
        thread_id: str | None = None,
        **config: Any,
    ) -> str:
        """A new thread whose ord 1 (``thread.created``) is committed on return; its id.

        ``thread_id``: a caller-chosen UUIDv7 (`threadlog.store.named`): the thread is
        created once; asked again with the same settings it is returned as it is, with other
        settings (or when it was deleted) `ThreadExists`. The ``threads`` row decides a race
        between two creators (``ON CONFLICT DO NOTHING``, which waits for the other's
        transaction): the loser compares settings with the winner's ``thread.created``. The
        deleted check is made in the same transaction, after that insert, so that a delete
        committing meanwhile cannot let its id be handed out again."""
        self._check_open()
        data = thread_created_data(principal, title, lineage, config)
        now = wall_ns()
        named = thread_id is not None
        if thread_id is None:
            thread_id = new_id(now)
        else:
            check_thread_id(thread_id, deleted=False)  # its form; deleted: in the transaction
        row = new_row(thread_id, 1, None, rfc3339(now), "thread.created", data, None, new_id(now))
        with self._conn() as conn, conn.transaction(), conn.cursor() as cur:
            cur.execute(
                "INSERT INTO threads (thread_id) VALUES (%s) ON CONFLICT DO NOTHING", (thread_id,)
            )
            if cur.rowcount == 0:
                if not named:
                    raise StorageError(f"a new thread id {thread_id} is taken already")
                held = conn.execute(
                    "SELECT line FROM events WHERE thread_id = %s AND ord = 1", (thread_id,)
                ).fetchone()
                stored = decode_line(thread_id, 1, held[0]).data if held else None
                return same_creation(thread_id, stored, data)
            if named:
                # after the insert, which waits for a delete of the same id in flight: a
                # deleted id is refused (ThreadExists, the transaction rolled back), never reused
                gone = conn.execute(
                    "SELECT 1 FROM deleted_threads WHERE thread_id = %s", (thread_id,)
                ).fetchone()
                check_thread_id(thread_id, deleted=gone is not None)
            insert_records(
                cur, {thread_id: [row]}, channel=self._target.channel, origin=self._origin
            )
        self._on_durable(thread_id, [row[0]])
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
        """Append one event; returns its record once committed (``durable``: None takes the
        type's class; False returns once queued, committed within ``commit_interval``).
        Raises as `Store.append` says, and `LeaseHeld` (another writer holds the thread),
        `LeaseLost` (this store's lease passed to another: the database refused it)."""
        metrics = _hooks.METRICS
        start = time.perf_counter() if metrics is not None else 0.0
        pending, record = self._submit(
            thread_id, type, data, durable, id, parent, expect_ord, check
        )
        if pending is not None:
            record = pending.wait()
        if metrics is not None:
            metrics.observe("threadlog_append_seconds", time.perf_counter() - start)
        return record

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
        """`append` for asyncio: the commit is awaited, never blocking the event loop
        (concurrent ``aappend`` calls share commits). The first append to a thread reads its
        state (and takes its lease) in a worker thread; later ones queue at once, on the loop
        (so that ``check`` runs in the caller's thread, as with `append`)."""
        writer = self._writers.get(thread_id)
        if (writer is None or not writer.prepared) and not self._closed and is_uuid(thread_id):
            await asyncio.to_thread(self._prepare, thread_id)
            writer = self._writers.get(thread_id)
        named = parent if parent.__class__ is str else None
        if writer is not None and (id is not None or named is not None):
            if writer.needs_lookup(id, named):  # (an indexed query each, off the loop)
                await asyncio.to_thread(_look_up, writer, id, named)
        metrics = _hooks.METRICS
        start = time.perf_counter() if metrics is not None else 0.0
        pending, record = self._submit(
            thread_id,
            type,
            data,
            durable,
            id,
            parent,
            expect_ord,
            check,
            waiter := asyncio.get_running_loop().create_future(),
        )
        if pending is not None:
            if pending.waiter is waiter:  # its own append, not another's replayed
                record = await pending.own_wait()
            else:
                record = await pending.wait_async()
        if metrics is not None:
            metrics.observe("threadlog_append_seconds", time.perf_counter() - start)
        return record

    def _submit(
        self,
        thread_id: str,
        type_: str | Event,
        data: Any,
        durable: bool | None,
        id: str | None,
        parent: str | None | EllipsisType,
        expect_ord: int | None,
        check: Callable[[Record], object] | None,
        waiter: asyncio.Future[None] | None = None,
    ) -> tuple[Pending | None, Record]:
        """Queue the append; ``(what to wait for, or None, its record)``. A critical
        append queued here gets ``waiter`` (an asyncio caller's future, `Pending.own_wait`)."""
        self._check_open()
        type_name, data = normalize_append(type_, data, id, parent)
        if not is_uuid(thread_id):
            raise UsageError(f"not a thread id: {thread_id!r:.80}")
        if durable is None:
            durable = durability_of(type_name) == "critical"
        data, data_json = encode_data(type_name, data, self.artifact_threshold, self._offload)
        data = codec.loads(data_json)  # what a later read returns, and no alias of the caller's
        now = wall_ns()
        while True:
            writer = self._writer(thread_id)
            with writer.lock:
                if self._writers.get(thread_id) is not writer:
                    continue  # replaced or released meanwhile
                pending, record = writer.submit(
                    type_name,
                    data,
                    data_json,
                    id=id,
                    new_id=new_id(now),
                    ts=rfc3339(now),
                    parent=parent,
                    expect_ord=expect_ord,
                    check=check,
                )
                if pending is not None:
                    if durable:
                        pending.waiter = waiter
                    self._committer.submit(pending, urgent=durable)
                    return (pending if durable else None), record
                replayed = writer.pending_of(record.id)
            return replayed, record

    def _prepare(self, thread_id: str) -> None:
        """Open the thread's writer and read its state, ahead of an `aappend`."""
        try:
            self._writer(thread_id).prepare()
        except Exception:  # the append itself raises it, in its own words
            pass

    def _offload(self, value: Any, value_json: bytes) -> ArtifactRef:
        return self.put_artifact(
            value_json, media_type="application/json", summary=summary_of(value, value_json)
        )

    def _writer(self, thread_id: str) -> Writer:
        """The thread's writer, opened (its lease taken) if need be.

        Opening one takes database round trips (the lease, the head), made under the
        thread's opening lock (one of `_OPENING` stripes), not the store-wide writers lock:
        64 threads opened at once open side by side, not one after another."""
        writer = self._writers.get(thread_id)
        if writer is not None and writer.lost is None and writer.broken is None:
            return writer
        with self._opening[hash(thread_id) % _OPENING]:
            with self._writers_lock:
                writer = self._writers.get(thread_id)
                if writer is not None:
                    if writer.lost is not None:
                        raise writer.lost
                    if writer.broken is None:
                        return writer
                    token = writer.token  # a failed commit: read the head again, same lease
                else:
                    self._check_open()
                    token = None
            if token is None:
                token = self._leases.take(thread_id)
            try:
                writer = Writer(thread_id, token, self._conn, lambda: self._load_state(thread_id))
            except BaseException:
                with self._writers_lock:
                    self._writers.pop(thread_id, None)
                self._leases.release(thread_id)
                raise
            with self._writers_lock:
                self._writers[thread_id] = writer
            return writer

    def _load_state(self, thread_id: str) -> ThreadState | None:
        """The writer's admission state: the later of the runtime's snapshot and the store's
        checkpoint, and the records after it (`_base`), else the whole log reduced."""
        base = self._base(thread_id, history=False, snapshots=True)
        if base is not None:
            return reduce_log(thread_id, base[1], base[0])
        return reduce_log(thread_id, self.read(thread_id))

    def _base(
        self, thread_id: str, *, history: bool, snapshots: bool = False
    ) -> tuple[ThreadState, list[Record]] | None:
        """Where reducing the thread may start, and the records after it; None if nowhere
        (the caller reduces the whole log). The store's checkpoint (`_checkpoint`: a trimmed
        state, so not when ``history`` wants the whole state), and with ``snapshots`` the
        runtime's snapshot too (the state's line of it only, not its context), the later of
        the two: a writer's admission check may start from either, but a snapshot's state
        holds large values loaded where a replay of the log holds their references, so
        `state` does not answer from one. Each is anchored on a record the log holds with
        that hash."""
        query = (
            "SELECT c.ord, c.hash, c.state FROM checkpoints c JOIN events e "
            "ON e.thread_id = c.thread_id AND e.ord = c.ord AND e.hash = c.hash "
            "WHERE c.thread_id = %s AND c.version = %s"
        )
        params: tuple[Any, ...] = (thread_id, snapshot.SNAPSHOT_VERSION)
        if snapshots:
            query += (
                " UNION ALL SELECT s.ord, s.hash, "
                "substring(s.payload FOR position('\\x0a'::bytea IN s.payload)) "
                "FROM snapshots s JOIN events e "
                "ON e.thread_id = s.thread_id AND e.ord = s.ord AND e.hash = s.hash "
                "WHERE s.thread_id = %s AND s.version = %s"
            )
            params += (thread_id, snapshot.SNAPSHOT_VERSION)
        try:
            with self._conn() as conn:
                rows = conn.execute(query, params).fetchall()
        except psycopg.Error as exc:
            log.warning("thread %s: no checkpoint read (%s); reducing the log", thread_id, exc)
            return None
        states = []
        for ord_, digest, payload in rows:
            state = snapshot.load_state(bytes(payload))
            if (
                state is None
                or (state.last_ord, state.last_hash) != (ord_, digest)
                or state.thread_id != thread_id
                or (history and state.trimmed)
            ):
                continue
            states.append(state)
        if not states:
            return None
        state = max(states, key=lambda s: s.last_ord)
        tail = self.read(thread_id, after=state.last_ord)
        if tail and tail[0].prev != state.last_hash:
            return None
        return state, tail

    def _checkpoint(self, writer: Writer) -> None:
        """Keep the writer's state as the thread's checkpoint, trimmed (what its next writer
        starts from), once everything it admitted is committed; never raises (a checkpoint
        not kept costs a longer open). Threads under `CHECKPOINT_FROM` records get none."""
        with writer.lock:
            state = writer.admission.peek()
            if (
                state is None
                or writer.refusal() is not None
                or state.last_ord < CHECKPOINT_FROM
                or state.last_ord != writer.next_ord - 1
                or state.last_hash != writer.last_hash
            ):
                return
            payload = snapshot.dump_trimmed(state)
        self._keep_checkpoint(writer.thread_id, state.last_ord, state.last_hash, payload)

    def _keep_checkpoint(self, thread_id: str, ord_: int, digest: str, payload: bytes) -> None:
        """Keep ``payload`` (a trimmed state, dumped) as the thread's checkpoint after record
        ``ord_``, if that record has ``digest`` and no later checkpoint is kept; never
        raises."""
        try:
            with self._conn() as conn:
                conn.execute(
                    "INSERT INTO checkpoints (thread_id, ord, hash, version, state) "
                    "SELECT %s, %s, %s, %s, %s WHERE EXISTS (SELECT 1 FROM events "
                    "WHERE thread_id = %s AND ord = %s AND hash = %s) "
                    "ON CONFLICT (thread_id) DO UPDATE SET ord = EXCLUDED.ord, "
                    "hash = EXCLUDED.hash, version = EXCLUDED.version, state = EXCLUDED.state "
                    "WHERE checkpoints.ord <= EXCLUDED.ord",
                    (
                        thread_id,
                        ord_,
                        digest,
                        snapshot.SNAPSHOT_VERSION,
                        payload,
                        thread_id,
                        ord_,
                        digest,
                    ),
                )
        except psycopg.Error as exc:
            log.warning("thread %s: no checkpoint kept (%s)", thread_id, exc)

    def _on_lost(self, thread_id: str, holder: str | None) -> None:
        from threadlog.errors import LeaseLost

        with self._writers_lock:
            writer = self._writers.get(thread_id)
        if writer is not None:
            writer.lose(LeaseLost(thread_id, writer.token, holder))

    def acquire(self, thread_id: str) -> None:
        """Take the thread's lease now (`LeaseHeld` if another live writer has it)."""
        self._check_open()
        if not is_uuid(thread_id):
            raise UsageError(f"not a thread id: {thread_id!r:.80}")
        self._writer(thread_id)

    def release(self, thread_id: str) -> None:
        """Commit the thread's queued appends and give its lease up (acknowledging a lost
        one: the next append takes the lease again, from the log as it is)."""
        self.flush()
        with self._writers_lock:
            writer = self._writers.pop(thread_id, None)
        if writer is None:
            return
        self._checkpoint(writer)
        if writer.lost is not None:
            self._leases.forget(thread_id)
        elif not self._closed:
            self._leases.release(thread_id)

    def lost(self, thread_id: str) -> LeaseLost | None:
        """Why this store may no longer write the thread (its lease passed on), if so."""
        writer = self._writers.get(thread_id)
        return writer.lost if writer is not None else None

    def renew_leases(self) -> None:
        """Renew every held lease now (the background thread does it every interval)."""
        self._leases.renew()

    def take_repairs(self, thread_id: str) -> list[dict[str, Any]]:
        """Always empty: a committed transaction is never torn."""
        return []

    # -- reading ---------------------------------------------------------------------------

    def state(self, thread_id: str, *, history: bool = True) -> ThreadState:
        """The thread's state, reduced from its log: from the store's checkpoint when it
        holds the whole state, or with ``history=False`` when it is trimmed, and the records
        after it (`_base`); else from its start."""
        base = self._base(thread_id, history=history)
        if base is not None:
            return replay_log(thread_id, base[1], base[0])
        return replay_log(thread_id, self.read(thread_id))

    def resolve(self, data: Any) -> Any:
        """Record data as it was appended: artifact references loaded, escapes unwrapped."""
        return resolve_refs(data, lambda ref: codec.loads(self.get_artifact(ref.sha256)))


def _check_durable(conn: psycopg.Connection[Any]) -> None:
    """Refuse a session whose COMMIT does not wait for the WAL to be flushed (``fsync`` or
    ``synchronous_commit`` off): an acknowledged record must survive a crash of the server."""
    settings = {
        name: str(conn.execute(f"SHOW {name}").fetchone()[0])  # type: ignore[index]
        for name in ("fsync", "synchronous_commit")
    }
    if settings["fsync"] == "off" or settings["synchronous_commit"] == "off":
        raise StorageError(
            f"the server runs with fsync={settings['fsync']}, synchronous_commit="
            f"{settings['synchronous_commit']}: a COMMIT would not be durable, so threadlog "
            "refuses it (turn both on)"
        )


def _look_up(writer: Writer, *ids: str | None) -> None:
    """`Writer.look_up` ahead of an `aappend`; a failure is left to the append itself, which
    raises it in its own words."""
    try:
        writer.look_up(*ids)
    except Exception:
        pass
