"""Critical appends on PostgreSQL: threadlog's group commit against one commit per append.

64 writers (OS threads), each appending to its own thread, on the local PostgreSQL server:

(a) **threadlog**: ``store.append(thread, "custom.bench", data, durable=True)`` through
    threadlog's PostgreSQL store (``open_store("postgresql://…")``), whose group commit lets
    concurrent critical appends share one transaction.
(b) **baseline**: the same records (envelope built and hashed the same way) inserted with plain
    psycopg into a table of the same shape, one ``INSERT`` and one ``COMMIT`` per append, each
    writer on its own connection: what an application writing its own log would do, with
    psycopg's default transactions (``BEGIN``, ``INSERT``, ``COMMIT``: three round trips);
    (b') ``baseline-autocommit``: the ``INSERT`` alone, committed as it runs (one round trip).
(c) **LangGraph**: ``PostgresSaver.put`` (``langgraph-checkpoint-postgres``), each writer on
    its own connection and its own ``thread_id``, one checkpoint per append carrying the same
    data as a channel value (stored as a blob, as a graph's state is).

Each round runs (b), (a), (c) one after the other on fresh databases, and every ratio is
against (b) *of the same round*; the table shows the median and [min–max] over the rounds.
Latency is per append (call to return), p50 and p99 over every append of the round. Events
carry 500 bytes of data (``{"text": 480 × "x", "n": i}``), as in the other benchmarks.

Every database is created under a unique name and dropped afterwards, so the benchmark can
share a server. The DSN of a database to connect to first (to create the others) comes from
``--dsn`` or ``$THREADLOG_BENCH_DSN`` (default: the local server's ``test`` database as
``postgres``). Install the peer for (c) into the virtual environment, not as a dependency:
``.venv/bin/pip install langgraph-checkpoint-postgres`` (it is skipped if missing).

Usage::

    .venv/bin/python benchmarks/bench_postgres.py            # --quick for a smoke run
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import secrets
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

from threadlog._clock import new_id, rfc3339, wall_ns
from threadlog.model import codec
from threadlog.model.envelope import encode_record

DATA = {"text": "x" * 480, "n": 0}
DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"

BASELINE_DDL = """
CREATE TABLE events (
    thread_id text NOT NULL,
    ord       bigint NOT NULL CHECK (ord >= 1),
    id        text NOT NULL,
    writer    text NOT NULL,
    parent    text,
    ts        text NOT NULL,
    type      text NOT NULL,
    v         integer NOT NULL,
    prev      text,
    hash      text NOT NULL,
    line      bytea NOT NULL,
    fence     bigint,
    PRIMARY KEY (thread_id, ord),
    UNIQUE (thread_id, id)
);
"""
"""The events table of threadlog's PostgreSQL store (`threadlog.store.postgres.schema`)."""
BASELINE_INSERT = (
    "INSERT INTO events (thread_id, ord, id, writer, parent, ts, type, v, prev, hash, line, "
    "fence) VALUES (%s, %s, %s, %s, %s, %s, %s, 1, %s, %s, %s, NULL)"
)

Writer = Callable[[int, int, list[float]], None]
"""``writer(index, appends, latencies)``: one writer's whole run, appending its latencies."""


# -- databases ----------------------------------------------------------------------------------


def _with_db(dsn: str, name: str) -> str:
    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(path="/" + name))


@contextlib.contextmanager
def scratch_db(admin_dsn: str, label: str) -> Iterator[str]:
    """A new, empty database (a unique name), dropped on exit; its DSN."""
    name = f"tl_bench_{label}_{os.getpid()}_{secrets.token_hex(3)}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        CPU.db = name
        yield _with_db(admin_dsn, name)
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# -- CPU per append ------------------------------------------------------------------------------


