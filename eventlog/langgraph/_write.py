"""The saver's writes: `put` appends a checkpoint as a change of its parent, `put_writes` the
writes of a task; both retry against what another writer appended meanwhile.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    get_serializable_checkpoint_metadata,
)

from ..errors import ConflictError
from ._events import Blob, CheckpointSaved, ThreadState, Version, Write, WritesSaved, WriteValue
from ._rewrite import Part
from ._threads import Mark, Run, checkpoint_metadata

__all__ = ["CONFLICT_RETRIES", "KNOWN_KEYS", "Writer"]

KNOWN_KEYS = frozenset({"v", "id", "ts", "channel_values", "channel_versions", "versions_seen", "updated_channels"})
"""The keys of a LangGraph checkpoint that `CheckpointSaved` has fields for; others go in its `extra`."""
CONFLICT_RETRIES = 8
"""How many times a write is made again when another writer appended to the run meanwhile."""


class Writer(Part):
    """`put` and `put_writes` onto the runs of a log's threads."""

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """What `EventLogSaver.put` does."""
        conf = config["configurable"]
        thread_id, ns = str(conf["thread_id"]), conf.get("checkpoint_ns", "") or ""
        parent = conf.get("checkpoint_id")
        run = self.rewriter.open(thread_id, ns)
        md = self.values.blob(get_serializable_checkpoint_metadata(config, metadata))
        with run.lock:
            for _ in range(CONFLICT_RETRIES):
                rec = self.threads.writer(run)
                event, lists = self.checkpoint_event(run, rec.state, checkpoint, new_versions, parent)
                try:
                    rec.append_many([event], checkpoint_metadata=checkpoint_metadata(event.checkpoint_id, md))
                except ConflictError:  # another writer appended: rebuild against what it wrote
                    run.forget()
                    continue
                run.lists, run.current = lists, md
                if run.marks is not None:
                    run.position[event.checkpoint_id] = len(run.marks)
                    run.marks.append(Mark(rec.offset, event.checkpoint_id, md))
                break
            else:
                raise ConflictError(run.run_id, run.rec.offset if run.rec else 0, self.log.head(run.run_id))
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"]}}

    def checkpoint_event(
        self,
        run: Run,
        state: ThreadState,
        checkpoint: Checkpoint,
        new_versions: ChannelVersions,
        parent: str | None,
    ) -> tuple[CheckpointSaved, dict[str, list[Any]]]:
        """The event that saves `checkpoint` as a change of `parent` when that is the run's current
        checkpoint (`state`), or whole otherwise (a fork), and the checkpoint's lists decoded."""
        values = checkpoint["channel_values"]
        versions = checkpoint["channel_versions"]
        seen = checkpoint["versions_seen"]
        fork = parent is None or parent != state.checkpoint_id
        chunks: dict[str, list[Blob]] = {}
        tails: dict[str, Blob] = {}
        empty: list[str] = []
        lists: dict[str, list[Any]] = {}
        if fork:
            base_versions: Mapping[str, Version] = {}
            base_seen: Mapping[str, Mapping[str, Version]] = {}
            previous: dict[str, list[Any]] = {}
            if parent is not None and (found := self.threads.find(run, parent)) is not None:
                at = self.log.state_at(run.run_id, found[0].offset, reducer=self.reducer)
                chunks = {ch: at.values[ch] for ch in versions if ch not in new_versions and ch in at.values}
        else:
            base_versions, base_seen, previous = state.versions, state.seen, run.lists
            lists = {ch: v for ch, v in previous.items() if ch not in new_versions and ch in versions}
        for ch in new_versions:
            if ch not in values:
                empty.append(ch)
                continue
            value = values[ch]
            if isinstance(value, list):
                before = previous.get(ch)
                n = -1 if before is None else len(before)
                if 0 <= n <= len(value) and all(map(operator.is_, value[:n], before)):  # type: ignore[arg-type]
                    tails[ch] = self.values.blob(value[n:])
                else:
                    chunks[ch] = [self.values.blob(value)]
                lists[ch] = list(value)
            else:
                chunks[ch] = [self.values.blob(value)]
        extra = {k: v for k, v in checkpoint.items() if k not in KNOWN_KEYS}
        updated = checkpoint.get("updated_channels")
        event = CheckpointSaved(
            checkpoint_id=checkpoint["id"],
            parent_id=parent,
            ts=checkpoint["ts"],
            v=checkpoint["v"],
            fork=fork,
            chunks=chunks,
            tails=tails,
            empty=empty,
            versions={ch: v for ch, v in versions.items() if ch not in base_versions or base_versions[ch] != v},
            dropped=[ch for ch in base_versions if ch not in versions],
            seen={n: dict(s) for n, s in seen.items() if n not in base_seen or base_seen[n] != s},
            seen_dropped=[n for n in base_seen if n not in seen],
            updated=None if updated is None else list(updated),
            extra=self.values.blob(extra) if extra else None,
        )
        return event, lists

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """What `EventLogSaver.put_writes` does."""
        conf = config["configurable"]
        run = self.rewriter.open(str(conf["thread_id"]), conf.get("checkpoint_ns", "") or "")
        checkpoint_id = conf["checkpoint_id"]
        blobs = [(WRITES_IDX_MAP.get(ch, i), ch, value) for i, (ch, value) in enumerate(writes)]
        with run.lock:
            for _ in range(CONFLICT_RETRIES):
                rec = self.threads.writer(run)
                known = {(w.task_id, w.idx) for w in self.writes_of(run, rec.state, checkpoint_id)}
                items = [
                    WriteValue(idx, ch, self.values.blob(value))
                    for idx, ch, value in blobs
                    if idx < 0 or (task_id, idx) not in known
                ]
                if not items:
                    return
                try:
                    rec.append_many([WritesSaved(checkpoint_id, task_id, task_path, items)])
                except ConflictError:
                    run.forget()
                    continue
                return
            raise ConflictError(run.run_id, run.rec.offset if run.rec else 0, self.log.head(run.run_id))

    def writes_of(self, run: Run, state: ThreadState, checkpoint_id: str) -> list[Write]:
        """The writes pending on a checkpoint of the run whose head state is `state`."""
        if checkpoint_id == state.checkpoint_id:
            return state.writes
        late = state.late.get(checkpoint_id, [])
        found = self.threads.find(run, checkpoint_id)
        if found is None:
            return late
        return [*self.log.state_at(run.run_id, found[1], reducer=self.reducer).writes, *late]
