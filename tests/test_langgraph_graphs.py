"""LangGraph graphs on EventLogSaver give exactly what they give on InMemorySaver.

Each scenario is a small graph used the way LangGraph's documentation uses one (interrupts and
`Command(resume=...)`, `Send`, a stateful subgraph, time travel: replay, forks made by
`update_state`, copies made by `as_node="__copy__"`, the human-in-the-loop edit of a tool call,
every durability mode, a thread written with string channel versions, two savers on one thread).
It runs once on InMemorySaver and once on EventLogSaver over every store, and the two
`get_state_history` listings must be equal but for checkpoint ids and times. Nodes call no model.
"""

from __future__ import annotations

import asyncio
import itertools
import operator
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("langgraph.checkpoint.conformance", reason="pip install 'eventlog[test]' (langgraph extras)")

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, Interrupt, Send, interrupt
from typing_extensions import TypedDict

import eventlog
from eventlog.events import StepCompleted
from eventlog.langgraph import EventLogSaver

# -- what a history says, without ids and times --------------------------------------------------


def plain(value: Any) -> Any:
    """A value with its messages as (kind, content, tool calls): message ids are random."""
    if isinstance(value, BaseMessage):
        calls = [(c["name"], c["args"]) for c in getattr(value, "tool_calls", [])]
        return (type(value).__name__, value.content, calls)
    if isinstance(value, Interrupt):
        return ("interrupt", plain(value.value))
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def history(graph: Any, config: dict[str, Any]) -> list[Any]:
    """`get_state_history` as plain data: each checkpoint's values, next nodes, source and step,
    tasks (with interrupts and subgraph state) and its parent, as a position in the listing."""
    snaps = list(graph.get_state_history(config))
    place = {s.config["configurable"]["checkpoint_id"]: i for i, s in enumerate(snaps)}
    out = []
    for s in snaps:
        parent = s.parent_config["configurable"]["checkpoint_id"] if s.parent_config else None
        tasks = [(t.name, [i.value for i in t.interrupts], t.error is not None, plain(t.result)) for t in s.tasks]
        md = s.metadata or {}
        out.append((plain(s.values), s.next, md.get("source"), md.get("step"), tasks, place.get(parent, parent)))
    return out


def same_on_both(story: Callable[[Any], Any], saver: EventLogSaver) -> Any:
    """Run the story on InMemorySaver and on the saver; they must give the same; return it."""
    expected = story(InMemorySaver())
    assert story(saver) == expected
    return expected


# -- a chat agent with a tool, an approval interrupt, and a human-in-the-loop edit ---------------


class Chat(TypedDict):
    messages: Annotated[list, add_messages]
    approved: bool


def agent_graph(saver: Any, *, ask: bool = True) -> Any:
    """agent (asks for the weather tool) -> review (interrupt) -> tools -> agent -> END."""

    def agent(state: Chat) -> dict[str, Any]:
        last = state["messages"][-1]
        if isinstance(last, HumanMessage):
            call = {"name": "weather", "args": {"city": last.content}, "id": f"call-{len(state['messages'])}"}
            return {"messages": [AIMessage(content="", tool_calls=[call])]}
        return {"messages": [AIMessage(content=f"done: {last.content}")]}

    def review(state: Chat) -> dict[str, Any]:
        return {"approved": bool(interrupt({"question": "run the tool?"})) if ask else True}

    def tools(state: Chat) -> dict[str, Any]:
        call = state["messages"][-1].tool_calls[0]
        return {"messages": [ToolMessage(content=f"sunny in {call['args']['city']}", tool_call_id=call["id"])]}

    def route(state: Chat) -> str:
        last = state["messages"][-1]
        return "review" if isinstance(last, AIMessage) and last.tool_calls else END

    g = StateGraph(Chat)
    g.add_node("agent", agent)
    g.add_node("review", review)
    g.add_node("tools", tools)
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", route, ["review", END])
    g.add_edge("review", "tools")
    g.add_edge("tools", "agent")
    return g.compile(checkpointer=saver)


def test_interrupt_resume_and_history(saver: EventLogSaver) -> None:
    def story(s: Any) -> Any:
        graph = agent_graph(s)
        cfg = {"configurable": {"thread_id": "chat"}}
        out = [plain(graph.invoke({"messages": [HumanMessage(content="Paris")]}, cfg))]
        out.append(plain(graph.invoke(Command(resume=True), cfg)))
        out.append(plain(graph.invoke({"messages": [HumanMessage(content="Oslo")]}, cfg)))
        out.append(plain(graph.invoke(Command(resume=False), cfg)))
        return out, history(graph, cfg)

    same_on_both(story, saver)


