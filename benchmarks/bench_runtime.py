"""Runtime overhead: a scripted turn of 100 steps, each with one trivial tool call.

Runs the same turn twice with the same runtime code: on the embedded store (every critical
record fsynced before the turn moves on) and on the in-memory store (``ephemeral``: the same
loop writing nothing), and prints the time per step of each and the difference.

Usage::

    .venv/bin/python benchmarks/bench_runtime.py [--steps 100] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from typing import Any

from threadlog.runtime import Reply, Runtime, ScriptedModel, Tool, ToolCallSpec, ToolContext


async def _noop(ctx: ToolContext, args: dict[str, Any]) -> str:
    return "ok"


NOOP = Tool("noop", "does nothing", {"type": "object"}, "read_only", _noop)


async def one_turn(steps: int, home: str | None) -> tuple[float, int]:
    replies = [Reply(f"step {i}", [ToolCallSpec("noop", {"i": i})]) for i in range(steps - 1)]
    model = ScriptedModel([*replies, Reply("finished")])
    runtime = (
        Runtime(home, model=model, tools=[NOOP])
        if home
        else Runtime(ephemeral=True, model=model, tools=[NOOP])
    )
    async with runtime:
        session = await runtime.create("bench")
        start = time.perf_counter()
        await session.submit("go")
        await session.wait_idle(600)
        elapsed = time.perf_counter() - start
        assert (
            session.state.turns and next(iter(session.state.turns.values())).status == "completed"
        )
        return elapsed, session.state.last_ord


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    durable, memory, records = [], [], 0
    for _ in range(args.runs):
        home = tempfile.mkdtemp(prefix="threadlog-bench-rt-")
        try:
            elapsed, records = asyncio.run(one_turn(args.steps, home))
            durable.append(elapsed)
        finally:
            shutil.rmtree(home, ignore_errors=True)
        memory.append(asyncio.run(one_turn(args.steps, None))[0])
    d, m = min(durable) / args.steps * 1000, min(memory) / args.steps * 1000
    print(
        f"steps per turn: {args.steps} (one tool call each), records: {records}, best of {args.runs}"
    )
    print("")
    print("| loop | per step | target |")
    print("|---|---|---|")
    print(f"| runtime, in-memory store (writes nothing) | {m:.3f} ms | |")
    print(f"| runtime, embedded store, critical records fsynced | {d:.3f} ms | |")
    print(f"| overhead of durability | {d - m:.3f} ms | ≤ 2 ms |")


if __name__ == "__main__":
    main()
