"""eventlog.wayflow on real wayflowcore 26.3 objects (an Agent with tools, a Flow), offline.

The LLM is scripted (tests/wayflow_app.py); restores "in a new process" run in a real
subprocess that rebuilds the component from code and opens the same LMDB directory.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import msgspec
import pytest

pytest.importorskip("wayflowcore", reason="the wayflow extra is not installed")

from hypothesis import given, settings
from hypothesis import strategies as st
from wayflow_app import booked, build_agent, build_flow, call, reply, weather
from wayflowcore.executors.executionstatus import (
    FinishedStatus,
    ToolExecutionConfirmationStatus,
    UserMessageRequestStatus,
)

import eventlog
from eventlog.events import (
    Interrupted,
    LLMCallCompleted,
    LLMCallFailed,
    LLMCallStarted,
    Resumed,
    ToolCallCompleted,
    TurnFailed,
    TurnStarted,
    UserMessage,
)
from eventlog.views import view_of
from eventlog.wayflow import (
    VIEW,
    CheckpointingInterval,
    ConversationStarted,
    EventLogCheckpointer,
    IncompatibleComponentError,
    NotAWayflowConversationError,
    RestoreWithMessagesError,
    Rewound,
    Snapshot,
    WayflowCheckpointError,
    WayflowReducer,
    start_conversation,
)
from eventlog.wayflow._diff import diff, patch
from eventlog.wayflow._events import refer_texts, resolve_texts

ROOT = Path(__file__).resolve().parent.parent


def kinds(log: eventlog.EventLog, run_id: str, after: int = 0) -> list[str]:
    return [type(e.event).__name__ for e in log.read(run_id, after=after)]


def texts(conversation: Any) -> list[str]:
    return [m.content for m in conversation.get_messages()]


def run_in_new_process(path: Path, code: str) -> str:
    """Run `code` in a fresh interpreter that has the log's path as `PATH`; return its output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVENTLOG_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "tests")])
    script = f"PATH = {str(path)!r}\n" + textwrap.dedent(code)
    p = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


@pytest.mark.parametrize(
    ("interval", "first_turn", "reasons", "second_turn"),
    [
        (CheckpointingInterval.CONVERSATION_TURNS, 1, ["conversation_turn"], 1),
        # iterations of turn 1: the LLM asks for the tool, the tool is queued, it runs, the LLM
        # answers; then the turn ends. Turn 2 is one iteration (the LLM answers) and the end.
        (CheckpointingInterval.LLM_TURNS, 3, ["internal_turn_boundary"] * 2 + ["conversation_turn"], 2),
        (CheckpointingInterval.ALL_INTERNAL_TURNS, 5, ["internal_turn_boundary"] * 4 + ["conversation_turn"], 2),
    ],
)
def test_checkpoint_counts_per_interval(
    log: eventlog.EventLog, interval: CheckpointingInterval, first_turn: int, reasons: list[str], second_turn: int
) -> None:
    checkpointer = EventLogCheckpointer(log, interval=interval)
    agent = build_agent([call("weather", "t1", city="Bern"), reply("Sunny in Bern."), reply("You're welcome.")])
    conversation = start_conversation(agent, messages="Plan a trip to Bern", checkpointer=checkpointer)
    assert log.head(conversation.conversation_id) == 0  # nothing is written before the first execute
    status = conversation.execute()
    assert isinstance(status, UserMessageRequestStatus) and status.message.content == "Sunny in Bern."
    c = conversation.conversation_id
    saved = checkpointer.list_checkpoints(c)
    assert [cp.metadata["save_reason"] for cp in saved] == reasons and len(saved) == first_turn
    assert saved[-1].metadata["turn"] == 1 and saved[-1].metadata["message_count"] == 4
    assert all(cp.component_id == "trip-agent" and cp.conversation_id == c for cp in saved)

    # the turn as the standard kinds: `eventlog events` shows it as it shows our own conversations
    shown = [k for k in kinds(log, c) if k != "Snapshot"]
    assert shown == [
        "ConversationStarted", "TurnStarted", "UserMessage", "LLMCallStarted", "LLMCallCompleted",
        "ToolCallStarted", "ToolCallCompleted", "LLMCallStarted", "LLMCallCompleted", "TurnCompleted",
    ]  # fmt: skip
    tool = next(e.event for e in log.read(c) if isinstance(e.event, ToolCallCompleted))
    assert (tool.call_id, tool.tool, tool.output) == ("t1", "weather", "sunny in Bern")
    asked = next(e.event for e in log.read(c) if isinstance(e.event, LLMCallCompleted))
    assert [(t.id, t.name, t.arguments) for t in asked.output.tool_calls] == [("t1", "weather", {"city": "Bern"})]
    assert (asked.input_tokens, asked.output_tokens) == (10, 5)

    conversation.append_user_message("Thanks!")
    conversation.execute()
    assert len(checkpointer.list_checkpoints(c)) == first_turn + second_turn
    assert log.verify(reducer=WayflowReducer()).ok


