"""Who writes a thread: a live session's identity, and the stamp on each record it writes.

Theory of operation
-------------------
A thread is the durable entity; a *session* is one process's live hold on it (000 §17.1: "a
session's id, lifecycle and persistence boundary are explicit"). Each `Session` gets a
`SessionIdentity` — a fresh id, the process id, the host name and the *source* that opened it
(``cli``, ``api`` or ``sdk``) — and the log shows it three ways:

* ``session.opened`` (id, pid, host, source) is written just before the session's first
  record, so a session that only reads leaves no trace (``threadlog resume`` with nothing to
  repair writes nothing). When the thread's last session never closed — its process stopped —
  the new one names it (``unclosed``);
* ``session.closed`` ends a session that wrote something, when its close protocol runs; a crash
  leaves an ``opened`` without a ``closed``;
* every catalogued record the session writes carries its id in ``data.session``
  (`threadlog.model.events.EventBase`). An application's ``custom.*`` records are its own data
  and are left as they are: the ``session.opened``/``session.closed`` records around them say
  who wrote them (one writer holds a thread at a time).

Why in the data and not the envelope: the envelope's field set is fixed (readers refuse any
other key, verifiers find ``prev`` and ``thread`` by position in the canonical bytes), so a
session field there would be a format change for every backend and every older reader; an
optional data field is read by old and new code alike and leaves the hash chain untouched.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from typing import TYPE_CHECKING, Any, cast

from threadlog._clock import new_id
from threadlog._dataclass import dataclass
from threadlog.errors import UsageError
from threadlog.model.events import (
    CATALOGUE,
    SESSION_SOURCES,
    EventBase,
    SessionClosed,
    SessionOpened,
)

if TYPE_CHECKING:
    from threadlog.model.events import Event, SessionSource

__all__ = ["SessionIdentity", "check_source", "stamp"]


def check_source(source: object) -> SessionSource:
    """``source`` if it is one of ``cli``, ``api``, ``sdk``; else `UsageError`."""
    if source not in SESSION_SOURCES:
        raise UsageError(f"source must be one of {', '.join(SESSION_SOURCES)}, not {source!r}")
    return cast("SessionSource", source)


@dataclass(frozen=True, slots=True)
class SessionIdentity:
    """A live session's identity (see the module docstring)."""

    session_id: str
    pid: int
    host: str
    source: SessionSource

    @classmethod
    def new(cls, source: str = "sdk") -> SessionIdentity:
        """A fresh identity for a session opened in this process by ``source``."""
        return cls(new_id(), os.getpid(), socket.gethostname(), check_source(source))

    def opened(self, unclosed: str | None) -> SessionOpened:
        """The ``session.opened`` record (``unclosed``: a previous session never closed)."""
        return SessionOpened(
            session_id=self.session_id,
            pid=self.pid,
            host=self.host,
            source=self.source,
            unclosed=unclosed if unclosed != self.session_id else None,
        )

    def closed(self) -> SessionClosed:
        """The ``session.closed`` record."""
        return SessionClosed(session_id=self.session_id)


def stamp(event: str | Event, data: Any, session_id: str) -> tuple[str | Event, Any]:
    """``(event, data)`` of an append, with the session's id on a catalogued event.

    A typed event gets its ``session`` field; a catalogued type given by name with an object
    as data gets a ``session`` key (the store checks it as one of the type's fields). A
    ``custom.*`` record is the application's data and is left as it is.
    """
    if isinstance(event, EventBase):
        if event.session != session_id:
            event = dataclasses.replace(event, session=session_id)
        return event, data
    if isinstance(event, str) and event in CATALOGUE and isinstance(data, dict):
        return event, {**data, "session": session_id}
    return event, data
