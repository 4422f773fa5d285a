"""`RunCheckpointer`: an agent run checkpointed in the middle, so that a process killed mid-run
resumes from the last completed step without repeating it.

The run goes through `Runner.run_streamed`, whose result can make a `RunState` at any time.
A run hook saves that state just before each model call: the state then holds every model
response and every tool output so far, and it is durable before the next step begins (the
SDK's run loop awaits the hook). A last checkpoint is saved when the run stops: at its end, or
at an interruption (tool calls waiting for a human decision). Each checkpoint stores the change
of `RunState.to_json()` since the previous one (`_delta`), not the whole state.

Between two checkpoints the hooks record each model response (`on_llm_end`, before its tool
calls run) and each function tool's output (`on_tool_end`), also awaited by the run loop.
Resuming loads the folded state (`RunState.from_json`), applies the decisions recorded with
`approve`/`reject` (from any process), and runs again from there, taking the recorded responses
and outputs instead of making those calls again (`_replay`).
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import msgspec

from .._limits import conflict_attempts_max
from ..aio import AsyncEventLog
from ..errors import ConflictError, RunReplacedError, UnknownRunError
from ..log import EventLog, made_by_append
from ._delta import diff
from ._events import (
    AgentRunFailed,
    AgentRunFinished,
    AgentRunStarted,
    AgentsReducer,
    AgentsState,
    ApprovalDecided,
    ModelResponded,
    RunStateSaved,
    ToolReturned,
)
from ._replay import Replay, replaying
from ._session import EventLogSession, SkippingSession
from ._types import CheckpointError, NotAnAgentsRunError, PendingApproval, RunFinishedError, RunTakenError

if TYPE_CHECKING:
    from agents import Agent, RunState

__all__ = ["RunCheckpointer"]


class RunCheckpointer:
    """Runs agents with a checkpoint of their `RunState` at each step, in runs of `log`.

        checkpointer = RunCheckpointer(log)
        result = await checkpointer.run("order-17", agent, "Refund order 17")
        # killed mid-run? the same call resumes from the last checkpoint:
        result = await checkpointer.run("order-17", agent, "Refund order 17")

    `context_serializer` and `context_deserializer` are passed to `RunState.to_json` and
    `from_json` for a run context that is not a mapping.
    """

    def __init__(
        self,
        log: EventLog[Any] | AsyncEventLog[Any],
        *,
        context_serializer: Callable[[Any], Any] | None = None,
        context_deserializer: Callable[[Any], Any] | None = None,
    ) -> None:
        self.log: EventLog[Any] = log.sync if isinstance(log, AsyncEventLog) else log
        self.context_serializer = context_serializer
        self.context_deserializer = context_deserializer
        self._reducer = AgentsReducer()

    # -- reading -----------------------------------------------------------------------------

    def state(self, run_id: str) -> AgentsState | None:
        """The run folded at its head (None: no such run). NotAnAgentsRunError for another run."""
        return self._life(run_id)[1]

    def _life(self, run_id: str) -> tuple[int, AgentsState | None]:
        """(run number, `state`) of the run's life now, both of that life; (0, None): no such run.
        What is written on what this read is fenced by that number: never into a later life."""
        try:
            with self.log.pinned(run_id) as info:
                if info.head == 0:
                    return 0, None
                state: AgentsState = self.log.state_at(run_id, reducer=self._reducer)
        except UnknownRunError:
            return 0, None
        if not state.status:
            raise NotAnAgentsRunError(f"{run_id} is not an agent run written by eventlog.openai_agents")
        return info.number, state

    def status(self, run_id: str) -> str | None:
        """`running` (or killed while running), `interrupted`, `completed`, `failed`; None: no such run."""
        state = self.state(run_id)
        return None if state is None else state.status

    def pending_approvals(self, run_id: str) -> list[PendingApproval]:
        """The tool calls the run waits on a decision for, with the decision recorded so far."""
        state = self.state(run_id)
        if state is None:
            return []
        out = []
        for i in state.interruptions:
            decided = state.decisions.get(i["call_id"])
            out.append(
                PendingApproval(
                    i["call_id"],
                    i["tool_name"],
                    i["arguments"],
                    i["agent"],
                    None if decided is None else decided["approved"],
                )
            )
        return out

    def approve(self, run_id: str, call_id: str, *, always: bool = False) -> None:
        """Record the approval of tool call `call_id`; the run's next resume (in any process) applies it."""
        self._decide(run_id, ApprovalDecided(call_id=call_id, approved=True, always=always))

    def reject(self, run_id: str, call_id: str, *, always: bool = False, message: str | None = None) -> None:
        """Record the rejection of tool call `call_id` (`message`: the text the model gets instead)."""
        self._decide(run_id, ApprovalDecided(call_id=call_id, approved=False, always=always, message=message))

    def _decide(self, run_id: str, event: ApprovalDecided) -> None:
        met: ConflictError | None = None  # the last conflict: its heads name the last attempt's
        for _ in range(conflict_attempts_max):
            number, state = self._life(run_id)
            if state is None or state.status != "interrupted":
                raise CheckpointError(
                    f"{run_id} waits on no decision (status {None if state is None else state.status})"
                )
            if event.call_id not in {i["call_id"] for i in state.interruptions}:
                raise CheckpointError(f"{run_id} waits on no tool call {event.call_id!r}")
            try:
                self.log.append(run_id, event, expected_offset=state.events, run_number=number)
            except RunReplacedError:
                raise  # decided on a life of the run that is gone: never recorded in the next
            except ConflictError as exc:  # another writer appended first: decide on the run as it is now
                met = exc
                continue
            return
        raise ConflictError.last_of(met, conflict_attempts_max) from None

    async def load(self, run_id: str, agent: Agent[Any]) -> RunState[Any, Any]:
        """The run's `RunState` at its last checkpoint, with the recorded decisions applied."""
        state = self.state(run_id)
        if state is None or state.run_state is None:
            raise CheckpointError(f"{run_id} has no checkpoint")
        return await self._restore(agent, state)

    # -- running -----------------------------------------------------------------------------

    async def run(
        self,
        run_id: str,
        agent: Agent[Any],
        input: str | list[Any] | None = None,
        *,
        on_event: Callable[[Any], Awaitable[None] | None] | None = None,
        **runner_kwargs: Any,
    ) -> Any:
        """Run `agent` on `input` as run `run_id`, or resume it: the completed result (`RunResultStreaming`).

        A new run starts from `input`. A run that exists and did not complete resumes from its
        last checkpoint (`input` may then be None; if given it must be the input it started
        with). RunFinishedError for a run that completed. `on_event` receives each stream
        event; the other keywords go to `Runner.run_streamed` (`session`, `context`,
        `max_turns`, `hooks`, `run_config`, ...)."""
        number, state = await asyncio.to_thread(self._life, run_id)
        session = runner_kwargs.get("session")
        if state is None:
            if input is None:
                raise CheckpointError(f"{run_id} does not exist: give the input to start it")
            started = AgentRunStarted(agent=agent.name, input=input, session_id=getattr(session, "session_id", None))
            # every later append names the life this one made (the run read back by id may be
            # another writer's already, made again to the same head): RunTakenError there
            [head], number = await asyncio.to_thread(made_by_append, self.log, run_id, [started])
            start: Any = input
            last: Any = None
        else:
            head = state.events
            if state.status == "completed":
                raise RunFinishedError(f"{run_id} completed already; its output: {state.output!r}")
            if input is not None and input != state.input:
                raise CheckpointError(f"{run_id} started with another input; resume it with input=None")
            replay = Replay(list(state.responses), dict(state.outputs))
            if session is not None and state.session_head >= 0:
                runner_kwargs["session"] = await asyncio.to_thread(
                    _skipping_written, session, state.session_head, state.session_number
                )
            agent = replaying(agent, replay, runner_kwargs.get("run_config"))
            start = state.input if state.run_state is None else await self._restore(agent, state)
            last = state.run_state
        from agents import Runner

        hooks = _hooks_class()(self, run_id, runner_kwargs.pop("hooks", None))
        hooks.replay = replay if state is not None else Replay()
        result = Runner.run_streamed(agent, start, hooks=hooks, **runner_kwargs)
        hooks.result, hooks.last, hooks.head, hooks.number = result, last, head, number
        hooks.session = session
        try:
            async for event in result.stream_events():
                if on_event is not None and (waiting := on_event(event)) is not None:
                    await waiting
        except Exception as error:
            if hooks.taken is not None:
                raise hooks.taken from error
            await hooks.append(AgentRunFailed(error=f"{type(error).__name__}: {error}"))
            raise
        await hooks.save()
        if not result.interruptions:
            await hooks.append(AgentRunFinished(output=_plain(result.final_output), agent=result.last_agent.name))
        return result

    def run_sync(self, run_id: str, agent: Agent[Any], input: str | list[Any] | None = None, **kwargs: Any) -> Any:
        """`run`, blocking (not from inside a running event loop)."""
        return asyncio.run(self.run(run_id, agent, input, **kwargs))

    async def _restore(self, agent: Agent[Any], state: AgentsState) -> RunState[Any, Any]:
        from agents import RunState

        run_state: RunState[Any, Any] = await RunState.from_json(
            agent, state.run_state, context_deserializer=self.context_deserializer
        )
        for item in run_state.get_interruptions():
            decided = state.decisions.get(str(item.call_id))
            if decided is None:
                continue
            if decided["approved"]:
                run_state.approve(item, always_approve=decided["always"])
            else:
                run_state.reject(item, always_reject=decided["always"], rejection_message=decided["message"])
        return run_state

    def _checkpoint(self, run_id: str, result: Any, last: Any) -> tuple[Any, RunStateSaved | None]:
        """The state of `result` now, and the event that stores its change since `last` (None: no change)."""
        run_state = result.to_state()
        now = run_state.to_json(context_serializer=self.context_serializer)
        delta = diff(last, now)
        if delta is None:
            return last, None
        interruptions = [
            {
                "call_id": str(item.call_id),
                "tool_name": str(item.name),
                "arguments": item.arguments,
                "agent": item.agent.name,
            }
            for item in run_state.get_interruptions()
        ]
        event = RunStateSaved(
            delta=delta,
            turn=int(now.get("current_turn") or 0),
            model_calls=len(now.get("model_responses") or ()),
            items=len(now.get("generated_items") or ()),
            interruptions=interruptions,
        )
        return now, event


