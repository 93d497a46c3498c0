"""Bearer tokens: minted for ``threadlog token add``, checked by the server on every request.

A token is ``tl_`` + 43 url-safe characters (256 random bits). The store keeps only its
SHA-256 (`threadlog.store.protocol.Credential`), with the principal it speaks for, a short
public id (``tok_`` + 10 hex digits, what ``threadlog token rm`` takes) and the time it
was made: whoever reads the store cannot present a token, and the token itself is shown
once, when it is minted. A random 256-bit token needs no salt or slow hash: nobody can
guess one from its digest, and a digest is what a fast lookup compares.

`Authenticator` answers "which principal, if any, does this token speak for?" without
reading the store on every request (it keeps the list for ``ttl`` seconds, so a revoked
token stops working within ``ttl``), and without a timing difference between "no such
token" and "almost this token": it compares the presented digest with *every* stored one,
in constant time each (`hmac.compare_digest`).

This module imports neither FastAPI nor uvicorn: the ``threadlog token`` commands use it
without the ``server`` extra.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from typing import TYPE_CHECKING

from threadlog._clock import rfc3339
from threadlog.store._credentials import check_principal
from threadlog.store.protocol import Credential, Credentials

if TYPE_CHECKING:
    from collections.abc import Callable

    from threadlog.store.protocol import Store

__all__ = ["TOKEN_PREFIX", "Authenticator", "digest", "mint"]

TOKEN_PREFIX = "tl_"
"""What every token starts with (so that a secret scanner can recognize one)."""


def digest(token: str) -> str:
    """The SHA-256 of ``token`` (its UTF-8 bytes), lowercase hex: what the store keeps."""
    return hashlib.sha256(token.encode()).hexdigest()


def mint(principal: str) -> tuple[str, Credential]:
    """A new token for ``principal`` and the credential to store for it:
    ``(token, credential)``. The token is never stored: show it once, then drop it.

    Raises `UsageError` for a principal with whitespace or control characters, an empty
    one or one over 200 characters (`threadlog.store._credentials.check_principal`)."""
    check_principal(principal)
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    return token, Credential(
        token_id="tok_" + secrets.token_hex(5),
        principal=principal,
        digest=digest(token),
        created_at=rfc3339(time.time_ns()),
    )


class Authenticator:
    """Which principal a bearer token speaks for, from the store's credentials.

    Thread-safe. The credentials are read at most once per ``ttl`` seconds (0: on every
    call); a token added or removed (by ``threadlog token``, in another process) counts
    within ``ttl``. A store that cannot be read (a damaged credentials file) raises
    `StorageError` from `open_mode` and `principal_for`: the server then fails closed,
    never falls back to open mode.

    Args:
        store: the store whose credentials decide; one without the `Credentials`
            capability holds none (always open mode).
        ttl: how long a read of the credentials is reused, in seconds.
        clock: the monotonic clock the ``ttl`` is measured with (tests may pass their own).
    """

    def __init__(
        self,
        store: Store,
        *,
        ttl: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store if isinstance(store, Credentials) else None
        self._ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._digests: tuple[tuple[bytes, str], ...] = ()
        self._read_at: float | None = None

    @property
    def open_mode(self) -> bool:
        """True when no token can authenticate: the store holds no credential, or has no
        `Credentials` capability (the server then runs without authentication, on loopback
        only: ``docs/service.md``)."""
        return not self._current()

    def principal_for(self, token: str) -> str | None:
        """The principal ``token`` speaks for; None for an unknown token (and for every
        token in open mode, where the server decides who the caller is).

        Compares the token's digest with every stored one, in constant time each, and
        does not stop at a match: how long it takes says nothing about which digest, or
        how much of one, matched."""
        if not isinstance(token, str) or not token:
            return None
        presented = digest(token).encode()
        found: str | None = None
        for stored, principal in self._current():
            if hmac.compare_digest(presented, stored):
                found = principal
        return found

    def _current(self) -> tuple[tuple[bytes, str], ...]:
        """``(digest, principal)`` of every credential, read again once ``ttl`` passed."""
        if self._store is None:
            return ()
        with self._lock:
            now = self._clock()
            if self._read_at is None or now - self._read_at >= self._ttl:
                self._digests = tuple(
                    (c.digest.encode(), c.principal) for c in self._store.credentials()
                )
                self._read_at = now
            return self._digests
