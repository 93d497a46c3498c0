"""Benchmark ``threadlog import``: a directory of Claude Code sessions into an embedded store.

Generates ``--files`` session files of about ``--size`` KiB each (a realistic mix: user
prompts, assistant text, thinking, tool calls, and tool results of 1-6 KiB, with a branch and
a compaction in every file), then measures

* the first import of the whole directory (MB/s of source read, files/s, records/s);
* the re-run, which must be a no-op (nothing appended) taking under 10% of the first;
* a grown file: each of 20 files gets 10 more lines, then the directory is imported again;
* the importer alone: the same first import (in one process) into a stand-in store that accepts every append
  without checking or writing it (what reading, parsing and mapping cost, without the store).

The imports are called as ``threadlog import`` calls them (the cyclic garbage collector
paused, new threads built by one worker process per core, at most 4; ``--workers``). The
store and the sources live in a temporary directory (``--dir`` to choose where). The
figures go to stdout; ``--json`` prints them as one object.

Usage::

    .venv/bin/python benchmarks/bench_import.py                # 1,000 files of 200 KiB
    .venv/bin/python benchmarks/bench_import.py --quick        # 50 files: a smoke test
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import tempfile
import time
import uuid
from typing import Any

import orjson

from threadlog import open_store
from threadlog.importers import import_paths, source_format
from threadlog.importers._core import default_workers
from threadlog.model.envelope import Record

WORDS = (
    "the file function test module error value return import class self data path line "
    "config store thread record append read write open close index parse build run check"
).split()


def _text(rng: random.Random, size: int) -> str:
    out: list[str] = []
    n = 0
    while n < size:
        word = rng.choice(WORDS)
        out.append(word)
        n += len(word) + 1
    return " ".join(out)


def session_file(path: str, target: int, rng: random.Random) -> int:
    """Write one Claude Code session of about ``target`` bytes; its line count."""
    sid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
    base = {
        "userType": "external",
        "cwd": "/home/user/project",
        "sessionId": sid,
        "version": "1.0.98",
    }
    lines: list[bytes] = []
    size = 0
    parent: str | None = None
    n = 0
    branch_at: str | None = None

    def emit(obj: dict[str, object]) -> None:
        nonlocal size
        raw = orjson.dumps(obj)
        lines.append(raw)
        size += len(raw) + 1

    def line(kind: str, message: dict[str, object], **extra: object) -> str:
        nonlocal parent, n
        n += 1
        uid = f"{sid[:8]}-{n:04d}-4000-8000-{rng.getrandbits(48):012x}"
        emit(
            {
                "parentUuid": extra.pop("parent", parent),
                "isSidechain": False,
                **base,
                "type": kind,
                "uuid": uid,
                "timestamp": f"2025-09-01T10:{n // 60 % 60:02d}:{n % 60:02d}.000Z",
                "message": message,
                **extra,
            }
        )
        parent = uid
        return uid

    turn = 0
    while size < target:
        turn += 1
        if turn == 3:
            branch_at = parent
        if turn == 5 and branch_at:  # an edited prompt: a branch from turn 3
            line("user", {"role": "user", "content": _text(rng, 120)}, parent=branch_at)
        else:
            line("user", {"role": "user", "content": _text(rng, rng.randint(40, 400))})
        mid = f"msg_{turn}"
        usage = {"input_tokens": 1200, "output_tokens": 300, "cache_read_input_tokens": 9000}
        for step in range(rng.randint(1, 4)):
            line(
                "assistant",
                {
                    "id": f"{mid}_{step}",
                    "role": "assistant",
                    "model": "claude-sonnet-4-20250514",
                    "content": [
                        {"type": "thinking", "thinking": _text(rng, 200), "signature": "c2ln" * 20}
                    ],
                    "usage": usage,
                },
            )
            call = f"toolu_{turn}_{step}"
            line(
                "assistant",
                {
                    "id": f"{mid}_{step}",
                    "role": "assistant",
                    "model": "claude-sonnet-4-20250514",
                    "content": [
                        {
                            "type": "tool_use",
                            "id": call,
                            "name": "Bash",
                            "input": {"command": _text(rng, 60)},
                        }
                    ],
                    "usage": usage,
                    "stop_reason": "tool_use",
                },
            )
            output = _text(rng, rng.randint(1000, 6000))
            line(
                "user",
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": call, "content": output}],
                },
                toolUseResult={"stdout": output[:200], "stderr": "", "interrupted": False},
            )
        line(
            "assistant",
            {
                "id": f"{mid}_end",
                "role": "assistant",
                "model": "claude-sonnet-4-20250514",
                "content": [{"type": "text", "text": _text(rng, rng.randint(100, 800))}],
                "usage": usage,
                "stop_reason": "end_turn",
            },
        )
        if turn == 8:
            emit(
                {
                    "parentUuid": None,
                    **base,
                    "type": "system",
                    "subtype": "compact_boundary",
                    "uuid": f"{sid[:8]}-cccc-4000-8000-000000000000",
                    "logicalParentUuid": parent,
                    "content": "Conversation compacted",
                    "compactMetadata": {"preTokens": 90000},
                    "timestamp": "2025-09-01T11:00:00.000Z",
                }
            )
            parent = f"{sid[:8]}-cccc-4000-8000-000000000000"
    with open(path, "wb") as f:
        f.write(b"\n".join(lines) + b"\n")
    return len(lines)


def generate(root: str, files: int, size: int, seed: int = 7) -> tuple[int, int]:
    rng = random.Random(seed)
    total_bytes = total_lines = 0
    for i in range(files):
        project = os.path.join(root, f"-home-user-project{i % 20}")
        os.makedirs(project, exist_ok=True)
        path = os.path.join(project, f"{uuid.UUID(int=rng.getrandbits(128), version=4)}.jsonl")
        total_lines += session_file(path, size, rng)
        total_bytes += os.path.getsize(path)
    return total_bytes, total_lines


class NullStore:
    """Takes appends without checking or keeping them: the importer's own cost."""

    def __init__(self) -> None:
        self.threads: dict[str, list[Record]] = {}
        self.appends = 0

    def exists(self, thread: str) -> bool:
        return thread in self.threads

    def thread_ids(self) -> list[str]:
        return list(self.threads)

    def create_thread(self, principal: str = "local", **config: Any) -> str:
        thread = f"{len(self.threads):08x}-0000-7000-8000-000000000000"
        first = Record(1, thread, thread, 1, None, "", "thread.created", {}, "", "")
        self.threads[thread] = [first]
        return thread

    def read(self, thread: str, after: int = 0, *, limit: int | None = None) -> list[Record]:
        return self.threads[thread][:limit]

    def append(self, thread: str, type: str, data: Any = None, **options: Any) -> None:
        self.appends += 1

    def flush(self) -> None:
        pass


