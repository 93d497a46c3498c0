"""One error shape for every route, and the body-size limit (``docs/service.md``, Errors).

Every error the service answers is ``{"error": {"status", "type", "message"}}`` (plus
``"errors"``, the fields at fault, for a body or query of the wrong shape). ``type`` is the
class in threadlog's error tree (`threadlog.errors`) or the HTTP layer's own name
(``BadRequest``, ``NotFound``, ``PayloadTooLarge``…). The mapping from threadlog's tree is a
table walked along the exception's MRO, so a subclass added later gets its parent's status.

A 500 is always a bug: `ErrorMiddleware` logs it and answers ``InternalError`` without any
detail of the exception (which may hold a path or a prompt).

`ErrorMiddleware` is also where a body over ``max_body`` is refused, before it is read: a
``Content-Length`` over the limit is answered at once, and a chunked body is counted as it
is received and refused as soon as it passes the limit. And it answers ``HEAD`` for every
``GET`` route (RFC 9110 §9.3.2: the status and headers the GET would have, no body), which
the routes do not declare: the request goes on as a GET, answered once its headers are
sent, and then cancelled (a live event stream never ends by itself).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import anyio
import orjson
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from threadlog.errors import (
    ConflictError,
    IntegrityError,
    InvalidTransition,
    RecordTooLarge,
    RunError,
    StorageError,
    ThreadlogError,
    ThreadNotFound,
    UsageError,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    from fastapi import FastAPI
    from starlette.requests import Request
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = [
    "ApiError",
    "ErrorMiddleware",
    "error_response",
    "install_handlers",
    "status_of",
]

log = logging.getLogger("threadlog.server")

_STATUS: tuple[tuple[type[ThreadlogError], int], ...] = (
    # most specific first: the first class in an exception's MRO found here wins
    (ThreadNotFound, 404),
    (InvalidTransition, 409),
    (RecordTooLarge, 413),
    (UsageError, 422),
    (ConflictError, 409),
    (IntegrityError, 409),  # the log is damaged: the request cannot be served as asked
    (StorageError, 503),
    (RunError, 503),
)

_HTTP_TYPES = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    413: "PayloadTooLarge",
    415: "UnsupportedMediaType",
    422: "ValidationError",
}


class ApiError(Exception):
    """An error answered as it is: the service's own (``NotFound`` for a call id…)."""

    def __init__(
        self,
        status: int,
        type: str,
        message: str,
        *,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.type = type
        self.message = message
        self.headers = dict(headers or {})


def status_of(exc: ThreadlogError) -> int:
    """The HTTP status of one of threadlog's errors (see the module docstring)."""
    for cls in type(exc).__mro__:
        for known, status in _STATUS:
            if cls is known:
                return status
    return 500


def error_response(
    status: int,
    type: str,
    message: str,
    *,
    headers: Mapping[str, str] | None = None,
    errors: list[dict[str, Any]] | None = None,
) -> Response:
    """The one error shape, as a response."""
    body: dict[str, Any] = {"status": status, "type": type, "message": message}
    if errors is not None:
        body["errors"] = errors
    return Response(
        orjson.dumps({"error": body}),
        status_code=status,
        media_type="application/json",
        headers=dict(headers or {}),
    )


def _field_errors(exc: RequestValidationError) -> list[dict[str, Any]]:
    """The validation errors as plain JSON: location, message and kind (never the input,
    which may be large or hold anything)."""
    return [
        {
            "loc": [p if isinstance(p, int) else str(p) for p in err.get("loc", ())],
            "msg": str(err.get("msg", "")),
            "type": str(err.get("type", "")),
        }
        for err in exc.errors()
    ]


async def _on_api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc.status, exc.type, exc.message, headers=exc.headers)


