"""Checking a command against a thread's state before it is sent anywhere.

The command line (``threadlog approve`` …) and the HTTP service (`threadlog.server`) both
refuse, up front and with a clear error, a command that cannot fit the thread as its log
stands: a decision for a call that does not exist or is not waiting for it, a cancel when no
turn runs. The session that finally applies the command checks it again (its state may have
moved on in between); this check is what lets a caller be told *now*, rather than find a
refusal in another process's log.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from threadlog.errors import InvalidTransition, UsageError
from threadlog.model.commands import Approve, Cancel, Deny, Resolve, Submit

if TYPE_CHECKING:
    from threadlog.model.commands import Command
    from threadlog.model.state import ThreadState

__all__ = ["check_command"]


def check_command(state: ThreadState, command: Command) -> None:
    """Refuse a command that does not fit the thread's state.

    Raises:
        UsageError: a decision for a tool call the thread does not have.
        InvalidTransition: (a `UsageError` too) a decision for a call that is not waiting for
            it, or a cancel when no turn runs.
    """
    thread = state.thread_id
    match command:
        case Approve(call_id=call_id) | Deny(call_id=call_id) | Resolve(call_id=call_id):
            call = state.tool_calls.get(call_id)
            if call is None:
                raise UsageError(f"no tool call {call_id!r} in thread {thread}")
            wanted = "unknown" if isinstance(command, Resolve) else "proposed"
            if call.status != wanted:
                waits = "a resolution" if wanted == "unknown" else "a decision"
                raise InvalidTransition(
                    f"tool call {call_id!r} is {call.status}, not waiting for {waits}"
                )
        case Cancel():
            if state.active_turn is None:
                raise InvalidTransition(f"no turn is running in thread {thread}: nothing to cancel")
        case Submit():
            pass