def test_an_edit_made_in_place_on_a_tool_call_is_saved(
    saver: EventLogSaver, open_log: Callable[..., eventlog.EventLog]
) -> None:
    """LangGraph's human-in-the-loop pattern: get the state, change the last message's tool call
    in place, update_state with it. The edit is saved (a new saver reads it), runs the tool with
    the new argument, and leaves the values other reads got unchanged."""

    def story(s: Any) -> Any:
        graph = agent_graph(s)
        cfg = {"configurable": {"thread_id": "hitl"}}
        graph.invoke({"messages": [HumanMessage(content="Paris")]}, cfg)
        snap = graph.get_state(cfg)
        last = snap.values["messages"][-1]
        last.tool_calls[0]["args"] = {"city": "Lyon"}
        graph.update_state(cfg, {"messages": [last]})
        other = graph.get_state(cfg).values["messages"][-1]
        other.tool_calls[0]["args"] = {"city": "not saved"}  # a change never passed to update_state
        edited = plain(graph.get_state(cfg).values["messages"][-1])
        done = plain(graph.invoke(Command(resume=True), cfg))
        past = next(h for h in graph.get_state_history(cfg) if h.next == ("review",))
        older = past.values["messages"][-1]  # from a listing, edited in place, saved as a fork
        older.tool_calls[0]["args"] = {"city": "Nice"}
        forked = graph.update_state(past.config, {"messages": [older]})
        again = plain(graph.invoke(Command(resume=True), forked))
        return edited, done, again, history(graph, cfg)

    expected = same_on_both(story, saver)
    assert expected[0] == ("AIMessage", "", [("weather", {"city": "Lyon"})])
    assert expected[2]["messages"][-2][1] == "sunny in Nice"
    fresh = agent_graph(EventLogSaver(saver.log))  # another process would read what is stored
    assert history(fresh, {"configurable": {"thread_id": "hitl"}}) == expected[3]


def test_a_node_that_changes_an_earlier_message_in_place_is_saved(saver: EventLogSaver) -> None:
    """A node that rewrites an earlier message (same id, changed content) and one that mutates the
    list it was given: both are saved by value."""

    class S(TypedDict):
        messages: Annotated[list, add_messages]
        notes: Annotated[list, operator.add]

    def first(state: S) -> dict[str, Any]:
        return {"messages": [AIMessage(content="draft", id="m1")], "notes": [{"n": 1}]}

    def second(state: S) -> dict[str, Any]:
        msg = state["messages"][-1]
        msg.content = "final"  # in place, then returned under the same id
        state["notes"][0]["n"] = 2  # in place, never returned: LangGraph keeps it only in memory
        return {"messages": [msg], "notes": [{"n": 3}]}

    def story(s: Any) -> Any:
        g = StateGraph(S)
        g.add_node("first", first)
        g.add_node("second", second)
        g.add_edge(START, "first")
        g.add_edge("first", "second")
        g.add_edge("second", END)
        graph = g.compile(checkpointer=s)
        cfg = {"configurable": {"thread_id": "inplace"}}
        graph.invoke({"messages": [HumanMessage(content="hi", id="h1")], "notes": []}, cfg, durability="sync")
        return history(graph, cfg)

    expected = same_on_both(story, saver)
    assert expected[0][0]["messages"][-1] == ("AIMessage", "final", [])


# -- time travel: replay, forks, copies ----------------------------------------------------------


class Steps(TypedDict):
    log: Annotated[list, operator.add]
    count: int


def steps_graph(saver: Any) -> Any:
    """a -> b -> c, each adding its name to `log` and one to `count`."""

    def node(name: str) -> Callable[[Steps], dict[str, Any]]:
        return lambda state: {"log": [name], "count": state.get("count", 0) + 1}

    g = StateGraph(Steps)
    for name in "abc":
        g.add_node(name, node(name))
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_edge("b", "c")
    g.add_edge("c", END)
    return g.compile(checkpointer=saver)


def test_replay_fork_and_copy_from_every_checkpoint(saver: EventLogSaver) -> None:
    """From each checkpoint of a run: its copy (`__copy__`) holds its values, not its parent's;
    a replay from it and a fork by update_state give what InMemorySaver gives."""

    def story(s: Any) -> Any:
        graph = steps_graph(s)
        cfg = {"configurable": {"thread_id": "travel"}}
        graph.invoke({"log": ["start"], "count": 0}, cfg)
        past = list(graph.get_state_history(cfg))
        out = []
        for i, snap in enumerate(reversed(past)):
            copied = graph.update_state(snap.config, None, as_node="__copy__")
            out.append(("copy", i, plain(graph.get_state(copied).values), graph.get_state(copied).next))
        for i, snap in enumerate(reversed(past)):
            if snap.next:
                out.append(("replay", i, plain(graph.invoke(None, snap.config))))
        for i, snap in enumerate(reversed(past)):
            if snap.next and i > 0:
                forked = graph.update_state(snap.config, {"log": [f"fork {i}"]})
                out.append(("fork", i, plain(graph.invoke(None, forked))))
        return out, history(graph, cfg)

    expected = same_on_both(story, saver)
    copies = [o for o in expected[0] if o[0] == "copy"]
    assert [c[2]["log"] for c in copies[1:]] == [
        ["start"],
        ["start", "a"],
        ["start", "a", "b"],
        ["start", "a", "b", "c"],
    ]


