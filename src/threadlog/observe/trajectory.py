"""Trajectories: what an agent did, step by step, and where two runs of it part (pure).

A *trajectory* is a thread's model calls in order (`Step`: the calls it proposed with their
arguments, results and outcomes, its tokens, cost and time), and its turns' outcomes. It is
read from the records alone, so it works on any thread: a recorded one, its replay against
another model (`threadlog.runtime.replay`), an imported one.

`diff` aligns two trajectories by step index (1-based, across turns) and names the first
step where they diverge — a different tool, different arguments, a different result or
outcome, one more or one fewer call, a step only one of them has — then, if no step differs,
a different turn outcome. Tokens, cost and time are compared too, but as numbers to read,
not as divergences: a model that takes the same path more cheaply has not diverged.
"""

from __future__ import annotations

from dataclasses import field
from typing import TYPE_CHECKING, Any

import orjson

from threadlog._dataclass import dataclass
from threadlog.observe.spans import ts_ns

if TYPE_CHECKING:
    from collections.abc import Iterable

    from threadlog.model.envelope import Record

__all__ = ["Call", "Divergence", "Step", "Trajectory", "TrajectoryDiff", "diff", "trajectory"]


@dataclass(frozen=True, slots=True)
class Call:
    """One tool call a step proposed, and how it ended."""

    call_id: str
    tool: str
    args: dict[str, Any]
    outcome: str = "open"
    """``ok``, ``error``, ``denied``, ``cancelled``, ``unknown`` or ``open`` (no outcome yet)."""
    result: Any = None
    error: str | None = None
    by: str | None = None
    """Who decided it (``policy:…``, a person, ``replay:recorded``)."""


@dataclass(slots=True)
class Step:
    """One model call and what came of it."""

    index: int
    """1-based, across the thread's turns."""
    turn: int
    """1-based index of its turn."""
    step_id: str
    model: str | None = None
    text: str | None = None
    stop_reason: str | None = None
    calls: list[Call] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    seconds: float = 0.0
    """From ``step.started`` to its last record (its calls' outcomes included)."""
    interrupted: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "turn": self.turn,
            "step_id": self.step_id,
            "model": self.model,
            "text": self.text,
            "stop_reason": self.stop_reason,
            "calls": [
                {
                    "call_id": c.call_id,
                    "tool": c.tool,
                    "args": c.args,
                    "outcome": c.outcome,
                    "result": c.result,
                    "error": c.error,
                    "by": c.by,
                }
                for c in self.calls
            ],
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost": self.cost,
            "seconds": round(self.seconds, 6),
            "interrupted": self.interrupted,
        }


@dataclass(slots=True)
class Trajectory:
    """A thread's steps and turn outcomes."""

    thread: str
    steps: list[Step] = field(default_factory=list)
    outcomes: list[str] = field(default_factory=list)
    """Each turn's outcome, in order (``running`` for one that has not ended)."""
    inputs: list[str] = field(default_factory=list)

    @property
    def outcome(self) -> str | None:
        """The last turn's outcome."""
        return self.outcomes[-1] if self.outcomes else None

    def totals(self) -> dict[str, Any]:
        """Steps, tool calls, tokens, cost and time over the whole trajectory."""
        return {
            "steps": len(self.steps),
            "tool_calls": sum(len(s.calls) for s in self.steps),
            "input_tokens": sum(s.input_tokens for s in self.steps),
            "output_tokens": sum(s.output_tokens for s in self.steps),
            "cost": sum(s.cost for s in self.steps),
            "seconds": round(sum(s.seconds for s in self.steps), 6),
            "outcome": self.outcome,
        }


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def trajectory(records: Iterable[Record]) -> Trajectory:
    """The trajectory of a thread's records (ord 1 first; every record, inherited ones too)."""
    result: Trajectory | None = None
    steps: dict[str, Step] = {}
    step_start: dict[str, int] = {}
    calls: dict[str, tuple[Step, int]] = {}
    turns: dict[str, int] = {}
    for record in records:
        if result is None:
            result = Trajectory(record.thread)
        data: dict[str, Any] = record.data if isinstance(record.data, dict) else {}
        ns = ts_ns(record.ts)
        match record.type:
            case "turn.started":
                turns[str(data.get("turn_id"))] = len(result.outcomes)
                result.outcomes.append("running")
                result.inputs.append(str(data.get("input")))
            case "turn.ended":
                n = turns.get(str(data.get("turn_id")))
                if n is not None:
                    result.outcomes[n] = str(data.get("outcome"))
            case "step.started":
                turn = turns.get(str(data.get("turn_id")), len(result.outcomes) - 1)
                step = Step(len(result.steps) + 1, turn + 1, str(data.get("step_id")))
                result.steps.append(step)
                steps[step.step_id] = step
                step_start[step.step_id] = ns
            case "provider.started" | "provider.interrupted" | "model.responded":
                step_or_none = steps.get(str(data.get("step_id")))
                if step_or_none is None:
                    continue
                step = step_or_none
                step.seconds = (ns - step_start[step.step_id]) / 1e9
                if record.type == "provider.started":
                    step.model = str(data.get("model"))
                elif record.type == "provider.interrupted":
                    step.interrupted = str(data.get("reason"))
                else:
                    message = data.get("message") if isinstance(data.get("message"), dict) else {}
                    assert isinstance(message, dict)
                    content = message.get("content")
                    step.text = content if isinstance(content, str) else None
                    step.stop_reason = str(data.get("stop_reason"))
                    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
                    assert isinstance(usage, dict)
                    step.input_tokens = int(_number(usage.get("input_tokens")))
                    step.output_tokens = int(_number(usage.get("output_tokens")))
                    step.cost = _number(usage.get("cost"))
            case "tool_call.proposed":
                owner = steps.get(str(data.get("step_id")))
                if owner is None and result.steps:
                    owner = result.steps[-1]
                if owner is None:
                    continue
                args = data.get("args") if isinstance(data.get("args"), dict) else {}
                assert isinstance(args, dict)
                owner.calls.append(Call(str(data.get("call_id")), str(data.get("tool")), args))
                calls[str(data.get("call_id"))] = (owner, len(owner.calls) - 1)
            case (
                "tool_call.approved"
                | "tool_call.denied"
                | "tool_call.finished"
                | "tool_call.cancelled"
                | "tool_call.unknown"
            ):
                found = calls.get(str(data.get("call_id")))
                if found is None:
                    continue
                owner, i = found
                call = owner.calls[i]
                owner.seconds = max(owner.seconds, (ns - step_start[owner.step_id]) / 1e9)
                verb = record.type.rpartition(".")[2]
                if verb == "approved":
                    owner.calls[i] = _replace(call, by=str(data.get("by")))
                elif verb == "denied":
                    owner.calls[i] = _replace(
                        call, outcome="denied", by=str(data.get("by")), error=data.get("reason")
                    )
                elif verb == "finished":
                    owner.calls[i] = _replace(
                        call,
                        outcome="ok" if data.get("ok") else "error",
                        result=data.get("result"),
                        error=data.get("error"),
                    )
                else:
                    owner.calls[i] = _replace(call, outcome=verb, error=data.get("reason"))
            case _:
                pass
    return result if result is not None else Trajectory("")


