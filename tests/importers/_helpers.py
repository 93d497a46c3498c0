"""Helpers of the importer tests: where the hand-written session files are, and how to read a
thread back as plain tuples to compare with what the source says."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from threadlog import open_store
from threadlog.importers import import_paths, source_format
from threadlog.model.context import Context
from threadlog.model.ids import derived_id

FIXTURES = Path(__file__).parent / "fixtures"


def anchor(key: str, item: str) -> str:
    """The record id the importer gives source item ``item`` of the session ``key``."""
    return derived_id("threadlog.import", key, item, "0")


def simple(messages: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Messages as tuples: (user, text), (assistant, text, [tool names]), (tool, id, text),
    (system, text)."""
    out: list[tuple[Any, ...]] = []
    for m in messages:
        if m["role"] == "assistant":
            out.append(
                ("assistant", m.get("content"), [c["name"] for c in m.get("tool_calls") or []])
            )
        elif m["role"] == "tool":
            out.append(("tool", m["tool_call_id"], m["content"]))
        else:
            out.append((m["role"], m["content"]))
    return out


def conversation(records: list[Any], leaf: str | None = None) -> list[tuple[Any, ...]]:
    """The thread's conversation at ``leaf`` (default: its active leaf), simplified."""
    context = Context.from_records(records)
    return simple(context.messages if leaf is None else context.messages_at(leaf))


def import_lines(path: Path, fmt: str, lines: list[dict[str, Any]]) -> tuple[Any, list[Any]]:
    """Write ``lines`` as the JSONL session file ``path``, import it (format ``fmt``) into a
    store in memory; its file report and its thread's records."""
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with open_store("memory://") as store:
        [report] = import_paths(store, source_format(fmt), [str(path)]).files
        return report, store.read(report.thread)
