"""LISTEN/NOTIFY as the wake-up, the events table as the truth.

Theory of operation
-------------------
Every commit that adds records to a thread is followed by one notification on the store's
channel (`threadlog.store.postgres.schema.Target.channel`) saying
``"<thread> <first ord> <last ord> <origin>"``, which PostgreSQL delivers to every listening
session once. A new thread, a fork or an import sends it in its own transaction (delivered
once, and only if, that commits). The group commit's are sent by a `Sender` once each commit
is over, in order, several commits' at once when they come faster than it sends: a NOTIFY
takes a database-wide lock that its transaction holds until its commit is flushed, so in the
commits themselves it would make the committer's concurrent transactions wait for each
other's WAL flush instead of sharing one. A `Notifier` is one thread with one connection of
its own that LISTENs and hands each notification to ``on_notify``.

A notification only ever says *look*: whoever hears one reads the table, after the ordinal it
already has, so a duplicated or out-of-date notification costs one cheap read, and a **lost**
one (the listening connection dropped, the process was paused) costs latency only: every
reader also reads on a timer (`Store.follow`'s ``interval``, the service's poll). When the
listening connection fails the notifier reconnects (backing off up to a few seconds) and,
because notifications may have been missed meanwhile, calls ``on_gap`` so that every waiter
reads again at once.

The notifier is started only when something waits for other processes' records (a
`Store.follow`, a watched thread: `PostgresStore.watch`), so a worker that only writes holds
no listening connection.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

import psycopg

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["LINGER", "NOTIFY", "Notifier", "Sender", "parse_payload"]

log = logging.getLogger("threadlog.store")

LINGER = 0.005
"""How long a `Sender` lets notifications wait for the next commits' (seconds)."""

NOTIFY = "SELECT count(pg_notify(%s, u.p)) FROM unnest(%b::text[]) AS u(p)"
"""Notifications in one statement (its own transaction: it writes no WAL, so its commit waits
for no flush); parameters: the channel and the payloads, in order."""


def parse_payload(payload: str) -> tuple[str, int, int, str] | None:
    """``(thread, first ord, last ord, origin)`` of a notification, or None if malformed."""
    parts = payload.split(" ")
    if len(parts) != 4:
        return None
    try:
        return parts[0], int(parts[1]), int(parts[2]), parts[3]
    except ValueError:
        return None


class Notifier:
    """The listening thread (module docstring)."""

    def __init__(
        self,
        connect: Callable[[], psycopg.Connection[Any]],
        channel: str,
        on_notify: Callable[[str, int, int, str], None],
        on_gap: Callable[[], None],
        *,
        timeout: float = 0.5,
    ) -> None:
        self._connect = connect
        self._channel = channel
        self._on_notify = on_notify
        self._on_gap = on_gap
        self._timeout = timeout
        self._stop = threading.Event()
        self._ready = threading.Event()
        self.heard = 0
        """Notifications received (tests read it)."""
        self._thread = threading.Thread(target=self._run, name="threadlog-pg-listen", daemon=True)
        self._thread.start()

    def wait_ready(self, timeout: float) -> bool:
        """Wait until the first LISTEN is in place (for tests and ``follow``)."""
        return self._ready.wait(timeout)

    def stop(self) -> None:
        """Stop listening and close the connection."""
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        backoff = 0.1
        while not self._stop.is_set():
            try:
                with self._connect() as conn:
                    conn.execute(f'LISTEN "{self._channel}"')
                    if self._ready.is_set():
                        self._on_gap()  # what came while we were away is unknown
                    self._ready.set()
                    backoff = 0.1
                    while not self._stop.is_set():
                        for note in conn.notifies(timeout=self._timeout):
                            self.heard += 1
                            parsed = parse_payload(note.payload)
                            if parsed is not None:
                                try:
                                    self._on_notify(*parsed)
                                except Exception:
                                    log.exception("a notification handler failed")
                            if self._stop.is_set():
                                break
            except psycopg.Error as exc:
                if self._stop.is_set():
                    return
                log.warning("the store's LISTEN connection failed (%s); reconnecting", exc)
                self._ready.set()  # nobody waits forever for a database that is away
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)


class Sender:
    """The thread that sends the group commit's notifications (module docstring), started at
    the first; its connection is its own.

    Args:
        connect: a new connection (put in autocommit: each send is a transaction of its own).
        channel: the channel.
        linger: how long the sender lets a commit's notifications wait for the next commits'
            (seconds), so that one statement sends several commits' when they come fast.
    """

    def __init__(
        self,
        connect: Callable[[], psycopg.Connection[Any]],
        channel: str,
        *,
        linger: float = LINGER,
    ) -> None:
        self._connect = connect
        self._channel = channel
        self._linger = linger
        self._queue: list[str] = []
        self._cond = threading.Condition(threading.Lock())
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._conn: psycopg.Connection[Any] | None = None
        self.sent = 0
        """Notifications sent so far (tests read it)."""

    def send(self, payloads: list[str]) -> None:
        """Queue the notifications of a commit that is over (after those queued before)."""
        with self._cond:
            if self._stopping:
                return
            idle = not self._queue
            self._queue.extend(payloads)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="threadlog-pg-notify", daemon=True
                )
                self._thread.start()
            if idle:
                self._cond.notify()  # (while it lingers, more join without waking it)

    def stop(self) -> None:
        """Send what is queued, then stop and close the connection."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
            thread = self._thread
        if thread is not None:
            thread.join()

    def _run(self) -> None:
        from threadlog.store.postgres.arrays import TextArray, register

        while True:
            with self._cond:
                while not self._queue and not self._stopping:
                    self._cond.wait()
                if not self._queue:
                    break
                if self._linger > 0 and not self._stopping:
                    self._cond.wait(self._linger)  # the next commits' join these
                payloads, self._queue = self._queue, []
            try:
                conn = self._conn
                if conn is None or conn.closed or conn.broken:
                    conn = self._conn = self._connect()
                    conn.autocommit = True
                    register(conn)
                conn.execute(NOTIFY, (self._channel, TextArray.of(payloads)))
                self.sent += len(payloads)
            except psycopg.Error as exc:  # the records are committed: readers will poll
                log.warning("%d notification(s) of commits were lost: %s", len(payloads), exc)
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None
