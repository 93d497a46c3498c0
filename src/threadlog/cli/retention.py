"""Archiving and retention from the command line: ``threadlog archive`` and ``threadlog gc``.

Both use the store's `Retention` capability. ``archive`` appends a ``thread.archived``
record (nothing is removed; the thread leaves ``threadlog ls``). ``gc`` deletes, for good,
the threads whose last record is older than ``--older-than`` (with ``--archived``: only the
archived ones); ``--dry-run`` lists them and deletes nothing. A running thread is never
collected.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import click

from threadlog.cli import cli, handle_errors, store_options
from threadlog.cli._out import print_json
from threadlog.cli._store import THREAD, open_disk_store, resolve_thread
from threadlog.errors import LeaseHeld, UsageError
from threadlog.store.protocol import Retention

__all__ = ["archive", "gc", "parse_age"]

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
