"""The runtime: opens threads as live sessions and owns the model, the tools and the store.

Example::

    async with Runtime(home, model=ScriptedModel([...])) as runtime:
        session = await runtime.create("alice", cwd="/srv/work")
        await session.submit("Summarise README.md")
        await session.wait_idle()

``Runtime(ephemeral=True)`` keeps everything in memory and writes no file.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import TYPE_CHECKING, Any, assert_never

from threadlog import _hooks
from threadlog._clock import new_id
from threadlog.errors import UsageError
from threadlog.model import snapshot
from threadlog.model.approvals import check_policy
from threadlog.model.budget import check_config
from threadlog.model.events import OperationFinished, OperationStarted
from threadlog.runtime.forking import fork_point
from threadlog.runtime.identity import check_source
from threadlog.runtime.models import Model, ModelSummarizer, ScriptedModel, Summarizer
from threadlog.runtime.resume import Forked, InitialHistory, New, Resumed, recover, reopen
from threadlog.runtime.retry import RetryPolicy
from threadlog.runtime.session import Session, SessionBase
from threadlog.runtime.snapshots import DEFAULT_SNAPSHOTS, SnapshotPolicy
from threadlog.runtime.tools import BUILTIN_TOOLS, Tool, ToolRegistry
from threadlog.store.open import open_store
from threadlog.store.protocol import Snapshots, Store

if TYPE_CHECKING:
    from collections.abc import Iterable
    from types import TracebackType

__all__ = ["Runtime"]


_env_checked = False


def _runtime_tracer() -> _hooks.RuntimeTracer | None:
    """The live tracer a new runtime attaches: the installed one, or — the first time, when
    ``THREADLOG_OTEL`` is set (``1``: traces and metrics; or ``traces``, ``metrics``) — one
    configured from the standard ``OTEL_*`` variables
    (`threadlog.observe.live.install_from_env`; needs ``threadlog[otel]``)."""
    global _env_checked
    if not _env_checked:
        _env_checked = True
        wanted = os.environ.get("THREADLOG_OTEL", "")
        if wanted and wanted.lower() not in ("0", "false", "no", "off"):
            from threadlog.observe.live import install_from_env, signals

            install_from_env(signals(wanted) - ({"traces"} if _hooks.TRACER else set()))
    return _hooks.TRACER


class Runtime:
    """Live sessions over one store.

    Args:
        target: the store: a `Store` you opened (the runtime will not close it), or what
            `threadlog.open_store` takes (a directory, ``file://…``, ``memory://``; default
            ``$THREADLOG_HOME`` or ``~/.threadlog``), which the runtime opens and closes.
        store: the same as passing a `Store` as ``target`` (kept for existing callers).
        model: the model every session calls (default: a scripted model that just answers).
        tools: the tools offered (default: the built-in file and command tools).
        ephemeral: keep everything in memory (``memory://``); nothing is written to disk.
        source: what opens the sessions, recorded in each ``session.opened``: ``sdk`` (a
            program, the default), ``cli`` (the command line) or ``api`` (a server).
        retry: how a model request that failed transiently (429, 5xx, a dropped
            connection) is tried again (default: 3 tries, backoff with jitter; see
            `threadlog.runtime.retry`).
        snapshots: when a running session saves a snapshot of its state, so that resuming
            it after a crash reads only the records since (default: every 2,000 records or
            60 s; `SnapshotPolicy`, `threadlog.runtime.snapshots`).
    """

    def __init__(
        self,
        target: Store | str | os.PathLike[str] | None = None,
        *,
        store: Store | None = None,
        model: Model | None = None,
        tools: Iterable[Tool] = BUILTIN_TOOLS,
        ephemeral: bool = False,
        summarizer: Summarizer | None = None,
        source: str = "sdk",
        retry: RetryPolicy | None = None,
        snapshots: SnapshotPolicy | None = None,
    ) -> None:
        """See the class docstring; ``summarizer`` compacts long contexts (default: the
        model's own ``summarize``, else one request to the model)."""
        self.source = check_source(source)
        self.retry = retry or RetryPolicy()
        self.snapshots = snapshots or DEFAULT_SNAPSHOTS
        if sum((target is not None, store is not None, ephemeral)) > 1:
            raise UsageError("pass one of: a store or a target, store=, ephemeral=True")
        if (
            store is None
            and isinstance(target, Store)
            and not isinstance(target, str | os.PathLike)
        ):
            store = target
        self._owns_store = store is None
        if store is None:
            where = "memory://" if ephemeral else target
            assert not isinstance(where, Store)
            store = open_store(where)
        self.store: Store = store
        self.model: Model = model or ScriptedModel([])
        if summarizer is None:
            summarizer = (
                self.model if isinstance(self.model, Summarizer) else ModelSummarizer(self.model)
            )
        self.summarizer: Summarizer = summarizer
        self.tools = ToolRegistry.of(tools)
        self.sessions: dict[str, Session] = {}
        self._closed = False
        # observability (`threadlog.observe`): nothing unless installed or THREADLOG_OTEL=1
        self._tracer = _runtime_tracer()
        if self._tracer is not None:
            self._tracer.attach(store)
        self._metrics = _hooks.METRICS
        if self._metrics is not None:
            self._metrics.attach(store)

    async def __aenter__(self) -> Runtime:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def create(
        self,
        principal: str = "local",
        *,
        title: str | None = None,
        lineage: dict[str, Any] | None = None,
        **config: Any,
    ) -> Session:
        """Create a thread and open it as a session. Config keys: model, instructions, cwd,
        tools (names), approval_policy, thinking, max_steps, budget, prices (see
        `threadlog.model.budget`), and any of your own."""
        return await self._start(
            New(principal=principal, title=title, lineage=lineage, config=config)
        )

    async def open(self, thread_id: str, *, resume: bool = True, mailbox: bool = True) -> Session:
        """Open an existing thread. Takes its lease (`LeaseHeld` if another process has it).

        With ``resume`` (the default), a log left unfinished by a crash is recovered as by
        `resume` (and its work continued); a turn parked on a human decision waits again, and
        one that ``threadlog resume`` left for the next session is driven. Then what was sent
        while no session was live is applied: commands waiting in the store's mailbox, and
        input queued with no turn running (``threadlog send``), which starts a turn.
        Without ``resume`` the thread is opened exactly as the log has it. Without
        ``mailbox`` the session neither applies nor watches the mailbox (a short-lived tool
        such as the CLI, which applies its one command itself).
        """
        self._check_open()
        session = self.sessions.get(thread_id)
        if session is not None:
            return session
        return await self._start(
            Resumed(
                thread_id=thread_id, recover="if_needed" if resume else "never", mailbox=mailbox
            )
        )

    async def resume(self, thread_id: str, *, continue_work: bool = True) -> Session:
        """Resume a thread after any crash, and record what was repaired.

        Load and verify the log (a torn final record is cut, a crashed store's journal is
        replayed) → reduce → classify every unfinished tool call (`threadlog.model.recovery`)
        → kill the processes that the dead agent's commands left running (`runtime.procs`)
        → append ``thread.resumed`` listing the repairs → record interrupted model calls →
        mark non-idempotent calls of unknown outcome (asking their ``reconcile`` hook) → end a
        running turn ``interrupted``. With ``continue_work``, a new turn then carries on with
        the interrupted task: results already recorded are reused, calls that never started
        run per policy, read-only and idempotent calls that were cut off run again, and calls
        of unknown outcome wait for ``resolve``.

        The session's ``recovery`` attribute holds the report (a `RecoveryReport`). Damage in
        the middle of the log raises `IntegrityError` (ordinal and byte offset) before
        anything is written.
        """
        self._check_open()
        if thread_id in self.sessions:
            raise UsageError(f"thread {thread_id} is already open in this runtime")
        return await self._start(
            Resumed(thread_id=thread_id, recover="always", continue_work=continue_work)
        )

    async def fork(
        self, thread_id: str, at: int | None = None, *, title: str | None = None, **changes: Any
    ) -> Session:
        """Fork a thread (see `Store.fork`) and open the new one as a session.

        ``at`` is the last record to inherit (an ordinal or an entry id; default: the end).
        A fork point inside a running turn moves back to the last turn boundary, so the
        child never holds a turn nobody drives (`threadlog.runtime.forking`). ``changes``
        are the child's settings (model, instructions, …), recorded as a ``config.changed``
        written atomically with the copied prefix.
        """
        self._check_open()
        live = self.sessions.get(thread_id)
        if live is None:
            point = await asyncio.to_thread(fork_point, self.store, thread_id, at)
        else:
            # its state is read here, on the loop that changes it; its records made durable
            point = fork_point(self.store, thread_id, at, live=live.state)
            await asyncio.to_thread(self.store.flush)
        return await self._start(
            Forked(source=thread_id, at=point.ord, title=title, changes=changes or None)
        )

    async def spawn(self, parent: Session, *, title: str | None = None, **config: Any) -> Session:
        """A sub-agent of ``parent``: a child thread with lineage to it (a side-chain), with
        its cwd, model and approval policy unless ``config`` says otherwise. Recorded in the
        parent as a ``subagent`` operation; the parent closes its children when it closes."""
        parent._check_open()
        op_id = new_id()
        await parent.append(OperationStarted(op_id=op_id, kind="subagent", detail={"title": title}))
        state = parent.state
        inherited = {
            k: v for k, v in state.config.items() if k in ("cwd", "model", "approval_policy")
        }
        child = await self.create(
            state.principal,
            title=title,
            lineage={
                "thread": parent.thread_id,
                "ord": state.last_ord,
                "entry": state.last_id,
                "kind": "subagent",
            },
            **{**inherited, **config},
        )
        parent.children.append(child)
        await parent.append(
            OperationFinished(op_id=op_id, ok=True, detail={"thread": child.thread_id})
        )
        return child

    async def _start(self, history: InitialHistory) -> Session:
        """Open a live session as ``history`` says (`threadlog.runtime.resume`)."""
        self._check_open()
        match history:
            case New(principal=principal, title=title, lineage=lineage, config=config):
                config = dict(config)
                if config.get("approval_policy") is not None:
                    check_policy(config["approval_policy"])
                check_config(config)
                if "cwd" in config and config["cwd"] is not None:
                    config["cwd"] = os.fspath(config["cwd"])
                thread_id = await asyncio.to_thread(
                    self.store.create_thread, principal, title=title, lineage=lineage, **config
                )
                session = self._open_session(thread_id)
                await session.open_mailbox(drain=False)
                return session
            case Forked(source=source, at=at, title=title, changes=changes):
                child = await asyncio.to_thread(
                    self.store.fork, source, at, title=title, changes=changes
                )
                return await self.open(child, resume=False)
            case Resumed(
                thread_id=thread_id, recover=mode, continue_work=continue_work, mailbox=mailbox
            ):
                session = self._open_session(thread_id)
                if mode == "always":
                    session.recovery = await recover(
                        session, self.store, continue_work=continue_work
                    )
                elif mode == "if_needed":
                    session.recovery = await reopen(session, self.store)
                if mode != "never":
                    # what other processes sent while no session was live is applied now:
                    # commands left in the mailbox, then input queued with no turn running
                    if mailbox:
                        await session.open_mailbox(drain=True)
                    await session.start_queued()
                elif mailbox:
                    await session.open_mailbox(drain=False)
                return session
            case _:
                assert_never(history)

    def _open_session(self, thread_id: str) -> Session:
        store = self.store
        base = None
        store.acquire(thread_id)
        if self._tracer is not None:
            self._tracer.seed(store, thread_id)
        if self._metrics is not None:
            self._metrics.add("threadlog_open_threads", 1)
            self._metrics.add("threadlog_leases_held", 1)
        if isinstance(store, Snapshots):
            saved = store.load_snapshot(thread_id, snapshot.SNAPSHOT_VERSION)
            loaded = snapshot.load(saved[1]) if saved is not None else None
            if saved is not None and loaded is not None:
                base = SessionBase(saved[0], *loaded)
        records = store.read(thread_id, after=base.ord if base else 0)
        session = Session(
            self,
            thread_id,
            records,
            base,
            on_close=self._forget,
            source=self.source,
            snapshots=self.snapshots,
        )
        self.sessions[thread_id] = session
        return session

    def _forget(self, session: Session) -> None:
        if self.sessions.pop(session.thread_id, None) is not None and self._metrics is not None:
            self._metrics.add("threadlog_open_threads", -1)
            self._metrics.add("threadlog_leases_held", -1)

    async def close(self) -> None:
        """Close every session (the close protocol), then the store if the runtime made it."""
        if self._closed:
            return
        self._closed = True
        for session in list(self.sessions.values()):
            await session.close()
        if self._tracer is not None or self._metrics is not None:
            with contextlib.suppress(Exception):  # a failed store: the sessions reported it
                await asyncio.to_thread(self.store.flush)  # the last records are seen
        if self._tracer is not None:
            self._tracer.detach(self.store)
        if self._metrics is not None:
            self._metrics.detach(self.store)
        if self._owns_store:
            await asyncio.to_thread(self.store.close)

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError("the runtime is closed")
