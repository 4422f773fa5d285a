"""`EventLogCheckpointer` as a `Checkpointer` of WayFlow's own Checkpointing API, when the installed
wayflowcore ships `wayflowcore.checkpointing` (WayFlow PR #159; not in wayflowcore 26.3.1).

Then `agent.start_conversation(conversation_id=..., checkpointer=EventLogCheckpointer(log))`
works natively: wayflowcore's conversation calls `save_conversation` at its own boundaries,
the checkpoint's `state` is wayflowcore's (its YAML envelope), and `load`/`load_latest` hand it
back for wayflowcore to deserialize. Such a conversation is a run whose `wayflow.started` shape
is `{"format": "wayflowcore.checkpointing", ...}`; each `wayflow.snapshot` stores what changed
in wayflowcore's envelope since the previous one. Restores stay read-only until the next save,
which rewinds the run (a branch keeps the replaced future) as for `start_conversation`'s
conversations. See docs/guides/wayflow.md, "WayFlow's own Checkpointing API".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from ._conversation import PendingRewind, rewind
from ._diff import diff, same
from ._events import ConversationStarted, Snapshot, WayflowState, conversation_writer, writers_life
from ._types import ConversationCheckpoint, WayflowCheckpointError, shipped_checkpointing

__all__ = ["NATIVE", "is_native", "native_text", "save_native", "store_native"]

NATIVE = "wayflowcore.checkpointing"
"""The `format` in the recorded shape of a conversation checkpointed through WayFlow's own API."""
_ENVELOPE = "wayflow-conversation-checkpoint"
"""The `checkpoint_format` of wayflowcore's own checkpoint states."""


def is_native(conversation: Any, checkpointer: Any) -> bool:
    """True for a wayflowcore conversation that WayFlow's own API checkpoints through `checkpointer`
    (not for one `start_conversation` made, which names its checkpointer too but is no wayflowcore
    conversation)."""
    if shipped_checkpointing() is None or getattr(conversation, "checkpointer", None) is not checkpointer:
        return False
    from wayflowcore.conversation import Conversation

    return isinstance(conversation, Conversation)


def save_native(
    checkpointer: Any,  # EventLogCheckpointer (not imported: it imports this module)
    conversation: Any,
    checkpoint_id: str | None,
    component_id: str | None,
    metadata: Mapping[str, Any] | None,
) -> ConversationCheckpoint:
    """Save through wayflowcore's `Checkpointer.save_conversation` (it builds the state and calls
    `_save_checkpoint`), after the rewind a restore of an older checkpoint calls for."""
    shipped = shipped_checkpointing()
    assert shipped is not None, "save_native is reached only when wayflowcore ships its checkpointing"
    log, conversation_id = checkpointer.log, str(conversation.id)
    rec = conversation_writer(log, conversation_id, checkpointer.reducer)
    head: WayflowState = rec.state
    if rec.offset and head.shape.get("format") != NATIVE:
        raise WayflowCheckpointError(
            f"conversation {conversation_id!r} is recorded by eventlog.wayflow.start_conversation; continue it "
            f"there, or start wayflowcore's conversation under another id"
        )
    restored = getattr(conversation, "checkpoint_id", None)
    if rec.offset and restored and restored != head.checkpoint_id:
        with writers_life(log, conversation_id, rec):
            line = checkpointer._line(conversation_id)
            found = next((cp for cp in line.visible if cp.checkpoint_id == restored), None)
            if found is not None:
                target = log.state_at(conversation_id, found.offset, reducer=checkpointer.reducer)
        if found is not None:  # restored from an older checkpoint: its first save rewinds
            public = checkpointer._public(conversation_id, line.state, found)
            rewind(log, rec, PendingRewind(public, head, target, rec.offset))
    sequences = checkpointer._save_sequence_by_conversation
    if conversation_id not in sequences:
        sequences[conversation_id] = checkpointer._last_sequence(conversation_id)
    shipped.Checkpointer.save_conversation(
        checkpointer,
        conversation,
        checkpoint_id=checkpoint_id,
        component_id=component_id,
        metadata=dict(metadata or {}),
    )
    saved: ConversationCheckpoint = checkpointer.load(conversation_id, str(conversation.checkpoint_id))
    return saved


def store_native(checkpointer: Any, checkpoint: Any) -> None:
    """wayflowcore's `_save_checkpoint`: one checkpoint of wayflowcore's own, stored as the change
    of its envelope since the conversation's previous one."""
    import yaml  # type: ignore[import-untyped]  # wayflowcore's dependency

    conversation_id, cid = str(checkpoint.conversation_id), str(checkpoint.checkpoint_id)
    loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        envelope = yaml.load(str(checkpoint.state), Loader=loader)  # the safe loader: builds no object
        back = msgspec.msgpack.decode(msgspec.msgpack.encode(envelope))
    except (yaml.YAMLError, TypeError, ValueError, OverflowError) as exc:
        raise WayflowCheckpointError(
            f"conversation {conversation_id!r}: checkpoint {cid!r} does not store ({exc})"
        ) from None
    if not (isinstance(envelope, dict) and envelope.get("checkpoint_format") == _ENVELOPE and same(back, envelope)):
        raise WayflowCheckpointError(
            f"conversation {conversation_id!r}: checkpoint {cid!r} is not one of wayflowcore's own ({_ENVELOPE!r})"
        )
    log = checkpointer.log
    rec = conversation_writer(log, conversation_id, checkpointer.reducer)
    head: WayflowState = rec.state
    events: list[Any] = []
    if rec.offset == 0:
        kind = envelope.get("conversation", {}).get("_component_type", "")
        shape = {"format": NATIVE, "id": str(checkpoint.component_id)}
        events.append(ConversationStarted(component_id=str(checkpoint.component_id), component_type=kind, shape=shape))
    elif head.shape.get("format") != NATIVE:
        raise WayflowCheckpointError(f"conversation {conversation_id!r} is recorded by eventlog.wayflow itself")
    checkpointer._refuse_taken(conversation_id, cid)
    md = dict(checkpoint.metadata)
    status, reason = str(md.get("status_type", "")), str(md.get("save_reason", "manual"))
    events.append(Snapshot(checkpoint_id=cid, delta=diff(head.conversation, envelope), status=status, reason=reason))
    rec.append_many(events)
    rec.checkpoint(metadata=md, checkpoint_id=cid)


def native_text(state: WayflowState) -> str:
    """wayflowcore's own checkpoint state (YAML) of a natively recorded conversation."""
    import yaml

    dumper: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    return str(yaml.dump(state.conversation, Dumper=dumper, sort_keys=False))
