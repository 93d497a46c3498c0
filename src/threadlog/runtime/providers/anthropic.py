"""Anthropic Messages API over HTTP.

Streaming format: ``POST {base_url}/v1/messages`` with ``"stream": true`` answers with named
server-sent events, each with a JSON ``data`` whose ``type`` repeats the event name::

    event: message_start        {"message": {"usage": {"input_tokens": 25, ...}, ...}}
    event: content_block_start  {"index": 0, "content_block": {"type": "text", "text": ""}}
    event: content_block_delta  {"index": 0, "delta": {"type": "text_delta", "text": "Hi"}}
    event: content_block_stop   {"index": 0}
    event: content_block_start  {"index": 1, "content_block": {"type": "tool_use",
                                 "id": "toolu_1", "name": "read_file", "input": {}}}
    event: content_block_delta  {"index": 1, "delta": {"type": "input_json_delta",
                                 "partial_json": "{\\"path\\": \\"a"}}
    event: content_block_stop   {"index": 1}
    event: message_delta        {"delta": {"stop_reason": "tool_use"},
                                 "usage": {"output_tokens": 30}}
    event: message_stop         {}

``ping`` events may come at any time; an ``error`` event
(``{"error": {"type": "overloaded_error", "message": ...}}``) can replace the rest of the
stream. A tool call's input arrives as ``partial_json`` strings to concatenate and parse when
its block stops. Extended thinking streams ``thinking`` blocks (``thinking_delta`` and
``signature_delta``); they are not shown as text but kept in the completed message under
``"thinking"`` because the API wants them back when a tool-use turn continues.
"""

from __future__ import annotations

import json
import os
from dataclasses import field
from typing import TYPE_CHECKING, Any

from threadlog._dataclass import dataclass
from threadlog.runtime.models import Completed, ModelEvent, ModelRequest, ProviderError
from threadlog.runtime.providers._sse import error_excerpt, stream_deltas

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    import httpx

    from threadlog.runtime.providers._sse import SSEEvent

__all__ = ["THINKING_BUDGETS", "AnthropicMessages"]

THINKING_BUDGETS = {"low": 1024, "medium": 4096, "high": 16384}
"""Extended-thinking token budgets for ``ModelRequest.thinking`` levels."""

_RETRYABLE_ERRORS = {"overloaded_error", "api_error", "rate_limit_error", "timeout_error"}