async def _on_threadlog_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ThreadlogError)
    status = status_of(exc)
    if status == 500:
        log.error("unexpected %s: %s", type(exc).__name__, exc)
        return error_response(500, "InternalError", "internal error (logged)")
    if status >= 500:
        log.warning("%s %s: %s: %s", request.method, request.url.path, type(exc).__name__, exc)
    return error_response(status, type(exc).__name__, str(exc))


async def _on_http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    status = exc.status_code
    kind = _HTTP_TYPES.get(status, "HTTPError")
    message = exc.detail if isinstance(exc.detail, str) else kind
    if status == 404 and message == "Not Found":
        message = f"no route {request.url.path}"
    return error_response(status, kind, message, headers=exc.headers)


async def _on_validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    errors = _field_errors(exc)
    if any(e["type"] == "json_invalid" for e in errors):
        return error_response(400, "BadRequest", "the body is not valid JSON")
    where = ", ".join(".".join(str(p) for p in e["loc"]) for e in errors[:5])
    return error_response(422, "ValidationError", f"invalid request: {where}", errors=errors)


def install_handlers(app: FastAPI) -> None:
    """Register the handlers that give every error its one shape."""
    app.add_exception_handler(ApiError, _on_api_error)
    app.add_exception_handler(ThreadlogError, _on_threadlog_error)
    app.add_exception_handler(StarletteHTTPException, _on_http_error)
    app.add_exception_handler(RequestValidationError, _on_validation_error)


class _BodyTooLarge(StarletteHTTPException):
    """A chunked body passed the limit while it was being received. An HTTP exception, so
    that FastAPI's body parsing lets it through (it turns other errors into a 400)."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            413, f"the body is over the limit of {limit} bytes", headers={"Connection": "close"}
        )


class ErrorMiddleware:
    """The outermost layer of the app: the body-size limit, and a 500 for any exception the
    handlers did not turn into an answer (logged; see the module docstring)."""

    def __init__(self, app: ASGIApp, *, max_body: int) -> None:
        self.app = app
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["method"] == "HEAD":
            await self._head(scope, receive, send)
            return
        limit = self.max_body
        declared = _content_length(scope)
        if declared == -1:
            await error_response(400, "BadRequest", "malformed Content-Length")(
                scope, receive, send
            )
            return
        if declared is not None and declared > limit:
            await _too_large(limit)(scope, receive, send)
            return
        started = False
        received = 0

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise _BodyTooLarge(limit)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except _BodyTooLarge:
            if not started:
                await _too_large(limit)(scope, receive, send)
        except Exception:
            log.exception("%s %s: unexpected error", scope.get("method"), scope.get("path"))
            if not started:
                response = error_response(500, "InternalError", "internal error (logged)")
                await response(scope, receive, send)

    async def _head(self, scope: Scope, receive: Receive, send: Send) -> None:
        """``HEAD``: the request as a ``GET``, its status and headers sent, its body not (see
        the module docstring). The response is complete once its headers are out (a HEAD
        has no body), and the GET is then cancelled: a stream stops producing whether or not
        it has a first chunk yet, and whatever it listens to (a disconnect, or a send that
        fails, ASGI 2.4)."""
        done = False

        async def head_receive() -> Message:
            if done:
                return {"type": "http.disconnect"}
            return await receive()

        with anyio.CancelScope() as scope_of_get:

            async def head_send(message: Message) -> None:
                nonlocal done
                if done or message["type"] != "http.response.start":
                    return
                await send(message)
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                done = True
                scope_of_get.cancel()

            await self(dict(scope, method="GET"), head_receive, head_send)


def _too_large(limit: int) -> Response:
    return error_response(
        413,
        "PayloadTooLarge",
        f"the body is over the limit of {limit} bytes",
        headers={"Connection": "close"},
    )


def _content_length(scope: Scope) -> int | None:
    """The declared body size; None when not declared, -1 when malformed."""
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            text = value.decode("latin-1").strip()
            if not text.isdigit() or len(text) > 18:
                return -1
            return int(text)
    return None
