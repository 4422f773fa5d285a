"""EventLogSaver: LangGraph's own conformance suite, and LangGraph graphs end to end on every store.

Nodes are plain Python functions (no model is called). Each graph runs beside
`InMemorySaver`, LangGraph's reference saver, and must give the same results.
"""

from __future__ import annotations

import asyncio
import json
import operator
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest

pytest.importorskip("langgraph.checkpoint.conformance", reason="pip install 'eventlog[test]' (langgraph extras)")

from hypothesis import given
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, Send, interrupt
from typing_extensions import TypedDict

import eventlog
from eventlog.langgraph import (
    CheckpointSaved,
    EventLogSaver,
    LangGraphThreadError,
    WritesSaved,
    run_id_of,
    thread_of,
)
from eventlog.langgraph import _saver as saver_module

ROOT = Path(__file__).resolve().parent.parent


# -- LangGraph's conformance suite ------------------------------------------------------------


def test_conformance(
    open_log: Callable[..., eventlog.EventLog], backend: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every base and extended capability of langgraph-checkpoint-conformance passes: 81 of 81."""
    log = open_log()

    @checkpointer_test(name=f"EventLogSaver on {backend}")
    async def saver() -> Any:
        yield EventLogSaver(log)

    report = asyncio.run(validate(saver))
    passed = sum(r.tests_passed for r in report.results.values())
    total = passed + sum(r.tests_failed for r in report.results.values())
    failures = [f for r in report.results.values() for f in r.failures]
    with capsys.disabled():
        print(f"\nconformance, EventLogSaver on {backend}: {passed}/{total} ({report.conformance_level()})")
    assert not failures, failures
    assert report.conformance_level() == "FULL"
    assert (passed, total) == (81, 81)


# -- run ids -----------------------------------------------------------------------------------


@given(st.text(min_size=1, max_size=40), st.sampled_from(["", "child:1", "a:x|b:y", "n|m:3"]))
def test_run_ids_are_one_to_one(thread_id: str, ns: str) -> None:
    """Every (thread, namespace) has its own run id, read back exactly; plain thread ids are their own."""
    try:
        run_id = run_id_of(thread_id, ns)
    except eventlog.errors.InvalidRunIdError:
        assert len(thread_id.encode("utf-8", "surrogatepass")) > 300 or "\ud800" <= max(thread_id) <= "\udfff"
        return
    assert thread_of(run_id) == (thread_id, ns)
    if "|" not in thread_id and "\\" not in thread_id and not ns:
        assert run_id == thread_id


def test_too_long_a_run_id_is_refused_by_name() -> None:
    with pytest.raises(eventlog.errors.InvalidRunIdError, match="thread 'tt"):
        run_id_of("t" * 1000, "child:" + "x" * 100)


# -- graphs ------------------------------------------------------------------------------------


class Chat(TypedDict):
    messages: Annotated[list, add_messages]
    approved: bool


def chat_graph(saver: Any) -> Any:
    """chatbot -> review (asks a human with interrupt) -> END."""

    def chatbot(state: Chat) -> dict[str, Any]:
        return {"messages": [AIMessage(content=f"answer {len(state['messages'])}")]}

    def review(state: Chat) -> dict[str, Any]:
        return {"approved": bool(interrupt({"question": "approve?"}))}

    g = StateGraph(Chat)
    g.add_node("chatbot", chatbot)
    g.add_node("review", review)
    g.add_edge(START, "chatbot")
    g.add_edge("chatbot", "review")
    g.add_edge("review", END)
    return g.compile(checkpointer=saver)


def snapshot(s: Any) -> tuple[Any, ...]:
    """What a StateSnapshot says, without its ids and times."""
    messages = [(type(m).__name__, m.content) for m in s.values.get("messages", [])]
    rest = {k: v for k, v in s.values.items() if k != "messages"}
    tasks = [(t.name, [i.value for i in t.interrupts], t.error is not None) for t in s.tasks]
    md = s.metadata or {}
    return messages, rest, s.next, tasks, md.get("source"), md.get("step")


def chat_story(saver: Any) -> list[Any]:
    """Invoke, interrupt, resume; history; time travel from a past checkpoint; a fork by update_state."""
    graph = chat_graph(saver)
    cfg = {"configurable": {"thread_id": "story"}}
    out: list[Any] = []
    for turn in range(3):
        r = graph.invoke({"messages": [HumanMessage(content=f"question {turn}")]}, cfg)
        out.append(("asked", [i.value for i in r["__interrupt__"]]))
        r = graph.invoke(Command(resume=turn != 1), cfg)
        out.append(("resumed", len(r["messages"]), r["approved"]))
    history = list(graph.get_state_history(cfg))
    out.append(("history", [snapshot(h) for h in history]))
    out.append(("limited", [snapshot(h) for h in graph.get_state_history(cfg, limit=2)]))
    out.append(("filtered", [snapshot(h) for h in graph.get_state_history(cfg, filter={"source": "input"})]))
    past = next(h for h in history if h.next == ("review",))
    r = graph.invoke(Command(resume=False), past.config)
    out.append(("travelled", len(r["messages"]), r["approved"], snapshot(graph.get_state(cfg))))
    forked = graph.update_state(past.config, {"messages": [AIMessage(content="edited")]})
    out.append(("forked", snapshot(graph.get_state(forked))))
    r = graph.invoke(Command(resume=True), forked)
    out.append(("after fork", [m.content for m in r["messages"]], r["approved"]))
    out.append(("latest", snapshot(graph.get_state(cfg))))
    return out


def test_chat_story_matches_in_memory_saver(open_log: Callable[..., eventlog.EventLog]) -> None:
    """Interrupts, resume, history, time travel and forks give what InMemorySaver gives."""
    log = open_log()
    assert chat_story(EventLogSaver(log)) == chat_story(InMemorySaver())
    kinds = {type(e.event) for e in log.read("story")}
    assert kinds == {CheckpointSaved, WritesSaved}
    assert log.verify().ok


def test_a_reopened_log_gives_the_same_state(tmp_path: Path) -> None:
    """A new process (a fresh saver over the reopened log) reads the threads exactly."""
    with EventLogSaver.from_path(tmp_path / "log") as saver:
        first = chat_story(saver)
        graph = chat_graph(saver)
        cfg = {"configurable": {"thread_id": "story"}}
        before = ([snapshot(h) for h in graph.get_state_history(cfg)], snapshot(graph.get_state(cfg)))
    with EventLogSaver.from_path(tmp_path / "log") as saver:
        graph = chat_graph(saver)
        after = ([snapshot(h) for h in graph.get_state_history(cfg)], snapshot(graph.get_state(cfg)))
        assert after == before
        graph.invoke({"messages": [HumanMessage(content="one more")]}, cfg)
        assert len(graph.get_state(cfg).values["messages"]) == len(before[1][0]) + 2
    assert first


def test_a_chat_stores_only_what_each_turn_appends(tmp_path: Path) -> None:
    """200 turns with add_messages: each checkpoint holds only the two new messages, never the list."""
    with EventLogSaver.from_path(tmp_path / "log") as saver:
        graph = chat_graph(saver)
        cfg = {"configurable": {"thread_id": "long"}}

        def answer(state: Chat) -> dict[str, Any]:
            return {"messages": [AIMessage(content="x" * 400)]}

        g = StateGraph(Chat)
        g.add_node("chatbot", answer)
        g.add_edge(START, "chatbot")
        graph = g.compile(checkpointer=saver)
        for turn in range(200):
            graph.invoke({"messages": [HumanMessage(content=f"question {turn}")]}, cfg, durability="exit")
        puts = [e.event for e in saver.log.read("long") if isinstance(e.event, CheckpointSaved)]
        assert len(puts) == 200
        assert all("messages" in p.tails for p in puts[1:])
        assert all(len(p.tails["messages"].data) < 1000 for p in puts[1:])
        assert len(graph.get_state(cfg).values["messages"]) == 400
        assert saver.log.stats()["snapshots"] < 20


class Fan(TypedDict):
    results: Annotated[list, operator.add]


def fan_graph(saver: Any, ran: list[str], broken: set[str]) -> Any:
    """start -> (ok, flaky, also_ok) in parallel -> join; `broken` names nodes that raise."""

    finished: list[str] = []
    others_done = threading.Event()

    def node(name: str) -> Callable[[Fan], dict[str, Any]]:
        def run(state: Fan) -> dict[str, Any]:
            ran.append(name)
            if name in broken:
                # Fail only once the other branches have finished, so that LangGraph never cancels
                # them first (their writes are what the test is about); then a moment for their commits.
                others_done.wait(30)
                time.sleep(0.2)
                raise RuntimeError(f"{name} failed")
            finished.append(name)
            if {"ok", "also_ok"} <= set(finished):
                others_done.set()
            return {"results": [name]}

        return run

    g = StateGraph(Fan)
    for name in ("start", "ok", "flaky", "also_ok", "join"):
        g.add_node(name, node(name))
    g.add_edge(START, "start")
    for name in ("ok", "flaky", "also_ok"):
        g.add_edge("start", name)
        g.add_edge(name, "join")
    g.add_edge("join", END)
    return g.compile(checkpointer=saver)


def fan_story(saver: Any) -> tuple[Any, ...]:
    ran: list[str] = []
    broken = {"flaky"}
    graph = fan_graph(saver, ran, broken)
    cfg = {"configurable": {"thread_id": "fan"}}
    with pytest.raises(RuntimeError, match="flaky failed"):
        graph.invoke({"results": []}, cfg)
    failed = graph.get_state(cfg)
    pending = sorted((t.name, t.result is not None, t.error is not None) for t in failed.tasks)
    broken.clear()
    ran_before = sorted(ran)
    r = graph.invoke(None, cfg)
    return pending, ran_before, sorted(ran[len(ran_before) :]), sorted(r["results"])


def test_a_failed_branch_keeps_the_others_writes(open_log: Callable[..., eventlog.EventLog]) -> None:
    """One branch of a fan-out fails: the others' writes are kept and not run again on resume."""
    got = fan_story(EventLogSaver(open_log()))
    assert got == fan_story(InMemorySaver())
    pending, _, ran_after, results = got
    assert pending == [("also_ok", True, False), ("flaky", False, True), ("ok", True, False)]
    assert ran_after == ["flaky", "join"]  # ok and also_ok did not run again
    assert results == ["also_ok", "flaky", "join", "ok", "start"]


class Outer(TypedDict):
    subject: str
    notes: Annotated[list, operator.add]


class Research(TypedDict):
    topic: str
    notes: Annotated[list, operator.add]


def sub_story(saver: Any) -> list[Any]:
    """A parent graph whose node is a subgraph that asks a human; Send fans out to it twice."""

    def research(state: Research) -> dict[str, Any]:
        answer = interrupt({"topic": state["topic"]})
        return {"notes": [f"{state['topic']}: {answer}"]}

    sub = StateGraph(Research)
    sub.add_node("research", research)
    sub.add_edge(START, "research")
    child = sub.compile()

    def plan(state: Outer) -> dict[str, Any]:
        return {"notes": ["planned"]}

    def fan_out(state: Outer) -> list[Send]:
        return [Send("child", {"topic": t, "notes": []}) for t in ("tides", "winds")]

    g = StateGraph(Outer)
    g.add_node("plan", plan)
    g.add_node("child", child)
    g.add_edge(START, "plan")
    g.add_conditional_edges("plan", fan_out, ["child"])
    g.add_edge("child", END)
    graph = g.compile(checkpointer=saver)
    cfg = {"configurable": {"thread_id": "sub"}}
    out: list[Any] = []
    r = graph.invoke({"subject": "sea", "notes": []}, cfg)
    asked = sorted(i.value["topic"] for i in r["__interrupt__"])
    out.append(("asked", asked))
    state = graph.get_state(cfg, subgraphs=True)
    out.append(("sub states", sorted((t.name, t.state.values["topic"]) for t in state.tasks if t.state)))
    r = graph.invoke(Command(resume={i.id: f"answer {i.value['topic']}" for i in r["__interrupt__"]}), cfg)
    out.append(("done", sorted(r["notes"])))
    out.append(("history", [snapshot(h) for h in graph.get_state_history(cfg)]))
    return out


def test_a_subgraph_keeps_its_own_namespace(open_log: Callable[..., eventlog.EventLog]) -> None:
    """Subgraph checkpoints go to runs of their own namespace; interrupts inside them resume."""
    log = open_log()
    assert sub_story(EventLogSaver(log)) == sub_story(InMemorySaver())
    runs = [r for r in log.runs() if thread_of(r)[0] == "sub"]
    assert "sub" in runs and any(thread_of(r)[1].startswith("child:") for r in runs)


def test_async_graphs_run_the_saver_off_the_event_loop(open_log: Callable[..., eventlog.EventLog]) -> None:
    """`ainvoke` works, and every commit to the log runs in a worker thread, never on the event loop's."""
    log = open_log()
    threads: set[int] = set()
    write = log.store.write

    def watched(fn: Any) -> Any:
        threads.add(threading.get_ident())
        return write(fn)

    log.store.write = watched  # type: ignore[method-assign]

    async def story(saver: Any) -> Any:
        graph = chat_graph(saver)
        cfg = {"configurable": {"thread_id": "async"}}
        await graph.ainvoke({"messages": [HumanMessage(content="hi")]}, cfg)
        r = await graph.ainvoke(Command(resume=True), cfg)
        history = [snapshot(h) async for h in graph.aget_state_history(cfg)]
        await saver.acopy_thread("async", "async-copy")
        await saver.aprune(["async-copy"])
        copied = [snapshot(h) async for h in graph.aget_state_history({"configurable": {"thread_id": "async-copy"}})]
        await saver.adelete_thread("async")
        gone = await saver.aget_tuple(cfg)
        return threading.get_ident(), len(r["messages"]), history, copied, gone

    loop_thread, *got = asyncio.run(story(EventLogSaver(log)))
    assert got == list(asyncio.run(story(InMemoryWithExtras()))[1:])
    assert threads and loop_thread not in threads


class InMemoryWithExtras(InMemorySaver):
    """InMemorySaver with copy, prune (keep_latest) and delete, for comparisons."""

    def copy_thread(self, source: str, target: str) -> None:
        for ns, cps in list(self.storage[source].items()):
            self.storage[target][ns] = dict(cps)
        for (t, ns, cid), w in list(self.writes.items()):
            if t == source:
                self.writes[(target, ns, cid)] = dict(w)
        for (t, ns, ch, v), b in list(self.blobs.items()):
            if t == source:
                self.blobs[(target, ns, ch, v)] = b

    def prune(self, thread_ids: Any, *, strategy: str = "keep_latest") -> None:
        for t in thread_ids:
            for ns, cps in self.storage[t].items():
                latest = max(cps)
                self.storage[t][ns] = {latest: cps[latest]}

    async def acopy_thread(self, source: str, target: str) -> None:
        self.copy_thread(source, target)

    async def aprune(self, thread_ids: Any, *, strategy: str = "keep_latest") -> None:
        self.prune(thread_ids, strategy=strategy)


def test_puts_from_many_threads_are_all_kept(open_log: Callable[..., eventlog.EventLog]) -> None:
    """Writes of one checkpoint from 16 threads at once, and graphs of 16 other threads at once, all land."""
    saver = EventLogSaver(open_log())
    graph = chat_graph(saver)
    graph.invoke({"messages": [HumanMessage(content="hi")]}, {"configurable": {"thread_id": "busy"}})
    config = saver.get_tuple({"configurable": {"thread_id": "busy", "checkpoint_ns": ""}}).config
    errors: list[BaseException] = []

    def write(i: int) -> None:
        try:
            saver.put_writes(config, [("notes", f"note {i}"), ("more", i)], f"task-{i:02}", task_path=f"~{i:02}")
            other = {"configurable": {"thread_id": f"busy-{i}"}}
            chat_graph(saver).invoke({"messages": [HumanMessage(content=str(i))]}, other)
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=write, args=(i,)) for i in range(16)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors
    tup = saver.get_tuple({"configurable": {"thread_id": "busy", "checkpoint_ns": ""}})
    mine = [w for w in tup.pending_writes if w[0].startswith("task-")]
    assert [w[0] for w in mine] == [f"task-{i:02}" for i in range(16) for _ in range(2)]  # writes_sort_key order
    for i in range(16):
        cfg = {"configurable": {"thread_id": f"busy-{i}"}}
        assert [m.content for m in chat_graph(saver).get_state(cfg).values["messages"]] == [str(i), "answer 1"]


