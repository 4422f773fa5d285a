"""`EventLogSaver.answer`: a human's answer to the `interrupt()` a thread waits on, stored from
outside the graph's process so that the graph's next `graph.invoke(None, config)` (or `stream`)
resumes the interrupted node with it.

What `graph.invoke(Command(resume=value), config)` stores before it runs anything, this stores:
the write `("__resume__", value)` of LangGraph's null task (the thread-wide resume value an
`interrupt()` reads when its task has none of its own), pending on the thread's latest
checkpoint, written by the saver's serializer and its own `put_writes`. The checks and the write
are one fenced step (`Writer.put_writes` with `check`): the answer lands on the checkpoint it was
decided on, while that is still the thread's latest and still waits, or nowhere.

The channel names and the null task's id are LangGraph's stored form of pending writes (what
every saver holds and LangGraph reads back), not names this module imports.
"""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import WRITES_IDX_MAP

from ._events import LangGraphThreadError, ThreadState, Write
from ._rewrite import Part, Rewriter
from ._values import Values
from ._write import Writer

__all__ = ["INTERRUPT", "NULL_TASK", "RESUME", "AnswerRefusedError", "Answerer", "asked"]

NULL_TASK = "00000000-0000-0000-0000-000000000000"
"""The task id LangGraph stores the writes of a `Command` under (its null task)."""
RESUME, INTERRUPT = "__resume__", "__interrupt__"
CONTROL = frozenset({RESUME, INTERRUPT, "__error__", "__error_source_node__"})
"""Channels that tell what happened to a task; any other write is its output (LangGraph's rule:
a task with an output write finished, and its interrupt no longer waits)."""


class AnswerRefusedError(LangGraphThreadError):
    """An answer that is not stored: `reason` is `no value`, `no thread` (no checkpoint: never run,
    or deleted), `moved on` (its latest checkpoint is not the one named), `not waiting`, `answered`
    (a resume value is stored already) or `several` (more than one interrupt waits)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def asked(writes: list[Write]) -> tuple[list[Write], Write | None]:
    """(the `__interrupt__` writes of the tasks that have not finished, the null task's
    `__resume__` write or None) among a checkpoint's pending writes."""
    finished = {w.task_id for w in writes if w.channel not in CONTROL}
    questions = [w for w in writes if w.channel == INTERRUPT and w.task_id != NULL_TASK and w.task_id not in finished]
    stored = next((w for w in writes if w.task_id == NULL_TASK and w.channel == RESUME), None)
    return questions, stored


class Answerer(Part):
    """Stores answers to the interrupts threads wait on."""

    def __init__(self, rewriter: Rewriter, values: Values, writer: Writer) -> None:
        super().__init__(rewriter, values)
        self.writer = writer

    def answer(self, thread_id: str, value: Any, checkpoint_id: str | None) -> RunnableConfig:
        """What `EventLogSaver.answer` does."""
        thread_id = str(thread_id)
        if value is None:  # LangGraph reads a None resume value as no answer, and asks again
            raise AnswerRefusedError("no value", f"thread {thread_id!r}: None is no answer; give a value")
        blobs = self.writer.blobs([(RESUME, value)])  # as LangGraph's put_writes would write it
        assert blobs[0][0] == WRITES_IDX_MAP[RESUME]
        decided: list[str] = []

        def check(state: ThreadState) -> None:
            self.refuse_unless_waiting(thread_id, state, checkpoint_id or (decided[0] if decided else None))
            decided[:1] = [str(state.checkpoint_id)]

        run = self.rewriter.open(thread_id, "")
        with run.lock:  # one decision: an attempt made again (another writer came first) keeps to it
            state = self.threads.writer(run, check=True).state
            check(state)
            config: RunnableConfig = {
                "configurable": {"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": decided[0]}
            }
            self.writer.put_writes(config, blobs, NULL_TASK, "", check=check)
        return config

    def refuse_unless_waiting(self, thread_id: str, state: ThreadState, checkpoint_id: str | None) -> None:
        """Raise AnswerRefusedError unless the thread's latest checkpoint (`state`), the one named
        when one is, waits on exactly one interrupt and holds no resume value yet."""
        named = f"thread {thread_id!r}"
        if state.checkpoint_id is None:
            raise AnswerRefusedError("no thread", f"{named} has no checkpoint (never run, or deleted): nothing waits")
        if checkpoint_id is not None and state.checkpoint_id != checkpoint_id:
            raise AnswerRefusedError(
                "moved on",
                f"{named} moved on from checkpoint {checkpoint_id!r} to {state.checkpoint_id!r}: nothing stored",
            )
        questions, stored = asked(state.writes)
        at = f"{named} at checkpoint {state.checkpoint_id!r}"
        if stored is not None:
            raise AnswerRefusedError(
                "answered",
                f"{at} holds a resume value already: the graph takes it at its next invoke(None, config) "
                "(another one: graph.invoke(Command(resume=value), config))",
            )
        if not questions:
            raise AnswerRefusedError("not waiting", f"{at} waits on no interrupt: nothing to answer")
        count = sum(self.interrupts(w) for w in questions)
        if count > 1:
            raise AnswerRefusedError(
                "several",
                f"{at} waits on {count} interrupts: answer each by its id, "
                "graph.invoke(Command(resume={interrupt_id: value, ...}), config)",
            )

    def interrupts(self, write: Write) -> int:
        """How many interrupts a task's `__interrupt__` write holds (a subgraph's task: its nodes')."""
        try:
            value = self.values.load(write.value)
        except Exception:  # noqa: BLE001 - a value the serializer refuses still counts as one question
            return 1
        return len(value) if isinstance(value, list | tuple) else 1
