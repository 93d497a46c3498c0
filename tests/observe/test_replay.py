"""Replay for evaluation: a recorded thread against a scripted "new model" that takes another
path at step 3 — recorded results reused before it, the non-idempotent call never executed,
and the trajectory diff names step 3."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from threadlog.cli import cli
from threadlog.errors import ThreadNotFound
from threadlog.observe.trajectory import diff, trajectory
from threadlog.runtime.models import ModelRequest, Reply, ScriptedModel, ToolCallSpec
from threadlog.runtime.replay import replay_thread
from threadlog.runtime.runtime import Runtime
from threadlog.runtime.tools import Tool, ToolContext
from threadlog.store.open import open_store

RUNS: dict[str, int] = {"lookup": 0, "pay": 0}


async def _lookup(ctx: ToolContext, args: dict[str, Any]) -> Any:
    RUNS["lookup"] += 1
    return {"invoice": args["invoice"], "amount": 10 * len(args["invoice"])}


async def _pay(ctx: ToolContext, args: dict[str, Any]) -> Any:
    RUNS["pay"] += 1
    return {"paid": args["amount"], "receipt": f"r-{RUNS['pay']}"}


TOOLS = [
    Tool("lookup", "Look an invoice up.", {"type": "object"}, "read_only", _lookup),
    Tool("pay", "Pay an amount.", {"type": "object"}, "non_idempotent", _pay),
]


def _old(request: ModelRequest, step: int) -> Reply:
    """The recorded model: look up two invoices, pay one, report."""
    return [
        Reply("Looking up A1.", [ToolCallSpec("lookup", {"invoice": "A1"})]),
        Reply("Looking up B22.", [ToolCallSpec("lookup", {"invoice": "B22"})]),
        Reply("Paying A1.", [ToolCallSpec("pay", {"amount": 20})]),
        Reply("Paid."),
    ][min(step, 3)]


def _new(request: ModelRequest, step: int) -> Reply:
    """The candidate: the same first two steps, then pays B22 instead (step 3)."""
    return [
        Reply("Looking up A1 first.", [ToolCallSpec("lookup", {"invoice": "A1"})]),
        Reply("Now B22.", [ToolCallSpec("lookup", {"invoice": "B22"})]),
        Reply("Paying B22.", [ToolCallSpec("pay", {"amount": 30})]),
        Reply("I could not pay."),
    ][min(step, 3)]


def _same(request: ModelRequest, step: int) -> Reply:
    """A candidate that takes the recorded path exactly (the payment included)."""
    return _old(request, step)


def new_model() -> ScriptedModel:
    return ScriptedModel(_new, name="candidate")


def same_model() -> ScriptedModel:
    return ScriptedModel(_same, name="same")


def _record(home: Path) -> str:
    async def main() -> str:
        policy = {"non_idempotent": "auto"}
        async with Runtime(home, model=ScriptedModel(_old), tools=TOOLS) as runtime:
            session = await runtime.create("alice", title="pay", approval_policy=policy)
            await session.submit("Pay the invoice that is due.")
            await session.wait_idle(10)
            return session.thread_id

    return asyncio.run(main())


@pytest.fixture
def recorded(tmp_path: Path) -> tuple[Path, str]:
    RUNS.update(lookup=0, pay=0)
    thread = _record(tmp_path)
    assert RUNS == {"lookup": 2, "pay": 1}
    return tmp_path, thread


def test_replay_reuses_recorded_results_never_pays_and_diverges_at_step_3(
    recorded: tuple[Path, str],
) -> None:
    home, source = recorded
    with open_store(str(home)) as store:
        result = asyncio.run(replay_thread(store, source, new_model(), tools=TOOLS))
        source_records = store.read(source)
        replayed = store.read(result.thread)
    # nothing ran again: both lookups were served from the recording, the payment denied
    assert RUNS == {"lookup": 2, "pay": 1}
    assert len(result.served) == 2 and len(result.denied) == 1 and result.ran == []
    finished = [r.data for r in replayed if r.type == "tool_call.finished"]
    recorded_results = [r.data["result"] for r in source_records if r.type == "tool_call.finished"]
    assert [f["result"] for f in finished] == recorded_results[:2]
    approvals = [r.data["by"] for r in replayed if r.type == "tool_call.approved"]
    assert approvals == ["replay:recorded", "replay:recorded"]
    (denied,) = [r.data for r in replayed if r.type == "tool_call.denied"]
    assert "matches no recorded call" in denied["reason"]
    # lineage names the source; the config says it is a replay
    head = replayed[0].data
    assert head["lineage"]["thread"] == source and head["lineage"]["kind"] == "replay"
    assert head["config"]["replay"]["source"] == source
    found = diff(trajectory(source_records), trajectory(replayed))
    assert found.divergence is not None
    assert found.divergence.step == 3
    assert found.divergence.message.startswith("step 3: pay arguments")


def test_a_candidate_on_the_recorded_path_gets_the_recorded_payment_without_paying(
    recorded: tuple[Path, str],
) -> None:
    home, source = recorded
    with open_store(str(home)) as store:
        result = asyncio.run(
            replay_thread(store, source, ScriptedModel(_same), tools=TOOLS, ephemeral=True)
        )
        found = diff(trajectory(store.read(source)), trajectory(result.records))
        with pytest.raises(ThreadNotFound):
            store.read(result.thread)  # ephemeral: nothing written to the store
    assert RUNS == {"lookup": 2, "pay": 1}
    assert len(result.served) == 3
    assert found.divergence is None


def test_readonly_runs_unmatched_reads_and_stop_stops(recorded: tuple[Path, str]) -> None:
    home, source = recorded

    def reads_other(request: ModelRequest, step: int) -> Reply:
        if step == 0:
            return Reply("A9?", [ToolCallSpec("lookup", {"invoice": "A9"})])
        if step == 1:
            return Reply("Pay.", [ToolCallSpec("pay", {"amount": 20})])
        return Reply("Done.")

    with open_store(str(home)) as store:
        ro = asyncio.run(
            replay_thread(
                store, source, ScriptedModel(reads_other), tools=TOOLS, unmatched="readonly"
            )
        )
        assert RUNS == {"lookup": 3, "pay": 1}  # the unmatched lookup ran; the payment served
        assert len(ro.ran) == 1 and len(ro.served) == 1
        stop = asyncio.run(
            replay_thread(store, source, ScriptedModel(reads_other), tools=TOOLS, unmatched="stop")
        )
        assert stop.stopped is not None and "lookup" in stop.stopped
        ended = [r.data for r in stop.records if r.type == "turn.ended"]
        assert ended[-1]["outcome"] == "aborted"
    assert RUNS == {"lookup": 3, "pay": 1}


def test_replay_at_forks_the_source(recorded: tuple[Path, str]) -> None:
    home, source = recorded
    with open_store(str(home)) as store:
        first = store.read(source)
        with pytest.raises(Exception, match="no record"):
            asyncio.run(replay_thread(store, source, new_model(), tools=TOOLS, at=999))
        result = asyncio.run(replay_thread(store, source, new_model(), tools=TOOLS, at=1))
        head = store.read(result.thread)[0].data
        assert head["lineage"]["thread"] == source and head["lineage"]["ord"] == 1
        # inside the turn: the fork moves back to its start, and the turn is replayed whole
        inside = next(r.ord for r in first if r.type == "tool_call.finished")
        started = next(r.ord for r in first if r.type == "turn.started")
        moved = asyncio.run(replay_thread(store, source, new_model(), tools=TOOLS, at=inside))
        assert moved.at == started - 1
        assert len(moved.served) == 2 and len(moved.denied) == 1
        child = store.read(moved.thread)
        assert child[0].data["lineage"]["ord"] == started - 1
        found = diff(trajectory(first), trajectory(child))
        assert found.divergence is not None and found.divergence.step == 3
    assert RUNS == {"lookup": 2, "pay": 1}


def test_the_cli_replays_and_diffs(recorded: tuple[Path, str]) -> None:
    home, source = recorded
    runner = CliRunner()
    spec = f"python:{__name__}:new_model"
    out = runner.invoke(cli, ["replay", source, "--home", str(home), "--model", spec, "--json"])
    assert out.exit_code == 0, out.output
    body = orjson.loads(out.output)
    assert body["divergence"]["step"] == 3
    assert len(body["served"]) == 2 and len(body["denied"]) == 1
    replay = body["thread"]
    out = runner.invoke(
        cli, ["diff", "--trajectory", source, replay, "--home", str(home), "--json"]
    )
    assert out.exit_code == 0, out.output
    report = orjson.loads(out.output)
    assert report["divergence"]["message"].startswith("step 3:")
    assert [row["same"] for row in report["steps"]] == [
        True,
        True,
        False,
        True,
    ]  # answers: text is not a path
    text = runner.invoke(cli, ["diff", "--trajectory", source, replay, "--home", str(home)])
    assert "diverges at step 3: pay arguments" in text.output
    table = runner.invoke(
        cli,
        [
            "diff",
            "--trajectory",
            "--batch",
            f"{source}:{replay}",
            f"{source}:{source}",
            "--home",
            str(home),
            "--json",
        ],
    )
    assert table.exit_code == 0, table.output
    rows = orjson.loads(table.output)
    assert [r["divergence"] is None for r in rows] == [False, True]
    # by source: every replay of it (the one above), as a table
    again = runner.invoke(
        cli, ["replay", source, "--home", str(home), "--model", f"python:{__name__}:same_model"]
    )
    assert again.exit_code == 0, again.output
    assert "the trajectories do not diverge" in again.output
    out = runner.invoke(
        cli, ["diff", "--trajectory", "--batch", source, "--home", str(home), "--json"]
    )
    assert out.exit_code == 0, out.output
    rows = orjson.loads(out.output)
    assert [r["b"] for r in rows][0] == replay
    assert [r["divergence"] is None for r in rows] == [False, True]
    table = runner.invoke(cli, ["diff", "--trajectory", "--batch", source, "--home", str(home)])
    assert "step 3: pay arguments" in table.output and "completed" in table.output
    assert RUNS == {"lookup": 2, "pay": 1}
