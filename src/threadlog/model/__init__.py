"""The pure core: ids, events, the envelope, canonical JSON, the hash chain and the reducer.

Nothing in this package does I/O or reads a clock (a test enforces it).
"""

from threadlog.model.envelope import FORMAT_VERSION, Record
from threadlog.model.eventdata import from_data, to_data
from threadlog.model.events import CATALOGUE, Event
from threadlog.model.reducer import apply, apply_all, replay
from threadlog.model.state import ThreadState, ToolCallState, TurnState
from threadlog.model.stepcontext import ContextMismatch, StepContexts, step_context

__all__ = [
    "CATALOGUE",
    "ContextMismatch",
    "FORMAT_VERSION",
    "Event",
    "Record",
    "StepContexts",
    "ThreadState",
    "ToolCallState",
    "TurnState",
    "apply",
    "apply_all",
    "from_data",
    "replay",
    "step_context",
    "to_data",
]
