"""The stores `peers.py` measures, each behind the same small interface (`Adapter`).

Theory of operation: a workload never knows which store it drives. It asks an adapter for
sessions (``new_session``), appends 500-byte JSON events to them through the adapter's
synchronous API (``append``) or its asyncio API (``aappend``, between ``astart`` and
``astop``), and reads each session back (``load``) to check that every event it appended is
there, in order, unchanged. An adapter opens its store in a directory it is given
(``open``), so that a fresh process can open the same directory again and load a session by
its key (the cold load). Each peer's library is imported inside ``open`` only: this module
imports nothing but the standard library and orjson, so a missing peer is reported by
`missing` (its import fails) instead of breaking the run, and the cold-load child measures the
peer's own import time.

Every durable adapter uses its store the way its documentation shows, with its most durable
setting, named in ``setting``; SQLite is at its default ``synchronous=FULL`` (this build's
default, checked by `peers.py`), which in WAL mode syncs the WAL at every commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import sqlite3
import uuid
from typing import Any, ClassVar

import orjson

Data = dict[str, Any]


class Adapter:
    """One store. Sessions are named by string keys; the adapter holds their handles."""

    name: ClassVar[str]
    package: ClassVar[str]  # what to install (an extra of threadlog[bench])
    modules: ClassVar[tuple[str, ...]]  # what it imports (its import time, its presence)
    setting: ClassVar[str]  # its durability setting, as measured
    durable: ClassVar[bool] = True
    has_sync: ClassVar[bool] = True
    has_async: ClassVar[bool] = False
    retries = 0  # appends the store refused ("database is locked") and the adapter retried
    prefill_on_tmpfs: ClassVar[bool] = False  # too slow to write 50,000 events on the disk

    def open(self, directory: str) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Close the store (every acknowledged append stays durable)."""

    def new_session(self, i: int) -> str:
        raise NotImplementedError

    def session(self, key: str) -> None:
        """Take up a session another process created (the cold load)."""

    def append(self, key: str, data: Data) -> None:
        raise NotImplementedError

    async def aappend(self, key: str, data: Data) -> None:
        raise NotImplementedError

    async def astart(self) -> None:
        """Called on the event loop before ``aappend`` is used on it."""

    async def astop(self) -> None:
        """Called on the event loop after the last ``aappend`` on it."""

    def load(self, key: str) -> list[Data]:
        """Every event of the session, in order, as the data appended."""
        raise NotImplementedError

    def prefill(self, key: str, datas: list[Data]) -> None:
        """Write ``datas`` to the session, as fast as the API allows (set-up, not measured)."""
        for data in datas:
            self.append(key, data)


def missing(adapter: type[Adapter]) -> str | None:
    """Why ``adapter`` cannot run here (its import error), or None."""
    for module in adapter.modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            return f"{adapter.package} is not installed ({exc}): pip install 'threadlog[bench]'"
    return None


# -- threadlog ----------------------------------------------------------------------------------


class Threadlog(Adapter):
    name = "threadlog"
    package = "threadlog"
    modules = ("threadlog", "threadlog.store.embedded")
    setting = "embedded store, `append(..., durable=True)`: returns once fdatasync'd"
    has_async = True

    def open(self, directory: str) -> None:
        import threadlog

        self._stack = contextlib.ExitStack()
        self.store = self._stack.enter_context(
            threadlog.open_store(os.path.join(directory, "threadlog"))
        )

    def close(self) -> None:
        self._stack.close()

    def new_session(self, i: int) -> str:
        return self.store.create_thread("bench")

    def append(self, key: str, data: Data) -> None:
        self.store.append(key, "custom.bench", data, durable=True)

    async def aappend(self, key: str, data: Data) -> None:
        await self.store.aappend(key, "custom.bench", data, durable=True)

    def load(self, key: str) -> list[Data]:
        # read() checks each record (its hash, or its chunk's digest) and the chain as it goes.
        return [r.data for r in self.store.read(key) if r.type == "custom.bench"]

    def prefill(self, key: str, datas: list[Data]) -> None:
        for data in datas:
            self.store.append(key, "custom.bench", data, durable=False)
        self.store.flush()


# -- the raw limits -----------------------------------------------------------------------------


