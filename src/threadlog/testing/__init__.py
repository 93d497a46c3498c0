"""Test harnesses that ship with threadlog: the crash workload and the kill -9 loop.

* `threadlog.testing.workload` is a child process that appends critical records forever and
  acknowledges each one on stdout (``python -m threadlog.testing.workload --help``).
* `threadlog.testing.crashloop` runs it, kills it with SIGKILL at random instants, reopens the
  store and checks the invariants of RELIABILITY section 3 (used by ``tests/store/test_kill9.py``
  and ``scripts/crash_loop.py``).
"""

from typing import Any

__all__ = ["StoreContract"]


def __getattr__(name: str) -> Any:
    # `StoreContract` imports pytest: loaded on first use, so that the harnesses (run as
    # child processes) do not need pytest.
    if name == "StoreContract":
        from threadlog.testing.contract import StoreContract

        return StoreContract
    raise AttributeError(f"module 'threadlog.testing' has no attribute {name!r}")