def test_copy_then_delete_the_source(open_log: Callable[..., eventlog.EventLog]) -> None:
    """A copied thread stands alone: deleting the source leaves every checkpoint of the copy."""
    saver = EventLogSaver(open_log())
    chat_story(saver)
    graph = chat_graph(saver)
    source = {"configurable": {"thread_id": "story"}}
    before = [snapshot(h) for h in graph.get_state_history(source)]
    saver.copy_thread("story", "story-copy")
    with pytest.raises(LangGraphThreadError, match="exists already"):
        saver.copy_thread("story", "story-copy")
    saver.delete_thread("story")
    assert saver.get_tuple(source) is None
    assert [snapshot(h) for h in graph.get_state_history({"configurable": {"thread_id": "story-copy"}})] == before


def test_delete_for_runs_removes_the_events(open_log: Callable[..., eventlog.EventLog]) -> None:
    """The deleted runs' checkpoints and writes leave the log; the others keep their exact values."""
    log = open_log()
    saver = EventLogSaver(log)
    graph = chat_graph(saver)
    cfg = {"configurable": {"thread_id": "runs"}}
    graph.invoke(
        {"messages": [HumanMessage(content="first")]},
        {"configurable": {**cfg["configurable"], "run_id": "00000000-0000-0000-0000-00000000000a"}},
    )
    graph.invoke(
        Command(resume=True),
        {"configurable": {**cfg["configurable"], "run_id": "00000000-0000-0000-0000-00000000000b"}},
    )
    graph.invoke(
        {"messages": [HumanMessage(content="second")]},
        {"configurable": {**cfg["configurable"], "run_id": "00000000-0000-0000-0000-00000000000c"}},
    )
    keep = {
        h.config["configurable"]["checkpoint_id"]: snapshot(h)
        for h in graph.get_state_history(cfg)
        if h.metadata.get("run_id") != "00000000-0000-0000-0000-00000000000b"
    }
    assert len(keep) < len(list(graph.get_state_history(cfg)))
    saver.delete_for_runs(["00000000-0000-0000-0000-00000000000b"])
    after = {h.config["configurable"]["checkpoint_id"]: snapshot(h) for h in graph.get_state_history(cfg)}
    assert after == keep
    stored = b"".join(e.event.checkpoint_id.encode() for e in log.read("runs") if isinstance(e.event, CheckpointSaved))
    assert stored.count(b"-") == 4 * len(keep)
    assert not [r for r in log.runs() if r.endswith("|:rewrite")]
    assert log.verify().ok


