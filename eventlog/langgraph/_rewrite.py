"""Writing a thread's run anew: its events as batches to append again (without some checkpoints,
for `delete_for_runs`; all of them, for `copy_thread`), staged in a run of their own so that a
crash leaves the old run or the new one whole, and finished when the run is next used.

Across processes, a rewrite is fenced with the log's own run numbers and heads
(docs/concepts.md, "A run's lives"). It first makes its stage (a run of one `RewriteStarted`,
made only if absent: one rewrite of a run at a time), then appends a `RewriteStarted` to the
run at its head: every other saver's writer of the run is then behind the head, so its next
append fails, and before it makes a new writer it waits for the stage to go (`settle`). The
run is read up to that mark and replaced only if it is still at it (`delete_run` with
`expected_offset` and `run_number`).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from langchain_core.runnables import RunnableConfig

from ..errors import ConflictError, UnknownRunError
from ..events import Event
from ..log import EventLog
from ..services.runwriter import RunWriter
from ._events import (
    POLICY,
    CheckpointSaved,
    RewriteStarted,
    ThreadReducer,
    ThreadState,
    Write,
    WritesSaved,
    WriteValue,
)
from ._threads import REWRITE, Run, Threads, checkpoint_metadata, mark_of
from ._values import Values

__all__ = ["Batches", "Rewriter"]

Batches = list[tuple[list[Event], dict[str, Any] | None]]
"""A run's events to append again, in batches: each ends with a checkpoint (with its eventlog
checkpoint metadata) or holds the writes after the last checkpoint (metadata None)."""
Life = tuple[int, int]
"""(run number, head) of a run, as `EventLog.life` gives it; (0, 0): no run."""
REWRITE_IDLE_SECONDS = 5.0
"""A staged rewrite whose stage and run have not changed for this long was cut short (its saver
died): a saver waiting for it then finishes it (a complete stage) or drops it."""
REWRITE_POLL_SECONDS = 0.005
REWRITE_LOCK_SECONDS = 10.0
"""How long a rewrite tries to append its mark to a run that other savers keep writing."""


class Rewriter:
    """Rewrites of a log's thread runs, and the recovery of one a crash interrupted."""

    def __init__(self, threads: Threads, values: Values) -> None:
        self.threads = threads
        self.values = values
        self.log: EventLog[Any] = threads.log
        self.reducer: ThreadReducer = threads.reducer
        threads.settle = self.settle

    def open(self, thread_id: str, ns: str) -> Run:
        """The cached run of a thread's namespace (its writer, when made, first `settle`s)."""
        return self.threads.get(thread_id, ns)[0]

    def run_of(self, config: RunnableConfig) -> Run:
        """The cached run of the thread and namespace a config names."""
        conf = config["configurable"]
        return self.open(str(conf["thread_id"]), conf.get("checkpoint_ns", "") or "")

    def settle(self, run_id: str) -> None:
        """Return once no rewrite of the run is staged: wait while another saver rewrites it, and
        finish (or drop) a rewrite that has stopped for `REWRITE_IDLE_SECONDS`."""
        stage = run_id + REWRITE
        if len(stage.encode("utf-8", "surrogatepass")) > 1024:
            return
        seen: tuple[Life, Life] | None = None
        since = time.monotonic()
        while (now := (self.log.life(stage), self.log.life(run_id)))[0] != (0, 0):
            if now != seen:
                seen, since = now, time.monotonic()
            elif time.monotonic() - since >= REWRITE_IDLE_SECONDS:
                try:
                    self.recover(run_id, *now)
                except (ConflictError, UnknownRunError):
                    pass  # another saver finished it first, or it moved again: look again
                seen = None
                continue
            time.sleep(REWRITE_POLL_SECONDS)

    def rewrite(self, run_id: str, doomed: set[str] | None, life: Life | None = None) -> Batches:
        """A run's events as batches to append again, without the checkpoints in `doomed` and their
        writes; each batch ends with a checkpoint (and its metadata) or holds trailing writes.

        All of one life of the run up to one head: `life` (the run's now, by default).
        ConflictError when the run was deleted or made again meanwhile."""
        log = self.log
        number, head = life or log.life(run_id)
        try:
            batches = self._rewrite(run_id, doomed, head)
        except UnknownRunError:
            batches = []
        if log.life(run_id)[0] != number:
            raise ConflictError(run_id, head, log.head(run_id))
        return batches

    def _rewrite(self, run_id: str, doomed: set[str] | None, head: int) -> Batches:
        log, reducer = self.log, self.reducer
        info = log.run_info(run_id)
        base, number = info.base, info.number
        records: dict[int, dict[str, Any]] = {}
        for cp in log.checkpoints.list(run_id, reducer=reducer, run_number=number):
            if cp.offset <= head and mark_of(cp.offset, cp.metadata) is not None:
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

        state = log.state_at(run_id, base, reducer=reducer, run_number=number) if base else reducer.initial()
        if base and state.checkpoint_id is not None and keep(state.checkpoint_id):
            whole(state, base)
            writes(state.checkpoint_id, state.writes)
        for checkpoint_id, pending in state.late.items():
            if keep(checkpoint_id):
                writes(checkpoint_id, pending)
        for entry in log.read(run_id, after=base, upto=head, run_number=number):
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

    def write(self, run_id: str, batches: Batches, rec: RunWriter[ThreadState] | None = None) -> None:
        """Append the batches to a run that does not exist yet (ConflictError if it does), or
        with `rec`, through that writer."""
        if rec is None:
            rec = self.fresh(run_id)
        for events, metadata in batches:  # each append is fenced at the last one's offset
            if metadata is None and type(events[-1]) is CheckpointSaved:
                metadata = checkpoint_metadata(events[-1].checkpoint_id, self.values.blob({}))
            rec.append_many(events, checkpoint_metadata=metadata)

    def fresh(self, run_id: str) -> RunWriter[ThreadState]:
        """A writer of a run that does not exist yet; its first append is fenced at offset 0."""
        rec = self.log.writer(run_id, reducer=self.reducer, policy=POLICY)
        if rec.offset:
            raise ConflictError(run_id, 0, rec.offset)
        return rec

    def replace(self, run_id: str, runs: set[str]) -> None:
        """Write a run anew without the checkpoints whose metadata `run_id` is in `runs`: make the
        stage, mark the run, read it up to the mark, stage the batches, mark the stage complete,
        then replace the run. ConflictError, with the run unchanged, when another saver got in
        the way; UnknownRunError when the run is gone."""
        stage = self.start(run_id)
        try:
            life = self.mark(run_id)
            doomed = self.doomed(run_id, runs, life[1])
            if not doomed:  # what was to go went meanwhile
                self.drop(stage.run_id)
                return
            batches = self.rewrite(run_id, doomed, life)
            self.complete(stage, batches, life)
        except BaseException:
            self.drop(stage.run_id)
            raise
        self.finish(run_id, batches, life)

    def doomed(self, run_id: str, runs: set[str], head: int) -> set[str]:
        """The checkpoints of the run up to `head` whose metadata `run_id` is in `runs`."""
        out = set()
        for cp in self.log.checkpoints.list(run_id, reducer=self.reducer):
            mark = mark_of(cp.offset, cp.metadata)
            if cp.offset <= head and mark is not None and self.values.load(mark.metadata).get("run_id") in runs:
                out.add(mark.checkpoint_id)
        return out

    def copy(self, run_id: str, batches: Batches) -> None:
        """Write a run that must not exist yet from batches, staged first."""
        self.complete(self.start(run_id), batches, (0, 0))
        self.finish(run_id, batches, (0, 0))

    def start(self, run_id: str) -> RunWriter[ThreadState]:
        """Make the run's stage (ConflictError if another saver's rewrite of it is under way)."""
        self.settle(run_id)
        stage = self.fresh(run_id + REWRITE)
        stage.append_many([RewriteStarted()])
        return stage

    def mark(self, run_id: str) -> Life:
        """Append a `RewriteStarted` to the run at its head, so that every other writer of it falls
        behind; the run's life with it. Tried again while other savers keep appending, for at most
        REWRITE_LOCK_SECONDS (then the last ConflictError, with the number of attempts)."""
        deadline = time.monotonic() + REWRITE_LOCK_SECONDS
        attempt = 0
        while True:
            attempt += 1
            number, head = self.log.life(run_id)
            if not number:
                raise UnknownRunError(run_id)
            try:
                offset = self.log.append(run_id, RewriteStarted(), expected_offset=head, run_number=number)
            except ConflictError as exc:
                if time.monotonic() > deadline:
                    raise exc.after(attempt) from None
                time.sleep(REWRITE_POLL_SECONDS)
                continue
            return number, offset

    def complete(self, stage: RunWriter[ThreadState], batches: Batches, life: Life) -> None:
        """Write the batches to the stage and mark it complete, with the life of the run they replace."""
        self.write(stage.run_id, batches, stage)
        stage.checkpoint({"rewrite": "complete", "life": list(life)})

    def finish(self, run_id: str, batches: Batches, life: Life) -> None:
        """Replace the run at `life` ((0, 0): no run) by the staged batches, then drop the stage;
        the stage alone is dropped when the run is no longer at `life`."""
        number, head = life
        try:
            if number:
                self.log.delete_run(run_id, expected_offset=head, run_number=number)
            elif self.log.head(run_id):
                raise ConflictError(run_id, 0, self.log.head(run_id))
        except (ConflictError, UnknownRunError):
            self.drop(run_id + REWRITE)
            raise
        self.write(run_id, batches)
        self.drop(run_id + REWRITE)

    def drop(self, stage: str) -> None:
        """Delete a stage (gone already when a waiting saver took it for dead and dropped it)."""
        with contextlib.suppress(UnknownRunError):
            self.log.delete_run(stage)

    def recover(self, run_id: str, stage_life: Life, life: Life) -> None:
        """Finish a rewrite a crash interrupted (a complete stage), or drop an incomplete stage or
        one the run moved past; `stage_life` and `life` are those of the stage and of the run now."""
        stage = run_id + REWRITE
        latest = self.log.checkpoints.list(stage, limit=1, newest_first=True)
        meta = latest[0].metadata if latest else {}
        if meta.get("rewrite") == "complete":
            was = meta.get("life") or [0, 0]  # the run as the rewrite read it
            number, head = life
            if number != was[0] or head == was[1]:  # not written since (or the new run, partly written)
                batches = self.rewrite(stage, None, stage_life)
                if number:
                    self.log.delete_run(run_id, expected_offset=head, run_number=number)
                self.write(run_id, batches)
        self.log.delete_run(stage, expected_offset=stage_life[1], run_number=stage_life[0])


class Part:
    """What each part of the saver (reads, writes, admin) works with: the rewriter, the threads'
    runs, the serializer's values, the log and the reducer."""

    def __init__(self, rewriter: Rewriter, values: Values) -> None:
        self.rewriter = rewriter
        self.threads = rewriter.threads
        self.values = values
        self.log: EventLog[Any] = rewriter.log
        self.reducer: ThreadReducer = rewriter.reducer
