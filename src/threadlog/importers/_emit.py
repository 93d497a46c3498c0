"""The emitter: a source session's conversation, item by item, as records of one thread.

Theory of operation
-------------------
Every importer reads its format and calls the emitter with neutral items: a user's input, a
model response (text, reasoning, tool calls, usage), a tool result, a compaction, a settings
change, a label, or a *note* (a source record threadlog has no event for, kept verbatim as
``custom.import.record`` so that nothing is silently dropped). The emitter turns each item
into the records the reducer accepts (`threadlog.model.reducer`):

* a user input ends the running turn (``turn.ended``, completed) and starts the next one
  (``turn.started``); input while a turn runs with tool results in the same source line is
  steering (``input.queued`` + ``input.consumed``);
* a model response is ``step.started`` + ``model.responded``, and for each tool call
  ``tool_call.proposed`` → ``approved`` (by ``import``) → ``started``, the lifecycle the
  runtime would have written; a response with no running turn starts one with empty input
  (the source resumed mid-turn);
* a tool result is ``tool_call.finished`` for a call that is running.

**Ids and parents.** Every source item has a *key*, unique in its session (a Claude Code
``uuid``, a Pi entry ``id``, a Codex line's ordinal). The records of one item get ids derived
from the thread's import key, the item key and their position (`derived_id`), so importing the
same item again appends nothing (the store returns the stored record for an id it holds, see
its ``idempotency`` contract). The *last* record of an item gets the item's **anchor** id,
which depends on the key alone: a later item that names it as its parent (``parentUuid``,
``parentId``) continues from ``anchor(key)`` without any table of what was written before. The
records of one item are chained to each other, the first on the parent's anchor, so the
thread's tree is the source's tree. A parent the thread does not hold (a broken chain) is
reported and the item continues the thread's root.

The emitter tracks the running turn and the state of each tool call itself (and, when a file
is imported in parts, starts from the thread's reduced state), so that it never asks the
store for an illegal transition; what the store still refuses is reported, never fatal.
"""

from __future__ import annotations

import hashlib
from dataclasses import field
from typing import TYPE_CHECKING, Any, Protocol

from threadlog._dataclass import dataclass
from threadlog.errors import ConflictError, UsageError
from threadlog.model.ids import derived_id
from threadlog.model.tree import ENTRY_TYPES

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from types import EllipsisType

    from threadlog.importers._report import FileReport
    from threadlog.model.envelope import Record
    from threadlog.model.state import ThreadState

__all__ = ["Call", "Emitter", "Sink"]


class Sink(Protocol):
    """What an emitter appends to: the store, or a new thread's log built in memory
    (`threadlog.importers._bulk.NewLog`)."""

    def append(
        self,
        thread_id: str,
        type: str,
        data: Any = None,
        *,
        durable: bool | None = None,
        id: str | None = None,
        parent: str | None | EllipsisType = ...,
    ) -> Record: ...


BY = "import"
"""Who approved an imported tool call (the source's harness ran it)."""


@dataclass(frozen=True, slots=True)
class Call:
    """A tool call in a model response."""

    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(slots=True)
