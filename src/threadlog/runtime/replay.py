"""Replay for evaluation: a recorded thread's user inputs, run again through another model.

Theory of operation
-------------------
*Inputs from the log.* Every turn of the source (from ``at`` on) contributes its input
(``turn.started``); steering it received (``input.queued`` consumed by the turn) is submitted
when the replay's turn has made as many model calls as the source's had when it took it in.
A turn that continued an interrupted one (``resumes``) is part of that task, not a new input.

*Where it runs.* Without ``at``, in a new thread whose ``thread.created`` lineage is
``{"thread": SOURCE, "ord": LAST, "kind": "replay"}`` — in the source's store, or in memory
(``ephemeral``). With ``at``, in a fork of the source at that record (`Runtime.fork`: its
lineage names the source and the ordinal), so the replay starts from the same context. Either
way the thread's config says ``replay: {source, at, model, unmatched}``.

*No recorded side effect is repeated.* The replay thread's approval policy asks about every
call, and the replay answers: a call that matches a recorded one — same tool, same canonical
JSON arguments, matched in order (the first unused recording of that pair) — is approved
``by: replay:recorded`` and its tool, wrapped, returns the recorded result (or raises the
recorded error) without running. A call that matches nothing is, by `Unmatched` policy:
``deny`` — denied with a message the model reads; ``readonly`` — run for real if the tool is
read-only, else denied; ``stop`` — denied, and the replay stops (the turn is cancelled). The
wrapped tools refuse to run anything else, so even a wrong decision cannot run a
non-idempotent tool. The model sees the tools the source's model saw (the specs recorded in
its ``step.started``), with stand-ins for tools this process does not have.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict, deque
from dataclasses import field
from typing import TYPE_CHECKING, Any, Literal, get_args

from threadlog._dataclass import dataclass
from threadlog.errors import UsageError
from threadlog.model import codec
from threadlog.model.stepcontext import StepContexts
from threadlog.runtime.forking import fork_point
from threadlog.runtime.runtime import Runtime
from threadlog.runtime.tools import BUILTIN_TOOLS, Tool, ToolContext, ToolError

if TYPE_CHECKING:
    from collections.abc import Iterable

    from threadlog.model.envelope import Record
    from threadlog.runtime.models import Model
    from threadlog.runtime.session import Session
    from threadlog.store.protocol import Store

__all__ = ["UNMATCHED", "Recorded", "ReplayResult", "Unmatched", "replay_thread"]

Unmatched = Literal["deny", "readonly", "stop"]
"""What the replay does with a call that matches no recorded one."""
UNMATCHED: tuple[str, ...] = get_args(Unmatched)

ASK_ALL: dict[str, Any] = {"read_only": "ask", "idempotent": "ask", "non_idempotent": "ask"}

_SETTINGS = ("cwd", "instructions", "thinking", "max_steps", "prices", "context_budget")
"""Config the replay takes from the source (not its model, approval policy or budget)."""


@dataclass(frozen=True, slots=True)
class Recorded:
    """A recorded call's outcome, to be served to a matching call."""

    call_id: str
    tool: str
    ok: bool
    result: Any
    error: str | None


@dataclass(slots=True)
class ReplayResult:
    """What a replay did."""

    source: str
    thread: str
    """The replay's thread."""
    at: int | None
    served: list[str] = field(default_factory=list)
    """Calls of the replay given a recorded result."""
    ran: list[str] = field(default_factory=list)
    """Unmatched read-only calls run for real (policy ``readonly``)."""
    denied: list[str] = field(default_factory=list)
    """Unmatched calls denied."""
    stopped: str | None = None
    """Why the replay stopped early (policy ``stop``), or None."""
    skipped_inputs: list[str] = field(default_factory=list)
    """Steering the replay never reached (its turn ended sooner)."""
    records: list[Record] = field(default_factory=list)
    """The replay thread's records (read before an ephemeral store is dropped)."""


@dataclass(slots=True)
class _Turn:
    input: str
    steering: list[tuple[int, str]] = field(default_factory=list)
    """(model calls made in the turn before the source took it in, text)."""


@dataclass(slots=True)
class _Source:
    config: dict[str, Any]
    principal: str
    title: str | None
    turns: list[_Turn]
    recorded: dict[tuple[str, bytes], deque[Recorded]]
    specs: dict[str, dict[str, Any]]
    side_effects: dict[str, str]
    last: Record


def _key(tool: str, args: Any) -> tuple[str, bytes]:
    return tool, codec.canonical(args if isinstance(args, dict) else {})


