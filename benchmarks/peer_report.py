"""The figures `peers.py` measures: their shape (`Row`, `Run`, `Load`), the markdown report and
the chart. Kept apart from the measuring so that ``peers.py --replot FILE`` redraws both from a
saved ``--save`` file without measuring again."""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass, field
from typing import Any

WORKLOADS = ("single", "single-async", "threads", "tasks")
REFERENCE = {
    "single": "single",
    "single-async": "single",
    "threads": "threads",
    "tasks": "threads",
}
TITLES = {
    "single": "1 writer",
    "single-async": "1 writer, asyncio API",
    "threads": "{w} sessions, {w} OS threads",
    "tasks": "{w} sessions, {w} asyncio tasks",
    "load": "cold load of {n:,} events (fresh process)",
}


@dataclass
class Sizes:
    single: int = 1000
    writers: int = 64
    per_writer: int = 25
    load: int = 50_000
    rounds: int = 3


QUICK = Sizes(single=20, writers=4, per_writer=5, load=200, rounds=1)


@dataclass
class Run:
    """One workload through one store, one round."""

    rate: float
    p50_ms: float
    p99_ms: float
    api: str
    events: int
    retries: int = 0


@dataclass
class Load:
    import_s: float
    load_s: float
    rss_mb: float
    events: int


@dataclass
class Row:
    name: str
    setting: str
    durable: bool
    missing: str | None = None
    runs: dict[str, list[Run]] = field(default_factory=dict)
    loads: list[Load] = field(default_factory=list)
    bytes_per_event: float | None = None
    errors: list[str] = field(default_factory=list)


def rows_from(figures: dict[str, Any]) -> tuple[list[Row], Sizes]:
    """The rows and sizes of a ``--save`` file."""
    rows = []
    for r in figures["rows"]:
        runs = {k: [Run(**x) for x in v] for k, v in r.pop("runs").items()}
        loads = [Load(**x) for x in r.pop("loads")]
        rows.append(Row(**r, runs=runs, loads=loads))
    return rows, Sizes(**figures["sizes"])


def _spread(values: list[float], fmt: str) -> str:
    if not values:
        return "—"
    med = statistics.median(values)
    if len(values) == 1:
        return format(med, fmt)
    return f"{format(med, fmt)} [{format(min(values), fmt)}–{format(max(values), fmt)}]"


def ratios(row: Row, ref: Row, workload: str) -> list[float]:
    """``row``'s rate over the reference's, round by round (the same round's raw limit)."""
    mine = row.runs.get(workload, [])
    theirs = ref.runs.get(REFERENCE[workload], [])
    return [m.rate / t.rate for m, t in zip(mine, theirs, strict=False)]


def load_ratios(row: Row, ref: Row) -> list[float]:
    return [m.load_s / t.load_s for m, t in zip(row.loads, ref.loads, strict=False)]


def report(rows: list[Row], sizes: Sizes) -> str:
    ref = rows[0]
    w, n = sizes.writers, sizes.load
    out = [
        f"{sizes.rounds} round(s); median [min–max]; × raw = against `{ref.name}` of the same "
        f"round (for the {w}-session rows: from {w} OS threads, a file each)",
        "",
    ]
    for workload in WORKLOADS:
        if not any(row.runs.get(workload) for row in rows):
            continue  # not run (`peers.py --load-only`), or failed everywhere (the errors say)
        out += [
            f"**{TITLES[workload].format(w=w)}**",
            "",
            "| store | API | durable appends/s | × raw | p50 ms | p99 ms |",
            "|---|---|---|---|---|---|",
        ]
        for row in rows:
            runs = row.runs.get(workload, [])
            if not runs:
                if row.missing is None and not any(
                    e.startswith(workload + ",") for e in row.errors
                ):
                    continue  # the workload does not apply
                why = "not installed" if row.missing else "failed (below)"
                out.append(f"| {row.name} | — | {why} | | | |")
                continue
            api = runs[0].api
            if retried := sum(x.retries for x in runs):
                api += f" ({retried:,} appends retried: database is locked)"
            out.append(
                f"| {row.name} | {api} | {_spread([x.rate for x in runs], ',.0f')} | "
                f"{_spread(ratios(row, ref, workload), '.2f')} | "
                f"{_spread([x.p50_ms for x in runs], '.2f')} | "
                f"{_spread([x.p99_ms for x in runs], '.2f')} |"
            )
        out.append("")
    out += [
        f"**{TITLES['load'].format(n=n)}**",
        "",
        "| store | load ms | × raw | import ms | peak RSS MB | bytes on disk / event |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        if not row.durable:
            continue
        if not row.loads:
            why = "not installed" if row.missing else "failed (below)"
            out.append(f"| {row.name} | {why} | | | | |")
            continue
        out.append(
            f"| {row.name} | {_spread([x.load_s * 1e3 for x in row.loads], ',.0f')} | "
            f"{_spread(load_ratios(row, ref), '.2f')} | "
            f"{_spread([x.import_s * 1e3 for x in row.loads], ',.0f')} | "
            f"{_spread([x.rss_mb for x in row.loads], ',.0f')} | "
            f"{row.bytes_per_event:,.0f} |"
        )
    out += ["", "| store | durability setting |", "|---|---|"]
    out += [f"| {row.name} | {row.setting} |" for row in rows]
    problems = [f"- {r.name}: {r.missing}" for r in rows if r.missing]
    problems += [f"- {r.name}: {e}" for r in rows for e in r.errors]
    if problems:
        out += ["", "Missing or failed:", *problems]
    return "\n".join(out)


def chart(rows: list[Row], sizes: Sizes, path: str) -> None:
    """Two panels: each store's rates as × the raw limit (log scale), and its cold load."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ref = rows[0]
    shown = [r for r in rows if r.runs]
    labels = [r.name + ("" if r.durable else " (not durable)") for r in shown]
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 6.5), width_ratios=[3, 2])
    height = 0.8 / len(WORKLOADS)
    for j, workload in enumerate(WORKLOADS):
        values = [statistics.median(ratios(r, ref, workload) or [0.0]) for r in shown]
        ys = [i + j * height for i in range(len(shown))]
        left.barh(ys, values, height=height, label=TITLES[workload].format(w=sizes.writers))
    left.set_yticks([i + 0.4 - height / 2 for i in range(len(shown))], labels)
    left.invert_yaxis()
    left.set_xscale("log")
    left.axvline(1.0, color="black", linewidth=0.8)
    left.set_xlabel("appends/s ÷ raw JSONL + fsync per record, same round (log scale)")
    left.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2)
    loaded = [r for r in rows if r.loads]
    names = [r.name for r in loaded]
    load_s = [statistics.median(x.load_s for x in r.loads) for r in loaded]
    import_s = [statistics.median(x.import_s for x in r.loads) for r in loaded]
    right.barh(names, load_s, label="open + load + check")
    right.barh(names, import_s, left=load_s, label="import (separately)", alpha=0.5)
    right.invert_yaxis()
    right.set_xlabel(f"cold load of {sizes.load:,} events, fresh process (s)")
    right.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2)
    fig.suptitle(
        f"threadlog and its peers: 500-byte JSON events, median of {sizes.rounds} round(s)"
    )
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path, dpi=100)
