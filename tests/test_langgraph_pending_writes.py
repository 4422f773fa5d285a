"""The writes pending on a LangGraph checkpoint are what InMemorySaver keeps, after any time travel.

LangGraph's savers key a checkpoint's writes by task and index: a write to a special channel
(`__error__`, `__scheduled__`, `__interrupt__`, `__resume__`) replaces the one under its key, any
other leaves the one there. That holds here when the write comes after the thread moved on (a
second resume of an interrupted checkpoint, an error or an interrupt again on an older one), read
by the saver that wrote it, by another saver on the log and by one on the log opened again.
Graph stories run once on InMemorySaver and once on EventLogSaver over every store; a property
drives `put`, `put_writes` and `aput_writes` directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import operator
import os
from collections.abc import Callable
from typing import Annotated, Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("langgraph.checkpoint.conformance", reason="pip install 'eventlog[test]' (langgraph extras)")

from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base import WRITES_IDX_MAP, empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from test_langgraph_graphs import agent_graph, history, plain
from typing_extensions import TypedDict

import eventlog
from eventlog.langgraph import EventLogSaver
from eventlog.langgraph import _saver as saver_module

NULL_TASK = "00000000-0000-0000-0000-000000000000"
"""The task id LangGraph writes a thread-wide `Command(resume=...)` under."""

# -- what a thread's checkpoints hold, without ids and times --------------------------------------


def pending(saver: Any, snap: Any) -> list[tuple[str, str, Any]]:
    """`get_tuple(config).pending_writes` of a snapshot's checkpoint, each task named by the
    snapshot's task of that id (LangGraph's task ids are made of checkpoint ids)."""
    names = {t.id: t.name for t in snap.tasks} | {NULL_TASK: "(thread)"}
    tup = saver.get_tuple(snap.config)
    assert tup is not None
    return [(names.get(task, "(other)"), channel, plain(value)) for task, channel, value in tup.pending_writes]


def thread(graph: Any, saver: Any, cfg: dict[str, Any]) -> Any:
    """The thread as LangGraph reads it: `get_state_history` (values, next, tasks with their
    interrupts and errors), `get_state` of each checkpoint, and each one's pending writes."""
    snaps = list(graph.get_state_history(cfg))
    states = [graph.get_state(s.config) for s in snaps]
    errors = [[plain(t.error) for t in s.tasks] for s in states]
    interrupts = [[plain(list(t.interrupts)) for t in s.tasks] for s in states]
    return (
        history(graph, cfg),
        [(plain(s.values), s.next) for s in states],
        errors,
        interrupts,
        [pending(saver, s) for s in snaps],
    )


def same_everywhere(
    story: Callable[[Any], Any],
    graph_of: Callable[[Any], Any],
    cfg: dict[str, Any],
    saver: EventLogSaver,
    open_log: Callable[..., eventlog.EventLog],
) -> Any:
    """Run the story on InMemorySaver and on the saver: what it gives and the thread must be the
    same, read by the saver, by another saver on its log, and by one on the log opened again."""
    memory = InMemorySaver()
    expected = story(memory), thread(graph_of(memory), memory, cfg)
    assert (story(saver), thread(graph_of(saver), saver, cfg)) == expected
    other = EventLogSaver(saver.log)
    try:
        assert thread(graph_of(other), other, cfg) == expected[1]
    finally:
        other.close()
    saver.close()
    saver.log.close()
    with contextlib.closing(EventLogSaver(open_log())) as fresh:
        assert thread(graph_of(fresh), fresh, cfg) == expected[1]
    return expected


# -- a second resume of an interrupted checkpoint -----------------------------------------------


def resumes_of(out: tuple[Any, ...]) -> list[list[Any]]:
    """The `__resume__` writes of each checkpoint of a thread (`thread(...)[4]`)."""
    return [[w for w in writes if w[1] == "__resume__"] for writes in out[4]]


