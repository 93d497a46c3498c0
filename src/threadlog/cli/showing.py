"""``threadlog show``: one thread, in words, as its conversation tree, or as JSON.

The store is read first (`fetch_for_show`: the records, the reduced state, the index's rows),
closed, and only then printed. The thread's status is honest (`threadlog.cli._describe`):
running or interrupted, damaged, and every tool call waiting for a human with the command
that settles it. The latest records are described in words, the demo's, not as raw JSON.
``--tree`` draws the conversation tree (`threadlog.cli._tree`); with ``--json`` it is the tree
as data. All user and model text reaches the terminal as plain `rich.text.Text`.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click
from rich.text import Text

from threadlog._dataclass import dataclass
from threadlog.cli import EXIT_STORE, cli, fail, handle_errors, store_options
from threadlog.cli._describe import describe, lineage_text, thread_row
from threadlog.cli._fetch import records_for_show
from threadlog.cli._out import clean, console, is_terminal, print_json, progress, short, table
from threadlog.cli._store import THREAD, DiskStore, open_disk_store, resolve_thread
from threadlog.errors import IntegrityError
from threadlog.model.recovery import continuation_cut_short

if TYPE_CHECKING:
    from threadlog.model.envelope import Record
    from threadlog.model.state import ThreadState

__all__ = ["fetch_for_show", "show"]


@dataclass(slots=True)
class Shown:
    """What ``show`` read from the store."""

    records: list[Record]
    state: ThreadState
    thread: dict[str, Any]
    turns: list[dict[str, Any]]
    calls: list[dict[str, Any]]
    complete: bool = True
    """Whether ``records`` is the whole log (else the latest ones only)."""


def fetch_for_show(store: DiskStore, thread: str, last_n: int, *, whole: bool) -> Shown:
    """Read what ``show`` prints: every record with ``whole`` (the tree), else only the
    latest (`threadlog.cli._fetch.records_for_show`)."""
    records, complete = records_for_show(store, thread, last_n, whole=whole)
    state = store.state(thread, history=False)
    info = store.thread_info(thread)
    turns = store.turns(thread)
    calls = store.tool_calls(thread)
    return Shown(records, state, thread_row(store, info, calls), turns, calls, complete)


@cli.command()
@store_options
@click.argument("thread", type=THREAD)
@click.option(
    "--last",
    "last_n",
    default=10,
    show_default=True,
    type=click.IntRange(min=0),
    help="How many of the latest records to list.",
)
@click.option(
    "--tree",
    "as_tree",
    is_flag=True,
    help="Draw the conversation tree: branches, the active leaf, labels, compactions, "
    "tool calls of unknown outcome (with --json: the tree as data).",
)
@click.option(
    "--all",
    "everything",
    is_flag=True,
    help="With --tree: every entry (by default long side branches and the start of a long "
    "thread are elided, with a count).",
)
@handle_errors
def show(
    home: str | None, as_json: bool, thread: str, last_n: int, as_tree: bool, everything: bool
) -> None:
    """Show a thread: owner, status, config, turns, tool calls and its latest records.

    \b
    Example:
      threadlog show 0190b7e2                 (any unique prefix of the id)
      threadlog show THREAD --tree
      threadlog show THREAD --tree --json | jq '.entries | length'
    """
    with open_disk_store(home, create=False) as store:
        thread = resolve_thread(store, thread)
        try:
            with progress("reading the thread", quiet=as_json):
                shown = fetch_for_show(store, thread, last_n, whole=as_tree)
        except IntegrityError as exc:
            fail(
                f"{exc} (the log is damaged: `threadlog verify {thread}` shows where; "
                f"`threadlog resume {thread} --salvage` keeps what is valid)",
                EXIT_STORE,
                "damage",
                thread=thread,
            )
    if as_tree:
        from threadlog.cli._tree import render_tree, tree_json

        if as_json:
            print_json(tree_json(shown.records))
            return
        with progress("drawing the tree", quiet=as_json):
            lines = render_tree(
                shown.records, everything=everything, width=60 if is_terminal() else None
            )
        if is_terminal():
            screen = console()
            for line in lines:
                screen.print(line.text(), no_wrap=True, overflow="ellipsis")
        else:
            sys.stdout.write("".join(line.plain() + "\n" for line in lines))
        return
    if as_json:
        print_json(
            {
                "thread": shown.thread,
                "config": shown.state.config,
                "lineage": shown.state.lineage,
                "active_turn": shown.state.active_turn,
                "leaf": shown.state.leaf,
                "plan_version": shown.state.plan_version,
                "turns": shown.turns,
                "tool_calls": shown.calls,
                "sessions": _sessions(shown.records),
                "last_records": [r.to_dict() for r in shown.records[-last_n:]] if last_n else [],
            }
        )
        return
    _print_show(shown, last_n)


def _field(screen: Any, name: str, value: Text | str) -> None:
    line = Text(f"  {name:<10} ")
    line.append(value if isinstance(value, Text) else Text(clean(value, one_line=True)))
    screen.print(line, soft_wrap=True)


def _print_show(shown: Shown, last_n: int) -> None:
    state, row = shown.state, shown.thread
    screen = console()
    head = Text("thread ", style="bold")
    head.append(state.thread_id)
    screen.print(head, soft_wrap=True)
    _field(screen, "principal", state.principal or "")
    _field(screen, "created", state.created_at or "")
    if state.title or row.get("title"):
        _field(
            screen, "title", short(state.title or row.get("title"), 70 if is_terminal() else None)
        )
    if state.lineage:
        _field(screen, "lineage", lineage_text(state.lineage))
    status = str(row["status"])
    styles = {"damaged": "bold red", "interrupted": "yellow", "running": "green"}
    line = Text(status, style=styles.get(status, ""))
    if status == "interrupted" and state.active_turn is not None:
        line.append(
            f": turn {state.active_turn} is open and no process holds the thread "
            f"(threadlog resume {state.thread_id})"
        )
    elif status == "interrupted":
        cut = continuation_cut_short(state)
        line.append(
            f": turn {cut} was ended by a recovery that stopped before carrying on with its task "
            f"(threadlog resume {state.thread_id})"
            if cut is not None
            else ": its last turn was ended by a recovery that did not carry on with its task"
        )
    elif status == "running":
        line.append(f": turn {state.active_turn}, a process holds the thread")
    elif status == "damaged":
        line.append(
            f": {clean(row.get('damage'), one_line=True)} (threadlog verify {state.thread_id})"
        )
    _field(screen, "status", line)
    for wait in row["waiting"]:
        what = "outcome unknown" if wait["needs"] == "resolve" else "waits for approval"
        text = Text(f"{clean(wait['call_id'])} ({clean(wait['tool'])}): {what}: ", style="bold red")
        text.append(clean(wait["command"]))
        _field(screen, "waiting", text)
    _field(screen, "records", f"{state.last_ord}   (last {row.get('last_ts')})")
    if state.config:
        _field(screen, "config", ", ".join(f"{k}={v!r}" for k, v in state.config.items()))
    if shown.turns:
        table(
            ["turn", "status", "ords", "input"],
            [
                (
                    t["turn_id"],
                    t["status"],
                    f"{t['started_ord']}–{t['ended_ord'] or '…'}",
                    t["input"],
                )
                for t in shown.turns
            ],
            title="turns",
            widths={"input": 50},
            out=screen,
        )
    if shown.calls:
        table(
            ["call", "tool", "side effect", "status"],
            [
                (
                    c["call_id"],
                    c["tool"],
                    c["side_effect"],
                    Text(
                        "unknown (threadlog resolve)" if c["status"] == "unknown" else c["status"],
                        style="bold red" if c["status"] == "unknown" else "",
                    ),
                )
                for c in shown.calls
            ],
            title="tool calls",
            out=screen,
        )
    sessions = _sessions(shown.records)
    if sessions:
        table(
            ["session", "source", "host", "pid", "ords"],
            [
                (
                    s["session_id"],
                    s["source"],
                    s["host"],
                    str(s["pid"]),
                    f"{s['opened_ord']}–"
                    + str(s["closed_ord"] or ("…" if s is sessions[-1] else "never closed")),
                )
                for s in sessions
            ],
            title="sessions"
            if shown.complete
            else f"sessions (in the last {len(shown.records):,} records)",
            out=screen,
        )
    if last_n:
        latest = shown.records[-last_n:]
        table(
            ["ord", "time", "type", "what"],
            [
                (str(r.ord), r.ts[11:23], r.type, describe(r, 70 if is_terminal() else None))
                for r in latest
            ],
            title=f"last {len(latest)} records",
            out=screen,
        )


def _sessions(records: list[Record]) -> list[dict[str, Any]]:
    """The sessions that wrote the thread (``session.opened``/``.closed``), in order."""
    out: list[dict[str, Any]] = []
    by_id: dict[str, dict[str, Any]] = {}
    for record in records:
        data = record.data if isinstance(record.data, dict) else {}
        if record.type == "session.opened":
            row = {
                "session_id": data.get("session_id"),
                "source": data.get("source"),
                "host": data.get("host"),
                "pid": data.get("pid"),
                "thread": record.thread,
                "opened_ord": record.ord,
                "closed_ord": None,
            }
            out.append(row)
            by_id[str(data.get("session_id"))] = row
        elif record.type == "session.closed" and str(data.get("session_id")) in by_id:
            by_id[str(data.get("session_id"))]["closed_ord"] = record.ord
    return out