def test_restore_in_a_new_process_continues(tmp_path: Path) -> None:
    path = tmp_path / "log"
    with eventlog.open(path) as log:
        checkpointer = EventLogCheckpointer(log)
        agent = build_agent([call("weather", "t1", city="Bern"), reply("Sunny in Bern.")])
        conversation = start_conversation(
            agent, messages="Plan a trip to Bern", checkpointer=checkpointer, conversation_id="trip"
        )
        conversation.execute()
        checkpoint = checkpointer.load_latest("trip")
        assert checkpoint is not None
    out = run_in_new_process(
        path,
        """
        import eventlog
        from eventlog.wayflow import EventLogCheckpointer, start_conversation
        from wayflow_app import build_agent, reply
        with eventlog.open(PATH) as log:
            checkpointer = EventLogCheckpointer(log)
            agent = build_agent([reply("For two people, two rooms.")])
            restored = start_conversation(agent, conversation_id="trip", checkpointer=checkpointer)
            print(restored.restored_from.checkpoint_id)
            restored.append_user_message("And for two people?")
            print(restored.execute().message.content)
            print(agent.llm.prompts)
        """,
    )
    restored_from, answer, prompts = out.splitlines()
    assert restored_from == checkpoint.checkpoint_id and answer == "For two people, two rooms."
    with eventlog.open(path) as log:
        checkpointer = EventLogCheckpointer(log)
        cps = checkpointer.list_checkpoints("trip")
        assert [cp.metadata["turn"] for cp in cps] == [1, 2] and cps[-1].metadata["message_count"] == 6
        assert checkpointer.branches("trip") == []  # the latest was restored: nothing was replaced
        view = VIEW.state(log, "trip", log.head("trip"))
        assert [m["content"] for m in view["messages"]][-2:] == ["And for two people?", "For two people, two rooms."]
        assert view["turn"] == 2 and view["llm_calls"] == 3 and view["tool_calls"] == 1
    assert prompts == "[6]"  # the restored LLM saw the whole conversation (system prompt + 5 messages)


