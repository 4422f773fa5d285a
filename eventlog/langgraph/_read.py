"""The saver's reads: `get_tuple` and `list`, each checkpoint rebuilt from the thread's run."""

from __future__ import annotations

import contextlib
import operator
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple, get_checkpoint_id

from ..errors import PrunedError, RunReplacedError, UnknownRunError
from ._events import Blob, ThreadState
from ._rewrite import Part
from ._threads import Mark, Run, mark_of, thread_of
from ._write import CONFLICT_RETRIES

__all__ = ["FOLD_GAP_EVENTS", "Reader"]

_READ_AGAIN = (UnknownRunError, PrunedError, RunReplacedError)

FOLD_GAP_EVENTS = 4096
"""`list` folds forward from one checkpoint to the next when they are at most this many events
apart, and restores the next one from its nearest snapshot otherwise."""


class Reader(Part):
    """`get_tuple` and `list` over the runs of a log's threads."""

    def current_metadata(self, run: Run, state: ThreadState) -> Blob:
        """The LangGraph metadata of the run's current checkpoint (read once, then kept)."""
        if run.current is None:
            latest = self.log.checkpoints.load_latest(run.run_id, reducer=self.reducer, run_number=run.number or None)
            mark = None if latest is None else mark_of(latest.offset, latest.metadata)
            if mark is None or mark.checkpoint_id != state.checkpoint_id:
                found = self.threads.find(run, state.checkpoint_id or "")
                mark = None if found is None else found[0]
            run.current = mark.metadata if mark is not None else self.values.blob({})
        return run.current

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """What `EventLogSaver.get_tuple` returns."""
        run = self.rewriter.run_of(config)
        checkpoint_id = get_checkpoint_id(config)
        with run.lock:
            for attempt in range(1, CONFLICT_RETRIES + 1):
                # every read of one life, the writer's (else read anew): deleted meanwhile, made
                # again, or pruned by another worker (its checkpoints with it); the last one's error is raised
                with contextlib.suppress(*(() if attempt == CONFLICT_RETRIES else _READ_AGAIN)):
                    rec = self.threads.writer(run, check=True)
                    state: ThreadState = rec.state
                    if state.checkpoint_id is None:
                        return None
                    if checkpoint_id is None or checkpoint_id == state.checkpoint_id:
                        return self.values.checkpoint_tuple(run, state, self.current_metadata(run, state), None)
                    found = self.threads.find(run, checkpoint_id)
                    if found is None:
                        return None
                    mark, end = found
                    old = self.log.state_at(run.run_id, end, reducer=self.reducer, run_number=run.number)
                    return self.values.checkpoint_tuple(run, old, mark.metadata, state.late.get(checkpoint_id))
                run.forget()
            raise AssertionError("the last attempt returns or raises")

    def list_tuples(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> list[CheckpointTuple]:
        """What `EventLogSaver.list` yields, as a list, each run's checkpoints of one life of it:
        read anew once when another worker pruned a run since this saver kept its checkpoints,
        or made it again while it was read."""
        try:
            return self._list(config, filter=filter, before=before, limit=limit)
        except (PrunedError, RunReplacedError):  # pruned, or deleted and made again, by another worker
            return self._list(config, filter=filter, before=before, limit=limit, anew=True)

    def _list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
        anew: bool = False,
    ) -> list[CheckpointTuple]:
        if not config:  # None or {}: every thread, as LangGraph's savers read it
            runs = [self.rewriter.open(*thread_of(r)) for r in self.threads.all_runs()]
        else:
            conf = config["configurable"]
            thread_id, ns = str(conf["thread_id"]), conf.get("checkpoint_ns")
            if ns is None:
                runs = [self.rewriter.open(thread_id, thread_of(r)[1]) for r in self.threads.thread_runs(thread_id)]
            else:
                runs = [self.rewriter.open(thread_id, ns)]
        wanted = get_checkpoint_id(config) if config else None
        before_id = get_checkpoint_id(before) if before else None
        chosen: list[tuple[str, Run, Mark]] = []
        lives: dict[int, int] = {}  # the life of each run its marks are of
        for run in runs:
            with run.lock:
                if anew:
                    run.forget()
                self.threads.writer(run, check=True)
                marks = list(self.threads.marks(run))
                lives[id(run)] = run.number
                latest = {m.checkpoint_id: m for m in marks}  # a checkpoint saved twice counts once
            for mark in marks:
                cid = mark.checkpoint_id
                if latest[cid] is not mark or (wanted and cid != wanted) or (before_id and cid >= before_id):
                    continue
                if filter:
                    md = self.values.mapping(mark.metadata, "checkpoint metadata")
                    if not all(md.get(k) == v for k, v in filter.items()):
                        continue
                chosen.append((cid, run, mark))
        chosen.sort(key=operator.itemgetter(0), reverse=True)
        if limit is not None:
            chosen = chosen[: max(limit, 0)]
        tuples: dict[int, CheckpointTuple] = {}
        for run in {id(r): r for _, r, _ in chosen}.values():
            tuples.update(self.tuples(run, [m for _, r, m in chosen if r is run], lives[id(run)]))
        return [tuples[id(mark)] for _, _, mark in chosen if id(mark) in tuples]  # not one deleted meanwhile

    def tuples(self, run: Run, marks: list[Mark], number: int) -> dict[int, CheckpointTuple]:
        """Tuples of some checkpoints of one life of a run (`number`, else RunReplacedError),
        folded forward from one to the next where close."""
        out: dict[int, CheckpointTuple] = {}
        with run.lock:
            rec = self.threads.writer(run)
            if run.number != number:
                raise RunReplacedError(run.run_id, number, run.number or None, "its checkpoints were listed")
            head_state: ThreadState = rec.state
            state: ThreadState | None = None
            at = -1
            for mark in sorted(marks, key=lambda m: m.offset):
                found = self.threads.find(run, mark.checkpoint_id)
                if found is None:
                    continue
                end = found[1]
                if end == rec.offset:
                    current = head_state
                else:
                    if state is None or not at <= end <= at + FOLD_GAP_EVENTS:
                        state, at = self.log.state_at(run.run_id, end, reducer=self.reducer, run_number=number), end
                    for entry in self.log.read(run.run_id, after=at, upto=end, run_number=number):
                        state = self.reducer.apply(state, entry.event)
                    at = end
                    current = state
                out[id(mark)] = self.values.checkpoint_tuple(
                    run, current, mark.metadata, head_state.late.get(mark.checkpoint_id)
                )
            if not self.threads.same_life(run):  # deleted (and made again) while it was read: they are gone
                run.forget()
                return {}
        return out
