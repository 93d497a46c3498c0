"""Writing records and their projections in the caller's transaction.

Every path that adds records to the events table (the group committer, `create_thread`,
`fork`) goes through `insert_records`, inside the transaction that also holds the fencing
check: the rows of ``events`` and the projections derived from them (``threads``, ``turns``,
``tool_calls``, ``memories``) commit together or not at all, so the catalog never runs ahead of
or behind the log. What a record changes is decided by the pure `threadlog.model.projection`
(the same function the embedded SQLite index applies); this module only turns those row
changes into upserts. A ``NOTIFY`` per thread rides in the same transaction, so it is sent on
commit and only then.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from threadlog.model import codec
from threadlog.model.projection import project
from threadlog.store.postgres.arrays import ByteaArray, Int4Array, Int8Array, TextArray

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    import psycopg

    from threadlog.model.envelope import Record

__all__ = [
    "FENCED_COMMIT",
    "Op",
    "Row",
    "apply_projections",
    "event_columns",
    "fenced_commit",
    "insert_records",
    "notify_payload",
    "run_ops",
]

Row = tuple["Record", bytes, "int | None"]
"""``(record, its canonical line, fencing token or None)``: one row of ``events``."""

_TABLES = {
    "turn": ("turns", "turn_id"),
    "tool_call": ("tool_calls", "call_id"),
    "memory": ("memories", "memory_id"),
}


def _text(value: Any) -> Any:
    """A projected value as a PostgreSQL ``text`` column can hold it: NUL (which JSON and the
    embedded index allow, PostgreSQL text does not) becomes U+FFFD. The log keeps the exact
    value (its line is ``bytea``); only the catalog's copy is changed."""
    return value.replace("\x00", "\ufffd") if isinstance(value, str) and "\x00" in value else value


def notify_payload(thread_id: str, first: int, last: int, origin: str) -> str:
    """What a notification says: ``"<thread> <first ord> <last ord> <origin store>"``."""
    return f"{thread_id} {first} {last} {origin}"


_COLUMNS = (
    "thread_id, ord, id, writer, parent, ts, type, v, prev, hash, line, fence",
    "%b::text[], %b::bigint[], %b::text[], %b::text[], %b::text[], %b::text[], %b::text[], "
    "%b::int[], %b::text[], %b::text[], %b::bytea[], %b::bigint[]",
)


def event_columns(by_thread: Mapping[str, Sequence[Row]]) -> list[list[Any]]:
    """The rows of ``events`` as one list per column (for ``unnest``)."""
    columns: list[list[Any]] = [[] for _ in range(12)]
    (t, o, i, w, pa, ts, ty, v, pr, h, li, f) = columns
    for thread_id, rows in by_thread.items():
        for r, line, fence in rows:
            t.append(thread_id)
            o.append(r.ord)
            i.append(r.id)
            w.append(r.thread)
            pa.append(r.parent)
            ts.append(r.ts)
            ty.append(r.type)
            v.append(r.v)
            pr.append(r.prev)
            h.append(r.hash)
            li.append(line)
            f.append(fence)
    return columns


def insert_records(
    cur: psycopg.Cursor[Any],
    by_thread: Mapping[str, Sequence[Row]],
    *,
    channel: str,
    origin: str,
) -> None:
    """Insert each thread's rows (gap-free, continuing its log; no fencing: a new thread,
    a fork) and their projections, and notify; in the caller's transaction."""
    cur.execute(
        f"INSERT INTO events ({_COLUMNS[0]}) SELECT * FROM unnest({_COLUMNS[1]})",
        event_columns(by_thread),
    )
    apply_projections(cur, by_thread, channel=channel, origin=origin)


_FENCE = "EXISTS (SELECT 1 FROM leases f WHERE f.thread_id = %s AND f.token = %s)"
"""The condition that makes a projection statement apply only while its thread's fencing
token is current (the group commit sends them without waiting for the fenced insert)."""


def apply_projections(
    cur: psycopg.Cursor[Any],
    by_thread: Mapping[str, Sequence[Row]],
    *,
    channel: str,
    origin: str,
) -> None:
    """Update the projections of records just inserted, and notify ``channel`` of each
    thread's new ordinals; in the caller's transaction (a few statements whatever the batch).
    Unfenced: for a new thread, a fork, an import (the group commit uses `FENCED_COMMIT`)."""
    ops, heads = _project(by_thread, origin, fenced=False)
    run_ops(cur, ops)
    cur.execute(
        "UPDATE threads t SET last_ord = u.o, last_hash = u.h, last_ts = u.ts, "
        "bytes = t.bytes + u.b, turns = t.turns + u.nt, tool_calls = t.tool_calls + u.nc "
        "FROM unnest(%b::text[], %b::bigint[], %b::text[], %b::text[], %b::bigint[], "
        "%b::int[], %b::int[]) AS u(id, o, h, ts, b, nt, nc) WHERE t.thread_id = u.id",
        heads[:7],
    )
    cur.execute("SELECT pg_notify(%s, u.p) FROM unnest(%b::text[]) AS u(p)", (channel, heads[8]))