@functools.cache
def _hooks_class() -> Any:
    """The run hooks that checkpoint (made once, at the first run: the SDK is imported then)."""
    from agents import RunHooks

    class _CheckpointHooks(RunHooks):
        """Saves a checkpoint before each model call, then calls the caller's hooks."""

        def __init__(self, checkpointer: RunCheckpointer, run_id: str, inner: RunHooks[Any] | None) -> None:
            self.checkpointer, self.run_id, self.inner = checkpointer, run_id, inner
            self.result: Any = None
            self.last: Any = None
            """The state as of the last checkpoint (what the next one stores the change from)."""
            self.head = 0
            """The run's head as this runner left it: each append is fenced by it."""
            self.number = 0
            """The number of the life of the run it read: each append is fenced by it too."""
            self.taken: RunTakenError | None = None
            self.replay = Replay()
            """What this resume takes from the log instead of making again."""
            self.session: Any = None
            """The run's session: an `EventLogSession`'s head is kept with each checkpoint."""
            self.recorded = False
            """A model response or tool output was recorded since the last checkpoint."""

        async def append(self, event: Any) -> None:
            try:
                self.head = await asyncio.to_thread(  # the life it read, or none
                    self.checkpointer.log.append, self.run_id, event, expected_offset=self.head,
                    run_number=self.number,
                )  # fmt: skip
            except ConflictError as error:
                self.taken = RunTakenError(
                    f"{self.run_id}: another writer appended at offset {error.head} (another resume of "
                    "the run, or a decision recorded while it ran): this one stops"
                )
                raise self.taken from error

        async def save(self) -> None:
            now, event = self.checkpointer._checkpoint(self.run_id, self.result, self.last)
            if event is None and self.recorded:
                event = RunStateSaved(delta=None)  # the records before it are now in the state
            if event is not None and isinstance(self.session, EventLogSession):
                number, head = await asyncio.to_thread(self.session.log.life, self.session.session_id)
                event = msgspec.structs.replace(event, session_head=head, session_number=number)
            if event is not None:
                await self.append(event)
                self.last, self.recorded = now, False

        async def on_llm_start(self, context: Any, agent: Any, system_prompt: Any, input_items: Any) -> None:
            await self.save()
            if self.inner is not None:
                await self.inner.on_llm_start(context, agent, system_prompt, input_items)

        async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
            if self.replay.served_response:
                self.replay.served_response = False  # recorded already
                self.recorded = True  # taken: the next checkpoint must say so
            else:
                usage = response.usage
                await self.append(
                    ModelResponded(
                        output=[item.model_dump(mode="json", exclude_none=True) for item in response.output],
                        agent=agent.name,
                        response_id=response.response_id,
                        input_tokens=int(getattr(usage, "input_tokens", 0) or 0),
                        output_tokens=int(getattr(usage, "output_tokens", 0) or 0),
                    )
                )
                self.recorded = True
            if self.inner is not None:
                await self.inner.on_llm_end(context, agent, response)

        async def on_agent_start(self, context: Any, agent: Any) -> None:
            if self.inner is not None:
                await self.inner.on_agent_start(context, agent)

        async def on_agent_end(self, context: Any, agent: Any, output: Any) -> None:
            if self.inner is not None:
                await self.inner.on_agent_end(context, agent, output)

        async def on_handoff(self, context: Any, from_agent: Any, to_agent: Any) -> None:
            if self.inner is not None:
                await self.inner.on_handoff(context, from_agent, to_agent)

        async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
            if self.inner is not None:
                await self.inner.on_tool_start(context, agent, tool)

        async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: Any) -> None:
            call_id = getattr(context, "tool_call_id", None)
            self.recorded = self.recorded or call_id in self.replay.served_calls
            if isinstance(call_id, str) and call_id not in self.replay.served_calls:
                await self.append(
                    ToolReturned(call_id=call_id, tool=str(getattr(tool, "name", "")), output=_plain(result))
                )
                self.recorded = True
            if self.inner is not None:
                await self.inner.on_tool_end(context, agent, tool, result)

    return _CheckpointHooks


def _skipping_written(session: Any, session_head: int, session_number: int) -> Any:
    """`session`, skipping the items the killed attempt wrote to it after the last checkpoint
    (the resumed run writes them again), when it is an `EventLogSession`. The head is an offset
    of the life `session_number` of the session the checkpoint was taken with: a session made
    again since, or another session, holds none of those items, and nothing is skipped."""
    if not isinstance(session, EventLogSession):
        return session
    written = session.items_added_after(session_head, run_number=session_number or None)
    return SkippingSession(session, written) if written else session


def _plain(value: Any) -> Any:
    """A final output as plain data: JSON-able values as they are, a pydantic model dumped, else its text."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        try:
            return dump(mode="json")
        except Exception:  # noqa: BLE001 - shown as text rather than lost
            return str(value)
    if isinstance(value, list | dict):
        try:
            return json.loads(json.dumps(value))
        except (TypeError, ValueError):
            return str(value)
    return str(value)
