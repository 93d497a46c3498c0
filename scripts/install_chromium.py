"""Install the browser the UI's tests drive: Debian's ``chromium`` package, when it is missing.

Run by ``make .venv/.installed``. It does nothing when a Chromium is already on the PATH, and
only reports (exit 0) when it cannot install one (no apt, not root, no package): the browser
tests then skip with a loud reason, or fail under ``CI=true``. Playwright's own browser
download (``playwright install``) is never used.

Usage: python scripts/install_chromium.py
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def found() -> str | None:
    """The first Chromium on the PATH."""
    for name in NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def main() -> int:
    if path := found():
        print(f"install_chromium: found {path}")
        return 0
    apt = shutil.which("apt-get")
    if apt is None:
        print("install_chromium: no chromium and no apt-get; the browser tests will skip")
        return 0
    prefix = [] if os.geteuid() == 0 else (["sudo", "-n"] if shutil.which("sudo") else None)
    if prefix is None:
        print("install_chromium: not root and no sudo; run: apt-get install -y chromium")
        return 0
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for step in ([apt, "update"], [apt, "install", "-y", "--no-install-recommends", "chromium"]):
        print("install_chromium:", " ".join(step), flush=True)
        if subprocess.run([*prefix, *step], env=env, check=False).returncode != 0:
            print("install_chromium: the install failed; the browser tests will skip")
            return 0
    print(f"install_chromium: installed {found()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