def test_a_copy_of_an_interrupted_checkpoint_resumes(saver: EventLogSaver) -> None:
    """A copy of the checkpoint waiting on an interrupt keeps the interrupt and the messages: a
    resume of the copy runs the tool once, as on InMemorySaver."""

    def story(s: Any) -> Any:
        graph = agent_graph(s)
        cfg = {"configurable": {"thread_id": "copy-int"}}
        graph.invoke({"messages": [HumanMessage(content="Rome")]}, cfg)
        waiting = graph.get_state(cfg)
        copied = graph.update_state(waiting.config, None, as_node="__copy__")
        got = graph.get_state(copied)
        resumed = plain(graph.invoke(Command(resume=True), copied))
        return (
            plain(got.values),
            got.next,
            [[i.value for i in t.interrupts] for t in got.tasks],
            resumed,
            history(graph, cfg),
        )

    expected = same_on_both(story, saver)
    assert expected[1] == ("review",)


# -- Send and a stateful subgraph ---------------------------------------------------------------


class Fan(TypedDict):
    topics: list[str]
    results: Annotated[list, operator.add]


class Sub(TypedDict):
    results: Annotated[list, operator.add]
    seen: Annotated[list, operator.add]


def fan_graph(saver: Any) -> Any:
    """plan -> Send one `work` per topic -> summary, a stateful subgraph that asks a human."""

    def work(arg: dict[str, str]) -> dict[str, Any]:
        return {"results": [f"worked {arg['topic']}"]}

    def fan_out(state: Fan) -> list[Send]:
        return [Send("work", {"topic": t}) for t in state["topics"]]

    def inner(state: Sub) -> dict[str, Any]:
        ok = interrupt({"check": len(state["results"])})
        return {"seen": [f"checked {ok}"], "results": [f"summary of {len(state['results'])}"]}

    sub = StateGraph(Sub)
    sub.add_node("inner", inner)
    sub.add_edge(START, "inner")
    sub.add_edge("inner", END)

    g = StateGraph(Fan)
    g.add_node("plan", lambda state: {"results": ["planned"]})
    g.add_node("work", work)
    g.add_node("summary", sub.compile(checkpointer=True))
    g.add_edge(START, "plan")
    g.add_conditional_edges("plan", fan_out, ["work"])
    g.add_edge("work", "summary")
    g.add_edge("summary", END)
    return g.compile(checkpointer=saver)


def test_send_and_a_stateful_subgraph(saver: EventLogSaver) -> None:
    def story(s: Any) -> Any:
        graph = fan_graph(s)
        cfg = {"configurable": {"thread_id": "fan"}}
        out = [plain(graph.invoke({"topics": ["x", "y", "z"], "results": []}, cfg))]
        state = graph.get_state(cfg, subgraphs=True)
        sub = [(t.name, plain(t.state.values) if t.state else None) for t in state.tasks]
        copied = graph.update_state(state.config, None, as_node="__copy__")  # waits in the subgraph too
        out.append(plain(graph.invoke(Command(resume="copy"), copied)))
        out.append(plain(graph.invoke(Command(resume="yes"), cfg)))
        out.append(plain(graph.invoke({"topics": ["w"], "results": []}, cfg)))
        out.append(plain(graph.invoke(Command(resume="again"), cfg)))
        return out, sub, history(graph, cfg)

    same_on_both(story, saver)


# -- durability modes ---------------------------------------------------------------------------


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
def test_every_durability_mode(saver: EventLogSaver, durability: str) -> None:
    def story(s: Any) -> Any:
        graph = agent_graph(s)
        cfg = {"configurable": {"thread_id": f"d-{durability}"}}
        out = [plain(graph.invoke({"messages": [HumanMessage(content="Bern")]}, cfg, durability=durability))]
        out.append(plain(graph.invoke(Command(resume=True), cfg, durability=durability)))
        out.append(plain(graph.invoke({"messages": [HumanMessage(content="Kyiv")]}, cfg, durability=durability)))
        return out, history(graph, cfg)

    same_on_both(story, saver)


