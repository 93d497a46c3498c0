"""Commands that act on a thread: approve, deny, send, resolve, cancel.

Each builds a typed `threadlog.model.commands.Command`. When no process holds the thread, the
command opens it and appends the decision itself. When a live session holds it (an agent is
running), the command leaves the command in the thread's inbox and the session applies it
within a fraction of a second.
"""

from __future__ import annotations

import asyncio
import sys
from typing import TYPE_CHECKING, Any, cast

import click
import orjson

from threadlog.cli import EXIT_STORE, cli, handle_errors, store_options
from threadlog.cli._store import open_disk_store
from threadlog.errors import IntegrityError, LeaseHeld
from threadlog.model.commands import Approve, Cancel, Command, Deny, Resolve, Submit
from threadlog.model.events import InputQueued
from threadlog.runtime import inbox
from threadlog.runtime.forking import fork_point
from threadlog.runtime.mailbox_watch import apply_command
from threadlog.runtime.runtime import Runtime
from threadlog.store._home import default_home

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from threadlog.model.envelope import Record
    from threadlog.model.events import Resolution
    from threadlog.runtime.session import Session

__all__ = ["approve", "cancel", "deny", "fork", "resolve", "resume_cmd", "send"]


def _act(
    home: str | None,
    thread: str,
    command: Command,
    as_json: bool,
    direct: Callable[[Session], Awaitable[Record]] | None = None,
) -> None:
    """Apply ``command`` to the thread: directly (``direct``, by default the session's
    command) when no process holds it, else through its inbox."""
    home = home or default_home()

    async def run() -> dict[str, Any]:
        async with Runtime(home, source="cli") as runtime:
            try:
                session = await runtime.open(thread, resume=False)
            except LeaseHeld as exc:
                message_id = inbox.post(home, thread, command)
                return {"applied": False, "queued": message_id, "holder": exc.holder}
            if direct is not None:
                record = await direct(session)
            else:
                applied = await apply_command(session, command)
                assert applied is not None  # Cancel goes to the inbox only
                record = applied
            return {"applied": True, "ord": record.ord, "type": record.type}

    result = asyncio.run(run())
    if as_json:
        sys.stdout.write(orjson.dumps(result).decode() + "\n")
    elif result["applied"]:
        click.echo(f"recorded {result['type']} at ord {result['ord']}")
    else:
        click.echo(
            f"the thread is open in {result['holder']}: sent to its inbox ({result['queued']})"
        )


@cli.command()
@store_options
@click.argument("thread")
@click.argument("call_id")
@click.option("--by", default="cli", show_default=True, help="Who decides (recorded).")
@click.option("--reason", help="Why (recorded).")
@handle_errors
def approve(
    home: str | None, as_json: bool, thread: str, call_id: str, by: str, reason: str | None
) -> None:
    """Approve a tool call that waits for a human decision.

    \b
    Example:
      threadlog approve THREAD call_3_0 --by alice
    """
    _act(
        home,
        thread,
        Approve(call_id=call_id, by=by, reason=reason),
        as_json,
    )


@cli.command()
@store_options
@click.argument("thread")
@click.argument("call_id")
@click.option("--by", default="cli", show_default=True, help="Who decides (recorded).")
@click.option("--reason", help="Why (recorded, and shown to the model).")
@handle_errors
def deny(
    home: str | None, as_json: bool, thread: str, call_id: str, by: str, reason: str | None
) -> None:
    """Deny a tool call that waits for a human decision; the model is told.

    \b
    Example:
      threadlog deny THREAD call_3_0 --reason "not on the production database"
    """
    _act(
        home,
        thread,
        Deny(call_id=call_id, by=by, reason=reason),
        as_json,
    )


@cli.command()
@store_options
@click.argument("thread")
@click.argument("text")
@click.option("--by", default="cli", show_default=True, help="Who sends it (recorded).")
@handle_errors
def send(home: str | None, as_json: bool, thread: str, text: str, by: str) -> None:
    """Send input: steering for the running turn, or the start of the next turn.

    \b
    Example:
      threadlog send THREAD "also update the changelog"
    """
    _act(
        home,
        thread,
        Submit(text=text, by=by),
        as_json,
        lambda s: s.submit(text, by=by) if s.state.active_turn else _queue(s, text),
    )


async def _queue(session: Session, text: str) -> Record:
    # Nobody is running the thread: record the input; the next session starts a turn with it.
    from threadlog._clock import new_id

    return await session.append(InputQueued(input_id=new_id(), text=text))


@cli.command()
@store_options
@click.argument("thread")
@click.argument("call_id")
@click.option(
    "--as",
    "decision",
    required=True,
    type=click.Choice(["done", "retry", "abort"]),
    help="done: the effect happened; retry: run it again; abort: give up on it.",
)
@click.option("--by", default="cli", show_default=True, help="Who decides (recorded).")
@click.option("--note", help="A note for the record (and the model).")
@handle_errors
def resolve(
    home: str | None,
    as_json: bool,
    thread: str,
    call_id: str,
    decision: str,
    by: str,
    note: str | None,
) -> None:
    """Resolve a tool call whose outcome is unknown after a crash.

    A non-idempotent call that started but has no recorded result is never re-run on a
    guess: a human checks what happened and says so.

    \b
    Example:
      threadlog resolve THREAD call_2_0 --as done --note "the file has the line once"
    """
    _act(
        home,
        thread,
        Resolve(call_id=call_id, decision=cast("Resolution", decision), by=by, note=note),
        as_json,
    )


