"""eventlog.wayflow against the semantics of WayFlow's Checkpointing API: a restore is read-only
until the restored conversation writes, internal checkpoints are taken when an iteration starts
(with WayFlow's metadata), and the checkpointer's wider surface (save of a conversation or of a
checkpoint's portable state, save_conversation, save_async, list's limit of 50, delete).

Offline, with scripted LLMs (tests/wayflow_app.py), on every store; restarts in a fresh process.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
import warnings
from collections import Counter
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("wayflowcore", reason="the wayflow extra is not installed")

from test_wayflow_kinds import DURABLE, ROOT, in_new_process
from wayflow_app import ScriptedLlm, build_agent, build_flow, build_nested, reply
from wayflowcore.controlconnection import ControlFlowEdge
from wayflowcore.events.eventlistener import register_event_listeners
from wayflowcore.executors.executionstatus import FinishedStatus, UserMessageRequestStatus
from wayflowcore.flow import Flow
from wayflowcore.steps import InputMessageStep, OutputMessageStep, PromptExecutionStep

import eventlog
from eventlog.wayflow import (
    CheckpointingInterval,
    ConversationCheckpoint,
    EventLogCheckpointer,
    IncompatibleComponentError,
    WayflowCheckpointError,
    WayflowReducer,
    start_conversation,
)

ALL = CheckpointingInterval.ALL_INTERNAL_TURNS
STARTED = {"AgentExecutionIterationStartedEvent", "FlowExecutionIterationStartedEvent"}


def texts(conversation: Any) -> list[str]:
    return [m.content for m in conversation.get_messages()]


def hello_flow() -> Flow:
    """Three messages, then a question: the shape of the flow WayFlow's own serialization tests use."""
    a, b, c = (OutputMessageStep(message_template=t, name=n) for t, n in (("Hello!", "a"), ("How", "b"), ("are", "c")))
    d = InputMessageStep(message_template="you?", name="d")
    edges = [ControlFlowEdge(a, b), ControlFlowEdge(b, c), ControlFlowEdge(c, d), ControlFlowEdge(d, None)]
    return Flow(
        begin_step=a, steps={"a": a, "b": b, "c": c, "d": d}, control_flow_edges=edges, id="hello", name="hello"
    )


def one_step(step: Any, flow_id: str = "one-step") -> Flow:
    return Flow(begin_step=step, steps={step.name: step}, control_flow_edges=[ControlFlowEdge(step, None)], id=flow_id)


# -- item: internal checkpoints when an iteration starts --------------------------------------------

# Each case: a component, the user's answers after the first turn, and the checkpoints WayFlow's
# rule gives with ALL_INTERNAL_TURNS: one per agent or flow iteration *started* (at any nesting
# level, the pause's iteration included) plus one per turn. Saving when an iteration *finished*
# gave fewer, since the iteration a turn pauses in never finishes: 8, 7 and 5.
PAUSING = {
    "input steps": (lambda: build_flow([reply("A plan.")]), ["Bern", "2"], 10),
    "hello flow": (hello_flow, ["fine"], 8),
    "agent step": (lambda: build_nested("agent_step", [], [reply("Which dates?"), reply("How many?")]), ["May"], 7),
}


