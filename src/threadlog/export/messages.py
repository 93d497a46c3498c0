"""The ``messages`` export: every conversation message of a thread, in log order.

The model's context is the path from the active leaf to the root, with compacted stretches
replaced by a summary; an export wants the opposite: everything ever said, on every branch.
So the records are folded through a `Context` one by one (the same projection the runtime
uses, so a message looks exactly as the model saw it), and each record that carries a
message contributes it, tagged with where it sits in the log and the tree:

    {"ord": 7, "entry": "<record id>", "parent": "<parent id or null>", "role": ..., ...}

Bookkeeping records (steps, approvals, labels, memory) carry no message and add nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from threadlog.model.context import Context

if TYPE_CHECKING:
    from collections.abc import Iterable

    from threadlog.model.envelope import Record

__all__ = ["messages", "to_messages_json"]


def messages(records: Iterable[Record]) -> list[dict[str, Any]]:
    """Every message the records carry, in log order, each with ``ord``, ``entry`` (the
    record's id) and ``parent`` before the message's own fields (``role``, ``content``, …).

    ``records`` is a thread's log from its first record, with artifacts loaded if the
    messages should hold the data itself rather than a placeholder naming the artifact.
    """
    context = Context()
    out: list[dict[str, Any]] = []
    for record in records:
        context.apply(record)
        message = context.nodes[record.id][1]
        if message is not None:
            out.append({"ord": record.ord, "entry": record.id, "parent": record.parent, **message})
    return out


def to_messages_json(records: Iterable[Record]) -> str:
    """`messages` as a JSON array indented by two spaces, ending in a newline."""
    return orjson.dumps(messages(records), option=orjson.OPT_INDENT_2).decode() + "\n"
