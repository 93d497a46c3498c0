"""The checks every backend applies to a new thread and an append, before writing anything."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from threadlog.errors import InvalidData, InvalidEventType, UsageError
from threadlog.model.codec import canonical
from threadlog.model.envelope import FORMAT_VERSION, valid_type_name
from threadlog.model.eventdata import check_data, to_data
from threadlog.model.events import ThreadCreated
from threadlog.model.ids import is_uuid
from threadlog.model.lineage import check_new_lineage
from threadlog.model.refs import escape_encoded

if TYPE_CHECKING:
    from types import EllipsisType

    from threadlog.model.events import Event

__all__ = [
    "check_new_thread",
    "escape_lookalikes",
    "normalize_append",
    "refuse_lookalikes",
]

_VALID_TYPES: set[str] = set()


def check_new_thread(principal: object, lineage: object, config: dict[str, Any]) -> None:
    """Check `create_thread`'s arguments and settle its config. Raises `UsageError`; nothing
    has been written then.

    A ``cwd`` is made absolute here, the one place every thread is created: tools resolve
    their paths against it, and a relative one would mean another directory for every
    process that later opens the thread from elsewhere. (The model stays free of I/O: the
    process's working directory is read here, in the store.)
    """
    if not isinstance(principal, str) or not principal:
        raise UsageError("principal must be a non-empty string")
    try:
        check_new_lineage(lineage)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    metadata = config.get("metadata")
    if metadata is not None and not (
        isinstance(metadata, dict) and all(isinstance(k, str) for k in metadata)
    ):
        raise UsageError("metadata must be a dict with string keys (listed by Catalog.threads)")
    cwd = config.get("cwd")
    if cwd is not None:
        if not isinstance(cwd, str | os.PathLike):
            raise UsageError(f"cwd must be a path, got {type(cwd).__name__}")
        config["cwd"] = os.path.abspath(os.fspath(cwd))


def refuse_lookalikes(type_name: str, data: Any, data_json: bytes) -> None:
    """Refuse data the store writes for the caller as is (``thread.created``) when it holds a
    look-alike artifact reference or escape where a reference could stand: escaping would
    change the thread's settings under the caller, and storing it would let a reader take it
    for a reference. Raises `UsageError`."""
    if escape_encoded(data, data_json)[1] is not data_json:
        raise UsageError(
            f"{type_name}: config, title and lineage cannot be an object of the form "
            '{"$artifact": …} or {"$escaped": …} (reserved for artifact references)'
        )


def escape_lookalikes(type_name: str, data: Any, data_json: bytes) -> tuple[Any, bytes]:
    """``(data, canonical JSON)`` with caller data that looks like an artifact reference (or
    an escape) escaped, so that it is never taken for one (`threadlog.model.refs`).

    Raises `InvalidData` when a catalogued event's field would then no longer fit its type
    (a text field accepts a reference, which only the store makes, not arbitrary objects).
    """
    escaped, escaped_json = escape_encoded(data, data_json)
    if escaped_json is not data_json and not type_name.startswith("custom."):
        try:
            check_data(type_name, escaped)
        except InvalidData as exc:
            raise InvalidData(
                f'{exc}: a value of the form {{"$artifact": …}} or {{"$escaped": …}} '
                "is data, not a reference (only the store makes references)"
            ) from None
    return escaped, escaped_json


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
            check_data(type_name, data)  # schema check: InvalidData / InvalidEventType
    else:
        type_name, data = to_data(type_)
    if type_name == "thread.created":
        raise UsageError("thread.created is written by create_thread()")
    if id is not None and not is_uuid(id):
        raise UsageError(f"event id must be a lower-case UUID string, got {id!r:.80}")
    if parent is not ... and parent is not None and not isinstance(parent, str):
        raise UsageError("parent must be an event id, None, or omitted")
    return type_name, data


def thread_created_data(
    principal: object, title: str | None, lineage: object, config: dict[str, Any]
) -> dict[str, Any]:
    """The ``thread.created`` data of a new thread, every argument checked
    (`check_new_thread`, the look-alike references of `refuse_lookalikes`): what each
    backend's `create_thread` writes as ord 1. Raises `UsageError`; nothing is written."""
    check_new_thread(principal, lineage, config)
    event = ThreadCreated(
        format=FORMAT_VERSION,
        principal=principal,  # type: ignore[arg-type]  # checked just above
        config=config,
        lineage=lineage,  # type: ignore[arg-type]
        title=title,
    )
    data: dict[str, Any] = to_data(event)[1]
    refuse_lookalikes(event.type, data, canonical(data))
    return data