def test_tool_confirmation_pause_is_resumed_in_a_new_process(tmp_path: Path) -> None:
    path = tmp_path / "log"
    booked.clear()
    with eventlog.open(path) as log:
        checkpointer = EventLogCheckpointer(log)
        agent = build_agent([call("book_hotel", "b1", city="Bern", people=2)])
        conversation = start_conversation(
            agent, messages="Book Bern for 2", checkpointer=checkpointer, conversation_id="trip"
        )
        status = conversation.execute()
        assert isinstance(status, ToolExecutionConfirmationStatus) and booked == []
        paused = checkpointer.load_latest("trip")
        assert paused is not None and paused.metadata["status_type"] == "ToolExecutionConfirmationStatus"
        interrupt = next(e.event for e in log.read("trip") if isinstance(e.event, Interrupted))
        assert interrupt.nodes == ["b1"] and interrupt.payload["arguments"] == {"city": "Bern", "people": 2}
    out = run_in_new_process(
        path,
        """
        import eventlog
        from eventlog.wayflow import EventLogCheckpointer, start_conversation
        from wayflow_app import booked, build_agent, reply
        with eventlog.open(PATH) as log:
            agent = build_agent([reply("Booked: two people in Bern.")])
            restored = start_conversation(agent, conversation_id="trip", checkpointer=EventLogCheckpointer(log))
            status = restored.status
            status.confirm_tool_execution(status.tool_requests[0])
            print(restored.execute().message.content)
            print(booked)
        """,
    )
    assert out.splitlines() == ["Booked: two people in Bern.", "['Bern/2']"]  # the tool ran once, in the new process
    with eventlog.open(path) as log:
        tail = [e.event for e in log.read("trip", after=paused.offset)]
        assert [type(e).__name__ for e in tail if not isinstance(e, Snapshot)] == [
            "TurnStarted", "Resumed", "ToolCallStarted", "ToolCallCompleted", "LLMCallStarted", "LLMCallCompleted",
            "TurnCompleted",
        ]  # fmt: skip
        assert next(e for e in tail if isinstance(e, Resumed)) == Resumed(value=True, nodes=["b1"])
        assert next(e for e in tail if isinstance(e, ToolCallCompleted)).output == "booked a room for 2 in Bern"


def test_a_declined_confirmation_is_recorded(log: eventlog.EventLog) -> None:
    booked.clear()
    checkpointer = EventLogCheckpointer(log)
    agent = build_agent([call("book_hotel", "b1", city="Bern", people=9), reply("I did not book it.")])
    conversation = start_conversation(agent, messages="Book Bern for 9", checkpointer=checkpointer, conversation_id="c")
    status = conversation.execute()
    status.reject_tool_execution(status.tool_requests[0], reason="too many people")
    assert conversation.execute().message.content == "I did not book it." and booked == []
    events = [e.event for e in log.read("c")]
    assert Resumed(value=False, nodes=["b1"]) in events
    declined = next(e for e in events if isinstance(e, ToolCallCompleted))
    assert declined.call_id == "b1" and "too many people" in declined.output


