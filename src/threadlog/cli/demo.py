"""``threadlog demo``: a scripted agent session run by the runtime, end to end.

What it promises a first-time user, and the tests hold it to (tests/cli/test_demo.py):

* **The write is theirs to allow.** The non-idempotent append is asked on a terminal with
  "no" as the default; an empty answer or end of input at the prompt is "no", so is having no
  terminal to ask on (or ``--json``), unless ``--yes`` was given.
* **It never contradicts itself.** The scripted model reads the tool result it is given, like
  a real one: after a denial it says the file was left unchanged, and the closing lines say
  the write was declined; only the commands that hold either way are suggested.
* **It leaves nothing behind but the log.** Its workspace is a temporary directory, removed at
  the end (its path is printed with the word "removed").
* **Its commands can be copied.** They are printed without soft-wrapping, whole on one line
  each however narrow the terminal.
"""

from __future__ import annotations

import asyncio
import dataclasses
import shlex
import shutil
import sys
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import orjson
from rich.console import Console
from rich.markup import escape

from threadlog.cli import EXIT_FAILED, cli, handle_errors, store_options
from threadlog.cli._out import clean
from threadlog.model.stepcontext import StepContexts
from threadlog.runtime.models import ModelRequest, Reply, ScriptedModel, ToolCallSpec
from threadlog.runtime.runtime import Runtime
from threadlog.runtime.session import Progress, Session
from threadlog.runtime.tools import BUILTIN_TOOLS, Tool, ToolContext, read_file
from threadlog.store._home import default_home
from threadlog.store.open import open_store

if TYPE_CHECKING:
    from rich.status import Status

    from threadlog.model.envelope import Record

__all__ = ["demo"]

STEERING = "Mention the 30 s cap explicitly, please."
SECTION = (
    "\n## Retry policy\n"
    "Failed requests are retried 3 times with exponential backoff, capped at 30 s per wait.\n"
)


def _workspace() -> Path:
    root = Path(tempfile.mkdtemp(prefix="threadlog-demo-"))
    (root / "README.md").write_text("# inventory service\n\nTODO: document the retry policy.\n")
    (root / "notes.txt").write_text("retries: 3\nbackoff: exponential\ncap: 30s\n")
    return root


def _script(request: ModelRequest, step: int) -> Reply:
    """The scripted model: read two files, ask to append a section, then report what the
    append's result (the last message: a denial, an error or the tool's output) says."""
    steered = any(m["role"] == "user" and m["content"] == STEERING for m in request.messages)
    if step == 0:
        return Reply(
            "Let me read the README first.", [ToolCallSpec("read_file", {"path": "README.md"})]
        )
    if step == 1:
        return Reply(
            "The numbers should be in the notes.",
            [ToolCallSpec("read_file", {"path": "notes.txt"})],
        )
    if step == 2:
        note = " (with the cap, as you asked)" if steered else ""
        return Reply(
            f"I will add a Retry policy section to README.md{note}.",
            [ToolCallSpec("append_file", {"path": "README.md", "text": SECTION})],
        )
    outcome = str(request.messages[-1].get("content") or "") if request.messages else ""
    if outcome.startswith("denied"):
        return Reply(
            "Understood: I left README.md unchanged, so the retry policy is not documented."
        )
    if outcome.startswith("error"):
        return Reply(f"The append failed ({outcome}); README.md may be unchanged.")
    return Reply(
        "Done: README.md now documents the retry policy"
        + (", including the 30 s cap." if steered else ".")
    )


def _describe(record: Record, contexts: StepContexts) -> str:
    data: dict[str, Any] = record.data if isinstance(record.data, dict) else {}
    match record.type:
        case "turn.started":
            return f"[bold]user[/bold]: {escape(clean(data.get('input')))}"
        case "input.queued":
            return f"[bold]user (steering, queued)[/bold]: {escape(clean(data.get('text')))}"
        case "input.consumed":
            return "steering taken in at a safe point"
        case "step.started":
            context = contexts.apply(record) or {}
            return f"model call with {len(context.get('messages', []))} messages"
        case "tool_call.proposed":
            args = orjson.dumps(data.get("args")).decode()
            short = args if len(args) < 60 else args[:57] + "…"
            return escape(clean(f"{data.get('tool')}({short}) ")) + (
                f"[dim]{escape(clean(data.get('side_effect')))}[/dim]"
            )
        case "tool_call.approved" | "tool_call.denied":
            return f"by {escape(clean(data.get('by')))}"
        case "tool_call.started":
            return f"attempt {data.get('attempt')} (durable before the tool runs)"
        case "tool_call.finished":
            result = data.get("result")
            size = len(result) if isinstance(result, str) else len(orjson.dumps(result))
            return (
                "ok" if data.get("ok") else f"[red]error[/red]: {escape(clean(data.get('error')))}"
            ) + f", {size} bytes"
        case "turn.ended":
            colour = "green" if data.get("outcome") == "completed" else "red"
            return f"[{colour}]{escape(clean(data.get('outcome')))}[/{colour}]"
        case _:
            return ""


