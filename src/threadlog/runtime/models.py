"""The model protocol, and a deterministic scripted model for demos and tests.

A model streams `ModelEvent`s for a `ModelRequest`: any number of `TextDelta`s (transient:
shown live, never logged) and then exactly one `Completed` carrying the whole assistant message
(text and tool calls), usage and stop reason. A failure mid-stream raises `ProviderError` with
whatever text had arrived, so the runtime can record ``provider.interrupted`` with the partial
response.

Messages are the provider-neutral dicts of `threadlog.model.context`; a tool call is
``{"id": str, "name": str, "arguments": dict}``.
"""

from __future__ import annotations

import asyncio
from dataclasses import field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from threadlog._dataclass import dataclass
from threadlog.errors import RunError

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Sequence

__all__ = [
    "Completed",
    "Model",
    "ModelEvent",
    "ModelRequest",
    "ProviderError",
    "Reply",
    "ModelSummarizer",
    "ScriptedModel",
    "Summarizer",
    "TextDelta",
    "ToolCallSpec",
]


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """One model call: the exact context the model is given."""

    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    """Tool specs: ``{"name", "description", "parameters"}`` (JSON Schema)."""
    instructions: str | None = None
    thinking: str | None = None
    max_tokens: int = 4096

    def snapshot(self) -> dict[str, Any]:
        """The request as plain JSON (what ``step.started`` records)."""
        return {
            "model": self.model,
            "instructions": self.instructions,
            "thinking": self.thinking,
            "max_tokens": self.max_tokens,
            "tools": self.tools,
            "messages": self.messages,
        }


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class Completed:
    message: dict[str, Any]
    """``{"role": "assistant", "content": str | None, "tool_calls": [...]}``"""
    usage: dict[str, Any] = field(default_factory=dict)
    stop_reason: str = "end_turn"


ModelEvent = TextDelta | Completed


class ProviderError(RunError):
    """The provider failed (HTTP error, broken stream, bad payload)."""

    def __init__(
        self, message: str, *, partial: str | None = None, retryable: bool = False
    ) -> None:
        super().__init__(message)
        self.partial = partial
        self.retryable = retryable


@runtime_checkable
class Model(Protocol):
    """Anything that can stream a response for a request."""

    provider: str
    """A short provider name recorded in ``provider.started`` (e.g. ``openai``)."""
    name: str
    """The model name recorded in ``provider.started``."""

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Yield text deltas, then one `Completed`; raise `ProviderError` on failure."""
        ...


@runtime_checkable
class Summarizer(Protocol):
    """Anything that can summarize messages (for compaction)."""

    async def summarize(self, messages: list[dict[str, Any]]) -> str: ...


SUMMARY_INSTRUCTIONS = (
    "Summarize the conversation so far for your own later use: the user's goal, decisions "
    "made, facts established, files touched and what remains to do. Be concise and exact; "
    "do not invent anything that is not in the conversation."
)


class ModelSummarizer:
    """Summarize with a model: one request carrying the conversation and the instruction."""

    def __init__(self, model: Model, *, model_name: str | None = None) -> None:
        self._model = model
        self._name = model_name or model.name

    async def summarize(self, messages: list[dict[str, Any]]) -> str:
        transcript = "\n".join(
            f"{m['role']}: {m.get('content') or ''}"
            + "".join(f" [calls {c['name']}]" for c in m.get("tool_calls") or [])
            for m in messages
        )
        request = ModelRequest(
            model=self._name,
            messages=[{"role": "user", "content": transcript}],
            instructions=SUMMARY_INSTRUCTIONS,
        )
        text: list[str] = []
        async for event in self._model.stream(request):
            if isinstance(event, Completed):
                return str(event.message.get("content") or "".join(text))
            text.append(event.text)
        return "".join(text)


@dataclass(frozen=True, slots=True)
class ToolCallSpec:
    """A tool call a scripted reply makes."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    id: str | None = None


@dataclass(frozen=True, slots=True)
class Reply:
    """One scripted response: text and/or tool calls (or an error to raise mid-stream)."""

    text: str | None = None
    tool_calls: Sequence[ToolCallSpec] = ()
    usage: dict[str, Any] | None = None
    fail_after: int | None = None
    """Raise `ProviderError` after streaming this many words (to test interruptions)."""


class ScriptedModel:
    """A deterministic model: replies from a list, or from a function of the request.

    Args:
        replies: the replies in order, or ``fn(request, step) -> Reply``. Once a list runs
            out, the model replies "(script finished)" with no tool call.
        delay: seconds between streamed words (so progress can be watched).
    """

    provider = "scripted"

    def __init__(
        self,
        replies: Sequence[Reply] | Callable[[ModelRequest, int], Reply],
        *,
        name: str = "scripted",
        delay: float = 0.0,
    ) -> None:
        self.name = name
        self._replies = replies
        self._delay = delay
        self.calls = 0
        self.requests: list[ModelRequest] = []

    def _next(self, request: ModelRequest) -> Reply:
        step = self.calls
        self.calls += 1
        self.requests.append(request)
        if callable(self._replies):
            return self._replies(request, step)
        if step < len(self._replies):
            return self._replies[step]
        return Reply(text="(script finished)")

    async def summarize(self, messages: list[dict[str, Any]]) -> str:
        """A deterministic summary (the scripted model's summarizer, for tests and demos)."""
        users = [str(m.get("content")) for m in messages if m["role"] == "user"]
        calls = [c["name"] for m in messages for c in m.get("tool_calls") or []]
        return (
            f"{len(messages)} earlier messages. The user asked: "
            + " / ".join(u[:80] for u in users)
            + (f". Tools used: {', '.join(calls)}." if calls else ".")
        )

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        reply = self._next(request)
        words = (reply.text or "").split(" ") if reply.text else []
        sent: list[str] = []
        for i, word in enumerate(words):
            if reply.fail_after is not None and i >= reply.fail_after:
                raise ProviderError("scripted failure mid-stream", partial=" ".join(sent))
            piece = word if i == 0 else " " + word
            sent.append(word)
            if self._delay:
                await asyncio.sleep(self._delay)
            yield TextDelta(piece)
        if reply.fail_after is not None and reply.fail_after >= len(words):
            raise ProviderError("scripted failure mid-stream", partial=" ".join(sent))
        calls = [
            {
                "id": spec.id or f"call_{self.calls}_{n}",
                "name": spec.name,
                "arguments": dict(spec.arguments),
            }
            for n, spec in enumerate(reply.tool_calls)
        ]
        prompt_tokens = sum(len(str(m.get("content") or "")) for m in request.messages) // 4
        yield Completed(
            message={"role": "assistant", "content": reply.text, "tool_calls": calls},
            usage=reply.usage or {"input_tokens": prompt_tokens, "output_tokens": len(words)},
            stop_reason="tool_use" if calls else "end_turn",
        )
