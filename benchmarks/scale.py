"""Costs that should not grow with the thread: resume after kill -9, first append, last records.

For each size (10k, 100k, 1M events of 500 bytes, like ``bench_resume.py``) the thread is
built the way a killed session leaves it: fast buffered appends of all but the last few
thousand events, then a child process runs a runtime session on it that appends the rest
(its background snapshots on, `threadlog.runtime.snapshots`), starts a turn whose model call
never returns, and is killed with SIGKILL in the middle of that call. (Opening that session
reduces the whole log once: it is the build, not a measurement.) Then, each in a fresh child
process, with its wall time and peak RSS:

* ``threadlog resume THREAD``: the whole command, process start included (it repairs the
  interrupted model call and turn, and leaves a turn that continues the task);
* ``Runtime.resume``: the same recovery from the SDK (the child's own timing, and its RSS);
* the first append after opening the store (`EmbeddedStore.append`, opening the thread for
  writing included);
* reading the last 5 records (``store.read(thread, after=last - 5)``);
* following the thread from 5 records before its end until the 5th arrives
  (``store.follow(thread, last - 5)``);
* the first append with an explicit id after opening the thread for writing: an id the
  thread lacks (an idempotency key), and the id of the record in its middle (a replay, which
  returns the stored record): both look among the records before the log's anchor, guided by
  the sparse index's id blocks (`threadlog.store.iddigest`);
* ``threadlog verify THREAD``: the whole command (reads and checks every record: it is
  expected to grow with the thread).

Resume and the first append are measured on a copy of the killed home each (flushed to disk
first, so that the open's fsync finds no dirty page the copy made). Children run without
``PYTHONDONTWRITEBYTECODE`` (an installed package has its bytecode compiled), after one
warm-up run. Numbers on a shared machine are noisy: compare rows of one run.

Usage::

    .venv/bin/python benchmarks/scale.py                 # 10k, 100k, 1M
    .venv/bin/python benchmarks/scale.py --sizes 10000,100000
    .venv/bin/python benchmarks/scale.py --quick --json  # 10k only (the test suite's smoke run)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from typing import Any

PAYLOAD = {"text": "x" * 480, "n": 1}
TAIL = 3_000
"""Events the killed session appends itself (the rest are built with buffered appends)."""

BUILD = textwrap.dedent(
    """
    import sys
    from threadlog import open_store
    payload = {"text": "x" * 480, "n": 1}
    with open_store(sys.argv[1]) as store:
        thread = store.create_thread("bench")
        for _ in range(int(sys.argv[2])):
            store.append(thread, "custom.bench", payload, durable=False)
    print(thread)
    """
)

KILLED = textwrap.dedent(
    """
    import asyncio, json, os, signal, sys
    from threadlog.runtime import Runtime

    class Hangs:
        provider, name = "bench", "hangs"
        async def stream(self, request):
            started.set_result(None)
            await asyncio.Event().wait()  # the model never answers: killed mid-call
            yield None

    async def main():
        global started
        started = asyncio.get_running_loop().create_future()
        runtime = Runtime(sys.argv[1], model=Hangs())
        session = await runtime.open(sys.argv[2])
        payload = {"text": "x" * 480, "n": 1}
        for _ in range(int(sys.argv[3])):
            await session.append("custom.bench", payload)
        await session.snapshots.wait()
        await session.submit("carry on")
        await asyncio.wait_for(started, 60)
        print(json.dumps({"snapshot_ord": session.snapshots.saved_ord,
                          "last_ord": session.state.last_ord}), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)

    asyncio.run(main())
    """
)

SDK_RESUME = textwrap.dedent(
    """
    import asyncio, json, sys, time
    from threadlog.runtime import Runtime

    async def main():
        start = time.perf_counter()
        async with Runtime(sys.argv[1]) as runtime:
            session = await runtime.resume(sys.argv[2], continue_work=False)
            took = time.perf_counter() - start
            report = session.recovery
        print(json.dumps({"seconds": took, "base_ord": session.base_ord,
                          "replayed": session.replayed,
                          "repairs": [r["kind"] for r in report.repairs]}))

    asyncio.run(main())
    """
)

FIRST_APPEND = textwrap.dedent(
    """
    import json, sys, time
    from threadlog import open_store
    start = time.perf_counter()
    with open_store(sys.argv[1]) as store:
        opened = time.perf_counter()
        record = store.append(sys.argv[2], "custom.bench", {"text": "x" * 480, "n": 1})
        took = time.perf_counter() - opened
    print(json.dumps({"seconds": took, "with_open": time.perf_counter() - start,
                      "ord": record.ord}))
    """
)

EXPLICIT_ID = textwrap.dedent(
    """
    import json, sys, time, uuid
    from threadlog import open_store
    with open_store(sys.argv[1]) as store:
        middle = int(sys.argv[3]) // 2
        old = store.read(sys.argv[2], after=middle - 1, limit=1)[0]  # (not timed)
        store.release(sys.argv[2])
        start = time.perf_counter()
        if sys.argv[4] == "new":  # an id the thread has not seen (an idempotency key)
            record = store.append(sys.argv[2], "custom.bench", {"n": 2}, id=str(uuid.uuid4()))
        else:  # a replay of the record in the middle of the thread: the stored one returns
            record = store.append(sys.argv[2], old.type, old.data, id=old.id)
            assert record.ord == middle, (record.ord, middle)
        took = time.perf_counter() - start
    print(json.dumps({"seconds": took, "ord": record.ord}))
    """
)

READ_LAST = textwrap.dedent(
    """
    import json, sys, time
    from threadlog import open_store
    with open_store(sys.argv[1]) as store:
        last = int(sys.argv[3])
        start = time.perf_counter()
        records = store.read(sys.argv[2], after=last - 5)
        took = time.perf_counter() - start
    print(json.dumps({"seconds": took, "ords": [r.ord for r in records]}))
    """
)


FOLLOW = textwrap.dedent(
    """
    import json, sys, time
    from threadlog import open_store
    with open_store(sys.argv[1]) as store:
        last = int(sys.argv[3])
        start = time.perf_counter()
        ords = []
        for record in store.follow(sys.argv[2], last - 5, interval=0.01):
            ords.append(record.ord)
            if len(ords) == 5:
                break
        took = time.perf_counter() - start
    print(json.dumps({"seconds": took, "ords": ords}))
    """
)


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    return env


def run_child(args: list[str], *, ok: tuple[int, ...] = (0,)) -> dict[str, Any]:
    """Run a child process; its wall time, peak RSS (MB, from its own rusage) and stdout."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(args, stdout=out, stderr=err, env=child_env())
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if proc.returncode not in ok:
        raise RuntimeError(f"{args[:4]} exited {proc.returncode}: {stderr[-2000:]}")
    return {"wall": wall, "rss_mb": usage.ru_maxrss / 1024, "stdout": stdout}


