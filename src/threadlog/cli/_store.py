"""The store the command line works on: opened by target through `threadlog.open_store`, and
checked for the capabilities the commands use (no command imports a backend).

A command that only reads (``ls``, ``show``, ``verify``…) opens an existing store only
(`open_disk_store` with ``create=False``): a mistyped ``--store`` path is an error, never a
new empty store made there. Threads are named by any unique prefix of their id
(`resolve_thread`); `THREAD` is the click type of such an argument, which completes ids from
the store's index in the shell (``shell_complete``).
"""

from __future__ import annotations

import os
from typing import Any, Protocol, runtime_checkable

import click
from click.shell_completion import CompletionItem

from threadlog.errors import ThreadNotFound, UsageError
from threadlog.model.ids import is_uuid
from threadlog.store.open import open_store, parse_target
from threadlog.store.protocol import Catalog, LocalHome, Maintenance, Retention, Store

__all__ = [
    "THREAD",
    "AmbiguousThread",
    "DiskStore",
    "location",
    "open_disk_store",
    "resolve_thread",
]

_STORE_MARKS = ("index.sqlite3", "threads")


@runtime_checkable
class DiskStore(Store, Catalog, Maintenance, Protocol):
    """A store that keeps, beside its logs, a catalog and the means to look after them (an
    embedded store on disk, a PostgreSQL store): what the inspection commands need."""


def location(store: Store) -> str:
    """Where ``store`` is, for messages: its directory, or its description (a database)."""
    return store.home if isinstance(store, LocalHome) else repr(store)


def _default_target(target: str | None) -> str | None:
    if target is not None:
        return target
    for name in ("THREADLOG_STORE", "THREADLOG_HOME"):
        if os.environ.get(name):
            return os.environ[name]
    return None


def open_disk_store(target: str | None, *, create: bool = True) -> DiskStore:
    """Open ``target`` (a directory or a ``postgresql://`` URL; default ``$THREADLOG_HOME``
    or ``~/.threadlog``). With ``create=False`` a directory that holds no store is refused
    (`UsageError`) and nothing is written there.

    Raises `UsageError` if what it names is not a store with a catalog."""
    if not create:
        kind, where = parse_target(_default_target(target))
        if kind == "embedded":
            from threadlog.store._home import default_home

            home = os.path.expanduser(where or default_home())
            if not any(os.path.exists(os.path.join(home, mark)) for mark in _STORE_MARKS):
                raise UsageError(
                    f"{home!r} is not a threadlog store (no index.sqlite3 or threads/ there); "
                    "nothing was created (--store names the store; `threadlog demo` makes one)"
                )
    store = open_store(target)
    if not isinstance(store, DiskStore):
        store.close()
        raise UsageError(
            f"{target!r} is not a store on disk or a database: the command line needs one"
        )
    return store


class AmbiguousThread(UsageError):
    """A thread prefix that more than one thread id starts with."""

    def __init__(self, prefix: str, candidates: list[str]) -> None:
        shown = ", ".join(candidates[:10]) + (" …" if len(candidates) > 10 else "")
        super().__init__(
            f"thread prefix {prefix!r} is ambiguous: {len(candidates)} threads start with it "
            f"({shown}); give more of the id"
        )
        self.candidates = candidates


def resolve_thread(store: Store, given: str, *, extra: list[str] | None = None) -> str:
    """The thread id ``given`` names: itself if the store has it, else the one thread id it
    is a prefix of (`AmbiguousThread` if several are; `ThreadNotFound` saying so if it is
    the id of a thread the store deleted; ``given`` unchanged if none is, so that the
    command's own "no such thread" error names it). ``extra`` adds ids the store does not
    list (threads whose log is gone)."""
    if not given or store.exists(given):
        return given
    wanted = given.lower()
    ids = sorted({*store.thread_ids(), *(extra or [])})
    matches = [t for t in ids if t.lower().startswith(wanted)]
    if len(matches) > 1:
        raise AmbiguousThread(given, matches)
    if not matches and is_uuid(given) and isinstance(store, Retention) and store.deleted(given):
        raise ThreadNotFound(given, deleted=True)
    return matches[0] if matches else given


class ThreadType(click.ParamType):  # type: ignore[type-arg]
    """A thread argument: an id or a unique prefix of one (resolved by the command, which has
    the store); in the shell it completes from the store's index."""

    name = "thread"

    def shell_complete(
        self, ctx: click.Context, param: click.Parameter, incomplete: str
    ) -> list[CompletionItem]:
        home: Any = ctx.params.get("home")
        root = ctx.find_root()
        if home is None and isinstance(root.obj, dict):
            home = root.obj.get("home")
        try:
            with open_disk_store(home, create=False) as store:
                rows = store.threads(archived=None)
        except Exception:  # completion never fails loudly
            return []
        return [
            CompletionItem(row.thread_id, help=(row.title or "")[:60])
            for row in rows
            if row.thread_id.startswith(incomplete)
        ]


THREAD = ThreadType()
