"""The event kinds an OpenAI Agents SDK session and a checkpointed agent run are written as, and
`AgentsReducer`, the fold of either into `AgentsState`.

A session is a run of the log whose events are `openai_agents.item` (one per item the SDK
adds), `openai_agents.popped` (names the item event it removes: the item stays in the log)
and `openai_agents.cleared` (every item before it leaves the session, none leaves the log).

A checkpointed agent run is a run of the log that begins with `openai_agents.run_started`;
each `openai_agents.run_state` carries the change of the SDK's `RunState.to_json()` since the
previous one (see `_delta`); `openai_agents.approval` records a decision on a tool call the
run waits on; `openai_agents.run_finished` and `openai_agents.run_failed` end an attempt.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ..events import Event, register
from ._delta import patch

__all__ = [
    "AgentRunFailed",
    "AgentRunFinished",
    "AgentRunStarted",
    "AgentsReducer",
    "AgentsState",
    "ApprovalDecided",
    "ItemAdded",
    "ItemPopped",
    "ModelResponded",
    "RunStateSaved",
    "SessionCleared",
    "ToolReturned",
]


class ItemAdded(Event, frozen=True, tag="openai_agents.item"):
    """One item the SDK added to a session (a `TResponseInputItem`, as the JSON-able map it is)."""

    item: Any


class ItemPopped(Event, frozen=True, tag="openai_agents.popped"):
    """`pop_item` removed the item added at `offset` from the session; the log keeps it."""

    offset: int


class SessionCleared(Event, frozen=True, tag="openai_agents.cleared"):
    """`clear_session`: the `items` items held before leave the session; the log keeps them."""

    items: int = 0


class AgentRunStarted(Event, frozen=True, tag="openai_agents.run_started"):
    """An agent run began (`RunCheckpointer.run`); its state follows as `openai_agents.run_state`."""

    agent: str
    """Name of the starting agent."""
    input: Any = None
    """The run's input: a string or a list of items."""
    session_id: str | None = None
    """The session the run reads and writes, if any."""


class RunStateSaved(Event, frozen=True, tag="openai_agents.run_state"):
    """A checkpoint of the run in progress: the change of `RunState.to_json()` since the previous one."""

    delta: Any
    """The change (see `_delta`); the first one of a run holds the whole state."""
    turn: int = 0
    """The SDK's turn counter."""
    model_calls: int = 0
    """Model responses in the state."""
    items: int = 0
    """Items the run generated so far."""
    interruptions: list[dict[str, Any]] = msgspec.field(default_factory=list)
    """Tool calls waiting for approval: `call_id`, `tool_name`, `arguments`, `agent`."""
    session_head: int = -1
    """The head of the run's session (an `EventLogSession`) when the state was taken; -1: none or unknown."""
    session_number: int = 0
    """The run number of the session's life `session_head` is an offset of (0: not recorded, or
    the session had no life yet: the life it has at the resume is then taken as that one)."""


class ModelResponded(Event, frozen=True, tag="openai_agents.model_response"):
    """A model call returned (recorded before its tool calls run): a resume from the checkpoint
    before it takes this response instead of calling the model again."""

    output: list[Any]
    """The response's output items, as the JSON maps the Responses API gives."""
    agent: str = ""
    """Name of the agent that called the model."""
    response_id: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0


class ToolReturned(Event, frozen=True, tag="openai_agents.tool_output"):
    """A function tool call returned: a resume takes this output instead of calling the tool again."""

    call_id: str
    tool: str = ""
    output: Any = None


class ApprovalDecided(Event, frozen=True, tag="openai_agents.approval"):
    """A decision on a tool call an interrupted run waits on, applied when the run resumes."""

    call_id: str
    approved: bool
    always: bool = False
    """Approve (or reject) every later call of this tool by the same agent."""
    message: str | None = None
    """For a rejection: the text sent back to the model."""


class AgentRunFinished(Event, frozen=True, tag="openai_agents.run_finished"):
    """The run completed; `output` is its final output as plain data (or its text)."""

    output: Any = None
    agent: str = ""
    """Name of the last agent."""


