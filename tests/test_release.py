"""The release check: the wheel holds the library only, installs into a fresh virtual
environment with its dependencies, and what the README tells a new user to run works there.

One wheel and one venv per test session (`release`); pip's own cache is reused, so after
the first run no package is downloaded again (pip still asks the registry: without one the
check is skipped, except under ``CI=true``, where it must run). The installed copy is the one
exercised: the commands run from a scratch directory with ``PYTHONPATH`` removed, and a test
checks that ``threadlog`` is imported from the venv, not from ``src/``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from threadlog._version import __version__

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


@dataclass(frozen=True)
class Release:
    wheel: Path
    python: Path
    bin: Path
    scratch: Path

    def env(self) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "THREADLOG_HOME", "THREADLOG_STORE")
        }
        env["PATH"] = f"{self.bin}{os.pathsep}{env.get('PATH', '')}"
        env["COLUMNS"] = "200"
        return env

    def run(self, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` in the venv (from the scratch directory, stdin closed); must succeed."""
        out = subprocess.run(
            list(argv),
            cwd=self.scratch,
            env=self.env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert out.returncode == 0, f"{argv} exited {out.returncode}:\n{out.stdout}\n{out.stderr}"
        return out

    def pip(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """The running interpreter's pip, acting on the venv (``--python``): the venv needs no
        pip of its own, and pip's cache is the one this machine already has."""
        return _pip("--python", str(self.python), *args, timeout=timeout)


def _pip(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "pip", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


def _unavailable(why: str) -> None:
    if IN_CI:
        pytest.fail(f"the release check must run under CI=true: {why}")
    pytest.skip(why)


@pytest.fixture(scope="session")
def release(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    base = tmp_path_factory.mktemp("release")
    dist = base / "dist"
    if _pip("--version").returncode != 0:
        _unavailable(f"no pip for {sys.executable}")
    # the build backend (hatchling) comes through pip's build isolation
    built = _pip("wheel", str(ROOT), "--no-deps", "--wheel-dir", str(dist), "--quiet")
    if built.returncode != 0:
        _unavailable(f"pip wheel failed (no package registry?):\n{built.stderr[-2000:]}")
    (wheel,) = dist.glob("threadlog-*.whl")
    venv = base / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    bin_dir = venv / "bin"
    scratch = base / "scratch"
    scratch.mkdir()
    rel = Release(wheel=wheel, python=bin_dir / "python", bin=bin_dir, scratch=scratch)
    installed = rel.pip("install", "--quiet", str(wheel))
    if installed.returncode != 0:
        _unavailable(f"pip install of the wheel failed:\n{installed.stderr[-2000:]}")
    yield rel


def test_the_wheel_ships_the_library_only(release: Release) -> None:
    names = zipfile.ZipFile(release.wheel).namelist()
    dist_info = f"threadlog-{__version__}.dist-info/"
    assert all(n.startswith(("threadlog/", dist_info)) for n in names), [
        n for n in names if not n.startswith(("threadlog/", dist_info))
    ]
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    assert not [n for n in names if "/harness/" in n or n.startswith("threadlog/tests")]
    assert "threadlog/py.typed" in names
    assert "threadlog/__main__.py" in names
    assert f"{dist_info}licenses/LICENSE" in names
    assert (
        "MIT License"
        in zipfile.ZipFile(release.wheel).read(f"{dist_info}licenses/LICENSE").decode()
    )


def test_the_installed_metadata(release: Release) -> None:
    out = release.pip("show", "--verbose", "threadlog").stdout
    fields = dict(
        line.split(": ", 1) for line in out.splitlines() if ": " in line and not line[0].isspace()
    )
    assert fields["Name"] == "threadlog" and fields["Version"] == __version__
    assert "MIT" in (fields.get("License-Expression", "") + fields.get("License", ""))
    assert fields["Author"] == "The threadlog authors"
    for name in ("Homepage", "Documentation", "Source", "Issues"):
        assert re.search(rf"^\s+{name}, https://", out, re.M), f"no {name} URL in:\n{out}"
    classifiers = {line.strip() for line in out.split("Classifiers:")[1].splitlines()}
    assert {
        "Operating System :: POSIX :: Linux",
        "Operating System :: MacOS",
        "Typing :: Typed",
    } <= classifiers
    assert "Operating System :: OS Independent" not in classifiers


def test_threadlog_is_imported_from_the_venv(release: Release) -> None:
    out = release.run(str(release.python), "-c", "import threadlog; print(threadlog.__file__)")
    assert Path(out.stdout.strip()).is_relative_to(release.python.parent.parent)


def quickstarts() -> list[str]:
    """The Python blocks of the README's ``## Quickstart`` sections."""
    blocks: list[str] = []
    for section in re.split(r"^## ", README.read_text(), flags=re.M):
        if section.startswith("Quickstart"):
            blocks += re.findall(r"```python\n(.*?)```", section, re.S)
    return blocks


def test_the_readme_quickstarts_run_in_the_venv(release: Release) -> None:
    blocks = quickstarts()
    assert len(blocks) >= 2  # the library one and the agent one
    for n, code in enumerate(blocks):
        code = code.replace("/tmp/threadlog-", str(release.scratch / f"qs{n}-"))
        release.run(str(release.python), "-c", code)


def test_the_command_works_in_the_venv(release: Release) -> None:
    assert "Usage: threadlog" in release.run("threadlog", "--help").stdout
    assert "Usage: " in release.run(str(release.python), "-m", "threadlog", "--help").stdout
    home = str(release.scratch / "demo-home")
    # non-interactive (stdin closed): the demo asks nobody, declines the write and says so
    out = release.run("threadlog", "demo", "--home", home, "--pause", "0")
    assert "declined" in out.stdout and "log verified" in out.stdout
    rows = orjson.loads(release.run("threadlog", "ls", "--json", "--home", home).stdout)
    assert [row["principal"] for row in rows] == ["demo"]


def test_the_library_needs_no_cli_or_provider_packages(tmp_path: Path) -> None:
    """`import threadlog`, `open_store` and a runtime session with a scripted model work with
    click, rich, httpx and httpx-sse made unimportable: they are installed for the command
    and the providers (`pip install threadlog` gives a working `threadlog`), never needed by
    the library itself."""
    code = f"""
import sys
for name in ("click", "rich", "httpx", "httpx_sse"):
    sys.modules[name] = None  # `import name` now raises ImportError
import asyncio
import threadlog
from threadlog.runtime import Reply, ScriptedModel

with threadlog.open_store({str(tmp_path / "store")!r}) as store:
    thread = store.create_thread("alice")
    store.append(thread, "turn.started", {{"turn_id": "t1", "input": "hello"}})
    assert store.verify(thread).ok

async def main() -> None:
    async with threadlog.Runtime({str(tmp_path / "agent")!r}, model=ScriptedModel([Reply("Hi.")])) as rt:
        session = await rt.create("alice")
        await session.submit("hello")
        await session.wait_idle(timeout=30)
        assert rt.store.state(session.thread_id).turns

asyncio.run(main())
print("ok")
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
    assert "Traceback" not in out.stderr, out.stderr
