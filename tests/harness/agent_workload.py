"""A crash-test agent workload: a scripted agent on the runtime that can be killed anywhere.

Run as ``python -m tests.harness.agent_workload --home DIR --workspace DIR --seed N
[--turns K] [--all-types] [--die-in-charge before|after]``. It opens the runtime on the
embedded store at ``DIR`` and works through ``K`` *goals*, one turn each. Per goal the
scripted model (a pure function of the request, so that it makes sense again after any
crash: it looks at the messages to see which tool results already exist):

1. reads ``inputs/goal-<k>.txt`` (``read_file``, read-only),
2. writes ``outputs/goal-<k>.txt`` (``write_file``; a crash is settled by its reconcile hook),
3. calls ``charge`` (non-idempotent): it appends one line ``<call_id>`` to
   ``<workspace>/charges.txt`` with fsync. Its idempotency key is the call id, and its
   ``reconcile(key)`` hook answers by looking for the key in ``charges.txt`` (for some keys,
   chosen from the seed, it answers "cannot tell", so that a call stays ``unknown`` and the
   workload resolves it itself),
4. ends the turn.

Some goals (from the seed) receive steering while their turn runs; some have ``charge`` under
"ask" in the approval policy (set with ``config.changed`` before the turn), and the workload
approves the proposal itself with `Session.approve` when the turn waits for it. Everything else
is approved by the policy, so no human is needed.

The thread's id is kept in ``DIR/agent-workload-thread.txt``. When the home already has the
workload's thread (or, if the process died before it could save the id, a thread titled
`WORKLOAD_TITLE`), the workload *resumes* it with ``Runtime.resume`` (``continue_work``), then
resolves any call still ``unknown`` by looking in ``charges.txt`` (``done`` if the key is there,
``retry`` if not), and goes on until all ``K`` goals have ended. Every step is decided from the
log, so any prefix of a run, cut anywhere, is continued correctly.

Output, one line each, flushed: ``STARTED`` once the modules are imported, ``THREAD <id>``
once the session is open, ``ACK <ord> <hash>``
for every record received through `Session.subscribe` (records are delivered only once
durable), and ``DONE`` at the end. A ``faulthandler`` watchdog ends a run stuck for 100 s.

``--all-types`` makes the run produce every event type a fresh run can (for
``tests/faults/test_crash_at_every_type.py``; needs ``K >= 3``): goal 1 also calls
``list_dir``, which the policy denies; between goals 1 and 2 the workload changes the config
and appends a plan version, a label, a memory (written, then revoked), an artifact, a
compaction, a branch summary and a leaf move, and spawns a sub-agent; goal 2's model call fails
mid-stream (``provider.interrupted``; that turn fails, as intended, and goal 3 goes on).
``--die-in-charge before|after`` makes the process exit with status 137 inside its first
``charge`` call, before or after the effect (to set up a resume that finds a call of unknown
outcome).
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import os
import random
import re
import sys
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from threadlog.errors import ThreadlogError
from threadlog.model.approvals import decide
from threadlog.model.envelope import Record
from threadlog.runtime.models import ModelRequest, Reply, ScriptedModel, ToolCallSpec
from threadlog.runtime.runtime import Runtime
from threadlog.runtime.tools import Tool, ToolContext, list_dir, read_file, write_file
from threadlog.store.embedded import EmbeddedStore

if TYPE_CHECKING:
    from collections.abc import Coroutine, Sequence

    from threadlog.runtime.resume import RecoveryReport
    from threadlog.runtime.session import Session
    from threadlog.store.protocol import Store

__all__ = [
    "CHARGES_FILE",
    "RESOLVER",
    "THREAD_FILE",
    "WORKLOAD_TITLE",
    "WorkloadPlan",
    "WorkloadResult",
    "charge_tool",
    "charged",
    "find_thread",
    "goal_of",
    "goal_text",
    "main",
    "prepare_workspace",
    "run_workload",
    "steer_text",
]

WORKLOAD_TITLE = "agent workload"
"""The title of the workload's thread (how a run finds a thread whose id was never saved)."""

THREAD_FILE = "agent-workload-thread.txt"
"""The file in the store's home holding the workload thread's id."""

CHARGES_FILE = "charges.txt"
"""The file in the workspace where ``charge`` appends one ``<call_id>`` line per effect."""

