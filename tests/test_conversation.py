"""The conversation loop on a real LMDB directory: turns, LLM and tool events, checkpoint intervals, restore."""

from __future__ import annotations

import itertools
import re
import tempfile
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lives_support import right_after

import eventlog
from eventlog.agent.conversation import (
    DECLINED,
    Agent,
    Completion,
    ConversationError,
    ConversationPausedError,
    ConversationReducer,
    RestoreWithMessagesError,
    TurnFailedError,
)
from eventlog.events import (
    Interrupted,
    LLMCallCompleted,
    LLMCallFailed,
    LLMCallStarted,
    Message,
    ToolCall,
    ToolCallCompleted,
    ToolCallFailed,
    TurnCompleted,
    TurnFailed,
)

CheckpointPolicy = eventlog.CheckpointPolicy


def scripted(messages: list[Message]) -> Completion:
    """A deterministic LLM: `weather CITY` and `book N` ask for a tool; a tool result is summed up."""
    last = messages[-1]
    if last.role == "tool":
        return Completion(Message(role="assistant", content=f"done: {last.content}"), len(messages), 3)
    text = last.content
    call_id = f"call-{len(messages)}"
    if text.startswith("weather "):
        call = ToolCall(id=call_id, name="weather", arguments={"city": text.split()[1]})
        return Completion(Message(role="assistant", tool_calls=[call]), len(messages), 5)
    if text.startswith("book "):
        call = ToolCall(id=call_id, name="book", arguments={"people": int(text.split()[1])})
        return Completion(Message(role="assistant", tool_calls=[call]), len(messages), 5)
    if text.startswith("ask "):
        call = ToolCall(id=call_id, name=text.split()[1], arguments={})
        return Completion(Message(role="assistant", tool_calls=[call]), len(messages), 5)
    return Completion(Message(role="assistant", content=f"echo: {text}"), len(messages), 2)


booked: list[int] = []


def weather(city: str) -> dict[str, Any]:
    return {"city": city, "celsius": 18}


def book(people: int) -> str:
    booked.append(people)
    return f"table for {people}"


def broken() -> None:
    raise OSError("tool down")


def make_agent(policy: CheckpointPolicy | None = None, **kw: Any) -> Agent:
    tools = {"weather": weather, "book": book, "broken": broken}
    return Agent(kw.pop("llm", scripted), tools, model="scripted-1", policy=policy, **kw)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "log"


@pytest.fixture
def log(path: Path):
    with eventlog.open(path) as opened:
        yield opened


def kinds(log: eventlog.EventLog, run_id: str) -> list[str]:
    return [type(e.event).__name__ for e in log.read(run_id)]


def test_a_turn_with_a_tool_call(log: eventlog.EventLog) -> None:
    ticks = itertools.count()
    agent = make_agent(clock=lambda: next(ticks) * 0.25)
    chat = agent.start_conversation(log, "chat")
    reply = chat.send("weather Paris")
    assert reply.status == "answered" and reply.turn == 1
    assert reply.message == Message(role="assistant", content='done: {"celsius":18,"city":"Paris"}')
    assert kinds(log, "chat") == [
        "TurnStarted",
        "UserMessage",
        "LLMCallStarted",
        "LLMCallCompleted",
        "ToolCallStarted",
        "ToolCallCompleted",
        "LLMCallStarted",
        "LLMCallCompleted",
        "TurnCompleted",
    ]
    events = [e.event for e in log.read("chat")]
    starts = [e for e in events if isinstance(e, LLMCallStarted)]
    assert [s.context_messages for s in starts] == [1, 3]  # a count of the run's messages, not the messages
    assert all(s.messages == [] and s.model == "scripted-1" for s in starts)
    done = [e for e in events if isinstance(e, LLMCallCompleted)]
    assert [(d.call_id, d.input_tokens, d.output_tokens, d.latency_ms) for d in done] == [
        (starts[0].call_id, 1, 5, 250.0),
        (starts[1].call_id, 3, 3, 250.0),
    ]
    tool = next(e for e in events if isinstance(e, ToolCallCompleted))
    assert (tool.call_id, tool.tool, tool.output, tool.latency_ms) == ("call-1", "weather", weather("Paris"), 250.0)
    state = chat.state
    assert (state.turn, state.llm_calls, state.tool_calls, state.input_tokens, state.output_tokens) == (1, 2, 1, 4, 8)
    assert [m.role for m in chat.messages] == ["user", "assistant", "tool", "assistant"]


