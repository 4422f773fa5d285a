"""eventlog.openai_agents on the real OpenAI Agents SDK, offline (tests/openai_agents_app.py's scripted model).

The session is judged against the SDK's own `SQLiteSession`: the same operations on both give
the same answers. Runs killed mid-way resume in real subprocesses on a real LMDB directory.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import msgspec
import pytest

pytest.importorskip("agents", reason="the openai-agents extra is not installed")

from agents import Runner, SQLiteSession
from agents.memory import Session
from conflicts import Jostling
from hypothesis import given, settings
from hypothesis import strategies as st
from openai_agents_app import ADD_SCRIPT, REFUND_SCRIPT, ScriptedModel, agent, call, reply

import eventlog
from eventlog.openai_agents import (
    VIEW,
    AgentsReducer,
    ApprovalDecided,
    CheckpointError,
    EventLogSession,
    ItemAdded,
    ItemPopped,
    RunCheckpointer,
    RunFinishedError,
    RunStateSaved,
    SessionCleared,
    list_sessions,
)
from eventlog.openai_agents._delta import diff, patch

HERE = Path(__file__).parent


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


# -- the session ----------------------------------------------------------------------------


def test_session_protocol(log: eventlog.EventLog) -> None:
    session = EventLogSession("s1", log)
    assert isinstance(session, Session)

    async def go() -> None:
        assert await session.get_items() == [] and await session.pop_item() is None
        await session.add_items([user("a"), user("b")])
        await session.add_items([])
        await session.add_items([user("c")])
        assert await session.get_items() == [user("a"), user("b"), user("c")]
        assert await session.get_items(limit=2) == [user("b"), user("c")]
        assert await session.get_items(limit=0) == []
        assert await session.pop_item() == user("c")
        assert await session.get_items() == [user("a"), user("b")]
        await session.clear_session()
        assert await session.get_items() == []
        await session.add_items([user("d")])
        assert await session.get_items() == [user("d")]

    asyncio.run(go())
    # nothing was rewritten: one event per item, a pop and a clear, all readable
    kinds = [type(e.event) for e in log.read("s1")]
    assert kinds == [ItemAdded, ItemAdded, ItemAdded, ItemPopped, SessionCleared, ItemAdded]
    history = session.history()
    assert [(h.action, h.removed) for h in history] == [
        ("added", True),
        ("added", True),
        ("added", True),
        ("popped", False),
        ("cleared", False),
        ("added", False),
    ]
    assert history[3].item == user("c")
    assert session.items_at(3) == [user("a"), user("b"), user("c")]
    # another session object on the same log (another process, say) reads the same items
    assert asyncio.run(EventLogSession("s1", log).get_items()) == [user("d")]


def test_session_unicode_and_large_items(log: eventlog.EventLog) -> None:
    """Unicode, quotes and SQL keywords, a control character, a 1.2 MB item: read back as
    SQLiteSession reads them back, by another session object of the log."""
    big = {"role": "user", "content": "é🙂" * 200_000}
    nested = {
        "type": "function_call_output",
        "call_id": "c",
        "output": [{"type": "input_text", "text": "\u0000\ufeff"}],
    }
    texts = ["こんにちは", "😊👍", "Привет", "O'Reilly", "DROP TABLE sessions;", "Robert'); DROP TABLE students;--"]
    items = [big, nested, *(user(t) for t in texts)]
    reference = SQLiteSession("ünï/😀")
    try:
        asyncio.run(reference.add_items(items))
        expected = asyncio.run(reference.get_items())
    finally:
        reference.close()
    session = EventLogSession("ünï/😀", log)
    asyncio.run(session.add_items(items))
    assert asyncio.run(EventLogSession("ünï/😀", log).get_items()) == expected == items


def test_an_async_log_serves_a_session_and_a_run() -> None:
    import eventlog.aio

    async def go() -> None:
        async with await eventlog.aio.open(":memory:") as alog:
            session = EventLogSession("s", alog)
            await session.add_items([user("a")])
            assert await session.get_items() == [user("a")]
            result = await RunCheckpointer(alog).run("job", agent(ScriptedModel(ADD_SCRIPT)), "add")
            assert result.final_output == "1+2=3 and 3+4=7"

    asyncio.run(go())


def test_session_settings_limit(log: eventlog.EventLog) -> None:
    """Settings as SQLiteSession takes them: a default SessionSettings, a mapping made one, the
    limit the default of get_items, and a run config's settings over the session's."""
    from agents import RunConfig
    from agents.memory import SessionSettings

    for settings_given in (None, {"limit": 1}, SessionSettings(limit=1)):
        assert (
            EventLogSession("s", log, session_settings=settings_given).session_settings
            == SQLiteSession("s", session_settings=settings_given).session_settings
        )
    session = EventLogSession("s", log, session_settings=SessionSettings(limit=1))
    asyncio.run(session.add_items([user("a"), user("b")]))
    assert asyncio.run(session.get_items()) == [user("b")]
    assert asyncio.run(session.get_items(limit=5)) == [user("a"), user("b")]
    assert asyncio.run(EventLogSession("s", log, session_settings={"limit": 1}).get_items()) == [user("b")]
    model = ScriptedModel([[reply("ok")]])
    settings = RunConfig(session_settings=SessionSettings(limit=2))
    asyncio.run(Runner.run(agent(model), "c", session=session, run_config=settings))
    assert model.inputs[0][:2] == [user("a"), user("b")] and len(model.inputs[0]) == 3


_items = st.lists(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"]), "content": st.text(max_size=8)}),
    max_size=3,
)
_ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), _items),
        st.tuples(st.just("get"), st.one_of(st.none(), st.integers(-2, 6))),
        st.tuples(st.just("pop"), st.none()),
        st.tuples(st.just("clear"), st.none()),
    ),
    max_size=25,
)


@settings(max_examples=30)
@given(ops=_ops)
def test_session_answers_as_sqlite_session(ops: list[tuple[str, Any]]) -> None:
    """Every operation of the protocol answers what the SDK's SQLiteSession answers."""

    async def apply(session: Any) -> list[Any]:
        out = []
        for op, arg in ops:
            if op == "add":
                out.append(await session.add_items(arg))
            elif op == "get":
                out.append(await session.get_items(arg))
            elif op == "pop":
                out.append(await session.pop_item())
            else:
                out.append(await session.clear_session())
        out.append(await session.get_items())
        return out

    reference = SQLiteSession("s")
    try:
        expected = asyncio.run(apply(reference))
    finally:
        reference.close()
    with eventlog.open(":memory:") as log:
        assert asyncio.run(apply(EventLogSession("s", log))) == expected


