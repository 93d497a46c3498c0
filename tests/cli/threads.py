"""Threads for the CLI tests, appended straight to a store (fast: no runtime, no model).

Each "exchange" is a turn: ``turn.started`` (the user's message), ``step.started``,
``model.responded`` (the model's), ``turn.ended``; two conversation entries. A branch starts
a turn whose ``turn.started`` hangs under an earlier model response (``parent``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from threadlog.store.protocol import Store

HOSTILE = [
    "fix the [/tmp] cleanup",
    "[/bold] closes nothing",
    "[red]not red[/red] [link=file:///etc/passwd]x[/link]",
    "\x1b[31mANSI red\x1b[0m and \x1b]0;title\x07 and a \r carriage return\b",
    "<script>alert('html')</script> &amp; :smile:",
    "tab\there, newline\nthere, bell\x07, rtl \u202eevil",
]


def exchange(
    store: Store, thread: str, n: int, user: str, model: str, parent: str | None = None
) -> tuple[str, str]:
    """One turn; the ids of its ``turn.started`` and ``model.responded`` records."""
    turn = f"turn-{n}"
    extra: dict[str, Any] = {} if parent is None else {"parent": parent}
    started = store.append(
        thread, "turn.started", {"turn_id": turn, "input": user}, durable=False, **extra
    )
    store.append(thread, "step.started", {"turn_id": turn, "step_id": f"{turn}.1"}, durable=False)
    answer = store.append(
        thread,
        "model.responded",
        {
            "turn_id": turn,
            "step_id": f"{turn}.1",
            "message": {"role": "assistant", "content": model},
        },
        durable=False,
    )
    store.append(thread, "turn.ended", {"turn_id": turn, "outcome": "completed"}, durable=False)
    return started.id, answer.id


def linear(store: Store, messages: int, title: str = "long") -> str:
    """A thread of ``messages`` conversation entries in one line."""
    thread = store.create_thread("tester", title=title)
    for n in range(messages // 2):
        exchange(store, thread, n, f"question {n}", f"answer {n}")
    store.flush()
    return thread


def branched(store: Store, branches: int, title: str = "branchy") -> str:
    """A thread whose first answer has ``branches`` follow-ups, each its own branch of two
    exchanges; the last branch is the active one."""
    thread = store.create_thread("tester", title=title)
    _, root = exchange(store, thread, 0, "start here", "here we start")
    n = 1
    for b in range(branches):
        _, answer = exchange(store, thread, n, f"branch {b} try", f"branch {b} says", root)
        exchange(store, thread, n + 1, f"branch {b} more", f"branch {b} again")
        n += 2
    store.flush()
    return thread


def run(*args: str) -> tuple[int, str, str]:
    """``threadlog ARGS`` in-process: exit code, stdout, stderr (stdout is not a terminal)."""
    from click.testing import CliRunner

    from threadlog.cli import cli

    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def hostile_thread(store: Store) -> str:
    """A thread whose title, messages, tool call and error are all hostile text."""
    thread = store.create_thread("[bold]eve[/bold]", title=HOSTILE[0])
    _, answer = exchange(store, thread, 0, HOSTILE[1], HOSTILE[2])
    exchange(store, thread, 1, HOSTILE[3], HOSTILE[4], answer)  # a branch
    exchange(store, thread, 2, HOSTILE[5], HOSTILE[0], answer)
    turn = "turn-9"
    store.append(thread, "turn.started", {"turn_id": turn, "input": HOSTILE[2]})
    store.append(
        thread,
        "tool_call.proposed",
        {
            "turn_id": turn,
            "call_id": "call_[red]x",
            "tool": "[/bold]tool",
            "args": {"path": HOSTILE[3]},
            "side_effect": "non_idempotent",
        },
    )
    store.append(thread, "tool_call.approved", {"call_id": "call_[red]x", "by": HOSTILE[1]})
    store.append(thread, "tool_call.started", {"call_id": "call_[red]x"})
    store.append(thread, "tool_call.unknown", {"call_id": "call_[red]x", "reason": HOSTILE[3]})
    store.append(thread, "turn.ended", {"turn_id": turn, "outcome": "interrupted"})
    store.flush()
    return thread