class AgentRunFailed(Event, frozen=True, tag="openai_agents.run_failed"):
    """An attempt of the run raised; it may be resumed from its last checkpoint."""

    error: str


_KINDS: tuple[type[Event], ...] = (
    ItemAdded,
    ItemPopped,
    SessionCleared,
    AgentRunStarted,
    RunStateSaved,
    ModelResponded,
    ToolReturned,
    ApprovalDecided,
    AgentRunFinished,
    AgentRunFailed,
)
for _kind in _KINDS:
    register(_kind)


class AgentsState(msgspec.Struct, omit_defaults=True):
    """What `AgentsReducer` folds a session or an agent run into."""

    events: int = 0
    """Events folded: the offset of the state (each event's offset is the count after it)."""
    items: list[Any] = []
    """A session's items, oldest first (those popped or cleared left out)."""
    offsets: list[int] = []
    """The offset of each of `items`' events."""
    removed: int = 0
    """Items popped or cleared (still in the log)."""
    agent: str = ""
    """An agent run: the starting agent."""
    session_id: str | None = None
    input: Any = None
    """An agent run: the input it started with."""
    run_state: Any = None
    """An agent run: `RunState.to_json()` as of its last checkpoint."""
    status: str = ""
    """An agent run: `running`, `interrupted`, `completed` or `failed`."""
    turn: int = 0
    model_calls: int = 0
    interruptions: list[dict[str, Any]] = []
    decisions: dict[str, dict[str, Any]] = {}
    """Decisions recorded since the last checkpoint, by call id."""
    session_head: int = -1
    """The head of the run's session at the last checkpoint (-1: none or unknown)."""
    session_number: int = 0
    """The run number of the session's life that head belongs to (0: not recorded)."""
    responses: list[dict[str, Any]] = []
    """Model responses recorded since the last checkpoint (`ModelResponded` as maps), oldest first."""
    outputs: dict[str, Any] = {}
    """Tool outputs recorded since the last checkpoint, by call id."""
    output: Any = None
    error: str | None = None


class AgentsReducer:
    """Folds a session's or an agent run's events into `AgentsState` (deterministic, no I/O)."""

    name = "openai_agents"
    version = 1
    state_type = AgentsState

    def initial(self) -> AgentsState:
        return AgentsState()

    def apply(self, state: AgentsState, event: Event) -> AgentsState:
        s = state
        s.events += 1
        if isinstance(event, ItemAdded):
            s.items.append(event.item)
            s.offsets.append(s.events)
        elif isinstance(event, ItemPopped):
            if event.offset in s.offsets:
                i = s.offsets.index(event.offset)
                del s.items[i], s.offsets[i]
                s.removed += 1
        elif isinstance(event, SessionCleared):
            s.removed += len(s.items)
            s.items, s.offsets = [], []
        elif isinstance(event, AgentRunStarted):
            s.agent, s.session_id, s.status = event.agent, event.session_id, "running"
            s.input = event.input
        elif isinstance(event, RunStateSaved):
            s.run_state = patch(s.run_state, event.delta)
            s.turn, s.model_calls, s.session_head = event.turn, event.model_calls, event.session_head
            s.session_number = event.session_number
            s.interruptions = list(event.interruptions)
            s.status = "interrupted" if event.interruptions else "running"
            s.decisions, s.error, s.responses, s.outputs = {}, None, [], {}
        elif isinstance(event, ModelResponded):
            s.responses.append({"output": event.output, "agent": event.agent, "response_id": event.response_id})
            s.model_calls += 1
        elif isinstance(event, ToolReturned):
            s.outputs[event.call_id] = event.output
        elif isinstance(event, ApprovalDecided):
            s.decisions[event.call_id] = {"approved": event.approved, "always": event.always, "message": event.message}
        elif isinstance(event, AgentRunFinished):
            s.status, s.output = "completed", event.output
        elif isinstance(event, AgentRunFailed):
            s.status, s.error = "failed", event.error
        return s
