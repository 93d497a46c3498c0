"""The conversation tree of ``threadlog show --tree``: laid out without recursion, drawn as
plain rich `Text` (user and model text is never markup).

A thread's records form a tree by ``parent``; most of them are bookkeeping (steps, approvals,
provider records) that a reader does not want to see. `entry_tree` keeps the *entries* only
(`threadlog.model.tree.ENTRY_TYPES`: user input, model responses, tool outcomes, compactions,
branch summaries, settings changes), hanging each under the nearest entry above it, in one
pass over the log (parents come before their children), so a thread of any length costs no
stack.

*Layout* (`layout`), like ``git log --graph``: a linear run of entries stays at one
indentation; only a branch point indents, and only its side branches: the child on the active
path (the one that leads to `ThreadState.leaf`; elsewhere the latest child) carries on at the
same indentation, below the others, which hang off it with ``├─``. So the active path reads
straight down the left edge and ends at the bottom, at the active leaf (whose own children, if
the conversation went back to it, are all side branches). Marks come from
`threadlog.model.reducer.replay`: the active leaf, labels, tool calls of unknown outcome.

*Elision*: by default a side branch longer than `SIDE` entries (one, where a branch point
has more than `MANY`) shows its first entries and a count, and a tree longer than `WINDOW` lines keeps its first `HEAD` lines and the last ones,
the active path's end, with one line counting what is left out ("… 4,890 earlier
messages"). ``--all`` shows everything. `tree_json` gives the whole tree as data, every entry
with its parent entry, for ``--json``.
"""

from __future__ import annotations

from dataclasses import field
from typing import TYPE_CHECKING, Any

from rich.text import Text

from threadlog._dataclass import dataclass
from threadlog.cli._describe import lineage_text
from threadlog.cli._out import short as _short
from threadlog.model.reducer import replay
from threadlog.model.tree import ENTRY_TYPES, Tree

if TYPE_CHECKING:
    from collections.abc import Callable

    from threadlog.model.envelope import Record
    from threadlog.model.state import ThreadState

__all__ = [
    "HEAD",
    "SIDE",
    "WINDOW",
    "EntryTree",
    "entry_tree",
    "layout",
    "render_tree",
    "short",
    "tree_json",
]

WINDOW = 60
"""Lines a tree is elided to by default."""
HEAD = 3
"""Lines kept from the top of an elided tree."""
SIDE = 6
"""Entries of a side branch shown by default."""
MANY = 4
"""Side branches at one branch point beyond which each shows its first entry only."""

short = _short
Segments = list[tuple[str, str]]


@dataclass(slots=True)
class EntryTree:
    """The entries of a thread and their parent entries, with what replay knows."""

    state: ThreadState
    entries: dict[str, Record] = field(default_factory=dict)
    parent: dict[str, str | None] = field(default_factory=dict)
    children: dict[str | None, list[str]] = field(default_factory=dict)
    active: set[str] = field(default_factory=set)
    size: dict[str, int] = field(default_factory=dict)
    """Entries in each entry's subtree, itself included."""
    unknown: set[str] = field(default_factory=set)
    leaf: str | None = None
    """The entry the active leaf is, or is under (the leaf may be a record that is not an
    entry: an imported note, a tool call's last record)."""
    labels: dict[str, str] = field(default_factory=dict)
    """Entry → its label: a label on a record that is not an entry marks the entry above it
    (an imported label names a message's last record, e.g. its tool call's)."""
    width: int | None = 60
    """How much of a message a line shows (None: all of it, as in a pipe)."""


def entry_tree(records: list[Record], progress: Callable[[int], None] | None = None) -> EntryTree:
    """The entry tree of a log (one pass forward, one back; no recursion)."""
    state = replay(records)
    tree = Tree.of(records)
    out = EntryTree(state=state)
    nearest: dict[str, str | None] = {}
    for i, record in enumerate(records):
        up = tree.parent.get(record.id)
        anchor: str | None = None
        if up is not None:
            anchor = up if up in out.entries else nearest.get(up)
        nearest[record.id] = anchor
        if record.type in ENTRY_TYPES:
            out.entries[record.id] = record
            out.parent[record.id] = anchor
            out.children.setdefault(anchor, []).append(record.id)
            nearest[record.id] = record.id
        if progress is not None and i % 1000 == 999:
            progress(1000)
    for entry in reversed(list(out.entries)):
        out.size[entry] = out.size.get(entry, 0) + 1
        up = out.parent[entry]
        if up is not None:
            out.size[up] = out.size.get(up, 0) + out.size[entry]
    leaf = state.leaf
    node = leaf if leaf in out.entries else nearest.get(leaf) if leaf else None
    out.leaf = node
    for target, label in state.labels.items():
        marked = target if target in out.entries else nearest.get(target)
        if marked is not None:
            out.labels[marked] = label
    while node is not None:
        out.active.add(node)
        node = out.parent[node]
    out.unknown = {c.call_id for c in state.tool_calls.values() if c.status == "unknown"}
    return out


