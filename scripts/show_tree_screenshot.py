"""Make docs/images/show-tree.txt (and .svg): ``threadlog show --tree`` on a branched
conversation, as a 100x40 terminal shows it.

The text "screenshot" is what tmux's screen holds (``capture-pane -p -e``: the colours kept as
ANSI escapes, so ``cat docs/images/show-tree.txt`` in a terminal shows it as it was); the SVG
is the same lines recorded by rich. Needs tmux. Run from the repository root:

    python scripts/show_tree_screenshot.py
"""

from __future__ import annotations

import io
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from threadlog import open_store  # noqa: E402

CONVERSATION = [
    ("How should the client retry failed requests?", "Three tries, exponential backoff."),
    ("Cap the wait too.", "Capped at 30 s per wait, then give up."),
]
BRANCHES = [
    [("What about idempotency keys?", "Send one per request; the server dedupes.")],
    [("Try a token bucket instead.", "A bucket of 10, refilled at 1/s: smoother under load.")],
    [
        ("Keep backoff, add jitter.", "Full jitter: sleep a random time up to the cap."),
        ("Write it up for the README.", "Done: README.md has a Retry policy section."),
    ],
]


def _exchange(store: object, thread: str, n: int, user: str, model: str, parent: str | None) -> str:
    turn = f"turn-{n}"
    extra = {} if parent is None else {"parent": parent}
    store.append(thread, "turn.started", {"turn_id": turn, "input": user}, **extra)  # type: ignore[attr-defined]
    store.append(thread, "step.started", {"turn_id": turn, "step_id": f"{turn}.1"})  # type: ignore[attr-defined]
    answer = store.append(  # type: ignore[attr-defined]
        thread,
        "model.responded",
        {
            "turn_id": turn,
            "step_id": f"{turn}.1",
            "message": {"role": "assistant", "content": model},
        },
    )
    store.append(thread, "turn.ended", {"turn_id": turn, "outcome": "completed"})  # type: ignore[attr-defined]
    return str(answer.id)


def build(home: str) -> str:
    """A conversation that went back to its second answer three times."""
    with open_store(home) as store:
        thread = store.create_thread("demo", title="Document the retry policy")
        answer: str | None = None
        n = 0
        for user, model in CONVERSATION:
            answer = _exchange(store, thread, n, user, model, answer)
            n += 1
        fork_point = answer
        for branch in BRANCHES:
            answer = fork_point
            for user, model in branch:
                answer = _exchange(store, thread, n, user, model, answer)
                n += 1
        store.flush()
    return thread


def main() -> int:
    if shutil.which("tmux") is None:
        print("tmux is needed", file=sys.stderr)
        return 2
    out = ROOT / "docs" / "images"
    out.mkdir(parents=True, exist_ok=True)
    home = tempfile.mkdtemp(prefix="threadlog-shot-")
    thread = build(home)
    session = f"threadlog-shot-{os.getpid()}"
    command = " ".join(
        [
            "env",
            f"PYTHONPATH={shlex.quote(str(ROOT / 'src'))}",
            "TERM=xterm-256color",
            "COLORTERM=truecolor",
            shlex.quote(sys.executable),
            "-m threadlog show",
            thread[:13],
            "--tree --home",
            shlex.quote(home),
            "; sleep 30",
        ]
    )
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", session, "-x", "100", "-y", "40", command], check=True
    )
    try:
        screen = ""
        for _ in range(60):
            time.sleep(0.5)
            screen = subprocess.run(
                ["tmux", "capture-pane", "-p", "-e", "-t", session],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            if "active leaf" in screen:
                break
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], check=False)
    screen = screen.replace(home, "~/.threadlog").rstrip() + "\n"
    (out / "show-tree.txt").write_text(screen, encoding="utf-8")

    from rich.console import Console

    from threadlog.cli._tree import render_tree

    with open_store(home) as store:
        records = store.read(thread)
    console = Console(record=True, width=100, force_terminal=True, file=io.StringIO())
    for line in render_tree(records):
        console.print(line.text(), no_wrap=True)
    console.save_svg(str(out / "show-tree.svg"), title="threadlog show --tree")
    shutil.rmtree(home, ignore_errors=True)
    print(f"wrote {out / 'show-tree.txt'} and {out / 'show-tree.svg'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
