"""Crash harnesses of the test suite and of ``scripts/``: the workloads and their kill -9 loops.

* `tests.harness.workload` is a child process that appends critical records forever and
  acknowledges each one on stdout (``python -m tests.harness.workload --help``, from the project
  root).
* `tests.harness.crashloop` runs it, kills it with SIGKILL at random instants, reopens the
  store and checks the invariants of RELIABILITY section 3 (``tests/store/test_kill9.py`` and
  ``scripts/crash_loop.py``).
* `tests.harness.agent_workload` and `tests.harness.agent_crashloop` do the same for the agent
  runtime (``tests/faults/test_agent_kill9.py``, ``tests/faults/test_crash_at_every_type.py``
  and ``scripts/agent_crash_loop.py``).
* `tests.harness.worker_workload` and `tests.harness.worker_crashloop` do it for ``threadlog
  worker`` processes sharing a store, embedded or PostgreSQL (``tests/faults/test_worker_kill9.py``
  and ``scripts/worker_crash_loop.py``).

They live here rather than in ``threadlog.testing`` because users of the library do not need
them; ``threadlog.testing`` keeps what they do need (the crash-simulating file layer).

The loops start their workloads as ``python -P -m tests.harness.<module>``: `child_command` and
`child_env` make that work whatever the caller's working directory (a fresh clone, CI, a test
run from a subdirectory). The child's import path is the project root (found from this file,
not from the working directory) and the directory the parent imported ``threadlog`` from, so
the child runs the same code as its parent; ``-P`` keeps the working directory off it, so that
a ``tests`` package there cannot shadow ours.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["PROJECT_ROOT", "Findings", "child_command", "child_env"]

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
"""The directory that holds ``tests/``: on the children's import path so that
``tests.harness`` imports in them."""


def child_command(module: str, python: str = sys.executable) -> list[str]:
    """The command line that runs harness ``module`` (``"tests.harness.workload"``) as a
    child; pass the environment from `child_env` with it."""
    return [python, "-P", "-m", module]


def child_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """A copy of ``env`` (default: this process's environment) whose ``PYTHONPATH`` starts
    with the directory ``threadlog`` was imported from and the project root, keeping what it
    already held after them."""
    import threadlog

    env = dict(os.environ if env is None else env)
    src = os.path.dirname(os.path.dirname(os.path.abspath(threadlog.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, PROJECT_ROOT, env.get("PYTHONPATH")) if p)
    return env


@dataclass
class Findings:
    """What a crash loop's check found wrong, by kind (each check's result extends it)."""

    losses: list[str] = field(default_factory=list)
    """Acknowledged records the store no longer has."""
    verify_failures: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    """Non-idempotent effects made twice."""
    other: list[str] = field(default_factory=list)
    """Any other broken invariant."""
    acked_checked: int = 0
    """Acknowledged records found in the log as acknowledged."""
    unknowns: int = 0
    """Calls marked ``tool_call.unknown``."""
    resolved: Counter[str] = field(default_factory=Counter)
    """How the unknown calls were resolved: ``reconcile:done``, ``workload:retry`` …"""

    def count_unknowns(self, records: Iterable[Any]) -> set[str]:
        """Count the calls ``records`` mark unknown and how each was resolved (`resolved`,
        by ``who:decision``, any reconcile hook as ``reconcile``); the ids never resolved."""
        pending: set[str] = set()
        for record in records:
            if record.type == "tool_call.unknown":
                self.unknowns += 1
                pending.add(record.data["call_id"])
            elif record.type == "tool_call.resolved" and record.data["call_id"] in pending:
                pending.discard(record.data["call_id"])
                by = str(record.data["by"])
                who = "reconcile" if by.startswith("reconcile:") else by
                self.resolved[f"{who}:{record.data['decision']}"] += 1
        return pending

    def check_acks(
        self, where: str, acks: Iterable[tuple[int, str]], records: Sequence[Any]
    ) -> None:
        """Each acknowledged ``(ord, hash)`` must be in ``records`` (a thread's log, from ord
        1) with that hash: a loss otherwise. ``where`` prefixes each finding."""
        for ord_, digest in acks:
            if ord_ > len(records):
                self.losses.append(
                    f"{where}ord {ord_}: acknowledged, but the log ends at {len(records)}"
                )
            elif records[ord_ - 1].hash != digest or records[ord_ - 1].ord != ord_:
                self.losses.append(
                    f"{where}ord {ord_}: acknowledged as {digest[:12]}…, stored as "
                    f"{records[ord_ - 1].hash[:12]}…"
                )
            else:
                self.acked_checked += 1

    @property
    def violations(self) -> list[str]:
        return (
            [f"LOSS: {m}" for m in self.losses]
            + [f"VERIFY: {m}" for m in self.verify_failures]
            + [f"DUPLICATE EFFECT: {m}" for m in self.duplicates]
            + [f"INVARIANT: {m}" for m in self.other]
        )
