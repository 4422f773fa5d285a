"""EventLogCheckpointer as a Checkpointer of WayFlow's own Checkpointing API (`wayflowcore.checkpointing`,
WayFlow PR #159, not in wayflowcore 26.3.1): its how-to run unchanged but for the checkpointer.

Skipped unless the installed wayflowcore ships `wayflowcore.checkpointing`. To run it against the
pull request's branch (it runs on 26.3.1's dependencies), put that branch's
`wayflowcore/src` first on the path, for example:

    git -C wayflow archive checkpointing-support wayflowcore | tar -x -C /tmp/pr
    PYTHONPATH=/tmp/pr/wayflowcore/src:.:tests pytest tests/test_wayflow_native.py

(`test_wayflow_surface.py::test_the_wayflow_tests_pass_against_a_wayflow_checkout` does that for
every tests/test_wayflow*.py file from a normal run when `EVENTLOG_TEST_WAYFLOW_PR` names that
`wayflowcore/src`.)
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent


shipped = pytest.importorskip("wayflowcore.checkpointing", reason="the installed wayflowcore does not ship it")

from test_wayflow_kinds import DURABLE  # noqa: E402
from wayflow_app import ScriptedLlm, build_agent, reply  # noqa: E402
from wayflowcore.controlconnection import ControlFlowEdge  # noqa: E402
from wayflowcore.executors.executionstatus import FinishedStatus, UserMessageRequestStatus  # noqa: E402
from wayflowcore.flow import Flow  # noqa: E402
from wayflowcore.steps import OutputMessageStep, PromptExecutionStep  # noqa: E402

import eventlog  # noqa: E402
from eventlog.store import LMDBStore  # noqa: E402
from eventlog.wayflow import (  # noqa: E402
    VIEW,
    CheckpointingInterval,
    EventLogCheckpointer,
    WayflowCheckpointError,
    WayflowReducer,
    start_conversation,
)


def texts(conversation: Any) -> list[str]:
    return [m.content for m in conversation.get_messages()]


def test_it_is_a_checkpointer_of_wayflows_api(log: eventlog.EventLog) -> None:
    assert isinstance(EventLogCheckpointer(log), shipped.Checkpointer)
    assert CheckpointingInterval is shipped.CheckpointingInterval


def test_the_how_to_runs_with_the_log_as_checkpointer(log: eventlog.EventLog) -> None:
    """WayFlow's how-to (start, resume the latest, load `list_checkpoints(...)[-2]` and go on) with
    EventLogCheckpointer in place of InMemoryCheckpointer: the same statuses and messages."""
    script = [reply("How can I help?"), reply("Continuing."), reply("Another path.")]
    agent = build_agent(script, agent_id="support-agent")
    checkpointer = EventLogCheckpointer(log)
    conversation = agent.start_conversation(conversation_id="support-thread-1", checkpointer=checkpointer)
    conversation.append_user_message("Hello")
    assert isinstance(conversation.execute(), UserMessageRequestStatus)
    first = conversation.checkpoint_id
    assert first is not None and checkpointer.load_latest("support-thread-1").checkpoint_id == first

    restored = agent.start_conversation(conversation_id="support-thread-1", checkpointer=checkpointer)
    assert restored.checkpoint_id == first and restored.checkpointer is checkpointer
    restored.append_user_message("Continue from where you left off.")
    assert restored.execute().message.content == "Continuing."

    checkpoints = checkpointer.list_checkpoints("support-thread-1")
    assert [cp.metadata["save_sequence"] for cp in checkpoints] == [1, 2]
    previous = checkpoints[-2]
    rewound = agent.start_conversation(
        conversation_id="support-thread-1", checkpoint_id=previous.checkpoint_id, checkpointer=checkpointer
    )
    assert texts(rewound) == ["Hello", "How can I help?"]
    assert checkpointer.branches("support-thread-1") == []  # a restore is read-only until the next save
    assert checkpointer.load_latest("support-thread-1").checkpoint_id == checkpoints[-1].checkpoint_id
    rewound.append_user_message("Try a different path from here.")
    assert rewound.execute().message.content == "Another path."
    [branch] = checkpointer.branches("support-thread-1")
    assert branch.checkpoint_id == previous.checkpoint_id
    assert [cp.checkpoint_id for cp in checkpointer.list_checkpoints(branch.branch_id)] == [
        cp.checkpoint_id for cp in checkpoints
    ]
    shown = VIEW.state(log, "support-thread-1", log.head("support-thread-1"))["messages"]
    assert [m["content"] for m in shown] == texts(rewound)  # the run view reads WayFlow's own format too
    # the conversation recorded through WayFlow's API is restored through it, not through ours

    with pytest.raises(WayflowCheckpointError, match="own Checkpointing API"):
        start_conversation(agent, conversation_id="support-thread-1", checkpointer=checkpointer)
    assert log.verify(reducer=WayflowReducer()).ok


@pytest.mark.parametrize(
    ("interval", "llm", "reasons"),
    [
        (CheckpointingInterval.CONVERSATION_TURNS, False, ["conversation_turn"]),
        (CheckpointingInterval.ALL_INTERNAL_TURNS, False, ["internal_turn_boundary"] * 2 + ["conversation_turn"]),
        (CheckpointingInterval.LLM_TURNS, True, ["internal_turn_boundary", "conversation_turn"]),
    ],
)
def test_wayflows_own_intervals_save_into_the_log(
    log: eventlog.EventLog, interval: Any, llm: bool, reasons: list[str]
) -> None:
    """Saved by wayflowcore's own listener: the counts its tests give for a one-step flow."""
    if llm:
        step: Any = PromptExecutionStep(llm=ScriptedLlm([reply("Hello.")], id="llm"), prompt_template="Hi", name="p")
    else:
        step = OutputMessageStep(message_template="Hello.", name="out")
    flow = Flow(begin_step=step, steps={step.name: step}, control_flow_edges=[ControlFlowEdge(step, None)], id="f")
    checkpointer = EventLogCheckpointer(log, interval=interval)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert isinstance(
            flow.start_conversation(conversation_id="f1", checkpointer=checkpointer).execute(), FinishedStatus
        )
    assert [cp.metadata["save_reason"] for cp in checkpointer.list_checkpoints("f1")] == reasons


