"""What every backend checks of a `Credential`, and its JSON form: one definition, no drift.

A credential opens the service as its principal, so a store keeps only well-formed ones: a
principal that prints as one word (it is shown in listings and recorded as the ``by`` of
every command), a token id that is safe in a command line, and a digest that is a SHA-256
in lowercase hex (the server compares it with the digest of a presented token, as text).
The same checks read a credential back from disk (`credential_from_data`), where a wrong
one means the file is damaged, never that it should be skipped.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from threadlog.errors import UsageError
from threadlog.store.protocol import Credential

__all__ = [
    "MAX_PRINCIPAL",
    "check_credential",
    "check_principal",
    "credential_from_data",
    "credential_to_data",
]

MAX_PRINCIPAL = 200
"""The longest principal a credential may name (characters)."""

_TOKEN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_DIGEST = re.compile(r"[0-9a-f]{64}")
_FIELDS = ("token_id", "principal", "digest", "created_at")


def check_principal(principal: object) -> str:
    """``principal`` if it may own a credential: a non-empty string of at most
    `MAX_PRINCIPAL` characters, with no whitespace and no control or format characters
    (which would let a listing or a log line say another name than the one stored).
    Raises `UsageError` naming what is wrong."""
    if not isinstance(principal, str) or not principal:
        raise UsageError("a principal is a non-empty string")
    if len(principal) > MAX_PRINCIPAL:
        raise UsageError(f"a principal has at most {MAX_PRINCIPAL} characters")
    for ch in principal:
        if ch.isspace() or unicodedata.category(ch).startswith("C"):
            raise UsageError(
                f"a principal has no whitespace or control characters: {principal!r:.80}"
            )
    return principal


def check_credential(credential: object) -> Credential:
    """``credential`` if a store may keep it (see the module docstring); else `UsageError`."""
    if not isinstance(credential, Credential):
        raise UsageError(f"not a Credential: {type(credential).__name__}")
    token_id, digest, created_at = credential.token_id, credential.digest, credential.created_at
    if not isinstance(token_id, str) or not _TOKEN_ID.fullmatch(token_id):
        raise UsageError(
            f"a token id is 1 to 64 letters, digits, '_', '.' or '-': {token_id!r:.80}"
        )
    check_principal(credential.principal)
    if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
        raise UsageError("a credential's digest is a SHA-256 in lowercase hex (64 characters)")
    if not isinstance(created_at, str) or not created_at or not created_at.isprintable():
        raise UsageError(f"a credential's created_at is an RFC 3339 time: {created_at!r:.80}")
    return credential


def credential_to_data(credential: Credential) -> dict[str, str]:
    """The credential as a JSON object (what a file or a table row holds)."""
    return {name: getattr(credential, name) for name in _FIELDS}


def credential_from_data(data: Any) -> Credential:
    """A credential read back from `credential_to_data`'s form; `ValueError` saying what is
    wrong when it is not one (the caller names the file)."""
    if not isinstance(data, dict):
        raise ValueError(f"a credential is a JSON object, not {type(data).__name__}")
    missing = [name for name in _FIELDS if name not in data]
    if missing:
        raise ValueError(f"a credential without {', '.join(missing)}")
    extra = sorted(set(data) - set(_FIELDS))
    if extra:
        raise ValueError(f"a credential with unknown fields {', '.join(extra)}")
    try:
        return check_credential(Credential(**{name: data[name] for name in _FIELDS}))
    except UsageError as exc:
        raise ValueError(str(exc)) from None
