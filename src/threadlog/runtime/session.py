"""A live session: one thread open in this process, driving its turns.

Theory of operation
-------------------
*One pipeline for every event.* `Session.append` hands the event to the store with a
``check`` hook; the store builds the record (id, ordinal, hash) and, under the thread's lock,
calls the hook, which applies the record to the in-memory state (the reducer refuses illegal
events there, before anything is written) and to the model context. The store then makes the
record durable according to its class; ``append`` returns only then for critical records.
Subscribers are fed by the store's durable-record listener (`threadlog.runtime.bus`), so
nobody ever sees a record that is not on disk, and they see every record once, in order.

*Values, never references.* A record whose large values the store keeps as artifacts is
applied with them loaded (`threadlog.runtime.large_values`): the state and the context hold
the values, each blob read once, when its record is applied.

*Typed events, decoded once.* The runtime appends the catalogue's event objects
(``TurnStarted(turn_id=…, input=…)``), which the store splits into ``(type, data)`` without
decoding; the hook decodes the record once, from the data as stored, for the reducer. (A
``(type, data)`` pair is still accepted; the store then checks it against the catalogue.)

*The parts.* The session holds the state, the context and the pipeline, and offers the public
commands; the rest is done by collaborators that get the session (through a protocol of what
each needs, so that none imports this module):

* `threadlog.runtime.turn.TurnDriver`: the turn loop over the sans-I/O `next_action`, the
  approval policy, model calls and proposals, parking on a human decision;
* `threadlog.runtime.tool_runner.ToolRunner`: one tool call from its durable intent to its
  outcome, and calls of unknown outcome;
* `threadlog.runtime.bus.Bus`: subscribers' streams and the drop policy;
* `threadlog.runtime.mailbox_watch`: commands other processes post to the store's mailbox;
* `threadlog.runtime.request`: the request a model call sends, and compaction;
* `threadlog.runtime.resume`: how the session was started, and what recovery repaired.

*Snapshots while it runs* (`threadlog.runtime.snapshots`): after an append that crosses the
policy's count or time, the state is serialized on the loop and saved in a worker thread; the
append does not wait for it, and a failed snapshot is logged, never raised.

*Close protocol.* Stop new submissions → cancel the running turn (the model stream and any
running tool are cancelled; the turn ends ``aborted``) → close child sessions → flush → give
the lease back.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, cast

from threadlog._clock import new_id
from threadlog.errors import DuplicateEventConflict, RunError, UsageError
from threadlog.model.approvals import check_policy
from threadlog.model.budget import check_config
from threadlog.model.context import Context
from threadlog.model.eventdata import from_data
from threadlog.model.events import (
    ConfigChanged,
    InputQueued,
    ToolCallApproved,
    ToolCallDenied,
    ToolCallResolved,
    TurnStarted,
)
from threadlog.model.legality import replay_log
from threadlog.model.reducer import apply
from threadlog.model.refs import referenced
from threadlog.model.turns import startable_input
from threadlog.runtime import mailbox_watch, request
from threadlog.runtime.bus import Bus, Progress, SubscriberDropped
from threadlog.runtime.deps import SessionDeps
from threadlog.runtime.identity import SessionIdentity, stamp
from threadlog.runtime.large_values import LargeValues, holds_refs
from threadlog.runtime.plans import PlanCommands
from threadlog.runtime.resume import abort_undriven
from threadlog.runtime.snapshots import DEFAULT_SNAPSHOTS, SnapshotPolicy, SnapshotWriter
from threadlog.runtime.tool_runner import ToolRunner, runs_dir, working_dir
from threadlog.runtime.tree_commands import TreeCommands
from threadlog.runtime.turn import TurnDriver

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable
    from pathlib import Path

    from threadlog.model.envelope import Record
    from threadlog.model.events import Event, Resolution
    from threadlog.model.state import ThreadState, ToolCallState
    from threadlog.runtime.resume import RecoveryReport

__all__ = ["Progress", "Session", "SessionBase", "SessionHost", "SubscriberDropped"]

log = logging.getLogger("threadlog.runtime")


class SessionHost(SessionDeps, Protocol):
    """What a session needs of the runtime that opened it (`threadlog.runtime.Runtime`): the
    store, the model, the tools, and a way to open a sub-agent. A protocol, so that this
    module does not import the runtime's (no import circle)."""

    async def spawn(self, parent: Session, *, title: str | None = None, **config: Any) -> Session:
        """A sub-agent of ``parent`` (see `Session.spawn`)."""
        ...


class SessionBase(NamedTuple):
    """A snapshot a session starts from: the state and context after record ``ord``."""

    ord: int
    state: ThreadState
    context: Context


