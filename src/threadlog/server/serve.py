"""Running the service: ``threadlog serve`` (`threadlog.cli.serve` is its command line).

Theory of operation
-------------------
`serve` binds the socket itself (port 0 gives a free port, whose number the listening line
prints), then runs uvicorn on it programmatically, in this thread, until a signal.

*Open mode stays on loopback.* A store with no token (`Authenticator.open_mode`) lets every
request act as principal ``local``; `serve` refuses to run that anywhere but on a loopback
address (`UsageError`, exit 2), and says it is in open mode when it starts.

*Stopping.* On SIGTERM or Ctrl-C, `Server.handle_exit` first schedules the app's
``begin_shutdown`` (every stream ends with ``event: end``, reason ``shutdown``), then lets
uvicorn stop accepting connections and wait for the open responses, which the streams no
longer hold up; the app's lifespan then runs every live session's close protocol. The store
is closed by whoever opened it, after `serve` returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import signal
import socket
import sys
import threading
from typing import TYPE_CHECKING, Any, TextIO

import uvicorn

from threadlog import _hooks
from threadlog.errors import UsageError
from threadlog.observe.metrics import install as install_metrics
from threadlog.runtime.modelspec import model_from_spec
from threadlog.server.app import ServerSettings, create_app
from threadlog.server.tokens import Authenticator as TokenAuthenticator
from threadlog.store.protocol import LocalHome

if TYPE_CHECKING:
    from collections.abc import Iterator
    from types import FrameType

    from fastapi import FastAPI

    from threadlog.runtime.models import Model
    from threadlog.server.app import Hub
    from threadlog.server.auth import Authenticator
    from threadlog.store.protocol import Store

__all__ = ["is_loopback", "make_authenticator", "model_from_spec", "serve"]

GRACE = 10
"""Seconds uvicorn waits for open responses at a stop before it closes them."""

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (``127.0.0.0/8``, ``::1``) or ``localhost``."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def make_authenticator(store: Store) -> Authenticator:
    """The store's token authenticator (`threadlog.server.tokens`)."""
    return TokenAuthenticator(store)


def bind(host: str, port: int) -> socket.socket:
    """A listening-ready socket bound to ``host:port`` (port 0: a free one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        raise OSError(exc.errno, f"cannot listen on {host}:{port}: {exc.strerror}") from None
    return sock


class Server(uvicorn.Server):
    """uvicorn, with the streams ended before it drains (see the module docstring), and a
    callback once it listens."""

    def __init__(self, config: uvicorn.Config, app: FastAPI, on_listening: Any = None) -> None:
        super().__init__(config)
        self._app = app
        self._on_listening = on_listening
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ending: asyncio.Future[None] | None = None

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if not self.should_exit and self._on_listening is not None:
            self._on_listening()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # uvicorn's own raises the signal again after its shutdown (so the process dies of
        # it): a stop by signal is how `serve` ends normally, with exit code 0
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        originals = {sig: signal.signal(sig, self.handle_exit) for sig in _SIGNALS}
        try:
            yield
        finally:
            for sig, handler in originals.items():
                signal.signal(sig, handler)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if not self.should_exit and self._loop is not None:
            self._loop.call_soon_threadsafe(self._end_streams)
        super().handle_exit(sig, frame)

    def _end_streams(self) -> None:
        begin = getattr(self._app.state, "begin_shutdown", None)  # None before the lifespan
        if begin is not None and self._ending is None:
            self._ending = asyncio.ensure_future(begin())


def serve(
    store: Store,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    model: Model | None = None,
    settings: ServerSettings | None = None,
    authenticator: Authenticator | None = None,
    hub: Hub | None = None,
    out: TextIO | None = None,
) -> int:
    """Serve ``store`` until a signal; the exit code (0 after a clean stop).

    Raises `UsageError` for open mode (no token) on an address that is not loopback, and
    `OSError` when the address cannot be bound. ``hub`` and ``authenticator`` default to
    the store's (`create_app`). Prints the listening line (and, in open
    mode, a warning) to ``out`` (default stdout).
    """
    out = out or sys.stdout
    settings = settings or ServerSettings()
    auth = authenticator if authenticator is not None else make_authenticator(store)
    open_mode = auth.open_mode
    if open_mode and settings.loopback_only_open_mode and not is_loopback(host):
        raise UsageError(
            f"the store has no token, so the service would be open to anyone: it serves "
            f"{host} only with a token (threadlog token add PRINCIPAL), or serve on 127.0.0.1"
        )
    if _hooks.METRICS is None:  # GET /metrics (threadlog.observe.metrics): on for a server
        install_metrics()
    sock = bind(host, port)
    with sock:
        bound = sock.getsockname()[1]
        where = f"[{host.strip('[]')}]" if ":" in host else host
        app = create_app(store, model=model, settings=settings, authenticator=auth, hub=hub)
        config = uvicorn.Config(
            app,
            log_level="warning",
            ws="none",
            lifespan="on",
            timeout_graceful_shutdown=GRACE,
        )

        def listening() -> None:
            if open_mode:
                out.write(
                    "threadlog serve: open mode: the store has no token; every request acts "
                    "as principal 'local' (loopback only)\n"
                )
            label = (
                store.home
                if isinstance(store, LocalHome)
                else repr(store)  # a database: where it is (never its password)
                if type(store).__repr__ is not object.__repr__
                else type(store).__name__
            )
            out.write(f"threadlog serve: listening on http://{where}:{bound} (store {label})\n")
            out.write(f"threadlog serve: the browser UI is at http://{where}:{bound}/ui/\n")
            out.flush()

        server = Server(config, app, listening)
        server.run(sockets=[sock])
        return 0 if server.started else 3
