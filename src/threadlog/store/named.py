"""Caller-chosen thread ids (the check every backend applies to ``create_thread(thread_id=…)``),
and archiving, which every backend does alike (`archive`).

An adapter names its threads (`threadlog.model.ids.named_thread_id`) so that it finds a
framework's thread again without a lookup table; creating one is idempotent. A backend calls
`check_thread_id` first and, when the thread is there already, `same_creation` on its
``thread.created`` data to decide between returning the id and raising `ThreadExists`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from threadlog.errors import InvalidTransition, ThreadExists, UsageError
from threadlog.model.events import ThreadArchived
from threadlog.model.ids import is_uuid, uuid7_millis

if TYPE_CHECKING:
    from threadlog.store.protocol import Store

__all__ = ["archive", "check_thread_id", "same_creation"]

_SETTINGS = ("principal", "config", "lineage", "title")


def check_thread_id(thread_id: object, *, deleted: bool) -> str:
    """``thread_id`` checked: a lower-case UUIDv7 string, and not one deleted. Raises
    `UsageError` or `ThreadExists`."""
    if not isinstance(thread_id, str) or not is_uuid(thread_id) or thread_id[14] != "7":
        raise UsageError(f"a thread id must be a lower-case UUIDv7 string, got {thread_id!r:.80}")
    uuid7_millis(thread_id)
    if deleted:
        raise ThreadExists(thread_id, "was deleted; a deleted thread id is never reused")
    return thread_id


def same_creation(thread_id: str, stored: Any, wanted: dict[str, Any]) -> str:
    """``thread_id`` if the stored ``thread.created`` data has the settings of ``wanted``
    (principal, config, lineage, title); else raises `ThreadExists`."""
    if not isinstance(stored, dict) or any(stored.get(key) != wanted.get(key) for key in _SETTINGS):
        raise ThreadExists(thread_id, "exists with other settings (principal, title or config)")
    return thread_id


def archive(store: Store, thread_id: str, archived: bool) -> bool:
    """`Retention.archive_thread` for any backend: append ``thread.archived`` unless the
    thread is in that state already (the reducer refuses a repeat: no read comes first)."""
    try:
        store.append(thread_id, ThreadArchived(archived=archived), durable=True)
    except InvalidTransition:
        if store.state(thread_id, history=False).archived == archived:
            return False
        raise
    return True
