"""`EventLogSaver`: LangGraph's checkpointer interface, each method a thin call into the part of
the package that does the work (`_read`, `_write`, `_admin`), run in the saver's worker threads."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from .. import open as open_log
from ..log import EventLog
from ._admin import Admin
from ._answer import Answerer
from ._events import Blob, ThreadReducer
from ._read import Reader
from ._rewrite import Rewriter
from ._serde import SafeSerializer
from ._threads import Threads
from ._values import Values
from ._workers import Workers, async_iter_twin, async_twin
from ._write import Writer, next_version, withdrawn

__all__ = ["SHARE_SECONDS", "EventLogSaver"]


SHARE_SECONDS = 0.02
"""How long a `put_writes` waits for the `put` of its superstep, to share its commit."""

_SEQUENTIAL = object()
"""An async caller that makes the next put itself (see `EventLogSaver._async_caller`)."""


class _Ops:
    """The saver's operations, bound to one serializer."""

    def __init__(self, threads: Threads, serde: SerializerProtocol) -> None:
        self.serde = serde
        values = Values(serde)
        self.rewriter = Rewriter(threads, values)
        self.read = Reader(self.rewriter, values)
        self.write = Writer(self.rewriter, values)
        self.admin = Admin(self.rewriter, values, self.read)
        self.answers = Answerer(self.rewriter, values, self.write)


_Blobs = list[tuple[int, str, Blob]]
"""Writes of a `put_writes` as they are stored: (index, channel, value written)."""


