"""What eventlog.wayflow hands out and raises: checkpoints and branches of a conversation, the
checkpointing intervals, and the errors."""

from __future__ import annotations

import enum
import functools
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

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
    "shipped_checkpointing",
]


@functools.cache
def shipped_checkpointing() -> Any | None:
    """wayflowcore's own `wayflowcore.checkpointing` module when the installed wayflowcore ships it
    (WayFlow's Checkpointing API), else None; found without importing a wayflowcore that does not
    ship it (reading a log needs no wayflowcore)."""
    try:
        spec = importlib.util.find_spec("wayflowcore")
    except (ImportError, ValueError):
        return None
    places = [] if spec is None else list(spec.submodule_search_locations or [])
    if not any((Path(p) / "checkpointing" / "__init__.py").is_file() for p in places):
        return None
    try:
        import wayflowcore.checkpointing as shipped  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    return shipped


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
    """Which execution boundaries save a checkpoint, as in WayFlow's Checkpointing API (WayFlow's own
    enum when the installed wayflowcore ships `wayflowcore.checkpointing`)."""

    CONVERSATION_TURNS = "conversation_turns"
    """After each `execute()` that returns (a conversation turn)."""
    LLM_TURNS = "llm_turns"
    """When an agent or flow iteration starts after an LLM answered, and after each turn."""
    ALL_INTERNAL_TURNS = "all_internal_turns"
    """When every agent or flow iteration starts, and after each turn."""


if not TYPE_CHECKING:
    _SHIPPED = shipped_checkpointing()
    if _SHIPPED is not None:  # one enum for both APIs: WayFlow's listener compares with its own members
        CheckpointingInterval = _SHIPPED.CheckpointingInterval


@dataclass(frozen=True, init=False)
class ConversationCheckpoint:
    """A saved point of a conversation.

    Its `state` is portable: `EventLogCheckpointer.save(checkpoint)` writes it into another log
    (docs/guides/wayflow.md, "Save, and move a checkpoint to another log").
    """

    checkpoint_id: str
    """Id of the checkpoint (unique in its conversation)."""
    conversation_id: str
    """The conversation (run) it was listed for."""
    component_id: str
    """Id of the component the conversation runs."""
    created_at: int
    """When it was saved, in seconds since the Unix epoch."""
    metadata: dict[str, Any]
    """`save_reason`, `save_sequence`, `turn`, `message_count`, `current_step_name`, `status_type`
    (once the conversation has a status), for an internal checkpoint `event_type`,
    `agent_iteration`, `flow_step_name`, `nesting_level` and `llm_used_in_previous_turn`, and
    what the caller added."""
    offset: int
    """The offset of the run it stands at (0 for a checkpoint not read from a log)."""
    _state: str | None = field(repr=False, compare=False)
    _load: Callable[[], str] | None = field(repr=False, compare=False)

    def __init__(
        self,
        checkpoint_id: str,
        conversation_id: str,
        component_id: str,
        created_at: int,
        *,
        state: str | None = None,
        metadata: dict[str, Any] | None = None,
        offset: int = 0,
        _load: Callable[[], str] | None = None,
    ) -> None:
        if state is not None and not isinstance(state, str):
            raise TypeError(f"state must be a str, not {type(state).__name__}")
        for name, value in (
            ("checkpoint_id", checkpoint_id),
            ("conversation_id", conversation_id),
            ("component_id", component_id),
            ("created_at", created_at),
            ("metadata", dict(metadata or {})),
            ("offset", offset),
            ("_state", state),
            ("_load", _load),
        ):
            object.__setattr__(self, name, value)

    @property
    def id(self) -> str:
        """The checkpoint id."""
        return self.checkpoint_id

    @property
    def state(self) -> str:
        """The conversation at this checkpoint as portable text (JSON: the component's id, type and
        shape, the status and the serialized conversation), read from the log when first asked."""
        if self._state is None:
            if self._load is None:
                raise WayflowCheckpointError(f"checkpoint {self.checkpoint_id!r} carries no state")
            object.__setattr__(self, "_state", self._load())
        return cast("str", self._state)


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
