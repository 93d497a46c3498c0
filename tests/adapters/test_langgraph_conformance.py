"""LangGraph's own checkpointer conformance suite (``langgraph-checkpoint-conformance``) run
against `ThreadlogSaver`, on the in-memory and the embedded store."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tests.adapters.conftest import require

require("langgraph.checkpoint.conformance")

from langgraph.checkpoint.conformance import checkpointer_test, validate  # noqa: E402

from threadlog import open_store  # noqa: E402
from threadlog.adapters.langgraph import ThreadlogSaver  # noqa: E402


def _run(factory: Any) -> Any:
    report = asyncio.run(validate(factory))
    report.print_report()
    counts = [(r.tests_passed, r.tests_failed) for r in report.results.values() if r.detected]
    print("conformance tests passed/failed:", sum(p for p, _ in counts), sum(f for _, f in counts))
    return report


def test_conformance_on_the_memory_store() -> None:
    @checkpointer_test(name="ThreadlogSaver[memory]")
    async def saver() -> Any:
        with open_store("memory://") as store:
            yield ThreadlogSaver(store)

    report = _run(saver)
    assert report.passed_all_base() and report.passed_all()


def test_conformance_on_the_embedded_store(tmp_path: Path) -> None:
    @checkpointer_test(name="ThreadlogSaver[embedded]")
    async def saver() -> Any:
        with open_store(str(tmp_path / "home")) as store:
            yield ThreadlogSaver(store)

    report = _run(saver)
    assert report.passed_all_base() and report.passed_all()
