"""Folding: the reducer protocol, `AgentReducer` and its `AgentState`.

A reducer is a pure, deterministic fold: `apply(state, event) -> state`. `apply` may change
the state it is given in place and return it (the log only hands it states it owns), but
its result must depend on nothing but the state and the event: no clock, no randomness, no
I/O. `verify` re-folds every run and names a checkpoint whose bytes differ.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar, runtime_checkable

import msgspec

from . import events as ev
from .errors import InvalidArgumentError

__all__ = ["AgentReducer", "AgentState", "Reducer", "check_reducer", "reducer_or", "reducer_tag"]

S = TypeVar("S")


@runtime_checkable
class Reducer(Protocol[S]):
    """What `state_at`, checkpoints and run writers fold with; generic in its state `S`.

    Two methods are optional, looked up by name:

    - `upgrade(state, from_version) -> S`: a state saved by an older `version` of this
      reducer (decoded as plain msgpack data) made into a state of this version. Without
      it, a run pruned under an older version cannot be read by this one.
    - `summarize(state) -> dict`: a few facts of the state kept in each checkpoint record,
      so that a listing of checkpoints need not fold (`Checkpoint.summary`).
    """

    name: str
    """Stable name; recorded in every checkpoint."""
    version: int
    """Bump it whenever `apply` changes: checkpoints of another version are not used."""
    state_type: Any
    """The type states decode to (a msgspec Struct, `dict`, or `typing.Any`)."""

    def initial(self) -> S:
        """The state at offset 0, before any event."""
        ...

    def apply(self, state: S, event: ev.Event) -> S:
        """The state after `event`. May update `state` in place and return it."""
        ...


def check_reducer(reducer: object) -> None:
    """Raise InvalidArgumentError unless `reducer` has a usable name, version, initial and apply."""
    name, version = getattr(reducer, "name", None), getattr(reducer, "version", None)
    if not isinstance(name, str) or not name or "@" in name or len(name.encode("utf-8", "replace")) > 128:
        raise InvalidArgumentError(f"a reducer needs a `name`: a short string without '@', not {name!r}")
    if not name.isprintable():  # a lone surrogate, a control character
        raise InvalidArgumentError(f"a reducer's `name` must be printable unicode text, not {name!r}")
    if type(version) is not int or not 0 <= version < 1 << 32:
        raise InvalidArgumentError(f"reducer {name!r} needs an integer `version` in 0..2**32-1, not {version!r}")
    if not callable(getattr(reducer, "initial", None)) or not callable(getattr(reducer, "apply", None)):
        raise InvalidArgumentError(f"reducer {name!r} needs `initial()` and `apply(state, event)` methods")
    if not hasattr(reducer, "state_type"):
        raise InvalidArgumentError(f"reducer {name!r} needs a `state_type` (the type its states decode to)")


def reducer_or(reducer: object, default: Reducer[Any]) -> Reducer[Any]:
    """`reducer` once checked, or `default` when it is None."""
    if reducer is None:
        return default
    check_reducer(reducer)
    return reducer  # type: ignore[return-value]


def reducer_tag(reducer: Reducer[Any]) -> bytes:
    """The bytes that name a reducer and its version in snapshot keys."""
    return f"{reducer.name}@{reducer.version}".encode()


class AgentState(msgspec.Struct, omit_defaults=True):
    """What `AgentReducer` folds the standard events into."""

    status: str = "pending"
    """`pending`, `running`, `paused`, `completed` or `failed`."""
    values: dict[str, Any] = {}
    """The graph state: every node update and hand edit merged in order."""
    messages: list[ev.Message] = []
    """The conversation: user, assistant (LLM output) and tool messages, in order."""
    superstep: int = 0
    """Last superstep completed."""
    completed_nodes: list[str] = []
    """Every node that has completed at least once, in order of first completion."""
    superstep_nodes: list[str] = []
    """Nodes completed in the superstep in progress (a resume does not run them again)."""
    next_nodes: list[str] = []
    """Nodes that run in the next superstep."""
    paused_nodes: list[str] = []
    """Nodes waiting for a human."""
    interrupt: Any = None
    """The payload and reason of the pending interrupt: `{"reason": ..., "payload": ...}`."""
    resume_value: Any = None
    """The last value a human resumed with."""
    turn: int = 0
    """Conversation turns started."""
    llm_calls: int = 0
    """LLM calls completed."""
    tool_calls: int = 0
    """Tool calls completed."""
    input_tokens: int = 0
    """Prompt tokens over every LLM call."""
    output_tokens: int = 0
    """Completion tokens over every LLM call."""
    last_error: str | None = None
    """The latest error of a step, call, turn or the run."""
    output: Any = None
    """What the run returned."""


def _tool_content(output: Any) -> str:
    if isinstance(output, str):
        return output
    return msgspec.json.encode(output, order="deterministic").decode()


class AgentReducer:
    """Folds the standard event kinds into `AgentState`; other kinds leave the state as it is."""

    name = "agent"
    version = 1
    state_type = AgentState

    @staticmethod
    def summarize(state: AgentState) -> dict[str, Any]:
        """The graph facts each checkpoint keeps: superstep, completed and paused nodes, status."""
        return {
            "superstep": state.superstep,
            "completed_nodes": list(state.completed_nodes),
            "paused_nodes": list(state.paused_nodes),
            "status": state.status,
        }

    def __init__(self) -> None:
        handlers: dict[type[ev.Event], Callable[[AgentState, Any], None]] = {
            ev.RunStarted: self._run_started,
            ev.RunCompleted: self._run_completed,
            ev.RunFailed: self._run_failed,
            ev.TurnStarted: self._turn_started,
            ev.TurnFailed: self._turn_failed,
            ev.UserMessage: self._user_message,
            ev.AssistantMessage: self._assistant_message,
            ev.LLMCallCompleted: self._llm_completed,
            ev.LLMCallFailed: self._failed,
            ev.ToolCallCompleted: self._tool_completed,
            ev.ToolCallFailed: self._failed,
            ev.StepStarted: self._step_started,
            ev.StepCompleted: self._step_completed,
            ev.StepFailed: self._failed,
            ev.SuperstepCompleted: self._superstep_completed,
            ev.StateUpdated: self._state_updated,
            ev.Interrupted: self._interrupted,
            ev.Resumed: self._resumed,
        }
        self._handlers = handlers

    def initial(self) -> AgentState:
        return AgentState()

    def apply(self, state: AgentState, event: ev.Event) -> AgentState:
        handler = self._handlers.get(type(event))
        if handler is not None:
            handler(state, event)
        return state

    # Each handler updates the state in place.

    def _run_started(self, s: AgentState, e: ev.RunStarted) -> None:
        s.status = "running"
        s.values.update(e.input)
        s.next_nodes = list(e.next_nodes)

    def _run_completed(self, s: AgentState, e: ev.RunCompleted) -> None:
        s.status = "completed"
        s.output = e.output
        s.next_nodes = []

    def _run_failed(self, s: AgentState, e: ev.RunFailed) -> None:
        s.status = "failed"
        s.last_error = e.error

    def _turn_started(self, s: AgentState, e: ev.TurnStarted) -> None:
        s.status = "running"
        s.turn = e.turn

    def _turn_failed(self, s: AgentState, e: ev.TurnFailed) -> None:
        s.last_error = e.error

    def _user_message(self, s: AgentState, e: ev.UserMessage) -> None:
        s.messages.append(ev.Message(role="user", content=e.content))

    def _assistant_message(self, s: AgentState, e: ev.AssistantMessage) -> None:
        s.messages.append(ev.Message(role="assistant", content=e.content, tool_calls=e.tool_calls))

    def _llm_completed(self, s: AgentState, e: ev.LLMCallCompleted) -> None:
        s.messages.append(e.output)
        s.llm_calls += 1
        s.input_tokens += e.input_tokens
        s.output_tokens += e.output_tokens

    def _tool_completed(self, s: AgentState, e: ev.ToolCallCompleted) -> None:
        s.messages.append(ev.Message(role="tool", content=_tool_content(e.output), tool_call_id=e.call_id, name=e.tool))
        s.tool_calls += 1

    def _failed(self, s: AgentState, e: Any) -> None:
        s.last_error = e.error

    def _step_started(self, s: AgentState, e: ev.StepStarted) -> None:
        s.status = "running"

    def _step_completed(self, s: AgentState, e: ev.StepCompleted) -> None:
        s.values.update(e.update)
        if e.node not in s.completed_nodes:
            s.completed_nodes.append(e.node)
        s.superstep_nodes.append(e.node)

    def _superstep_completed(self, s: AgentState, e: ev.SuperstepCompleted) -> None:
        s.superstep = e.superstep
        s.superstep_nodes = []
        s.next_nodes = list(e.next_nodes)

    def _state_updated(self, s: AgentState, e: ev.StateUpdated) -> None:
        s.values.update(e.values)

    def _interrupted(self, s: AgentState, e: ev.Interrupted) -> None:
        s.status = "paused"
        s.paused_nodes = list(e.nodes)
        s.interrupt = {"reason": e.reason, "payload": e.payload}

    def _resumed(self, s: AgentState, e: ev.Resumed) -> None:
        s.status = "running"
        s.paused_nodes = [n for n in s.paused_nodes if e.nodes and n not in e.nodes]
        s.interrupt = None
        s.resume_value = e.value
