"""Records to spans: a pure function from a thread's log to an OpenTelemetry-shaped span tree.

Theory of operation
-------------------
*One builder, fed record by record.* `SpanBuilder.feed` takes the next record of a thread and
returns the spans that this record *ended*. `spans_of` feeds a whole log and also returns the
spans still open at its end. Live tracing (`threadlog.observe.live`) feeds the records as they
become durable and emits what ``feed`` returns; ``threadlog export --format otlp`` calls
`spans_of` on the stored log. Both run the same code on the same records, so the spans are the
same — ids included.

*Deterministic ids.* A turn is a trace: its trace id is the first 16 bytes of a SHA-256 over the
thread id and the turn id; every span id is the first 8 bytes of one over the thread id and what
the span is (the turn, the step id, the call id and its attempt). Timestamps are the records'
``ts``. Nothing here reads a clock or draws a random number.

*The tree.* Per turn (``turn.started`` → ``turn.ended``): an ``invoke_agent`` span; under it
one ``chat {model}`` span per step (``step.started`` → ``model.responded``, or a
``provider.interrupted`` that is not retried) and one ``execute_tool {tool}`` span per tool
call (``tool_call.proposed`` → ``finished`` | ``denied`` | ``cancelled`` | ``unknown``). The
attributes follow the OpenTelemetry GenAI semantic conventions (``gen_ai.operation.name``,
``gen_ai.system``/``gen_ai.provider.name``, ``gen_ai.request.model``, ``gen_ai.usage.*``,
``gen_ai.response.finish_reasons``, ``gen_ai.tool.name``, ``gen_ai.tool.call.id``,
``gen_ai.conversation.id``); ``threadlog.*`` attributes lead back to the log: the thread, the
first and last ordinal and event id of the records the span covers.

*What happened along the way* is a span event: approvals and denials (``threadlog.by`` says
who: a policy or a person), each start of a call (attempt), an interrupted or retried provider
request, queued input taken into the turn, a recovery (``thread.resumed``, with its repairs,
on the turn it interrupted or else the next one). A call whose outcome is unknown ends its span
with an error status; the human decision that later settles it (``tool_call.resolved``) is a
zero-length ``resolve_tool`` span under it, with the decision as an event — a span already
emitted live cannot be given more events. A call resolved ``retry`` that runs again gets a new
``execute_tool`` span (``threadlog.tool_call.attempt``).

*Limits.* Records a fork inherited (its ``thread`` field names an ancestor) are skipped: they
are the ancestor's spans. Message content (inputs, replies, tool arguments and results) is not
put in spans. Records of a type the builder does not know change nothing.
"""

from __future__ import annotations

import hashlib
from dataclasses import field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from threadlog._dataclass import dataclass

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from threadlog.model.envelope import Record

__all__ = [
    "AttrValue",
    "Span",
    "SpanBuilder",
    "SpanEvent",
    "span_id",
    "spans_of",
    "trace_id",
    "ts_ns",
]

AttrValue = str | bool | int | float | list[str]
"""An attribute value (the subset of OpenTelemetry's that spans here use)."""

SpanKind = Literal["internal", "client"]
Status = Literal["unset", "ok", "error"]


@dataclass(frozen=True, slots=True)
class SpanEvent:
    """Something that happened during a span, at a record's time."""

    name: str
    time_ns: int
    attributes: dict[str, AttrValue] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Span:
    """One finished (or, from `spans_of`, still open) span."""

    trace_id: str
    """32 lower-case hex digits."""
    span_id: str
    """16 lower-case hex digits."""
    parent_span_id: str | None
    name: str
    kind: SpanKind
    start_ns: int
    end_ns: int
    attributes: dict[str, AttrValue]
    events: tuple[SpanEvent, ...] = ()
    status: Status = "unset"
    status_message: str | None = None


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x00".join(("threadlog.otel", *parts)).encode()).hexdigest()


def trace_id(thread: str, turn_id: str) -> str:
    """The trace id of a turn."""
    return _digest(thread, "turn", turn_id)[:32]


