"""The embedded store's checkpoints keep a trimmed state (`threadlog.model.state.trim`): past
turns and calls without their payloads, so a long agent thread's checkpoint is not as large
as its log. What the store answers with is still whole where asked for."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from tests.model.records import agent_turn

from threadlog import EmbeddedStore
from threadlog.errors import InvalidTransition
from threadlog.model.events import (
    ToolCallFinished,
    TurnEnded,
    TurnStarted,
)
from threadlog.model.reducer import replay
from threadlog.model.snapshot import SNAPSHOT_VERSION

if TYPE_CHECKING:
    from pathlib import Path

TURNS = 30
RESULT = "r" * 4000


@pytest.fixture
def home(tmp_path: Path) -> tuple[str, str]:
    path = str(tmp_path / "home")
    with EmbeddedStore(path) as store:
        thread = store.create_thread("alice")
        for n in range(1, TURNS + 1):
            for event in agent_turn(n, result=RESULT):
                store.append(thread, event, durable=False)
    return path, thread  # closed: the log was checkpointed


def _row(store: EmbeddedStore, thread: str) -> tuple[int, str, bytes]:
    rows = store.index.run(
        "SELECT ord, version, state FROM checkpoints WHERE thread_id = ?", (thread,)
    )
    ord_, version, state = rows[0]
    return ord_, version, bytes(state)


def test_the_checkpoint_keeps_past_payloads_out(home: tuple[str, str]) -> None:
    path, thread = home
    with EmbeddedStore(path) as store:
        ord_, version, state = _row(store, thread)
        records = store.read(thread)
        assert (ord_, version) == (records[-1].ord, SNAPSHOT_VERSION)
        log_bytes = sum(len(str(r.data)) for r in records)
        # 29 results of 4,000 bytes and 29 arguments of 1,000 are not in it; the last turn's are
        assert state.count(RESULT.encode()) == 1
        assert len(state) < log_bytes / 4


def test_the_state_is_whole_unless_asked_for_without_history(home: tuple[str, str]) -> None:
    path, thread = home
    with EmbeddedStore(path) as store:
        whole = replay(store.read(thread))
        assert store.state(thread) == whole
        assert store.state(thread).tool_calls["c1"].result == {"text": RESULT}
        now = store.state(thread, history=False)
        assert now.trimmed
        assert now.tool_calls["c1"].result is None and now.turns["t1"].input == ""
        assert now.tool_calls[f"c{TURNS}"].result == {"text": RESULT}
        for name in ("last_ord", "last_hash", "leaf", "active_turn", "usage", "config"):
            assert getattr(now, name) == getattr(whole, name)
        assert now.turns.keys() == whole.turns.keys()


def test_appends_after_reopening_are_checked_as_against_the_whole_state(
    home: tuple[str, str],
) -> None:
    path, thread = home
    with EmbeddedStore(path) as store:
        for refused in (
            ToolCallFinished(call_id="c1", ok=True, result=1),  # finished long ago
            TurnStarted(turn_id="t1", input="an old turn's id"),
            TurnEnded(turn_id="t2", outcome="completed"),
        ):
            with pytest.raises(InvalidTransition):
                store.append(thread, refused)
        for event in agent_turn(TURNS + 1, result=RESULT):
            store.append(thread, event)
        assert store.state(thread) == replay(store.read(thread))


def test_a_fork_opened_from_its_checkpoint_knows_every_id_it_holds(tmp_path: Path) -> None:
    """A log opened from a checkpoint learns the ids before it on the bytes (their hashes
    and chain checked, a fork's inherited records included) when an append names an id."""
    home = str(tmp_path / "home")
    with EmbeddedStore(home) as store:
        source = store.create_thread("alice")
        for n in range(1, 4):
            for event in agent_turn(n, result=RESULT):
                store.append(source, event)
        child = store.fork(source)
        inherited = store.read(child)[5]
        first = store.append(
            child, "custom.note", {"n": 1}, id="0193a23b-0000-7000-8000-00000000c0de"
        )
    with EmbeddedStore(home) as store:  # (closed: the child has its checkpoint)
        again = store.append(
            child, inherited.type, inherited.data, id=inherited.id, parent=inherited.parent
        )
        assert (again.ord, again.hash) == (inherited.ord, inherited.hash)  # a replay
        mine = store.append(
            child, "custom.note", {"n": 1}, id="0193a23b-0000-7000-8000-00000000c0de"
        )
        assert (mine.ord, mine.hash) == (first.ord, first.hash)  # the one appended before
        assert store.verify(child).ok
