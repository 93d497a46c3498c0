"""Looking at a store without changing a thread: ls, events, tail, verify, rebuild (and
``show``, in `threadlog.cli.showing`).

Each command opens an existing store (`open_disk_store` with ``create=False``: a path that
holds no store is an error, and nothing is written there), reads what it needs, closes the
store, and only then prints (`threadlog.cli._out`): a table on a terminal, tab-separated
lines in a pipe, or with ``--json`` one JSON document in the shapes ``docs/cli.md``
documents. ``events`` and ``tail`` print the log itself, one envelope per line (``tail`` in
words on a terminal). ``rebuild`` rewrites only the index, a projection of the logs. A THREAD
argument may be any unique prefix of a thread id (`resolve_thread`). Record fetching is kept
in small functions (`fetch_events`) so that how records are read can change alone.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

import click
import orjson
from rich.text import Text

from threadlog.cli import EXIT_FAILED, cli, handle_errors, remote, store_options
from threadlog.cli._describe import activity, describe, thread_row
from threadlog.cli._fetch import last_records
from threadlog.cli._out import (
    abbreviate,
    clean,
    console,
    is_terminal,
    print_json,
    progress,
    short,
    table,
)
from threadlog.cli._store import THREAD, DiskStore, location, open_disk_store, resolve_thread
from threadlog.errors import InvalidTransition, UsageError

if TYPE_CHECKING:
    from collections.abc import Iterator

    from threadlog.model.envelope import Record
    from threadlog.store.protocol import VerifyReport

__all__ = ["events", "fetch_events", "ls", "open_store", "rebuild", "tail", "verify"]


def open_store(home: str | None) -> DiskStore:
    """The store a read-only command looks at: an existing one only."""
    return open_disk_store(home, create=False)


def _metadata(pairs: tuple[str, ...]) -> dict[str, Any] | None:
    """``--meta KEY=VALUE`` options as the filter `Catalog.threads` takes."""
    if not pairs:
        return None
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--meta takes KEY=VALUE, not {pair!r:.80}")
        try:
            out[key] = orjson.loads(text)
        except orjson.JSONDecodeError:
            out[key] = text
    return out


@cli.command()
@store_options
@click.option("--principal", help="Only threads owned by this principal.")
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    help="At most this many threads [default: 50 in tables, all with --json or in a pipe].",
)
@click.option(
    "--archived",
    "which",
    flag_value="archived",
    help="Only the archived threads (threadlog archive).",
)
@click.option(
    "--all", "which", flag_value="all", help="Archived threads too (by default they are left out)."
)
@click.option(
    "--meta",
    "meta",
    multiple=True,
    metavar="KEY=VALUE",
    help="Only threads whose metadata (create_thread(metadata=...)) has KEY equal to VALUE "
    "(VALUE read as JSON if it parses, else as text); repeat for several.",
)
@handle_errors
def ls(
    home: str | None,
    as_json: bool,
    principal: str | None,
    limit: int | None,
    which: str | None,
    meta: tuple[str, ...],
) -> None:
    """List threads, most recently active first (a fork counts from its creation).

    STATUS is running (a process holds the thread and a turn is open), interrupted (a turn is
    open and nobody holds it: threadlog resume), idle, archived or damaged (threadlog verify);
    WAITING names the tool calls waiting for a human. Archived threads are listed with
    --archived (only them) or --all.

    \b
    Example:
      threadlog ls --limit 20
      threadlog ls --json | jq '.[].thread_id'
      threadlog ls | cut -f1          (in a pipe: tab-separated, ids whole)
      threadlog ls --archived
      threadlog ls --meta user=alice --meta tier=2
    """
    shown = limit if limit is not None or as_json or not is_terminal() else 50
    archived = {"archived": True, "all": None}.get(which or "", False)
    metadata = _metadata(meta)
    with open_store(home) as store:
        found = store.threads(principal=principal, archived=archived, metadata=metadata)
        rows = sorted(found, key=activity, reverse=True)
        width = abbreviate(store.thread_ids()) if is_terminal() else None
        more = shown is not None and len(rows) > shown
        rows = rows[:shown] if shown is not None else rows
        docs = [thread_row(store, row) for row in rows]
        where = location(store)
    if as_json:
        print_json(docs)
        return
    if not docs:
        if principal is not None or which is not None or metadata is not None:
            click.echo(f"no thread in {clean(where)} matches (threadlog ls --all lists all)")
        else:
            click.echo(f"no threads in {clean(where)} (try: threadlog demo)")
        return
    styles = {"damaged": "bold red", "interrupted": "yellow", "running": "green"}
    table(
        ["thread", "principal", "title", "status", "records", "turns", "last activity", "waiting"],
        [
            (
                doc["thread_id"][:width],
                doc["principal"],
                doc["title"],
                Text(doc["status"], style=styles.get(doc["status"], "")),
                doc["last_ord"],
                doc["turns"],
                (doc["last_activity"] or "")[:19].replace("T", " ")
                if is_terminal()
                else doc["last_activity"],
                Text(
                    ", ".join(f"{w['call_id']} ({w['needs']})" for w in doc["waiting"]),
                    style="bold red" if doc["waiting"] else "",
                ),
            )
            for doc in docs
        ],
        widths={"title": 40, "waiting": 40},
    )
    if more:
        click.echo("… more threads not shown (--limit N to see more)", err=not is_terminal())


def fetch_events(
    store: DiskStore, thread: str, after: int, limit: int | None, last_n: int | None = None
) -> list[Record]:
    """The records ``events`` prints: ``ord > after``, at most ``limit``; with ``last_n``,
    only the latest that many, read from the end of the log."""
    if last_n is not None:
        return last_records(store, thread, last_n, after=after)[:limit]
    return store.read(thread, after, limit=limit)


@cli.command()
@store_options
@click.argument("thread", type=THREAD)
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
    or another tool. With --json, one JSON array of the envelopes instead.

    \b
    Example:
      threadlog events THREAD --after 40 | jq -c '{ord, type}'
      threadlog events THREAD --last 5
      threadlog events THREAD --json | jq length
    """
    out = sys.stdout.buffer
    with open_store(home) as store:
        thread = resolve_thread(store, thread)
        if not as_json and last_n is None:
            # JSON lines a page at a time: memory does not grow with the thread
            for page in _pages(store, thread, after, limit):
                for record in page:
                    out.write(orjson.dumps(record.to_dict()) + b"\n")
                out.flush()
            return
        records = fetch_events(store, thread, after, limit, last_n)
    if as_json:
        print_json([r.to_dict() for r in records])
        return
    for record in records:
        out.write(orjson.dumps(record.to_dict()) + b"\n")
    out.flush()