def test_async_graphs_give_the_same(saver: EventLogSaver) -> None:
    """`ainvoke`, `aupdate_state` (a copy and an in-place edit) and `aget_state_history` too."""

    async def story(s: Any) -> Any:
        graph = agent_graph(s)
        cfg = {"configurable": {"thread_id": "async"}}
        out = [plain(await graph.ainvoke({"messages": [HumanMessage(content="Riga")]}, cfg))]
        snap = await graph.aget_state(cfg)
        last = snap.values["messages"][-1]
        last.tool_calls[0]["args"] = {"city": "Tartu"}
        await graph.aupdate_state(cfg, {"messages": [last]})
        copied = await graph.aupdate_state(snap.config, None, as_node="__copy__")
        out.append(plain((await graph.aget_state(copied)).values))
        out.append(plain(await graph.ainvoke(Command(resume=True), cfg)))
        snaps = [h async for h in graph.aget_state_history(cfg)]
        return out, [(plain(h.values), h.next, h.metadata.get("source"), h.metadata.get("step")) for h in snaps]

    expected = asyncio.run(story(InMemorySaver()))
    assert asyncio.run(story(saver)) == expected
    # the copy is of the checkpoint before the edit: the object edited in place never reached it
    assert expected[0][1]["messages"][-1] == ("AIMessage", "", [("weather", {"city": "Riga"})])
    assert expected[0][2]["messages"][-1][1] == "done: sunny in Riga"


# -- a thread written with string channel versions ---------------------------------------------


def move_thread(source: Any, target: Any, thread_id: str) -> None:
    """Copy a thread's checkpoints and pending writes from one saver into another through `put`
    and `put_writes`, oldest first, each checkpoint as a change of its parent."""
    tuples = list(source.list({"configurable": {"thread_id": thread_id}}))
    by_id = {t.config["configurable"]["checkpoint_id"]: t for t in tuples}
    for t in sorted(tuples, key=lambda t: t.config["configurable"]["checkpoint_id"]):
        conf = t.config["configurable"]
        parent = by_id.get(t.parent_config["configurable"]["checkpoint_id"]) if t.parent_config else None
        before = parent.checkpoint["channel_versions"] if parent else {}
        versions = t.checkpoint["channel_versions"]
        new = {ch: v for ch, v in versions.items() if before.get(ch) != v}
        base = t.parent_config or {"configurable": {"thread_id": thread_id, "checkpoint_ns": conf["checkpoint_ns"]}}
        target.put(base, t.checkpoint, t.metadata, new)
        tasks: dict[str, list[tuple[str, Any]]] = {}
        for task_id, channel, value in t.pending_writes or []:
            tasks.setdefault(task_id, []).append((channel, value))
        for task_id, writes in tasks.items():
            target.put_writes(t.config, writes, task_id)


def test_a_thread_with_string_versions_runs_on(saver: EventLogSaver) -> None:
    """A thread written by InMemorySaver (string versions, as SqliteSaver and PostgresSaver write
    them) moved into EventLogSaver reads the same and runs more steps, as it does where it was."""
    memory = InMemorySaver()
    cfg = {"configurable": {"thread_id": "moved"}}
    graph = agent_graph(memory)
    graph.invoke({"messages": [HumanMessage(content="Lima")]}, cfg)
    graph.invoke(Command(resume=True), cfg)
    graph.invoke({"messages": [HumanMessage(content="Quito")]}, cfg)  # waits on the interrupt
    assert isinstance(next(iter(memory.get_tuple(cfg).checkpoint["channel_versions"].values())), str)
    move_thread(memory, saver, "moved")
    assert history(agent_graph(saver), cfg) == history(graph, cfg)

    def more(s: Any) -> Any:
        g = agent_graph(s)
        out = [plain(g.invoke(Command(resume=True), cfg))]
        out.append(plain(g.invoke({"messages": [HumanMessage(content="Cusco")]}, cfg)))
        return out, history(g, cfg)

    assert more(saver) == more(memory)
    versions = saver.get_tuple(cfg).checkpoint["channel_versions"]
    assert all(isinstance(v, str) for v in versions.values())


def test_next_version_after_a_string_version_compares_greater(saver: EventLogSaver) -> None:
    for current in ["00000000000000000000000000000002.0.1234567890123456", "00000000000000000000000000000009.5"]:
        after = saver.get_next_version(current, None)
        assert isinstance(after, str) and after > current
        assert after == InMemorySaver().get_next_version(current, None).split(".")[0] + after[32:]
    assert saver.get_next_version(None, None) == 1
    assert saver.get_next_version(4, None) == 5
    with pytest.raises(eventlog.EventLogError, match="channel version 'v7'"):
        saver.get_next_version("v7", None)