def test_checkpoints_move_between_wayflows_checkpointers_and_the_log(log: eventlog.EventLog) -> None:
    theirs = shipped.InMemoryCheckpointer()
    agent = build_agent([reply("Bern is lovely."), reply("Two rooms.")])
    conversation = agent.start_conversation(conversation_id="m", checkpointer=theirs, messages="Bern?")
    conversation.execute()
    ours = EventLogCheckpointer(log)
    for cp in theirs.list_checkpoints("m"):
        ours.save(cp)
    restored = agent.start_conversation(conversation_id="m", checkpointer=ours)
    restored.append_user_message("For two?")
    assert restored.execute().message.content == "Two rooms."
    back = shipped.InMemoryCheckpointer()
    for cp in ours.list_checkpoints("m"):
        back.save(
            shipped.ConversationCheckpoint(cp.checkpoint_id, "m", cp.component_id, cp.created_at, cp.state, cp.metadata)
        )
    assert texts(agent.start_conversation(conversation_id="m", checkpointer=back)) == [
        "Bern?", "Bern is lovely.", "For two?", "Two rooms."
    ]  # fmt: skip


def test_the_26_3_path_keeps_working(log: eventlog.EventLog) -> None:
    checkpointer = EventLogCheckpointer(log)
    conversation = start_conversation(build_agent([reply("hello")]), messages="hi", checkpointer=checkpointer)
    conversation.execute()
    again = start_conversation(build_agent([]), conversation_id=conversation.conversation_id, checkpointer=checkpointer)
    assert texts(again) == ["hi", "hello"]


@DURABLE
def test_a_native_conversation_is_restored_in_a_new_process(open_log: Any, backend: str) -> None:
    log = open_log()
    agent = build_agent([reply("Bern is lovely.")])
    conversation = agent.start_conversation(
        conversation_id="n", checkpointer=EventLogCheckpointer(log), messages="Bern?"
    )
    conversation.execute()
    store: Any = log.store
    if isinstance(store, LMDBStore):
        opener = f"eventlog.open({str(store.path)!r})"
    else:
        opener = f"eventlog.open(PostgresStore({store.dsn!r}, schema={store.schema!r}))"
    log.close()
    code = f"""
        import warnings; warnings.simplefilter("ignore")
        import eventlog
        from eventlog.store.postgres import PostgresStore
        from eventlog.wayflow import EventLogCheckpointer
        from wayflow_app import build_agent, reply
        with {opener} as log:
            agent = build_agent([reply("Two rooms.")])
            restored = agent.start_conversation(conversation_id="n", checkpointer=EventLogCheckpointer(log))
            restored.append_user_message("For two?")
            print(restored.execute().message.content)
        """
    wayflow_dir = str(Path(shipped.__file__).resolve().parents[2])  # the checkout this process imports
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVENTLOG_")}
    env["PYTHONPATH"] = os.pathsep.join([wayflow_dir, str(ROOT), str(ROOT / "tests")])
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                       timeout=120, check=False)  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.splitlines() == ["Two rooms."]
    log = open_log()
    assert [cp.metadata["save_sequence"] for cp in EventLogCheckpointer(log).list_checkpoints("n")] == [1, 2]


def _how_to(checkpointer: Any, interval_turns: int = 2) -> dict[str, Any]:
    """WayFlow's how-to, recording what a user observes."""
    script = [reply(f"Answer {i}.") for i in range(interval_turns + 1)]
    agent = build_agent(script, agent_id="support-agent")
    seen: dict[str, Any] = {"statuses": [], "messages": [], "counts": []}
    conversation = agent.start_conversation(conversation_id="t", checkpointer=checkpointer, messages="Hello")
    seen["statuses"].append(type(conversation.execute()).__name__)
    seen["counts"].append(len(checkpointer.list_checkpoints("t")))
    for i in range(1, interval_turns):
        conversation = agent.start_conversation(conversation_id="t", checkpointer=checkpointer)
        conversation.append_user_message(f"Go on {i}.")
        seen["statuses"].append(type(conversation.execute()).__name__)
        seen["counts"].append(len(checkpointer.list_checkpoints("t")))
    seen["messages"].append(texts(conversation))
    previous = checkpointer.list_checkpoints("t")[-2]
    rewound = agent.start_conversation(
        conversation_id="t", checkpoint_id=previous.checkpoint_id, checkpointer=checkpointer
    )
    seen["messages"].append(texts(rewound))
    seen["counts"].append(len(checkpointer.list_checkpoints("t")))  # a restore writes nothing
    rewound.append_user_message("Another path.")
    seen["statuses"].append(type(rewound.execute()).__name__)
    seen["messages"].append(texts(rewound))
    seen["reasons"] = [cp.metadata["save_reason"] for cp in checkpointer.list_checkpoints("t")]
    return seen


@pytest.mark.parametrize("interval", ["CONVERSATION_TURNS", "ALL_INTERNAL_TURNS"])
def test_the_how_to_observes_what_wayflows_own_checkpointer_observes(log: eventlog.EventLog, interval: str) -> None:
    """Statuses, messages and checkpoint counts as with WayFlow's InMemoryCheckpointer; after the
    rewind WayFlow lists the replaced future too, the log lists it on its branch (the guide's
    "Beside WayFlow's own Checkpointing API")."""
    theirs = _how_to(shipped.InMemoryCheckpointer(checkpointing_interval=shipped.CheckpointingInterval[interval]))
    checkpointer = EventLogCheckpointer(log, interval=CheckpointingInterval[interval])
    ours = _how_to(checkpointer)
    assert ours["statuses"] == theirs["statuses"] and ours["messages"] == theirs["messages"]
    assert ours["counts"] == theirs["counts"]
    [branch] = checkpointer.branches("t")
    replaced_future = [cp for cp in checkpointer.list_checkpoints(branch.branch_id) if cp.offset > branch.offset]
    assert len(checkpointer.list_checkpoints("t")) + len(replaced_future) == len(theirs["reasons"])


