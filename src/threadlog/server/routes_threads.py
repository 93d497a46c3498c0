"""Routes that read threads, create and fork them, and stream them (``docs/service.md``).

No ``from __future__ import annotations``: FastAPI reads the annotations at run time.
"""

import asyncio
import re
from collections.abc import Iterator
from typing import Annotated, Any

import orjson
from fastapi import Header, Query, Request
from fastapi import Path as PathParam
from pydantic import BaseModel, ConfigDict
from starlette.responses import Response, StreamingResponse

from threadlog.errors import UsageError
from threadlog.server._routing import Routes
from threadlog.server.auth import CallerDep, OwnedDep
from threadlog.server.errors import ApiError
from threadlog.server.host import ThreadHost
from threadlog.server.sse import parse_last_event_id
from threadlog.server.views import (
    ReferencedArtifacts,
    events_page,
    list_threads,
    thread_detail,
    thread_summary,
)
from threadlog.store.protocol import Artifacts

__all__ = ["Body", "json_response", "router"]

router = Routes()

MAX_ORD = 2**62
"""Ordinals beyond this are refused (422) rather than handed to a backend."""

_DIGEST = re.compile(r"[0-9a-f]{64}")
_STREAM_CHUNK = 256 * 1024
_CHECKED_SIZE = 8 * 1024 * 1024
"""Blobs up to this size are read whole and checked against their hash; larger ones are
streamed as they are (`Artifacts.open_artifact`)."""


class Body(BaseModel):
    """A request body: strict types, no field it does not declare (so no ``by``)."""

    model_config = ConfigDict(extra="forbid", strict=True)


class CreateThread(Body):
    title: str | None = None
    cwd: str | None = None
    input: str | None = None


class ForkThread(Body):
    at: int | str | None = None
    """The last record to inherit: its ordinal (a number) or its entry id (a string)."""
    title: str | None = None


def json_response(data: Any, status: int = 200) -> Response:
    """A JSON answer (orjson: records and pages are encoded without a detour)."""
    return Response(orjson.dumps(data), status_code=status, media_type="application/json")


def _host(request: Request) -> ThreadHost:
    host: ThreadHost = request.app.state.host
    return host


def check_input(request: Request, text: str) -> None:
    """Refuse input text over the service's ``max_input`` (413)."""
    limit: int = request.app.state.settings.max_input
    if len(text.encode("utf-8", "surrogatepass")) > limit:
        raise ApiError(413, "PayloadTooLarge", f"the input is over the limit of {limit} bytes")


@router.get("/healthz", tags=["service"])
async def healthz() -> Response:
    """Liveness: the server answers (no authentication)."""
    return json_response({"ok": True})


@router.get("/v1/threads", tags=["threads"])
async def threads(
    request: Request, who: CallerDep, limit: Annotated[int, Query(ge=1, le=1000)] = 50
) -> Response:
    """The caller's threads, most recently active first."""
    store = request.app.state.store
    found = await asyncio.to_thread(list_threads, store, request.app.state.owners, who, limit)
    return json_response({"threads": found})


@router.post("/v1/threads", status_code=201, tags=["threads"])
async def create_thread(request: Request, who: CallerDep, body: CreateThread) -> Response:
    """A new thread of the caller's; with ``input``, its first turn starts."""
    if body.input is not None:
        check_input(request, body.input)
        if not body.input.strip():
            raise UsageError("input must be non-empty text")
    thread_id = await _host(request).create(
        who.principal, title=body.title, cwd=body.cwd, input=body.input
    )
    store = request.app.state.store
    return json_response(await asyncio.to_thread(thread_summary, store, thread_id), 201)


@router.get("/v1/threads/{thread}", tags=["threads"])
async def thread(request: Request, owned: OwnedDep) -> Response:
    """The thread's summary, turns, tool calls and the calls waiting for a human."""
    store = request.app.state.store
    summary = await asyncio.to_thread(thread_summary, store, owned.thread_id)
    state = await _host(request).state(owned.thread_id)
    return json_response(thread_detail(summary, state))