# -- two savers on one thread -------------------------------------------------------------------


def test_two_savers_take_turns_on_one_thread(open_log: Callable[..., eventlog.EventLog]) -> None:
    """Two savers (two workers) alternate turns of one thread; each reads what the other wrote."""
    log = open_log()
    one, two = agent_graph(EventLogSaver(log)), agent_graph(EventLogSaver(log))
    memory = agent_graph(InMemorySaver())
    cfg = {"configurable": {"thread_id": "shared"}}
    for i, city in enumerate(["Accra", "Dakar", "Lagos"]):
        for j, step in enumerate([{"messages": [HumanMessage(content=city)]}, Command(resume=i != 1)]):
            (one if (i + j) % 2 == 0 else two).invoke(step, cfg)
            memory.invoke(step, cfg)
    assert history(one, cfg) == history(memory, cfg) == history(two, cfg)


def test_a_thread_deleted_and_made_again_is_not_served_from_the_cache(
    open_log: Callable[..., eventlog.EventLog],
) -> None:
    """Worker one has read a thread; worker two deletes it and starts it again with other content
    of the same length (the same head offset): worker one reads the new thread, not the old."""
    log = open_log()
    one, two = EventLogSaver(log), EventLogSaver(log)
    cfg = {"configurable": {"thread_id": "again"}}
    agent_graph(one).invoke({"messages": [HumanMessage(content="Old")]}, cfg)
    assert plain(agent_graph(one).get_state(cfg).values)["messages"][0][1] == "Old"
    head = log.head("again")
    two.delete_thread("again")
    agent_graph(two).invoke({"messages": [HumanMessage(content="New")]}, cfg)
    assert log.head("again") == head
    assert plain(agent_graph(one).get_state(cfg).values)["messages"][0][1] == "New"
    assert [h[0]["messages"][0][1] for h in history(agent_graph(one), cfg) if h[0].get("messages")] == ["New"] * 2
    agent_graph(one).invoke(Command(resume=True), cfg)
    assert plain(agent_graph(two).get_state(cfg).values)["messages"][-1][1] == "done: sunny in New"


def test_a_write_onto_a_checkpoint_of_a_thread_made_again_is_refused(
    open_log: Callable[..., eventlog.EventLog],
) -> None:
    """Worker one holds a checkpoint of a thread; worker two deletes the thread and starts it
    again. Worker one's put and put_writes onto its old checkpoint never land in the new thread."""
    from langgraph.checkpoint.base import empty_checkpoint

    log = open_log()
    one, two = EventLogSaver(log), EventLogSaver(log)
    root = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}

    def put(saver: EventLogSaver, config: Any, value: str) -> Any:
        cp = empty_checkpoint()
        cp["channel_values"], cp["channel_versions"] = {"v": value}, {"v": 1}
        return saver.put(config, cp, {"source": "loop", "step": 0}, {"v": 1})

    old = put(one, root, "old")
    assert one.get_tuple(old).checkpoint["channel_values"] == {"v": "old"}
    two.delete_thread("t")
    new = put(two, put(two, root, "new 0"), "new 1")
    for write in (lambda: one.put_writes(old, [("v", "late")], "task"), lambda: put(one, old, "old 1")):
        with pytest.raises(eventlog.errors.RunReplacedError, match="deleted and made again"):
            write()
    assert [t.checkpoint["channel_values"]["v"] for t in two.list(root)] == ["new 1", "new 0"]
    assert two.get_tuple(new).pending_writes == []
    assert (
        put(one, new, "new 2")["configurable"]["checkpoint_id"]
        == one.get_tuple(root).config["configurable"]["checkpoint_id"]
    )


# -- admin acts only on LangGraph's runs --------------------------------------------------------


