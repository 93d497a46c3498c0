"""Routes declared with decorators in their modules, added to the app one by one.

`APIRouter` plus ``include_router`` would do, but newer FastAPI versions keep an included
router as one opaque entry of ``app.routes``; the service's tests (and anyone reading the
app) walk ``app.routes`` for every route and its path template, so each route is added to
the app itself (`FastAPI.add_api_route`).
"""

from __future__ import annotations

from dataclasses import field
from typing import TYPE_CHECKING, Any

from threadlog._dataclass import dataclass

if TYPE_CHECKING:
    from collections.abc import Callable

    from fastapi import FastAPI

__all__ = ["Routes"]

_Endpoint = Any  # a route function: FastAPI reads its signature


@dataclass(frozen=True, slots=True)
class _Spec:
    method: str
    path: str
    endpoint: _Endpoint
    status_code: int | None
    tags: list[str]


@dataclass
class Routes:
    """A module's routes (``@routes.get(path)``), added to an app by `register`."""

    tags: list[str] = field(default_factory=list)
    specs: list[_Spec] = field(default_factory=list)

    def _add(
        self, method: str, path: str, status_code: int | None, tags: list[str] | None
    ) -> Callable[[_Endpoint], _Endpoint]:
        def decorate(endpoint: _Endpoint) -> _Endpoint:
            self.specs.append(_Spec(method, path, endpoint, status_code, tags or self.tags))
            return endpoint

        return decorate

    def get(
        self, path: str, *, status_code: int | None = None, tags: list[str] | None = None
    ) -> Callable[[_Endpoint], _Endpoint]:
        """Declare a GET route."""
        return self._add("GET", path, status_code, tags)

    def post(
        self, path: str, *, status_code: int | None = None, tags: list[str] | None = None
    ) -> Callable[[_Endpoint], _Endpoint]:
        """Declare a POST route."""
        return self._add("POST", path, status_code, tags)

    def register(self, app: FastAPI) -> None:
        """Add every route to ``app``."""
        for spec in self.specs:
            app.add_api_route(
                spec.path,
                spec.endpoint,
                methods=[spec.method],
                status_code=spec.status_code,
                tags=list(spec.tags),
            )
