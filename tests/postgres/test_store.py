"""The PostgreSQL store's own behaviour beyond the contract: schema versions, group commit,
leases with fencing, LISTEN/NOTIFY wake-ups (and the poll when one is lost), a failed commit."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import psycopg
import pytest

from tests.postgres.server import Schemas, with_schema
from threadlog import open_store
from threadlog.errors import (
    DuplicateEventConflict,
    LeaseHeld,
    LeaseLost,
    StorageError,
    ThreadExists,
    ThreadNotFound,
    UsageError,
)
from threadlog.model.envelope import Record
from threadlog.store.postgres import (
    SCHEMA_VERSION,
    PostgresStore,
    SchemaTooNew,
    SchemaTooOld,
    upgrade_database,
)
from threadlog.store.postgres.schema import MIGRATIONS, current_version
from threadlog.store.protocol import Artifacts, Catalog, Credentials, Mailbox, Snapshots, Watch
from threadlog.testing.contract import check_chain

# -- schema -----------------------------------------------------------------------------------


def _sql(server: str, sql: str) -> list[tuple[object, ...]]:
    with psycopg.connect(server, autocommit=True) as conn:
        cur = conn.execute(sql)
        return cur.fetchall() if cur.description else []


def test_open_store_opens_it_with_every_capability(pg_schemas: Schemas) -> None:
    with open_store(pg_schemas.new()) as store:
        assert isinstance(store, PostgresStore)
        for capability in (Catalog, Snapshots, Mailbox, Credentials, Artifacts, Watch):
            assert isinstance(store, capability)
        thread = store.create_thread("alice", title="hello")
        store.append(thread, "turn.started", {"turn_id": "t1", "input": "hi"})
        info = store.thread_info(thread)
        assert (info.principal, info.title, info.status, info.last_ord, info.turns) == (
            "alice",
            "hello",
            "running",
            2,
            1,
        )
        assert [t.thread_id for t in store.threads()] == [thread]
        assert store.turns(thread)[0]["status"] == "running"


def test_migrations_are_idempotent_and_a_newer_schema_is_refused(pg_schemas: Schemas) -> None:
    schema = pg_schemas.name()
    url = with_schema(pg_schemas.server, schema)
    assert upgrade_database(url) == (0, SCHEMA_VERSION)
    assert upgrade_database(url) == (SCHEMA_VERSION, SCHEMA_VERSION)
    with PostgresStore(url) as store:
        store.create_thread("a")
    versions = f"SELECT version FROM {schema}.threadlog_schema_version ORDER BY version"
    assert _sql(pg_schemas.server, versions) == [(v,) for v, _ in MIGRATIONS]
    _sql(pg_schemas.server, f"INSERT INTO {schema}.threadlog_schema_version VALUES (999)")
    with pytest.raises(SchemaTooNew, match="newer than this threadlog"):
        PostgresStore(url)
    with pytest.raises(SchemaTooNew):
        upgrade_database(url)
    # nothing was changed by the refusals
    assert len(_sql(pg_schemas.server, f"SELECT 1 FROM {schema}.threads")) == 1


def test_an_older_schema_is_refused_with_what_to_do(pg_schemas: Schemas) -> None:
    schema = pg_schemas.name()
    url = with_schema(pg_schemas.server, schema)
    upgrade_database(url)
    _sql(pg_schemas.server, f"DELETE FROM {schema}.threadlog_schema_version")
    with pytest.raises(SchemaTooOld, match="threadlog db upgrade"):
        PostgresStore(url)
    fresh = pg_schemas.new()
    with pytest.raises(SchemaTooOld, match="threadlog db upgrade"):
        PostgresStore(fresh, create_schema=False)


def test_concurrent_upgrades_apply_each_migration_once(pg_schemas: Schemas) -> None:
    schema = pg_schemas.name()
    url = with_schema(pg_schemas.server, schema)
    results: list[tuple[int, int]] = []
    threads = [
        threading.Thread(target=lambda: results.append(upgrade_database(url))) for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # each ends at the current version, one of them started from nothing, and each
    # migration was applied once (a later caller may have found some applied already)
    assert [after for _, after in results] == [SCHEMA_VERSION] * 4
    assert sorted(before for before, _ in results)[0] == 0
    assert [before for before, _ in results].count(0) == 1
    versions = f"SELECT version FROM {schema}.threadlog_schema_version ORDER BY version"
    assert _sql(pg_schemas.server, versions) == [(v,) for v, _ in MIGRATIONS]


def _open_at_once(
    server: str, schema: str, others: int, *, together: bool
) -> tuple[list[str], list[BaseException]]:
    """One store opens an empty schema; ``others`` open it at the same moment (``together``)
    or as soon as the schema shows (the first migration's commit, before the fix). The
    threads they made and what they raised."""
    url = with_schema(server, schema)
    first_done = threading.Event()
    gate = threading.Barrier(others + 1)
    errors: list[BaseException] = []
    opened: list[str] = []

    def open_store_once() -> None:
        try:
            with PostgresStore(url) as store:
                opened.append(store.create_thread("a"))
        except BaseException as exc:
            errors.append(exc)

    def open_first() -> None:
        gate.wait()
        try:
            open_store_once()
        finally:
            first_done.set()

    def open_other() -> None:
        gate.wait()
        if not together:
            with psycopg.connect(server, autocommit=True) as conn:
                while current_version(conn, schema) is None and not first_done.is_set():
                    pass
        open_store_once()

    openers = [threading.Thread(target=open_first)]
    openers += [threading.Thread(target=open_other) for _ in range(others)]
    for t in openers:
        t.start()
    for t in openers:
        t.join()
    return opened, errors


@pytest.mark.parametrize("together", [True, False], ids=["together", "as-it-shows"])
def test_stores_opened_at_once_on_an_empty_database_all_open(
    pg_schemas: Schemas, together: bool
) -> None:
    # Several workers started together on a fresh database: the first to open it creates the
    # schema. One that looked while another was half way through its migrations used to find
    # an old version and refuse to open ("run threadlog db upgrade"); one that waited for the
    # other's creation must see it, not create the tables again.
    for _ in range(3):
        schema = pg_schemas.name()
        opened, errors = _open_at_once(pg_schemas.server, schema, 5, together=together)
        assert errors == []
        versions = f"SELECT version FROM {schema}.threadlog_schema_version ORDER BY version"
        assert _sql(pg_schemas.server, versions) == [(v,) for v, _ in MIGRATIONS]
        assert len(_sql(pg_schemas.server, f"SELECT 1 FROM {schema}.threads")) == len(opened) == 6


def test_a_version_1_database_is_upgraded_with_its_threads(pg_schemas: Schemas) -> None:
    """The first real migration: a database of schema 1 (as threadlog 0.x left it) is refused
    until `threadlog db upgrade`, which keeps its threads and adds what version 2 brings."""
    schema = pg_schemas.name()
    url = with_schema(pg_schemas.server, schema)
    version_1 = dict(MIGRATIONS)[1]
    with psycopg.connect(pg_schemas.server, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(f"SET search_path TO {schema}")
        conn.execute(version_1)  # type: ignore[call-overload]
        conn.execute(f"INSERT INTO {schema}.threadlog_schema_version VALUES (1)")
    with pytest.raises(SchemaTooOld, match="threadlog db upgrade"):
        PostgresStore(url, create_schema=False)
    assert upgrade_database(url) == (1, SCHEMA_VERSION)
    with PostgresStore(url, create_schema=False) as store:
        thread = store.create_thread("a", metadata={"app": "x"})
        assert [t.thread_id for t in store.threads(metadata={"app": "x"})] == [thread]
        assert store.delete_thread(thread) and store.deleted(thread)


def test_the_listing_orders_by_activity_and_a_commit_updates_threads_in_place(
    pg_schemas: Schemas,
) -> None:
    """Version 4 indexes the minute of a thread's last record, not its timestamp: a database of
    version 3 upgraded lists its threads in the same order, newest activity first (within a
    minute and across minutes), and the appends' updates of ``threads`` are heap-only (the
    reason for the change: an update that changes no indexed column adds no index entries)."""
    schema = pg_schemas.name()
    url = with_schema(pg_schemas.server, schema)
    with psycopg.connect(pg_schemas.server, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(f"SET search_path TO {schema}")
        for version, sql in MIGRATIONS[:3]:
            conn.execute(sql)  # type: ignore[call-overload]
            conn.execute(f"INSERT INTO {schema}.threadlog_schema_version VALUES ({version})")
        stamps = [  # three in one minute, one a minute earlier, one an hour later, one empty
            ("a", "2026-01-01T10:00:05.000001Z"),
            ("b", "2026-01-01T10:00:59.999999Z"),
            ("c", "2026-01-01T10:00:30.000000Z"),
            ("d", "2026-01-01T09:59:59.999999Z"),
            ("e", "2026-01-01T11:00:00.000000Z"),
            ("f", None),
        ]
        for name, ts in stamps:
            conn.execute(
                f"INSERT INTO {schema}.threads (thread_id, last_ts) VALUES (%s, %s)", (name, ts)
            )
    assert upgrade_database(url) == (3, SCHEMA_VERSION)
    with PostgresStore(url, create_schema=False) as store:
        listed = store.threads(archived=None)
        assert [t.thread_id for t in listed] == ["e", "b", "c", "a", "d", "f"]
        assert [t.thread_id for t in store.threads(limit=2)] == ["e", "b"]
        thread = store.create_thread("alice")
        for i in range(40):
            store.append(thread, "custom.n", {"i": i}, durable=True)
        assert store.threads(limit=1)[0].thread_id == thread
    indexed = _sql(
        pg_schemas.server,
        f"SELECT indexdef FROM pg_indexes WHERE schemaname = '{schema}' AND tablename = 'threads'",
    )
    assert not any("last_ts" in str(row[0]) for row in indexed), indexed
    stats = (
        "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
        f"WHERE schemaname = '{schema}' AND relname = 'threads'"
    )
    deadline = time.monotonic() + 10  # a backend hands on its counts when it ends
    while (updated := _sql(pg_schemas.server, stats)[0])[0] < 40 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert updated[0] >= 40, updated  # type: ignore[operator]
    assert updated[1] >= 0.9 * updated[0], updated  # type: ignore[operator]


# -- group commit -----------------------------------------------------------------------------


def test_concurrent_critical_appends_share_commits(pg_schemas: Schemas) -> None:
    with PostgresStore(pg_schemas.new(), pool_size=4) as store:
        threads = [store.create_thread("a") for _ in range(16)]
        before = store.commits
        start = threading.Barrier(len(threads))

        def writer(thread: str) -> None:
            start.wait()
            for i in range(10):
                store.append(thread, "custom.n", {"i": i}, durable=True)

        workers = [threading.Thread(target=writer, args=(t,)) for t in threads]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        commits = store.commits - before
        assert commits < 160 // 2, f"{commits} commits for 160 critical appends"
        for thread in threads:
            records = store.read(thread)
            assert len(records) == 11
            check_chain(records)


def test_a_commit_wakes_an_event_loop_once_for_all_its_appends(pg_schemas: Schemas) -> None:
    """Concurrent ``aappend`` calls share commits, and each commit resolves all of a loop's
    waiters with one ``call_soon_threadsafe`` (not one wake-up of the loop per append)."""
    with PostgresStore(pg_schemas.new(), commit_lanes=1) as store:
        threads = [store.create_thread("a") for _ in range(16)]

        async def main() -> tuple[int, int]:
            for thread in threads:  # the writers opened, their state read (worker threads)
                await store.aappend(thread, "custom.n", {"i": -1}, durable=True)
            loop = asyncio.get_running_loop()
            calls = 0
            schedule = loop.call_soon_threadsafe

            def counting(*args: Any, **kwargs: Any) -> Any:
                nonlocal calls
                calls += 1
                return schedule(*args, **kwargs)

            loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
            before = store.commits

            async def writer(thread: str) -> None:
                for i in range(5):
                    await store.aappend(thread, "custom.n", {"i": i}, durable=True)

            await asyncio.gather(*(writer(t) for t in threads))
            return calls, store.commits - before

        calls, commits = asyncio.run(main())
        assert commits < 80 // 2, f"{commits} commits for 80 critical appends"
        assert calls == commits, f"{calls} wake-ups of the loop for {commits} commits"
        for thread in threads:
            records = store.read(thread)
            assert len(records) == 7
            check_chain(records)


def test_a_lane_that_finds_no_other_committing_takes_its_share_of_whole_threads() -> None:
    """With two lanes idle, the first takes half of what is queued (whole threads, in order)
    and leaves the rest to the other, so that the two commits run side by side; a small
    queue, or one while a lane commits, is taken whole (but for the threads in flight)."""
    from threadlog.store.postgres.committer import SPLIT, Committer
    from threadlog.store.postgres.writer import Pending

    def refuse() -> psycopg.Connection[Any]:
        raise AssertionError("nothing is committed here")

    committer = Committer(
        refuse,
        channel="c",
        origin="o",
        interval=30,
        on_durable=lambda _t, _r: None,
        on_failure=lambda _e: None,
        lanes=2,
    )

    class Stub:
        def __init__(self, thread_id: str) -> None:
            self.thread_id = thread_id

    stub: Any = None
    writers: list[Any] = [Stub(f"t{i:02}") for i in range(SPLIT * 2)]
    queue = [Pending(stub, b"", w) for w in writers]
    queue.insert(len(queue) - 1, Pending(stub, b"", writers[0]))  # a second append of t00
    try:
        with committer._cond:
            committer._queue = list(queue)
            first = committer._take()
            rest = committer._queue
            threads = {p.writer.thread_id for p in first}
            share = -(-len(queue) // 2)
            assert share <= len(first) <= share + 1 and len(rest) == len(queue) - len(first)
            assert [p for p in queue if p.writer.thread_id in threads] == first  # whole, in order
            assert not threads & {p.writer.thread_id for p in rest}
            second = committer._take()  # a lane commits: the rest is taken whole
            assert second == rest and committer._queue == []
            committer._in_flight.clear()
            committer._queue = small = queue[: SPLIT - 1]
            assert committer._take() == small  # too few to share
    finally:
        with committer._cond:
            committer._queue = []
            committer._in_flight.clear()
        committer.stop()


def test_explicit_ids_and_parents_are_looked_up_one_by_one_not_loaded(
    pg_schemas: Schemas,
) -> None:
    """A writer opened on a long thread holds none of its ids: an explicit id or a parent it
    did not append itself is one indexed lookup (for `aappend`, made off the loop before the
    append), so the first append costs the same on a thread of ten records or a million."""
    url = pg_schemas.new()
    with PostgresStore(url) as store:
        thread = store.create_thread("alice")
        old = [store.append(thread, "custom.n", {"i": i}, durable=False) for i in range(300)]
        store.flush()
    with PostgresStore(url) as store:

        async def main() -> None:
            again = await store.aappend(thread, "custom.n", {"i": 7}, id=old[7].id)
            assert again == old[7]  # a replay of a committed record: the stored one
            with pytest.raises(DuplicateEventConflict):
                await store.aappend(thread, "custom.n", {"i": -7}, id=old[7].id)
            branch = await store.aappend(thread, "custom.n", {"i": "b"}, parent=old[3].id)
            assert branch.parent == old[3].id and branch.ord == 302
            with pytest.raises(UsageError, match="no record"):
                await store.aappend(thread, "custom.n", {}, parent="01900000-0000-7000-8000-0")
            new = await store.aappend(thread, "custom.n", {"i": "n"}, id=old[0].id[:-4] + "beef")
            assert new.ord == 303
            assert (await store.aappend(thread, "custom.n", {"i": "n"}, id=new.id)) == new

        asyncio.run(main())
        assert store.append(thread, "custom.n", {"i": 9}, id=old[9].id) == old[9]
        writer = store._writers[thread]
        assert len(writer._ids) == 2  # the two it appended, never the thread's 300
        assert store.verify(thread).ok and len(store.read(thread)) == 303


def test_buffered_appends_ride_along_with_the_next_commit(pg_schemas: Schemas) -> None:
    with PostgresStore(pg_schemas.new(), commit_interval=30.0) as store:
        thread = store.create_thread("a")
        before = store.commits
        for i in range(50):
            store.append(thread, "custom.n", {"i": i}, durable=False)
        assert len(store.read(thread)) == 1  # not committed yet: not visible
        store.append(thread, "custom.n", {"i": 50}, durable=True)
        assert store.commits - before == 1  # one COMMIT for all 51
        assert len(store.read(thread)) == 52
        store.append(thread, "custom.n", {"i": 51}, durable=False)
        store.flush()
        assert store.commits - before == 2 and len(store.read(thread)) == 53


def test_a_failed_commit_fails_its_appends_and_the_store_goes_on(pg_schemas: Schemas) -> None:
    errors: list[StorageError] = []
    with PostgresStore(pg_schemas.new(), commit_lanes=1) as store:
        store.add_error_listener(errors.append)
        heard: list[Record] = []
        store.add_listener(lambda _t, records: heard.extend(records))
        thread = store.create_thread("a")
        store.append(thread, "custom.n", {"i": 0})
        # the committer's connection dies under it (a server restart, a network cut)
        conn = store._committer._lanes[0].conn
        assert conn is not None
        _sql(pg_schemas.server, f"SELECT pg_terminate_backend({conn.info.backend_pid})")
        with pytest.raises(StorageError, match="commit"):
            store.append(thread, "custom.n", {"i": 1})
        assert len(errors) == 1
        again = store.append(thread, "custom.n", {"i": 2})  # a new connection, the head re-read
        records = store.read(thread)
        assert records[-1] == again and again.ord == 3
        check_chain(records)
        assert heard == records  # the failed append was never heard of


def test_two_commits_in_flight_never_split_a_thread(pg_schemas: Schemas) -> None:
    """Two lanes commit at once, but a thread's later appends wait for its commit in flight
    (they chain onto it): when that commit fails, they fail too, and nothing is half-applied."""
    url = pg_schemas.new()
    errors: list[StorageError] = []
    with PostgresStore(url, commit_lanes=2, commit_interval=30) as store:
        store.add_error_listener(errors.append)
        slow, other = store.create_thread("a"), store.create_thread("b")
        store.append(slow, "custom.n", {"i": 0})
        store.append(other, "custom.n", {"i": 0})
        lanes = store._committer._lanes
        with psycopg.connect(url.split("?")[0]) as blocker:
            # hold the slow thread's lease row: the lane committing it waits on the lock
            schema = url.split("schema=")[1]
            blocker.execute(
                f"SELECT 1 FROM {schema}.leases WHERE thread_id = %s FOR UPDATE", (slow,)
            )
            done: list[BaseException | Record] = []

            def first() -> None:
                try:
                    done.append(store.append(slow, "custom.n", {"i": 1}))
                except BaseException as exc:
                    done.append(exc)

            waiter = threading.Thread(target=first)
            waiter.start()
            deadline = time.monotonic() + 10
            stuck: int | None = None
            while stuck is None and time.monotonic() < deadline:
                pids = [lane.conn.info.backend_pid for lane in lanes if lane.conn is not None]
                rows = blocker.execute(
                    "SELECT pid FROM pg_stat_activity WHERE pid = ANY(%s) "
                    "AND wait_event_type = 'Lock'",
                    (pids,),
                ).fetchall()
                stuck = int(rows[0][0]) if rows else None
            assert stuck is not None, "the slow thread's commit never waited on its lease"
            # its next appends queue behind it; the other thread commits on the other lane
            later = [store.append(slow, "custom.n", {"i": i}, durable=False) for i in (2, 3)]
            assert store.append(other, "custom.n", {"i": 1}).ord == 3
            assert len(store.read(slow)) == 2 and not done  # still in flight
            blocker.execute("SELECT pg_terminate_backend(%s)", (stuck,))
            waiter.join(10)
        assert isinstance(done[0], StorageError) and errors
        store.flush()
        records = store.read(slow)
        assert [r.ord for r in records] == [1, 2]  # neither 3 nor its successors 4, 5
        check_chain(records)
        assert later[-1].ord == 5
        again = store.append(slow, "custom.n", {"i": 4})  # the head read again
        assert again.ord == 3 and store.verify(slow).ok
        assert [r.ord for r in store.read(other)] == [1, 2, 3]


def test_a_commits_notifications_follow_it_in_order_outside_its_transaction(
    pg_schemas: Schemas,
) -> None:
    """The group commit sends no NOTIFY in its transaction (the NOTIFY lock, held until the
    flush, would make the lanes' commits wait for each other's); the sender sends each
    commit's notifications after it, in order, and a failed send loses them without
    raising (the records are committed: readers poll)."""
    from threadlog.store.postgres.notify import Sender
    from threadlog.store.postgres.projections import FENCED_COMMIT

    assert "notify" not in FENCED_COMMIT.lower()
    url = pg_schemas.new()
    channel = "tl_test_sender"
    with psycopg.connect(pg_schemas.server, autocommit=True) as listener:
        listener.execute(f'LISTEN "{channel}"')
        sender = Sender(lambda: psycopg.connect(pg_schemas.server), channel)
        sender.send(["a 1 1 x", "b 2 3 x"])
        sender.send(["a 2 2 x"])
        sender.stop()  # sends what is queued first
        heard = [n.payload for n in listener.notifies(timeout=2, stop_after=3)]
        assert heard == ["a 1 1 x", "b 2 3 x", "a 2 2 x"] and sender.sent == 3

        def broken() -> psycopg.Connection[Any]:
            raise psycopg.OperationalError("the server is away")

        lost = Sender(broken, channel)
        lost.send(["c 1 1 x"])
        lost.stop()
        assert lost.sent == 0

    with PostgresStore(url) as store:  # a store's commits are heard (after them)
        thread = store.create_thread("a")
        listen = url.split("?")[0]
        with psycopg.connect(listen, autocommit=True) as listener:
            listener.execute(f'LISTEN "{store._target.channel}"')
            record = store.append(thread, "custom.n", {"i": 0}, durable=True)
            heard = [n.payload for n in listener.notifies(timeout=5, stop_after=1)]
        assert heard == [f"{thread} {record.ord} {record.ord} {store.holder}"]


# -- leases and fencing -----------------------------------------------------------------------


def test_a_lease_is_exclusive_until_released_or_expired(pg_schemas: Schemas) -> None:
    url = pg_schemas.new()
    with (
        PostgresStore(url, lease_duration=1.5, renew_interval=0.1) as one,
        PostgresStore(url, lease_duration=0.5, renew_interval=60) as two,
    ):
        thread = one.create_thread("a")
        one.append(thread, "custom.n", {"who": 1})
        with pytest.raises(LeaseHeld) as info:
            two.append(thread, "custom.n", {"who": 2})
        assert info.value.holder == one.holder
        time.sleep(1.8)  # past its first expiry, renewed by one's background thread: still one's
        with pytest.raises(LeaseHeld):
            two.acquire(thread)
        one.release(thread)
        two.append(thread, "custom.n", {"who": 2})  # free at once after a release
        first_token = two._writers[thread].token
        time.sleep(0.7)  # two renews only every minute: its lease expires
        one.append(thread, "custom.n", {"who": 1})  # taken over, with a larger token
        assert one._writers[thread].token > first_token
        with pytest.raises(LeaseLost):  # the database refuses the stale token
            two.append(thread, "turn.started", {"turn_id": "t9", "input": "stale"})
        with pytest.raises(LeaseLost):  # and every later append too, until released
            two.append(thread, "custom.n", {"who": 2}, durable=False)
        assert two.lost(thread) is not None
        records = one.read(thread)
        check_chain(records)
        assert [r.data.get("who") for r in records[1:]] == [1, 2, 1]
        info = one.thread_info(thread)  # the refused record changed no projection either
        assert (info.last_ord, info.turns, info.status) == (4, 0, "idle")
        assert one.turns(thread) == []
        two.release(thread)  # acknowledges the loss; the next append would take it again
        assert two.lost(thread) is None


def test_a_stale_token_in_a_shared_commit_refuses_its_own_thread_only(
    pg_schemas: Schemas,
) -> None:
    """One commit carries a thread whose lease passed on and one whose did not: the first's
    record is refused (its writer lost), the other's committed."""
    url = pg_schemas.new()
    with (
        PostgresStore(url, lease_duration=0.5, renew_interval=60, commit_interval=30) as two,
        PostgresStore(url) as one,
    ):
        stale, fine = two.create_thread("a"), two.create_thread("b")
        two.append(stale, "custom.n", {"i": 0})
        two.append(fine, "custom.n", {"i": 0})
        time.sleep(0.7)  # two renews only every minute: both its leases expire
        one.acquire(stale)  # taken over, with a larger token; fine's is still two's
        before = two.commits
        two.append(stale, "custom.n", {"i": 1}, durable=False)
        two.append(fine, "custom.n", {"i": 1}, durable=False)
        two.flush()
        assert two.commits - before == 1  # one transaction for both
        assert isinstance(two.lost(stale), LeaseLost) and two.lost(fine) is None
        assert [r.ord for r in one.read(stale)] == [1, 2]
        records = two.read(fine)
        assert [r.ord for r in records] == [1, 2, 3]
        check_chain(records)