def test_storage_stays_linear_in_the_conversation(log: eventlog.EventLog) -> None:
    chat = make_agent(CheckpointPolicy.never()).start_conversation(log, "long")
    sizes = []
    for i in range(40):
        before = log.head("long")
        chat.send(f"message number {i:04d}")
        sizes.append(sum(len(msgspec.msgpack.encode(e.event)) for e in log.read("long", after=before)))
    assert len(chat.messages) == 80
    assert max(sizes) == min(sizes)  # turn 40 stores no more than turn 1: the history is not stored again


# WayFlow's intervals, counted per policy on the same two turns: one with a tool call (two LLM
# calls, one tool call), one without (one LLM call).
@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (CheckpointPolicy.conversation_turns(), [(9, "conversation_turn"), (14, "conversation_turn")]),
        (
            CheckpointPolicy.llm_turns_only(),
            [(4, "internal_turn_boundary"), (9, "conversation_turn"), (14, "conversation_turn")],
        ),
        (
            CheckpointPolicy.all_internal_turns(),
            [
                (4, "internal_turn_boundary"),
                (6, "internal_turn_boundary"),
                (9, "conversation_turn"),
                (14, "conversation_turn"),
            ],
        ),
    ],
    ids=["conversation_turns", "llm_turns", "all_internal_turns"],
)
def test_checkpoint_counts_per_interval(log: eventlog.EventLog, policy: CheckpointPolicy, expected) -> None:
    chat = make_agent(policy).start_conversation(log, "chat")
    chat.send("weather Oslo")
    chat.send("thanks")
    cps = log.checkpoints.list("chat")
    assert [(cp.offset, cp.metadata["save_reason"]) for cp in cps] == expected
    assert cps[-1].state.turn == 2 and len(cps[-1].state.messages) == 6


def test_default_interval_is_one_checkpoint_per_turn(log: eventlog.EventLog) -> None:
    chat = make_agent().start_conversation(log, "chat")
    for i in range(3):
        chat.send(f"hello {i}")
        assert len(log.checkpoints.list("chat")) == i + 1


@pytest.mark.parametrize(
    "policy",
    [CheckpointPolicy.conversation_turns(), CheckpointPolicy.llm_turns_only(), CheckpointPolicy.all_internal_turns()],
    ids=["conversation_turns", "llm_turns", "all_internal_turns"],
)
def test_a_failed_turn_writes_no_final_checkpoint(log: eventlog.EventLog, policy: CheckpointPolicy) -> None:
    chat = make_agent(policy).start_conversation(log, "chat")
    with pytest.raises(TurnFailedError) as info:
        chat.send("ask broken")
    err = info.value
    assert isinstance(err.__cause__, OSError) and err.turn == 1 and f"offset {err.offset}" in str(err)
    assert kinds(log, "chat")[-2:] == ["ToolCallFailed", "TurnFailed"]
    failed_at = log.head("chat")
    cps = log.checkpoints.list("chat")
    assert all(cp.offset < failed_at and cp.metadata["save_reason"] != "conversation_turn" for cp in cps)
    if policy == CheckpointPolicy.conversation_turns():
        assert cps == []
    # the next turn starts afresh
    assert chat.send("hello").status == "answered"
    assert chat.turn == 2


