"""The embedded store's credentials file: durable across reopen, private, never lost to a race,
never silently reset (the shared behaviour is in the contract, `testing/contract/credentials`)."""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from threadlog import StorageError, open_store
from threadlog.errors import InsecureHome
from threadlog.store._fileops import FileOps
from threadlog.store.embedded import EmbeddedStore
from threadlog.store.embedded.credentials import CREDENTIALS_FILE, CredentialFile
from threadlog.testing.contract.credentials import credential


def test_credentials_survive_a_reopen(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with EmbeddedStore(home) as store:
        store.add_credential(credential(1))
        store.add_credential(credential(2, "bob"))
        store.remove_credential(credential(1).token_id)
    with EmbeddedStore(home) as store:
        assert store.credentials() == [credential(2, "bob")]


def test_the_file_is_private_and_holds_the_credentials_as_json(tmp_path: Path) -> None:
    home = tmp_path / "home"
    old = os.umask(0o022)
    try:
        with EmbeddedStore(home) as store:
            store.add_credential(credential(1))
    finally:
        os.umask(old)
    path = home / CREDENTIALS_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE((home / "credentials.lock").stat().st_mode) == 0o600
    c = credential(1)
    assert orjson.loads(path.read_bytes()) == {
        "version": 1,
        "credentials": [
            {
                "token_id": c.token_id,
                "principal": c.principal,
                "digest": c.digest,
                "created_at": c.created_at,
            }
        ],
    }
    assert not [n for n in os.listdir(home) if n.endswith(".tmp")]


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"{not json", "damaged"),
        (b"[]", "version"),
        (b'{"version": 2, "credentials": []}', "version"),
        (b'{"version": 1, "credentials": {}}', "not a list"),
        (b'{"version": 1, "credentials": [{"token_id": "tok_1"}]}', "credential 1: .*without"),
    ],
)
def test_a_damaged_file_is_an_error_naming_it_never_a_reset(
    tmp_path: Path, content: bytes, why: str
) -> None:
    home = tmp_path / "home"
    with EmbeddedStore(home) as store:
        path = home / CREDENTIALS_FILE
        path.write_bytes(content)
        path.chmod(0o600)
        for attempt in (
            store.credentials,
            lambda: store.add_credential(credential(1)),
            lambda: store.remove_credential("tok_1"),
        ):
            with pytest.raises(StorageError, match=why) as caught:
                attempt()
            assert str(path) in str(caught.value)
        assert path.read_bytes() == content  # left as found, for its owner to look at


def test_two_credentials_with_one_digest_on_disk_are_damage(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with EmbeddedStore(home) as store:
        store.add_credential(credential(1))
        path = home / CREDENTIALS_FILE
        doc = orjson.loads(path.read_bytes())
        doc["credentials"].append({**doc["credentials"][0], "token_id": "tok_other"})
        path.write_bytes(orjson.dumps(doc))
        with pytest.raises(StorageError, match="there twice"):
            store.credentials()


def test_a_file_others_may_write_is_refused(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with EmbeddedStore(home) as store:
        store.add_credential(credential(1))
        (home / CREDENTIALS_FILE).chmod(0o622)
        with pytest.raises(InsecureHome, match="chmod 600"):
            store.credentials()
        with pytest.raises(InsecureHome):
            store.add_credential(credential(2))


def test_a_failed_write_keeps_the_old_list(tmp_path: Path) -> None:
    class FullDisk(FileOps):
        def fsync(self, fd: int) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

    home = tmp_path / "home"
    with EmbeddedStore(home) as store:
        store.add_credential(credential(1))
    before = (home / CREDENTIALS_FILE).read_bytes()
    full = CredentialFile(str(home), FullDisk())
    with pytest.raises(StorageError, match="cannot write the credentials file"):
        full.add(credential(2))
    assert (home / CREDENTIALS_FILE).read_bytes() == before
    assert CredentialFile(str(home), FileOps()).read() == [credential(1)]
    assert not [n for n in os.listdir(home) if n.endswith(".tmp")]


ADD_MANY = """
import sys
from threadlog.store._fileops import DEFAULT_FILEOPS
from threadlog.store.embedded.credentials import CredentialFile
from threadlog.testing.contract.credentials import credential

home, first = sys.argv[1], int(sys.argv[2])
sys.stdin.readline()  # start together
file = CredentialFile(home, DEFAULT_FILEOPS)
for n in range(first, first + 40):
    file.add(credential(n))
"""


def test_adds_from_two_processes_at_once_all_land(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with open_store(home):
        pass  # a prepared home
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    children = [
        subprocess.Popen(
            [sys.executable, "-c", ADD_MANY, str(home), str(first)],
            stdin=subprocess.PIPE,
            env=env,
        )
        for first in (0, 100)
    ]
    try:
        for child in children:
            assert child.stdin is not None
            child.stdin.write(b"go\n")
            child.stdin.close()
        assert [child.wait(timeout=120) for child in children] == [0, 0]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    stored = CredentialFile(str(home), FileOps()).read()
    expected = [credential(n).token_id for n in [*range(40), *range(100, 140)]]
    assert sorted(c.token_id for c in stored) == sorted(expected)