def test_rewind_keeps_the_conversation_id_and_keeps_the_replaced_future_as_a_branch(log: eventlog.EventLog) -> None:
    checkpointer = EventLogCheckpointer(log)
    script = [reply("Bern is lovely."), reply("Two rooms then."), reply("Rome is warm."), reply("Paris, then.")]
    agent = build_agent(script)
    conversation = start_conversation(
        agent, messages="Plan a trip to Bern", checkpointer=checkpointer, conversation_id="c"
    )
    conversation.execute()
    conversation.append_user_message("And for two people?")
    conversation.execute()
    old_head, old_messages = log.head("c"), texts(conversation)
    checkpoints = checkpointer.list_checkpoints("c")
    previous, replaced = checkpoints[-2], checkpoints[-1]

    rewound = start_conversation(
        agent, conversation_id="c", checkpoint_id=previous.checkpoint_id, checkpointer=checkpointer
    )
    assert rewound.conversation_id == "c" and rewound.restored_from == previous
    assert texts(rewound) == ["Plan a trip to Bern", "Bern is lovely."]
    # looking is read-only: nothing is written until the restored conversation's first write
    assert log.head("c") == old_head and checkpointer.branches("c") == [] and "c~1" not in log.runs()
    assert checkpointer.load_latest("c") == replaced
    assert checkpointer.list_checkpoints("c") == checkpoints
    # restoring the same checkpoint again works, and writes nothing either
    again = start_conversation(
        agent, conversation_id="c", checkpoint_id=previous.checkpoint_id, checkpointer=checkpointer
    )
    assert texts(again) == texts(rewound) and log.head("c") == old_head

    again.append_user_message("What about Rome?")
    assert again.execute().message.content == "Rome is warm."  # the first write keeps the future as a branch
    [branch] = checkpointer.branches("c")
    assert (branch.branch_id, branch.checkpoint_id, branch.offset, branch.head) == (
        "c~1",
        previous.checkpoint_id,
        previous.offset,
        old_head,
    )
    info = log.run_info("c~1")
    assert (info.parent, info.fork_offset) == ("c", old_head)
    assert [cp.checkpoint_id for cp in checkpointer.list_checkpoints("c~1")] == [
        previous.checkpoint_id,
        replaced.checkpoint_id,
    ]
    with pytest.raises(eventlog.errors.CheckpointNotFoundError, match="kept on branch 'c~1'"):
        checkpointer.load("c", replaced.checkpoint_id)
    # the other object restored from the same checkpoint has not written: its first write is refused
    rewound.append_user_message("And Milan?")
    with pytest.raises(eventlog.ConflictError):
        rewound.execute()
    assert len(checkpointer.branches("c")) == 1
    assert texts(again) == ["Plan a trip to Bern", "Bern is lovely.", "What about Rome?", "Rome is warm."]
    assert [cp.metadata["turn"] for cp in checkpointer.list_checkpoints("c")] == [1, 2]
    assert VIEW.state(log, "c", log.head("c"))["messages"][-1]["content"] == "Rome is warm."
    # the old future stays readable on its branch, and can be continued there
    assert [m["content"] for m in VIEW.state(log, "c~1", log.head("c~1"))["messages"]] == old_messages
    branch_agent = build_agent([reply("Paris, then.")])
    on_branch = start_conversation(branch_agent, conversation_id="c~1", checkpointer=checkpointer)
    assert texts(on_branch) == old_messages and log.head("c~1") == old_head
    on_branch.append_user_message("Or Paris?")
    on_branch.execute()
    assert log.head("c~1") > old_head and log.state_at("c~1", reducer=WayflowReducer()).turn == 3

    # a second rewind, after progress, keeps a second branch at its first write
    second = start_conversation(
        agent, conversation_id="c", checkpoint_id=previous.checkpoint_id, checkpointer=checkpointer
    )
    assert len(checkpointer.branches("c")) == 1
    checkpointer.save(second, checkpoint_id="looked-again")
    assert [b.branch_id for b in checkpointer.branches("c")] == ["c~1", "c~2"]
    assert [r["branch"] for r in VIEW.state(log, "c", log.head("c"))["branches"]] == ["c~1", "c~2"]
    assert [type(e.event) for e in log.read("c")].count(Rewound) == 2
    assert log.verify(reducer=WayflowReducer()).ok


def _three_turns(log: eventlog.EventLog, tag: str) -> EventLogCheckpointer:
    checkpointer = EventLogCheckpointer(log)
    agent = build_agent([reply(f"{tag} answer {i}") for i in (1, 2, 3)])
    conversation = start_conversation(
        agent, messages=f"{tag} question 1", checkpointer=checkpointer, conversation_id="c"
    )
    conversation.execute()
    for i in (2, 3):
        conversation.append_user_message(f"{tag} question {i}")
        conversation.execute()
    return checkpointer


class _MadeAgainAfterLoad(EventLogCheckpointer):
    """A checkpointer after whose `load` another writer deletes the conversation and records a
    new one under its id, as another process can between a restore's reads."""

    def load(self, conversation_id: str, checkpoint_id: str) -> Any:
        found = super().load(conversation_id, checkpoint_id)
        self.log.delete_run(conversation_id)
        _three_turns(self.log, "new")
        return found


def test_a_restore_never_joins_two_lives_of_a_conversation(log: eventlog.EventLog) -> None:
    chosen = _three_turns(log, "old").list_checkpoints("c")[-2]
    with pytest.raises(eventlog.errors.RunReplacedError, match="deleted and made again"):
        start_conversation(
            build_agent([]),
            conversation_id="c",
            checkpoint_id=chosen.checkpoint_id,
            checkpointer=_MadeAgainAfterLoad(log),
        )
    restored = start_conversation(build_agent([]), conversation_id="c", checkpointer=EventLogCheckpointer(log))
    assert texts(restored) == [f"new {w} {i}" for i in (1, 2, 3) for w in ("question", "answer")]


