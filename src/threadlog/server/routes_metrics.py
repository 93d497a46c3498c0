"""``GET /metrics``: the process's metrics in the Prometheus text format.

The metrics are those of `threadlog.observe.metrics` (append and fsync latency, records per
commit, queue depth, open threads, leases, recoveries and repairs, tool calls by outcome),
which `threadlog.server.serve.serve` (``threadlog serve``) turns on; an application that
mounts `create_app` itself calls `threadlog.observe.metrics.install` (else the text is empty). The route takes a bearer token like every
other route (any principal may read it: the numbers are totals over the whole process and
carry no thread's content); a Prometheus scrape job sends it with ``authorization``.
"""

from __future__ import annotations

from fastapi import Response

from threadlog import _hooks
from threadlog.observe.metrics import Metrics
from threadlog.server._routing import Routes
from threadlog.server.auth import CallerDep  # noqa: TC001 (FastAPI reads the annotation)

__all__ = ["router"]

router = Routes(tags=["service"])

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@router.get("/metrics")
async def metrics(who: CallerDep) -> Response:
    """The metrics, as Prometheus text (empty when metrics are off)."""
    sink = _hooks.METRICS
    text = sink.prometheus_text() if isinstance(sink, Metrics) else ""
    return Response(text, media_type=CONTENT_TYPE)
