"""What a model call is given: the request a step sends, its size, and compaction.

Theory of operation
-------------------
*The request is a projection.* A step's `ModelRequest` is built from the thread's state and
model context (`threadlog.model.context`) alone: the active branch's messages (with
compaction and branch summaries applied), the thread's settings (model, instructions, the
tools it may use, thinking), and — only when the thread's ``memory_policy`` says so — the
remembered facts it may see (`threadlog.model.memory.select_memories`), offered as a first
system message, and the thread's current plan (`threadlog.model.plans.plan_message`), as the
system message after it. The settings are those of the active leaf: after a branch back to
an older entry, the model, thinking level and tools in effect there
(`threadlog.model.settings`). Its snapshot and hash are what ``step.started`` records, so a step can
always be told what exactly the model saw.

*Large values are cut, not hidden.* The state and context hold values, never artifact
references (the session loads them); a text longer than the thread's value limit is cut in
the request to its head and tail around a marker naming the artifact that holds it, which
the model can page through with ``read_artifact`` (`threadlog.runtime.large_values`).

*Compaction* keeps a long context within the thread's ``context_budget``: the older part of
the active branch is replaced, in model context only, by a summary from the runtime's
summarizer. The last ``keep_last`` messages stay verbatim, and the cut moves back to a user
message so that a tool call is never separated from its result. The summarizer's call is an
operation (``operation.started`` / ``.finished``) and the result a ``compaction`` entry;
nothing is deleted from the log. Token counts are estimates (4 bytes a token).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from threadlog._clock import new_id, rfc3339, wall_ns
from threadlog.model import codec
from threadlog.model.events import Compaction, OperationFinished, OperationStarted
from threadlog.model.memory import MemoryFact, memory_message, project_of, select_memories
from threadlog.model.plans import plan_message
from threadlog.runtime.large_values import value_limit
from threadlog.runtime.models import ModelRequest
from threadlog.store.protocol import Catalog

if TYPE_CHECKING:
    from threadlog.model.context import Context
    from threadlog.model.envelope import Record
    from threadlog.model.events import Event
    from threadlog.model.state import ThreadState
    from threadlog.runtime.deps import SessionDeps
    from threadlog.runtime.large_values import LargeValues

__all__ = [
    "RequestHost",
    "build_request",
    "compact",
    "estimate_tokens",
    "memories",
    "model_messages",
]


def estimate_tokens(messages: list[dict[str, Any]]) -> int:
    """A rough token count (4 bytes a token) of messages, for budgets and reports."""
    return len(codec.canonical(messages)) // 4


class RequestHost(Protocol):
    """What building a request and compacting need of a session
    (`threadlog.runtime.session.Session`)."""

    @property
    def thread_id(self) -> str:
        """The thread."""
        ...

    @property
    def state(self) -> ThreadState:
        """The thread's state: settings and memories."""
        ...

    @property
    def context(self) -> Context:
        """The model-visible messages."""
        ...

    @property
    def runtime(self) -> SessionDeps:
        """The model, the tools, the summarizer and the store."""
        ...

    @property
    def large_values(self) -> LargeValues:
        """Cuts a text too long for a model call (naming its artifact)."""
        ...

    async def append(
        self, event: Event, *, durable: bool | None = None, id: str | None = None
    ) -> Record:
        """Append through the session's pipeline."""
        ...


def model_messages(host: RequestHost) -> list[dict[str, Any]]:
    """The context's messages as a model call shows them: each text over the thread's value
    limit cut (`threadlog.runtime.large_values`)."""
    return host.large_values.fit_messages(host.context.messages, value_limit(host.state.config))


def build_request(host: RequestHost) -> ModelRequest:
    """The request the next model call of the thread sends."""
    config = host.state.config
    active = config.get("tools")
    messages = model_messages(host)
    plan = plan_message(host.state)
    if plan is not None:
        messages.insert(0, plan)
    offered = memory_message(memories(host))
    if offered is not None:
        messages.insert(0, offered)
    instructions = config.get("instructions")
    return ModelRequest(
        model=str(config.get("model") or host.runtime.model.name),
        messages=messages,
        tools=host.runtime.tools.specs(active if isinstance(active, list) else None),
        instructions=host.large_values.fit_text(instructions, value_limit(config))
        if isinstance(instructions, str)
        else None,
        thinking=config.get("thinking"),
    )


def memories(host: RequestHost) -> list[MemoryFact]:
    """Facts the thread's memory policy lets this model call see."""
    state = host.state
    policy = state.config.get("memory_policy")
    if not isinstance(policy, dict):
        return []  # memory enters context only through an explicit policy
    facts = [
        MemoryFact(
            m.memory_id,
            host.thread_id,
            m.fact,
            m.scope,
            m.written_at,
            m.expires_at,
            m.key,
            m.source_event,
            state.principal,
            m.project,
        )
        for m in state.memories.values()
        if not m.revoked
    ]
    store = host.runtime.store
    project = project_of(state.config)
    if isinstance(store, Catalog) and set(policy.get("scopes") or ()) - {"thread"}:
        facts += [
            f
            for f in store.shared_memories(state.principal, project)
            if f.thread_id != host.thread_id
        ]
    return select_memories(
        facts,
        thread_id=host.thread_id,
        principal=state.principal,
        project=project,
        now=rfc3339(wall_ns()),
        policy=policy,
    )


async def compact(host: RequestHost, *, keep_last: int = 6) -> Record | None:
    """Compact the active branch's model context (see the module docstring); the
    ``compaction`` record, or None when there is too little to compact."""
    context = host.context
    entries = context.entries_at(context.leaf)
    cut = len(entries) - keep_last
    while cut > 0 and entries[cut][1]["role"] not in ("user", "system"):
        cut -= 1
    if cut < 2:
        return None
    older = host.large_values.fit_messages(
        [message for _, message in entries[:cut]], value_limit(host.state.config)
    )
    before = estimate_tokens(context.messages)
    op_id = new_id()
    await host.append(OperationStarted(op_id=op_id, kind="compaction", detail={"messages": cut}))
    try:
        summary = await host.runtime.summarizer.summarize(older)
    except Exception as exc:
        await host.append(OperationFinished(op_id=op_id, ok=False, detail={"error": str(exc)}))
        raise
    await host.append(OperationFinished(op_id=op_id, ok=True, detail=None))
    after = estimate_tokens(
        [{"role": "system", "content": summary}] + [m for _, m in entries[cut:]]
    )
    return await host.append(
        Compaction(
            summary=summary,
            first_entry=entries[0][0],
            last_entry=entries[cut - 1][0],
            tokens_before=before,
            tokens_after=after,
        )
    )
