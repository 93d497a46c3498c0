"""The conversation tree inside a thread (pure).

Every record names its ``parent``: the entry it continues. *Entries* are the records that
carry conversation (user input, model responses, tool outcomes, compactions, branch
summaries, settings changes); appending one moves the thread's *active leaf* to it, and ``leaf.moved`` moves the
leaf back to any earlier entry, so that what follows continues from there. Nothing is ever
rewritten: the old branch stays in the log, readable and exportable. The model's context is
the path from the active leaf back to the root (see `threadlog.model.context`), and so are
the branch-carried settings — model, thinking level, active tools (`threadlog.model.settings`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from threadlog._dataclass import dataclass

if TYPE_CHECKING:
    from collections.abc import Iterable

    from threadlog.model.envelope import Record

__all__ = ["ENTRY_TYPES", "Tree", "common_ancestor"]

ENTRY_TYPES: Final = frozenset(
    {
        "turn.started",
        "input.consumed",
        "model.responded",
        "tool_call.finished",
        "tool_call.denied",
        "tool_call.resolved",
        "tool_call.cancelled",
        "provider.interrupted",
        "compaction",
        "branch.summarized",
        "config.changed",
    }
)
"""Record types that are conversation entries (they move the active leaf)."""


@dataclass
class Tree:
    """Parents and children of a thread's records, for drawing and comparing branches."""

    parent: dict[str, str | None]
    children: dict[str | None, list[str]]
    records: dict[str, Record]

    @classmethod
    def of(cls, records: Iterable[Record]) -> Tree:
        """The tree of a log's records. A parent that is not in the log is read as its root
        (ord 1): a fork's inherited entries continue the source's ``thread.created``."""
        parent: dict[str, str | None] = {}
        children: dict[str | None, list[str]] = {}
        by_id: dict[str, Record] = {}
        root: str | None = None
        for record in records:
            up = record.parent
            if up is not None and up not in by_id:
                up = root  # parents come first, so this one is in another log
            if root is None:
                root = record.id
            parent[record.id] = up
            children.setdefault(up, []).append(record.id)
            by_id[record.id] = record
        return cls(parent, children, by_id)

    def path(self, entry: str) -> list[str]:
        """Ids from the root to ``entry``."""
        out: list[str] = []
        seen: set[str] = set()
        node: str | None = entry
        while node is not None and node in self.parent and node not in seen:
            seen.add(node)
            out.append(node)
            node = self.parent[node]
        out.reverse()
        return out


def common_ancestor(tree: Tree, a: str, b: str) -> str | None:
    """The last entry two branches share (None if they share nothing)."""
    pa = tree.path(a)
    shared = None
    for x, y in zip(pa, tree.path(b), strict=False):
        if x != y:
            break
        shared = x
    return shared