def test_delete_makes_the_previous_checkpoint_the_latest(log: eventlog.EventLog) -> None:
    checkpointer = EventLogCheckpointer(log)
    agent = build_agent([reply("one"), reply("two"), reply("three")])
    conversation = start_conversation(agent, messages="1", checkpointer=checkpointer, conversation_id="c")
    for text in (None, "2", "3"):
        if text:
            conversation.append_user_message(text)
        conversation.execute()
    first, second, third = checkpointer.list_checkpoints("c")
    checkpointer.delete("c", third.checkpoint_id)
    assert checkpointer.load_latest("c") == second
    assert [cp.checkpoint_id for cp in checkpointer.list_checkpoints("c")] == [
        first.checkpoint_id,
        second.checkpoint_id,
    ]
    with pytest.raises(eventlog.errors.CheckpointNotFoundError):
        checkpointer.load("c", third.checkpoint_id)
    with pytest.raises(eventlog.errors.CheckpointNotFoundError):
        checkpointer.delete("c", third.checkpoint_id)
    restored = start_conversation(build_agent([]), conversation_id="c", checkpointer=checkpointer)
    assert texts(restored) == ["1", "one", "2", "two"]
    assert checkpointer.load_latest("nobody") is None and checkpointer.list_checkpoints("nobody") == []


def test_restore_with_new_messages_is_refused_before_anything_is_written(log: eventlog.EventLog) -> None:
    checkpointer = EventLogCheckpointer(log)
    agent = build_agent([reply("hello")])
    start_conversation(agent, messages="hi", checkpointer=checkpointer, conversation_id="c").execute()
    latest = checkpointer.load_latest("c")
    head, runs = log.head("c"), log.runs()
    for passed in ({"messages": "again"}, {"inputs": {"x": 1}}):
        with pytest.raises(RestoreWithMessagesError, match="restore the conversation first") as info:
            start_conversation(
                agent, conversation_id="c", checkpoint_id=latest.checkpoint_id, checkpointer=checkpointer, **passed
            )
        assert isinstance(info.value, ValueError) and isinstance(info.value, eventlog.EventLogError)
    with pytest.raises(RestoreWithMessagesError):
        start_conversation(agent, conversation_id="c", messages="again", checkpointer=checkpointer)  # latest restored
    assert log.head("c") == head and log.runs() == runs
    with pytest.raises(WayflowCheckpointError, match="needs the conversation_id"):
        start_conversation(agent, checkpoint_id=latest.checkpoint_id, checkpointer=checkpointer)
    with pytest.raises(eventlog.errors.CheckpointNotFoundError):
        start_conversation(agent, conversation_id="new", checkpoint_id="x", checkpointer=checkpointer)


def test_a_failed_turn_leaves_no_final_checkpoint(log: eventlog.EventLog) -> None:
    checkpointer = EventLogCheckpointer(log)
    agent = build_agent([reply("hello"), RuntimeError("the model went away")])
    conversation = start_conversation(agent, messages="hi", checkpointer=checkpointer, conversation_id="c")
    conversation.execute()
    before = checkpointer.list_checkpoints("c")
    conversation.append_user_message("again")
    with pytest.raises(RuntimeError, match="the model went away"):
        conversation.execute()
    assert checkpointer.list_checkpoints("c") == before
    tail = [e.event for e in log.read("c", after=before[-1].offset)]
    assert [type(e) for e in tail] == [TurnStarted, UserMessage, LLMCallStarted, LLMCallFailed, TurnFailed]
    assert "the model went away" in tail[-1].error
    # the conversation resumes from the checkpoint before the failed turn; the failure stays in the record
    retry_agent = build_agent([reply("back again")])
    retry = start_conversation(retry_agent, conversation_id="c", checkpointer=checkpointer)
    assert texts(retry) == ["hi", "hello"] and checkpointer.branches("c") == []
    retry.append_user_message("again")
    assert retry.execute().message.content == "back again"
    assert log.state_at("c", reducer=WayflowReducer()).turn == 3