@pytest.mark.parametrize("case", sorted(PAUSING))
def test_internal_checkpoints_are_taken_when_an_iteration_starts(log: eventlog.EventLog, case: str) -> None:
    build, answers, expected = PAUSING[case]
    checkpointer = EventLogCheckpointer(log, interval=ALL)
    conversation = start_conversation(build(), checkpointer=checkpointer, conversation_id="c")
    started: Counter[str] = Counter()

    def count(event: Any) -> None:
        started[type(event).__name__] += type(event).__name__ in STARTED

    with warnings.catch_warnings(), register_event_listeners([count]):  # type: ignore[list-item]
        warnings.simplefilter("ignore")
        statuses = [conversation.execute()]
        for answer in answers:
            conversation.append_user_message(answer)
            statuses.append(conversation.execute())
    assert all(isinstance(s, UserMessageRequestStatus | FinishedStatus) for s in statuses)
    saved = checkpointer.list_checkpoints("c", limit=None)
    assert len(saved) == sum(started.values()) + len(statuses) == expected
    internal = [cp.metadata for cp in saved if cp.metadata["save_reason"] == "internal_turn_boundary"]
    assert len(internal) == sum(started.values())
    assert [md["save_sequence"] for md in (cp.metadata for cp in saved)] == list(range(1, expected + 1))
    for md in internal:
        assert md["event_type"] in STARTED and md["llm_used_in_previous_turn"] in (True, False)
        if md["event_type"] == "FlowExecutionIterationStartedEvent":
            assert isinstance(md["flow_step_name"], str) and md["nesting_level"] == 0
        else:
            assert isinstance(md["agent_iteration"], int)
    # a restore from the last internal checkpoint of the first turn pauses where that turn paused
    turn_ends = [i for i, cp in enumerate(saved) if cp.metadata["save_reason"] == "conversation_turn"]
    before_end = saved[turn_ends[0] - 1]
    back = start_conversation(
        build(), conversation_id="c", checkpoint_id=before_end.checkpoint_id, checkpointer=checkpointer
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert type(back.execute()).__name__ == type(statuses[0]).__name__
    assert log.verify(reducer=WayflowReducer()).ok


@pytest.mark.parametrize(
    ("interval", "llm", "reasons", "events"),
    [
        (CheckpointingInterval.CONVERSATION_TURNS, False, ["conversation_turn"], []),
        (
            CheckpointingInterval.ALL_INTERNAL_TURNS,
            False,
            ["internal_turn_boundary", "internal_turn_boundary", "conversation_turn"],
            ["FlowExecutionIterationStartedEvent"] * 2,
        ),
        (
            CheckpointingInterval.LLM_TURNS,
            True,
            ["internal_turn_boundary", "conversation_turn"],
            ["FlowExecutionIterationStartedEvent"],
        ),
    ],
)
def test_a_single_step_flow_checkpoints_as_in_wayflow(
    log: eventlog.EventLog, interval: CheckpointingInterval, llm: bool, reasons: list[str], events: list[str]
) -> None:
    """The counts WayFlow's own tests give for a flow of one step: an output step, or a prompt step
    whose LLM answers (LLM_TURNS saves for it once the turn ends, before the turn's checkpoint)."""
    if llm:
        step: Any = PromptExecutionStep(llm=ScriptedLlm([reply("Hello.")], id="llm"), prompt_template="Hi", name="p")
    else:
        step = OutputMessageStep(message_template="Hello.", name="out")
    conversation = start_conversation(one_step(step), checkpointer=EventLogCheckpointer(log, interval=interval))
    assert isinstance(conversation.execute(), FinishedStatus)
    saved = conversation.checkpoints()
    assert [cp.metadata["save_reason"] for cp in saved] == reasons
    assert [cp.metadata["event_type"] for cp in saved[:-1]] == events
    assert saved[-1].metadata["status_type"] == "FinishedStatus"
    if llm:
        assert saved[0].metadata["llm_used_in_previous_turn"] is True


# -- item: a restore is read-only until the restored conversation writes ------------------------------


@DURABLE
def test_looking_at_an_old_checkpoint_in_a_new_process_writes_nothing(open_log: Any, backend: str) -> None:
    log = open_log()
    checkpointer = EventLogCheckpointer(log)
    conversation = start_conversation(
        build_agent([reply("Bern is lovely."), reply("Two rooms.")]), messages="Bern?", checkpointer=checkpointer,
        conversation_id="c",
    )  # fmt: skip
    conversation.execute()
    conversation.append_user_message("For two?")
    conversation.execute()
    first, latest = checkpointer.list_checkpoints("c")
    head, runs = log.head("c"), log.runs()
    out = in_new_process(
        log,
        f"""
        from eventlog.wayflow import EventLogCheckpointer, start_conversation
        from wayflow_app import build_agent, reply
        with OPEN() as log:
            checkpointer = EventLogCheckpointer(log)
            looked = start_conversation(build_agent([]), conversation_id="c", checkpoint_id={first.checkpoint_id!r},
                                        checkpointer=checkpointer)
            print([m.content for m in looked.get_messages()])
            print(log.head("c"), sorted(log.runs()), checkpointer.branches("c"), checkpointer.load_latest("c").checkpoint_id)
            # a second look, then a turn: the turn's first write keeps the replaced future as a branch
            again = start_conversation(build_agent([reply("Rome is warm.")]), conversation_id="c",
                                       checkpoint_id={first.checkpoint_id!r}, checkpointer=checkpointer)
            again.append_user_message("Rome?")
            print(again.execute().message.content)
        """,
    )
    assert out.splitlines() == [
        "['Bern?', 'Bern is lovely.']",
        f"{head} {sorted(runs)} [] {latest.checkpoint_id}",
        "Rome is warm.",
    ]
    log = open_log()
    checkpointer = EventLogCheckpointer(log)
    [branch] = checkpointer.branches("c")
    assert (branch.branch_id, branch.checkpoint_id, branch.head) == ("c~1", first.checkpoint_id, head)
    assert [cp.checkpoint_id for cp in checkpointer.list_checkpoints("c~1")] == [
        first.checkpoint_id,
        latest.checkpoint_id,
    ]
    assert [m.content for m in start_conversation(build_agent([]), conversation_id="c", checkpointer=checkpointer)
            .get_messages()] == ["Bern?", "Bern is lovely.", "Rome?", "Rome is warm."]  # fmt: skip


def test_a_manual_save_after_a_restore_makes_the_branch(log: eventlog.EventLog) -> None:
    checkpointer = EventLogCheckpointer(log)
    conversation = start_conversation(
        build_agent([reply("one"), reply("two")]), messages="1", checkpointer=checkpointer, conversation_id="c"
    )
    conversation.execute()
    conversation.append_user_message("2")
    conversation.execute()
    first, second = checkpointer.list_checkpoints("c")
    looked = start_conversation(build_agent([]), conversation_id="c", checkpoint_id=first.checkpoint_id,
                                checkpointer=checkpointer)  # fmt: skip
    assert checkpointer.branches("c") == [] and checkpointer.load_latest("c") == second
    saved = checkpointer.save(looked, checkpoint_id="kept", metadata={"why": "a look"})
    assert [b.checkpoint_id for b in checkpointer.branches("c")] == [first.checkpoint_id]
    assert checkpointer.load_latest("c") == saved and saved.metadata["why"] == "a look"
    assert [cp.checkpoint_id for cp in checkpointer.list_checkpoints("c")] == [first.checkpoint_id, "kept"]

    # the checkpoint the restore moved to the branch can be deleted, through either id
    checkpointer.delete("c", second.checkpoint_id)
    assert [cp.checkpoint_id for cp in checkpointer.list_checkpoints("c~1")] == [first.checkpoint_id]
    assert checkpointer.load_latest("c") == saved
    with pytest.raises(eventlog.errors.CheckpointNotFoundError):
        checkpointer.delete("c~1", second.checkpoint_id)
    # an id the conversation sees on its branch is taken
    with pytest.raises(WayflowCheckpointError, match="already"):
        checkpointer.save(looked, checkpoint_id=first.checkpoint_id)


# -- item: the checkpointer's surface ---------------------------------------------------------------


def test_save_of_a_wayflowcore_conversation_with_id_component_and_metadata(log: eventlog.EventLog) -> None:
    checkpointer = EventLogCheckpointer(log)
    agent = build_agent([reply("hello"), reply("again")])
    plain = agent.start_conversation(messages="hi")  # not made by start_conversation: saved under its id
    plain.execute()
    saved = checkpointer.save(plain, checkpoint_id="first", component_id="trip-agent", metadata={"note": "n"})
    assert (saved.checkpoint_id, saved.conversation_id, saved.component_id) == ("first", plain.id, "trip-agent")
    assert saved.metadata["note"] == "n" and saved.metadata["save_reason"] == "manual"
    with pytest.raises(IncompatibleComponentError):
        checkpointer.save_conversation(plain, component_id="another")
    plain.append_user_message("more")
    second = asyncio.run(checkpointer.save_async(plain, metadata={"async": True}))
    assert second.metadata["async"] is True and second.metadata["save_sequence"] == 2
    restored = start_conversation(build_agent([]), conversation_id=plain.id, checkpointer=checkpointer)
    assert texts(restored) == ["hi", "hello", "more"]
    restored = start_conversation(build_agent([]), conversation_id=plain.id, checkpoint_id="first",
                                  checkpointer=checkpointer)  # fmt: skip
    assert texts(restored) == ["hi", "hello"]


def test_list_checkpoints_gives_the_newest_50_unless_told(log: eventlog.EventLog) -> None:
    checkpointer = EventLogCheckpointer(log)
    conversation = start_conversation(build_agent([]), messages="hi", checkpointer=checkpointer, conversation_id="c")
    ids = [checkpointer.save(conversation, checkpoint_id=f"cp{i:02}").checkpoint_id for i in range(53)]
    assert [cp.checkpoint_id for cp in checkpointer.list_checkpoints("c")] == ids[-50:]
    assert [cp.checkpoint_id for cp in checkpointer.list_checkpoints("c", limit=None)] == ids
    assert [cp.checkpoint_id for cp in checkpointer.list_checkpoints("c", limit=2)] == ids[-2:]
    assert [cp.metadata["save_sequence"] for cp in checkpointer.list_checkpoints("c", limit=3)] == [51, 52, 53]


@DURABLE
def test_a_checkpoint_moves_to_another_log_by_its_state(open_log: Any, backend: str, tmp_path: Any) -> None:
    log = open_log()
    checkpointer = EventLogCheckpointer(log)
    conversation = start_conversation(
        build_agent([reply("Bern is lovely."), reply("Two rooms.")]), messages="Bern?", checkpointer=checkpointer,
        conversation_id="c",
    )  # fmt: skip
    conversation.execute()
    conversation.append_user_message("For two?")
    conversation.execute()
    first, latest = checkpointer.list_checkpoints("c")
    envelope = json.loads(first.state)
    assert envelope["checkpoint_format"] == "eventlog.wayflow.conversation" and envelope["component_id"] == "trip-agent"

    with eventlog.open(tmp_path / "elsewhere") as other_log:
        other = EventLogCheckpointer(other_log)
        for cp in (first, latest):  # the states only: nothing else of the first log is read
            moved = ConversationCheckpoint(
                cp.checkpoint_id, cp.conversation_id, cp.component_id, cp.created_at, state=cp.state,
                metadata=cp.metadata,
            )  # fmt: skip
            other.save(moved)
        assert [cp.checkpoint_id for cp in other.list_checkpoints("c")] == [first.checkpoint_id, latest.checkpoint_id]
        assert other.list_checkpoints("c")[0].metadata == first.metadata
        assert [cp.state for cp in other.list_checkpoints("c")] == [first.state, latest.state]  # exactly
        with pytest.raises(WayflowCheckpointError, match="already"):
            other.save(first)
        # a checkpoint of a component of another shape is refused, with nothing written
        head = other_log.head("c")
        stranger = start_conversation(build_agent([reply("x")], tools=[]), messages="x", checkpointer=EventLogCheckpointer(
            eventlog.open(":memory:")), conversation_id="c")  # fmt: skip
        stranger.execute()
        with pytest.raises(IncompatibleComponentError):
            other.save(stranger.checkpoints()[0])
        # a state that names a type a restore does not build is refused before it is written
        bad = json.loads(first.state)
        conversation = msgspec.msgpack.decode(base64.b64decode(bad["conversation"]))
        conversation["message_list"] = {"_component_type": "OpenAIModel", "model_id": "x"}
        bad["conversation"] = base64.b64encode(msgspec.msgpack.encode(conversation)).decode()
        forged = ConversationCheckpoint("forged", "c", "trip-agent", 0, state=json.dumps(bad))
        with pytest.raises(WayflowCheckpointError, match="OpenAIModel"):
            other.save(forged)
        for text in (
            "not json",
            json.dumps({**envelope, "version": 9}),
            "checkpoint_format: wayflow-conversation-checkpoint",
        ):
            with pytest.raises(WayflowCheckpointError):
                other.save(ConversationCheckpoint("x", "c", "trip-agent", 0, state=text))
        assert other_log.head("c") == head
        # the moved conversation is restored and continued in the other log
        back = start_conversation(build_agent([reply("Rome is warm.")]), conversation_id="c",
                                  checkpoint_id=first.checkpoint_id, checkpointer=other)  # fmt: skip
        assert texts(back) == ["Bern?", "Bern is lovely."]
        back.append_user_message("Rome?")
        assert back.execute().message.content == "Rome is warm."
        assert other_log.verify(reducer=WayflowReducer()).ok


def test_save_refuses_what_it_cannot_save(log: eventlog.EventLog) -> None:
    checkpointer = EventLogCheckpointer(log)
    with pytest.raises(TypeError):
        checkpointer.save("a conversation")  # type: ignore[arg-type]
    with pytest.raises(WayflowCheckpointError, match="no state"):
        checkpointer.save(ConversationCheckpoint("x", "c", "trip-agent", 0))
    assert list(log.runs()) == []


# -- item: WayFlow's own Checkpointing API (tests/test_wayflow_native.py) ---------------------------


def test_the_wayflow_tests_pass_against_a_wayflow_checkout() -> None:
    """Every test of eventlog.wayflow against a wayflowcore that ships `wayflowcore.checkpointing`:
    the native path (tests/test_wayflow_native.py) and the 26.3 path beside it, none skipped."""
    checkout = os.environ.get("EVENTLOG_TEST_WAYFLOW_PR")
    if not checkout:
        pytest.skip("set EVENTLOG_TEST_WAYFLOW_PR to a wayflowcore source tree that ships wayflowcore.checkpointing")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([checkout, str(ROOT), str(ROOT / "tests")])}
    del env["EVENTLOG_TEST_WAYFLOW_PR"]
    files = sorted(str(f) for f in (ROOT / "tests").glob("test_wayflow*.py"))
    this = "not test_the_wayflow_tests_pass_against_a_wayflow_checkout"
    p = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", *files, "-k", this],
        env=env, capture_output=True, text=True, timeout=1200, check=False,
    )  # fmt: skip
    last = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""
    assert p.returncode == 0 and " passed" in last and "skipped" not in last, p.stdout[-3000:]


# -- the portable state is an exact round trip ------------------------------------------------------

_plain = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3),
    max_leaves=15,
)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=4), _plain, max_size=4), st.text(max_size=10), _plain)
def test_a_state_reads_back_as_it_was_written(conversation: dict[str, Any], status: str, shape: Any) -> None:
    from eventlog.wayflow._diff import same
    from eventlog.wayflow._events import WayflowState
    from eventlog.wayflow._portable import read_state_text, state_text

    shape = {"id": "x", "extra": shape}
    state = WayflowState(
        component_id="x", component_type="Agent", shape=shape, conversation=conversation, status=status
    )
    back = read_state_text(state_text(state), "c", "cp")
    assert same(back["conversation"], conversation) and same(back["shape"], shape) and back["status"] == status


def test_save_of_a_checkpoint_with_its_own_id_component_and_metadata(log: eventlog.EventLog) -> None:
    """A stored checkpoint saved into another log under another id, component id and metadata."""
    checkpointer = EventLogCheckpointer(log)
    conversation = start_conversation(
        build_agent([reply("Bern is lovely.")]), messages="Bern?", checkpointer=checkpointer, conversation_id="c"
    )
    conversation.execute()
    [cp] = checkpointer.list_checkpoints("c")
    with eventlog.open(":memory:") as other_log:
        other = EventLogCheckpointer(other_log)
        saved = other.save(cp, checkpoint_id="copy", component_id="renamed-agent", metadata={"moved": True})
        assert (saved.checkpoint_id, saved.component_id) == ("copy", "renamed-agent")
        assert saved.metadata["moved"] is True and saved.metadata["save_sequence"] == cp.metadata["save_sequence"]
        assert [c.checkpoint_id for c in other.list_checkpoints("c")] == ["copy"]
        with pytest.raises(IncompatibleComponentError):  # recorded under the new id: the old one does not fit
            start_conversation(build_agent([]), conversation_id="c", checkpointer=other)
        back = start_conversation(build_agent([], agent_id="renamed-agent"), conversation_id="c", checkpointer=other)
        assert texts(back) == ["Bern?", "Bern is lovely."]
        with pytest.raises(IncompatibleComponentError):  # the conversation is recorded: another component is refused
            other.save(cp, checkpoint_id="again")
