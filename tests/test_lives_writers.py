"""A write decided on one life of a run never lands in the next, through the writers above the
core: the conversation loop (its restore, its approvals), the Agents SDK's run checkpointer, a
WayFlow rewind.

Each test deletes the run and makes it again (to the same head where that matters) exactly
between a read and the write decided on it: a log calls its clock as each write is prepared,
before its transaction, and `Between` runs the other writer's work at the call it is armed for.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

import eventlog
from eventlog.agent.conversation import Agent
from eventlog.agent.events import LLMCallCompleted, LLMCallStarted, Message, ToolCall, TurnStarted, UserMessage
from eventlog.errors import RunReplacedError


class Between:
    """A log's clock: once armed, it runs `action` at its (skip + 1)-th call from then."""

    def __init__(self) -> None:
        self.action: Callable[[], None] | None = None
        self.skip = 0
        self.fired = False

    def arm(self, action: Callable[[], None], skip: int = 0) -> None:
        self.action, self.skip = action, skip

    def __call__(self) -> int:
        if self.action is not None:
            if self.skip:
                self.skip -= 1
            else:
                action, self.action = self.action, None
                action()
                self.fired = True
        return time.time_ns()


@pytest.fixture
def between() -> Between:
    return Between()


@pytest.fixture
def log(open_log: Callable[..., eventlog.EventLog], between: Between) -> eventlog.EventLog:
    return open_log(clock=between)


def echo() -> Agent:
    return Agent(lambda messages: Message(role="assistant", content=f"reply to {messages[-1].content}"), model="m")


def test_a_restore_never_forks_the_next_life(log: eventlog.EventLog, between: Between) -> None:
    chat = echo().start_conversation(log, "c")
    for i in range(3):
        chat.send(f"life 1, message {i}")
    first = chat.checkpoints()[0]

    def remake() -> None:
        log.delete_run("c")
        again = echo().start_conversation(log, "c")
        for i in range(6):
            again.send(f"life 2, message {i}")

    between.arm(remake)  # at the restore's first write: the branch run's fork
    with pytest.raises(RunReplacedError):
        echo().start_conversation(log, "c", checkpoint_id=first.checkpoint_id)
    assert between.fired
    assert [r for r in log.runs() if r.startswith("c~")] == []  # no branch of life 2 left behind
    assert log.run_info("c").forks == 0
    log.delete_run("c")  # nothing holds life 2


def pay_agent(paid: list[int]) -> Agent:
    def llm(messages: list[Message]) -> Message:
        if messages[-1].role == "tool":
            return Message(role="assistant", content="done")
        return Message(role="assistant", tool_calls=[ToolCall(id="t1", name="pay", arguments={"amount": 100})])

    def pay(amount: int) -> str:
        paid.append(amount)
        return f"paid {amount}"

    return Agent(llm, tools={"pay": pay}, confirm=["pay"], model="m")


def test_an_approval_given_on_one_life_never_runs_a_call_of_the_next(log: eventlog.EventLog, between: Between) -> None:
    paid: list[int] = []
    chat = pay_agent(paid).start_conversation(log, "c")
    assert chat.send("pay the rent").status == "paused"

    def remake() -> None:  # life 2 asked for a call of the same id, and stopped before its approval
        log.delete_run("c")
        big = Message(role="assistant", tool_calls=[ToolCall(id="t1", name="pay", arguments={"amount": 100000})])
        log.append_many("c", [
            TurnStarted(turn=1), UserMessage(content="pay the deposit"),
            LLMCallStarted(call_id="x", model="m", context_messages=1),
            LLMCallCompleted(call_id="x", model="m", output=big),
        ])  # fmt: skip

    between.arm(remake, skip=1)  # after the approval's append, before the call starts
    with pytest.raises(RunReplacedError):
        chat.resume(True)
    assert between.fired
    head = log.head("c")
    for _ in range(2):  # the object stays of its own life, however often it is asked
        with pytest.raises(RunReplacedError):
            chat.execute()
    assert paid == [] and log.head("c") == head
    fresh = pay_agent(paid).start_conversation(log, "c")  # the new life, read anew, asks its own human
    assert fresh.execute().status == "paused" and paid == []


def test_an_agents_sdk_run_never_goes_on_in_the_next_life(log: eventlog.EventLog, between: Between) -> None:
    pytest.importorskip("agents", reason="needs the Agents SDK: pip install '.[openai-agents]'")
    from openai_agents_app import ADD_SCRIPT, ScriptedModel, agent

    from eventlog.openai_agents import AgentRunStarted, RunCheckpointer, RunStateSaved, RunTakenError

    class RemadeAtFirstCall(ScriptedModel):
        async def get_response(self, *args: object, **kwargs: object) -> object:
            if self.calls == 0:  # the run's head is 2 (started, checkpoint): life 2 gets there too
                log.delete_run("job")
                log.append_many(
                    "job", [AgentRunStarted(agent="other", input="refund order A-17"), RunStateSaved(delta=None)]
                )
            return await super().get_response(*args, **kwargs)

    with pytest.raises(RunTakenError):
        RunCheckpointer(log).run_sync("job", agent(RemadeAtFirstCall(ADD_SCRIPT)), "add")
    kinds = [type(e.event).__name__ for e in log.read("job")]
    assert kinds == ["AgentRunStarted", "RunStateSaved"]  # life 2 as its writer left it
    assert log.entry("job", 1).event.input == "refund order A-17"


def test_a_wayflow_rewind_read_on_one_life_is_never_written_to_the_next(log: eventlog.EventLog) -> None:
    pytest.importorskip("wayflowcore", reason="needs WayFlow: pip install '.[wayflow]'")
    from wayflow_app import build_agent, reply

    from eventlog.wayflow import VIEW, EventLogCheckpointer, start_conversation

    def three_turns(tag: str) -> None:
        answers = build_agent([reply(f"{tag} answer {i}") for i in (1, 2, 3)])
        c = start_conversation(answers, messages=f"{tag} question 1", checkpointer=checkpointer, conversation_id="c")
        c.execute()
        for i in (2, 3):
            c.append_user_message(f"{tag} question {i}")
            c.execute()

    checkpointer = EventLogCheckpointer(log)
    three_turns("old")
    chosen = checkpointer.list_checkpoints("c")[-2]
    rewound = start_conversation(
        build_agent([reply("after the rewind")]), conversation_id="c", checkpoint_id=chosen.checkpoint_id,
        checkpointer=checkpointer,
    )  # fmt: skip
    log.delete_run("c")
    three_turns("new")  # life 2, to the same head
    head = log.head("c")
    rewound.append_user_message("a follow-up on life 1")
    for _ in range(2):
        with pytest.raises(RunReplacedError):
            rewound.execute()
    assert log.head("c") == head and [r for r in log.runs() if r.startswith("c~")] == []
    texts = [m["content"] for m in VIEW.state(log, "c", head)["messages"]]
    assert all(t.startswith("new ") for t in texts)