def span_id(thread: str, *what: str) -> str:
    """The span id of what ``what`` names in ``thread`` (e.g. ``("step", step_id)``)."""
    return _digest(thread, *what)[:16]


def ts_ns(ts: str) -> int:
    """A record's ``ts`` (RFC 3339, UTC, microseconds) as Unix nanoseconds."""
    moment = datetime.fromisoformat(ts.replace("Z", "+00:00"))
    seconds = int(moment.timestamp())
    return seconds * 1_000_000_000 + moment.microsecond * 1_000


@dataclass(slots=True)
class _Open:
    """A span being built."""

    trace_id: str
    span_id: str
    parent: str | None
    name: str
    kind: SpanKind
    start_ns: int
    first_ord: int
    first_id: str
    last_ord: int
    last_id: str
    last_ns: int
    attributes: dict[str, AttrValue]
    events: list[SpanEvent] = field(default_factory=list)

    @classmethod
    def at(
        cls,
        ids: tuple[str, str, str | None],
        name: str,
        kind: SpanKind,
        record: Record,
        ns: int,
        attributes: dict[str, AttrValue],
        events: list[SpanEvent] | None = None,
    ) -> _Open:
        """A span starting at ``record``; ``ids`` is (trace id, span id, parent span id)."""
        trace, span, parent = ids
        return cls(
            trace,
            span,
            parent,
            name,
            kind,
            ns,
            record.ord,
            record.id,
            record.ord,
            record.id,
            ns,
            attributes,
            events or [],
        )

    def touch(self, record: Record, ns: int) -> None:
        self.last_ord, self.last_id, self.last_ns = record.ord, record.id, ns

    def close(
        self,
        end_ns: int,
        status: Status = "unset",
        message: str | None = None,
        *,
        open_: bool = False,
    ) -> Span:
        attributes = dict(self.attributes)
        attributes["threadlog.ord.first"] = self.first_ord
        attributes["threadlog.ord.last"] = self.last_ord
        attributes["threadlog.event.first"] = self.first_id
        attributes["threadlog.event.last"] = self.last_id
        if open_:
            attributes["threadlog.open"] = True
        return Span(
            trace_id=self.trace_id,
            span_id=self.span_id,
            parent_span_id=self.parent,
            name=self.name,
            kind=self.kind,
            start_ns=self.start_ns,
            end_ns=end_ns,
            attributes=attributes,
            events=tuple(self.events),
            status=status,
            status_message=message,
        )


def _event(name: str, ns: int, **attrs: AttrValue | None) -> SpanEvent:
    return SpanEvent(name, ns, {k.replace("__", "."): v for k, v in attrs.items() if v is not None})


