"""Branch-carried settings: the model, thinking level and active tools follow the leaf (pure).

Seed 002 (Pi's session tree) records a model change, a thinking level and the active tools as
entries of the conversation tree, so that going back to an older entry brings back the
settings that held there. Here a ``config.changed`` is a tree entry
(`threadlog.model.tree.ENTRY_TYPES`) and its keys fall in two kinds:

* **branch-carried** (`BRANCH_SETTINGS`: ``model``, ``thinking``, ``tools``): in effect on
  the branch that continues the change. The effective value is a function of the active
  leaf's path — the last change of the key between the root and the leaf — not of the log
  order. ``leaf.moved`` to an entry before the change restores the earlier value; moving
  back to the changed branch brings the change back.
* **thread-level** (everything else: instructions, cwd, approval policy, budget…): the last
  change in log order wins, whatever the leaf. The immutable identity (principal, creation
  time, lineage) never changes.

The reducer keeps, for every record under a branch-carried change, the id of that change
(its *anchor*) and, for every such change, the settings after it; `ThreadState.config`
always shows the settings of the active leaf. A thread that never changes a branch-carried
key pays nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from threadlog.model.envelope import Record
    from threadlog.model.state import ThreadState

__all__ = ["BRANCH_SETTINGS", "ROOT", "apply_change", "follow", "settings_at"]

BRANCH_SETTINGS: Final = frozenset({"model", "thinking", "tools"})
"""Config keys carried by the branch (the rest are thread-level)."""

ROOT: Final = ""
"""Key of the thread's initial branch-carried settings in `ThreadState.branch_settings`."""


def settings_at(state: ThreadState, entry: str | None) -> dict[str, Any]:
    """The branch-carried settings in effect at ``entry`` (the thread's initial ones for an
    entry no change precedes, or None)."""
    if not state.branch_settings:  # never changed: the config holds the initial settings
        return {key: state.config[key] for key in BRANCH_SETTINGS if key in state.config}
    anchor = state.branch_anchor.get(entry) if entry is not None else None
    return state.branch_settings[anchor or ROOT]


def apply_change(state: ThreadState, record: Record, changes: dict[str, Any]) -> None:
    """Apply a ``config.changed``: thread-level keys at once; branch-carried ones as the
    settings of the branch that continues ``record``."""
    branch: dict[str, Any] = {}
    for key, value in changes.items():
        if key in BRANCH_SETTINGS:
            branch[key] = value
        elif value is None:
            state.config.pop(key, None)
        else:
            state.config[key] = value
    if not branch:
        return
    if not state.branch_settings:
        # the first branch-carried change: keep the initial settings to come back to
        state.branch_settings[ROOT] = settings_at(state, None)
    after = dict(settings_at(state, record.parent))
    for key, value in branch.items():
        if value is None:
            after.pop(key, None)
        else:
            after[key] = value
    state.branch_settings[record.id] = after


def follow(state: ThreadState, record: Record, moved: bool) -> None:
    """After ``record`` was applied: note its anchor, and if the active leaf ``moved``, make
    `ThreadState.config` show the settings of the new leaf."""
    if record.id in state.branch_settings:
        state.branch_anchor[record.id] = record.id
    elif record.parent is not None:
        anchor = state.branch_anchor.get(record.parent)
        if anchor is not None:
            state.branch_anchor[record.id] = anchor
    if moved and state.branch_settings:
        current = settings_at(state, state.leaf)
        for key in BRANCH_SETTINGS:
            if key in current:
                state.config[key] = current[key]
            else:
                state.config.pop(key, None)
