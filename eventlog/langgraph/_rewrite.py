"""Writing a thread's run anew: its events as batches to append again (without some checkpoints,
for `delete_for_runs`; all of them, for `copy_thread`), staged in a run of their own so that a
crash leaves the old run or the new one whole, and finished when the run is next used.
"""

from __future__ import annotations

from typing import Any

from ..events import Event
from ..log import EventLog
from ._events import POLICY, CheckpointSaved, ThreadReducer, ThreadState, Write, WritesSaved, WriteValue
from ._threads import REWRITE, Run, Threads, checkpoint_metadata, mark_of
from ._values import Values

__all__ = ["Batches", "Rewriter"]

Batches = list[tuple[list[Event], dict[str, Any] | None]]
"""A run's events to append again, in batches: each ends with a checkpoint (with its eventlog
checkpoint metadata) or holds the writes after the last checkpoint (metadata None)."""


class Rewriter:
    """Rewrites of a log's thread runs, and the recovery of one a crash interrupted."""

    def __init__(self, threads: Threads, values: Values) -> None:
        self.threads = threads
        self.values = values
        self.log: EventLog[Any] = threads.log
        self.reducer: ThreadReducer = threads.reducer

    def open(self, thread_id: str, ns: str) -> Run:
        """The cached run of a thread's namespace; a run not cached yet first finishes (or drops) a
        rewrite of it that a crash interrupted."""
        run, new = self.threads.get(thread_id, ns)
        if new:
            self.recover(run.run_id)
        return run

    def rewrite(self, run_id: str, doomed: set[str] | None) -> Batches:
        """A run's events as batches to append again, without the checkpoints in `doomed` and their
        writes; each batch ends with a checkpoint (and its metadata) or holds trailing writes."""
        log, reducer = self.log, self.reducer
        base = log.run_info(run_id).base
        records: dict[int, dict[str, Any]] = {}
        for cp in log.checkpoints.list(run_id, reducer=reducer):
            if mark_of(cp.offset, cp.metadata) is not None:
                records[cp.offset] = cp.metadata
        batches: Batches = []
        batch: list[Event] = []
        kept: str | None = None  # the current checkpoint of the new run

        def keep(checkpoint_id: str) -> bool:
            return doomed is None or checkpoint_id not in doomed

        def whole(state: ThreadState, offset: int) -> None:
            nonlocal kept, batch
            event = CheckpointSaved(
                checkpoint_id=state.checkpoint_id or "",
                parent_id=state.parent_id,
                ts=state.ts,
                v=state.v,
                fork=True,
                chunks={ch: list(chunks) for ch, chunks in state.values.items()},
                versions=dict(state.versions),
                seen={n: dict(s) for n, s in state.seen.items()},
                updated=state.updated,
                extra=state.extra,
            )
            batches.append(([*batch, event], records.get(offset)))
            batch, kept = [], state.checkpoint_id

        def writes(checkpoint_id: str, pending: list[Write]) -> None:
            for w in pending:
                batch.append(
                    WritesSaved(checkpoint_id, w.task_id, w.task_path, [WriteValue(w.idx, w.channel, w.value)])
                )

        state = log.state_at(run_id, base, reducer=reducer) if base else reducer.initial()
        if base and state.checkpoint_id is not None and keep(state.checkpoint_id):
            whole(state, base)
            writes(state.checkpoint_id, state.writes)
        for checkpoint_id, pending in state.late.items():
            if keep(checkpoint_id):
                writes(checkpoint_id, pending)
        for entry in log.read(run_id, after=base):
            event = entry.event
            current = state.checkpoint_id
            state = reducer.apply(state, event)
            if type(event) is CheckpointSaved:
                if not keep(event.checkpoint_id):
                    continue
                if event.fork or current == kept:
                    batches.append(([*batch, event], records.get(entry.offset)))
                    batch, kept = [], event.checkpoint_id
                else:
                    whole(state, entry.offset)
            elif type(event) is WritesSaved and keep(event.checkpoint_id):
                batch.append(event)
        if batch:
            batches.append((batch, None))
        return batches

    def write(self, run_id: str, batches: Batches) -> None:
        rec = self.log.writer(run_id, reducer=self.reducer, policy=POLICY)
        for events, metadata in batches:
            if metadata is None and type(events[-1]) is CheckpointSaved:
                metadata = checkpoint_metadata(events[-1].checkpoint_id, self.values.blob({}))
            rec.append_many(events, checkpoint_metadata=metadata)

    def replace(self, run_id: str, batches: Batches) -> None:
        """Write a run anew: stage the batches, mark the stage complete, then replace the run."""
        stage = run_id + REWRITE
        if self.log.head(stage):
            self.log.delete_run(stage)
        self.write(stage, batches)
        self.log.checkpoints.save(stage, metadata={"rewrite": "complete"}, reducer=self.reducer)
        self.finish(run_id, batches)

    def finish(self, run_id: str, batches: Batches) -> None:
        if self.log.head(run_id):
            self.log.delete_run(run_id)
        self.write(run_id, batches)
        self.log.delete_run(run_id + REWRITE)

    def recover(self, run_id: str) -> None:
        """Finish a rewrite a crash interrupted (a complete stage), or drop an incomplete stage."""
        stage = run_id + REWRITE
        if len(stage.encode("utf-8", "surrogatepass")) > 1024 or not self.log.head(stage):
            return
        latest = self.log.checkpoints.list(stage, limit=1, newest_first=True)
        if latest and latest[0].metadata.get("rewrite") == "complete":
            self.finish(run_id, self.rewrite(stage, None))
        else:
            self.log.delete_run(stage)


class Part:
    """What each part of the saver (reads, writes, admin) works with: the rewriter, the threads'
    runs, the serializer's values, the log and the reducer."""

    def __init__(self, rewriter: Rewriter, values: Values) -> None:
        self.rewriter = rewriter
        self.threads = rewriter.threads
        self.values = values
        self.log: EventLog[Any] = rewriter.log
        self.reducer: ThreadReducer = rewriter.reducer
