"""`StoreContract`: the tests every `threadlog.store.Store` backend must pass, shipped.

A backend's test module subclasses it and says how to make a fresh store::

    from threadlog.testing import StoreContract

    class TestMyStore(StoreContract):
        def make_store(self, tmp_path):
            return MyStore(tmp_path / "home")

pytest then runs every test below against it (the ``store`` fixture makes one per test and
closes it after). The tests use the port only, plus a capability when the store has it
(`Snapshots`, `Mailbox`, `Credentials`, `Transfer`, `Retention`). Listeners of a durable backend
are called once
records are durable, so the tests ``flush()`` before looking at what a listener saw.

The tests live in one module per topic, each a plain class of test methods that
`StoreContract` combines (none is collected on its own: their names do not start with
``Test``):

* ``append``: create, append and read; ordinals, the chain, parents, copies.
* ``idempotency``: appends by id replay, ``expect_ord`` conflicts.
* ``refusals``: bad input is refused and writes nothing; thread settings.
* ``legality``: an event the reducer refuses is refused on every append path, writes nothing.
* ``hooks``: the ``check`` hook, listeners and error listeners.
* ``concurrency``: appends from threads, ``aappend``, ``follow``.
* ``artifacts``: large values and look-alike references; the `Artifacts` capability (blobs
  put, streamed and checked; verify reports a missing one).
* ``fork``: inherited prefixes and lineage.
* ``lifecycle``: verify, leases, flush, snapshots, close.
* ``mailbox``: the optional `Mailbox`: post, pending, done.
* ``credentials``: the optional `Credentials`: the service's token digests added, listed,
  removed.
* ``transfer``: the optional `Transfer`: a thread from another store adopted verbatim
  (``threadlog copy``), idempotent, refusing other content and records that do not verify.
* ``retention``: caller-chosen thread ids (idempotent create); the optional `Retention`:
  delete a thread for good.

This package imports pytest; ``import threadlog`` and ``import threadlog.testing`` never
import it (pytest is no runtime dependency).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from threadlog.testing.contract._common import BIG as BIG
from threadlog.testing.contract._common import EVENT_ID as EVENT_ID
from threadlog.testing.contract._common import LOOKALIKE as LOOKALIKE
from threadlog.testing.contract._common import LOOKALIKES as LOOKALIKES
from threadlog.testing.contract._common import MISSING_THREAD as MISSING_THREAD
from threadlog.testing.contract._common import OTHER_ID as OTHER_ID
from threadlog.testing.contract._common import check_chain
from threadlog.testing.contract.append import AppendReadTests
from threadlog.testing.contract.artifacts import ArtifactTests, BlobTests
from threadlog.testing.contract.concurrency import ConcurrencyTests
from threadlog.testing.contract.credentials import CredentialTests
from threadlog.testing.contract.fork import ForkTests
from threadlog.testing.contract.hooks import HookTests
from threadlog.testing.contract.idempotency import IdempotencyTests
from threadlog.testing.contract.legality import LegalityTests
from threadlog.testing.contract.lifecycle import LifecycleTests
from threadlog.testing.contract.mailbox import MailboxTests
from threadlog.testing.contract.refusals import RefusalTests
from threadlog.testing.contract.retention import RetentionTests
from threadlog.testing.contract.transfer import TransferTests

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from threadlog.store.protocol import Store

__all__ = ["StoreContract", "check_chain"]


class StoreContract(
    AppendReadTests,
    IdempotencyTests,
    RefusalTests,
    LegalityTests,
    HookTests,
    ConcurrencyTests,
    ArtifactTests,
    BlobTests,
    ForkTests,
    LifecycleTests,
    MailboxTests,
    CredentialTests,
    TransferTests,
    RetentionTests,
):
    """The store contract as a pytest test class; override `make_store`."""

    def make_store(self, tmp_path: Path) -> Store:
        """A new, empty store (``tmp_path`` is the test's own directory)."""
        raise NotImplementedError("a StoreContract subclass says how to make its store")

    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[Store]:
        """A fresh store from `make_store`, closed after the test."""
        made = self.make_store(tmp_path)
        try:
            yield made
        finally:
            made.close()
