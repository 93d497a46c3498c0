"""Live tracing: the store's durable records, fed to `SpanBuilder` as they arrive.

A `LiveTracer` is a store listener (`Store.add_listener`): each record that becomes durable
goes to its thread's `SpanBuilder`, and every span the record ends goes to the sink — for
OpenTelemetry, `threadlog.observe.sdk.SdkSpanSink`, which hands the spans to an SDK span
processor (batching, the OTLP exporter). Spans come from records only, so they are the ones
``threadlog export --format otlp`` gives for the same thread, ids included.

A thread the tracer first sees in the middle (a session resumes it) is *seeded*: the runtime
calls `seed` when it opens the thread, which reads the log so far and feeds it without emitting
anything (those spans ended, and were emitted, in the process that wrote them). Records at or
below the last ordinal fed are skipped, so a record delivered twice is traced once.

Turn it on with ``THREADLOG_OTEL=1`` (traces and metrics; ``traces`` or ``metrics`` for one)
and the standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_SERVICE_NAME`` (`install_from_env`),
or in code with ``install(LiveTracer(sink))``.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from threadlog import _hooks
from threadlog.observe.spans import SpanBuilder

if TYPE_CHECKING:
    from collections.abc import Callable

    from threadlog.model.envelope import Record
    from threadlog.observe.spans import Span
    from threadlog.store.protocol import Store

__all__ = ["LiveTracer", "install", "install_from_env", "signals", "uninstall"]

log = logging.getLogger("threadlog.observe")


class LiveTracer:
    """Turns durable records into spans as they arrive (see the module docstring).

    Args:
        sink: called with the spans each batch of records ended (from the store's commit
            thread; it should not block: the SDK's batch processor only queues).
    """

    def __init__(self, sink: Callable[[list[Span]], None]) -> None:
        self._sink = sink
        self._lock = threading.Lock()
        self._builders: dict[str, tuple[SpanBuilder, list[int]]] = {}
        self._stores: dict[int, int] = {}

    def attach(self, store: Store) -> None:
        """Listen to ``store`` (counted: a store shared by two runtimes is listened to once)."""
        with self._lock:
            n = self._stores.get(id(store), 0)
            self._stores[id(store)] = n + 1
        if n == 0:
            store.add_listener(self.on_records)

    def detach(self, store: Store) -> None:
        """Stop listening to ``store`` once every runtime that attached it has detached."""
        with self._lock:
            n = self._stores.get(id(store), 0) - 1
            if n > 0:
                self._stores[id(store)] = n
                return
            self._stores.pop(id(store), None)
        if n == 0:
            try:
                store.remove_listener(self.on_records)
            except ValueError:
                pass

    def seed(self, store: Store, thread_id: str) -> None:
        """Learn a thread's log so far, emitting nothing (a session opens it)."""
        with self._lock:
            if thread_id in self._builders:
                return
        records = store.read(thread_id)
        with self._lock:
            if thread_id in self._builders:
                return
            builder = SpanBuilder(thread_id)
            for record in records:
                builder.feed(record)
            self._builders[thread_id] = (builder, [records[-1].ord if records else 0])

    def on_records(self, thread_id: str, records: list[Record]) -> None:
        """The store listener: feed the records, emit the spans they ended."""
        ended: list[Span] = []
        with self._lock:
            entry = self._builders.get(thread_id)
            if entry is None:
                entry = self._builders[thread_id] = (SpanBuilder(thread_id), [0])
            builder, last = entry
            for record in records:
                if record.ord <= last[0]:
                    continue
                last[0] = record.ord
                ended.extend(builder.feed(record))
                if record.type == "session.closed":
                    # the session is done: the next one that opens the thread seeds again
                    self._builders.pop(thread_id, None)
        if ended:
            try:
                self._sink(ended)
            except Exception:
                log.exception("a span sink failed")


def install(tracer: LiveTracer) -> LiveTracer:
    """Make ``tracer`` the one every `Runtime` created from now on attaches."""
    _hooks.TRACER = tracer
    return tracer


def uninstall() -> None:
    """Turn live tracing off for runtimes created from now on."""
    _hooks.TRACER = None


def signals(value: str | None) -> frozenset[str]:
    """What ``THREADLOG_OTEL`` turns on: ``1``/``true``/``all`` → traces and metrics, else a
    comma list of ``traces`` and ``metrics``; empty, ``0`` or ``false`` → nothing."""
    words = {w.strip().lower() for w in (value or "").split(",") if w.strip()}
    if words & {"1", "true", "yes", "on", "all"}:
        return frozenset({"traces", "metrics"})
    return frozenset(words & {"traces", "metrics"})


def install_from_env(which: frozenset[str] = frozenset({"traces"})) -> LiveTracer | None:
    """Tracing (and, with ``metrics`` in ``which``, OTel metrics) sent over OTLP/HTTP as the
    ``OTEL_*`` environment variables say (``OTEL_EXPORTER_OTLP_ENDPOINT``,
    ``OTEL_SERVICE_NAME``, …), installed. Returns the tracer (None without ``traces``).

    Needs ``threadlog[otel]``; raises `UsageError` without it.
    """
    from threadlog.observe import sdk

    if "metrics" in which and _hooks.METRICS is None:
        from threadlog.observe.metrics import Metrics
        from threadlog.observe.metrics import install as install_metrics

        install_metrics(Metrics(meter=sdk.otlp_meter()))
    if "traces" not in which:
        return None
    return install(LiveTracer(sdk.SdkSpanSink(sdk.otlp_processor())))
