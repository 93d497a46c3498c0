"""No framework is imported by ``import threadlog``, the store, the CLI or the adapters
package: only the adapter module a program imports loads its framework."""

from __future__ import annotations

import json
import subprocess
import sys

FRAMEWORKS = (
    "langgraph",
    "langchain_core",
    "agents",
    "openai",
    "google",
    "eventsourcing",
    "matplotlib",
)


def _loaded_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        check=True,
        text=True,
    ).stdout
    return {m.split(".")[0] for m in json.loads(out.splitlines()[-1])}


def test_importing_threadlog_loads_no_framework() -> None:
    code = "import threadlog, threadlog.adapters, threadlog.cli, threadlog.store.inmemory"
    assert _loaded_after(code) & set(FRAMEWORKS) == set()
