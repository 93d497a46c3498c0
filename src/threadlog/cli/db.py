"""The PostgreSQL store's schema from the command line: ``threadlog db upgrade``.

The embedded store needs no migration (its index is a projection, rebuilt when its schema
changes); a PostgreSQL database holds the log itself, so its schema is migrated on purpose,
by an operator, with this command (`threadlog.store.postgres.upgrade_database`). A store
opened on an older schema is refused with a message that says to run it.
"""

from __future__ import annotations

import sys

import click
import orjson

from threadlog.cli import cli, handle_errors, store_options
from threadlog.errors import UsageError

__all__ = ["db", "db_upgrade"]


@cli.group()
def db() -> None:
    """The PostgreSQL store's database schema.

    \b
    Examples:
      threadlog db upgrade --store postgresql://app@db.internal/threadlog
      THREADLOG_STORE=postgresql://app@db/threadlog threadlog db upgrade
    """


@db.command(name="upgrade")
@store_options
@handle_errors
def db_upgrade(home: str | None, as_json: bool) -> None:
    """Apply the schema migrations the PostgreSQL database lacks (idempotent).

    Each migration runs in its own transaction, under a lock, so that two upgrades at once
    apply it once. A database migrated by a newer threadlog is refused and left as it is.
    ``?schema=NAME`` in the URL upgrades that schema. ``--json`` prints ``{"from", "to"}``.

    \b
    Examples:
      threadlog db upgrade --store postgresql://postgres@127.0.0.1/threadlog
      threadlog db upgrade --store 'postgresql://app@db/tl?schema=team_a' --json
    """
    from threadlog.store.open import parse_target

    kind, where = parse_target(home)
    if kind != "postgres" or where is None:
        raise UsageError(
            "db upgrade works on a PostgreSQL store: give --store postgresql://… (or set "
            "THREADLOG_STORE); an embedded store migrates its index by itself"
        )
    try:
        from threadlog.store.postgres import upgrade_database
    except ImportError as exc:
        raise UsageError(f"`pip install 'threadlog[postgres]'` first ({exc})") from None
    before, after = upgrade_database(where)
    if as_json:
        sys.stdout.write(
            orjson.dumps({"from": before, "to": after}, option=orjson.OPT_INDENT_2).decode() + "\n"
        )
    elif before == after:
        click.echo(f"the schema is up to date (version {after})")
    else:
        click.echo(f"upgraded the schema from version {before} to {after}")
