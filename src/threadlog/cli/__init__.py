"""The ``threadlog`` command.

Every command takes ``--store`` (alias ``--home``: a directory or ``file://`` URL; default:
``$THREADLOG_STORE``, else ``$THREADLOG_HOME``, else ``~/.threadlog``) and
``--json`` (machine-readable output, documented in ``docs/cli.md``). Exit codes: 0 success,
1 a verification failed, 2 a usage error (bad arguments, unknown thread), 3 the store could not
do it (I/O error, lease held by another process, damaged log).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from threadlog._version import __version__
from threadlog.errors import ThreadlogError, UsageError

__all__ = ["main"]

F = TypeVar("F", bound=Callable[..., Any])

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_STORE = 3


def _store_home(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """The directory of the store ``--store`` names (`threadlog.store.open.parse_target`).

    The commands work on a store on disk (other processes' inboxes, leases, the index) or a
    PostgreSQL store (its URL is passed on as it is; the commands that need a store on disk
    refuse it); an in-memory store would be empty and gone when the command ends: it is
    refused here, before anything is created.
    """
    if value is None:
        return None
    from threadlog.store.open import parse_target

    try:
        kind, where = parse_target(value)
    except UsageError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None
    if kind == "postgres":
        return where
    if kind != "embedded":
        raise click.BadParameter(
            f"{value!r}: the command line works on a store on disk (an in-memory store lives "
            "only inside one process); give a directory or a file:// URL",
            ctx,
            param,
        )
    return where


def store_options(func: F) -> F:
    """Add ``--store`` (alias ``--home``) and ``--json`` to a command."""
    func = click.option(
        "--json", "as_json", is_flag=True, help="Machine-readable output (see docs/cli.md)."
    )(func)
    func = click.option(
        "--store",
        "--home",
        "home",
        metavar="DIR|URL",
        envvar=["THREADLOG_STORE", "THREADLOG_HOME"],
        show_envvar=True,
        callback=_store_home,
        help=(
            "The store: a directory, file:// URL or postgresql:// URL (--home is an alias) "
            "[default: ~/.threadlog]."
        ),
    )(func)
    return func


def handle_errors(func: F) -> F:
    """Turn threadlog errors into one clear line on stderr and an exit code."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except UsageError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(EXIT_USAGE)
        except ThreadlogError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(EXIT_STORE)
        except OSError as exc:  # an I/O error that escaped the store's own translation
            click.echo(f"error: {exc}", err=True)
            sys.exit(EXIT_STORE)

    return wrapper  # type: ignore[return-value]


_LAZY = {
    "ls": "inspect",
    "show": "inspect",
    "events": "inspect",
    "verify": "inspect",
    "rebuild": "inspect",
    "tail": "inspect",
    "demo": "demo",
    "approve": "live",
    "deny": "live",
    "send": "live",
    "resolve": "live",
    "cancel": "live",
    "resume": "live",
    "fork": "live",
    "diff": "export",
    "export": "export",
    "replay": "trajectory",
    "import": "importing",
    "memory": "memory",
    "serve": "serve",
    "token": "token",
    "db": "db",
    "copy": "copy",
    "worker": "worker",
    "archive": "retention",
    "gc": "retention",
}


class _LazyGroup(click.Group):
    """Import a command's module only when the command is used: ``threadlog ls`` need not
    load the runtime, and starts faster."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(_LAZY))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in _LAZY:
            import importlib

            importlib.import_module(f"threadlog.cli.{_LAZY[cmd_name]}")
        return super().get_command(ctx, cmd_name)


@click.group(
    cls=_LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(__version__, prog_name="threadlog")
def cli() -> None:
    """Durable, resumable, forkable sessions for AI agents.

    Every fact of an agent's work is a record in an append-only, hash-chained log.

    \b
    Examples:
      threadlog demo                 run a scripted agent session end to end
      threadlog ls                   list threads, most recent first
      threadlog show THREAD          a thread's turns, tool calls and latest events
      threadlog events THREAD        its records as JSON lines
      threadlog verify               check every log's hashes, chain and ordinals
    """


def main() -> None:
    """Entry point of the ``threadlog`` console script."""
    cli(prog_name="threadlog")
