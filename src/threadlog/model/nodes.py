"""The conversation tree's nodes, with a snapshot's part kept serialized until it is read (pure).

`Context` keeps one node per record (``id → (parent, message, compaction)``). A context loaded
from a snapshot of a long thread would build a million of them before the session could
append anything, though resuming rarely looks at them: recovery and appends only add nodes;
only a model request (the path from the leaf), a branch or a label reads old ones. So
`Nodes` holds the snapshot's nodes as the JSON object they were saved as (``raw``) and decodes
it on the first read that needs it; nodes added since live in the dict itself. `raw_json`
serializes all of them without decoding the prefix (a snapshot of a resumed session).

Every reading method decodes first, so a `Nodes` behaves as the plain dict it stands for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from collections.abc import ItemsView, Iterator, KeysView, ValuesView

__all__ = ["Node", "Nodes"]

Node = tuple[str | None, dict[str, Any] | None, dict[str, Any] | None]
"""A record's node: its parent, its model-visible message, its compaction (or None)."""


class Nodes(dict[str, Node]):
    """``id → Node``, the ones of a snapshot decoded lazily (see the module docstring).

    Args:
        raw: the JSON object of the nodes a snapshot holds (None: none); a memoryview of
            the snapshot's payload is kept as it is (not copied).
    """

    __slots__ = ("_raw",)

    def __init__(self, raw: bytes | memoryview | None = None) -> None:
        super().__init__()
        self._raw = raw if raw is not None and raw != b"{}" else None

    @property
    def pending(self) -> bool:
        """Whether a snapshot's nodes are still serialized."""
        return self._raw is not None

    def _decode(self) -> None:
        raw = self._raw
        if raw is None:
            return
        self._raw = None
        added = dict(self.items_now())
        dict.clear(self)
        for key, node in orjson.loads(raw).items():
            dict.__setitem__(self, key, (node[0], node[1], node[2]))
        dict.update(self, added)  # added after the snapshot: they come last, as in the log

    def items_now(self) -> ItemsView[str, Node]:
        """The nodes decoded so far (those added since the snapshot while it is pending)."""
        return dict.items(self)

    def raw_json(self) -> bytes:
        """All the nodes as one JSON object, the snapshot's part copied as it is."""
        added = orjson.dumps(dict(self.items_now()))
        raw = self._raw
        if raw is None:
            return added
        if added == b"{}":
            return bytes(raw)
        return b"".join((raw[:-1], b",", added[1:]))

    def __contains__(self, key: object) -> bool:
        if self._raw is not None and not dict.__contains__(self, key):
            self._decode()
        return dict.__contains__(self, key)

    def __getitem__(self, key: str) -> Node:
        if self._raw is not None and not dict.__contains__(self, key):
            self._decode()
        return dict.__getitem__(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        """As `dict.get`."""
        if self._raw is not None and not dict.__contains__(self, key):
            self._decode()
        return dict.get(self, key, default)

    def __iter__(self) -> Iterator[str]:
        self._decode()
        return dict.__iter__(self)

    def __len__(self) -> int:
        self._decode()
        return dict.__len__(self)

    def keys(self) -> KeysView[str]:  # type: ignore[override]
        """As `dict.keys`."""
        self._decode()
        return dict.keys(self)

    def values(self) -> ValuesView[Node]:  # type: ignore[override]
        """As `dict.values`."""
        self._decode()
        return dict.values(self)

    def items(self) -> ItemsView[str, Node]:  # type: ignore[override]
        """As `dict.items`."""
        self._decode()
        return dict.items(self)

    def __eq__(self, other: object) -> bool:
        self._decode()
        if isinstance(other, Nodes):
            other._decode()
        return dict.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def copy(self) -> dict[str, Node]:
        """A plain dict of every node."""
        self._decode()
        return dict(dict.items(self))

    def __repr__(self) -> str:
        self._decode()
        return dict.__repr__(self)

    def __reduce__(self) -> Any:
        self._decode()
        return (_rebuild, (dict(self.items_now()),))


def _rebuild(items: dict[str, Node]) -> Nodes:
    nodes = Nodes()
    dict.update(nodes, items)
    return nodes