def test_failed_llm_call(log: eventlog.EventLog) -> None:
    def down(messages: list[Message]) -> Message:
        raise TimeoutError("no answer")

    chat = make_agent(llm=down).start_conversation(log, "chat")
    with pytest.raises(TurnFailedError, match="TimeoutError: no answer"):
        chat.send("hi")
    events = [e.event for e in log.read("chat")]
    assert isinstance(events[-2], LLMCallFailed) and isinstance(events[-1], TurnFailed)
    assert log.checkpoints.list("chat") == []
    assert chat.state.last_error == "TimeoutError: no answer"


def test_unknown_tool_and_too_many_calls(log: eventlog.EventLog) -> None:
    chat = make_agent().start_conversation(log, "chat")
    with pytest.raises(TurnFailedError, match="no tool named 'nope'"):
        chat.send("ask nope")
    assert isinstance(list(log.read("chat"))[-2].event, ToolCallFailed)

    def loops(messages: list[Message]) -> Message:
        return Message(
            role="assistant", tool_calls=[ToolCall(id=f"c{len(messages)}", name="weather", arguments={"city": "X"})]
        )

    chat2 = make_agent(llm=loops, max_llm_calls_per_turn=3).start_conversation(log, "loop")
    with pytest.raises(TurnFailedError, match="more than 3 LLM calls"):
        chat2.send("go")


def test_restart_resumes_the_latest(path: Path) -> None:
    agent = make_agent()
    with eventlog.open(path) as log:
        chat = agent.start_conversation(log, "chat")
        chat.send("weather Lima")
        chat.send("thanks")
        messages, head = chat.messages, log.head("chat")
    with eventlog.open(path) as log:  # a new log object on the same directory: a restart
        chat = agent.start_conversation(log, "chat")
        assert chat.messages == messages and chat.offset == head and chat.turn == 2 and not chat.turn_open
        latest = log.checkpoints.load_latest("chat")
        assert latest is not None and latest.offset == head and latest.state.messages == messages
        reply = chat.send("bye")
        assert reply.turn == 3 and reply.message.content == "echo: bye"
        start = next(e.event for e in log.read("chat", after=head) if isinstance(e.event, LLMCallStarted))
        assert start.context_messages == len(messages) + 1


def test_rewind_to_previous_checkpoint_forks(log: eventlog.EventLog) -> None:
    agent = make_agent()
    chat = agent.start_conversation(log, "chat")
    chat.send("weather Rome")
    chat.send("thanks")
    original_head, original_messages = log.head("chat"), chat.messages
    cps = log.checkpoints.list("chat")
    previous = cps[-2]
    rewound = agent.start_conversation(log, "chat", checkpoint_id=previous.checkpoint_id, new_conversation_id="chat-b")
    assert rewound.conversation_id == "chat-b" and rewound.restored_from.checkpoint_id == previous.checkpoint_id
    assert rewound.messages == original_messages[:4] and rewound.turn == 1
    reply = rewound.send("weather Oslo")
    assert reply.turn == 2 and "Oslo" in reply.message.content
    # the original stays as it was, listed beside the fork
    assert set(log.runs()) >= {"chat", "chat-b"}
    assert log.head("chat") == original_head and log.state_at("chat").messages == original_messages
    assert [cp.checkpoint_id for cp in log.checkpoints.list("chat")] == [cp.checkpoint_id for cp in cps]
    assert log.run_info("chat-b").parent == "chat" and log.run_info("chat-b").fork_offset == previous.offset