class Emitter:
    """Appends one source session's items to one thread (see the module docstring)."""

    store: Sink
    thread_id: str
    key: str
    """The thread's import key (format and session id): the namespace of its record ids."""
    root: str
    """The id of the thread's ``thread.created`` record."""
    report: FileReport
    known: set[str] = field(default_factory=set)
    """Ids of the thread's records the emitter has seen (parents must be among them; see
    `holds`)."""
    parents: dict[str, str | None] = field(default_factory=dict)
    """Record id → its parent, for the records in ``known``."""
    rest: Callable[[], Iterable[Record]] | None = None
    """The thread's records not in ``known`` (a thread imported before is opened with its
    latest records only): read the first time an id is looked for and not found."""
    floor: int = 0
    """The thread's last ordinal when the emitter opened it: the store returning a record at
    or below it for an append means that record was there already (a replay)."""
    active_turn: str | None = None
    calls: dict[str, str] = field(default_factory=dict)
    """call id → ``running`` | ``done`` (finished, or ended otherwise)."""
    leaf: str | None = None
    """The thread's active leaf as the records appended so far leave it."""
    last_anchor: str | None = None
    """The anchor of the last item: the parent of an item that continues "the previous one"."""
    times: dict[str, str] = field(default_factory=dict)
    """Anchor id → the source's timestamp, for this batch (kept in the progress record)."""
    appended: int = 0
    """Records this emitter appended (replays of stored records not counted)."""
    line: int = 0
    """The source line being imported (for problem reports)."""
    _prefix: Any = None
    _item: str | None = None
    _item_hash: Any = None
    """The hash of the ids' prefix and ``_item``: an item's ids are asked for one after
    another (`_write`), so its part is hashed once, not once per record."""
    _anchors: dict[str, str] = field(default_factory=dict)
    """Item key → its anchor id (an item's anchor is asked for again by its children)."""

    def resume_from(self, state: ThreadState) -> None:
        """Continue a thread imported before from where its log stands: its running turn
        and the state of its calls."""
        self.active_turn = state.active_turn
        self.leaf = state.leaf
        for call_id, call in state.tool_calls.items():
            self.calls[call_id] = "running" if call.status == "running" else "done"

    # -- ids and parents ---------------------------------------------------------------------

    def holds(self, rid: str) -> bool:
        """Whether the thread holds record ``rid`` (reading the rest of its records, once,
        if the latest ones do not have it)."""
        if rid in self.known:
            return True
        if self.rest is None:
            return False
        self.complete()
        return rid in self.known

    def complete(self) -> None:
        """Know every record of the thread (`rest`), e.g. before its file is read again
        from the start."""
        rest, self.rest = self.rest, None
        if rest is None:
            return
        known, parents = self.known, self.parents
        for record in rest():
            known.add(record.id)
            parents.setdefault(record.id, record.parent)

    def anchor(self, item: str) -> str:
        """The id of the last record of item ``item`` (what its children continue)."""
        anchor = self._anchors.get(item)
        if anchor is None:
            anchor = self._anchors[item] = self.record_id(item, 0)
        return anchor

    def record_id(self, item: str, n: int) -> str:
        """``derived_id("threadlog.import", key, item, str(n))``, from a cached hash of its
        prefix and of the last item's (the ids of an import cost a tenth of its time
        otherwise): the same bits, version 8 and the RFC 4122 variant set in the digest's hex
        digits."""
        if item != self._item:
            if self._prefix is None:
                self._prefix = hashlib.sha256(_part("threadlog.import") + _part(self.key))
            self._item_hash = self._prefix.copy()
            self._item_hash.update(_part(item))
            self._item = item
        h = self._item_hash.copy()
        h.update(_NUMBERS[n] if n < _SMALL else _part(str(n)))
        x = h.hexdigest()  # (the version nibble replaced, the variant's two bits set)
        return f"{x[:8]}-{x[8:12]}-8{x[13:16]}-{_VARIANT[x[16]]}{x[17:20]}-{x[20:32]}"

    def parent_of(self, parent: str | None, *, previous: bool = False) -> str:
        """The record an item continues: the anchor of source item ``parent``; the previous
        item's (``previous``, for formats without a tree); the root for None. A parent the
        thread does not hold is reported and replaced by the root."""
        if previous:
            return self.last_anchor or self.root
        if parent is None:
            return self.root
        anchor = self.anchor(parent)
        if self.holds(anchor):
            return anchor
        self.report.problem(self.line, "broken_parent", f"parent {parent!r} is not in the session")
        return self.root

    def item_parent(self, item: str) -> str | None:
        """The record the first record of item ``item`` continues (its parent item's anchor),
        or None if the item was never imported."""
        anchor = self.anchor(item)
        if not self.holds(anchor):
            return None
        node: str | None = anchor
        own = {anchor} | {self.record_id(item, n) for n in range(1, 64)}
        while node in own:
            if node not in self.parents:
                self.complete()
            node = self.parents.get(node)
        return node

    # -- items -------------------------------------------------------------------------------

    def user(self, item: str, parent: str, text: str, ts: str | None = None) -> None:
        """A user's input: ends the running turn and starts the next one."""
        records: list[tuple[str, dict[str, Any]]] = []
        if self.active_turn is not None:
            records.append(("turn.ended", {"turn_id": self.active_turn, "outcome": "completed"}))
        turn = f"turn-{item}"
        records.append(("turn.started", {"turn_id": turn, "input": text}))
        if self._write(item, parent, records, ts):
            self.active_turn = turn

    def steer(self, item: str, parent: str, text: str, ts: str | None = None) -> None:
        """User input while a turn runs (it joins the running turn)."""
        if self.active_turn is None:
            self.user(item, parent, text, ts)
            return
        input_id = f"input-{item}"
        self._write(
            item,
            parent,
            [
                ("input.queued", {"input_id": input_id, "text": text}),
                ("input.consumed", {"input_id": input_id, "turn_id": self.active_turn}),
            ],
            ts,
        )

    def assistant(
        self,
        item: str,
        parent: str,
        *,
        text: str | None,
        calls: list[Call] | None = None,
        thinking: list[dict[str, Any]] | None = None,
        usage: dict[str, Any] | None = None,
        model: str | None = None,
        stop_reason: str | None = None,
        ts: str | None = None,
    ) -> None:
        """A model response; its tool calls are proposed, approved and started."""
        records: list[tuple[str, dict[str, Any]]] = []
        turn = self.active_turn
        if turn is None:
            turn = f"turn-{item}"
            records.append(("turn.started", {"turn_id": turn, "input": ""}))
        step = f"step-{item}"
        fresh: list[Call] = []
        for call in calls or []:
            if call.id in self.calls:
                self.report.problem(self.line, "duplicate_call", f"tool call {call.id!r} again")
            else:
                fresh.append(call)
        message: dict[str, Any] = {
            "content": text,
            "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in fresh],
        }
        if thinking:
            message["thinking"] = thinking
        if model:
            message["model"] = model
        records.append(("step.started", {"turn_id": turn, "step_id": step}))
        records.append(
            (
                "model.responded",
                {
                    "turn_id": turn,
                    "step_id": step,
                    "message": message,
                    "usage": _numbers(usage),
                    "stop_reason": stop_reason or ("tool_use" if fresh else "end_turn"),
                },
            )
        )
        for call in fresh:
            records.append(
                (
                    "tool_call.proposed",
                    {
                        "turn_id": turn,
                        "call_id": call.id,
                        "tool": call.name,
                        "args": call.arguments,
                        # what the call did is not known: never re-run it blindly
                        "side_effect": "non_idempotent",
                        "step_id": step,
                    },
                )
            )
            records.append(("tool_call.approved", {"call_id": call.id, "by": BY}))
            records.append(("tool_call.started", {"call_id": call.id}))
        if self._write(item, parent, records, ts):
            self.active_turn = turn
            for call in fresh:
                self.calls[call.id] = "running"

    def tool_results(
        self, item: str, parent: str, results: list[tuple[str, str, bool]], ts: str | None = None
    ) -> bool:
        """Results ``(call id, text, is_error)`` of running calls; a result for a call that is
        not running is reported and kept as a note. False if nothing was written."""
        records: list[tuple[str, dict[str, Any]]] = []
        done: list[str] = []
        for call_id, text, is_error in results:
            if self.calls.get(call_id) != "running" or call_id in done:
                self.report.problem(
                    self.line, "orphan_result", f"result for tool call {call_id!r}, not running"
                )
                records.append(
                    (
                        "custom.import.record",
                        {"kind": "orphan_result", "call_id": call_id, "text": text},
                    )
                )
                continue
            data: dict[str, Any] = {"call_id": call_id, "ok": not is_error}
            if is_error:
                data["error"] = text
            else:
                data["result"] = text
            records.append(("tool_call.finished", data))
            done.append(call_id)
        if not records:
            return False
        ok = self._write(item, parent, records, ts)
        if ok:
            for call_id in done:
                self.calls[call_id] = "done"
        return ok

    def end_turn(
        self,
        item: str,
        parent: str,
        outcome: str,
        reason: str | None = None,
        ts: str | None = None,
    ) -> None:
        """The running turn ended (a source's explicit turn boundary, at the source's time
        ``ts``); nothing if none runs."""
        if self.active_turn is None:
            self.note(item, parent, "turn_end", {"outcome": outcome}, ts)
            return
        data: dict[str, Any] = {"turn_id": self.active_turn, "outcome": outcome}
        if reason:
            data["reason"] = reason
        if self._write(item, parent, [("turn.ended", data)], ts):
            self.active_turn = None

    def compaction(
        self,
        item: str,
        parent: str,
        *,
        summary: str,
        last_entry: str,
        tokens_before: int = 0,
        ts: str | None = None,
    ) -> None:
        """Entries up to ``last_entry`` (a record id) are replaced by ``summary`` in context."""
        data = {
            "summary": summary,
            "first_entry": None,
            "last_entry": last_entry,
            "tokens_before": tokens_before,
            "tokens_after": 0,
        }
        self._write(item, parent, [("compaction", data)], ts)

    def config(
        self, item: str, parent: str, changes: dict[str, Any], ts: str | None = None
    ) -> None:
        """Settings changed (model, thinking level, cwd…)."""
        self._write(item, parent, [("config.changed", {"changes": changes})], ts)

    def branch_summary(self, item: str, parent: str, from_entry: str, summary: str) -> None:
        """A summary of the branch that was left at ``from_entry`` (a record id)."""
        self._write(
            item,
            parent,
            [("branch.summarized", {"from_entry": from_entry, "summary": summary})],
            None,
        )

    def label(self, item: str, parent: str, entry: str, label: str | None) -> None:
        """A label on entry ``entry`` (a record id)."""
        self._write(item, parent, [("label.set", {"entry": entry, "label": label})], None)

    def note(self, item: str, parent: str, kind: str, raw: Any, ts: str | None = None) -> None:
        """A source record with no threadlog equivalent, kept as it was."""
        self._write(item, parent, [("custom.import.record", {"kind": kind, "raw": raw})], ts)

    def move_leaf(self, to: str, tag: str) -> None:
        """Make ``to`` (a record id) the active leaf, unless it is already."""
        if to == self.leaf or not self.holds(to):
            return
        self._append(
            derived_id("threadlog.import", self.key, tag, "leaf"), "leaf.moved", {"to": to}, to
        )

    # -- writing -----------------------------------------------------------------------------

    def _write(
        self, item: str, parent: str, records: list[tuple[str, dict[str, Any]]], ts: str | None
    ) -> bool:
        """Append an item's records, chained, the last under the item's anchor id. False (and
        a problem reported) if the store refused one; the records before it stay."""
        last = len(records) - 1
        up = parent
        for n, (type_, data) in enumerate(records):
            rid = self.anchor(item) if n == last else self.record_id(item, n + 1)
            if not self._append(rid, type_, data, up):
                return False
            up = rid
        self.last_anchor = up
        if ts:
            self.times[up] = ts
        return True

    def _append(self, rid: str, type_: str, data: dict[str, Any], parent: str) -> bool:
        try:
            stored = self.store.append(
                self.thread_id, type_, data, durable=False, id=rid, parent=parent
            )
        except ConflictError as exc:
            self.report.problem(
                self.line,
                "changed",
                "a record of this line's identity was imported before with other content "
                f"(the line changed, or the session repeats an id): {exc}",
            )
            return False
        except UsageError as exc:
            self.report.problem(self.line, "refused", f"{type_}: {exc}")
            return False
        if rid in self.known or (self.floor and stored.ord <= self.floor):
            return True  # imported before: the log (and its leaf) did not change
        self.known.add(rid)
        self.parents[rid] = parent
        self.appended += 1
        if type_ in ENTRY_TYPES:
            self.leaf = rid
        elif type_ == "leaf.moved":
            self.leaf = data["to"]
        return True


def _part(text: str) -> bytes:
    raw = text.encode("utf-8", "surrogatepass")
    return len(raw).to_bytes(4, "big") + raw


_SMALL = 64
_NUMBERS = [_part(str(n)) for n in range(_SMALL)]
"""The encoded record positions of an item (an item has a handful of records)."""
_VARIANT = {d: "89ab"[int(d, 16) & 3] for d in "0123456789abcdef"}
"""A hex digit with its top two bits set to the RFC 4122 variant (``10``)."""


def _numbers(usage: dict[str, Any] | None) -> dict[str, Any]:
    """The numeric counters of a usage object (nested objects flattened with ``_``)."""
    out: dict[str, Any] = {}
    if not isinstance(usage, dict):
        return out
    for key, value in usage.items():
        if isinstance(value, bool):
            continue
        if isinstance(value, int | float):
            out[key] = value
        elif isinstance(value, dict):
            for sub, inner in value.items():
                if isinstance(inner, int | float) and not isinstance(inner, bool):
                    out[f"{key}_{sub}"] = inner
    return out
