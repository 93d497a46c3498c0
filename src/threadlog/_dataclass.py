"""`dataclass`: the standard library's decorator, without generating ``__eq__``, ``__hash__``
and ``__repr__`` from source.

The standard decorator writes each method a class needs as source text and ``exec``s it when
the class is created: about a millisecond per class on a slow machine, and threadlog defines
some 150 dataclasses (its event catalogue, the reduced state, the runtime's records), so that
`import threadlog` and every ``threadlog`` command spent a fifth of their import time
compiling these methods before doing anything (~60 ms of ~300 ms on a 2-core VM; `threadlog
resume` must finish in half a second). This wrapper has the standard decorator build the
class (fields, ``__init__``, a frozen class's ``__setattr__`` and ``__delattr__``, slots,
``__match_args__``: still a stdlib dataclass, for `dataclasses.fields`, `~dataclasses.replace`,
`~dataclasses.asdict` and the type checkers) with ``eq=False, repr=False``, then gives it the
three methods as closures over one `operator.attrgetter` of its fields, written once here.

They behave as the generated ones do: ``==`` compares the fields that have ``compare=True``
(as a tuple, between instances of exactly the same class; anything else is NotImplemented); a
frozen class hashes those fields (``hash=`` on a field honoured), a mutable one is unhashable
(``__hash__ = None``); ``repr`` is ``Name(field=value, …)`` over the fields with
``repr=True``, guarded against recursion. A method the class body defines itself is kept, as
the standard decorator keeps it; ``eq=False`` or ``repr=False`` still turn a method off, and
``order=True`` or ``unsafe_hash=True`` go to the standard decorator unchanged.
"""

from __future__ import annotations

import dataclasses
import operator
import reprlib
from typing import TYPE_CHECKING, Any, TypeVar, dataclass_transform, overload

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["dataclass"]

_T = TypeVar("_T")


@overload
def dataclass(cls: type[_T], /) -> type[_T]: ...


@overload
def dataclass(
    *,
    init: bool = True,
    repr: bool = True,
    eq: bool = True,
    order: bool = False,
    unsafe_hash: bool = False,
    frozen: bool = False,
    match_args: bool = True,
    kw_only: bool = False,
    slots: bool = False,
    weakref_slot: bool = False,
) -> Callable[[type[_T]], type[_T]]: ...


@dataclass_transform(field_specifiers=(dataclasses.field, dataclasses.Field))
def dataclass(
    cls: type[_T] | None = None,
    /,
    *,
    init: bool = True,
    repr: bool = True,
    eq: bool = True,
    order: bool = False,
    unsafe_hash: bool = False,
    frozen: bool = False,
    match_args: bool = True,
    kw_only: bool = False,
    slots: bool = False,
    weakref_slot: bool = False,
) -> type[_T] | Callable[[type[_T]], type[_T]]:
    """`dataclasses.dataclass` with the same parameters and behaviour (module docstring)."""

    def wrap(cls: type[_T]) -> type[_T]:
        own = cls.__dict__
        # What the class body defines itself stays (the standard decorator's rule); note that
        # a body defining ``__eq__`` alone gets ``__hash__ = None`` from Python itself.
        explicit_hash = "__hash__" in own and not (own["__hash__"] is None and "__eq__" in own)
        add_eq = eq and "__eq__" not in own and not order
        add_repr = repr and "__repr__" not in own
        built = dataclasses.dataclass(
            cls,
            init=init,
            # order=True needs the generated __eq__ beside __lt__ & co: left to the stdlib
            repr=False,
            eq=eq and order,
            order=order,
            unsafe_hash=unsafe_hash,
            frozen=frozen,
            match_args=match_args,
            kw_only=kw_only,
            slots=slots,
            weakref_slot=weakref_slot,
        )
        target: Any = built  # (methods assigned onto a class: beyond what a checker models)
        fields = dataclasses.fields(target)
        if add_eq:
            target.__eq__ = _eq([f.name for f in fields if f.compare])
        if eq and not order and not unsafe_hash and not explicit_hash:
            if frozen:
                hashed = [f.name for f in fields if (f.compare if f.hash is None else f.hash)]
                target.__hash__ = _hash(hashed)
            else:
                target.__hash__ = None
        if add_repr:
            target.__repr__ = _repr([f.name for f in fields if f.repr])
        return built

    return wrap if cls is None else wrap(cls)


def _values(names: list[str]) -> Callable[[Any], tuple[Any, ...]]:
    """The fields ``names`` of an instance, as a tuple (as the generated methods compare)."""
    if not names:
        return lambda _: ()
    if len(names) == 1:
        one = operator.attrgetter(names[0])
        return lambda obj: (one(obj),)
    return operator.attrgetter(*names)  # a tuple already


def _eq(names: list[str]) -> Callable[[Any, object], bool]:
    values = _values(names)

    def __eq__(self: Any, other: object) -> bool:
        if other.__class__ is self.__class__:
            return values(self) == values(other)
        return NotImplemented

    return __eq__


def _hash(names: list[str]) -> Callable[[Any], int]:
    values = _values(names)

    def __hash__(self: Any) -> int:
        return hash(values(self))

    return __hash__


def _repr(names: list[str]) -> Callable[[Any], str]:
    getters = [(f"{name}=", operator.attrgetter(name)) for name in names]

    @reprlib.recursive_repr()
    def __repr__(self: Any) -> str:
        inner = ", ".join(label + repr(get(self)) for label, get in getters)
        return f"{self.__class__.__qualname__}({inner})"

    return __repr__