def _segments(record: Record, width: int | None = 60, *, exact: bool = False) -> Segments:
    """An entry as (text, style) pieces; the text is the user's and the model's, cleaned and
    cut to ``width`` (None: whole), or with ``exact`` as it was written (for JSON)."""
    data: dict[str, Any] = record.data if isinstance(record.data, dict) else {}

    def short(value: Any, limit: int | None = width) -> str:
        if exact:
            return "" if value is None else str(value)
        return _short(value, None if width is None else limit)

    match record.type:
        case "turn.started":
            if data.get("resumes"):
                return [("(resumed) ", "dim"), (short(data.get("input")), "")]
            return [("user", "bold"), (": " + short(data.get("input")), "")]
        case "input.consumed":
            return [("user", "bold"), (" (steering)", "")]
        case "model.responded":
            message = data.get("message") or {}
            calls = ", ".join(str(c.get("name", "?")) for c in message.get("tool_calls") or [] if c)
            out = [("model", "magenta"), (": " + short(message.get("content")), "")]
            return out + ([(" → " + short(calls, 40), "")] if calls else [])
        case "tool_call.finished":
            head = f"result {short(data.get('call_id'), 40)}: "
            if data.get("ok"):
                return [(head + "ok", "")]
            return [(head, ""), (short(data.get("error")), "red")]
        case "tool_call.denied":
            return [("denied", "yellow"), (f" {short(data.get('call_id'), 40)}", "")]
        case "tool_call.resolved":
            return [
                (f"resolved {short(data.get('call_id'), 40)} as {short(data.get('decision'))}", "")
            ]
        case "tool_call.cancelled":
            return [("cancelled", "yellow"), (f" {short(data.get('call_id'), 40)}", "")]
        case "compaction":
            before, after = data.get("tokens_before"), data.get("tokens_after")
            return [("compaction", "cyan"), (f" ({short(before)} → {short(after)} tokens)", "")]
        case "branch.summarized":
            return [("branch summary", "cyan"), (": " + short(data.get("summary")), "")]
        case "provider.interrupted":
            return [("model call interrupted", "red")]
        case "config.changed":
            changes = data.get("changes") or {}
            listed = ", ".join(f"{k}={v}" for k, v in sorted(changes.items()))
            return [("settings", "blue"), (": " + short(listed), "")]
    return [(short(record.type), "")]


def _marks(et: EntryTree, record: Record) -> Segments:
    out: Segments = []
    if record.id == et.leaf:
        out.append(("  ◀ active leaf", "bold green"))
    if record.id in et.labels:
        out.append((f"  #{short(et.labels[record.id], 40)}", "bold blue"))
    if record.type == "model.responded" and isinstance(record.data, dict):
        calls = (record.data.get("message") or {}).get("tool_calls") or []
        pending = [str(c.get("id")) for c in calls if c and c.get("id") in et.unknown]
        if pending:
            out.append((f"  unknown outcome: {short(', '.join(pending), 60)}", "bold red"))
    return out


@dataclass(slots=True, frozen=True)
class Line:
    """One line of the drawing: the graph, then the entry (or a count of elided entries)."""

    graph: str
    entry: str | None
    """The entry's id; None for an elision line."""
    segments: Segments
    active: bool
    elided: int = 0
    """Entries this line stands for beyond its own (an elision line, a cut side branch)."""

    def text(self) -> Text:
        out = Text(self.graph, style="dim")
        for piece, style in self.segments:
            out.append(piece, style=style)
        return out

    def plain(self) -> str:
        return self.graph + "".join(piece for piece, _ in self.segments)


def _entry_line(et: EntryTree, graph: str, entry: str, side: bool) -> Line:
    record = et.entries[entry]
    lead: Segments = [(f"{record.ord} ", "dim")]
    if side:
        lead.append(("branch ", "yellow"))
    segments = lead + _segments(record, et.width) + _marks(et, record)
    return Line(graph, entry, segments, entry in et.active)


