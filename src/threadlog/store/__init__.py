"""Storage backends behind one port. They read and write envelopes and never interpret event data.

`Store` is the port every backend implements; `Snapshots`, `Catalog`, `LocalHome`, `Mailbox`,
`MailboxIndex`, `Credentials`, `Maintenance`, `Transfer` and `Watch` are the optional
capabilities (check them with ``isinstance``); `open_store` opens a backend by target
(``postgresql://…``: `threadlog.store.postgres.PostgresStore`, imported only then).
"""

from threadlog.store.embedded import EmbeddedStore, default_home
from threadlog.store.embedded.artifacts import ArtifactStore
from threadlog.store.embedded.index import IndexedThread
from threadlog.store.inmemory import MemoryStore
from threadlog.store.open import open_store
from threadlog.store.protocol import (
    Catalog,
    Credential,
    Credentials,
    LocalHome,
    Mailbox,
    MailboxIndex,
    MailboxMessage,
    Maintenance,
    Snapshots,
    Store,
    Transfer,
    VerifyReport,
    Watch,
)

__all__ = [
    "ArtifactStore",
    "Catalog",
    "Credential",
    "Credentials",
    "EmbeddedStore",
    "IndexedThread",
    "LocalHome",
    "Mailbox",
    "MailboxIndex",
    "MailboxMessage",
    "Maintenance",
    "MemoryStore",
    "Snapshots",
    "Store",
    "Transfer",
    "VerifyReport",
    "Watch",
    "default_home",
    "open_store",
]
