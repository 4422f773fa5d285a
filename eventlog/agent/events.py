"""The standard event kinds of a run's life: runs, turns, messages, LLM and tool calls, steps and
supersteps, state updates, interrupts and resumes, registered when this module is imported."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from ..record.kinds import Event, register

__all__ = [
    "AssistantMessage",
    "Interrupted",
    "LLMCallCompleted",
    "LLMCallFailed",
    "LLMCallStarted",
    "Message",
    "Resumed",
    "RunCompleted",
    "RunFailed",
    "RunStarted",
    "StateUpdated",
    "StepCompleted",
    "StepFailed",
    "StepStarted",
    "SuperstepCompleted",
    "ToolCall",
    "ToolCallCompleted",
    "ToolCallFailed",
    "ToolCallStarted",
    "TurnCompleted",
    "TurnFailed",
    "TurnStarted",
    "UserMessage",
]


class ToolCall(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    """A tool call requested by an LLM."""

    id: str
    """Id that ties the call to its result."""
    name: str
    """Name of the tool."""
    arguments: dict[str, Any] = {}
    """Arguments, as the LLM gave them."""


class Message(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    """One chat message."""

    role: str
    """`system`, `user`, `assistant` or `tool`."""
    content: str = ""
    """The text."""
    tool_calls: Sequence[ToolCall] = ()
    """Tool calls an assistant message asks for; read back as a list, and `()` when there are
    none (a state of many messages keeps no empty list per message for the collector to walk)."""
    tool_call_id: str | None = None
    """For a `tool` message: the call it answers."""
    name: str | None = None
    """For a `tool` message: the tool's name."""


# -- run -------------------------------------------------------------------------------


class RunStarted(Event, frozen=True, tag="run.started"):
    """A run began with its input values."""

    input: dict[str, Any] = {}
    """Initial values of the state."""
    next_nodes: list[str] = []
    """Nodes to run in the first superstep (graph runs)."""
    graph: str | None = None
    """Name of the graph or agent that runs."""


class RunCompleted(Event, frozen=True, tag="run.completed"):
    """The run ended well."""

    output: Any = None
    """What the run returned."""


class RunFailed(Event, frozen=True, tag="run.failed"):
    """The run ended with an error."""

    error: str
    """The error, as text."""
    node: str | None = None
    """The node that failed, if any."""


# -- conversation ----------------------------------------------------------------------


class TurnStarted(Event, frozen=True, tag="turn.started"):
    """A conversation turn began."""

    turn: int
    """Number of the turn, from 1."""


class TurnCompleted(Event, frozen=True, tag="turn.completed"):
    """A conversation turn ended with the assistant's answer."""

    turn: int
    """Number of the turn, from 1."""


class TurnFailed(Event, frozen=True, tag="turn.failed"):
    """A conversation turn ended with an error."""

    turn: int
    """Number of the turn, from 1."""
    error: str
    """The error, as text."""


class UserMessage(Event, frozen=True, tag="message.user"):
    """A message from the user."""

    content: str
    """The text."""


class AssistantMessage(Event, frozen=True, tag="message.assistant"):
    """A message from the assistant that no LLM call produced (a canned or edited answer)."""

    content: str
    """The text."""
    tool_calls: list[ToolCall] = []
    """Tool calls the message asks for."""


# -- LLM and tools ---------------------------------------------------------------------


class LLMCallStarted(Event, frozen=True, tag="llm.started"):
    """An LLM was called.

    The prompt is the run's first `context_messages` messages followed by `messages`:
    the history already in the log is referenced, not stored again.
    """

    call_id: str
    """Id of the call, shared with its completion or failure."""
    model: str
    """Model name."""
    context_messages: int = 0
    """How many of the run's messages (from the first) the prompt holds."""
    messages: list[Message] = []
    """Extra messages sent that are not in the run's messages (a system prompt, say)."""
    parameters: dict[str, Any] = {}
    """Sampling parameters."""


