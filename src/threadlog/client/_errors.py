"""The client's errors: what the service answered, or that it could not be reached."""

from __future__ import annotations

from typing import Any

from threadlog.errors import ThreadlogError

__all__ = ["ServiceError", "ServiceUnreachable"]


class ServiceError(ThreadlogError):
    """The service refused a request, or answered something that is not the contract.

    Built from the service's one error shape (``docs/service.md``, "Errors")::

        {"error": {"status": 404, "type": "ThreadNotFound", "message": "no thread 'abc' …"}}

    Attributes:
        status: the HTTP status (0 when no answer came: `ServiceUnreachable`).
        type: the error's class on the server (``ThreadNotFound``, ``InvalidTransition``,
            ``Unauthorized``, ``ValidationError``…); ``HTTPError`` for an answer that is not
            the error shape (a proxy's 502 page), ``InvalidResponse`` for a success whose
            body is not what the contract says.
        message: the server's words.
        errors: for a ``ValidationError`` (422), which fields were wrong, as sent.
    """

    def __init__(
        self, status: int, type: str, message: str, *, errors: list[Any] | None = None
    ) -> None:
        super().__init__(f"{message} ({status} {type})" if status else message)
        self.status = status
        self.type = type
        self.message = message
        self.errors = errors


class ServiceUnreachable(ServiceError):
    """No answer from the service: nothing listens at the URL, the connection broke, or the
    answer did not come within the timeout.

    ``status`` is 0 (no HTTP answer) and ``type`` the transport failure's class
    (``ConnectError``, ``ReadTimeout``…). The message names the URL.
    """

    def __init__(self, url: str, failure: str, reason: str) -> None:
        if failure.startswith("Connect"):  # the request never left: nothing happened
            message = f"cannot reach the threadlog service at {url}: {reason} (is `threadlog serve` running there?)"
        else:  # sent, but the answer was lost: it may have been applied
            message = f"no answer from the threadlog service at {url}: {reason} (the request may have been applied: look at the thread)"
        super().__init__(0, failure, message)
        self.url = url
