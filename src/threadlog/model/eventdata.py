"""Events to and from the ``(type, data)`` pair a record stores, every field checked.

`from_data` is the one place a record's data becomes a typed event: the type must be in the
catalogue (`threadlog.model.events`) or ``custom.*``, every field must be known, present when
required and of its declared type (a large value moved to the artifact store stands for any
non-numeric field). `to_data` is its inverse for what the runtime produces.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Literal, get_args, get_origin

from threadlog.errors import InvalidData, InvalidEventType
from threadlog.model.events import CATALOGUE, Custom, Event
from threadlog.model.refs import is_artifact_ref

__all__ = ["from_data", "to_data"]


def to_data(event: Event) -> tuple[str, Any]:
    """Split an event into the ``(type, data)`` pair a record stores.

    A field whose default is ``None`` and that is still ``None`` is left out: the record
    then reads the same as one written from a plain dict (``from_data`` fills the default
    back in), and carries no null keys.
    """
    if isinstance(event, Custom):
        return event.type, event.data
    required, optional = _FIELDS.get(type(event)) or _fields(type(event))
    data = {name: getattr(event, name) for name in required}
    for name in optional:
        value = getattr(event, name)
        if value is not None:
            data[name] = value
    return event.type, data


_FIELDS: dict[type[Any], tuple[tuple[str, ...], tuple[str, ...]]] = {}


def _fields(cls: type[Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The names of ``cls``'s fields: always written, and left out when ``None``."""
    fields = [f for f in dataclasses.fields(cls) if f.name != "type"]
    names = (
        tuple(f.name for f in fields if f.default is not None),
        tuple(f.name for f in fields if f.default is None),
    )
    _FIELDS[cls] = names
    return names


def from_data(type_name: str, data: Any) -> Event:
    """Build the typed event for a record's ``(type, data)``, checking every field.

    Raises:
        InvalidEventType: the type is neither catalogued nor ``custom.*``.
        InvalidData: a field is missing, unknown or of the wrong type.
    """
    cls = CATALOGUE.get(type_name)
    if cls is None:
        if type_name.startswith("custom."):
            return Custom(type=type_name, data=data)
        raise InvalidEventType(
            f"unknown event type {type_name!r}: use a catalogued type or 'custom.<name>'"
        )
    if not isinstance(data, dict):
        raise InvalidData(f"{type_name}: data must be an object, not {type(data).__name__}")
    spec = _spec(cls)
    for key in data:
        if key not in spec:
            raise InvalidData(f"{type_name}: unknown field {key!r}")
    for name, (hint, required) in spec.items():
        if name not in data:
            if required:
                raise InvalidData(f"{type_name}: missing field {name!r}")
            continue
        if not _fits(data[name], hint):
            raise InvalidData(f"{type_name}: field {name!r} must be {_describe(hint)}")
    event: Event = cls(**data)
    return event


_SPECS: dict[type[Any], dict[str, tuple[Any, bool]]] = {}


def _spec(cls: type[Any]) -> dict[str, tuple[Any, bool]]:
    spec = _SPECS.get(cls)
    if spec is None:
        hints = typing.get_type_hints(cls)
        spec = {
            f.name: (
                hints[f.name],
                f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
            )
            for f in dataclasses.fields(cls)
            if f.name != "type"
        }
        _SPECS[cls] = spec
    return spec


def _fits(value: Any, hint: Any) -> bool:
    if hint is Any:
        return True
    origin = get_origin(hint)
    if origin is Literal:
        return value in get_args(hint)
    if hint is not int and hint is not bool and is_artifact_ref(value):
        return True  # a large value moved to the artifact store
    if origin in (types.UnionType, typing.Union):
        return any(_fits(value, h) for h in get_args(hint))
    if hint is type(None):
        return value is None
    if origin is dict or hint is dict:
        return isinstance(value, dict)
    if origin is list or hint is list:
        return isinstance(value, list)
    if hint is int:
        return type(value) is int
    if hint is bool:
        return type(value) is bool
    if hint is str:
        return isinstance(value, str)
    return isinstance(value, hint)


def _describe(hint: Any) -> str:
    origin = get_origin(hint)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(hint))
    if origin in (types.UnionType, typing.Union):
        return " or ".join(_describe(h) for h in get_args(hint))
    if hint is type(None):
        return "null"
    if origin is not None:
        return getattr(origin, "__name__", str(hint))
    return getattr(hint, "__name__", str(hint))