class LLMCallCompleted(Event, frozen=True, tag="llm.completed"):
    """An LLM answered; its output message is appended to the run's messages."""

    call_id: str
    """Id of the call."""
    model: str
    """Model name."""
    output: Message
    """The message the LLM returned."""
    input_tokens: int = 0
    """Prompt tokens."""
    output_tokens: int = 0
    """Completion tokens."""
    latency_ms: float = 0.0
    """Wall time of the call."""


class LLMCallFailed(Event, frozen=True, tag="llm.failed"):
    """An LLM call failed."""

    call_id: str
    """Id of the call."""
    model: str
    """Model name."""
    error: str
    """The error, as text."""
    latency_ms: float = 0.0
    """Wall time of the call."""


class ToolCallStarted(Event, frozen=True, tag="tool.started"):
    """A tool was called."""

    call_id: str
    """Id of the call (the LLM's tool call id)."""
    tool: str
    """Tool name."""
    arguments: dict[str, Any] = {}
    """Arguments passed."""


class ToolCallCompleted(Event, frozen=True, tag="tool.completed"):
    """A tool returned; its output is appended to the run's messages as a `tool` message."""

    call_id: str
    """Id of the call."""
    tool: str
    """Tool name."""
    output: Any = None
    """What the tool returned."""
    latency_ms: float = 0.0
    """Wall time of the call."""


class ToolCallFailed(Event, frozen=True, tag="tool.failed"):
    """A tool raised."""

    call_id: str
    """Id of the call."""
    tool: str
    """Tool name."""
    error: str
    """The error, as text."""
    latency_ms: float = 0.0
    """Wall time of the call."""


# -- graph steps -----------------------------------------------------------------------


class StepStarted(Event, frozen=True, tag="step.started"):
    """A node began running in a superstep."""

    node: str
    """Node name."""
    superstep: int
    """Superstep number, from 1."""


class StepCompleted(Event, frozen=True, tag="step.completed"):
    """A node finished; its update is merged into the state's values."""

    node: str
    """Node name."""
    superstep: int
    """Superstep number, from 1."""
    update: dict[str, Any] = {}
    """Keys the node set."""


class StepFailed(Event, frozen=True, tag="step.failed"):
    """A node raised."""

    node: str
    """Node name."""
    superstep: int
    """Superstep number, from 1."""
    error: str
    """The error, as text."""


class SuperstepCompleted(Event, frozen=True, tag="superstep.completed"):
    """Every node of a superstep finished."""

    superstep: int
    """Superstep number, from 1."""
    next_nodes: list[str] = []
    """Nodes to run in the next superstep; empty when the graph reached its end."""


class StateUpdated(Event, frozen=True, tag="state.updated"):
    """Values changed by hand (an operator's edit, for example before a resume)."""

    values: dict[str, Any]
    """Keys set."""
    as_node: str | None = None
    """Node the edit is attributed to."""


class Interrupted(Event, frozen=True, tag="interrupted"):
    """The run paused for a human."""

    nodes: list[str]
    """Nodes paused."""
    reason: str = ""
    """Why, for the human."""
    payload: Any = None
    """What the human needs to decide."""


class Resumed(Event, frozen=True, tag="resumed"):
    """A paused run continued with a value from a human."""

    value: Any = None
    """The human's answer, delivered to the paused nodes."""
    nodes: list[str] = []
    """Nodes resumed (default: every paused node)."""


_STANDARD: tuple[type[Event], ...] = (
    RunStarted, RunCompleted, RunFailed,
    TurnStarted, TurnCompleted, TurnFailed, UserMessage, AssistantMessage,
    LLMCallStarted, LLMCallCompleted, LLMCallFailed,
    ToolCallStarted, ToolCallCompleted, ToolCallFailed,
    StepStarted, StepCompleted, StepFailed, SuperstepCompleted,
    StateUpdated, Interrupted, Resumed,
)  # fmt: skip


for _kind in _STANDARD:
    register(_kind)
