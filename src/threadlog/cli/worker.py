"""``threadlog worker``: drive the threads that need driving, beside other workers and servers.

A thin shell over `threadlog.runtime.worker.Worker`: it opens the store by target, runs the
worker's loop in an event loop until SIGTERM or Ctrl-C, then runs every open session's close
protocol and exits 0. The first line it prints says it is running (tests wait for it); with
``--json``, each step that did something is one JSON line (``resumed``, ``started``,
``closed``: thread ids).
"""

from __future__ import annotations

import asyncio
import signal
import sys
from typing import TYPE_CHECKING

import click
import orjson

from threadlog.cli import cli, handle_errors, store_options
from threadlog.store._home import default_home

if TYPE_CHECKING:
    from threadlog.runtime.worker import Step

__all__ = ["worker_cmd"]


@cli.command(name="worker")
@store_options
@click.option(
    "--model",
    "model_spec",
    default="scripted",
    show_default=True,
    metavar="SPEC",
    help="scripted, openai:NAME, anthropic:NAME or python:MODULE:ATTR.",
)
@click.option(
    "--poll",
    default=0.5,
    show_default=True,
    type=click.FloatRange(0.01),
    help="Seconds between looks for threads to drive.",
)
@click.option(
    "--max-sessions",
    default=16,
    show_default=True,
    type=click.IntRange(1),
    help="At most this many threads driven at once.",
)
@click.option(
    "--lease",
    "lease",
    type=click.FloatRange(min=0.5),
    metavar="SECONDS",
    help="PostgreSQL: how long a thread's lease outlives a worker that stops renewing it "
    "without its database session ending (paused, partitioned) [default: the store's, 30]. "
    "The embedded store's lease ends with its process.",
)
@handle_errors
def worker_cmd(
    home: str | None,
    as_json: bool,
    model_spec: str,
    poll: float,
    max_sessions: int,
    lease: float | None,
) -> None:
    """Drive threads: resume those a dead worker or server left mid-turn, start turns for
    input queued while nobody drove a thread (threadlog send) or commands left in its
    mailbox, and drive on a parked turn a human has since decided (threadlog approve). A
    session whose turn waits for a human is closed (the turn stays parked), so that waiting
    approvals hold no worker slot.

    Any number of workers (and servers) may share a store: a thread's single-writer lease
    decides who drives it, and a worker that dies loses its leases, so another takes its
    threads over. On PostgreSQL the workers may run on many hosts. SIGTERM or Ctrl-C closes
    every session the worker holds (a running turn is cancelled) and exits 0.

    \b
    Example:
      threadlog worker --store postgresql://db.example/threadlog --model openai:gpt-4o-mini
    """
    from threadlog.runtime.modelspec import model_from_spec
    from threadlog.runtime.runtime import Runtime
    from threadlog.runtime.worker import Worker
    from threadlog.store.open import open_store, parse_target

    model = model_from_spec(model_spec)
    target = home or default_home()
    options = {}
    if lease is not None and parse_target(target)[0] == "postgres":
        options["lease_duration"] = lease

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        with open_store(target, **options) as store:
            async with Runtime(store, model=model, source="api") as runtime:
                worker = Worker(runtime, poll=poll, max_sessions=max_sessions)
                _say(as_json, {"worker": "running", "store": _shown(target)})
                await worker.run(stop, on_step=lambda done: _say(as_json, _step_doc(done)))
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)

    asyncio.run(main())


def _shown(target: str) -> str:
    """The target without a password (a postgresql:// URL may carry one)."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(target)
    if parts.scheme.startswith("postgres") and parts.password is not None:
        host = parts.hostname or ""
        netloc = f"{parts.username}:***@{host}" + (f":{parts.port}" if parts.port else "")
        return urlunsplit(parts._replace(netloc=netloc))
    return target


def _step_doc(done: Step) -> dict[str, object]:
    return {"resumed": done.resumed, "started": done.started, "closed": done.closed}


def _say(as_json: bool, doc: dict[str, object]) -> None:
    if as_json:
        sys.stdout.write(orjson.dumps(doc).decode() + "\n")
    else:
        words = [f"{k}: {' '.join(v) if isinstance(v, list) else v}" for k, v in doc.items() if v]
        sys.stdout.write("; ".join(words) + "\n")
    sys.stdout.flush()
