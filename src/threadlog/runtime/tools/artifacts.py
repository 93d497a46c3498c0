"""``read_artifact``: page through a value too large for the model's context.

A value over the model's share of its context budget reaches the model cut: its head, a
marker saying how much was left out and naming the artifact that holds the whole value, and
its tail (`threadlog.runtime.large_values`). With this tool the model reads any part of it:
``read_artifact(ref, offset, length)`` returns the characters ``offset`` to
``offset + length`` of the artifact's *text* — the value itself when it is a string, else
its canonical JSON — which is the text the marker counts in.

It only reads, through the Store port (the tool context's ``load_artifact``), so it is
``read_only``; a length is bounded (`MAX_LENGTH`) so that a page always fits in a context.
"""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING, Any

from threadlog.model import codec
from threadlog.runtime.tools._confine import ToolError
from threadlog.runtime.tools._tool import Tool

if TYPE_CHECKING:
    from threadlog.runtime.tools._confine import ToolContext

__all__ = ["DEFAULT_LENGTH", "MAX_LENGTH", "artifact_text", "read_artifact"]

MAX_LENGTH = 32_768
"""The most characters one call returns."""
DEFAULT_LENGTH = 16_384
"""What a call without ``length`` returns."""

_REF_RE = re.compile(r"^[0-9a-f]{64}$")


def artifact_text(value: Any) -> str:
    """The text of an artifact's value that offsets count in: a string as it is, anything
    else as its canonical JSON."""
    return value if isinstance(value, str) else codec.canonical(value).decode("utf-8")


def _int_arg(args: dict[str, Any], name: str, default: int, low: int, high: int | None) -> int:
    value = args.get(name, default)
    if value is None:
        value = default
    if type(value) is not int or value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f"an integer >= {low}"
        raise ToolError(f"{name} must be {bound}, not {value!r}")
    return value


async def _read_artifact(ctx: ToolContext, args: dict[str, Any]) -> str:
    ref = args.get("ref")
    if not isinstance(ref, str) or _REF_RE.fullmatch(ref) is None:
        raise ToolError(
            f"ref must be an artifact's sha256 (64 lowercase hex digits, as the marker "
            f"names it), not {ref!r}"
        )
    offset = _int_arg(args, "offset", 0, 0, None)
    length = _int_arg(args, "length", DEFAULT_LENGTH, 1, MAX_LENGTH)
    load = ctx.load_artifact
    if load is None:
        raise ToolError("no artifact store is available to this tool")
    text = artifact_text(await asyncio.to_thread(load, ref))
    if offset >= len(text) and text:
        raise ToolError(
            f"offset {offset} is past the end (artifact {ref} holds {len(text)} characters)"
        )
    return text[offset : offset + length]


read_artifact = Tool(
    "read_artifact",
    "Read part of a large value that was cut to fit your context: the characters from "
    "offset to offset + length of the artifact the cut's marker names.",
    {
        "type": "object",
        "properties": {
            "ref": {
                "type": "string",
                "description": "The artifact's sha256, as the marker names it.",
            },
            "offset": {
                "type": "integer",
                "minimum": 0,
                "description": "The first character to read (0 is the start).",
            },
            "length": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_LENGTH,
                "description": f"How many characters to read (default {DEFAULT_LENGTH}).",
            },
        },
        "required": ["ref"],
    },
    "read_only",
    _read_artifact,
)