def test_an_incompatible_component_is_refused_before_anything_is_written(log: eventlog.EventLog) -> None:
    checkpointer = EventLogCheckpointer(log)
    start_conversation(
        build_agent([reply("hello")]), messages="hi", checkpointer=checkpointer, conversation_id="c"
    ).execute()
    head, runs = log.head("c"), log.runs()
    with pytest.raises(
        IncompatibleComponentError, match=r"component\.id: 'trip-agent' in the conversation, 'other'"
    ) as info:
        start_conversation(build_agent([], agent_id="other"), conversation_id="c", checkpointer=checkpointer)
    assert isinstance(info.value, eventlog.EventLogError)
    with pytest.raises(IncompatibleComponentError, match=r"component\.tools"):
        start_conversation(build_agent([], tools=[weather]), conversation_id="c", checkpointer=checkpointer)
    with pytest.raises(IncompatibleComponentError, match="started with Agent 'trip-agent'"):
        start_conversation(build_flow(), conversation_id="c", checkpointer=checkpointer)
    assert log.head("c") == head and log.runs() == runs
    log.append("plain", TurnStarted(turn=1))
    with pytest.raises(NotAWayflowConversationError, match="not a WayFlow conversation"):
        start_conversation(build_agent([]), conversation_id="plain", checkpointer=checkpointer)


def test_a_random_component_id_is_named(log: eventlog.EventLog) -> None:
    from wayflow_app import ScriptedLlm
    from wayflowcore.agent import Agent

    checkpointer = EventLogCheckpointer(log)

    def unnamed() -> Agent:
        return Agent(llm=ScriptedLlm([reply("hello")], id="scripted-llm"), tools=[weather], name="trip_planner")

    with pytest.warns(UserWarning, match="randomly generated id"):
        conversation = start_conversation(unnamed(), messages="hi", checkpointer=checkpointer, conversation_id="c")
    conversation.execute()
    with pytest.warns(UserWarning), pytest.raises(IncompatibleComponentError, match="fixed id"):
        start_conversation(unnamed(), conversation_id="c", checkpointer=checkpointer)  # as another process builds it


def test_a_flow_is_restored_in_a_new_process_at_its_step(tmp_path: Path) -> None:
    path = tmp_path / "log"
    with eventlog.open(path) as log:
        checkpointer = EventLogCheckpointer(log)
        conversation = start_conversation(build_flow(), checkpointer=checkpointer, conversation_id="f")
        assert conversation.execute().message.content == "Which city?"
        conversation.append_user_message("Bern")
        assert conversation.execute().message.content == "How many people?"
    # step ids are random in every process: the state is matched to the steps by name
    out = run_in_new_process(
        path,
        """
        import eventlog
        from eventlog.wayflow import EventLogCheckpointer, start_conversation
        from wayflow_app import build_flow, reply
        with eventlog.open(PATH) as log:
            flow = build_flow([reply("Two days in Bern for 2.")])
            restored = start_conversation(flow, conversation_id="f", checkpointer=EventLogCheckpointer(log))
            restored.append_user_message("2")
            status = restored.execute()
            print(type(status).__name__)
            print([m.content for m in restored.get_messages()])
        """,
    )
    status, messages = out.splitlines()
    assert status == "FinishedStatus"
    assert messages == str(["Which city?", "Bern", "How many people?", "2", "Two days in Bern for 2."])
    with eventlog.open(path) as log:
        checkpointer = EventLogCheckpointer(log)
        assert checkpointer.load_latest("f").metadata["status_type"] == FinishedStatus.__name__
        with pytest.raises(IncompatibleComponentError, match="trip-flow"):
            start_conversation(build_flow(flow_id="another-flow"), conversation_id="f", checkpointer=checkpointer)


