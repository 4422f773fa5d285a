"""`EventLogCheckpointer` (save, list, load, delete) and the conversation it checkpoints,
`CheckpointedConversation`, whose `execute()` records to the log."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, cast

from ..checkpoints import Checkpoint
from ..errors import CheckpointNotFoundError
from ..events import Event, TurnCompleted, TurnFailed, TurnStarted
from ..log import EventLog
from ..runwriter import RunWriter
from ._diff import diff
from ._events import ConversationStarted, Snapshot, WayflowReducer, WayflowState, refer_texts
from ._listener import Listener
from ._messages import message_event, tool_names
from ._serialize import definition_of, dump_conversation
from ._types import CheckpointingInterval, ConversationBranch, ConversationCheckpoint, WayflowCheckpointError

if TYPE_CHECKING:
    from wayflowcore.conversation import Conversation as WayflowConversation
    from wayflowcore.conversationalcomponent import ConversationalComponent
    from wayflowcore.executors.executionstatus import ExecutionStatus
    from wayflowcore.executors.interrupts.executioninterrupt import ExecutionInterrupt

__all__ = ["CheckpointedConversation", "EventLogCheckpointer"]


class EventLogCheckpointer:
    """Saves, lists, loads and deletes the checkpoints of WayFlow conversations kept in a log."""

    def __init__(
        self, log: EventLog[Any], *, interval: CheckpointingInterval = CheckpointingInterval.CONVERSATION_TURNS
    ):
        """`interval` is the default for conversations that `start_conversation` does not give one."""
        if not isinstance(interval, CheckpointingInterval):
            raise TypeError(f"interval must be a CheckpointingInterval, not {type(interval).__name__}")
        self.log = log
        self.checkpointing_interval = interval
        self.reducer = WayflowReducer()

    def save(
        self,
        conversation: CheckpointedConversation,
        *,
        checkpoint_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> ConversationCheckpoint:
        """Save a checkpoint of the conversation as it is now (`save_reason` is `manual`)."""
        if not isinstance(conversation, CheckpointedConversation):
            raise TypeError(
                f"save() takes a conversation made by eventlog.wayflow.start_conversation, not "
                f"{type(conversation).__name__}"
            )
        if conversation.checkpointer.log is not self.log:
            raise WayflowCheckpointError(
                f"conversation {conversation.conversation_id!r} is kept in another log; save it with its own checkpointer"
            )
        return conversation._save("manual", metadata, checkpoint_id)

    def load_latest(self, conversation_id: str) -> ConversationCheckpoint | None:
        """The newest checkpoint on the conversation's current line, or None."""
        line = self._line(conversation_id)
        return None if not line.visible else self._public(conversation_id, line.state, line.visible[-1])

    def load(self, conversation_id: str, checkpoint_id: str) -> ConversationCheckpoint:
        """The checkpoint with this id on the conversation's line; CheckpointNotFoundError if none."""
        line = self._line(conversation_id)
        return self._public(conversation_id, line.state, line.find(conversation_id, checkpoint_id))

    def list_checkpoints(self, conversation_id: str, limit: int | None = None) -> list[ConversationCheckpoint]:
        """The conversation's checkpoints, oldest first (the newest `limit` when given).

        After a rewind these are the checkpoints up to the one restored and those saved since;
        the ones of the replaced future are listed on its branch (see `branches`).
        """
        line = self._line(conversation_id)
        visible = line.visible if limit is None else line.visible[-limit:] if limit > 0 else []
        return [self._public(conversation_id, line.state, cp) for cp in visible]

    def delete(self, conversation_id: str, checkpoint_id: str) -> None:
        """Delete a checkpoint; the one before it becomes the latest. The events stay.

        A checkpoint made before a rewind point is shared by the conversation and its branch:
        deleting it deletes it for both.
        """
        line = self._line(conversation_id)
        cp = line.find(conversation_id, checkpoint_id)
        self.log.checkpoints.delete(cp.run_id, checkpoint_id)

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
        )


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


