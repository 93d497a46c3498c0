"""Branches and history: show --tree, diff, export, memory."""

from __future__ import annotations

import html
import sys
from typing import TYPE_CHECKING, Any

import click
import orjson
from rich.console import Console
from rich.tree import Tree as RichTree

from threadlog.cli import cli, handle_errors, store_options
from threadlog.cli._store import open_disk_store
from threadlog.errors import UsageError
from threadlog.model.context import Context
from threadlog.model.reducer import replay
from threadlog.model.tree import ENTRY_TYPES, Tree, common_ancestor

if TYPE_CHECKING:
    from threadlog.model.envelope import Record

__all__ = ["diff", "export", "memory", "render_tree"]


def _entry_text(record: Record) -> str:
    data: dict[str, Any] = record.data if isinstance(record.data, dict) else {}
    match record.type:
        case "turn.started":
            return (
                "[dim](resumed)[/dim] " if data.get("resumes") else "[bold]user[/bold]: "
            ) + _short(data.get("input"))
        case "input.consumed":
            return "[bold]user[/bold] (steering)"
        case "model.responded":
            message = data.get("message") or {}
            calls = ", ".join(c.get("name", "?") for c in message.get("tool_calls") or [])
            return (
                "[magenta]model[/magenta]: "
                + _short(message.get("content"))
                + (f" → {calls}" if calls else "")
            )
        case "tool_call.finished":
            return f"result {data.get('call_id')}: " + (
                "ok" if data.get("ok") else f"[red]{_short(data.get('error'))}[/red]"
            )
        case "tool_call.denied":
            return f"[yellow]denied[/yellow] {data.get('call_id')}"
        case "tool_call.resolved":
            return f"resolved {data.get('call_id')} as {data.get('decision')}"
        case "compaction":
            return f"[cyan]compaction[/cyan] ({data.get('tokens_before')} → {data.get('tokens_after')} tokens)"
        case "branch.summarized":
            return "[cyan]branch summary[/cyan]: " + _short(data.get("summary"))
        case "provider.interrupted":
            return "[red]model call interrupted[/red]"
    return record.type


def _short(value: Any, width: int = 60) -> str:
    text = " ".join(str(value or "").split())
    return text if len(text) <= width else text[: width - 1] + "…"


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


@cli.command()
@store_options
@click.argument("thread")
@click.argument("a")
@click.argument("b")
@handle_errors
def diff(home: str | None, as_json: bool, thread: str, a: str, b: str) -> None:
    """Show where two branches of a thread part: A and B are entries (ids or ordinals).

    \b
    Example:
      threadlog diff THREAD 14 27
    """
    with open_disk_store(home) as store:
        records = store.read(thread)
    by_ord = {str(r.ord): r.id for r in records}
    ids = {r.id for r in records}
    ends = []
    for name in (a, b):
        entry = by_ord.get(name, name)
        if entry not in ids:
            raise UsageError(f"no entry {name!r} in thread {thread}")
        ends.append(entry)
    tree = Tree.of(records)
    shared = common_ancestor(tree, ends[0], ends[1])
    context = Context.from_records(records)
    paths = [[(e, m) for e, m in context.entries_at(end)] for end in ends]
    common = 0
    for x, y in zip(paths[0], paths[1], strict=False):
        if x[0] != y[0]:
            break
        common += 1
    if as_json:
        sys.stdout.write(
            orjson.dumps(
                {
                    "common_ancestor": shared,
                    "common_ord": tree.records[shared].ord if shared else None,
                    "shared_messages": common,
                    "a": [m for _, m in paths[0][common:]],
                    "b": [m for _, m in paths[1][common:]],
                },
                option=orjson.OPT_INDENT_2,
            ).decode()
            + "\n"
        )
        return
    console = Console(highlight=False)
    where = f"ord {tree.records[shared].ord}" if shared else "the root"
    console.print(f"the branches share {common} messages and part after {where}")
    for name, path in zip((a, b), paths, strict=True):
        console.print(f"\n[bold]{name}[/bold]:")
        for _, message in path[common:]:
            console.print(
                f"  {message['role']:>9}: {_short(message.get('content'), 90)}", markup=False
            )


