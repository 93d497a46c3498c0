"""Looking at a store without changing a thread: ls, show, events, tail, verify, rebuild.

Each command opens the store on disk (`open_disk_store`: the port plus the `Catalog`,
`LocalHome` and `Maintenance` capabilities), reads what it needs, closes the store, and only
then prints: a table for people, or with ``--json`` the shapes ``docs/cli.md`` documents.
``events`` and ``tail`` print the log itself, one envelope per line. ``rebuild`` rewrites only
the index, a projection of the logs.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

import click
import orjson
from rich.console import Console
from rich.table import Table

from threadlog.cli import EXIT_FAILED, cli, handle_errors, remote, store_options
from threadlog.cli._fetch import last_records, records_for_show
from threadlog.cli._store import DiskStore, location, open_disk_store
from threadlog.errors import InvalidTransition, UsageError
from threadlog.store.protocol import VerifyReport

if TYPE_CHECKING:
    from threadlog.model.envelope import Record
    from threadlog.store.protocol import VerifyReport

__all__ = ["events", "ls", "rebuild", "show", "tail", "verify"]


def _console() -> Console:
    return Console(highlight=False, soft_wrap=False)


def _print_json(value: Any) -> None:
    sys.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode() + "\n")


def _short(text: str | None, width: int = 48) -> str:
    if not text:
        return ""
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def open_store(home: str | None) -> DiskStore:
    return open_disk_store(home)


@cli.command()
@store_options
@click.option("--principal", help="Only threads owned by this principal.")
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    help="At most this many threads [default: 50 in tables, all with --json].",
)
@handle_errors
def ls(home: str | None, as_json: bool, principal: str | None, limit: int | None) -> None:
    """List threads, most recently active first.

    \b
    Example:
      threadlog ls --limit 20
      threadlog ls --json | jq '.[].thread_id'
    """
    shown = limit if limit is not None or as_json else 50
    with open_store(home) as store:
        rows = store.threads(principal=principal, limit=None if shown is None else shown + 1)
    if as_json:
        _print_json([_thread_json(row.to_dict()) for row in rows[:shown]])
        return
    if not rows:
        click.echo(f"no threads in {location(store)} (try: threadlog demo)")
        return
    more = len(rows) > (shown or len(rows))
    rows = rows[:shown]
    table = Table(box=None, header_style="bold")
    for name in ("thread", "principal", "title", "status", "records", "turns", "last activity"):
        table.add_column(name, no_wrap=name != "title")
    for row in rows:
        status = "[red]damaged[/red]" if row.damage else row.status
        table.add_row(
            row.thread_id,
            row.principal or "",
            _short(row.title, 40),
            status,
            str(row.last_ord),
            str(row.turns),
            (row.last_ts or "")[:19].replace("T", " "),
        )
    _console().print(table)
    if more:
        click.echo("… more threads not shown (--limit N to see more)")


def _thread_json(row: dict[str, Any]) -> dict[str, Any]:
    row = dict(row)
    row.pop("path", None)
    row.pop("bytes", None)
    return row


@cli.command()
@store_options
@click.argument("thread")
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
    "tool calls of unknown outcome.",
)
@handle_errors
def show(home: str | None, as_json: bool, thread: str, last_n: int, as_tree: bool) -> None:
    """Show a thread: owner, config, turns, tool calls and its latest records.

    \b
    Example:
      threadlog show 0190b7e2-4c1a-7d2e-9f00-1a2b3c4d5e6f
      threadlog show THREAD --tree
    """
    with open_store(home) as store:
        records, whole = records_for_show(store, thread, last_n, whole=as_tree and not as_json)
        state = store.state(thread)
        info = store.thread_info(thread)
        turns = store.turns(thread)
        calls = store.tool_calls(thread)
    if as_tree and not as_json:
        from threadlog.cli._tree import render_tree

        _console().print(render_tree(records))
        return
    if as_json:
        _print_json(
            {
                "thread": _thread_json(info.to_dict()),
                "config": state.config,
                "lineage": state.lineage,
                "active_turn": state.active_turn,
                "leaf": state.leaf,
                "plan_version": state.plan_version,
                "turns": turns,
                "tool_calls": calls,
                "sessions": _sessions(records),
                "last_records": [r.to_dict() for r in records[-last_n:]] if last_n else [],
            }
        )
        return
    console = _console()
    console.print(f"[bold]thread[/bold] {state.thread_id}")
    console.print(f"  principal  {state.principal}")
    console.print(f"  created    {state.created_at}")
    if state.title or info.title:
        console.print(f"  title      {_short(state.title or info.title, 70)}")
    if state.lineage:
        console.print(
            f"  forked     from {state.lineage.get('thread')} at ord {state.lineage.get('ord')}"
        )
    console.print(f"  records    {state.last_ord}   (last {info.last_ts})")
    if state.config:
        console.print("  config     " + ", ".join(f"{k}={v!r}" for k, v in state.config.items()))
    if turns:
        table = Table(title="turns", box=None, header_style="bold", title_justify="left")
        for name in ("turn", "status", "ords", "input"):
            table.add_column(name)
        for turn in turns:
            ords = f"{turn['started_ord']}–{turn['ended_ord'] or '…'}"
            table.add_row(turn["turn_id"], turn["status"], ords, _short(turn["input"], 50))
        console.print(table)
    if calls:
        table = Table(title="tool calls", box=None, header_style="bold", title_justify="left")
        for name in ("call", "tool", "side effect", "status"):
            table.add_column(name)
        for call in calls:
            status = call["status"]
            if status == "unknown":
                status = "[bold red]unknown[/bold red] (threadlog resolve)"
            table.add_row(call["call_id"], call["tool"] or "", call["side_effect"] or "", status)
        console.print(table)
    sessions = _sessions(records)
    if sessions:
        title = "sessions" if whole else f"sessions (in the last {len(records):,} records)"
        table = Table(title=title, box=None, header_style="bold", title_justify="left")
        for name in ("session", "source", "host", "pid", "ords"):
            table.add_column(name)
        for s in sessions:
            closed = s["closed_ord"] or ("…" if s is sessions[-1] else "[red]never closed[/red]")
            ords = f"{s['opened_ord']}–{closed}"
            table.add_row(s["session_id"], s["source"], s["host"], str(s["pid"]), ords)
        console.print(table)
    if last_n:
        console.print(
            _records_table(records[-last_n:], title=f"last {min(last_n, len(records))} records")
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


def _records_table(records: list[Record], *, title: str) -> Table:
    table = Table(title=title, box=None, header_style="bold", title_justify="left")
    for name in ("ord", "time", "session", "type", "data"):
        table.add_column(name, no_wrap=name != "data")
    for record in records:
        writer = record.data.get("session") if isinstance(record.data, dict) else None
        data = orjson.dumps(record.data).decode()
        table.add_row(
            str(record.ord),
            record.ts[11:23],
            writer[-8:] if isinstance(writer, str) else "",
            record.type,
            _short(data, 70),
        )
    return table


@cli.command()
@store_options
@click.argument("thread")
@click.option(
    "--after",
    default=0,
    show_default=True,
    type=click.IntRange(min=0),
    help="Only records with a larger ordinal (a cursor).",
)
@click.option("--limit", type=click.IntRange(min=1), help="At most this many records.")
@click.option(
    "--last",
    "last_n",
    type=click.IntRange(min=0),
    help="Only the latest this many records (after --after), read from the end of the log.",
)
@handle_errors
def events(
    home: str | None,
    as_json: bool,
    thread: str,
    after: int,
    limit: int | None,
    last_n: int | None,
) -> None:
    """Print a thread's records as JSON lines, one envelope per line.

    The output is the log itself (each line verifies on its own), so it can be piped into jq
    or another tool. --json is accepted and changes nothing.

    \b
    Example:
      threadlog events THREAD --after 40 | jq -c '{ord, type}'
      threadlog events THREAD --last 5
    """
    with open_store(home) as store:
        if last_n is not None:
            records = last_records(store, thread, last_n, after=after)[:limit]
        else:
            records = store.read(thread, after, limit=limit)
    out = sys.stdout.buffer
    for record in records:
        out.write(orjson.dumps(record.to_dict()) + b"\n")
    out.flush()


@cli.command()
@store_options
@click.argument("thread", required=False)
@click.option(
    "--no-events",
    is_flag=True,
    help="Check only framing, hashes, chain and ordinals, not event semantics.",
)
@handle_errors
def verify(home: str | None, as_json: bool, thread: str | None, no_events: bool) -> None:
    """Verify logs: framing, hashes, the hash chain, gap-free ordinals, (unless
    --no-events) that every event is legal for its thread's state, and that every artifact
    a record references (a command's full output, a large value) exists and matches its hash.

    Exits 1 and names the first bad ordinal of each damaged thread. A torn tail (an
    interrupted final write, never acknowledged) is reported but is not a failure: it is
    repaired when the thread is next opened for writing. Problems the store found and skipped
    when it opened (a journal it refused or could not replay) are listed on stderr and are
    failures too.

    \b
    Examples:
      threadlog verify                verify every thread
      threadlog verify THREAD --json
    """
    with open_store(home) as store:
        ids = [thread] if thread else store.thread_ids() + store.missing_threads()
        if thread and not store.exists(thread) and thread not in store.missing_threads():
            raise UsageError(f"no thread {thread!r} in this store")
        reports = [store.verify(t, check_events=not no_events) for t in ids]
        problems = list(store.problems)
    failed = [r for r in reports if not r.ok]
    if as_json:
        _print_json(reports[0].to_dict() if thread else [r.to_dict() for r in reports])
    else:
        _print_verify(reports)
    for problem in problems:
        click.echo(f"problem: {problem['message']}", err=True)
    if failed or problems:
        sys.exit(EXIT_FAILED)


def _print_verify(reports: list[VerifyReport]) -> None:
    console = _console()
    if not reports:
        console.print("no threads to verify")
        return
    for report in reports:
        if report.ok:
            line = f"[green]ok[/green]      {report.thread_id}  {report.records} records"
            if report.torn and report.torn.completes:
                line += (
                    f"  (ord {report.torn.completes.ord} lacks its final newline: "
                    "added on next write)"
                )
            elif report.torn:
                line += f"  (torn tail of {report.torn.size} bytes at {report.torn.offset}, repaired on next write)"
        else:
            error = report.error
            what = (
                f"illegal event: {error.reason}" if isinstance(error, InvalidTransition) else error
            )
            line = (
                f"[red]FAILED[/red]  {report.thread_id}  first bad ord {report.first_bad_ord}: "
                f"{what}"
            )
        console.print(line)
    bad = sum(not r.ok for r in reports)
    console.print(f"{len(reports) - bad} ok, {bad} failed")


@cli.command()
@store_options
@handle_errors
def rebuild(home: str | None, as_json: bool) -> None:
    """Rebuild the SQLite index from the rollouts (they are the source of truth).

    Safe at any time: the index is a projection. Damaged threads are listed, not dropped.

    \b
    Example:
      threadlog rebuild
    """
    start = time.perf_counter()
    with open_store(home) as store:
        if not as_json:
            click.echo(f"rebuilding the index of {location(store)} …", err=True)
        count = store.rebuild()
        rows = store.threads()
    seconds = time.perf_counter() - start
    damaged = [r.thread_id for r in rows if r.damage]
    if as_json:
        _print_json(
            {
                "threads": len(rows),
                "records": count,
                "seconds": round(seconds, 3),
                "damaged": damaged,
            }
        )
        return
    click.echo(f"indexed {count} records of {len(rows)} threads in {seconds:.2f}s")
    for thread_id in damaged:
        click.echo(f"  damaged: {thread_id} (threadlog verify {thread_id})")


@cli.command()
@store_options
@click.argument("thread")
@click.option(
    "--after",
    default=0,
    show_default=True,
    type=click.IntRange(min=0),
    help="Start after this ordinal (0: the whole log first).",
)
@click.option(
    "--interval",
    default=0.2,
    show_default=True,
    type=click.FloatRange(min=0.01),
    help="Seconds between looks at the file.",
)
@handle_errors
@remote.via_service(remote.tail)
def tail(home: str | None, as_json: bool, thread: str, after: int, interval: float) -> None:
    """Follow a thread live: print its records as JSON lines as they become durable.

    Reads the rollout directly (no lease, so it works beside a live agent), verifying every
    record and its link to the one before. Stops with Ctrl-C. With --url, follows the
    thread through a threadlog service instead, reconnecting from the last record after a
    drop (--interval does not apply).

    \b
    Examples:
      threadlog tail THREAD --after 40 | jq -c '{ord, type}'
      threadlog tail THREAD --url http://127.0.0.1:8765 --token "$TOKEN"
    """
    out = sys.stdout.buffer
    with open_store(home) as store:
        try:
            for record in store.follow(thread, after, interval=interval):
                out.write(orjson.dumps(record.to_dict()) + b"\n")
                out.flush()
        except KeyboardInterrupt:
            return
