"""The in-memory store against the shipped store contract."""

from pathlib import Path

from threadlog.store.inmemory import MemoryStore
from threadlog.store.protocol import Catalog, Store
from threadlog.testing import StoreContract


class TestMemoryStore(StoreContract):
    def make_store(self, tmp_path: Path) -> MemoryStore:
        return MemoryStore()

    def test_threads_are_listed_by_metadata(self, store: Store) -> None:
        # Listing by metadata is the `Catalog`'s, which the in-memory store does not have
        # (the contract would skip it; CI allows no skip): say so instead.
        assert not isinstance(store, Catalog)
