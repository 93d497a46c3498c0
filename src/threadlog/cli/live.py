"""Commands that act on a thread: approve, deny, send, resolve, cancel.

With ``--url`` these five act through a threadlog service instead (`threadlog.cli.remote`).

Each builds a typed `threadlog.model.commands.Command` and first checks it against the
thread's state: a decision for a call that does not exist or is not waiting for it, or a
cancel when no turn runs, fails with a clear error and a non-zero exit, and nothing is sent.
When no process holds the thread, the command opens it and appends the decision itself (input
sent while no turn runs is queued, and the next session to open the thread starts a turn
with it). When a live session holds it (an agent is running), the command is posted to the
store's mailbox (`threadlog.store.protocol.Mailbox`) and the session applies it within a
fraction of a second, checking it again (a refused message is logged, never applied).
"""

from __future__ import annotations

import asyncio
import sys
from typing import TYPE_CHECKING, Any, cast

import click

from threadlog.cli import EXIT_STORE, cli, handle_errors, remote, store_options
from threadlog.cli._out import clean, print_json, progress
from threadlog.cli._store import THREAD, DiskStore, open_disk_store, resolve_thread
from threadlog.errors import IntegrityError, LeaseHeld, UsageError
from threadlog.model.commands import Approve, Cancel, Command, Deny, Resolve, Submit
from threadlog.model.events import InputQueued
from threadlog.runtime.commands import check_command
from threadlog.runtime.forking import fork_point
from threadlog.runtime.mailbox_watch import apply_command
from threadlog.runtime.resume import hand_over
from threadlog.runtime.runtime import Runtime
from threadlog.runtime.snapshots import SnapshotPolicy
from threadlog.store._home import default_home
from threadlog.store.protocol import Mailbox

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from threadlog.model.envelope import Record
    from threadlog.model.events import Resolution
    from threadlog.runtime.session import Session
    from threadlog.store.protocol import Store

__all__ = ["approve", "cancel", "deny", "fork", "resolve", "resume_cmd", "send"]

BRIEF = SnapshotPolicy(every_records=None, every_seconds=None, on_close=20_000)
"""The commands' sessions append a few records: they save no snapshot of a long thread's
state (which costs its size), and the next session that runs saves one in the background;
unless opening the thread reduced 20,000 records or more (a thread no session snapshotted,
e.g. an imported one): then the command saves one as it closes, once, and the next open
starts there (a 92,849-record imported session: `threadlog resume` 2.5 s every time, against
5.5 s once and 0.8 s after)."""


def _post(store: Store, thread: str, command: Command) -> str:
    """Leave ``command`` for the live session that holds the thread (its store's mailbox)."""
    if not isinstance(store, Mailbox):
        raise UsageError("this store has no mailbox: a live session cannot be reached")
    return store.post(thread, command)


def _act(
    home: str | None,
    thread: str,
    command: Command,
    as_json: bool,
    direct: Callable[[Session], Awaitable[Record]] | None = None,
) -> None:
    """Apply ``command`` to the thread, after checking it against the thread's state:
    directly (``direct``, by default the session's command) when no process holds it, else
    through its mailbox."""
    store, thread = existing_thread(home or default_home(), thread)

    async def run() -> dict[str, Any]:
        async with Runtime(store=store, source="cli", snapshots=BRIEF) as runtime:
            try:
                session = await runtime.open(thread, resume=False, mailbox=False)
            except LeaseHeld as exc:
                state = await asyncio.to_thread(runtime.store.state, thread)
                check_command(state, command)
                message_id = _post(runtime.store, thread, command)
                return {"applied": False, "queued": message_id, "holder": exc.holder}
            check_command(session.state, command)
            if direct is not None:
                record = await direct(session)
            else:
                applied = await apply_command(session, command)
                assert applied is not None  # Cancel is applied by `cancel` itself
                record = applied
            return {"applied": True, "ord": record.ord, "type": record.type}

    with store:
        result = asyncio.run(run())
    if as_json:
        print_json({"thread": thread, **result})
    elif result["applied"]:
        click.echo(f"recorded {result['type']} at ord {result['ord']}")
    else:
        click.echo(
            f"the thread is open in {clean(result['holder'])}: sent to its inbox "
            f"({result['queued']})"
        )


@cli.command()
@store_options
@click.argument("thread", type=THREAD)
@click.argument("call_id")
@click.option("--by", default="cli", show_default=True, help="Who decides (recorded).")
@click.option("--reason", help="Why (recorded).")
@handle_errors
@remote.via_service(remote.approve)
def approve(
    home: str | None, as_json: bool, thread: str, call_id: str, by: str, reason: str | None
) -> None:
    """Approve a tool call that waits for a human decision.

    \b
    Examples:
      threadlog approve THREAD call_3_0 --by alice
      threadlog approve THREAD call_3_0 --url http://127.0.0.1:8765
    """
    _act(
        home,
        thread,
        Approve(call_id=call_id, by=by, reason=reason),
        as_json,
    )


