"""Archiving and retention from the command line: ``threadlog archive``, ``threadlog rm``
and ``threadlog gc``.

All use the store's `Retention` capability. ``archive`` appends a ``thread.archived``
record (nothing is removed; the thread leaves ``threadlog ls``). ``rm`` deletes named threads
for good, after asking (``--yes`` not to ask; without a terminal to ask on, it must be given).
``gc`` deletes, for good, the threads whose last record is older than ``--older-than`` (with
``--archived``: only the archived ones); ``--dry-run`` lists them and deletes nothing. A
running thread is never collected, and ``rm`` takes one only with ``--force``.
"""

from __future__ import annotations

import re
import sys
from datetime import UTC, datetime, timedelta

import click

from threadlog.cli import cli, handle_errors, store_options
from threadlog.cli._out import print_json
from threadlog.cli._store import THREAD, open_disk_store, resolve_thread
from threadlog.errors import LeaseHeld, ThreadNotFound, UsageError
from threadlog.store.protocol import Retention

__all__ = ["archive", "gc", "parse_age", "rm"]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_age(text: str) -> timedelta:
    """``30d``, ``12h``, ``90m``, ``2w``, ``45s`` as a duration; `UsageError` otherwise."""
    match = re.fullmatch(r"(\d+)([smhdw])", text.strip())
    if match is None:
        raise UsageError(f"--older-than: {text!r} is not an age such as 30d, 12h, 90m or 2w")
    return timedelta(seconds=int(match.group(1)) * _UNITS[match.group(2)])


@cli.command()
@store_options
@click.argument("thread", type=THREAD)
@click.option("--undo", is_flag=True, help="Take the thread back out of the archive.")
@handle_errors
def archive(home: str | None, as_json: bool, thread: str, undo: bool) -> None:
    """Archive THREAD: a ``thread.archived`` record; it leaves ``threadlog ls``.

    Nothing is removed, and the log stays readable; no new turn starts until ``--undo``.
    Refused while a turn runs. ``--json`` prints ``{"thread", "archived", "changed"}``.

    \b
    Examples:
      threadlog archive 0190a1b2-...
      threadlog archive 0190a1b2-... --undo
    """
    with open_disk_store(home, create=False) as store:
        thread = resolve_thread(store, thread)
        if not isinstance(store, Retention):
            raise UsageError("this store cannot archive threads (no Retention capability)")
        changed = store.archive_thread(thread, archived=not undo)
    if as_json:
        print_json({"thread": thread, "archived": not undo, "changed": changed})
    else:
        state = "restored" if undo else "archived"
        click.echo(f"{thread} {state}" if changed else f"{thread} was already {state}")


@cli.command()
@store_options
@click.argument("threads", nargs=-1, required=True, type=THREAD)
@click.option("--yes", "-y", is_flag=True, help="Delete without asking.")
@click.option("--force", is_flag=True, help="Delete a thread whose turn is still running, too.")
@handle_errors
def rm(home: str | None, as_json: bool, threads: tuple[str, ...], yes: bool, force: bool) -> None:
    """Delete THREADS for good: their logs and index rows; their ids are never reused.

    Asks first, naming each thread (its title and records), unless ``--yes``; with no
    terminal to ask on (a script, CI) ``--yes`` is required. A thread whose turn is running
    (a live session, or one a crash left) is refused unless ``--force``: ``threadlog cancel``
    it first. A thread another process has open for writing is refused. Artifacts (shared by
    hash) stay. To keep a thread readable but out of the way,
    ``threadlog archive`` it instead. ``--json`` prints ``{"deleted": [ids]}``.

    \b
    Examples:
      threadlog rm 0190a1b2
      threadlog rm 0190a1b2 0190c3d4 --yes
      threadlog rm 0190a1b2 --yes --force --json
    """
    with open_disk_store(home, create=False) as store:
        if not isinstance(store, Retention):
            raise UsageError("this store cannot delete threads (no Retention capability)")
        doomed: dict[str, str] = {}
        for given in threads:
            thread = resolve_thread(store, given)
            if not store.exists(thread):
                raise ThreadNotFound(thread)
            state = store.state(thread, history=False)
            running = [t for t, turn in state.turns.items() if turn.status == "running"]
            if running and not force:
                raise UsageError(
                    f"thread {thread} has a running turn ({running[0]}): threadlog cancel it "
                    "first, or pass --force to delete it anyway"
                )
            title = f"{state.title!r}, " if state.title else ""
            doomed[thread] = f"{thread} ({title}{state.last_ord} records)"
        if not yes:
            if not _can_ask():
                raise UsageError("threadlog rm deletes for good: pass --yes (no terminal to ask)")
            listing = "\n  ".join(doomed.values())
            if not click.confirm(f"Delete for good:\n  {listing}\n", default=False):
                raise click.Abort
        deleted = []
        for thread in doomed:
            try:
                if store.delete_thread(thread):
                    deleted.append(thread)
            except LeaseHeld as exc:
                raise UsageError(
                    f"thread {thread} is open for writing by another process; nothing more was "
                    f"deleted (deleted so far: {len(deleted)})"
                ) from exc
    if as_json:
        print_json({"deleted": deleted})
        return
    for thread in deleted:
        click.echo(f"deleted {thread}")


def _can_ask() -> bool:
    """Whether a question can be put to someone (stdin is a terminal)."""
    return sys.stdin.isatty()


@cli.command()
@store_options
@click.option("--older-than", "older_than", required=True, metavar="AGE", help="e.g. 30d, 12h, 2w.")
@click.option("--archived", is_flag=True, help="Only archived threads.")
@click.option("--dry-run", is_flag=True, help="List what would be deleted; delete nothing.")
@handle_errors
def gc(home: str | None, as_json: bool, older_than: str, archived: bool, dry_run: bool) -> None:
    """Delete, for good, the threads whose last record is older than AGE.

    With ``--archived`` only archived threads are collected; a running thread never is. A
    deleted thread's log and index rows are removed and its id is never reused; artifacts
    (shared by hash) stay; a thread another process has open for writing is skipped.
    ``--json`` prints ``{"deleted": [ids], "dry_run": bool, "in_use": [ids]}``.

    \b
    Examples:
      threadlog gc --older-than 30d --archived --dry-run
      threadlog gc --older-than 30d --archived
      threadlog gc --older-than 90d
    """
    cutoff = datetime.now(UTC) - parse_age(older_than)
    with open_disk_store(home, create=False) as store:
        if not isinstance(store, Retention):
            raise UsageError("this store cannot delete threads (no Retention capability)")
        rows = store.threads(archived=True if archived else None)
        doomed = [
            row.thread_id
            for row in rows
            if row.status != "running"
            and row.last_ts is not None
            and datetime.fromisoformat(row.last_ts.replace("Z", "+00:00")) < cutoff
        ]
        in_use: list[str] = []
        if not dry_run:
            deleted = []
            for thread_id in doomed:
                try:
                    if store.delete_thread(thread_id):
                        deleted.append(thread_id)
                except LeaseHeld:  # another process has it open for writing: left alone
                    in_use.append(thread_id)
            doomed = deleted
    if as_json:
        print_json({"deleted": doomed, "dry_run": dry_run, "in_use": in_use})
        return
    verb = "would delete" if dry_run else "deleted"
    for thread_id in doomed:
        click.echo(f"{verb} {thread_id}")
    for thread_id in in_use:
        click.echo(f"skipped {thread_id} (open for writing by another process)")
    click.echo(
        f"{len(doomed)} thread{'s' if len(doomed) != 1 else ''} "
        + ("would be deleted" if dry_run else "deleted")
    )
