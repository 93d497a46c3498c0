"""The PostgreSQL tests' fixtures (`tests.postgres.server`): a server, fresh schemas."""

from tests.postgres.server import pg_schemas, pg_server

__all__ = ["pg_schemas", "pg_server"]
