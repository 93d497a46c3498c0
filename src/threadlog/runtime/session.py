"""A live session: one thread open in this process, driving its turns.

Theory of operation
-------------------
*One pipeline for every event.* `Session.append` hands the event to the store with a
``check`` hook; the store builds the record (id, ordinal, hash) and, under the thread's lock,
calls the hook, which applies the record to the in-memory state (the reducer refuses illegal
events there, before anything is written) and to the model context. The store then makes the
record durable according to its class; ``append`` returns only then for critical records.
Subscribers are fed by the store's durable-record listener, so nobody ever sees a record that
is not on disk, and they see every record once, in ordinal order.

*The turn loop is sans-I/O.* `threadlog.model.turns.next_action` reads the state and says
what the running turn needs next: a decision on a proposal, a tool run, a model call, queued
input to consume, or the end. The loop performs it (which appends events) and asks again. A
session opened on a log whose turn was cut off by a crash asks the same question and carries
on — except that a tool call that started and has no result is never re-run on a guess: it
becomes ``tool_call.unknown`` and waits for a human (``threadlog resolve``).

*Waiting is durable.* A proposal the policy sends to a human is just a proposal without a
decision in the log; the loop sleeps until the state changes (an ``approve`` through the API,
the CLI's inbox, or another coroutine). Closing and reopening the runtime keeps the wait.

*Close protocol.* Stop new submissions → cancel the running turn (the model stream and any
running tool are cancelled; the turn ends ``aborted``) → close child sessions → flush → give
the lease back.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from threadlog._clock import new_id, rfc3339, wall_ns
from threadlog.errors import (
    ConflictError,
    InvalidTransition,
    RunError,
    StorageError,
    UsageError,
)
from threadlog.model import codec, snapshot
from threadlog.model.context import Context
from threadlog.model.events import from_data
from threadlog.model.ids import derived_id
from threadlog.model.memory import MemoryFact, memory_message, select_memories
from threadlog.model.reducer import apply, replay
from threadlog.model.turns import (
    AwaitResolution,
    AwaitTool,
    CallModel,
    ConsumeInput,
    Decide,
    EndTurn,
    Idle,
    RunTool,
    next_action,
)
from threadlog.runtime import inbox, procs
from threadlog.runtime.approvals import decide
from threadlog.runtime.models import Completed, ModelRequest, ProviderError, TextDelta
from threadlog.runtime.tools import ToolContext, ToolError
from threadlog.store.protocol import Catalog, LocalHome, Snapshots

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from threadlog.model.envelope import Record
    from threadlog.model.state import ThreadState, ToolCallState
    from threadlog.runtime.models import Model, Summarizer
    from threadlog.runtime.tools import ToolRegistry
    from threadlog.store.protocol import Store

__all__ = ["Progress", "Session", "SessionHost", "SubscriberDropped"]

log = logging.getLogger("threadlog.runtime")


class SessionHost(Protocol):
    """What a session needs of the runtime that owns it (`threadlog.runtime.Runtime`): the
    store, the model, the tools, and a way to open a sub-agent and to be forgotten. A
    protocol, so that this module does not import the runtime's (no import circle)."""

    store: Store
    model: Model
    summarizer: Summarizer
    tools: ToolRegistry

    async def create(
        self,
        principal: str = "local",
        *,
        title: str | None = None,
        lineage: dict[str, Any] | None = None,
        **config: Any,
    ) -> Session: ...

    def _forget(self, session: Session) -> None: ...


_CLOSED = object()


def estimate_tokens(messages: list[dict[str, Any]]) -> int:
    """A rough token count (4 bytes a token) of messages, for budgets and reports."""
    return len(codec.canonical(messages)) // 4


SNAPSHOT_EVERY = 500
"""A closing session saves a snapshot of its state when this many records came since the last."""


@dataclass(frozen=True, slots=True)
class Progress:
    """A transient update (a text delta, a tool's progress): live only, never logged."""

    kind: str
    data: dict[str, Any]


class SubscriberDropped(RunError):
    """The subscriber fell too far behind; re-subscribe from the last ordinal it saw."""


