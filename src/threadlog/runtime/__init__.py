"""The live half of threadlog: sessions that run an agent's turns over the event log."""

from threadlog.model.approvals import DEFAULT_POLICY, decide
from threadlog.runtime.bus import Progress, SubscriberDropped
from threadlog.runtime.models import (
    Completed,
    Model,
    ModelRequest,
    ProviderError,
    Reply,
    ScriptedModel,
    TextDelta,
    ToolCallSpec,
)
from threadlog.runtime.resume import RecoveryReport
from threadlog.runtime.runtime import Runtime
from threadlog.runtime.session import Session
from threadlog.runtime.snapshots import SnapshotPolicy
from threadlog.runtime.tools import BUILTIN_TOOLS, Tool, ToolContext, ToolError, ToolRegistry

__all__ = [
    "BUILTIN_TOOLS",
    "DEFAULT_POLICY",
    "Completed",
    "Model",
    "ModelRequest",
    "Progress",
    "ProviderError",
    "RecoveryReport",
    "Reply",
    "Runtime",
    "ScriptedModel",
    "Session",
    "SnapshotPolicy",
    "SubscriberDropped",
    "TextDelta",
    "Tool",
    "ToolCallSpec",
    "ToolContext",
    "ToolError",
    "ToolRegistry",
    "decide",
]
