"""Where observability plugs in: two module-level slots, empty (and free) by default.

``METRICS`` holds the `MetricsSink` the store's commit path and the runtime report timings and
counts to; ``TRACER`` the `RuntimeTracer` a `Runtime` attaches to its store. Both are ``None``
unless something installs them (`threadlog.observe.metrics.install`,
`threadlog.observe.live.install`), or, for tracing, ``THREADLOG_OTEL=1`` is set when the first
`Runtime` starts (`threadlog.runtime.runtime`). A hot path pays one global read and a ``None`` test::

    sink = _hooks.METRICS
    if sink is not None:
        sink.observe("threadlog_fsync_seconds", elapsed)

Nothing here imports OpenTelemetry, so ``import threadlog`` stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from threadlog.store.protocol import Store

__all__ = ["METRICS", "TRACER", "MetricsSink", "RuntimeTracer"]


class MetricsSink(Protocol):
    """What instruments report to (`threadlog.observe.metrics.Metrics`)."""

    def observe(self, name: str, value: float) -> None:
        """Record one value of a histogram."""
        ...

    def add(self, name: str, amount: float = 1, **labels: str) -> None:
        """Add to a counter (or, with a negative amount, an up-down counter)."""
        ...

    def set(self, name: str, value: float) -> None:
        """Set a gauge."""
        ...

    def attach(self, store: Store) -> None:
        """Start counting what the store's durable records say happened."""
        ...

    def detach(self, store: Store) -> None:
        """Stop counting them (the runtime closes)."""
        ...


class RuntimeTracer(Protocol):
    """What a `Runtime` tells a live tracer (`threadlog.observe.live.LiveTracer`)."""

    def attach(self, store: Store) -> None:
        """Start seeing the store's durable records."""
        ...

    def detach(self, store: Store) -> None:
        """Stop seeing them (the runtime closes)."""
        ...

    def seed(self, store: Store, thread_id: str) -> None:
        """A session opens the thread: learn what its log holds already."""
        ...


METRICS: MetricsSink | None = None
"""The installed metrics sink, or None (metrics off)."""

TRACER: RuntimeTracer | None = None
"""The installed live tracer, or None (tracing off)."""