def test_an_interrupted_rewrite_is_finished_on_open(tmp_path: Path) -> None:
    """A rewrite staged completely but cut before it replaced the run is finished by the next saver."""
    path = tmp_path / "log"
    with EventLogSaver.from_path(path) as saver:
        chat_story(saver)
        expected = [snapshot(h) for h in chat_graph(saver).get_state_history({"configurable": {"thread_id": "story"}})]
        rewriter = saver._ops().rewriter
        rewriter.write("story|:rewrite", rewriter.rewrite("story", None))
        saver.log.checkpoints.save("story|:rewrite", metadata={"rewrite": "complete"}, reducer=saver.reducer)
        saver.log.delete_run("story")  # the crash came right after the old run was deleted
    with EventLogSaver.from_path(path) as saver:
        got = [snapshot(h) for h in chat_graph(saver).get_state_history({"configurable": {"thread_id": "story"}})]
        assert got == expected
        assert "story|:rewrite" not in saver.log.runs()


def test_a_run_of_other_events_is_not_taken_for_a_thread(open_log: Callable[..., eventlog.EventLog]) -> None:
    from eventlog.events import StepCompleted

    log = open_log()
    log.append("mine", StepCompleted(node="a", superstep=1))
    with pytest.raises(LangGraphThreadError, match="not a LangGraph thread"):
        chat_graph(EventLogSaver(log)).invoke({"messages": []}, {"configurable": {"thread_id": "mine"}})