class CPU:
    """CPU seconds spent during the timed part of the current kind: this process (the
    clients: threadlog's writers and committer, psycopg) and the server processes connected
    to the current database (their backends' time on a CPU, ``/proc/PID/schedstat``, so a
    local server only, else 0). The server's shared processes (WAL writer, checkpointer) are not counted."""

    db = ""
    client = 0.0
    server = 0.0

    @staticmethod
    def _now() -> tuple[float, float]:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        server = 0.0
        marker = f" {CPU.db} ".encode()
        with contextlib.suppress(OSError):
            for entry in os.scandir("/proc"):
                if not entry.name.isdigit():
                    continue
                try:
                    with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                        cmd = f.read()
                    if not cmd.startswith(b"postgres: ") or marker not in cmd:
                        continue
                    with open(f"/proc/{entry.name}/schedstat") as f:  # ns on a CPU
                        server += int(f.read().split()[0]) / 1e9
                except (OSError, ValueError, IndexError):
                    continue
        return usage.ru_utime + usage.ru_stime, server

    @classmethod
    @contextlib.contextmanager
    def measure(cls) -> Iterator[None]:
        client, server = cls._now()
        yield
        client_end, server_end = cls._now()
        cls.client, cls.server = client_end - client, server_end - server


# -- the workloads ------------------------------------------------------------------------------


def run_writers(writers: int, appends: int, writer: Writer) -> tuple[float, list[float]]:
    """Run ``writers`` OS threads, each ``writer(i, appends, latencies)`` once they are all
    ready; (elapsed seconds, every append's latency)."""
    latencies: list[list[float]] = [[] for _ in range(writers)]
    errors: list[BaseException] = []
    start = threading.Barrier(writers + 1)

    def body(i: int) -> None:
        try:
            start.wait()
            writer(i, appends, latencies[i])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    with CPU.measure():
        start.wait()
        began = time.perf_counter()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - began
    if errors:
        raise errors[0]
    return elapsed, [x for each in latencies for x in each]