_PAGE = 5_000
"""Records `events` reads at a time when it prints JSON lines."""


def _pages(store: DiskStore, thread: str, after: int, limit: int | None) -> Iterator[list[Record]]:
    """`fetch_events` a page at a time, until ``limit`` records or the end of the log."""
    while limit is None or limit > 0:
        want = _PAGE if limit is None else min(limit, _PAGE)
        page = fetch_events(store, thread, after, want)
        yield page
        if len(page) < want:
            return
        after = page[-1].ord
        limit = None if limit is None else limit - len(page)


@cli.command()
@store_options
@click.argument("thread", required=False, type=THREAD)
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
    failures too. A progress bar shows on a terminal.

    \b
    Examples:
      threadlog verify                verify every thread
      threadlog verify THREAD --json
    """
    with open_store(home) as store:
        missing = store.missing_threads()
        if thread:
            thread = resolve_thread(store, thread, extra=missing)
        ids = [thread] if thread else store.thread_ids() + missing
        if thread and not store.exists(thread) and thread not in missing:
            raise UsageError(f"no thread {thread!r} in this store")
        reports = []
        with progress("verifying", total=len(ids), quiet=as_json) as advance:
            for t in ids:
                reports.append(store.verify(t, check_events=not no_events))
                advance()
        problems = list(store.problems)
    failed = [r for r in reports if not r.ok]
    if as_json:
        print_json(reports[0].to_dict() if thread else [r.to_dict() for r in reports])
    else:
        _print_verify(reports)
    for problem in problems:
        click.echo(f"problem: {clean(problem['message'])}", err=True)
    if failed or problems:
        sys.exit(EXIT_FAILED)


def _print_verify(reports: list[VerifyReport]) -> None:
    out = console()
    if not reports:
        out.print("no threads to verify")
        return
    for report in reports:
        if report.ok:
            line = Text("ok", style="green")
            line.append(f"      {report.thread_id}  {report.records} records")
            if report.torn and report.torn.completes:
                line.append(
                    f"  (ord {report.torn.completes.ord} lacks its final newline: "
                    "added on next write)"
                )
            elif report.torn:
                line.append(
                    f"  (torn tail of {report.torn.size} bytes at {report.torn.offset}, "
                    "repaired on next write)"
                )
        else:
            error = report.error
            what = (
                f"illegal event: {error.reason}" if isinstance(error, InvalidTransition) else error
            )
            line = Text("FAILED", style="red")
            line.append(f"  {report.thread_id}  first bad ord {report.first_bad_ord}: ")
            line.append(clean(what))
        out.print(line, soft_wrap=True)
    bad = sum(not r.ok for r in reports)
    out.print(f"{len(reports) - bad} ok, {bad} failed")


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
            click.echo(f"rebuilding the index of {clean(location(store))} …", err=True)
        total = len(store.thread_ids())
        with progress("rebuilding the index", total=total, quiet=as_json) as advance:
            count = store.rebuild(progress=advance)
        rows = store.threads(archived=None)
    seconds = time.perf_counter() - start
    damaged = [r.thread_id for r in rows if r.damage]
    if as_json:
        print_json(
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


def _human(record: Record) -> Text:
    line = Text(f"{record.ord:>5} ", style="dim")
    line.append(f"{record.ts[11:23]} ", style="dim")
    line.append(f"{short(record.type, 24):<20} ", style="cyan")
    line.append(describe(record))
    return line


@cli.command()
@store_options
@click.argument("thread", type=THREAD)
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
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["auto", "human", "jsonl"]),
    default="auto",
    show_default=True,
    help="human: one line in words per record; jsonl: the envelopes; auto: human on a "
    "terminal, jsonl in a pipe or with --json.",
)
@handle_errors
@remote.via_service(remote.tail)
def tail(
    home: str | None, as_json: bool, thread: str, after: int, interval: float, fmt: str
) -> None:
    """Follow a thread live: print its records as they become durable.

    Reads the rollout directly (no lease, so it works beside a live agent), verifying every
    record and its link to the one before. On a terminal each record is one line in words;
    in a pipe (or with --json, or --format jsonl) JSON lines, the shape of `events`. Stops
    with Ctrl-C. With --url, follows the thread through a threadlog service instead,
    reconnecting from the last record after a drop (--interval does not apply).

    \b
    Examples:
      threadlog tail THREAD
      threadlog tail THREAD --after 40 | jq -c '{ord, type}'
      threadlog tail THREAD --url http://127.0.0.1:8765 --token "$TOKEN"
    """
    human = fmt == "human" or (fmt == "auto" and not as_json and is_terminal())
    out = sys.stdout.buffer
    screen = console()
    with open_store(home) as store:
        thread = resolve_thread(store, thread)
        try:
            for record in store.follow(thread, after, interval=interval):
                if human:
                    screen.print(_human(record), soft_wrap=True)
                else:
                    out.write(orjson.dumps(record.to_dict()) + b"\n")
                    out.flush()
        except KeyboardInterrupt:
            return


from threadlog.cli import showing as _showing  # noqa: E402, F401 - registers ``show``