def test_the_renewer_notices_a_lost_lease(pg_schemas: Schemas) -> None:
    url = pg_schemas.new()
    with (
        PostgresStore(url, lease_duration=0.3, renew_interval=60) as one,
        PostgresStore(url, lease_duration=5) as two,
    ):
        thread = one.create_thread("a")
        one.acquire(thread)
        time.sleep(0.5)
        two.acquire(thread)
        one.renew_leases()
        assert isinstance(one.lost(thread), LeaseLost)
        assert two.holder in str(one.lost(thread))
        with pytest.raises(LeaseLost):
            one.append(thread, "custom.n", {})


# -- live fan-out ------------------------------------------------------------------------------


def _follow(
    store: PostgresStore, thread: str, n: int, interval: float
) -> tuple[list[Record], threading.Event]:
    """Follow the thread from ord 1 in a thread of its own until ``n`` records came."""
    seen: list[Record] = []
    done = threading.Event()

    def consume() -> None:
        for record in store.follow(thread, 1, interval=interval):
            seen.append(record)
            if len(seen) == n:
                break
        done.set()

    threading.Thread(target=consume, daemon=True).start()
    return seen, done


def test_follow_is_woken_by_another_process_store(pg_schemas: Schemas) -> None:
    url = pg_schemas.new()
    with PostgresStore(url) as reader, PostgresStore(url) as writer:
        thread = writer.create_thread("a")
        seen, done = _follow(reader, thread, 3, interval=30.0)  # only a notification can wake it
        time.sleep(0.2)
        started = time.monotonic()
        for i in range(3):
            writer.append(thread, "custom.n", {"i": i}, durable=True)
        assert done.wait(10)
        assert time.monotonic() - started < 5
        assert [r.ord for r in seen] == [2, 3, 4]