def _replace(call: Call, **changes: Any) -> Call:
    fields = {
        "call_id": call.call_id,
        "tool": call.tool,
        "args": call.args,
        "outcome": call.outcome,
        "result": call.result,
        "error": call.error,
        "by": call.by,
    }
    fields.update(changes)
    return Call(**fields)


@dataclass(frozen=True, slots=True)
class Divergence:
    """Where two trajectories first part."""

    step: int | None
    """The 1-based step index (None: the steps agree and the outcomes differ)."""
    what: str
    """``tool``, ``calls``, ``arguments``, ``result``, ``outcome``, ``missing``."""
    message: str
    """E.g. ``step 3: tool read_file vs write_file``."""


@dataclass(frozen=True, slots=True)
class TrajectoryDiff:
    """Two trajectories side by side, and their first divergence (None: the same path)."""

    a: Trajectory
    b: Trajectory
    divergence: Divergence | None

    def to_dict(self) -> dict[str, Any]:
        rows = []
        for i in range(max(len(self.a.steps), len(self.b.steps))):
            sa = self.a.steps[i] if i < len(self.a.steps) else None
            sb = self.b.steps[i] if i < len(self.b.steps) else None
            rows.append(
                {
                    "index": i + 1,
                    "same": _step_divergence(i + 1, sa, sb) is None,
                    "a": sa.to_dict() if sa else None,
                    "b": sb.to_dict() if sb else None,
                }
            )
        d = self.divergence
        return {
            "a": self.a.thread,
            "b": self.b.thread,
            "diverged": d is not None,
            "divergence": {"step": d.step, "what": d.what, "message": d.message} if d else None,
            "totals": {"a": self.a.totals(), "b": self.b.totals()},
            "steps": rows,
        }


def _canon(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def _short(value: Any, width: int = 60) -> str:
    text = _canon(value).decode()
    return text if len(text) <= width else text[: width - 1] + "…"


def _step_divergence(n: int, a: Step | None, b: Step | None) -> Divergence | None:
    if a is None or b is None:
        only = "A" if b is None else "B"
        return Divergence(n, "missing", f"step {n}: only in {only}")
    for x, y in zip(a.calls, b.calls, strict=False):
        if x.tool != y.tool:
            return Divergence(n, "tool", f"step {n}: tool {x.tool} vs {y.tool}")
        if _canon(x.args) != _canon(y.args):
            return Divergence(
                n,
                "arguments",
                f"step {n}: {x.tool} arguments {_short(x.args)} vs {_short(y.args)}",
            )
    if len(a.calls) != len(b.calls):
        names = [", ".join(c.tool for c in s.calls) or "no tool call" for s in (a, b)]
        return Divergence(n, "calls", f"step {n}: {names[0]} vs {names[1]}")
    for x, y in zip(a.calls, b.calls, strict=True):
        if x.outcome != y.outcome:
            return Divergence(n, "outcome", f"step {n}: {x.tool} {x.outcome} vs {y.outcome}")
        if _canon(x.result) != _canon(y.result) or x.error != y.error:
            return Divergence(n, "result", f"step {n}: {x.tool} result differs")
    return None


def diff(a: Trajectory, b: Trajectory) -> TrajectoryDiff:
    """Compare ``a`` and ``b`` step by step (see the module docstring)."""
    for i in range(max(len(a.steps), len(b.steps))):
        sa = a.steps[i] if i < len(a.steps) else None
        sb = b.steps[i] if i < len(b.steps) else None
        found = _step_divergence(i + 1, sa, sb)
        if found is not None:
            return TrajectoryDiff(a, b, found)
    if a.outcomes != b.outcomes:
        message = f"outcome: {', '.join(a.outcomes) or 'none'} vs {', '.join(b.outcomes) or 'none'}"
        return TrajectoryDiff(a, b, Divergence(None, "outcome", message))
    return TrajectoryDiff(a, b, None)