class Session(PlanCommands, TreeCommands):
    """A thread open for writing in this process. Created by `Runtime.create` / `open`.

    Args:
        runtime: what the session uses of its runtime (`SessionHost`).
        thread_id: the thread; its lease is held by the caller.
        records: the log (after ``base.ord`` when there is a base).
        base: a snapshot to start from instead of replaying the whole log.
        on_close: called with the session once it is closed (the runtime forgets it).
        source: what opened the session, recorded in its ``session.opened``: ``sdk`` (a
            program, the default), ``cli`` or ``api`` (`threadlog.runtime.identity`).
        snapshots: when the session saves snapshots of its state (`SnapshotPolicy`).
    """

    def __init__(
        self,
        runtime: SessionHost,
        thread_id: str,
        records: list[Record],
        base: SessionBase | tuple[int, ThreadState, Context] | None = None,
        *,
        on_close: Callable[[Session], None] | None = None,
        source: str = "sdk",
        snapshots: SnapshotPolicy = DEFAULT_SNAPSHOTS,
    ) -> None:
        self.runtime = runtime
        self.thread_id = thread_id
        self.large_values = LargeValues(runtime.store)
        """Loads the records' artifact references, and cuts what a model call cannot take."""
        self.referencing: list[Record] = []
        """Of the records the session opened with, those that reference a blob: what
        recovery checks the blobs of (`threadlog.runtime.artifact_audit`)."""
        records = [self._opened(record) for record in records]
        self.identity = SessionIdentity.new(source)
        """Who writes: this session's id, process, host and source."""
        self._announced = False  # session.opened is written (before the first record)
        self._announce_lock = asyncio.Lock()
        if base is None:
            # (a log holding an event the reducer refuses is damage: IntegrityError, its ord)
            self.state: ThreadState = replay_log(thread_id, records)
            self.context = Context.from_records(records)
            base_ord = 0
        else:
            # a snapshot of the state after ord `base[0]`, and the records after it
            base_ord, state, self.context = base
            self.state = replay_log(thread_id, records, state)
            for record in records:
                self.context.apply(record)
        self.base_ord = base_ord
        """The ordinal of the snapshot this session started from (0: the whole log)."""
        self.replayed = len(records)
        """How many records the session reduced when it opened (after ``base_ord``)."""
        self.snapshots = SnapshotWriter(runtime.store, thread_id, snapshots, base_ord)
        """The snapshots this session saves while it runs (`threadlog.runtime.snapshots`)."""
        self._on_close = on_close
        self._bus = Bus(thread_id, lambda after: runtime.store.read(thread_id, after))
        self._runner = ToolRunner(self, publish=self._bus.publish)
        self._turns = TurnDriver(self, self._runner, self._bus)
        self._changed = self._turns.changed
        """Set by every append (the turn driver sleeps on it)."""
        self._inbox_task: asyncio.Task[None] | None = None
        self._submit_lock = asyncio.Lock()
        self.children: list[Session] = []
        self.recovery: RecoveryReport | None = None
        """What `Runtime.resume` repaired, when this session was opened by it."""
        self._closing = False
        self._closed = False
        self._broken: BaseException | None = None
        self._bus.attach(runtime.store)

    def _opened(self, record: Record) -> Record:
        """A record the session opened with, its large values loaded; kept in
        `referencing` if it references a blob (one look at the data for both)."""
        if record.type != "artifact.stored" and not holds_refs(record.data):
            return record  # the usual record: nothing to load, no blob to audit
        if referenced(record.type, record.data):
            self.referencing.append(record)
        return self.large_values.load(record)

    # -- the pipeline ----------------------------------------------------------------------

    async def append(
        self,
        event: str | Event,
        data: Any = None,
        *,
        durable: bool | None = None,
        id: str | None = None,
    ) -> Record:
        """Append one event through the pipeline (see the module docstring): a catalogue
        event (``TurnStarted(…)``), or a type name and its data. The first one is preceded by
        the session's ``session.opened``; each names the session (`threadlog.runtime.identity`)."""
        if not self._announced:
            await self._announce()
        return await self._write(event, data, durable, id)

    async def _announce(self) -> None:
        async with self._announce_lock:
            if not self._announced:
                await self._write(self.identity.opened(self.state.session), None, None, None)
                self._announced = True

    async def _write(
        self, event: str | Event, data: Any, durable: bool | None, id: str | None
    ) -> Record:
        event, data = stamp(event, data, self.identity.session_id)
        if self._broken is not None:
            raise RunError(f"session {self.thread_id} stopped after an error: {self._broken}")
        try:
            # Every record continues the active leaf: after a branch (leaf.moved) the
            # conversation goes on from there, and the old branch stays as it was.
            record = await self.runtime.store.aappend(
                self.thread_id,
                event,
                data,
                durable=durable,
                id=id,
                parent=self.state.leaf,
                check=self._apply,
            )
        except (UsageError, DuplicateEventConflict, asyncio.CancelledError):
            # refused before anything was applied or written (a duplicate id is found
            # before the state is touched): the session goes on
            raise
        except BaseException as exc:
            # The state may hold a record that never became durable: stop this session.
            self._broken = exc
            raise
        snapshots = self.snapshots
        if snapshots.due(self.state.last_ord) and not self._closing:
            snapshots.schedule(self.state, self.context)  # serialized and saved off this call
        return record

    def _apply(self, record: Record) -> None:
        # The one decode of the record (the store does not decode a typed event): it checks
        # the data as stored (references loaded), and the reducer gets the result.
        record = self.large_values.load(record)
        event = from_data(record.type, record.data)
        apply(self.state, record, event)  # raises InvalidTransition: nothing is written
        self.context.apply(record)
        self._changed.set()

    def subscribe(
        self, after: int = 0, *, progress: bool = False, buffer: int = 10_000
    ) -> AsyncIterator[Record | Progress]:
        """Records with ``ord > after``: the log first, then live as they become durable.

        Each record is delivered once, in ordinal order. With ``progress``, transient
        `Progress` items (text deltas) are interleaved. A subscriber more than ``buffer``
        items behind is dropped with `SubscriberDropped`; resubscribe from its last ordinal.
        If the store stops acknowledging writes (a failed write or fsync), the records made
        durable before are delivered and then `StorageError` is raised: no more will come.
        """
        return self._bus.subscribe(after, progress=progress, buffer=buffer)

    # -- the public API --------------------------------------------------------------------

    @property
    def broken(self) -> BaseException | None:
        """The error that stopped this session (an append that failed, whose record its state
        may hold although it never became durable), or None while it is sound."""
        return self._broken

    @property
    def busy(self) -> bool:
        """Whether a turn is running in this session."""
        return self._turns.busy

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
                record = await self.append(TurnStarted(turn_id=new_id(), input=text), id=id)
                self._turns.start()
                return record
            return await self.append(InputQueued(input_id=new_id(), text=text), id=id)

    async def approve(
        self, call_id: str, *, by: str = "user", reason: str | None = None, id: str | None = None
    ) -> Record:
        """Approve a proposed tool call that is waiting for a decision."""
        self._check_decidable(call_id)
        return await self.append(ToolCallApproved(call_id=call_id, by=by, reason=reason), id=id)

    async def deny(
        self, call_id: str, *, by: str = "user", reason: str | None = None, id: str | None = None
    ) -> Record:
        """Deny a proposed tool call; the model is told it was denied."""
        self._check_decidable(call_id)
        return await self.append(ToolCallDenied(call_id=call_id, by=by, reason=reason), id=id)

    def _check_decidable(self, call_id: str) -> None:
        self._check_open()
        call = self.state.tool_calls.get(call_id)
        if call is None:
            raise UsageError(f"no tool call {call_id!r} in thread {self.thread_id}")
        if call.status != "proposed":
            raise UsageError(f"tool call {call_id!r} is {call.status}, not waiting for a decision")

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
            ToolCallResolved(
                call_id=call_id, decision=cast("Resolution", decision), by=by, note=note
            ),
            id=id,
        )

    async def configure(self, **changes: Any) -> Record:
        """Change config between turns (model, instructions, tools, approval policy, budget…).

        Model, thinking and tools are carried by the branch (`threadlog.model.settings`): a
        later `branch` to an entry before this change restores what held there."""
        self._check_open()
        if self.state.active_turn is not None:
            raise UsageError("config can only change between turns")
        if "approval_policy" in changes and changes["approval_policy"] is not None:
            check_policy(changes["approval_policy"])
        check_config(changes)
        return await self.append(ConfigChanged(changes=changes))

    async def cancel(self, *, turn_id: str | None = None) -> None:
        """Cancel the running turn: every call that has not started is recorded
        ``tool_call.cancelled`` (it never runs later, 000 §17.7), then the turn ends
        ``aborted``; returns once it has. With ``turn_id``, only that turn (else ignored,
        logged). A running turn nobody drives (opened ``resume=False``) is ended too, after
        recovering what a dead process left (`resume.abort_undriven`)."""
        active = self.state.active_turn
        if turn_id is not None and turn_id != active:
            log.info("thread %s: cancel for turn %s ignored: not running", self.thread_id, turn_id)
            return
        if self._turns.busy or active is None:
            await self._turns.cancel()
            return
        self._check_open()
        await abort_undriven(self, self.runtime.store, reason="cancelled")

    async def wait_idle(self, timeout: float | None = None) -> None:
        """Wait until no turn is running, or the running one is parked on a human decision
        (everything it appended before parking is durable), up to ``timeout``."""
        await self._turns.wait_idle(timeout)

    @property
    def waiting_for_human(self) -> bool:
        """Whether the running turn waits for an approval or a resolution."""
        return self._turns.waiting_for_human

    # -- the conversation tree, compaction, memory ------------------------------------------

    async def compact(self, *, keep_last: int = 6) -> Record | None:
        """Replace the older part of the active branch, in model context, by a summary from
        the runtime's summarizer, keeping the last ``keep_last`` messages verbatim (see
        `threadlog.runtime.request`). Nothing is deleted from the log. Returns None when
        there is too little to compact."""
        self._check_open()
        return await request.compact(self, keep_last=keep_last)

    async def spawn(self, *, title: str | None = None, **config: Any) -> Session:
        """A sub-agent: a child thread with lineage to this one (a side-chain); see
        `Runtime.spawn`."""
        return await self.runtime.spawn(self, title=title, **config)

    # -- turns and tool calls (done by the session's parts) ---------------------------------

    async def continue_turn(self, interrupted: str, *, drive: bool = True) -> Record:
        """Start a turn that carries on with the task of an interrupted one; without
        ``drive`` it is left running in the log for the next session (``threadlog resume``)."""
        self._check_open()
        old = self.state.turns[interrupted]
        record = await self.append(
            TurnStarted(turn_id=new_id(), input=old.input, resumes=interrupted)
        )
        if drive:
            self._turns.start()
        return record

    async def start_queued(self) -> Record | None:
        """Start a turn with the oldest input sent while no turn ran and no session was live
        (e.g. ``threadlog send``; `threadlog.model.turns.startable_input`: steering left by
        an aborted or failed turn waits for the next turn instead); None when there is none."""
        self._check_open()
        first = startable_input(self.state)
        if first is None:
            return None
        record = await self.append(
            TurnStarted(turn_id=new_id(), input=first.text, input_id=first.input_id)
        )
        self._turns.start()
        return record

    async def open_mailbox(self, *, drain: bool) -> None:
        """Watch the store's mailbox, if it has one (see `mailbox_watch.start`)."""
        if self._inbox_task is None:
            self._inbox_task = await mailbox_watch.start(
                self, self.runtime.store, apply_waiting=drain
            )

    async def propose_unrecorded(self, records: list[Record]) -> int:
        """See `TurnDriver.propose_unrecorded` (used by resume)."""
        return await self._turns.propose_unrecorded(records)

    def resume_turn(self) -> None:
        """Continue a turn the log shows as running (after a restart)."""
        self._check_open()
        self._turns.start()

    async def mark_unknown(self, call: ToolCallState, *, note: str | None = None) -> str:
        """Record that a non-idempotent call's outcome is unknown, and ask its reconcile hook.

        ``note`` is added to the recorded reason (resume says there what became of the
        call's processes). Returns ``unknown`` (a human must resolve it), ``done`` or
        ``retry`` (what the hook said; recorded as a resolution by ``reconcile:<tool>``).
        """
        return await self._runner.mark_unknown(call, note=note)

    async def reconcile(self, call: ToolCallState) -> str:
        """Ask the tool's ``reconcile`` hook about a call of unknown outcome (see
        `mark_unknown`); ``unknown`` when there is no hook or it cannot tell."""
        return await self._runner.reconcile(call)

    @property
    def runs_dir(self) -> str | None:
        """Where this session's tools record the processes they start (`runtime.procs`):
        a directory of the store's home, or None for a store without one."""
        return runs_dir(self.runtime.store)

    def _cwd(self) -> Path:
        return working_dir(self.state)

    # -- closing ---------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closing or self._closed:
            raise UsageError(f"session {self.thread_id} is closed")

    async def close(self) -> None:
        """The close protocol: stop submissions, cancel, close children, flush, release."""
        if self._closed:
            return
        self._closing = True
        await self._turns.close()
        await self._runner.cancel_all()
        if self._inbox_task is not None:
            self._inbox_task.cancel()
            await asyncio.gather(self._inbox_task, return_exceptions=True)
        for child in self.children:
            await child.close()
        store = self.runtime.store
        try:
            if self._announced and self._broken is None:
                await self._write(self.identity.closed(), None, None, None)
            await self.snapshots.wait()
            if self._broken is None:
                await asyncio.to_thread(self.snapshots.save_now, self.state, self.context)
            await asyncio.to_thread(store.release, self.thread_id)
        finally:
            self._bus.detach(store)
            self._closed = True
            self._bus.close()
            if self._on_close is not None:
                self._on_close(self)
