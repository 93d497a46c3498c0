"""`ThreadlogSessionService`: a Google ADK ``BaseSessionService`` over a threadlog store.

Install with ``pip install 'threadlog[adk]'``::

    from google.adk.runners import Runner
    from threadlog import open_store
    from threadlog.adapters.adk import ThreadlogSessionService

    runner = Runner(agent=agent, app_name="app", session_service=ThreadlogSessionService(open_store()))

Theory of operation
-------------------
ADK's state has scopes, by key prefix: ``app:`` (shared by every user of an app), ``user:``
(by every session of one user of an app), no prefix (the session's own) and ``temp:`` (the
current invocation only: never persisted). Each persisted scope is a threadlog thread
(`NamedThreads`):

* a *session* thread per ``(app, user, session id)``: ``custom.adk.session`` (the session's
  initial state) then one ``custom.adk.event`` per appended event (the event as ADK's own JSON,
  its ``temp:`` keys already trimmed by the base class);
* an *app* thread per app and a *user* thread per ``(app, user)``: one ``custom.adk.state``
  ``{"delta": {...}}`` per change of that scope's state (keys without their prefix).

A session's state is folded from its thread: the initial state, then every event's
``state_delta`` (session keys only); `get_session` merges in the app and user state, with
their prefixes, as ADK's own services do. Folds are cached per thread; the service applies
its own appends to them directly and reads a thread only for records another writer appended
(`records_after`).

*Crash order.* `append_event` writes the app and user deltas first, each with an event id
derived from the ADK event's id, then the event itself. A crash in between leaves a delta
without its event; the caller's retry of the same event writes the same ids again, which the
store de-duplicates, then the event: nothing is applied twice.

*Listing.* A session thread's ``metadata`` setting holds its app and user, so
`list_sessions` asks the index for them (`Catalog.threads(metadata=…)`), then reads each
session's thread.

*Limits.* ``StaleSessionError`` is not raised: the last writer wins.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from dataclasses import field
from typing import TYPE_CHECKING, Any

import orjson
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.sessions.base_session_service import (
    BaseSessionService,
    GetSessionConfig,
    ListSessionsResponse,
)
from google.adk.sessions.session import Session
from google.adk.sessions.state import State

from threadlog._dataclass import dataclass
from threadlog.adapters._threads import NamedThreads, records_after
from threadlog.errors import ThreadNotFound
from threadlog.model.ids import derived_id

if TYPE_CHECKING:
    from threadlog.store.protocol import Store

__all__ = ["ThreadlogSessionService"]

SESSION = "custom.adk.session"
EVENT = "custom.adk.event"
STATE = "custom.adk.state"


def _split(delta: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """``(app, user, session)`` parts of a state delta, prefixes removed, ``temp:`` dropped."""
    app: dict[str, Any] = {}
    user: dict[str, Any] = {}
    own: dict[str, Any] = {}
    for key, value in delta.items():
        if key.startswith(State.APP_PREFIX):
            app[key.removeprefix(State.APP_PREFIX)] = value
        elif key.startswith(State.USER_PREFIX):
            user[key.removeprefix(State.USER_PREFIX)] = value
        elif not key.startswith(State.TEMP_PREFIX):
            own[key] = value
    return app, user, own


def _json_safe(value: dict[str, Any]) -> dict[str, Any]:
    """``value`` as plain JSON (what a record holds): unknown types by their ``str``."""
    loaded: dict[str, Any] = orjson.loads(orjson.dumps(value, default=str))
    return loaded


@dataclass
class _Fold:
    """A thread folded up to record ``ord``: events and state (a scope thread: state only)."""

    ord: int = 0
    state: dict[str, Any] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    event_ids: set[str] = field(default_factory=set)
    created: float = 0.0


class ThreadlogSessionService(BaseSessionService):
    """ADK sessions, events and scoped state in threadlog threads (see the module docstring).

    Args:
        store: any threadlog store (deleting a session needs the `Retention` capability).
        principal: the owner of the threads this service creates.
    """

    def __init__(self, store: Store, *, principal: str = "local") -> None:
        super().__init__()
        self.store = store
        self._sessions = NamedThreads(store, "adk.session", principal=principal)
        self._scopes = NamedThreads(store, "adk.state", principal=principal)
        self._folds: dict[str, _Fold] = {}
        self._lock = threading.RLock()

    # -- folding -----------------------------------------------------------------------

    def _fold(self, thread_id: str) -> _Fold | None:
        with self._lock:
            fold = self._folds.setdefault(thread_id, _Fold())
            try:
                records = records_after(self.store, thread_id, fold.ord)
            except ThreadNotFound:
                self._folds.pop(thread_id, None)
                return None
            for record in records:
                if record.type in (SESSION, EVENT, STATE):
                    self._apply(fold, record.type, self.store.resolve(record.data))
                fold.ord = record.ord
            return fold

    @staticmethod
    def _apply(fold: _Fold, type_: str, data: Any) -> None:
        if type_ == SESSION:
            fold.state.update(data["state"])
            fold.created = data["created"]
        elif type_ == STATE:
            fold.state.update(data["delta"])
        else:
            event = Event.model_validate(data["event"])
            fold.events.append(event)
            fold.event_ids.add(event.id)
            if event.actions and event.actions.state_delta:
                fold.state.update(_split(event.actions.state_delta)[2])

    def _write(self, thread_id: str, type_: str, data: Any, id_: str | None = None) -> None:
        """Append, and apply to the thread's fold directly when nothing came between."""
        record = self.store.append(thread_id, type_, data, id=id_)
        fold = self._folds.get(thread_id)
        if fold is not None and record.ord == fold.ord + 1:
            self._apply(fold, type_, data)
            fold.ord = record.ord

    def _scope_state(self, name: list[str]) -> dict[str, Any]:
        thread_id = self._scopes.find(orjson.dumps(name).decode())
        fold = self._fold(thread_id) if thread_id else None
        return dict(fold.state) if fold else {}

    def _put_scope(self, name: list[str], delta: dict[str, Any], event_id: str | None) -> None:
        if not delta:
            return
        thread_id = self._scopes.get(orjson.dumps(name).decode())
        id_ = derived_id("adk.state", thread_id, event_id) if event_id else None
        self._write(thread_id, STATE, {"delta": _json_safe(delta)}, id_)

    @staticmethod
    def _session_name(app_name: str, user_id: str, session_id: str) -> str:
        return orjson.dumps([app_name, user_id, session_id]).decode()

    def _merged(self, app_name: str, user_id: str, session: Session) -> Session:
        for key, value in self._scope_state(["app", app_name]).items():
            session.state[State.APP_PREFIX + key] = value
        for key, value in self._scope_state(["user", app_name, user_id]).items():
            session.state[State.USER_PREFIX + key] = value
        return session

    def _session_of(
        self, app_name: str, user_id: str, session_id: str, fold: _Fold, events: list[Event]
    ) -> Session:
        last = fold.events[-1].timestamp if fold.events else fold.created
        session = Session(
            id=session_id,
            app_name=app_name,
            user_id=user_id,
            state=dict(fold.state),
            events=[e.model_copy(deep=True) for e in events],
            last_update_time=last,
        )
        return self._merged(app_name, user_id, session)

    # -- BaseSessionService ------------------------------------------------------------

    def _create(
        self, app_name: str, user_id: str, state: dict[str, Any] | None, session_id: str | None
    ) -> Session:
        session_id = (session_id or "").strip() or str(uuid.uuid4())
        name = self._session_name(app_name, user_id, session_id)
        with self._lock:
            if self._sessions.find(name) is not None:
                raise AlreadyExistsError(f"Session with id {session_id} already exists.")
            app, user, own = _split(state or {})
            self._put_scope(["app", app_name], app, None)
            self._put_scope(["user", app_name, user_id], user, None)
            thread_id = self._sessions.get(name, {"app": app_name, "user": user_id})
            created = time.time()
            self._write(thread_id, SESSION, {"state": _json_safe(own), "created": created})
            fold = self._fold(thread_id)
            assert fold is not None
            return self._session_of(app_name, user_id, session_id, fold, [])

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        """A new session (its app and user state keys stored in their scopes)."""
        return await asyncio.to_thread(self._create, app_name, user_id, state, session_id)

    def _get(
        self, app_name: str, user_id: str, session_id: str, config: GetSessionConfig | None
    ) -> Session | None:
        name = self._session_name(app_name, user_id, (session_id or "").strip())
        with self._lock:
            thread_id = self._sessions.find(name)
            fold = self._fold(thread_id) if thread_id else None
            if fold is None:
                return None
            events = fold.events
            if config is not None:
                if config.num_recent_events is not None:
                    n = config.num_recent_events
                    events = events[-n:] if n else []
                if config.after_timestamp is not None:
                    events = [e for e in events if e.timestamp >= config.after_timestamp]
            return self._session_of(app_name, user_id, session_id, fold, events)

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        """The session with its events (``config`` may keep only recent ones), or None."""
        return await asyncio.to_thread(self._get, app_name, user_id, session_id, config)

    def _list(self, app_name: str, user_id: str | None) -> ListSessionsResponse:
        found: list[Session] = []
        where = {"app": app_name} if user_id is None else {"app": app_name, "user": user_id}
        for name, thread_id in self._sessions.names(**where):
            app, user, session_id = orjson.loads(name)
            fold = self._fold(thread_id)
            if fold is not None:
                found.append(self._session_of(app, user, session_id, fold, []))
        found.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
        return ListSessionsResponse(sessions=found)

    async def list_sessions(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        """The app's sessions (of ``user_id``, else every user's), without their events,
        oldest update first."""
        return await asyncio.to_thread(self._list, app_name, user_id)

    def _delete(self, app_name: str, user_id: str, session_id: str) -> None:
        with self._lock:
            name = self._session_name(app_name, user_id, session_id)
            thread_id = self._sessions.find(name)
            if thread_id is not None:
                self._folds.pop(thread_id, None)
                self._sessions.delete(name)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """Delete the session's thread for good (its app and user state stay)."""
        await asyncio.to_thread(self._delete, app_name, user_id, session_id)

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        """The user's state in the app (keys without ``user:``)."""
        return await asyncio.to_thread(self._scope_state, ["user", app_name, user_id])

    def _append(self, session: Session, event: Event) -> None:
        name = self._session_name(session.app_name, session.user_id, session.id)
        with self._lock:
            thread_id = self._sessions.find(name)
            fold = self._fold(thread_id) if thread_id else None
            if thread_id is None or fold is None:
                raise SessionNotFoundError(f"Session {session.id} not found.")
            if event.id in fold.event_ids:
                return  # a re-delivered event: stored already
            delta = (event.actions.state_delta if event.actions else None) or {}
            app, user, _ = _split(delta)
            self._put_scope(["app", session.app_name], app, event.id)
            self._put_scope(["user", session.app_name, session.user_id], user, event.id)
            dumped = orjson.loads(event.model_dump_json(exclude_none=True))
            self._write(thread_id, EVENT, {"event": dumped})

    async def append_event(self, session: Session, event: Event) -> Event:
        """Store the event (``temp:`` keys trimmed) and its state deltas by scope; update
        ``session`` in place, as ADK's own services do."""
        if event.partial:
            return event
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        await asyncio.to_thread(self._append, session, event)
        self._commit_event_to_session(session, event)
        session.last_update_time = event.timestamp
        return event