class RawJsonl(Adapter):
    """One JSONL file per session: ``write`` + ``fsync`` every ``every`` records."""

    name = "raw JSONL, fsync per record"
    package = "(stdlib)"
    modules = ()
    setting = "os.write + os.fsync per record"
    every = 1

    def open(self, directory: str) -> None:
        self.dir = os.path.join(directory, "raw")
        os.makedirs(self.dir, exist_ok=True)
        self.fds: dict[str, int] = {}
        self.counts: dict[str, int] = {}

    def close(self) -> None:
        for fd in self.fds.values():
            os.fsync(fd)
            os.close(fd)
        self.fds.clear()

    def new_session(self, i: int) -> str:
        key = f"s{i}"
        self.fds[key] = os.open(
            os.path.join(self.dir, key + ".jsonl"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600
        )
        self.counts[key] = 0
        dfd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        return key

    def append(self, key: str, data: Data) -> None:
        fd = self.fds[key]
        os.write(fd, orjson.dumps(data) + b"\n")
        self.counts[key] += 1
        if self.counts[key] % self.every == 0:
            os.fsync(fd)

    def load(self, key: str) -> list[Data]:
        with open(os.path.join(self.dir, key + ".jsonl"), "rb") as f:
            return [orjson.loads(line) for line in f]

    def prefill(self, key: str, datas: list[Data]) -> None:
        os.write(self.fds[key], b"".join(orjson.dumps(d) + b"\n" for d in datas))
        os.fsync(self.fds[key])


class RawJsonl100(RawJsonl):
    name = "raw JSONL, fsync per 100"
    setting = "os.write per record, os.fsync per 100 records (not durable per append)"
    durable = False
    every = 100


class RawSqlite(Adapter):
    """A table ``events(session, n, data)``; one transaction per record."""

    name = "raw SQLite WAL, txn per record"
    package = "(stdlib)"
    modules = ()
    setting = "journal_mode=WAL, synchronous=FULL, one INSERT + COMMIT per record"

    def open(self, directory: str) -> None:
        self.path = os.path.join(directory, "raw.sqlite")
        self.conns: dict[str, sqlite3.Connection] = {}
        with contextlib.closing(self._connect()) as conn:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS events (id INTEGER PRIMARY KEY, session TEXT NOT NULL,"
                " data TEXT NOT NULL)"
            )
            conn.execute("CREATE INDEX IF NOT EXISTS by_session ON events (session, id)")

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=60, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        return conn

    def close(self) -> None:
        for conn in self.conns.values():
            conn.close()
        self.conns.clear()

    def new_session(self, i: int) -> str:
        key = f"s{i}"
        self.conns[key] = self._connect()  # a connection per writer
        return key

    def session(self, key: str) -> None:
        self.conns[key] = self._connect()

    def append(self, key: str, data: Data) -> None:
        conn = self.conns[key]
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "INSERT INTO events (session, data) VALUES (?, ?)", (key, orjson.dumps(data).decode())
        )
        conn.execute("COMMIT")

    def load(self, key: str) -> list[Data]:
        rows = self.conns[key].execute(
            "SELECT data FROM events WHERE session = ? ORDER BY id", (key,)
        )
        return [orjson.loads(row[0]) for row in rows]

    def prefill(self, key: str, datas: list[Data]) -> None:
        conn = self.conns[key]
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(
            "INSERT INTO events (session, data) VALUES (?, ?)",
            [(key, orjson.dumps(d).decode()) for d in datas],
        )
        conn.execute("COMMIT")


# -- the peers ----------------------------------------------------------------------------------


