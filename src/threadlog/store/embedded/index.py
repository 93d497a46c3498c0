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
aside and rebuilds it. Waiting for another process's write lock is bounded by `BUSY_TIMEOUT`
and then says who to wait for.
"""

from __future__ import annotations

import errno
import functools
import os
import sqlite3
import threading
import urllib.parse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from threadlog.errors import StorageError
from threadlog.model.projection import project
from threadlog.store._perms import check_fd, restrict_file

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from threadlog.model.envelope import Record

__all__ = ["BUSY_TIMEOUT", "DamagedIndex", "Index", "IndexedThread"]

_F = TypeVar("_F", bound=Callable[..., Any])

SCHEMA_VERSION = 2

BUSY_TIMEOUT = 5.0
"""Seconds to wait for another process's lock on the index before giving up with a
`StorageError` that says so (its writes are short; a rebuild of a large store is not)."""


class DamagedIndex(StorageError):
    """The index file is not a sound SQLite database; it is only a projection: set it aside
    and rebuild it from the rollouts."""


def _error(path: str, exc: sqlite3.Error, timeout: float, doing: str = "") -> StorageError:
    """A SQLite error as threadlog's: a lock held too long, damage, or another failure."""
    text = str(exc)
    if isinstance(exc, sqlite3.OperationalError) and ("locked" in text or "busy" in text):
        return StorageError(
            f"the index {path} is locked by another process (waited {timeout:g} s); retry "
            "when it is done (a `threadlog rebuild` of a large store takes a while)"
        )
    if isinstance(exc, sqlite3.DatabaseError) and not isinstance(exc, sqlite3.OperationalError):
        return DamagedIndex(f"the index {path} is damaged: {text}")
    return StorageError(f"{doing}index {path}: {text}")


