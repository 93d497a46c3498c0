"""The ``--url`` mode: tail, send, approve, deny, resolve and cancel through a service.

With ``--url URL`` (and ``--token``, default ``$THREADLOG_TOKEN``) those commands leave the
store on disk alone and call a threadlog service (``threadlog serve``, ``docs/service.md``)
through `threadlog.client.Client`. The output is the local command's: ``tail`` prints the
same JSON lines, the others the same sentences and ``--json`` shapes (plus what the service
adds, such as the record's ``event_id``). The service records the token's principal as the
command's author, so ``--by`` is ignored, with a note. The service checks each command
against the thread's state, as the local commands do.

`via_service` adds the two options to a command and, when ``--url`` is given, runs the
function here instead of the command's body. `make_client` is the one place a client is
made (tests replace it to put a mock transport underneath).
"""

from __future__ import annotations

import functools
import sys
from typing import TYPE_CHECKING, Any, TypeVar

import click
import orjson

from threadlog.cli import EXIT_STORE, EXIT_USAGE

if TYPE_CHECKING:
    from collections.abc import Callable

    from threadlog.client import Client

__all__ = ["approve", "cancel", "deny", "make_client", "resolve", "send", "tail", "via_service"]

F = TypeVar("F", bound="Callable[..., Any]")


def make_client(url: str, token: str | None) -> Client:
    """The client the ``--url`` commands use."""
    from threadlog.client import Client

    return Client(url, token)


def via_service(remote: Callable[..., None]) -> Callable[[F], F]:
    """Add ``--url`` and ``--token`` to a command; with ``--url``, run ``remote(client,
    **the command's other parameters)`` instead of the command's body.

    A refusal from the service is one ``error:`` line on stderr and exit 2 for a 4xx (the
    request was wrong: unknown thread, a call not waiting, a bad token), else exit 3 (the
    service failed or could not be reached).
    """

    def decorate(func: F) -> F:
        @functools.wraps(func)
        def wrapper(*args: Any, url: str | None, token: str | None, **kwargs: Any) -> Any:
            if url is None:
                return func(*args, **kwargs)
            from threadlog.client import ServiceError

            ctx = click.get_current_context()
            if "by" in kwargs and ctx.get_parameter_source("by") not in (
                None,
                click.core.ParameterSource.DEFAULT,
            ):
                click.echo(
                    "note: --by is ignored with --url: the service records the principal of "
                    "the token",
                    err=True,
                )
            try:
                with make_client(url, token) as client:
                    remote(client, **kwargs)
            except ServiceError as exc:
                click.echo(f"error: {exc}", err=True)
                sys.exit(EXIT_USAGE if 400 <= exc.status < 500 else EXIT_STORE)
            return None

        wrapped: Any = wrapper
        wrapped = click.option(
            "--token",
            metavar="TOKEN",
            envvar="THREADLOG_TOKEN",
            show_envvar=True,
            help="The service's bearer token (with --url).",
        )(wrapped)
        wrapped = click.option(
            "--url",
            metavar="URL",
            help="Act through a threadlog service (threadlog serve) at URL, not a store on disk.",
        )(wrapped)
        return wrapped  # type: ignore[no-any-return]

    return decorate


def tail(client: Client, *, thread: str, after: int, **_: Any) -> None:
    """Follow the thread's stream; the same JSON lines as the local tail."""
    out = sys.stdout.buffer
    try:
        for record in client.stream(thread, after=after):
            out.write(orjson.dumps(record.to_dict()) + b"\n")
            out.flush()
    except KeyboardInterrupt:
        return


def send(client: Client, *, as_json: bool, thread: str, text: str, **_: Any) -> None:
    """Steering for the running turn, or the start of a turn (the service's ``steer``)."""
    _acked(client.steer(thread, text), as_json)


def approve(
    client: Client, *, as_json: bool, thread: str, call_id: str, reason: str | None, **_: Any
) -> None:
    _acked(client.approve(thread, call_id, reason=reason), as_json)


def deny(
    client: Client, *, as_json: bool, thread: str, call_id: str, reason: str | None, **_: Any
) -> None:
    _acked(client.deny(thread, call_id, reason=reason), as_json)


def resolve(
    client: Client,
    *,
    as_json: bool,
    thread: str,
    call_id: str,
    decision: str,
    note: str | None,
    **_: Any,
) -> None:
    _acked(client.resolve(thread, call_id, decision, note=note), as_json)


def cancel(client: Client, *, as_json: bool, thread: str, **_: Any) -> None:
    answer = client.cancel(thread)
    queued = "queued" in answer
    if as_json:
        _print_json({"applied": not queued, **answer})
    elif queued:
        click.echo(f"cancellation sent to the thread's inbox ({answer['queued']})")
    else:
        click.echo(f"turn {answer.get('turn_id')} cancelled")


def _acked(answer: dict[str, Any], as_json: bool) -> None:
    """Print the service's answer to a command as the local command prints its result."""
    queued = "queued" in answer
    if as_json:
        _print_json({"applied": not queued, **answer})
    elif queued:
        holder = answer.get("holder") or "another process"
        click.echo(f"the thread is open in {holder}: sent to its inbox ({answer['queued']})")
    else:
        again = (
            " (already recorded: the same request came before)" if answer.get("duplicate") else ""
        )
        click.echo(f"recorded {answer.get('type')} at ord {answer.get('ord')}{again}")


def _print_json(value: Any) -> None:
    sys.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode() + "\n")