def test_a_lost_notification_is_made_up_by_the_poll(pg_schemas: Schemas) -> None:
    url = pg_schemas.new()
    with PostgresStore(url) as reader, PostgresStore(url) as writer:
        thread = writer.create_thread("a")
        # the writer's notifications go to a channel nobody listens on: every one is lost
        writer._committer._channel = "nobody_listens"
        seen, done = _follow(reader, thread, 2, interval=0.1)
        for i in range(2):
            writer.append(thread, "custom.n", {"i": i}, durable=True)
        assert done.wait(10)
        assert [r.ord for r in seen] == [2, 3]


def test_a_watched_thread_delivers_other_processes_records_to_listeners(
    pg_schemas: Schemas,
) -> None:
    url = pg_schemas.new()
    with PostgresStore(url) as replica, PostgresStore(url) as worker:
        thread = worker.create_thread("a")
        heard: list[Record] = []
        got = threading.Event()

        def listener(thread_id: str, records: list[Record]) -> None:
            heard.extend(records)
            if len(heard) >= 3:
                got.set()

        replica.add_listener(listener)
        replica.watch(thread)
        replica._notifier.wait_ready(5)  # type: ignore[union-attr]
        for i in range(3):
            worker.append(thread, "custom.n", {"i": i}, durable=True)
        assert got.wait(10)
        assert heard == worker.read(thread)[1:]
        replica.unwatch(thread)
        replica.remove_listener(listener)


