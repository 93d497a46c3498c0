"""The browser UI: its static files, and the few JSON routes it needs beyond the API.

The UI is plain HTML, CSS and one vanilla JavaScript module shipped in the package
(``threadlog/server/ui/``), served from memory with a strict Content-Security-Policy (no
inline script, nothing from another origin); ``/`` redirects to ``/ui/``. The page keeps the
thread it shows in the URL's fragment (``/ui/#/t/THREAD``), so no static route names a
thread and none needs an ownership check.

The JSON routes (``docs/ui.md``):

* ``GET /v1/ui/threads``: the caller's threads as ``GET /v1/threads`` lists them, each with
  ``state`` (``running``, ``waiting`` for a human, ``interrupted``, ``damaged`` or ``idle``)
  and ``model``, which a listing of summaries does not have;
* ``GET /v1/threads/{thread}/view``: the thread view (`threadlog.export.view`): the
  conversation tree, tool-call cards, usage, plan, memory with provenance, queued input;
* ``POST /v1/threads/{thread}/leaf``: move the active leaf back to an entry (the tree's
  "continue from here");
* ``GET /v1/threads/{thread}/progress``: the transient updates of the thread's running turn
  in this server (model text as it streams, "thinking", tool progress), as Server-Sent
  Events ``event: progress``; never logged. A client that connects while the model's answer
  streams first gets ``text_so_far`` (the answer so far, `threadlog.runtime.bus.Progress`),
  then what comes next; earlier tool progress is not replayed. It ends (``event: end``,
  ``reason``: ``idle``) once no turn runs here or the turn waits for a human (at once when
  so: the page opens it again when a turn runs), after `MAX_OPEN` seconds, and with
  ``shutdown`` when the server stops.

The three that name a thread go through the same ownership dependency as every other route.

No ``from __future__ import annotations``: FastAPI reads the annotations at run time.
"""

import asyncio
import contextlib
from collections.abc import AsyncIterator
from importlib import resources
from typing import Annotated, Any

import orjson
from fastapi import Query, Request
from starlette.responses import RedirectResponse, Response, StreamingResponse

from threadlog.errors import IntegrityError, UsageError
from threadlog.export.view import thread_status, thread_view
from threadlog.runtime.bus import Progress
from threadlog.server._routing import Routes
from threadlog.server.auth import CallerDep, OwnedDep
from threadlog.server.errors import ApiError
from threadlog.server.host import ThreadHost
from threadlog.server.routes_threads import Body, json_response
from threadlog.server.views import list_threads

__all__ = ["CSP", "router"]

router = Routes(tags=["ui"])

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
"""The policy of every UI response: nothing inline, nothing from elsewhere."""

_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}


def _load_assets() -> dict[str, bytes]:
    """The UI's files, read once from the installed package."""
    folder = resources.files("threadlog.server") / "ui"
    return {
        item.name: item.read_bytes()
        for item in folder.iterdir()
        if item.is_file() and any(item.name.endswith(ext) for ext in _TYPES)
    }


_ASSETS = _load_assets()


_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def _asset(name: str) -> Response:
    content = _ASSETS.get(name)
    if content is None:
        raise ApiError(404, "NotFound", f"no file {name!r:.80} in the UI")
    media = _TYPES["." + name.rsplit(".", 1)[-1]]
    return Response(content, media_type=media, headers=_HEADERS)


@router.get("/", tags=["ui"])
async def root() -> Response:
    """The UI."""
    return RedirectResponse("/ui/", status_code=307)


@router.get("/ui", tags=["ui"])
async def ui_bare() -> Response:
    """The UI (with its trailing slash)."""
    return RedirectResponse("/ui/", status_code=307)


@router.get("/ui/", tags=["ui"])
async def ui_index() -> Response:
    """The UI's page."""
    return _asset("index.html")


@router.get("/ui/{name}", tags=["ui"])
async def ui_file(name: str) -> Response:
    """One of the UI's files (script, style sheet, icon)."""
    return _asset(name)


def _host(request: Request) -> ThreadHost:
    host: ThreadHost = request.app.state.host
    return host


async def _row(request: Request, summary: dict[str, Any]) -> dict[str, Any]:
    thread_id = summary["thread_id"]
    try:
        state = await _host(request).state(thread_id)
    except IntegrityError as exc:
        return {**summary, "state": "damaged", "damage": str(exc), "model": None}
    except UsageError:
        return {**summary, "state": "damaged", "damage": "unreadable", "model": None}
    model = state.config.get("model") or getattr(_host(request).runtime.model, "name", None)
    return {**summary, "state": thread_status(state), "model": model}


