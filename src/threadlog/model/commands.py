"""Commands: what a person or another process asks a live session to do.

A command is a request, not a fact: the session that holds the thread checks it against the
state and, if it is acceptable, records the events it leads to (an approval, a turn). The
CLI, the store's mailbox (`threadlog.store.protocol.Mailbox`) and the coming HTTP server all send the same five
commands, as one closed union of frozen dataclasses tagged by a ``kind`` literal::

    Command = Submit | Approve | Deny | Resolve | Cancel

so that the code that applies them can ``match`` on the union and mypy checks that every
kind is handled (``assert_never``).

Wire format. `Command.to_data` gives a plain JSON object and `command_from_data` parses one.
The keys are the ones the inbox has always used, so a message left by an older CLI is still
understood (and an older session understands a newer CLI's)::

    {"kind": "input",   "text": str, "by": str}
    {"kind": "approve", "call_id": str, "by": str, "reason": str | null}
    {"kind": "deny",    "call_id": str, "by": str, "reason": str | null}
    {"kind": "resolve", "call_id": str, "decision": "done" | "retry" | "abort",
                        "by": str, "note": str | null}
    {"kind": "cancel",  "turn_id": str | null}

(`Submit`'s kind is ``input`` for that reason.) ``by`` may be left out (``"cli"``), and so may
``reason``, ``note`` and ``turn_id``. Anything else — an unknown kind, a missing or ill-typed field, a
field no command has — is refused with `UsageError`: a command is never guessed at.

Pure: no I/O (this is `threadlog.model`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, get_args

from threadlog._dataclass import dataclass
from threadlog.errors import UsageError
from threadlog.model.events import Resolution  # noqa: TC001 (read by get_type_hints at run time)
from threadlog.model.typecheck import describe, field_names, field_table

__all__ = [
    "Approve",
    "Cancel",
    "Command",
    "Deny",
    "Resolve",
    "Submit",
    "command_from_data",
]


class _Wire:
    """`to_data` for every command: its fields (with ``kind``) as a JSON object."""

    __slots__ = ()

    def to_data(self) -> dict[str, Any]:
        """The command as the JSON object it is sent as (see the module docstring)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True, kw_only=True)
class Submit(_Wire):
    """User input: starts a turn when the session is idle, else steers the running one."""

    kind: Literal["input"] = "input"
    text: str
    by: str = "cli"
    """Who sends it (recorded)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Approve(_Wire):
    """Approve a proposed tool call that waits for a human decision."""

    kind: Literal["approve"] = "approve"
    call_id: str
    by: str = "cli"
    reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Deny(_Wire):
    """Deny a proposed tool call; the model is told."""

    kind: Literal["deny"] = "deny"
    call_id: str
    by: str = "cli"
    reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Resolve(_Wire):
    """A human's decision on a tool call whose outcome is unknown."""

    kind: Literal["resolve"] = "resolve"
    call_id: str
    decision: Resolution
    by: str = "cli"
    note: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Cancel(_Wire):
    """Cancel the running turn (it ends ``aborted``)."""

    kind: Literal["cancel"] = "cancel"
    turn_id: str | None = None
    """The turn that was running when the cancel was sent: the cancel applies to that turn
    only, and is ignored once it has ended, so a cancel left in a mailbox never aborts a
    later turn. None (a message from an older CLI) cancels whatever turn runs."""

    def to_data(self) -> dict[str, Any]:
        """As `_Wire.to_data`; without a turn it is the old ``{"kind": "cancel"}``."""
        data = _Wire.to_data(self)
        if self.turn_id is None:
            del data["turn_id"]
        return data


Command = Submit | Approve | Deny | Resolve | Cancel

_KINDS: dict[str, type[Any]] = {
    cls.__dataclass_fields__["kind"].default: cls for cls in get_args(Command)
}


def command_from_data(data: object) -> Command:
    """Parse a command's JSON object (see the module docstring).

    Raises:
        UsageError: not an object, an unknown ``kind``, a missing or ill-typed field, or a
            field the command does not have.
    """
    if not isinstance(data, dict):
        raise UsageError(f"a command is a JSON object, not {type(data).__name__}")
    kind = data.get("kind")
    cls = _KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise UsageError(
            f"unknown command kind {kind!r:.80}: expected one of {', '.join(sorted(_KINDS))}"
        )
    table = field_table(cls, skip="kind")
    names = field_names(cls, skip="kind")
    for key in data:
        if key != "kind" and key not in names:
            raise UsageError(f"{kind}: unknown field {key!r:.80}")
    values: dict[str, Any] = {}
    for name, required, fits, hint in table:
        if name not in data:
            if required:
                raise UsageError(f"{kind}: missing field {name!r}")
            continue
        if not fits(data[name]):
            raise UsageError(f"{kind}: field {name!r} must be {describe(hint, text='a string')}")
        values[name] = data[name]
    command: Command = cls(**values)
    return command