def test_concurrent_sessions_and_pops(log: eventlog.EventLog) -> None:
    """Sessions of one log do not mix; two holders of one session never pop the same item twice."""

    async def chat(sid: str) -> None:
        session = EventLogSession(sid, log)
        for i in range(10):
            await session.add_items([user(f"{sid}-{i}")])

    async def both() -> None:
        await asyncio.gather(chat("x"), chat("y"))

    asyncio.run(both())
    for sid in ("x", "y"):
        assert asyncio.run(EventLogSession(sid, log).get_items()) == [user(f"{sid}-{i}") for i in range(10)]

    # threads, each with its own event loop, add to one session object at once (SQLiteSession's case)
    shared = EventLogSession("z", log)

    def add(i: int) -> None:
        asyncio.run(shared.add_items([user(f"z-{i}")]))

    adders = [threading.Thread(target=add, args=(i,)) for i in range(10)]
    for t in adders:
        t.start()
    for t in adders:
        t.join()
    assert sorted(i["content"] for i in asyncio.run(shared.get_items())) == sorted(f"z-{i}" for i in range(10))

    popped: list[Any] = []
    holders = [EventLogSession("x", log) for _ in range(4)]

    def pop_all(session: EventLogSession) -> None:
        while (item := session.pop_item_sync()) is not None:
            popped.append(item)

    threads = [threading.Thread(target=pop_all, args=(h,)) for h in holders]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(i["content"] for i in popped) == sorted(f"x-{i}" for i in range(10))
    assert log.head("x") == 20


class _MadeAgainBeforeAppend:
    """The session's log, where another writer deletes the session and makes it again (with as
    many items) between the session's read and its append, as another process can."""

    def __init__(self, log: eventlog.EventLog, session_id: str, items: list[Any]) -> None:
        self._log, self._session_id, self._items = log, session_id, items

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)

    def append(self, *args: Any, **kwargs: Any) -> int:
        if self._items:
            self._log.delete_run(self._session_id)
            EventLogSession(self._session_id, self._log).add_items_sync(self._items)
            self._items = []
        return self._log.append(*args, **kwargs)


@pytest.mark.parametrize("call", ["pop_item", "clear_session"])
def test_a_pop_or_clear_never_reads_one_life_and_writes_the_next(log: eventlog.EventLog, call: str) -> None:
    session = EventLogSession("s", log)
    asyncio.run(session.add_items([user("old 1"), user("old 2")]))
    assert asyncio.run(session.get_items()) == [user("old 1"), user("old 2")]
    session.log = _MadeAgainBeforeAppend(log, "s", [user("new 1"), user("new 2")])  # type: ignore[assignment]
    answer = asyncio.run(getattr(session, call)())
    fresh = EventLogSession("s", log)
    if call == "pop_item":
        assert answer == user("new 2")  # the latest item of the life it removed it from
        assert asyncio.run(fresh.get_items()) == [user("new 1")]
    else:
        assert asyncio.run(fresh.get_items()) == []
    assert {h.item["content"] for h in fresh.history() if h.item is not None} == {"new 1", "new 2"}


class _MadeAgainAfterLife(_MadeAgainBeforeAppend):
    """The session's log, where another writer deletes the session and makes it again between
    the session's read of its life and its read of the events, once."""

    def append(self, *args: Any, **kwargs: Any) -> int:
        return self._log.append(*args, **kwargs)

    def life(self, run_id: str) -> tuple[int, int]:
        answer = self._log.life(run_id)
        if self._items:
            self._log.delete_run(self._session_id)
            EventLogSession(self._session_id, self._log).add_items_sync(self._items)
            self._items = []
        return answer


