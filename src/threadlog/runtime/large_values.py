"""Large values: references loaded for every consumer, and texts cut to a model's budget.

Theory of operation
-------------------
*The log keeps references; its consumers get values.* A store keeps a value over its inline
limit (64 KiB) as a content-addressed artifact and leaves ``{"$artifact": …}`` in the record
(`threadlog.store.offload`). Nothing the runtime derives from the log sees that reference:
the session loads a record's references (`LargeValues.load`) once, when it applies the
record, before the reducer and the model context get it. So the thread's config (its
instructions), a turn's input, a call's arguments (what a tool runs with) and the model's
messages (a long reply together with its tool calls) hold the values themselves, and
`threadlog.model` stays pure: it never loads anything. A record without a reference costs a
look at its top-level values. The exports load through `Store.resolve` as well
(`threadlog.export.load_records`).

A loaded record is the record as a store without an inline limit would have kept it: values
in place of the references, and a value that merely looks like a reference still escaped
(`threadlog.model.refs.escape`), so the reducer and the context read it as any other.

*What exceeds the model's budget is cut, explicitly.* A text longer than the thread's value
limit (`value_limit`) reaches the model as its head, a marker and its tail (`cut`). The
marker says how many characters were left out from which offset, and names the artifact that
holds the whole text, so that the model can read any part of it with ``read_artifact``
(`threadlog.runtime.tools.artifacts`). Artifacts are content-addressed, so the name comes from
the text itself (the digest of its JSON, or of its bytes when the text is a value's JSON); the
store is asked at most once per session whether it holds that blob, and a text it does not
hold (one small enough to have stayed inline) is cut with a marker saying it cannot be paged.
The cut is made in the request only: the state, the context and the log keep the whole
value, and ``step.started`` records what the model was actually shown.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from threadlog.errors import ThreadlogError, UsageError
from threadlog.model import codec
from threadlog.model.refs import ArtifactRef, escape, is_artifact_ref
from threadlog.runtime.tools import ToolError
from threadlog.runtime.tools.artifacts import MAX_LENGTH
from threadlog.store.protocol import Artifacts

if TYPE_CHECKING:
    from threadlog.model.envelope import Record
    from threadlog.store.protocol import Store

__all__ = [
    "DEFAULT_VALUE_LIMIT",
    "MIN_VALUE_LIMIT",
    "LargeValues",
    "cut",
    "holds_refs",
    "load_artifact",
    "value_limit",
]

DEFAULT_VALUE_LIMIT = 100_000
"""The most characters of one value a model is shown when the thread sets no
``context_budget`` (about 25,000 tokens: within any current model's window)."""

MIN_VALUE_LIMIT = 2_000
"""However small the budget, a cut value keeps this many characters (head and tail)."""


def holds_refs(data: Any) -> bool:
    """Whether record data holds an artifact reference (as a whole, or a top-level value:
    the only places a store puts one)."""
    if is_artifact_ref(data):
        return True
    return data.__class__ is dict and any(
        value.__class__ is dict and is_artifact_ref(value) for value in data.values()
    )


def _digests(data: Any) -> list[str]:
    """The digests of the references in record data (whole, or top-level values)."""
    values = [data] if is_artifact_ref(data) else list(data.values())
    return [v["$artifact"]["sha256"] for v in values if is_artifact_ref(v)]


def load_artifact(store: Store, sha256: str) -> Any:
    """The value the artifact ``sha256`` holds, read through the Store port
    (`Store.resolve` of a reference to it); `ToolError` if the store cannot give it.

    This is what a tool's context offers as ``load_artifact``.
    """
    try:
        return store.resolve(ArtifactRef(sha256, 0).to_data())
    except UsageError:
        raise ToolError(f"no artifact {sha256} in this store") from None
    except ThreadlogError as exc:
        raise ToolError(f"artifact {sha256} cannot be read: {exc}") from None
    except ValueError:  # a blob of raw bytes, not a JSON value (Store.resolve decodes JSON)
        pass
    # a blob of raw bytes (a command's full output): its text, where the store keeps blobs
    if not isinstance(store, Artifacts):
        raise ToolError(f"artifact {sha256} holds raw bytes, not a value to page")
    try:
        return store.get_artifact(sha256).decode("utf-8", "replace")
    except ThreadlogError as exc:
        raise ToolError(f"artifact {sha256} cannot be read: {exc}") from None


def value_limit(config: dict[str, Any]) -> int:
    """The most characters of one value (a message's text, an argument, the instructions)
    a model call shows: a quarter of the thread's ``context_budget`` (tokens, at 4 bytes a
    token), at least `MIN_VALUE_LIMIT`; `DEFAULT_VALUE_LIMIT` without a budget."""
    budget = config.get("context_budget")
    if type(budget) is int and budget > 0:
        return max(MIN_VALUE_LIMIT, budget)
    return DEFAULT_VALUE_LIMIT


def cut(text: str, limit: int, ref: str | None) -> str:
    """``text`` whole if it has at most ``limit`` characters; else its first and last
    ``limit / 2`` characters around a marker that says what was left out and, with ``ref``,
    which artifact holds the whole text (for ``read_artifact``)."""
    if len(text) <= limit:
        return text
    head = limit // 2
    tail = limit - head
    left = len(text) - head - tail
    where = (
        f"The whole text is artifact {ref}; read any part of it with the read_artifact tool "
        f"(ref, offset, and a length of at most {MAX_LENGTH:,})."
        if ref is not None
        else "The whole value is kept in the thread's log; it cannot be paged from here."
    )
    marker = (
        f"\n[threadlog: {left:,} of {len(text):,} characters left out here "
        f"(from offset {head:,}). {where}]\n"
    )
    return text[:head] + marker + text[len(text) - tail :]


class LargeValues:
    """A session's large values: records loaded for the reducer and the context, and texts
    cut for a model call (see the module docstring).

    It remembers which artifacts the store holds (those it loaded, and those it asked
    about), so a blob is looked up at most once.
    """

    def __init__(self, store: Store) -> None:
        self._store = store
        self._held: dict[str, bool] = {}

    def load(self, record: Record) -> Record:
        """``record`` with its references loaded (the record itself when it has none).

        Raises what `Store.resolve` raises for a missing or damaged artifact.
        """
        data = record.data
        if not holds_refs(data):
            return record
        for digest in _digests(data):
            self._held[digest] = True
        return record._replace(data=escape(self._store.resolve(data)))

    def fit_messages(self, messages: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
        """``messages`` with every text over ``limit`` cut: a message's content and a tool
        call's string arguments (the messages themselves are never changed)."""
        out = []
        for message in messages:
            content = message.get("content")
            if isinstance(content, str) and len(content) > limit:
                message = {**message, "content": self.fit_text(content, limit)}
            calls = message.get("tool_calls")
            if isinstance(calls, list) and calls:
                fitted = [self._fit_call(call, limit) for call in calls]
                if any(new is not old for new, old in zip(fitted, calls, strict=True)):
                    message = {**message, "tool_calls": fitted}
            out.append(message)
        return out

    def fit_text(self, text: str, limit: int) -> str:
        """``text``, cut (`cut`) if it is over ``limit``, naming its artifact if any."""
        if len(text) <= limit:
            return text
        return cut(text, limit, self._ref_of(text))

    def _fit_call(self, call: Any, limit: int) -> Any:
        args = call.get("arguments") if isinstance(call, dict) else None
        if not isinstance(args, dict):
            return call
        long = [k for k, v in args.items() if isinstance(v, str) and len(v) > limit]
        if not long:
            return call
        fitted = dict(args)
        for key in long:
            fitted[key] = self.fit_text(args[key], limit)
        return {**call, "arguments": fitted}

    def _ref_of(self, text: str) -> str | None:
        """The artifact that holds ``text``, if the store has one: a string value is stored
        as its JSON, and a value shown as its canonical JSON text as those bytes."""
        for blob in (codec.canonical(text), text.encode("utf-8")):
            digest = hashlib.sha256(blob).hexdigest()
            held = self._held.get(digest)
            if held is None:
                try:
                    load_artifact(self._store, digest)
                except ToolError:
                    held = False
                else:
                    held = True
                self._held[digest] = held
            if held:
                return digest
        return None