def _tools(pause: float) -> list[Tool]:
    """The built-in tools, with reading slowed down so that steering arrives mid-call."""

    async def slow_read(ctx: ToolContext, args: dict[str, Any]) -> Any:
        await asyncio.sleep(pause * 8)
        return await read_file.run(ctx, args)

    return [
        dataclasses.replace(read_file, run=slow_read),
        *(t for t in BUILTIN_TOOLS if t.name != "read_file"),
    ]


async def _run(
    home: str, yes: bool, ask: bool, pause: float, console: Console, workspace: Path
) -> tuple[str, bool, str]:
    """Run the session; (thread id, verified, how the write was decided: approved/declined)."""
    model = ScriptedModel(_script, delay=pause)
    async with Runtime(home, model=model, tools=_tools(pause), source="cli") as runtime:
        session = await runtime.create(
            "demo",
            title="Document the retry policy",
            model="scripted",
            cwd=str(workspace),
            instructions="You are a careful documentation agent.",
        )
        console.print(
            f"[bold]threadlog demo[/bold]  store [cyan]{escape(clean(home))}[/cyan]", soft_wrap=True
        )
        console.print(
            f"thread [bold]{session.thread_id}[/bold]   workspace {escape(clean(workspace))}\n",
            soft_wrap=True,
        )
        status: Status | None = None
        streaming = False
        steered = False
        interactive = ask and not yes and sys.stdin.isatty()
        decision = "not asked"
        contexts = StepContexts(verify=False)  # each step's context, rebuilt as it comes

        async def watch() -> None:
            nonlocal status, steered, streaming, decision
            async for item in session.subscribe(progress=True):
                if isinstance(item, Progress):
                    if item.kind == "thinking":
                        status = console.status("the model is thinking…", spinner="dots")
                        status.start()
                    elif item.kind == "text":
                        if status is not None:
                            status.stop()
                            status = None
                        if not streaming:
                            console.print("      [magenta]model says[/magenta] ", end="")
                            streaming = True
                        console.print(item.data["text"], end="", markup=False)
                    elif item.kind == "approval_needed":
                        decision = await _approve(session, item.data, yes, interactive, console)
                    continue
                if streaming:
                    console.print()
                    streaming = False
                detail = _describe(item, contexts)
                console.print(f"  [dim]{item.ord:>3}[/dim] [cyan]{item.type:<20}[/cyan] {detail}")
                if item.type == "tool_call.started" and not steered:
                    steered = True  # the user steers while the tool runs
                    await session.submit(STEERING)
                if item.type == "turn.ended":
                    return

        watcher = asyncio.create_task(watch())
        await session.submit("Document our retry policy in README.md")
        await asyncio.wait_for(watcher, timeout=120)
        report = runtime.store.verify(session.thread_id)
        ok = bool(report.ok)
        text = (workspace / "README.md").read_text()
        if "## Retry" in text:
            console.print(
                f"\nREADME.md now ends with:[dim]{escape(clean(text[text.index('## Retry') :].rstrip()))}[/dim]"
            )
        elif decision == "declined":
            console.print("\nREADME.md was not changed: the write was declined.")
        else:
            console.print("\nREADME.md was not changed.")
        return session.thread_id, ok, decision


