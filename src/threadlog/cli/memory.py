"""Long-term memory from the command line: ``threadlog memory ls`` and ``memory rm``.

Facts are written by a session (``memory.written``) into its own thread and indexed by the
store (`Catalog.memories`). Listing reads that index; revoking appends ``memory.revoked`` to
the thread that wrote the fact, through a `Runtime` session, so that the revocation and its
reason are in the log of the thread the fact came from.
"""

from __future__ import annotations

import click

from threadlog.cli import cli, handle_errors, store_options
from threadlog.cli._out import clean, print_json
from threadlog.cli._store import open_disk_store
from threadlog.errors import UsageError
from threadlog.store.protocol import LocalHome

__all__ = ["memory", "memory_ls", "memory_rm"]


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
    with open_disk_store(home, create=False) as store:
        rows = store.memories(principal=principal, include_revoked=show_all)
    for row in rows:  # a flag, whatever the backend's column type
        row["revoked"] = bool(row.get("revoked"))
    if as_json:
        print_json(rows)
        return
    if not rows:
        click.echo("no memories")
        return
    for row in rows:
        flags = " (revoked)" if row["revoked"] else ""
        expiry = f", expires {row['expires_at']}" if row["expires_at"] else ""
        project = f", project {row['project']}" if row["project"] else ""
        line = (
            f"{row['memory_id']}  [{row['scope']}{'/' + row['key'] if row['key'] else ''}] "
            f"{row['fact']}  — {row['principal']}, thread {row['thread_id']}{project}, "
            f"{row['written_at']}{expiry}{flags}"
        )
        click.echo(clean(line))


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

    with open_disk_store(home, create=False) as store:
        rows = [r for r in store.memories(include_revoked=True) if r["memory_id"] == memory_id]
        home = store.home if isinstance(store, LocalHome) else home
    if not rows:
        raise UsageError(f"no memory {memory_id!r}")
    if rows[0]["revoked"]:
        raise UsageError(f"memory {memory_id} is already revoked")
    thread = rows[0]["thread_id"]

    async def run() -> int:
        async with Runtime(home, source="cli") as runtime:
            session = await runtime.open(thread, resume=False)
            return (await session.forget(memory_id, reason=reason)).ord

    ord_ = asyncio.run(run())
    if as_json:
        print_json({"revoked": memory_id, "thread": thread, "ord": ord_})
    else:
        click.echo(f"revoked {memory_id} (thread {thread}, ord {ord_})")
