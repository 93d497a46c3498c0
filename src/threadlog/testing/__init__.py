"""Test support that ships with threadlog, for stores built on its file layer.

* `threadlog.testing.crashsim` is a simulated disk (`CrashSimFS`, a `FileOps`) that builds the
  images a power cut could leave behind at every sync point (RELIABILITY D3/D4; used by
  ``tests/faults/test_crashsim.py``).

The kill -9 workloads and crash loops of threadlog's own test suite live in ``tests/harness``,
outside the package.
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
