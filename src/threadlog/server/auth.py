"""Who is asking, and whether the thread they name is theirs (``docs/service.md``, Identity).

`caller` is the FastAPI dependency that authenticates a request: a bearer token the
authenticator (`threadlog.server.tokens.Authenticator`) knows gives its principal; in open
mode (a store with no token, loopback only) every request is principal ``local``, which sees
every thread. Anything else is 401 with ``WWW-Authenticate: Bearer``.

`owned_thread` is the dependency of every route that names a thread: the thread must exist
and belong to the caller, else ``ThreadNotFound`` (404), the same answer, word for word, as
for a thread that does not exist, so that nothing leaks existence. A thread's principal is
written once, in its ``thread.created``, and never changes, so `Owners` caches it.

No ``from __future__ import annotations`` here: FastAPI reads the dependencies' annotations
at run time.
"""

import asyncio
import threading
from typing import Annotated, Protocol

from fastapi import Depends, Request

from threadlog._dataclass import dataclass
from threadlog.errors import ThreadNotFound
from threadlog.server.errors import ApiError
from threadlog.store.protocol import Catalog, Store

__all__ = ["Authenticator", "Caller", "Owners", "caller", "owned_thread"]

OPEN_MODE_PRINCIPAL = "local"


class Authenticator(Protocol):
    """What the service needs of its authenticator (`threadlog.server.tokens`)."""

    @property
    def open_mode(self) -> bool:
        """Whether the store holds no token (every request is principal ``local``)."""
        ...

    def principal_for(self, token: str) -> str | None:
        """The principal a bearer token speaks for; None for an unknown token."""
        ...


@dataclass(frozen=True, slots=True)
class Caller:
    """An authenticated request's principal; ``sees_all`` only in open mode."""

    principal: str
    sees_all: bool = False


class Owners:
    """Each thread's principal, read once: from the store's `Catalog` when it has one (and has
    indexed the thread), else from the thread's first record (``thread.created``)."""

    def __init__(self, store: Store, *, max_entries: int = 100_000) -> None:
        self._store = store
        self._cache: dict[str, str] = {}
        self._lock = threading.Lock()
        self._max = max_entries

    def owner(self, thread_id: str) -> str:
        """The thread's principal; `ThreadNotFound` when the store does not hold it. Blocking
        (reads the store on a miss): call it from a worker thread."""
        with self._lock:
            found = self._cache.get(thread_id)
        if found is not None:
            return found
        principal = self._lookup(thread_id)
        with self._lock:
            if len(self._cache) >= self._max:
                self._cache.clear()  # rare; a miss only costs a read
            self._cache[thread_id] = principal
        return principal

    def _lookup(self, thread_id: str) -> str:
        store = self._store
        if isinstance(store, Catalog):
            try:
                principal = store.thread_info(thread_id).principal
            except ThreadNotFound:
                principal = None  # not indexed yet (written by another process): the log
            if principal is not None:
                return principal
        if not store.exists(thread_id):
            raise ThreadNotFound(thread_id)
        first = store.read(thread_id, 0, limit=1)
        data = first[0].data if first else None
        principal = data.get("principal") if isinstance(data, dict) else None
        if not isinstance(principal, str):
            raise ThreadNotFound(thread_id)  # no durable thread.created yet
        return principal

    def check(self, thread_id: str, who: Caller) -> None:
        """Raise `ThreadNotFound` unless ``who`` may see the thread (blocking, as `owner`)."""
        principal = self.owner(thread_id)
        if not who.sees_all and principal != who.principal:
            raise ThreadNotFound(thread_id)


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization")
    if header is None:
        return None
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


def caller(request: Request) -> Caller:
    """The request's principal (a FastAPI dependency; see the module docstring).

    A plain function: FastAPI runs it in a worker thread, since the authenticator may read
    the store's credentials."""
    auth: Authenticator = request.app.state.authenticator
    if auth.open_mode:
        return Caller(OPEN_MODE_PRINCIPAL, sees_all=True)
    token = _bearer(request)
    principal = auth.principal_for(token) if token is not None else None
    if principal is None:
        raise ApiError(
            401,
            "Unauthorized",
            "a valid bearer token is required" if token is None else "unknown token",
            headers={"WWW-Authenticate": "Bearer"},
        )
    return Caller(principal)


CallerDep = Annotated[Caller, Depends(caller)]


@dataclass(frozen=True, slots=True)
class Owned:
    """A thread the caller may act on (`owned_thread`)."""

    thread_id: str
    caller: Caller


async def owned_thread(
    request: Request,
    who: CallerDep,
    thread: str,
) -> Owned:
    """The ``{thread}`` of the path, checked to be the caller's (a FastAPI dependency)."""
    owners: Owners = request.app.state.owners
    await asyncio.to_thread(owners.check, thread, who)
    return Owned(thread, who)


OwnedDep = Annotated[Owned, Depends(owned_thread)]