# -- a superstep's writes share its checkpoint's commit ---------------------------------------------


def _one_node_chat(saver: Any) -> Any:
    g = StateGraph(Chat)
    g.add_node("chatbot", lambda state: {"messages": [AIMessage(content=f"answer {len(state['messages'])}")]})
    g.add_edge(START, "chatbot")
    return g.compile(checkpointer=saver)


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_a_superstep_writes_share_the_commit_of_its_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durability: str
) -> None:
    """Under `sync` and `async`, a superstep's `put_writes` are committed with the `put` that
    ends it, so there are fewer commits than calls; the thread reads as on InMemorySaver. (A put
    that LangGraph's threads happen to run before the writes are offered commits them alone: how
    many share is a figure of the fleet benchmark, not of this test.)"""
    monkeypatch.setattr(saver_module, "SHARE_SECONDS", 1.0)  # a loaded machine still shares
    turns = 3
    ours, theirs = EventLogSaver.from_path(tmp_path / "log"), InMemorySaver()
    with ours as saver:
        calls: list[str] = []
        for name in ("put", "put_writes"):
            method = getattr(saver, name)

            def counted(*a: Any, _m: Any = method, _n: str = name, **k: Any) -> Any:
                calls.append(_n)
                return _m(*a, **k)

            setattr(saver, name, counted)
        before = saver.log.engine.commit.commits
        runs = []
        for s in (saver, theirs):
            graph = _one_node_chat(s)
            cfg = {"configurable": {"thread_id": "shared"}}
            for i in range(turns):
                graph.invoke({"messages": [HumanMessage(content=f"q{i}", id=f"q{i}")]}, cfg, durability=durability)
            runs.append([snapshot(h) for h in graph.get_state_history(cfg)])
        commits = saver.log.engine.commit.commits - before
        assert runs[0] == runs[1]
        assert calls.count("put_writes") >= 2 * turns
        assert calls.count("put") <= commits < len(calls)  # writes went into a put's commit