def test_a_second_resume_of_an_interrupted_checkpoint_replaces_its_resume(
    saver: EventLogSaver, open_log: Callable[..., eventlog.EventLog]
) -> None:
    """Resumed, then resumed again twice from its config after the thread ran on: the checkpoint
    keeps one `__resume__` write per task, the thread-wide one being the last answer given."""
    cfg = {"configurable": {"thread_id": "again"}}

    def story(s: Any) -> Any:
        graph = agent_graph(s)
        out = [plain(graph.invoke({"messages": [HumanMessage(content="Paris")]}, cfg))]
        waiting = graph.get_state(cfg).config
        out.append(plain(graph.invoke(Command(resume=True), cfg)))
        out.append(plain(graph.invoke(Command(resume=False), waiting)))
        out.append(plain(graph.invoke(Command(resume=True), waiting)))
        return out

    expected = same_everywhere(story, agent_graph, cfg, saver, open_log)
    resumes = [r for r in resumes_of(expected[1]) if r]
    assert len(resumes) == 1 and len(resumes[0]) == 2  # the thread-wide one and the task's
    assert ("(thread)", "__resume__", True) in resumes[0]


def test_resuming_the_head_then_an_older_interrupted_checkpoint(
    saver: EventLogSaver, open_log: Callable[..., eventlog.EventLog]
) -> None:
    """Two questions, each waiting on the review; the newer resumed at the head, then the older
    one resumed from its config, then the newer one again from its own."""
    cfg = {"configurable": {"thread_id": "head-then-older"}}

    def story(s: Any) -> Any:
        graph = agent_graph(s)
        out = [plain(graph.invoke({"messages": [HumanMessage(content="Paris")]}, cfg))]
        first = graph.get_state(cfg).config
        out.append(plain(graph.invoke(Command(resume=True), cfg)))
        out.append(plain(graph.invoke({"messages": [HumanMessage(content="Oslo")]}, cfg)))
        second = graph.get_state(cfg).config
        out.append(plain(graph.invoke(Command(resume=False), cfg)))
        out.append(plain(graph.invoke(Command(resume=False), first)))
        out.append(plain(graph.invoke(Command(resume=True), second)))
        return out

    same_everywhere(story, agent_graph, cfg, saver, open_log)


def test_async_resumes_of_an_older_checkpoint_replace_its_resume(
    saver: EventLogSaver, open_log: Callable[..., eventlog.EventLog]
) -> None:
    """The same through `ainvoke` (the saver's `aput_writes`, `aget_tuple`, `alist`)."""
    cfg = {"configurable": {"thread_id": "async-again"}}

    def story(s: Any) -> Any:
        async def run() -> Any:
            graph = agent_graph(s)
            out = [plain(await graph.ainvoke({"messages": [HumanMessage(content="Rome")]}, cfg))]
            waiting = (await graph.aget_state(cfg)).config
            for answer in (True, False, True):
                out.append(plain(await graph.ainvoke(Command(resume=answer), waiting)))
            return out

        return asyncio.run(run())

    same_everywhere(story, agent_graph, cfg, saver, open_log)


# -- writes are taken as given -------------------------------------------------------------------


class Log(TypedDict, total=False):
    log: Annotated[list, operator.add]
    seen: list


def editing_graph(saver: Any) -> Any:
    """A node that edits the last item of its state in place, then waits for a human."""

    def ask(s: Log) -> Log:
        if s["log"]:
            s["log"][-1]["n"] += 1
        interrupt("q")
        return {"seen": [dict(item) for item in s["log"]]}

    g = StateGraph(Log)
    g.add_node("ask", ask)
    g.add_edge(START, "ask")
    g.add_edge("ask", END)
    return g.compile(checkpointer=saver)


@pytest.mark.parametrize("durability", ["sync", "async"])  # "exit" saves no writes of a step it goes past
@pytest.mark.parametrize("face", ["sync", "async"])
def test_writes_are_stored_as_given_whatever_the_node_does_after(
    saver: EventLogSaver, open_log: Callable[..., eventlog.EventLog], durability: str, face: str
) -> None:
    """`Command(resume=..., update=...)` saves its update as writes of the paused checkpoint;
    the resumed node then edits that update's object in place while the writes wait for its
    superstep's put. They hold the update as it was given (InMemorySaver writes them at the
    call), read by the saver, by another on its log and by one on the log opened again."""
    cfg = {"configurable": {"thread_id": f"edit-{durability}-{face}"}}

    def story(s: Any) -> Any:
        graph = editing_graph(s)

        async def run() -> Any:
            await graph.ainvoke({"log": []}, cfg, durability=durability)
            paused = await graph.aget_state(cfg)
            await graph.ainvoke(Command(resume="ok", update={"log": [{"n": 0}]}), cfg, durability=durability)
            return paused

        if face == "async":
            paused = asyncio.run(run())
        else:
            graph.invoke({"log": []}, cfg, durability=durability)
            paused = graph.get_state(cfg)
            graph.invoke(Command(resume="ok", update={"log": [{"n": 0}]}), cfg, durability=durability)
        return paused

    memory = InMemorySaver()
    expected = pending(memory, story(memory))
    assert ("(thread)", "log", [{"n": 0}]) in expected
    paused = story(saver)
    assert pending(saver, paused) == expected
    saver.close()
    saver.log.close()
    with contextlib.closing(EventLogSaver(open_log())) as fresh:
        assert pending(fresh, paused) == expected