RESOLVER = "workload"
"""The ``by`` of the approvals and resolutions the workload makes itself."""

WATCHDOG_SECONDS = 100.0
"""A stuck run dumps every thread's stack to stderr and exits after this long: before the
harness gives up on it (``agent_crashloop.FINAL_TIMEOUT``), so its report holds the stacks."""

CHARGE_LATENCY = 0.005
"""Seconds ``charge`` waits before and after its effect (so that kills land inside it)."""

_GOAL_RE = re.compile(r"^goal (\d+):")
_STEER_RE = re.compile(r"^steer (\d+):")

_BASE_POLICY = {"read_only": "auto", "idempotent": "auto", "non_idempotent": "auto"}


def goal_text(goal: int) -> str:
    """The input of goal ``goal``'s turn."""
    return f"goal {goal}: process inputs/goal-{goal}.txt, write the report, charge the customer"


def goal_of(text: str) -> int | None:
    """The goal number of a turn input, or None."""
    match = _GOAL_RE.match(text)
    return int(match.group(1)) if match else None


def steer_text(goal: int) -> str:
    return f"steer {goal}: keep the report short"


@dataclass(frozen=True)
class WorkloadPlan:
    """Everything the workload decides, derived from ``(seed, turns)`` alone."""

    seed: int
    turns: int
    all_types: bool = False
    asks: frozenset[int] = field(init=False)
    """Goals whose ``charge`` the policy sends to a human (the workload approves it)."""
    steers: frozenset[int] = field(init=False)
    """Goals that receive steering while their turn runs."""

    def __post_init__(self) -> None:
        rng = random.Random(f"threadlog-agent-workload/{self.seed}")
        asks = {g for g in range(1, self.turns + 1) if rng.random() < 0.3}
        steers = {g for g in range(1, self.turns + 1) if rng.random() < 0.5}
        if self.all_types:
            asks.add(1)
            steers.add(1)
        object.__setattr__(self, "asks", frozenset(asks))
        object.__setattr__(self, "steers", frozenset(steers))

    def flaky(self, goal: int) -> bool:
        """Whether the model fails mid-stream on this goal (its turn fails; all-types only)."""
        return self.all_types and goal == 2

    def amount(self, goal: int) -> int:
        return random.Random(f"threadlog-agent-workload/{self.seed}/amount/{goal}").randint(
            100, 99_999
        )

    def reconcile_blind(self, key: str) -> bool:
        """Whether ``charge``'s reconcile hook cannot tell for this key (about one in three)."""
        return random.Random(f"threadlog-agent-workload/{self.seed}/blind/{key}").random() < 0.34

    def policy(self, goal: int) -> dict[str, Any]:
        """The approval policy goal ``goal``'s turn runs under."""
        tools: dict[str, str] = {}
        if goal in self.asks:
            tools["charge"] = "ask"
        if self.all_types:
            tools["list_dir"] = "deny"
        return {**_BASE_POLICY, "tools": tools} if tools else dict(_BASE_POLICY)

    def instructions(self, goal: int) -> str:
        return f"You are a billing agent working on goal {goal}. Be brief."

    def actions(self, goal: int) -> list[tuple[str, dict[str, Any]]]:
        """The tool calls goal ``goal`` needs, in order (the write's text is filled in later)."""
        if self.flaky(goal):
            return []
        out: list[tuple[str, dict[str, Any]]] = [("read_file", {"path": f"inputs/goal-{goal}.txt"})]
        if self.all_types and goal == 1:
            out.append(("list_dir", {"path": "inputs"}))
        out.append(("write_file", {"path": f"outputs/goal-{goal}.txt"}))
        out.append(("charge", {"goal": goal, "amount": self.amount(goal)}))
        return out

    def input_text(self, goal: int) -> str:
        rng = random.Random(f"threadlog-agent-workload/{self.seed}/input/{goal}")
        words = ["invoice", "order", "refund", "customer", "line", "total", "tax", "note"]
        return " ".join(rng.choice(words) for _ in range(rng.randint(5, 40))) + "\n"

    # -- the scripted model --------------------------------------------------------------

    def reply(self, request: ModelRequest, step: int) -> Reply:
        """The model: a function of the request only (``step`` is ignored on purpose)."""
        goal = None
        steered = False
        for message in request.messages:
            if message.get("role") != "user":
                continue
            content = str(message.get("content") or "")
            found = goal_of(content)
            if found is not None:
                goal, steered = found, False
            elif goal is not None and _STEER_RE.match(content):
                steered = steered or int(content.split()[1].rstrip(":")) == goal
        if goal is None:
            return Reply("There is no goal to work on.")
        calls: dict[str, tuple[str, dict[str, Any]]] = {}
        results: dict[str, str] = {}
        for message in request.messages:
            if message.get("role") == "assistant":
                for call in message.get("tool_calls") or []:
                    calls[str(call["id"])] = (str(call["name"]), dict(call["arguments"]))
            elif message.get("role") == "tool":
                results[str(message.get("tool_call_id"))] = str(message.get("content") or "")
        settled: dict[tuple[str, str], str] = {}
        for call_id, (name, args) in calls.items():
            if call_id in results:
                settled[(name, _action_key(args))] = results[call_id]
        for name, args in self.actions(goal):
            if (name, _action_key(args)) in settled:
                continue
            if name == "write_file":
                source = settled.get(("read_file", f"inputs/goal-{goal}.txt"), "")
                args = {**args, "text": f"report for goal {goal}\n{source.upper()}"}
            return Reply(
                f"Goal {goal}: next, {name}.", [ToolCallSpec(name, args, id=f"g{goal}-{name}")]
            )
        if self.flaky(goal):
            return Reply(f"Goal {goal}: this answer breaks off in the middle", fail_after=3)
        note = " (short, as asked)" if steered else ""
        return Reply(f"Goal {goal} is done{note}.")