def test_writes_are_committed_when_put_writes_returns(open_log: Callable[..., eventlog.EventLog]) -> None:
    """A `put_writes` no `put` follows is committed alone before it returns; one a put takes from
    another thread returns once that put has committed it."""
    log = open_log()
    saver = EventLogSaver(log)
    graph = _one_node_chat(saver)
    cfg = {"configurable": {"thread_id": "acked"}}
    graph.invoke({"messages": [HumanMessage(content="q", id="q")]}, cfg)
    head = graph.get_state(cfg).config
    saver.put_writes(head, [("messages", [HumanMessage(content="late", id="late")])], "task-1")
    kinds = [type(e.event).__name__ for e in log.read("acked")]
    assert kinds[-1] == "WritesSaved"
    assert [w[0] for w in saver.get_tuple(head).pending_writes] == ["task-1"]

    done: list[bool] = []

    def write() -> None:
        saver.put_writes(head, [("messages", [HumanMessage(content="more", id="more")])], "task-2")
        done.append(any(isinstance(e.event, WritesSaved) and e.event.task_id == "task-2" for e in log.read("acked")))

    t = threading.Thread(target=write)
    t.start()
    tup = saver.get_tuple(head)
    assert tup is not None
    checkpoint = {**tup.checkpoint, "id": "1f0" + "0" * 33}
    saver.put(head, checkpoint, {"source": "update", "step": 9}, {})
    t.join()
    assert done == [True]  # answered only once its writes were in the log
    kinds = [type(e.event).__name__ for e in log.read("acked")]
    assert kinds[-2:] in (["WritesSaved", "CheckpointSaved"], ["CheckpointSaved", "WritesSaved"])


