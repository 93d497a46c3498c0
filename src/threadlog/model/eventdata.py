"""Events to and from the ``(type, data)`` pair a record stores, every field checked.

`from_data` is the one place a record's data becomes a typed event: the type must be in the
catalogue (`threadlog.model.events`) or ``custom.*``, every field must be known, present when
required and of its declared type (a large value moved to the artifact store stands for any
non-numeric field). `check_data` makes the same checks without building the event, for a
caller that only validates. `to_data` is the inverse for what the runtime produces.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, NamedTuple

from threadlog.errors import InvalidData, InvalidEventType
from threadlog.model.events import CATALOGUE, Custom, Event
from threadlog.model.typecheck import FieldCheck, describe, field_names, field_table

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["check_data", "from_data", "to_data"]


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


class _Schema(NamedTuple):
    """What checking one catalogued type's data needs, gathered once per type name."""

    cls: type[Any]
    names: frozenset[str]
    """Every field but ``type``: data with another key is refused."""
    required: frozenset[str]
    """The fields without a default."""
    fits: dict[str, Callable[[Any], bool]]
    """Each field's predicate (`threadlog.model.typecheck.compile_hint`, references allowed)."""
    table: tuple[FieldCheck, ...]
    """The same checks in field order: what `_explain` walks to name the first fault."""


_SCHEMAS: dict[str, _Schema] = {}


def _schema(type_name: str) -> _Schema | None:
    """The schema of a catalogued type, gathered and kept in ``_SCHEMAS`` (callers look
    there first), None for a ``custom.*`` one.

    Raises `InvalidEventType` for a type that is neither.
    """
    cls = CATALOGUE.get(type_name)
    if cls is None:
        if type_name.startswith("custom."):
            return None
        raise InvalidEventType(
            f"unknown event type {type_name!r}: use a catalogued type or 'custom.<name>'"
        )
    table = field_table(cls, skip="type", refs=True)
    schema = _SCHEMAS[type_name] = _Schema(
        cls,
        field_names(cls, skip="type"),
        frozenset(check.name for check in table if check.required),
        {check.name: check.fits for check in table},
        table,
    )
    return schema


def _check(type_name: str, schema: _Schema, data: Any) -> None:
    """Raise `InvalidData` unless ``data`` fits ``schema``.

    The common case, a plain dict that fits, is settled by one pass over the keys it has;
    anything else (a fault, or a value a predicate cannot judge) is judged by `_explain`,
    which names the first fault in field order, as if the pass had not been made.
    """
    if data.__class__ is dict and schema.names.issuperset(data) and data.keys() >= schema.required:
        fits = schema.fits
        try:
            for name, value in data.items():
                if not fits[name](value):
                    break
            else:
                return
        except Exception:  # (e.g. a caller's object whose == raises): raised again below
            pass
    _explain(type_name, schema, data)


def _explain(type_name: str, schema: _Schema, data: Any) -> None:
    """Check ``data`` field by field in field order, raising `InvalidData` at the first
    fault: not an object, then an unknown key, then a missing or ill-typed field."""
    if not isinstance(data, dict):
        raise InvalidData(f"{type_name}: data must be an object, not {type(data).__name__}")
    if not schema.names.issuperset(data):
        unknown = next(key for key in data if key not in schema.names)
        raise InvalidData(f"{type_name}: unknown field {unknown!r}")
    for name, required, fits, hint in schema.table:
        if name not in data:
            if required:
                raise InvalidData(f"{type_name}: missing field {name!r}")
            continue
        if not fits(data[name]):
            raise InvalidData(f"{type_name}: field {name!r} must be {describe(hint)}")


def check_data(type_name: str, data: Any) -> None:
    """`from_data`'s checks without building the event (for a caller that only validates).

    Raises:
        InvalidEventType: the type is neither catalogued nor ``custom.*``.
        InvalidData: a field is missing, unknown or of the wrong type.
    """
    schema = _SCHEMAS.get(type_name) or _schema(type_name)
    if schema is not None:
        _check(type_name, schema, data)


def from_data(type_name: str, data: Any) -> Event:
    """Build the typed event for a record's ``(type, data)``, checking every field.

    Raises:
        InvalidEventType: the type is neither catalogued nor ``custom.*``.
        InvalidData: a field is missing, unknown or of the wrong type.
    """
    schema = _SCHEMAS.get(type_name) or _schema(type_name)
    if schema is None:
        return Custom(type=type_name, data=data)
    _check(type_name, schema, data)
    event: Event = schema.cls(**data)
    return event