def test_max_batch_one_is_one_commit_per_append(pg_schemas: Schemas) -> None:
    with PostgresStore(pg_schemas.new(), max_batch=1, commit_interval=30) as store:
        thread = store.create_thread("a")
        before = store.commits
        for i in range(5):
            store.append(thread, "custom.n", {"i": i}, durable=False)
        store.append(thread, "custom.n", {"i": 5}, durable=True)
        assert store.commits - before == 6
        check_chain(store.read(thread))


def test_driver_errors_are_translated_and_the_pool_recovers(pg_schemas: Schemas) -> None:
    with PostgresStore(pg_schemas.new(), pool_size=1) as store:
        thread = store.create_thread("a")
        with store._pool.connection() as conn:
            pid = conn.info.backend_pid
        _sql(pg_schemas.server, f"SELECT pg_terminate_backend({pid})")
        with pytest.raises(StorageError):  # the pooled connection died: translated
            store.read(thread)
        assert len(store.read(thread)) == 1  # the pool replaced it
        store.append(thread, "custom.n", {})  # takes the lease on a sound connection
        assert store.verify(thread).ok


def test_a_server_whose_commits_are_not_durable_is_refused(pg_schemas: Schemas) -> None:
    url = pg_schemas.new() + "&options=-c%20synchronous_commit%3Doff"
    with pytest.raises(StorageError, match="synchronous_commit=off"):
        PostgresStore(url)
    with PostgresStore(pg_schemas.new() + "&options=-c%20statement_timeout%3D5000") as store:
        with store._pool.connection() as conn:  # the URL's own options are kept
            assert conn.execute("SHOW statement_timeout").fetchone() == ("5s",)
            assert conn.execute("SHOW search_path").fetchone() == (store._target.schema,)


