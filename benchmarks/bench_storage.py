"""Storage per step: the bytes an agent turn of n steps leaves in its rollout.

A scripted turn of n steps, each with one trivial tool call, on the embedded store; prints
the size of the thread's rollout file for each n and the ratio of each to the first. A step
records its context by reference (`threadlog.model.stepcontext`), so the bytes grow linearly
with the steps: 80 steps should cost about twice 40 (the target: at most 2.1×).

Usage::

    .venv/bin/python benchmarks/bench_storage.py [--steps 40 80 200]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
from pathlib import Path
from typing import Any

from threadlog.runtime import Reply, Runtime, ScriptedModel, Tool, ToolCallSpec, ToolContext


async def _noop(ctx: ToolContext, args: dict[str, Any]) -> str:
    return "ok"


NOOP = Tool("noop", "does nothing", {"type": "object"}, "read_only", _noop)


async def one_turn(steps: int, home: str) -> tuple[str, int]:
    """Run a turn of ``steps`` steps in a new thread; its id and record count."""
    replies = [Reply(f"step {i}", [ToolCallSpec("noop", {"i": i})]) for i in range(steps - 1)]
    model = ScriptedModel([*replies, Reply("finished")])
    async with Runtime(home, model=model, tools=[NOOP]) as runtime:
        session = await runtime.create("bench", max_steps=steps)
        await session.submit("go")
        await session.wait_idle(600)
        assert next(iter(session.state.turns.values())).status == "completed"
        return session.thread_id, session.state.last_ord


def rollout_bytes(home: str, thread_id: str) -> int:
    """The size of the thread's rollout file(s) under ``home``."""
    files = [p for p in Path(home).rglob("*.jsonl") if thread_id in p.name]
    assert files, f"no rollout for {thread_id} under {home}"
    return sum(p.stat().st_size for p in files)


def measure(steps: int) -> tuple[int, int]:
    """(rollout bytes, records) of one turn of ``steps`` steps."""
    home = tempfile.mkdtemp(prefix="threadlog-bench-storage-")
    try:
        thread_id, records = asyncio.run(one_turn(steps, home))
        return rollout_bytes(home, thread_id), records
    finally:
        shutil.rmtree(home, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, nargs="+", default=[40, 80, 200])
    args = parser.parse_args()
    rows = [(n, *measure(n)) for n in args.steps]
    first_steps, first_bytes, _ = rows[0]
    print("| steps | records | rollout bytes | bytes per step | × the first |")
    print("|---|---|---|---|---|")
    for n, size, records in rows:
        print(f"| {n} | {records} | {size:,} | {size / n:,.0f} | {size / first_bytes:.2f} |")
    print("")
    print(f"(the first row has {first_steps} steps; linear storage: × ≈ steps / {first_steps})")


if __name__ == "__main__":
    main()
