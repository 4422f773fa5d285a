"""A LangGraph thread's `interrupt()` answered from the page (`eventlog ui --allow-writes`).

The answer is stored by the integration's own `EventLogSaver.answer` (LangGraph's thread-wide
resume value, as `graph.invoke(Command(resume=value), config)` stores it); the graph, in the
user's process, resumes the interrupted node with it at its next `graph.invoke(None, config)`.
Until then the page says the answer is stored (`eventlog.views.answered`). The UI answers a
thread's root run that waits on one interrupt; a subgraph's run, or a thread that waits on
several, is answered by the program (`Command(resume={interrupt_id: value})`).
"""

from __future__ import annotations

import threading
from typing import Any

import msgspec
from starlette.exceptions import HTTPException

from eventlog import EventLog
from eventlog.errors import RunReplacedError
from eventlog.views import RunView, answered

from . import model

__all__ = ["ThreadAnswers", "waiting"]


def _shown(value: Any) -> str:
    text = model.pretty(model.fields_shown(value))
    return text[: model.waiting_value_shown_max] + "…" if len(text) > model.waiting_value_shown_max else text


def _root(run_id: str) -> bool:
    """Whether the run is a thread's root namespace (not a subgraph's)."""
    from eventlog.langgraph import thread_of

    return thread_of(run_id)[1] == ""


def waiting(
    log: EventLog[Any], run_id: str, offset: int, view: RunView | None, state: Any = None
) -> list[model.Waiting]:
    """`model.waiting_at`, and for a LangGraph thread's root run: its one question marked as one
    the UI answers; or, when nothing waits, the answer stored that the graph has not taken yet."""
    out = model.waiting_at(log, run_id, offset, view, state)
    if view is None or view.name != "langgraph" or not _root(run_id):
        return out
    if out:
        return [msgspec.structs.replace(w, framework="langgraph", resumable=len(out) == 1) for w in out]
    return [
        model.Waiting(one.get("node"), _shown(one.get("value")), framework="langgraph", answer=_shown(one["answer"]))
        for one in answered(view, log, run_id, offset)
    ]


class ThreadAnswers:
    """Answers to LangGraph threads, through one `EventLogSaver` over the UI's log (made when first used)."""

    def __init__(self, log: EventLog[Any]) -> None:
        self.log = log
        self._saver: Any = None
        self._lock = threading.Lock()

    def saver(self) -> Any:
        with self._lock:
            if self._saver is None:
                from eventlog.langgraph import EventLogSaver

                self._saver = EventLogSaver(self.log)
            return self._saver

    def answer(self, run_id: str, head: int, number: int | None, value: Any) -> int:
        """Store `value` as the answer of the thread whose root run is `run_id`, if it is still at
        `head` (the page's) and life `number`; the offset of the write. 409 when it is not, or
        when the saver refuses (nothing waits, answered already, several wait, moved on)."""
        from eventlog.langgraph import AnswerRefusedError, ThreadReducer, thread_of

        thread_id, ns = thread_of(run_id)
        if ns:
            raise HTTPException(
                400, f"run {run_id!r} is a subgraph's: LangGraph resumes it through its thread's root run {thread_id!r}"
            )
        with self.log.pinned(run_id) as info:
            if number is not None and number != info.number:
                raise RunReplacedError(run_id, number, info.number, "its page was open")
            if info.head != head:
                raise HTTPException(409, f"run {run_id!r} went on to offset {info.head} since offset {head}")
            decided = self.log.state_at(run_id, head, reducer=ThreadReducer(), run_number=info.number).checkpoint_id
        if decided is None:
            raise HTTPException(409, f"thread {thread_id!r} has no checkpoint at offset {head}: nothing to answer")
        try:
            self.saver().answer(thread_id, value, checkpoint_id=decided)
        except AnswerRefusedError as exc:
            raise HTTPException(400 if exc.reason == "no value" else 409, str(exc)) from None
        return self.log.head(run_id)
