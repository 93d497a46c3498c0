"""Tool processes that must not outlive their agent.

A command that ``run_command`` started keeps running when the agent is killed (``kill -9``,
OOM, a power cut of the agent's container): a human who then looks, sees nothing finished and
decides "retry" gets its effect twice. Two mechanisms end such processes:

* **Parent-death signal.** The command's direct child asks the kernel (Linux
  ``prctl(PR_SET_PDEATHSIG, SIGKILL)``, set between ``fork`` and ``exec``) to be killed when
  the agent dies. It covers the child only: its own children (``cmd &``, a pipeline, a make
  job) are not signalled.
* **A reaper on resume.** Before the child exists, `begin` writes (fsynced) a small record
  under the store's home: the thread, call and attempt, and a random **token** that the child
  gets in its environment (``THREADLOG_TOOL_RUN``) and passes on to everything it starts;
  `started` adds the process group id and the leader's start time (``/proc/<pid>/stat``).
  Resuming the thread (the lease guarantees that the agent which wrote the record is gone)
  `reap`s every record of the thread: every live process carrying the token, or the leader
  itself (same pid *and* start time), is killed, and so is the process group it belongs to.
  The runtime records what was killed in ``thread.resumed`` and in the call's
  ``tool_call.unknown`` reason, so the human deciding "retry or not" knows the effect is over.

No stranger is ever killed because a pid was reused: each process is signalled through a pidfd
opened *before* it is checked (a pidfd names one process, never a later one with the same pid),
and a group is signalled only while a verified member, stopped with ``SIGSTOP`` so it can
neither leave the group nor exit, keeps the group — and so its id — alive. After a reboot
(another ``boot_id``) a record is stale and nothing is signalled.

What escapes: a descendant that both cleared its environment and moved to a process group of
its own (``setsid``) after its group's leader died — a daemon that tries hard to escape. On
systems without ``/proc`` (not Linux) the reaper finds nothing and says so.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import signal
import sys
import time
from dataclasses import field, replace
from typing import TYPE_CHECKING, Any

from threadlog._dataclass import dataclass
from threadlog.store._fileops import DEFAULT_FILEOPS

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "ENV_VAR",
    "RUNS_DIR",
    "Reaped",
    "Run",
    "begin",
    "die_with_parent",
    "finish",
    "reap",
    "runs_of",
    "started",
]

RUNS_DIR = "tool-runs"
"""The directory of run records, under the store's home."""
ENV_VAR = "THREADLOG_TOOL_RUN"
"""The environment variable that carries a run's token to the command and its descendants."""

_PR_SET_PDEATHSIG = 1
_ROUNDS = 200
"""Sweeps of ``/proc`` in one `reap`: enough for a command that forks while it is killed."""


@dataclass(frozen=True, slots=True)
class Run:
    """The record of one ``run_command`` process group (see the module docstring)."""

    path: str
    thread_id: str
    call_id: str
    attempt: int
    token: str
    boot_id: str | None
    pgid: int | None = None
    start: int | None = None
    """The leader's start time, in clock ticks since boot (field 22 of ``/proc/<pid>/stat``)."""

    def to_json(self) -> bytes:
        body = {
            "thread_id": self.thread_id,
            "call_id": self.call_id,
            "attempt": self.attempt,
            "token": self.token,
            "boot_id": self.boot_id,
            "pgid": self.pgid,
            "start": self.start,
        }
        return json.dumps(body, sort_keys=True).encode()


@dataclass(frozen=True, slots=True)
class Reaped:
    """What `reap` did for one run."""

    killed: list[int] = field(default_factory=list)
    """Processes of the run found alive and killed."""
    survivors: list[int] = field(default_factory=list)
    """Processes of the run still alive afterwards (a kill that was refused)."""
    checked: bool = True
    """False when this system cannot be searched (no ``/proc``): nothing is known."""


def _boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip() or None
    except OSError:
        return None


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, process group, start time) of ``pid``, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2 :].split()  # the name (field 2) may hold spaces and ")"
    try:
        return fields[0].decode(), int(fields[2]), int(fields[19])
    except (IndexError, ValueError):
        return None


def _prefix(thread_id: str) -> str:
    return hashlib.sha256(thread_id.encode()).hexdigest()[:16]


def begin(runs_dir: str, thread_id: str, call_id: str, attempt: int) -> Run:
    """Record, durably, a command about to start (raises `OSError`: then do not start it)."""
    DEFAULT_FILEOPS.makedirs(runs_dir)  # (0700; each new entry synced in its parent)
    token = secrets.token_hex(16)
    path = os.path.join(runs_dir, f"{_prefix(thread_id)}-{token}.json")
    run = Run(path, thread_id, call_id, attempt, token, _boot_id())
    DEFAULT_FILEOPS.write_atomic(path, run.to_json())
    return run


def started(run: Run, pid: int) -> Run:
    """Add the started leader's process group and start time to the record."""
    info = _stat(pid)
    updated = replace(run, pgid=pid, start=info[2] if info is not None else None)
    DEFAULT_FILEOPS.write_atomic(run.path, updated.to_json())
    return updated


