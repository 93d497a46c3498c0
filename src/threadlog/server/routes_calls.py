"""Routes that act on a thread: input, steering, cancel, and decisions on tool calls.

Every command records the authenticated principal as its ``by``; no body has a ``by`` field
(``docs/service.md``, Recorded identity). The work is the host's (`threadlog.server.host`).

No ``from __future__ import annotations``: FastAPI reads the annotations at run time.
"""

from typing import Annotated, Literal

from fastapi import Header, Request
from pydantic import Field
from starlette.responses import Response

from threadlog.errors import UsageError
from threadlog.model.commands import Approve, Deny, Resolve
from threadlog.server._routing import Routes
from threadlog.server.auth import OwnedDep
from threadlog.server.errors import ApiError
from threadlog.server.host import ThreadHost
from threadlog.server.routes_threads import Body, check_input, json_response
from threadlog.server.views import call_row

__all__ = ["router"]

router = Routes(tags=["commands"])

MAX_KEY = 255
"""The longest idempotency key accepted."""


class TurnInput(Body):
    input: str
    idempotency_key: str | None = None


class Steer(Body):
    text: str


class Empty(Body):
    pass


class Decision(Body):
    reason: str | None = None


class Resolution(Body):
    decision: Literal["done", "retry", "abort"] = Field(alias="as")
    note: str | None = None


def _host(request: Request) -> ThreadHost:
    host: ThreadHost = request.app.state.host
    return host


def _key(header: str | None, body: str | None) -> str | None:
    if header is not None and body is not None and header != body:
        raise UsageError("the Idempotency-Key header and idempotency_key differ")
    key = header if header is not None else body
    if key is not None and not 1 <= len(key) <= MAX_KEY:
        raise UsageError(f"an idempotency key has 1 to {MAX_KEY} characters")
    if key is not None and not _encodable(key):
        raise UsageError("an idempotency key is Unicode text (a lone surrogate is not)")
    return key


def _encodable(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8 (JSON lets a body hold a lone surrogate, ``"\\ud800"``;
    the event id derived from the key hashes its UTF-8)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@router.post("/v1/threads/{thread}/turns", status_code=202)
async def turns(
    request: Request,
    owned: OwnedDep,
    body: TurnInput,
    idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key")] = None,
) -> Response:
    """Input: starts a turn (steers the running one). Idempotent with a key: the same key
    twice records one ``turn.started`` and the second answer says ``duplicate``."""
    check_input(request, body.input)
    key = _key(idempotency_key, body.idempotency_key)
    answer = await _host(request).submit(
        owned.thread_id, body.input, by=owned.caller.principal, key=key
    )
    return json_response(answer, 202)


@router.post("/v1/threads/{thread}/steer", status_code=202)
async def steer(request: Request, owned: OwnedDep, body: Steer) -> Response:
    """Steering for the running turn (consumed at its next safe point); starts a turn when
    none runs."""
    check_input(request, body.text)
    answer = await _host(request).submit(owned.thread_id, body.text, by=owned.caller.principal)
    return json_response(answer, 202)


@router.post("/v1/threads/{thread}/cancel", status_code=202)
async def cancel(request: Request, owned: OwnedDep, body: Empty | None = None) -> Response:
    """Cancel the running turn (it ends ``aborted``); 409 when none runs."""
    return json_response(await _host(request).cancel(owned.thread_id), 202)


@router.get("/v1/threads/{thread}/tool-calls/{call_id}")
async def tool_call(request: Request, owned: OwnedDep, call_id: str) -> Response:
    """One tool call's row."""
    state = await _host(request).state(owned.thread_id)
    call = state.tool_calls.get(call_id)
    if call is None:
        raise ApiError(404, "NotFound", f"no tool call {call_id!r:.80} in thread {owned.thread_id}")
    return json_response(call_row(call))


@router.post("/v1/threads/{thread}/tool-calls/{call_id}/approve", status_code=202)
async def approve(
    request: Request, owned: OwnedDep, call_id: str, body: Decision | None = None
) -> Response:
    """Approve a call waiting for a decision."""
    reason = body.reason if body else None
    command = Approve(call_id=call_id, by=owned.caller.principal, reason=reason)
    return json_response(await _host(request).decide(owned.thread_id, command), 202)


@router.post("/v1/threads/{thread}/tool-calls/{call_id}/deny", status_code=202)
async def deny(
    request: Request, owned: OwnedDep, call_id: str, body: Decision | None = None
) -> Response:
    """Deny a call waiting for a decision (the model is told)."""
    reason = body.reason if body else None
    command = Deny(call_id=call_id, by=owned.caller.principal, reason=reason)
    return json_response(await _host(request).decide(owned.thread_id, command), 202)


@router.post("/v1/threads/{thread}/tool-calls/{call_id}/resolve", status_code=202)
async def resolve(request: Request, owned: OwnedDep, call_id: str, body: Resolution) -> Response:
    """Resolve a call whose outcome is unknown: ``done``, ``retry`` or ``abort``."""
    command = Resolve(
        call_id=call_id, decision=body.decision, by=owned.caller.principal, note=body.note
    )
    return json_response(await _host(request).decide(owned.thread_id, command), 202)