@pytest.mark.parametrize("call", ["get_items", "pop_item"])
def test_a_read_that_meets_the_session_made_again_reads_the_new_life(log: eventlog.EventLog, call: str) -> None:
    """Deleted and made again between the session's two reads, a session is read again on its
    new life, where a read of SQLiteSession never fails: no RunReplacedError reaches the caller."""
    asyncio.run(EventLogSession("s", log).add_items([user("old")]))
    session = EventLogSession("s", log)
    session.log = _MadeAgainAfterLife(log, "s", [user("new")])  # type: ignore[assignment]
    answer = asyncio.run(getattr(session, call)())
    assert answer == ([user("new")] if call == "get_items" else user("new"))


@pytest.mark.parametrize("what", ["pop_item", "clear_session", "approve"])
def test_a_conflict_after_every_attempt_names_the_heads_and_the_attempts(
    open_log: Any, tmp_path: Path, what: str
) -> None:
    """Another writer appends to the run at every attempt of a pop, a clear or an approval: the
    call gives up after `conflict_attempts_max` attempts with the last ConflictError, which names
    the heads that attempt expected and found (the SDK's callers of `pop_item` log an error and
    put back what they popped; they do not spin)."""
    attempts = eventlog._limits.conflict_attempts_max
    clock = Jostling(limit=4 * attempts)  # without a bound, the write ends once the other writer stops
    log = open_log(clock=clock)
    if what == "approve":
        checkpointer = RunCheckpointer(log)
        asyncio.run(checkpointer.run("r", agent(ScriptedModel(REFUND_SCRIPT), tmp_path / "ledger"), "refund A-17"))
        run_id, other = "r", ApprovalDecided(call_id="r1", approved=False)
        do: Any = lambda: checkpointer.approve("r", "r1")  # noqa: E731
    else:
        session = EventLogSession("s", log)
        asyncio.run(session.add_items([user("a"), user("b")]))
        run_id, other = "s", ItemAdded(item=user("another writer's"))
        do = lambda: asyncio.run(getattr(session, what)())  # noqa: E731
    head = log.head(run_id)
    clock.aim(log, run_id, other)
    with pytest.raises(eventlog.ConflictError) as exc:
        do()
    error, last = exc.value, head + attempts
    assert clock.times == attempts  # one conflict an attempt, and no attempt more
    assert (error.run_id, error.expected, error.head, error.attempts) == (run_id, last - 1, last, attempts)
    assert f"expected head {last - 1} but head is {last} at the last of {attempts} attempts" in str(error)
    assert log.head(run_id) == last  # nothing of the write landed


def test_fork_session_and_listing(log: eventlog.EventLog) -> None:
    session = EventLogSession("main", log)
    asyncio.run(session.add_items([user("a"), user("b"), user("c")]))
    branch = asyncio.run(session.fork_session(at=2, new_session_id="main-b"))
    asyncio.run(branch.add_items([user("B")]))
    assert asyncio.run(branch.get_items()) == [user("a"), user("b"), user("B")]
    assert asyncio.run(session.get_items()) == [user("a"), user("b"), user("c")]
    asyncio.run(branch.pop_item())
    asyncio.run(branch.pop_item())
    assert asyncio.run(branch.get_items()) == [user("a")]
    assert asyncio.run(session.get_items()) == [user("a"), user("b"), user("c")]
    log.append("other", eventlog.events.StepCompleted(node="n", superstep=1))
    listed = {s.session_id: s for s in list_sessions(log)}
    assert set(listed) == {"main", "main-b"}
    assert listed["main-b"].parent == "main" and listed["main-b"].fork_offset == 2
    first = list_sessions(log, limit=1)
    assert [s.session_id for s in first] == ["main"]
    assert [s.session_id for s in list_sessions(log, after=first[-1].session_id, limit=1)] == ["main-b"]


def test_a_fork_of_a_pruned_session_reads_and_lists_from_its_base(log: eventlog.EventLog) -> None:
    """A session pruned at its head (nothing kept after its base) and a fork of it made there:
    both are listed, the fork reads the items kept at the base and goes on from them."""
    session = EventLogSession("main", log)
    asyncio.run(session.add_items([user("a"), user("b")]))
    log.checkpoints.save("main", 2, reducer=AgentsReducer())
    log.prune("main", before=2, reducer=AgentsReducer())
    branch = asyncio.run(session.fork_session(new_session_id="main-b"))
    assert asyncio.run(branch.get_items()) == [user("a"), user("b")]
    asyncio.run(branch.add_items([user("B")]))
    assert asyncio.run(EventLogSession("main-b", log).get_items()) == [user("a"), user("b"), user("B")]
    assert {s.session_id for s in list_sessions(log)} == {"main", "main-b"}
    assert [(h.action, h.item) for h in branch.history()] == [("added", user("B"))]  # what is kept after the base
    assert session.history() == []
    log.append_many("run", [eventlog.events.StepCompleted(node="n", superstep=1)])
    log.checkpoints.save("run", 1)
    log.prune("run", before=1)  # pruned at its head by another reducer: not a session
    assert {s.session_id for s in list_sessions(log)} == {"main", "main-b"}


def test_session_on_a_sealed_log(open_log: Any, backend: str) -> None:
    pytest.importorskip("cryptography")
    key = os.urandom(32)
    log = open_log(key=key)
    asyncio.run(EventLogSession("s", log).add_items([user("secret")]))
    log.close()
    again = open_log(key=key)
    assert asyncio.run(EventLogSession("s", again).get_items()) == [user("secret")]