def finish(run: Run) -> None:
    """Drop the record of a command whose process the agent has waited for. (Not fsynced: a
    record that comes back after a crash finds no process with its token, and says so.)"""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(run.path)


def runs_of(runs_dir: str, thread_id: str) -> list[Run]:
    """The records left for ``thread_id`` (temporary files of an unfinished write are removed:
    the command they were for never started)."""
    try:
        names = os.listdir(runs_dir)
    except FileNotFoundError:
        return []
    prefix = _prefix(thread_id)
    runs = []
    for name in sorted(names):
        path = os.path.join(runs_dir, name)
        if name.startswith(f".{prefix}-") and name.endswith(".tmp"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            continue
        if not (name.startswith(f"{prefix}-") and name.endswith(".json")):
            continue
        try:
            with open(path, "rb") as f:
                body: dict[str, Any] = json.loads(f.read())
            run = Run(
                path,
                str(body["thread_id"]),
                str(body["call_id"]),
                int(body["attempt"]),
                str(body["token"]),
                body.get("boot_id"),
                body.get("pgid"),
                body.get("start"),
            )
        except (OSError, ValueError, KeyError, TypeError):
            continue  # not a record this version wrote: leave it alone
        if run.thread_id == thread_id:
            runs.append(run)
    return runs


def _pids() -> list[int]:
    try:
        return [int(e) for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return []


def _ours(pid: int, run: Run, marker: bytes) -> bool:
    """Whether the live process ``pid`` belongs to ``run``: it carries the run's token, or
    it is the leader itself (same pid and start time)."""
    info = _stat(pid)
    if info is None or info[0] in ("Z", "X", "x"):
        return False
    if run.pgid == pid and run.start is not None and info[2] == run.start:
        return True
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return marker in f.read().split(b"\0")
    except OSError:
        return False


def _stopped(pid: int) -> bool:
    for _ in range(400):
        info = _stat(pid)
        if info is None:
            return False
        if info[0] in ("T", "t"):
            return True
        time.sleep(0.0025)
    return False


def _group(pgid: int) -> list[int]:
    return [p for p in _pids() if (i := _stat(p)) is not None and i[1] == pgid and i[0] != "Z"]


def _kill(pid: int, run: Run, marker: bytes) -> list[int]:
    """Kill ``pid`` if it is the run's, and its group when that is the run's; the processes
    signalled."""
    try:
        pidfd = os.pidfd_open(pid)
    except (ProcessLookupError, AttributeError, OSError):
        return []
    killed = [pid]
    try:
        if not _ours(pid, run, marker):  # checked with the pidfd held: the same process
            return []
        info = _stat(pid)
        if run.pgid is not None and info is not None and info[1] == run.pgid:
            # Freeze the member first: stopped, it can neither exit nor leave the group, so
            # the group (and its id, which no new process can take while it exists) is the
            # run's when killpg reaches it — including members that cleared their environment.
            signal.pidfd_send_signal(pidfd, signal.SIGSTOP)
            info = _stat(pid) if _stopped(pid) else None
            if info is not None and info[1] == run.pgid:
                killed += [p for p in _group(run.pgid) if p != pid]
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(run.pgid, signal.SIGKILL)
                with contextlib.suppress(ProcessLookupError):
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                return killed
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        return killed
    except ProcessLookupError:
        return []  # it ended by itself before the signal
    finally:
        os.close(pidfd)


def reap(run: Run) -> Reaped:
    """Kill whatever is left of ``run`` (see the module docstring). Only for a run whose
    agent is gone: the caller holds the thread's lease."""
    if not os.path.isdir("/proc/self") or not hasattr(os, "pidfd_open"):
        return Reaped(checked=False)
    if run.boot_id is not None and run.boot_id != _boot_id():
        return Reaped()  # the machine restarted since: every process of the run is gone
    marker = f"{ENV_VAR}={run.token}".encode()
    me = os.getpid()
    killed: list[int] = []
    for _ in range(_ROUNDS):
        found = [p for p in _pids() if p != me and _ours(p, run, marker)]
        if not found:
            break
        for pid in found:
            killed += [p for p in _kill(pid, run, marker) if p not in killed]
        time.sleep(0.005)  # let the killed go before looking again
    survivors = [p for p in _pids() if p != me and _ours(p, run, marker)]
    return Reaped(killed=killed, survivors=survivors)


_prctl: Callable[..., int] | None = None
_prctl_loaded = False


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child die with this process (Linux), or None.

    The signal comes when the *thread* that forked the child ends; asyncio forks from the
    event loop's thread, which lives as long as the agent's loop. The child also checks that
    its parent did not die before the request took effect (it would be re-parented by then).
    The C function is looked up here, in the parent: the child only calls it.
    """
    global _prctl, _prctl_loaded
    if not sys.platform.startswith("linux"):
        return None
    if not _prctl_loaded:
        _prctl_loaded = True
        import ctypes  # (here, once: the first child process; ctypes is slow to import)

        try:
            fn = ctypes.CDLL(None, use_errno=True).prctl
            fn.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
            fn.restype = ctypes.c_int
            _prctl = fn
        except (OSError, AttributeError):
            _prctl = None
    prctl = _prctl
    if prctl is None:
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec
