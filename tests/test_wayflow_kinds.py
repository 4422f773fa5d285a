"""eventlog.wayflow on every kind of wayflowcore component: A2A and OCI agents, swarms,
manager-workers, agents inside flows; offline, with scripted LLMs (tests/wayflow_app.py), on
LMDB and PostgreSQL, restores in a real new process where the point is a restart."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("wayflowcore", reason="the wayflow extra is not installed")

from wayflow_app import (
    LOOSE_KINDS,
    NESTED_KINDS,
    booked,
    build_a2a,
    build_agent,
    build_loose,
    build_nested,
    build_oci,
    call,
    delegate,
    reply,
)
from wayflowcore.agent import Agent, CallerInputMode
from wayflowcore.controlconnection import ControlFlowEdge
from wayflowcore.executors.executionstatus import ToolExecutionConfirmationStatus
from wayflowcore.flow import Flow
from wayflowcore.steps import AgentExecutionStep

import eventlog
from eventlog.events import ToolCallCompleted
from eventlog.store import LMDBStore
from eventlog.wayflow import (
    EventLogCheckpointer,
    IncompatibleComponentError,
    Snapshot,
    UnsupportedComponentError,
    WayflowCheckpointError,
    WayflowReducer,
    start_conversation,
)

ROOT = Path(__file__).resolve().parent.parent
DURABLE = pytest.mark.parametrize("backend", ["lmdb", "postgres"], indirect=True)


def in_new_process(log: eventlog.EventLog, code: str) -> str:
    """Close `log`, run `code` in a fresh interpreter where `OPEN()` opens the same log (and imports the
    same wayflowcore: the PYTHONPATH this process was given is kept); its output."""
    store: Any = log.store
    if isinstance(store, LMDBStore):
        opener = f"eventlog.open({str(store.path)!r})"
    else:
        opener = f"eventlog.open(PostgresStore({store.dsn!r}, schema={store.schema!r}))"
    log.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVENTLOG_")}
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]  # a wayflowcore checkout too
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "tests"), *inherited])
    head = "import eventlog\nfrom eventlog.store.postgres import PostgresStore\n" if "Postgres" in opener else ""
    script = f"import eventlog\n{head}def OPEN():\n    return {opener}\n" + textwrap.dedent(code)
    p = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


# -- A2A and OCI agents: support is decided per kind --------------------------------------------


@DURABLE
def test_an_a2a_agent_is_checkpointed_and_its_client_side_restored_in_a_new_process(
    open_log: Any, backend: str
) -> None:
    log = open_log()
    checkpointer = EventLogCheckpointer(log)
    conversation = start_conversation(build_a2a(), checkpointer=checkpointer, conversation_id="remote-chat")
    assert conversation.conversation.id == "remote-chat"  # the context id the remote agent is sent
    # (executing needs wayflowcore's `fasta2a` extra and a server: the exchange is set by hand)
    # the client side of an exchange: the user's message and how far it was sent
    conversation.append_user_message("Book me a table")
    conversation.conversation.state.last_message_idx = 0
    conversation.conversation.append_agent_message("Done, table for two.")
    conversation.conversation.state.last_message_idx = 1
    saved = checkpointer.save(conversation)
    assert [cp.checkpoint_id for cp in checkpointer.list_checkpoints("remote-chat")] == [saved.checkpoint_id]
    out = in_new_process(
        log,
        """
        from eventlog.wayflow import EventLogCheckpointer, start_conversation
        from wayflow_app import build_a2a
        with OPEN() as log:
            restored = start_conversation(build_a2a(), checkpointer=EventLogCheckpointer(log), conversation_id="remote-chat")
            print(restored.restored_from.checkpoint_id)
            print(restored.conversation.id, restored.conversation.state.last_message_idx)
            print("|".join(m.content for m in restored.get_messages()))
            restored.append_user_message("Thanks")
            print(restored.checkpointer.save(restored).metadata["message_count"])
        """,
    )
    assert out.splitlines() == [
        saved.checkpoint_id,
        "remote-chat 1",
        "Book me a table|Done, table for two.",
        "3",
    ]
    assert len(EventLogCheckpointer(open_log()).list_checkpoints("remote-chat")) == 2


def oci_inside_agent() -> Agent:
    return Agent(llm=build_agent([]).llm, agents=[build_oci()], id="boss", name="boss")


def oci_inside_flow() -> Flow:
    step = AgentExecutionStep(agent=build_oci(), caller_input_mode=CallerInputMode.ALWAYS, name="ask_oci")
    edges = [ControlFlowEdge(step, None)]
    return Flow(begin_step=step, steps={"ask_oci": step}, control_flow_edges=edges, id="oci-flow", name="oci_flow")


@pytest.mark.parametrize(("build", "where"), [(build_oci, ""), (oci_inside_agent, "inside Agent 'boss'"),
                                              (oci_inside_flow, "inside Flow 'oci-flow'")])  # fmt: skip
def test_an_oci_agent_is_refused_by_name_with_nothing_written(log: eventlog.EventLog, build: Any, where: str) -> None:
    checkpointer = EventLogCheckpointer(log)
    with pytest.raises(UnsupportedComponentError, match=rf"OciAgent 'oci_helper' \(id 'oci-agent'\) {where}"):
        start_conversation(build(), messages="hi", checkpointer=checkpointer, conversation_id="c")
    assert log.head("c") == 0 and list(log.runs()) == []
    log.append("c", eventlog.events.TurnStarted(turn=1))  # a restore is refused the same way, before its reads
    with pytest.raises(UnsupportedComponentError):
        start_conversation(build(), checkpointer=checkpointer, conversation_id="c")
    assert log.head("c") == 1


# -- a tool confirmation asked at any nesting level survives a restore --------------------------


@pytest.mark.parametrize("kind", NESTED_KINDS)
def test_a_nested_tool_confirmation_is_answered_after_a_restore(log: eventlog.EventLog, kind: str) -> None:
    checkpointer = EventLogCheckpointer(log)
    booking = [call("book_hotel", "w1", city="Bern", people=2), reply("Booked.")]
    component = build_nested(kind, delegate(kind), booking)
    conversation = start_conversation(
        component, messages="Book a hotel", checkpointer=checkpointer, conversation_id="c"
    )
    status = conversation.execute()
    assert isinstance(status, ToolExecutionConfirmationStatus)
    assert [r.tool_request_id for r in status.tool_requests] == ["w1"]
    booked.clear()
    # restored with a component built again, whose LLMs hold only what is left of their scripts
    again = build_nested(kind, delegate(kind)[1:], booking[1:])
    restored = start_conversation(again, checkpointer=checkpointer, conversation_id="c")
    status = restored.status
    assert isinstance(status, ToolExecutionConfirmationStatus)
    status.confirm_tool_execution(status.tool_requests[0])
    after = restored.execute()
    assert not isinstance(after, ToolExecutionConfirmationStatus)
    assert booked == ["Bern/2"]  # the tool ran once, after the confirmation given to the restored conversation
    ran = [e.event for e in log.read("c") if isinstance(e.event, ToolCallCompleted)]
    assert [(t.call_id, t.output) for t in ran if t.tool == "book_hotel"] == [("w1", "booked a room for 2 in Bern")]


@pytest.mark.parametrize("tagged", [True, False])
def test_a_swarm_thread_that_holds_a_component_is_refused(log: eventlog.EventLog, tagged: bool) -> None:
    """A swarm's threads are read back from stored data; the agents they name come only from the
    live swarm: a thread whose agent is a definition (named by type or by the field's type) is refused."""
    checkpointer = EventLogCheckpointer(log)
    booking = [call("book_hotel", "w1", city="Bern", people=2)]
    start_conversation(
        build_nested("swarm", delegate("swarm"), booking), messages="hi", checkpointer=checkpointer, conversation_id="s"
    ).execute()
    rec = log.writer("s", reducer=WayflowReducer(), policy=eventlog.CheckpointPolicy.never())
    data = copy.deepcopy(rec.state.conversation)
    threads = [v for v in data["_referenced_objects"].values() if v.get("_component_type") == "SwarmThread"]
    assert threads
    agent = {"name": "evil", "llm": {"model_type": "openaicompatible", "model_id": "m", "base_url": "http://x.invalid"}}
    for thread in threads:
        thread["recipient_agent"] = {"_component_type": "Agent", **agent} if tagged else agent
    rec.append(Snapshot(checkpoint_id="evil", delta=["=", data], status=rec.state.status, reason="manual"))
    rec.checkpoint(metadata={"save_reason": "manual"}, checkpoint_id="evil")
    head = log.head("s")
    with pytest.raises(
        WayflowCheckpointError, match="conversation 's'.*" + ("'Agent'" if tagged else "recipient_agent")
    ):
        start_conversation(build_nested("swarm", [], []), checkpointer=checkpointer, conversation_id="s")
    assert log.head("s") == head


@DURABLE
def test_a_nested_tool_confirmation_is_answered_in_a_new_process(open_log: Any, backend: str) -> None:
    """The same, each kind in a fresh interpreter (one for all kinds: it is slow to start)."""
    log = open_log()
    for kind in NESTED_KINDS:
        component = build_nested(kind, delegate(kind), [call("book_hotel", "w1", city="Bern", people=2)])
        conversation = start_conversation(
            component, messages="Book a hotel", checkpointer=EventLogCheckpointer(log), conversation_id=kind
        )
        assert isinstance(conversation.execute(), ToolExecutionConfirmationStatus)
    out = in_new_process(
        log,
        f"""
        from eventlog.wayflow import EventLogCheckpointer, start_conversation
        from wayflow_app import booked, build_nested, delegate, reply
        with OPEN() as log:
            for kind in {NESTED_KINDS!r}:
                booked.clear()
                component = build_nested(kind, delegate(kind)[1:], [reply("Booked.")])
                restored = start_conversation(component, checkpointer=EventLogCheckpointer(log), conversation_id=kind)
                status = restored.status
                status.confirm_tool_execution(status.tool_requests[0])
                print(kind, type(restored.execute()).__name__, booked)
        """,
    )
    assert out.splitlines() == [f"{kind} UserMessageRequestStatus ['Bern/2']" for kind in NESTED_KINDS]


# -- nested components whose ids are new in each process are found back by type and name ---------


@DURABLE
def test_a_component_with_generated_nested_ids_is_restored_in_a_new_process(open_log: Any, backend: str) -> None:
    """Nested agents and LLMs with fixed ids other than their names, or with generated ids (only
    the root's is fixed); the prompts and tools wayflowcore makes inside have generated ids."""
    log = open_log()
    cases = [(kind, fixed) for kind in LOOSE_KINDS for fixed in (True, False)]
    for kind, fixed in cases:
        conversation = start_conversation(
            build_loose(kind, [reply("Hello.")], fixed=fixed),
            messages="hi",
            checkpointer=EventLogCheckpointer(log),
            conversation_id=f"{kind}-{fixed}",
        )
        assert conversation.execute().message.content == "Hello."
    out = in_new_process(
        log,
        f"""
        from eventlog.wayflow import EventLogCheckpointer, start_conversation
        from wayflow_app import build_loose, reply
        with OPEN() as log:
            for kind, fixed in {cases!r}:
                component = build_loose(kind, [reply("Resumed.")], fixed=fixed)
                restored = start_conversation(
                    component, checkpointer=EventLogCheckpointer(log), conversation_id=f"{{kind}}-{{fixed}}"
                )
                restored.append_user_message("go on")
                restored.execute()
                print(kind, fixed, "|".join(m.content for m in restored.get_messages()))
        """,
    )
    assert out.splitlines() == [f"{kind} {fixed} hi|Hello.|go on|Resumed." for kind, fixed in cases]


@pytest.mark.parametrize("kind", LOOSE_KINDS)
def test_a_nested_component_that_is_not_there_is_refused_by_name_with_nothing_written(
    log: eventlog.EventLog, kind: str
) -> None:
    checkpointer = EventLogCheckpointer(log)
    conversation = start_conversation(
        build_loose(kind, [reply("Hello.")], fixed=False), messages="hi", checkpointer=checkpointer, conversation_id="c"
    )
    conversation.execute()
    head = log.head("c")
    with pytest.raises(IncompatibleComponentError, match="helper"):
        start_conversation(
            build_loose(kind, [], fixed=False, helper="other"), checkpointer=checkpointer, conversation_id="c"
        )
    assert log.head("c") == head


@pytest.mark.parametrize("identities", ["junk", {}, "each-a-dict", "each-a-deep-list", "each-an-unknown-name"])
def test_stored_identities_that_do_not_fit_are_refused_by_name(log: eventlog.EventLog, identities: Any) -> None:
    """The type and name a checkpoint records for a reference only choose among the live component's
    parts: malformed, missing or unknown ones refuse the restore, named, with nothing written."""
    checkpointer = EventLogCheckpointer(log)
    start_conversation(
        build_loose("swarm", [reply("Hello.")], fixed=False),
        messages="hi",
        checkpointer=checkpointer,
        conversation_id="c",
    ).execute()
    rec = log.writer("c", reducer=WayflowReducer(), policy=eventlog.CheckpointPolicy.never())
    data = copy.deepcopy(rec.state.conversation)
    refs = list(data["$components"])
    assert any(ref.startswith("agent/") and ref != "agent/lead" for ref in refs)  # generated ids, named by it
    made = {
        "each-a-dict": {ref: {"type": "Agent", "name": "lead"} for ref in refs},
        "each-a-deep-list": {ref: [["Agent"], ["lead"]] for ref in refs},
        "each-an-unknown-name": {ref: ["Agent", "nobody"] for ref in refs},
    }
    data["$components"] = made.get(identities, identities) if isinstance(identities, str) else identities
    rec.append(Snapshot(checkpoint_id="odd", delta=["=", data], status=rec.state.status, reason="manual"))
    rec.checkpoint(metadata={"save_reason": "manual"}, checkpoint_id="odd")
    head = log.head("c")
    with pytest.raises(IncompatibleComponentError, match="conversation 'c': the checkpoint refers to agent/"):
        start_conversation(build_loose("swarm", [], fixed=False), checkpointer=checkpointer, conversation_id="c")
    assert log.head("c") == head