def test_runner_keeps_its_conversation_in_the_session(log: eventlog.EventLog) -> None:
    model = ScriptedModel([[reply("Hi Ann")], [reply("You are Ann")]])
    session = EventLogSession("chat", log)
    first = asyncio.run(Runner.run(agent(model), "I am Ann", session=session))
    second = asyncio.run(Runner.run(agent(model), "Who am I?", session=session))
    assert (first.final_output, second.final_output) == ("Hi Ann", "You are Ann")
    texts = [str(i) for i in model.inputs[1]]
    assert any("I am Ann" in t for t in texts) and any("Hi Ann" in t for t in texts)
    assert len(asyncio.run(session.get_items())) == 4


@pytest.mark.parametrize("method", ["run", "run_sync", "run_streamed"])
def test_each_runner_method_keeps_separate_sessions(method: str) -> None:
    """The SDK's three ways to run, each with two sessions of one log: each remembers its own."""

    def run(model: ScriptedModel, text: str, session: EventLogSession) -> Any:
        if method == "run_sync":
            return Runner.run_sync(agent(model), text, session=session)

        async def go() -> Any:
            if method == "run":
                return await Runner.run(agent(model), text, session=session)
            streamed = Runner.run_streamed(agent(model), text, session=session)
            async for _ in streamed.stream_events():
                pass
            return streamed

        return asyncio.run(go())

    with eventlog.open(":memory:") as log:
        cats, dogs = EventLogSession("cats", log), EventLogSession("dogs", log)
        model = ScriptedModel([[reply("cats noted")], [reply("dogs noted")], [reply("you like cats")]])
        run(model, "I like cats", cats)
        run(model, "I like dogs", dogs)
        assert run(model, "What do I like?", cats).final_output == "you like cats"
        assert "dogs" not in str(model.inputs[2]) and "I like cats" in str(model.inputs[2])
        assert len(asyncio.run(cats.get_items())) == 4 and len(asyncio.run(dogs.get_items())) == 2


def test_a_run_on_a_sealed_log_resumes(open_log: Any, tmp_path: Path) -> None:
    pytest.importorskip("cryptography")
    key = os.urandom(32)
    log = open_log(key=key)
    dying = DyingModel(ADD_SCRIPT)
    dying.kill_at = 3
    with pytest.raises(Killed):
        asyncio.run(RunCheckpointer(log).run("job", agent(dying, tmp_path / "ledger"), "add"))
    log.close()
    again = open_log(key=key)
    result = asyncio.run(
        RunCheckpointer(again).run("job", agent(ScriptedModel(ADD_SCRIPT, skip=2), tmp_path / "ledger"))
    )
    assert result.final_output == "1+2=3 and 3+4=7"
    assert (tmp_path / "ledger").read_text().count("\n") == 2


# -- checkpoints in the middle of a run ------------------------------------------------------


class Killed(BaseException):
    """What the scripted model raises to end a run as a crash would (nothing after it runs)."""


class DyingModel(ScriptedModel):
    async def get_response(self, *args: Any, **kwargs: Any) -> Any:
        if self.calls + 1 == self.kill_at:
            raise Killed
        return await super().get_response(*args, **kwargs)