def test_admin_leaves_runs_that_are_not_langgraph_threads(saver: EventLogSaver) -> None:
    """delete_thread, prune(delete), copy_thread and delete_for_runs never touch a run of other
    events, even one whose id is a thread's or a namespace's of a thread."""
    log = saver.log
    for run_id in ["trip-1", "trip-1|b", "trip-2|b"]:
        log.append(run_id, StepCompleted(node="n", superstep=1))
    graph = agent_graph(saver, ask=False)
    graph.invoke({"messages": [HumanMessage(content="Oslo")]}, {"configurable": {"thread_id": "trip-2"}})
    saver.delete_thread("trip-1")
    saver.prune(["trip-1"], strategy="delete")
    saver.copy_thread("trip-1", "trip-9")
    saver.delete_for_runs(["anything"])
    assert {"trip-1", "trip-1|b", "trip-2|b", "trip-2"} <= set(log.runs())
    assert "trip-9" not in log.runs()
    saver.delete_thread("trip-2")
    assert {"trip-1", "trip-1|b", "trip-2|b"} == set(log.runs())
    assert [e.event for e in log.read("trip-1|b")] == [StepCompleted(node="n", superstep=1)]
    # pruned to its last checkpoint (no event after the base): judged by that checkpoint's reducer
    graph.invoke({"messages": [HumanMessage(content="Rome")]}, {"configurable": {"thread_id": "trip-3"}})
    saver.prune(["trip-3"])
    log.append_many("trip-4", [StepCompleted(node="n", superstep=i) for i in (1, 2)])
    log.checkpoints.save("trip-4", 2)
    log.prune("trip-4", before=2)
    # the thread keeps its latest checkpoint as its base, and after it at most that checkpoint's
    # pending writes (the saver writes in the background: a task's writes may land after it)
    base = log.run_info("trip-3").base
    assert base > 0 and [type(e.event).__struct_config__.tag for e in log.read("trip-3", after=base)] in (
        [],
        ["langgraph.writes"] * (log.head("trip-3") - base),
    )
    assert log.run_info("trip-4").base == log.head("trip-4")
    saver.delete_thread("trip-3")
    saver.delete_thread("trip-4")
    assert {"trip-1", "trip-1|b", "trip-2|b", "trip-4"} == set(log.runs())


# -- rewrites are fenced against other savers ---------------------------------------------------


RUN_A, RUN_B, RUN_C = (f"00000000-0000-0000-0000-00000000000{c}" for c in "abc")


