"""One tool call, run from its durable intent to its recorded outcome.

Theory of operation
-------------------
*Intent before effect.* ``tool_call.started`` (with the attempt number and the idempotency
key) is durable before the tool runs, so a crash leaves either no trace (the tool never ran)
or a started call without a result, which recovery classifies (`threadlog.model.recovery`).

*Intent, with what it takes to check it.* A tool with an ``intent`` hook (the file tools)
records in ``tool_call.started`` what the world looks like before it acts and what it will
look like after (hashes and sizes); if the hook fails the call finishes with that error and
the tool never runs. The record is what lets the ``reconcile`` hook prove an unknown outcome
later (`threadlog.runtime.tools._tool.Reconciling`).

*Every way out is recorded.* A result, an error (`ToolError`, any exception, a value that is
not JSON) and a timeout all end as ``tool_call.finished`` with ``ok`` false where it failed.
Cancellation (the turn cancelled, the session closing) depends on the tool's class: a
read-only or idempotent call is finished with the error ``cancelled`` (safe to run again, the
model decides), a non-idempotent one becomes ``tool_call.unknown`` — its effect may have
happened — and waits for a human (or its ``reconcile`` hook). A cancellation that arrives
while the start intent is still becoming durable finishes the call ``cancelled before it
ran``: in this very process the tool never started.

*Orphans.* A call that started in a process that is gone (recovery class 3) is run again
(attempt + 1) if it is read-only or idempotent; otherwise it is marked unknown and its tool's
``reconcile`` hook is asked whether the downstream system has the effect (the answer is
recorded as a resolution by ``reconcile:<tool>``).

The tool itself runs in a task of its own, shielded from the timeout so that it is cancelled
and awaited explicitly: nothing it does outlives the call.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from threadlog._clock import new_id
from threadlog.errors import UsageError
from threadlog.model import codec
from threadlog.model.events import (
    ArtifactStored,
    OperationFinished,
    OperationStarted,
    ToolCallFinished,
    ToolCallResolved,
    ToolCallStarted,
    ToolCallUnknown,
)
from threadlog.model.ids import derived_id
from threadlog.runtime import procs
from threadlog.runtime.bus import Progress
from threadlog.runtime.large_values import load_artifact
from threadlog.runtime.tools import ToolContext, ToolError
from threadlog.runtime.tools._artifacts import CallArtifacts
from threadlog.runtime.tools._tool import Reconciling, ask_reconcile
from threadlog.store.protocol import Artifacts, LocalHome

if TYPE_CHECKING:
    from collections.abc import Callable

    from threadlog.model.envelope import Record
    from threadlog.model.events import Event, Resolution
    from threadlog.model.state import ThreadState, ToolCallState
    from threadlog.runtime.deps import SessionDeps
    from threadlog.runtime.tools import Tool
    from threadlog.store.protocol import Store

__all__ = ["ToolHost", "ToolRunner", "runs_dir", "working_dir"]


class ToolHost(Protocol):
    """What a `ToolRunner` needs of its session (`threadlog.runtime.session.Session`)."""

    @property
    def thread_id(self) -> str:
        """The thread the calls belong to."""
        ...

    @property
    def state(self) -> ThreadState:
        """The thread's state, current after every append."""
        ...

    @property
    def runtime(self) -> SessionDeps:
        """The tools and the store."""
        ...

    async def append(
        self, event: Event, *, durable: bool | None = None, id: str | None = None
    ) -> Record:
        """Append through the session's pipeline."""
        ...


def runs_dir(store: Store) -> str | None:
    """Where a session's tools record the processes they start (`runtime.procs`): a
    directory of the store's home, or None for a store without one."""
    if isinstance(store, LocalHome) and os.path.isdir(store.home):
        return os.path.join(store.home, procs.RUNS_DIR)
    return None


def working_dir(state: ThreadState) -> Path:
    """The thread's working directory (its ``cwd`` setting, else the process's)."""
    cwd = state.config.get("cwd")
    return Path(cwd) if isinstance(cwd, str) and cwd else Path(os.getcwd())


