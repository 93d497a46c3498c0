"""The store's tables beside the log: the catalog, snapshots, the mailbox and credentials.

`Tables` is a base class of `PostgresStore` holding the capabilities that are plain queries
over their own tables (kept apart so that the facade's module keeps to wiring, lifecycle and
the append path):

* `Catalog`: ``threads``, ``turns``, ``tool_calls`` and ``memories`` rows, which the commit
  that adds a thread's records updates in the same transaction (`projections`), so they are
  never behind the log: no catch-up, no rebuild needed.
* `Snapshots`: one row per thread, kept only when its anchor record (``ord``, ``hash``) is in
  the log, and handed out only while it still is.
* `Mailbox`: commands for a thread's live session, one row each, keyed by a time-ordered id;
  a row that no longer parses as a command is logged and set aside (never returned).
* `Credentials`: the service's token digests, in insertion order; the unique constraints on
  the token id and the digest refuse a taken one (the error names which).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import orjson
import psycopg

from threadlog._clock import new_id_after
from threadlog.errors import ThreadNotFound, UsageError
from threadlog.model import codec
from threadlog.model.commands import command_from_data
from threadlog.model.ids import is_uuid
from threadlog.model.memory import MemoryFact, shared_facts
from threadlog.store._credentials import check_credential
from threadlog.store.embedded.schema import THREAD_COLUMNS, IndexedThread
from threadlog.store.protocol import Credential, MailboxMessage

if TYPE_CHECKING:
    from collections.abc import Callable
    from contextlib import AbstractContextManager

    from threadlog.model.commands import Command

__all__ = ["Tables"]

log = logging.getLogger("threadlog.store")

_COLUMNS = ", ".join(
    "'' AS path" if c == "path" else "NULL AS damage" if c == "damage" else c
    for c in THREAD_COLUMNS
)


class Tables:
    """Catalog, snapshots, mailbox, credentials (module docstring)."""

    def _conn(self) -> AbstractContextManager[psycopg.Connection[Any]]:
        raise NotImplementedError

    def _check_open(self) -> None:
        raise NotImplementedError

    if TYPE_CHECKING:

        def exists(self, thread_id: str) -> bool: ...

    # -- Catalog ---------------------------------------------------------------------------

    def threads(
        self,
        *,
        principal: str | None = None,
        limit: int | None = None,
        archived: bool | None = False,
        metadata: dict[str, Any] | None = None,
    ) -> list[IndexedThread]:
        """Threads, most recently active first: not archived by default (``archived=True``:
        only those, None: all); ``metadata``: those whose ``metadata`` setting has each of
        these keys with that value (`Catalog.threads`)."""
        sql = f"SELECT {_COLUMNS} FROM threads"
        where: list[str] = []
        args: list[Any] = []
        if principal is not None:
            where.append("principal = %s")
            args.append(principal)
        if archived is not None:
            where.append("status = 'archived'" if archived else "status <> 'archived'")
        for key, value in (metadata or {}).items():
            where.append(
                "thread_id IN (SELECT thread_id FROM thread_meta WHERE key = %s AND value = %s)"
            )
            args.extend((str(key), codec.canonical(value).decode()))
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += (
            " ORDER BY active_minute DESC NULLS LAST, last_ts DESC NULLS LAST, thread_id DESC"
            " LIMIT %s"
        )
        args.append(limit)
        with self._conn() as conn:
            rows = conn.execute(sql, args).fetchall()
        return [_thread_row(row) for row in rows]

    def thread_info(self, thread_id: str) -> IndexedThread:
        """One thread's row; raises `ThreadNotFound`."""
        if is_uuid(thread_id):
            with self._conn() as conn:
                row = conn.execute(
                    f"SELECT {_COLUMNS} FROM threads WHERE thread_id = %s", (thread_id,)
                ).fetchone()
            if row is not None:
                return _thread_row(row)
        raise ThreadNotFound(thread_id)

    def turns(self, thread_id: str) -> list[dict[str, Any]]:
        """The thread's turns, in order."""
        return self._dicts(
            "SELECT turn_id, status, started_ord, ended_ord, started_at, ended_at, input "
            "FROM turns WHERE thread_id = %s ORDER BY started_ord",
            (thread_id,),
        )

    def tool_calls(self, thread_id: str) -> list[dict[str, Any]]:
        """The thread's tool calls, in order."""
        return self._dicts(
            "SELECT call_id, turn_id, tool, side_effect, status, proposed_ord, last_ord "
            "FROM tool_calls WHERE thread_id = %s ORDER BY proposed_ord",
            (thread_id,),
        )

    def memories(
        self, *, principal: str | None = None, include_revoked: bool = False
    ) -> list[dict[str, Any]]:
        """Remembered facts of every thread, oldest first."""
        sql = (
            "SELECT m.memory_id, m.thread_id, t.principal, m.fact, m.scope, m.key, "
            "m.source_event, m.written_at, m.expires_at, m.project, m.revoked "
            "FROM memories m JOIN threads t USING (thread_id)"
        )
        where, args = [], []
        if principal is not None:
            where.append("t.principal = %s")
            args.append(principal)
        if not include_revoked:
            where.append("m.revoked = 0")
        if where:
            sql += " WHERE " + " AND ".join(where)
        return self._dicts(sql + " ORDER BY m.written_at, m.memory_id", args)

    def shared_memories(self, principal: str, project: str | None = None) -> list[MemoryFact]:
        """Live facts other threads of ``principal`` may be offered (`Catalog`)."""
        return shared_facts(self.memories(principal=principal), principal, project)

    def _dicts(self, sql: str, args: Any) -> list[dict[str, Any]]:
        with self._conn() as conn:
            cur = conn.execute(sql, args)
            names = [d.name for d in cur.description or ()]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    # -- Maintenance: little to do, the projections commit with the log -----------------------

    @property
    def problems(self) -> list[dict[str, Any]]:
        """What the open found and skipped: nothing (a transaction is never half written)."""
        return []

    def rebuild(self, *, progress: Callable[[int], None] | None = None) -> int:
        """Nothing to rebuild: the projections are written in the transactions that add the
        records. Returns 0."""
        return 0

    def missing_threads(self) -> list[str]:
        """Threads whose log is gone: none (the log and the catalog live in one database)."""
        return []

    def path_of(self, thread_id: str) -> str:
        """Where the thread's log is: ``events`` rows of the store's database and schema."""
        return f"{self!r}, table events, thread_id {thread_id}"

    def durable_end(self, thread_id: str) -> int | None:
        """None: readers see committed rows only; there is no byte offset to stop at."""
        return None

    # -- Snapshots -------------------------------------------------------------------------

    def save_snapshot(
        self, thread_id: str, payload: bytes, *, ord: int, hash: str, version: str
    ) -> bool:
        """Keep ``payload`` as the state after record ``ord`` if that record has ``hash``."""
        if not is_uuid(thread_id):
            return False
        with self._conn() as conn:
            cur = conn.execute(
                "INSERT INTO snapshots (thread_id, ord, hash, version, payload) "
                "SELECT %s, %s, %s, %s, %s WHERE EXISTS (SELECT 1 FROM events "
                "WHERE thread_id = %s AND ord = %s AND hash = %s) "
                "ON CONFLICT (thread_id) DO UPDATE SET ord = EXCLUDED.ord, hash = EXCLUDED.hash, "
                "version = EXCLUDED.version, payload = EXCLUDED.payload",
                (thread_id, ord, hash, version, payload, thread_id, ord, hash),
            )
            return cur.rowcount == 1

    def load_snapshot(self, thread_id: str, version: str) -> tuple[int, bytes] | None:
        """``(ord, payload)`` if the snapshot is of ``version`` and its anchor is in the log."""
        if not is_uuid(thread_id):
            return None
        with self._conn() as conn:
            row = conn.execute(
                "SELECT s.ord, s.payload FROM snapshots s JOIN events e "
                "ON e.thread_id = s.thread_id AND e.ord = s.ord AND e.hash = s.hash "
                "WHERE s.thread_id = %s AND s.version = %s",
                (thread_id, version),
            ).fetchone()
        return (int(row[0]), bytes(row[1])) if row else None

    # -- Mailbox ---------------------------------------------------------------------------

    def post(self, thread_id: str, command: Command) -> str:
        """Durably leave ``command`` for the thread; its message id."""
        command = command_from_data(command.to_data())  # ill-typed values are refused here
        if not is_uuid(thread_id):
            raise UsageError(f"not a thread id: {thread_id!r:.80}")
        if not self.exists(thread_id):
            raise ThreadNotFound(thread_id)
        body = orjson.dumps(command.to_data(), option=orjson.OPT_SORT_KEYS)
        with self._conn() as conn:
            for _ in range(5):
                last = conn.execute(
                    "SELECT max(id) FROM mailbox WHERE thread_id = %s", (thread_id,)
                ).fetchone()
                message_id = new_id_after(last[0] if last else None)
                cur = conn.execute(
                    "INSERT INTO mailbox (thread_id, id, command) VALUES (%s, %s, %s) "
                    "ON CONFLICT DO NOTHING",
                    (thread_id, message_id, body),
                )
                if cur.rowcount == 1:
                    return message_id
        raise UsageError(f"thread {thread_id}: cannot find a free mailbox message id")

    def pending(self, thread_id: str) -> list[MailboxMessage]:
        """The thread's messages not done yet, oldest first; malformed ones are set aside."""
        if not is_uuid(thread_id):
            raise UsageError(f"not a thread id: {thread_id!r:.80}")
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT id, command FROM mailbox WHERE thread_id = %s ORDER BY id", (thread_id,)
            ).fetchall()
        out = []
        for message_id, body in rows:
            try:
                command = command_from_data(orjson.loads(bytes(body)))
            except (UsageError, orjson.JSONDecodeError) as exc:
                log.warning(
                    "thread %s: mailbox message %s set aside: %s", thread_id, message_id, exc
                )
                continue
            out.append(MailboxMessage(id=str(message_id), thread_id=thread_id, command=command))
        return out

    def addressed(self) -> set[str]:
        """See `threadlog.store.protocol.MailboxIndex.addressed` (one query)."""
        with self._conn() as conn:
            rows = conn.execute("SELECT DISTINCT thread_id FROM mailbox").fetchall()
        return {row[0] for row in rows}

    def done(self, message: MailboxMessage) -> None:
        """Remove a handled message (idempotent)."""
        with self._conn() as conn:
            conn.execute(
                "DELETE FROM mailbox WHERE thread_id = %s AND id = %s",
                (message.thread_id, message.id),
            )

    # -- Credentials -----------------------------------------------------------------------

    def add_credential(self, credential: Credential) -> None:
        """Keep ``credential``; `UsageError` if its token id or digest is taken."""
        check_credential(credential)
        self._check_open()
        error: UsageError | None = None
        with self._conn() as conn:
            try:
                conn.execute(
                    "INSERT INTO credentials (token_id, principal, digest, created_at) "
                    "VALUES (%s, %s, %s, %s)",
                    (
                        credential.token_id,
                        credential.principal,
                        credential.digest,
                        credential.created_at,
                    ),
                )
            except psycopg.errors.UniqueViolation as exc:
                taken = "token_id" in (exc.diag.constraint_name or "")
                error = UsageError(
                    f"a credential with token id {credential.token_id} exists"
                    if taken
                    else "a credential with this digest exists (the same token)"
                )
        if error is not None:
            raise error

    def credentials(self) -> list[Credential]:
        """Every stored credential, oldest first."""
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT token_id, principal, digest, created_at FROM credentials ORDER BY seq"
            ).fetchall()
        return [Credential(token_id=t, principal=p, digest=d, created_at=c) for t, p, d, c in rows]

    def remove_credential(self, token_id: str) -> bool:
        """Forget the credential ``token_id``; whether there was one."""
        self._check_open()
        with self._conn() as conn:
            cur = conn.execute("DELETE FROM credentials WHERE token_id = %s", (token_id,))
            return cur.rowcount > 0


def _thread_row(row: Any) -> IndexedThread:
    values = list(row)
    for i in (7, 10, 11, 12):  # last_ord, bytes, turns, tool_calls: bigint → int
        values[i] = int(values[i])
    return IndexedThread(*values)
