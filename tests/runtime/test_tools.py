"""The built-in tools, run directly through ``tool.run(ToolContext(...), args)``.

Every test works in a fresh workspace (``tmp_path / "ws"``) with a sibling directory
(``tmp_path / "outside"``) that no tool may touch. Commands that must be killed carry a unique
argument so that the test can look for survivors in ``/proc`` without confusing them with any
other process.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import uuid
from typing import TYPE_CHECKING, Any

import pytest

from threadlog.errors import UsageError
from threadlog.runtime.tools import (
    BUILTIN_TOOLS,
    Tool,
    ToolContext,
    ToolError,
    ToolRegistry,
    append_file,
    list_dir,
    read_file,
    run_command,
    write_file,
)

if TYPE_CHECKING:
    from pathlib import Path

CALL_ID = "0190abcd-0000-7000-8000-000000000001"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    path = tmp_path / "outside"
    path.mkdir()
    (path / "secret.txt").write_text("top secret", encoding="utf-8")
    return path


def make_ctx(cwd: Path, call_id: str = CALL_ID) -> ToolContext:
    return ToolContext(
        thread_id="0190abcd-0000-7000-8000-00000000000f",
        call_id=call_id,
        attempt=1,
        idempotency_key="key-1",
        cwd=cwd,
    )


@pytest.fixture
def ctx(ws: Path) -> ToolContext:
    return make_ctx(ws)


def call(tool: Tool, ctx: ToolContext, args: dict[str, Any]) -> Any:
    return asyncio.run(tool.run(ctx, args))


def tree(root: Path) -> list[str]:
    """Every path under ``root`` (relative, sorted), hidden files included."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


# -- processes -------------------------------------------------------------------------------


def token() -> str:
    """A unique, valid ``sleep`` argument (300 s and some unique fraction)."""
    return f"300.{uuid.uuid4().int % 10**12:012d}"


