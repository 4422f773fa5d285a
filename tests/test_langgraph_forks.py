"""A LangGraph thread forked by the log itself (`EventLog.fork`, what `eventlog fork` and the
viewer's fork do) is a thread the saver goes on with: the state, the history up to the fork,
one more turn, and the saver's admin (prune, copy) on it, whether the thread it forks from was
pruned by its saver or not. The fork's history is compared with the thread's, the turn with the
same turn on InMemorySaver."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.conformance", reason="pip install 'eventlog[test]' (langgraph extras)")

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph

from eventlog.langgraph import VIEW, EventLogSaver


def chat(saver: Any) -> Any:
    def reply(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(content="re: " + str(state["messages"][-1].content))]}

    builder = StateGraph(MessagesState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    return builder.compile(checkpointer=saver)


def conf(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


def said(graph: Any, thread_id: str) -> list[list[str]]:
    """The thread's history, newest first: each checkpoint's message contents."""
    return [[str(m.content) for m in s.values.get("messages", [])] for s in graph.get_state_history(conf(thread_id))]


def turns(graph: Any, thread_id: str, *texts: str) -> None:
    for text in texts:
        graph.invoke({"messages": [HumanMessage(content=text)]}, conf(thread_id))


def forked(saver: EventLogSaver, pruned: bool) -> Any:
    """The chat graph on `saver`: thread `t` of two turns (pruned by the saver, or not) and `t2`,
    its fork made by the log at its head."""
    log, graph = saver.log, chat(saver)
    turns(graph, "t", "one", "two")
    if pruned:
        saver.prune(["t"])
    log.fork("t", log.head("t"), "t2")
    return graph


@pytest.mark.parametrize("pruned", [False, True], ids=["kept", "pruned"])
def test_a_fork_made_by_the_log_goes_on_as_a_thread(saver: EventLogSaver, pruned: bool) -> None:
    log, graph = saver.log, forked(saver, pruned)
    before = said(graph, "t")
    assert said(graph, "t2") == before  # the history up to the fork, the pruned thread's latest alone
    assert graph.get_state(conf("t2")).metadata == graph.get_state(conf("t")).metadata
    turns(graph, "t2", "three")
    memory = chat(InMemorySaver())
    turns(memory, "m", "one", "two", "three")
    assert said(graph, "t2")[0] == said(memory, "m")[0]
    assert said(graph, "t2")[len(said(graph, "t2")) - len(before) :] == before
    assert said(graph, "t") == before  # the thread it forks from is as it was
    turns(graph, "t", "other")
    assert said(graph, "t")[0][-2:] == ["other", "re: other"] and said(graph, "t2")[0][-2:] == ["three", "re: three"]
    # the command line's history of the fork lists what LangGraph's does, oldest first
    _, rows = VIEW.history(log, "t2", None)
    listed = [t.config["configurable"]["checkpoint_id"] for t in saver.list(conf("t2"))]
    assert [r["checkpoint"] for r in rows] == listed[::-1]


def test_a_fork_made_at_an_earlier_checkpoint_goes_on_from_it(saver: EventLogSaver) -> None:
    log, graph = saver.log, chat(saver)
    turns(graph, "t", "one", "two")
    earlier = next(s for s in graph.get_state_history(conf("t")) if len(s.values.get("messages", [])) == 2)
    cid = earlier.config["configurable"]["checkpoint_id"]
    at = next(cp.offset for cp in log.checkpoints.list("t") if cp.metadata["id"] == cid)
    log.fork("t", at, "t2")
    assert [str(m.content) for m in graph.get_state(conf("t2")).values["messages"]] == ["one", "re: one"]
    turns(graph, "t2", "again")
    assert said(graph, "t2")[0] == ["one", "re: one", "again", "re: again"]


@pytest.mark.parametrize("pruned", [False, True], ids=["kept", "pruned"])
def test_prune_and_copy_of_a_fork_keep_what_it_reads(saver: EventLogSaver, pruned: bool) -> None:
    log, graph = saver.log, forked(saver, pruned)
    shared = said(graph, "t2")
    saver.prune(["t2"])  # its latest checkpoint is one it shares: nothing of its own to drop
    assert said(graph, "t2") == shared and said(graph, "t") == shared
    turns(graph, "t2", "three")
    whole = said(graph, "t2")
    saver.copy_thread("t2", "t3")
    assert said(graph, "t3") == whole
    saver.prune(["t2"])
    assert said(graph, "t2") == whole[:1]
    assert log.run_info("t2").base > log.run_info("t2").fork_offset
    turns(graph, "t2", "four")
    assert said(graph, "t2")[0][-4:] == ["three", "re: three", "four", "re: four"]
    assert said(graph, "t3") == whole  # the copy stands alone