def test_run_resumes_after_the_last_completed_step(log: eventlog.EventLog, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    checkpointer = RunCheckpointer(log)
    dying = DyingModel(ADD_SCRIPT)
    dying.kill_at = 3
    with pytest.raises(Killed):
        asyncio.run(checkpointer.run("job", agent(dying, ledger), "add 1+2 and 3+4"))
    assert ledger.read_text().splitlines() == ["add 1 2", "add 3 4"]
    assert checkpointer.status("job") == "running"  # no end: killed
    saved = [e.event for e in log.read("job") if isinstance(e.event, RunStateSaved)]
    assert [s.model_calls for s in saved] == [0, 1, 2]

    model = ScriptedModel(ADD_SCRIPT, skip=2)
    result = asyncio.run(checkpointer.run("job", agent(model, ledger), "add 1+2 and 3+4"))
    assert result.final_output == "1+2=3 and 3+4=7"
    assert ledger.read_text().splitlines() == ["add 1 2", "add 3 4"]  # no tool call made twice
    assert model.calls == 3 and len(model.inputs) == 1  # one model call made, the last
    assert checkpointer.status("job") == "completed"
    with pytest.raises(RunFinishedError):
        asyncio.run(checkpointer.run("job", agent(model), None))
    with pytest.raises(CheckpointError):
        asyncio.run(RunCheckpointer(log).run("new", agent(model), None))


def test_a_run_killed_inside_a_tool_call_makes_only_that_call_again(log: eventlog.EventLog, tmp_path: Path) -> None:
    """Killed inside the second tool call: the resume takes the recorded second model response
    instead of calling the model, and makes the tool call that did not return; nothing else again."""
    from agents import Agent, function_tool

    ledger = tmp_path / "ledger"
    dying_at = {"add 3 4"}

    @function_tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        line = f"add {a} {b}"
        if line in dying_at:
            dying_at.clear()
            raise Killed
        with open(ledger, "a") as f:
            f.write(line + "\n")
        return a + b

    def clerk(model: ScriptedModel) -> Agent[Any]:
        return Agent(name="clerk", model=model, tools=[add])

    events: list[str] = []
    with pytest.raises(Killed):
        asyncio.run(
            RunCheckpointer(log).run(
                "job", clerk(ScriptedModel(ADD_SCRIPT)), "add", on_event=lambda e: events.append(e.type)
            )
        )
    assert "raw_response_event" in events
    model = ScriptedModel(ADD_SCRIPT, skip=2)
    result = asyncio.run(RunCheckpointer(log).run("job", clerk(model)))
    assert result.final_output == "1+2=3 and 3+4=7"
    assert ledger.read_text().splitlines() == ["add 1 2", "add 3 4"]
    assert model.calls == 3 and len(model.inputs) == 1  # only the last model call is made


class _KillAfterTool:
    """Run hooks that end the process as a crash would right after a tool call returned (and was recorded)."""

    def __getattr__(self, name: str) -> Any:
        async def nothing(*args: Any) -> None:
            if name == "on_tool_end":
                raise Killed

        return nothing


def test_a_tool_call_that_returned_before_a_kill_is_not_made_again(log: eventlog.EventLog, tmp_path: Path) -> None:
    """Killed right after the first tool call returned, before the next checkpoint: the resume
    takes the recorded model response and tool output; the tool is not called again."""
    ledger = tmp_path / "ledger"
    with pytest.raises(Killed):
        asyncio.run(
            RunCheckpointer(log).run("job", agent(ScriptedModel(ADD_SCRIPT), ledger), "add", hooks=_KillAfterTool())
        )
    assert ledger.read_text().splitlines() == ["add 1 2"]
    model = ScriptedModel(ADD_SCRIPT, skip=1)
    result = asyncio.run(RunCheckpointer(log).run("job", agent(model, ledger)))
    assert result.final_output == "1+2=3 and 3+4=7"
    assert ledger.read_text().splitlines() == ["add 1 2", "add 3 4"]
    assert model.calls == 3 and len(model.inputs) == 2  # the first model call is not made again
    state = log.state_at("job", reducer=AgentsReducer())
    assert state.run_state["generated_items"][1]["raw_item"]["output"] == "3"


def test_a_second_runner_of_the_same_run_is_fenced(log: eventlog.EventLog) -> None:
    """Two processes resume one run (a supervisor restarted it while it was only slow): the one
    whose checkpoint comes second stops at it, without writing over the other's line."""
    from agents import function_tool

    from eventlog.openai_agents import AgentRunStarted, ModelResponded, RunTakenError

    @function_tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        log.append("job", RunStateSaved(delta=None))  # the other runner checkpoints meanwhile
        return a + b

    from agents import Agent

    racing = Agent(name="clerk", model=ScriptedModel(ADD_SCRIPT), tools=[add])
    with pytest.raises(RunTakenError):
        asyncio.run(RunCheckpointer(log).run("job", racing, "add"))
    kinds = [type(e.event) for e in log.read("job")]
    assert kinds == [AgentRunStarted, RunStateSaved, ModelResponded, RunStateSaved]  # nothing after the other's


def test_a_run_started_then_made_again_by_another_writer_is_not_written_into(log: eventlog.EventLog) -> None:
    """Another writer deletes a run just started and starts it again (with its own input) before
    the runner's next append: the runner stops at that append (RunTakenError), and the other
    writer's run holds its own events only; before, the runner read the run's life back by id
    after its first append, took the other writer's life (at the same head) for its own and
    wrote its checkpoints and the model's answers into it."""
    from eventlog.openai_agents import AgentRunStarted, RunTakenError

    theirs = AgentRunStarted(agent="other", input="another input")
    commit = log.engine.commit
    real = commit.commit

    def then_made_again(*args: Any, **kwargs: Any) -> Any:  # right after the run's first append commits
        commit.commit = real  # type: ignore[method-assign]
        slot = real(*args, **kwargs)
        log.delete_run("job")
        log.append("job", theirs)
        return slot

    commit.commit = then_made_again  # type: ignore[method-assign]
    with pytest.raises(RunTakenError):
        asyncio.run(RunCheckpointer(log).run("job", agent(ScriptedModel(ADD_SCRIPT)), "add"))
    assert [e.event for e in log.read("job")] == [theirs]


def test_run_with_a_session_resumes_without_duplicate_items(log: eventlog.EventLog) -> None:
    checkpointer = RunCheckpointer(log)
    session = EventLogSession("conv", log)
    dying = DyingModel(ADD_SCRIPT)
    dying.kill_at = 3
    with pytest.raises(Killed):
        asyncio.run(checkpointer.run("job", agent(dying), "add", session=session))
    model = ScriptedModel(ADD_SCRIPT, skip=2)
    asyncio.run(checkpointer.run("job", agent(model), None, session=EventLogSession("conv", log)))
    kinds = [i.get("type", i.get("role")) for i in asyncio.run(session.get_items())]
    assert kinds == [
        "user",
        "function_call",
        "function_call_output",
        "function_call",
        "function_call_output",
        "message",
    ]


class _KilledAfterSecondWrite(EventLogSession):
    """A session whose process dies right after the SDK's second write (a turn's items) committed."""

    writes = 0

    async def add_items(self, items: list[Any]) -> None:
        await super().add_items(items)
        self.writes += 1
        if self.writes == 2:
            raise Killed


def test_items_written_to_the_session_after_the_last_checkpoint_are_not_written_twice(log: eventlog.EventLog) -> None:
    """Killed after the SDK wrote the first turn's items to the session, before the next
    checkpoint: the resumed run goes through that turn again and does not add them again."""
    with pytest.raises(Killed):
        asyncio.run(
            RunCheckpointer(log).run(
                "job", agent(ScriptedModel(ADD_SCRIPT)), "add", session=_KilledAfterSecondWrite("conv", log)
            )
        )
    session = EventLogSession("conv", log)
    assert len(asyncio.run(session.get_items())) == 3
    model = ScriptedModel(ADD_SCRIPT, skip=1)
    asyncio.run(RunCheckpointer(log).run("job", agent(model), session=session))
    kinds = [i.get("type", i.get("role")) for i in asyncio.run(session.get_items())]
    assert kinds == [
        "user",
        "function_call",
        "function_call_output",
        "function_call",
        "function_call_output",
        "message",
    ]
    assert len(model.inputs) == 2  # the first model call is taken from the log


class _KilledAfterThirdWrite(_KilledAfterSecondWrite):
    """Killed right after the second turn's items committed: the last checkpoint, taken before
    that turn's model call, saw the session's life."""

    async def add_items(self, items: list[Any]) -> None:
        await EventLogSession.add_items(self, items)
        self.writes += 1
        if self.writes == 3:
            raise Killed


def test_a_session_made_again_after_a_kill_is_not_taken_for_the_one_the_run_wrote(log: eventlog.EventLog) -> None:
    """The checkpoint's session head is an offset of the session's life then. Deleted and made
    again with the same items, the session is another life: the resumed run finds none of its
    own items there and adds every item of the turn it goes through again (before, it read the
    new life past the old head and skipped the items it found equal)."""
    with pytest.raises(Killed):
        asyncio.run(
            RunCheckpointer(log).run(
                "job", agent(ScriptedModel(ADD_SCRIPT)), "add", session=_KilledAfterThirdWrite("conv", log)
            )
        )
    session = EventLogSession("conv", log)
    items = asyncio.run(session.get_items())
    assert len(items) == 5
    first = log.life("conv")[0]
    log.delete_run("conv")
    asyncio.run(session.add_items(items))  # another life, the same items
    assert log.life("conv")[0] != first
    asyncio.run(RunCheckpointer(log).run("job", agent(ScriptedModel(ADD_SCRIPT, skip=2)), session=session))
    kinds = [i.get("type", i.get("role")) for i in asyncio.run(session.get_items())]
    turn = ["function_call", "function_call_output"]
    assert kinds == ["user", *turn, *turn, *turn, "message"]


def test_checkpoints_store_changes_not_whole_states(log: eventlog.EventLog) -> None:
    script = [[call("add", {"a": i, "b": i}, f"c{i}")] for i in range(8)] + [[reply("done")]]
    result = asyncio.run(RunCheckpointer(log).run("long", agent(ScriptedModel(script)), "sum"))
    enc = msgspec.msgpack.Encoder()
    saved = [e.event for e in log.read("long") if isinstance(e.event, RunStateSaved)]
    final = result.to_state().to_json()
    deltas = sum(len(enc.encode(s.delta)) for s in saved)
    # each checkpoint's full state would grow with the run: storing them all is quadratic
    fulls = sum(len(enc.encode(patch_upto(saved, k))) for k in range(1, len(saved) + 1))
    assert deltas < fulls / 2
    state = log.state_at("long", reducer=AgentsReducer())
    assert state.run_state["generated_items"] == final["generated_items"]


def patch_upto(saved: list[RunStateSaved], k: int) -> Any:
    state: Any = None
    for s in saved[:k]:
        state = patch(state, msgspec.msgpack.decode(msgspec.msgpack.encode(s.delta)))
    return state


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=3),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=2), children, max_size=4),
    max_leaves=20,
)


