"""The PostgreSQL store: many workers and API replicas on one database (``threadlog[postgres]``).

Open it with ``threadlog.open_store("postgresql://user@host/db")`` (``?schema=NAME`` for a
schema of its own), ``--store URL`` or ``THREADLOG_STORE``; it is imported only then, so
``import threadlog`` never imports psycopg.

What the package holds (each module opens with its theory of operation):

* `schema`: the tables, versioned migrations (``threadlog_schema_version``), `upgrade` (what
  ``threadlog db upgrade`` runs) and the check at open: a fresh database is migrated on the
  spot, an older schema is refused with "run `threadlog db upgrade`", a newer one refused.
* `store`: `PostgresStore`, the facade: wiring, lifecycle, the append path.
* `live`: listeners, ``follow`` and ``watch`` (records other processes commit).
* `writer`: one thread's writer: ordinals, the chain, idempotency, legality.
* `committer`: group commit: the appends of every thread of the process in one transaction
  and one COMMIT, fenced by the lease tokens.
* `leases`: single-writer leases with fencing tokens on the database's clock, renewed in the
  background.
* `notify`: LISTEN/NOTIFY as the wake-up of readers in any process, the table as the truth.
* `logs`: read, verify, fork, and threads moved in and out verbatim (`import_thread`,
  `thread_lines`); `projections`: records and their catalog rows in one
  transaction; `catalog`: catalog, snapshots, mailbox, credentials; `blobs`: artifacts;
  `transfer`: the `Transfer` capability (``adopt_thread``, what ``threadlog copy`` writes
  with) over `import_thread`.

The log is the ``events`` table: ``PRIMARY KEY (thread_id, ord)``, ``UNIQUE (thread_id, id)``
(an event id is unique within its thread; a fork's inherited records keep their ids), the
envelope's columns and the record's canonical line, byte for byte what an embedded rollout
holds, so hashes verify the same way and a thread copied between backends keeps its hashes.

Public surface (what other code may rely on): `PostgresStore` (the `Store` port plus the
`Catalog`, `Snapshots`, `Mailbox`, `Credentials`, `Artifacts` and `Transfer` capabilities,
and
``acquire``/``release``/``lost``/``renew_leases``/``watch``/``unwatch``/``commits``/``holder``/
``import_thread``/``thread_lines``; options ``lease_duration``, ``renew_interval``,
``commit_interval``, ``max_batch``, ``pool_size``, ``create_schema``, ``schema``),
`upgrade_database`, `SCHEMA_VERSION`, `SchemaTooOld`, `SchemaTooNew`; `threadlog.errors
.LeaseLost` is what an append with a stale fencing token raises.
"""

from __future__ import annotations

from threadlog.store.postgres.schema import SCHEMA_VERSION, SchemaTooNew, SchemaTooOld
from threadlog.store.postgres.store import PostgresStore

__all__ = [
    "SCHEMA_VERSION",
    "PostgresStore",
    "SchemaTooNew",
    "SchemaTooOld",
    "upgrade_database",
]


def upgrade_database(url: str, *, schema: str | None = None) -> tuple[int, int]:
    """Apply the migrations the database at ``url`` lacks (``threadlog db upgrade``);
    ``(version before, version after)``. Idempotent; raises `SchemaTooNew`, `StorageError`."""
    import psycopg

    from threadlog.errors import StorageError
    from threadlog.store.postgres.schema import parse_url, upgrade

    target = parse_url(url, schema)
    try:
        with psycopg.connect(target.conninfo, autocommit=True) as conn:
            return upgrade(conn, target.schema)
    except psycopg.Error as exc:
        raise StorageError(f"cannot upgrade {target!r}: {exc}") from exc
