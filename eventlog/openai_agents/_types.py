"""What eventlog.openai_agents hands out and raises."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import EventLogError

__all__ = [
    "CheckpointError",
    "HistoryEntry",
    "NotAnAgentsRunError",
    "PendingApproval",
    "RunFinishedError",
    "RunTakenError",
    "SessionInfo",
]


class CheckpointError(EventLogError):
    """A run's checkpoints cannot be read or resumed as asked."""


class NotAnAgentsRunError(CheckpointError):
    """The run exists but was not written by this module (or is a session, not an agent run, or the reverse)."""


class RunTakenError(CheckpointError):
    """Another writer appended to the agent run while this process ran it: this one stops (the log fences it)."""


class RunFinishedError(CheckpointError):
    """The agent run completed already: there is nothing to resume."""


@dataclass(frozen=True)
class HistoryEntry:
    """One event of a session, as `EventLogSession.history` lists it."""

    offset: int
    """The event's offset in the session's run (what `fork_session(at=...)` takes)."""
    time_ns: int
    action: str
    """`added`, `popped` or `cleared`."""
    item: Any = None
    """The item added, or the item a pop removed (None for a clear)."""
    removed: bool = False
    """For an `added` item: a later pop or clear removed it from the session."""


@dataclass(frozen=True)
class SessionInfo:
    """A session as `list_sessions` lists it."""

    session_id: str
    events: int
    """Events in its run (items added, pops, clears)."""
    parent: str | None
    """The session it was forked from, if any."""
    fork_offset: int
    created_ns: int


@dataclass(frozen=True)
class PendingApproval:
    """A tool call an interrupted run waits on a decision for."""

    call_id: str
    tool_name: str
    arguments: Any
    agent: str
    decision: bool | None = None
    """True (approved) or False (rejected) once recorded with `approve`/`reject`; None: still open."""
