"""The service's bearer tokens from the command line: ``threadlog token add``, ``ls`` and ``rm``.

A token is minted here (`threadlog.server.tokens.mint`), printed once and stored as its
digest only, in the store the server opens (its `Credentials` capability). The server reads
the credentials again within a second, so a token added or removed here counts at once,
without restarting ``threadlog serve``.
"""

from __future__ import annotations

import sys
from typing import Protocol, runtime_checkable

import click
import orjson

from threadlog.cli import cli, handle_errors, store_options
from threadlog.cli._out import clean
from threadlog.errors import UsageError
from threadlog.store.open import open_store
from threadlog.store.protocol import Credentials, Store

__all__ = ["token", "token_add", "token_ls", "token_rm"]


@runtime_checkable
class _TokenStore(Store, Credentials, Protocol):
    """A store that keeps the service's tokens: what these commands need."""


def _open(home: str | None) -> _TokenStore:
    """The store at ``home`` (default: ``$THREADLOG_HOME`` or ``~/.threadlog``); `UsageError`
    if it keeps no tokens (no `Credentials` capability)."""
    store = open_store(home)
    if not isinstance(store, _TokenStore):
        store.close()
        raise UsageError("this store keeps no API tokens (it has no Credentials capability)")
    return store


def _json(value: object) -> None:
    sys.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode() + "\n")


@cli.group()
def token() -> None:
    """Bearer tokens for ``threadlog serve``: who may use the service, as whom.

    The store keeps each token's SHA-256 only; the token itself is shown once, when it is
    added. With no token in the store the server runs in open mode (loopback only).

    \b
    Examples:
      threadlog token add alice
      threadlog token ls
      threadlog token rm tok_1a2b3c4d5e
    """


@token.command(name="add")
@store_options
@click.argument("principal")
@handle_errors
def token_add(home: str | None, as_json: bool, principal: str) -> None:
    """Mint a token for PRINCIPAL; print it once, as the output's last word.

    The store keeps its digest only: copy the token now, it cannot be shown again.
    PRINCIPAL is who the token speaks for (recorded as the ``by`` of every command sent
    with it): one word, no spaces, at most 200 characters. ``--json`` prints
    ``{"token_id", "principal", "created_at", "token"}``.

    \b
    Examples:
      threadlog token add alice
      TOKEN=$(threadlog token add ci-bot | awk '{print $NF}')
      threadlog token add alice --json
    """
    from threadlog.server.tokens import mint

    secret, credential = mint(principal)
    with _open(home) as store:
        store.add_credential(credential)
    if as_json:
        _json(
            {
                "token_id": credential.token_id,
                "principal": credential.principal,
                "created_at": credential.created_at,
                "token": secret,
            }
        )
    else:
        click.echo(
            f"token for {credential.principal} (id {credential.token_id}), shown once: {secret}"
        )


@token.command(name="ls")
@store_options
@handle_errors
def token_ls(home: str | None, as_json: bool) -> None:
    """List the tokens: id, principal, creation time (never a token or its digest).

    Oldest first. ``--json`` prints ``[{"token_id", "principal", "created_at"}]``.

    \b
    Examples:
      threadlog token ls
      threadlog token ls --json
    """
    with _open(home) as store:
        rows = store.credentials()
    if as_json:
        _json(
            [
                {"token_id": c.token_id, "principal": c.principal, "created_at": c.created_at}
                for c in rows
            ]
        )
        return
    if not rows:
        click.echo("no tokens (threadlog serve runs in open mode, on loopback only)")
        return
    id_width = max(len("ID"), *(len(c.token_id) for c in rows))
    who_width = max(len("PRINCIPAL"), *(len(c.principal) for c in rows))
    click.echo(f"{'ID':<{id_width}}  {'PRINCIPAL':<{who_width}}  CREATED")
    for c in rows:
        line = f"{c.token_id:<{id_width}}  {c.principal:<{who_width}}  {c.created_at}"
        click.echo(clean(line, one_line=True))


@token.command(name="rm")
@store_options
@click.argument("token_id")
@handle_errors
def token_rm(home: str | None, as_json: bool, token_id: str) -> None:
    """Revoke the token TOKEN_ID (``threadlog token ls`` lists the ids).

    A running server refuses it within a second. An unknown id is an error (exit 2).

    \b
    Example:
      threadlog token rm tok_1a2b3c4d5e
    """
    with _open(home) as store:
        removed = store.remove_credential(token_id)
    if not removed:
        raise UsageError(f"no token {token_id!r:.80} (threadlog token ls lists them)")
    if as_json:
        _json({"removed": token_id})
    else:
        click.echo(f"revoked {token_id}")