@cli.command()
@store_options
@click.argument("thread")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["jsonl", "messages", "html"]),
    default="jsonl",
    show_default=True,
    help="jsonl: every record; messages: every conversation message "
    "in log order (all branches, nothing compacted away); html: a readable page.",
)
@click.option(
    "--output", "-o", type=click.File("w"), default="-", help="Write here instead of stdout."
)
@handle_errors
def export(home: str | None, as_json: bool, thread: str, fmt: str, output: Any) -> None:
    """Export a thread. Compaction never deletes: every original message is exported.

    \b
    Example:
      threadlog export THREAD --format messages > messages.json
      threadlog export THREAD --format html -o thread.html
    """
    with open_disk_store(home) as store:
        records = store.read(thread)
        resolved = [r._replace(data=store.resolve(r.data)) for r in records]
    if fmt == "jsonl":
        for record in resolved:
            output.write(orjson.dumps(record.to_dict()).decode() + "\n")
        return
    context = Context()
    messages: list[dict[str, Any]] = []
    for record in resolved:
        context.apply(record)
        node = context.nodes[record.id]
        if node[1] is not None:
            messages.append(
                {"ord": record.ord, "entry": record.id, "parent": record.parent, **node[1]}
            )
    if fmt == "messages":
        output.write(orjson.dumps(messages, option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    state = replay(records)
    rows = "\n".join(
        f'<div class="m {html.escape(m["role"])}"><span class="o">{m["ord"]}</span>'
        f"<b>{html.escape(m['role'])}</b><pre>{html.escape(str(m.get('content') or ''))}"
        + "".join(
            f"\n→ {html.escape(c.get('name', ''))}({html.escape(orjson.dumps(c.get('arguments')).decode())})"
            for c in m.get("tool_calls") or []
        )
        + "</pre></div>"
        for m in messages
    )
    output.write(
        "<!doctype html><meta charset=utf-8><title>threadlog "
        + html.escape(state.thread_id)
        + "</title><style>body{font:14px system-ui;max-width:60em;margin:2em auto}"
        ".m{border-left:3px solid #ccc;padding:.2em .8em;margin:.6em 0}.user{border-color:#36c}"
        ".assistant{border-color:#a3c}.tool{border-color:#999}.system{border-color:#c93}"
        "pre{white-space:pre-wrap;margin:.2em 0}.o{float:right;color:#999}</style>"
        f"<h1>{html.escape(state.title or state.thread_id)}</h1>"
        f"<p>{len(records)} records · principal {html.escape(state.principal)}</p>" + rows + "\n"
    )


@cli.group()
def memory() -> None:
    """Long-term memory: facts written explicitly, with their source and expiry.

    \b
    Examples:
      threadlog memory ls
      threadlog memory rm MEMORY_ID
    """


@memory.command(name="ls")
@store_options
@click.option("--principal", help="Only this principal's threads.")
@click.option("--all", "show_all", is_flag=True, help="Include revoked facts.")
@handle_errors
def memory_ls(home: str | None, as_json: bool, principal: str | None, show_all: bool) -> None:
    """List remembered facts, oldest first.

    \b
    Example:
      threadlog memory ls --principal alice --json
    """
    with open_disk_store(home) as store:
        rows = store.memories(principal=principal, include_revoked=show_all)
    if as_json:
        sys.stdout.write(orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    if not rows:
        click.echo("no memories")
        return
    for row in rows:
        flags = " (revoked)" if row["revoked"] else ""
        expiry = f", expires {row['expires_at']}" if row["expires_at"] else ""
        click.echo(
            f"{row['memory_id']}  [{row['scope']}{'/' + row['key'] if row['key'] else ''}] "
            f"{row['fact']}  — thread {row['thread_id']}, {row['written_at']}{expiry}{flags}"
        )


@memory.command(name="rm")
@store_options
@click.argument("memory_id")
@click.option("--reason", help="Why (recorded).")
@handle_errors
def memory_rm(home: str | None, as_json: bool, memory_id: str, reason: str | None) -> None:
    """Revoke a fact (a memory.revoked record in the thread that wrote it).

    \b
    Example:
      threadlog memory rm 01a22a4f-… --reason "moved to Berlin"
    """
    import asyncio

    from threadlog.runtime.runtime import Runtime

    with open_disk_store(home) as store:
        rows = [r for r in store.memories(include_revoked=True) if r["memory_id"] == memory_id]
        home = store.home
    if not rows:
        raise UsageError(f"no memory {memory_id!r}")
    if rows[0]["revoked"]:
        raise UsageError(f"memory {memory_id} is already revoked")
    thread = rows[0]["thread_id"]

    async def run() -> int:
        async with Runtime(home) as runtime:
            session = await runtime.open(thread, resume=False)
            return (await session.forget(memory_id, reason=reason)).ord

    ord_ = asyncio.run(run())
    if as_json:
        sys.stdout.write(
            orjson.dumps({"revoked": memory_id, "thread": thread, "ord": ord_}).decode() + "\n"
        )
    else:
        click.echo(f"revoked {memory_id} (thread {thread}, ord {ord_})")
