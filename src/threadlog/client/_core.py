"""The client without I/O: what each call sends, how its answer is read, when to retry.

Every method of `threadlog.client.Client` and `AsyncClient` is one line: it asks a builder
here for a `Call` (method, path, query, body, headers, and the function that decodes the
answer), hands it to its transport, and gives the response back to `Call.finish`. So the two
clients cannot drift apart: they share the requests, the decoding, the error mapping and the
retry rule, and differ only in ``await``. (httpx's own ``Auth.auth_flow`` is the model.)

**Retries.** A request that never reached the server (``httpx.ConnectError``,
``ConnectTimeout``) is retried for every call: nothing happened. One whose answer was lost
after it was sent (a read error, a read timeout, a dropped connection) is retried only when
repeating it cannot do something twice: reads (``GET``) and ``submit``, which carries an
``Idempotency-Key`` the server turns into the turn record's event id, so the same key records
one turn however often it arrives. Everything else (steer, approve, cancel, fork…) raises
`ServiceUnreachable` and leaves the decision to the caller, who can look at the thread.
"""

from __future__ import annotations

import os
import random
import uuid
from dataclasses import field
from typing import TYPE_CHECKING, Any, Generic, TypeVar
from urllib.parse import quote, urlsplit

import httpx
import orjson

from threadlog._dataclass import dataclass
from threadlog._version import __version__
from threadlog.client._errors import ServiceError, ServiceUnreachable
from threadlog.errors import UsageError
from threadlog.model.envelope import BadRecord, Record, record_from_obj

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

__all__ = [
    "RETRIES",
    "Call",
    "backoff",
    "base_url",
    "decode_record",
    "default_headers",
    "error_from",
    "invalid",
    "thread_path",
    "unreachable",
]

T = TypeVar("T")

RETRIES = 3
"""How many times a call is sent again after a transport failure that allows it."""

_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout)
"""Transport failures that mean the request never reached the server."""


def backoff(attempt: int, *, first: float = 0.1, cap: float = 5.0) -> float:
    """The pause before retry number ``attempt`` (0 for the first): ``first * 2**attempt``
    capped at ``cap``, then jittered to between half and all of it, so that clients cut off
    together do not come back together."""
    delay: float = min(cap, first * 2.0 ** min(attempt, 32))
    return delay / 2 + random.random() * delay / 2


