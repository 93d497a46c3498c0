"""Spans as OTLP/JSON: the protobuf-JSON mapping of an ``ExportTraceServiceRequest``.

What an OpenTelemetry collector accepts on ``POST /v1/traces`` with
``Content-Type: application/json``, built without the OpenTelemetry SDK. Per the OTLP/JSON
rules: trace and span ids are hex strings (not base64), enums are integers, 64-bit integers
(times, integer attributes) are decimal strings, and keys are lowerCamelCase::

    threadlog export THREAD --format otlp | curl -H 'Content-Type: application/json' \\
        --data-binary @- http://localhost:4318/v1/traces
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from threadlog._version import __version__

if TYPE_CHECKING:
    from collections.abc import Sequence

    from threadlog.observe.spans import AttrValue, Span

__all__ = ["SCOPE", "any_value", "request_of", "to_otlp_json"]

SCOPE = "threadlog"
"""The instrumentation scope name of every span threadlog makes."""

_KIND = {"internal": 1, "server": 2, "client": 3}
_STATUS = {"unset": 0, "ok": 1, "error": 2}


def any_value(value: AttrValue) -> dict[str, Any]:
    """An attribute value as an OTLP ``AnyValue``."""
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, list):
        return {"arrayValue": {"values": [{"stringValue": str(v)} for v in value]}}
    return {"stringValue": value}


def _attributes(attrs: dict[str, AttrValue]) -> list[dict[str, Any]]:
    return [{"key": k, "value": any_value(v)} for k, v in sorted(attrs.items())]


def _span(span: Span) -> dict[str, Any]:
    out: dict[str, Any] = {
        "traceId": span.trace_id,
        "spanId": span.span_id,
        "name": span.name,
        "kind": _KIND[span.kind],
        "startTimeUnixNano": str(span.start_ns),
        "endTimeUnixNano": str(span.end_ns),
        "attributes": _attributes(span.attributes),
        "events": [
            {
                "timeUnixNano": str(e.time_ns),
                "name": e.name,
                "attributes": _attributes(e.attributes),
            }
            for e in span.events
        ],
        "status": {"code": _STATUS[span.status]},
    }
    if span.parent_span_id is not None:
        out["parentSpanId"] = span.parent_span_id
    if span.status_message:
        out["status"]["message"] = span.status_message
    return out


def request_of(spans: Sequence[Span], *, service_name: str = "threadlog") -> dict[str, Any]:
    """An ``ExportTraceServiceRequest`` (as a dict) holding ``spans``."""
    return {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": _attributes(
                        {"service.name": service_name, "telemetry.sdk.name": "threadlog"}
                    )
                },
                "scopeSpans": [
                    {
                        "scope": {"name": SCOPE, "version": __version__},
                        "spans": [_span(s) for s in spans],
                    }
                ],
            }
        ]
    }


def to_otlp_json(spans: Sequence[Span], *, service_name: str = "threadlog") -> str:
    """`request_of` as JSON text (one line, then a newline)."""
    return orjson.dumps(request_of(spans, service_name=service_name)).decode() + "\n"
