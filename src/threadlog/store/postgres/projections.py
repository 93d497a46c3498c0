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

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    import psycopg

    from threadlog.model.envelope import Record

__all__ = [
    "FENCED_INSERT",
    "Row",
    "apply_projections",
    "event_columns",
    "insert_records",
    "notify_payload",
]

Row = tuple["Record", bytes, "int | None"]
"""``(record, its canonical line, fencing token or None)``: one row of ``events``."""

_TABLES = {
    "turn": ("turns", "turn_id"),
    "tool_call": ("tool_calls", "call_id"),
    "memory": ("memories", "memory_id"),
}


def notify_payload(thread_id: str, first: int, last: int, origin: str) -> str:
    """What a notification says: ``"<thread> <first ord> <last ord> <origin store>"``."""
    return f"{thread_id} {first} {last} {origin}"


_COLUMNS = (
    "thread_id, ord, id, writer, parent, ts, type, v, prev, hash, line, fence",
    "%b::text[], %b::bigint[], %b::text[], %b::text[], %b::text[], %b::text[], %b::text[], "
    "%b::int[], %b::text[], %b::text[], %b::bytea[], %b::bigint[]",
)

FENCED_INSERT = f"""
WITH locked AS (
    SELECT thread_id, token, holder FROM leases
    WHERE thread_id = ANY(%s::text[]) ORDER BY thread_id FOR UPDATE
), inserted AS (
    INSERT INTO events ({_COLUMNS[0]})
    SELECT u.* FROM unnest({_COLUMNS[1]}) AS u({_COLUMNS[0]})
    JOIN locked l ON l.thread_id = u.thread_id AND l.token = u.fence
    RETURNING thread_id
)
SELECT l.thread_id, l.token, l.holder, coalesce(n.rows, 0)
FROM locked l
LEFT JOIN (SELECT thread_id, count(*) AS rows FROM inserted GROUP BY thread_id) n USING (thread_id)
"""
"""The fencing check and the insert in one statement (`threadlog.store.postgres.committer`):
the batch's lease rows are locked until COMMIT, and only the rows whose ``fence`` is their
thread's current token are inserted; the result says, per thread, its token, holder and how
many rows went in. Parameters: the thread ids, then `event_columns` of the rows."""


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
    fenced: bool = False,
) -> None:
    """Update the projections of records just inserted, and notify ``channel`` of each
    thread's new ordinals; in the caller's transaction (a few statements whatever the batch).

    ``fenced``: every statement applies only if the thread's fencing token (the rows'
    ``fence``) is still its lease's, like `FENCED_INSERT`'s rows, so the committer can send
    them together with that insert and the COMMIT, in one round trip."""
    ops: list[tuple[str, tuple[Any, ...]]] = []  # in record order: upserts of one row stack
    updates: list[list[Any]] = [[] for _ in range(8)]
    notifies: list[list[Any]] = [[], [], []]
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
                ops.append((sql, (thread_id, change.key, *change.fields.values(), *guard)))
        last = rows[-1][0]
        for column, value in zip(
            updates,
            (thread_id, last.ord, last.hash, last.ts, size, new_turns, new_calls, token),
            strict=True,
        ):
            column.append(value)
        for column, value in zip(
            notifies,
            (notify_payload(thread_id, rows[0][0].ord, last.ord, origin), thread_id, token),
            strict=True,
        ):
            column.append(value)
    i = 0
    while i < len(ops):  # consecutive statements of one shape go as one executemany
        j = i
        while j < len(ops) and ops[j][0] == ops[i][0]:
            j += 1
        cur.executemany(ops[i][0], [params for _, params in ops[i:j]])
        i = j
    current = (
        "(u.tok IS NULL OR EXISTS (SELECT 1 FROM leases f WHERE f.thread_id = u.id "
        "AND f.token = u.tok))"
    )
    cur.execute(
        "UPDATE threads t SET last_ord = u.o, last_hash = u.h, last_ts = u.ts, "
        "bytes = t.bytes + u.b, turns = t.turns + u.nt, tool_calls = t.tool_calls + u.nc "
        "FROM unnest(%b::text[], %b::bigint[], %b::text[], %b::text[], %b::bigint[], "
        "%b::int[], %b::int[], %b::bigint[]) AS u(id, o, h, ts, b, nt, nc, tok) "
        f"WHERE t.thread_id = u.id AND {current}",
        updates,
    )
    cur.execute(
        "SELECT pg_notify(%s, u.p) FROM unnest(%b::text[], %b::text[], %b::bigint[]) "
        f"AS u(p, id, tok) WHERE {current}",
        (channel, *notifies),
    )


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
        (sql, (thread_id, str(key), codec.canonical(value).decode(), *guard))
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
                (*fields.values(), thread_id, *guard),
            )
        )
    if title_if_empty:
        ops.append(
            (
                f"UPDATE threads SET title = %s WHERE thread_id = %s AND title IS NULL{fence}",
                (title_if_empty, thread_id, *guard),
            )
        )
    return ops
