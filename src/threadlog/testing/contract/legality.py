"""The contract of legality: an event the reducer refuses is never written.

A catalogue event that is illegal in the thread's state (a second ``turn.ended``, a result
before its start, a call approved that was never proposed) is refused with
`InvalidTransition` on every append path (``append``, ``aappend``, with an ``id``, with
``expect_ord``, typed or by name, buffered or durable) and writes nothing: the log, the next
ordinal and the id stay free, and the thread keeps taking legal events. Concurrent writers are
each checked against the state their predecessors left; a record the ``check`` hook refused is
forgotten; a fork continues from the state it inherited.
"""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING, Any

import pytest

from threadlog.errors import InvalidTransition, UsageError
from threadlog.model.events import TurnEnded
from threadlog.testing.contract._common import EVENT_ID, check_chain

if TYPE_CHECKING:
    from threadlog.model.envelope import Record
    from threadlog.store.protocol import Store

__all__ = ["LegalityTests"]

END_T1 = {"turn_id": "t1", "outcome": "completed"}


def _ended_turn(store: Store) -> str:
    thread = store.create_thread("a")
    store.append(thread, "turn.started", {"turn_id": "t1", "input": "hi"})
    store.append(thread, "turn.ended", END_T1)
    return thread


class LegalityTests:
    """Illegal events are refused on every path, and nothing of them is written."""

    @pytest.mark.parametrize(
        ("type_", "data", "match"),
        [
            ("turn.ended", END_T1, "already ended"),
            ("tool_call.finished", {"call_id": "c", "ok": True, "result": 1}, "unknown tool"),
            ("tool_call.approved", {"call_id": "c", "by": "u"}, "unknown tool call"),
            ("step.started", {"turn_id": "t1", "step_id": "s"}, "already ended"),
            ("input.consumed", {"input_id": "i", "turn_id": "t1"}, "unknown input"),
            ("memory.revoked", {"memory_id": "m"}, "not live"),
        ],
    )
    def test_an_illegal_event_is_refused_and_writes_nothing(
        self, store: Store, type_: str, data: dict[str, Any], match: str
    ) -> None:
        thread = _ended_turn(store)
        before = store.read(thread)
        with pytest.raises(InvalidTransition, match=match) as info:
            store.append(thread, type_, data)
        assert type_ in str(info.value) and thread in str(info.value)
        assert isinstance(info.value, UsageError)
        store.flush()
        assert store.read(thread) == before
        assert store.verify(thread).ok
        assert store.state(thread).turns["t1"].status == "completed"
        legal = store.append(thread, "turn.started", {"turn_id": "t2", "input": "again"})
        assert legal.ord == before[-1].ord + 1  # the ordinal was not used up
        check_chain(store.read(thread))

    def test_every_append_form_is_checked(self, store: Store) -> None:
        thread = _ended_turn(store)
        n = len(store.read(thread))
        first = store.read(thread)[0].id
        attempts: list[dict[str, Any]] = [
            {"id": EVENT_ID},
            {"expect_ord": n + 1},
            {"durable": False},
            {"durable": True},
            {"parent": None},
            {"parent": first},
        ]
        for kwargs in attempts:
            with pytest.raises(InvalidTransition):
                store.append(thread, "turn.ended", END_T1, **kwargs)
        with pytest.raises(InvalidTransition):
            store.append(thread, TurnEnded(turn_id="t1", outcome="failed"))

        async def on_the_loop() -> None:
            for kwargs in attempts:
                with pytest.raises(InvalidTransition):
                    await store.aappend(thread, "turn.ended", END_T1, **kwargs)

        asyncio.run(on_the_loop())
        store.flush()
        assert len(store.read(thread)) == n
        # neither the id nor the ordinal was taken
        record = store.append(
            thread, "turn.started", {"turn_id": "t2", "input": "x"}, id=EVENT_ID, expect_ord=n + 1
        )
        assert (record.ord, record.id) == (n + 1, EVENT_ID)
        check_chain(store.read(thread))

    def test_an_illegal_event_never_reaches_the_check_hook(self, store: Store) -> None:
        thread = _ended_turn(store)
        seen: list[Record] = []
        with pytest.raises(InvalidTransition):
            store.append(thread, "turn.ended", END_T1, check=seen.append)
        assert seen == []

    def test_a_record_the_check_hook_refused_leaves_the_state_as_the_log_is(
        self, store: Store
    ) -> None:
        thread = store.create_thread("a")
        store.append(thread, "turn.started", {"turn_id": "t1", "input": "hi"})

        def refuse(record: Record) -> None:
            raise RuntimeError("not now")

        with pytest.raises(RuntimeError, match="not now"):
            store.append(thread, "turn.ended", END_T1, check=refuse)
        # the end was not written: t1 still runs, so a new turn is refused and ending it is not
        with pytest.raises(InvalidTransition, match="is running"):
            store.append(thread, "turn.started", {"turn_id": "t2", "input": "x"})
        store.append(thread, "turn.ended", END_T1)
        with pytest.raises(InvalidTransition, match="already ended"):
            store.append(thread, "turn.ended", END_T1)
        check_chain(store.read(thread))

    def test_racing_writers_are_each_checked_against_their_predecessors(self, store: Store) -> None:
        """Writers in threads and tasks race to end one turn: one wins, every other is
        refused; legal appends racing beside them all land, in one unbroken chain."""
        thread = store.create_thread("a")
        store.append(thread, "turn.started", {"turn_id": "t1", "input": "hi"})
        outcomes: list[str] = []
        lock = threading.Lock()

        def writer(i: int) -> None:
            try:
                if i % 2:
                    store.append(thread, "custom.beside", {"i": i})
                    outcome = "custom"
                else:
                    store.append(thread, "turn.ended", END_T1)
                    outcome = "ended"
            except InvalidTransition:
                outcome = "refused"
            with lock:
                outcomes.append(outcome)

        workers = [threading.Thread(target=writer, args=(i,)) for i in range(32)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert outcomes.count("ended") == 1
        assert outcomes.count("refused") == 15 and outcomes.count("custom") == 16

        async def tasks() -> list[Record | BaseException]:
            await store.aappend(thread, "turn.started", {"turn_id": "t2", "input": "x"})
            end = {"turn_id": "t2", "outcome": "completed"}
            return await asyncio.gather(
                *(store.aappend(thread, "turn.ended", end, durable=True) for _ in range(16)),
                *(store.aappend(thread, "custom.beside", {}, durable=True) for _ in range(16)),
                return_exceptions=True,
            )

        results = asyncio.run(tasks())
        refused = [r for r in results if isinstance(r, InvalidTransition)]
        written = [r for r in results if not isinstance(r, BaseException)]
        assert len(refused) == 15 and len(written) == 17
        store.flush()
        records = store.read(thread)
        assert [r.type for r in records].count("turn.ended") == 2
        check_chain(records)
        assert store.verify(thread).ok

    def test_a_fork_continues_from_the_state_it_inherited(self, store: Store) -> None:
        thread = store.create_thread("a")
        store.append(thread, "turn.started", {"turn_id": "t1", "input": "hi"})
        store.append(thread, "custom.x", {})
        child = store.fork(thread, changes={"model": "m2"})  # writes its own config.changed
        with pytest.raises(InvalidTransition, match="is running"):
            store.append(child, "turn.started", {"turn_id": "t2", "input": "x"})
        store.append(child, "turn.ended", END_T1)  # the inherited turn ends in the child
        with pytest.raises(InvalidTransition, match="already ended"):
            store.append(child, "turn.ended", END_T1)
        store.append(thread, "turn.ended", END_T1)  # and, separately, in its source
        assert store.verify(child).ok and store.verify(thread).ok
        assert store.state(child).config["model"] == "m2"
