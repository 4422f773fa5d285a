"""The OpenAI Agents SDK's sessions and agent runs kept in the log (the `openai-agents` extra).

    from eventlog.openai_agents import EventLogSession, RunCheckpointer

    session = EventLogSession("user-42", log)              # the SDK's Session protocol
    result = await Runner.run(agent, "Hello", session=session)

    checkpointer = RunCheckpointer(log)                    # checkpoints in the middle of a run
    result = await checkpointer.run("order-17", agent, "Refund order 17", session=session)

- A session is one run of the log named by its session id: one `openai_agents.item` event
  per item; `pop_item` and `clear_session` append `openai_agents.popped` and
  `openai_agents.cleared`, so the items they remove stay in the log (`history`);
  `fork_session(at=...)` is the log's fork; `list_sessions` lists them.
- A checkpointed agent run is one run of the log: `openai_agents.run_started`, then an
  `openai_agents.run_state` before each model call and when the run stops (the change of
  the SDK's `RunState.to_json()` since the previous one), between them an
  `openai_agents.model_response` after each model call and an `openai_agents.tool_output`
  after each function tool call, `openai_agents.approval` for each decision on a tool call the
  run waits on, and `openai_agents.run_finished` (or `run_failed`). A process killed mid-run
  resumes with the same `run` call from the last checkpoint, taking the responses and outputs
  recorded after it: no model call or tool call that returned is made again.

Reading (the listings, the reducer, the command line's view) needs the SDK only for the
checkpointer's `run` and `load`. See docs/guides/openai-agents.md.

The package: `_types` (what it hands out and raises), `_events` (the event kinds and the
fold), `_delta` (the change between two states), `_session` (`EventLogSession`),
`_checkpointer` (`RunCheckpointer`), `_replay` (what a resume takes from the log) and `_view` (the command line's and the UI's view).
"""

from __future__ import annotations

from ._checkpointer import RunCheckpointer
from ._events import (
    AgentRunFailed,
    AgentRunFinished,
    AgentRunStarted,
    AgentsReducer,
    AgentsState,
    ApprovalDecided,
    ItemAdded,
    ItemPopped,
    ModelResponded,
    RunStateSaved,
    SessionCleared,
    ToolReturned,
)
from ._session import EventLogSession, list_sessions
from ._types import (
    CheckpointError,
    HistoryEntry,
    NotAnAgentsRunError,
    PendingApproval,
    RunFinishedError,
    RunTakenError,
    SessionInfo,
)
from ._view import VIEW

__all__ = [
    "VIEW",
    "AgentRunFailed",
    "AgentRunFinished",
    "AgentRunStarted",
    "AgentsReducer",
    "AgentsState",
    "ApprovalDecided",
    "CheckpointError",
    "EventLogSession",
    "HistoryEntry",
    "ItemAdded",
    "ItemPopped",
    "ModelResponded",
    "NotAnAgentsRunError",
    "PendingApproval",
    "RunCheckpointer",
    "RunFinishedError",
    "RunStateSaved",
    "RunTakenError",
    "SessionCleared",
    "SessionInfo",
    "ToolReturned",
    "list_sessions",
]
