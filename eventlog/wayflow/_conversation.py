"""`CheckpointedConversation`: a wayflowcore conversation whose `execute()` records to the log,
and the rewind a restore of an older checkpoint makes at its first write."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast

from ..errors import ConflictError, RunExistsError, RunReplacedError
from ..events import Event, TurnCompleted, TurnFailed, TurnStarted
from ..services.runwriter import RunWriter
from ._diff import diff
from ._events import ConversationStarted, Rewound, Snapshot, WayflowReducer, WayflowState, refer_texts
from ._listener import Listener
from ._messages import message_event, tool_names
from ._serialize import definition_of, dump_conversation
from ._types import CheckpointingInterval, ConversationCheckpoint

if TYPE_CHECKING:
    from wayflowcore.conversation import Conversation as WayflowConversation
    from wayflowcore.conversationalcomponent import ConversationalComponent
    from wayflowcore.executors.executionstatus import ExecutionStatus
    from wayflowcore.executors.interrupts.executioninterrupt import ExecutionInterrupt

    from ..log import EventLog
    from ..services.checkpoints import Checkpoint

__all__ = ["CheckpointedConversation", "Keeper", "PendingRewind", "rewind"]


class Keeper(Protocol):
    """What a conversation asks of the checkpointer that keeps it (`EventLogCheckpointer`)."""

    log: EventLog[Any]
    checkpointing_interval: CheckpointingInterval
    reducer: WayflowReducer

    def list_checkpoints(self, conversation_id: str, limit: int | None = 50) -> list[ConversationCheckpoint]: ...

    def _public(self, conversation_id: str, state: WayflowState, cp: Checkpoint[Any]) -> ConversationCheckpoint: ...

    def _refuse_taken(self, conversation_id: str, checkpoint_id: str) -> None: ...

    def _last_sequence(self, conversation_id: str) -> int: ...


@dataclass
class PendingRewind:
    """A restore of a checkpoint that is not the conversation's latest state, not written yet:
    the conversation at the head (`head`, at offset `at`) and at the checkpoint (`target`)."""

    checkpoint: ConversationCheckpoint
    head: WayflowState
    target: WayflowState
    at: int


class CheckpointedConversation:
    """A wayflowcore conversation whose `execute()` records to the log and checkpoints at its interval.

    Every attribute it does not define (`status`, `get_messages`, `append_user_message`,
    `message_list`, `state`, ...) is the wayflowcore conversation's (`self.conversation`).
    """

    def __init__(
        self,
        checkpointer: Keeper,
        conversation_id: str,
        component: ConversationalComponent,
        conversation: WayflowConversation,
        recorder: RunWriter[WayflowState],
        interval: CheckpointingInterval,
        restored_from: ConversationCheckpoint | None,
        shape: dict[str, Any],
        *,
        pending: PendingRewind | None = None,
        component_id: str | None = None,
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
        self._shape = shape if component_id is None else {**shape, "id": component_id}
        self._shown = 0 if restored_from is None else len(self._messages())
        self._pending = pending
        self._sequence: int | None = None  # the last save_sequence, read from the log at the first save

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
        return self.checkpointer.list_checkpoints(self.conversation_id, limit=None)

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

        self._settle()
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
        listener.flush()
        self._save("conversation_turn", None, None, before=[TurnCompleted(turn=number)])

    def _component_id(self) -> str:
        """The id the conversation is recorded with (in its `wayflow.started`)."""
        recorded = self._rec.state.component_id
        return recorded or str(self._shape.get("id") or self.component.id)

    def _settle(self) -> None:
        """Before this object's first write: when it was restored from a checkpoint that is not
        the conversation's latest state, keep the future after it as a branch run and bring the
        conversation back to it (docs/guides/wayflow.md, "Rewind to an earlier checkpoint")."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        try:
            rewind(self.checkpointer.log, self._rec, pending)
        except ConflictError:
            self._pending = pending
            raise

    def _ensure_started(self) -> None:
        if self._rec.offset:
            return
        component = self.component
        self._append(
            [
                ConversationStarted(
                    component_id=self._component_id(),
                    component_type=type(component).__name__,
                    name=str(getattr(component, "name", "") or ""),
                    shape=self._shape,
                    definition=definition_of(component),
                )
            ]
        )

    def _append(self, events: list[Event]) -> None:
        if events:
            self._settle()
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
        self._settle()
        self._ensure_started()
        if checkpoint_id is not None:
            self.checkpointer._refuse_taken(self.conversation_id, checkpoint_id)
        conversation = self.conversation
        data = dump_conversation(conversation, self.component, self.conversation_id)
        status = "" if conversation.status is None else type(conversation.status).__name__
        cid = checkpoint_id or log.ids()
        state: WayflowState = self._rec.state  # `before` (a turn's end) carries no text the snapshot may name
        delta, texts = refer_texts(diff(state.conversation, data), state.texts)
        snapshot = Snapshot(checkpoint_id=cid, delta=delta, status=status, reason=reason, texts=texts)
        sequence = self.checkpointer._last_sequence(self.conversation_id) if self._sequence is None else self._sequence
        step = conversation.current_step_name
        md: dict[str, Any] = {
            "save_reason": reason,
            "save_sequence": sequence + 1,
            "turn": int(state.turn),  # neither `before` nor the snapshot starts a turn
            "message_count": len(self._messages()),
            "current_step_name": step if step is None or isinstance(step, str) else str(step),
        }
        if status:  # as WayFlow: no status_type before the conversation has a status
            md["status_type"] = status
        md.update(extra or {})
        md.update(metadata or {})
        self._rec.append_many([*before, snapshot])
        cp = self._rec.checkpoint(metadata=md, checkpoint_id=cid)  # the state the writer folded: no fold again
        self._sequence = sequence + 1
        self.checkpoint_id = cid
        return self.checkpointer._public(self.conversation_id, self._rec.state, cp)


class _Turn:
    status: Any = None


def rewind(log: EventLog[Any], rec: RunWriter[WayflowState], pending: PendingRewind) -> None:
    """Keep the future after `pending.checkpoint` as a branch run forked at the head, and append
    `wayflow.rewound` bringing the conversation back to the checkpoint; ConflictError, with
    nothing written, when the conversation moved on since `pending` was read."""
    run_id, at, number = rec.run_id, pending.at, rec.run_number
    life, head = log.life(run_id)
    if life != number:  # `pending` was read of a life of the conversation that is gone
        raise RunReplacedError(run_id, number or 0, life or None, "it was rewound")
    if head != at or rec.offset != at:
        raise ConflictError(run_id, at, head)
    n = len(pending.head.rewinds) + 1
    while True:
        branch = f"{run_id}~{n}"
        try:
            log.fork(run_id, at, branch, run_number=number)
            break
        except RunExistsError:
            info = log.run_info(branch)
            if info.parent == run_id and info.fork_offset == at == info.head:
                break  # left by an earlier attempt that stopped before the rewind was recorded
            n += 1
    target, cp = pending.target, pending.checkpoint
    rec.append(
        Rewound(
            checkpoint_id=cp.checkpoint_id,
            offset=cp.offset,
            head=at,
            branch=branch,
            delta=diff(pending.head.conversation, target.conversation),
            status=target.status,
            turn=target.turn,
            llm_calls=target.llm_calls,
            tool_calls=target.tool_calls,
            input_tokens=target.input_tokens,
            output_tokens=target.output_tokens,
        )
    )
