"""The SQLite index: projections of the rollouts (threads, turns, tool calls).

The index is never the only truth. It records, per thread, the last ordinal, hash and byte
offset it applied, in the same transaction as the rows it derived (RELIABILITY C2), so it can
be caught up from the rollouts exactly and idempotently, and rebuilt from them at any time.
It runs in WAL mode with ``synchronous=NORMAL``: a power loss may roll back its latest
transactions, never corrupt it, and catch-up redoes whatever was lost.

It holds every prompt of every thread, so it is created 0600 (SQLite gives its ``-wal`` and
``-shm`` files the database's mode); one left 0644 by an older version is restricted. An index
that is not a sound SQLite database (garbage, truncated, a page overwritten: ``PRAGMA
quick_check`` at open, a directory in its place) raises `DamagedIndex`, and the store sets it
aside and rebuilds it (`Index.open`, `Index.replace`: the same object then serves the new
file, so whoever holds the index never holds a closed one). Waiting for another process's
write lock is bounded by `BUSY_TIMEOUT` and then says who to wait for. The schema, the opening
checks and the row types are in `threadlog.store.embedded.schema`.
"""

from __future__ import annotations

import functools
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from threadlog.errors import StorageError
from threadlog.model import codec
from threadlog.model.projection import Projected, project_log
from threadlog.store.embedded.schema import (
    THREAD_COLUMNS,
    AckMark,
    DamagedIndex,
    IndexBatch,
    IndexedThread,
    IndexPosition,
    SnapshotRow,
    connect,
    translate,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from threadlog.model.envelope import Record

__all__ = ["BUSY_TIMEOUT", "DamagedIndex", "Index", "IndexedThread", "SnapshotRow"]

log = logging.getLogger("threadlog.store")

_F = TypeVar("_F", bound=Callable[..., Any])

BUSY_TIMEOUT = 5.0
"""Seconds to wait for another process's lock on the index before giving up with a
`StorageError` that says so (its writes are short; a rebuild of a large store is not)."""


def _translated(method: _F) -> _F:
    """The one boundary where SQLite errors become threadlog's: `StorageError`."""

    @functools.wraps(method)
    def wrapper(self: Index, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except sqlite3.Error as exc:
            raise translate(self.path, exc, self.timeout) from exc

    return wrapper  # type: ignore[return-value]


_THREAD_TABLES = ("threads", "turns", "tool_calls", "memories")


class Index:
    """One SQLite connection, shared by the store's threads under a lock."""

    def __init__(self, path: str, *, timeout: float | None = None) -> None:
        self.path = path
        self.timeout = BUSY_TIMEOUT if timeout is None else timeout
        self._lock = threading.RLock()
        self._db = connect(path, self.timeout)

    @classmethod
    def open(cls, path: str) -> Index:
        """Open the index; a damaged one (see `DamagedIndex`) is set aside and a new, empty
        one opened (it is only a projection). A locked or unwritable one is an error that
        says so."""
        try:
            return cls(path)
        except DamagedIndex as exc:
            aside = _set_aside(path, exc)
            index = cls(path)
            index._salvage(aside)
            return index

    def replace(self, exc: DamagedIndex) -> None:
        """Set this damaged index aside and go on with a new, empty one in its place."""
        with self._lock:
            self._db.close()
            aside = _set_aside(self.path, exc)
            self._db = connect(self.path, self.timeout)
        self._salvage(aside)

    def _salvage(self, aside: str) -> None:
        saved = self.salvage_acknowledged(aside)
        if saved:
            log.warning("kept the acknowledged marks of %d thread(s) from %s", saved, aside)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- reads -----------------------------------------------------------------------------

    @_translated
    def threads(
        self,
        *,
        principal: str | None = None,
        limit: int | None = None,
        archived: bool | None = False,
        metadata: dict[str, Any] | None = None,
    ) -> list[IndexedThread]:
        """Threads, most recently active first (archived ones, metadata: see
        `Catalog.threads`)."""
        sql = f"SELECT {', '.join(THREAD_COLUMNS)} FROM threads"
        where: list[str] = []
        args: list[Any] = []
        if principal is not None:
            where.append("principal = ?")
            args.append(principal)
        if archived is not None:
            where.append("status = 'archived'" if archived else "status != 'archived'")
        for key, value in (metadata or {}).items():
            where.append(
                "thread_id IN (SELECT thread_id FROM thread_meta WHERE key = ? AND value = ?)"
            )
            args.extend((key, codec.canonical(value).decode()))
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY last_ts DESC, thread_id DESC"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(limit)
        with self._lock:
            rows = self._db.execute(sql, args).fetchall()
        return [IndexedThread(*row) for row in rows]

    @_translated
    def thread(self, thread_id: str) -> IndexedThread | None:
        with self._lock:
            row = self._db.execute(
                f"SELECT {', '.join(THREAD_COLUMNS)} FROM threads WHERE thread_id = ?",
                (thread_id,),
            ).fetchone()
        return IndexedThread(*row) if row else None

    @_translated
    def positions(self) -> dict[str, IndexPosition]:
        """``thread_id → (bytes, last_ord, last_hash)`` for catch-up."""
        with self._lock:
            rows = self._db.execute("SELECT thread_id, bytes, last_ord, last_hash FROM threads")
            return {t: (b, o, h) for t, b, o, h in rows}

    @_translated
    def acknowledged(self, thread_id: str | None = None) -> dict[str, AckMark]:
        """``thread_id → (last_ord, last_hash, bytes)``: the furthest each thread was ever
        indexed, which only durable records reach. Unlike the projections, `clear`,
        `reset_thread` and `forget` keep it, so a rollout that lost records it once held
        (truncated, deleted, restored from an old copy) is caught, not re-indexed as if it
        had always been shorter (issue 9)."""
        with self._lock:
            if thread_id is None:
                rows = self._db.execute(
                    "SELECT thread_id, last_ord, last_hash, bytes FROM acknowledged"
                )
            else:
                rows = self._db.execute(
                    "SELECT thread_id, last_ord, last_hash, bytes FROM acknowledged "
                    "WHERE thread_id = ?",
                    (thread_id,),
                )
            return {t: (o, h, b) for t, o, h, b in rows}

    def salvage_acknowledged(self, damaged: str) -> int:
        """Copy the acknowledged marks that can still be read from a damaged index file set
        aside at ``damaged`` (they are not a projection: no rollout can give them back);
        how many. Whatever cannot be read is skipped."""
        from urllib.parse import quote  # (here: only a damaged index needs it)

        try:
            old = sqlite3.connect(f"file:{quote(damaged)}?mode=ro", uri=True)
        except sqlite3.Error:
            return 0
        try:
            rows = old.execute(
                "SELECT thread_id, last_ord, last_hash, bytes FROM acknowledged"
            ).fetchall()
        except sqlite3.Error:
            return 0
        finally:
            old.close()
        count = 0
        with self._lock:
            for thread_id, last_ord, last_hash, size in rows:
                if isinstance(thread_id, str) and type(last_ord) is int and type(size) is int:
                    self._db.execute(
                        "INSERT INTO acknowledged (thread_id, last_ord, last_hash, bytes) "
                        "VALUES (?, ?, ?, ?) ON CONFLICT (thread_id) DO UPDATE SET "
                        "last_ord = excluded.last_ord, last_hash = excluded.last_hash, "
                        "bytes = excluded.bytes WHERE excluded.last_ord > acknowledged.last_ord",
                        (
                            thread_id,
                            last_ord,
                            last_hash if isinstance(last_hash, str) else None,
                            size,
                        ),
                    )
                    count += 1
        return count

    @_translated
    def turns(self, thread_id: str) -> list[dict[str, Any]]:
        with self._lock:
            cur = self._db.execute(
                "SELECT turn_id, status, started_ord, ended_ord, started_at, ended_at, input "
                "FROM turns WHERE thread_id = ? ORDER BY started_ord",
                (thread_id,),
            )
            names = [d[0] for d in cur.description]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    @_translated
    def tool_calls(self, thread_id: str) -> list[dict[str, Any]]:
        with self._lock:
            cur = self._db.execute(
                "SELECT call_id, turn_id, tool, side_effect, status, proposed_ord, last_ord "
                "FROM tool_calls WHERE thread_id = ? ORDER BY proposed_ord",
                (thread_id,),
            )
            names = [d[0] for d in cur.description]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    @_translated
    def dump(self) -> dict[str, list[tuple[Any, ...]]]:
        """Every projection row, sorted (to compare an incremental index with a rebuild)."""
        with self._lock:
            return {
                table: sorted(self._db.execute(f"SELECT * FROM {table}").fetchall())
                for table in ("threads", "turns", "tool_calls", "memories")
            }

    # -- writes ----------------------------------------------------------------------------

    @_translated
    def apply(
        self,
        batches: Iterable[IndexBatch],
        *,
        acknowledged: bool = True,
    ) -> None:
        """Apply ``(thread_id, path, records, end_offset)`` batches in one transaction.

        Records at or below a thread's applied ordinal are skipped, so re-applying is harmless.
        ``acknowledged``: the records are known durable (a writer's commits, a fork written
        whole), so they raise the threads' `acknowledged` marks; records a catch-up found in
        a file (perhaps in the page cache only, left by a killed writer) do not.
        """
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                for thread_id, path, records, end in batches:
                    self._apply_one(thread_id, path, records, end, acknowledged)
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise

    @_translated
    def memories(
        self, *, principal: str | None = None, include_revoked: bool = False
    ) -> list[dict[str, Any]]:
        """Remembered facts, oldest first, with their thread and its principal."""
        sql = (
            "SELECT m.memory_id, m.thread_id, t.principal, m.fact, m.scope, m.key, m.source_event, "
            "m.written_at, m.expires_at, m.project, m.revoked "
            "FROM memories m JOIN threads t USING (thread_id)"
        )
        where, args = [], []
        if principal is not None:
            where.append("t.principal = ?")
            args.append(principal)
        if not include_revoked:
            where.append("m.revoked = 0")
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY m.written_at, m.memory_id"
        with self._lock:
            cur = self._db.execute(sql, args)
            names = [d[0] for d in cur.description]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    @_translated
    def put_snapshot(
        self, thread_id: str, ord: int, hash: str, end_offset: int, version: str, payload: bytes
    ) -> None:
        with self._lock:
            self._db.execute(
                "INSERT INTO snapshots (thread_id, ord, hash, end_offset, version, payload) "
                "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (thread_id) DO UPDATE SET ord = excluded.ord, "
                "hash = excluded.hash, end_offset = excluded.end_offset, "
                "version = excluded.version, payload = excluded.payload",
                (thread_id, ord, hash, end_offset, version, payload),
            )

    @_translated
    def run(self, sql: str, args: Sequence[Any] = (), *, many: bool = False) -> list[Any]:
        """One statement on the store's side tables (`threadlog.store.embedded.checkpoint`)."""
        with self._lock:
            if many:
                self._db.executemany(sql, args)
                return []
            return self._db.execute(sql, args).fetchall()

    @_translated
    def get_snapshot(
        self, thread_id: str, *, payload: bool | Literal["line"] = True
    ) -> SnapshotRow | None:
        """The thread's snapshot, if any; without ``payload``, its anchor only (the payload
        is then ``b""``: a long thread's snapshot is megabytes, its anchor a few bytes);
        with ``payload="line"``, its payload's first line only (without the newline), read
        from the blob a chunk at a time.

        The payload is read through a blob handle, not selected: a selected blob is
        gathered from its overflow pages into a buffer that the driver then copies, where
        one ``read`` of the handle fills the result directly (a million-record thread's
        20 MB snapshot in about half the time)."""
        with self._lock:
            row = self._db.execute(
                "SELECT ord, hash, end_offset, version, rowid FROM snapshots WHERE thread_id = ?",
                (thread_id,),
            ).fetchone()
            if row is None:
                return None
            data = b""
            if payload == "line":
                data = self._first_line(row[4])
            elif payload:
                with self._db.blobopen("snapshots", "payload", row[4], readonly=True) as blob:
                    data = blob.read()
        return SnapshotRow(row[0], row[1], row[2], row[3], data)

    def _first_line(self, rowid: int) -> bytes:
        """A snapshot payload's first line (lock held)."""
        head = bytearray()
        with self._db.blobopen("snapshots", "payload", rowid, readonly=True) as blob:
            while True:
                chunk = blob.read(1 << 16)
                cut = chunk.find(b"\n")
                if cut >= 0 or not chunk:
                    head += chunk if cut < 0 else chunk[:cut]
                    return bytes(head)
                head += chunk

    @_translated
    def reset_thread(self, thread_id: str, *, damage: str | None = None) -> None:
        """Forget a thread's rows (before re-indexing it from ord 1)."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for table in (*_THREAD_TABLES, "snapshots", "checkpoints", "sparse_offsets"):
                    self._db.execute(f"DELETE FROM {table} WHERE thread_id = ?", (thread_id,))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    @_translated
    def damage_of(self, thread_id: str) -> str | None:
        """The damage recorded for the thread (`mark_damaged`), if any."""
        with self._lock:
            row = self._db.execute(
                "SELECT damage FROM threads WHERE thread_id = ?", (thread_id,)
            ).fetchone()
        return None if row is None else row[0]

    @_translated
    def mark_damaged(self, thread_id: str, path: str, damage: str) -> None:
        with self._lock:
            self._db.execute(
                "INSERT INTO threads (thread_id, path, damage) VALUES (?, ?, ?) "
                "ON CONFLICT (thread_id) DO UPDATE SET damage = excluded.damage",
                (thread_id, path, damage),
            )

    @_translated
    def forget(self, thread_ids: Iterable[str]) -> None:
        with self._lock:
            for thread_id in thread_ids:
                for table in ("threads", "turns", "tool_calls", "memories", "thread_meta"):
                    self._db.execute(f"DELETE FROM {table} WHERE thread_id = ?", (thread_id,))

    @_translated
    def drop(self, thread_id: str) -> None:
        """Forget a deleted thread entirely: its rows, acknowledged mark and snapshot."""
        with self._lock:
            for table in (
                "threads",
                "turns",
                "tool_calls",
                "memories",
                "acknowledged",
                "snapshots",
                "thread_meta",
                "checkpoints",
                "sparse_offsets",
            ):
                self._db.execute(f"DELETE FROM {table} WHERE thread_id = ?", (thread_id,))

    @_translated
    def clear(self) -> None:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            for table in ("threads", "turns", "tool_calls", "memories", "thread_meta"):
                self._db.execute(f"DELETE FROM {table}")
            self._db.execute("COMMIT")

    def _apply_one(
        self,
        thread_id: str,
        path: str,
        records: Sequence[Record] | Projected,
        end: int,
        acknowledged: bool,
    ) -> None:
        """Apply one batch: records, or a whole new log's `Projected` (built where the log
        was, `threadlog.store.embedded.transfer.NewThreads`)."""
        db = self._db
        row = db.execute(
            "SELECT last_ord FROM threads WHERE thread_id = ?", (thread_id,)
        ).fetchone()
        if row is None:
            db.execute("INSERT INTO threads (thread_id, path) VALUES (?, ?)", (thread_id, path))
            applied = 0
        else:
            applied = row[0]
        if isinstance(records, Projected):
            projected = records
            if acknowledged:
                self._acknowledge(thread_id, *projected.last[:2], end)
            if projected.last[0] <= applied:
                return  # indexed already (a catch-up met its file)
            if projected.first <= applied:
                log.warning(  # its file was indexed in part: the next catch-up completes it
                    "index: thread %s is indexed to ord %d, not from ord %d",
                    thread_id,
                    applied,
                    projected.first,
                )
                return
        else:
            if acknowledged and records:
                self._acknowledge(thread_id, records[-1].ord, records[-1].hash, end)
            fresh = [r for r in records if r.ord > applied]
            if not fresh:
                return
            projected = project_log(fresh)
        if projected.first != applied + 1:
            raise StorageError(
                f"index: thread {thread_id} jumps from ord {applied} to {projected.first}"
            )
        if projected.thread:
            self._set_thread(thread_id, projected.thread)
        for key, value in projected.meta.items():
            db.execute(
                "INSERT OR REPLACE INTO thread_meta (thread_id, key, value) VALUES (?, ?, ?)",
                (thread_id, key, codec.canonical(value).decode()),
            )
        for memory_id, fields in projected.memories:
            self._upsert("memories", ("thread_id", "memory_id"), (thread_id, memory_id), fields)
        # rows with the same columns (a new thread's turns, its calls) in one statement each
        same: dict[tuple[str, tuple[str, ...]], list[tuple[Any, ...]]] = {}
        for (table, key), fields in projected.rows.items():
            same.setdefault((table, tuple(fields)), []).append((thread_id, key, *fields.values()))
        for (table, names), values in same.items():
            name = "turn_id" if table == "turns" else "call_id"
            db.executemany(_upsert_sql(table, ("thread_id", name), names), values)
        last_ord, last_hash, last_ts = projected.last
        db.execute(
            "UPDATE threads SET last_ord = ?, last_hash = ?, last_ts = ?, bytes = ?, "
            "turns = turns + ?, tool_calls = tool_calls + ?, path = ? WHERE thread_id = ?",
            (last_ord, last_hash, last_ts, end, projected.turns, projected.calls, path, thread_id),
        )

    def _acknowledge(self, thread_id: str, last_ord: int, last_hash: str, end: int) -> None:
        self._db.execute(
            "INSERT INTO acknowledged (thread_id, last_ord, last_hash, bytes) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (thread_id) DO UPDATE SET last_ord = excluded.last_ord, "
            "last_hash = excluded.last_hash, bytes = excluded.bytes "
            "WHERE excluded.last_ord > acknowledged.last_ord",
            (thread_id, last_ord, last_hash, end),
        )

    def _set_thread(self, thread_id: str, fields: dict[str, Any]) -> None:
        fields = dict(fields)
        title_if_empty = fields.pop("title_if_empty", None)
        if fields:
            sets = ", ".join(f"{name} = ?" for name in fields)
            self._db.execute(
                f"UPDATE threads SET {sets} WHERE thread_id = ?", (*fields.values(), thread_id)
            )
        if title_if_empty:
            self._db.execute(
                "UPDATE threads SET title = ? WHERE thread_id = ? AND title IS NULL",
                (title_if_empty, thread_id),
            )

    def _upsert(
        self, table: str, keys: tuple[str, str], key_values: tuple[str, str], fields: dict[str, Any]
    ) -> None:
        self._db.execute(_upsert_sql(table, keys, tuple(fields)), (*key_values, *fields.values()))


@functools.lru_cache(maxsize=64)
def _upsert_sql(table: str, keys: tuple[str, str], names: tuple[str, ...]) -> str:
    """The upsert of a ``table`` row keyed by ``keys``, setting columns ``names``."""
    columns = (*keys, *names)
    placeholders = ", ".join("?" for _ in columns)
    updates = ", ".join(f"{name} = excluded.{name}" for name in names)
    return (
        f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({placeholders}) "
        f"ON CONFLICT ({', '.join(keys)}) DO UPDATE SET {updates}"
    )


def _set_aside(path: str, exc: DamagedIndex) -> str:
    """Move a damaged index (and its -wal/-shm) aside; where it went."""
    aside = f"{path}.damaged-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
    log.warning("%s; moved it to %s and rebuilding it", exc, aside)
    for suffix in ("", "-wal", "-shm"):
        try:
            os.replace(path + suffix, aside + suffix)
        except FileNotFoundError:
            pass
        except OSError as err:
            raise StorageError(
                f"{exc}, and it cannot be moved aside ({err}); move {path}{suffix} away and retry"
            ) from err
    return aside
