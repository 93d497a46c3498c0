"""LISTEN/NOTIFY as the wake-up, the events table as the truth.

Theory of operation
-------------------
Every commit that adds records to a thread sends, in the same transaction, one notification
on the store's channel (`threadlog.store.postgres.schema.Target.channel`) saying
``"<thread> <first ord> <last ord> <origin>"``; PostgreSQL delivers it to every listening
session once (and only if) the transaction commits. A `Notifier` is one thread with one
connection of its own that LISTENs and hands each notification to ``on_notify``.

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

__all__ = ["Notifier", "parse_payload"]

log = logging.getLogger("threadlog.store")


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
