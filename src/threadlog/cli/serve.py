"""``threadlog serve``: the HTTP + Server-Sent Events service over a store (docs/service.md)."""

from __future__ import annotations

import click

from threadlog.cli import cli, handle_errors, store_options
from threadlog.errors import UsageError
from threadlog.store._home import default_home

__all__ = ["serve_cmd"]


@cli.command(name="serve")
@store_options
@click.option("--host", default="127.0.0.1", show_default=True, help="The address to listen on.")
@click.option(
    "--port",
    default=8765,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="0: any free port.",
)
@click.option(
    "--model",
    "model_spec",
    default="scripted",
    show_default=True,
    metavar="SPEC",
    help="scripted, openai:NAME, anthropic:NAME or python:MODULE:ATTR.",
)
@click.option(
    "--model-delay",
    default=0.0,
    type=click.FloatRange(0),
    help="Seconds between the scripted model's words.",
)
@click.option(
    "--heartbeat",
    default=15.0,
    show_default=True,
    type=click.FloatRange(0.1),
    help="Seconds of silence before a stream sends a ping.",
)
@click.option(
    "--poll",
    default=0.2,
    show_default=True,
    type=click.FloatRange(0.01),
    help="Seconds between looks for records other processes wrote.",
)
@click.option(
    "--max-body",
    default=1024 * 1024,
    show_default=True,
    type=click.IntRange(1024),
    help="The largest request body, in bytes (413 beyond).",
)
@handle_errors
def serve_cmd(
    home: str | None,
    as_json: bool,
    host: str,
    port: int,
    model_spec: str,
    model_delay: float,
    heartbeat: float,
    poll: float,
    max_body: int,
) -> None:
    """Serve the store over HTTP: threads, live event streams, commands, artifacts.

    Clients authenticate with bearer tokens (threadlog token add PRINCIPAL). A store with
    no token is served in open mode, every request acting as principal 'local', and only on
    a loopback address. The first line printed says where it listens; SIGTERM or Ctrl-C
    ends every stream, closes every live session and exits 0. Needs the server extra:
    pip install 'threadlog[server]'.

    \b
    Example:
      threadlog serve --port 8765
      threadlog serve --host 0.0.0.0 --model openai:gpt-4o-mini
    """
    try:
        from threadlog.server import serve as server
        from threadlog.server.app import ServerSettings
    except ImportError as exc:  # fastapi or uvicorn missing
        raise UsageError(
            f"threadlog serve needs the server extra (pip install 'threadlog[server]'): {exc}"
        ) from None
    from threadlog.store.open import open_store

    model = server.model_from_spec(model_spec, delay=model_delay)
    settings = ServerSettings(max_body=max_body, heartbeat=heartbeat, poll=poll)
    with open_store(home or default_home()) as store:
        code = server.serve(store, host=host, port=port, model=model, settings=settings)
    raise SystemExit(code)
