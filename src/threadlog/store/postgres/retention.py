"""The PostgreSQL store's `Retention`: archive a thread, or delete it for good.

*Archive* is a durable ``thread.archived`` record, appended like any other
(`threadlog.store.named.archive`, shared by every backend); its projection sets the thread's
``status`` to ``archived``, which `Catalog.threads` leaves out by default.

*Delete* takes the thread's lease first (`LeaseHeld` while another live writer holds it: a
thread is never deleted under a session that writes it), commits what this store has queued,
then removes, in one transaction, every row of the thread (its records, projections,
snapshots, mailbox, metadata and lease) and records its id in ``deleted_threads``, so that
`Store.create_thread` never hands it out again (`ThreadExists`). The transaction first locks
the lease row and checks the token is still this store's: a lease that passed to another
holder in the meantime refuses the delete (`LeaseLost`) and removes nothing. Artifacts are
shared by hash and stay.

A base class of `PostgresStore`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from threadlog.errors import LeaseLost, UsageError
from threadlog.model.ids import is_uuid
from threadlog.store.named import archive

if TYPE_CHECKING:
    import threading
    from contextlib import AbstractContextManager

    import psycopg

    from threadlog.store.postgres.leases import LeaseKeeper
    from threadlog.store.postgres.writer import Writer

__all__ = ["Retentions"]

_TABLES = (
    "events",
    "turns",
    "tool_calls",
    "memories",
    "snapshots",
    "checkpoints",
    "mailbox",
    "thread_meta",
    "threads",
)
"""The tables that hold rows of a thread (``leases`` is removed last, after the check)."""


class Retentions:
    """`threadlog.store.protocol.Retention` on PostgreSQL (module docstring)."""

    if TYPE_CHECKING:
        _writers: dict[str, Writer]
        _writers_lock: threading.Lock
        _leases: LeaseKeeper

        def _check_open(self) -> None: ...

        def _conn(self) -> AbstractContextManager[psycopg.Connection[Any]]: ...

        def _writer(self, thread_id: str) -> Writer: ...

        def exists(self, thread_id: str) -> bool: ...

        def flush(self) -> None: ...

    def deleted(self, thread_id: str) -> bool:
        """Whether ``thread_id`` was deleted (its id stays taken)."""
        if not is_uuid(thread_id):
            return False
        with self._conn() as conn:
            row = conn.execute(
                "SELECT 1 FROM deleted_threads WHERE thread_id = %s", (thread_id,)
            ).fetchone()
        return row is not None

    def delete_thread(self, thread_id: str) -> bool:
        """See `threadlog.store.protocol.Retention.delete_thread`."""
        self._check_open()
        if not is_uuid(thread_id):
            raise UsageError(f"not a thread id: {thread_id!r:.80}")
        if not self.exists(thread_id):
            return False
        writer = self._writer(thread_id)  # the lease: LeaseHeld while another writer has it
        self.flush()
        with self._conn() as conn, conn.transaction():
            row = conn.execute(
                "SELECT token, holder FROM leases WHERE thread_id = %s FOR UPDATE", (thread_id,)
            ).fetchone()
            if row is None or int(row[0]) != writer.token:
                raise LeaseLost(thread_id, writer.token, str(row[1]) if row else None)
            for table in _TABLES:
                conn.execute(f"DELETE FROM {table} WHERE thread_id = %s", (thread_id,))
            conn.execute("DELETE FROM leases WHERE thread_id = %s", (thread_id,))
            conn.execute(
                "INSERT INTO deleted_threads (thread_id) VALUES (%s) ON CONFLICT DO NOTHING",
                (thread_id,),
            )
        with self._writers_lock:
            self._writers.pop(thread_id, None)
        self._leases.forget(thread_id)
        return True

    def archive_thread(self, thread_id: str, archived: bool = True) -> bool:
        """See `threadlog.store.protocol.Retention.archive_thread`."""
        self._check_open()
        return archive(self, thread_id, archived)  # type: ignore[arg-type]  # a whole Store