# -- beside WayFlow's own code: the same checkpoints, its how-to file and its own tests ------------

CHECKOUT = Path(shipped.__file__).resolve().parents[4]
"""The wayflow repository the imported `wayflowcore.checkpointing` comes from (when it is a checkout)."""
METADATA = ("save_reason", "event_type", "agent_iteration", "flow_step_name", "nesting_level",
            "llm_used_in_previous_turn", "status_type", "message_count", "current_step_name")  # fmt: skip


@pytest.mark.parametrize("interval", ["CONVERSATION_TURNS", "LLM_TURNS", "ALL_INTERNAL_TURNS"])
@pytest.mark.parametrize("case", ["input steps", "hello flow", "agent step"])
def test_start_conversation_checkpoints_where_wayflows_own_api_does(
    log: eventlog.EventLog, case: str, interval: str
) -> None:
    """The 26.3 path (eventlog's start_conversation) beside wayflowcore's own conversation with its
    InMemoryCheckpointer, on flows that pause at input and agent steps: the same checkpoints, with
    the same WayFlow metadata, one for one."""
    from test_wayflow_surface import PAUSING

    build, answers, _ = PAUSING[case]
    theirs = shipped.InMemoryCheckpointer(checkpointing_interval=shipped.CheckpointingInterval[interval])
    ours = EventLogCheckpointer(log, checkpointing_interval=CheckpointingInterval[interval])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for conversation in (
            build().start_conversation(conversation_id="c", checkpointer=theirs),
            start_conversation(build(), conversation_id="c", checkpointer=ours),
        ):
            conversation.execute()
            for answer in answers:
                conversation.append_user_message(answer)
                conversation.execute()
    seen = [[tuple(cp.metadata.get(k) for k in METADATA) for cp in c.list_checkpoints("c")] for c in (theirs, ours)]
    assert seen[0] == seen[1] and len(seen[0]) >= 2


def _run_how_to(source: str, namespace: dict[str, Any]) -> dict[str, Any]:
    """Run WayFlow's how-to with a scripted LLM (its `_update_globals` hands out the docs' LLMs);
    what a user observes."""
    llm = ScriptedLlm([reply(f"Answer {i}.") for i in range(6)], id="docs-llm")
    namespace["_update_globals"] = lambda names: (llm,)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(source, "howto_checkpointing.py", "exec"), namespace)  # WayFlow's docs example
    used = namespace["conversation"].checkpointer  # the how-to's last lines make another checkpointer
    return {
        "messages": [texts(namespace[n]) for n in ("conversation", "restored_conversation", "rewound_conversation")],
        "status": type(namespace["status"]).__name__,
        "listed": [cp.metadata["save_sequence"] for cp in namespace["checkpoints"]],
        "restored_from": namespace["previous_checkpoint"].metadata["save_sequence"],
        "interval": namespace["checkpointer"].checkpointing_interval,
        "saved": len(used.list_checkpoints("support-thread-1", limit=None)),
        "checkpointer": used,
    }


