"""The service's ASGI app: `create_app` over a store (``docs/service.md`` is the contract).

Theory of operation
-------------------
The app is built around a store it is given and does not close (whoever opened the store
closes it, after the app has stopped). Its lifespan:

1. start: a `Runtime` (source ``api``; it does not own the store) and its `ThreadHost`; the
   stream hub (`threadlog.server.hub.StreamHub`, or the one passed in), started; then the
   threads whose turn was running in a server that died are resumed
   (`ThreadHost.resume_interrupted`); then a task that closes idle sessions;
2. serve;
3. stop: every stream ends (``event: end``, reason ``shutdown``), every live session runs its
   close protocol (`Runtime.close`).

``app.state.begin_shutdown()`` does the first half of the stop early: the serve runner
(`threadlog.server.serve`) calls it on SIGTERM before uvicorn stops accepting and waits for
open responses, so that the streams, which would otherwise hold it up, end at once with their
final event.

State the routes read, on ``app.state``: ``store``, ``settings``, ``authenticator``,
``owners`` (each thread's principal, cached), ``artifacts`` (the blobs each thread
references), ``hub``, and, once started, ``host``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Protocol

from fastapi import FastAPI

from threadlog._dataclass import dataclass
from threadlog._version import __version__
from threadlog.runtime.runtime import Runtime
from threadlog.runtime.tools import BUILTIN_TOOLS
from threadlog.server import routes_calls, routes_metrics, routes_threads, routes_ui
from threadlog.server.auth import Owners
from threadlog.server.errors import ErrorMiddleware, install_handlers
from threadlog.server.host import ThreadHost
from threadlog.server.hub import StreamHub
from threadlog.server.tokens import Authenticator as TokenAuthenticator
from threadlog.server.views import ReferencedArtifacts

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterable

    from threadlog.runtime.models import Model
    from threadlog.runtime.tools import Tool
    from threadlog.server.auth import Authenticator
    from threadlog.store.protocol import Store

__all__ = ["Hub", "ServerSettings", "create_app"]

log = logging.getLogger("threadlog.server")

MiB = 1024 * 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerSettings:
    """The service's limits and timings (``threadlog serve`` options)."""

    max_body: int = MiB
    """Bytes of a request body; more is 413 before it is read (``--max-body``)."""
    max_input: int = 256 * 1024
    """Bytes of input text (a turn's input, steering); more is 413."""
    heartbeat: float = 15.0
    """Seconds of silence on a stream before a ``: ping`` comment (``--heartbeat``)."""
    poll: float = 0.2
    """Seconds between two looks at the store for records other processes wrote (``--poll``)."""
    max_lag: int = 50_000
    """Records a stream client may fall behind the head before its stream is ended."""
    ring: int = 4096
    """Encoded frames each thread's stream keeps for its clients."""
    session_idle: float = 300.0
    """Seconds an idle session stays open before it is closed (its lease given back)."""
    reap_interval: float = 30.0
    """Seconds between two looks for idle sessions."""
    loopback_only_open_mode: bool = True
    """Refuse to serve a store with no token anywhere but on a loopback address (the serve
    runner checks it, knowing the address)."""
    resume_at_start: bool = True
    """Resume the threads whose turn was running in a server that died."""


class Hub(Protocol):
    """What the app needs of its stream hub (`threadlog.server.hub.StreamHub`)."""

    async def start(self) -> None:
        """Start watching the store."""
        ...

    async def close(self, reason: str = "shutdown") -> None:
        """End every stream with ``event: end`` and ``reason``."""
        ...

    def stream(self, thread_id: str, after: int) -> AsyncIterator[bytes]:
        """The thread's SSE frames from record ``after + 1``."""
        ...


def _default_hub(store: Store, settings: ServerSettings) -> Hub:
    return StreamHub(
        store,
        poll=settings.poll,
        ring=settings.ring,
        heartbeat=settings.heartbeat,
        max_lag=settings.max_lag,
    )


def create_app(
    store: Store,
    *,
    model: Model | None = None,
    tools: Iterable[Tool] = BUILTIN_TOOLS,
    settings: ServerSettings | None = None,
    authenticator: Authenticator | None = None,
    hub: Hub | None = None,
) -> FastAPI:
    """The service over ``store`` (which the app never closes).

    Args:
        store: any backend; the service uses its `Mailbox`, `Catalog`, `Artifacts` and
            `Credentials` capabilities when it has them.
        model: the model the server's sessions call (default: a scripted model).
        tools: the tools offered to them (default: the built-ins).
        settings: limits and timings (`ServerSettings`).
        authenticator: who a bearer token speaks for (default: the store's tokens,
            `threadlog.server.tokens.Authenticator`).
        hub: the live-stream hub (default: `threadlog.server.hub.StreamHub` over the store).
    """
    settings = settings or ServerSettings()
    auth = authenticator if authenticator is not None else TokenAuthenticator(store)
    streams = hub if hub is not None else _default_hub(store, settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        runtime = Runtime(store, model=model, tools=tools, source="api")
        host = ThreadHost(runtime, idle_after=settings.session_idle)
        app.state.host = host
        app.state.stopping = asyncio.Event()
        stopping: dict[str, bool] = {"streams": False}

        async def begin_shutdown() -> None:
            if not stopping["streams"]:
                stopping["streams"] = True
                app.state.stopping.set()  # the UI's progress streams end too
                await streams.close("shutdown")

        app.state.begin_shutdown = begin_shutdown
        await streams.start()
        reaper: asyncio.Task[None] | None = None
        try:
            if settings.resume_at_start:
                await host.resume_interrupted()
            reaper = asyncio.create_task(host.run_reaper(settings.reap_interval))
            yield
        finally:
            if reaper is not None:
                reaper.cancel()
                await asyncio.gather(reaper, return_exceptions=True)
            try:
                await begin_shutdown()
            finally:
                await host.close()

    app = FastAPI(
        title="threadlog",
        version=__version__,
        summary="Durable agent threads over HTTP and Server-Sent Events",
        docs_url=None,  # the interactive pages load scripts from a CDN
        redoc_url=None,
        openapi_url="/openapi.json",
        lifespan=lifespan,
    )
    app.state.store = store
    app.state.settings = settings
    app.state.authenticator = auth
    app.state.hub = streams
    app.state.owners = Owners(store)
    app.state.artifacts = ReferencedArtifacts(store)
    install_handlers(app)
    app.add_middleware(ErrorMiddleware, max_body=settings.max_body)
    routes_threads.router.register(app)
    routes_calls.router.register(app)
    routes_metrics.router.register(app)
    routes_ui.router.register(app)
    return app
