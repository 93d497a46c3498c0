"""Single-writer leases with fencing tokens, on the database's clock.

Theory of operation
-------------------
A writer may append to a thread only while it holds the thread's row in ``leases``:
``(thread_id, holder, token, expires_at)``. Taking it (`LeaseKeeper.take`) is one statement
that inserts the row, or takes over one whose ``expires_at`` has passed, with a **fresh token**
from the ``lease_tokens`` sequence: tokens only ever grow, so a later holder always holds a
larger one. Expiry is computed and compared with the database's ``now()``, never a client's
clock (RELIABILITY M6): a worker with a skewed clock neither steals nor keeps a lease wrongly.

A background thread (`LeaseKeeper.start`) renews every lease this store holds each
``renew_interval`` seconds (``expires_at = now() + lease_duration``, for the rows whose holder
is still this store). A lease the renewal no longer finds was taken over: the store hears of it
through ``on_lost`` and refuses the thread's appends from then on.

The renewal is an optimisation. **Safety comes from fencing**: every group commit locks the
lease rows of the threads it writes (``SELECT … FOR UPDATE``) and writes only the records whose
writer's token is still the row's token, in the same transaction as the inserts (the
committer, `threadlog.store.postgres.committer`). A worker paused past its lease (SIGSTOP, a
GC pause, a partition) wakes up with a stale token and the database refuses its appends, even
if it never noticed that it lost the lease. A takeover waits for the row lock, so it cannot
slip between a commit's check and its insert; a commit that was paused *holding* that lock is
ended by the server after ``idle_in_transaction_session_timeout`` (set on the committer's
session), so a paused worker cannot block a takeover for longer than that.
``PRIMARY KEY (thread_id, ord)`` is the last line of defence.

A clean `release` deletes the row (the next writer need not wait out the expiry); so does
`close` for every lease the store holds.

*A crashed holder's leases are taken at once*, without waiting out their expiry: every store
that holds leases keeps a session-level advisory lock keyed by its holder id
(``pg_advisory_lock(ns, hashtext(holder))``) on a connection of its own, taken before its
first lease. The server drops it when that session ends (the process died, its connection
broke). A would-be taker that finds a lease held tries that lock: if it gets it, the holder
is gone, and the lease is taken over (with a new token) on the spot. This is a liveness
shortcut only: a holder whose connection broke while it lives on is fenced off like any
other stale holder.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

import psycopg

from threadlog.errors import LeaseHeld, StorageError, ThreadNotFound

if TYPE_CHECKING:
    from collections.abc import Callable
    from contextlib import AbstractContextManager
    from typing import Any

__all__ = ["LeaseKeeper"]

log = logging.getLogger("threadlog.store")

_TAKE = """
INSERT INTO leases (thread_id, holder, token, expires_at)
SELECT %(thread)s, %(holder)s, nextval('lease_tokens'), now() + %(ttl)s * interval '1 second'
WHERE EXISTS (SELECT 1 FROM threads WHERE thread_id = %(thread)s)
ON CONFLICT (thread_id) DO UPDATE
    SET holder = EXCLUDED.holder, token = EXCLUDED.token, expires_at = EXCLUDED.expires_at
    WHERE leases.expires_at < now() OR leases.holder = EXCLUDED.holder
RETURNING token
"""
_STEAL = """
UPDATE leases SET holder = %(holder)s, token = nextval('lease_tokens'),
    expires_at = now() + %(ttl)s * interval '1 second'
