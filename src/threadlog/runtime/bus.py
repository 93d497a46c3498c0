"""The live fan-out of one session: subscribers' streams, what they carry, and the drop policy.

Theory of operation
-------------------
A subscriber reads the thread's log from its cursor, then live items from a bounded queue of
its own. Two kinds of live item arrive on it:

* durable records, in ordinal order, published from the store's durable-record listener (so
  nobody ever sees a record that is not on disk); a batch may overlap what the log read
  already gave, so the stream skips ordinals it has delivered (each record comes once);
* `Progress`: transient updates (text deltas, "thinking", "approval needed") that are never
  logged, only for subscribers that asked for them.

*Drop, never block.* Publishing never waits for a reader: a subscriber whose queue is full is
removed, and its oldest item makes room for a `SubscriberDropped` notice, raised to it in
order; it resubscribes from the last ordinal it saw and misses no record (the log has them).

*Fail-stop.* When the store stops acknowledging writes, every subscriber gets the
`StorageError` after what was already durable: no more records will come. A subscriber that
arrives later gets it at once, after the log.

Listener callbacks come from any thread (the store's committer); they hop onto the session's
event loop with ``call_soon_threadsafe``, and everything else here runs on that loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

from threadlog._dataclass import dataclass
from threadlog.errors import RunError, StorageError
from threadlog.model.envelope import Record

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    from threadlog.store.protocol import Store

__all__ = ["Bus", "LiveItem", "Progress", "SubscriberDropped"]


@dataclass(frozen=True, slots=True)
class Progress:
    """A transient update (a text delta, a tool's progress): live only, never logged.

    Kinds the runtime publishes: ``thinking`` (``step_id``: a model call starts), ``text``
    (``step_id``, ``text``: a delta of the answer), ``approval_needed`` (``call_id``,
    ``tool``, ``args``: a proposal waits for a human), ``retrying`` (``step_id``, ``attempt``,
    ``reason``, ``wait``: a model request failed transiently and is tried again) and
    ``tool_progress`` (``call_id``, ``tool``, ``attempt``, ``message``, ``fraction``: what a
    running tool reported through ``ToolContext.progress``).

    A subscription with progress that starts while a model call streams its answer first
    gets ``text_so_far`` (``step_id``, ``text``: the whole answer streamed so far, which
    replaces what the subscriber holds for that step), then the ``text`` deltas after it, so
    a late subscriber (a page opened mid-answer) misses no text.
    """

    kind: str
    data: dict[str, Any]


class Streaming(Protocol):
    """A model call streaming its answer (`Bus.streaming`)."""

    @property
    def step_id(self) -> str: ...

    @property
    def text(self) -> str:
        """The answer the current try has streamed so far."""
        ...


LiveItem: TypeAlias = Record | Progress
"""What a subscription yields: durable records, and `Progress` for those who asked."""


class SubscriberDropped(RunError):
    """The subscriber fell too far behind; re-subscribe from the last ordinal it saw."""


_CLOSED = object()


class Bus:
    """The subscribers of one thread's session.

    Args:
        thread_id: the thread, for messages.
        read: the thread's durable records after an ordinal (the log part of a subscription;
            called in a worker thread).
    """

    def __init__(self, thread_id: str, read: Callable[[int], list[Record]]) -> None:
        self.thread_id = thread_id
        self._read = read
        self._loop = asyncio.get_running_loop()
        self._subscribers: list[tuple[asyncio.Queue[Any], bool]] = []
        self._store_error: StorageError | None = None
        """Set when the store stopped acknowledging writes: no record will come any more."""
        self.streaming: Streaming | None = None
        """The model call whose answer streams now (`threadlog.runtime.retry.StepAttempts`
        sets itself here while it runs): what a late subscriber is given first."""

    # -- the store's side -------------------------------------------------------------------

    def attach(self, store: Store) -> None:
        """Listen to the store's durable records and its failure."""
        store.add_listener(self._on_durable)
        store.add_error_listener(self._on_store_error)

    def detach(self, store: Store) -> None:
        """Stop listening to the store (see `attach`)."""
        store.remove_listener(self._on_durable)
        store.remove_error_listener(self._on_store_error)

    def _on_durable(self, thread_id: str, records: list[Record]) -> None:
        if thread_id != self.thread_id or not self._subscribers:
            return
        try:
            self._loop.call_soon_threadsafe(self.publish, records)
        except RuntimeError:
            pass  # the loop is closed: nobody is listening any more

    def _on_store_error(self, error: StorageError) -> None:
        """The store failed (fail-stop): wake every subscriber with the error. Any thread."""
        try:
            self._loop.call_soon_threadsafe(self._fail_subscribers, error)
        except RuntimeError:
            pass  # the loop is closed: nobody is listening any more

    def _fail_subscribers(self, error: StorageError) -> None:
        self._store_error = error
        for queue, _ in list(self._subscribers):
            if queue.full():  # the error must get in: it ends the subscription anyway
                with contextlib.suppress(asyncio.QueueEmpty):
                    queue.get_nowait()
            queue.put_nowait(error)

    # -- publishing -------------------------------------------------------------------------

    def publish(self, item: list[Record] | Progress) -> None:
        """Hand a batch of durable records, or a `Progress`, to every subscriber (on the
        loop); drop a subscriber that is full (see the module docstring)."""
        transient = isinstance(item, Progress)
        for queue, wants_progress in list(self._subscribers):
            if transient and not wants_progress:
                continue
            try:
                queue.put_nowait(item)
            except asyncio.QueueFull:
                # Never block the writer for a slow reader: drop it with a notice (made room
                # for by discarding the oldest item; the reader resubscribes from its cursor).
                self._subscribers.remove((queue, wants_progress))
                with contextlib.suppress(asyncio.QueueEmpty):
                    queue.get_nowait()
                queue.put_nowait(
                    SubscriberDropped(
                        f"subscriber of {self.thread_id} fell more than {queue.maxsize} items behind"
                    )
                )

    def close(self) -> None:
        """End every subscription (after what each has queued)."""
        for queue, _ in self._subscribers:
            try:
                queue.put_nowait(_CLOSED)
            except asyncio.QueueFull:
                pass

    # -- subscribing ------------------------------------------------------------------------

    async def subscribe(
        self, after: int = 0, *, progress: bool = False, buffer: int = 10_000
    ) -> AsyncIterator[LiveItem]:
        """Records with ``ord > after``: the log, then live ones (see `Session.subscribe`)."""
        queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=buffer)
        entry = (queue, progress)
        self._subscribers.append(entry)
        streaming = self.streaming
        if progress and streaming is not None and streaming.text:
            # (with no await since the last delta: the deltas after it follow in the queue)
            so_far = {"step_id": streaming.step_id, "text": streaming.text}
            queue.put_nowait(Progress("text_so_far", so_far))
        if self._store_error is not None:  # it failed before: the log is all there is
            queue.put_nowait(self._store_error)
        try:
            last = after
            for record in await asyncio.to_thread(self._read, after):
                last = record.ord
                yield record
            while True:
                item = await queue.get()
                if item is _CLOSED:
                    return
                if isinstance(item, SubscriberDropped):
                    raise item
                if isinstance(item, StorageError):
                    raise StorageError(str(item)) from item
                if isinstance(item, Progress):
                    yield item
                    continue
                for record in item:
                    if record.ord > last:
                        last = record.ord
                        yield record
        finally:
            if entry in self._subscribers:
                self._subscribers.remove(entry)