def test_restore_keeps_the_id_and_can_be_repeated(log: eventlog.EventLog) -> None:
    agent = make_agent()
    chat = agent.start_conversation(log, "chat")
    chat.send("weather Rome")
    chat.send("thanks")
    old_head, old_messages = log.head("chat"), chat.messages
    previous, replaced = chat.checkpoints()[-2:]

    restored = agent.start_conversation(log, "chat", checkpoint_id=previous.checkpoint_id)
    assert restored.conversation_id == "chat" and restored.restored_from.checkpoint_id == previous.checkpoint_id
    assert restored.messages == old_messages[:4] and restored.turn == 1 and not restored.turn_open
    assert restored.branches == [
        {"checkpoint_id": previous.checkpoint_id, "offset": previous.offset, "head": old_head, "branch": "chat~1"}
    ]
    assert (log.run_info("chat~1").parent, log.run_info("chat~1").fork_offset) == ("chat", old_head)
    assert log.state_at("chat~1").messages == old_messages  # the replaced future, kept
    assert [cp.checkpoint_id for cp in restored.checkpoints()] == [previous.checkpoint_id]
    assert log.state_at("chat", reducer=ConversationReducer()).messages == old_messages[:4]

    head = log.head("chat")  # restoring the same checkpoint again writes nothing
    again = agent.start_conversation(log, "chat", checkpoint_id=previous.checkpoint_id)
    assert log.head("chat") == head and again.messages == restored.messages and len(again.branches) == 1
    with pytest.raises(ConversationError, match="kept on branch 'chat~1'"):
        agent.start_conversation(log, "chat", checkpoint_id=replaced.checkpoint_id)

    reply = again.send("weather Oslo")
    assert reply.turn == 2 and "Oslo" in reply.message.content
    first_cp, _ = again.checkpoints()
    assert first_cp.checkpoint_id == previous.checkpoint_id
    third = agent.start_conversation(log, "chat", checkpoint_id=previous.checkpoint_id)  # after progress: a 2nd branch
    assert [b["branch"] for b in third.branches] == ["chat~1", "chat~2"] and third.messages == old_messages[:4]
    assert log.verify(reducer=ConversationReducer()).ok


def test_execute_after_a_turn_end_restore_returns_the_status(log: eventlog.EventLog) -> None:
    agent = make_agent()
    agent.start_conversation(log, "chat").send("weather Lima")
    cp = log.checkpoints.load_latest("chat")
    restored = agent.start_conversation(log, "chat", checkpoint_id=cp.checkpoint_id)
    head = log.head("chat")
    result = restored.execute()
    assert result.status == "answered" and result.turn == 1 and "Lima" in result.message.content
    assert log.head("chat") == head  # nothing was written
    with pytest.raises(ConversationError, match="no turn yet"):
        agent.start_conversation(log, "empty").execute()


def test_metadata_on_automatic_checkpoints(log: eventlog.EventLog) -> None:
    agent = make_agent(CheckpointPolicy.all_internal_turns(), confirm={"book"})
    chat = agent.start_conversation(log, "chat")
    chat.send("weather Quito", metadata={"user": "ada", "turn": "ignored"})
    assert all(cp.metadata["user"] == "ada" for cp in chat.checkpoints())
    assert [cp.metadata["turn"] for cp in chat.checkpoints()] == [1] * len(chat.checkpoints())
    assert chat.send("book 2", metadata={"user": "bob"}).status == "paused"
    assert log.checkpoints.load_latest("chat").metadata == {"user": "bob", "save_reason": "interrupt", "turn": 2}
    chat.resume(True, metadata={"approved_by": "cy"})
    assert log.checkpoints.load_latest("chat").metadata["approved_by"] == "cy"


def test_restore_with_new_messages_is_refused(log: eventlog.EventLog) -> None:
    agent = make_agent()
    agent.start_conversation(log, "chat").send("hi")
    cp = log.checkpoints.load_latest("chat")
    runs = log.runs()
    with pytest.raises(RestoreWithMessagesError, match="cannot restore checkpoint .* and pass new messages") as info:
        agent.start_conversation(log, "chat", checkpoint_id=cp.checkpoint_id, messages=["again"])
    assert isinstance(info.value, ValueError) and isinstance(info.value, eventlog.EventLogError)
    assert log.runs() == runs  # nothing was written
    with pytest.raises(ConversationError, match="needs checkpoint_id"):
        agent.start_conversation(log, "chat", new_conversation_id="x")


def test_messages_open_the_next_turn(log: eventlog.EventLog) -> None:
    chat = make_agent().start_conversation(log, "chat", messages="first")
    assert log.head("chat") == 0  # queued, not yet run
    assert chat.execute().message.content == "echo: first"
    head = log.head("chat")
    assert chat.execute().message.content == "echo: first" and log.head("chat") == head  # nothing pending: a no-op


