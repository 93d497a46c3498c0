"""A thread in a portable form: every record, every message, or a readable page.

This is the library behind ``threadlog export``; anything else that hands a thread out (a
script, a future HTTP server) calls the same functions and gets the same bytes::

    from threadlog import open_store
    from threadlog.export import export_thread

    with open_store("/tmp/tl") as store:
        page = export_thread(store, thread_id, "html")

The formats (`FORMATS`):

``jsonl``
    Every record of the log, one JSON envelope per line (`threadlog.export.jsonl`).
``messages``
    A JSON array of every conversation message in log order, all branches, each with its
    ``ord``, ``entry`` and ``parent`` (`threadlog.export.messages`).
``html``
    A self-contained page of those messages (`threadlog.export.html`).
``otlp``
    The thread's spans as OTLP/JSON, for an OpenTelemetry collector (`threadlog.export.otlp`).

Every format starts from the records with their artifact references loaded
(`load_records`): what is exported is what was appended, never a placeholder. Compaction
deletes nothing from the log, so nothing is missing from an export either: the messages
format walks every record, not the model's (compacted) context.

The functions return ``str`` and build the whole export in memory, as the log is read
whole; the ``*_records`` forms take records already read, for a caller that has them.
This package imports only the model, ``orjson`` and the standard library (no click, no
rich), and ``import threadlog`` does not import it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, get_args

from threadlog.errors import UsageError
from threadlog.export.html import to_html
from threadlog.export.jsonl import to_jsonl
from threadlog.export.messages import messages, to_messages_json
from threadlog.export.otlp import to_otlp

if TYPE_CHECKING:
    from collections.abc import Sequence

    from threadlog.model.envelope import Record
    from threadlog.store.protocol import Store

__all__ = [
    "FORMATS",
    "Format",
    "export_records",
    "export_thread",
    "load_records",
    "messages",
    "to_html",
    "to_jsonl",
    "to_messages_json",
]

Format = Literal["jsonl", "messages", "html", "otlp"]
"""The name of an export format."""

FORMATS: tuple[Format, ...] = get_args(Format)
"""Every format, the default (``jsonl``) first."""


def load_records(store: Store, thread_id: str) -> list[Record]:
    """The thread's records with their data as appended: artifact references loaded and
    escaped look-alikes unwrapped (`Store.resolve`).

    Raises `ThreadNotFound` for an unknown thread, and what `Store.resolve` raises for a
    missing or damaged artifact.
    """
    return [r._replace(data=store.resolve(r.data)) for r in store.read(thread_id)]


def export_records(records: Sequence[Record], fmt: Format = "jsonl") -> str:
    """``records`` (loaded, see `load_records`) in the format ``fmt``.

    Raises `UsageError` for a format not in `FORMATS`.
    """
    match fmt:
        case "jsonl":
            return to_jsonl(records)
        case "messages":
            return to_messages_json(records)
        case "html":
            return to_html(records)
        case "otlp":
            return to_otlp(records)
    raise UsageError(f"unknown export format {fmt!r} (one of: {', '.join(FORMATS)})")


def export_thread(store: Store, thread_id: str, fmt: Format = "jsonl") -> str:
    """The thread ``thread_id`` of ``store`` in the format ``fmt``.

    Reads the whole log and loads its artifacts. Raises `UsageError` for an unknown format
    (before reading anything) and `ThreadNotFound` for an unknown thread.
    """
    if fmt not in FORMATS:
        raise UsageError(f"unknown export format {fmt!r} (one of: {', '.join(FORMATS)})")
    return export_records(load_records(store, thread_id), fmt)
