"""OpenAI-compatible Chat Completions (OpenAI, vLLM, llama.cpp, Ollama, …) over HTTP.

Streaming format: ``POST {base_url}/chat/completions`` with ``"stream": true`` answers with
server-sent events whose ``data`` is one JSON chunk each, and finally the literal
``data: [DONE]``::

    data: {"choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"}}]}
    data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1",
           "type":"function","function":{"name":"read_file","arguments":""}}]}}]}
    data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,
           "function":{"arguments":"{\\"path\\": "}}]}}]}
    data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}
    data: {"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":9}}
    data: [DONE]

``delta.content`` pieces are text; ``delta.tool_calls`` entries are fragments of the call at
their ``index``: the id and name come first, then the JSON arguments as string pieces to be
concatenated. ``finish_reason`` ends the choice; with ``stream_options.include_usage`` a last
chunk with empty ``choices`` carries the usage. A failure may arrive as ``{"error": {...}}``.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import field
from typing import TYPE_CHECKING, Any, Literal

from threadlog._dataclass import dataclass
from threadlog.runtime.models import Completed, ModelEvent, ModelRequest, ProviderError
from threadlog.runtime.providers._sse import error_excerpt, stream_deltas

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    import httpx

    from threadlog.runtime.providers._sse import SSEEvent

__all__ = ["OpenAIChat"]

_STOP_REASONS = {"tool_calls": "tool_use", "stop": "end_turn", "length": "max_tokens"}
_RETRYABLE_ERRORS = {"server_error", "rate_limit_error", "rate_limit_exceeded", "overloaded"}


class OpenAIChat:
    """A model behind an OpenAI-compatible ``/chat/completions`` endpoint.

    ``request.thinking``, when set, is sent as ``reasoning_effort`` (``"low"``, ``"medium"``,
    ``"high"`` for OpenAI's reasoning models); servers that do not know it may ignore or reject
    it. ``extra_body`` is merged into every request body last, so it can add or override
    anything (``temperature``, a vLLM sampling option…).

    Args:
        model: the model name sent to the server.
        base_url: the API root, up to and including ``/v1``.
        api_key: the bearer token; defaults to ``$OPENAI_API_KEY``. Without one no
            ``Authorization`` header is sent (local servers rarely need it).
        timeout: seconds allowed to connect and between streamed chunks.
        client: an ``httpx.AsyncClient`` to reuse (the caller closes it); by default each
            call opens and closes its own.
        extra_body: fields added to every request body.
        token_limit: the body field that carries ``request.max_tokens``: ``"max_tokens"``
            (most compatible servers) or ``"max_completion_tokens"`` (OpenAI's reasoning
            models, which refuse ``max_tokens``).

    Example::

        model = OpenAIChat("o4-mini", token_limit="max_completion_tokens")
    """

    provider = "openai"

    def __init__(
        self,
        model: str,
        *,
        base_url: str = "https://api.openai.com/v1",
        api_key: str | None = None,
        timeout: float = 120,
        client: httpx.AsyncClient | None = None,
        extra_body: dict[str, Any] | None = None,
        token_limit: Literal["max_tokens", "max_completion_tokens"] = "max_tokens",
    ) -> None:
        if token_limit not in ("max_tokens", "max_completion_tokens"):
            raise ValueError(
                f"token_limit must be 'max_tokens' or 'max_completion_tokens', not {token_limit!r}"
            )
        self.name = model
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self._timeout = timeout
        self._client = client
        self._extra_body = dict(extra_body or {})
        self._token_limit = token_limit

    def __repr__(self) -> str:
        return f"OpenAIChat({self.name!r}, base_url={self.base_url!r})"

    def body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body sent for ``request``."""
        body: dict[str, Any] = {
            "model": request.model or self.name,
            "messages": to_openai_messages(request.messages, request.instructions),
            "stream": True,
            "stream_options": {"include_usage": True},
            self._token_limit: request.max_tokens,
        }
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": tool["name"],
                        "description": tool.get("description", ""),
                        "parameters": tool.get("parameters")
                        or {"type": "object", "properties": {}},
                    },
                }
                for tool in request.tools
            ]
        if request.thinking:
            body["reasoning_effort"] = request.thinking
        body.update(self._extra_body)
        return body

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Stream the response to ``request``.

        Args:
            request: the model call.

        Yields:
            A `TextDelta` per content piece, then one `Completed`.

        Raises:
            ProviderError: an HTTP error status (``retryable`` for 408, 429 and 5xx), a
                broken connection or a stream that ends before ``finish_reason``
                (``retryable``, with ``partial`` set to the text streamed so far), an error
                payload in the stream, or tool arguments that are not a JSON object.
        """
        headers = {"authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        state = _State()
        async for delta in stream_deltas(
            self._client,
            f"{self.base_url}/chat/completions",
            provider=self.provider,
            headers=headers,
            body=self.body(request),
            read_timeout=self._timeout,
            state=state,
        ):
            yield delta
        if state.finish_reason is None:
            raise ProviderError(
                "openai: stream ended before the response was finished",
                partial=state.text,
                retryable=True,
            )
        yield state.completed()


def to_openai_messages(
    messages: list[dict[str, Any]], instructions: str | None = None
) -> list[dict[str, Any]]:
    """Provider-neutral messages as Chat Completions messages.

    Args:
        messages: the conversation (see `threadlog.model.context`).
        instructions: the system prompt, sent as a leading system message.

    Returns:
        The ``messages`` array of the request.
    """
    out: list[dict[str, Any]] = []
    if instructions:
        out.append({"role": "system", "content": instructions})
    for message in messages:
        role = message["role"]
        if role == "assistant":
            calls = message.get("tool_calls") or []
            converted: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
            if calls:
                converted["tool_calls"] = [
                    {
                        "id": call["id"],
                        "type": "function",
                        "function": {
                            "name": call["name"],
                            "arguments": json.dumps(call.get("arguments") or {}),
                        },
                    }
                    for call in calls
                ]
            elif converted["content"] is None:
                converted["content"] = ""
            out.append(converted)
        elif role == "tool":
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": message["tool_call_id"],
                    "content": message.get("content") or "",
                }
            )
        else:
            out.append({"role": role, "content": message.get("content") or ""})
    return out


@dataclass(slots=True)
class _Call:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _State:
    """The response being assembled from chunks."""

    pieces: list[str] = field(default_factory=list)
    calls: dict[int, _Call] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    delta: str = ""
    """The text the last chunk added."""

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    def feed(self, event: SSEEvent) -> bool:
        """Take one event; True when the stream is over (``[DONE]``)."""
        self.delta = ""
        data = event.data.strip()
        if data == "[DONE]":
            return True
        if not data:
            return False
        try:
            chunk = json.loads(data)
        except ValueError as exc:
            raise ProviderError(
                f"openai: invalid JSON in stream: {error_excerpt(data)}", partial=self.text
            ) from exc
        if not isinstance(chunk, dict):
            raise ProviderError(
                f"openai: unexpected stream payload: {error_excerpt(data)}", partial=self.text
            )
        if chunk.get("error") is not None:
            error = chunk["error"]
            kind = (error.get("type") or error.get("code")) if isinstance(error, dict) else None
            raise ProviderError(
                f"openai: error in stream: {error_excerpt(data)}",
                partial=self.text,
                retryable=kind in _RETRYABLE_ERRORS,
            )
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.usage = {
                "input_tokens": usage.get("prompt_tokens", 0),
                "output_tokens": usage.get("completion_tokens", 0),
            }
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) == 0:
                self._choice(choice)
        return False

    def _choice(self, choice: dict[str, Any]) -> None:
        delta = choice.get("delta") or {}
        content = delta.get("content")
        if isinstance(content, str) and content:
            self.pieces.append(content)
            self.delta += content
        for position, fragment in enumerate(delta.get("tool_calls") or []):
            index = fragment.get("index", position)
            call = self.calls.setdefault(index, _Call())
            if fragment.get("id") and not call.id:
                call.id = fragment["id"]
            function = fragment.get("function") or {}
            if function.get("name") and not call.name:
                call.name = function["name"]
            arguments = function.get("arguments")
            if isinstance(arguments, str):
                call.arguments.append(arguments)
            elif isinstance(arguments, dict):
                call.arguments.append(json.dumps(arguments))
        if choice.get("finish_reason"):
            self.finish_reason = choice["finish_reason"]

    def completed(self) -> Completed:
        calls: list[dict[str, Any]] = []
        for index in sorted(self.calls):
            call = self.calls[index]
            raw = "".join(call.arguments)
            try:
                arguments = json.loads(raw) if raw.strip() else {}
            except ValueError as exc:
                raise ProviderError(
                    f"openai: tool call {call.name!r} has invalid JSON arguments: {error_excerpt(raw)}",
                    partial=self.text,
                ) from exc
            if not isinstance(arguments, dict):
                raise ProviderError(
                    f"openai: tool call {call.name!r} arguments are not a JSON object: {error_excerpt(raw)}",
                    partial=self.text,
                )
            if not call.name:
                raise ProviderError("openai: a tool call has no name", partial=self.text)
            calls.append(
                {
                    "id": call.id or f"call_{uuid.uuid4().hex[:24]}",
                    "name": call.name,
                    "arguments": arguments,
                }
            )
        reason = self.finish_reason or "end_turn"
        return Completed(
            message={"role": "assistant", "content": self.text or None, "tool_calls": calls},
            usage=self.usage,
            stop_reason=_STOP_REASONS.get(reason, reason),
        )
