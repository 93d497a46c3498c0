"""A command's output, every byte kept, in bounded memory (000 §17.2).

``run_command`` reads its child's stdout and stderr a chunk at a time (`collect`). Output of
up to `INLINE` bytes is returned whole, in the result. Anything larger is streamed, as it
arrives, into a blob of the store's artifacts (`ToolContext.artifacts`, an `ArtifactWriter`
spooling to disk), and the result holds a summary — the first and last `EDGE` bytes with a
marker between them saying what was left out — and the blob's reference (hash, size) under
``<stream>_artifact``, from which a reader fetches it all. What stays in memory is one chunk,
the head and the tail, whatever the command prints; the record stays small. A store without
the capability keeps only the summary, and the marker says so.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from threadlog.store.protocol import Artifacts, ArtifactWriter

__all__ = ["EDGE", "INLINE", "Output", "collect"]

INLINE = 16 * 1024
"""Output up to this many bytes is returned whole in the result."""
EDGE = 8 * 1024
"""Bytes of the head and of the tail that the result keeps of a larger output."""
CHUNK = 64 * 1024
"""Bytes read from a pipe at a time."""


class Output:
    """One stream of a command's output: head, tail and the blob of all of it."""

    def __init__(self, name: str, artifacts: Artifacts | None) -> None:
        self.name = name
        self._artifacts = artifacts
        self._head = bytearray()
        """The first `INLINE` bytes (all of them while the output is small)."""
        self._tail = bytearray()
        """The last `EDGE` bytes."""
        self.size = 0
        self._writer: ArtifactWriter | None = None

    async def feed(self, chunk: bytes) -> None:
        """Take the next chunk read from the pipe."""
        before = self.size
        self.size += len(chunk)
        self._tail += chunk
        del self._tail[:-EDGE]
        if before < INLINE:
            self._head += chunk[: INLINE - before]
        if self.size <= INLINE or self._artifacts is None:
            return
        rest = chunk
        if self._writer is None:  # just past INLINE: the blob starts with the head
            self._writer = await asyncio.to_thread(
                self._artifacts.artifact_writer, media_type="text/plain"
            )
            await asyncio.to_thread(self._writer.write, bytes(self._head))
            rest = chunk[max(INLINE - before, 0) :]
        await asyncio.to_thread(self._writer.write, rest)

    async def read_all(self, stream: asyncio.StreamReader | None) -> None:
        """Read ``stream`` to its end."""
        if stream is None:
            return
        while chunk := await stream.read(CHUNK):
            await self.feed(chunk)

    def abort(self) -> None:
        """Drop a blob that will not be committed (the command was cancelled or timed out)."""
        if self._writer is not None:
            with contextlib.suppress(Exception):
                self._writer.abort()
            self._writer = None

    async def result(self) -> dict[str, Any]:
        """``{name: text}`` (the whole output, or its summary), and ``{name}_artifact``: the
        reference of the blob holding every byte, when there is one."""
        if self.size <= INLINE:
            return {self.name: bytes(self._head).decode("utf-8", "replace")}
        omitted = self.size - 2 * EDGE
        out: dict[str, Any] = {}
        if self._writer is not None:
            ref = await asyncio.to_thread(self._writer.commit)
            self._writer = None
            where = f"every byte is in artifact {ref.sha256} ({self.name}_artifact)"
            out[f"{self.name}_artifact"] = ref.to_data()
        else:
            where = "the rest was not kept (the store keeps no artifacts)"
        marker = f"\n[... {omitted} bytes of {self.size} left out here; {where} ...]\n"
        text = (
            bytes(self._head[:EDGE]).decode("utf-8", "replace")
            + marker
            + bytes(self._tail).decode("utf-8", "replace")
        )
        return {self.name: text, **out}


async def collect(proc: asyncio.subprocess.Process, artifacts: Artifacts | None) -> dict[str, Any]:
    """Read the process's stdout and stderr to their ends, wait for it, and return
    ``{"exit_code", "stdout", "stderr"}`` (plus ``stdout_artifact`` / ``stderr_artifact`` for
    large output; see the module docstring)."""
    outputs = [Output("stdout", artifacts), Output("stderr", artifacts)]
    try:
        async with asyncio.TaskGroup() as group:
            group.create_task(outputs[0].read_all(proc.stdout))
            group.create_task(outputs[1].read_all(proc.stderr))
        await proc.wait()
        result: dict[str, Any] = {"exit_code": proc.returncode}
        for output in outputs:
            result.update(await output.result())
        return result
    finally:
        for output in outputs:
            output.abort()
