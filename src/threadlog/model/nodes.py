"""The conversation tree's nodes, with a snapshot's part kept serialized until it is read (pure).

`Context` keeps one node per record (``id → (parent, message, compaction)``). A context loaded
from a snapshot of a long thread would build a million of them before the session could
append anything, though resuming rarely looks at them: recovery and appends only add nodes;
only a model request (the path from the leaf), a branch or a label reads old ones. So
`Nodes` holds the snapshot's nodes as they were saved (``packed``: their JSON object,
zlib-compressed, about a fifth of its size) and decodes them on the first read that needs
it; nodes added since live in the dict itself. `parts` gives all of them without decoding
the snapshot's (a snapshot of a resumed session), and `merge` makes them one packed object
again (in a worker thread: it is bytes only).

Every reading method decodes first, so a `Nodes` behaves as the plain dict it stands for.
"""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from collections.abc import ItemsView, Iterator, KeysView, ValuesView

__all__ = ["Node", "Nodes", "merge", "pack"]

Node = tuple[str | None, dict[str, Any] | None, dict[str, Any] | None]
"""A record's node: its parent, its model-visible message, its compaction (or None)."""


class Nodes(dict[str, Node]):
    """``id → Node``, the ones of a snapshot decoded lazily (see the module docstring).

    Args:
        packed: the nodes a snapshot holds (`pack`; None: none); a memoryview of the
            snapshot's payload is kept as it is (not copied).
    """

    __slots__ = ("_raw",)

    def __init__(self, packed: bytes | memoryview | None = None) -> None:
        super().__init__()
        self._raw = packed if packed is not None and len(packed) else None

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
        for key, node in orjson.loads(zlib.decompress(raw)).items():
            dict.__setitem__(self, key, (node[0], node[1], node[2]))
        dict.update(self, added)  # added after the snapshot: they come last, as in the log

    def items_now(self) -> ItemsView[str, Node]:
        """The nodes decoded so far (those added since the snapshot while it is pending)."""
        return dict.items(self)

    def parts(self) -> tuple[bytes | memoryview | None, bytes]:
        """All the nodes without decoding the snapshot's: ``(packed, added)``, the
        snapshot's nodes as loaded (or None) and the JSON object of those added since."""
        return self._raw, orjson.dumps(dict(self.items_now()))

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


def pack(nodes_json: bytes) -> bytes:
    """A JSON object of nodes, packed (zlib, fast level: it is mostly ids)."""
    return zlib.compress(nodes_json, 1)


def merge(packed: bytes | memoryview | None, added: bytes) -> bytes:
    """`Nodes.parts` packed as one object: the snapshot's nodes, then those added. Streams
    (a few MiB at a time): the snapshot's nodes are never held unpacked."""
    if packed is None:
        return pack(added)
    if added == b"{}":
        return bytes(packed)
    source, inflate, deflate = memoryview(packed), zlib.decompressobj(), zlib.compressobj(1)
    out: list[bytes] = []
    held = b""  # the last byte seen: the old object's closing brace, once all is read
    size = 0
    for start in range(0, len(source), _CHUNK):
        piece = held + inflate.decompress(source[start : start + _CHUNK])
        size += len(piece) - len(held)
        held = piece[-1:]
        out.append(deflate.compress(piece[:-1]))
    piece = held + inflate.flush()
    size += len(piece) - len(held)
    out.append(deflate.compress(piece[:-1]))  # all but "}"
    out.append(deflate.compress(added[1:] if size <= 2 else b"," + added[1:]))
    out.append(deflate.flush())
    return b"".join(out)


_CHUNK = 1 << 20


def _rebuild(items: dict[str, Node]) -> Nodes:
    nodes = Nodes()
    dict.update(nodes, items)
    return nodes
