"""`threadlog.server.tokens`: minting, and the `Authenticator` the server asks on every request."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from threadlog import StorageError
from threadlog.errors import UsageError
from threadlog.server import tokens
from threadlog.server.tokens import Authenticator, digest, mint
from threadlog.store.embedded import EmbeddedStore
from threadlog.store.inmemory import MemoryStore

_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
"""A child process imports this checkout's threadlog, as the tests do."""


def test_mint_makes_a_fresh_token_and_the_credential_of_its_digest() -> None:
    token, credential = mint("alice")
    assert token.startswith("tl_") and len(token) == 46
    assert credential.principal == "alice"
    assert credential.digest == hashlib.sha256(token.encode()).hexdigest() == digest(token)
    assert token not in repr(credential)
    assert credential.token_id.startswith("tok_") and len(credential.token_id) == 14
    assert credential.created_at.endswith("Z")
    other, again = mint("alice")
    assert other != token and again.token_id != credential.token_id


@pytest.mark.parametrize("principal", ["", " alice", "al ice", "a\nb", "a\u200bb", "a" * 201])
def test_mint_refuses_a_principal_that_is_not_one_word(principal: str) -> None:
    with pytest.raises(UsageError, match="principal"):
        mint(principal)


def test_mint_accepts_a_long_unicode_principal() -> None:
    assert mint("ÅsaLindström@example.org")[1].principal == "ÅsaLindström@example.org"
    assert mint("a" * 200)[1].principal == "a" * 200


def test_open_mode_while_the_store_holds_no_token() -> None:
    with MemoryStore() as store:
        auth = Authenticator(store, ttl=0)
        assert auth.open_mode is True
        token, credential = mint("alice")
        assert auth.principal_for(token) is None  # open mode: the server decides who
        store.add_credential(credential)
        assert auth.open_mode is False
        store.remove_credential(credential.token_id)
        assert auth.open_mode is True


def test_a_store_without_the_capability_is_always_open() -> None:
    class Bare:  # a store with no Credentials methods
        pass

    auth = Authenticator(Bare(), ttl=0)  # type: ignore[arg-type]
    assert auth.open_mode is True
    assert auth.principal_for(mint("alice")[0]) is None


def test_principal_for_the_right_token_and_nobody_for_a_wrong_one() -> None:
    with MemoryStore() as store:
        alice, alice_cred = mint("alice")
        bob, bob_cred = mint("bob")
        store.add_credential(alice_cred)
        store.add_credential(bob_cred)
        auth = Authenticator(store, ttl=0)
        assert auth.principal_for(alice) == "alice"
        assert auth.principal_for(bob) == "bob"
        for wrong in ["", alice[:-1], alice + "x", alice.upper(), alice_cred.digest, "tl_"]:
            assert auth.principal_for(wrong) is None, wrong


def test_every_stored_digest_is_compared_even_after_a_match(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with MemoryStore() as store:
        minted = [mint(f"p{i}") for i in range(5)]
        for _, credential in minted:
            store.add_credential(credential)
        calls: list[bytes] = []
        real = tokens.hmac.compare_digest

        def counting(a: bytes, b: bytes) -> bool:
            calls.append(b)
            return real(a, b)

        monkeypatch.setattr(tokens.hmac, "compare_digest", counting)
        auth = Authenticator(store, ttl=0)
        assert auth.principal_for(minted[0][0]) == "p0"  # the first one stored
        assert len(calls) == 5
        assert auth.principal_for("tl_nobody") is None
        assert len(calls) == 10


def test_a_removed_token_stops_working_once_ttl_passes() -> None:
    now = [100.0]
    with MemoryStore() as store:
        token, credential = mint("alice")
        store.add_credential(credential)
        auth = Authenticator(store, ttl=5.0, clock=lambda: now[0])
        assert auth.principal_for(token) == "alice"
        store.remove_credential(credential.token_id)
        now[0] += 4.9
        assert auth.principal_for(token) == "alice"  # within ttl: the list read before
        now[0] += 0.1
        assert auth.principal_for(token) is None
        assert auth.open_mode is True


def test_with_ttl_zero_a_change_counts_at_once() -> None:
    with MemoryStore() as store:
        token, credential = mint("alice")
        auth = Authenticator(store, ttl=0)
        store.add_credential(credential)
        assert auth.principal_for(token) == "alice"
        store.remove_credential(credential.token_id)
        assert auth.principal_for(token) is None


def test_a_token_added_by_another_process_counts(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with EmbeddedStore(home) as store:
        auth = Authenticator(store, ttl=0)
        assert auth.open_mode
        out = subprocess.run(
            [sys.executable, "-m", "threadlog", "token", "add", "carol", "--home", str(home)],
            capture_output=True,
            text=True,
            check=True,
            env=_ENV,
        ).stdout
        assert auth.principal_for(out.split()[-1]) == "carol"
        assert not auth.open_mode


def test_a_damaged_credentials_file_fails_closed(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with EmbeddedStore(home) as store:
        token, credential = mint("alice")
        store.add_credential(credential)
        (home / "credentials.json").write_bytes(b"{damaged")
        auth = Authenticator(store, ttl=0)
        with pytest.raises(StorageError, match="credentials"):
            auth.open_mode  # noqa: B018 - the property is what is tested
        with pytest.raises(StorageError):
            auth.principal_for(token)


def test_principal_for_from_many_threads_at_once() -> None:
    with MemoryStore() as store:
        minted = [mint(f"p{i}") for i in range(4)]
        for _, credential in minted:
            store.add_credential(credential)
        auth = Authenticator(store, ttl=0)
        wrong: list[str] = []

        def ask(token: str, principal: str) -> None:
            for _ in range(200):
                if auth.principal_for(token) != principal:
                    wrong.append(principal)

        threads = [threading.Thread(target=ask, args=(t, c.principal)) for t, c in minted]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert wrong == []


def test_tokens_imports_no_web_framework() -> None:
    code = (
        "import sys, threadlog.server.tokens, threadlog.cli.token; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('fastapi', 'uvicorn', 'starlette', 'httpx')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=_ENV
    ).stdout
    assert out.strip() == "[]"