def _read_source(records: list[Record], at: int | None) -> _Source:
    """What a replay needs from the source's records."""
    if not records or records[0].type != "thread.created":
        raise UsageError("the source thread has no thread.created record")
    head: dict[str, Any] = records[0].data
    config = dict(head.get("config") or {})
    turns: list[_Turn] = []
    by_turn: dict[str, _Turn] = {}
    steps_in: dict[str, int] = defaultdict(int)
    queued: dict[str, str] = {}
    proposals: dict[str, tuple[str, Any]] = {}
    recorded: dict[tuple[str, bytes], deque[Recorded]] = defaultdict(deque)
    specs: dict[str, dict[str, Any]] = {}
    side_effects: dict[str, str] = {}
    contexts = StepContexts()  # each step's exact context, rebuilt and checked
    for record in records:
        data: dict[str, Any] = record.data if isinstance(record.data, dict) else {}
        after = at is None or record.ord > at
        match record.type:
            case "config.changed" if not after:
                for k, v in (data.get("changes") or {}).items():
                    if v is None:
                        config.pop(k, None)
                    else:
                        config[k] = v
            case "turn.started" if after and not data.get("resumes"):
                turn = _Turn(str(data["input"]))
                turns.append(turn)
                by_turn[str(data["turn_id"])] = turn
            case "turn.started" if after:
                # a continuation after a crash: the same task, under the turn it resumes
                resumed = by_turn.get(str(data["resumes"]))
                if resumed is not None:
                    by_turn[str(data["turn_id"])] = resumed
            case "step.started":
                steps_in[str(data.get("turn_id"))] += 1
                context = contexts.apply(record)
                for spec in (context.get("tools") if context is not None else None) or []:
                    if isinstance(spec, dict) and isinstance(spec.get("name"), str):
                        specs.setdefault(spec["name"], spec)
            case "input.queued":
                queued[str(data["input_id"])] = str(data["text"])
            case "input.consumed" if after:
                taker = by_turn.get(str(data["turn_id"]))
                text = queued.get(str(data["input_id"]))
                if taker is not None and text is not None:
                    taker.steering.append((steps_in[str(data["turn_id"])], text))
            case "tool_call.proposed":
                proposals[str(data["call_id"])] = (str(data["tool"]), data.get("args"))
                side_effects.setdefault(str(data["tool"]), str(data.get("side_effect")))
            case "tool_call.finished" if after:
                call_id = str(data["call_id"])
                if call_id in proposals:
                    tool, args = proposals[call_id]
                    recorded[_key(tool, args)].append(
                        Recorded(
                            call_id,
                            tool,
                            bool(data.get("ok")),
                            data.get("result"),
                            data.get("error"),
                        )
                    )
            case _:
                pass
    last = records[-1] if at is None else next(r for r in records if r.ord == at)
    return _Source(
        config,
        str(head.get("principal") or "local"),
        head.get("title"),
        turns,
        recorded,
        specs,
        side_effects,
        last,
    )


class _Serving:
    """The replay's tools: recorded results for matched calls; nothing else runs unless the
    replay approved it as an unmatched read-only call."""

    def __init__(self, source: _Source, tools: Iterable[Tool]) -> None:
        self.real = {t.name: t for t in tools}
        self.serve: dict[str, Recorded] = {}
        self.run_real: set[str] = set()
        names = list(dict.fromkeys([*source.specs, *self.real]))
        self.tools = [self._wrap(name, source) for name in names]

    def _wrap(self, name: str, source: _Source) -> Tool:
        real = self.real.get(name)
        spec = source.specs.get(name) or (real.spec() if real else {})

        async def run(ctx: ToolContext, args: dict[str, Any]) -> Any:
            recorded = self.serve.get(ctx.call_id)
            if recorded is not None:
                if not recorded.ok:
                    raise ToolError(recorded.error or "error")
                return recorded.result
            if ctx.call_id in self.run_real and real is not None:
                return await real.run(ctx, args)
            raise ToolError("replay: this call was not approved to run")

        side = real.side_effect if real is not None else source.side_effects.get(name)
        return Tool(
            name=name,
            description=str(spec.get("description") or f"{name} (replayed)"),
            parameters=dict(spec.get("parameters") or {"type": "object"}),
            side_effect=side if side in ("read_only", "idempotent") else "non_idempotent",  # type: ignore[arg-type]
            run=run,
            timeout=real.timeout if real is not None else 60.0,
        )


