"""The turn driver: performs what the pure turn logic says the running turn needs next.

Theory of operation
-------------------
*The decision is sans-I/O.* `threadlog.model.turns.next_action` reads the state and says
what the running turn needs: a decision on a proposal, a tool run, a model call, queued input
to consume, or the end. The driver performs it (which appends events, which change the state)
and asks again. A session opened on a log whose turn was cut off by a crash asks the same
question and carries on — except that a tool call that started and has no result is never
re-run on a guess (see `threadlog.runtime.tool_runner`).

*Approval policy.* A proposal is approved or denied by the thread's policy
(`threadlog.model.approvals`), recorded as ``by: policy:<rule>``, or left for a human: the
driver then publishes ``approval_needed`` and *parks*, sleeping until the state changes (an
``approve`` through the API, the CLI's inbox, another coroutine). The wait is durable — a
proposal without a decision in the log — so it survives closing the session: closing does
not end a parked turn, and a reopened session waits again.

*A model call* is a step: ``step.started`` (the exact context's hash, and the context by
reference: what changed since the thread's previous step, `threadlog.model.stepcontext`) and
``provider.started`` are durable before the request leaves; the stream's deltas are published
as `Progress` (never logged); the full response is ``model.responded``, and each tool call it
contains becomes a ``tool_call.proposed`` (an unknown tool is denied at once). A stream that
fails or is cancelled ends the step ``provider.interrupted`` with what arrived — after up to
``model_attempts`` tries when the failure is transient (`threadlog.runtime.retry`).

*Ending.* A turn ends exactly once: ``completed`` when the model proposes nothing more,
``failed`` (provider error, step limit, a budget reached before the next model call —
`threadlog.model.budget` — an exception), ``aborted`` when cancelled. If the
store failed, nothing more can be written and the turn is left for the next resume.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import TYPE_CHECKING, Any, Protocol, cast

from threadlog._clock import new_id
from threadlog.errors import InvalidTransition
from threadlog.model.approvals import decide
from threadlog.model.budget import exceeded, priced
from threadlog.model.events import (
    InputConsumed,
    ModelResponded,
    ProviderInterrupted,
    ProviderStarted,
    StepStarted,
    ToolCallApproved,
    ToolCallCancelled,
    ToolCallDenied,
    ToolCallProposed,
    TurnEnded,
)
from threadlog.model.stepcontext import context_delta, context_hash
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
from threadlog.runtime.bus import Progress
from threadlog.runtime.models import ProviderError
from threadlog.runtime.request import (
    RequestHost,
    build_request,
    estimate_tokens,
    model_messages,
)
from threadlog.runtime.retry import StepAttempts
from threadlog.runtime.tool_runner import working_dir
from threadlog.runtime.tools import ToolContext

if TYPE_CHECKING:
    from threadlog.model.context import Context
    from threadlog.model.envelope import Record
    from threadlog.model.events import TurnOutcome
    from threadlog.model.state import ToolCallState
    from threadlog.runtime.bus import Bus
    from threadlog.runtime.models import Completed
    from threadlog.runtime.tool_runner import ToolRunner

__all__ = ["TurnDriver", "TurnHost", "cancel_unstarted", "step_started"]

log = logging.getLogger("threadlog.runtime")


class TurnHost(RequestHost, Protocol):
    """What a `TurnDriver` needs of its session (`threadlog.runtime.session.Session`): what
    building a request needs (`RequestHost`: the thread, its state and context, the
    runtime's parts, large values, the append pipeline), and the following."""

    @property
    def _broken(self) -> BaseException | None:
        """Set once the session's pipeline failed: nothing more can be written."""
        ...

    async def compact(self, *, keep_last: int = 6) -> Record | None:
        """Summarize the older part of the context (over the budget)."""
        ...


def step_started(
    context: Context, turn_id: str, step_id: str, snapshot: dict[str, Any]
) -> StepStarted:
    """The ``step.started`` of a model call sending ``snapshot``: its hash, and the snapshot
    relative to the thread's previous step (whole when there is none)."""
    digest = context_hash(snapshot)
    if context.step is None:
        return StepStarted(turn_id=turn_id, step_id=step_id, context=snapshot, context_hash=digest)
    base, previous = context.step
    return StepStarted(
        turn_id=turn_id,
        step_id=step_id,
        context_hash=digest,
        base=base,
        delta=context_delta(previous, snapshot, compaction=context.compacted),
    )


async def cancel_unstarted(host: TurnHost, reason: str) -> None:
    """Record ``tool_call.cancelled`` for every call of the thread that has not started.

    Used by an aborted turn (live, or ended for a session that is gone); a store that
    failed gets nothing more (the next resume finds the calls open and settles them).
    """
    if host._broken is not None:
        return
    for call in list(host.state.tool_calls.values()):
        if call.status in ("proposed", "approved"):
            try:
                await host.append(ToolCallCancelled(call_id=call.call_id, reason=reason))
            except Exception:
                log.exception("call %s: could not record its cancellation", call.call_id)
                return


class _TurnFailed(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class TurnDriver:
    """Runs a session's turns, one at a time, in a task (see the module docstring)."""

    def __init__(self, host: TurnHost, tools: ToolRunner, bus: Bus) -> None:
        self._host = host
        self._runner = tools
        self._bus = bus
        self.changed = asyncio.Event()
        """Set by every append: a parked turn wakes up and looks again."""
        self._parked = asyncio.Event()
        """Set while the turn loop sleeps waiting for a human decision."""
        self._task: asyncio.Task[None] | None = None
        self._closing = False

    # -- control ---------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        """Whether a turn is running."""
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Drive the running turn of the log, unless it is driven already (a turn that starts
        while the task of the one before is finishing is driven by that task, next)."""
        if self._closing or self.busy or self._host.state.active_turn is None:
            return
        self._task = asyncio.create_task(self._drive(), name=f"turn {self._host.state.active_turn}")

    async def cancel(self) -> None:
        """Cancel the running turn (it ends ``aborted``); returns once it has ended.

        A task whose turn has ended already (its ``turn.ended`` appended, its durability
        awaited) is not cancelled: nothing is left to cancel, and its append returns as
        usual."""
        task = self._task
        if task is not None and not task.done() and self._host.state.active_turn is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def close(self) -> None:
        """Cancel as the session closes (a turn parked on a human decision is not ended),
        then wait for the task to finish (one whose turn had ended, its last append)."""
        self._closing = True
        await self.cancel()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    async def wait_idle(self, timeout: float | None = None) -> None:
        """See `Session.wait_idle`."""
        task = self._task
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

    @property
    def waiting_for_human(self) -> bool:
        """Whether the running turn waits for an approval or a resolution."""
        state = self._host.state
        action = next_action(state)
        if isinstance(action, Decide):
            return (
                decide(
                    state.config.get("approval_policy"), action.call.tool, action.call.side_effect
                )
                == "ask"
            )
        return isinstance(action, AwaitResolution)

    async def _park(self) -> None:
        """The turn waits for a human: sleep until the state changes."""
        self._parked.set()
        try:
            await self.changed.wait()
        finally:
            self._parked.clear()

    # -- the loop --------------------------------------------------------------------------

    async def _drive(self) -> None:
        """Drive the running turn to its end, then the next one if it has started by then.

        A turn can start between the previous one's ``turn.ended`` and the end of its task
        (whoever awaited that append runs first): the task goes on with it, so no turn is
        ever left running in the log with nothing driving it, and `busy` never says idle in
        between. Nothing is awaited between the last check and the task's end."""
        turn_id = self._host.state.active_turn
        while turn_id is not None:
            await self._drive_turn(turn_id)
            if self._host.state.active_turn == turn_id:
                return  # its end could not be recorded: left for the next resume
            turn_id = self._host.state.active_turn

    async def _drive_turn(self, turn_id: str) -> None:
        host = self._host
        max_steps = int(host.state.config.get("max_steps") or 100)
        try:
            while True:
                self.changed.clear()
                action = next_action(host.state)
                match action:
                    case Idle():
                        return
                    case Decide(call=call):
                        if not await self._decide_by_policy(call):
                            await self._park()
                    case RunTool(call=call):
                        await self._runner.execute(call)
                    case AwaitResolution():
                        await self._park()
                    case AwaitTool(call=call):
                        # Started in a process that is gone (class 3 of recovery).
                        await self._runner.settle_orphan(call)
                    case ConsumeInput(input_id=input_id):
                        await host.append(InputConsumed(input_id=input_id, turn_id=turn_id))
                    case CallModel(step_number=n):
                        if n > max_steps:
                            raise _TurnFailed(f"step limit of {max_steps} reached")
                        over = exceeded(host.state, turn_id)
                        if over is not None:
                            raise _TurnFailed(over)
                        await self._call_model(turn_id, n)
                    case EndTurn(outcome=outcome, reason=reason):
                        await host.append(
                            TurnEnded(
                                turn_id=turn_id,
                                outcome=cast("TurnOutcome", outcome),
                                reason=reason,
                            )
                        )
                        return
        except asyncio.CancelledError:
            # The running turn is cancelled: this one, or the one that started as this one
            # ended, if the cancel came in between.
            running = host.state.active_turn
            if running is not None and not (self._closing and self.waiting_for_human):
                # A turn parked on a human decision survives closing: the wait is durable
                # (a proposal without a decision) and a reopened session waits again.
                await self._abort(running, "session closed" if self._closing else "cancelled")
            raise
        except _TurnFailed as exc:
            await self._end_turn(turn_id, "failed", exc.reason)
        except InvalidTransition as exc:
            log.exception("turn %s: the runtime produced an illegal event", turn_id)
            await self._end_turn(turn_id, "failed", f"internal error: {exc}")
        except Exception as exc:
            if host._broken is not None:
                raise  # the store failed: nothing more can be written
            log.exception("turn %s failed", turn_id)
            await self._end_turn(turn_id, "failed", f"{type(exc).__name__}: {exc}")

    async def _abort(self, turn_id: str, reason: str) -> None:
        """End the turn ``aborted``, after ending every call that has not started.

        000 §17.7 "propagate cancellation": a call proposed or approved before the cancel
        must never run later (the next turn settles every open call it finds), so each is
        recorded ``tool_call.cancelled`` before the turn's ``turn.ended``. A call that is
        running has been cancelled by its runner, which recorded its outcome.
        """
        await cancel_unstarted(self._host, reason)
        await self._end_turn(turn_id, "aborted", reason)

    async def _end_turn(self, turn_id: str, outcome: TurnOutcome, reason: str) -> None:
        host = self._host
        if host._broken is not None or host.state.active_turn != turn_id:
            return
        try:
            await host.append(TurnEnded(turn_id=turn_id, outcome=outcome, reason=reason))
        except Exception:
            log.exception("turn %s: could not record its end", turn_id)

    async def _decide_by_policy(self, call: ToolCallState) -> bool:
        """Apply the approval policy; False when the call waits for a human."""
        policy = self._host.state.config.get("approval_policy")
        decision = decide(policy, call.tool, call.side_effect)
        if decision == "ask":
            self._bus.publish(
                Progress(
                    "approval_needed",
                    {"call_id": call.call_id, "tool": call.tool, "args": call.args},
                )
            )
            return False
        by_tool = isinstance(policy, dict) and call.tool in (policy.get("tools") or {})
        by = f"policy:{f'tools.{call.tool}' if by_tool else call.side_effect}"
        if decision == "auto":
            await self._host.append(ToolCallApproved(call_id=call.call_id, by=by))
        else:
            await self._host.append(ToolCallDenied(call_id=call.call_id, by=by))
        return True

    # -- a model call ----------------------------------------------------------------------

    async def _call_model(self, turn_id: str, n: int) -> None:
        host = self._host
        budget = host.state.config.get("context_budget")
        if isinstance(budget, int) and estimate_tokens(model_messages(host)) > budget:
            await host.compact(keep_last=int(host.state.config.get("compact_keep") or 6))
        model = host.runtime.model
        request = build_request(host)
        step_id = f"{turn_id}.{n}"
        while step_id in host.state.steps:
            step_id += "+"
        try:
            snapshot = request.snapshot()
            started = await host.append(step_started(host.context, turn_id, step_id, snapshot))
            host.context.sent(started.id, snapshot)
            await host.append(
                ProviderStarted(
                    turn_id=turn_id, step_id=step_id, provider=model.provider, model=request.model
                )
            )
        except asyncio.CancelledError:
            # Cancelled while the step was being recorded: the request never left, or its
            # fate is unknown; either way the step gets its outcome.
            step = host.state.steps.get(step_id)
            if step is not None and step.status in ("started", "provider_started"):
                await host.append(
                    ProviderInterrupted(
                        turn_id=turn_id, step_id=step_id, reason="cancelled before the request left"
                    )
                )
            raise
        tries = StepAttempts(host, self._bus, model, request, turn_id, step_id)
        try:
            completed = await tries.run()
        except ProviderError as exc:
            await host.append(
                ProviderInterrupted(
                    turn_id=turn_id,
                    step_id=step_id,
                    reason=str(exc),
                    partial=tries.text or exc.partial,
                )
            )
            raise _TurnFailed(f"provider error: {exc}") from exc
        except asyncio.CancelledError:
            await host.append(
                ProviderInterrupted(
                    turn_id=turn_id,
                    step_id=step_id,
                    reason="cancelled",
                    partial=tries.text or None,
                )
            )
            raise
        usage = priced(completed.usage, request.model, host.state.config.get("prices"))
        await self._respond(turn_id, step_id, dataclasses.replace(completed, usage=usage))

    async def _respond(self, turn_id: str, step_id: str, completed: Completed) -> None:
        """Record the response, and each tool call in it as a proposal."""
        host = self._host
        message = dict(completed.message)
        calls: list[dict[str, Any]] = []
        for raw in message.get("tool_calls") or []:
            call_id = str(raw.get("id") or new_id())
            while call_id in host.state.tool_calls or any(c["id"] == call_id for c in calls):
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
        await host.append(
            ModelResponded(
                turn_id=turn_id,
                step_id=step_id,
                message=message,
                usage=completed.usage,
                stop_reason=completed.stop_reason,
            )
        )
        await self._propose(turn_id, step_id, calls)

    async def _propose(self, turn_id: str, step_id: str, calls: list[dict[str, Any]]) -> None:
        """Record each tool call of a response as a proposal (unknown tools denied)."""
        host = self._host
        for call in calls:
            tool = host.runtime.tools.get(call["name"])
            key = None
            if tool is not None and tool.idempotency_key is not None:
                ctx = ToolContext(host.thread_id, call["id"], 1, "", working_dir(host.state))
                key = tool.idempotency_key(ctx, call["arguments"])
            await host.append(
                ToolCallProposed(
                    turn_id=turn_id,
                    step_id=step_id,
                    call_id=call["id"],
                    tool=call["name"],
                    args=call["arguments"],
                    side_effect=tool.side_effect if tool is not None else "non_idempotent",
                    idempotency_key=key,
                )
            )
            if tool is None:
                await host.append(
                    ToolCallDenied(
                        call_id=call["id"], by="runtime", reason=f"unknown tool {call['name']!r}"
                    )
                )

    async def propose_unrecorded(self, records: list[Record]) -> int:
        """Record the proposals of a durable response that a crash cut off before they were
        written (resume): the response is what the model asked for, so its calls are
        proposed, not forgotten (the next turn would otherwise carry on as if they had run).
        ``records`` are the log's records from the running turn's last responded step on.
        Returns how many calls were proposed."""
        host = self._host
        proposed = 0
        for record in records:
            if record.type != "model.responded":
                continue
            data = host.large_values.load(record).data
            if host.state.active_turn != data["turn_id"]:
                continue
            calls = [
                call
                for call in data["message"].get("tool_calls") or []
                if call.get("id") not in host.state.tool_calls
            ]
            if calls:
                await self._propose(data["turn_id"], data["step_id"], calls)
                proposed += len(calls)
        return proposed
