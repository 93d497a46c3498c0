"""``threadlog demo``: a scripted agent session written to the store, end to end."""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from threadlog.cli import EXIT_FAILED, cli, handle_errors, store_options
from threadlog.model.ids import derived_id
from threadlog.store.embedded import EmbeddedStore

__all__ = ["demo"]


def _workspace() -> Path:
    root = Path(tempfile.mkdtemp(prefix="threadlog-demo-"))
    (root / "README.md").write_text("# inventory service\nTODO: document the retry policy\n")
    (root / "notes.txt").write_text("retries: 3, backoff: exponential, cap 30s\n")
    return root


@cli.command()
@store_options
@click.option(
    "--pause",
    default=0.15,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Seconds to pause between steps, so the session can be watched.",
)
@handle_errors
def demo(home: str | None, as_json: bool, pause: float) -> None:
    """Run a scripted agent session and write every fact of it to the log.

    A user asks the agent to document a retry policy; the scripted model reads two files,
    proposes a (non-idempotent) write that is approved, and finishes. Every step is appended
    with its durability class, then the log is verified and the commands to inspect it are
    printed.

    \b
    Example:
      threadlog demo --home /tmp/tl
    """
    console = Console(highlight=False, stderr=as_json)
    workspace = _workspace()
    with EmbeddedStore(home) as store:
        thread = store.create_thread(
            "demo",
            title="document the retry policy",
            model="scripted",
            cwd=str(workspace),
            approval_policy={"non_idempotent": "ask"},
        )
        console.print(f"[bold]threadlog demo[/bold]  store [cyan]{store.home}[/cyan]")
        console.print(f"thread [bold]{thread}[/bold]  workspace {workspace}\n")

        def emit(type_: str, data: dict[str, Any], note: str) -> None:
            record = store.append(thread, type_, data)
            console.print(f"  [dim]{record.ord:>3}[/dim] [cyan]{type_:<20}[/cyan] {note}")
            time.sleep(pause)

        turn = "turn-1"
        emit(
            "turn.started",
            {"turn_id": turn, "input": "Document our retry policy in README.md"},
            "user: Document our retry policy in README.md",
        )
        step = 0
        for name in ("README.md", "notes.txt"):
            step += 1
            step_id = f"{turn}.step-{step}"
            with console.status("model is thinking…", spinner="dots"):
                emit(
                    "step.started",
                    {"turn_id": turn, "step_id": step_id, "context": {"messages": step}},
                    f"step {step}",
                )
                emit(
                    "provider.started",
                    {
                        "turn_id": turn,
                        "step_id": step_id,
                        "provider": "scripted",
                        "model": "scripted",
                    },
                    "",
                )
            call_id = f"call-{step}"
            emit(
                "model.responded",
                {
                    "turn_id": turn,
                    "step_id": step_id,
                    "message": {"role": "assistant", "tool_calls": [call_id]},
                    "usage": {"input_tokens": 120 * step, "output_tokens": 18},
                    "stop_reason": "tool_use",
                },
                f"model: read_file {name}",
            )
            emit(
                "tool_call.proposed",
                {
                    "turn_id": turn,
                    "step_id": step_id,
                    "call_id": call_id,
                    "tool": "read_file",
                    "args": {"path": name},
                    "side_effect": "read_only",
                },
                f"read_file({name!r})",
            )
            emit(
                "tool_call.approved",
                {"call_id": call_id, "by": "policy:read_only"},
                "auto-approved",
            )
            emit("tool_call.started", {"call_id": call_id, "attempt": 1}, "")
            content = (workspace / name).read_text()
            emit(
                "tool_call.finished",
                {"call_id": call_id, "ok": True, "result": content},
                f"{len(content)} bytes",
            )
        step += 1
        step_id = f"{turn}.step-{step}"
        emit("step.started", {"turn_id": turn, "step_id": step_id}, f"step {step}")
        call_id = "call-write"
        key = derived_id("demo.append", thread, call_id)
        emit(
            "model.responded",
            {
                "turn_id": turn,
                "step_id": step_id,
                "message": {"role": "assistant", "tool_calls": [call_id]},
                "stop_reason": "tool_use",
            },
            "model: append a section to README.md",
        )
        section = (
            "\n## Retry policy\nRequests are retried 3 times with exponential backoff (cap 30 s).\n"
        )
        emit(
            "tool_call.proposed",
            {
                "turn_id": turn,
                "step_id": step_id,
                "call_id": call_id,
                "tool": "append_file",
                "side_effect": "non_idempotent",
                "idempotency_key": key,
                "args": {"path": "README.md", "text": section},
            },
            "append_file('README.md') [yellow]non-idempotent: needs approval[/yellow]",
        )
        emit("tool_call.approved", {"call_id": call_id, "by": "demo-user"}, "approved by demo-user")
        emit(
            "tool_call.started",
            {"call_id": call_id, "attempt": 1, "idempotency_key": key},
            "start intent is durable before the effect",
        )
        with open(workspace / "README.md", "a") as f:
            f.write(section)
        emit(
            "tool_call.finished",
            {"call_id": call_id, "ok": True, "result": {"appended": len(section)}},
            "README.md updated",
        )
        step += 1
        step_id = f"{turn}.step-{step}"
        emit("step.started", {"turn_id": turn, "step_id": step_id}, f"step {step}")
        emit(
            "model.responded",
            {
                "turn_id": turn,
                "step_id": step_id,
                "message": {
                    "role": "assistant",
                    "content": "Documented the retry policy in README.md.",
                },
                "stop_reason": "end_turn",
            },
            "model: done",
        )
        emit("turn.ended", {"turn_id": turn, "outcome": "completed"}, "[green]completed[/green]")
        report = store.verify(thread)
    if as_json:
        sys.stdout.write(
            f'{{"thread": "{thread}", "records": {report.records}, "verified": '
            f'{"true" if report.ok else "false"}, "home": "{store.home}"}}\n'
        )
    else:
        status = "[green]verified[/green]" if report.ok else f"[red]FAILED: {report.error}[/red]"
        console.print(f"\n{report.records} records, hash chain {status}\n")
        flag = f" --home {store.home}" if home else ""
        console.print("Inspect it:")
        for command in (
            f"threadlog show {thread}{flag}",
            f"threadlog events {thread}{flag}",
            f"threadlog verify {thread}{flag}",
            f"threadlog ls{flag}",
        ):
            console.print(f"  {command}")
    if not report.ok:
        sys.exit(EXIT_FAILED)
