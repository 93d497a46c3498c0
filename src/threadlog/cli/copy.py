"""``threadlog copy``: threads copied between two stores of any backends, hashes intact.

A thin shell over `threadlog.store.copy.copy_threads`: it opens both stores by target
(`threadlog.open_store`: a directory, ``file://…``, ``postgresql://…``), copies, closes both,
and prints a summary (a line per thread for people, or with ``--json`` the document
``docs/cli.md`` describes). Progress goes to stderr, at most once a second, for long copies.
"""

from __future__ import annotations

import sys
import time

import click

from threadlog.cli import EXIT_STORE, _root_obj, cli, handle_errors
from threadlog.cli._out import clean, print_json
from threadlog.cli._store import open_disk_store, resolve_thread
from threadlog.errors import UsageError
from threadlog.store._home import default_home
from threadlog.store.copy import ThreadCopy, copy_threads
from threadlog.store.open import open_store, parse_target

__all__ = ["copy_cmd"]


def _target(value: str, what: str) -> str:
    """``value`` if it names a store that outlives this command; `UsageError` if not."""
    kind, _ = parse_target(value)  # an unknown scheme is refused here, before anything
    if kind == "memory":
        raise UsageError(
            f"--{what} {value}: an in-memory store lives only inside this command; give a "
            "directory, file:// or postgresql:// URL"
        )
    return value


@cli.command(name="copy")
@click.option(
    "--from",
    "--store",
    "--home",
    "source",
    metavar="DIR|URL",
    help="The store to copy from (--store and --home are aliases) [default: "
    "$THREADLOG_STORE, $THREADLOG_HOME, ~/.threadlog].",
)
@click.option("--to", "dest", required=True, metavar="DIR|URL", help="The store to copy into.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (see docs/cli.md).")
@click.argument("threads", nargs=-1, metavar="[THREAD]...")
@handle_errors
def copy_cmd(source: str | None, dest: str, as_json: bool, threads: tuple[str, ...]) -> None:
    """Copy threads (default: all) from one store to another, record for record.

    Every record keeps its id, ordinal, parent, timestamp and hash, and a fork its lineage,
    so the copy verifies exactly as the original; the blobs the records reference are
    copied too. The source is verified as it is read and the destination after it is
    written. A thread the destination already holds with the same records is skipped (a
    copy can be run again); one it holds with other content is refused, and nothing of it
    is written. Exits 3 if any thread could not be copied (the others still are).

    \b
    Examples:
      threadlog copy --from ~/.threadlog --to postgresql://db.example/threadlog
      threadlog copy --from postgresql://db.example/threadlog --to ./backup THREAD --json
    """
    root = _root_obj()
    as_json = as_json or bool(root.get("json"))
    source = _target(source or root.get("home") or default_home(), "from")
    dest = _target(dest, "to")
    if threads and len(set(threads)) != len(threads):
        raise UsageError("a thread is named twice")
    last = [time.monotonic()]

    def progress(done: int, total: int, result: ThreadCopy) -> None:
        now = time.monotonic()
        if now - last[0] >= 1.0 and done < total:
            last[0] = now
            click.echo(f"copy: {done}/{total} threads", err=True)

    # the source must be a store already: a mistyped --from is an error, not an empty store
    with open_disk_store(source, create=False) as src, open_store(dest) as dst:
        threads = tuple(resolve_thread(src, thread) for thread in threads)
        for thread in threads:
            if not src.exists(thread):
                raise UsageError(f"no thread {thread!r} in {source}")
        report = copy_threads(src, dst, list(threads) or None, progress=progress)
    if as_json:
        print_json(report.to_dict())
    else:
        for result in report.threads:
            line = f"{result.status:8} {result.thread_id}  {result.records} records"
            if result.artifacts:
                line += f", {result.artifacts} artifacts"
            if result.error:
                line += f": {result.error}"
            click.echo(clean(line))
        click.echo(
            f"{report.count('copied')} copied, {report.count('skipped')} skipped, "
            f"{report.count('failed')} failed"
        )
    if not report.ok:
        sys.exit(EXIT_STORE)
