"""PostgreSQL store against real processes: a paused lease holder is fenced off (SIGSTOP past
its lease), and kill -9 of a writer loses no acknowledged record (30 trials).

The child is `tests.postgres.child_writer`; it prints ``ACK <ord> <hash>`` after each append
returned, which is what the parent holds the database to.
"""

from __future__ import annotations

import os
import random
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from tests.postgres.server import Schemas
from threadlog.errors import LeaseHeld
from threadlog.store.postgres import PostgresStore
from threadlog.testing.contract import check_chain

ROOT = Path(__file__).resolve().parents[2]


class Child:
    """A child writer and its acknowledgement lines."""

    def __init__(self, url: str, thread: str, lease: float, max_refused: int = 0) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.postgres.child_writer", url, thread, str(lease)]
            + ([str(max_refused)] if max_refused else []),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert self.proc.stdout is not None
        self._out = self.proc.stdout
        self._buf = b""
        self.lines: list[str] = []

    def read_until(self, done: object, timeout: float = 20.0) -> None:
        """Read lines until ``done(lines)`` is true."""
        assert callable(done)
        deadline = time.monotonic() + timeout
        while not done(self.lines):
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"child: timed out; lines so far: {self.lines[-5:]}")
            ready, _, _ = select.select([self._out], [], [], left)
            if not ready:
                continue
            chunk = os.read(self._out.fileno(), 65536)
            if not chunk:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                raise AssertionError(f"child exited: {self.lines[-5:]}\n{err}")
            self._buf += chunk
            *complete, self._buf = self._buf.split(b"\n")
            self.lines += [line.decode() for line in complete]

    def acks(self) -> list[tuple[int, str]]:
        return [
            (int(o), h)
            for kind, o, h in (ln.split(" ") for ln in self.lines if ln.startswith("ACK"))
        ]

    def kill(self, sig: int = signal.SIGKILL) -> None:
        self.proc.send_signal(sig)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


def _fences(url: str, schema: str, thread: str) -> list[tuple[int, int | None]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            f'SELECT ord, fence FROM "{schema}".events WHERE thread_id = %s ORDER BY ord',
            (thread,),
        ).fetchall()
    return [(int(o), f) for o, f in rows]


def test_a_writer_paused_past_its_lease_has_every_append_refused(pg_schemas: Schemas) -> None:
    schema = pg_schemas.name()
    url = f"{pg_schemas.server}?schema={schema}"
    with PostgresStore(url, lease_duration=1.0) as store:
        thread = store.create_thread("alice")
        child = Child(url, thread, lease=1.0, max_refused=20)
        try:
            child.read_until(lambda lines: len([ln for ln in lines if ln.startswith("ACK")]) >= 5)
            child.kill(signal.SIGSTOP)
            stopped_at = len(child.lines)
            time.sleep(1.5)  # past its lease (the database's clock decides)
            deadline = time.monotonic() + 10
            while True:  # a commit paused with the lease row locked is ended by the server
                try:
                    store.acquire(thread)
                    break
                except LeaseHeld:
                    assert time.monotonic() < deadline, "the paused holder kept its lease"
                    time.sleep(0.1)
            mine = [store.append(thread, "custom.taken", {"n": n}, durable=True) for n in range(5)]
            child.kill(signal.SIGCONT)
            child.read_until(lambda lines: "DONE" in lines)
            after = child.lines[stopped_at:]
            first_lost = next(i for i, ln in enumerate(after) if ln.startswith(("LOST", "FAILED")))
            # at most the append in flight when it stopped lands (before the takeover)
            assert all(not ln.startswith("ACK") for ln in after[first_lost:])
            assert len([ln for ln in after if ln.startswith("ACK")]) <= 1
            records = store.read(thread)
            check_chain(records)
            assert store.verify(thread).ok
            held = dict(store.read(thread) and [(r.ord, r.hash) for r in records])
            for ord_, hash_ in child.acks():
                assert held[ord_] == hash_  # every acknowledged record is there
            assert records[-5:] == mine  # nothing of the paused writer after the takeover
            fences = [f for _, f in _fences(pg_schemas.server, schema, thread) if f is not None]
            assert fences == sorted(fences) and len(set(fences)) == 2
        finally:
            child.close()


def test_kill_9_of_a_writer_loses_no_acknowledged_record(pg_schemas: Schemas) -> None:
    """30 trials: a writer is killed after a random number of acknowledged appends; the next
    one takes the thread over once the lease expires and continues the chain."""
    url = pg_schemas.new()
    rng = random.Random(14)
    with PostgresStore(url) as store:
        thread = store.create_thread("alice")
    acked: dict[int, str] = {}
    for _ in range(30):
        child = Child(url, thread, lease=0.3)
        try:
            want = rng.randint(1, 15)
            child.read_until(
                lambda lines, want=want: sum(ln.startswith("ACK") for ln in lines) >= want
            )
            child.kill()
            child.proc.wait()
            child.read_until(lambda lines: True)
            acked.update(child.acks())
        finally:
            child.close()
    with PostgresStore(url) as store:
        records = store.read(thread)
        check_chain(records)
        assert store.verify(thread).ok
        held = {r.ord: r.hash for r in records}
        assert all(held.get(o) == h for o, h in acked.items()), "an acknowledged record is lost"
        assert len(acked) >= 30


def test_the_lease_of_a_killed_holder_is_taken_at_once(pg_schemas: Schemas) -> None:
    """Its lease would last 30 s more, but its presence lock went with its connection."""
    url = pg_schemas.new()
    with PostgresStore(url) as store:
        thread = store.create_thread("alice")
        child = Child(url, thread, lease=30.0)
        try:
            child.read_until(lambda lines: sum(ln.startswith("ACK") for ln in lines) >= 3)
            with pytest.raises(LeaseHeld):  # alive: refused
                store.acquire(thread)
            child.kill()
            child.proc.wait()
            child.read_until(lambda lines: True)
            killed = time.monotonic()
            while True:
                try:
                    store.acquire(thread)
                    break
                except LeaseHeld:
                    assert time.monotonic() - killed < 5, "waited for the dead holder's lease"
                    time.sleep(0.05)
            record = store.append(thread, "custom.after", {})
            records = store.read(thread)
            assert records[-1] == record
            check_chain(records)
            held = {r.ord: r.hash for r in records}
            assert all(held[o] == h for o, h in child.acks())
        finally:
            child.close()