def py(code: str, *args: str, ok: tuple[int, ...] = (0,)) -> dict[str, Any]:
    return run_child([sys.executable, "-c", code, *args], ok=ok)


def cli(*args: str) -> dict[str, Any]:
    return run_child([sys.executable, "-m", "threadlog", *args])


def fresh_copy(home: str, into: str) -> str:
    shutil.rmtree(into, ignore_errors=True)
    shutil.copytree(home, into)
    os.sync()  # the copy's dirty pages are not the resume's to write
    return into


def measure(events: int, work: str) -> dict[str, Any]:
    home = os.path.join(work, f"home-{events}")
    built = py(BUILD, home, str(max(0, events - TAIL - 1)))
    thread = built["stdout"].strip()
    killed = py(KILLED, home, thread, str(min(TAIL, events)), ok=(-9,))
    left = json.loads(killed["stdout"])
    row: dict[str, Any] = {"events": left["last_ord"], "snapshot_ord": left["snapshot_ord"]}

    resume = cli("resume", "--home", fresh_copy(home, home + "-r"), thread, "--json")
    report = json.loads(resume["stdout"])
    row["threadlog_resume"] = {"seconds": resume["wall"], "rss_mb": resume["rss_mb"]}
    row["resume_repairs"] = [r["kind"] for r in report["repairs"]]

    sdk = py(SDK_RESUME, fresh_copy(home, home + "-r"), thread)
    data = json.loads(sdk["stdout"])
    row["runtime_resume"] = {
        "seconds": data["seconds"],
        "process_seconds": sdk["wall"],
        "rss_mb": sdk["rss_mb"],
        "replayed": data["replayed"],
        "base_ord": data["base_ord"],
    }

    # the rest on the home `threadlog resume` repaired (the thread as a user finds it next)
    shutil.rmtree(home)
    os.rename(home + "-r", home)
    first = py(FIRST_APPEND, home, thread)
    data = json.loads(first["stdout"])
    row["first_append"] = {"seconds": data["seconds"], "rss_mb": first["rss_mb"]}
    read = py(READ_LAST, home, thread, str(data["ord"]))
    got = json.loads(read["stdout"])
    assert got["ords"] == list(range(data["ord"] - 4, data["ord"] + 1)), got
    row["read_last_5"] = {"seconds": got["seconds"], "rss_mb": read["rss_mb"]}
    follow = py(FOLLOW, home, thread, str(data["ord"]))
    got = json.loads(follow["stdout"])
    assert got["ords"] == list(range(data["ord"] - 4, data["ord"] + 1)), got
    row["follow_last_5"] = {"seconds": got["seconds"], "rss_mb": follow["rss_mb"]}
    for kind in ("new", "replay"):
        named = py(EXPLICIT_ID, home, thread, str(data["ord"]), kind)
        got = json.loads(named["stdout"])
        row[f"explicit_{kind}"] = {"seconds": got["seconds"], "rss_mb": named["rss_mb"]}
    verify = cli("verify", "--home", home, thread)
    row["threadlog_verify"] = {"seconds": verify["wall"], "rss_mb": verify["rss_mb"]}
    shutil.rmtree(home, ignore_errors=True)
    return row


