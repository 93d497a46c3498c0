"""The contract of the optional `Credentials` capability: the service's token digests.

Credentials are kept in the order they were added and listed that way; a token id or a
digest already taken, and a malformed credential, are refused and change nothing; removing
one that is not there says so (False) and changes nothing; adds from many threads at once
all land; a closed store refuses changes. A store without the capability skips these tests.
(That they survive a reopen is a durable backend's own test: the contract makes one store.)
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import replace

import pytest

from threadlog.errors import UsageError
from threadlog.store.protocol import Credential, Credentials, Store

__all__ = ["CredentialTests", "credential"]


def credential(n: int, principal: str = "alice") -> Credential:
    """A well-formed credential, distinct for each ``n`` (its token is ``tl_test_<n>``)."""
    return Credential(
        token_id=f"tok_{n:08x}",
        principal=principal,
        digest=hashlib.sha256(f"tl_test_{n}".encode()).hexdigest(),
        created_at=f"2026-01-01T00:00:{n % 60:02d}.000000Z",
    )


def _credentials(store: Store) -> Credentials:
    if not isinstance(store, Credentials):
        pytest.skip("this store keeps no credentials (an optional capability)")
    return store


class CredentialTests:
    """Add, list, remove."""

    def test_credentials_are_listed_oldest_first_until_removed(self, store: Store) -> None:
        creds = _credentials(store)
        assert creds.credentials() == []
        first, second, third = credential(1), credential(2, "bob"), credential(3)
        for c in (first, second, third):
            creds.add_credential(c)
        assert creds.credentials() == [first, second, third]
        assert creds.credentials() == [first, second, third]  # reading changes nothing
        assert creds.remove_credential(second.token_id) is True
        assert creds.credentials() == [first, third]
        assert creds.remove_credential(second.token_id) is False  # already gone
        creds.add_credential(second)  # a removed id and digest may come back
        assert creds.credentials() == [first, third, second]

    def test_a_taken_token_id_or_digest_is_refused(self, store: Store) -> None:
        creds = _credentials(store)
        kept = credential(1)
        creds.add_credential(kept)
        with pytest.raises(UsageError, match="token id"):
            creds.add_credential(replace(credential(2), token_id=kept.token_id))
        with pytest.raises(UsageError, match="digest"):
            creds.add_credential(replace(credential(2), digest=kept.digest, principal="bob"))
        assert creds.credentials() == [kept]

    def test_removing_an_unknown_credential_changes_nothing(self, store: Store) -> None:
        creds = _credentials(store)
        assert creds.remove_credential("tok_missing") is False
        creds.add_credential(credential(1))
        assert creds.remove_credential("tok_missing") is False
        assert creds.credentials() == [credential(1)]

    @pytest.mark.parametrize(
        ("change", "complaint"),
        [
            ({"principal": ""}, "principal"),
            ({"principal": "alice smith"}, "whitespace"),
            ({"principal": "alice\x1b[2Jroot"}, "control"),
            ({"principal": "a" * 201}, "at most"),
            ({"token_id": ""}, "token id"),
            ({"token_id": "../tok"}, "token id"),
            ({"digest": "ab" * 31}, "digest"),
            ({"digest": "AB" * 32}, "digest"),
            ({"digest": "tl_the_token_itself"}, "digest"),
            ({"created_at": ""}, "created_at"),
        ],
    )
    def test_a_malformed_credential_is_refused(
        self, store: Store, change: dict[str, str], complaint: str
    ) -> None:
        creds = _credentials(store)
        with pytest.raises(UsageError, match=complaint):
            creds.add_credential(replace(credential(1), **change))
        assert creds.credentials() == []

    def test_adds_from_many_threads_all_land(self, store: Store) -> None:
        creds = _credentials(store)
        errors: list[BaseException] = []

        def add(first: int) -> None:
            try:
                for n in range(first, first + 5):
                    creds.add_credential(credential(n))
            except BaseException as exc:  # reported below, not lost in the thread
                errors.append(exc)

        threads = [threading.Thread(target=add, args=(i * 5,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        ids = [c.token_id for c in creds.credentials()]
        assert sorted(ids) == sorted(credential(n).token_id for n in range(30))
        for first in range(0, 30, 5):  # each thread's own adds, in its order
            mine = [credential(n).token_id for n in range(first, first + 5)]
            assert [i for i in ids if i in mine] == mine

    def test_a_closed_store_refuses_changes(self, store: Store) -> None:
        creds = _credentials(store)
        creds.add_credential(credential(1))
        store.close()
        with pytest.raises(UsageError):
            creds.add_credential(credential(2))
        with pytest.raises(UsageError):
            creds.remove_credential(credential(1).token_id)
        assert creds.credentials() == [credential(1)]  # reads still work
