"""The PostgreSQL store against the shipped store contract (a fresh schema per test)."""

from pathlib import Path

import pytest
from tests.postgres.server import Schemas, pg_schemas, pg_server  # noqa: F401 (fixtures)

from threadlog.testing import StoreContract


class TestPostgresStore(StoreContract):
    @pytest.fixture(autouse=True)
    def _schemas(self, pg_schemas: Schemas) -> None:  # noqa: F811
        self.schemas = pg_schemas

    def make_store(self, tmp_path: Path):  # type: ignore[no-untyped-def]
        from threadlog.store.postgres import PostgresStore

        return PostgresStore(self.schemas.new())
