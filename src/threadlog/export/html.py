"""The ``html`` export: a thread's messages as one self-contained, readable page.

The page is the `threadlog.export.messages` list drawn as blocks, one per message, coloured
by role, with the record's ordinal in the corner and an assistant's tool calls listed as
``→ name(arguments)`` under its text. The heading is the thread's title (else its id) and the
line below it counts the records and names the principal. Everything taken from the log is
HTML-escaped; the page has inline CSS and no script, so it can be opened from disk or served
as it is.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

import orjson

from threadlog.export.messages import messages
from threadlog.model.reducer import replay

if TYPE_CHECKING:
    from collections.abc import Sequence

    from threadlog.model.envelope import Record

__all__ = ["to_html"]

_STYLE = (
    "<style>body{font:14px system-ui;max-width:60em;margin:2em auto}"
    ".m{border-left:3px solid #ccc;padding:.2em .8em;margin:.6em 0}.user{border-color:#36c}"
    ".assistant{border-color:#a3c}.tool{border-color:#999}.system{border-color:#c93}"
    "pre{white-space:pre-wrap;margin:.2em 0}.o{float:right;color:#999}</style>"
)


def _block(message: dict[str, Any]) -> str:
    """One message: its role, ordinal, text and tool calls."""
    role = html.escape(message["role"])
    calls = "".join(
        f"\n→ {html.escape(c.get('name', ''))}"
        f"({html.escape(orjson.dumps(c.get('arguments')).decode())})"
        for c in message.get("tool_calls") or []
    )
    return (
        f'<div class="m {role}"><span class="o">{message["ord"]}</span>'
        f"<b>{role}</b><pre>{html.escape(str(message.get('content') or ''))}"
        f"{calls}</pre></div>"
    )


def to_html(records: Sequence[Record]) -> str:
    """The page for a thread's records (its whole log, artifacts loaded), ending in a
    newline."""
    state = replay(records)
    rows = "\n".join(_block(m) for m in messages(records))
    return (
        "<!doctype html><meta charset=utf-8><title>threadlog "
        + html.escape(state.thread_id)
        + "</title>"
        + _STYLE
        + f"<h1>{html.escape(state.title or state.thread_id)}</h1>"
        + f"<p>{len(records)} records · principal {html.escape(state.principal)}</p>"
        + rows
        + "\n"
    )
