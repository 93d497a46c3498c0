"""Test support that ships with threadlog, for stores built on its file layer.

* `threadlog.testing.crashsim` is a simulated disk (`CrashSimFS`, a `FileOps`) that builds the
  images a power cut could leave behind at every sync point (RELIABILITY D3/D4; used by
  ``tests/faults/test_crashsim.py``).

The kill -9 workloads and crash loops of threadlog's own test suite live in ``tests/harness``,
outside the package.
"""