@cli.command()
@store_options
@click.argument("thread")
@handle_errors
def cancel(home: str | None, as_json: bool, thread: str) -> None:
    """Cancel the running turn of a live session (it ends ``aborted``).

    \b
    Example:
      threadlog cancel THREAD
    """
    home = home or default_home()
    with open_disk_store(home) as store:
        if not store.exists(thread):
            from threadlog.errors import ThreadNotFound

            raise ThreadNotFound(thread)
    message_id = inbox.post(home, thread, Cancel())
    if as_json:
        sys.stdout.write(orjson.dumps({"queued": message_id}).decode() + "\n")
    else:
        click.echo(f"cancellation sent to the thread's inbox ({message_id})")


@cli.command(name="resume")
@store_options
@click.argument("thread")
@click.option(
    "--salvage",
    is_flag=True,
    help="If the log is damaged, copy its valid prefix to a new thread (lineage recorded).",
)
@handle_errors
def resume_cmd(home: str | None, as_json: bool, thread: str, salvage: bool) -> None:
    """Recover a thread after a crash and print what was repaired.

    Verifies the log (a torn final record is cut; records of a crashed store's journal are
    replayed), classifies every unfinished tool call, records interrupted model calls, marks
    non-idempotent calls of unknown outcome (they wait for `threadlog resolve`), ends the
    running turn `interrupted` and appends `thread.resumed` with the list. The work itself is
    continued by your agent (`Runtime.resume`), which has the model. Damage in the middle of
    the log stops here with its ordinal and byte offset (see `threadlog verify`), and so does
    an event the log holds that its state refuses (written by an older threadlog).

    With --salvage, a damaged log is not touched: its valid prefix is copied to a new
    thread whose thread.created names the damaged one, and the new thread is resumed.

    \b
    Example:
      threadlog resume THREAD
      threadlog resume THREAD --json | jq .repairs
      threadlog resume THREAD --salvage
    """
    home = home or default_home()

    async def run(target: str) -> dict[str, Any]:
        async with Runtime(home, source="cli") as runtime:
            session = await runtime.resume(target, continue_work=False)
            assert session.recovery is not None
            return session.recovery.to_data()

    try:
        report = asyncio.run(run(thread))
    except IntegrityError as exc:
        if not salvage:
            click.echo(
                f"error: the log is damaged at ord {exc.ord}"
                + (f", byte {exc.offset}" if exc.offset is not None else "")
                + f": {exc.reason}",
                err=True,
            )
            click.echo(f"  details: threadlog verify {thread}", err=True)
            click.echo(f"  keep what is valid: threadlog resume {thread} --salvage", err=True)
            sys.exit(EXIT_STORE)
        with open_disk_store(home) as store:
            # the valid prefix: whole records before the damage (an illegal event is whole)
            last_ord = min(store.verify(thread, check_events=False).last_ord, exc.ord - 1)
            salvaged = store.fork(
                thread,
                last_ord,
                kind="salvage",
                title=f"salvaged from {thread} (ords 1–{last_ord})",
            )
        if not as_json:
            click.echo(f"damaged at ord {exc.ord}: copied ords 1–{last_ord} to {salvaged}")
        report = asyncio.run(run(salvaged))
        report["salvaged_from"] = {"thread": thread, "ord": last_ord, "damage": str(exc)}
    if as_json:
        sys.stdout.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    click.echo(f"resumed {report['thread']}: thread.resumed at ord {report['resumed_ord']}")
    if not report["repairs"]:
        click.echo("  nothing to repair: the log was complete")
    for repair in report["repairs"]:
        detail = ", ".join(f"{k}={v}" for k, v in repair.items() if k != "kind")
        click.echo(f"  {repair['kind']:<22} {detail}")
    for call_id in report["waiting_for_human"]:
        click.echo(
            f"  waiting for a human: threadlog resolve {thread} {call_id} --as done|retry|abort"
        )


@cli.command()
@store_options
@click.argument("thread")
@click.option("--at", "at", help="Fork after this ordinal or entry (event id) [default: the end].")
@click.option("--title", help="The new thread's title.")
@handle_errors
def fork(home: str | None, as_json: bool, thread: str, at: str | None, title: str | None) -> None:
    """Fork a thread: a new thread that inherits its records up to --at, lineage recorded.

    The inherited records are copied byte for byte (same ids and hashes) and verified; they
    and the new thread's settings are written as one file, atomically: after a crash the fork
    exists whole or not at all. Artifacts are shared, not copied. A fork point inside a turn
    that is running (or was still running at --at) moves back to just before that turn, so
    the new thread never holds a turn that nobody drives.

    \b
    Example:
      threadlog fork THREAD --at 12 --title "try the other approach"
    """
    with open_disk_store(home) as store:
        target: int | str | None = None if at is None else int(at) if at.isdigit() else at
        point = fork_point(store, thread, target)
        child = store.fork(thread, point.ord, title=title)
        lineage = store.read(child, limit=1)[0].data["lineage"]  # its thread.created
    if as_json:
        doc = {"thread": child, "lineage": lineage, "requested_ord": point.requested}
        sys.stdout.write(orjson.dumps(doc).decode() + "\n")
    else:
        click.echo(f"forked {thread} at ord {lineage['ord']} into {child}")
        if point.requested is not None:
            click.echo(
                f"  (ord {point.requested} is inside a running turn: forked before that turn)"
            )
