"""The embedded store against the shipped store contract."""

from pathlib import Path

from threadlog.store.embedded import EmbeddedStore
from threadlog.testing import StoreContract


class TestEmbeddedStore(StoreContract):
    def make_store(self, tmp_path: Path) -> EmbeddedStore:
        return EmbeddedStore(tmp_path / "store-home")
