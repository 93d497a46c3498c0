"""The Python client of the threadlog service (``threadlog serve``, ``docs/service.md``).

`Client` makes blocking calls, `AsyncClient` the same calls as coroutines; both are built on
httpx and share everything but the I/O: `_core` says what each call sends, how its answer is
decoded, how errors map to `ServiceError` and when a call may be retried; `_stream` follows a
thread's live stream (cursor, de-duplication, reconnect with backoff) over ``httpx_sse``'s
parser. Records come back as `threadlog.model.envelope.Record`, the envelope a local store
reads, so code written against ``Store.read`` reads a remote thread the same way::

    from threadlog.client import Client

    with Client("http://127.0.0.1:8765") as service:   # token: $THREADLOG_TOKEN
        for record in service.stream(thread_id, stop=lambda r: r.type == "turn.ended"):
            print(record.ord, record.type)
"""

from __future__ import annotations

from threadlog.client._async import AsyncClient
from threadlog.client._errors import ServiceError, ServiceUnreachable
from threadlog.client._sync import Client

__all__ = ["AsyncClient", "Client", "ServiceError", "ServiceUnreachable"]
