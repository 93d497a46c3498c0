"""Local stubs of the Chat Completions and Messages endpoints: strict request validators.

Each validator returns the list of what is wrong with a request body (empty: accepted). They
check the request *shape* as the providers document it, more strictly than the providers
themselves where that costs nothing: unknown keys are refused, roles and content types are a
closed set, and tool calls must be answered exactly once, in the right place:

* Chat Completions: ``model`` and a non-empty ``messages``; roles system / developer / user /
  assistant / tool; an assistant's ``tool_calls`` are ``{"id", "type": "function",
  "function": {"name", "arguments"}}`` with the arguments a JSON string of an object; after
  such a message come exactly one ``tool`` message per call (``tool_call_id`` naming it) before
  anything else; no tool message answers anything else.
* Messages: ``model``, ``max_tokens``, a non-empty ``system`` if any, a non-empty ``messages`` starting
  with user and alternating user / assistant; content a string or a non-empty list of blocks
  (user: text, image, tool_result; assistant: text, thinking with its signature,
  redacted_thinking, tool_use); no empty text; every ``tool_use`` is answered by a
  ``tool_result`` in the very next user message, the results first, and no result answers a
  call the previous assistant message did not make.

`stub_transport` wraps them as an `httpx.MockTransport`: 200 for a valid request, 400 with
the errors otherwise, so a test posts exactly what a client would.
"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx

__all__ = ["stub_transport", "validate_chat_completions", "validate_messages"]

_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def _keys(where: str, obj: dict[str, Any], allowed: set[str], errors: list[str]) -> None:
    extra = set(obj) - allowed
    if extra:
        errors.append(f"{where}: unknown keys {sorted(extra)}")


def validate_chat_completions(body: Any) -> list[str]:
    """What is wrong with a Chat Completions request body."""
    errors: list[str] = []
    if not isinstance(body, dict):
        return ["body must be an object"]
    if not isinstance(body.get("model"), str) or not body["model"]:
        errors.append("model must be a non-empty string")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return [*errors, "messages must be a non-empty list"]
    open_calls: list[str] = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            errors.append(f"{where}: must be an object")
            continue
        role = m.get("role")
        if role != "tool" and open_calls:
            errors.append(f"{where}: tool calls {open_calls} were not answered before it")
            open_calls = []
        if role in ("system", "developer", "user"):
            _keys(where, m, {"role", "content", "name"}, errors)
            content = m.get("content")
            if isinstance(content, list):
                for j, part in enumerate(content):
                    if not (
                        isinstance(part, dict)
                        and part.get("type") == "text"
                        and isinstance(part.get("text"), str)
                    ):
                        errors.append(f"{where}.content[{j}]: must be a text part")
            elif not isinstance(content, str):
                errors.append(f"{where}: content must be a string or text parts")
        elif role == "assistant":
            _keys(where, m, {"role", "content", "tool_calls", "name", "refusal"}, errors)
            calls = m.get("tool_calls")
            content = m.get("content")
            if content is None and not calls:
                errors.append(f"{where}: an assistant message needs content or tool_calls")
            elif content is not None and not isinstance(content, str):
                errors.append(f"{where}: content must be a string or null")
            if calls is not None:
                if not isinstance(calls, list) or not calls:
                    errors.append(f"{where}: tool_calls must be a non-empty list")
                    continue
                for j, call in enumerate(calls):
                    cw = f"{where}.tool_calls[{j}]"
                    if not isinstance(call, dict):
                        errors.append(f"{cw}: must be an object")
                        continue
                    _keys(cw, call, {"id", "type", "function"}, errors)
                    if not isinstance(call.get("id"), str) or not call["id"]:
                        errors.append(f"{cw}: id must be a non-empty string")
                    if call.get("type") != "function":
                        errors.append(f"{cw}: type must be 'function'")
                    fn = call.get("function")
                    if not isinstance(fn, dict):
                        errors.append(f"{cw}: function must be an object")
                        continue
                    _keys(f"{cw}.function", fn, {"name", "arguments"}, errors)
                    if not isinstance(fn.get("name"), str) or not _NAME.match(fn["name"]):
                        errors.append(f"{cw}: function.name {fn.get('name')!r} is not a valid name")
                    args = fn.get("arguments")
                    if not isinstance(args, str):
                        errors.append(f"{cw}: function.arguments must be a JSON string")
                    else:
                        try:
                            if not isinstance(json.loads(args), dict):
                                errors.append(f"{cw}: function.arguments must encode an object")
                        except ValueError:
                            errors.append(f"{cw}: function.arguments is not JSON")
                    if isinstance(call.get("id"), str):
                        if call["id"] in open_calls:
                            errors.append(f"{cw}: id {call['id']!r} repeated")
                        open_calls.append(call["id"])
        elif role == "tool":
            _keys(where, m, {"role", "content", "tool_call_id"}, errors)
            if not isinstance(m.get("content"), str):
                errors.append(f"{where}: content must be a string")
            call_id = m.get("tool_call_id")
            if call_id not in open_calls:
                errors.append(f"{where}: tool_call_id {call_id!r} answers no open tool call")
            else:
                open_calls.remove(call_id)
        else:
            errors.append(f"{where}: unknown role {role!r}")
    if open_calls:
        errors.append(f"tool calls {open_calls} are never answered")
    return errors


_USER_BLOCKS = {"text", "image", "tool_result"}
_ASSISTANT_BLOCKS = {"text", "thinking", "redacted_thinking", "tool_use"}
_BLOCK_KEYS = {
    "text": {"type", "text"},
    "image": {"type", "source"},
    "tool_result": {"type", "tool_use_id", "content", "is_error"},
    "thinking": {"type", "thinking", "signature"},
    "redacted_thinking": {"type", "data"},
    "tool_use": {"type", "id", "name", "input"},
}


def _block(where: str, block: Any, errors: list[str]) -> None:
    if not isinstance(block, dict):
        errors.append(f"{where}: must be an object")
        return
    kind = block.get("type")
    _keys(where, block, _BLOCK_KEYS.get(kind, {"type"}), errors)
    if kind == "text" and (not isinstance(block.get("text"), str) or not block["text"]):
        errors.append(f"{where}: text must be a non-empty string")
    elif kind == "thinking" and not (
        isinstance(block.get("thinking"), str) and isinstance(block.get("signature"), str)
    ):
        errors.append(f"{where}: thinking needs its text and signature")
    elif kind == "redacted_thinking" and not isinstance(block.get("data"), str):
        errors.append(f"{where}: redacted_thinking needs data")
    elif kind == "tool_use":
        if not isinstance(block.get("id"), str) or not block["id"]:
            errors.append(f"{where}: id must be a non-empty string")
        if not isinstance(block.get("name"), str) or not _NAME.match(block["name"]):
            errors.append(f"{where}: name {block.get('name')!r} is not a valid tool name")
        if not isinstance(block.get("input"), dict):
            errors.append(f"{where}: input must be an object")
    elif kind == "tool_result":
        if not isinstance(block.get("tool_use_id"), str):
            errors.append(f"{where}: tool_use_id must be a string")
        content = block.get("content")
        if isinstance(content, list):
            for j, inner in enumerate(content):
                if not (isinstance(inner, dict) and inner.get("type") in ("text", "image")):
                    errors.append(f"{where}.content[{j}]: must be a text or image block")
        elif content is not None and not isinstance(content, str):
            errors.append(f"{where}: content must be a string or blocks")
        if "is_error" in block and not isinstance(block["is_error"], bool):
            errors.append(f"{where}: is_error must be a boolean")


def validate_messages(body: Any) -> list[str]:
    """What is wrong with a Messages API request body."""
    errors: list[str] = []
    if not isinstance(body, dict):
        return ["body must be an object"]
    _keys("body", body, {"model", "max_tokens", "system", "messages", "tools", "thinking"}, errors)
    if not isinstance(body.get("model"), str) or not body["model"]:
        errors.append("model must be a non-empty string")
    if type(body.get("max_tokens")) is not int or body["max_tokens"] < 1:
        errors.append("max_tokens must be a positive integer")
    if "system" in body and (not isinstance(body["system"], str) or not body["system"]):
        errors.append("system must be a non-empty string")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return [*errors, "messages must be a non-empty list"]
    expected = "user"
    calls: list[str] = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            errors.append(f"{where}: must be an object")
            continue
        _keys(where, m, {"role", "content"}, errors)
        role = m.get("role")
        if role != expected:
            errors.append(
                f"{where}: role must be {expected!r} (user and assistant alternate, user first)"
            )
        expected = "assistant" if role == "user" else "user"
        content = m.get("content")
        if isinstance(content, str):
            blocks: list[Any] = [{"type": "text", "text": content}]
        elif isinstance(content, list) and content:
            blocks = content
        else:
            errors.append(f"{where}: content must be a string or a non-empty list of blocks")
            continue
        allowed = _USER_BLOCKS if role == "user" else _ASSISTANT_BLOCKS
        for j, block in enumerate(blocks):
            if isinstance(block, dict) and block.get("type") not in allowed:
                errors.append(f"{where}.content[{j}]: {block.get('type')!r} is not a {role} block")
            _block(f"{where}.content[{j}]", block, errors)
        if role == "user":
            results = [
                b.get("tool_use_id")
                for b in blocks
                if isinstance(b, dict) and b.get("type") == "tool_result"
            ]
            leading = 0
            while (
                leading < len(blocks)
                and isinstance(blocks[leading], dict)
                and blocks[leading].get("type") == "tool_result"
            ):
                leading += 1
            if leading != len(results):
                errors.append(f"{where}: tool_result blocks must come first")
            if sorted(results) != sorted(calls):
                errors.append(
                    f"{where}: answers {results}, but the previous message called {calls}"
                )
            calls = []
        else:
            calls = [
                b.get("id") for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use"
            ]
            if len(set(calls)) != len(calls):
                errors.append(f"{where}: a tool_use id repeats")
            seen_other = False
            for b in blocks:  # thinking comes before the answer it reasons about
                kind = b.get("type") if isinstance(b, dict) else None
                if kind in ("thinking", "redacted_thinking") and seen_other:
                    errors.append(f"{where}: thinking blocks must come first")
                    break
                seen_other = seen_other or kind in ("text", "tool_use")
    if calls:
        errors.append(f"tool calls {calls} are never answered")
    return errors


def stub_transport() -> httpx.MockTransport:
    """``POST /v1/chat/completions`` and ``POST /v1/messages``, validated (see the module)."""

    def handle(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if request.url.path == "/v1/chat/completions":
            errors = validate_chat_completions(body)
        elif request.url.path == "/v1/messages":
            errors = validate_messages(body)
        else:
            return httpx.Response(404, json={"error": "no such endpoint"})
        if errors:
            return httpx.Response(
                400, json={"error": {"type": "invalid_request_error", "details": errors}}
            )
        return httpx.Response(200, json={"ok": True})

    return httpx.MockTransport(handle)
