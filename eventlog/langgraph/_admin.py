"""The saver's operations on whole threads: `delete_thread`, `copy_thread`, `prune` and
`delete_for_runs` (which writes a run anew without some of its checkpoints).

Each acts only on the runs that hold LangGraph threads (`Threads.thread_runs`, `all_runs`: the
check `put` makes), never on a run of other events whose id looks like a thread's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, TypeVar

from ..errors import ConflictError, RunReplacedError, UnknownRunError
from ._events import LangGraphThreadError, id_list
from ._read import Reader
from ._rewrite import Batches, Part, Rewriter
from ._threads import Mark, Run, run_id_of, thread_of
from ._values import Values
from ._write import CONFLICT_RETRIES

__all__ = ["Admin"]

T = TypeVar("T")


class Admin(Part):
    """Deletes, copies and prunes the threads of a log."""

    def __init__(self, rewriter: Rewriter, values: Values, reader: Reader) -> None:
        super().__init__(rewriter, values)
        self.reader = reader

    def delete_thread(self, thread_id: str) -> None:
        for run_id in self.threads.thread_runs(str(thread_id)):
            self.threads.drop(run_id)
            with contextlib.suppress(UnknownRunError):
                self.log.delete_run(run_id)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        source, target = str(source_thread_id), str(target_thread_id)
        plan = [(r, run_id_of(target, thread_of(r)[1])) for r in self.threads.thread_runs(source)]
        for _, dst in plan:
            if self.log.head(dst):
                raise LangGraphThreadError(f"thread {target!r} exists already; delete it first or copy to a new thread")
        for src, dst in plan:
            run = self.rewriter.open(*thread_of(src))
            batches = self.fenced(run, partial(self.copy_of, run))
            self.threads.drop(dst)
            try:
                self.rewriter.copy(dst, batches)
            except ConflictError:
                raise LangGraphThreadError(
                    f"thread {target!r} was written while it was copied to; delete it first or copy to a new thread"
                ) from None

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        if strategy not in ("keep_latest", "delete"):
            raise LangGraphThreadError(f"unknown prune strategy {strategy!r}; use 'keep_latest' or 'delete'")
        for thread_id in id_list("thread_ids", thread_ids):
            if strategy == "delete":
                self.delete_thread(thread_id)
                continue
            for run_id in self.threads.thread_runs(str(thread_id)):
                self.keep_latest(run_id)

    def keep_latest(self, run_id: str) -> None:
        """Prune a thread's run to what its latest checkpoint is rebuilt from, on the life that was
        read: a run deleted and made again meanwhile is read again and pruned on its new life."""
        run = self.rewriter.open(*thread_of(run_id))
        for attempt in range(1, CONFLICT_RETRIES + 1):
            with run.lock:
                try:
                    self.threads.writer(run, check=True)
                    marks = self.threads.marks(run)
                    keep = self.rebuilt_from(run, marks) if marks else 0
                    info = self.log.run_info(run_id, run_number=run.number)
                    # a fork's offsets up to its fork are the run's it forks from, not its own to drop
                    if keep > max(info.base, info.fork_offset if info.parent is not None else 0):
                        self.log.prune(run_id, before=keep, reducer=self.reducer, run_number=info.number)
                    return
                except RunReplacedError:
                    if attempt == CONFLICT_RETRIES:
                        raise
                finally:
                    run.forget()

    def rebuilt_from(self, run: Run, marks: list[Mark]) -> int:
        """The offset of the oldest checkpoint the latest one's values are rebuilt from: the
        latest itself, or for a `DeltaChannel` not snapshotted there, the ancestors LangGraph
        replays the writes of, back to the nearest one that stores its value (LangGraph's
        `get_delta_channel_history` walk); a prune keeps those."""
        latest, at = marks[-1], {m.checkpoint_id: m.offset for m in marks}
        thread_id, ns = thread_of(run.run_id)
        config: Any = {
            "configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": latest.checkpoint_id}
        }
        tup = self.reader.get_tuple(config)
        if tup is None:
            return latest.offset
        counters = tup.metadata.get("counters_since_delta_snapshot") or {}
        remaining = {ch for ch in counters if ch not in tup.checkpoint["channel_values"]}
        keep = latest.offset
        parent = tup.parent_config
        while remaining and parent is not None and (tup := self.reader.get_tuple(parent)) is not None:
            offset = at.get(tup.checkpoint["id"])
            if offset is None:  # an ancestor of another run: this run keeps all it has
                return marks[0].offset
            stored = {ch for ch in remaining if ch in tup.checkpoint["channel_values"]}
            if stored or remaining & {w[1] for w in tup.pending_writes or ()}:
                keep = offset
            remaining -= stored
            parent = tup.parent_config
        return keep

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        doomed_runs = set(id_list("run_ids", run_ids))
        if not doomed_runs:
            return
        for run_id in self.threads.all_runs():
            run = self.rewriter.open(*thread_of(run_id))

            def once(run: Run = run, run_id: str = run_id) -> None:
                self.threads.writer(run, check=True)
                if any(
                    self.values.mapping(m.metadata, "checkpoint metadata").get("run_id") in doomed_runs
                    for m in self.threads.marks(run)
                ):
                    with contextlib.suppress(UnknownRunError):  # deleted meanwhile: nothing left to delete
                        self.rewriter.replace(run_id, doomed_runs)
                    run.forget()

            self.fenced(run, once)

    def copy_of(self, run: Run) -> Batches:
        """The run's events, to write as another thread's."""
        return self.rewriter.rewrite(run.run_id, None, self.life(run))

    def life(self, run: Run) -> tuple[int, int]:
        """(run number, head) of the run as its writer, checked now, knows them."""
        rec = self.threads.writer(run, check=True)
        return run.number, rec.offset

    def fenced(self, run: Run, work: Callable[[], T]) -> T:
        """`work` under the run's lock, made again (against the run as it is then) when another
        saver wrote the run, or deleted it, meanwhile (ConflictError); not when the conflict ends
        attempts that `work` made itself (`attempts` > 1: a rewrite's mark spent its time)."""
        with run.lock:
            met: ConflictError | None = None  # the last conflict, its heads read before the run is forgotten
            for _ in range(CONFLICT_RETRIES):
                try:
                    return work()
                except ConflictError as exc:
                    if exc.attempts > 1:
                        raise
                    met = exc
                    run.forget()
            raise ConflictError.last_of(met, CONFLICT_RETRIES) from None
