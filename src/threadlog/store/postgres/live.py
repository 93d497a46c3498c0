"""Live fan-out for `PostgresStore`: listeners, ``follow`` and ``watch``.

`Live` is a base class of the facade: the store's listeners (called by the committer for this
process's commits, and by the LISTEN thread for watched threads' records other processes
commit), `Store.follow` (woken by both, reading the table, and on a timer), and the `Watch`
capability. `threadlog.store.postgres.notify` explains the wake-up; the table is the truth.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

import psycopg

from threadlog.store.postgres.notify import Notifier

if TYPE_CHECKING:
    from collections.abc import Iterator

    from threadlog.errors import StorageError
    from threadlog.model.envelope import Record
    from threadlog.store.postgres.schema import Target
    from threadlog.store.protocol import ErrorListener, Listener

__all__ = ["FOLLOW_PAGE", "Live"]

FOLLOW_PAGE = 1_000
"""Records `Live.follow` reads at a time: following a long thread from its start holds one
page in memory, never the whole log."""

log = logging.getLogger("threadlog.store")


class Live:
    """Listeners, follow, watch (module docstring)."""

    _target: Target
    _origin: str
    _closed: bool
    _kwargs: dict[str, Any]

    def __init__(self) -> None:
        self._listeners: list[Listener] = []
        self._error_listeners: list[ErrorListener] = []
        self._waiters: dict[str, set[threading.Event]] = {}
        self._watched: dict[str, int] = {}
        self._remote_head: dict[str, int] = {}
        self._wait_lock = threading.Lock()
        self._notifier: Notifier | None = None

    if TYPE_CHECKING:

        def read(
            self,
            thread_id: str,
            after: int = 0,
            *,
            limit: int | None = None,
            before: int | None = None,
        ) -> list[Record]: ...

    def follow(self, thread_id: str, after: int = 0, *, interval: float = 0.2) -> Iterator[Record]:
        """`Store.follow`: the records after ``after``, then each new one, from this or any
        other process: woken by NOTIFY, reading the table, and at least every ``interval``
        seconds in case a notification was lost."""
        records = self.read(thread_id, after, limit=FOLLOW_PAGE)  # ThreadNotFound first
        wake = threading.Event()
        self._start_notifier()
        with self._wait_lock:
            self._waiters.setdefault(thread_id, set()).add(wake)
        try:
            while True:
                for record in records:
                    after = record.ord
                    yield record
                if len(records) < FOLLOW_PAGE:  # caught up: wait for more
                    wake.wait(interval)
                    wake.clear()
                records = self.read(thread_id, after, limit=FOLLOW_PAGE)
        finally:
            with self._wait_lock:
                waiting = self._waiters.get(thread_id)
                if waiting is not None:
                    waiting.discard(wake)
                    if not waiting:
                        del self._waiters[thread_id]

    def watch(self, thread_id: str) -> None:
        """Deliver the thread's records that *other* processes commit to this store's
        listeners too (as they are notified; a lost notification is made up by the
        listener's own reads). Counted: each `watch` needs an `unwatch`. Never blocks."""
        self._start_notifier(wait=False)
        with self._wait_lock:
            self._watched[thread_id] = self._watched.get(thread_id, 0) + 1

    def unwatch(self, thread_id: str) -> None:
        """Undo one `watch`."""
        with self._wait_lock:
            n = self._watched.get(thread_id, 0) - 1
            if n > 0:
                self._watched[thread_id] = n
            else:
                self._watched.pop(thread_id, None)
                self._remote_head.pop(thread_id, None)

    def _start_notifier(self, *, wait: bool = True) -> None:
        with self._wait_lock:
            if self._notifier is not None or self._closed:
                return
            target = self._target
            self._notifier = Notifier(
                lambda: psycopg.connect(target.conninfo, **self._kwargs),
                target.channel,
                self._on_notify,
                self._on_gap,
            )
        if wait:
            self._notifier.wait_ready(10.0)  # set on failure too: never longer than a connect

    def _on_notify(self, thread_id: str, first: int, last: int, origin: str) -> None:
        self._wake(thread_id)
        if origin == self._origin:
            return
        with self._wait_lock:
            if thread_id not in self._watched:
                return
            head = self._remote_head.get(thread_id, first - 1)
        if last <= head:
            return
        try:
            records = self.read(thread_id, head)
        except Exception:  # the thread is gone, the database away: the readers poll
            return
        if records:
            with self._wait_lock:
                if thread_id in self._watched:
                    self._remote_head[thread_id] = records[-1].ord
            self._call_listeners(thread_id, records)

    def _on_gap(self) -> None:
        with self._wait_lock:
            events = [e for waiting in self._waiters.values() for e in waiting]
        for event in events:
            event.set()

    def _wake(self, thread_id: str) -> None:
        with self._wait_lock:
            events = list(self._waiters.get(thread_id, ()))
        for event in events:
            event.set()

    def _stop_notifier(self) -> None:
        notifier, self._notifier = self._notifier, None
        if notifier is not None:
            notifier.stop()

    # -- listeners -------------------------------------------------------------------------

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(thread_id, records)`` once records are committed (from the
        committing thread, in order per thread; quick, never blocking)."""
        self._listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        """Stop calling ``listener``; `ValueError` if it was not added."""
        self._listeners.remove(listener)

    def add_error_listener(self, listener: ErrorListener) -> None:
        """Call ``listener(error)`` when a group commit fails."""
        self._error_listeners.append(listener)

    def remove_error_listener(self, listener: ErrorListener) -> None:
        """Stop calling ``listener``."""
        self._error_listeners.remove(listener)

    def _on_durable(self, thread_id: str, records: list[Record]) -> None:
        self._call_listeners(thread_id, records)
        self._wake(thread_id)

    def _call_listeners(self, thread_id: str, records: list[Record]) -> None:
        for listener in list(self._listeners):
            try:
                listener(thread_id, records)
            except Exception:
                log.exception("a store listener failed")

    def _on_failure(self, error: StorageError) -> None:
        for listener in list(self._error_listeners):
            try:
                listener(error)
            except Exception:
                log.exception("a store error listener failed")