def run_null(sources: str) -> float:
    start = time.perf_counter()
    null: Any = NullStore()
    import_paths(null, source_format("claude-code"), [sources], pause_gc=True)
    return time.perf_counter() - start


def run(store_dir: str, sources: str, workers: int | None = None) -> tuple[float, int]:
    start = time.perf_counter()
    with open_store(store_dir) as store:
        # as ``threadlog import`` calls it
        report = import_paths(
            store,
            source_format("claude-code"),
            [sources],
            pause_gc=True,
            workers=default_workers() if workers is None else workers,
        )
    elapsed = time.perf_counter() - start
    bad = [f for f in report.files if f.status == "failed"]
    assert not bad, bad[0].problems
    return elapsed, report.records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--size", type=int, default=200, help="KiB per file")
    parser.add_argument("--quick", action="store_true", help="50 files")
    parser.add_argument("--dir", help="where to put the sources and the store")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--workers",
        type=int,
        help="worker processes building new threads (default: as threadlog import, one per "
        "core up to 4; 0: none)",
    )
    args = parser.parse_args()
    files = 50 if args.quick else args.files
    if args.dir is not None:
        os.makedirs(args.dir, exist_ok=True)
    work = tempfile.mkdtemp(prefix="bench-import-", dir=args.dir)
    try:
        sources, store = os.path.join(work, "sources"), os.path.join(work, "store")
        total, lines = generate(sources, files, args.size * 1024)
        os.sync()  # the sources on disk, as a user's sessions are (not their writeback during the runs)
        alone = run_null(sources)
        first, records = run(store, sources, args.workers)
        again, again_records = run(store, sources, args.workers)
        rng = random.Random(11)
        grown_files = sorted(os.path.join(r, f) for r, _, fs in os.walk(sources) for f in fs)[:20]
        for path in grown_files:  # ten more lines each: a session that went on
            with open(path, "rb") as f:
                last = orjson.loads(f.read().rstrip(b"\n").rsplit(b"\n", 1)[-1])
            parent = last.get("uuid")
            with open(path, "ab") as f:
                for k in range(10):
                    uid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
                    f.write(
                        orjson.dumps(
                            {
                                "parentUuid": parent,
                                "isSidechain": False,
                                "type": "user",
                                "uuid": uid,
                                "sessionId": last.get("sessionId"),
                                "timestamp": f"2025-09-02T00:00:{k:02d}.000Z",
                                "message": {"role": "user", "content": f"more {k}"},
                            }
                        )
                        + b"\n"
                    )
                    parent = uid
        grown, grown_records = run(store, sources, args.workers)
        figures = {
            "files": files,
            "bytes": total,
            "lines": lines,
            "records": records,
            "first_s": round(first, 3),
            "mb_per_s": round(total / first / 1e6, 1),
            "records_per_s": round(records / first),
            "rerun_s": round(again, 3),
            "rerun_records": again_records,
            "rerun_ratio": round(again / first, 4),
            "grown_s": round(grown, 3),
            "grown_records": grown_records,
            "importer_alone_s": round(alone, 3),
            "importer_alone_mb_per_s": round(total / alone / 1e6, 1),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(orjson.dumps(figures).decode())
        return
    print(
        f"first import: {files} files, {total / 1e6:.1f} MB, {lines} lines -> {records} records "
        f"in {first:.2f} s: {figures['mb_per_s']} MB/s, {figures['records_per_s']} records/s"
    )
    print(
        f"re-run: {again:.3f} s ({figures['rerun_ratio']:.1%} of the first), {again_records} records"
    )
    print(f"20 files grown by 10 lines: {grown:.3f} s, {grown_records} records")
    print(
        f"the importer alone (a store that takes appends unchecked): {alone:.2f} s, "
        f"{figures['importer_alone_mb_per_s']} MB/s"
    )


if __name__ == "__main__":
    main()