@given(a=_json, b=_json)
def test_diff_then_patch_gives_the_new_value(a: Any, b: Any) -> None:
    old = msgspec.json.decode(msgspec.json.encode(a))
    change = msgspec.msgpack.decode(msgspec.msgpack.encode(diff(a, b)))
    assert msgspec.json.encode(patch(old, change), order="sorted") == msgspec.json.encode(b, order="sorted")
    assert diff(b, b) is None


def test_a_tail_appended_to_two_lists_is_stored_once() -> None:
    a = {"generated": [1], "session": [1]}
    b = {"generated": [1, {"x": 1}], "session": [1, {"x": 1}]}
    c = {"generated": [1, {"x": 2}], "session": [1, {"x": 1}]}
    first = diff(a, b)
    assert first == {"{}": {"generated": {"+": [{"x": 1}]}, "session": {"+=": "generated"}}}
    state = patch(patch({"generated": [1], "session": [1]}, first), diff(b, c))
    assert state == c


def test_approval_answered_in_another_process(tmp_path: Path) -> None:
    """A run waits on a human's approval; another process records it; the run resumes and the tool runs once."""
    path, ledger = tmp_path / "log", tmp_path / "ledger"
    with eventlog.open(path) as log:
        checkpointer = RunCheckpointer(log)
        result = asyncio.run(checkpointer.run("refund", agent(ScriptedModel(REFUND_SCRIPT), ledger), "refund A-17"))
        assert result.interruptions and checkpointer.status("refund") == "interrupted"
        [pending] = checkpointer.pending_approvals("refund")
        assert (pending.call_id, pending.tool_name, pending.decision) == ("r1", "refund", None)
    approver = textwrap.dedent(
        f"""
        import eventlog
        from eventlog.openai_agents import RunCheckpointer
        with eventlog.open({str(path)!r}) as log:
            RunCheckpointer(log).approve("refund", "r1")
        """
    )
    subprocess.run([sys.executable, "-c", approver], check=True, env=_env(), timeout=120)
    assert not ledger.exists()
    with eventlog.open(path) as log:
        checkpointer = RunCheckpointer(log)
        assert checkpointer.pending_approvals("refund")[0].decision is True
        loaded = asyncio.run(checkpointer.load("refund", agent(ScriptedModel([]))))
        assert [i.call_id for i in loaded.get_interruptions()] == ["r1"]
        model = ScriptedModel(REFUND_SCRIPT, skip=1)
        result = asyncio.run(checkpointer.run("refund", agent(model, ledger)))
        assert result.final_output == "Order A-17 is refunded."
        assert ledger.read_text().splitlines() == ["refund A-17"] and model.calls == 2
        assert checkpointer.status("refund") == "completed"