Op = tuple[str, tuple[Any, ...]]
"""A projection statement and its parameters (upserts of turns, tool calls, memories...)."""


def run_ops(cur: psycopg.Cursor[Any], ops: list[Op]) -> None:
    """Run the projection statements in order: consecutive ones of one shape as one
    ``executemany``."""
    i = 0
    while i < len(ops):
        j = i
        while j < len(ops) and ops[j][0] == ops[i][0]:
            j += 1
        cur.executemany(ops[i][0], [params for _, params in ops[i:j]])
        i = j


def _project(
    by_thread: Mapping[str, Sequence[Row]], origin: str, *, fenced: bool
) -> tuple[list[Op], list[list[Any]]]:
    """The statements of the records' row changes (in record order: upserts of one row
    stack), each fenced if asked (it applies only while the thread's token, the rows'
    ``fence``, is still its lease's); and per thread, one list per column: its id, last
    ord, hash and ts, bytes, new turns, new tool calls, token, notification payload (None
    if fenced)."""
    ops: list[Op] = []
    heads: list[list[Any]] = [[] for _ in range(9)]
    ids, ords, hashes, stamps, sizes, turns, calls, tokens, notes = heads
    for thread_id, rows in by_thread.items():
        token = rows[0][2] if fenced else None
        guard = (thread_id, token) if fenced else ()
        new_turns = new_calls = size = 0
        for record, line, _ in rows:
            size += len(line)
            for change in project(record):
                if change.table == "thread":
                    ops.extend(_thread_ops(thread_id, change.fields, guard))
                    continue
                if change.table == "meta":
                    ops.extend(_meta_ops(thread_id, change.fields, guard))
                    continue
                if change.table == "turn" and "started_ord" in change.fields:
                    new_turns += 1
                if change.table == "tool_call" and change.fields.get("status") == "proposed":
                    new_calls += 1
                table, key = _TABLES[change.table]
                names = ("thread_id", key, *change.fields)
                sets = ", ".join(f"{n} = EXCLUDED.{n}" for n in names[2:])
                sql = (
                    f"INSERT INTO {table} ({', '.join(names)}) "
                    f"SELECT {', '.join('%s' for _ in names)}"
                    f"{f' WHERE {_FENCE}' if guard else ''} "
                    f"ON CONFLICT (thread_id, {key}) DO UPDATE SET {sets}"
                )
                values = (_text(v) for v in change.fields.values())
                ops.append((sql, (thread_id, _text(change.key), *values, *guard)))
        first, last = rows[0][0], rows[-1][0]
        ids.append(thread_id)
        ords.append(last.ord)
        hashes.append(last.hash)
        stamps.append(last.ts)
        sizes.append(size)
        turns.append(new_turns)
        calls.append(new_calls)
        tokens.append(token)
        # the group commit has its notifications sent after its commit (`FENCED_COMMIT`)
        notes.append(None if fenced else notify_payload(thread_id, first.ord, last.ord, origin))
    return ops, heads


FENCED_COMMIT = """
WITH locked AS MATERIALIZED (
    SELECT thread_id, token, holder FROM leases
    WHERE thread_id = ANY(%(threads)s) ORDER BY thread_id FOR UPDATE
), inserted AS (
    INSERT INTO events (thread_id, ord, id, writer, parent, ts, type, v, prev, hash, line, fence)
    SELECT u.thread_id, u.ord, u.id, u.thread_id, u.parent, u.ts, u.type, %(v)s, u.prev,
        u.hash, u.line, u.fence
    FROM unnest(%(t)s, %(o)s, %(i)s, %(pa)s, %(ts)s, %(ty)s, %(pr)s, %(h)s, %(li)s, %(f)s)
        AS u(thread_id, ord, id, parent, ts, type, prev, hash, line, fence)
    JOIN locked l ON l.thread_id = u.thread_id AND l.token = u.fence
    RETURNING 1
), heads AS MATERIALIZED (
    SELECT u.* FROM unnest(%(ht)s, %(ho)s, %(hh)s, %(hts)s, %(hb)s, %(hnt)s, %(hnc)s,
        %(hf)s) AS u(thread_id, o, h, ts, b, nt, nc, tok)
    JOIN locked l ON l.thread_id = u.thread_id AND l.token = u.tok
), updated AS (
    UPDATE threads t SET last_ord = u.o, last_hash = u.h, last_ts = u.ts,
        bytes = t.bytes + u.b, turns = t.turns + u.nt, tool_calls = t.tool_calls + u.nc
    FROM heads u WHERE t.thread_id = u.thread_id
)
SELECT u.thread_id, l.token, l.holder
FROM unnest(%(ht)s, %(hf)s) AS u(thread_id, tok)
LEFT JOIN locked l ON l.thread_id = u.thread_id
WHERE l.token IS DISTINCT FROM u.tok
UNION ALL
SELECT NULL, count(*), NULL FROM inserted
"""
"""A group commit's one statement (`threadlog.store.postgres.committer`): the batch's lease
rows locked until COMMIT (``FOR UPDATE``); the rows whose ``fence`` is their thread's current
token inserted (all at once, ``unnest``) and the ``threads`` row of each such thread brought
up to date; the other threads' rows refused. The result has a row per refused thread (its
id, the lease's token and holder, both NULL if it has no lease) and one ``(NULL, the number of
rows inserted, NULL)``. Parameters: `fenced_commit`. The other projections (turns, tool
calls...) follow as statements of their own, fenced the same way. It sends no notification:
a NOTIFY takes a database-wide lock that its transaction holds until its commit is flushed,
so two lanes' commits would queue for each other's WAL flush instead of sharing it; the
committer has them sent once the commit is over (`threadlog.store.postgres.notify.Sender`)."""


