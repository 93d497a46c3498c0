"""The conversation tree of ``threadlog show --tree``, drawn with rich.

A thread's records form a tree by ``parent``; most of them are bookkeeping (steps, approvals,
provider records) that a reader does not want to see. `render_tree` draws the *entries* only
(`threadlog.model.tree.ENTRY_TYPES`: user input, model responses, tool outcomes, compactions,
branch summaries, settings changes), hanging each under the nearest entry above it, and marks what
`threadlog.model.reducer.replay` knows about them: the active leaf, labels, tool calls of
unknown outcome, and the start of every branch but the first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.tree import Tree as RichTree

from threadlog.model.reducer import replay
from threadlog.model.tree import ENTRY_TYPES, Tree

if TYPE_CHECKING:
    from threadlog.model.envelope import Record

__all__ = ["render_tree", "short"]


def short(value: Any, width: int = 60) -> str:
    """``value`` as one line of at most ``width`` characters (whitespace collapsed, an
    ellipsis where it was cut; None is empty)."""
    text = " ".join(str(value or "").split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _entry_text(record: Record) -> str:
    data: dict[str, Any] = record.data if isinstance(record.data, dict) else {}
    match record.type:
        case "turn.started":
            return (
                "[dim](resumed)[/dim] " if data.get("resumes") else "[bold]user[/bold]: "
            ) + short(data.get("input"))
        case "input.consumed":
            return "[bold]user[/bold] (steering)"
        case "model.responded":
            message = data.get("message") or {}
            calls = ", ".join(c.get("name", "?") for c in message.get("tool_calls") or [])
            return (
                "[magenta]model[/magenta]: "
                + short(message.get("content"))
                + (f" → {calls}" if calls else "")
            )
        case "tool_call.finished":
            return f"result {data.get('call_id')}: " + (
                "ok" if data.get("ok") else f"[red]{short(data.get('error'))}[/red]"
            )
        case "tool_call.denied":
            return f"[yellow]denied[/yellow] {data.get('call_id')}"
        case "tool_call.resolved":
            return f"resolved {data.get('call_id')} as {data.get('decision')}"
        case "tool_call.cancelled":
            return f"[yellow]cancelled[/yellow] {data.get('call_id')}"
        case "compaction":
            return f"[cyan]compaction[/cyan] ({data.get('tokens_before')} → {data.get('tokens_after')} tokens)"
        case "branch.summarized":
            return "[cyan]branch summary[/cyan]: " + short(data.get("summary"))
        case "provider.interrupted":
            return "[red]model call interrupted[/red]"
        case "config.changed":
            changes = data.get("changes") or {}
            return "[blue]settings[/blue]: " + short(
                ", ".join(f"{k}={v}" for k, v in sorted(changes.items()))
            )
    return record.type


def render_tree(records: list[Record]) -> RichTree:
    """The conversation tree: entries only, the active leaf, labels, compactions, unknowns."""
    state = replay(records)
    tree = Tree.of(records)
    root = RichTree(f"[bold]thread[/bold] {state.thread_id}")
    if state.lineage:
        root.label = f"{root.label}  [dim](forked from {state.lineage.get('thread')} at ord {state.lineage.get('ord')})[/dim]"
    unknown = {c.call_id for c in state.tool_calls.values() if c.status == "unknown"}

    def entry_children(node: str | None) -> list[Record]:
        # skip bookkeeping records: their entry children belong to the nearest entry above
        out: list[Record] = []
        for child in tree.children.get(node, []):
            record = tree.records[child]
            if record.type in ENTRY_TYPES:
                out.append(record)
            else:
                out.extend(entry_children(child))
        return out

    def add(parent: RichTree, node: str | None) -> None:
        kids = entry_children(node)
        for i, record in enumerate(kids):
            label = f"[dim]{record.ord}[/dim] {_entry_text(record)}"
            if record.id == state.leaf:
                label += "  [bold green]◀ active leaf[/bold green]"
            if record.id in state.labels:
                label += f"  [bold blue]#{state.labels[record.id]}[/bold blue]"
            data = record.data if isinstance(record.data, dict) else {}
            if record.type == "model.responded":
                pending = [
                    c.get("id")
                    for c in (data.get("message") or {}).get("tool_calls") or []
                    if c.get("id") in unknown
                ]
                if pending:
                    label += f"  [bold red]unknown outcome: {', '.join(pending)}[/bold red]"
            branch = parent.add(label)
            if len(kids) > 1 and i > 0:
                branch.label = f"[yellow]branch[/yellow] {branch.label}"
            add(branch, record.id)

    first = records[0].id if records else None
    add(root, first)
    return root