class CheckpointedConversation:
    """A wayflowcore conversation whose `execute()` records to the log and checkpoints at its interval.

    Every attribute it does not define (`status`, `get_messages`, `append_user_message`,
    `message_list`, `state`, ...) is the wayflowcore conversation's (`self.conversation`).
    """

    def __init__(
        self,
        checkpointer: EventLogCheckpointer,
        conversation_id: str,
        component: ConversationalComponent,
        conversation: WayflowConversation,
        recorder: RunWriter[WayflowState],
        interval: CheckpointingInterval,
        restored_from: ConversationCheckpoint | None,
        shape: dict[str, Any],
    ) -> None:
        self.checkpointer = checkpointer
        self.conversation_id = conversation_id
        """The conversation's id: the run of the log it is recorded in."""
        self.component = component
        self.conversation = conversation
        """The wayflowcore conversation."""
        self.interval = interval
        self.restored_from = restored_from
        """The checkpoint this object was restored from (None for a new conversation)."""
        self.checkpoint_id: str | None = None if restored_from is None else restored_from.checkpoint_id
        """The checkpoint saved last by this object, or the one it was restored from."""
        self._rec = recorder
        self._shape = shape
        self._shown = 0 if restored_from is None else len(self._messages())

    def __getattr__(self, name: str) -> Any:
        if name == "conversation":  # not set yet (a failed __init__): no recursion
            raise AttributeError(name)
        return getattr(self.conversation, name)

    def __repr__(self) -> str:
        return (
            f"CheckpointedConversation(conversation_id={self.conversation_id!r}, checkpoint_id={self.checkpoint_id!r})"
        )

    @property
    def status(self) -> ExecutionStatus | None:
        """The wayflowcore conversation's status."""
        return self.conversation.status

    def checkpoints(self) -> list[ConversationCheckpoint]:
        """This conversation's checkpoints, oldest first."""
        return self.checkpointer.list_checkpoints(self.conversation_id)

    def execute(self, execution_interrupts: Sequence[ExecutionInterrupt] | None = None) -> ExecutionStatus:
        """Run the conversation until it yields, recording it; checkpoint at the interval and at the end.

        A turn that raises records `turn.failed` and saves no final checkpoint.
        """
        with self._turn() as turn:
            turn.status = self.conversation.execute(execution_interrupts)
        return cast("ExecutionStatus", turn.status)

    async def execute_async(self, execution_interrupts: Sequence[ExecutionInterrupt] | None = None) -> ExecutionStatus:
        """`execute`, awaitable."""
        with self._turn() as turn:
            turn.status = await self.conversation.execute_async(execution_interrupts)
        return cast("ExecutionStatus", turn.status)

    # -- internals ---------------------------------------------------------------------

    @contextmanager
    def _turn(self) -> Iterator[_Turn]:
        from wayflowcore.events.eventlistener import register_event_listeners

        self._ensure_started()
        number = int(self._rec.state.turn) + 1
        self._append([TurnStarted(turn=number), *self._new_messages()])
        listener = Listener(self)
        turn = _Turn()
        try:
            with register_event_listeners([listener]):  # type: ignore[list-item]
                yield turn
        except BaseException as exc:
            self._append([TurnFailed(turn=number, error=f"{type(exc).__name__}: {exc}")])
            raise
        self._shown = len(self._messages())
        self._save("conversation_turn", None, None, before=[TurnCompleted(turn=number)])

    def _ensure_started(self) -> None:
        if self._rec.offset:
            return
        component = self.component
        self._append(
            [
                ConversationStarted(
                    component_id=component.id,
                    component_type=type(component).__name__,
                    name=str(getattr(component, "name", "") or ""),
                    shape=self._shape,
                    definition=definition_of(component),
                )
            ]
        )

    def _append(self, events: list[Event]) -> None:
        if events:
            self._rec.append_many(events)

    def _messages(self) -> list[Any]:
        """The conversation's messages themselves (`get_messages` returns copies)."""
        return list(self.conversation.message_list.messages)

    def _new_messages(self) -> list[Event]:
        """Events for the messages added since the last turn (by the caller, between turns)."""
        messages = self._messages()
        names = tool_names(messages)
        out = [e for m in messages[self._shown :] if (e := message_event(m, names)) is not None]
        self._shown = len(messages)
        return out

    def _save(
        self,
        reason: str,
        metadata: Mapping[str, Any] | None,
        checkpoint_id: str | None,
        *,
        before: Sequence[Event] = (),
        extra: Mapping[str, Any] | None = None,
    ) -> ConversationCheckpoint:
        log = self.checkpointer.log
        self._ensure_started()
        if checkpoint_id is not None:
            try:
                self.checkpointer.load(self.conversation_id, checkpoint_id)
            except CheckpointNotFoundError:
                pass
            else:
                raise WayflowCheckpointError(
                    f"conversation {self.conversation_id!r} has a checkpoint {checkpoint_id!r} already; choose another id"
                )
        conversation = self.conversation
        data = dump_conversation(conversation, self.component, self.conversation_id)
        status = "" if conversation.status is None else type(conversation.status).__name__
        cid = checkpoint_id or log.ids()
        state: WayflowState = self._rec.state  # `before` (a turn's end) carries no text the snapshot may name
        delta, texts = refer_texts(diff(state.conversation, data), state.texts)
        snapshot = Snapshot(checkpoint_id=cid, delta=delta, status=status, reason=reason, texts=texts)
        self._rec.append_many([*before, snapshot])
        md: dict[str, Any] = {
            "save_reason": reason,
            "turn": int(self._rec.state.turn),
            "message_count": len(self._messages()),
            "status_type": status,
            "current_step_name": str(conversation.current_step_name),
        }
        md.update(extra or {})
        md.update(metadata or {})
        cp = self._rec.checkpoint(metadata=md, checkpoint_id=cid)
        self.checkpoint_id = cid
        return self.checkpointer._public(self.conversation_id, self._rec.state, cp)


class _Turn:
    status: Any = None
