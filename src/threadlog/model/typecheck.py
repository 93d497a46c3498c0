"""Checking plain JSON values against a dataclass's field types, compiled once per class.

Event data (`threadlog.model.eventdata`) and commands (`threadlog.model.commands`) are plain
JSON objects checked field by field against the annotations of the dataclass they become.
Walking the annotations with ``typing.get_origin`` / ``get_args`` for every value cost a
fifth of an import's time, so each field's annotation is turned, once per class, into a
predicate (`compile_hint`) and the class into a table of them (`field_table`).

The rules: ``Any`` takes anything; a ``Literal`` its listed values; a union any of its
members; ``None`` only null; ``int`` and ``bool`` exactly those (``True`` is not an ``int``
here); ``str``, ``dict``, ``list`` (parametrised or not) their class; any other class by
``isinstance``. With ``refs``, a large value moved to the artifact store
(`threadlog.model.refs.is_artifact_ref`) stands for any field but a number or a flag.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, get_args, get_origin

from threadlog.model.refs import is_artifact_ref

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["FieldCheck", "compile_hint", "describe", "field_names", "field_table"]


class FieldCheck(NamedTuple):
    """One field of a checked class."""

    name: str
    required: bool
    fits: Callable[[Any], bool]
    hint: Any


def _anything(value: Any) -> bool:
    return True


def compile_hint(hint: Any, *, refs: bool = False) -> Callable[[Any], bool]:
    """A predicate: whether a plain JSON value fits ``hint`` (the module docstring's rules).

    Each predicate is one call deep on the common path (a value that fits its first test):
    checking is per field of every record read or written.
    """
    if hint is Any:
        return _anything
    origin = get_origin(hint)
    if origin is Literal:
        allowed = get_args(hint)
        return lambda value: value in allowed
    if origin in (types.UnionType, typing.Union):
        # a union (even of numbers) takes a reference with ``refs``, as its non-numeric
        # members do: any member fits as itself, or the value is a reference
        args = get_args(hint)
        members = tuple(compile_hint(h) for h in args if h is not type(None))
        nullable = len(members) < len(args)
        if len(members) == 1:
            (member,) = members
            if nullable:
                if refs:
                    return lambda value: value is None or member(value) or is_artifact_ref(value)
                return lambda value: value is None or member(value)
            if refs:
                return lambda value: member(value) or is_artifact_ref(value)
            return member

        def fits_union(value: Any) -> bool:
            if nullable and value is None:
                return True
            for fits in members:
                if fits(value):
                    return True
            return refs and is_artifact_ref(value)

        return fits_union
    if hint is int:
        return lambda value: value.__class__ is int
    if hint is bool:
        return lambda value: value.__class__ is bool
    if hint is type(None):
        return (lambda value: value is None or is_artifact_ref(value)) if refs else _is_none
    cls: type[Any]
    if origin is dict or hint is dict:
        cls = dict
    elif origin is list or hint is list:
        cls = list
    else:
        cls = hint
    if refs:
        return lambda value: isinstance(value, cls) or is_artifact_ref(value)
    return lambda value: isinstance(value, cls)


def _is_none(value: Any) -> bool:
    return value is None


_TABLES: dict[tuple[type[Any], str, bool], tuple[FieldCheck, ...]] = {}


def field_table(cls: type[Any], *, skip: str, refs: bool = False) -> tuple[FieldCheck, ...]:
    """The checked fields of dataclass ``cls`` (all but ``skip``), compiled once and cached.

    A field is required when it has neither a default nor a default factory.
    """
    key = (cls, skip, refs)
    table = _TABLES.get(key)
    if table is None:
        hints = typing.get_type_hints(cls)
        table = tuple(
            FieldCheck(
                f.name,
                f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
                compile_hint(hints[f.name], refs=refs),
                hints[f.name],
            )
            for f in dataclasses.fields(cls)
            if f.name != skip
        )
        _TABLES[key] = table
    return table


_NAMES: dict[tuple[type[Any], str], frozenset[str]] = {}


def field_names(cls: type[Any], *, skip: str) -> frozenset[str]:
    """The names of `field_table`'s fields (an object with any other key is refused)."""
    key = (cls, skip)
    names = _NAMES.get(key)
    if names is None:
        names = _NAMES[key] = frozenset(f.name for f in dataclasses.fields(cls) if f.name != skip)
    return names


def describe(hint: Any, *, text: str = "str") -> str:
    """``hint`` in words for an error message (``text``: what to call ``str``)."""
    origin = get_origin(hint)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(hint))
    if origin in (types.UnionType, typing.Union):
        return " or ".join(describe(h, text=text) for h in get_args(hint))
    if hint is type(None):
        return "null"
    if hint is str:
        return text
    if origin is not None:
        return getattr(origin, "__name__", str(hint))
    return getattr(hint, "__name__", str(hint))