def test_wayflows_how_to_file_runs_with_the_log_as_checkpointer(log: eventlog.EventLog) -> None:
    """WayFlow's own how-to file (docs/.../howto_checkpointing.py of the checkout), once as it is and
    once with `InMemoryCheckpointer(` made `EventLogCheckpointer(log, `: the same messages, status,
    listed checkpoints and interval; the future the rewind replaced is on the log's branch."""
    how_to = CHECKOUT / "docs/wayflowcore/source/core/code_examples/howto_checkpointing.py"
    if not how_to.is_file():
        pytest.skip(f"{how_to} is not there: archive the checkout's docs too")
    source = how_to.read_text()
    assert source.count("InMemoryCheckpointer(") == 2
    theirs = _run_how_to(source, {})
    ours = _run_how_to(
        source.replace("InMemoryCheckpointer(", "EventLogCheckpointer(LOG, "),
        {"EventLogCheckpointer": EventLogCheckpointer, "LOG": log},
    )
    assert isinstance(ours["checkpointer"], EventLogCheckpointer)
    for key in ("messages", "status", "listed", "restored_from", "interval"):
        assert ours[key] == theirs[key], key
    [branch] = ours["checkpointer"].branches("support-thread-1")
    replaced = [cp for cp in ours["checkpointer"].list_checkpoints(branch.branch_id) if cp.offset > branch.offset]
    assert ours["saved"] + len(replaced) == theirs["saved"]


def test_wayflows_own_checkpointing_tests_pass_with_the_log_as_checkpointer(tmp_path: Path) -> None:
    """WayFlow's own test file (tests/serialization/test_conversation_checkpointing.py of the
    checkout), ported by making its `InMemoryCheckpointer` an EventLogCheckpointer over a new log:
    every test that passes as WayFlow wrote it passes ported too (those that need what this
    machine lacks, SQLAlchemy or a served A2A agent, fail in both)."""
    tests = CHECKOUT / "wayflowcore" / "tests"
    original = tests / "serialization" / "test_conversation_checkpointing.py"
    if not original.is_file():
        pytest.skip(f"{original} is not there: archive the checkout's wayflowcore directory whole")
    copy = tmp_path / "wayflowcore"
    shutil.copytree(tests, copy / "tests")
    shutil.copy(CHECKOUT / "wayflowcore" / "setup.cfg", copy / "setup.cfg")
    source = original.read_text()
    anchor = "\nfrom ..testhelpers"
    assert anchor in source and "InMemoryCheckpointer()" in source
    shim = textwrap.dedent(
        """
        import eventlog as _eventlog
        from eventlog.wayflow import EventLogCheckpointer as _EventLogCheckpointer


        def InMemoryCheckpointer(storage_config=None, checkpointing_interval=CheckpointingInterval.CONVERSATION_TURNS):
            return _EventLogCheckpointer(_eventlog.open(":memory:"), checkpointing_interval=checkpointing_interval)
        """
    )
    at = source.index(anchor)
    ported = source[:at] + shim + source[at:]
    (copy / "tests" / "serialization" / "test_eventlog_port.py").write_text(ported)
    conftest = (tests / "conftest.py").read_text()
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVENTLOG_")}
    for name in set(re.findall(r'os\.environ\.get\("([A-Za-z0-9_]+)"\)', conftest)) - {"DEBUG_LEVEL"}:
        env.setdefault(name, "http://unused.invalid")  # its conftest requires them; these tests call no service
    env["PYTHONPATH"] = os.pathsep.join([str(CHECKOUT / "wayflowcore" / "src"), str(ROOT)])

    def passed(name: str) -> set[str]:
        p = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-rA",
             f"tests/serialization/{name}"],
            cwd=copy, env=env, capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        return {line.split("::")[-1] for line in p.stdout.splitlines() if line.startswith("PASSED ")}

    theirs, ours = passed("test_conversation_checkpointing.py"), passed("test_eventlog_port.py")
    using = set(re.findall(r"def (test_\w+)\([^)]*\)[^:]*:\n(?:(?!\ndef ).)*?InMemoryCheckpointer\(", source, re.S))
    assert len(using & theirs) >= 8, sorted(using - theirs)  # the log stands in for these, at least
    assert ours == theirs, (sorted(theirs - ours), sorted(ours - theirs))
