"""A Codex rollout imported while Codex writes a response (its reasoning there, its call not
yet) gives the thread a one-shot import of the finished file gives: the response's items are
read again by the next import. A file that stays as it is (Codex done, or gone) gets what is
there at the import after."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from threadlog import open_store
from threadlog.importers import import_paths, source_format

from ._helpers import conversation

if TYPE_CHECKING:
    from pathlib import Path

SESSION = "0199a213-81c0-7800-8aa1-bbab2a035a77"


def _line(n: int, kind: str, payload: dict[str, Any]) -> str:
    ts = f"2025-10-01T08:03:{n:02d}.000Z"
    return json.dumps({"timestamp": ts, "type": kind, "payload": payload, "ordinal": n}) + "\n"


HEAD = [
    _line(1, "session_meta", {"id": SESSION, "timestamp": "2025-10-01T08:03:00.000Z", "cwd": "/p"}),
    _line(
        2,
        "response_item",
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "ls?"}]},
    ),
    _line(3, "response_item", {"type": "reasoning", "summary": [], "encrypted_content": "e"}),
]
REST = [
    _line(
        4,
        "response_item",
        {"type": "function_call", "name": "shell", "call_id": "c1", "arguments": '{"cmd":"ls"}'},
    ),
    _line(5, "event_msg", {"type": "token_count", "info": {"last_token_usage": {"input": 3}}}),
    _line(6, "response_item", {"type": "function_call_output", "call_id": "c1", "output": "a"}),
    _line(
        7,
        "response_item",
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "a"}]},
    ),
    _line(8, "event_msg", {"type": "token_count", "info": {"last_token_usage": {"input": 5}}}),
]


def _import(home: str, path: Path) -> Any:
    with open_store(home) as store:
        return import_paths(store, source_format("codex"), [str(path)])


def _thread(home: str) -> tuple[list[Any], int]:
    with open_store(home) as store:
        [thread] = store.thread_ids()
        records = store.read(thread)
        assert store.verify(thread).ok
    return conversation(records), sum(r.type == "model.responded" for r in records)


def test_a_response_being_written_is_read_again_when_it_is_whole(tmp_path: Path) -> None:
    path = tmp_path / f"rollout-2025-10-01T08-03-00-{SESSION}.jsonl"
    path.write_text("".join(HEAD))
    first = _import(str(tmp_path / "a"), path)
    assert first.files[0].lines == 3
    with open(path, "a") as f:
        f.write("".join(REST))
    grown = _import(str(tmp_path / "a"), path)
    assert grown.files[0].status == "grown"
    once = tmp_path / "once" / path.name
    once.parent.mkdir()
    once.write_text(path.read_text())
    _import(str(tmp_path / "b"), once)
    assert _thread(str(tmp_path / "a")) == _thread(str(tmp_path / "b"))
    talk, responses = _thread(str(tmp_path / "a"))
    assert responses == 2
    assert talk[:2] == [("user", "ls?"), ("assistant", None, ["shell"])]


def test_a_file_left_inside_a_response_gets_it_at_the_next_import(tmp_path: Path) -> None:
    path = tmp_path / f"rollout-2025-10-01T08-03-00-{SESSION}.jsonl"
    path.write_text("".join(HEAD))
    home = str(tmp_path / "a")
    _import(home, path)
    assert _thread(home)[1] == 0  # the reasoning waits for the rest of its response
    again = _import(home, path)  # nothing came: what is there is the response
    assert again.files[0].records > 0
    assert _thread(home)[1] == 1
    assert _import(home, path).records == 0  # and then it is unchanged
    assert _import(home, path).files[0].status == "unchanged"