def base_url(url: str) -> str:
    """The service's URL as given, checked, without a trailing slash (paths are appended)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UsageError(
            f"{url!r} is not a service URL: give http://HOST:PORT (what `threadlog serve` prints)"
        )
    return url.rstrip("/")


def default_headers(token: str | None) -> dict[str, str]:
    """The headers of every request: the bearer token (``$THREADLOG_TOKEN`` by default)."""
    token = token if token is not None else os.environ.get("THREADLOG_TOKEN") or None
    headers = {"User-Agent": f"threadlog/{__version__}", "Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return headers


def unreachable(url: str, exc: httpx.TransportError) -> ServiceUnreachable:
    """The error for a request that got no answer."""
    reason = str(exc) or type(exc).__name__
    return ServiceUnreachable(url, type(exc).__name__, reason)


def error_from(response: httpx.Response) -> ServiceError:
    """The `ServiceError` an error response stands for (its body must have been read).

    Reads the contract's ``{"error": {...}}`` shape; anything else (a proxy's HTML page, an
    empty body) keeps the status and says what came.
    """
    try:
        body = orjson.loads(response.content)
        error = body["error"]
        return ServiceError(
            int(error.get("status", response.status_code)),
            str(error["type"]),
            str(error["message"]),
            errors=body.get("errors", error.get("errors")),
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
        text = response.text.strip()[:200] or response.reason_phrase
        return ServiceError(response.status_code, "HTTPError", text)


def invalid(response: httpx.Response, why: str) -> ServiceError:
    """A success whose body breaks the contract."""
    return ServiceError(response.status_code, "InvalidResponse", f"{why} from {response.url}")


def _json(response: httpx.Response) -> Any:
    try:
        return orjson.loads(response.content)
    except orjson.JSONDecodeError:
        raise invalid(response, "an answer that is not JSON") from None


def _object(response: httpx.Response) -> dict[str, Any]:
    body = _json(response)
    if not isinstance(body, dict):
        raise invalid(response, "an answer that is not a JSON object")
    return body


def decode_record(obj: Any, response: httpx.Response | None = None) -> Record:
    """A `Record` from its envelope dict, refused (`ServiceError`) if it is not one."""
    try:
        return record_from_obj(obj)
    except BadRecord as exc:
        status = 200 if response is None else response.status_code
        raise ServiceError(status, "InvalidResponse", f"not a record: {exc}") from None


def _threads(response: httpx.Response) -> list[dict[str, Any]]:
    threads = _object(response).get("threads")
    if not isinstance(threads, list):
        raise invalid(response, "no thread list")
    return threads


def _records(response: httpx.Response) -> list[Record]:
    events = _object(response).get("events")
    if not isinstance(events, list):
        raise invalid(response, "no event list")
    return [decode_record(obj, response) for obj in events]


def _record(response: httpx.Response) -> Record:
    return decode_record(_json(response), response)


def _bytes(response: httpx.Response) -> bytes:
    return response.content


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One request to the service, and how to read its answer."""

    method: str
    path: str
    """Below the service's URL, starting with ``/``; ids in it are percent-encoded."""
    decode: Callable[[httpx.Response], T]
    params: Mapping[str, int] | None = None
    body: dict[str, Any] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    safe_to_repeat: bool = False
    """Whether a request whose answer was lost may be sent again (see the module docstring)."""

    def finish(self, response: httpx.Response) -> T:
        """The decoded answer, or the `ServiceError` the response stands for."""
        if response.is_error:
            raise error_from(response)
        return self.decode(response)

    def retry_delay(self, exc: httpx.TransportError, attempt: int) -> float | None:
        """The pause before sending again after ``exc`` (``attempt`` retries so far), or
        None to give up and raise."""
        if attempt >= RETRIES:
            return None
        if isinstance(exc, _NOT_SENT) or self.safe_to_repeat:
            return backoff(attempt)
        return None

    # the builders, one per route of docs/service.md

    @staticmethod
    def threads(limit: int) -> Call[list[dict[str, Any]]]:
        return Call("GET", "/v1/threads", _threads, {"limit": limit}, safe_to_repeat=True)

    @staticmethod
    def create_thread(
        title: str | None, cwd: str | None, input: str | None
    ) -> Call[dict[str, Any]]:
        body = _present(title=title, cwd=cwd, input=input)
        return Call("POST", "/v1/threads", _object, body=body)

    @staticmethod
    def thread(thread_id: str) -> Call[dict[str, Any]]:
        return Call("GET", thread_path(thread_id), _object, safe_to_repeat=True)

    @staticmethod
    def events(
        thread_id: str, after: int | None, before: int | None, limit: int
    ) -> Call[list[Record]]:
        if after is not None and before is not None:
            raise UsageError("events: give after or before, not both")
        params = {"limit": limit}
        if after is not None:
            params["after"] = after
        if before is not None:
            params["before"] = before
        path = f"{thread_path(thread_id)}/events"
        return Call("GET", path, _records, params, safe_to_repeat=True)

    @staticmethod
    def event(thread_id: str, ord: int) -> Call[Record]:
        return Call(
            "GET", f"{thread_path(thread_id)}/events/{int(ord)}", _record, safe_to_repeat=True
        )

    @staticmethod
    def submit(thread_id: str, text: str, idempotency_key: str | None) -> Call[dict[str, Any]]:
        # The key is fixed here, once: every retry of this Call sends the same one.
        key = idempotency_key or str(uuid.uuid4())
        return Call(
            "POST",
            f"{thread_path(thread_id)}/turns",
            _object,
            body={"input": text},
            headers={"Idempotency-Key": key},
            safe_to_repeat=True,
        )

    @staticmethod
    def steer(thread_id: str, text: str) -> Call[dict[str, Any]]:
        return Call("POST", f"{thread_path(thread_id)}/steer", _object, body={"text": text})

    @staticmethod
    def cancel(thread_id: str) -> Call[dict[str, Any]]:
        return Call("POST", f"{thread_path(thread_id)}/cancel", _object, body={})

    @staticmethod
    def approve(thread_id: str, call_id: str, reason: str | None) -> Call[dict[str, Any]]:
        return _decision(thread_id, call_id, "approve", _present(reason=reason))

    @staticmethod
    def deny(thread_id: str, call_id: str, reason: str | None) -> Call[dict[str, Any]]:
        return _decision(thread_id, call_id, "deny", _present(reason=reason))

    @staticmethod
    def resolve(thread_id: str, call_id: str, as_: str, note: str | None) -> Call[dict[str, Any]]:
        return _decision(thread_id, call_id, "resolve", _present(**{"as": as_, "note": note}))

    @staticmethod
    def fork(thread_id: str, at: int | str | None, title: str | None) -> Call[dict[str, Any]]:
        return Call(
            "POST", f"{thread_path(thread_id)}/fork", _object, body=_present(at=at, title=title)
        )

    @staticmethod
    def artifact(thread_id: str, digest: str) -> Call[bytes]:
        path = f"{thread_path(thread_id)}/artifacts/{_seg(digest)}"
        return Call("GET", path, _bytes, headers={"Accept": "*/*"}, safe_to_repeat=True)


def _decision(
    thread_id: str, call_id: str, verb: str, body: dict[str, Any]
) -> Call[dict[str, Any]]:
    path = f"{thread_path(thread_id)}/tool-calls/{_seg(call_id)}/{verb}"
    return Call("POST", path, _object, body=body)


def _seg(value: str) -> str:
    """One path segment, percent-encoded (an id can never reach another route)."""
    return quote(str(value), safe="")


def thread_path(thread_id: str) -> str:
    """The path of a thread's resource, ``/v1/threads/{thread}``."""
    return f"/v1/threads/{_seg(thread_id)}"


def _present(**fields: Any) -> dict[str, Any]:
    """The optional body fields that were given (the service treats absent and null alike,
    and absent is what its contract shows)."""
    return {name: value for name, value in fields.items() if value is not None}
