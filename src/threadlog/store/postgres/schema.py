"""The PostgreSQL schema: versioned migrations, the check at open, and the target URL.

Theory of operation
-------------------
The database records which migrations it has had in ``threadlog_schema_version`` (one row per
applied version). `MIGRATIONS` is the ordered list of ``(version, statements)``; `upgrade`
applies those the database lacks, each in its own transaction, under an advisory lock so that
two processes upgrading at once apply each migration exactly once (the second waits, then finds
nothing left to do). Upgrading is idempotent.

`check_schema`, run by every `PostgresStore` open, compares the database's version with
`SCHEMA_VERSION`:

* a database (or schema) with no threadlog tables at all is migrated on the spot, so that
  ``open_store("postgresql://…")`` on a fresh database just works (the three-line README).
  All the migrations then run in one transaction under the lock: stores opened at the same
  time (several workers started together) see no schema or the whole of it, never a version
  half way, which they would refuse as too old;
* an older version is refused with a message that says to run ``threadlog db upgrade``: a
  migration of a shared database is the operator's decision, not a side effect of a worker
  starting;
* a newer version (written by a newer threadlog) is refused: this threadlog cannot know what
  it would break.

Tables live in one PostgreSQL schema (``public`` unless the URL says ``?schema=NAME``, which
threadlog strips before handing the URL to libpq); notifications go out on a channel named
after that schema, so several threadlog stores can share one database.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from threadlog.errors import StorageError, UsageError

if TYPE_CHECKING:
    from collections.abc import Iterator

    import psycopg

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "SchemaTooNew",
    "SchemaTooOld",
    "Target",
    "check_schema",
    "current_version",
    "parse_url",
    "upgrade",
]

_MIGRATION_LOCK = 0x7468726C  # "thrl": the advisory lock key migrations serialize on

_V1 = """
CREATE TABLE IF NOT EXISTS threadlog_schema_version (
    version    integer PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE threads (
    thread_id   text PRIMARY KEY,
    principal   text,
    created_at  text,
    title       text,
    forked_from text,
    status      text NOT NULL DEFAULT 'idle',
    last_ord    bigint NOT NULL DEFAULT 0,
    last_hash   text,
    last_ts     text,
    bytes       bigint NOT NULL DEFAULT 0,
    turns       integer NOT NULL DEFAULT 0,
    tool_calls  integer NOT NULL DEFAULT 0
);
CREATE INDEX threads_by_activity ON threads (last_ts DESC, thread_id DESC);
CREATE TABLE events (
    thread_id text NOT NULL,
    ord       bigint NOT NULL CHECK (ord >= 1),
    id        text NOT NULL,
    writer    text NOT NULL,
    parent    text,
    ts        text NOT NULL,
    type      text NOT NULL,
    v         integer NOT NULL,
    prev      text,
    hash      text NOT NULL,
    line      bytea NOT NULL,
    fence     bigint,
    PRIMARY KEY (thread_id, ord),
    UNIQUE (thread_id, id)
);
CREATE SEQUENCE lease_tokens;
CREATE TABLE leases (
    thread_id  text PRIMARY KEY,
    holder     text NOT NULL,
    token      bigint NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE TABLE turns (
    thread_id   text NOT NULL,
    turn_id     text NOT NULL,
    status      text,
    started_ord bigint,
    ended_ord   bigint,
    started_at  text,
    ended_at    text,
    input       text,
    PRIMARY KEY (thread_id, turn_id)
);
CREATE TABLE tool_calls (
    thread_id    text NOT NULL,
    call_id      text NOT NULL,
    turn_id      text,
    tool         text,
    side_effect  text,
    status       text,
    proposed_ord bigint,
    last_ord     bigint,
    PRIMARY KEY (thread_id, call_id)
);
CREATE TABLE memories (
    thread_id    text NOT NULL,
    memory_id    text NOT NULL,
    fact         text,
    scope        text,
    key          text,
    source_event text,
    written_at   text,
    expires_at   text,
    revoked      integer NOT NULL DEFAULT 0,
    project      text,
    PRIMARY KEY (thread_id, memory_id)
);
CREATE TABLE snapshots (
    thread_id text PRIMARY KEY,
    ord       bigint NOT NULL,
    hash      text NOT NULL,
    version   text NOT NULL,
    payload   bytea NOT NULL
);
CREATE TABLE mailbox (
    thread_id text NOT NULL,
    id        text NOT NULL,
    command   bytea NOT NULL,
    PRIMARY KEY (thread_id, id)
);
CREATE TABLE credentials (
    seq        bigserial,
    token_id   text NOT NULL,
    principal  text NOT NULL,
    digest     text NOT NULL,
    created_at text NOT NULL,
    CONSTRAINT credentials_token_id UNIQUE (token_id),
    CONSTRAINT credentials_digest UNIQUE (digest)
);
CREATE TABLE artifacts (
    sha256     text PRIMARY KEY,
    size       bigint NOT NULL,
    media_type text NOT NULL
);
CREATE TABLE artifact_chunks (
    sha256 text NOT NULL,
    seq    integer NOT NULL,
    data   bytea NOT NULL,
    PRIMARY KEY (sha256, seq)
);
"""

_V2 = """
CREATE TABLE thread_meta (
    thread_id text NOT NULL,
    key       text NOT NULL,
    value     text NOT NULL,
    PRIMARY KEY (thread_id, key)
);
CREATE INDEX thread_meta_by_value ON thread_meta (key, value);
CREATE TABLE deleted_threads (
    thread_id  text PRIMARY KEY,
    deleted_at timestamptz NOT NULL DEFAULT now()
);
"""
"""Version 2: listing by metadata (a thread's ``metadata`` setting, one row per key, values as
canonical JSON) and the ids of deleted threads (never handed out again)."""

_V3 = """
CREATE TABLE checkpoints (
    thread_id text PRIMARY KEY,
    ord       bigint NOT NULL,
    hash      text NOT NULL,
    version   text NOT NULL,
    state     bytea NOT NULL
);
"""
"""Version 3: the store's own checkpoint of a thread (its reduced state, trimmed, after a
record it committed), so that a writer's first append and a state read start there when no
runtime snapshot is later (a thread written by `append` alone: the framework adapters')."""

_V4 = """
ALTER TABLE threads SET (fillfactor = 50);
ALTER TABLE threads ADD COLUMN active_minute text
    GENERATED ALWAYS AS (left(last_ts, 16)) STORED;
DROP INDEX threads_by_activity;
CREATE INDEX threads_by_activity ON threads (active_minute DESC NULLS LAST);
"""
"""Version 4: the listing's index orders threads by the minute of their last record
(``active_minute``, the first 16 characters of ``last_ts``), not by ``last_ts`` itself, so that
a commit's update of a thread's row changes no indexed column within a minute and stays on its
page (a heap-only update: no new entry in either of the table's indexes); the listing sorts
each minute's threads by ``last_ts`` (an incremental sort over the index). Half of each page
of ``threads`` is left free for those updates."""

MIGRATIONS: list[tuple[int, str]] = [(1, _V1), (2, _V2), (3, _V3), (4, _V4)]
"""``(version, SQL)`` in order; a new version appends one entry, never edits an old one."""

SCHEMA_VERSION = MIGRATIONS[-1][0]
"""The schema this threadlog reads and writes."""

_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


class SchemaTooOld(StorageError):
    """The database holds an older threadlog schema: ``threadlog db upgrade`` migrates it."""


class SchemaTooNew(StorageError):
    """The database was migrated by a newer threadlog; this one refuses to touch it."""


class Target:
    """A ``postgresql://`` target: the URL libpq gets, and threadlog's own ``schema``."""

    __slots__ = ("_options", "conninfo", "schema", "url")

    def __init__(self, url: str, schema: str | None = None) -> None:
        parts = urlsplit(url)
        if parts.scheme.lower() not in ("postgresql", "postgres"):
            raise UsageError(f"{url!r} is not a postgresql:// URL")
        try:
            parts.port  # noqa: B018 - raises ValueError for a port that is not a number
        except ValueError:
            raise UsageError(
                "the port of the postgresql:// URL is not a number in 0..65535 "
                "(postgresql://user@host[:port]/database)"
            ) from None
        query = parse_qsl(parts.query, keep_blank_values=True)
        rest = [(k, v) for k, v in query if k not in ("schema", "options")]
        named = [v for k, v in query if k == "schema"]
        self._options = " ".join(v for k, v in query if k == "options")
        schema = schema or (named[-1] if named else None) or "public"
        if not _SCHEMA_NAME.fullmatch(schema):
            raise UsageError(
                f"schema {schema!r}: a lower-case SQL name (letters, digits, _), at most 63"
            )
        self.url = url
        self.schema = schema
        self.conninfo = urlunsplit(parts._replace(query=urlencode(rest)))

    @property
    def channel(self) -> str:
        """The NOTIFY channel of this store's appends."""
        return f"threadlog_{self.schema}"

    def connect_options(self, *more: str) -> str:
        """libpq ``options``: the URL's own, then what puts every session in the store's
        schema, then ``more`` (e.g. ``-c name=value``)."""
        return " ".join(o for o in (self._options, f"-c search_path={self.schema}", *more) if o)

    def __repr__(self) -> str:
        parts = urlsplit(self.conninfo)
        host = parts.hostname or "localhost"
        port = f":{parts.port}" if parts.port else ""
        return f"postgresql://{host}{port}{parts.path} (schema {self.schema})"


def parse_url(url: str, schema: str | None = None) -> Target:
    """The `Target` a ``postgresql://`` URL names (``?schema=NAME`` picks the schema)."""
    return Target(url, schema)


def current_version(conn: psycopg.Connection[Any], schema: str) -> int | None:
    """The schema version the database holds in ``schema``: None when it has no threadlog
    tables at all, 0 when it has some but no version table (not threadlog's, or damaged)."""
    row = conn.execute(
        "SELECT to_regclass(%s), to_regclass(%s)",
        (f"{schema}.threadlog_schema_version", f"{schema}.events"),
    ).fetchone()
    assert row is not None
    if row[0] is None:
        return 0 if row[1] is not None else None
    got = conn.execute(f'SELECT max(version) FROM "{schema}".threadlog_schema_version').fetchone()
    return int(got[0]) if got and got[0] is not None else 0


@contextmanager
def _migrating(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """Hold the migration lock (``conn`` in autocommit): a session-level advisory lock, taken
    before the transactions that read the version and migrate. Each of those begins after the
    lock is granted, so it sees what a migration committed meanwhile; a transaction that took
    a transaction-level lock after looking at the catalog could keep a stale "no such table"
    from before the wait and run a migration again. Released on exit, or with the session."""
    conn.execute("SELECT pg_advisory_lock(%s)", (_MIGRATION_LOCK,))
    try:
        yield
    finally:
        if not (conn.closed or conn.broken):  # (a lost session's locks went with it)
            conn.execute("SELECT pg_advisory_unlock(%s)", (_MIGRATION_LOCK,))


def upgrade(conn: psycopg.Connection[Any], schema: str) -> tuple[int, int]:
    """Apply the migrations ``schema`` lacks; ``(version before, version after)``.

    Each migration runs in its own transaction under the migration lock (module docstring).
    Raises `SchemaTooNew` for a database newer than this threadlog.
    """
    with _migrating(conn):
        before = None
        for version, sql in MIGRATIONS:
            with conn.transaction():
                _enter(conn, schema)
                have = current_version(conn, schema) or 0
                if before is None:
                    before = have
                    if have > SCHEMA_VERSION:
                        raise _too_new(have)
                if have < version:
                    _apply(conn, version, sql)
    return before or 0, SCHEMA_VERSION


def _create(conn: psycopg.Connection[Any], schema: str) -> int | None:
    """Create the schema in an empty database in one transaction, all migrations at once, so
    that a store opening it at the same time finds nothing or all of it, never a version
    half way (which it would refuse as too old). Returns the version found or made."""
    with _migrating(conn), conn.transaction():
        have = current_version(conn, schema)  # another may have made it while we waited
        if have is not None:
            return have
        _enter(conn, schema)
        for version, sql in MIGRATIONS:
            _apply(conn, version, sql)
    return SCHEMA_VERSION


def _enter(conn: psycopg.Connection[Any], schema: str) -> None:
    """Make ``schema`` (if new) the current transaction's place for the migrations' tables."""
    conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
    conn.execute(f'SET LOCAL search_path TO "{schema}"')


def _apply(conn: psycopg.Connection[Any], version: int, sql: str) -> None:
    """Run migration ``version`` and record it, in the current transaction."""
    conn.execute(sql)
    conn.execute("INSERT INTO threadlog_schema_version (version) VALUES (%s)", (version,))


def check_schema(conn: psycopg.Connection[Any], schema: str, *, create: bool = True) -> None:
    """Check (or, for an empty database and ``create``, make) the schema at open; raises
    `SchemaTooOld` / `SchemaTooNew` with what to do (module docstring)."""
    have = current_version(conn, schema)
    if have == SCHEMA_VERSION:
        return
    if have is None and create:
        have = _create(conn, schema)
        if have == SCHEMA_VERSION:
            return
    if have is None or have < SCHEMA_VERSION:
        what = "no threadlog schema" if have is None else f"threadlog schema {have}"
        raise SchemaTooOld(
            f"the database holds {what} in schema {schema!r}, this threadlog needs "
            f"{SCHEMA_VERSION}: run `threadlog db upgrade --store URL`"
        )
    raise _too_new(have)


def _too_new(have: int) -> SchemaTooNew:
    return SchemaTooNew(
        f"the database holds threadlog schema {have}, newer than this threadlog's "
        f"{SCHEMA_VERSION}: upgrade threadlog (pip install -U 'threadlog[postgres]'); "
        "nothing was changed"
    )
