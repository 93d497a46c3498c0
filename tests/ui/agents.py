"""Scripted models the browser tests start ``threadlog serve --model python:…`` with.

The model decides from the request alone (the last user message and how many tool results
follow it), so a server killed mid-turn and started again picks the script up where the log
says the turn was.
"""

from __future__ import annotations

from threadlog.runtime.models import ModelRequest, Reply, ScriptedModel, ToolCallSpec

STORY = 120
"""Words of the ``story`` reply: streamed over a few seconds, so the page shows it growing."""
USAGE = {"input_tokens": 120, "output_tokens": 30, "cost": 0.0012}


def _last_user(request: ModelRequest) -> tuple[str, int]:
    """The last user message and how many tool results came after it."""
    text, results = "", 0
    for message in request.messages:
        if message["role"] == "user":
            text, results = str(message.get("content") or ""), 0
        elif message["role"] == "tool":
            results += 1
    return text, results


def _script(request: ModelRequest, step: int) -> Reply:
    text, results = _last_user(request)
    if text.startswith("demo"):
        if results == 0:
            return Reply(
                "Let me look at **the notes** first.",
                [ToolCallSpec("read_file", {"path": "notes.md"})],
                usage=USAGE,
            )
        return Reply(
            "The notes say:\n\n- retries: `3`\n- backoff: *exponential*\n\nSee https://example.org/retry.",
            usage=USAGE,
        )
    if text.startswith("pay"):
        if results == 0:
            return Reply(
                "I will record the payment.",
                [ToolCallSpec("append_file", {"path": "ledger.txt", "text": "paid 5\n"})],
                usage=USAGE,
            )
        return Reply("Recorded.", usage=USAGE)
    if text.startswith("slow"):
        if results == 0:
            return Reply(
                "Running the slow job.",
                [ToolCallSpec("run_command", {"command": "sleep 60"})],
                usage=USAGE,
            )
        return Reply("The slow job is settled.", usage=USAGE)
    if text.startswith("story"):
        words = " ".join(f"word{i}" for i in range(STORY))
        return Reply(f"Once upon a time {words}. The end.", usage=USAGE)
    if text.startswith("show"):
        if results == 0:
            return Reply("Reading it.", [ToolCallSpec("read_file", {"path": text[5:].strip()})])
        return Reply("Shown above.")
    return Reply(f"Noted: {text}", usage=USAGE)


def agent() -> ScriptedModel:
    """Reads files, asks to append (approval), runs a slow command, echoes the rest."""
    return ScriptedModel(_script, delay=0.02)
