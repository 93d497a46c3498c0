"""``threadlog worker`` in its own process, and the scripted models the worker tests drive.

`WorkerProcess` starts ``threadlog worker --store TARGET --json ARGS…``, waits for its first
line (it is running), then collects the JSON lines of what it did (`steps`). The models are
named to the worker with ``--model python:tests.harness.worker:NAME``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import orjson

from threadlog.runtime.models import ModelRequest, Reply, ScriptedModel, ToolCallSpec

ROOT = Path(__file__).resolve().parents[2]

QUICK_READS = 2
"""How many files the quick agent reads before it answers."""


def _reads(request: ModelRequest) -> int:
    return sum(1 for m in request.messages if m["role"] == "tool")


def _quick(request: ModelRequest, step: int) -> Reply:
    if _reads(request) < QUICK_READS:
        return Reply("Reading.", [ToolCallSpec("read_file", {"path": "README.md"})])
    return Reply("Done.")


def quick() -> ScriptedModel:
    """Reads README.md `QUICK_READS` times (read-only), then answers; no delay. It decides
    from the request alone, so a worker that takes a turn over continues the script."""
    return ScriptedModel(_quick)


class WorkerProcess:
    """A ``threadlog worker`` process (see the module docstring); `stop` signals it and
    returns its exit code."""

    def __init__(self, target: str, *args: str, start_timeout: float = 30.0) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "threadlog", "worker", "--store", target, "--json", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.steps: list[dict[str, Any]] = []
        self.errors: list[str] = []
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self._err = threading.Thread(target=self._drain_errors, daemon=True)
        self._err.start()
        deadline = time.monotonic() + start_timeout
        first = ""
        while time.monotonic() < deadline:
            first = self.proc.stdout.readline()
            if first:
                break
        if '"running"' not in first:
            self.proc.kill()
            self.proc.wait()
            self._close()
            raise AssertionError(f"the worker did not start: {first}{''.join(self.errors)}")
        self._out = threading.Thread(target=self._drain_steps, daemon=True)
        self._out.start()

    def _drain_steps(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.steps.append(orjson.loads(line))

    def _drain_errors(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.errors.append(line)

    def taken(self, kind: str) -> list[str]:
        """Every thread the worker reported under ``kind`` (resumed, started, closed)."""
        return [t for step in list(self.steps) for t in step.get(kind, [])]

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        """Send ``sig`` (unless it has exited) and wait; the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("the worker did not stop:\n" + "".join(self.errors)) from None
        finally:
            self._out.join(timeout=5)
            self._close()

    def _close(self) -> None:
        self._err.join(timeout=5)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()

    def __enter__(self) -> WorkerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.stop(signal.SIGKILL)