def test_writes_offered_while_a_put_commits_share_the_put_after_it(
    open_log: Callable[..., eventlog.EventLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task's writes offered while a put of the thread still commits (a slow disk, a loaded
    machine) wait beside it, and the put that ends their superstep takes them into its commit,
    even when it starts the moment the put before it ends (LangGraph's next put, in the same
    thread or in another that is scheduled first)."""
    monkeypatch.setattr(saver_module, "SHARE_SECONDS", 3.0)
    slow = threading.Event()

    def clock() -> int:
        if slow.is_set():  # the first put's commit takes a second
            slow.clear()
            time.sleep(1.0)
        return time.time_ns()

    log = open_log(clock=clock)
    saver = EventLogSaver(log)
    cfg = {"configurable": {"thread_id": "slow"}}
    _one_node_chat(saver).invoke({"messages": [HumanMessage(content="q", id="q")]}, cfg)
    head = saver.get_tuple(cfg)
    assert head is not None
    first, second = ({**head.checkpoint, "id": f"1f{n}" + "0" * 33} for n in (1, 2))
    at_first = {"configurable": {"thread_id": "slow", "checkpoint_ns": "", "checkpoint_id": first["id"]}}

    before = log.engine.commit.commits
    slow.set()
    putting = threading.Thread(target=saver.put, args=(head.config, first, {"source": "update", "step": 8}, {}))
    putting.start()
    while slow.is_set():  # the first put is committing
        time.sleep(0.001)
    following = threading.Thread(target=saver.put, args=(at_first, second, {"source": "update", "step": 9}, {}))
    following.start()  # waits for the first to end, before the writes are offered
    time.sleep(0.1)
    saver.put_writes(at_first, [("messages", [HumanMessage(content="w", id="w")])], "task-1")
    putting.join()
    following.join()
    assert log.engine.commit.commits - before == 2  # the writes went into the second put's commit
    kinds = [type(e.event).__name__ for e in log.read("slow")]
    assert kinds[-3:] == ["CheckpointSaved", "WritesSaved", "CheckpointSaved"]


def _a_chat_to_move() -> tuple[InMemorySaver, dict[str, Any], list[tuple[Any, Any, Any, dict[str, Any]]]]:
    """A three-turn chat on InMemorySaver, and what moving it takes, oldest first: each put's
    config, checkpoint and metadata, and the writes pending on it, by task."""
    source = InMemorySaver()
    graph = _one_node_chat(source)
    cfg = {"configurable": {"thread_id": "moved"}}
    for i in range(3):
        graph.invoke({"messages": [HumanMessage(content=f"q{i}", id=f"q{i}")]}, cfg)
    steps = []
    for t in reversed(list(source.list(cfg))):
        parent = t.parent_config["configurable"]["checkpoint_id"] if t.parent_config else None
        tasks: dict[str, list[tuple[str, Any]]] = {}
        for task_id, channel, value in t.pending_writes or []:
            tasks.setdefault(task_id, []).append((channel, value))
        conf = {"configurable": {"thread_id": "moved", "checkpoint_ns": "", "checkpoint_id": parent}}
        steps.append((conf, t.checkpoint, t.metadata, tasks))
    assert len(steps) >= 6 and sum(bool(tasks) for *_, tasks in steps) >= 3
    return source, cfg, steps


def _pending(saver: Any, cfg: dict[str, Any]) -> list[tuple[str, str]]:
    return [(w[0], w[1]) for t in saver.list(cfg) for w in t.pending_writes or []]


def test_a_caller_that_puts_after_its_own_writes_waits_once(
    open_log: Callable[..., eventlog.EventLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A thread that calls `put_writes` and then makes the next `put` itself (a copy, a
    migration) waits for a put once; after that its writes are committed at once."""
    monkeypatch.setattr(saver_module, "SHARE_SECONDS", 3.0)  # waiting at every put_writes: >= 18 s
    saver = EventLogSaver(open_log())
    source, cfg, steps = _a_chat_to_move()
    started = time.monotonic()
    for conf, checkpoint, metadata, tasks in steps:
        at = saver.put(conf, checkpoint, metadata, checkpoint["channel_versions"])
        for task_id, writes in tasks.items():
            saver.put_writes(at, writes, task_id)
    elapsed = time.monotonic() - started
    assert elapsed < 2 * 3.0, f"{elapsed:.2f} s: put_writes waited for a put more than once"
    assert _pending(saver, cfg) == _pending(source, cfg)


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_an_async_superstep_writes_share_the_commit_of_its_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durability: str
) -> None:
    """`ainvoke` as `invoke`: a superstep's `aput_writes` are committed with the `aput` that ends
    it (the wait holds none of the saver's workers, one of them enough), and the thread reads
    as on InMemorySaver."""
    monkeypatch.setattr(saver_module, "SHARE_SECONDS", 1.0)  # a loaded machine still shares
    turns = 3
    with eventlog.open(tmp_path / "log") as log:
        saver = EventLogSaver(log, workers=1)
        calls: list[str] = []
        for name in ("aput", "aput_writes"):
            method = getattr(saver, name)

            async def counted(*a: Any, _m: Any = method, _n: str = name, **k: Any) -> Any:
                calls.append(_n)
                return await _m(*a, **k)

            setattr(saver, name, counted)

        async def play(s: Any) -> list[Any]:
            graph = _one_node_chat(s)
            cfg = {"configurable": {"thread_id": "shared"}}
            for i in range(turns):
                await graph.ainvoke(
                    {"messages": [HumanMessage(content=f"q{i}", id=f"q{i}")]}, cfg, durability=durability
                )
            return [snapshot(h) async for h in graph.aget_state_history(cfg)]

        before = saver.log.engine.commit.commits
        ours = asyncio.run(play(saver))
        commits = saver.log.engine.commit.commits - before
        assert ours == asyncio.run(play(InMemorySaver()))
        assert calls.count("aput_writes") >= 2 * turns
        assert calls.count("aput") <= commits < len(calls)  # writes went into a put's commit
        saver.close()


