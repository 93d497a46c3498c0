"""``threadlog replay`` (a recorded thread against another model) and the trajectory form of
``threadlog diff`` (two runs, step by step).

Both are shells: `threadlog.runtime.replay` runs the replay, `threadlog.observe.trajectory`
reads and compares the trajectories; this module prints them.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, cast

import click
import orjson
from rich.console import Console
from rich.table import Table
from rich.text import Text

from threadlog.cli import cli, handle_errors, store_options
from threadlog.cli._out import clean, is_terminal, print_json, text
from threadlog.cli._store import THREAD, DiskStore, open_disk_store, resolve_thread
from threadlog.cli._tree import short
from threadlog.errors import UsageError
from threadlog.observe.trajectory import TrajectoryDiff, diff, trajectory
from threadlog.runtime.replay import UNMATCHED

if TYPE_CHECKING:
    from collections.abc import Sequence

    from threadlog.runtime.replay import Unmatched
    from threadlog.store.protocol import Store

__all__ = ["print_diff", "replay", "replays_of", "trajectory_diff"]


def replays_of(store: DiskStore, source: str) -> list[str]:
    """The threads that are replays of ``source`` (their config's ``replay.source``), oldest
    first: new threads say so in ``thread.created``, forks in the settings after the prefix."""
    found = []
    for info in store.threads():
        head = store.read(info.thread_id, limit=1)
        data = head[0].data if head and isinstance(head[0].data, dict) else {}
        lineage = data.get("lineage") if isinstance(data.get("lineage"), dict) else None
        if lineage is None or lineage.get("thread") != source:
            continue
        tag = (data.get("config") or {}).get("replay")
        if tag is None and isinstance(lineage.get("ord"), int):
            after = store.read(info.thread_id, after=lineage["ord"], limit=1)
            if after and after[0].type == "config.changed":
                tag = (after[0].data.get("changes") or {}).get("replay")
        if isinstance(tag, dict) and tag.get("source") == source:
            found.append((head[0].ts, info.thread_id))
    return [thread for _, thread in sorted(found)]


def _pairs(store: DiskStore, args: Sequence[str], batch: bool) -> list[tuple[str, str]]:
    if not batch:
        if len(args) != 2:
            raise UsageError("diff --trajectory takes two threads: A B")
        return [(resolve_thread(store, args[0]), resolve_thread(store, args[1]))]
    pairs: list[tuple[str, str]] = []
    for arg in args:
        a, sep, b = arg.partition(":")
        if not sep:  # a source: every replay of it
            source = resolve_thread(store, arg)
            pairs.extend((source, replay) for replay in replays_of(store, source))
            continue
        if not a or not b:
            raise UsageError(f"--batch takes pairs A:B or sources, not {arg!r}")
        pairs.append((resolve_thread(store, a), resolve_thread(store, b)))
    if not pairs:
        raise UsageError("--batch found nothing to compare (pairs A:B, or a replayed source)")
    return pairs


def _diff_of(store: Store, a: str, b: str) -> TrajectoryDiff:
    return diff(trajectory(store.read(a)), trajectory(store.read(b)))


def trajectory_diff(home: str | None, as_json: bool, args: Sequence[str], batch: bool) -> None:
    """``threadlog diff --trajectory A B`` and ``--batch A1:B1 A2:B2 …``."""
    with open_disk_store(home, create=False) as store:
        pairs = _pairs(store, args, batch)
        diffs = [_diff_of(store, a, b) for a, b in pairs]
    if batch:
        rows = [_row(d) for d in diffs]
        if as_json:
            print_json(rows)
            return
        table = Table("A", "B", "outcome A", "outcome B", "steps", "tokens", "diverges at")
        for row in rows:
            _add_row(
                table,
                short(row["a"], 13),
                short(row["b"], 13),
                str(row["outcome_a"]),
                str(row["outcome_b"]),
                f"{row['steps_a']} / {row['steps_b']}",
                f"{row['tokens_a']} / {row['tokens_b']}",
                row["divergence"] or "-",
            )
        Console(highlight=False, emoji=False, width=_width()).print(table)
        return
    (found,) = diffs
    if as_json:
        print_json(found.to_dict())
        return
    print_diff(found, Console(highlight=False, emoji=False, width=_width()))


def _row(d: TrajectoryDiff) -> dict[str, Any]:
    ta, tb = d.a.totals(), d.b.totals()
    return {
        "a": d.a.thread,
        "b": d.b.thread,
        "outcome_a": ta["outcome"],
        "outcome_b": tb["outcome"],
        "steps_a": ta["steps"],
        "steps_b": tb["steps"],
        "tokens_a": ta["input_tokens"] + ta["output_tokens"],
        "tokens_b": tb["input_tokens"] + tb["output_tokens"],
        "cost_a": ta["cost"],
        "cost_b": tb["cost"],
        "divergence": d.divergence.message if d.divergence else None,
    }


def _width() -> int:
    """120 columns on a terminal; in a pipe, room for every cell whole."""
    return 120 if is_terminal() else 100_000


def _add_row(table: Table, *cells: Any) -> None:
    """A row of user and model text: plain `Text`, never markup."""
    table.add_row(*(Text(clean(cell, one_line=True)) for cell in cells))


def _calls(step: dict[str, Any] | None) -> str:
    if step is None:
        return "-"
    calls = step["calls"]
    if not calls:
        return f"(answer) {short(step['text'], 30)}"
    return ", ".join(
        f"{c['tool']}({short(orjson.dumps(c['args']).decode(), 30)}) {c['outcome']}" for c in calls
    )


def print_diff(found: TrajectoryDiff, console: Console) -> None:
    """A step-by-step table of two trajectories, and where they diverge."""
    table = Table("step", "A", "B", "tokens A / B", "")
    for row in found.to_dict()["steps"]:
        a, b = row["a"], row["b"]
        tokens = " / ".join(
            str(s["input_tokens"] + s["output_tokens"]) if s else "-" for s in (a, b)
        )
        _add_row(table, str(row["index"]), _calls(a), _calls(b), tokens, "" if row["same"] else "≠")
    console.print(table)
    ta, tb = found.a.totals(), found.b.totals()
    for name, t in (("A", ta), ("B", tb)):
        console.print(
            f"{name} {found.a.thread if name == 'A' else found.b.thread}: {t['steps']} steps, "
            f"{t['tool_calls']} tool calls, {t['input_tokens'] + t['output_tokens']} tokens, "
            f"cost {t['cost']:g}, {t['seconds']:.3f} s, outcome {t['outcome']}",
            markup=False,
        )
    if found.divergence is None:
        console.print("the trajectories do not diverge")
    else:
        console.print(text(f"diverges at {found.divergence.message}"), soft_wrap=True)


@cli.command()
@store_options
@click.argument("thread", type=THREAD)
@click.option(
    "--model",
    "model_spec",
    required=True,
    help="The model to replay against, named as for `threadlog serve --model`: scripted, "
    "openai:NAME, anthropic:NAME or python:MODULE:ATTR.",
)
@click.option(
    "--at",
    type=click.IntRange(min=1),
    default=None,
    help="Fork the thread after this ordinal and replay the turns after it "
    "(default: a new thread that replays every turn).",
)
@click.option(
    "--unmatched",
    type=click.Choice(UNMATCHED),
    default="deny",
    show_default=True,
    help="A call that matches no recorded one (same tool, same arguments): deny it (the "
    "model is told), run it if the tool is read-only, or stop the replay. A matching call "
    "gets the recorded result and never runs.",
)
@click.option(
    "--ephemeral", is_flag=True, help="Keep the replay in memory: nothing is written to the store."
)
@handle_errors
def replay(
    home: str | None,
    as_json: bool,
    thread: str,
    model_spec: str,
    at: int | None,
    unmatched: str,
    ephemeral: bool,
) -> None:
    """Replay a thread's user inputs against another model, and diff the trajectories.

    Recorded tool results are reused for calls that match (same tool and arguments, in
    order); no recorded side effect is ever repeated. The replay's lineage names its source.

    \b
    Example:
      threadlog replay THREAD --model openai:gpt-4o-mini
      threadlog replay THREAD --model python:myevals:candidate --at 12 --unmatched readonly
    """
    from threadlog.runtime.modelspec import model_from_spec
    from threadlog.runtime.replay import replay_thread

    model = model_from_spec(model_spec)
    with open_disk_store(home, create=False) as store:
        thread = resolve_thread(store, thread)
        result = asyncio.run(
            replay_thread(
                store,
                thread,
                model,
                at=at,
                unmatched=cast("Unmatched", unmatched),
                ephemeral=ephemeral,
                model_spec=model_spec,
            )
        )
        found = diff(trajectory(store.read(thread)), trajectory(result.records))
    if as_json:
        body = {
            "source": result.source,
            "thread": result.thread,
            "at": result.at,
            "ephemeral": ephemeral,
            "served": result.served,
            "ran": result.ran,
            "denied": result.denied,
            "stopped": result.stopped,
            "skipped_inputs": result.skipped_inputs,
            "divergence": found.to_dict()["divergence"],
            "totals": found.to_dict()["totals"],
        }
        print_json(body)
        return
    console = Console(highlight=False, emoji=False, width=_width())
    where = "in memory" if ephemeral else "in the store"
    console.print(f"replay {result.thread} of {thread} ({where})", markup=False)
    console.print(
        f"recorded results reused: {len(result.served)}, unmatched calls denied: "
        f"{len(result.denied)}, run (read-only): {len(result.ran)}"
    )
    if result.stopped:
        console.print(text(f"stopped: {result.stopped}", "yellow"), soft_wrap=True)
    for skipped in result.skipped_inputs:
        console.print(
            f"steering never reached (the turn ended sooner): {short(skipped, 70)}", markup=False
        )
    print_diff(found, console)
    if not ephemeral:
        console.print(f"\n  threadlog diff --trajectory {thread} {result.thread}")
