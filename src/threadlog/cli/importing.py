"""``threadlog import claude-code|codex|pi PATH…``: other harnesses' sessions as threads.

A shell over `threadlog.importers`: it opens the store, imports every session file under the
paths with a progress bar on stderr (by bytes), and prints one line per file that was new,
grew, failed or had problems (or, with ``--json``, the whole per-file report), then a total.
Bookkeeping lines (a harness's lines beside the conversation, kept as notes: see
`threadlog.importers._report.FileReport.bookkeeping`) are counted, not listed as problems.
The exit code is 0 even when files had problems (they are reported, and the rest of each file
was imported); 3 when a file could not be imported at all.
"""

from __future__ import annotations

import os
import sys

import click
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

from threadlog.cli import EXIT_STORE, cli, handle_errors, store_options
from threadlog.cli._out import clean, print_json
from threadlog.cli._store import open_disk_store
from threadlog.importers import SOURCES, ImportReport, import_paths, source_format, walk
from threadlog.importers._core import default_workers

__all__ = ["import_group"]


@cli.group("import")
def import_group() -> None:
    """Import sessions of other agent harnesses (Claude Code, Codex, Pi) as threads.

    Each session file becomes a thread that keeps its tree, side-chains (as child threads),
    compactions, tool calls and results, models, usage and timestamps. Importing again adds
    only what is new; problems in a file are reported per line and never stop the import.

    \b
    Example:
      threadlog import claude-code ~/.claude/projects
      threadlog import codex ~/.codex/sessions --json > report.json
      threadlog import pi ~/.pi/agent/sessions
    """


def _run(home: str | None, as_json: bool, fmt_name: str, paths: tuple[str, ...]) -> None:
    fmt = source_format(fmt_name)
    files = list(walk([os.path.expanduser(p) for p in paths], fmt))
    sizes: dict[str, int] = {}
    for path in files:
        try:
            sizes[path] = os.path.getsize(path)
        except OSError:
            sizes[path] = 0
    err = Console(stderr=True, highlight=False)
    progress = Progress(
        TextColumn("importing"),
        BarColumn(),
        DownloadColumn(),
        TextColumn("{task.fields[files]} files"),
        TimeRemainingColumn(),
        console=err,
        transient=True,
        disable=as_json or not err.is_terminal,
    )
    with open_disk_store(home) as store, progress:
        task = progress.add_task("import", total=sum(sizes.values()), files=0)
        done = 0

        def step(path: str, size: int) -> None:
            nonlocal done
            done += 1
            progress.update(task, advance=size, files=done)

        report = import_paths(
            store,
            fmt,
            files,
            progress=step,
            sizes=sizes,
            pause_gc=True,
            workers=default_workers(),
        )
    _print(report, as_json)
    if any(f.status == "failed" for f in report.files):
        sys.exit(EXIT_STORE)


def _print(report: ImportReport, as_json: bool) -> None:
    if as_json:
        print_json(report.to_dict())
        return
    out = Console(highlight=False, emoji=False, soft_wrap=True)
    for f in report.files:
        if f.status == "unchanged" and not f.problems:
            continue
        kept = sum(f.bookkeeping.values())
        out.print(
            clean(
                f"{f.status:>9} {f.thread or '-'}  {f.path}  ({f.lines} lines, {f.records} records"
                + (f", {kept} bookkeeping)" if kept else ")")
            ),
            markup=False,
        )
        for p in f.problems:
            out.print(clean(f"          line {p.line}: {p.kind}: {p.message}"), markup=False)
    totals = report.to_dict()["totals"]
    out.print(
        f"{totals['files']} files: {totals.get('imported', 0)} new, {totals.get('grown', 0)} grown, "
        f"{totals.get('unchanged', 0)} unchanged, {totals.get('failed', 0)} failed; "
        f"{totals['records']} records, {totals['problems']} problems; "
        f"{totals['bookkeeping']} bookkeeping lines (not conversation)",
        markup=False,
    )


def _command(fmt_name: str, summary: str, example: str) -> None:
    @import_group.command(
        fmt_name,
        short_help=summary.split(" (")[0] + ".",
        help=f"{summary}\n\nPATH is a session file or a directory searched recursively.\n\n"
        f"\b\nExample:\n  {example}",
    )
    @store_options
    @click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True))
    @handle_errors
    def command(home: str | None, as_json: bool, paths: tuple[str, ...]) -> None:
        _run(home, as_json, fmt_name, paths)


_command(
    "claude-code",
    "Import Claude Code sessions (~/.claude/projects/<project>/<session>.jsonl).",
    "threadlog import claude-code ~/.claude/projects",
)
_command(
    "codex",
    "Import Codex sessions (~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl).",
    "threadlog import codex ~/.codex/sessions",
)
_command(
    "pi",
    "Import Pi sessions (~/.pi/agent/sessions/--<cwd>--/*.jsonl, versions 1-4).",
    "threadlog import pi ~/.pi/agent/sessions",
)
assert set(SOURCES) == set(import_group.commands)