class AnthropicMessages:
    """A Claude model behind the Anthropic Messages API.

    Extended thinking: ``request.thinking`` of ``"low"``, ``"medium"`` or ``"high"`` enables
    it with a budget of 1024, 4096 or 16384 tokens (`THINKING_BUDGETS`); a string of digits
    is taken as the budget itself; ``"off"``/``"none"`` leaves it disabled. Because Anthropic
    counts thinking inside ``max_tokens``, the budget is added to ``request.max_tokens``
    (which stays the allowance for the visible answer).

    Args:
        model: the model name, e.g. ``claude-sonnet-4-5``.
        base_url: the API root (without ``/v1``).
        api_key: the key sent as ``x-api-key``; defaults to ``$ANTHROPIC_API_KEY``.
        version: the ``anthropic-version`` header.
        timeout: seconds allowed to connect and between streamed chunks.
        client: an ``httpx.AsyncClient`` to reuse (the caller closes it); by default each
            call opens and closes its own.
    """

    provider = "anthropic"

    def __init__(
        self,
        model: str,
        *,
        base_url: str = "https://api.anthropic.com",
        api_key: str | None = None,
        version: str = "2023-06-01",
        timeout: float = 120,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.name = model
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key if api_key is not None else os.environ.get("ANTHROPIC_API_KEY")
        self._version = version
        self._timeout = timeout
        self._client = client

    def __repr__(self) -> str:
        return f"AnthropicMessages({self.name!r}, base_url={self.base_url!r})"

    def body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body sent for ``request``.

        Raises:
            ProviderError: ``request.thinking`` is not a known level or a number.
        """
        system, messages = to_anthropic_messages(request.messages, request.instructions)
        body: dict[str, Any] = {
            "model": request.model or self.name,
            "max_tokens": request.max_tokens,
            "stream": True,
            "messages": messages,
        }
        if system:
            body["system"] = system
        if request.tools:
            body["tools"] = [
                {
                    "name": tool["name"],
                    "description": tool.get("description", ""),
                    "input_schema": tool.get("parameters") or {"type": "object", "properties": {}},
                }
                for tool in request.tools
            ]
        budget = thinking_budget(request.thinking)
        if budget:
            body["thinking"] = {"type": "enabled", "budget_tokens": budget}
            body["max_tokens"] = request.max_tokens + budget
        return body

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Stream the response to ``request``.

        Args:
            request: the model call.

        Yields:
            A `TextDelta` per text delta, then one `Completed`.

        Raises:
            ProviderError: an HTTP error status (``retryable`` for 408, 429 and 5xx, which
                includes 529 "overloaded"), a broken connection or a stream that ends before
                ``message_stop`` (``retryable``, with ``partial`` set to the text streamed so
                far), an ``error`` event (``retryable`` when overloaded, rate-limited or an
                internal error), or tool input that is not a JSON object.
        """
        headers = {"anthropic-version": self._version}
        if self._api_key:
            headers["x-api-key"] = self._api_key
        body = self.body(request)
        state = _State()
        async for delta in stream_deltas(
            self._client,
            f"{self.base_url}/v1/messages",
            provider=self.provider,
            headers=headers,
            body=body,
            read_timeout=self._timeout,
            state=state,
        ):
            yield delta
        if not state.stopped:
            raise ProviderError(
                "anthropic: stream ended before message_stop", partial=state.text, retryable=True
            )
        yield state.completed()


def thinking_budget(thinking: str | None) -> int | None:
    """The extended-thinking budget for a ``ModelRequest.thinking`` value (None: disabled).

    Raises:
        ProviderError: the value is neither a level, a number, nor ``off``/``none``.
    """
    if thinking is None:
        return None
    level = thinking.strip().lower()
    if level in ("", "off", "none"):
        return None
    if level in THINKING_BUDGETS:
        return THINKING_BUDGETS[level]
    if level.isdigit():
        return int(level)
    raise ProviderError(
        f"anthropic: unknown thinking level {thinking!r} (use low, medium, high or a token budget)"
    )


def to_anthropic_messages(
    messages: list[dict[str, Any]], instructions: str | None = None
) -> tuple[str, list[dict[str, Any]]]:
    """Provider-neutral messages as a Messages API system prompt and message list.

    System messages join ``instructions`` in the system prompt. Assistant messages become
    text and ``tool_use`` blocks (after any kept ``thinking`` blocks); tool results become
    ``tool_result`` blocks in a user message. Consecutive messages of one role are merged
    (the API wants user and assistant turns to alternate), and empty text is left out.

    Args:
        messages: the conversation (see `threadlog.model.context`).
        instructions: the system prompt.

    Returns:
        ``(system, messages)``.
    """
    system: list[str] = [instructions] if instructions else []
    out: list[dict[str, Any]] = []
    for message in messages:
        role = message["role"]
        blocks: list[dict[str, Any]] = []
        if role == "system":
            if message.get("content"):
                system.append(message["content"])
            continue
        if role == "assistant":
            blocks.extend(message.get("thinking") or [])
            if message.get("content"):
                blocks.append({"type": "text", "text": message["content"]})
            blocks.extend(
                {
                    "type": "tool_use",
                    "id": call["id"],
                    "name": call["name"],
                    "input": call.get("arguments") or {},
                }
                for call in message.get("tool_calls") or []
            )
        elif role == "tool":
            role = "user"
            blocks.append(
                {
                    "type": "tool_result",
                    "tool_use_id": message["tool_call_id"],
                    "content": message.get("content") or "",
                }
            )
        elif message.get("content"):
            blocks.append({"type": "text", "text": message["content"]})
        if not blocks:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    return "\n\n".join(system), out


@dataclass(slots=True)
class _Block:
    type: str
    text: list[str] = field(default_factory=list)
    """Text, input JSON or thinking pieces, by block type."""
    id: str = ""
    name: str = ""
    input: Any = None
    signature: str = ""
    data: str = ""
    done: bool = False
    """A tool call's input has been parsed (at ``content_block_stop``) into ``input``."""


@dataclass(slots=True)
class _State:
    """The message being assembled from events."""

    blocks: dict[int, _Block] = field(default_factory=dict)
    pieces: list[str] = field(default_factory=list)
    usage: dict[str, Any] = field(default_factory=dict)
    stop_reason: str | None = None
    stopped: bool = False
    delta: str = ""
    """The text the last event added."""

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    def feed(self, event: SSEEvent) -> bool:
        """Take one event; True at ``message_stop``."""
        self.delta = ""
        if not event.data.strip():
            return False
        try:
            data = json.loads(event.data)
        except ValueError as exc:
            raise ProviderError(
                f"anthropic: invalid JSON in stream: {error_excerpt(event.data)}", partial=self.text
            ) from exc
        if not isinstance(data, dict):
            raise ProviderError(
                f"anthropic: unexpected stream payload: {error_excerpt(event.data)}",
                partial=self.text,
            )
        kind = event.event if event.event != "message" else data.get("type", "")
        if kind == "error" or data.get("type") == "error":
            error = data.get("error")
            error_type = error.get("type") if isinstance(error, dict) else None
            raise ProviderError(
                f"anthropic: error in stream: {error_excerpt(event.data)}",
                partial=self.text,
                retryable=error_type in _RETRYABLE_ERRORS,
            )
        if kind == "message_start":
            usage = (data.get("message") or {}).get("usage") or {}
            self.usage = {
                "input_tokens": usage.get("input_tokens", 0),
                "output_tokens": usage.get("output_tokens", 0),
            }
        elif kind == "content_block_start":
            start = data.get("content_block") or {}
            self.blocks[data.get("index", len(self.blocks))] = _Block(
                type=start.get("type", ""),
                id=start.get("id", ""),
                name=start.get("name", ""),
                input=start.get("input"),
                data=start.get("data", ""),
            )
            if start.get("type") == "text" and start.get("text"):
                self._text(start["text"])
        elif kind == "content_block_delta":
            self._delta(data.get("index", 0), data.get("delta") or {})
        elif kind == "content_block_stop":
            block = self.blocks.get(data.get("index", 0))
            if block is not None and block.type == "tool_use" and not block.done:
                block.input = self._input(block)
                block.done = True
        elif kind == "message_delta":
            delta = data.get("delta") or {}
            if delta.get("stop_reason"):
                self.stop_reason = delta["stop_reason"]
            usage = data.get("usage") or {}
            for key in ("input_tokens", "output_tokens"):
                if usage.get(key) is not None:
                    self.usage[key] = usage[key]
        elif kind == "message_stop":
            self.stopped = True
            return True
        return False

    def _text(self, text: str) -> None:
        self.pieces.append(text)
        self.delta += text

    def _delta(self, index: int, delta: dict[str, Any]) -> None:
        block = self.blocks.setdefault(index, _Block(type="text"))
        kind = delta.get("type")
        if kind == "text_delta":
            text = delta.get("text") or ""
            block.text.append(text)
            self._text(text)
        elif kind == "input_json_delta":
            block.text.append(delta.get("partial_json") or "")
        elif kind == "thinking_delta":
            block.text.append(delta.get("thinking") or "")
        elif kind == "signature_delta":
            block.signature += delta.get("signature") or ""

    def completed(self) -> Completed:
        calls: list[dict[str, Any]] = []
        thinking: list[dict[str, Any]] = []
        for index in sorted(self.blocks):
            block = self.blocks[index]
            if block.type == "tool_use":
                arguments = block.input if block.done else self._input(block)
                calls.append({"id": block.id, "name": block.name, "arguments": arguments})
            elif block.type == "thinking":
                thinking.append(
                    {
                        "type": "thinking",
                        "thinking": "".join(block.text),
                        "signature": block.signature,
                    }
                )
            elif block.type == "redacted_thinking":
                thinking.append({"type": "redacted_thinking", "data": block.data})
        message: dict[str, Any] = {
            "role": "assistant",
            "content": self.text or None,
            "tool_calls": calls,
        }
        if thinking:
            message["thinking"] = thinking
        return Completed(
            message=message, usage=self.usage, stop_reason=self.stop_reason or "end_turn"
        )

    def _input(self, block: _Block) -> dict[str, Any]:
        raw = "".join(block.text)
        if not raw.strip():
            return dict(block.input) if isinstance(block.input, dict) else {}
        try:
            value = json.loads(raw)
        except ValueError as exc:
            raise ProviderError(
                f"anthropic: tool call {block.name!r} has invalid JSON input: {error_excerpt(raw)}",
                partial=self.text,
            ) from exc
        if not isinstance(value, dict):
            raise ProviderError(
                f"anthropic: tool call {block.name!r} input is not a JSON object: {error_excerpt(raw)}",
                partial=self.text,
            )
        return value