# -- an interrupt and an error again on an older checkpoint ---------------------------------------


class Review(TypedDict):
    notes: Annotated[list, operator.add]
    approved: bool


def review_graph(saver: Any, fail: frozenset[int] = frozenset()) -> Any:
    """draft -> review -> publish. review asks a human twice, the second question naming the first
    answer; in between it raises at its runs numbered in `fail` (each graph counts its own)."""
    runs = [0]

    def draft(state: Review) -> dict[str, Any]:
        return {"notes": ["drafted"]}

    def review(state: Review) -> dict[str, Any]:
        first = interrupt({"question": "publish?"})
        runs[0] += 1
        if runs[0] in fail:
            raise RuntimeError(f"review failed, run {runs[0]}")
        second = interrupt({"question": "sure?", "after": first})
        return {"approved": bool(first and second)}

    def publish(state: Review) -> dict[str, Any]:
        return {"notes": [f"published {state['approved']}"]}

    g = StateGraph(Review)
    g.add_node("draft", draft)
    g.add_node("review", review)
    g.add_node("publish", publish)
    g.add_edge(START, "draft")
    g.add_edge("draft", "review")
    g.add_edge("review", "publish")
    g.add_edge("publish", END)
    return g.compile(checkpointer=saver)


def test_an_interrupt_on_an_older_checkpoint_replaces_its_interrupt(
    saver: EventLogSaver, open_log: Callable[..., eventlog.EventLog]
) -> None:
    """Waiting on the first question; the state updated by hand (the thread moves on); resumed
    from the waiting checkpoint, review asks its second question: that checkpoint's `__interrupt__`
    write is the second question, and only it; two more resumes from there end the run."""
    cfg = {"configurable": {"thread_id": "asked-again"}}

    def story(s: Any) -> Any:
        graph = review_graph(s)
        out = [plain(graph.invoke({"notes": []}, cfg))]
        waiting = graph.get_state(cfg).config
        graph.update_state(cfg, {"notes": ["by hand"]})
        out.append(plain(graph.invoke(Command(resume="yes"), waiting)))
        out.append(plain(graph.invoke(Command(resume="no"), waiting)))
        return out

    expected = same_everywhere(story, review_graph, cfg, saver, open_log)
    asked = [[w[2] for w in writes if w[1] == "__interrupt__"] for writes in expected[1][4]]
    assert [[("interrupt", {"question": "sure?", "after": "yes"})]] in asked


def test_an_error_on_an_older_checkpoint_replaces_its_error(
    saver: EventLogSaver, open_log: Callable[..., eventlog.EventLog]
) -> None:
    """Resumed at the head, review fails; the state updated by hand (the thread moves on); resumed
    from the failed checkpoint, review fails again: that checkpoint's `__error__` write is the
    second error, and only it; a third resume from there runs on."""
    cfg = {"configurable": {"thread_id": "failed-again"}}

    def story(s: Any) -> Any:
        graph = review_graph(s, fail=frozenset({1, 2}))
        out = [plain(graph.invoke({"notes": []}, cfg))]
        waiting = graph.get_state(cfg).config
        with pytest.raises(RuntimeError, match="run 1"):
            graph.invoke(Command(resume="yes"), cfg)
        graph.update_state(cfg, {"notes": ["by hand"]})
        with pytest.raises(RuntimeError, match="run 2"):
            graph.invoke(Command(resume="yes"), waiting)
        out.append(plain(graph.invoke(Command(resume="yes"), waiting)))
        return out

    expected = same_everywhere(story, lambda s: review_graph(s, fail=frozenset({1, 2})), cfg, saver, open_log)
    errors = [[w[2] for w in writes if w[1] == "__error__"] for writes in expected[1][4]]
    assert [repr(RuntimeError("review failed, run 2"))] in errors