def test_an_async_caller_that_puts_after_its_own_writes_waits_once(
    open_log: Callable[..., eventlog.EventLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task that awaits `aput_writes` and then makes the next `aput` itself waits for a put
    once; after that its writes are committed at once."""
    monkeypatch.setattr(saver_module, "SHARE_SECONDS", 1.5)
    saver = EventLogSaver(open_log())
    source, cfg, steps = _a_chat_to_move()

    async def move() -> float:
        started = time.monotonic()
        for conf, checkpoint, metadata, tasks in steps:
            at = await saver.aput(conf, checkpoint, metadata, checkpoint["channel_versions"])
            for task_id, writes in tasks.items():
                await saver.aput_writes(at, writes, task_id)
        return time.monotonic() - started

    elapsed = asyncio.run(move())
    assert 1.5 <= elapsed < 2 * 1.5, f"{elapsed:.2f} s: aput_writes waited for a put other than once"
    assert _pending(saver, cfg) == _pending(source, cfg)
    saver.close()


# -- a process killed in the middle of a superstep -------------------------------------------------

_KILLED = textwrap.dedent(
    """
    import json, operator, os, sys, time
    from typing import Annotated
    from typing_extensions import TypedDict
    from langgraph.graph import END, START, StateGraph
    from eventlog.langgraph import EventLogSaver

    path, marks, mode = sys.argv[1], sys.argv[2], sys.argv[3]

    class S(TypedDict):
        log: Annotated[list, operator.add]

    def node(name, slow=False):
        def run(state):
            with open(marks, "a") as f:
                f.write(name + "\\n")
            if slow and mode == "first":
                time.sleep(1.0)          # the sibling's writes are saved meanwhile
                open(marks + ".ready", "w").close()
                time.sleep(60)           # killed here, in the middle of the superstep
            return {"log": [name]}
        return run

    g = StateGraph(S)
    g.add_node("a", node("a"))
    g.add_node("fast", node("fast"))
    g.add_node("slow", node("slow", slow=True))
    g.add_node("z", node("z"))
    g.add_edge(START, "a")
    g.add_edge("a", "fast")
    g.add_edge("a", "slow")
    g.add_edge(["fast", "slow"], "z")
    g.add_edge("z", END)
    with EventLogSaver.from_path(path) as saver:
        graph = g.compile(checkpointer=saver)
        cfg = {"configurable": {"thread_id": "killed"}}
        out = graph.invoke({"log": []} if mode != "resume" else None, cfg, durability="sync")
        print(json.dumps(sorted(out["log"])))
    """
)


def test_a_process_killed_mid_superstep_resumes_in_a_new_one(tmp_path: Path) -> None:
    """SIGKILL while one of two parallel nodes runs; a new process resumes to the same final state
    as an uninterrupted run, without running the finished sibling again."""
    script = tmp_path / "graph.py"
    script.write_text(_KILLED)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    marks = tmp_path / "ran"
    first = subprocess.Popen([sys.executable, str(script), str(tmp_path / "log"), str(marks), "first"], env=env)
    deadline = time.monotonic() + 60
    while not Path(str(marks) + ".ready").exists():
        assert first.poll() is None and time.monotonic() < deadline, "the graph did not reach the slow node"
        time.sleep(0.02)
    first.send_signal(signal.SIGKILL)
    first.wait()
    assert sorted(marks.read_text().split()) == ["a", "fast", "slow"]
    resumed = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "log"), str(marks), "resume"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    clean = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "clean"), str(tmp_path / "clean-ran"), "clean"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert json.loads(resumed.stdout) == json.loads(clean.stdout) == ["a", "fast", "slow", "z"]
    assert sorted(marks.read_text().split()) == ["a", "fast", "slow", "slow", "z"]  # fast ran once


# -- the command line -------------------------------------------------------------------------------


@pytest.fixture
def story_log(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "log"
    with EventLogSaver.from_path(path) as saver:
        chat_story(saver)
    yield path


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "240"}
    return subprocess.run(
        [sys.executable, "-m", "eventlog", *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def test_the_command_line_shows_threads(story_log: Path) -> None:
    """`runs` names the view, `history` shows steps, sources and next nodes, `state` decoded values."""
    runs = cli("--log", str(story_log), "runs", "--json")
    assert runs.returncode == 0, runs.stderr
    assert "story" in [r["run_id"] for r in json.loads(runs.stdout)]
    table = cli("--log", str(story_log), "runs")
    assert "langgraph" in table.stdout
    history = cli("--log", str(story_log), "history", "story", "--json")
    assert history.returncode == 0, history.stderr
    rows = json.loads(history.stdout)
    assert [r["source"] for r in rows[:4]] == ["input", "loop", "loop", "loop"]
    assert [r["next"] for r in rows[:4]] == ["__start__", "chatbot", "review", ""]
    assert "review" in cli("--log", str(story_log), "history", "story").stdout
    at = next(r["offset"] for r in rows if r["next"] == "review")
    state = cli("--log", str(story_log), "state", "story", "--at", str(at), "--json")
    assert state.returncode == 0, state.stderr
    values = json.loads(state.stdout)["state"]["values"]
    assert [m["content"] for m in values["messages"]] == ["question 0", "answer 1"]
    assert json.loads(state.stdout)["state"]["next"] == ["review"]


def test_history_counts_the_writes_saved_after_the_thread_moved_on(tmp_path: Path) -> None:
    """Writes put onto an earlier checkpoint after a later one was saved (a task's writes that
    land late, a resume of an older checkpoint) count in `history` as in the saver's pending_writes."""
    from eventlog.langgraph import VIEW

    with EventLogSaver.from_path(tmp_path / "log") as saver:
        chat_story(saver)
        config = {"configurable": {"thread_id": "story"}}
        older = list(saver.list(config))[-2]
        saver.put_writes(older.config, [("late", "a"), ("late", "b")], task_id="late-task")
        want = {t.config["configurable"]["checkpoint_id"]: len(t.pending_writes or []) for t in saver.list(config)}
        _, rows = VIEW.history(saver.log, "story", None)
    assert {r["checkpoint"]: r["writes"] for r in rows} == want
    assert want[older.config["configurable"]["checkpoint_id"]] >= 2
    history = json.loads(cli("--log", str(tmp_path / "log"), "history", "story", "--json").stdout)
    assert {r["checkpoint"]: r["writes"] for r in history} == want