def test_a_rewrite_that_another_writer_comes_before_at_every_attempt_gives_up(
    open_log: Callable[..., eventlog.EventLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    """delete_for_runs marks the run at its head; while another writer appends before each attempt
    it tries for REWRITE_LOCK_SECONDS, then raises the last ConflictError with its attempts."""
    from conflicts import Jostling

    import eventlog.langgraph._rewrite as rewrite

    monkeypatch.setattr(rewrite, "REWRITE_LOCK_SECONDS", 0.3)
    monkeypatch.setattr(rewrite, "REWRITE_POLL_SECONDS", 0.01)
    clock = Jostling(limit=10**6)
    saver = EventLogSaver(open_log(clock=clock))
    config = {"configurable": {"thread_id": "busy", "run_id": RUN_A}}
    agent_graph(saver, ask=False).invoke({"messages": [HumanMessage(content="A")]}, config)
    clock.aim(saver.log, "busy", StepCompleted(node="other", superstep=1))
    marks: list[int] = []
    append = saver.log.append

    def counted(run_id: str, event: Any, **kw: Any) -> int:
        marks.extend([1] if type(event).__name__ == "RewriteStarted" else [])
        return append(run_id, event, **kw)

    monkeypatch.setattr(saver.log, "append", counted)  # a spy: every append is the log's own
    with pytest.raises(eventlog.ConflictError) as exc:
        saver.delete_for_runs([RUN_A])
    attempts = exc.value.attempts  # its mark's, each tried once: REWRITE_LOCK_SECONDS spent once
    assert attempts == len(marks) > 1 and f"at the last of {attempts} attempts" in str(exc.value)
    assert saver.log.runs() == ["busy"]  # no stage left, the thread as it was


def test_a_saver_waits_while_another_rewrites_the_thread(open_log: Callable[..., eventlog.EventLog]) -> None:
    """Once a rewrite (delete_for_runs) has marked the run, another saver's turn on the thread
    waits until the run is replaced, then goes on from the rewritten run: nothing is lost."""
    log = open_log()
    one, two = EventLogSaver(log), EventLogSaver(log)

    def turn(saver: EventLogSaver, content: str, run_id: str) -> None:
        config = {"configurable": {"thread_id": "fenced", "run_id": run_id}}
        agent_graph(saver, ask=False).invoke({"messages": [HumanMessage(content=content)]}, config)

    turn(one, "A", RUN_A)
    turn(two, "B", RUN_B)  # two's writer of the run is made
    ops = one._ops()
    stage = ops.rewriter.start("fenced")
    life = ops.rewriter.mark("fenced")
    waiting = threading.Thread(target=turn, args=(two, "C", RUN_C))
    waiting.start()
    time.sleep(0.5)
    assert waiting.is_alive() and log.life("fenced") == life  # two waits; the run stays at the mark
    batches = ops.rewriter.rewrite("fenced", ops.rewriter.doomed("fenced", {RUN_A}, life[1]), life)
    ops.rewriter.complete(stage, batches, life)
    ops.rewriter.finish("fenced", batches, life)
    waiting.join(30)
    assert not waiting.is_alive()
    assert {t.metadata.get("run_id") for t in two.list({"configurable": {"thread_id": "fenced"}})} == {RUN_B, RUN_C}
    contents = [
        m[1] for m in plain(agent_graph(one).get_state({"configurable": {"thread_id": "fenced"}}).values)["messages"]
    ]
    assert contents == [
        "A",
        "",
        "sunny in A",
        "done: sunny in A",
        "B",
        "",
        "sunny in B",
        "done: sunny in B",
        "C",
        "",
        "sunny in C",
        "done: sunny in C",
    ]
    assert "fenced|:rewrite" not in log.runs()


def test_a_copy_onto_a_thread_started_meanwhile_is_refused(open_log: Callable[..., eventlog.EventLog]) -> None:
    """copy_thread reads the source, then writes the target staged: a target another saver
    started in between is refused and left as that saver wrote it."""
    log = open_log()
    one, two = EventLogSaver(log), EventLogSaver(log)
    agent_graph(one, ask=False).invoke(
        {"messages": [HumanMessage(content="Src")]}, {"configurable": {"thread_id": "src"}}
    )
    ops = one._ops()
    batches = ops.admin.copy_of(ops.rewriter.open("src", ""))
    dst = {"configurable": {"thread_id": "dst"}}
    agent_graph(two, ask=False).invoke({"messages": [HumanMessage(content="Dst")]}, dst)
    before = history(agent_graph(two), dst)
    with pytest.raises(eventlog.ConflictError):
        ops.rewriter.copy("dst", batches)
    assert history(agent_graph(one), dst) == before
    assert "dst|:rewrite" not in log.runs()
    one.delete_thread("dst")
    one.copy_thread("src", "dst")
    assert history(agent_graph(two), dst) == history(agent_graph(two), {"configurable": {"thread_id": "src"}})


def test_delete_run_is_fenced_by_head_and_number(log: eventlog.EventLog) -> None:
    log.append("r", StepCompleted(node="n", superstep=1))
    number, head = log.life("r")
    assert (number, head) == (log.run_info("r").number, 1)
    log.append("r", StepCompleted(node="n", superstep=2))
    with pytest.raises(eventlog.ConflictError, match="expected head 1"):
        log.delete_run("r", expected_offset=1)
    log.delete_run("r")
    log.append("r", StepCompleted(node="n", superstep=1))
    with pytest.raises(eventlog.ConflictError, match="deleted"):
        log.delete_run("r", expected_offset=1, run_number=number)
    assert log.life("r")[1] == 1
    log.delete_run("r", expected_offset=1, run_number=log.life("r")[0])
    assert log.life("r") == (0, 0)


# -- another process writes the thread while delete_for_runs rewrites it -------------------------

_WORKER = """
import sys
from typing import Annotated
from typing_extensions import TypedDict
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from eventlog.langgraph import EventLogSaver

target, turns, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]

class S(TypedDict):
    messages: Annotated[list, add_messages]

g = StateGraph(S)
g.add_node("a", lambda s: {"messages": [AIMessage(content="answer %d" % len(s["messages"]))]})
g.add_edge(START, "a")
g.add_edge("a", END)
with EventLogSaver.from_path(target) as saver:
    graph = g.compile(checkpointer=saver)
    for i in range(turns):
        run_id = "00000000-0000-0000-0000-%012d" % i
        config = {"configurable": {"thread_id": "busy", "run_id": run_id}}
        graph.invoke({"messages": [HumanMessage(content="q%d" % i)]}, config, durability="sync")
        with open(out, "a") as f:
            f.write(run_id + "\\n")
"""


def test_delete_for_runs_while_another_process_writes_the_thread(shared_log: str, tmp_path: Path) -> None:
    """A worker process runs turns on a thread while this one deletes every other turn's run as
    soon as it ends: no checkpoint of a kept turn is lost, none of a deleted one is left, and the
    thread's state holds every message."""
    turns = int(os.environ.get("EVENTLOG_TEST_LG_TURNS", "12"))
    script, out = tmp_path / "worker.py", tmp_path / "done"
    script.write_text(_WORKER)
    out.write_text("")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    worker = subprocess.Popen([sys.executable, str(script), shared_log, str(turns), str(out)], env=env)
    deleted: list[str] = []
    with EventLogSaver.from_path(shared_log) as saver:
        try:
            while True:
                finished = worker.poll() is not None
                done = out.read_text().split()
                for run_id in done[len(deleted) * 2 :: 2]:
                    saver.delete_for_runs([run_id])
                    deleted.append(run_id)
                if finished:
                    break
                time.sleep(0.01)
        finally:
            if worker.poll() is None:
                worker.kill()
        assert worker.wait() == 0
        cfg = {"configurable": {"thread_id": "busy"}}
        per_run: dict[str, int] = {}
        for t in saver.list(cfg):
            per_run[t.metadata["run_id"]] = per_run.get(t.metadata["run_id"], 0) + 1
        kept = [r for r in out.read_text().split() if r not in deleted]
        assert len(kept) + len(deleted) == turns
        assert per_run == dict.fromkeys(kept, 3)  # each turn: input, before a, after a
        messages = saver.get_tuple(cfg).checkpoint["channel_values"]["messages"]
        assert [m.content for m in messages] == [c for i in range(turns) for c in (f"q{i}", f"answer {2 * i + 1}")]


_REMAKE = """
import sys
from langchain_core.messages import HumanMessage
sys.path.insert(0, sys.argv[2])
from test_langgraph_graphs import agent_graph
from eventlog.langgraph import EventLogSaver

with EventLogSaver.from_path(sys.argv[1]) as saver:
    saver.delete_thread("again")
    agent_graph(saver).invoke({"messages": [HumanMessage(content="New")]}, {"configurable": {"thread_id": "again"}})
"""


def test_a_thread_another_process_made_again_is_read_anew(shared_log: str, tmp_path: Path) -> None:
    """This process has read a thread; another deletes it and starts it again with content of the
    same length: this process's saver reads the new thread and continues it."""
    cfg = {"configurable": {"thread_id": "again"}}
    with EventLogSaver.from_path(shared_log) as saver:
        graph = agent_graph(saver)
        graph.invoke({"messages": [HumanMessage(content="Old")]}, cfg)
        head = saver.log.head("again")
        assert plain(graph.get_state(cfg).values)["messages"][0][1] == "Old"
        script = tmp_path / "remake.py"
        script.write_text(_REMAKE)
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
        here = str(Path(__file__).resolve().parent)
        subprocess.run([sys.executable, str(script), shared_log, here], env=env, check=True, timeout=120)
        assert saver.log.head("again") == head
        assert plain(graph.get_state(cfg).values)["messages"][0][1] == "New"
        graph.invoke(Command(resume=True), cfg)
        assert plain(graph.get_state(cfg).values)["messages"][-1][1] == "done: sunny in New"


# -- random time travel ---------------------------------------------------------------------------

_STORY_STEPS = st.lists(
    st.tuples(st.sampled_from(["ask", "resume", "copy", "fork", "edit", "replay"]), st.integers(0, 40)),
    min_size=1,
    max_size=8,
)
_examples = itertools.count()


@settings(
    max_examples=int(os.environ.get("EVENTLOG_TEST_LG_EXAMPLES", "10")),
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(steps=_STORY_STEPS)
def test_random_time_travel_matches_in_memory_saver(saver: EventLogSaver, steps: list[tuple[str, int]]) -> None:
    """Any mix of turns, resumes, copies, forks, in-place edits and replays from any checkpoint,
    each step by one of two savers over the log (two workers), gives, step by step and in the
    end, what it gives on InMemorySaver."""
    thread = f"random-{next(_examples)}"

    def story(one: Any, two: Any) -> Any:
        graphs = [agent_graph(one), agent_graph(two)]
        cfg = {"configurable": {"thread_id": thread}}
        out: list[Any] = []
        for i, (op, k) in enumerate(steps):
            graph = graphs[(i + k) % 2]
            past = list(graph.get_state_history(cfg))
            pick = past[k % len(past)].config if past else cfg
            try:
                if op == "ask":
                    out.append(plain(graph.invoke({"messages": [HumanMessage(content=f"c{k}")]}, cfg)))
                elif op == "resume":
                    out.append(plain(graph.invoke(Command(resume=k % 2 == 0), cfg)))
                elif op == "copy":
                    out.append(plain(graph.get_state(graph.update_state(pick, None, as_node="__copy__")).values))
                elif op == "fork":
                    out.append(plain(graph.get_state(graph.update_state(pick, {"approved": k % 3 == 0})).values))
                elif op == "edit":
                    messages = graph.get_state(cfg).values.get("messages", [])
                    if messages and getattr(messages[-1], "tool_calls", None):
                        messages[-1].tool_calls[0]["args"] = {"city": f"e{k}"}
                        graph.update_state(cfg, {"messages": [messages[-1]]})
                    out.append(plain(graph.get_state(cfg).values))
                else:
                    out.append(plain(graph.invoke(None, pick)))
            except Exception as exc:
                out.append(type(exc).__name__)
        return out, history(graphs[0], cfg), history(graphs[1], cfg)

    memory, other = InMemorySaver(), EventLogSaver(saver.log)
    try:
        assert story(saver, other) == story(memory, memory)
    finally:
        other.close()