# -- moving threads between backends ------------------------------------------------------------


def test_a_thread_moves_between_backends_with_its_hashes(pg_schemas: Schemas, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from pathlib import Path

    from threadlog.errors import IntegrityError, UsageError
    from threadlog.store.embedded import EmbeddedStore

    with EmbeddedStore(tmp_path / "home") as local, PostgresStore(pg_schemas.new()) as remote:
        source = local.create_thread("alice", title="t")
        local.append(source, "turn.started", {"turn_id": "t1", "input": "hi"})
        local.append(source, "custom.n", {"é": [1, 2.5, None]})
        child = local.fork(source, 2)
        local.append(child, "custom.n", {"in": "child"})
        local.flush()
        for thread in (source, child):
            lines = Path(local.path_of(thread)).read_bytes().splitlines(keepends=True)
            assert remote.import_thread(lines) == thread
            assert remote.read(thread) == local.read(thread)  # same ids, times, hashes
            assert remote.verify(thread).ok
            assert b"".join(remote.thread_lines(thread)) == b"".join(lines)
        assert remote.thread_info(source).turns == 1
        remote.append(source, "turn.ended", {"turn_id": "t1", "outcome": "completed"})
        assert remote.verify(source).ok
        with pytest.raises(UsageError, match="already holds"):
            remote.import_thread(lines)
        other = local.create_thread("bob")
        local.append(other, "custom.n", {"v": 1})
        local.flush()
        lines = Path(local.path_of(other)).read_bytes().splitlines(keepends=True)
        tampered = [lines[0], lines[1].replace(b'"v":1', b'"v":2')]
        with pytest.raises(IntegrityError):
            remote.import_thread(tampered)
        assert not remote.exists(other)  # nothing written


def test_a_long_copied_thread_is_kept_with_a_checkpoint(
    pg_schemas: Schemas,
    tmp_path,
    monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
) -> None:
    """`adopt_thread` keeps a checkpoint of a thread of `CHECKPOINT_FROM` records or more,
    as a writer letting it go would: its first writer starts there, not from ord 1."""
    from threadlog.store.copy import copy_thread
    from threadlog.store.embedded import EmbeddedStore
    from threadlog.store.postgres import store as store_module

    monkeypatch.setattr(store_module, "CHECKPOINT_FROM", 50)
    url = pg_schemas.new()
    with EmbeddedStore(tmp_path / "home") as local, PostgresStore(url) as remote:
        long, short = local.create_thread("a"), local.create_thread("a")
        local.append(long, "turn.started", {"turn_id": "t1", "input": "go"})
        for i in range(80):
            local.append(long, "custom.n", {"i": i}, durable=False)
        local.flush()
        for thread in (long, short):
            assert copy_thread(local, remote, thread).status == "copied"
    rows = _sql(
        pg_schemas.server, f"SELECT thread_id, ord FROM {url.rsplit('=', 1)[1]}.checkpoints"
    )
    assert rows == [(long, 82)]
    with PostgresStore(url) as remote:
        ended = remote.append(long, "turn.ended", {"turn_id": "t1", "outcome": "completed"})
        assert ended.ord == 83 and remote.verify(long).ok


def test_metrics_see_appends_and_commits(pg_schemas: Schemas) -> None:
    from threadlog.observe import metrics as observe_metrics

    sink = observe_metrics.install()
    try:
        with PostgresStore(pg_schemas.new()) as store:
            thread = store.create_thread("a")
            store.append(thread, "custom.n", {}, durable=True)
            store.append(thread, "custom.n", {}, durable=False)
            store.flush()
        assert sink.count("threadlog_append_seconds") == 2
        assert sink.count("threadlog_fsync_seconds") >= 1
        assert sink.count("threadlog_commit_records") >= 1
    finally:
        observe_metrics.uninstall()


# -- retention ----------------------------------------------------------------------------


def test_a_thread_another_store_writes_is_not_deleted_under_it(pg_schemas: Schemas) -> None:
    url = pg_schemas.new()
    with PostgresStore(url) as a, PostgresStore(url) as b:
        thread = a.create_thread("a")
        a.append(thread, "custom.n", {"i": 1}, durable=True)  # a holds the lease now
        with pytest.raises(LeaseHeld):
            b.delete_thread(thread)
        assert b.exists(thread) and not b.deleted(thread)
        a.release(thread)
        assert b.delete_thread(thread) is True
        assert not a.exists(thread) and a.deleted(thread)
        assert a.threads(archived=None) == []
        with pytest.raises(ThreadNotFound):
            a.append(thread, "custom.n", {"i": 2}, durable=True)
        with pytest.raises(ThreadExists, match="deleted"):
            a.create_thread("a", thread_id=thread)


def test_a_thread_adopted_a_few_rows_a_statement_projects_as_one_statement(
    pg_schemas: Schemas,
    tmp_path,
    monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
) -> None:
    """`_insert_new_thread` inserts `IMPORT_ROWS` rows a statement in one transaction: a
    turn and its tool calls split over statements project exactly as in one."""
    from threadlog.importers import import_paths, source_format
    from threadlog.store.embedded import EmbeddedStore
    from threadlog.store.postgres import logs

    from ..importers._helpers import FIXTURES

    with EmbeddedStore(tmp_path / "home") as local:
        import_paths(local, source_format("claude-code"), [str(FIXTURES / "claude-code")])
        threads = {t: local.read(t) for t in local.thread_ids()}
    assert max(len(r) for r in threads.values()) > 6

    def adopted(rows_a_statement: int) -> list[Any]:
        monkeypatch.setattr(logs, "IMPORT_ROWS", rows_a_statement)
        with PostgresStore(pg_schemas.new()) as remote:
            for records in threads.values():
                assert remote.adopt_thread(records)
                assert remote.verify(records[0].thread).ok
            return [
                (remote.thread_info(t), remote.turns(t), remote.tool_calls(t), remote.read(t) == r)
                for t, r in sorted(threads.items())
            ]

    assert adopted(2) == adopted(100_000)


def test_a_thread_adopted_in_pages_that_appears_meanwhile_is_compared(
    pg_schemas: Schemas, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`adopt_pages` of a thread another copy adopts between its look and its INSERT: the
    same records are a re-run (False), as `adopt_thread` answers, not a `ConflictError`;
    other content is refused. The store's listeners hear of a paged adoption whole."""
    from threadlog.errors import ConflictError
    from threadlog.store.inmemory import MemoryStore

    with MemoryStore() as source, PostgresStore(pg_schemas.new()) as remote:
        same, other = source.create_thread("u"), source.create_thread("u")
        for thread in (same, other):
            for i in range(10):
                source.append(thread, "custom.x", {"i": i})
        exists = remote.exists
        meanwhile: dict[str, list[Record]] = {}

        def racing(thread_id: str) -> bool:
            found = exists(thread_id)
            held = meanwhile.pop(thread_id, None)
            if held is not None:
                assert remote.adopt_thread(held) is True  # another copy, faster
            return found

        monkeypatch.setattr(remote, "exists", racing)
        records = source.read(same)
        meanwhile[same] = records
        assert remote.adopt_pages(iter([records[:4], records[4:]])) is False
        assert remote.read(same) == records
        others = source.read(other)
        meanwhile[other] = others[:6]
        with pytest.raises(ConflictError, match="ord"):
            remote.adopt_pages(iter([others[:4], others[4:]]))
        assert remote.read(other) == others[:6]
        heard: list[Record] = []
        remote.add_listener(lambda thread_id, got: heard.extend(got))
        third = source.create_thread("u")
        for i in range(5):
            source.append(third, "custom.x", {"i": i})
        assert remote.adopt_pages(iter([source.read(third)[:2], source.read(third)[2:]]))
        assert heard == source.read(third)


def test_a_copy_that_fails_midway_lets_the_sources_follow_go(
    pg_schemas: Schemas, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`copy_thread` reads the source with `Store.follow`; a destination that gives up after
    a page leaves no follower registered on the source (it stayed for as long as the error,
    its traceback holding the generator, was kept: `copy_threads` keeps each one)."""
    from threadlog.store import copy as copy_module
    from threadlog.store.copy import copy_thread
    from threadlog.store.inmemory import MemoryStore

    monkeypatch.setattr(copy_module, "PAGE", 3)
    with PostgresStore(pg_schemas.new()) as source, MemoryStore() as dest:
        thread = source.create_thread("u")
        for i in range(10):
            source.append(thread, "custom.x", {"i": i}, durable=False)
        source.flush()

        def gives_up(pages: Any) -> bool:
            next(iter(pages))
            raise RuntimeError("the destination gave up")

        monkeypatch.setattr(dest, "adopt_pages", gives_up)
        with pytest.raises(RuntimeError) as failed:
            copy_thread(source, dest, thread)
        assert failed.value.__traceback__ is not None
        assert source._waiters == {}
