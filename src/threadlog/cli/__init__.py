"""The ``threadlog`` command.

Every command takes ``--store`` (alias ``--home``: a directory or ``file://`` URL; default:
``$THREADLOG_STORE``, else ``$THREADLOG_HOME``, else ``~/.threadlog``) and
``--json`` (machine-readable output, documented in ``docs/cli.md``). Exit codes: 0 success,
1 a verification failed, 2 a usage error (bad arguments, unknown thread), 3 the store could not
do it (I/O error, lease held by another process, damaged log).
"""

from __future__ import annotations

import functools
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TypeVar, cast

import click

from threadlog._version import __version__
from threadlog.errors import ConflictError, IntegrityError, ThreadlogError, UsageError

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


def _root_obj() -> dict[str, Any]:
    ctx = click.get_current_context(silent=True)
    obj = ctx.find_root().obj if ctx is not None else None
    return obj if isinstance(obj, dict) else {}


def _sub_home(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A command's ``--store``: its own value, else the one given before the command
    (``threadlog --store X ls``), else the environment's."""
    if value is not None:
        return _store_home(ctx, param, value)
    root = _root_obj()
    if "home" in root:
        return cast("str | None", root["home"])
    for name in ("THREADLOG_STORE", "THREADLOG_HOME"):
        if os.environ.get(name):
            return _store_home(ctx, param, os.environ[name])
    return None


def _sub_json(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    return bool(value or _root_obj().get("json"))


def json_wanted() -> bool:
    """Whether ``--json`` was given, before or after the command (for errors)."""
    ctx = click.get_current_context(silent=True)
    while ctx is not None:
        if ctx.params.get("as_json"):
            return True
        ctx = ctx.parent
    return bool(_root_obj().get("json"))


def store_options(func: F) -> F:
    """Add ``--store`` (alias ``--home``) and ``--json`` to a command (both may also stand
    before the command: ``threadlog --store X --json ls``)."""
    func = click.option(
        "--json",
        "as_json",
        is_flag=True,
        callback=_sub_json,
        help="Machine-readable output: one JSON document (see docs/cli.md).",
    )(func)
    func = click.option(
        "--store",
        "--home",
        "home",
        metavar="DIR|URL",
        callback=_sub_home,
        help=(
            "The store: a directory, file:// URL or postgresql:// URL (--home is an alias) "
            "[default: $THREADLOG_STORE, $THREADLOG_HOME, ~/.threadlog]."
        ),
    )(func)
    return func


def fail(message: str, code: int, kind: str, **extra: Any) -> NoReturn:
    """Report an error (one ``error:`` line on stderr, or with ``--json`` one JSON document
    there) and exit with ``code``."""
    if json_wanted():
        from threadlog.cli._out import print_json_error

        print_json_error(message, code, kind, **extra)
    else:
        from threadlog.cli._out import clean

        click.echo(f"error: {clean(message)}", err=True)
    sys.exit(code)


def handle_errors(func: F) -> F:
    """Turn threadlog errors into one clear line on stderr (JSON with ``--json``) and an
    exit code: 2 a usage error, 3 a conflict, damage or an I/O error."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except UsageError as exc:
            extra = {"candidates": list(exc.candidates)} if hasattr(exc, "candidates") else {}
            fail(str(exc), EXIT_USAGE, "usage", **extra)
        except ConflictError as exc:
            fail(str(exc), EXIT_STORE, "conflict")
        except IntegrityError as exc:
            fail(str(exc), EXIT_STORE, "damage")
        except ThreadlogError as exc:
            fail(str(exc), EXIT_STORE, "store")
        except BrokenPipeError:
            raise
        except OSError as exc:  # an I/O error that escaped the store's own translation
            fail(str(exc), EXIT_STORE, "io")

    return wrapper  # type: ignore[return-value]


def _quiet_broken_pipe() -> NoReturn:
    """The reader of our stdout went away (``threadlog events X | head -1``): not an error.
    Stop writing (stdout pointed at /dev/null, so that the interpreter's final flush cannot
    fail again) and exit 0."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass
    sys.exit(0)


_LAZY = {
    "ls": "inspect",
    "show": "showing",
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
    "rm": "retention",
}


class _LazyGroup(click.Group):
    """Import a command's module only when the command is used: ``threadlog ls`` need not
    load the runtime, and starts faster. Its `main` gives every failure its exit code:
    click's own errors (a bad option, a file that cannot be opened) 2, a closed pipe 0,
    an internal error (a bug: its traceback on stderr) 3, never click's default 1."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(_LAZY))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in _LAZY:
            import importlib

            importlib.import_module(f"threadlog.cli.{_LAZY[cmd_name]}")
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:  # before click's own handler, which exits 1
            _quiet_broken_pipe()

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        argv = list(sys.argv[1:] if args is None else args)
        as_json = "--json" in argv[: argv.index("--")] if "--" in argv else "--json" in argv
        try:
            rv = super().main(argv, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.Exit as exc:
            sys.exit(exc.exit_code)
        except click.Abort:  # Ctrl-C (or end of input at a prompt)
            click.echo("aborted", err=True)
            sys.exit(130)
        except click.ClickException as exc:
            if as_json:
                from threadlog.cli._out import print_json_error

                print_json_error(exc.format_message(), EXIT_USAGE, "usage")
            else:
                exc.show()
            sys.exit(EXIT_USAGE)
        except BrokenPipeError:
            _quiet_broken_pipe()
        except SystemExit:
            raise
        except KeyboardInterrupt:
            sys.exit(130)
        except Exception as exc:
            message = f"internal error (a bug in threadlog): {type(exc).__name__}: {exc}"
            if as_json:
                from threadlog.cli._out import print_json_error

                print_json_error(message, EXIT_STORE, "internal")
            else:
                traceback.print_exc()
                click.echo(f"error: {message}", err=True)
            sys.exit(EXIT_STORE)
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            _quiet_broken_pipe()
        sys.exit(rv if isinstance(rv, int) else 0)


@click.group(
    cls=_LazyGroup,
    invoke_without_command=True,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.option(
    "--store",
    "--home",
    "home",
    metavar="DIR|URL",
    envvar=["THREADLOG_STORE", "THREADLOG_HOME"],
    show_envvar=True,
    callback=_store_home,
    help="The store every command works on (also accepted after the command).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Machine-readable output for the command (also accepted after it).",
)
@click.version_option(__version__, prog_name="threadlog")
@click.pass_context
def cli(ctx: click.Context, home: str | None, as_json: bool) -> None:
    """Durable, resumable, forkable sessions for AI agents.

    Every fact of an agent's work is a record in an append-only, hash-chained log.

    \b
    Examples:
      threadlog demo                 run a scripted agent session end to end
      threadlog ls                   list threads, most recent first
      threadlog show THREAD          a thread's turns, tool calls and latest events
      threadlog show THREAD --tree   its conversation tree
      threadlog events THREAD        its records as JSON lines
      threadlog verify               check every log's hashes, chain and ordinals

    THREAD may be any unique prefix of a thread id.
    """
    ctx.ensure_object(dict)
    ctx.obj["json"] = as_json
    if home is not None:
        ctx.obj["home"] = home
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())
        ctx.exit(0)


def main() -> None:
    """Entry point of the ``threadlog`` console script."""
    cli(prog_name="threadlog")