async def replay_thread(
    store: Store,
    thread_id: str,
    model: Model,
    *,
    at: int | None = None,
    unmatched: Unmatched = "deny",
    tools: Iterable[Tool] = BUILTIN_TOOLS,
    ephemeral: bool = False,
    title: str | None = None,
    model_spec: str | None = None,
    timeout: float = 300.0,
) -> ReplayResult:
    """Replay ``thread_id`` of ``store`` against ``model`` (see the module docstring).

    Args:
        at: fork the source after this ordinal and replay the turns after it (default: a new
            thread, every turn).
        unmatched: what to do with a call that matches no recorded one (`Unmatched`).
        tools: the real tools, for unmatched read-only calls under ``readonly`` (and their
            specs and side-effect classes).
        ephemeral: keep the replay in memory (no ``at``): nothing is written to ``store``.
        model_spec: how the model was named (recorded in the replay's config).
        timeout: seconds to wait for any one turn.

    Raises:
        UsageError: an unknown policy, ``at`` with ``ephemeral``, an ``at`` not in the log.
    """
    if unmatched not in UNMATCHED:
        raise UsageError(f"unmatched must be one of {', '.join(UNMATCHED)}, not {unmatched!r}")
    if at is not None and ephemeral:
        raise UsageError("--at forks the source in its store: it cannot be ephemeral")
    records = [r._replace(data=store.resolve(r.data)) for r in store.read(thread_id)]
    if at is not None:
        if not 1 <= at <= records[-1].ord:
            raise UsageError(f"thread {thread_id} has no record {at}")
        # inside a turn, the fork moves back to the turn's start: that turn is replayed too
        at = (await asyncio.to_thread(fork_point, store, thread_id, at)).ord
    source = _read_source(records, at)
    serving = _Serving(source, tools)
    tag = {
        "source": thread_id,
        "at": at,
        "model": model_spec or model.name,
        "unmatched": unmatched,
    }
    target: Any = {"ephemeral": True} if ephemeral else {"store": store}
    name = title or f"replay of {source.title or thread_id}"
    async with Runtime(**target, model=model, tools=serving.tools) as runtime:
        if at is None:
            settings = {k: v for k, v in source.config.items() if k in _SETTINGS}
            session = await runtime.create(
                source.principal,
                title=name,
                lineage={
                    "thread": thread_id,
                    "ord": source.last.ord,
                    "entry": source.last.id,
                    "kind": "replay",
                },
                **settings,
                model=model.name,
                approval_policy=ASK_ALL,
                replay=tag,
            )
        else:
            session = await runtime.fork(
                thread_id,
                at,
                title=name,
                model=model.name,
                approval_policy=ASK_ALL,
                replay=tag,
            )
        result = ReplayResult(thread_id, session.thread_id, at)
        for turn in source.turns:
            await _drive(session, turn, source, serving, unmatched, result, timeout)
            if result.stopped is not None:
                break
        await asyncio.to_thread(runtime.store.flush)
        result.records = list(runtime.store.read(session.thread_id))
    return result


async def _drive(
    session: Session,
    turn: _Turn,
    source: _Source,
    serving: _Serving,
    unmatched: Unmatched,
    result: ReplayResult,
    timeout: float,
) -> None:
    """Run one turn of the replay, deciding every call it proposes."""
    await session.submit(turn.input)
    turn_id = session.state.active_turn
    steering = list(turn.steering)
    while True:
        await session.wait_idle(timeout)
        state = session.state
        if state.active_turn != turn_id or turn_id is None:
            break
        made = sum(1 for s in state.steps.values() if s.turn_id == turn_id)
        while steering and steering[0][0] <= made:
            await session.submit(steering.pop(0)[1])
        pending = [c for c in state.tool_calls.values() if c.status == "proposed"]
        if not pending:
            if session.waiting_for_human:  # a resolution: nothing the replay can give
                result.stopped = "the replayed turn waits for a decision the replay cannot give"
                await session.cancel()
                break
            await asyncio.sleep(0.005)  # a decision just made: the turn is waking up
            continue
        for call in pending:
            queue = source.recorded.get(_key(call.tool, call.args))
            if queue:
                serving.serve[call.call_id] = queue.popleft()
                await session.approve(call.call_id, by="replay:recorded")
                result.served.append(call.call_id)
                continue
            real = serving.real.get(call.tool)
            if unmatched == "readonly" and real is not None and real.side_effect == "read_only":
                serving.run_real.add(call.call_id)
                await session.approve(call.call_id, by="replay:read-only")
                result.ran.append(call.call_id)
                continue
            reason = (
                "replay: this call matches no recorded call (same tool and arguments), so it "
                "has no recorded result to reuse; it was not run"
            )
            await session.deny(call.call_id, by="replay", reason=reason)
            result.denied.append(call.call_id)
            if unmatched == "stop":
                result.stopped = f"{call.tool} {_args(call.args)} matches no recorded call"
                await session.cancel()
                break
        if result.stopped is not None:
            break
    result.skipped_inputs.extend(text for _, text in steering)


def _args(args: Any) -> str:
    text = codec.canonical(args).decode()
    return text if len(text) <= 60 else text[:59] + "…"