def fenced_commit(
    by_thread: Mapping[str, Sequence[Row]], *, origin: str
) -> tuple[dict[str, Any], list[Op]]:
    """`FENCED_COMMIT`'s parameters for ``by_thread`` (every row's record written by its
    thread, every row of a thread carrying the same token), and the fenced projection
    statements to run after it."""
    cols: list[list[Any]] = [[] for _ in range(10)]
    (t, o, i, pa, ts, ty, pr, h, li, f) = cols
    version = None
    for thread_id, rows in by_thread.items():
        for r, line, fence in rows:
            t.append(thread_id)
            o.append(r.ord)
            i.append(r.id)
            pa.append(r.parent)
            ts.append(r.ts)
            ty.append(r.type)
            pr.append(r.prev)
            h.append(r.hash)
            li.append(line)
            f.append(fence)
            if version is None:
                version = r.v
            elif r.v != version:
                raise ValueError("a group commit's records share one format version")
    ops, heads = _project(by_thread, origin, fenced=True)
    text = TextArray.of
    params: dict[str, Any] = {
        "threads": text(list(by_thread)),
        "v": version,
        "t": text(t),
        "o": Int8Array.of(o),
        "i": text(i),
        "pa": text(pa),
        "ts": text(ts),
        "ty": text(ty),
        "pr": text(pr),
        "h": text(h),
        "li": ByteaArray.of(li),
        "f": Int8Array.of(f),
        "ht": text(heads[0]),
        "ho": Int8Array.of(heads[1]),
        "hh": text(heads[2]),
        "hts": text(heads[3]),
        "hb": Int8Array.of(heads[4]),
        "hnt": Int4Array.of(heads[5]),
        "hnc": Int4Array.of(heads[6]),
        "hf": Int8Array.of(heads[7]),
    }
    return params, ops


def _meta_ops(
    thread_id: str, metadata: dict[str, Any], guard: tuple[Any, ...]
) -> list[tuple[str, tuple[Any, ...]]]:
    """The thread's ``metadata`` setting as ``thread_meta`` rows (values as canonical JSON,
    so that ``1`` and ``"1"`` differ, as in the embedded index)."""
    sql = (
        "INSERT INTO thread_meta (thread_id, key, value) SELECT %s, %s, %s"
        f"{f' WHERE {_FENCE}' if guard else ''} "
        "ON CONFLICT (thread_id, key) DO UPDATE SET value = EXCLUDED.value"
    )
    return [
        (sql, (thread_id, _text(str(key)), codec.canonical(value).decode(), *guard))
        for key, value in metadata.items()
    ]


def _thread_ops(
    thread_id: str, fields: dict[str, Any], guard: tuple[Any, ...]
) -> list[tuple[str, tuple[Any, ...]]]:
    fields = dict(fields)
    title_if_empty = fields.pop("title_if_empty", None)
    fence = f" AND {_FENCE}" if guard else ""
    ops: list[tuple[str, tuple[Any, ...]]] = []
    if fields:
        sets = ", ".join(f"{name} = %s" for name in fields)
        ops.append(
            (
                f"UPDATE threads SET {sets} WHERE thread_id = %s{fence}",
                (*(_text(v) for v in fields.values()), thread_id, *guard),
            )
        )
    if title_if_empty:
        ops.append(
            (
                f"UPDATE threads SET title = %s WHERE thread_id = %s AND title IS NULL{fence}",
                (_text(title_if_empty), thread_id, *guard),
            )
        )
    return ops