def test_an_approved_tool_call_is_not_made_again_after_a_kill(log: eventlog.EventLog, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    checkpointer = RunCheckpointer(log)
    asyncio.run(checkpointer.run("r", agent(ScriptedModel(REFUND_SCRIPT), ledger), "refund A-17"))
    checkpointer.approve("r", "r1")
    with pytest.raises(Killed):
        asyncio.run(checkpointer.run("r", agent(ScriptedModel(REFUND_SCRIPT, skip=1), ledger), hooks=_KillAfterTool()))
    assert ledger.read_text().splitlines() == ["refund A-17"]
    model = ScriptedModel(REFUND_SCRIPT, skip=1)
    result = asyncio.run(checkpointer.run("r", agent(model, ledger)))
    assert result.final_output == "Order A-17 is refunded."
    assert ledger.read_text().splitlines() == ["refund A-17"] and len(model.inputs) == 1


def test_rejection_is_sent_to_the_model(log: eventlog.EventLog, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    checkpointer = RunCheckpointer(log)
    asyncio.run(checkpointer.run("r", agent(ScriptedModel(REFUND_SCRIPT), ledger), "refund A-17"))
    with pytest.raises(CheckpointError):
        checkpointer.approve("r", "no-such-call")
    checkpointer.reject("r", "r1", message="not allowed")
    model = ScriptedModel([[], [reply("I could not refund it.")]], skip=1)
    result = asyncio.run(checkpointer.run("r", agent(model, ledger)))
    assert result.final_output == "I could not refund it." and not ledger.exists()
    assert "not allowed" in str(model.inputs[0])


RESUMABLE = textwrap.dedent(
    """
    import asyncio, pathlib, sys
    import eventlog
    from eventlog.openai_agents import RunCheckpointer
    from openai_agents_app import ADD_SCRIPT, KillAfterTool, ScriptedModel, agent
    path, ledger, skip, kill_after_tool = sys.argv[1], pathlib.Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    hooks = KillAfterTool(kill_after_tool) if kill_after_tool else None
    with eventlog.open(path) as log:
        model = ScriptedModel(ADD_SCRIPT, skip=skip)
        result = asyncio.run(RunCheckpointer(log).run("job", agent(model, ledger), "add", hooks=hooks))
        print(result.final_output, model.calls, len(model.inputs), "'c2'" in str(model.inputs[0]) if model.inputs else "")
    """
)


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), str(HERE)])}


def test_run_killed_with_sigkill_resumes_in_another_process(tmp_path: Path) -> None:
    """A process SIGKILLed right after its second tool call returned (after the second model call,
    before the next checkpoint); another process resumes: only the third model call is made."""
    path, ledger = tmp_path / "log", tmp_path / "ledger"
    killed = subprocess.run(
        [sys.executable, "-c", RESUMABLE, str(path), str(ledger), "0", "2"],
        env=_env(),
        timeout=120,
        capture_output=True,
    )
    assert killed.returncode == -9, killed.stderr.decode()[-2000:]
    assert ledger.read_text().splitlines() == ["add 1 2", "add 3 4"]
    resumed = subprocess.run(
        [sys.executable, "-c", RESUMABLE, str(path), str(ledger), "2", "0"],
        env=_env(),
        timeout=120,
        capture_output=True,
    )
    assert resumed.returncode == 0, resumed.stderr.decode()[-2000:]
    # the model: one call in this process, the third (its input holds the second tool call's output)
    assert resumed.stdout.decode().split() == ["1+2=3", "and", "3+4=7", "3", "1", "True"]
    assert ledger.read_text().splitlines() == ["add 1 2", "add 3 4"]  # each tool call made once
    with eventlog.open(path) as log:
        assert RunCheckpointer(log).status("job") == "completed"
        assert log.verify().ok


