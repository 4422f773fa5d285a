"""What a caller appends, and what it is handed, is its own: a run writer folds the log's own
copies of the events, so nothing a caller, a listener or an LLM does to its objects afterwards
reaches a state, a checkpoint or a snapshot. Each test changes those objects in place and checks
that every checkpoint still holds the fold of the stored events (`verify`)."""

from __future__ import annotations

from typing import Any

import eventlog
from eventlog.agent.conversation import Agent
from eventlog.agent.graph import END, START, Graph
from eventlog.events import Message, StepCompleted, ToolCall


def folds_alike(log: eventlog.EventLog) -> None:
    """Every checkpoint restores the fold of its run's events: `verify` compares each snapshot
    with the events folded from the start."""
    report = log.verify()
    assert report.ok, report.problems


def test_a_writer_never_holds_what_its_caller_appended(log: eventlog.EventLog) -> None:
    w = log.writer("r", policy=eventlog.CheckpointPolicy.every(100))
    update: dict[str, Any] = {"plan": {"items": ["a"]}}
    w.append(StepCompleted(node="plan", superstep=1, update=update))
    update["plan"]["items"].append("b")  # the caller's object, changed after the append
    update["other"] = 1
    assert w.state.values == {"plan": {"items": ["a"]}}
    cp = w.checkpoint()
    assert cp.state.values == log.state_at("r").values == {"plan": {"items": ["a"]}}
    folds_alike(log)


def test_a_graph_listener_that_changes_its_event_changes_nothing_run_or_stored(log: eventlog.EventLog) -> None:
    seen: list[dict[str, Any]] = []

    def listener(event: Any, offset: int, checkpoint: Any) -> None:
        if isinstance(event, StepCompleted) and "user" in event.update:
            event.update["user"]["card"] = "****"  # redacted for a display, in place

    graph = Graph("g")
    graph.add_node("a", lambda values: {"user": {"name": "Ada", "card": "4111-1111"}})
    graph.add_node("b", lambda values: seen.append(dict(values["user"])) or {"done": True})
    graph.add_edge(START, "a")
    graph.add_edge("a", "b")
    graph.add_edge("b", END)
    graph.compile(log, listener=listener).run("r", {})
    assert seen == [{"name": "Ada", "card": "4111-1111"}]  # what the log holds, not the listener's edit
    assert all(cp.state.values["user"]["card"] == "4111-1111" for cp in log.checkpoints.list("r"))
    folds_alike(log)


def test_a_conversation_hands_out_copies(log: eventlog.EventLog) -> None:
    ran: list[str] = []

    def llm(messages: list[Message]) -> Message:
        for m in messages:  # an LLM adapter that rewrites what it was given, in place
            for call in m.tool_calls:
                call.arguments["city"] = call.arguments["city"].lower()
        if messages[-1].role == "tool":
            return Message(role="assistant", content="done")
        return Message(role="assistant", tool_calls=[ToolCall(id="t1", name="weather", arguments={"city": "Paris"})])

    def weather(city: str) -> str:
        ran.append(city)
        return f"sunny in {city}"

    chat = Agent(llm, tools={"weather": weather}, confirm=["weather"], model="m").start_conversation(log, "c")
    assert chat.send("weather in paris?").status == "paused"
    chat.messages[-1].tool_calls[0].arguments["city"] = "Lyon"  # a caller's edit of what it read
    assert chat.resume(True).status == "answered"
    assert ran == ["Paris"]  # the call the log holds, as approved
    assert chat.messages[1].tool_calls[0].arguments == {"city": "Paris"}
    folds_alike(log)
