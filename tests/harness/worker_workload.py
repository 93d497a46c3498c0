"""A crash-test worker: ``threadlog worker`` with a billing agent's tools, killable anywhere.

Run as ``python -m tests.harness.worker_workload --store TARGET --charges FILE --seed N
[--poll S] [--max-sessions N] [--lease S] [--crash-at TYPE[:N]]``. It runs `threadlog.runtime.worker.Worker` as
``threadlog worker`` does (a runtime with source ``api`` on the store ``TARGET``, embedded or
PostgreSQL), with the workload's scripted model and tools instead of the command's. The
parent (`tests.harness.worker_crashloop`) queues *jobs*, one per thread (`queue_jobs`), and
kills such workers at random.

A job's task (``job <j>: …``, the thread's working directory its own folder) is, per the
scripted model (a pure function of the request, so that any worker carries it on after any
crash: it looks at which tool results the conversation already holds):

1. ``read_file inputs.txt`` (read-only; run again after a crash),
2. ``charge`` twice (non-idempotent: each appends one line ``<thread>/<call>`` to the shared
   ``FILE`` with fsync; its idempotency key is that line, and its ``reconcile(key)`` hook looks
   for it there, except for about one key in four, chosen from the seed, where it answers
   "cannot tell": the call stays ``unknown`` and the thread waits for a human),
3. ``write_file report.txt`` (non-idempotent; settled after a crash by its file intent),
4. an answer that ends the turn.

Output, one line each, flushed: ``STARTED`` once the modules are imported, ``RUNNING`` once
the store and runtime are open, ``ACK <thread> <ord> <hash> <type>`` for every record of a
session it opened, delivered through `Session.subscribe` (from ordinal 1: records are
delivered only once durable), and ``STEP {json}`` for each step that did something
(``resumed``, ``started``, ``closed``). SIGTERM closes its sessions and exits 0, as the
command does. ``--crash-at TYPE[:N]`` makes it exit 137 right after the n-th record of that
type it wrote became durable (on both stores; see `_CrashAt`). A ``faulthandler`` watchdog ends a worker stuck for `WATCHDOG_SECONDS`.
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import os
import random
import re
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from threadlog.model.envelope import Record
from threadlog.runtime.models import ModelRequest, Reply, ScriptedModel, ToolCallSpec
from threadlog.runtime.tools import BUILTIN_TOOLS, Tool, ToolContext

if TYPE_CHECKING:
    from collections.abc import Sequence

    from threadlog.runtime.runtime import Runtime
    from threadlog.runtime.session import Session
    from threadlog.runtime.worker import Step

__all__ = [
    "CHARGES",
    "INPUTS_FILE",
    "POLICY",
    "REPORT_FILE",
    "WorkerPlan",
    "charge_tool",
    "charged",
    "expected_report",
    "job_text",
    "main",
    "queue_jobs",
]

CHARGES = 2
"""``charge`` calls per job."""

INPUTS_FILE = "inputs.txt"
REPORT_FILE = "report.txt"

CHARGE_LATENCY = 0.05
"""Seconds ``charge`` waits before and after its effect (so that kills land inside it)."""

MODEL_DELAY = 0.04
"""Seconds between the scripted model's streamed words (kills land in model calls too)."""

WATCHDOG_SECONDS = 300.0

POLICY = {"read_only": "auto", "idempotent": "auto", "non_idempotent": "auto"}
"""Every call is approved by the policy: the only human a job may need is for a call of
unknown outcome that the reconcile hook cannot settle."""

_JOB_RE = re.compile(r"^job (\d+):")


def job_text(job: int) -> str:
    """The input queued for job ``job``."""
    return f"job {job}: read {INPUTS_FILE}, charge the customer {CHARGES} times, write the report"


class WorkerPlan:
    """What the workload decides from its seed: job inputs, which keys reconcile cannot tell."""

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def input_text(self, job: int) -> str:
        rng = random.Random(f"threadlog-worker-workload/{self.seed}/input/{job}")
        words = ["invoice", "order", "refund", "customer", "line", "total", "tax", "note"]
        return " ".join(rng.choice(words) for _ in range(rng.randint(5, 30))) + "\n"

    def reconcile_blind(self, key: str) -> bool:
        """Whether ``charge``'s reconcile hook cannot tell for this key (about one in four)."""
        return random.Random(f"threadlog-worker-workload/{self.seed}/blind/{key}").random() < 0.25