# -- the view --------------------------------------------------------------------------------


def test_view_shows_sessions_and_runs_as_conversations(log: eventlog.EventLog) -> None:
    session = EventLogSession("chat", log)
    asyncio.run(Runner.run(agent(ScriptedModel([[reply("Hi Ann")]])), "I am Ann", session=session))
    state = VIEW.state(log, "chat", log.head("chat"))
    assert state["messages"] == [{"role": "user", "content": "I am Ann"}, {"role": "assistant", "content": "Hi Ann"}]
    columns, rows = VIEW.history(log, "chat", None)
    assert [r["event"] for r in rows] == ["item", "item"] and "offset" in columns

    asyncio.run(RunCheckpointer(log).run("job", agent(ScriptedModel(ADD_SCRIPT)), "add"))
    state = VIEW.state(log, "job", log.head("job"))
    assert state["status"] == "completed" and state["model_calls"] == 3
    roles = [m["role"] for m in state["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert state["messages"][1]["tool_calls"] == [{"name": "add", "args": '{"a": 1, "b": 2}'}]
    _, rows = VIEW.history(log, "job", 2)
    assert [r["event"] for r in rows] == ["run_state", "run_finished"]


def _registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The view as its entry point registers it (an installed eventlog has it; a source tree may not)."""
    from eventlog import views

    if all(v.name != VIEW.name for v in views.load_views()):
        monkeypatch.setattr(views, "_loaded", [*views.load_views(), VIEW])


def test_the_ui_shows_sessions_and_runs_as_conversations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("uvicorn")
    import html

    from ui_support import get, serving

    from eventlog.ui import readings
    from eventlog.views import view_for_run

    _registered(monkeypatch)
    with eventlog.open(tmp_path / "log") as log:
        asyncio.run(
            Runner.run(agent(ScriptedModel([[reply("Hi <Ann>")]])), "I am Ann", session=EventLogSession("chat", log))
        )
        asyncio.run(RunCheckpointer(log).run("job", agent(ScriptedModel(ADD_SCRIPT)), "add"))
        with serving(log) as url:
            _, listing, _ = get(url + "/")
            for run_id in ("chat", "job"):
                assert view_for_run(log, run_id) is VIEW
                assert f'data-run="{run_id}"' in listing
                status, page, _ = get(f"{url}/run?id={run_id}")
                assert status == 200 and f'class="tab on" href="/run?id={run_id}&amp;view=conversation' in page
                chat = readings.view_transcript(VIEW.state(log, run_id, log.head(run_id)))
                assert chat and page.count('<div class="msg r-') == len(chat)
                for bubble in chat:
                    assert html.escape(bubble.text or bubble.payload) in page
                _, page, _ = get(f"{url}/run?id={run_id}&view=checkpoints")
                assert page.count('<tr data-offset="') == len(VIEW.history(log, run_id, None)[1]) > 0


def test_the_command_line_shows_sessions_and_runs(tmp_path: Path) -> None:
    import json
    from importlib.metadata import entry_points

    env = {**_env(), "COLUMNS": "200"}
    if all(ep.name != "openai_agents" for ep in entry_points(group="eventlog.views")):
        site = tmp_path / "site" / "eventlog_openai_view-0.dist-info"
        site.mkdir(parents=True)
        (site / "METADATA").write_text("Metadata-Version: 2.1\nName: eventlog-openai-view\nVersion: 0\n")
        (site / "entry_points.txt").write_text("[eventlog.views]\nopenai_agents = eventlog.openai_agents:VIEW\n")
        env["PYTHONPATH"] += os.pathsep + str(site.parent)
    path = tmp_path / "log"
    with eventlog.open(path) as log:
        asyncio.run(
            Runner.run(agent(ScriptedModel([[reply("Hi Ann")]])), "I am Ann", session=EventLogSession("chat", log))
        )

    def cli(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "eventlog", "--log", str(path), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert "openai-agents" in cli("runs")
    assert [r["event"] for r in json.loads(cli("history", "chat", "--json"))] == ["item", "item"]
    state = json.loads(cli("state", "chat", "--json"))["state"]
    assert state["messages"] == [{"role": "user", "content": "I am Ann"}, {"role": "assistant", "content": "Hi Ann"}]


def test_bench_suite_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`python -m tools.bench openai_agents --quick`: both sessions hold the same items, and a
    checkpointed run stores less than its whole states would (figures not judged otherwise)."""
    from tools.bench._common import Context
    from tools.bench.openai_agents import run

    for name in ("EVENTLOG_BENCH_AGENT_TURNS", "EVENTLOG_BENCH_AGENT_STEPS"):
        monkeypatch.delenv(name, raising=False)  # the quick sizes
    res = run(Context(quick=True, workdir=str(tmp_path)))
    assert res.skipped is None
    assert {row.system for row in res.rows} >= {"SQLiteSession", "eventlog"}
    assert res.metrics["turns"] == 20 and res.metrics["items"] > 40
    cp = res.metrics["checkpoints"]
    assert cp["delta_json_bytes"] + cp["record_json_bytes"] < cp["full_json_bytes"]