class _TurnFailed(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Session:
    """A thread open for writing in this process. Created by `Runtime.create` / `open`."""

    def __init__(
        self,
        runtime: SessionHost,
        thread_id: str,
        records: list[Record],
        base: tuple[int, ThreadState, Context] | None = None,
    ) -> None:
        self.runtime = runtime
        self.thread_id = thread_id
        if base is None:
            self.state: ThreadState = replay(records)
            self.context = Context.from_records(records)
            self._snapshot_ord = 0
        else:
            # a snapshot of the state after ord `base[0]`, and the records after it
            self._snapshot_ord, self.state, self.context = base
            for record in records:
                apply(self.state, record)
                self.context.apply(record)
        self._loop = asyncio.get_running_loop()
        self._changed = asyncio.Event()
        self._parked = asyncio.Event()
        """Set while the turn loop sleeps waiting for a human decision."""
        self._subscribers: list[tuple[asyncio.Queue[Any], bool]] = []
        self._turn_task: asyncio.Task[None] | None = None
        self._tool_tasks: set[asyncio.Task[Any]] = set()
        self._inbox_task: asyncio.Task[None] | None = None
        self._submit_lock = asyncio.Lock()
        self.children: list[Session] = []
        self.recovery: dict[str, Any] | None = None
        """What `Runtime.resume` repaired, when this session was opened by it."""
        self._closing = False
        self._closed = False
        self._broken: BaseException | None = None
        self._store_error: StorageError | None = None
        """Set when the store stopped acknowledging writes: no record will come any more."""
        runtime.store.add_listener(self._on_durable)
        runtime.store.add_error_listener(self._on_store_error)
        store = runtime.store
        if isinstance(store, LocalHome) and os.path.isdir(store.home):
            self._inbox_task = asyncio.create_task(
                self._watch_inbox(store.home), name=f"inbox {thread_id}"
            )

    async def _watch_inbox(self, home: str) -> None:
        """Apply messages other processes leave for this session (see `runtime.inbox`)."""
        while True:
            try:
                messages = await asyncio.to_thread(inbox.read_messages, home, self.thread_id)
            except StorageError as exc:  # e.g. an inbox folder others may write: refused
                log.error("inbox of thread %s not read any more: %s", self.thread_id, exc)
                return
            for message in messages:
                try:
                    await self._apply_message(message)
                except (UsageError, ConflictError) as exc:
                    log.warning("inbox message %s not applied: %s", message.id, exc)
                await asyncio.to_thread(inbox.remove, message.path)
            await asyncio.sleep(0.1)

    async def _apply_message(self, message: inbox.Message) -> None:
        body = message.body
        event_id = derived_id("threadlog.inbox", self.thread_id, message.id)
        by = str(body.get("by") or "cli")
        kind = body["kind"]
        if kind in ("approve", "deny"):
            decide_ = self.approve if kind == "approve" else self.deny
            await decide_(str(body.get("call_id")), by=by, reason=body.get("reason"), id=event_id)
        elif kind == "input":
            await self.submit(str(body.get("text") or ""), by=by, id=event_id)
        elif kind == "resolve":
            await self.resolve(
                str(body.get("call_id")),
                str(body.get("decision")),
                by=by,
                note=body.get("note"),
                id=event_id,
            )
        elif kind == "cancel":
            await self.cancel()

    # -- the pipeline ----------------------------------------------------------------------

    async def append(
        self,
        type_: str,
        data: dict[str, Any],
        *,
        durable: bool | None = None,
        id: str | None = None,
    ) -> Record:
        """Append one event through the pipeline (see the module docstring)."""
        if self._broken is not None:
            raise RunError(f"session {self.thread_id} stopped after an error: {self._broken}")
        try:
            # Every record continues the active leaf: after a branch (leaf.moved) the
            # conversation goes on from there, and the old branch stays as it was.
            return await self.runtime.store.aappend(
                self.thread_id,
                type_,
                data,
                durable=durable,
                id=id,
                parent=self.state.leaf,
                check=self._apply,
            )
        except (UsageError, asyncio.CancelledError):
            raise
        except BaseException as exc:
            # The state may hold a record that never became durable: stop this session.
            self._broken = exc
            raise

    def _apply(self, record: Record) -> None:
        event = from_data(record.type, record.data)
        apply(self.state, record, event)  # raises InvalidTransition: nothing is written
        self.context.apply(record)
        self._changed.set()

    def _on_durable(self, thread_id: str, records: list[Record]) -> None:
        if thread_id != self.thread_id or not self._subscribers:
            return
        try:
            self._loop.call_soon_threadsafe(self._publish, records)
        except RuntimeError:
            pass  # the loop is closed: nobody is listening any more

    def _on_store_error(self, error: StorageError) -> None:
        """The store failed (fail-stop): wake every subscriber with the error. Any thread."""
        try:
            self._loop.call_soon_threadsafe(self._fail_subscribers, error)
        except RuntimeError:
            pass  # the loop is closed: nobody is listening any more

    def _fail_subscribers(self, error: StorageError) -> None:
        self._store_error = error
        for queue, _ in list(self._subscribers):
            if queue.full():  # the error must get in: it ends the subscription anyway
                with contextlib.suppress(asyncio.QueueEmpty):
                    queue.get_nowait()
            queue.put_nowait(error)

    def _publish(self, item: Any) -> None:
        transient = isinstance(item, Progress)
        for queue, wants_progress in list(self._subscribers):
            if transient and not wants_progress:
                continue
            try:
                queue.put_nowait(item)
            except asyncio.QueueFull:
                # Never block the writer for a slow reader: drop it with a notice (made room
                # for by discarding the oldest item; the reader resubscribes from its cursor).
                self._subscribers.remove((queue, wants_progress))
                with contextlib.suppress(asyncio.QueueEmpty):
                    queue.get_nowait()
                queue.put_nowait(
                    SubscriberDropped(
                        f"subscriber of {self.thread_id} fell more than {queue.maxsize} items behind"
                    )
                )

    async def subscribe(
        self, after: int = 0, *, progress: bool = False, buffer: int = 10_000
    ) -> AsyncIterator[Record | Progress]:
        """Records with ``ord > after``: the log first, then live as they become durable.

        Each record is delivered once, in ordinal order. With ``progress``, transient
        `Progress` items (text deltas) are interleaved. A subscriber more than ``buffer``
        items behind is dropped with `SubscriberDropped`; resubscribe from its last ordinal.
        If the store stops acknowledging writes (a failed write or fsync), the records made
        durable before are delivered and then `StorageError` is raised: no more will come.
        """
        queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=buffer)
        entry = (queue, progress)
        self._subscribers.append(entry)
        if self._store_error is not None:  # it failed before: the log is all there is
            queue.put_nowait(self._store_error)
        try:
            last = after
            for record in await asyncio.to_thread(self.runtime.store.read, self.thread_id, after):
                last = record.ord
                yield record
            while True:
                item = await queue.get()
                if item is _CLOSED:
                    return
                if isinstance(item, SubscriberDropped):
                    raise item
                if isinstance(item, StorageError):
                    raise StorageError(str(item)) from item
                if isinstance(item, Progress):
                    yield item
                    continue
                for record in item:
                    if record.ord > last:
                        last = record.ord
                        yield record
        finally:
            if entry in self._subscribers:
                self._subscribers.remove(entry)

    # -- the public API --------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        """Whether a turn is running in this session."""
        return self._turn_task is not None and not self._turn_task.done()

    async def submit(self, text: str, *, by: str | None = None, id: str | None = None) -> Record:
        """User input: starts a turn when idle, or is queued as steering for the running turn.

        Steering is recorded at once (``input.queued``) and consumed at the running turn's
        next safe point (never in the middle of a tool call).
        """
        self._check_open()
        if not isinstance(text, str) or not text.strip():
            raise UsageError("input must be non-empty text")
        async with self._submit_lock:
            if self.state.active_turn is None:
                record = await self.append(
                    "turn.started", {"turn_id": new_id(), "input": text}, id=id
                )
                self._start_turn()
                return record
            return await self.append("input.queued", {"input_id": new_id(), "text": text}, id=id)

    async def approve(
        self, call_id: str, *, by: str = "user", reason: str | None = None, id: str | None = None
    ) -> Record:
        """Approve a proposed tool call that is waiting for a decision."""
        return await self._decide(call_id, "tool_call.approved", by, reason, id)

    async def deny(
        self, call_id: str, *, by: str = "user", reason: str | None = None, id: str | None = None
    ) -> Record:
        """Deny a proposed tool call; the model is told it was denied."""
        return await self._decide(call_id, "tool_call.denied", by, reason, id)

    async def _decide(
        self, call_id: str, type_: str, by: str, reason: str | None, id: str | None
    ) -> Record:
        self._check_open()
        call = self.state.tool_calls.get(call_id)
        if call is None:
            raise UsageError(f"no tool call {call_id!r} in thread {self.thread_id}")
        if call.status != "proposed":
            raise UsageError(f"tool call {call_id!r} is {call.status}, not waiting for a decision")
        return await self.append(type_, {"call_id": call_id, "by": by, "reason": reason}, id=id)

    async def resolve(
        self,
        call_id: str,
        decision: str,
        *,
        by: str = "user",
        note: str | None = None,
        id: str | None = None,
    ) -> Record:
        """A human's decision on a call whose outcome is unknown: done, retry or abort."""
        self._check_open()
        call = self.state.tool_calls.get(call_id)
        if call is None:
            raise UsageError(f"no tool call {call_id!r} in thread {self.thread_id}")
        if call.status != "unknown":
            raise UsageError(f"tool call {call_id!r} is {call.status}, not unknown")
        if decision not in ("done", "retry", "abort"):
            raise UsageError("decision must be done, retry or abort")
        return await self.append(
            "tool_call.resolved",
            {"call_id": call_id, "decision": decision, "by": by, "note": note},
            id=id,
        )

    async def configure(self, **changes: Any) -> Record:
        """Change config between turns (model, instructions, tools, approval policy…)."""
        self._check_open()
        if self.state.active_turn is not None:
            raise UsageError("config can only change between turns")
        if "approval_policy" in changes and changes["approval_policy"] is not None:
            from threadlog.runtime.approvals import check_policy

            check_policy(changes["approval_policy"])
        return await self.append("config.changed", {"changes": changes})

    async def cancel(self) -> None:
        """Cancel the running turn (it ends ``aborted``); returns once it has ended."""
        task = self._turn_task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def wait_idle(self, timeout: float | None = None) -> None:
        """Wait until no turn is running, or the running one is parked on a human decision
        (everything it appended before parking is durable), up to ``timeout``."""
        task = self._turn_task
        if task is None:
            return
        async with asyncio.timeout(timeout):
            while not task.done() and not self._parked.is_set():
                parked = asyncio.ensure_future(self._parked.wait())
                try:
                    await asyncio.wait([task, parked], return_when=asyncio.FIRST_COMPLETED)
                finally:
                    parked.cancel()
                    await asyncio.gather(parked, return_exceptions=True)
        if task.done() and not task.cancelled() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]

    async def _park(self) -> None:
        """The turn waits for a human: sleep until the state changes."""
        self._parked.set()
        try:
            await self._changed.wait()
        finally:
            self._parked.clear()

    @property
    def waiting_for_human(self) -> bool:
        """Whether the running turn waits for an approval or a resolution."""
        action = next_action(self.state)
        if isinstance(action, Decide):
            return (
                decide(
                    self.state.config.get("approval_policy"),
                    action.call.tool,
                    action.call.side_effect,
                )
                == "ask"
            )
        return isinstance(action, AwaitResolution)

    # -- the conversation tree, compaction, memory ------------------------------------------

    async def branch(self, entry: str, *, summary: str | None = None) -> Record:
        """Continue the conversation from an earlier entry; the current branch stays in the log.

        Records ``leaf.moved`` (and, with ``summary``, a ``branch.summarized`` entry on the new
        branch, so the model knows what the abandoned branch tried).
        """
        self._check_open()
        if self.state.active_turn is not None:
            raise UsageError("branch between turns, not while a turn runs")
        if entry not in self.context.nodes:
            raise UsageError(f"no entry {entry!r} in thread {self.thread_id}")
        left = self.state.leaf
        record = await self.append("leaf.moved", {"to": entry})
        if summary is not None and left is not None:
            record = await self.append(
                "branch.summarized", {"from_entry": left, "summary": summary}
            )
        return record

    async def label(self, entry: str, label: str | None) -> Record:
        """Name an entry (None removes the label)."""
        self._check_open()
        if entry not in self.context.nodes:
            raise UsageError(f"no entry {entry!r} in thread {self.thread_id}")
        return await self.append("label.set", {"entry": entry, "label": label})

    async def compact(self, *, keep_last: int = 6) -> Record | None:
        """Replace the older part of the active branch, in model context, by a summary.

        The summary comes from the runtime's summarizer (the model's own ``summarize`` if it
        has one). The last ``keep_last`` messages stay verbatim (the cut moves back to a user
        message, so a tool call is never separated from its result). Nothing is deleted: the
        log keeps every record, and export shows them all. Returns None when there is too
        little to compact.
        """
        self._check_open()
        entries = self.context.entries_at(self.context.leaf)
        cut = len(entries) - keep_last
        while cut > 0 and entries[cut][1]["role"] not in ("user", "system"):
            cut -= 1
        if cut < 2:
            return None
        older = [message for _, message in entries[:cut]]
        before = estimate_tokens(self.context.messages)
        op_id = new_id()
        await self.append(
            "operation.started", {"op_id": op_id, "kind": "compaction", "detail": {"messages": cut}}
        )
        try:
            summary = await self.runtime.summarizer.summarize(older)
        except Exception as exc:
            await self.append(
                "operation.finished", {"op_id": op_id, "ok": False, "detail": {"error": str(exc)}}
            )
            raise
        await self.append("operation.finished", {"op_id": op_id, "ok": True, "detail": None})
        after = estimate_tokens(
            [{"role": "system", "content": summary}] + [m for _, m in entries[cut:]]
        )
        return await self.append(
            "compaction",
            {
                "summary": summary,
                "first_entry": entries[0][0],
                "last_entry": entries[cut - 1][0],
                "tokens_before": before,
                "tokens_after": after,
            },
        )

    async def remember(
        self,
        fact: str,
        *,
        scope: str = "principal",
        key: str | None = None,
        expires_at: str | None = None,
        source_event: str | None = None,
    ) -> Record:
        """Write a long-term memory, explicitly (nothing else ever does).

        ``source_event`` is the record the fact comes from (default: the active leaf).
        """
        self._check_open()
        if not isinstance(fact, str) or not fact.strip():
            raise UsageError("a memory is a non-empty fact")
        source = source_event or self.state.leaf or self.state.last_id
        return await self.append(
            "memory.written",
            {
                "memory_id": new_id(),
                "fact": fact,
                "source_event": source,
                "scope": scope,
                "written_at": rfc3339(wall_ns()),
                "expires_at": expires_at,
                "key": key,
            },
        )

    async def forget(self, memory_id: str, *, reason: str | None = None) -> Record:
        """Revoke a memory written in this thread."""
        self._check_open()
        return await self.append("memory.revoked", {"memory_id": memory_id, "reason": reason})

    async def spawn(self, *, title: str | None = None, **config: Any) -> Session:
        """A sub-agent: a child thread with lineage to this one (a side-chain)."""
        self._check_open()
        op_id = new_id()
        await self.append(
            "operation.started", {"op_id": op_id, "kind": "subagent", "detail": {"title": title}}
        )
        child = await self.runtime.create(
            self.state.principal,
            title=title,
            lineage={
                "thread": self.thread_id,
                "ord": self.state.last_ord,
                "entry": self.state.last_id,
                "kind": "subagent",
            },
            **{
                **{
                    k: v
                    for k, v in self.state.config.items()
                    if k in ("cwd", "model", "approval_policy")
                },
                **config,
            },
        )
        self.children.append(child)
        await self.append(
            "operation.finished",
            {"op_id": op_id, "ok": True, "detail": {"thread": child.thread_id}},
        )
        return child

    # -- the turn loop ---------------------------------------------------------------------

    async def continue_turn(self, interrupted: str) -> Record:
        """Start a turn that carries on with the task of an interrupted one."""
        self._check_open()
        old = self.state.turns[interrupted]
        record = await self.append(
            "turn.started", {"turn_id": new_id(), "input": old.input, "resumes": interrupted}
        )
        self._start_turn()
        return record

    def _start_turn(self) -> None:
        if self.busy or self.state.active_turn is None:
            return
        self._turn_task = asyncio.create_task(self._drive(), name=f"turn {self.state.active_turn}")

    def resume_turn(self) -> None:
        """Continue a turn the log shows as running (after a restart)."""
        self._check_open()
        self._start_turn()

    async def _drive(self) -> None:
        turn_id = self.state.active_turn
        assert turn_id is not None
        max_steps = int(self.state.config.get("max_steps") or 100)
        try:
            while True:
                self._changed.clear()
                action = next_action(self.state)
                match action:
                    case Idle():
                        return
                    case Decide(call=call):
                        if not await self._decide_by_policy(call):
                            await self._park()
                    case RunTool(call=call):
                        await self._execute(call)
                    case AwaitResolution():
                        await self._park()
                    case AwaitTool(call=call):
                        # Started in a process that is gone (class 3 of recovery).
                        await self._settle_orphan(call)
                    case ConsumeInput(input_id=input_id):
                        await self.append(
                            "input.consumed", {"input_id": input_id, "turn_id": turn_id}
                        )
                    case CallModel(step_number=n):
                        if n > max_steps:
                            raise _TurnFailed(f"step limit of {max_steps} reached")
                        await self._call_model(turn_id, n)
                    case EndTurn(outcome=outcome, reason=reason):
                        await self.append(
                            "turn.ended", {"turn_id": turn_id, "outcome": outcome, "reason": reason}
                        )
                        return
        except asyncio.CancelledError:
            if not (self._closing and self.waiting_for_human):
                # A turn parked on a human decision survives closing: the wait is durable
                # (a proposal without a decision) and a reopened session waits again.
                await self._end_turn(turn_id, "aborted", "cancelled")
            raise
        except _TurnFailed as exc:
            await self._end_turn(turn_id, "failed", exc.reason)
        except InvalidTransition as exc:
            log.exception("turn %s: the runtime produced an illegal event", turn_id)
            await self._end_turn(turn_id, "failed", f"internal error: {exc}")
        except Exception as exc:
            if self._broken is not None:
                raise  # the store failed: nothing more can be written
            log.exception("turn %s failed", turn_id)
            await self._end_turn(turn_id, "failed", f"{type(exc).__name__}: {exc}")

    async def _end_turn(self, turn_id: str, outcome: str, reason: str) -> None:
        if self._broken is not None or self.state.active_turn != turn_id:
            return
        try:
            await self.append(
                "turn.ended", {"turn_id": turn_id, "outcome": outcome, "reason": reason}
            )
        except Exception:
            log.exception("turn %s: could not record its end", turn_id)

    async def _decide_by_policy(self, call: ToolCallState) -> bool:
        """Apply the approval policy; False when the call waits for a human."""
        decision = decide(self.state.config.get("approval_policy"), call.tool, call.side_effect)
        if decision == "ask":
            self._publish(
                Progress(
                    "approval_needed",
                    {"call_id": call.call_id, "tool": call.tool, "args": call.args},
                )
            )
            return False
        type_ = "tool_call.approved" if decision == "auto" else "tool_call.denied"
        policy = self.state.config.get("approval_policy")
        by_tool = isinstance(policy, dict) and call.tool in (policy.get("tools") or {})
        rule = f"tools.{call.tool}" if by_tool else call.side_effect
        await self.append(type_, {"call_id": call.call_id, "by": f"policy:{rule}"})
        return True

    async def _settle_orphan(self, call: ToolCallState) -> None:
        """A call that started in a dead process and has no result (recovery class 3)."""
        if call.side_effect != "non_idempotent":
            # Read-only and idempotent tools are safe to run again (attempt + 1).
            await self._execute(call)
            return
        await self.mark_unknown(call)

    async def mark_unknown(self, call: ToolCallState, *, note: str | None = None) -> str:
        """Record that a non-idempotent call's outcome is unknown, and ask its reconcile hook.

        ``note`` is added to the recorded reason (resume says there what became of the
        call's processes). Returns ``unknown`` (a human must resolve it), ``done`` or
        ``retry`` (what the hook said; recorded as a resolution by ``reconcile:<tool>``).
        """
        reason = "the process running this tool stopped before its result was recorded"
        await self.append(
            "tool_call.unknown",
            {"call_id": call.call_id, "reason": f"{reason}; {note}" if note else reason},
        )
        return await self.reconcile(call)

    async def reconcile(self, call: ToolCallState) -> str:
        """Ask the tool's ``reconcile`` hook about a call of unknown outcome (see
        `mark_unknown`); ``unknown`` when there is no hook or it cannot tell."""
        if self.state.tool_calls[call.call_id].status != "unknown":
            return self.state.tool_calls[call.call_id].status
        tool = self.runtime.tools.get(call.tool)
        if tool is None or tool.reconcile is None or not call.idempotency_key:
            return "unknown"
        op_id = new_id()
        await self.append(
            "operation.started",
            {
                "op_id": op_id,
                "kind": "reconcile",
                "detail": {"call_id": call.call_id, "key": call.idempotency_key},
            },
        )
        try:
            happened = await tool.reconcile(call.idempotency_key)
        except Exception as exc:
            await self.append(
                "operation.finished", {"op_id": op_id, "ok": False, "detail": {"error": str(exc)}}
            )
            return "unknown"
        await self.append(
            "operation.finished", {"op_id": op_id, "ok": True, "detail": {"happened": happened}}
        )
        if happened is None:
            return "unknown"
        decision = "done" if happened else "retry"
        await self.append(
            "tool_call.resolved",
            {
                "call_id": call.call_id,
                "decision": decision,
                "by": f"reconcile:{call.tool}",
                "note": "the downstream system "
                + ("has" if happened else "has no")
                + " record of the effect",
            },
        )
        return decision

    async def _execute(self, call: ToolCallState) -> None:
        tool = self.runtime.tools.get(call.tool)
        if tool is None:
            await self.append(
                "tool_call.started", {"call_id": call.call_id, "attempt": call.attempt + 1}
            )
            await self.append(
                "tool_call.finished",
                {"call_id": call.call_id, "ok": False, "error": f"unknown tool {call.tool!r}"},
            )
            return
        attempt = call.attempt + 1
        key = call.idempotency_key or derived_id("threadlog.tool", self.thread_id, call.call_id)
        try:
            await self.append(
                "tool_call.started",
                {"call_id": call.call_id, "attempt": attempt, "idempotency_key": key},
            )
        except asyncio.CancelledError:
            # Cancelled while the start intent was becoming durable: the tool never ran, in
            # this very process, so whatever its class the call has certainly no effect.
            if self.state.tool_calls[call.call_id].status == "running":
                await self.append(
                    "tool_call.finished",
                    {"call_id": call.call_id, "ok": False, "error": "cancelled before it ran"},
                )
            raise
        ctx = ToolContext(self.thread_id, call.call_id, attempt, key, self._cwd(), self.runs_dir)
        task = asyncio.create_task(
            tool.run(ctx, dict(call.args)), name=f"tool {call.tool} {call.call_id}"
        )
        self._tool_tasks.add(task)
        ok, result, error = False, None, None
        try:
            async with asyncio.timeout(tool.timeout):
                result = await asyncio.shield(task)
            ok = True
        except TimeoutError:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            error = f"timed out after {tool.timeout:g}s"
        except ToolError as exc:
            error = str(exc)
        except asyncio.CancelledError:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            if tool.side_effect != "non_idempotent":
                # Safe to run again: a plain error result lets the model decide.
                await self.append(
                    "tool_call.finished",
                    {"call_id": call.call_id, "ok": False, "error": "cancelled"},
                )
            else:
                await self.append(
                    "tool_call.unknown",
                    {"call_id": call.call_id, "reason": "cancelled while running"},
                )
            raise
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
        finally:
            self._tool_tasks.discard(task)
        try:
            codec.canonical(result)
        except UsageError:
            ok, result, error = (
                False,
                None,
                f"the tool returned a value that is not JSON: {type(result).__name__}",
            )
        await self.append(
            "tool_call.finished",
            {"call_id": call.call_id, "ok": ok, "result": result, "error": error},
        )

    @property
    def runs_dir(self) -> str | None:
        """Where this session's tools record the processes they start (`runtime.procs`):
        a directory of the store's home, or None for a store without one."""
        store = self.runtime.store
        if isinstance(store, LocalHome) and os.path.isdir(store.home):
            return os.path.join(store.home, procs.RUNS_DIR)
        return None

    def _cwd(self) -> Path:
        cwd = self.state.config.get("cwd")
        return Path(cwd) if isinstance(cwd, str) and cwd else Path(os.getcwd())

    def _request(self) -> ModelRequest:
        config = self.state.config
        active = config.get("tools")
        messages = list(self.context.messages)
        offered = memory_message(self._memories())
        if offered is not None:
            messages.insert(0, offered)
        instructions = config.get("instructions")
        return ModelRequest(
            model=str(config.get("model") or self.runtime.model.name),
            messages=messages,
            tools=self.runtime.tools.specs(active if isinstance(active, list) else None),
            instructions=instructions if isinstance(instructions, str) else None,
            thinking=config.get("thinking"),
        )

    def _memories(self) -> list[MemoryFact]:
        """Facts the thread's memory policy lets this model call see."""
        policy = self.state.config.get("memory_policy")
        if not isinstance(policy, dict):
            return []  # memory enters context only through an explicit policy
        facts = [
            MemoryFact(
                m.memory_id,
                self.thread_id,
                m.fact,
                m.scope,
                m.written_at,
                m.expires_at,
                m.key,
                m.source_event,
            )
            for m in self.state.memories.values()
            if not m.revoked
        ]
        store = self.runtime.store
        if isinstance(store, Catalog) and set(policy.get("scopes") or ()) - {"thread"}:
            facts += [
                f
                for f in store.shared_memories(self.state.principal)
                if f.thread_id != self.thread_id
            ]
        return select_memories(
            facts, thread_id=self.thread_id, now=rfc3339(wall_ns()), policy=policy
        )

    async def _call_model(self, turn_id: str, n: int) -> None:
        budget = self.state.config.get("context_budget")
        if isinstance(budget, int) and estimate_tokens(self.context.messages) > budget:
            await self.compact(keep_last=int(self.state.config.get("compact_keep") or 6))
        model = self.runtime.model
        request = self._request()
        context_snapshot = request.snapshot()
        context_hash = hashlib.sha256(codec.canonical(context_snapshot)).hexdigest()
        step_id = f"{turn_id}.{n}"
        while step_id in self.state.steps:
            step_id += "+"
        try:
            await self.append(
                "step.started",
                {
                    "turn_id": turn_id,
                    "step_id": step_id,
                    "context": context_snapshot,
                    "context_hash": context_hash,
                },
            )
            await self.append(
                "provider.started",
                {
                    "turn_id": turn_id,
                    "step_id": step_id,
                    "provider": model.provider,
                    "model": request.model,
                },
            )
        except asyncio.CancelledError:
            # Cancelled while the step was being recorded: the request never left, or its
            # fate is unknown; either way the step gets its outcome.
            step = self.state.steps.get(step_id)
            if step is not None and step.status in ("started", "provider_started"):
                await self.append(
                    "provider.interrupted",
                    {
                        "turn_id": turn_id,
                        "step_id": step_id,
                        "reason": "cancelled before the request left",
                    },
                )
            raise
        partial: list[str] = []
        completed: Completed | None = None
        self._publish(Progress("thinking", {"step_id": step_id}))
        try:
            async for event in model.stream(request):
                if isinstance(event, TextDelta):
                    partial.append(event.text)
                    self._publish(Progress("text", {"step_id": step_id, "text": event.text}))
                elif isinstance(event, Completed):
                    completed = event
            if completed is None:
                raise ProviderError(
                    "the stream ended without a complete response", partial="".join(partial)
                )
        except ProviderError as exc:
            await self.append(
                "provider.interrupted",
                {
                    "turn_id": turn_id,
                    "step_id": step_id,
                    "reason": str(exc),
                    "partial": "".join(partial) or exc.partial,
                },
            )
            raise _TurnFailed(f"provider error: {exc}") from exc
        except asyncio.CancelledError:
            await self.append(
                "provider.interrupted",
                {
                    "turn_id": turn_id,
                    "step_id": step_id,
                    "reason": "cancelled",
                    "partial": "".join(partial) or None,
                },
            )
            raise
        message = dict(completed.message)
        calls: list[dict[str, Any]] = []
        for raw in message.get("tool_calls") or []:
            call_id = str(raw.get("id") or new_id())
            while call_id in self.state.tool_calls or any(c["id"] == call_id for c in calls):
                call_id += "+"
            args = raw.get("arguments")
            calls.append(
                {
                    "id": call_id,
                    "name": str(raw.get("name") or ""),
                    "arguments": args if isinstance(args, dict) else {},
                }
            )
        message["tool_calls"] = calls
        await self.append(
            "model.responded",
            {
                "turn_id": turn_id,
                "step_id": step_id,
                "message": message,
                "usage": completed.usage,
                "stop_reason": completed.stop_reason,
            },
        )
        for call in calls:
            tool = self.runtime.tools.get(call["name"])
            side_effect = tool.side_effect if tool is not None else "non_idempotent"
            key = None
            if tool is not None and tool.idempotency_key is not None:
                ctx = ToolContext(self.thread_id, call["id"], 1, "", self._cwd())
                key = tool.idempotency_key(ctx, call["arguments"])
            await self.append(
                "tool_call.proposed",
                {
                    "turn_id": turn_id,
                    "step_id": step_id,
                    "call_id": call["id"],
                    "tool": call["name"],
                    "args": call["arguments"],
                    "side_effect": side_effect,
                    "idempotency_key": key,
                },
            )
            if tool is None:
                await self.append(
                    "tool_call.denied",
                    {
                        "call_id": call["id"],
                        "by": "runtime",
                        "reason": f"unknown tool {call['name']!r}",
                    },
                )

    # -- closing ---------------------------------------------------------------------------

    def _save_snapshot(self) -> None:
        store = self.runtime.store
        if not isinstance(store, Snapshots) or self.state.last_hash is None:
            return
        try:
            store.save_snapshot(
                self.thread_id,
                snapshot.dump(self.state, self.context),
                ord=self.state.last_ord,
                hash=self.state.last_hash,
                version=snapshot.SNAPSHOT_VERSION,
            )
        except Exception:
            log.exception(
                "thread %s: could not save a snapshot (resume will replay the log)", self.thread_id
            )

    def _check_open(self) -> None:
        if self._closing or self._closed:
            raise UsageError(f"session {self.thread_id} is closed")

    async def close(self) -> None:
        """The close protocol: stop submissions, cancel, close children, flush, release."""
        if self._closed:
            return
        self._closing = True
        await self.cancel()
        for task in list(self._tool_tasks):
            task.cancel()
        if self._tool_tasks:
            await asyncio.gather(*self._tool_tasks, return_exceptions=True)
        if self._inbox_task is not None:
            self._inbox_task.cancel()
            await asyncio.gather(self._inbox_task, return_exceptions=True)
        for child in self.children:
            await child.close()
        store = self.runtime.store
        try:
            if self._broken is None and self.state.last_ord - self._snapshot_ord >= SNAPSHOT_EVERY:
                await asyncio.to_thread(self._save_snapshot)
            await asyncio.to_thread(store.release, self.thread_id)
        finally:
            store.remove_listener(self._on_durable)
            store.remove_error_listener(self._on_store_error)
            self._closed = True
            for queue, _ in self._subscribers:
                try:
                    queue.put_nowait(_CLOSED)
                except asyncio.QueueFull:
                    pass
            self.runtime._forget(self)