def _action_key(args: dict[str, Any]) -> str:
    return str(args.get("path") if "path" in args else args.get("goal"))


# -- the charge tool ---------------------------------------------------------------------


def _append_line(path: Path, line: str) -> None:
    created = not path.exists()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{line}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    if created:
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def charged(workspace: str | os.PathLike[str]) -> list[str]:
    """The lines of ``charges.txt`` (one per charge effect), in order."""
    try:
        text = (Path(workspace) / CHARGES_FILE).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    return text.splitlines()


def charge_tool(
    workspace: str | os.PathLike[str],
    plan: WorkloadPlan,
    *,
    die_in_charge: str | None = None,
) -> Tool:
    """The non-idempotent ``charge`` tool of the workload (see the module docstring)."""
    path = Path(workspace) / CHARGES_FILE
    armed = [die_in_charge]

    async def run(ctx: ToolContext, args: dict[str, Any]) -> Any:
        die, armed[0] = armed[0], None
        if die == "before":
            _die("before the charge's effect")
        await asyncio.sleep(CHARGE_LATENCY)  # a remote call takes a while: a kill lands here
        await asyncio.to_thread(_append_line, path, ctx.call_id)
        if die == "after":
            _die("after the charge's effect")
        await asyncio.sleep(CHARGE_LATENCY)
        return {"charged": args.get("amount"), "receipt": ctx.call_id}

    async def reconcile(key: str) -> bool | None:
        if plan.reconcile_blind(key):
            return None
        return key in await asyncio.to_thread(charged, workspace)

    return Tool(
        "charge",
        "Charge the customer (appends a receipt line; not idempotent).",
        {
            "type": "object",
            "properties": {"goal": {"type": "integer"}, "amount": {"type": "integer"}},
            "required": ["goal", "amount"],
        },
        "non_idempotent",
        run,
        idempotency_key=lambda ctx, args: ctx.call_id,
        reconcile=reconcile,
    )


def _die(when: str) -> None:
    sys.stdout.flush()
    sys.stderr.write(f"agent workload: exiting {when} (--die-in-charge)\n")
    sys.stderr.flush()
    os._exit(137)


# -- finding the thread ------------------------------------------------------------------


def find_thread(store: Store, home: str) -> str | None:
    """The workload's thread in this home: the saved id, or a thread titled `WORKLOAD_TITLE`
    (created by a run that died before it could save the id)."""
    try:
        with open(os.path.join(home, THREAD_FILE), encoding="ascii") as f:
            saved = f.read().strip()
    except FileNotFoundError:
        saved = ""
    if saved and store.exists(saved):
        return saved
    if not isinstance(store, EmbeddedStore):
        return None
    for thread_id in sorted(store.thread_ids()):
        try:
            first = store.read(thread_id, limit=1)
        except ThreadlogError:
            continue  # an empty rollout: a thread that never was
        if first and first[0].type == "thread.created":
            data = first[0].data
            if data.get("title") == WORKLOAD_TITLE and data.get("lineage") is None:
                return thread_id
    return None