def expected_report(inputs: str) -> str:
    """What ``report.txt`` holds once the job is done (from what ``read_file`` returned)."""
    return f"report\n{inputs.upper()}"


# -- the scripted model ----------------------------------------------------------------------


def _reply(request: ModelRequest, step: int) -> Reply:
    """The model: a function of the request only (``step`` is ignored on purpose)."""
    job = None
    for message in request.messages:
        if message.get("role") == "user":
            found = _JOB_RE.match(str(message.get("content") or ""))
            if found:
                job = int(found.group(1))
    if job is None:
        return Reply("There is no job to work on.")
    results: dict[str, str] = {}
    for message in request.messages:
        if message.get("role") == "tool":
            results[str(message.get("tool_call_id"))] = str(message.get("content") or "")
    actions: list[tuple[str, str, dict[str, Any]]] = [("read", "read_file", {"path": INPUTS_FILE})]
    actions += [(f"charge-{n}", "charge", {"n": n}) for n in range(1, CHARGES + 1)]
    actions.append(("write", "write_file", {"path": REPORT_FILE}))
    for call_id, name, args in actions:
        if call_id in results:
            continue
        if name == "write_file":
            args = {**args, "text": expected_report(results.get("read", ""))}
        return Reply(f"Job {job}: next, {call_id}.", [ToolCallSpec(name, args, id=call_id)])
    return Reply(f"Job {job} is done: charged {CHARGES} times, report written.")


def model() -> ScriptedModel:
    return ScriptedModel(_reply, delay=MODEL_DELAY)


# -- the charge tool -------------------------------------------------------------------------


