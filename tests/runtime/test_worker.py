"""``threadlog worker`` processes: a killed worker's turn taken over, 50 threads contended,
a service streaming a worker's records, a paused worker fenced off.

Each test runs on the embedded store and, through the shared PostgreSQL fixture
(`tests.postgres.server`: a fresh schema per test), on PostgreSQL: the worker code is the
same, only the lease differs (an ``flock`` the kernel drops when its holder dies; a row whose
expiry passes, and whose fencing token refuses a holder that was only paused).
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.harness.service import ServerProcess
from tests.harness.worker import QUICK_READS, WorkerProcess
from tests.postgres.server import Schemas, pg_schemas, pg_server  # noqa: F401 - fixtures
from tests.runtime.test_handover import cli_json, pay_model, pay_tools
from tests.server.agents import READS
from threadlog import open_store
from threadlog._clock import new_id
from threadlog.model.commands import Submit
from threadlog.model.events import InputQueued
from threadlog.runtime.runtime import Runtime
from threadlog.runtime.takeover import waiting_threads
from threadlog.runtime.worker import Worker
from threadlog.store.protocol import Mailbox, Store
from threadlog.testing.contract import check_chain

READER = "python:tests.server.agents:reader"
QUICK = "python:tests.harness.worker:quick"


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    (work / "README.md").write_text("# project\n\nSomething to read.\n")
    return work


def queue_work(target: str, n: int, cwd: Path) -> list[str]:
    """``n`` threads, each with input queued and nobody driving it (as ``threadlog send``)."""

    async def make() -> list[str]:
        threads = []
        async with Runtime(target) as runtime:
            for _ in range(n):
                session = await runtime.create("alice", cwd=str(cwd))
                await session.append(InputQueued(input_id=new_id(), text="read it"))
                await session.close()
                threads.append(session.thread_id)
        return threads

    return asyncio.run(make())


def wait_for(what: str, check: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def outcomes(store: Store, thread: str) -> list[str]:
    return [r.data["outcome"] for r in store.read(thread) if r.type == "turn.ended"]


@pytest.fixture(params=["embedded", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "embedded":
        return str(tmp_path / "home")
    return str(request.getfixturevalue("pg_schemas").new())


@pytest.fixture
def worker_args(target: str) -> list[str]:
    """Options for a worker on ``target``: on PostgreSQL, a lease long enough that a live
    worker on a loaded machine renews it in time (another worker would take its threads
    over otherwise); the tests that kill a worker shorten it (`SHORT_LEASE`)."""
    return ["--lease", "10"] if target.startswith("postgresql:") else []


SHORT_LEASE = ["--lease", "2"]
"""A killed worker's threads are free two seconds after it last renewed them (PostgreSQL;
the embedded store ignores it: its lease ends with the process)."""


def test_a_killed_workers_turn_is_taken_over_and_completes(
    target: str, workdir: Path, worker_args: list[str]
) -> None:
    (thread,) = queue_work(target, 1, workdir)
    with open_store(target) as store:
        args = ["--model", READER, "--poll", "0.1", *worker_args, *SHORT_LEASE]
        with WorkerProcess(target, *args) as first:
            wait_for(
                "a read to finish",
                lambda: any(r.type == "tool_call.finished" for r in store.read(thread)),
            )
            assert first.stop(signal.SIGKILL) == -signal.SIGKILL
        assert first.taken("started") == [thread]
        before = store.read(thread)
        assert outcomes(store, thread) == []  # killed mid-turn
        with WorkerProcess(target, *args) as second:
            wait_for("the turn to complete", lambda: "completed" in outcomes(store, thread))
            wait_for("the session to close", lambda: thread in second.taken("closed"))
            assert second.stop() == 0, second.errors
        assert second.taken("resumed") == [thread]
        records = store.read(thread)
        assert store.verify(thread).ok
    assert [r.hash for r in records[: len(before)]] == [r.hash for r in before]
    check_chain(records)
    types = [r.type for r in records]
    assert types.count("thread.resumed") == 1
    assert [r.data["outcome"] for r in records if r.type == "turn.ended"] == [
        "interrupted",
        "completed",
    ]
    finished = [r.data["call_id"] for r in records if r.type == "tool_call.finished"]
    assert len(finished) == len(set(finished)) == READS  # each read once: none lost, none twice


def test_two_workers_contend_for_50_threads_and_every_log_is_one_chain(
    target: str, workdir: Path, worker_args: list[str]
) -> None:
    args = ["--model", QUICK, "--poll", "0.05", "--max-sessions", "8", *worker_args]
    with open_store(target) as store:
        with WorkerProcess(target, *args) as a, WorkerProcess(target, *args) as b:
            threads = queue_work(target, 50, workdir)  # both look for work meanwhile

            def all_done() -> bool:
                return all("completed" in outcomes(store, t) for t in threads)

            wait_for("every thread's turn", all_done, timeout=90)
            assert a.stop() == 0, a.errors
            assert b.stop() == 0, b.errors
        started = a.taken("started") + b.taken("started")
        assert set(started) == set(threads)
        for thread in threads:
            records = store.read(thread)
            assert store.verify(thread).ok
            check_chain(records)  # ords 1..n, each prev the previous hash, legal
            types = [r.type for r in records]
            assert types.count("turn.started") == 1  # one turn per queued input, run once
            assert outcomes(store, thread) == ["completed"]
            assert types.count("tool_call.finished") == QUICK_READS
    # both workers did some of the work (a weak check of contention, not of fairness)
    assert a.taken("started") and b.taken("started")


def test_a_service_streams_what_a_worker_writes_with_no_gap_and_no_duplicate(
    target: str, workdir: Path, worker_args: list[str]
) -> None:
    (thread,) = queue_work(target, 1, workdir)
    server = ServerProcess(target, "--poll", "0.05")
    frames: list[dict[str, Any]] = []
    try:
        with httpx.Client(base_url=server.url, timeout=60) as http:
            with http.stream("GET", f"/v1/threads/{thread}/stream", params={"after": 0}) as r:
                assert r.status_code == 200
                with WorkerProcess(target, "--model", READER, "--poll", "0.1", *worker_args) as w:
                    text = ""
                    for chunk in r.iter_text():
                        text += chunk
                        done, _, text = text.rpartition("\n\n")
                        frames += _frames(done)
                        if any(f["type"] == "turn.ended" for f in frames):
                            break
                    wait_for("the session to close", lambda: thread in w.taken("closed"))
                    assert w.stop() == 0, w.errors
    finally:
        assert server.stop() == 0
    with open_store(target) as store:
        log = store.read(thread)
    assert [f["ord"] for f in frames] == list(range(1, len(frames) + 1))  # no gap, no duplicate
    assert [(f["id"], f["hash"]) for f in frames] == [(r.id, r.hash) for r in log[: len(frames)]]
    (ended,) = [f for f in frames if f["type"] == "turn.ended"]  # what followed it may be there
    assert ended["data"]["outcome"] == "completed"


def _frames(text: str) -> list[dict[str, Any]]:
    """The records in complete SSE frames (control events and comments left out)."""
    out = []
    for block in text.split("\n\n"):
        fields = dict(
            line.split(": ", 1) for line in block.splitlines() if ": " in line and line[0] != ":"
        )
        if "id" in fields and "data" in fields and fields.get("event", "") != "end":
            out.append(orjson.loads(fields["data"]))
    return out


def test_a_worker_takes_a_command_left_in_the_mailbox(
    target: str, workdir: Path, worker_args: list[str]
) -> None:
    async def idle_thread() -> str:
        async with Runtime(target) as runtime:
            session = await runtime.create("alice", cwd=str(workdir))
            await session.close()
            return session.thread_id

    thread = asyncio.run(idle_thread())
    with open_store(target) as store:
        assert isinstance(store, Mailbox)
        store.post(thread, Submit(text="read it", by="bob"))
        with WorkerProcess(target, "--model", QUICK, "--poll", "0.05", *worker_args) as worker:
            wait_for("the turn to complete", lambda: "completed" in outcomes(store, thread))
            wait_for("the session to close", lambda: thread in worker.taken("closed"))
            assert worker.stop() == 0, worker.errors
        assert store.pending(thread) == []  # applied once, then marked done
        records = store.read(thread)
        check_chain(records)
    (started,) = [r for r in records if r.type == "turn.started"]
    assert started.data["input"] == "read it"


def test_a_worker_paused_past_its_lease_never_writes_after_the_takeover(
    pg_schemas: Schemas,  # noqa: F811
    workdir: Path,
) -> None:
    target = pg_schemas.new()
    (thread,) = queue_work(target, 1, workdir)
    args = ["--model", READER, "--poll", "0.1", "--lease", "1.5"]
    with open_store(target) as store:
        with WorkerProcess(target, *args) as first:
            wait_for(
                "a read to finish",
                lambda: any(r.type == "tool_call.finished" for r in store.read(thread)),
            )
            first.proc.send_signal(signal.SIGSTOP)
            try:
                paused_session = store.state(thread).session
                with WorkerProcess(target, *args) as second:
                    wait_for("the turn to complete", lambda: "completed" in outcomes(store, thread))
                    took_over = next(
                        r.ord for r in store.read(thread) if r.type == "thread.resumed"
                    )
                    first.proc.send_signal(signal.SIGCONT)
                    # the paused worker wakes up mid-turn and tries to go on: refused
                    wait_for("the fence", lambda: "LeaseLost" in "".join(first.errors), 20)
                    assert second.stop() == 0, second.errors
            finally:
                first.proc.send_signal(signal.SIGCONT)
            assert first.stop() == 0, first.errors
        records = store.read(thread)
        assert store.verify(thread).ok
    check_chain(records)
    after = [r for r in records if r.ord > took_over]
    assert after and all(
        not isinstance(r.data, dict) or r.data.get("session") != paused_session for r in after
    )  # nothing of the paused worker's session after the takeover
    finished = [r.data["call_id"] for r in records if r.type == "tool_call.finished"]
    assert len(finished) == len(set(finished)) == READS


def test_a_worker_gives_back_a_parked_thread_and_drives_it_on_once_approved(
    target: str, workdir: Path
) -> None:
    """A turn waiting for a human holds no worker slot: the worker closes its session (the
    turn stays parked, nothing of it interrupted) and takes other work; once a human
    approves with the CLI (no session is live, so the decision is recorded at once), the
    next step opens the thread and drives the turn on. Before, a worker kept every parked
    session open, so ``max_sessions`` approvals waiting stopped it taking any work, and a
    parked thread whose session had closed (a worker stopped) was never driven again."""
    first, second = queue_work(target, 2, workdir)
    paid: list[str] = []

    async def drive() -> None:
        async with Runtime(
            target, model=pay_model(), tools=pay_tools(paid), source="api"
        ) as runtime:
            worker = Worker(runtime, poll=0.05, max_sessions=1)

            async def step_until(what: str, check: Callable[[Any], bool]) -> Any:
                for _ in range(200):
                    done = await worker.step()
                    if check(done):
                        return done
                    await asyncio.sleep(0.05)
                raise AssertionError(f"timed out waiting for {what}")

            done = await step_until("a thread to start", lambda d: d.started)
            (one,) = done.started
            # parked on the payment: given back, and the slot goes to the other thread
            done = await step_until("the parked session to close", lambda d: one in d.closed)
            if not done.started:
                done = await step_until("the other thread to start", lambda d: d.started)
            assert done.started == [{first, second}.difference([one]).pop()]
            await step_until("the second to park and close", lambda d: d.closed)
            with open_store(target) as store:
                assert all(store.state(t).active_turn for t in (first, second))  # both parked
            assert paid == []
            code, approved = await asyncio.to_thread(
                cli_json, "approve", one, "pay-1", "--store", target
            )
            assert code == 0 and approved["applied"] is True, approved
            await step_until("the approved thread to be driven on", lambda d: one in d.started)
            await step_until("its turn to end", lambda d: one in d.closed)

    asyncio.run(drive())
    assert paid == ["pay-1"]
    with open_store(target) as store:
        records = store.read(first) + store.read(second)
        state = {t: store.state(t) for t in (first, second)}
    done_thread = next(t for t, s in state.items() if s.active_turn is None)
    assert [t.status for t in state[done_thread].turns.values()] == ["completed"]
    assert not [r for r in records if r.type == "thread.resumed"]  # nothing was interrupted


def test_a_workers_scan_reads_again_only_the_threads_whose_log_grew(
    target: str, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`waiting_threads` with ``checked`` (what `Worker` keeps between polls): a thread found
    with nothing to do is not read again until its log grows, and input sent to it then,
    by another process, is found. (Each poll used to read every thread's state.)"""

    async def make() -> list[str]:
        async with Runtime(target) as runtime:
            threads = []
            for _ in range(3):
                session = await runtime.create("alice", cwd=str(workdir))
                await session.close()
                threads.append(session.thread_id)
            return threads

    threads = asyncio.run(make())
    checked: dict[str, int] = {}
    with open_store(target) as store:
        assert waiting_threads(store, checked=checked) == []
        assert set(threads) <= set(checked)
        reads: list[str] = []
        state = store.state
        monkeypatch.setattr(
            store, "state", lambda thread, **kw: reads.append(thread) or state(thread, **kw)
        )
        assert waiting_threads(store, checked=checked) == [] and reads == []
        with open_store(target) as other:  # `threadlog send`, from another process
            other.append(threads[1], InputQueued(input_id=new_id(), text="read it"))
        assert waiting_threads(store, checked=checked) == [threads[1]]
        assert reads == [threads[1]]