def baseline(
    dsn: str, writers: int, appends: int, *, autocommit: bool = False
) -> tuple[float, list[float]]:
    """(b): one INSERT + COMMIT per append, a connection per writer (psycopg's default
    transactions: ``BEGIN``, ``INSERT``, ``COMMIT``, three round trips; ``autocommit``: the
    ``INSERT`` alone, committed as it runs, one round trip)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(BASELINE_DDL)
    conns = [psycopg.connect(dsn, autocommit=autocommit) for _ in range(writers)]
    try:

        def writer(i: int, n: int, out: list[float]) -> None:
            conn = conns[i]
            thread = new_id()
            prev: str | None = None
            last: str | None = None
            for k in range(1, n + 1):
                t0 = time.perf_counter()
                now = wall_ns()
                event_id = new_id(now)
                data_json = codec.canonical({**DATA, "n": k})
                ts = rfc3339(now)
                line, digest = encode_record(
                    id=event_id,
                    thread=thread,
                    ord=k,
                    parent=last,
                    ts=ts,
                    type="custom.bench",
                    data_json=data_json,
                    prev=prev,
                )
                conn.execute(
                    BASELINE_INSERT,
                    (
                        thread,
                        k,
                        event_id,
                        thread,
                        last,
                        ts,
                        "custom.bench",
                        prev,
                        digest,
                        line,
                    ),
                )
                if not autocommit:
                    conn.commit()
                out.append(time.perf_counter() - t0)
                prev, last = digest, event_id

        return run_writers(writers, appends, writer)
    finally:
        for conn in conns:
            conn.close()


def baseline_autocommit(dsn: str, writers: int, appends: int) -> tuple[float, list[float]]:
    """(b'): the baseline with each INSERT committed on its own (autocommit): one round trip
    per append, the cheapest way to commit each one."""
    return baseline(dsn, writers, appends, autocommit=True)


def threadlog_pg(dsn: str, writers: int, appends: int, **options: Any) -> tuple[float, list[float]]:
    """(a): critical appends through threadlog's PostgreSQL store."""
    from threadlog import open_store

    with open_store(dsn, **options) as store:
        threads = [store.create_thread("bench") for _ in range(writers)]

        def writer(i: int, n: int, out: list[float]) -> None:
            thread = threads[i]
            for k in range(1, n + 1):
                t0 = time.perf_counter()
                store.append(thread, "custom.bench", {**DATA, "n": k}, durable=True)
                out.append(time.perf_counter() - t0)

        result = run_writers(writers, appends, writer)
        for thread in threads:  # every acknowledged append is there, chained
            assert store.verify(thread).ok and len(store.read(thread)) == appends + 1
        return result


def threadlog_async(dsn: str, writers: int, appends: int) -> tuple[float, list[float]]:
    """(a, asyncio): the same appends from ``writers`` asyncio tasks on one event loop
    (``aappend``), as a service or the runtime issues them."""
    import asyncio

    from threadlog import open_store

    with open_store(dsn) as store:
        threads = [store.create_thread("bench") for _ in range(writers)]
        latencies: list[float] = []

        async def writer(thread: str) -> None:
            for k in range(1, appends + 1):
                t0 = time.perf_counter()
                await store.aappend(thread, "custom.bench", {**DATA, "n": k}, durable=True)
                latencies.append(time.perf_counter() - t0)

        async def run() -> float:
            began = time.perf_counter()
            async with asyncio.TaskGroup() as tasks:
                for thread in threads:
                    tasks.create_task(writer(thread))
            return time.perf_counter() - began

        with CPU.measure():
            elapsed = asyncio.run(run())
        for thread in threads:
            assert store.verify(thread).ok and len(store.read(thread)) == appends + 1
        return elapsed, latencies


PROCESSES = 4
"""How many processes ``threadlog-processes`` splits the writers over."""


def _process_writers(dsn: str, writers: int, appends: int, ready: Any, done: Any, out: Any) -> None:
    """One process of ``threadlog-processes``: its own store and ``writers`` threads."""
    from threadlog import open_store

    with open_store(dsn) as store:
        threads = [store.create_thread("bench") for _ in range(writers)]
        latencies: list[list[float]] = [[] for _ in range(writers)]

        def body(i: int) -> None:
            for k in range(1, appends + 1):
                t0 = time.perf_counter()
                store.append(threads[i], "custom.bench", {**DATA, "n": k}, durable=True)
                latencies[i].append(time.perf_counter() - t0)

        workers = [threading.Thread(target=body, args=(i,)) for i in range(writers)]
        ready.wait()
        before = resource.getrusage(resource.RUSAGE_SELF)
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        after = resource.getrusage(resource.RUSAGE_SELF)
        done.wait()
        for thread in threads:
            assert store.verify(thread).ok and len(store.read(thread)) == appends + 1
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    out.put((cpu, [x for each in latencies for x in each]))


def threadlog_processes(dsn: str, writers: int, appends: int) -> tuple[float, list[float]]:
    """(a, processes): the same writers split over `PROCESSES` processes, each with its own
    store (as several ``threadlog worker`` processes share a database): one GIL each."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    ready, done = ctx.Barrier(PROCESSES + 1), ctx.Barrier(PROCESSES + 1)
    out = ctx.Queue()
    each = writers // PROCESSES
    procs = [
        ctx.Process(target=_process_writers, args=(dsn, each, appends, ready, done, out))
        for _ in range(PROCESSES)
    ]
    for proc in procs:
        proc.start()
    with CPU.measure():
        ready.wait()
        began = time.perf_counter()
        done.wait()
        elapsed = time.perf_counter() - began
    results = [out.get(timeout=600) for _ in procs]
    for proc in procs:
        proc.join()
    CPU.client = sum(cpu for cpu, _ in results)  # the children's, not this process's
    # scaled so that the caller's writers x appends over it is the rate of those written
    return elapsed * writers / (each * PROCESSES), [x for _, lat in results for x in lat]


def threadlog_unbatched(dsn: str, writers: int, appends: int) -> tuple[float, list[float]]:
    """(a'): the same through threadlog with ``max_batch=1``: one COMMIT per append (what the
    group commit saves, inside threadlog itself)."""
    return threadlog_pg(dsn, writers, appends, max_batch=1)


def langgraph_pg(dsn: str, writers: int, appends: int) -> tuple[float, list[float]]:
    """(c): LangGraph's PostgresSaver.put, a connection per writer, a thread_id each."""
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row

    def connect() -> psycopg.Connection[Any]:
        return psycopg.connect(dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row)

    with connect() as conn:
        PostgresSaver(conn).setup()
    conns = [connect() for _ in range(writers)]
    try:

        def writer(i: int, n: int, out: list[float]) -> None:
            saver = PostgresSaver(conns[i])
            config: Any = {"configurable": {"thread_id": str(uuid.uuid4()), "checkpoint_ns": ""}}
            for k in range(1, n + 1):
                t0 = time.perf_counter()
                checkpoint = empty_checkpoint()
                checkpoint["channel_values"] = {"event": {**DATA, "n": k}}
                checkpoint["channel_versions"] = {"event": k}
                metadata: Any = {"source": "loop", "step": k}
                config = saver.put(config, checkpoint, metadata, {"event": k})
                out.append(time.perf_counter() - t0)

        return run_writers(writers, appends, writer)
    finally:
        for conn in conns:
            conn.close()


# -- the report ---------------------------------------------------------------------------------


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dsn", default=os.environ.get("THREADLOG_BENCH_DSN", DEFAULT_DSN))
    parser.add_argument("--writers", type=int, default=64)
    parser.add_argument("--appends", type=int, default=200, help="per writer, per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 1 round, 10 each")
    parser.add_argument(
        "--only",
        action="append",
        choices=[
            "baseline",
            "baseline-autocommit",
            "threadlog",
            "threadlog-async",
            "threadlog-processes",
            "threadlog-1",
            "langgraph",
        ],
        default=None,
    )
    args = parser.parse_args()
    if args.quick:
        args.appends, args.rounds = 10, 1
    kinds: dict[str, Callable[[str, int, int], tuple[float, list[float]]]] = {
        "baseline": baseline,
        "baseline-autocommit": baseline_autocommit,
        "threadlog": threadlog_pg,
        "threadlog-async": threadlog_async,
        "threadlog-processes": threadlog_processes,
        "threadlog-1": threadlog_unbatched,
        "langgraph": langgraph_pg,
    }
    chosen = args.only or ["baseline", "baseline-autocommit", "threadlog", "langgraph"]
    if "langgraph" in chosen:
        try:
            import langgraph.checkpoint.postgres  # noqa: F401
        except ImportError:
            print("langgraph-checkpoint-postgres is not installed: (c) skipped")
            chosen.remove("langgraph")
    total = args.writers * args.appends
    print(f"{args.writers} writers x {args.appends} critical appends, {args.rounds} round(s)")
    results: dict[str, list[tuple[float, float, float, float, float]]] = {k: [] for k in chosen}
    for r in range(args.rounds):
        for kind in chosen:
            with scratch_db(args.dsn, kind[:4].replace("-", "")) as dsn:
                elapsed, lat = kinds[kind](dsn, args.writers, args.appends)
            rate = total / elapsed
            cpu = (CPU.client / total * 1e6, CPU.server / total * 1e6)
            results[kind].append((rate, _pct(lat, 0.5) * 1e3, _pct(lat, 0.99) * 1e3, *cpu))
            print(
                f"  round {r + 1} {kind:19} {rate:9,.0f}/s  p50 {results[kind][-1][1]:.2f} ms"
                f"  CPU/append: client {cpu[0]:.0f} µs, server {cpu[1]:.0f} µs"
            )
    print()
    bases = [b for b in ("baseline", "baseline-autocommit") if b in results]
    heads = "".join(f" × {b} |" for b in bases)
    print(f"| writer | appends/s |{heads} p50 | p99 | CPU µs/append: client + server |")
    print("|---|---|" + "---|" * len(bases) + "---|---|---|")
    for kind in chosen:
        rates = [x[0] for x in results[kind]]
        line = f"| {kind} | {statistics.median(rates):,.0f} [{min(rates):,.0f}–{max(rates):,.0f}] |"
        for base in bases:
            ratios = [x[0] / b[0] for x, b in zip(results[kind], results[base], strict=True)]
            line += f" {statistics.median(ratios):.2f} [{min(ratios):.2f}–{max(ratios):.2f}] |"
        p50 = statistics.median(x[1] for x in results[kind])
        p99 = statistics.median(x[2] for x in results[kind])
        client = statistics.median(x[3] for x in results[kind])
        server = statistics.median(x[4] for x in results[kind])
        print(f"{line} {p50:.2f} ms | {p99:.2f} ms | {client:.0f} + {server:.0f} |")


if __name__ == "__main__":
    main()