@router.get("/v1/ui/threads")
async def ui_threads(
    request: Request, who: CallerDep, limit: Annotated[int, Query(ge=1, le=1000)] = 200
) -> Response:
    """The caller's threads, most recently active first, each with its ``state`` and
    ``model``."""
    store = request.app.state.store
    found = await asyncio.to_thread(list_threads, store, request.app.state.owners, who, limit)
    rows = [await _row(request, summary) for summary in found]
    return json_response({"threads": rows})


def _view(request: Request, thread_id: str) -> dict[str, Any]:
    records = request.app.state.store.read(thread_id)
    return thread_view(records)


@router.get("/v1/threads/{thread}/view")
async def view(request: Request, owned: OwnedDep) -> Response:
    """The thread view: tree, tool-call cards, usage, plan, memory, queued input."""
    found = await asyncio.to_thread(_view, request, owned.thread_id)
    found["live"] = _host(request).live(owned.thread_id) is not None
    return json_response(found)


class MoveLeaf(Body):
    to: str
    """The entry id the conversation continues from."""
    summary: str | None = None
    """What the abandoned branch tried (recorded as ``branch.summarized``)."""


@router.post("/v1/threads/{thread}/leaf", status_code=202)
async def move_leaf(request: Request, owned: OwnedDep, body: MoveLeaf) -> Response:
    """Continue the conversation from an earlier entry (between turns)."""
    answer = await _host(request).branch(owned.thread_id, body.to, summary=body.summary)
    return json_response(answer, 202)


POLL = 0.5
"""Seconds between two looks at whether the session's turn still runs."""
MAX_OPEN = 300.0
"""Seconds a progress stream stays open at most (the page opens another)."""


def _running(host: ThreadHost, thread_id: str, session: object) -> bool:
    """Whether ``session`` is still the thread's, and its turn runs and is not parked on a
    human (then no progress can come until the decision; the page opens the stream again
    after it)."""
    live = host.live(thread_id)
    if live is None or live is not session or not live.busy:
        return False
    return thread_status(live.state) == "running"


async def _progress_items(session: Any, queue: asyncio.Queue[Progress | None]) -> None:
    """Copy the session's `Progress` items to ``queue``; None when its stream ends."""
    try:
        async for item in session.subscribe(session.state.last_ord, progress=True):
            if isinstance(item, Progress):
                await queue.put(item)
    except Exception:  # the session closed, or dropped a slow subscriber: the stream ends
        pass
    finally:
        with contextlib.suppress(asyncio.QueueFull):  # a full queue is drained by its reader
            queue.put_nowait(None)


def _end(reason: str) -> bytes:
    return b"event: end\ndata: " + orjson.dumps({"reason": reason}) + b"\n\n"


async def _progress(request: Request, thread_id: str) -> AsyncIterator[bytes]:
    """The session's progress while its turn runs; ``end`` with ``idle`` once none runs (or
    at once when none does), ``shutdown`` when the server stops."""
    host = _host(request)
    stopping: asyncio.Event = request.app.state.stopping
    session = host.live(thread_id)
    if session is None or not _running(host, thread_id, session):
        yield _end("idle")
        return
    deadline = asyncio.get_running_loop().time() + MAX_OPEN
    yield b": progress\n\n"
    queue: asyncio.Queue[Progress | None] = asyncio.Queue(maxsize=1000)
    async with asyncio.TaskGroup() as group:
        pump = group.create_task(_progress_items(session, queue))
        try:
            while True:
                if stopping.is_set():
                    yield _end("shutdown")
                    return
                try:
                    item = await asyncio.wait_for(queue.get(), POLL)
                except TimeoutError:
                    late = asyncio.get_running_loop().time() > deadline
                    if late or not _running(host, thread_id, session):
                        yield _end("idle")
                        return
                    yield b": ping\n\n"
                    continue
                if item is None:
                    yield _end("idle")
                    return
                frame = orjson.dumps({"kind": item.kind, "data": item.data})
                yield b"event: progress\ndata: " + frame + b"\n\n"
        finally:
            pump.cancel()


@router.get("/v1/threads/{thread}/progress")
async def progress(request: Request, owned: OwnedDep) -> Response:
    """Transient updates of the thread's running turn in this server (model text as it
    streams, tool progress), as Server-Sent Events; never logged (see the module
    docstring)."""
    return StreamingResponse(
        _progress(request, owned.thread_id),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
