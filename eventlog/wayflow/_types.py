"""What eventlog.wayflow hands out and raises: checkpoints and branches of a conversation, the
checkpointing intervals, and the errors."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from ..errors import EventLogError

__all__ = [
    "CheckpointingInterval",
    "ConversationBranch",
    "ConversationCheckpoint",
    "IncompatibleComponentError",
    "NotAWayflowConversationError",
    "RestoreWithMessagesError",
    "UnsupportedComponentError",
    "WayflowCheckpointError",
]


class WayflowCheckpointError(EventLogError):
    """A WayFlow conversation cannot be checkpointed or restored as asked."""


class IncompatibleComponentError(WayflowCheckpointError, ValueError):
    """The component given to restore a conversation is not the one its checkpoints were made with."""


class RestoreWithMessagesError(WayflowCheckpointError, ValueError):
    """A checkpoint was restored and new messages or inputs were passed in the same call."""


class NotAWayflowConversationError(WayflowCheckpointError):
    """The run exists but was not written by this module."""


class UnsupportedComponentError(WayflowCheckpointError, ValueError):
    """The component, or one nested in it, is of a kind this module cannot checkpoint (an `OciAgent`)."""


class CheckpointingInterval(enum.Enum):
    """Which completed execution boundary saves a checkpoint, as in WayFlow's Checkpointing API."""

    CONVERSATION_TURNS = "conversation_turns"
    """After each `execute()` that returns (a conversation turn)."""
    LLM_TURNS = "llm_turns"
    """After each agent or flow iteration in which an LLM answered, and after each turn."""
    ALL_INTERNAL_TURNS = "all_internal_turns"
    """After every agent or flow iteration, and after each turn."""


@dataclass(frozen=True)
class ConversationCheckpoint:
    """A saved point of a conversation."""

    checkpoint_id: str
    """Id of the checkpoint (unique in its conversation)."""
    conversation_id: str
    """The conversation (run) it was listed for."""
    component_id: str
    """Id of the Agent or Flow the conversation runs."""
    created_at: int
    """When it was saved, in seconds since the Unix epoch."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """`save_reason`, `turn`, `message_count`, `status_type`, `current_step_name`, and what the caller added."""
    offset: int = 0
    """The offset of the run it stands at."""

    @property
    def id(self) -> str:
        """The checkpoint id."""
        return self.checkpoint_id


@dataclass(frozen=True)
class ConversationBranch:
    """A future that a rewind replaced, kept as a run forked from the conversation."""

    branch_id: str
    """The branch's run id: a conversation id that `start_conversation` can restore."""
    conversation_id: str
    """The conversation that was rewound."""
    checkpoint_id: str
    """The checkpoint the conversation was rewound to."""
    offset: int
    """That checkpoint's offset: the branch and the conversation share every event up to it."""
    head: int
    """The offset where the replaced future ends (the branch's fork offset)."""