ROWS = (
    ("threadlog_resume", "`threadlog resume` after kill -9 (whole command)"),
    ("runtime_resume", "`Runtime.resume` after kill -9 (in the process)"),
    ("first_append", "first append after opening the store"),
    ("read_last_5", "read the last 5 records"),
    ("follow_last_5", "follow from 5 records before the end (until the 5th)"),
    ("explicit_new", "first append with an explicit id the thread lacks (opening included)"),
    ("explicit_replay", "first append replaying the id of the middle record (opening included)"),
    ("threadlog_verify", "`threadlog verify` (whole command; reads everything)"),
)


def table(results: list[dict[str, Any]]) -> str:
    head = "| operation | " + " | ".join(f"{r['events']:,} events" for r in results) + " |"
    lines = [head, "|---|" + "---|" * len(results)]
    for key, name in ROWS:
        cells = []
        for r in results:
            m = r[key]
            per = m["seconds"] / r["events"] * 1e6
            cells.append(f"{m['seconds']:.3f} s, {m['rss_mb']:.0f} MB ({per:.2f} µs/event)")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--quick", action="store_true", help="10k events only (a smoke run)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    sizes = [10_000] if args.quick else [int(s) for s in args.sizes.split(",")]
    work = tempfile.mkdtemp(prefix="threadlog-bench-scale-")
    try:
        cli("--help")  # warm-up: bytecode compiled, files in the page cache
        results = [measure(n, work) for n in sizes]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(table(results))
    for r in results:
        rr = r["runtime_resume"]
        print(
            f"\n{r['events']:,} events: resumed from the snapshot at ord {rr['base_ord']:,}, "
            f"{rr['replayed']:,} records reduced; repairs: {', '.join(r['resume_repairs'])}"
        )


if __name__ == "__main__":
    main()
