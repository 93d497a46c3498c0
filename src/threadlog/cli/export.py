"""Whole threads out: ``threadlog export`` (every record, every message, or a page) and
``threadlog diff`` (where two branches of a thread part).

``export`` is a shell over `threadlog.export`, which does the rendering for any caller;
``diff`` compares the model-visible paths from two entries (`Context.entries_at`) and reports
the shared prefix and what each branch says after it.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, cast

import click
from rich.text import Text

from threadlog.cli import cli, handle_errors, store_options
from threadlog.cli._out import clean, console, is_terminal, print_json, progress, short, text
from threadlog.cli._store import THREAD, open_disk_store, resolve_thread
from threadlog.errors import UsageError
from threadlog.export import FORMATS, export_thread
from threadlog.model.context import Context
from threadlog.model.tree import Tree, common_ancestor

if TYPE_CHECKING:
    from threadlog.export import Format

__all__ = ["diff", "export"]


@cli.command()
@store_options
@click.argument("args", nargs=-1, metavar="THREAD A B | --trajectory A B")
@click.option(
    "--trajectory",
    is_flag=True,
    help="Compare two threads step by step (tool calls, arguments, results, outcome, tokens, "
    "cost, time) and name the first divergence.",
)
@click.option(
    "--batch",
    is_flag=True,
    help="With --trajectory: pairs A:B of threads, or a source thread (each of its "
    "replays against it); a table of outcomes.",
)
@handle_errors
def diff(
    home: str | None, as_json: bool, args: tuple[str, ...], trajectory: bool, batch: bool
) -> None:
    """Show where two branches of a thread part: A and B are entries (ids or ordinals).

    With --trajectory, A and B are threads (a recording and its replay, say).

    \b
    Example:
      threadlog diff THREAD 14 27
      threadlog diff --trajectory THREAD REPLAY --json
      threadlog diff --trajectory --batch A1:B1 A2:B2
      threadlog diff --trajectory --batch SOURCE     every replay of SOURCE
    """
    if trajectory or batch:
        from threadlog.cli.trajectory import trajectory_diff

        trajectory_diff(home, as_json, args, batch)
        return
    if len(args) != 3:
        raise UsageError("diff takes THREAD A B (or --trajectory A B)")
    thread, a, b = args
    with open_disk_store(home, create=False) as store:
        thread = resolve_thread(store, thread)
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
        print_json(
            {
                "thread": thread,
                "common_ancestor": shared,
                "common_ord": tree.records[shared].ord if shared else None,
                "shared_messages": common,
                "a": [m for _, m in paths[0][common:]],
                "b": [m for _, m in paths[1][common:]],
            }
        )
        return
    screen = console()
    width = 90 if is_terminal() else None
    where = f"ord {tree.records[shared].ord}" if shared else "the root"
    screen.print(f"the branches share {common} messages and part after {where}")
    for name, path in zip((a, b), paths, strict=True):
        screen.print(Text("\n" + clean(name, one_line=True) + ":", style="bold"))
        for _, message in path[common:]:
            screen.print(
                text(f"  {short(message['role'], 20):>9}: {short(message.get('content'), width)}"),
                soft_wrap=True,
            )


@cli.command()
@store_options
@click.argument("thread", type=THREAD)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="jsonl",
    show_default=True,
    help="jsonl: every record; messages: every conversation message "
    "in log order (all branches, nothing compacted away); html: a readable page; "
    "otlp: the thread's spans as OTLP/JSON for an OpenTelemetry collector; "
    "openai / anthropic / responses: the active branch as a Chat Completions message list, "
    "a Messages API body, Responses API input items (post them as they are); "
    "trajectory: the active branch as steps with tool calls, timings, outcome and usage.",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, writable=True, allow_dash=True),
    default="-",
    help="Write here instead of stdout (a path that cannot be written: exit 2).",
)
@handle_errors
def export(home: str | None, as_json: bool, thread: str, fmt: str, output: str) -> None:
    """Export a thread.

    jsonl, messages and html hold every record: compaction never deletes, and every original
    message is there. openai, anthropic, responses and trajectory are the active branch as a
    model sees it: what a compaction summarised is its summary.

    \b
    Example:
      threadlog export THREAD --format messages > messages.json
      threadlog export THREAD --format html -o thread.html
      threadlog export THREAD --format otlp | curl -H 'Content-Type: application/json' \\
          --data-binary @- http://localhost:4318/v1/traces
      threadlog export THREAD --format openai > messages.json
    """
    with open_disk_store(home, create=False) as store:
        thread = resolve_thread(store, thread)
        with progress("exporting", quiet=as_json or output == "-"):
            body = export_thread(store, thread, cast("Format", fmt))
    if output == "-":
        sys.stdout.write(body)
        sys.stdout.flush()
        return
    try:
        with open(output, "w", encoding="utf-8") as file:
            file.write(body)
    except OSError as exc:
        raise UsageError(f"cannot write --output {output!r}: {exc.strerror or exc}") from None