def test_storage_is_linear_in_the_conversation(tmp_path: Path) -> None:
    with eventlog.open(tmp_path / "log") as log:
        checkpointer = EventLogCheckpointer(log)
        turns = 30
        agent = build_agent([reply(f"answer number {n} " * 8) for n in range(turns)])
        conversation = start_conversation(agent, checkpointer=checkpointer, conversation_id="c")
        for n in range(turns):
            conversation.append_user_message(f"question number {n} " * 4)
            conversation.execute()
        snapshots = [e for e in log.read("c") if isinstance(e.event, Snapshot)]
        sizes = [len(log.codec.encode_event(e.event)) for e in snapshots]
        assert len(snapshots) == turns
        assert max(sizes[1:]) < 2 * min(sizes[1:])  # each snapshot holds its turn's change, not the conversation
        assert sum(isinstance(e.event, ConversationStarted) for e in log.read("c")) == 1  # the definition, once
        assert log.stats()["snapshots"] < turns  # materialized states are far fewer than checkpoints
        restored = start_conversation(build_agent([]), conversation_id="c", checkpointer=checkpointer)
        assert texts(restored) == texts(conversation)


def test_view_is_registered_and_shows_history(log: eventlog.EventLog) -> None:
    assert view_of("wayflow.started") is VIEW and view_of("turn.started") is None
    checkpointer = EventLogCheckpointer(log)
    conversation = start_conversation(
        build_agent([reply("hello"), reply("bye")]), messages="hi", checkpointer=checkpointer, conversation_id="c"
    )
    conversation.execute()
    conversation.append_user_message("bye")
    conversation.execute()
    columns, rows = VIEW.history(log, "c", None)
    assert list(columns) == ["checkpoint", "offset", "saved", "reason", "turn", "messages", "status"]
    assert [(r["turn"], r["messages"], r["reason"]) for r in rows] == [
        (1, 2, "conversation_turn"),
        (2, 4, "conversation_turn"),
    ]
    assert len(VIEW.history(log, "c", 1)[1]) == 1
    state = VIEW.state(log, "c", rows[0]["offset"])
    assert state["messages"] == [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    assert state["status"] == "UserMessageRequestStatus" and state["component_id"] == "trip-agent"


def test_manual_save_with_id_and_metadata(log: eventlog.EventLog) -> None:
    checkpointer = EventLogCheckpointer(log)
    conversation = start_conversation(
        build_agent([reply("hello")]), messages="hi", checkpointer=checkpointer, conversation_id="c"
    )
    saved = checkpointer.save(conversation, checkpoint_id="before-run", metadata={"note": "start"})
    assert (
        saved.metadata["save_reason"] == "manual"
        and saved.metadata["note"] == "start"
        and saved.offset == log.head("c")
    )
    with pytest.raises(WayflowCheckpointError, match="already"):
        checkpointer.save(conversation, checkpoint_id="before-run")
    conversation.execute()
    back = start_conversation(
        build_agent([]), conversation_id="c", checkpoint_id="before-run", checkpointer=checkpointer
    )
    assert texts(back) == ["hi"] and back.checkpoint_id == "before-run"


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.text(max_size=5)
    | st.sampled_from(["a" * 64, "b" * 70, "$text"]),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=3), children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(json_values, json_values)
def test_a_change_turns_the_old_value_into_the_new(old: Any, new: Any) -> None:
    """Exact, types included (True and 1 are equal in Python, not in a conversation); key order aside."""
    encode = msgspec.msgpack.Encoder(order="deterministic").encode
    delta = diff(old, new)
    assert encode(patch(copy.deepcopy(old), delta)) == encode(new)
    assert diff(new, copy.deepcopy(new)) is None
    texts = [t for t in _strings(new) if len(t) >= 64]
    referred, used = refer_texts(delta, texts)
    assert msgspec.msgpack.encode(resolve_texts(referred, texts) if used else referred) == msgspec.msgpack.encode(delta)


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    return []
