"""``threadlog serve`` in its own process, on a free loopback port, for end-to-end tests."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LISTENING = re.compile(r"listening on (http://\S+)")


class ServerProcess:
    """Starts ``threadlog serve --home HOME --port PORT ARGS…`` and reads the URL it prints.

    ``port`` 0 (the default) takes a free one; a restart passes the port of the server it
    replaces, so that clients reconnect to the same address. ``lines`` collects what the
    server prints; `stop` sends a signal and returns the exit code.
    """

    def __init__(self, home: str, *args: str, port: int = 0, start_timeout: float = 30.0) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
        env.pop("THREADLOG_TOKEN", None)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "threadlog",
                "serve",
                "--home",
                home,
                "--port",
                str(port),
                *args,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        self.lines: list[str] = []
        self.url = self._wait_url(start_timeout)
        self._drainer = threading.Thread(target=self._drain, daemon=True)
        self._drainer.start()

    def _wait_url(self, timeout: float) -> str:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.lines.append(line)
            if found := LISTENING.search(line):
                return found.group(1)
        self.proc.kill()
        self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        raise AssertionError("the server did not start:\n" + "".join(self.lines))

    @property
    def port(self) -> int:
        """The port the server listens on."""
        return int(self.url.rsplit(":", 1)[1].split("/")[0])

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        """Send ``sig`` (unless it has exited) and wait; the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("the server did not stop:\n" + "".join(self.lines)) from None
        finally:
            self._drainer.join(timeout=5)
            if self.proc.stdout is not None:
                self.proc.stdout.close()
        return code

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.stop()
