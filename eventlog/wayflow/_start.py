"""`start_conversation`: a new conversation, or one restored from a checkpoint (a rewind keeps
the future it replaces as a branch run)."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

from ..errors import CheckpointNotFoundError
from ._checkpointer import EventLogCheckpointer
from ._conversation import CheckpointedConversation, PendingRewind
from ._events import WayflowState, conversation_writer, writers_life
from ._native import NATIVE
from ._serialize import RANDOM_ID, check_compatible, load_conversation, shape_of
from ._support import check_supported
from ._types import (
    CheckpointingInterval,
    NotAWayflowConversationError,
    RestoreWithMessagesError,
    WayflowCheckpointError,
)

if TYPE_CHECKING:
    from wayflowcore.conversationalcomponent import ConversationalComponent

__all__ = ["start_conversation"]


def start_conversation(
    component: ConversationalComponent,
    *,
    checkpointer: EventLogCheckpointer,
    messages: Any = None,
    inputs: dict[str, Any] | None = None,
    conversation_id: str | None = None,
    checkpoint_id: str | None = None,
    interval: CheckpointingInterval | None = None,
) -> CheckpointedConversation:
    """Start a conversation with a wayflowcore `Agent` or `Flow`, or restore one from its checkpoints.

    - No `conversation_id`, or one with no checkpoint yet: a new conversation (with `messages`
      and `inputs` as wayflowcore's `start_conversation` takes them).
    - An existing `conversation_id`: restored from its latest checkpoint, or from
      `checkpoint_id`. The conversation keeps its id. A restore writes nothing: when the
      checkpoint is not the conversation's latest state, the returned conversation's first
      write (`execute()` or a save) forks the future after the checkpoint to a branch run (see
      `EventLogCheckpointer.branches`) and continues from the checkpoint; until then
      `load_latest` and the listings are as they were.

    Refused before anything is written: new `messages` or `inputs` with a restore
    (RestoreWithMessagesError: restore, then append the message), a component that is not
    the one the conversation was started with, by id or shape (IncompatibleComponentError),
    and a component that is or holds an `OciAgent` (UnsupportedComponentError).
    `interval` defaults to the checkpointer's.
    """
    try:
        from wayflowcore.conversationalcomponent import ConversationalComponent
    except ImportError as exc:
        raise ImportError(f"eventlog.wayflow needs wayflowcore 26.3: pip install 'eventlog[wayflow]' ({exc})") from exc
    if not isinstance(component, ConversationalComponent):
        raise TypeError(f"start_conversation takes a wayflowcore Agent or Flow, not {type(component).__name__}")
    if not isinstance(checkpointer, EventLogCheckpointer):
        raise TypeError(f"checkpointer must be an EventLogCheckpointer, not {type(checkpointer).__name__}")
    takes_id = check_supported(component)
    interval = interval or checkpointer.checkpointing_interval
    if not isinstance(interval, CheckpointingInterval):
        raise TypeError(f"interval must be a CheckpointingInterval, not {type(interval).__name__}")
    log = checkpointer.log
    if conversation_id is None:
        if checkpoint_id is not None:
            raise WayflowCheckpointError("checkpoint_id needs the conversation_id it belongs to")
        conversation_id = f"conversation-{log.ids()}"
    shape = shape_of(component)
    if shape["id"] is not None and RANDOM_ID.match(shape["id"]):
        warnings.warn(
            f"{type(component).__name__} {component.name!r} has a randomly generated id ({component.id}); another "
            f"process cannot restore its checkpoints unless it is built with the same id: pass id=...",
            stacklevel=2,
        )
    recorder = conversation_writer(log, conversation_id, checkpointer.reducer)
    head_state: WayflowState = recorder.state
    checkpoint = None
    target = head_state
    if recorder.offset:
        if not head_state.component_id:
            raise NotAWayflowConversationError(
                f"run {conversation_id!r} exists but is not a WayFlow conversation (its first event is not "
                f"wayflow.started); choose another conversation_id"
            )
        if head_state.shape.get("format") == NATIVE:
            raise WayflowCheckpointError(
                f"conversation {conversation_id!r} is recorded through wayflowcore's own Checkpointing API: restore it "
                f"with {type(component).__name__}.start_conversation(conversation_id=..., checkpointer=...)"
            )
        check_compatible(conversation_id, head_state, component, shape)
        with writers_life(log, conversation_id, recorder):
            if checkpoint_id is not None:
                checkpoint = checkpointer.load(conversation_id, checkpoint_id)
            else:
                checkpoint = checkpointer.load_latest(conversation_id)
            if checkpoint is not None and head_state.checkpoint_id != checkpoint.checkpoint_id:
                target = log.state_at(conversation_id, checkpoint.offset, reducer=checkpointer.reducer)
    elif checkpoint_id is not None:
        raise CheckpointNotFoundError(
            f"conversation {conversation_id!r} does not exist, so it has no checkpoint {checkpoint_id!r}"
        )

    if checkpoint is None:
        start: Any = component.start_conversation
        if takes_id:
            conversation = start(inputs=inputs, messages=messages, conversation_id=conversation_id)
        else:
            conversation = start(inputs=inputs, messages=messages)
        conversation.id = conversation_id
        return CheckpointedConversation(
            checkpointer, conversation_id, component, conversation, recorder, interval, None, shape
        )

    if inputs or _has_messages(messages):
        raise RestoreWithMessagesError(
            f"conversation {conversation_id!r}: cannot restore checkpoint {checkpoint.checkpoint_id!r} and pass new "
            f"messages or inputs in the same call; restore the conversation first, then append the message"
        )
    # a conversation that cannot be rebuilt is refused here, before anything is written
    conversation = load_conversation(target.conversation, component, conversation_id)
    pending = None
    if head_state.checkpoint_id != checkpoint.checkpoint_id:  # read-only until this object's first write
        pending = PendingRewind(checkpoint, head_state, target, recorder.offset)
    return CheckpointedConversation(
        checkpointer, conversation_id, component, conversation, recorder, interval, checkpoint, shape, pending=pending
    )


def _has_messages(messages: Any) -> bool:
    if messages is None:
        return False
    if isinstance(messages, str | list | tuple):
        return len(messages) > 0
    return True