def test_human_approval_pause_and_resume(path: Path) -> None:
    booked.clear()
    agent = make_agent(confirm={"book"})
    with eventlog.open(path) as log:
        chat = agent.start_conversation(log, "chat")
        result = chat.send("book 4")
        assert result.status == "paused" and chat.paused and booked == []
        assert result.interrupt == {
            "reason": "approve book",
            "payload": {"call_id": "call-1", "tool": "book", "arguments": {"people": 4}},
        }
        latest = log.checkpoints.load_latest("chat")
        assert latest.offset == log.head("chat") and latest.summary["paused_nodes"] == ["call-1"]
        with pytest.raises(ConversationPausedError, match="resume"):
            chat.send("hello?")
    with eventlog.open(path) as log:  # the human answers after a restart
        chat = agent.start_conversation(log, "chat")
        assert chat.paused
        reply = chat.resume(True)
        assert reply.status == "answered" and reply.message.content == "done: table for 4"
        assert booked == [4]
        assert kinds(log, "chat")[4:8] == ["Interrupted", "Resumed", "ToolCallStarted", "ToolCallCompleted"]
        assert chat.state.resume_value is True
        with pytest.raises(ConversationError, match="not paused"):
            chat.resume(True)
        # declined: the tool does not run and the LLM reads that it was declined
        assert chat.send("book 2").status == "paused"
        reply = chat.resume(False)
        assert booked == [4] and reply.message.content == f"done: {DECLINED}"


def test_a_turn_left_open_by_a_crash_is_finished(path: Path) -> None:
    class Crash(BaseException):
        pass

    def crashing(city: str) -> dict[str, Any]:
        raise Crash

    with eventlog.open(path) as log:
        chat = Agent(scripted, {"weather": crashing}).start_conversation(log, "chat")
        with pytest.raises(Crash):
            chat.send("weather Kyiv")
        assert kinds(log, "chat")[-1] == "ToolCallStarted"
    with eventlog.open(path) as log:
        chat = Agent(scripted, {"weather": weather}).start_conversation(log, "chat")
        assert chat.turn_open
        with pytest.raises(ConversationError, match="still open"):
            chat.send("another")
        reply = chat.execute()
        assert reply.turn == 1 and "Kyiv" in reply.message.content
        assert kinds(log, "chat").count("ToolCallStarted") == 1  # the started call is completed, not started again
        assert not chat.turn_open


