"""`start_conversation`: a new conversation, or one restored from a checkpoint (a rewind keeps
the future it replaces as a branch run)."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

from ..errors import CheckpointNotFoundError
from ..policy import CheckpointPolicy
from ._checkpointer import EventLogCheckpointer
from ._conversation import CheckpointedConversation, PendingRewind
from ._events import WayflowState
from ._serialize import RANDOM_ID, check_compatible, components_of, load_conversation, shape_of
from ._types import (
    CheckpointingInterval,
    NotAWayflowConversationError,
    RestoreWithMessagesError,
    UnsupportedComponentError,
    WayflowCheckpointError,
)

if TYPE_CHECKING:
    from wayflowcore.conversation import Conversation as WayflowConversation
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
    takes_id = _check_supported(component)
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
    recorder = log.recorder(conversation_id, reducer=checkpointer.reducer, policy=CheckpointPolicy.never())
    head_state: WayflowState = recorder.state
    checkpoint = None
    if recorder.offset:
        if not head_state.component_id:
            raise NotAWayflowConversationError(
                f"run {conversation_id!r} exists but is not a WayFlow conversation (its first event is not "
                f"wayflow.started); choose another conversation_id"
            )
        check_compatible(conversation_id, head_state, component, shape)
        if checkpoint_id is not None:
            checkpoint = checkpointer.load(conversation_id, checkpoint_id)
        else:
            checkpoint = checkpointer.load_latest(conversation_id)
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
    if head_state.checkpoint_id == checkpoint.checkpoint_id:
        target = head_state
    else:
        target = log.state_at(conversation_id, checkpoint.offset, reducer=checkpointer.reducer)
    # a conversation that cannot be rebuilt is refused here, before anything is written
    conversation = load_conversation(target.conversation, component, conversation_id)
    pending = None
    if head_state.checkpoint_id != checkpoint.checkpoint_id:  # read-only until this object's first write
        pending = PendingRewind(checkpoint, head_state, target, recorder.offset)
    return CheckpointedConversation(
        checkpointer, conversation_id, component, conversation, recorder, interval, checkpoint, shape, pending=pending
    )


def adopt(
    checkpointer: EventLogCheckpointer, conversation: WayflowConversation, component_id: str | None
) -> CheckpointedConversation:
    """A wayflowcore conversation not made by `start_conversation`, recorded under its own `id`
    (for `EventLogCheckpointer.save`): refused as `start_conversation` refuses, before any write."""
    from wayflowcore.conversation import Conversation

    if not isinstance(conversation, Conversation):
        raise TypeError(f"save() takes a conversation or a ConversationCheckpoint, not {type(conversation).__name__}")
    component = conversation.component
    _check_supported(component)
    conversation_id = str(conversation.id)
    shape = shape_of(component)
    if component_id is not None:
        shape["id"] = component_id
    recorder = checkpointer.log.recorder(conversation_id, reducer=checkpointer.reducer, policy=CheckpointPolicy.never())
    head: WayflowState = recorder.state
    if recorder.offset:
        if not head.component_id:
            raise NotAWayflowConversationError(
                f"run {conversation_id!r} exists but is not a WayFlow conversation; save the conversation under "
                f"another id"
            )
        check_compatible(conversation_id, head, component, shape)
    return CheckpointedConversation(
        checkpointer,
        conversation_id,
        component,
        conversation,
        recorder,
        checkpointer.checkpointing_interval,
        None,
        shape,
        component_id=component_id,
    )


def _check_supported(component: ConversationalComponent) -> bool:
    """Refuse a component this module cannot checkpoint, or one that holds one, by name; True when
    the component's own `start_conversation` takes a `conversation_id` (see docs/guides/wayflow.md,
    "Component kinds"): support is decided per kind, not by trying."""
    from wayflowcore.a2a.a2aagent import A2AAgent
    from wayflowcore.agent import Agent
    from wayflowcore.conversationalcomponent import ConversationalComponent
    from wayflowcore.flow import Flow
    from wayflowcore.managerworkers import ManagerWorkers
    from wayflowcore.ociagent import OciAgent
    from wayflowcore.swarm import Swarm

    kinds = (Agent, Flow, Swarm, ManagerWorkers, A2AAgent)
    for item in components_of(component).values():
        if not isinstance(item, ConversationalComponent) or isinstance(item, kinds):
            continue
        where = "" if item is component else f" inside {type(component).__name__} {component.id!r}"
        if isinstance(item, OciAgent):
            raise UnsupportedComponentError(
                f"OciAgent {item.name!r} (id {item.id!r}){where} keeps its conversation in the OCI Generative AI "
                f"service, which a checkpoint cannot save or restore; checkpoint a component without it"
            )
        raise UnsupportedComponentError(
            f"{type(item).__name__} {getattr(item, 'name', '')!r} (id {item.id!r}){where} is not a kind of component "
            f"eventlog.wayflow checkpoints (Agent, Flow, Swarm, ManagerWorkers, A2AAgent)"
        )
    return not isinstance(component, A2AAgent)


def _has_messages(messages: Any) -> bool:
    if messages is None:
        return False
    if isinstance(messages, str | list | tuple):
        return len(messages) > 0
    return True