class LangGraph(Adapter):
    """A checkpoint per event (its data as a channel value), as a graph's step writes one;
    a session's events are its checkpoint history (``list``). The sync API is `SqliteSaver`
    (one connection, shared under its lock, as its docs show); the asyncio API is
    `AsyncSqliteSaver` (aiosqlite) on the same file."""

    name = "LangGraph SqliteSaver"
    package = "langgraph-checkpoint-sqlite"
    modules = ("langgraph.checkpoint.sqlite", "langgraph.checkpoint.sqlite.aio")
    setting = "SqliteSaver: journal_mode=WAL (set by setup()), synchronous=FULL, a commit per put"
    has_async = True

    def open(self, directory: str) -> None:
        from langgraph.checkpoint.sqlite import SqliteSaver

        self.path = os.path.join(directory, "langgraph.sqlite")
        self.conn = sqlite3.connect(self.path, check_same_thread=False)
        self.conn.execute("PRAGMA synchronous=FULL")
        self.saver = SqliteSaver(self.conn)
        self.saver.setup()
        self.configs: dict[str, Any] = {}
        self.steps: dict[str, int] = {}

    def close(self) -> None:
        self.conn.close()

    def new_session(self, i: int) -> str:
        key = str(uuid.uuid4())
        self.session(key)
        return key

    def session(self, key: str) -> None:
        self.configs[key] = {"configurable": {"thread_id": key, "checkpoint_ns": ""}}
        self.steps[key] = 0

    def _checkpoint(self, key: str, data: Data) -> tuple[Any, Any, Any]:
        from langgraph.checkpoint.base import empty_checkpoint

        self.steps[key] = k = self.steps[key] + 1
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"event": data}
        checkpoint["channel_versions"] = {"event": k}
        return checkpoint, {"source": "loop", "step": k}, {"event": k}

    def append(self, key: str, data: Data) -> None:
        checkpoint, metadata, versions = self._checkpoint(key, data)
        self.configs[key] = self.saver.put(self.configs[key], checkpoint, metadata, versions)

    async def astart(self) -> None:
        import aiosqlite
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        self.aconn = await aiosqlite.connect(self.path)
        await self.aconn.execute("PRAGMA synchronous=FULL")
        self.asaver = AsyncSqliteSaver(self.aconn)
        await self.asaver.setup()

    async def astop(self) -> None:
        await self.aconn.close()

    async def aappend(self, key: str, data: Data) -> None:
        checkpoint, metadata, versions = self._checkpoint(key, data)
        self.configs[key] = await self.asaver.aput(
            self.configs[key], checkpoint, metadata, versions
        )

    def load(self, key: str) -> list[Data]:
        config = {"configurable": {"thread_id": key, "checkpoint_ns": ""}}
        history = list(self.saver.list(config))  # newest first
        return [t.checkpoint["channel_values"]["event"] for t in reversed(history)]

    def prefill(self, key: str, datas: list[Data]) -> None:
        self.conn.execute("PRAGMA synchronous=OFF")  # set-up only: the file is synced below
        for data in datas:
            self.append(key, data)
        self.conn.execute("PRAGMA synchronous=FULL")
        self.conn.execute("PRAGMA wal_checkpoint(FULL)")


class OpenAIAgents(Adapter):
    """`SQLiteSession` (asyncio only: each call runs on a worker thread): one per session,
    all on one database file, each event one item of ``add_items``."""

    name = "OpenAI Agents SQLiteSession"
    package = "openai-agents"
    modules = ("agents.memory.sqlite_session",)
    setting = "journal_mode=WAL (set per connection), SQLite's default synchronous=FULL"
    has_sync = False
    has_async = True

    def open(self, directory: str) -> None:
        from agents.memory.sqlite_session import SQLiteSession

        self._cls = SQLiteSession
        self.path = os.path.join(directory, "agents.sqlite")
        self.sessions: dict[str, Any] = {}

    def close(self) -> None:
        for s in self.sessions.values():
            s.close()

    def new_session(self, i: int) -> str:
        key = f"s{i}"
        self.session(key)
        return key

    def session(self, key: str) -> None:
        self.sessions[key] = self._cls(key, self.path)

    async def aappend(self, key: str, data: Data) -> None:
        await self.sessions[key].add_items([data])

    def load(self, key: str) -> list[Data]:
        return list(asyncio.run(self.sessions[key].get_items()))

    def prefill(self, key: str, datas: list[Data]) -> None:
        asyncio.run(self.sessions[key].add_items(datas))


