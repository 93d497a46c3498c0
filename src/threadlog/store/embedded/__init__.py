"""The embedded store: JSONL rollouts (the truth), a SQLite index, an artifact store.

`EmbeddedStore` keeps every thread in a directory (``<home>``, see `layout`) and implements
the `Store` port and the `Snapshots`, `Catalog`, `LocalHome`, `Mailbox`, `Credentials`,
`Maintenance` and `Transfer` capabilities.

Theory of operation
-------------------
How a record flows, append → journal → rollout → index:

1. `EmbeddedStore.append` (`store`) normalises and encodes the event (large values go to the
   artifact store, `artifacts`), finds the thread's open log, opening it if needed
   (`writers`: lease, recovery, torn-tail repair), and submits the record to it.
2. The thread's `RolloutLog` (`rolloutlog`) assigns the ordinal, chains the hash and checks
   the id under its own lock, then queues the line in the store's `Journal` (`journal`).
3. The first waiter leads a group commit: one write and one ``fdatasync`` of the journal for
   every thread's queued lines (or of the rollout alone, when only one thread has lines),
   then plain writes into each rollout. The records are acknowledged; the journal calls the
   store back (``_on_durable``), which publishes the durable end to other processes' readers,
   calls the listeners and hands the records to the index's backlog (`indexer`).
4. The background `Committer` (`indexer`) commits buffered appends every
   ``commit_interval`` and drains the backlog into the SQLite projections (`index`,
   `schema`); queries drain it first. A journal is deleted at its checkpoint, once every
   rollout it covers is fsynced.

A store that crashes leaves its journal: the next open replays it into the rollouts
(`recovery`, `deadjournals`) and catches the index up from the files (`indexer`). Reads scan
the rollout itself, never past what is durable, and check it against what the index saw
acknowledged (`reader`, `rollout`); a snapshot's anchor or the store's own checkpoint lets
them start in the middle (`snapshots`, `checkpoint`), and a window at the end of a long
thread is read from the end of the file or the sparse index (`tailread`). A fork copies a prefix of a rollout byte for byte into a new one (`fork`); a
thread copied from another store is written whole as a new rollout (`transfer`).

Modules
-------
``store``        the facade: wiring, lifecycle, the append fast path, listeners, fork, rebuild
``queries``      the facade's other half: reads, verify, snapshots loaded, the catalog
``layout``       the home's folders, a thread's path, the rollout walk, default sizes
``writers``      the threads open for writing: leases, opening and repair, eviction, release
``rolloutlog``   one open thread: ordinals, chain, ids, offsets
``journal``      the group commit shared by all threads, checkpoints, fail-stop
``aio``          awaiting a group commit from asyncio
``rollout``      scanning a rollout: a torn tail versus damage
``reader``       reads, follow, verify, durable-before-visible, the acknowledged marks
``snapshots``    snapshots over index rows, and the anchor check that makes them safe
``checkpoint``   the store's own checkpoints (ord, offset, hash, state) and sparse index
``tailread``     a window of records read from the end or the sparse index, verified
``streamscan``   scanning a whole rollout a chunk at a time; ``verify`` streamed on it
``fork``         byte-for-byte forks, verified while they are written
``transfer``     threads copied from another store adopted verbatim (`Transfer`)
``recovery``     replaying dead journals on open and per thread; unborn threads; repairs
``deadjournals`` finding, checking and parsing dead journals; replaying one into a rollout
``indexer``      the index backlog, the background committer, catch-up, rebuild, queries
``index``        the SQLite projections; ``schema`` its tables, opening checks, row types
``leases``       single-writer leases and the durable-end notice
``artifacts``    content-addressed blobs
``mailbox``      commands other processes post for a live session: ``<home>/inbox/<thread>/``
``credentials``  the service's token digests: ``<home>/credentials.json``, rewritten atomically

What the embedded store shares with other backends stays in `threadlog.store`: the port
(`protocol`), append validation (`validate`), large-value offloading (`offload`), a fork's
lineage (`_forks`), and the file-operation seam and permission checks that the runtime uses
too (`_fileops`, `_perms`).

Why composition: each job is a small object the facade builds once and owns, given exactly
the state it needs (a `Layout`, the `Index`, the `Journal`, the table of open logs, one
another) rather than a mixin reaching into a shared ``self``: who may change what stays
visible, and each part can be read (and tested) on its own. The one piece of state several
share is the table of open logs: `OpenLogs` alone changes it (under its lock); the append
fast path, the reader, the snapshots and the fork read it without a lock (a dict lookup is
atomic), which keeps an append to an open thread at one dict lookup and one locked submit,
exactly as before the split. The `Index` object lives as long as the store: a damaged
database is swapped underneath it (`Index.replace`), so nobody holds a stale one. The one
base class, `Queries`, is not a mixin in that sense: it holds no state and only forwards to
the collaborators; it exists so that the facade's own module stays about wiring, lifecycle
and writing.
"""

from threadlog.store._home import default_home
from threadlog.store.embedded.store import EmbeddedStore
from threadlog.store.protocol import VerifyReport

__all__ = ["EmbeddedStore", "VerifyReport", "default_home"]
