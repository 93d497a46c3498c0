"""The in-memory store against the shipped store contract."""

from pathlib import Path

from threadlog.store.inmemory import MemoryStore
from threadlog.testing import StoreContract


class TestMemoryStore(StoreContract):
    def make_store(self, tmp_path: Path) -> MemoryStore:
        return MemoryStore()