def test_conversation_guide_runs(capsys: pytest.CaptureFixture[str]) -> None:
    text = (Path(__file__).parent.parent / "docs" / "guides" / "conversation.md").read_text()
    blocks = re.findall(r"^```python\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE)
    assert len(blocks) >= 5
    namespace: dict[str, Any] = {"__name__": "guide_conversation"}
    for i, block in enumerate(blocks):
        exec(compile(block, f"conversation.md block {i + 1}", "exec"), namespace)
    out = capsys.readouterr().out
    assert "It is 18°C and sunny in Paris." in out
    assert "Refused: conversation 'chat-demo': cannot restore checkpoint" in out


def test_rewind_to_an_internal_checkpoint_finishes_that_turn(log: eventlog.EventLog) -> None:
    agent = make_agent(CheckpointPolicy.all_internal_turns())
    chat = agent.start_conversation(log, "chat")
    chat.send("weather Quito")
    first = log.checkpoints.list("chat")[0]  # after the LLM asked for the tool, before the tool ran
    assert first.offset == 4
    branch = agent.start_conversation(log, "chat", checkpoint_id=first.checkpoint_id, new_conversation_id="mid")
    assert branch.turn_open and branch.turn == 1
    reply = branch.execute()
    assert reply.status == "answered" and "Quito" in reply.message.content
    assert log.state_at("mid").messages == log.state_at("chat").messages


POLICIES = {
    "conversation_turns": CheckpointPolicy.conversation_turns(),
    "llm_turns": CheckpointPolicy.llm_turns_only(),
    "all_internal_turns": CheckpointPolicy.all_internal_turns(),
}


@settings(max_examples=20, deadline=None)
@given(
    policy=st.sampled_from(sorted(POLICIES)),
    script=st.lists(
        st.sampled_from(["weather Paris", "hello", "book 3", "ask broken"]) | st.booleans(), min_size=1, max_size=8
    ),
)
def test_property_checkpoint_counts_follow_the_interval(policy: str, script: list[Any]) -> None:
    """Per turn: conversation_turns 1, llm_turns one per LLM answer, all_internal_turns one per
    LLM answer and tool call; a pause adds one; a failed turn adds no final one."""
    with tempfile.TemporaryDirectory() as d, eventlog.open(Path(d) / "log", durability="none") as log:
        chat = make_agent(POLICIES[policy], confirm={"book"}).start_conversation(log, "c")
        for step in ["hello", *script]:
            try:
                if isinstance(step, bool):
                    if chat.paused:
                        chat.resume(step)
                elif not chat.paused:
                    chat.send(step)
            except TurnFailedError:
                pass
        events = [e.event for e in log.read("c")]
        completed_turns = sum(isinstance(e, TurnCompleted) for e in events)
        llm_answers = sum(isinstance(e, LLMCallCompleted) for e in events)
        tool_results = sum(isinstance(e, ToolCallCompleted) for e in events)
        pauses = sum(isinstance(e, Interrupted) for e in events)
        expected = {
            "conversation_turns": completed_turns,
            "llm_turns": llm_answers,
            "all_internal_turns": llm_answers + tool_results,
        }[policy] + pauses
        cps = log.checkpoints.list("c")
        assert len(cps) == expected
        failed = [e.offset for e in log.read("c") if isinstance(e.event, TurnFailed)]
        assert not {cp.offset for cp in cps} & set(failed)
        for cp in cps[-3:]:
            assert cp.state == log.state_at("c", cp.offset)


def test_a_tool_output_that_cannot_be_stored_fails_the_turn(log: eventlog.EventLog) -> None:
    chat = Agent(scripted, {"weather": lambda city: object()}).start_conversation(log, "chat")
    with pytest.raises(TurnFailedError) as info:
        chat.send("weather Lima")
    assert isinstance(info.value.__cause__, TypeError | eventlog.errors.InvalidEventError)
    assert kinds(log, "chat")[-3:] == ["ToolCallStarted", "ToolCallFailed", "TurnFailed"]
    assert chat.send("hello").message.content == "echo: hello"


def test_a_rewind_into_a_new_conversation_writes_only_to_the_fork_it_made(log: eventlog.EventLog) -> None:
    """Another writer deletes the conversation a rewind (`new_conversation_id`) just forked and
    makes it again to the same head (a fork of its own conversation) before the rewind reads it
    back: the rewind raises RunReplacedError and that writer's conversation holds only its own
    events. Before, the conversation was read back by id and its turns were written into the
    other writer's conversation."""
    agent = make_agent()
    for conversation_id, city in (("chat", "Rome"), ("other", "Oslo")):
        chat = agent.start_conversation(log, conversation_id)
        chat.send(f"weather {city}")
        chat.send("thanks")
    previous = log.checkpoints.list("chat")[-2]

    def made_again() -> None:  # by another writer, to the head the fork left
        log.delete_run("chat-b")
        log.fork("other", previous.offset, "chat-b")

    right_after(log._maintenance, "fork", made_again)
    with pytest.raises(eventlog.errors.RunReplacedError):
        rewound = agent.start_conversation(
            log, "chat", checkpoint_id=previous.checkpoint_id, new_conversation_id="chat-b"
        )
        rewound.send("weather Lima")
    info = log.run_info("chat-b")  # the other writer's fork, as it left it
    assert (info.parent, info.head) == ("other", previous.offset)
    assert "Oslo" in log.state_at("chat-b").messages[-1].content
