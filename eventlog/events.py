"""Event kinds: the standard execution events, and the registry for a user's own kinds.

Every event is a frozen msgspec Struct subclassing `Event`, tagged by a string that never
changes (`kind`). Schema evolution is a contract: new fields come last with defaults; a
kind's tag never changes; a renamed or reshaped kind is registered under a new tag. The
standard kinds live in the agent layer (agent/events.py), the registry in the record format
(record/kinds.py); this module names both.

A user's own kind::

    class Approved(eventlog.Event, tag="myapp.approved"):
        by: str

    eventlog.register(Approved)
"""

from __future__ import annotations

from .agent.events import (
    AssistantMessage,
    Interrupted,
    LLMCallCompleted,
    LLMCallFailed,
    LLMCallStarted,
    Message,
    Resumed,
    RunCompleted,
    RunFailed,
    RunStarted,
    StateUpdated,
    StepCompleted,
    StepFailed,
    StepStarted,
    SuperstepCompleted,
    ToolCall,
    ToolCallCompleted,
    ToolCallFailed,
    ToolCallStarted,
    TurnCompleted,
    TurnFailed,
    TurnStarted,
    UserMessage,
)
from .record.kinds import Event, kinds, register, upcaster

__all__ = [
    "AssistantMessage",
    "Event",
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
    "kinds",
    "register",
    "upcaster",
]