class SpanBuilder:
    """Builds the spans of one thread from its records, in order (see the module docstring).

    Args:
        thread: the thread's id (its ord 1's ``thread``); records written by another thread
            (a fork's inherited prefix) are skipped.
    """

    def __init__(self, thread: str) -> None:
        self.thread = thread
        self._turns: dict[str, _Open] = {}
        self._steps: dict[str, _Open] = {}
        self._calls: dict[str, _Open] = {}
        self._call_turn: dict[str, tuple[str, str]] = {}
        """call id → (trace id, turn span id), kept after the call's span ends."""
        self._call_info: dict[str, tuple[str, str, str]] = {}
        """call id → (tool, last span id, side effect)."""
        self._attempts: dict[str, int] = {}
        self._active_turn: str | None = None
        self._pending: list[SpanEvent] = []
        """Events for the next turn span (a recovery outside any turn)."""

    def feed(self, record: Record) -> list[Span]:
        """Take the next record; return the spans it ended."""
        if record.thread != self.thread or not isinstance(record.data, dict):
            return []
        ns = ts_ns(record.ts)
        data: dict[str, Any] = record.data
        out: list[Span] = []
        match record.type:
            case "turn.started":
                self._turn_started(record, data, ns)
            case "turn.ended":
                turn = self._turns.pop(str(data.get("turn_id")), None)
                if turn is not None:
                    turn.touch(record, ns)
                    outcome = str(data.get("outcome"))
                    turn.attributes["threadlog.turn.outcome"] = outcome
                    reason = data.get("reason")
                    if isinstance(reason, str):
                        turn.attributes["threadlog.turn.reason"] = reason
                    status: Status = "error" if outcome == "failed" else "ok"
                    if outcome in ("aborted", "interrupted"):
                        status = "unset"
                    out.append(turn.close(ns, status, reason if status == "error" else None))
                if self._active_turn == data.get("turn_id"):
                    self._active_turn = None
            case "input.consumed":
                self._turn_event(record, ns, _event("threadlog.input.consumed", ns))
            case "thread.resumed":
                repairs = data.get("repairs") or []
                kinds = sorted(
                    {
                        str(r.get("kind") or r.get("action") or "repair")
                        for r in repairs
                        if isinstance(r, dict)
                    }
                )
                event = _event(
                    "threadlog.thread.resumed",
                    ns,
                    threadlog__repairs=len(repairs),
                    threadlog__repair_kinds=kinds or None,
                    threadlog__event=record.id,
                )
                if not self._turn_event(record, ns, event):
                    self._pending.append(event)
            case "step.started":
                self._step_started(record, data, ns)
            case "provider.started" | "provider.interrupted" | "model.responded":
                ended = self._step_record(record, data, ns)
                if ended is not None:
                    out.append(ended)
            case "tool_call.proposed":
                self._proposed(record, data, ns)
            case "tool_call.started":
                self._started(record, data, ns)
            case (
                "tool_call.approved"
                | "tool_call.denied"
                | "tool_call.finished"
                | "tool_call.cancelled"
                | "tool_call.unknown"
            ):
                ended = self._call_record(record, data, ns)
                if ended is not None:
                    out.append(ended)
            case "tool_call.resolved":
                resolved = self._resolved(record, data, ns)
                if resolved is not None:
                    out.append(resolved)
            case _:
                pass
        return out

    def open_spans(self) -> list[Span]:
        """The spans not ended yet, ended at their last record (``threadlog.open``)."""
        pending = [*self._calls.values(), *self._steps.values(), *self._turns.values()]
        return [s.close(s.last_ns, open_=True) for s in pending]

    # -- the parts -------------------------------------------------------------------------

    def _turn_started(self, record: Record, data: dict[str, Any], ns: int) -> None:
        turn_id = str(data.get("turn_id"))
        attributes: dict[str, AttrValue] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "threadlog",
            "gen_ai.conversation.id": self.thread,
            "threadlog.thread.id": self.thread,
            "threadlog.turn.id": turn_id,
        }
        if isinstance(data.get("resumes"), str):
            attributes["threadlog.turn.resumes"] = data["resumes"]
        turn = _Open.at(
            (trace_id(self.thread, turn_id), span_id(self.thread, "turn", turn_id), None),
            "invoke_agent threadlog",
            "internal",
            record,
            ns,
            attributes,
            list(self._pending),
        )
        self._pending.clear()
        self._turns[turn_id] = turn
        self._active_turn = turn_id

    def _turn_event(self, record: Record, ns: int, event: SpanEvent) -> bool:
        turn = self._turns.get(self._active_turn) if self._active_turn else None
        if turn is None:
            return False
        turn.touch(record, ns)
        turn.events.append(event)
        return True

    def _child(
        self,
        turn_id: str,
        key: tuple[str, ...],
        name: str,
        kind: SpanKind,
        record: Record,
        ns: int,
        attributes: dict[str, AttrValue],
    ) -> _Open | None:
        turn = self._turns.get(turn_id)
        if turn is None:
            return None
        turn.touch(record, ns)
        attributes = {
            "threadlog.thread.id": self.thread,
            "threadlog.turn.id": turn_id,
            **attributes,
        }
        return _Open.at(
            (turn.trace_id, span_id(self.thread, *key), turn.span_id),
            name,
            kind,
            record,
            ns,
            attributes,
        )

    def _step_started(self, record: Record, data: dict[str, Any], ns: int) -> None:
        step_id = str(data.get("step_id"))
        step = self._child(
            str(data.get("turn_id")),
            ("step", step_id),
            "chat",
            "client",
            record,
            ns,
            {"gen_ai.operation.name": "chat", "threadlog.step.id": step_id},
        )
        if step is not None:
            self._steps[step_id] = step

    def _step_record(self, record: Record, data: dict[str, Any], ns: int) -> Span | None:
        """A step's request left, failed or was answered."""
        key = str(data.get("step_id"))
        step = self._steps.get(key)
        if step is None:
            return None
        step.touch(record, ns)
        if record.type == "provider.started":
            provider, model = str(data.get("provider")), str(data.get("model"))
            step.name = f"chat {model}"
            step.attributes["gen_ai.system"] = provider
            step.attributes["gen_ai.provider.name"] = provider
            step.attributes["gen_ai.request.model"] = model
            attempt = data.get("attempt")
            if isinstance(attempt, int) and attempt > 1:
                step.events.append(
                    _event("threadlog.provider.retry", ns, threadlog__attempt=attempt)
                )
            return None
        if record.type == "provider.interrupted":
            reason, retryable = str(data.get("reason")), bool(data.get("retryable"))
            step.events.append(
                _event(
                    "threadlog.provider.interrupted",
                    ns,
                    threadlog__reason=reason,
                    threadlog__retryable=retryable,
                )
            )
            if retryable:
                return None
            del self._steps[key]
            return step.close(ns, "error", reason)
        del self._steps[key]
        self._responded(step, data)
        return step.close(ns, "ok")

    @staticmethod
    def _responded(step: _Open, data: dict[str, Any]) -> None:
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        assert isinstance(usage, dict)
        for source, target in (
            ("input_tokens", "gen_ai.usage.input_tokens"),
            ("output_tokens", "gen_ai.usage.output_tokens"),
            ("cache_read_tokens", "gen_ai.usage.cache_read_input_tokens"),
            ("cache_write_tokens", "gen_ai.usage.cache_creation_input_tokens"),
        ):
            value = usage.get(source)
            if isinstance(value, int) and not isinstance(value, bool):
                step.attributes[target] = value
        cost = usage.get("cost")
        if isinstance(cost, int | float) and not isinstance(cost, bool):
            step.attributes["threadlog.usage.cost"] = float(cost)
        step.attributes["gen_ai.response.finish_reasons"] = [str(data.get("stop_reason"))]
        model = step.attributes.get("gen_ai.request.model")
        if isinstance(model, str):
            step.attributes["gen_ai.response.model"] = model
        message = data.get("message") if isinstance(data.get("message"), dict) else {}
        assert isinstance(message, dict)
        calls = message.get("tool_calls") or []
        step.attributes["threadlog.step.tool_calls"] = len(calls) if isinstance(calls, list) else 0

    def _proposed(self, record: Record, data: dict[str, Any], ns: int) -> None:
        call_id, tool = str(data.get("call_id")), str(data.get("tool"))
        turn_id = str(data.get("turn_id"))
        self._attempts[call_id] = 1
        attributes: dict[str, AttrValue] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool,
            "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.type": "function",
            "threadlog.tool.side_effect": str(data.get("side_effect")),
        }
        if isinstance(data.get("step_id"), str):
            attributes["threadlog.step.id"] = data["step_id"]
        call = self._child(
            turn_id,
            ("call", call_id, "1"),
            f"execute_tool {tool}",
            "internal",
            record,
            ns,
            attributes,
        )
        if call is not None:
            self._calls[call_id] = call
            self._call_turn[call_id] = (call.trace_id, call.parent or "")
            self._call_info[call_id] = (tool, call.span_id, str(data.get("side_effect")))

    def _started(self, record: Record, data: dict[str, Any], ns: int) -> None:
        call_id = str(data.get("call_id"))
        attempt = data.get("attempt") if isinstance(data.get("attempt"), int) else 1
        assert isinstance(attempt, int)
        call = self._calls.get(call_id)
        if call is None and call_id in self._call_turn:
            # a call resolved "retry" runs again: a span of its own in the same trace
            trace, parent = self._call_turn[call_id]
            tool, _, side_effect = self._call_info[call_id]
            n = self._attempts[call_id] = self._attempts.get(call_id, 1) + 1
            call = _Open.at(
                (trace, span_id(self.thread, "call", call_id, str(n)), parent or None),
                f"execute_tool {tool}",
                "internal",
                record,
                ns,
                {
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": tool,
                    "gen_ai.tool.call.id": call_id,
                    "gen_ai.tool.type": "function",
                    "threadlog.tool.side_effect": side_effect,
                    "threadlog.thread.id": self.thread,
                    "threadlog.tool_call.attempt": attempt,
                },
            )
            self._calls[call_id] = call
            self._call_info[call_id] = (tool, call.span_id, side_effect)
        if call is None:
            return
        call.touch(record, ns)
        call.events.append(_event("threadlog.tool_call.started", ns, threadlog__attempt=attempt))

    def _call_record(self, record: Record, data: dict[str, Any], ns: int) -> Span | None:
        """A decision or an outcome of a call: an event, and for an outcome the span's end."""
        call_id = str(data.get("call_id"))
        call = self._calls.get(call_id)
        if call is None:
            return None
        call.touch(record, ns)
        verb = record.type.rpartition(".")[2]
        if verb == "finished":
            if data.get("ok"):
                return self._end_call(call_id, ns, "ok", "ok")
            return self._end_call(call_id, ns, "error", "error", str(data.get("error")))
        by = str(data["by"]) if verb in ("approved", "denied") else None
        reason = data.get("reason")
        call.events.append(
            _event(f"threadlog.tool_call.{verb}", ns, threadlog__by=by, threadlog__reason=reason)
        )
        if verb == "denied" or verb == "cancelled":
            return self._end_call(call_id, ns, verb)
        if verb == "unknown":
            return self._end_call(call_id, ns, verb, "error", f"outcome unknown: {reason}")
        return None

    def _end_call(
        self,
        call_id: str,
        ns: int,
        outcome: str,
        status: Status = "unset",
        message: str | None = None,
    ) -> Span:
        call = self._calls.pop(call_id)
        call.attributes["threadlog.tool_call.outcome"] = outcome
        return call.close(ns, status, message)

    def _resolved(self, record: Record, data: dict[str, Any], ns: int) -> Span | None:
        call_id = str(data.get("call_id"))
        if call_id not in self._call_turn:
            return None
        trace, _ = self._call_turn[call_id]
        tool, parent, _ = self._call_info[call_id]
        decision, by = str(data.get("decision")), str(data.get("by"))
        event = _event(
            "threadlog.tool_call.resolved",
            ns,
            threadlog__decision=decision,
            threadlog__by=by,
            threadlog__note=data.get("note"),
        )
        span = _Open.at(
            (trace, span_id(self.thread, "resolve", record.id), parent),
            f"resolve_tool {tool}",
            "internal",
            record,
            ns,
            {
                "gen_ai.tool.name": tool,
                "gen_ai.tool.call.id": call_id,
                "threadlog.thread.id": self.thread,
                "threadlog.tool_call.decision": decision,
                "threadlog.by": by,
            },
            [event],
        )
        return span.close(ns, "ok")


def spans_of(
    records: Sequence[Record] | Iterable[Record], *, include_open: bool = True
) -> list[Span]:
    """Every span of a thread's records (its ord 1 first), in the order they ended; spans
    still open at the end follow, unless ``include_open`` is false."""
    builder: SpanBuilder | None = None
    out: list[Span] = []
    for record in records:
        if builder is None:
            builder = SpanBuilder(record.thread)
        out.extend(builder.feed(record))
    if builder is not None and include_open:
        out.extend(builder.open_spans())
    return out
