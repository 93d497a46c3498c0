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

from threadlog.model.projection import project

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    import psycopg

    from threadlog.model.envelope import Record

__all__ = ["Row", "insert_records", "notify_payload"]

Row = tuple["Record", bytes, "int | None"]
"""``(record, its canonical line, fencing token or None)``: one row of ``events``."""

_INSERT = (
    "INSERT INTO events (thread_id, ord, id, writer, parent, ts, type, v, prev, hash, line, "
    "fence) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
)
_TABLES = {
    "turn": ("turns", "turn_id"),
    "tool_call": ("tool_calls", "call_id"),
    "memory": ("memories", "memory_id"),
}


def notify_payload(thread_id: str, first: int, last: int, origin: str) -> str:
    """What a notification says: ``"<thread> <first ord> <last ord> <origin store>"``."""
    return f"{thread_id} {first} {last} {origin}"


def insert_records(
    cur: psycopg.Cursor[Any],
    by_thread: Mapping[str, Sequence[Row]],
    *,
    channel: str,
    origin: str,
) -> None:
    """Insert each thread's rows (gap-free, continuing its log) and their projections, and
    notify ``channel`` of each thread's new ordinals; in the caller's transaction."""
    cur.executemany(
        _INSERT,
        [
            (
                thread_id,
                r.ord,
                r.id,
                r.thread,
                r.parent,
                r.ts,
                r.type,
                r.v,
                r.prev,
                r.hash,
                line,
                fence,
            )
            for thread_id, rows in by_thread.items()
            for r, line, fence in rows
        ],
    )
    ops: list[tuple[str, tuple[Any, ...]]] = []  # in record order: upserts of one row stack
    thread_updates = []
    notifies = []
    for thread_id, rows in by_thread.items():
        new_turns = new_calls = size = 0
        for record, line, _ in rows:
            size += len(line)
            for change in project(record):
                if change.table == "thread":
                    ops.extend(_thread_ops(thread_id, change.fields))
                    continue
                if change.table == "turn" and "started_ord" in change.fields:
                    new_turns += 1
                if change.table == "tool_call" and change.fields.get("status") == "proposed":
                    new_calls += 1
                table, key = _TABLES[change.table]
                names = ("thread_id", key, *change.fields)
                updates = ", ".join(f"{n} = EXCLUDED.{n}" for n in names[2:])
                sql = (
                    f"INSERT INTO {table} ({', '.join(names)}) "
                    f"VALUES ({', '.join('%s' for _ in names)}) "
                    f"ON CONFLICT (thread_id, {key}) DO UPDATE SET {updates}"
                )
                ops.append((sql, (thread_id, change.key, *change.fields.values())))
        last = rows[-1][0]
        thread_updates.append((last.ord, last.hash, last.ts, size, new_turns, new_calls, thread_id))
        notifies.append((channel, notify_payload(thread_id, rows[0][0].ord, last.ord, origin)))
    i = 0
    while i < len(ops):  # consecutive statements of one shape go as one executemany
        j = i
        while j < len(ops) and ops[j][0] == ops[i][0]:
            j += 1
        cur.executemany(ops[i][0], [params for _, params in ops[i:j]])
        i = j
    cur.executemany(
        "UPDATE threads SET last_ord = %s, last_hash = %s, last_ts = %s, bytes = bytes + %s, "
        "turns = turns + %s, tool_calls = tool_calls + %s WHERE thread_id = %s",
        thread_updates,
    )
    cur.executemany("SELECT pg_notify(%s, %s)", notifies)


def _thread_ops(thread_id: str, fields: dict[str, Any]) -> list[tuple[str, tuple[Any, ...]]]:
    fields = dict(fields)
    title_if_empty = fields.pop("title_if_empty", None)
    ops: list[tuple[str, tuple[Any, ...]]] = []
    if fields:
        sets = ", ".join(f"{name} = %s" for name in fields)
        ops.append(
            (f"UPDATE threads SET {sets} WHERE thread_id = %s", (*fields.values(), thread_id))
        )
    if title_if_empty:
        ops.append(
            (
                "UPDATE threads SET title = %s WHERE thread_id = %s AND title IS NULL",
                (title_if_empty, thread_id),
            )
        )
    return ops
