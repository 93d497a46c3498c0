"""`ThreadlogSaver`: a LangGraph checkpointer (``BaseCheckpointSaver``) over a threadlog store.

Install with ``pip install 'threadlog[langgraph]'``::

    from threadlog import open_store
    from threadlog.adapters.langgraph import ThreadlogSaver

    graph = builder.compile(checkpointer=ThreadlogSaver(open_store()))

Theory of operation
-------------------
One threadlog thread per LangGraph ``thread_id`` (`NamedThreads`); every namespace
(``checkpoint_ns``) of it lives in that thread. Three record types:

* ``custom.langgraph.checkpoint``: ``{ns, id, parent, checkpoint, metadata, blobs}``. The
  checkpoint is stored *without* its ``channel_values``; ``blobs`` holds only the channels
  whose versions changed in this step (``new_versions``), each ``[channel, version, type,
  base64]``. So a step costs what it changed, never the full state (the project's performance
  notes measure LangGraph's SQLite saver writing full-state checkpoints).
* ``custom.langgraph.writes``: ``{ns, checkpoint_id, task_id, task_path, writes}``, the pending
  writes of one task, each ``[idx, channel, type, base64]``.
* ``custom.langgraph.removed``: ``{ns, ids}``, checkpoints ``delete_for_runs`` or ``prune``
  removed (with their writes). The log is append-only: what they removed stays in it, for
  audit, and is gone from every read; `delete_thread` (the store's `Retention`) is the delete
  that removes the data itself.

Values go through LangGraph's serializer (``self.serde.dumps_typed``: a type tag and bytes),
base64-encoded in the record, so the record stays canonical JSON and hash-chained; a value
too large for a record (the store's artifact threshold, 64 KiB by default) is moved to the
store's artifacts by the store itself and loaded back by `Store.resolve`.

*Reading.* A per-thread projection (`_Thread`) is folded from the log: checkpoints by
namespace and id, blobs keyed by ``(ns, channel, version)``, writes by checkpoint. A full
checkpoint is rebuilt by looking up each channel's current version from its
``channel_versions``: O(channels), not a walk over the log. The saver applies its own appends
to the projection directly; it reads the log only for records another writer appended, found
by asking the index for the thread's last ordinal (`records_after`). So a thread is read once
per process, then only when someone else wrote to it.

*Limits.* The projection keeps every decoded blob of a thread it has read in memory (no
eviction; a removed checkpoint's values stay too, being stored by version); ``copy_thread``
re-appends the source's records, not atomically. Deleting needs a store with `Retention`.
"""

from __future__ import annotations

import asyncio
import base64
import random
import threading
from dataclasses import field
from typing import TYPE_CHECKING, Any

from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
)

from threadlog._dataclass import dataclass
from threadlog.adapters._threads import NamedThreads, records_after
from threadlog.errors import ThreadNotFound

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator, Sequence

    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.serde.base import SerializerProtocol

    from threadlog.model.envelope import Record
    from threadlog.store.protocol import Store

__all__ = ["ThreadlogSaver"]

CHECKPOINT = "custom.langgraph.checkpoint"
WRITES = "custom.langgraph.writes"
REMOVED = "custom.langgraph.removed"
OURS = (CHECKPOINT, WRITES, REMOVED)

Typed = tuple[str, bytes]


def _enc(typed: Typed) -> list[str]:
    return [typed[0], base64.b64encode(typed[1]).decode("ascii")]


def _dec(pair: list[str]) -> Typed:
    return pair[0], base64.b64decode(pair[1])


@dataclass
class _Thread:
    """What the log of one LangGraph thread says, folded up to record ``ord``."""

    ord: int = 0
    checkpoints: dict[str, dict[str, tuple[Typed, Typed, str | None]]] = field(default_factory=dict)
    blobs: dict[tuple[str, str, Any], Typed] = field(default_factory=dict)
    writes: dict[tuple[str, str], dict[tuple[str, int], tuple[str, str, Typed, str]]] = field(
        default_factory=dict
    )

    def apply(self, record: Record, data: Any) -> None:
        if record.type == CHECKPOINT:
            ns = data["ns"]
            for channel, version, type_, b64 in data["blobs"]:
                self.blobs[(ns, channel, version)] = _dec([type_, b64])
            self.checkpoints.setdefault(ns, {})[data["id"]] = (
                _dec(data["checkpoint"]),
                _dec(data["metadata"]),
                data["parent"],
            )
        elif record.type == WRITES:
            stored = self.writes.setdefault((data["ns"], data["checkpoint_id"]), {})
            for idx, channel, type_, b64 in data["writes"]:
                stored[(data["task_id"], idx)] = (
                    data["task_id"],
                    channel,
                    _dec([type_, b64]),
                    data["task_path"],
                )
        elif record.type == REMOVED:
            held = self.checkpoints.get(data["ns"], {})
            for checkpoint_id in data["ids"]:
                held.pop(checkpoint_id, None)
                self.writes.pop((data["ns"], checkpoint_id), None)
        self.ord = record.ord


