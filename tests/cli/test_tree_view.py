"""``show --tree`` reads like a tree (issue 17, point 2): linear runs at one indentation,
only branch points indent, no recursion (5,000 messages), elided around the active path with
a count, and ``--json`` gives the tree as data."""

from __future__ import annotations

import json

import pytest
from tests.cli.schemas import TREE, check
from tests.cli.threads import branched, exchange, linear, run

from threadlog import open_store
from threadlog.cli._tree import WINDOW


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, str]:
    home = str(tmp_path_factory.mktemp("trees") / "store")
    with open_store(home) as store:
        return home, linear(store, 5000), branched(store, 50)


def test_a_long_linear_thread_stays_at_one_indentation_and_is_elided(
    big: tuple[str, str, str],
) -> None:
    home, thread, _ = big
    code, out, err = run("show", thread, "--tree", "--home", home)
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) <= WINDOW + 1
    assert lines[0] == f"thread {thread}"
    assert lines[1] == "2 user: question 0"
    elided = [line for line in lines if line.startswith("… ")]
    assert elided == [f"… {5000 - (WINDOW - 1):,} earlier messages"]
    assert lines[-1] == "10000 model: answer 2499  ◀ active leaf"
    assert not any(line.startswith(("│", "├", " ")) for line in lines)


def test_all_draws_every_one_of_5000_messages_without_recursion(
    big: tuple[str, str, str],
) -> None:
    home, thread, _ = big
    code, out, err = run("show", thread, "--tree", "--all", "--home", home)
    assert code == 0, err
    lines = out.splitlines()[1:]
    assert len(lines) == 5000
    assert all(line[0].isdigit() for line in lines)  # no staircase
    assert lines[2500] == "5002 user: question 1250"


def test_fifty_branches_indent_once_and_the_active_path_ends_at_the_bottom(
    big: tuple[str, str, str],
) -> None:
    home, _, thread = big
    code, out, err = run("show", thread, "--tree", "--home", home)
    assert code == 0, err
    lines = out.splitlines()
    sides = [line for line in lines if line.startswith("├─ ")]
    assert len(sides) == 49  # every branch but the active one hangs off the branch point
    assert all("branch user: branch" in line and "(+3 more entries" in line for line in sides)
    assert lines[-4:] == [
        "398 user: branch 49 try",
        "400 model: branch 49 says",
        "402 user: branch 49 more",
        "404 model: branch 49 again  ◀ active leaf",
    ]
    code, out, _ = run("show", thread, "--tree", "--all", "--home", home)
    lines = out.splitlines()
    assert sum(line.startswith("├─ ") for line in lines) == 49
    assert sum(line.startswith("│  ") for line in lines) == 49 * 3
    assert max(len(line) - len(line.lstrip("│├─ ")) for line in lines) == 3  # one level


def test_a_branch_point_inside_a_side_branch_indents_one_more_level(tmp_path: str) -> None:
    home = f"{tmp_path}/store"
    with open_store(home) as store:
        thread = store.create_thread("t", title="nested")
        _, root = exchange(store, thread, 0, "root", "root answer")
        _, side = exchange(store, thread, 1, "side", "side answer", root)
        exchange(store, thread, 2, "side a", "a", side)
        exchange(store, thread, 3, "side b", "b", side)
        exchange(store, thread, 4, "main", "main answer", root)
        store.flush()
    out = run("show", thread, "--tree", "--home", home)[1].splitlines()
    assert out[1:] == [
        "2 user: root",
        "4 model: root answer",
        "├─ 6 branch user: side",
        "│  8 model: side answer",
        "│  ├─ 10 branch user: side a",
        "│  │  12 model: a",
        "│  14 user: side b",
        "│  16 model: b",
        "18 user: main",
        "20 model: main answer  ◀ active leaf",
    ]


def test_tree_json_is_the_whole_tree_as_data(big: tuple[str, str, str]) -> None:
    home, linear_thread, thread = big
    doc = check(json.loads(run("show", thread, "--tree", "--json", "--home", home)[1]), TREE)
    entries = doc["entries"]
    assert len(entries) == 2 + 50 * 4
    by_id = {e["id"]: e for e in entries}
    root_answer = entries[1]
    assert root_answer["children"] == 50
    assert sum(e["parent"] == root_answer["id"] for e in entries) == 50
    assert [e["leaf"] for e in entries].count(True) == 1 and entries[-1]["leaf"] is True
    active = [e for e in entries if e["active"]]
    assert len(active) == 6 and all(by_id[e["parent"]]["active"] for e in active[1:])
    doc = check(json.loads(run("show", linear_thread, "--tree", "--json", "--home", home)[1]), TREE)
    assert len(doc["entries"]) == 5000  # never elided


def test_a_label_or_leaf_on_a_record_under_an_entry_marks_that_entry(tmp_path: str) -> None:
    """An imported Pi label names a message's last record (its tool call's), and a session
    may end on a note: both mark the message they belong to."""
    home = str(tmp_path) + "/store"
    with open_store(home) as store:
        thread = store.create_thread("local")
        _, answer = exchange(store, thread, 1, "first", "one")
        under = store.append(thread, "custom.note", {"n": 1}, parent=answer)  # not an entry
        store.append(thread, "label.set", {"entry": under.id, "label": "start"})
        last = store.append(thread, "custom.note", {"n": 2}, parent=under.id)
        store.append(thread, "leaf.moved", {"to": last.id})
    code, out, err = run("show", thread, "--tree", "--home", home)
    assert code == 0, err
    [line] = [line for line in out.splitlines() if "model: one" in line]
    assert line.endswith("◀ active leaf  #start"), out