class ToolRunner:
    """Runs a session's tool calls (see the module docstring)."""

    def __init__(
        self, host: ToolHost, *, publish: Callable[[Progress], None] | None = None
    ) -> None:
        self._host = host
        self._publish = publish
        """Where a tool's progress goes (the session's bus); None: nowhere."""
        self._tasks: set[asyncio.Task[Any]] = set()
        """The tools running now (each in a task of its own)."""

    def _progress_sink(
        self, call: ToolCallState, attempt: int
    ) -> Callable[[str, float | None], None] | None:
        """``ToolContext.on_progress`` for a call: a ``tool_progress`` `Progress` for the
        session's subscribers (never logged), handed to the loop from any thread."""
        publish = self._publish
        if publish is None:
            return None
        loop = asyncio.get_running_loop()

        def sink(message: str, fraction: float | None) -> None:
            item = Progress(
                "tool_progress",
                {
                    "call_id": call.call_id,
                    "tool": call.tool,
                    "attempt": attempt,
                    "message": message,
                    "fraction": fraction,
                },
            )
            try:
                on_loop = asyncio.get_running_loop() is loop
            except RuntimeError:
                on_loop = False
            if on_loop:
                publish(item)
            else:
                with contextlib.suppress(RuntimeError):  # the loop is closed: nobody listens
                    loop.call_soon_threadsafe(publish, item)

        return sink

    async def cancel_all(self) -> None:
        """Cancel every running tool and wait for it (the session is closing)."""
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def execute(self, call: ToolCallState) -> None:
        """Run an approved call (or re-run a safe orphan): intent, run, outcome."""
        host = self._host
        tool = host.runtime.tools.get(call.tool)
        if tool is None:
            await host.append(ToolCallStarted(call_id=call.call_id, attempt=call.attempt + 1))
            await host.append(
                ToolCallFinished(
                    call_id=call.call_id, ok=False, error=f"unknown tool {call.tool!r}"
                )
            )
            return
        attempt = call.attempt + 1
        key = call.idempotency_key or derived_id("threadlog.tool", host.thread_id, call.call_id)
        ctx = self._context(call, attempt, key)
        intent, refused = await _intent_of(tool, ctx, call)
        try:
            await host.append(
                ToolCallStarted(
                    call_id=call.call_id, attempt=attempt, idempotency_key=key, intent=intent
                )
            )
        except asyncio.CancelledError:
            # Cancelled while the start intent was becoming durable: the tool never ran, in
            # this very process, so whatever its class the call has certainly no effect.
            if host.state.tool_calls[call.call_id].status == "running":
                await host.append(
                    ToolCallFinished(
                        call_id=call.call_id, ok=False, error="cancelled before it ran"
                    )
                )
            raise
        if refused is not None:
            # the intent could not be recorded: the tool does not run (nothing to reconcile)
            await host.append(ToolCallFinished(call_id=call.call_id, ok=False, error=refused))
            return
        task = asyncio.create_task(
            tool.run(ctx, dict(call.args)), name=f"tool {call.tool} {call.call_id}"
        )
        self._tasks.add(task)
        ok, result, error = False, None, None
        try:
            async with asyncio.timeout(tool.timeout):
                result = await asyncio.shield(task)
            ok = True
        except TimeoutError:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            error = f"timed out after {tool.timeout:g}s"
        except ToolError as exc:
            error = str(exc)
        except asyncio.CancelledError:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            if tool.side_effect != "non_idempotent":
                # Safe to run again: a plain error result lets the model decide.
                await host.append(
                    ToolCallFinished(call_id=call.call_id, ok=False, error="cancelled")
                )
            else:
                await host.append(
                    ToolCallUnknown(call_id=call.call_id, reason="cancelled while running")
                )
            raise
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
        finally:
            self._tasks.discard(task)
        try:
            codec.canonical(result)
        except UsageError:
            ok, result, error = (
                False,
                None,
                f"the tool returned a value that is not JSON: {type(result).__name__}",
            )
        await self._record_artifacts(ctx)
        await host.append(ToolCallFinished(call_id=call.call_id, ok=ok, result=result, error=error))

    def _context(self, call: ToolCallState, attempt: int, key: str) -> ToolContext:
        host = self._host
        store = host.runtime.store
        return ToolContext(
            host.thread_id,
            call.call_id,
            attempt,
            key,
            working_dir(host.state),
            runs_dir(store),
            CallArtifacts(store) if isinstance(store, Artifacts) else None,
            load_artifact=functools.partial(load_artifact, store),
            on_progress=self._progress_sink(call, attempt),
        )

    async def _record_artifacts(self, ctx: ToolContext) -> None:
        """An ``artifact.stored`` for every blob the call stored (before its result, which
        may reference them): the log names every blob, and ``verify`` checks each."""
        if isinstance(ctx.artifacts, CallArtifacts):
            for ref in ctx.artifacts.stored:
                await self._host.append(
                    ArtifactStored(
                        sha256=ref.sha256,
                        size=ref.size,
                        media_type=ref.media_type,
                        summary=ref.summary,
                    )
                )

    async def settle_orphan(self, call: ToolCallState) -> None:
        """A call that started in a dead process and has no result (recovery class 3)."""
        if call.side_effect != "non_idempotent":
            # Read-only and idempotent tools are safe to run again (attempt + 1).
            await self.execute(call)
            return
        await self.mark_unknown(call)

    async def mark_unknown(self, call: ToolCallState, *, note: str | None = None) -> str:
        """Record that a non-idempotent call's outcome is unknown, and ask its reconcile hook
        (see `Session.mark_unknown`)."""
        reason = "the process running this tool stopped before its result was recorded"
        await self._host.append(
            ToolCallUnknown(call_id=call.call_id, reason=f"{reason}; {note}" if note else reason)
        )
        return await self.reconcile(call)

    async def reconcile(self, call: ToolCallState) -> str:
        """Ask the tool's ``reconcile`` hook about a call of unknown outcome (see
        `Session.reconcile`)."""
        host = self._host
        if host.state.tool_calls[call.call_id].status != "unknown":
            return host.state.tool_calls[call.call_id].status
        tool = host.runtime.tools.get(call.tool)
        if tool is None or tool.reconcile is None or not call.idempotency_key:
            return "unknown"
        op_id = new_id()
        await host.append(
            OperationStarted(
                op_id=op_id,
                kind="reconcile",
                detail={"call_id": call.call_id, "key": call.idempotency_key},
            )
        )
        asked = Reconciling(
            self._context(call, call.attempt, call.idempotency_key), dict(call.args), call.intent
        )
        try:
            happened = await ask_reconcile(tool.reconcile, call.idempotency_key, asked)
        except Exception as exc:
            await host.append(OperationFinished(op_id=op_id, ok=False, detail={"error": str(exc)}))
            return "unknown"
        await host.append(OperationFinished(op_id=op_id, ok=True, detail={"happened": happened}))
        if happened is None:
            return "unknown"
        decision: Resolution = "done" if happened else "retry"
        await host.append(
            ToolCallResolved(
                call_id=call.call_id,
                decision=decision,
                by=f"reconcile:{call.tool}",
                note="the downstream system "
                + ("has" if happened else "has no")
                + " record of the effect",
            )
        )
        return decision


async def _intent_of(tool: Tool, ctx: ToolContext, call: ToolCallState) -> tuple[Any, str | None]:
    """``(intent, None)`` from the tool's ``intent`` hook (None without one), or ``(None,
    error)`` when the hook failed: the call then finishes with the error, unrun."""
    if tool.intent is None:
        return None, None
    try:
        async with asyncio.timeout(tool.timeout):
            intent = await tool.intent(ctx, dict(call.args))
        if intent is not None and not isinstance(intent, dict):
            raise TypeError(f"the intent hook returned {type(intent).__name__}, not an object")
        codec.canonical(intent)
    except TimeoutError:
        return None, f"timed out recording the call's intent after {tool.timeout:g}s; not run"
    except ToolError as exc:
        return None, str(exc)
    except Exception as exc:
        return None, f"could not record the call's intent, so it did not run: {exc}"
    return intent, None