def _append_line(path: Path, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{line}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def charged(path: str | os.PathLike[str]) -> list[str]:
    """The lines of the charges file (one per charge effect), in order."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    return text.splitlines()


def charge_key(thread_id: str, call_id: str) -> str:
    """A charge's idempotency key, and the line its effect writes."""
    return f"{thread_id}/{call_id}"


def charge_tool(charges: str | os.PathLike[str], plan: WorkerPlan) -> Tool:
    """The non-idempotent ``charge`` tool (see the module docstring)."""
    path = Path(charges)

    async def run(ctx: ToolContext, args: dict[str, Any]) -> Any:
        await asyncio.sleep(CHARGE_LATENCY)  # a remote call takes a while: a kill lands here
        await asyncio.to_thread(_append_line, path, charge_key(ctx.thread_id, ctx.call_id))
        await asyncio.sleep(CHARGE_LATENCY)
        return {"charged": args.get("n"), "receipt": ctx.call_id}

    async def reconcile(key: str) -> bool | None:
        if plan.reconcile_blind(key):
            return None
        return key in await asyncio.to_thread(charged, path)

    return Tool(
        "charge",
        "Charge the customer (appends a receipt line; not idempotent).",
        {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
        "non_idempotent",
        run,
        idempotency_key=lambda ctx, args: charge_key(ctx.thread_id, ctx.call_id),
        reconcile=reconcile,
    )


# -- queueing jobs (the parent) --------------------------------------------------------------


def queue_jobs(
    target: str, plan: WorkerPlan, jobs: Sequence[int], workspaces: str
) -> dict[int, str]:
    """One thread per job (working directory ``workspaces/<job>``, holding its inputs), with
    the job's input queued and nobody driving it (as ``threadlog send``); job → thread."""
    from threadlog._clock import new_id
    from threadlog.model.events import InputQueued
    from threadlog.runtime.runtime import Runtime

    async def make() -> dict[int, str]:
        threads = {}
        async with Runtime(target) as runtime:
            for job in jobs:
                cwd = Path(workspaces, str(job))
                cwd.mkdir(parents=True, exist_ok=True)
                (cwd / INPUTS_FILE).write_text(plan.input_text(job), encoding="utf-8")
                session = await runtime.create(
                    "worker-crashloop", title=f"job {job}", cwd=str(cwd), approval_policy=POLICY
                )
                await session.append(InputQueued(input_id=new_id(), text=job_text(job)))
                await session.close()
                threads[job] = session.thread_id
        return threads

    return asyncio.run(make())


# -- the worker ------------------------------------------------------------------------------


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class _Acker:
    """Prints ``ACK`` lines for every session the worker opens (from ordinal 1)."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.watched: dict[str, Session] = {}
        self.tasks: set[asyncio.Task[None]] = set()

    def on_step(self, done: Step) -> None:
        doc = {"resumed": done.resumed, "started": done.started, "closed": done.closed}
        _say("STEP " + orjson.dumps(doc).decode())
        for thread_id, session in self.runtime.sessions.items():
            if self.watched.get(thread_id) is not session:
                self.watched[thread_id] = session
                task = asyncio.create_task(self._ack(thread_id, session), name=f"ack {thread_id}")
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)

    async def _ack(self, thread_id: str, session: Session) -> None:
        try:
            async for item in session.subscribe():
                if isinstance(item, Record):
                    _say(f"ACK {thread_id} {item.ord} {item.hash} {item.type}")
        except Exception as exc:  # a session that failed (LeaseLost…): its acks stop here
            sys.stderr.write(f"acks of {thread_id} stopped: {exc!r}\n")


class _CrashAt:
    """A store listener that ends the process (``os._exit(137)``, as kill -9 would) once the
    n-th record of a type (``TYPE[:N]``) that this process wrote is durable: listeners hear
    of records once they are, from the committing thread (on PostgreSQL also of other
    processes' records, which are told apart by the ``session.opened`` that began them).
    ``THREADLOG_CRASH_AT`` does the same on the embedded store only."""

    def __init__(self, spec: str) -> None:
        name, _, count = spec.partition(":")
        self.type, self.n = name, int(count or 1)
        self.seen = 0
        self.ours: set[str] = set()

    def __call__(self, thread_id: str, records: list[Record]) -> None:
        for record in records:
            if record.type == "session.opened":
                if record.data.get("pid") == os.getpid():
                    self.ours.add(thread_id)
                else:
                    self.ours.discard(thread_id)
            if record.type == self.type and thread_id in self.ours:
                self.seen += 1
                if self.seen == self.n:
                    sys.stdout.flush()
                    sys.stderr.write(f"worker workload: exiting after durable {record.type}\n")
                    sys.stderr.flush()
                    os._exit(137)


async def _run(args: argparse.Namespace) -> None:
    from threadlog.runtime.runtime import Runtime
    from threadlog.runtime.worker import Worker
    from threadlog.store.open import open_store, parse_target

    plan = WorkerPlan(args.seed)
    tools = [*BUILTIN_TOOLS, charge_tool(args.charges, plan)]
    options = {}
    if args.lease is not None and parse_target(args.store)[0] == "postgres":
        options["lease_duration"] = args.lease
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    with open_store(args.store, **options) as store:
        if args.crash_at:
            store.add_listener(_CrashAt(args.crash_at))
        async with Runtime(store, model=model(), tools=tools, source="api") as runtime:
            worker = Worker(runtime, poll=args.poll, max_sessions=args.max_sessions)
            acker = _Acker(runtime)
            _say("RUNNING")
            await worker.run(stop, on_step=acker.on_step)
            for task in list(acker.tasks):
                task.cancel()
            await asyncio.gather(*acker.tasks, return_exceptions=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.harness.worker_workload",
        description="A threadlog worker with the crash-test workload's model and tools.",
    )
    parser.add_argument("--store", required=True, help="a home directory or postgresql:// URL")
    parser.add_argument("--charges", required=True, help="the charge tool's effects file")
    parser.add_argument("--seed", type=int, required=True, help="seed of the workload's plan")
    parser.add_argument("--poll", type=float, default=0.05, help="seconds between steps")
    parser.add_argument("--max-sessions", type=int, default=2, help="sessions at once")
    parser.add_argument("--lease", type=float, default=None, help="PostgreSQL lease seconds")
    parser.add_argument(
        "--crash-at", default=None, help="exit 137 after the n-th durable record TYPE[:N]"
    )
    args = parser.parse_args(argv)
    faulthandler.dump_traceback_later(WATCHDOG_SECONDS, exit=True)
    _say("STARTED")
    asyncio.run(_run(args))
    faulthandler.cancel_dump_traceback_later()
    return 0


if __name__ == "__main__":
    sys.exit(main())