_DDL = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS threads (
    thread_id   TEXT PRIMARY KEY,
    path        TEXT NOT NULL,
    principal   TEXT,
    created_at  TEXT,
    title       TEXT,
    forked_from TEXT,
    status      TEXT NOT NULL DEFAULT 'idle',
    last_ord    INTEGER NOT NULL DEFAULT 0,
    last_hash   TEXT,
    last_ts     TEXT,
    bytes       INTEGER NOT NULL DEFAULT 0,
    turns       INTEGER NOT NULL DEFAULT 0,
    tool_calls  INTEGER NOT NULL DEFAULT 0,
    damage      TEXT
);
CREATE INDEX IF NOT EXISTS threads_by_activity ON threads (last_ts);
CREATE TABLE IF NOT EXISTS acknowledged (
    thread_id TEXT PRIMARY KEY,
    last_ord  INTEGER NOT NULL,
    last_hash TEXT,
    bytes     INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS turns (
    thread_id   TEXT NOT NULL,
    turn_id     TEXT NOT NULL,
    status      TEXT,
    started_ord INTEGER,
    ended_ord   INTEGER,
    started_at  TEXT,
    ended_at    TEXT,
    input       TEXT,
    PRIMARY KEY (thread_id, turn_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS memories (
    thread_id    TEXT NOT NULL,
    memory_id    TEXT NOT NULL,
    fact         TEXT,
    scope        TEXT,
    key          TEXT,
    source_event TEXT,
    written_at   TEXT,
    expires_at   TEXT,
    revoked      INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (thread_id, memory_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS snapshots (
    thread_id   TEXT PRIMARY KEY,
    ord         INTEGER NOT NULL,
    hash        TEXT NOT NULL,
    end_offset  INTEGER NOT NULL,
    version     TEXT NOT NULL,
    payload     BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS tool_calls (
    thread_id   TEXT NOT NULL,
    call_id     TEXT NOT NULL,
    turn_id     TEXT,
    tool        TEXT,
    side_effect TEXT,
    status      TEXT,
    proposed_ord INTEGER,
    last_ord    INTEGER,
    PRIMARY KEY (thread_id, call_id)
) WITHOUT ROWID;
"""

_THREAD_COLUMNS = (
    "thread_id",
    "path",
    "principal",
    "created_at",
    "title",
    "forked_from",
    "status",
    "last_ord",
    "last_hash",
    "last_ts",
    "bytes",
    "turns",
    "tool_calls",
    "damage",
)


class IndexedThread(NamedTuple):
    """A row of the ``threads`` projection (a named tuple: listing 10,000 is cheap)."""

    thread_id: str
    path: str
    principal: str | None
    created_at: str | None
    title: str | None
    forked_from: str | None
    status: str
    last_ord: int
    last_hash: str | None
    last_ts: str | None
    bytes: int
    turns: int
    tool_calls: int
    damage: str | None

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _THREAD_COLUMNS}


def _translated(method: _F) -> _F:
    """The one boundary where SQLite errors become threadlog's: `StorageError`."""

    @functools.wraps(method)
    def wrapper(self: Index, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except sqlite3.Error as exc:
            raise _error(self.path, exc, self.timeout) from exc

    return wrapper  # type: ignore[return-value]


class Index:
    """One SQLite connection, shared by the store's threads under a lock."""

    def __init__(self, path: str, *, timeout: float | None = None) -> None:
        self.path = path
        self.timeout = BUSY_TIMEOUT if timeout is None else timeout
        self._lock = threading.RLock()
        _create_private(path)
        for suffix in ("-wal", "-shm"):
            restrict_file(path + suffix, "the index")
        try:
            self._db = sqlite3.connect(
                path, check_same_thread=False, isolation_level=None, timeout=self.timeout
            )
        except sqlite3.Error as exc:
            raise _error(path, exc, self.timeout, "cannot open the ") from exc
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            # Damage that opening does not notice (a page overwritten, a truncated file)
            # would otherwise surface in some later query, as an error in the middle of a
            # command. quick_check reads every page once: 15-30 ms for the 13 MB index of a
            # 100k-record store (page cache warm).
            check = self._db.execute("PRAGMA quick_check").fetchall()
            if check != [("ok",)]:
                raise sqlite3.DatabaseError("; ".join(str(row[0]) for row in check[:3]))
            self._db.executescript(_DDL)
            row = self._db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
            if row is not None and row[0] != str(SCHEMA_VERSION):
                # Projections of another schema: drop the rows; catch-up rebuilds them.
                for table in ("threads", "turns", "tool_calls", "memories", "snapshots"):
                    self._db.execute(f"DELETE FROM {table}")
            self._db.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES ('schema', ?)",
                (str(SCHEMA_VERSION),),
            )
        except sqlite3.Error as exc:
            self._db.close()
            raise _error(path, exc, self.timeout, "cannot open the ") from exc

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- reads -----------------------------------------------------------------------------

    @_translated
    def threads(
        self, *, principal: str | None = None, limit: int | None = None
    ) -> list[IndexedThread]:
        """Threads, most recently active first."""
        sql = f"SELECT {', '.join(_THREAD_COLUMNS)} FROM threads"
        args: list[Any] = []
        if principal is not None:
            sql += " WHERE principal = ?"
            args.append(principal)
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
                f"SELECT {', '.join(_THREAD_COLUMNS)} FROM threads WHERE thread_id = ?",
                (thread_id,),
            ).fetchone()
        return IndexedThread(*row) if row else None

    @_translated
    def positions(self) -> dict[str, tuple[int, int, str | None]]:
        """``thread_id → (bytes, last_ord, last_hash)`` for catch-up."""
        with self._lock:
            rows = self._db.execute("SELECT thread_id, bytes, last_ord, last_hash FROM threads")
            return {t: (b, o, h) for t, b, o, h in rows}

    @_translated
    def acknowledged(self, thread_id: str | None = None) -> dict[str, tuple[int, str | None, int]]:
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
        try:
            old = sqlite3.connect(f"file:{urllib.parse.quote(damaged)}?mode=ro", uri=True)
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
        batches: Iterable[tuple[str, str, Sequence[Record], int]],
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
            "m.written_at, m.expires_at, m.revoked FROM memories m JOIN threads t USING (thread_id)"
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
    def get_snapshot(self, thread_id: str) -> tuple[int, str, int, str, bytes] | None:
        """``(ord, hash, end_offset, version, payload)`` of the thread's snapshot, if any."""
        with self._lock:
            row = self._db.execute(
                "SELECT ord, hash, end_offset, version, payload FROM snapshots WHERE thread_id = ?",
                (thread_id,),
            ).fetchone()
        return (row[0], row[1], row[2], row[3], bytes(row[4])) if row else None

    @_translated
    def reset_thread(self, thread_id: str, *, damage: str | None = None) -> None:
        """Forget a thread's rows (before re-indexing it from ord 1)."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for table in ("threads", "turns", "tool_calls", "memories", "snapshots"):
                    self._db.execute(f"DELETE FROM {table} WHERE thread_id = ?", (thread_id,))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

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
                for table in ("threads", "turns", "tool_calls", "memories"):
                    self._db.execute(f"DELETE FROM {table} WHERE thread_id = ?", (thread_id,))

    @_translated
    def clear(self) -> None:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            for table in ("threads", "turns", "tool_calls", "memories"):
                self._db.execute(f"DELETE FROM {table}")
            self._db.execute("COMMIT")

    def _apply_one(
        self, thread_id: str, path: str, records: Sequence[Record], end: int, acknowledged: bool
    ) -> None:
        db = self._db
        row = db.execute(
            "SELECT last_ord FROM threads WHERE thread_id = ?", (thread_id,)
        ).fetchone()
        if row is None:
            db.execute("INSERT INTO threads (thread_id, path) VALUES (?, ?)", (thread_id, path))
            applied = 0
        else:
            applied = row[0]
        if acknowledged and records:
            self._acknowledge(thread_id, records[-1], end)
        fresh = [r for r in records if r.ord > applied]
        if not fresh:
            return
        if fresh[0].ord != applied + 1:
            raise StorageError(
                f"index: thread {thread_id} jumps from ord {applied} to {fresh[0].ord}"
            )
        new_turns = new_calls = 0
        for record in fresh:
            for change in project(record):
                if change.table == "thread":
                    self._set_thread(thread_id, change.fields)
                elif change.table == "turn":
                    if "started_ord" in change.fields:
                        new_turns += 1
                    self._upsert(
                        "turns", ("thread_id", "turn_id"), (thread_id, change.key), change.fields
                    )
                elif change.table == "memory":
                    self._upsert(
                        "memories",
                        ("thread_id", "memory_id"),
                        (thread_id, change.key),
                        change.fields,
                    )
                else:
                    if change.fields.get("status") == "proposed":
                        new_calls += 1
                    self._upsert(
                        "tool_calls",
                        ("thread_id", "call_id"),
                        (thread_id, change.key),
                        change.fields,
                    )
        last = fresh[-1]
        db.execute(
            "UPDATE threads SET last_ord = ?, last_hash = ?, last_ts = ?, bytes = ?, "
            "turns = turns + ?, tool_calls = tool_calls + ?, path = ? WHERE thread_id = ?",
            (last.ord, last.hash, last.ts, end, new_turns, new_calls, path, thread_id),
        )

    def _acknowledge(self, thread_id: str, last: Record, end: int) -> None:
        self._db.execute(
            "INSERT INTO acknowledged (thread_id, last_ord, last_hash, bytes) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (thread_id) DO UPDATE SET last_ord = excluded.last_ord, "
            "last_hash = excluded.last_hash, bytes = excluded.bytes "
            "WHERE excluded.last_ord > acknowledged.last_ord",
            (thread_id, last.ord, last.hash, end),
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
        names = (*keys, *fields)
        placeholders = ", ".join("?" for _ in names)
        updates = ", ".join(f"{name} = excluded.{name}" for name in fields)
        self._db.execute(
            f"INSERT INTO {table} ({', '.join(names)}) VALUES ({placeholders}) "
            f"ON CONFLICT ({', '.join(keys)}) DO UPDATE SET {updates}",
            (*key_values, *fields.values()),
        )


def _create_private(path: str) -> None:
    """Create the index file 0600 before SQLite does (SQLite would make it 0644, and its
    ``-wal``/``-shm`` files after it), or check the existing one (see `check_fd`)."""
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        if exc.errno in (errno.EISDIR, errno.ELOOP):
            raise DamagedIndex(f"the index {path} is not a file") from exc
        raise StorageError(f"cannot open the index {path}: {exc}") from exc
    try:
        check_fd(fd, path, "the index")
    except StorageError as exc:
        if os.path.islink(path) or not os.path.isfile(path):
            raise DamagedIndex(f"the index {path} is not a file") from exc
        raise
    finally:
        os.close(fd)
