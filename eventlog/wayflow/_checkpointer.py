"""`EventLogCheckpointer`: save, list, load and delete the checkpoints of WayFlow conversations,
and move a checkpoint from one log to another by its portable state."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..errors import CheckpointNotFoundError
from ..events import Event
from ..log import EventLog
from ..services.checkpoints import Checkpoint
from ._conversation import CheckpointedConversation
from ._diff import diff
from ._events import ConversationStarted, Snapshot, WayflowReducer, WayflowState, conversation_writer
from ._native import NATIVE, is_native, native_text, save_native, store_native
from ._portable import read_state_text, state_text
from ._serialize import check_stored_types
from ._support import adopt
from ._types import (
    CheckpointingInterval,
    ConversationBranch,
    ConversationCheckpoint,
    IncompatibleComponentError,
    NotAWayflowConversationError,
    WayflowCheckpointError,
    shipped_checkpointing,
)

if TYPE_CHECKING:
    from wayflowcore.conversation import Conversation as WayflowConversation

__all__ = ["EventLogCheckpointer"]


if TYPE_CHECKING:
    _Base = object
else:  # WayFlow's own Checkpointer, when the installed wayflowcore ships it (see _native)
    _Base = getattr(shipped_checkpointing(), "Checkpointer", object)


class EventLogCheckpointer(_Base):
    """Saves, lists, loads and deletes the checkpoints of WayFlow conversations kept in a log.

    When the installed wayflowcore ships `wayflowcore.checkpointing`, it is also a `Checkpointer`
    of that API: `component.start_conversation(checkpointer=EventLogCheckpointer(log))` works.
    """

    def __init__(
        self,
        log: EventLog[Any],
        *,
        interval: CheckpointingInterval = CheckpointingInterval.CONVERSATION_TURNS,
        checkpointing_interval: CheckpointingInterval | None = None,
    ):
        """`interval` is the default for conversations that `start_conversation` does not give one.
        `checkpointing_interval` is the same under WayFlow's checkpointers' name (give one of the two)."""
        if checkpointing_interval is not None:
            if interval is not CheckpointingInterval.CONVERSATION_TURNS and interval is not checkpointing_interval:
                raise TypeError("give interval or checkpointing_interval, not both")
            interval = checkpointing_interval
        if not isinstance(interval, CheckpointingInterval):
            raise TypeError(f"interval must be a CheckpointingInterval, not {type(interval).__name__}")
        self.log = log
        self.checkpointing_interval = interval
        self.reducer = WayflowReducer()
        self._save_sequence_by_conversation: dict[str, int] = {}  # WayFlow's base class counts saves here

    def save(
        self,
        checkpoint: CheckpointedConversation | WayflowConversation | ConversationCheckpoint,
        *,
        checkpoint_id: str | None = None,
        component_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> ConversationCheckpoint:
        """Save a checkpoint and return it.

        - A conversation (made by `start_conversation`, or a wayflowcore conversation, recorded
          under its `id`): a checkpoint of it as it is now (`save_reason` is `manual`).
        - A `ConversationCheckpoint` (from this log, another log, or built by hand around a
          `state` this module wrote): its state is written into this log as a new checkpoint of
          its conversation, with its id and metadata unless `checkpoint_id`/`metadata` are given.

        `component_id` names the component a new conversation is recorded with (a conversation
        recorded already keeps its own: another id is refused). A checkpoint id the
        conversation has already is refused (WayflowCheckpointError) with nothing written.
        """
        if isinstance(checkpoint, ConversationCheckpoint):
            return self._import(checkpoint, checkpoint_id, component_id, metadata)
        shipped = shipped_checkpointing()
        if shipped is not None and isinstance(checkpoint, shipped.ConversationCheckpoint):
            self._save_checkpoint(checkpoint)  # one of wayflowcore's own checkpointers', moved here
            return self.load(checkpoint.conversation_id, checkpoint.checkpoint_id)
        return self.save_conversation(
            checkpoint, checkpoint_id=checkpoint_id, component_id=component_id, metadata=metadata
        )

    def save_conversation(
        self,
        conversation: CheckpointedConversation | WayflowConversation,
        *,
        checkpoint_id: str | None = None,
        component_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> ConversationCheckpoint:
        """Save a checkpoint of a live conversation as it is now (see `save`)."""
        if is_native(conversation, self):  # wayflowcore's own conversation, checkpointed through its own API
            return save_native(self, conversation, checkpoint_id, component_id, metadata)
        if not isinstance(conversation, CheckpointedConversation):
            conversation = adopt(self, conversation, component_id)
        elif conversation.checkpointer.log is not self.log:
            raise WayflowCheckpointError(
                f"conversation {conversation.conversation_id!r} is kept in another log; save it with its own "
                f"checkpointer, or save one of its checkpoints here (its state moves with it)"
            )
        if component_id is not None and component_id != conversation._component_id():
            raise IncompatibleComponentError(
                f"conversation {conversation.conversation_id!r} is recorded with component "
                f"{conversation._component_id()!r}, not {component_id!r}"
            )
        return conversation._save("manual", metadata, checkpoint_id)

    async def save_async(
        self,
        checkpoint: CheckpointedConversation | WayflowConversation | ConversationCheckpoint,
        *,
        checkpoint_id: str | None = None,
        component_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> ConversationCheckpoint:
        """`save`, awaitable (it runs in the caller's thread, as WayFlow's does)."""
        return self.save(checkpoint, checkpoint_id=checkpoint_id, component_id=component_id, metadata=metadata)

    def load_latest(self, conversation_id: str) -> ConversationCheckpoint | None:
        """The newest checkpoint on the conversation's current line, or None."""
        line = self._line(conversation_id)
        return None if not line.visible else self._public(conversation_id, line.state, line.visible[-1])

    def load(self, conversation_id: str, checkpoint_id: str) -> ConversationCheckpoint:
        """The checkpoint with this id on the conversation's line; CheckpointNotFoundError if none."""
        line = self._line(conversation_id)
        return self._public(conversation_id, line.state, line.find(conversation_id, checkpoint_id))

    def list_checkpoints(self, conversation_id: str, limit: int | None = 50) -> list[ConversationCheckpoint]:
        """The conversation's checkpoints, oldest first: the newest `limit` (50, as in WayFlow; None for all).

        After a rewind these are the checkpoints up to the one restored and those saved since;
        the ones of the replaced future are listed on its branch (see `branches`).
        """
        line = self._line(conversation_id)
        visible = line.visible if limit is None else line.visible[-limit:] if limit > 0 else []
        return [self._public(conversation_id, line.state, cp) for cp in visible]

    def delete(self, conversation_id: str, checkpoint_id: str) -> None:
        """Delete a checkpoint; the one before it becomes the latest. The events stay.

        A checkpoint made before a rewind point is shared by the conversation and its branch:
        deleting it deletes it for both. So is one of a future a rewind replaced (listed on
        the branch that keeps that future): it can be deleted through either.
        """
        line = self._line(conversation_id)
        cp = next((cp for cp in line.found if cp.checkpoint_id == checkpoint_id), None)
        if cp is None:
            raise CheckpointNotFoundError(f"conversation {conversation_id!r} has no checkpoint {checkpoint_id!r}")
        self.log.checkpoints.delete(cp.run_id, checkpoint_id, run_number=cp.run_number)

    def branches(self, conversation_id: str) -> list[ConversationBranch]:
        """The futures rewinds of this conversation replaced, oldest first, each kept as a run."""
        state = self._line(conversation_id).state
        return [
            ConversationBranch(r["branch"], conversation_id, r["checkpoint_id"], r["offset"], r["head"])
            for r in state.rewinds
        ]

    # -- internals ---------------------------------------------------------------------

    def _line(self, conversation_id: str) -> _Line:
        log = self.log
        if log.head(conversation_id) == 0:
            return _Line(WayflowState(), [], [])
        with log.pinned(conversation_id) as info:  # every read of one life of the conversation's run
            state: WayflowState = log.state_at(conversation_id, reducer=self.reducer)
            found = list(log.checkpoints.list(conversation_id, reducer=self.reducer))
            limit, parent = info.fork_offset, info.parent
            while parent is not None:  # a branch shares its parent's checkpoints up to its fork offset
                found += [cp for cp in log.checkpoints.list(parent, reducer=self.reducer) if cp.offset <= limit]
                info = log.run_info(parent)
                limit, parent = min(limit, info.fork_offset), info.parent
        found = sorted((cp for cp in found if cp.reducer == self.reducer.name), key=lambda cp: cp.offset)
        hidden = [(r["offset"], r["head"]) for r in state.rewinds]
        visible = [cp for cp in found if not any(lo < cp.offset <= hi for lo, hi in hidden)]
        return _Line(state, visible, found)

    def _public(self, conversation_id: str, state: WayflowState, cp: Checkpoint[Any]) -> ConversationCheckpoint:
        return ConversationCheckpoint(
            checkpoint_id=cp.checkpoint_id,
            conversation_id=conversation_id,
            component_id=state.component_id,
            created_at=cp.created_ns // 1_000_000_000,
            metadata=dict(cp.metadata),
            offset=cp.offset,
            _load=lambda: native_text(cp.state) if state.shape.get("format") == NATIVE else state_text(cp.state),
        )

    def _save_checkpoint(self, checkpoint: Any) -> None:
        """WayFlow's `Checkpointer._save_checkpoint`: store one checkpoint of wayflowcore's own format."""
        store_native(self, checkpoint)

    def _refuse_taken(self, conversation_id: str, checkpoint_id: str) -> None:
        """WayflowCheckpointError when the conversation can see a checkpoint with this id (on a branch too)."""
        if self.log.head(conversation_id) and any(
            cp.checkpoint_id == checkpoint_id for cp in self._line(conversation_id).found
        ):
            raise WayflowCheckpointError(
                f"conversation {conversation_id!r} has a checkpoint {checkpoint_id!r} already; choose another id"
            )

    def _last_sequence(self, conversation_id: str) -> int:
        """The highest `save_sequence` among the checkpoints the conversation can see (0 if none)."""
        found = [cp.metadata.get("save_sequence") for cp in self._line(conversation_id).found]
        return max([n for n in found if isinstance(n, int) and not isinstance(n, bool)], default=0)

    def _import(
        self,
        checkpoint: ConversationCheckpoint,
        checkpoint_id: str | None,
        component_id: str | None,
        metadata: Mapping[str, Any] | None,
    ) -> ConversationCheckpoint:
        """Write a checkpoint's portable state into this log: a new checkpoint of its conversation at the head."""
        conversation_id = checkpoint.conversation_id
        cid = checkpoint_id or checkpoint.checkpoint_id
        found = read_state_text(checkpoint.state, conversation_id, cid)
        recorded = component_id or checkpoint.component_id
        if recorded != found["component_id"]:
            found["shape"] = {**found["shape"], "id": recorded}
        md = {**checkpoint.metadata, **(metadata or {})}
        recorder = conversation_writer(self.log, conversation_id, self.reducer)
        head: WayflowState = recorder.state
        events: list[Event] = []
        if recorder.offset == 0:
            events.append(
                ConversationStarted(
                    component_id=recorded,
                    component_type=found["component_type"],
                    name=found["name"],
                    shape=found["shape"],
                )
            )
        elif not head.component_id:
            raise NotAWayflowConversationError(f"run {conversation_id!r} exists but is not a WayFlow conversation")
        elif (head.component_id, head.shape) != (recorded, found["shape"]):
            raise IncompatibleComponentError(
                f"conversation {conversation_id!r} is recorded with {head.component_type} {head.component_id!r}; "
                f"checkpoint {cid!r} was made with {found['component_type']} {recorded!r} of another shape"
            )
        self._refuse_taken(conversation_id, cid)
        check_stored_types(found["conversation"], conversation_id)  # refused now, not at a later restore
        reason = str(md.get("save_reason", "manual"))
        delta = diff(head.conversation, found["conversation"])
        events.append(Snapshot(checkpoint_id=cid, delta=delta, status=found["status"], reason=reason))
        recorder.append_many(events)
        cp = recorder.checkpoint(metadata=md, checkpoint_id=cid)
        return self._public(conversation_id, recorder.state, cp)


class _Line:
    """A conversation's state at its head, its checkpoints on the current line, and all it can see."""

    def __init__(self, state: WayflowState, visible: list[Checkpoint[Any]], found: list[Checkpoint[Any]]) -> None:
        self.state, self.visible, self.found = state, visible, found

    def find(self, conversation_id: str, checkpoint_id: str) -> Checkpoint[Any]:
        for cp in self.visible:
            if cp.checkpoint_id == checkpoint_id:
                return cp
        for cp in self.found:
            if cp.checkpoint_id == checkpoint_id:
                branch = next(r["branch"] for r in self.state.rewinds if r["offset"] < cp.offset <= r["head"])
                raise CheckpointNotFoundError(
                    f"conversation {conversation_id!r}: checkpoint {checkpoint_id!r} belongs to a future that a "
                    f"rewind replaced; it is kept on branch {branch!r}: restore it with conversation_id={branch!r}"
                )
        raise CheckpointNotFoundError(f"conversation {conversation_id!r} has no checkpoint {checkpoint_id!r}")