async def _approve(
    session: Session, data: dict[str, Any], yes: bool, interactive: bool, console: Console
) -> str:
    """Decide the non-idempotent call: --yes approves, a terminal is asked (default no),
    anything else declines. Returns "approved" or "declined"."""
    call_id, tool = data["call_id"], data["tool"]
    if yes:
        console.print("  [yellow]approval needed[/yellow]: approved (--yes)")
        await session.approve(call_id, by="demo-user (--yes)")
        return "approved"
    if not interactive:
        console.print(
            "  [yellow]approval needed[/yellow]: declined (no terminal to ask on; --yes approves)",
            soft_wrap=True,
        )
        await session.deny(call_id, by="demo", reason="no terminal to ask on, and no --yes")
        return "declined"
    console.print(
        "\n  [yellow]approval needed[/yellow]: "
        + escape(clean(f"{tool} {orjson.dumps(data['args']).decode()[:80]}"))
    )
    answer = await _ask("  run it?")
    if answer is None:
        console.print("\n  no answer (end of input): declined")
    if not answer:
        await session.deny(call_id, by="demo-user", reason="declined at the prompt")
        return "declined"
    await session.approve(call_id, by="demo-user")
    return "approved"


async def _ask(question: str) -> bool | None:
    """click.confirm on a daemon thread (Ctrl-C at the prompt must not wait for the input),
    "no" by default; None at the end of input."""
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[bool | None] = loop.create_future()

    def settle(result: bool | None, exc: BaseException | None) -> None:
        if answer.done():
            return
        if exc is not None:
            answer.set_exception(exc)
        else:
            answer.set_result(result)

    def ask() -> None:
        try:
            result = click.confirm(question, default=False)
        except click.Abort:  # end of input at the prompt (click's answer to EOF)
            loop.call_soon_threadsafe(settle, None, None)
        except BaseException as exc:
            loop.call_soon_threadsafe(settle, None, exc)
        else:
            loop.call_soon_threadsafe(settle, result, None)

    threading.Thread(target=ask, name="threadlog-prompt", daemon=True).start()
    return await answer


@cli.command()
@store_options
@click.option(
    "--yes",
    "-y",
    is_flag=True,
    help="Approve the non-idempotent write without asking (without it: asked on a "
    "terminal, default no; declined when there is no terminal or with --json).",
)
@click.option(
    "--pause",
    default=0.05,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Seconds between steps, so the session can be watched.",
)
@handle_errors
def demo(home: str | None, as_json: bool, yes: bool, pause: float) -> None:
    """Run a scripted agent session through the runtime, then verify its log.

    A user asks the agent to document a retry policy. The scripted model reads two files,
    steering arrives while a tool runs (queued, then consumed at the next safe point), and the
    model proposes a non-idempotent append that waits for approval (asked on a terminal,
    "no" by default; declined without one; approved with --yes). Every fact is in the log
    before it is shown. The demo's workspace is a temporary directory, removed at the end.

    \b
    Example:
      threadlog demo --home /tmp/tl --yes
    """
    home = home or default_home()
    console = Console(highlight=False, emoji=False, stderr=as_json)
    workspace = _workspace()
    try:
        thread, ok, decision = asyncio.run(_run(home, yes, not as_json, pause, console, workspace))
    except KeyboardInterrupt:
        # asyncio.run cancelled the session; the close protocol has run (turn aborted, or
        # left waiting for its approval), the log is flushed and the lease released.
        console.print("\n[yellow]interrupted[/yellow]: the session was closed cleanly")
        sys.exit(130)
    finally:
        shutil.rmtree(workspace, ignore_errors=True)
        console.print(f"workspace {workspace} removed", soft_wrap=True, markup=False)
    if as_json:
        sys.stdout.write(
            orjson.dumps(
                {"thread": thread, "verified": ok, "home": home, "write": decision}
            ).decode()
            + "\n"
        )
    else:
        state = "[green]verified[/green]" if ok else "[red]FAILED verification[/red]"
        console.print(f"\nlog {state}. Inspect, fork and resume it:")
        flag = "" if home == default_home() else f" --home {shlex.quote(home)}"
        with open_store(home) as store:  # fork after the first turn: a whole turn inherited
            ends = [r.ord for r in store.read(thread) if r.type == "turn.ended"]
        at = ends[0] if ends else 1
        for command in (
            f"threadlog show {thread}{flag}",
            f"threadlog events {thread}{flag}",
            f"threadlog verify {thread}{flag}",
            f"threadlog fork {thread} --at {at}{flag}",
            f"threadlog resume {thread}{flag}",
        ):
            # whole on one line, so it can be copied (no soft-wrapping at the width)
            console.print(f"  {command}", soft_wrap=True, markup=False, highlight=False)
    if not ok:
        sys.exit(EXIT_FAILED)