class ThreadlogSaver(BaseCheckpointSaver[str]):
    """LangGraph checkpoints as deltas in threadlog threads (see the module docstring).

    Args:
        store: any threadlog store (``open_store()``, ``open_store("memory://")``…);
            deleting threads needs the `Retention` capability.
        serde: LangGraph's serializer (default: its ``JsonPlusSerializer``).
        principal: the owner of the threads this saver creates.
    """

    def __init__(
        self,
        store: Store,
        *,
        serde: SerializerProtocol | None = None,
        principal: str = "local",
    ) -> None:
        super().__init__(serde=serde)
        self.store = store
        self._names = NamedThreads(store, "langgraph", principal=principal)
        self._threads: dict[str, _Thread] = {}
        self._lock = threading.RLock()

    # -- reading -----------------------------------------------------------------------

    def _fold(self, name: str) -> _Thread | None:
        """The caught-up projection of LangGraph thread ``name`` (None: no such thread)."""
        thread_id = self._names.find(name)
        if thread_id is None:
            self._threads.pop(name, None)
            return None
        with self._lock:
            folded = self._threads.setdefault(name, _Thread())
            try:
                records = records_after(self.store, thread_id, folded.ord)
            except ThreadNotFound:  # deleted by another process
                self._names.forget(name)
                self._threads.pop(name, None)
                return None
            for record in records:
                if record.type in OURS:
                    folded.apply(record, self.store.resolve(record.data))
                else:
                    folded.ord = record.ord
            return folded

    def _tuple(self, name: str, ns: str, checkpoint_id: str, folded: _Thread) -> CheckpointTuple:
        typed_cp, typed_meta, parent = folded.checkpoints[ns][checkpoint_id]
        checkpoint: Checkpoint = self.serde.loads_typed(typed_cp)
        values: dict[str, Any] = {}
        for channel, version in checkpoint["channel_versions"].items():
            blob = folded.blobs.get((ns, channel, version))
            if blob is not None and blob[0] != "empty":
                values[channel] = self.serde.loads_typed(blob)
        stored = folded.writes.get((ns, checkpoint_id), {})
        writes = [stored[k] for k in sorted(stored, key=lambda k: (stored[k][3], *k))]

        def config_of(cid: str) -> RunnableConfig:
            return {"configurable": {"thread_id": name, "checkpoint_ns": ns, "checkpoint_id": cid}}

        return CheckpointTuple(
            config=config_of(checkpoint_id),
            checkpoint={**checkpoint, "channel_values": values},
            metadata=self.serde.loads_typed(typed_meta),
            parent_config=config_of(parent) if parent else None,
            pending_writes=[(t, c, self.serde.loads_typed(v)) for t, c, v, _ in writes],
        )

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (its ``checkpoint_id``, else the latest)."""
        name = config["configurable"]["thread_id"]
        ns = config["configurable"].get("checkpoint_ns", "")
        with self._lock:
            folded = self._fold(name)
            if folded is None or not folded.checkpoints.get(ns):
                return None
            checkpoint_id = get_checkpoint_id(config) or max(folded.checkpoints[ns])
            if checkpoint_id not in folded.checkpoints[ns]:
                return None
            return self._tuple(name, ns, checkpoint_id, folded)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints, newest first per namespace, filtered by metadata equality."""
        if config is not None:
            names = [config["configurable"]["thread_id"]]
        else:
            names = [name for name, _ in self._names.names()]
        ns_wanted = config["configurable"].get("checkpoint_ns") if config else None
        id_wanted = get_checkpoint_id(config) if config else None
        before_id = get_checkpoint_id(before) if before else None
        found: list[CheckpointTuple] = []
        with self._lock:
            for name in names:
                folded = self._fold(name)
                if folded is None:
                    continue
                for ns, checkpoints in folded.checkpoints.items():
                    if ns_wanted is not None and ns != ns_wanted:
                        continue
                    for checkpoint_id in sorted(checkpoints, reverse=True):
                        if id_wanted and checkpoint_id != id_wanted:
                            continue
                        if before_id and checkpoint_id >= before_id:
                            continue
                        if filter:
                            metadata = self.serde.loads_typed(checkpoints[checkpoint_id][1])
                            if not all(metadata.get(k) == v for k, v in filter.items()):
                                continue
                        if limit is not None and len(found) >= limit:
                            break
                        found.append(self._tuple(name, ns, checkpoint_id, folded))
        yield from found

    # -- writing -----------------------------------------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Append the checkpoint with the values of the channels in ``new_versions`` only."""
        name = config["configurable"]["thread_id"]
        ns = config["configurable"].get("checkpoint_ns", "")
        values = checkpoint["channel_values"]
        bare = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        blobs = [
            [channel, version, *_enc(self.serde.dumps_typed(values[channel]))]
            if channel in values
            else [channel, version, "empty", ""]
            for channel, version in new_versions.items()
        ]
        data = {
            "ns": ns,
            "id": checkpoint["id"],
            "parent": config["configurable"].get("checkpoint_id"),
            "checkpoint": _enc(self.serde.dumps_typed(bare)),
            "metadata": _enc(self.serde.dumps_typed(get_checkpoint_metadata(config, metadata))),
            "blobs": blobs,
        }
        self._append(name, CHECKPOINT, data)
        return {
            "configurable": {
                "thread_id": name,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Append a task's pending writes (a write already stored under its index is kept)."""
        name = config["configurable"]["thread_id"]
        ns = config["configurable"].get("checkpoint_ns", "")
        checkpoint_id = config["configurable"]["checkpoint_id"]
        with self._lock:
            folded = self._fold(name)
            stored = folded.writes.get((ns, checkpoint_id), {}) if folded else {}
            new = []
            for idx, (channel, value) in enumerate(writes):
                key = WRITES_IDX_MAP.get(channel, idx)
                if key >= 0 and (task_id, key) in stored:
                    continue
                new.append([key, channel, *_enc(self.serde.dumps_typed(value))])
            if not new:
                return
            data = {
                "ns": ns,
                "checkpoint_id": checkpoint_id,
                "task_id": task_id,
                "task_path": task_path,
                "writes": new,
            }
            self._append(name, WRITES, data)

    def _append(self, name: str, type_: str, data: dict[str, Any]) -> None:
        with self._lock:
            thread_id = self._names.get(name)
            folded = self._threads.get(name)
            record = self.store.append(thread_id, type_, data)
            if folded is not None and record.ord == folded.ord + 1:
                folded.apply(record, data)  # nothing came between: no read
            else:
                self._fold(name)  # catch up with what another writer appended too

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint and write of the thread (the store's `Retention`)."""
        with self._lock:
            self._threads.pop(thread_id, None)
            self._names.delete(thread_id)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and write of one thread to another (appended after what
        the target holds; nothing happens for a source that does not exist). Not atomic: a
        crash midway leaves a prefix of the source's records in the target."""
        with self._lock:
            source = self._names.find(source_thread_id)
            if source is None:
                return
            for record in self.store.read(source):
                if record.type in OURS:
                    self._append(target_thread_id, record.type, self.store.resolve(record.data))

    def _remove(self, name: str, ns: str, ids: Sequence[str]) -> None:
        if ids:
            self._append(name, REMOVED, {"ns": ns, "ids": sorted(ids)})

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Remove, in every thread, the checkpoints (and their writes) whose metadata names
        one of ``run_ids``: a ``custom.langgraph.removed`` record per namespace."""
        wanted = set(run_ids)
        if not wanted:
            return
        with self._lock:
            for name, _ in self._names.names():
                folded = self._fold(name)
                for ns, checkpoints in dict(folded.checkpoints if folded else {}).items():
                    ids = [
                        checkpoint_id
                        for checkpoint_id, (_, meta, _) in checkpoints.items()
                        if self.serde.loads_typed(meta).get("run_id") in wanted
                    ]
                    self._remove(name, ns, ids)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: remove all but each namespace's latest checkpoint (a removal
        record; the channel values it needs stay, being stored by version); ``delete``: delete
        the threads."""
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r}")
        with self._lock:
            for name in thread_ids:
                if strategy == "delete":
                    self.delete_thread(name)
                    continue
                folded = self._fold(name)
                for ns, checkpoints in dict(folded.checkpoints if folded else {}).items():
                    self._remove(name, ns, sorted(checkpoints)[:-1])

    def get_next_version(self, current: str | None, channel: None) -> str:
        """``"<counter, 32 digits>.<random>"``, increasing (as LangGraph's own savers)."""
        if current is None:
            number = 0
        elif isinstance(current, int):
            number = current
        else:
            number = int(current.split(".")[0])
        return f"{number + 1:032}.{random.random():016}"

    # -- asyncio twins: the same work in a worker thread ---------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """`get_tuple` off the event loop."""
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """`list` off the event loop."""
        found = await asyncio.to_thread(
            lambda: [*self.list(config, filter=filter, before=before, limit=limit)]
        )
        for item in found:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """`put` off the event loop."""
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """`put_writes` off the event loop."""
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        """`delete_thread` off the event loop."""
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """`copy_thread` off the event loop."""
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """`delete_for_runs` off the event loop."""
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """`prune` off the event loop."""
        await asyncio.to_thread(lambda: self.prune(thread_ids, strategy=strategy))