# -- put_writes on one thread's checkpoints, any order -------------------------------------------

CHANNELS = ["a", "b", *WRITES_IDX_MAP]
TASKS = ["t1", "t2", "t3"]
PATHS = ["", "~__pregel_pull, a", "~__pregel_pull, b"]

_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(0, 7)),
        st.tuples(
            st.just("writes"),
            st.integers(0, 8),
            st.sampled_from(TASKS),
            st.sampled_from(PATHS),
            st.lists(st.sampled_from(CHANNELS), min_size=1, max_size=4),
            st.booleans(),
        ),
    ),
    min_size=1,
    max_size=24,
)
_examples = itertools.count()


def checkpoint_id(n: int) -> str:
    return f"00000000-0000-6000-8000-{n:012d}"


def play(saver: Any, thread_id: str, ops: list[tuple[Any, ...]]) -> list[str]:
    """Apply the ops to the saver: `put` a new checkpoint whose parent is the latest saved (0) or
    an older one; `put_writes` (or `aput_writes`) of a task onto a saved checkpoint or the next
    one, not saved yet. Return every checkpoint id the ops name."""
    saved: list[str] = []
    for i, op in enumerate(ops):
        if op[0] == "put":
            cp = empty_checkpoint()
            cp["id"], cp["ts"] = checkpoint_id(len(saved)), "2025-01-01T00:00:00+00:00"
            cp["channel_values"], cp["channel_versions"] = {"x": i}, {"x": len(saved) + 1}
            conf: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ""}
            if saved:
                conf["checkpoint_id"] = saved[-1 - op[1] % len(saved)]
            md: Any = {"source": "loop", "step": len(saved), "parents": {}}
            saver.put({"configurable": conf}, cp, md, {"x": len(saved) + 1})
            saved.append(cp["id"])
            continue
        _, target, task, path, channels, in_async = op
        onto = checkpoint_id(target % (len(saved) + 1))
        config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": onto}}
        writes = [(ch, f"op {i} write {j}") for j, ch in enumerate(channels)]
        if in_async:
            asyncio.run(saver.aput_writes(config, writes, task, path))
        else:
            saver.put_writes(config, writes, task, path)
    return [checkpoint_id(n) for n in range(len(saved) + 1)]


def read(saver: Any, thread_id: str, ids: list[str]) -> Any:
    """Each checkpoint's pending writes by `get_tuple`, by `list` (newest first), and the head's."""
    conf = {"thread_id": thread_id, "checkpoint_ns": ""}
    tuples = [saver.get_tuple({"configurable": {**conf, "checkpoint_id": cid}}) for cid in ids]
    head = saver.get_tuple({"configurable": conf})
    return (
        [None if t is None else t.pending_writes for t in tuples],
        [(t.checkpoint["id"], t.pending_writes) for t in saver.list({"configurable": conf})],
        None if head is None else (head.checkpoint["id"], head.pending_writes),
    )


@settings(
    max_examples=int(os.environ.get("EVENTLOG_TEST_EXAMPLES", "50")),
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(ops=_OPS)
def test_any_put_writes_give_in_memory_savers_pending_writes(
    open_log: Callable[..., eventlog.EventLog], monkeypatch: pytest.MonkeyPatch, ops: list[tuple[Any, ...]]
) -> None:
    """Any sequence of puts (the latest's child, or an older one's: time travel) and put_writes
    (sync or async, onto any checkpoint, saved or not yet, any task, path and channels, special
    ones included) leaves on each checkpoint the pending writes InMemorySaver leaves, in its
    order, read by the saver and by one on the log opened again."""
    monkeypatch.setattr(saver_module, "SHARE_SECONDS", 0.0)  # no put follows here to share with
    thread_id = f"writes-{next(_examples)}"
    memory = InMemorySaver()
    ids = play(memory, thread_id, ops)
    expected = read(memory, thread_id, ids)
    log = open_log()
    with contextlib.closing(EventLogSaver(log)) as saver:
        assert play(saver, thread_id, ops) == ids
        assert read(saver, thread_id, ids) == expected
    log.close()
    log = open_log()
    with contextlib.closing(EventLogSaver(log)) as fresh:
        assert read(fresh, thread_id, ids) == expected
    log.close()
