"""The saver's operations on whole threads: `delete_thread`, `copy_thread`, `prune` and
`delete_for_runs` (which writes a run anew without some of its checkpoints).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from ..errors import UnknownRunError
from ._events import LangGraphThreadError
from ._rewrite import Part
from ._threads import run_id_of, thread_of

__all__ = ["Admin"]


class Admin(Part):
    """Deletes, copies and prunes the threads of a log."""

    def delete_thread(self, thread_id: str) -> None:
        root = run_id_of(str(thread_id))
        for run_id in self.log.runs():
            if run_id == root or run_id.startswith(root + "|"):
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
            with run.lock:
                items = self.rewriter.rewrite(src, None)
            self.threads.drop(dst)
            self.rewriter.write(dst, items)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        if strategy not in ("keep_latest", "delete"):
            raise LangGraphThreadError(f"unknown prune strategy {strategy!r}; use 'keep_latest' or 'delete'")
        for thread_id in thread_ids:
            if strategy == "delete":
                self.delete_thread(thread_id)
                continue
            for run_id in self.threads.thread_runs(str(thread_id)):
                run = self.rewriter.open(*thread_of(run_id))
                with run.lock:
                    self.threads.writer(run, check=True)
                    marks = self.threads.marks(run)
                    if marks and marks[-1].offset > self.log.run_info(run_id).base:
                        self.log.prune(run_id, before=marks[-1].offset, reducer=self.reducer)
                    run.forget()

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        doomed_runs = {str(r) for r in run_ids}
        if not doomed_runs:
            return
        for run_id in self.threads.all_runs():
            run = self.rewriter.open(*thread_of(run_id))
            with run.lock:
                self.threads.writer(run, check=True)
                marks = self.threads.marks(run)
                doomed = {m.checkpoint_id for m in marks if self.values.load(m.metadata).get("run_id") in doomed_runs}
                if not doomed:
                    continue
                if all(m.checkpoint_id in doomed for m in marks):
                    self.log.delete_run(run_id)
                else:
                    self.rewriter.replace(run_id, self.rewriter.rewrite(run_id, doomed))
                run.forget()
