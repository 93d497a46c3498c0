"""The OpenTelemetry SDK side: threadlog's spans handed to an SDK span processor.

Spans are built from records (`threadlog.observe.spans`) with ids and times of their own, so
they are not started through a tracer (which would draw ids and read the clock): each becomes
an SDK ``ReadableSpan`` and goes straight to a ``SpanProcessor``'s ``on_end`` — a
``BatchSpanProcessor`` with the OTLP exporter (`otlp_processor`), or in tests a
``SimpleSpanProcessor`` over an ``InMemorySpanExporter``.

Imported only when tracing is turned on; needs ``threadlog[otel]``.
"""

from __future__ import annotations

import atexit
from typing import TYPE_CHECKING, Any

from threadlog._version import __version__
from threadlog.errors import UsageError

try:
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise UsageError("tracing needs the otel extra: pip install 'threadlog[otel]'") from exc

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import SpanProcessor

    from threadlog.observe.spans import Span

__all__ = ["SdkSpanSink", "otlp_meter", "otlp_processor", "to_readable"]

_KINDS = {"internal": trace.SpanKind.INTERNAL, "client": trace.SpanKind.CLIENT}
_STATUS = {
    "unset": trace.StatusCode.UNSET,
    "ok": trace.StatusCode.OK,
    "error": trace.StatusCode.ERROR,
}
_SCOPE = InstrumentationScope("threadlog", __version__)


def _context(trace_id: str, span_id: str) -> trace.SpanContext:
    return trace.SpanContext(
        int(trace_id, 16),
        int(span_id, 16),
        is_remote=False,
        trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
    )


def to_readable(span: Span, resource: Resource | None = None) -> ReadableSpan:
    """``span`` as an SDK ``ReadableSpan``."""
    attributes: dict[str, Any] = dict(span.attributes)
    return ReadableSpan(
        name=span.name,
        context=_context(span.trace_id, span.span_id),
        parent=_context(span.trace_id, span.parent_span_id) if span.parent_span_id else None,
        resource=resource or Resource.create(),
        attributes=attributes,
        events=[Event(e.name, dict(e.attributes), timestamp=e.time_ns) for e in span.events],
        kind=_KINDS[span.kind],
        status=trace.Status(
            _STATUS[span.status], span.status_message if span.status == "error" else None
        ),
        start_time=span.start_ns,
        end_time=span.end_ns,
        instrumentation_scope=_SCOPE,
    )


class SdkSpanSink:
    """A span sink for `LiveTracer`: each span to ``processor.on_end``.

    Args:
        processor: an SDK span processor (its exporter does the sending).
        resource: the resource the spans belong to (default: ``Resource.create()``, which
            reads ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES``).
    """

    def __init__(self, processor: SpanProcessor, resource: Resource | None = None) -> None:
        self.processor = processor
        self.resource = resource or Resource.create()

    def __call__(self, spans: list[Span]) -> None:
        for span in spans:
            self.processor.on_end(to_readable(span, self.resource))


def otlp_processor() -> SpanProcessor:
    """A batch processor over the OTLP/HTTP exporter, configured by the ``OTEL_*``
    variables, flushed when the process exits."""
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise UsageError(
            "sending spans needs the OTLP exporter: pip install 'threadlog[otel]'"
        ) from exc
    processor = BatchSpanProcessor(OTLPSpanExporter())
    atexit.register(processor.shutdown)
    return processor


def otlp_meter() -> Any:
    """A meter whose instruments are exported over OTLP/HTTP every
    ``OTEL_METRIC_EXPORT_INTERVAL`` ms (default 60 s), configured by the ``OTEL_*``
    variables, flushed when the process exits."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    try:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise UsageError(
            "sending metrics needs the OTLP exporter: pip install 'threadlog[otel]'"
        ) from exc
    reader = PeriodicExportingMetricReader(OTLPMetricExporter())
    provider = MeterProvider(metric_readers=[reader], resource=Resource.create())
    atexit.register(provider.shutdown)
    return provider.get_meter("threadlog", __version__)