class AdkSqlite(Adapter):
    """`SqliteSessionService` (asyncio only; aiosqlite, a connection per call): one service,
    a session per writer, each event an `Event` carrying the data as ``custom_metadata``."""

    name = "Google ADK SqliteSessionService"
    package = "google-adk"
    modules = ("google.adk.sessions.sqlite_session_service", "google.adk.events.event")
    setting = "SQLite defaults: rollback journal (DELETE), synchronous=FULL, a commit per event"
    has_sync = False
    has_async = True
    prefill_on_tmpfs = True  # ~7 ms per event on the disk: 50,000 would take minutes

    def _service(self, directory: str) -> Any:
        from google.adk.sessions.sqlite_session_service import SqliteSessionService

        return SqliteSessionService(os.path.join(directory, "adk.sqlite"))

    def open(self, directory: str) -> None:
        from google.adk.events.event import Event

        self._event = Event
        self.service = self._service(directory)
        self.sessions: dict[str, Any] = {}

    def new_session(self, i: int) -> str:
        key = f"s{i}"
        self.sessions[key] = asyncio.run(
            self.service.create_session(app_name="bench", user_id="user", session_id=key)
        )
        return key

    def session(self, key: str) -> None:
        pass

    async def aappend(self, key: str, data: Data) -> None:
        event = self._event(author="user", invocation_id="bench", custom_metadata=data)
        for attempt in range(1000):
            try:
                await self.service.append_event(self.sessions[key], event)
                return
            except sqlite3.OperationalError as exc:
                # Concurrent writers on its rollback journal (one writer, waiting out every
                # reader): the 5 s busy timeout expires, or SQLite fails one side of a lock
                # deadlock at once. Nothing was written (the transaction rolled back; the
                # session object is updated after the commit only), so an application
                # retries, as this does, counted.
                if "locked" not in str(exc) or attempt == 999:
                    raise
                self.retries += 1
                await asyncio.sleep(0.001)

    def load(self, key: str) -> list[Data]:
        got = asyncio.run(
            self.service.get_session(app_name="bench", user_id="user", session_id=key)
        )
        return [e.custom_metadata for e in got.events]

    def prefill(self, key: str, datas: list[Data]) -> None:
        async def fill() -> None:
            for data in datas:
                await self.aappend(key, data)

        asyncio.run(fill())


class AdkMemory(AdkSqlite):
    name = "Google ADK InMemorySessionService"
    modules = ("google.adk.sessions.in_memory_session_service", "google.adk.events.event")
    setting = "in memory (not durable; for reference)"
    durable = False

    def _service(self, directory: str) -> Any:
        from google.adk.sessions.in_memory_session_service import InMemorySessionService

        return InMemorySessionService()


class EventSourcing(Adapter):
    """eventsourcing's persistence layer: the `SQLiteApplicationRecorder` an `Application`
    writes through (``PERSISTENCE_MODULE=eventsourcing.sqlite``), one `StoredEvent` per
    event (its state the event's JSON), a session being one aggregate's sequence."""

    name = "eventsourcing SQLite recorder"
    package = "eventsourcing"
    modules = ("eventsourcing.sqlite", "eventsourcing.persistence")
    setting = "SQLiteApplicationRecorder: journal_mode=WAL, SQLite's default synchronous=FULL"

    def open(self, directory: str) -> None:
        from eventsourcing.persistence import InfrastructureFactory, StoredEvent

        self._stored = StoredEvent
        env = {
            "PERSISTENCE_MODULE": "eventsourcing.sqlite",
            "SQLITE_DBNAME": os.path.join(directory, "eventsourcing.sqlite"),
        }
        self.factory = InfrastructureFactory.construct(env=env)
        self.recorder = self.factory.application_recorder()
        self.versions: dict[str, int] = {}

    def close(self) -> None:
        self.factory.close()

    def new_session(self, i: int) -> str:
        key = str(uuid.uuid4())
        self.versions[key] = 0
        return key

    def append(self, key: str, data: Data) -> None:
        self.versions[key] = v = self.versions[key] + 1
        event = self._stored(
            originator_id=key, originator_version=v, topic="bench:Event", state=orjson.dumps(data)
        )
        self.recorder.insert_events([event])

    def load(self, key: str) -> list[Data]:
        return [orjson.loads(e.state) for e in self.recorder.select_events(key)]

    def prefill(self, key: str, datas: list[Data]) -> None:
        events = [
            self._stored(
                originator_id=key,
                originator_version=v,
                topic="bench:Event",
                state=orjson.dumps(d),
            )
            for v, d in enumerate(datas, start=1)
        ]
        self.recorder.insert_events(events)


ADAPTERS: tuple[type[Adapter], ...] = (
    RawJsonl,
    RawJsonl100,
    RawSqlite,
    Threadlog,
    LangGraph,
    OpenAIAgents,
    EventSourcing,
    AdkSqlite,
    AdkMemory,
)
"""In report order; the first is the raw limit every ratio is against."""
