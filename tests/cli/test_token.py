"""``threadlog token add|ls|rm``: a token printed once and last, stored as its digest only."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from threadlog import open_store
from threadlog.cli import cli
from threadlog.cli import token as _token  # registers the commands (used below too)
from threadlog.server.tokens import Authenticator, digest
from threadlog.store.protocol import Credentials


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def add(home: str, principal: str) -> tuple[str, str]:
    """``(token_id, token)`` of a token added through ``token add --json``."""
    code, out, err = run("token", "add", principal, "--home", home, "--json")
    assert code == 0, err
    doc = json.loads(out)
    return doc["token_id"], doc["token"]


def test_add_prints_the_token_once_as_the_last_word(home: str) -> None:
    code, out, err = run("token", "add", "alice", "--home", home)
    assert code == 0, err
    token = out.split()[-1]
    assert out.endswith(token + "\n")
    assert token.startswith("tl_") and len(token) == 3 + 43
    token_id = out.split("(id ")[1].split(")")[0]
    assert out == f"token for alice (id {token_id}), shown once: {token}\n"
    with open_store(home) as store:
        assert Authenticator(store, ttl=0).principal_for(token) == "alice"
        assert isinstance(store, Credentials)
        (stored,) = store.credentials()
    assert (stored.token_id, stored.principal, stored.digest) == (token_id, "alice", digest(token))


def test_add_json_has_the_token_and_its_credential(home: str) -> None:
    code, out, err = run("token", "add", "bob", "--home", home, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert sorted(doc) == ["created_at", "principal", "token", "token_id"]
    assert doc["principal"] == "bob" and doc["token_id"].startswith("tok_")
    assert doc["created_at"].endswith("Z")
    with open_store(home) as store:
        assert Authenticator(store, ttl=0).principal_for(doc["token"]) == "bob"


def test_ls_shows_ids_principals_and_times_but_no_secret(home: str) -> None:
    code, out, _ = run("token", "ls", "--home", home)
    assert code == 0 and out.startswith("no tokens")
    first, first_token = add(home, "alice")
    second, _ = add(home, "bob")
    code, out, _ = run("token", "ls", "--home", home)
    assert code == 0
    header, row1, row2 = out.splitlines()
    assert header.split() == ["ID", "PRINCIPAL", "CREATED"]
    assert row1.split()[:2] == [first, "alice"] and row2.split()[:2] == [second, "bob"]
    assert first_token not in out and digest(first_token) not in out
    code, out, _ = run("token", "ls", "--home", home, "--json")
    rows = json.loads(out)
    assert [(r["token_id"], r["principal"]) for r in rows] == [(first, "alice"), (second, "bob")]
    assert all(sorted(r) == ["created_at", "principal", "token_id"] for r in rows)


def test_rm_revokes_and_an_unknown_id_is_a_usage_error(home: str) -> None:
    token_id, token = add(home, "alice")
    kept, _ = add(home, "bob")
    code, out, err = run("token", "rm", token_id, "--home", home)
    assert (code, out) == (0, f"revoked {token_id}\n"), err
    with open_store(home) as store:
        assert Authenticator(store, ttl=0).principal_for(token) is None
    code, out, _ = run("token", "ls", "--home", home, "--json")
    assert [r["token_id"] for r in json.loads(out)] == [kept]
    code, out, err = run("token", "rm", token_id, "--home", home)
    assert code == 2 and out == ""
    assert err.startswith("error: no token") and token_id in err


@pytest.mark.parametrize("principal", ["", "alice smith", "bob\tx", "x" * 201, "eve\x00"])
def test_a_bad_principal_is_a_usage_error_and_stores_nothing(home: str, principal: str) -> None:
    code, out, err = run("token", "add", principal, "--home", home)
    assert code == 2 and out == "" and err.startswith("error: a principal")
    assert not (Path(home) / "credentials.json").exists()


def test_the_token_is_nowhere_in_the_home_and_the_file_is_private(home: str) -> None:
    old = os.umask(0o022)
    try:
        _, token = add(home, "alice")
    finally:
        os.umask(old)
    credentials = Path(home) / "credentials.json"
    assert stat.S_IMODE(credentials.stat().st_mode) == 0o600
    assert digest(token).encode() in credentials.read_bytes()
    secret = token.encode()
    holding = [
        str(path)
        for path in Path(home).rglob("*")
        if path.is_file() and secret in path.read_bytes()
    ]
    assert holding == []


def test_an_in_memory_store_is_refused() -> None:
    code, _, err = run("token", "ls", "--store", "memory://")
    assert code == 2 and "on disk" in err


def test_a_store_without_credentials_is_a_usage_error(
    home: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    closed: list[bool] = []

    class NoCredentials:  # a store with none of the capability's methods
        def close(self) -> None:
            closed.append(True)

    monkeypatch.setattr(_token, "open_store", lambda target: NoCredentials())
    for args in (["add", "alice"], ["ls"], ["rm", "tok_1"]):
        code, out, err = run("token", *args, "--home", home)
        assert (code, out) == (2, "")
        assert err == "error: this store keeps no API tokens (it has no Credentials capability)\n"
    assert closed == [True, True, True]
