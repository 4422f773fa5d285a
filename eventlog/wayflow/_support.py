"""Which wayflowcore components this module checkpoints, decided per kind before any write, and a
wayflowcore conversation taken in to be saved (`adopt`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._conversation import CheckpointedConversation, Keeper
from ._events import WayflowState, conversation_writer
from ._serialize import check_compatible, components_of, shape_of
from ._types import NotAWayflowConversationError, UnsupportedComponentError

if TYPE_CHECKING:
    from wayflowcore.conversation import Conversation as WayflowConversation
    from wayflowcore.conversationalcomponent import ConversationalComponent

__all__ = ["adopt", "check_supported"]


def check_supported(component: ConversationalComponent) -> bool:
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


def adopt(
    checkpointer: Keeper, conversation: WayflowConversation, component_id: str | None
) -> CheckpointedConversation:
    """A wayflowcore conversation not made by `start_conversation`, recorded under its own `id`
    (for `EventLogCheckpointer.save`): refused as `start_conversation` refuses, before any write."""
    from wayflowcore.conversation import Conversation

    if not isinstance(conversation, Conversation):
        raise TypeError(f"save() takes a conversation or a ConversationCheckpoint, not {type(conversation).__name__}")
    component = conversation.component
    check_supported(component)
    conversation_id = str(conversation.id)
    shape = shape_of(component)
    if component_id is not None:
        shape["id"] = component_id
    recorder = conversation_writer(checkpointer.log, conversation_id, checkpointer.reducer)
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
