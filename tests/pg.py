"""A minimal PostgreSQL fixture for the tests of ``threadlog copy``, the worker and the bench.

PROVISIONAL: to be replaced by the shared fixture of the PostgreSQL store's tests once the
branches meet. ``pg_url`` is a fresh database on the server ``$THREADLOG_TEST_PG`` names
(default: the local one), dropped after the test; without a server, or without the
PostgreSQL store, the test is skipped, except under ``CI=true``, where it fails.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import pytest

ADMIN = os.environ.get("THREADLOG_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


def _unavailable(why: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"PostgreSQL tests must run under CI: {why}")
    pytest.skip(why)


@pytest.fixture
def pg_url() -> Iterator[str]:
    """The URL of a new, empty database, dropped after the test."""
    try:
        import psycopg
    except ImportError:
        _unavailable("psycopg is not installed (pip install 'threadlog[postgres]')")
    try:
        from threadlog.store.open import parse_target

        parse_target("postgresql://x/y")
    except Exception as exc:
        _unavailable(f"no PostgreSQL store: {exc}")
    name = f"tl_test_{os.getpid()}_{secrets.token_hex(4)}"
    try:
        with psycopg.connect(ADMIN, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.OperationalError as exc:
        _unavailable(f"no PostgreSQL server at {ADMIN}: {exc}")
    try:
        yield urlunsplit(urlsplit(ADMIN)._replace(path="/" + name))
    finally:
        with psycopg.connect(ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
