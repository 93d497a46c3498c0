"""The index database: its schema, how it is opened and checked, and the rows it hands out.

`connect` opens the SQLite file the way `Index` needs it: created 0600 before SQLite touches it
(SQLite gives its ``-wal`` and ``-shm`` files the database's mode), WAL with
``synchronous=NORMAL``, a ``PRAGMA quick_check`` that turns a damaged file into `DamagedIndex`
at open rather than in some later query, the tables created, and the projections of another
`SCHEMA_VERSION` dropped (catch-up rebuilds them; the acknowledged marks are kept). `translate`
is the one boundary where SQLite's errors become threadlog's.

The row types are named (`IndexedThread`, `SnapshotRow`) where callers read fields, and plain
tuples (`IndexPosition`, `AckMark`, `IndexBatch`) where thousands are built at a time or on
the commit path.
"""

from __future__ import annotations

import errno
import os
import sqlite3
from typing import TYPE_CHECKING, Any, NamedTuple

from threadlog.errors import StorageError
from threadlog.store._perms import check_fd, restrict_file

if TYPE_CHECKING:
    from collections.abc import Sequence

    from threadlog.model.envelope import Record
    from threadlog.model.projection import Projected

__all__ = [
    "SCHEMA_VERSION",
    "THREAD_COLUMNS",
    "AckMark",
    "DamagedIndex",
    "IndexBatch",
    "IndexPosition",
    "IndexedThread",
    "SnapshotRow",
    "connect",
    "translate",
]

SCHEMA_VERSION = 4
"""3: ``memories.project`` (a project fact's project); 4: ``thread_meta`` (a thread's
``metadata`` setting, for ``Catalog.threads(metadata=…)``)."""

IndexPosition = tuple[int, int, "str | None"]
"""``(bytes, last_ord, last_hash)``: how far the index has applied a thread's rollout."""
AckMark = tuple[int, "str | None", int]
"""``(last_ord, last_hash, bytes)``: the furthest a thread was ever acknowledged."""
IndexBatch = tuple[str, str, "Sequence[Record] | Projected", int]
"""``(thread_id, path, records, end_offset)``: records to apply (or a whole new log's
`Projected`), and where they end."""


class DamagedIndex(StorageError):
    """The index file is not a sound SQLite database; it is only a projection: set it aside
    and rebuild it from the rollouts."""


def translate(path: str, exc: sqlite3.Error, timeout: float, doing: str = "") -> StorageError:
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
CREATE TABLE IF NOT EXISTS thread_meta (
    thread_id TEXT NOT NULL,
    key       TEXT NOT NULL,
    value     TEXT NOT NULL,
    PRIMARY KEY (thread_id, key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS thread_meta_by_value ON thread_meta (key, value);
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
    project      TEXT,
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
CREATE TABLE IF NOT EXISTS checkpoints (
    thread_id   TEXT PRIMARY KEY,
    ord         INTEGER NOT NULL,
    hash        TEXT NOT NULL,
    end_offset  INTEGER NOT NULL,
    version     TEXT NOT NULL,
    state       BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS sparse_offsets (
    thread_id   TEXT NOT NULL,
    ord         INTEGER NOT NULL,
    offset      INTEGER NOT NULL,
    ids         BLOB,
    digest      BLOB,
    PRIMARY KEY (thread_id, ord)
) WITHOUT ROWID;
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

THREAD_COLUMNS = (
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
        return {name: getattr(self, name) for name in THREAD_COLUMNS}


class SnapshotRow(NamedTuple):
    """A thread's snapshot: reduced state after record ``ord`` (which has ``hash`` and ends at
    byte ``end``), in the reducer's ``version``."""

    ord: int
    hash: str
    end: int
    version: str
    payload: bytes


def connect(path: str, timeout: float) -> sqlite3.Connection:
    """Open (creating it if needed) and check the index at ``path``; see the module docstring.

    Raises `DamagedIndex` for a file that is not a sound SQLite database, `StorageError`
    for anything else (a lock held longer than ``timeout``, permissions).
    """
    _create_private(path)
    for suffix in ("-wal", "-shm"):
        restrict_file(path + suffix, "the index")
    try:
        db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=timeout)
    except sqlite3.Error as exc:
        raise translate(path, exc, timeout, "cannot open the ") from exc
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        # Damage that opening does not notice (a page overwritten, a truncated file)
        # would otherwise surface in some later query, as an error in the middle of a
        # command. quick_check reads every page once: 15-30 ms for the 13 MB index of a
        # 100k-record store (page cache warm).
        check = db.execute("PRAGMA quick_check").fetchall()
        if check != [("ok",)]:
            raise sqlite3.DatabaseError("; ".join(str(row[0]) for row in check[:3]))
        db.executescript(_DDL)
        columns = {r[1] for r in db.execute("PRAGMA table_info(memories)").fetchall()}
        if "project" not in columns:  # an index of schema 2
            db.execute("ALTER TABLE memories ADD COLUMN project TEXT")
        columns = {r[1] for r in db.execute("PRAGMA table_info(sparse_offsets)").fetchall()}
        if "ids" not in columns:  # an index from before the id blocks (`iddigest`)
            db.execute("ALTER TABLE sparse_offsets ADD COLUMN ids BLOB")
        if "digest" not in columns:  # from before the chunk digests (`checkpoint`)
            db.execute("ALTER TABLE sparse_offsets ADD COLUMN digest BLOB")
        row = db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
        if row is not None and row[0] != str(SCHEMA_VERSION):
            # Projections of another schema: drop the rows; catch-up rebuilds them.
            for table in (
                "threads",
                "turns",
                "tool_calls",
                "memories",
                "snapshots",
                "thread_meta",
                "checkpoints",
                "sparse_offsets",
            ):
                db.execute(f"DELETE FROM {table}")
        db.execute(
            "INSERT OR REPLACE INTO meta (key, value) VALUES ('schema', ?)",
            (str(SCHEMA_VERSION),),
        )
    except sqlite3.Error as exc:
        db.close()
        raise translate(path, exc, timeout, "cannot open the ") from exc
    return db


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
