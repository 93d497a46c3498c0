"""What every store offers the runtime, and the checks every backend applies to an append."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from threadlog.errors import InvalidEventType, UsageError
from threadlog.model.envelope import Record, valid_type_name
from threadlog.model.events import Event, from_data, to_data
from threadlog.model.ids import is_uuid
from threadlog.model.lineage import check_new_lineage

if TYPE_CHECKING:
    from types import EllipsisType

    from threadlog.model.state import ThreadState

__all__ = ["Listener", "Store", "check_new_thread", "normalize_append"]

Listener = Callable[[str, list[Record]], None]

_VALID_TYPES: set[str] = set()


def check_new_thread(principal: object, lineage: object) -> None:
    """Check `create_thread`'s arguments. Raises `UsageError`; nothing has been written then."""
    if not isinstance(principal, str) or not principal:
        raise UsageError("principal must be a non-empty string")
    try:
        check_new_lineage(lineage)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def normalize_append(
    type_: str | Event, data: Any, id: str | None, parent: str | None | EllipsisType
) -> tuple[str, Any]:
    """Check an append's arguments; returns ``(type name, data)``.

    Raises `InvalidEventType`, `InvalidData` or `UsageError`; nothing has been written then.
    """
    if isinstance(type_, str):
        type_name = type_
        if type_name not in _VALID_TYPES:
            if not valid_type_name(type_name):
                raise InvalidEventType(
                    f"invalid event type name {type_name!r}: dotted lower-case words, "
                    "e.g. 'turn.started' or 'custom.my_app.note'"
                )
            _VALID_TYPES.add(type_name)
        if data is None:
            data = {}
        if not type_name.startswith("custom."):
            from_data(type_name, data)  # schema check: InvalidData / InvalidEventType
    else:
        type_name, data = to_data(type_)
    if type_name == "thread.created":
        raise UsageError("thread.created is written by create_thread()")
    if id is not None and not is_uuid(id):
        raise UsageError(f"event id must be a lower-case UUID string, got {id!r:.80}")
    if parent is not ... and parent is not None and not isinstance(parent, str):
        raise UsageError("parent must be an event id, None, or omitted")
    return type_name, data


class Store(Protocol):
    """The store interface the runtime relies on (embedded and in-memory backends)."""

    def create_thread(
        self,
        principal: str = "local",
        *,
        title: str | None = None,
        lineage: dict[str, Any] | None = None,
        **config: Any,
    ) -> str: ...

    def append(
        self,
        thread_id: str,
        type: str | Event,
        data: Any = None,
        *,
        durable: bool | None = None,
        id: str | None = None,
        parent: str | None | EllipsisType = ...,
        expect_ord: int | None = None,
        check: Callable[[Record], object] | None = None,
    ) -> Record: ...

    async def aappend(
        self,
        thread_id: str,
        type: str | Event,
        data: Any = None,
        *,
        durable: bool | None = None,
        id: str | None = None,
        parent: str | None | EllipsisType = ...,
        expect_ord: int | None = None,
        check: Callable[[Record], object] | None = None,
    ) -> Record: ...

    def read(self, thread_id: str, after: int = 0, *, limit: int | None = None) -> list[Record]: ...

    def state(self, thread_id: str) -> ThreadState: ...

    def exists(self, thread_id: str) -> bool: ...

    def resolve(self, data: Any) -> Any: ...

    def add_listener(self, listener: Listener) -> None: ...

    def remove_listener(self, listener: Listener) -> None: ...

    def release(self, thread_id: str) -> None: ...

    def take_repairs(self, thread_id: str) -> list[dict[str, Any]]: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...
