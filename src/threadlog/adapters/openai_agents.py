"""`ThreadlogSession`: an OpenAI Agents SDK session (its ``Session`` protocol) over threadlog.

Install with ``pip install 'threadlog[openai-agents]'``::

    from agents import Agent, Runner
    from threadlog import open_store
    from threadlog.adapters.openai_agents import ThreadlogSession

    session = ThreadlogSession("user-42", open_store())
    await Runner.run(agent, "hello", session=session)

Theory of operation
-------------------
One threadlog thread per ``session_id`` (`NamedThreads`, created on the first `add_items`).
The log is append-only, so the session's three mutations are records:

* ``custom.agents.items`` ``{"items": [...]}``: one per `add_items` call, the items as given;
* ``custom.agents.popped`` ``{"ord": n, "index": i}``: `pop_item`'s tombstone for item ``i``
  of the items record at ordinal ``n``;
* ``custom.agents.cleared`` ``{}``: `clear_session`; items before it are no longer the
  session's (still in the log, for audit).

*Reading only the tail.* The session keeps, in memory, the *positions* of its live items
(``(ord, index)`` pairs) and the items of its latest `TAIL_RECORDS` items records, folded
from the log once and then from the records after the last one it saw (read only when the
index says another writer appended: `records_after`). ``get_items(limit=N)`` looks up the
positions of the last N live items and takes them from memory, or reads just the records
from the first of them on (`Store.read` with ``after`` and ``limit``). On the in-memory
store that read is a slice; the embedded store's `read` verifies the log from its start
unless a snapshot covers ``after``, so there the memory is what keeps a bounded read cheap.

*Concurrency.* Every mutation appends with ``expect_ord`` (the next ordinal this session
knows of); when another session object or process got there first (`OrdinalConflict`), it
catches up and tries again, so a pop never removes an item somebody else already popped.
The store's calls run in a worker thread (``asyncio.to_thread``): the embedded store waits
for fsync.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import field
from typing import TYPE_CHECKING, Any

from agents.memory.session_settings import SessionSettings, resolve_session_limit

from threadlog._dataclass import dataclass
from threadlog.adapters._threads import NamedThreads, records_after
from threadlog.errors import OrdinalConflict, ThreadNotFound

if TYPE_CHECKING:
    from agents.items import TResponseInputItem

    from threadlog.store.protocol import Store

__all__ = ["ThreadlogSession"]

ITEMS = "custom.agents.items"
POPPED = "custom.agents.popped"
CLEARED = "custom.agents.cleared"
TAIL_RECORDS = 256
"""Items records kept in memory (the latest): what ``get_items(limit)`` usually asks for."""


@dataclass
class _Positions:
    """Where the live items are, folded from the log up to record ``ord``."""

    ord: int = 0
    live: list[tuple[int, int]] = field(default_factory=list)

    def apply(self, type_: str, ord_: int, data: Any) -> None:
        if type_ == ITEMS:
            self.live.extend((ord_, i) for i in range(len(data["items"])))
        elif type_ == POPPED:
            position = (data["ord"], data["index"])
            if self.live and self.live[-1] == position:
                self.live.pop()
            elif position in self.live:
                self.live.remove(position)
        elif type_ == CLEARED:
            self.live.clear()
        self.ord = ord_


class ThreadlogSession:
    """The Agents SDK's ``Session`` protocol over a threadlog store (see the module docstring).

    Args:
        session_id: the SDK's session id (any string).
        store: any threadlog store.
        session_settings: the SDK's settings (its ``limit`` is the default of `get_items`).
        principal: the owner of the thread this session creates.
    """

    session_settings: SessionSettings | None

    def __init__(
        self,
        session_id: str,
        store: Store,
        *,
        session_settings: SessionSettings | None = None,
        principal: str = "local",
    ) -> None:
        self.session_id = session_id
        self.session_settings = session_settings or SessionSettings()
        self.store = store
        self._names = NamedThreads(store, "agents", principal=principal)
        self._positions = _Positions()
        self._tail: dict[int, list[Any]] = {}
        self._lock = threading.Lock()

    # -- folding -----------------------------------------------------------------------

    def _catch_up(self) -> str | None:
        """Fold the records after the last one seen; the thread id (None: no thread)."""
        thread_id = self._names.find(self.session_id)
        if thread_id is None:
            self._positions = _Positions()
            self._tail.clear()
            return None
        try:
            records = records_after(self.store, thread_id, self._positions.ord)
        except ThreadNotFound:
            self._names.forget(self.session_id)
            self._positions = _Positions()
            self._tail.clear()
            return None
        for record in records:
            data = self.store.resolve(record.data) if record.type == ITEMS else record.data
            self._positions.apply(record.type, record.ord, data)
            if record.type == ITEMS:
                self._remember(record.ord, data["items"])
        return thread_id

    def _remember(self, ord_: int, items: list[Any]) -> None:
        """Keep the items of record ``ord_`` among the latest `TAIL_RECORDS` held."""
        self._tail[ord_] = items
        while len(self._tail) > TAIL_RECORDS:
            del self._tail[min(self._tail)]

    def _items_at(self, thread_id: str, positions: list[tuple[int, int]]) -> list[Any]:
        """The items at ``positions`` (in order), reading only the records that hold them."""
        if not positions:
            return []
        held = self._tail
        if any(ord_ not in held for ord_, _ in positions):
            first, last = positions[0][0], positions[-1][0]
            records = self.store.read(thread_id, first - 1, limit=last - first + 1)
            held = {r.ord: self.store.resolve(r.data)["items"] for r in records if r.type == ITEMS}
        return [held[ord_][index] for ord_, index in positions]

    def _append(self, type_: str, data: dict[str, Any]) -> int:
        """Append at the next ordinal this session knows of, catching up on a conflict."""
        thread_id = self._names.get(self.session_id)
        while True:
            try:
                record = self.store.append(
                    thread_id, type_, data, expect_ord=self._positions.ord + 1
                )
            except OrdinalConflict:
                self._catch_up()
                raise
            self._positions.apply(type_, record.ord, data)
            if type_ == ITEMS:
                self._remember(record.ord, data["items"])
            return record.ord

    # -- the Session protocol ----------------------------------------------------------

    def _get_items(self, limit: int | None) -> list[Any]:
        limit = resolve_session_limit(limit, self.session_settings)
        with self._lock:
            thread_id = self._catch_up()
            if thread_id is None or limit == 0:
                return []
            live = self._positions.live
            wanted = live[-limit:] if limit is not None and limit > 0 else live
            return self._items_at(thread_id, list(wanted))

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items, oldest first; with ``limit``, only the latest ``limit``
        (reading only the records that hold them)."""
        return await asyncio.to_thread(self._get_items, limit)

    def _add_items(self, items: list[Any]) -> None:
        with self._lock:
            self._catch_up()
            self._retrying(lambda: self._append(ITEMS, {"items": list(items)}))

    def _retrying(self, action: Any) -> Any:
        while True:
            try:
                return action()
            except OrdinalConflict:
                continue  # _append caught up: try again at the new end

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` (one durable record)."""
        if items:
            await asyncio.to_thread(self._add_items, items)

    def _pop_item(self) -> Any:
        with self._lock:
            thread_id = self._catch_up()
            if thread_id is None:
                return None

            def pop() -> Any:
                if not self._positions.live:
                    return None
                ord_, index = self._positions.live[-1]
                (item,) = self._items_at(thread_id, [(ord_, index)])
                self._append(POPPED, {"ord": ord_, "index": index})
                return item

            return self._retrying(pop)

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the latest item (a tombstone record), or None when empty."""
        item: TResponseInputItem | None = await asyncio.to_thread(self._pop_item)
        return item

    def _clear(self) -> None:
        with self._lock:
            if self._catch_up() is None or not self._positions.live:
                return
            self._retrying(lambda: self._append(CLEARED, {}))

    async def clear_session(self) -> None:
        """Forget every item (a ``custom.agents.cleared`` record; the log keeps them)."""
        await asyncio.to_thread(self._clear)