class EventLogSaver(BaseCheckpointSaver[int]):
    """A LangGraph checkpointer that stores threads as runs of an eventlog log.

    `log` is any open log (LMDB, `:memory:`, PostgreSQL); the saver does not close it
    (`from_path` does). The sync methods and their async twins (`aget_tuple`, `alist`,
    `aput`, ...) serve `graph.invoke` and `await graph.ainvoke` alike; the async ones run
    the sync core in one of `workers` threads of the saver's own, so an fsync never blocks
    the event loop. Safe to share between threads: a sync call runs in its caller's thread
    (a PostgreSQL log's pool bounds its connections). `cache_size` bounds how many runs keep
    their folded state in memory.

    Values are read with `SafeSerializer()` unless `serde` is given: stored bytes construct only
    LangChain's messages and the types LangGraph allows in its strict mode, never import or call
    anything else. A wider list is an explicit opt-in: `serde=SafeSerializer(allowed_modules=[...])`,
    or any serializer of your own (LangGraph's `JsonPlusSerializer()` imports whatever the bytes name).
    """

    serde: SerializerProtocol = SafeSerializer()

    def __init__(
        self,
        log: EventLog[Any],
        *,
        serde: SerializerProtocol | None = None,
        cache_size: int = 128,
        workers: int = 4,
    ) -> None:
        super().__init__(serde=serde if serde is not None else SafeSerializer())
        self._workers = Workers(workers)
        self._caller = threading.local()
        """Per calling thread: `alone`, the checkpoint of its last put_writes no put took;
        `sequential`, True once that thread made the next put itself (it never waits again)."""
        self._async_caller: contextvars.ContextVar[str | object | None] = contextvars.ContextVar(
            "eventlog_saver_async_caller", default=None
        )
        """The same for an async caller's task: the checkpoint of its last `aput_writes` no put
        took, then `_SEQUENTIAL` once that task made the next put itself."""
        self.log = log
        self.reducer = ThreadReducer()
        self._threads = Threads(log, self.reducer, cache_size)
        self._bound = _Ops(self._threads, self.serde)

    @classmethod
    @contextlib.contextmanager
    def from_path(cls, path: str | os.PathLike[str], **open_options: Any) -> Iterator[EventLogSaver]:
        """Open the log at `path` (see `eventlog.open` for the options), yield a saver over it, close it."""
        serde = open_options.pop("serde", None)
        with open_log(path, **open_options) as log:
            saver = cls(log, serde=serde)
            try:
                yield saver
            finally:
                saver.close()

    @property
    def cache_size(self) -> int:
        """How many runs keep their folded state in memory."""
        return self._threads.cache_size

    @cache_size.setter
    def cache_size(self, value: int) -> None:
        self._threads.cache_size = value

    def _ops(self) -> _Ops:
        """The operations bound to the saver's `serde` (a clone made by `with_allowlist` has its own)."""
        if self._bound.serde is not self.serde:
            self._bound = _Ops(self._threads, self.serde)
        return self._bound

    def close(self) -> None:
        """Stop the saver's worker threads (the log stays open: close it yourself)."""
        self._workers.close()

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint the config names, or the thread's latest; None if there is none."""
        return self._ops().read.get_tuple(config)

    aget_tuple = async_twin(get_tuple)
    """Async `get_tuple`."""

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first (by checkpoint id), across namespaces when the config names
        none and across threads without a config; `filter` keeps those whose metadata has each
        key equal, `before` those older than its checkpoint id, `limit` the first so many."""
        yield from self._ops().read.list_tuples(config, filter=filter, before=before, limit=limit)

    alist = async_iter_twin(list)
    """Async `list`."""

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Append the checkpoint as a change of its parent: only the channels in `new_versions`,
        and for a list that grew, only the items appended."""
        parent = config["configurable"].get("checkpoint_id")
        if parent is not None and getattr(self._caller, "alone", None) == parent:
            self._caller.sequential = True  # it puts after its own writes: waiting would gain nothing
        return self._ops().write.put(config, checkpoint, metadata, new_versions)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Async `put`."""
        parent = config["configurable"].get("checkpoint_id")
        if parent is not None and self._async_caller.get() == parent:
            self._async_caller.set(_SEQUENTIAL)  # this task puts after its own writes
        return await self._workers.acall(self._ops().write.put, config, checkpoint, metadata, new_versions)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Append writes pending on the config's checkpoint; a write saved before under the same
        task and index is not saved again (LangGraph's special channels are replaced).

        The writes of a superstep's tasks share the commit of the `put` that ends it when that
        put comes within `SHARE_SECONDS` (LangGraph calls it without waiting for them, under
        `durability="sync"` and `"async"`); otherwise they are committed alone, and a thread that
        then makes that put itself (a copy, a migration) no longer waits. Either way this
        returns only once they are committed (docs/guides/langgraph.md, "Durability, and how fast")."""
        self._put_blobs(config, self._ops().write.blobs(writes), task_id, task_path)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Async `put_writes`: the writes are written in the caller's thread, as they are when it
        calls, and share the commit of their superstep's `aput` as `put_writes` does (the wait
        for it holds no worker of the saver's); otherwise they are committed in a worker."""
        blobs = self._ops().write.blobs(writes)
        if self._async_caller.get() is not _SEQUENTIAL:
            if await asyncio.to_thread(self._shared, config, blobs, task_id, task_path):
                return
            self._async_caller.set(config["configurable"]["checkpoint_id"])
        await self._workers.acall(self._ops().write.put_writes, config, blobs, task_id, task_path)

    def _put_blobs(self, config: RunnableConfig, blobs: _Blobs, task_id: str, task_path: str) -> None:
        # a sync call in a worker (a copy's, say) and a caller that makes the next put itself commit at once
        if not self._workers.inside() and not getattr(self._caller, "sequential", False):
            if self._shared(config, blobs, task_id, task_path):
                return
            self._caller.alone = config["configurable"]["checkpoint_id"]
        self._ops().write.put_writes(config, blobs, task_id, task_path)

    def _shared(self, config: RunnableConfig, blobs: _Blobs, task_id: str, task_path: str) -> bool:
        """Offer the writes to the put of their superstep for `SHARE_SECONDS`: True once a put took
        them and committed them (its error raised here), False when the caller must write them."""
        write = self._ops().write
        run, waiting = write.offer(config, blobs, task_id, task_path)
        if not waiting.done.wait(SHARE_SECONDS) and not withdrawn(run, waiting):
            waiting.done.wait()  # a put took it just now: it answers
        if not waiting.done.is_set():
            return False
        if waiting.error is not None:
            raise waiting.error
        return True

    def answer(self, thread_id: str, value: Any, *, checkpoint_id: str | None = None) -> RunnableConfig:
        """Store a human's answer to the `interrupt()` the thread waits on, from outside the graph's
        process: the graph's next `graph.invoke(None, config)` (or `stream(None, config)`) resumes
        the interrupted node with `value`, as `graph.invoke(Command(resume=value), config)` would
        have (the same write: LangGraph's thread-wide `__resume__`, by this saver's `serde`, on
        the thread's latest checkpoint). Returns that checkpoint's config.

        Refused with `AnswerRefusedError` (its `reason` says why), nothing written: a None value,
        a thread with no checkpoint, one whose latest checkpoint is not `checkpoint_id` (when
        given: the one the answer was decided on), one that waits on no interrupt, one that holds
        a resume value already, one that waits on several (answer those by interrupt id with
        `Command(resume={interrupt_id: value})`). The checks and the write are one step: a thread
        that moves on meanwhile is refused, never answered on another checkpoint."""
        return self._ops().answers.answer(thread_id, value, checkpoint_id)

    aanswer = async_twin(answer)
    """Async `answer`."""

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint and write of the thread, in every namespace."""
        self._ops().admin.delete_thread(thread_id)

    adelete_thread = async_twin(delete_thread)
    """Async `delete_thread`."""

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete every checkpoint whose metadata `run_id` is one of `run_ids`, with its writes.

        A run of the log that holds such checkpoints is written anew without them (staged in a
        run of its own first, so that a crash leaves the old or the new one whole); a checkpoint
        whose parent is deleted is then stored whole. A str (one id) is refused with TypeError.
        """
        self._ops().admin.delete_for_runs(run_ids)

    adelete_for_runs = async_twin(delete_for_runs)
    """Async `delete_for_runs`."""

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and write of a thread, in every namespace, to a new thread.

        The copy stands alone: deleting the source afterwards leaves it whole. A target thread
        that holds checkpoints already is refused with LangGraphThreadError.
        """
        self._ops().admin.copy_thread(source_thread_id, target_thread_id)

    acopy_thread = async_twin(copy_thread)
    """Async `copy_thread`."""

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """`keep_latest`: keep each namespace's latest checkpoint and its pending writes, drop the
        rest (the log's own prune: the latest becomes the run's base). `delete`: delete the threads.
        A str (one id) is refused with TypeError, as LangGraph's `PostgresSaver` refuses it."""
        self._ops().admin.prune(thread_ids, strategy=strategy)

    aprune = async_twin(prune)
    """Async `prune`."""

    def get_next_version(self, current: Any, channel: None) -> Any:
        """The channel version after `current`: an int after an int; after a string version (a
        thread written by `InMemorySaver`, `SqliteSaver` or `PostgresSaver`), a string of their
        form that compares greater, so such a thread runs on."""
        return next_version(current)

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Writes and seed of `DeltaChannel`s along the checkpoint's parents (LangGraph's walk)."""
        walk = super().get_delta_channel_history
        return walk(config=config, channels=channels)

    aget_delta_channel_history = async_twin(get_delta_channel_history)
    """Async `get_delta_channel_history`."""
