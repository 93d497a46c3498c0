"""One way to open a store: `open_store(target)`, where the target names the backend.

* a directory path, or a ``file://`` URL: the embedded store there (created if missing);
  ``None`` means ``$THREADLOG_HOME``, else ``~/.threadlog``.
* ``memory://`` (or ``:memory:``): a new, empty in-memory store, persisting nothing.
  ``memory://NAME`` is shared within the process: every open of the same name returns the same
  store until it is closed (after which the name opens a new, empty one).
* ``postgresql://…`` / ``postgres://…``: the PostgreSQL store there
  (`threadlog.store.postgres.PostgresStore`; ``?schema=NAME`` picks a schema), from the
  ``threadlog[postgres]`` extra, imported only then (``import threadlog`` never imports
  psycopg).

Any other ``scheme:`` is refused with `UsageError` before anything is created: a mistyped URL
(``postgresql:/x``) must not become a directory named like it. A directory whose name looks
like ``word:rest`` is opened by writing it as ``./word:rest`` or as a ``file://`` URL.
"""

from __future__ import annotations

import os
import re
import threading
from typing import TYPE_CHECKING, Any

from threadlog.errors import UsageError

if TYPE_CHECKING:
    from threadlog.store.inmemory import MemoryStore
    from threadlog.store.protocol import Store

__all__ = ["open_store", "parse_target"]

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")
_EXTRAS = {"postgresql": "postgres", "postgres": "postgres"}

_named: dict[str, MemoryStore] = {}
_named_lock = threading.Lock()


def parse_target(target: str | os.PathLike[str] | None) -> tuple[str, str | None]:
    """``("embedded", directory or None)``, ``("memory", name or None)`` or
    ``("postgres", URL)`` for a target.

    Raises `UsageError` for a scheme threadlog has no backend for, naming the extra to
    install when there will be one. Touches nothing on disk.
    """
    if target is None:
        return "embedded", None
    if not isinstance(target, str):
        return "embedded", os.fspath(target)
    if target == ":memory:":
        return "memory", None
    match = _SCHEME.match(target)
    if match is None or (os.name == "nt" and len(match.group(1)) == 1):  # C:\\… is a path
        if not target:
            raise UsageError("the store target is empty: give a directory or memory://")
        return "embedded", target
    scheme = match.group(1).lower()
    if scheme == "file":
        from urllib.parse import unquote, urlsplit  # (here: a plain path never needs them)

        parts = urlsplit(target)
        if not target.lower().startswith("file://") or parts.netloc not in ("", "localhost"):
            raise UsageError(
                f"{target!r} is not a local file URL: write file:///absolute/path "
                "(or just the path)"
            )
        path = unquote(parts.path)
        if not path.startswith("/"):
            raise UsageError(f"{target!r}: a file:// URL needs an absolute path")
        return "embedded", path
    if scheme == "memory":
        if not target.lower().startswith("memory://"):
            raise UsageError(f"{target!r}: write memory:// or memory://NAME")
        name = target[len("memory://") :]
        return "memory", name or None
    if scheme in _EXTRAS:
        if not target.lower().startswith(f"{scheme}://"):
            raise UsageError(
                f"{target!r}: write postgresql://user@host[:port]/database "
                "(the threadlog[postgres] extra)"
            )
        return "postgres", target
    raise UsageError(
        f"{target!r}: no store backend for the scheme {scheme!r}; give a directory (write "
        "./name for one whose name holds a colon), file:///path, or memory://"
    )


def open_store(target: str | os.PathLike[str] | None = None, **options: Any) -> Store:
    """Open (or create) the store ``target`` names (see the module docstring); ``options``
    go to the backend (e.g. ``commit_interval`` for the embedded store). Use it as a context
    manager so that it is flushed and closed.

    Example::

        with threadlog.open_store("/tmp/tl") as store:
            thread = store.create_thread("alice", model="scripted")
            store.append(thread, "custom.note", {"text": "hello"})
            print(store.read(thread)[-1].data)

    Raises `UsageError` for a target no backend serves (nothing is created then),
    `StorageError` when the store cannot be opened.
    """
    kind, where = parse_target(target)
    if kind == "postgres":
        assert where is not None
        try:
            from threadlog.store.postgres import PostgresStore
        except ImportError as exc:
            raise UsageError(
                f"{where!r}: the PostgreSQL store needs psycopg: "
                f"`pip install 'threadlog[postgres]'` ({exc})"
            ) from None
        return PostgresStore(where, **options)
    if kind == "memory":
        from threadlog.store.inmemory import MemoryStore

        if where is None:
            return MemoryStore(**options)
        with _named_lock:
            store = _named.get(where)
            if store is None or store.closed:
                store = _named[where] = MemoryStore(**options)
            return store
    from threadlog.store.embedded import EmbeddedStore

    return EmbeddedStore(where, **options)