WHERE thread_id = %(thread)s AND holder = %(dead)s
RETURNING token
"""
_PRESENCE = 0x74686C  # the advisory-lock namespace of holders' presence locks ("thl")


class LeaseKeeper:
    """This store's leases: take, renew in the background, release (module docstring).

    Args:
        connection: a pooled connection (one at a time, briefly), its errors translated.
        holder: this store's unique holder id (written in the lease rows).
        duration: how long a lease lasts without renewal (seconds).
        renew_interval: how often held leases are renewed (seconds, below ``duration``).
        presence: a new connection of its own, for the holder's presence lock.
        on_lost: called with ``(thread_id, holder now or None)`` for a lease found taken over.
    """

    def __init__(
        self,
        connection: Callable[[], AbstractContextManager[psycopg.Connection[Any]]],
        holder: str,
        *,
        duration: float,
        renew_interval: float,
        on_lost: Callable[[str, str | None], None],
        presence: Callable[[], psycopg.Connection[Any]],
    ) -> None:
        self._connection = connection
        self._connect_presence = presence
        self._presence: psycopg.Connection[Any] | None = None
        self.holder = holder
        self.duration = duration
        self.renew_interval = renew_interval
        self._on_lost = on_lost
        self._held: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def held(self) -> dict[str, int]:
        """``thread → token`` of the leases this store believes it holds."""
        with self._lock:
            return dict(self._held)

    def take(self, thread_id: str) -> int:
        """Take the thread's lease; its fencing token. Raises `LeaseHeld` (another live
        holder), `ThreadNotFound`."""
        self._ensure_presence()
        with self._connection() as conn:
            row = conn.execute(
                _TAKE, {"thread": thread_id, "holder": self.holder, "ttl": self.duration}
            ).fetchone()
            if row is None:
                other = conn.execute(
                    "SELECT holder FROM leases WHERE thread_id = %s", (thread_id,)
                ).fetchone()
                if other is None:
                    exists = conn.execute(
                        "SELECT 1 FROM threads WHERE thread_id = %s", (thread_id,)
                    ).fetchone()
                    if exists is None:
                        raise ThreadNotFound(thread_id)
                    return self.take(thread_id)  # released between the two statements
                holder = str(other[0])
                row = self._take_from_the_dead(conn, thread_id, holder)
                if row is None:
                    raise LeaseHeld(thread_id, holder)
        token = int(row[0])
        with self._lock:
            self._held[thread_id] = token
        self._ensure_renewer()
        return token

    def _take_from_the_dead(
        self, conn: psycopg.Connection[Any], thread_id: str, holder: str
    ) -> tuple[Any, ...] | None:
        """Take the lease over if its holder's presence lock is free (module docstring)."""
        got = conn.execute(
            "SELECT pg_try_advisory_lock(%s, hashtext(%s))", (_PRESENCE, holder)
        ).fetchone()
        if not got or not got[0]:
            return None  # alive
        conn.execute("SELECT pg_advisory_unlock(%s, hashtext(%s))", (_PRESENCE, holder))
        log.info("thread %s: its lease holder %s is gone; taking the lease over", thread_id, holder)
        return conn.execute(
            _STEAL,
            {"thread": thread_id, "holder": self.holder, "ttl": self.duration, "dead": holder},
        ).fetchone()

    def _ensure_presence(self) -> None:
        """Hold this store's presence lock on a connection of its own (module docstring)."""
        with self._lock:
            conn = self._presence
            if conn is not None and not conn.closed and not conn.broken:
                return
            if conn is not None:
                conn.close()
            self._presence = None
            try:
                conn = self._connect_presence()
            except psycopg.Error as exc:
                raise StorageError(f"cannot hold this store's presence lock: {exc}") from exc
            try:
                conn.execute("SELECT pg_advisory_lock(%s, hashtext(%s))", (_PRESENCE, self.holder))
            except BaseException as exc:
                conn.close()
                if isinstance(exc, psycopg.Error):
                    raise StorageError(f"cannot hold this store's presence lock: {exc}") from exc
                raise
            self._presence = conn

    def release(self, thread_id: str) -> None:
        """Give the lease up (delete its row, if it is still ours)."""
        with self._lock:
            token = self._held.pop(thread_id, None)
        if token is None:
            return
        with self._connection() as conn:
            conn.execute(
                "DELETE FROM leases WHERE thread_id = %s AND token = %s", (thread_id, token)
            )

    def forget(self, thread_id: str) -> None:
        """Stop renewing a lease found lost (its row is another holder's now)."""
        with self._lock:
            self._held.pop(thread_id, None)

    def release_all(self) -> None:
        """Give up every lease this store holds (at close)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._lock:
            held, self._held = self._held, {}
            presence, self._presence = self._presence, None
        if presence is not None:
            presence.close()
        if held:
            with self._connection() as conn:
                conn.execute(
                    "DELETE FROM leases WHERE holder = %s AND thread_id = ANY(%s)",
                    (self.holder, list(held)),
                )

    def renew(self) -> None:
        """Extend every held lease now; report the ones taken over (`on_lost`)."""
        held = self.held()
        if not held:
            return
        self._ensure_presence()  # a presence connection that broke is made again
        with self._connection() as conn:
            # The rows are locked in thread order, as a group commit locks them
            # (`projections.FENCED_COMMIT`): in any other order the two could deadlock, and
            # PostgreSQL would abort one of them, perhaps the commit.
            rows = conn.execute(
                "WITH mine AS MATERIALIZED (SELECT thread_id FROM leases "
                "WHERE holder = %s AND thread_id = ANY(%s) ORDER BY thread_id FOR UPDATE) "
                "UPDATE leases l SET expires_at = now() + %s * interval '1 second' "
                "FROM mine WHERE l.thread_id = mine.thread_id RETURNING l.thread_id, l.token",
                (self.holder, list(held), self.duration),
            ).fetchall()
            kept = {str(t): int(k) for t, k in rows}
            lost = [t for t, k in held.items() if kept.get(t) != k]
            holders: dict[str, str] = {}
            if lost:
                found = conn.execute(
                    "SELECT thread_id, holder FROM leases WHERE thread_id = ANY(%s)", (lost,)
                ).fetchall()
                holders = {str(t): str(h) for t, h in found}
        for thread_id in lost:
            with self._lock:
                if self._held.get(thread_id) != held[thread_id]:
                    continue  # released or taken again meanwhile
                del self._held[thread_id]
            self._on_lost(thread_id, holders.get(thread_id))

    def _ensure_renewer(self) -> None:
        with self._lock:
            if self._thread is not None or self._stop.is_set():
                return
            self._thread = threading.Thread(
                target=self._run, name="threadlog-pg-leases", daemon=True
            )
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.renew_interval):
            try:
                self.renew()
            except Exception as exc:  # the database is away: the fence keeps us safe
                log.warning("cannot renew the store's leases: %s", exc)
