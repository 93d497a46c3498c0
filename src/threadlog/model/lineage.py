"""Lineage: where a forked thread came from, and which records it inherited (pure).

A fork (``threadlog fork``, `Runtime.fork`, salvage) starts a thread whose ``thread.created``
carries ``lineage``::

    {"thread": SOURCE, "ord": N, "entry": ID, "hash": H, "kind": "fork" | "salvage",
     "copied": {"prev": P, "threads": [SOURCE, ...]}}

``thread``/``ord``/``entry``/``hash`` name the source and the record the fork was taken at.
When the fork inherits records (``ord > 1``), ``copied`` says how: the child's ords 2..N are
the source's records **byte for byte** — same ids, payloads and hashes, and a ``thread`` field
naming the thread that wrote each one (the source, or for a fork of a fork, an ancestor:
``threads`` lists them). So the child's hash chain runs: its own ``thread.created`` (ord 1);
then the inherited records, the first chained on ``prev`` (the hash the source's ord 2 follows)
rather than on ord 1; then the child's own records from ord N+1, chained on the inherited ones.
``hash`` (in ord 1) must equal the hash of ord N, which ties the header to the prefix.

Why verbatim and not re-hashed into the child's name: copying bytes costs a read, one hash per
line to verify them and a write, where re-chaining costs a second hash and a rebuilt line per
record (forking 100,000 events went from 0.74 s to under 0.4 s); and the child's inherited
records keep the very hashes of the source's, so anyone can check that a fork inherited exactly
what its parent wrote.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from threadlog._dataclass import dataclass

__all__ = ["Copied", "check_new_lineage", "copied_prefix", "inherits"]

_HASH = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True, slots=True)
class Copied:
    """The records a fork inherited verbatim: ords 2..``until``."""

    until: int
    prev: str
    """The hash ord 2 is chained on (the source's ord 1, or what its own ord 2 followed)."""
    threads: frozenset[str]
    """The threads that wrote the inherited records."""
    last: str
    """The hash of ord ``until`` (lineage ``hash``)."""


def copied_prefix(lineage: Any) -> Copied | None:
    """The inherited prefix a ``thread.created`` lineage declares, or None.

    Raises:
        ValueError: ``copied`` is present but malformed.
    """
    if not isinstance(lineage, Mapping) or lineage.get("copied") is None:
        return None
    copied, until, last = lineage["copied"], lineage.get("ord"), lineage.get("hash")
    if (
        not isinstance(copied, Mapping)
        or type(until) is not int
        or until < 2
        or not isinstance(last, str)
        or not _HASH.fullmatch(last)
        or not isinstance(copied.get("prev"), str)
        or not _HASH.fullmatch(copied["prev"])
        or not isinstance(copied.get("threads"), list)
        or not copied["threads"]
        or not all(isinstance(t, str) and t for t in copied["threads"])
    ):
        raise ValueError(
            "lineage.copied must be {prev: hash, threads: [ids]}, with lineage ord >= 2 and a hash"
        )
    return Copied(until, copied["prev"], frozenset(copied["threads"]), last)


def check_new_lineage(lineage: Any) -> None:
    """Refuse a ``copied`` declaration in the lineage of a thread that is not a fork's copy.

    Only a fork, which writes the inherited records with it, may declare them; anywhere else
    it would make the new thread unreadable.

    Raises:
        ValueError: the lineage declares ``copied``.
    """
    if isinstance(lineage, Mapping) and "copied" in lineage:
        raise ValueError("lineage.copied is written by fork only (it declares inherited records)")


def inherits(lineage: Any, thread: str, ord: int) -> bool:
    """Whether record ``ord`` of a thread with this lineage may have been written by
    ``thread`` (one of the ancestors it inherited records from)."""
    if not isinstance(lineage, Mapping):
        return False
    copied, until = lineage.get("copied"), lineage.get("ord")
    return (
        isinstance(copied, Mapping)
        and type(until) is int
        and 2 <= ord <= until
        and isinstance(copied.get("threads"), list)
        and thread in copied["threads"]
    )
