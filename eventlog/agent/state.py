"""`AgentReducer` and its `AgentState`: the standard events folded into what an agent or a graph
run is (status, values, messages, superstep, nodes, counts, token usage, last error).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from ..record.kinds import Event
from . import events as ev

__all__ = ["AgentReducer", "AgentState"]


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
        handlers: dict[type[Event], Callable[[AgentState, Any], None]] = {
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

    def apply(self, state: AgentState, event: Event) -> AgentState:
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
        s.messages.append(ev.Message(role="assistant", content=e.content, tool_calls=e.tool_calls or ()))

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
