"""The embedded store (to be split along its seams)."""

from threadlog.store._home import default_home
from threadlog.store.embedded.store import EmbeddedStore
from threadlog.store.protocol import VerifyReport

__all__ = ["EmbeddedStore", "VerifyReport", "default_home"]