def pids_with(arg: str) -> list[int]:
    """Live (not zombie) processes whose command line contains ``arg``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if arg.encode() in cmdline.split(b"\0"):  # zombies have an empty cmdline
            found.append(int(entry))
    return found


async def wait_for_pids(arg: str, task: asyncio.Task[Any] | None = None) -> list[int]:
    """Poll until a process with ``arg`` runs (or ``task`` finished, or ~10 s passed)."""
    for _ in range(1000):
        pids = pids_with(arg)
        if pids or (task is not None and task.done()):
            return pids
        await asyncio.sleep(0.01)
    return []


async def wait_gone(arg: str) -> list[int]:
    """Poll until no process with ``arg`` is left (a killed process may take a moment to
    go); returns the survivors, if any."""
    for _ in range(500):
        pids = pids_with(arg)
        if not pids:
            return []
        await asyncio.sleep(0.01)
    return pids_with(arg)


def kill_leftovers(arg: str) -> None:
    """Clean up after a failed test: kill only the processes this test started."""
    for pid in pids_with(arg):
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass


needs_proc = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")


# -- ToolContext.resolve ---------------------------------------------------------------------


def test_resolve_inside_the_workspace(ctx: ToolContext, ws: Path) -> None:
    (ws / "sub").mkdir()
    root = ws.resolve()
    assert ctx.resolve("a.txt") == root / "a.txt"
    assert ctx.resolve("sub/../a.txt") == root / "a.txt"
    assert ctx.resolve(".") == root
    assert ctx.resolve(str(root / "sub" / "b")) == root / "sub" / "b"  # absolute but inside


@pytest.mark.parametrize(
    "path", ["..", "../x", "/etc/passwd", "a/../../x", "sub/../../x", "/", "./../ws2"]
)
def test_resolve_refuses_escapes(ctx: ToolContext, path: str) -> None:
    with pytest.raises(ToolError, match="outside the workspace"):
        ctx.resolve(path)


@pytest.mark.parametrize("path", ["", "a\x00b", "\x00", None, 5, b"a.txt", ["a.txt"]])
def test_resolve_refuses_invalid_paths(ctx: ToolContext, path: Any) -> None:
    with pytest.raises(ToolError, match="invalid path"):
        ctx.resolve(path)


def test_resolve_refuses_symlinks_out(ctx: ToolContext, ws: Path, outside: Path) -> None:
    (ws / "to_file").symlink_to(outside / "secret.txt")
    (ws / "to_dir").symlink_to(outside)
    (ws / "dangling").symlink_to(outside / "does-not-exist")
    for path in ("to_file", "to_dir", "to_dir/secret.txt", "to_dir/new.txt", "dangling"):
        with pytest.raises(ToolError, match="outside the workspace"):
            ctx.resolve(path)


def test_resolve_follows_symlinks_that_stay_inside(ctx: ToolContext, ws: Path) -> None:
    (ws / "real").mkdir()
    (ws / "alias").symlink_to(ws / "real")
    assert ctx.resolve("alias/f.txt") == ws.resolve() / "real" / "f.txt"


def test_resolve_a_symlink_loop_is_a_tool_error(ctx: ToolContext, ws: Path) -> None:
    # BUG: pathlib's resolve() raises RuntimeError("Symlink loop ...") on Python 3.11; the
    # context should refuse the path with ToolError like any other unusable path.
    (ws / "loop").symlink_to("loop")
    with pytest.raises(ToolError):
        ctx.resolve("loop")


# -- read_file / list_dir --------------------------------------------------------------------


def test_read_file(ctx: ToolContext, ws: Path) -> None:
    (ws / "sub").mkdir()
    (ws / "sub" / "a.txt").write_text("héllo\nworld\n", encoding="utf-8")
    assert call(read_file, ctx, {"path": "sub/a.txt"}) == "héllo\nworld\n"
    assert call(read_file, ctx, {"path": str(ws / "sub" / "a.txt")}) == "héllo\nworld\n"


def test_read_file_replaces_invalid_utf8(ctx: ToolContext, ws: Path) -> None:
    (ws / "bin").write_bytes(b"ok \xff\xfe end")
    assert call(read_file, ctx, {"path": "bin"}) == "ok \ufffd\ufffd end"


def test_read_file_errors(ctx: ToolContext, ws: Path) -> None:
    (ws / "d").mkdir()
    with pytest.raises(ToolError, match="no such file"):
        call(read_file, ctx, {"path": "missing.txt"})
    with pytest.raises(ToolError, match="is a directory"):
        call(read_file, ctx, {"path": "d"})


@pytest.mark.parametrize("path", ["../outside/secret.txt", "a/../../outside/secret.txt"])
def test_read_file_refuses_escapes(ctx: ToolContext, outside: Path, path: str) -> None:
    with pytest.raises(ToolError, match="outside the workspace"):
        call(read_file, ctx, {"path": path})
    with pytest.raises(ToolError, match="outside the workspace"):
        call(read_file, ctx, {"path": str(outside / "secret.txt")})


def test_read_file_refuses_a_symlink_out(ctx: ToolContext, ws: Path, outside: Path) -> None:
    (ws / "link").symlink_to(outside / "secret.txt")
    (ws / "dirlink").symlink_to(outside)
    for path in ("link", "dirlink/secret.txt"):
        with pytest.raises(ToolError, match="outside the workspace"):
            call(read_file, ctx, {"path": path})


@pytest.mark.parametrize(
    "args", [{}, {"path": None}, {"path": 5}, {"path": ["a"]}, {"path": ""}, {"path": "a\x00"}]
)
def test_read_file_bad_arguments(ctx: ToolContext, args: dict[str, Any]) -> None:
    with pytest.raises(ToolError):
        call(read_file, ctx, args)


def test_list_dir(ctx: ToolContext, ws: Path) -> None:
    (ws / "b.txt").write_text("b")
    (ws / ".hidden").write_text("h")
    (ws / "a_dir").mkdir()
    (ws / "a_dir" / "inner.txt").write_text("i")
    assert call(list_dir, ctx, {}) == [".hidden", "a_dir/", "b.txt"]
    assert call(list_dir, ctx, {"path": "."}) == [".hidden", "a_dir/", "b.txt"]
    assert call(list_dir, ctx, {"path": "a_dir"}) == ["inner.txt"]
    assert call(list_dir, ctx, {"path": "a_dir/.."}) == [".hidden", "a_dir/", "b.txt"]


def test_list_dir_errors(ctx: ToolContext, ws: Path, outside: Path) -> None:
    (ws / "f.txt").write_text("f")
    (ws / "dirlink").symlink_to(outside)
    with pytest.raises(ToolError, match="not a directory"):
        call(list_dir, ctx, {"path": "f.txt"})
    with pytest.raises(ToolError, match="not a directory"):
        call(list_dir, ctx, {"path": "missing"})
    for path in ("..", "../outside", str(outside), "dirlink", "/"):
        with pytest.raises(ToolError, match="outside the workspace"):
            call(list_dir, ctx, {"path": path})
    with pytest.raises(ToolError, match="invalid path"):
        call(list_dir, ctx, {"path": 5})


# -- write_file / append_file ----------------------------------------------------------------


def test_write_file_creates_and_replaces(ctx: ToolContext, ws: Path) -> None:
    result = call(write_file, ctx, {"path": "new/deep/f.txt", "text": "héllo"})
    assert result == {"path": "new/deep/f.txt", "bytes": len("héllo".encode())}
    assert (ws / "new" / "deep" / "f.txt").read_text(encoding="utf-8") == "héllo"
    call(write_file, ctx, {"path": "new/deep/f.txt", "text": "short"})
    assert (ws / "new" / "deep" / "f.txt").read_text(encoding="utf-8") == "short"
    call(write_file, ctx, {"path": "new/deep/f.txt", "text": ""})
    assert (ws / "new" / "deep" / "f.txt").read_bytes() == b""
    assert tree(ws) == ["new", "new/deep", "new/deep/f.txt"]  # no temporary file left


def test_write_file_replaces_atomically(ctx: ToolContext, ws: Path) -> None:
    # The old file is replaced by a new inode (rename), never truncated in place: a reader
    # that opened the old file keeps seeing the old content in full.
    target = ws / "f.txt"
    target.write_text("old content", encoding="utf-8")
    old_inode = target.stat().st_ino
    with open(target, encoding="utf-8") as reader:
        call(write_file, ctx, {"path": "f.txt", "text": "new content"})
        assert reader.read() == "old content"
    assert target.read_text(encoding="utf-8") == "new content"
    assert target.stat().st_ino != old_inode
    assert tree(ws) == ["f.txt"]


def test_write_file_is_idempotent(ctx: ToolContext, ws: Path) -> None:
    for _ in range(3):
        call(write_file, ctx, {"path": "f.txt", "text": "same"})
    assert (ws / "f.txt").read_text(encoding="utf-8") == "same"
    assert tree(ws) == ["f.txt"]


def test_write_file_through_an_inside_symlink(ctx: ToolContext, ws: Path) -> None:
    (ws / "real.txt").write_text("old")
    (ws / "alias.txt").symlink_to(ws / "real.txt")
    call(write_file, ctx, {"path": "alias.txt", "text": "new"})
    assert (ws / "real.txt").read_text() == "new"
    assert (ws / "alias.txt").is_symlink()


@pytest.mark.parametrize("tool", [write_file, append_file], ids=lambda t: t.name)
def test_writing_refuses_escapes(
    ctx: ToolContext, ws: Path, outside: Path, tool: Tool, tmp_path: Path
) -> None:
    (ws / "link").symlink_to(outside / "secret.txt")
    (ws / "dirlink").symlink_to(outside)
    (ws / "dangling").symlink_to(outside / "created-through-link.txt")
    before_ws, before_root = tree(ws), tree(tmp_path)
    for path in (
        "../x",
        "a/../../x",
        "/etc/passwd",
        str(outside / "secret.txt"),
        "../outside/secret.txt",
        "link",
        "dirlink/secret.txt",
        "dirlink/new.txt",
        "dangling",
    ):
        with pytest.raises(ToolError, match="outside the workspace"):
            call(tool, ctx, {"path": path, "text": "pwned"})
    assert (outside / "secret.txt").read_text() == "top secret"
    assert tree(ws) == before_ws
    assert tree(tmp_path) == before_root


@pytest.mark.parametrize("tool", [write_file, append_file], ids=lambda t: t.name)
@pytest.mark.parametrize(
    "args",
    [
        {"text": "t"},
        {"path": None, "text": "t"},
        {"path": 5, "text": "t"},
        {"path": "", "text": "t"},
        {"path": "a\x00b", "text": "t"},
        {"path": "f.txt"},
        {"path": "f.txt", "text": None},
        {"path": "f.txt", "text": 5},
        {"path": "f.txt", "text": b"bytes"},
        {"path": "f.txt", "text": ["t"]},
    ],
)
def test_writing_bad_arguments(
    ctx: ToolContext, ws: Path, tool: Tool, args: dict[str, Any]
) -> None:
    with pytest.raises(ToolError):
        call(tool, ctx, args)
    assert tree(ws) == []


def test_write_file_on_the_workspace_itself_writes_nothing_outside(
    ctx: ToolContext, ws: Path, tmp_path: Path
) -> None:
    # BUG: "." resolves to the workspace root, which is allowed; the temporary file is then
    # made *next to* the root (root.with_name(...)), i.e. outside the workspace, with the
    # model's text in it, and left there when os.replace fails on the directory.
    before = tree(tmp_path)
    with pytest.raises((ToolError, OSError)):
        call(write_file, ctx, {"path": ".", "text": "written outside"})
    assert tree(tmp_path) == before


def test_write_file_failure_leaves_no_temporary_file(ctx: ToolContext, ws: Path) -> None:
    # BUG: when the write or the rename fails, the temporary file is left behind.
    (ws / "sub").mkdir()
    with pytest.raises((ToolError, OSError)):
        call(write_file, ctx, {"path": "sub", "text": "x"})  # rename onto a directory
    with pytest.raises((ToolError, UnicodeError)):
        call(write_file, ctx, {"path": "f.txt", "text": "lone \ud800 surrogate"})
    assert tree(ws) == ["sub"]


def test_concurrent_write_file_calls_do_not_share_a_temporary_file(
    monkeypatch: pytest.MonkeyPatch, ws: Path
) -> None:
    # BUG: the temporary name uses call_id[:8], which for UUIDv7 call ids is the top of the
    # millisecond timestamp: every call id of the same ~65 s shares it. Two writes of one path
    # racing (here: the second runs entirely while the first is between its write and its
    # rename) then share one temporary file, and the first fails with FileNotFoundError.
    ctx_a = make_ctx(ws, "0190abcd-0000-7000-8000-00000000000a")
    ctx_b = make_ctx(ws, "0190abcd-0000-7000-8000-00000000000b")
    real_fsync = os.fsync
    calls = 0
    errors: list[BaseException] = []

    def second_write() -> None:
        try:
            call(write_file, ctx_b, {"path": "f.txt", "text": "B"})
        except BaseException as exc:
            errors.append(exc)

    def fsync(fd: int) -> None:
        nonlocal calls
        calls += 1
        real_fsync(fd)
        if calls == 1:  # the first write is durable in its temporary file, not yet renamed
            helper = threading.Thread(target=second_write)
            helper.start()
            helper.join()

    monkeypatch.setattr(os, "fsync", fsync)
    result = call(write_file, ctx_a, {"path": "f.txt", "text": "A"})
    assert errors == []
    assert result == {"path": "f.txt", "bytes": 1}
    assert (ws / "f.txt").read_text() == "A"  # the last rename wins
    assert tree(ws) == ["f.txt"]


def test_append_file_appends_once_per_call(ctx: ToolContext, ws: Path) -> None:
    assert call(append_file, ctx, {"path": "log.txt", "text": "one\n"}) == {
        "path": "log.txt",
        "appended": 4,
    }
    assert call(append_file, ctx, {"path": "log.txt", "text": "twö\n"}) == {
        "path": "log.txt",
        "appended": len("twö\n".encode()),
    }
    call(append_file, ctx, {"path": "log.txt", "text": ""})
    call(append_file, ctx, {"path": "log.txt", "text": "three\n"})
    assert (ws / "log.txt").read_text(encoding="utf-8") == "one\ntwö\nthree\n"
    assert tree(ws) == ["log.txt"]


def test_append_file_to_an_existing_file(ctx: ToolContext, ws: Path) -> None:
    (ws / "f.txt").write_text("start;")
    for i in range(5):
        call(append_file, ctx, {"path": "f.txt", "text": f"{i};"})
    assert (ws / "f.txt").read_text() == "start;0;1;2;3;4;"


# -- run_command -----------------------------------------------------------------------------


def test_run_command_shell_string(ctx: ToolContext) -> None:
    result = call(run_command, ctx, {"command": "echo out; echo err >&2; exit 3"})
    assert result == {"exit_code": 3, "stdout": "out\n", "stderr": "err\n"}


def test_run_command_argv_list(ctx: ToolContext, ws: Path) -> None:
    code = "import os, sys; print(os.getcwd()); print(sys.argv[1:]); sys.exit(0)"
    result = call(run_command, ctx, {"command": [sys.executable, "-c", code, "a b", "$HOME"]})
    assert result["exit_code"] == 0
    assert result["stdout"] == f"{ws.resolve()}\n['a b', '$HOME']\n"  # no shell expansion
    assert result["stderr"] == ""


def test_run_command_runs_in_the_workspace_and_a_sub_directory(ctx: ToolContext, ws: Path) -> None:
    (ws / "sub").mkdir()
    assert call(run_command, ctx, {"command": "pwd -P"})["stdout"] == f"{ws.resolve()}\n"
    result = call(run_command, ctx, {"command": "pwd -P", "cwd": "sub"})
    assert result["stdout"] == f"{ws.resolve() / 'sub'}\n"


def test_run_command_has_no_stdin(ctx: ToolContext) -> None:
    result = call(run_command, ctx, {"command": "cat; echo done", "timeout": 10})
    assert result == {"exit_code": 0, "stdout": "done\n", "stderr": ""}


def test_run_command_summarizes_long_output_without_an_artifact_store(ctx: ToolContext) -> None:
    """Without the store's `Artifacts` (this context has none), a long output is cut to its
    head and tail, and the marker says the rest was not kept."""
    code = "import sys; sys.stdout.write('BEGIN' + 'x' * 70000 + 'END')"
    result = call(run_command, ctx, {"command": [sys.executable, "-c", code]})
    assert result["exit_code"] == 0
    assert result["stdout"].startswith("BEGINx") and result["stdout"].endswith("xEND")
    assert "bytes of 70008 left out here; the rest was not kept" in result["stdout"]
    assert len(result["stdout"]) < 17 * 1024
    assert "stdout_artifact" not in result


def test_run_command_reports_a_signal_as_a_negative_exit_code(ctx: ToolContext) -> None:
    assert call(run_command, ctx, {"command": "kill -TERM $$"})["exit_code"] == -15


@pytest.mark.parametrize("cwd", ["..", "../outside", "/", "/etc", "a/../../x"])
def test_run_command_cwd_is_confined(ctx: ToolContext, outside: Path, cwd: str) -> None:
    with pytest.raises(ToolError, match="outside the workspace"):
        call(run_command, ctx, {"command": "touch pwned", "cwd": cwd})
    assert not (outside / "pwned").exists()


def test_run_command_cwd_symlink_out_is_refused(ctx: ToolContext, ws: Path, outside: Path) -> None:
    (ws / "dirlink").symlink_to(outside)
    with pytest.raises(ToolError, match="outside the workspace"):
        call(run_command, ctx, {"command": "touch pwned", "cwd": "dirlink"})
    assert not (outside / "pwned").exists()


@pytest.mark.parametrize(
    "args",
    [
        {},
        {"command": None},
        {"command": 5},
        {"command": b"echo hi"},
        {"command": []},
        {"command": ["echo", 1]},
        {"command": ["echo", None]},
        {"command": {"argv": ["echo"]}},
        {"command": "echo hi", "cwd": 5},
        {"command": "echo hi", "cwd": "a\x00b"},
        {"command": "echo hi", "timeout": "5"},
        {"command": "echo hi", "timeout": None},
        {"command": "echo hi", "timeout": 0},
        {"command": "echo hi", "timeout": -1},
        {"command": "echo hi", "timeout": 601},
        {"command": "echo hi", "timeout": float("nan")},
        {"command": "echo hi", "timeout": float("inf")},
    ],
)
def test_run_command_bad_arguments(ctx: ToolContext, ws: Path, args: dict[str, Any]) -> None:
    with pytest.raises(ToolError):
        call(run_command, ctx, args)


@needs_proc
@pytest.mark.parametrize("form", ["shell", "argv"])
def test_run_command_timeout_kills_the_process_group(ctx: ToolContext, form: str) -> None:
    # The command's own timeout is a ToolError naming the timeout (an error result for the
    # model), raised after killing the whole process group: here a shell and the background
    # `sleep` it started.
    arg = token()
    script = f"sleep {arg} & echo started; wait"
    command: str | list[str] = script if form == "shell" else ["/bin/sh", "-c", script]

    async def main() -> list[int]:
        task = asyncio.create_task(run_command.run(ctx, {"command": command, "timeout": 1}))
        seen = await wait_for_pids(arg, task)
        with pytest.raises(ToolError, match="timed out after 1s"):
            await asyncio.wait_for(task, 30)  # a bound for a broken kill, not a timing check
        return seen

    try:
        seen = asyncio.run(main())
        assert asyncio.run(wait_gone(arg)) == []
        for pid in seen:
            assert pid not in pids_with(arg)
    finally:
        kill_leftovers(arg)


@needs_proc
def test_cancelling_run_command_kills_the_child(ctx: ToolContext) -> None:
    arg = token()

    async def main() -> None:
        task = asyncio.create_task(
            run_command.run(ctx, {"command": f"sleep {arg} & sleep {arg}; wait", "timeout": 600})
        )
        seen = await wait_for_pids(arg)
        assert seen, "the command never started"
        assert not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 30)
        assert await wait_gone(arg) == []

    try:
        asyncio.run(main())
    finally:
        kill_leftovers(arg)


@needs_proc
def test_cancelling_an_argv_command_kills_it(ctx: ToolContext) -> None:
    arg = token()

    async def main() -> None:
        task = asyncio.create_task(run_command.run(ctx, {"command": ["sleep", arg]}))
        assert await wait_for_pids(arg), "the command never started"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 30)
        assert await wait_gone(arg) == []

    try:
        asyncio.run(main())
    finally:
        kill_leftovers(arg)


# -- the tools as declared -------------------------------------------------------------------


def test_builtin_tools_declarations() -> None:
    assert [t.name for t in BUILTIN_TOOLS] == [
        "read_file",
        "list_dir",
        "write_file",
        "append_file",
        "run_command",
        "read_artifact",
    ]
    assert {t.name: t.side_effect for t in BUILTIN_TOOLS} == {
        "read_file": "read_only",
        "list_dir": "read_only",
        "write_file": "non_idempotent",
        "append_file": "non_idempotent",
        "run_command": "non_idempotent",
        "read_artifact": "read_only",
    }
    for tool in BUILTIN_TOOLS:
        spec = tool.spec()
        assert spec == {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        }
        assert spec["parameters"]["type"] == "object"
        for required in spec["parameters"].get("required", []):
            assert required in spec["parameters"]["properties"]


# -- ToolRegistry ----------------------------------------------------------------------------


def _tool(name: str) -> Tool:
    async def run(ctx: ToolContext, args: dict[str, Any]) -> str:
        return name

    return Tool(name, f"the {name} tool", {"type": "object", "properties": {}}, "read_only", run)


def test_registry_refuses_duplicate_names() -> None:
    registry = ToolRegistry.of([_tool("a"), _tool("b")])
    with pytest.raises(UsageError, match="'a'"):
        registry.add(_tool("a"))
    with pytest.raises(UsageError):
        ToolRegistry.of([_tool("x"), _tool("x")])
    with pytest.raises(UsageError):
        ToolRegistry.of([*BUILTIN_TOOLS, read_file])
    assert list(registry.tools) == ["a", "b"]


def test_registry_get() -> None:
    a = _tool("a")
    registry = ToolRegistry.of([a])
    assert registry.get("a") is a
    assert registry.get("missing") is None


def test_registry_specs_order_and_filter() -> None:
    registry = ToolRegistry.of([_tool("c"), _tool("a"), _tool("b")])
    assert [s["name"] for s in registry.specs()] == ["c", "a", "b"]  # registration order
    assert [s["name"] for s in registry.specs(["b", "c"])] == ["b", "c"]  # the active order
    assert [s["name"] for s in registry.specs(["a", "nope", "b"])] == ["a", "b"]
    assert registry.specs([]) == []
    assert registry.specs(iter(["a"])) == [_tool("a").spec()]
    assert ToolRegistry().specs() == []


def test_registry_runs_a_registered_tool(ctx: ToolContext) -> None:
    registry = ToolRegistry.of(BUILTIN_TOOLS)
    tool = registry.get("list_dir")
    assert tool is not None
    assert call(tool, ctx, {}) == []