@cli.command()
@store_options
@click.argument("thread", type=THREAD)
@click.argument("call_id")
@click.option("--by", default="cli", show_default=True, help="Who decides (recorded).")
@click.option("--reason", help="Why (recorded, and shown to the model).")
@handle_errors
@remote.via_service(remote.deny)
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
@click.argument("thread", type=THREAD)
@click.argument("text")
@click.option("--by", default="cli", show_default=True, help="Who sends it (recorded).")
@handle_errors
@remote.via_service(remote.send)
def send(home: str | None, as_json: bool, thread: str, text: str, by: str) -> None:
    """Send input: steering for the running turn, or the start of the next turn.

    With no session live and no turn running, the input is queued in the log; the next
    session that opens the thread (`Runtime.open` / `Runtime.resume`) starts a turn with it.

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
@click.argument("thread", type=THREAD)
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
@remote.via_service(remote.resolve)
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
@click.argument("thread", type=THREAD)
@handle_errors
@remote.via_service(remote.cancel)
def cancel(home: str | None, as_json: bool, thread: str) -> None:
    """Cancel the running turn (it ends ``aborted``; calls that have not started never run).

    A live session gets the cancel through its mailbox, for the turn running now only (a
    cancel never aborts a later turn). With no session live, the turn the log shows running
    is ended here, after recovering what the process that ran it left. Fails when no turn
    is running.

    \b
    Example:
      threadlog cancel THREAD
    """
    store, thread = existing_thread(home or default_home(), thread)

    async def run() -> dict[str, Any]:
        async with Runtime(store=store, snapshots=BRIEF) as runtime:
            try:
                session = await runtime.open(thread, resume=False, mailbox=False)
            except LeaseHeld as exc:
                state = await asyncio.to_thread(runtime.store.state, thread)
                check_command(state, Cancel())
                message_id = _post(runtime.store, thread, Cancel(turn_id=state.active_turn))
                return {"applied": False, "queued": message_id, "holder": exc.holder}
            check_command(session.state, Cancel())
            turn_id = session.state.active_turn
            await session.cancel(turn_id=turn_id)
            return {"applied": True, "turn_id": turn_id, "outcome": "aborted"}

    with store:
        result = asyncio.run(run())
    if as_json:
        print_json({"thread": thread, **result})
    elif result["applied"]:
        click.echo(f"turn {result['turn_id']} cancelled (ended aborted)")
    else:
        click.echo(f"cancellation sent to the thread's inbox ({result['queued']})")


@cli.command(name="resume")
@store_options
@click.argument("thread", type=THREAD)
@click.option(
    "--salvage",
    is_flag=True,
    help="If the log is damaged, copy its valid prefix to a new thread (lineage recorded).",
)
@handle_errors
def resume_cmd(home: str | None, as_json: bool, thread: str, salvage: bool) -> None:
    """Recover a thread after a crash, print what was repaired, and leave the task to go on.

    Verifies the log (a torn final record is cut; records of a crashed store's journal are
    replayed), classifies every unfinished tool call, records interrupted model calls, marks
    non-idempotent calls of unknown outcome (they wait for `threadlog resolve`), ends the
    running turn `interrupted` and appends `thread.resumed` with the list. The task is not
    dropped: a new turn that continues the interrupted one is started and left running in
    the log, and the next session to open the thread (`Runtime.resume` or `Runtime.open`,
    which have the model) drives it, with no further repair. Damage in the middle of the log
    stops here with its ordinal and byte offset (see `threadlog verify`), and so does an event
    the log holds that its state refuses (written by an older threadlog).

    Idempotent: when there is nothing to repair (a second run, a clean close) nothing is
    written, and the output says so (`"repaired": false` with --json).

    With --salvage, a damaged log is not touched: its valid prefix is copied to a new
    thread whose thread.created names the damaged one, and the new thread is resumed. A
    second --salvage reuses the copy the first one made.

    \b
    Example:
      threadlog resume THREAD
      threadlog resume THREAD --json | jq .repairs
      threadlog resume THREAD --salvage
    """
    home = home or default_home()
    store, thread = existing_thread(home, thread)

    async def run(target: str) -> dict[str, Any]:
        async with Runtime(store=store, source="cli", snapshots=BRIEF) as runtime:
            session = await runtime.open(target, resume=False, mailbox=False)
            report = await hand_over(session, runtime.store)
            state = session.state
        if report is None:  # nothing to repair: nothing was written
            return {
                "thread": target,
                "repaired": False,
                "resumed_ord": None,
                "repairs": [],
                "reconciled": {},
                "interrupted_turn": None,
                "continued_by": None,
                "waiting_for_human": [
                    c.call_id for c in state.tool_calls.values() if c.status == "unknown"
                ],
                "running_turn": state.active_turn,
            }
        return {**report.to_data(), "repaired": True, "running_turn": state.active_turn}

    with store:
        try:
            report = asyncio.run(run(thread))
        except IntegrityError as exc:
            if not salvage:
                click.echo(
                    f"error: the log is damaged at ord {exc.ord}"
                    + (f", byte {exc.offset}" if exc.offset is not None else "")
                    + f": {clean(exc.reason)}",
                    err=True,
                )
                click.echo(f"  details: threadlog verify {thread}", err=True)
                click.echo(f"  keep what is valid: threadlog resume {thread} --salvage", err=True)
                sys.exit(EXIT_STORE)
            # the valid prefix: whole records before the damage (an illegal event is whole)
            last_ord = min(store.verify(thread, check_events=False).last_ord, exc.ord - 1)
            salvaged = _salvage_of(store, thread, last_ord)
            made = salvaged is None
            if salvaged is None:
                salvaged = store.fork(
                    thread,
                    last_ord,
                    kind="salvage",
                    title=f"salvaged from {thread} (ords 1–{last_ord})",
                )
            if not as_json:
                verb = "copied" if made else "already copied"
                click.echo(f"damaged at ord {exc.ord}: {verb} ords 1–{last_ord} to {salvaged}")
            report = asyncio.run(run(salvaged))
            report["salvaged_from"] = {
                "thread": thread,
                "ord": last_ord,
                "damage": str(exc),
                "reused": not made,
            }
    if as_json:
        print_json(report)
        return
    if not report["repaired"]:
        click.echo(f"{report['thread']}: nothing to repair (nothing written)")
    else:
        click.echo(f"resumed {report['thread']}: thread.resumed at ord {report['resumed_ord']}")
        if not report["repairs"]:
            click.echo("  nothing to repair: the log was complete")
    for repair in report["repairs"]:
        detail = ", ".join(f"{k}={v}" for k, v in repair.items() if k != "kind")
        click.echo(f"  {clean(repair['kind']):<22} {clean(detail, one_line=True)}")
    for call_id in report["waiting_for_human"]:
        click.echo(
            f"  waiting for a human: threadlog resolve {thread} {call_id} --as done|retry|abort"
        )
    if report["running_turn"] is not None:
        click.echo(
            f"  turn {report['running_turn']} is left for your agent: "
            "Runtime.resume or Runtime.open carries on with it"
        )


def existing_thread(home: str, thread: str) -> tuple[DiskStore, str]:
    """The existing store at ``home``, opened (`UsageError` if there is no store there:
    nothing is created), and the full id of the thread ``thread`` (an id or a unique prefix)
    names in it. The caller closes the store; the command's runtime works on it (one open
    of the store per command, not one to find the thread and another to act on it)."""
    store = open_disk_store(home, create=False)
    try:
        return store, resolve_thread(store, thread)
    except BaseException:
        store.close()
        raise


def _salvage_of(store: DiskStore, thread: str, last_ord: int) -> str | None:
    """A salvage copy an earlier ``resume --salvage`` made of ``thread``'s first
    ``last_ord`` records, found by its lineage (kind ``salvage``); None if there is none."""
    for row in store.threads():
        if row.forked_from != thread:
            continue
        lineage = store.read(row.thread_id, limit=1)[0].data.get("lineage") or {}
        if lineage.get("kind") == "salvage" and lineage.get("ord") == last_ord:
            return row.thread_id
    return None


@cli.command()
@store_options
@click.argument("thread", type=THREAD)
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
    with open_disk_store(home, create=False) as store:
        thread = resolve_thread(store, thread)
        target: int | str | None = None if at is None else int(at) if at.isdigit() else at
        with progress("forking", quiet=as_json):
            point = fork_point(store, thread, target)
            child = store.fork(thread, point.ord, title=title)
        lineage = store.read(child, limit=1)[0].data["lineage"]  # its thread.created
    if as_json:
        print_json({"thread": child, "lineage": lineage, "requested_ord": point.requested})
    else:
        click.echo(f"forked {thread} at ord {lineage['ord']} into {child}")
        if point.requested is not None:
            click.echo(
                f"  (ord {point.requested} is inside a running turn: forked before that turn)"
            )