def _save_thread(home: str, thread_id: str) -> None:
    path = os.path.join(home, THREAD_FILE)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="ascii") as f:
        f.write(thread_id + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(home, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# -- the driver --------------------------------------------------------------------------


@dataclass
class WorkloadResult:
    """What one run did (for in-process callers)."""

    thread_id: str
    resumed: bool
    recovery: RecoveryReport | None
    approved: list[str] = field(default_factory=list)
    resolved: dict[str, str] = field(default_factory=dict)
    """Calls the workload itself resolved: call id → ``done`` or ``retry``."""


def _goal_done(session: Session, plan: WorkloadPlan, goal: int) -> bool:
    text = goal_text(goal)
    ends = {"completed", "failed"} if plan.flaky(goal) else {"completed"}
    return any(t.input == text and t.status in ends for t in session.state.turns.values())


def _check_goal_failures(session: Session, plan: WorkloadPlan, goal: int) -> None:
    text = goal_text(goal)
    if plan.flaky(goal):
        return
    for turn in session.state.turns.values():
        if turn.input == text and turn.status == "failed":
            raise RuntimeError(f"goal {goal}'s turn {turn.turn_id} failed: {turn.reason}")


async def _configure_for(session: Session, plan: WorkloadPlan, goal: int) -> None:
    config = session.state.config
    changes: dict[str, Any] = {}
    if config.get("approval_policy") != plan.policy(goal):
        changes["approval_policy"] = plan.policy(goal)
    if plan.all_types and config.get("instructions") != plan.instructions(goal):
        changes["instructions"] = plan.instructions(goal)
    if changes:
        await session.configure(**changes)


async def _help_human(
    session: Session, plan: WorkloadPlan, workspace: str, result: WorkloadResult
) -> None:
    """Make the decisions the running turn waits for: approve asked charges, and resolve
    calls of unknown outcome from ``charges.txt``."""
    policy = session.state.config.get("approval_policy")
    for call in list(session.state.tool_calls.values()):
        if call.status == "proposed" and decide(policy, call.tool, call.side_effect) == "ask":
            await session.approve(call.call_id, by=RESOLVER, reason="the workload approves")
            result.approved.append(call.call_id)
        elif call.status == "unknown":
            key = call.idempotency_key or call.call_id
            found = key in await asyncio.to_thread(charged, workspace)
            decision = "done" if found else "retry"
            await session.resolve(
                call.call_id,
                decision,
                by=RESOLVER,
                note=f"{CHARGES_FILE} {'has' if found else 'has no'} line {key}",
            )
            result.resolved[call.call_id] = decision


async def _drive_goal(
    session: Session, plan: WorkloadPlan, goal: int, workspace: str, result: WorkloadResult
) -> None:
    text = goal_text(goal)
    while not _goal_done(session, plan, goal):
        _check_goal_failures(session, plan, goal)
        state = session.state
        if state.active_turn is None:
            await _configure_for(session, plan, goal)
            await session.submit(text)
            continue
        turn = state.turns[state.active_turn]
        if turn.input != text:
            raise RuntimeError(f"turn {turn.turn_id} runs {turn.input!r} during goal {goal}")
        wants_steering = goal in plan.steers and not any(
            i.text == steer_text(goal) for i in state.inputs.values()
        )
        if wants_steering:
            # Steer once a tool of this turn has a result; the check and submit's own check
            # of the running turn happen in one step of the event loop (no await between).
            if any(state.tool_calls[c].status == "finished" for c in turn.tool_calls):
                await session.submit(steer_text(goal))
            elif not session.waiting_for_human:
                await asyncio.sleep(0.002)
                continue
        if session.waiting_for_human:
            await _help_human(session, plan, workspace, result)
            continue
        if not session.busy:
            session.resume_turn()
        await session.wait_idle()


async def _produce_extras(session: Session, runtime: Runtime) -> None:
    """The all-types events between goals 1 and 2; each is skipped if the log has it."""
    thread_id = session.thread_id
    records = await asyncio.to_thread(runtime.store.read, thread_id)
    present = {r.type for r in records}
    anchor = next(r.id for r in records if r.type == "turn.started")
    state = session.state
    if state.plan_version == 0:
        await session.append(
            "plan.versioned",
            {"version": 1, "plan": {"steps": ["report", "charge"]}, "reason": "after goal 1"},
        )
    if anchor not in state.labels:
        await session.append("label.set", {"entry": anchor, "label": "first goal"})
    memory_id = "workload-memory-1"
    if memory_id not in state.memories:
        await session.append(
            "memory.written",
            {
                "memory_id": memory_id,
                "fact": "the customer wants short reports",
                "source_event": anchor,
                "scope": "thread",
                "written_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "expires_at": None,
            },
        )
    if not session.state.memories[memory_id].revoked:
        await session.append("memory.revoked", {"memory_id": memory_id, "reason": "superseded"})
    if "artifact.stored" not in present:
        store = runtime.store
        content = b"goal 1 receipts\n"
        if isinstance(store, EmbeddedStore):
            ref = await asyncio.to_thread(store.artifacts.put, content, media_type="text/plain")
            digest, size = ref.sha256, ref.size
        else:  # pragma: no cover - the workload runs on the embedded store
            import hashlib

            digest, size = hashlib.sha256(content).hexdigest(), len(content)
        await session.append(
            "artifact.stored",
            {"sha256": digest, "size": size, "media_type": "text/plain", "summary": "receipts"},
        )
    if not session.state.compactions:
        await session.append(
            "compaction",
            {
                "summary": "goal 1 was processed and charged",
                "first_entry": None,
                "last_entry": anchor,
                "tokens_before": 1000,
                "tokens_after": 100,
            },
        )
    if "branch.summarized" not in present:
        await session.append(
            "branch.summarized", {"from_entry": anchor, "summary": "nothing was tried there"}
        )
    if "leaf.moved" not in present:
        # To the active leaf itself: the conversation goes on where it was.
        leaf = session.state.leaf or session.state.last_id
        await session.append("leaf.moved", {"to": leaf})
    if not any(op.kind == "subagent" and op.ok for op in session.state.operations.values()):
        await session.spawn(title="workload sub-agent")


class _Acker:
    """Prints ``ACK <ord> <hash>`` for every record the session's subscription delivers."""

    def __init__(self, session: Session, out: TextIO) -> None:
        self.out = out
        self.seen = 0
        self.target: int | None = None
        self.caught_up = asyncio.Event()
        self.task = asyncio.create_task(self._run(session), name="workload acks")

    async def _run(self, session: Session) -> None:
        async for item in session.subscribe():
            if isinstance(item, Record):
                self.out.write(f"ACK {item.ord} {item.hash}\n")
                self.out.flush()
                self.seen = item.ord
                if self.target is not None and self.seen >= self.target:
                    self.caught_up.set()

    async def finish(self, last_ord: int) -> None:
        """Wait until every record up to ``last_ord`` (made durable) was acknowledged."""
        self.target = last_ord
        if self.seen < last_ord:
            waiter = asyncio.ensure_future(self.caught_up.wait())
            await asyncio.wait([self.task, waiter], return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


def prepare_workspace(workspace: str, plan: WorkloadPlan) -> None:
    """Create the goals' input files (only the missing ones)."""
    inputs = Path(workspace) / "inputs"
    inputs.mkdir(parents=True, exist_ok=True)
    for goal in range(1, plan.turns + 1):
        path = inputs / f"goal-{goal}.txt"
        if not path.exists():
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_text(plan.input_text(goal), encoding="utf-8")
            os.replace(tmp, path)


def _absolute(path: str) -> str:
    return os.path.abspath(path)


async def run_workload(
    home: str,
    workspace: str,
    seed: int,
    turns: int,
    *,
    all_types: bool = False,
    die_in_charge: str | None = None,
    out: TextIO | None = None,
) -> WorkloadResult:
    """Run (or resume) the workload until its ``turns`` goals have ended (see the module
    docstring). ``out`` receives the THREAD / ACK lines (nothing is written without it)."""
    home, workspace = _absolute(home), _absolute(workspace)
    plan = WorkloadPlan(seed, turns, all_types)
    await asyncio.to_thread(prepare_workspace, workspace, plan)
    tools = [read_file, write_file, charge_tool(workspace, plan, die_in_charge=die_in_charge)]
    if all_types:
        tools.append(list_dir)
    async with Runtime(home, model=ScriptedModel(plan.reply), tools=tools) as runtime:
        thread_id = await asyncio.to_thread(find_thread, runtime.store, home)
        if thread_id is None:
            config: dict[str, Any] = {"cwd": workspace, "approval_policy": plan.policy(1)}
            if all_types:
                config["instructions"] = plan.instructions(1)
            session = await runtime.create("workload", title=WORKLOAD_TITLE, **config)
        else:
            session = await runtime.resume(thread_id, continue_work=True)
        await asyncio.to_thread(_save_thread, home, session.thread_id)
        result = WorkloadResult(session.thread_id, thread_id is not None, session.recovery)
        acker = None
        if out is not None:
            out.write(f"THREAD {session.thread_id}\n")
            out.flush()
            acker = _Acker(session, out)
        for goal in range(1, turns + 1):
            await _drive_goal(session, plan, goal, workspace, result)
            if all_types and goal == 1:
                await _produce_extras(session, runtime)
        if acker is not None:
            # closed here, not by the runtime's exit: its session.closed is the log's last
            # record, and it is acknowledged too
            await session.close()
            await acker.finish(session.state.last_ord)
    return result


async def _watched(work: Coroutine[Any, Any, WorkloadResult]) -> WorkloadResult:
    """Run ``work``; if it is still running shortly before the watchdog fires, print the stack
    of every task to stderr (the watchdog's dump shows threads only, and a stuck event loop
    waits in ``select``)."""
    loop = asyncio.get_running_loop()
    timer = threading.Timer(WATCHDOG_SECONDS - 5, loop.call_soon_threadsafe, (_print_tasks,))
    timer.daemon = True
    timer.start()
    try:
        return await work
    finally:
        timer.cancel()


def _print_tasks() -> None:
    for task in asyncio.all_tasks():
        print(f"task {task.get_name()}:", file=sys.stderr)
        awaited: Any = task.get_coro()
        while awaited is not None:  # down the chain of awaits (get_stack gives the first only)
            frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "ag_frame", None)
            if frame is None:
                print(f"  awaiting {awaited!r}", file=sys.stderr)
                break
            code = frame.f_code
            print(f"  {code.co_filename}:{frame.f_lineno} in {code.co_name}", file=sys.stderr)
            awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "ag_await", None)
    sys.stderr.flush()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.harness.agent_workload",
        description="Run (or resume) a scripted agent; print 'ACK <ord> <hash>' per durable record.",
    )
    parser.add_argument("--home", required=True, help="the store's directory")
    parser.add_argument("--workspace", required=True, help="the agent's working directory")
    parser.add_argument("--seed", type=int, required=True, help="seed of the workload's plan")
    parser.add_argument("--turns", type=int, default=3, help="goals (turns) to complete")
    parser.add_argument(
        "--all-types", action="store_true", help="produce every event type (needs --turns >= 3)"
    )
    parser.add_argument(
        "--die-in-charge",
        choices=("before", "after"),
        default=None,
        help="exit 137 in the first charge call, before or after its effect",
    )
    args = parser.parse_args(argv)
    if args.turns < 1 or (args.all_types and args.turns < 3):
        parser.error("--turns must be >= 1 (>= 3 with --all-types)")
    faulthandler.dump_traceback_later(WATCHDOG_SECONDS, exit=True)
    # (start-up is over: a kill timed from here lands in the store's open and recovery, not
    # in the interpreter's imports, which take longer than the whole recovery on a slow VM)
    sys.stdout.write("STARTED\n")
    sys.stdout.flush()
    os.makedirs(args.workspace, exist_ok=True)
    workload = run_workload(
        args.home,
        args.workspace,
        args.seed,
        args.turns,
        all_types=args.all_types,
        die_in_charge=args.die_in_charge,
        out=sys.stdout,
    )
    asyncio.run(_watched(workload))
    faulthandler.cancel_dump_traceback_later()
    sys.stdout.write("DONE\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
