"""The PostgreSQL server the tests use, and a fresh schema per test.

`pg_server` (session scope) finds a server: ``$THREADLOG_TEST_PG`` (default
``postgresql://postgres@127.0.0.1:5432/test``) when it answers; else a throwaway cluster made
with ``initdb``/``pg_ctl`` in a temporary directory when those binaries are on the PATH (as
the ``postgres`` user when the tests run as root), stopped at the end of the session; else the
PostgreSQL tests are skipped, **except under ``CI=true``, where they fail**: a CI run that
silently skipped them would pass without testing the backend.

`pg_schemas` (function scope) makes uniquely named schemas (``tl_<pid>_<random>``) on that
server for a test and drops them after it, so tests never share tables, with each other or
with anybody else using the server. A schema is much cheaper than a database (``CREATE
DATABASE`` copies a template: ~0.3 s here, against a few ms for a schema and its tables).

Import the fixtures into a test module (``from tests.postgres.server import pg_schemas,
pg_server``) or a conftest.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["DEFAULT_URL", "Schemas", "pg_schemas", "pg_server", "with_schema"]

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"


def with_schema(url: str, schema: str) -> str:
    """``url`` with ``?schema=`` set (threadlog's own parameter; it strips it for libpq)."""
    return f"{url}{'&' if '?' in url else '?'}schema={schema}"


def _answers(url: str) -> str | None:
    """None if a server answers at ``url``, else why not."""
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return str(exc).strip() or type(exc).__name__
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _throwaway_cluster(why: str) -> tuple[str, list[str], str]:
    """Start a cluster with initdb/pg_ctl: ``(url, pg_ctl stop command, data dir)``."""
    initdb, pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
    if initdb is None or pg_ctl is None:
        raise RuntimeError(f"no server answers ({why}) and initdb/pg_ctl are not on the PATH")
    root = tempfile.mkdtemp(prefix="threadlog-pg-")
    data = os.path.join(root, "data")
    prefix: list[str] = []
    if os.geteuid() == 0:  # initdb refuses to run as root
        runuser = shutil.which("runuser")
        if runuser is None:
            raise RuntimeError("running as root and no runuser to start a cluster as postgres")
        prefix = [runuser, "-u", "postgres", "--"]
        shutil.chown(root, "postgres")
    port = _free_port()
    subprocess.run(
        [*prefix, initdb, "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8"],
        check=True,
        capture_output=True,
    )
    opts = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=on"
    subprocess.run(
        [*prefix, pg_ctl, "-D", data, "-o", opts, "-l", os.path.join(root, "log"), "-w", "start"],
        check=True,
        capture_output=True,
    )
    return f"postgresql://postgres@127.0.0.1:{port}/postgres", [*prefix, pg_ctl], data


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """The URL of a PostgreSQL server to test against (module docstring)."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail("psycopg is not installed (CI=true: the PostgreSQL tests must run)")
        pytest.skip("psycopg is not installed (pip install 'threadlog[postgres]')")
    url = os.environ.get("THREADLOG_TEST_PG", DEFAULT_URL)
    why = _answers(url)
    if why is None:
        yield url
        return
    try:
        url, pg_ctl, data = _throwaway_cluster(why)
    except (RuntimeError, OSError, subprocess.CalledProcessError) as exc:
        message = f"no PostgreSQL server for the tests: {exc}"
        if os.environ.get("CI") == "true":
            pytest.fail(message + " (CI=true: the PostgreSQL tests must run)")
        pytest.skip(message)
    try:
        yield url
    finally:
        subprocess.run([*pg_ctl, "-D", data, "-m", "fast", "stop"], capture_output=True)
        shutil.rmtree(os.path.dirname(data), ignore_errors=True)


class Schemas:
    """Fresh schemas on the test server, dropped at the end of the test."""

    def __init__(self, server: str) -> None:
        self.server = server
        self.made: list[str] = []

    def name(self) -> str:
        """A new unique schema name (nothing created yet: the store creates it)."""
        name = f"tl_{os.getpid()}_{secrets.token_hex(4)}"
        self.made.append(name)
        return name

    def new(self) -> str:
        """The URL of a new, empty schema (the store migrates it on open)."""
        return with_schema(self.server, self.name())

    def drop_all(self) -> None:
        import psycopg

        if not self.made:
            return
        with psycopg.connect(self.server, autocommit=True) as conn:
            conn.execute("SET lock_timeout = '2s'")  # a backend still going: retry, never hang
            for name in self.made:
                for _ in range(50):
                    try:
                        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
                        break
                    except psycopg.errors.LockNotAvailable:
                        time.sleep(0.1)
                    except psycopg.errors.DeadlockDetected:
                        time.sleep(0.1)


@pytest.fixture
def pg_schemas(pg_server: str) -> Iterator[Schemas]:
    """Make schemas with ``pg_schemas.new()`` (a URL); all are dropped after the test."""
    schemas = Schemas(pg_server)
    try:
        yield schemas
    finally:
        schemas.drop_all()
