"""The ``otlp`` export: a thread's spans as OTLP/JSON, for an OpenTelemetry collector.

The spans are derived from the records (`threadlog.observe.spans`), so a thread recorded with
tracing off exports the same spans that live tracing would have sent; the body is an
``ExportTraceServiceRequest`` in the OTLP/JSON mapping (`threadlog.observe.otlp`), ready to
``POST`` to a collector's ``/v1/traces``. The service name is ``$OTEL_SERVICE_NAME`` when set.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from threadlog.observe.otlp import to_otlp_json
from threadlog.observe.spans import spans_of

if TYPE_CHECKING:
    from collections.abc import Sequence

    from threadlog.model.envelope import Record

__all__ = ["to_otlp"]


def to_otlp(records: Sequence[Record]) -> str:
    """The spans of ``records`` (a whole thread, ord 1 first) as one OTLP/JSON request."""
    service = os.environ.get("OTEL_SERVICE_NAME") or "threadlog"
    return to_otlp_json(spans_of(records), service_name=service)
