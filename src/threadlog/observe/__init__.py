"""Observability and evaluation: spans, metrics and trajectories, all derived from the log.

The package, by job:

* ``spans``: records → a span tree (OpenTelemetry GenAI conventions, deterministic ids); pure.
* ``otlp``: spans → OTLP/JSON (``threadlog export --format otlp``), without the SDK.
* ``live``: a store listener that feeds durable records to the span builder as they arrive.
* ``sdk``: spans → the OpenTelemetry SDK's span processors and exporters (``threadlog[otel]``).
* ``metrics``: the instruments the store and runtime report to; Prometheus text and OTel.
* ``trajectory``: a thread's steps, and where two runs diverge (``threadlog diff --trajectory``).

Replay against another model lives with the runtime (`threadlog.runtime.replay`). Nothing
here is imported by ``import threadlog``, and only ``sdk`` imports OpenTelemetry. See
``docs/observability.md``.
"""