@router.get("/v1/threads/{thread}/events", tags=["events"])
async def events(
    request: Request,
    owned: OwnedDep,
    after: Annotated[int | None, Query(ge=0, le=MAX_ORD)] = None,
    before: Annotated[int | None, Query(ge=1, le=MAX_ORD)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Response:
    """A page of the thread's records, after an ordinal (default) or before one."""
    if after is not None and before is not None:
        raise UsageError("give after or before, not both")
    page = await asyncio.to_thread(
        events_page,
        request.app.state.store,
        owned.thread_id,
        after=after,
        before=before,
        limit=limit,
    )
    return json_response(page)


@router.get("/v1/threads/{thread}/events/{ord}", tags=["events"])
async def event(
    request: Request, owned: OwnedDep, ord: Annotated[int, PathParam(le=MAX_ORD)]
) -> Response:
    """One record, by its ordinal."""
    found = []
    if ord >= 1:
        found = await asyncio.to_thread(
            request.app.state.store.read, owned.thread_id, ord - 1, limit=1
        )
    if not found or found[0].ord != ord:
        raise ApiError(404, "NotFound", f"no event {ord} in thread {owned.thread_id}")
    return json_response(found[0].to_dict())


def last_event_id(value: str | None) -> int | None:
    """The ordinal a ``Last-Event-ID`` header names (400 for anything else)."""
    try:
        return parse_last_event_id(value)
    except UsageError as exc:
        raise ApiError(400, "BadRequest", str(exc)) from None


@router.get("/v1/threads/{thread}/stream", tags=["events"])
async def stream(
    request: Request,
    owned: OwnedDep,
    after: Annotated[int | None, Query(ge=0, le=MAX_ORD)] = None,
    last_event: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
) -> Response:
    """The thread's records as Server-Sent Events, from ``after + 1`` (default: the first),
    then live; ``Last-Event-ID`` wins over ``after``."""
    start = last_event_id(last_event)
    if start is None:
        start = after or 0
    frames = request.app.state.hub.stream(owned.thread_id, start)
    return StreamingResponse(
        frames,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@router.post("/v1/threads/{thread}/fork", status_code=201, tags=["threads"])
async def fork(request: Request, owned: OwnedDep, body: ForkThread | None = None) -> Response:
    """A new thread inheriting this one's records up to ``at`` (default: all); a point
    inside a running turn moves back to that turn's start."""
    body = body or ForkThread()
    child = await _host(request).fork(
        owned.thread_id, body.at, title=body.title, principal=owned.caller.principal
    )
    store = request.app.state.store
    return json_response(await asyncio.to_thread(thread_summary, store, child), 201)


@router.get("/v1/threads/{thread}/artifacts/{digest}", tags=["artifacts"])
async def artifact(
    request: Request,
    owned: OwnedDep,
    digest: str,
    if_none_match: Annotated[str | None, Header()] = None,
) -> Response:
    """A blob the thread's records reference, by its SHA-256."""
    store = request.app.state.store
    refs: ReferencedArtifacts = request.app.state.artifacts
    missing = ApiError(404, "NotFound", f"no artifact {digest:.80} in thread {owned.thread_id}")
    if (
        not _DIGEST.fullmatch(digest)
        or not isinstance(store, Artifacts)
        or not await asyncio.to_thread(refs.references, owned.thread_id, digest)
    ):
        raise missing
    etag = f'"{digest}"'
    headers = {"ETag": etag, "Cache-Control": "private, max-age=31536000, immutable"}
    if if_none_match is not None and etag in {t.strip() for t in if_none_match.split(",")}:
        return Response(status_code=304, headers=headers)
    try:
        blob = await asyncio.to_thread(store.open_artifact, digest)
    except UsageError:
        raise missing from None
    size = await asyncio.to_thread(_size, blob)
    if size <= _CHECKED_SIZE:
        blob.close()
        try:
            content = await asyncio.to_thread(store.get_artifact, digest)
        except UsageError:
            raise missing from None
        return Response(content, media_type="application/octet-stream", headers=headers)
    headers["Content-Length"] = str(size)
    return StreamingResponse(_chunks(blob), media_type="application/octet-stream", headers=headers)


def _size(blob: Any) -> int:
    size = int(blob.seek(0, 2))
    blob.seek(0)
    return size


def _chunks(blob: Any) -> Iterator[bytes]:
    with blob:
        while chunk := blob.read(_STREAM_CHUNK):
            yield chunk
