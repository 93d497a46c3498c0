"""The command line on a PostgreSQL store: ``--store postgresql://…`` as for a directory."""

from __future__ import annotations

import orjson
from click.testing import CliRunner

from tests.postgres.server import Schemas
from threadlog.cli import cli
from threadlog.store.postgres import SCHEMA_VERSION, PostgresStore


def test_ls_events_verify_and_db_upgrade(pg_schemas: Schemas) -> None:
    url = pg_schemas.new()
    runner = CliRunner()
    result = runner.invoke(cli, ["db", "upgrade", "--store", url, "--json"])
    assert result.exit_code == 0, result.output
    assert orjson.loads(result.output) == {"from": 0, "to": SCHEMA_VERSION}
    with PostgresStore(url) as store:
        thread = store.create_thread("alice", title="cli")
        store.append(thread, "turn.started", {"turn_id": "t1", "input": "hi"})
    result = runner.invoke(cli, ["ls", "--json", "--store", url])
    assert result.exit_code == 0, result.output
    assert [t["thread_id"] for t in orjson.loads(result.output)] == [thread]
    result = runner.invoke(cli, ["events", thread, "--store", url])
    assert [orjson.loads(line)["ord"] for line in result.output.splitlines()] == [1, 2]
    result = runner.invoke(cli, ["verify", "--json"], env={"THREADLOG_STORE": url})
    assert result.exit_code == 0, result.output
    result = runner.invoke(cli, ["db", "upgrade", "--store", url])
    assert result.exit_code == 0 and "up to date" in result.output