def _count(n: int, what: str) -> str:
    return f"{n:,} {what}{'' if n == 1 else 's'}"


def layout(et: EntryTree, *, everything: bool = False) -> list[Line]:
    """The lines of the tree (see the module docstring), elided unless ``everything``. The
    walk places every entry (cheap tuples); only the lines kept are then worded."""
    placed: list[tuple[str, str, bool, int]] = []  # (graph, entry, starts a side, hidden)
    # a stack of (entry, graph of its first line, graph of the lines under it, side entries
    # still to show in this side branch (None: no limit), whether it starts a side branch)
    stack: list[tuple[str, str, str, int | None, bool]] = []
    roots = et.children.get(None, [])
    stack.extend(_order(et, None, roots, "", None, everything))
    while stack:
        entry, first, rest, left, starts = stack.pop()
        kids = et.children.get(entry, [])
        cut = bool(kids) and left is not None and left <= 1
        placed.append((first, entry, starts, et.size[entry] - 1 if cut else 0))
        if not kids or cut:
            continue
        budget = None if left is None else left - 1
        stack.extend(_order(et, entry, kids, rest, budget, everything))
    elision: Line | None = None
    if not everything and len(placed) > WINDOW:
        keep = WINDOW - HEAD - 1
        hidden = sum(1 + extra for _, _, _, extra in placed[HEAD:-keep])
        note = f"… {_count(hidden, 'earlier message')}"
        elision = Line("", None, [(note, "dim")], False, hidden)
        placed = [*placed[:HEAD], *placed[-keep:]]
    lines = []
    for graph, entry, starts, hidden in placed:
        line = _entry_line(et, graph, entry, starts)
        if hidden:
            note = f"  (+{hidden:,} more {'entry' if hidden == 1 else 'entries'} in this branch)"
            line = Line(line.graph, entry, [*line.segments, (note, "dim")], line.active, hidden)
        lines.append(line)
    if elision is not None:
        lines.insert(HEAD, elision)
    return lines


def _order(
    et: EntryTree,
    entry: str | None,
    kids: list[str],
    rest: str,
    left: int | None,
    everything: bool,
) -> list[tuple[str, str, str, int | None, bool]]:
    """Stack items for ``entry``'s children, the one drawn last (popped last) first: the
    continuation (its active child, else its latest; none after the active leaf) at the
    same indentation, and the side branches indented under ``├─``."""
    on_path = [k for k in kids if k in et.active]
    leaf_here = entry is not None and entry == et.leaf
    if leaf_here:
        main: str | None = None
    elif on_path:
        main = on_path[0]
    else:
        main = kids[-1]
    sides = [k for k in kids if k != main]
    items: list[tuple[str, str, str, int | None, bool]] = []
    if main is not None:
        items.append((main, rest, rest, left, False))
    limit = None if everything else SIDE if len(sides) <= MANY else 1
    for kid in reversed(sides):
        side_left = limit if left is None else left if limit is None else min(left, limit)
        items.append((kid, rest + "├─ ", rest + "│  ", side_left, True))
    return items


def render_tree(
    records: list[Record], *, everything: bool = False, width: int | None = 60
) -> list[Line]:
    """The lines of ``records``' conversation tree (a heading line first); messages cut to
    ``width`` characters (None: whole)."""
    et = entry_tree(records)
    et.width = width
    head: Segments = [("thread ", "bold"), (short(et.state.thread_id, None), "")]
    lineage = et.state.lineage
    if lineage:
        head.append((f"  ({lineage_text(lineage)})", "dim"))
    return [Line("", None, head, False), *layout(et, everything=everything)]


def tree_json(records: list[Record]) -> dict[str, Any]:
    """The whole tree as data: every entry, in log order, with its parent entry."""
    et = entry_tree(records)
    entries = []
    for entry, record in et.entries.items():
        segments = _segments(record, None, exact=True)
        entries.append(
            {
                "id": entry,
                "ord": record.ord,
                "type": record.type,
                "parent": et.parent[entry],
                "children": len(et.children.get(entry, [])),
                "text": "".join(piece for piece, _ in segments),
                "active": entry in et.active,
                "leaf": entry == et.leaf,
                "label": et.labels.get(entry),
            }
        )
    return {
        "thread": et.state.thread_id,
        "leaf": et.state.leaf,
        "lineage": et.state.lineage,
        "entries": entries,
        "unknown_calls": sorted(et.unknown),
    }
