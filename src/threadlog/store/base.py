"""Compatibility: the port moved to `threadlog.store.protocol`, the checks to `validate`."""

from threadlog.store.protocol import ErrorListener, Listener, Store
from threadlog.store.validate import (
    check_new_thread,
    escape_lookalikes,
    normalize_append,
    refuse_lookalikes,
)

__all__ = [
    "ErrorListener",
    "Listener",
    "Store",
    "check_new_thread",
    "escape_lookalikes",
    "normalize_append",
    "refuse_lookalikes",
]
