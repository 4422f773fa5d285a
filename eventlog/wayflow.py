"""WayFlow conversations checkpointed through the log, with the shape of WayFlow's Checkpointing API.

    from eventlog.wayflow import EventLogCheckpointer, start_conversation

    checkpointer = EventLogCheckpointer(log)                 # any eventlog log
    conversation = start_conversation(agent, messages="Plan a trip to Bern", checkpointer=checkpointer)
    conversation.execute()                                   # a checkpoint at the end of the turn
    checkpoint = checkpointer.load_latest(conversation.conversation_id)
    restored = start_conversation(agent, conversation_id=conversation.conversation_id,
                                  checkpoint_id=checkpoint.checkpoint_id, checkpointer=checkpointer)

It works with a wayflowcore 26.3.x `Agent` or `Flow` (the `wayflow` extra). A conversation is
one run of the log, named by its conversation id:

- `wayflow.started` (first event, once per conversation): the component's id, its shape (the
  tools, steps and sub-components a checkpoint depends on) and its definition as wayflowcore
  serializes it.
- While `execute()` runs, wayflowcore's event listeners turn each LLM request and response,
  tool execution, tool confirmation and added message into the standard kinds (`llm.started`,
  `llm.completed`, `tool.started`, `tool.completed`, `interrupted`, `resumed`,
  `message.assistant`, ...) between `turn.started` and `turn.completed` (or `turn.failed`).
- `wayflow.snapshot` at each checkpoint: what changed in the serialized conversation since
  the previous snapshot (new messages, the executor's small state), not the whole
  conversation. The checkpoint is saved at that event's offset.
- `wayflow.rewound` when a conversation is restored to an earlier checkpoint: the conversation
  id stays, the future it replaced stays readable as a branch run forked from it.

Reading (the checkpointer's listings, the reducer, the command line's view) needs no
wayflowcore; starting or restoring a conversation does. The conversation object rebuilt
from a checkpoint uses the live component (with its LLM and
tools) given to `start_conversation`: nothing but data is read back. See docs/guides/wayflow.md.
"""

from __future__ import annotations

import copy
import datetime as _dt
import enum
import json
import re
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, cast

import msgspec

from . import (
    Checkpoint,
    CheckpointNotFoundError,
    CheckpointPolicy,
    EventLog,
    EventLogError,
    Recorder,
    RunExistsError,
    UnencodableValueError,
    register,
)
from .events import (
    AssistantMessage,
    Event,
    Interrupted,
    LLMCallCompleted,
    LLMCallFailed,
    LLMCallStarted,
    Resumed,
    ToolCall,
    ToolCallCompleted,
    ToolCallFailed,
    ToolCallStarted,
    TurnCompleted,
    TurnFailed,
    TurnStarted,
    UserMessage,
)
from .events import Message as LogMessage

if TYPE_CHECKING:
    from wayflowcore.conversation import Conversation as WayflowConversation
    from wayflowcore.conversationalcomponent import ConversationalComponent
    from wayflowcore.executors.executionstatus import ExecutionStatus
    from wayflowcore.executors.interrupts.executioninterrupt import ExecutionInterrupt

__all__ = [
    "VIEW",
    "CheckpointedConversation",
    "CheckpointingInterval",
    "ConversationBranch",
    "ConversationCheckpoint",
    "ConversationStarted",
    "EventLogCheckpointer",
    "IncompatibleComponentError",
    "NotAWayflowConversationError",
    "RestoreWithMessagesError",
    "Rewound",
    "Snapshot",
    "WayflowCheckpointError",
    "WayflowReducer",
    "WayflowState",
    "start_conversation",
]


# -- errors ----------------------------------------------------------------------------


class WayflowCheckpointError(EventLogError):
    """A WayFlow conversation cannot be checkpointed or restored as asked."""


class IncompatibleComponentError(WayflowCheckpointError, ValueError):
    """The component given to restore a conversation is not the one its checkpoints were made with."""


class RestoreWithMessagesError(WayflowCheckpointError, ValueError):
    """A checkpoint was restored and new messages or inputs were passed in the same call."""


class NotAWayflowConversationError(WayflowCheckpointError):
    """The run exists but was not written by this module."""


# -- what the API hands out ------------------------------------------------------------


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


# -- event kinds -----------------------------------------------------------------------


class ConversationStarted(Event, frozen=True, tag="wayflow.started"):
    """A WayFlow conversation began; its component is described once, here."""

    component_id: str
    """Id of the Agent or Flow."""
    component_type: str
    """`Agent`, `Flow`, ..."""
    name: str = ""
    """The component's name."""
    shape: dict[str, Any] = msgspec.field(default_factory=dict)
    """What a restore checks: ids, tools, steps and sub-components (see `_shape`)."""
    definition: str | None = None
    """The component as wayflowcore serializes it (YAML), or None when it cannot."""


class Snapshot(Event, frozen=True, tag="wayflow.snapshot"):
    """A checkpoint's content: what changed in the serialized conversation since the previous snapshot."""

    checkpoint_id: str
    """The checkpoint saved at this event's offset."""
    delta: Any = None
    """The change (see `_diff`); None when nothing changed."""
    status: str = ""
    """Type of the conversation's wayflowcore status (`UserMessageRequestStatus`, ...)."""
    reason: str = ""
    """`conversation_turn`, `internal_turn_boundary` or `manual`."""
    texts: bool = False
    """True when `delta` names texts by `{"$text": i}`: the i-th text the events since the
    previous snapshot carry (a message's text is then stored once, in its standard event)."""


class Rewound(Event, frozen=True, tag="wayflow.rewound"):
    """The conversation was restored to an earlier checkpoint; the future it replaced is a branch."""

    checkpoint_id: str
    """The checkpoint restored."""
    offset: int
    """Its offset."""
    head: int
    """The last offset of the replaced future (the branch is forked there)."""
    branch: str
    """Run id of the branch that keeps the replaced future."""
    delta: Any = None
    """The change from the conversation at `head` back to the one at `offset`."""
    status: str = ""
    turn: int = 0
    llm_calls: int = 0
    tool_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0


for _kind in (ConversationStarted, Snapshot, Rewound):
    register(_kind)


# -- folding ---------------------------------------------------------------------------


class WayflowState(msgspec.Struct, omit_defaults=True):
    """What `WayflowReducer` folds a WayFlow conversation into."""

    component_id: str = ""
    """Id of the component the conversation runs."""
    component_type: str = ""
    shape: dict[str, Any] = {}
    """The component's shape, as recorded when the conversation began."""
    conversation: Any = None
    """The serialized wayflowcore conversation as of `checkpoint_id` (components left out)."""
    checkpoint_id: str | None = None
    """The checkpoint whose content `conversation` is."""
    status: str = ""
    """Type of the wayflowcore status at that checkpoint."""
    turn: int = 0
    """Turns (`execute()` calls) started on the current line."""
    llm_calls: int = 0
    tool_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    last_error: str | None = None
    rewinds: list[dict[str, Any]] = []
    """Every rewind: `branch`, `checkpoint_id`, `offset`, `head`."""
    texts: list[str] = []
    """Texts of the messages recorded since the last snapshot, that the next one may name."""


class WayflowReducer:
    """Folds a WayFlow conversation's events into `WayflowState` (deterministic, no I/O)."""

    name = "wayflow"
    version = 1
    state_type = WayflowState

    def initial(self) -> WayflowState:
        return WayflowState()

    def apply(self, state: WayflowState, event: Event) -> WayflowState:
        s = state
        if isinstance(event, ConversationStarted):
            s.component_id, s.component_type = event.component_id, event.component_type
            s.shape = copy.deepcopy(event.shape)
        elif isinstance(event, Snapshot):
            delta = _resolve_texts(event.delta, s.texts) if event.texts else event.delta
            s.conversation = _patch(s.conversation, delta)
            s.checkpoint_id, s.status, s.texts = event.checkpoint_id, event.status, []
        elif isinstance(event, Rewound):
            s.conversation = _patch(s.conversation, event.delta)
            s.texts = []
            s.checkpoint_id, s.status, s.turn = event.checkpoint_id, event.status, event.turn
            s.llm_calls, s.tool_calls = event.llm_calls, event.tool_calls
            s.input_tokens, s.output_tokens = event.input_tokens, event.output_tokens
            s.last_error = None
            s.rewinds.append(
                {
                    "branch": event.branch,
                    "checkpoint_id": event.checkpoint_id,
                    "offset": event.offset,
                    "head": event.head,
                }
            )
        elif isinstance(event, TurnStarted):
            s.turn = event.turn
        elif isinstance(event, LLMCallCompleted):
            s.llm_calls += 1
            s.input_tokens += event.input_tokens
            s.output_tokens += event.output_tokens
            _keep_text(s, event.output.content)
        elif isinstance(event, ToolCallCompleted):
            s.tool_calls += 1
            _keep_text(s, event.output)
        elif isinstance(event, UserMessage | AssistantMessage):
            _keep_text(s, event.content)
        elif isinstance(event, TurnFailed | LLMCallFailed | ToolCallFailed):
            s.last_error = event.error
        return s


_TEXT_BYTES_MIN = 64
"""Shorter texts are stored in a snapshot as they are: a reference would not be smaller."""


def _keep_text(state: WayflowState, text: Any) -> None:
    if isinstance(text, str) and len(text) >= _TEXT_BYTES_MIN:
        state.texts.append(text)


def _refer_texts(delta: Any, texts: Sequence[str]) -> tuple[Any, bool]:
    """`delta` with each string that one of `texts` equals replaced by `{"$text": i}`; False when
    nothing was replaced or when the data holds a `$text` key of its own (then it is stored as is)."""
    index = {t: i for i, t in enumerate(texts)}
    if not index:
        return delta, False
    own = False

    def walk(item: Any) -> Any:
        nonlocal own
        if isinstance(item, str):
            i = index.get(item) if len(item) >= _TEXT_BYTES_MIN else None
            return item if i is None else {"$text": i}
        if isinstance(item, list):
            return [walk(x) for x in item]
        if isinstance(item, dict):
            own = own or "$text" in item
            return {k: walk(v) for k, v in item.items()}
        return item

    out = walk(delta)
    return (delta, False) if own or _same(out, delta) else (out, True)


def _resolve_texts(delta: Any, texts: Sequence[str]) -> Any:
    """The reverse of `_refer_texts`."""
    if isinstance(delta, list):
        return [_resolve_texts(x, texts) for x in delta]
    if isinstance(delta, dict):
        if len(delta) == 1 and "$text" in delta:
            i = delta["$text"]
            if not isinstance(i, int) or not 0 <= i < len(texts):
                raise WayflowCheckpointError(f"a snapshot names text {i!r}, which the events before it do not carry")
            return texts[i]
        return {k: _resolve_texts(v, texts) for k, v in delta.items()}
    return delta


# The change between two serialized conversations: None (no change), ["=", value] (replace),
# ["L", keep, items] (a list keeps its first `keep` items, then `items` follow: appended
# messages cost only themselves), ["D", {key: change}, [removed keys]] (a dict).


def _same(a: Any, b: Any) -> bool:
    """Equal and of the same types all the way down (`True == 1`, but a change from one to the other is kept)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(v, b[k]) for k, v in a.items())
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _diff(old: Any, new: Any) -> Any:
    """The change that turns `old` into `new` (pure)."""
    if _same(old, new):
        return None
    if isinstance(old, dict) and isinstance(new, dict):
        changed: dict[str, Any] = {}
        for key, value in new.items():
            if key in old:
                sub = _diff(old[key], value)
                if sub is not None:
                    changed[key] = sub
            else:
                changed[key] = ["=", value]
        return ["D", changed, [key for key in old if key not in new]]
    if isinstance(old, list) and isinstance(new, list):
        keep = 0
        for a, b in zip(old, new, strict=False):
            if not _same(a, b):
                break
            keep += 1
        return ["L", keep, new[keep:]]
    return ["=", new]


def _patch(old: Any, delta: Any) -> Any:
    """Apply a change made by `_diff`; updates `old` in place where it can (pure in its result)."""
    if delta is None:
        return old
    if not isinstance(delta, list) or not delta or delta[0] not in ("=", "L", "D"):
        raise WayflowCheckpointError(f"a stored conversation change is malformed: {str(delta)[:80]}")
    op = delta[0]
    if op == "=":
        return copy.deepcopy(delta[1])
    if op == "L":
        if not isinstance(old, list) or delta[1] > len(old):
            raise WayflowCheckpointError("a stored list change does not fit the list it applies to")
        del old[delta[1] :]
        old.extend(copy.deepcopy(delta[2]))
        return old
    if not isinstance(old, dict):
        raise WayflowCheckpointError("a stored dict change does not fit the value it applies to")
    for key in delta[2]:
        old.pop(key, None)
    for key, sub in delta[1].items():
        old[key] = _patch(old.get(key), sub)
    return old


# -- the checkpointer ------------------------------------------------------------------


class EventLogCheckpointer:
    """Saves, lists, loads and deletes the checkpoints of WayFlow conversations kept in a log."""

    def __init__(self, log: EventLog, *, interval: CheckpointingInterval = CheckpointingInterval.CONVERSATION_TURNS):
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
        state: WayflowState = log.state_at(conversation_id, reducer=self.reducer)
        found = [cp for cp in log.checkpoints.list(conversation_id, reducer=self.reducer)]
        info = log.run_info(conversation_id)
        limit, parent = info.fork_offset, info.parent
        while parent is not None:  # a branch shares its parent's checkpoints up to its fork offset
            found += [cp for cp in log.checkpoints.list(parent, reducer=self.reducer) if cp.offset <= limit]
            info = log.run_info(parent)
            limit, parent = min(limit, info.fork_offset), info.parent
        found = sorted((cp for cp in found if cp.reducer == self.reducer.name), key=lambda cp: cp.offset)
        hidden = [(r["offset"], r["head"]) for r in state.rewinds]
        visible = [cp for cp in found if not any(lo < cp.offset <= hi for lo, hi in hidden)]
        return _Line(state, visible, found)

    def _public(self, conversation_id: str, state: WayflowState, cp: Checkpoint) -> ConversationCheckpoint:
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

    def __init__(self, state: WayflowState, visible: list[Checkpoint], found: list[Checkpoint]) -> None:
        self.state, self.visible, self.found = state, visible, found

    def find(self, conversation_id: str, checkpoint_id: str) -> Checkpoint:
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


# -- the conversation ------------------------------------------------------------------


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
        recorder: Recorder,
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
        listener = _Listener(self)
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
                    definition=_definition(component),
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
        names = _tool_names(messages)
        out = [e for m in messages[self._shown :] if (e := _message_event(m, names)) is not None]
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
        data = _dump(conversation, self.component, self.conversation_id)
        status = "" if conversation.status is None else type(conversation.status).__name__
        cid = checkpoint_id or log.ids()
        state: WayflowState = self._rec.state  # `before` (a turn's end) carries no text the snapshot may name
        delta, texts = _refer_texts(_diff(state.conversation, data), state.texts)
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


class _Listener:
    """Turns wayflowcore's events during one `execute()` into log events, and saves internal checkpoints.

    wayflowcore's events carry no conversation id; the listener is registered only around one
    conversation's `execute()`, so every event it sees belongs to that conversation or to its
    sub-conversations.
    """

    def __init__(self, owner: CheckpointedConversation) -> None:
        self.owner = owner
        self.llm_since = False
        self.llm_calls: list[tuple[str, str, int]] = []  # open calls: id, model, start time (ns)
        self.tools: dict[str, tuple[str, int]] = {}  # open executions by tool request id: name, start time
        self.confirming: dict[str, str] = {}  # confirmations answered, by tool request id: tool name

    def __call__(self, event: Any) -> None:
        handler = self._handlers.get(type(event).__name__)
        if handler is not None:
            handler(self, event)

    def _append(self, *events: Event) -> None:
        self.owner._append(list(events))

    def _llm_request(self, event: Any) -> None:
        model = str(getattr(event.llm, "model_id", "") or event.llm.name)
        self.llm_calls.append((event.event_id, model, event.timestamp))
        messages = len(self.owner._messages())
        self._append(LLMCallStarted(call_id=event.event_id, model=model, context_messages=messages))

    def _llm_response(self, event: Any) -> None:
        if not self.llm_calls:
            return
        call_id, model, start = self.llm_calls.pop()
        usage = event.completion.token_usage
        self.llm_since = True
        self._append(
            LLMCallCompleted(
                call_id=call_id,
                model=model,
                output=_log_message(event.completion.message),
                input_tokens=int(getattr(usage, "input_tokens", 0) or 0),
                output_tokens=int(getattr(usage, "output_tokens", 0) or 0),
                latency_ms=(event.timestamp - start) / 1e6,
            )
        )

    def _tool_start(self, event: Any) -> None:
        request = event.tool_request
        if request.tool_request_id in self.confirming:
            del self.confirming[request.tool_request_id]
            self._append(Resumed(value=True, nodes=[request.tool_request_id]))
        self.tools[request.tool_request_id] = (event.tool.name, event.timestamp)
        self._append(
            ToolCallStarted(call_id=request.tool_request_id, tool=event.tool.name, arguments=_plain(request.args))
        )

    def _tool_result(self, event: Any) -> None:
        result = event.tool_result
        name, start = self.tools.pop(result.tool_request_id, (event.tool.name, event.timestamp))
        self._append(
            ToolCallCompleted(
                call_id=result.tool_request_id,
                tool=name,
                output=_plain(result.content),
                latency_ms=(event.timestamp - start) / 1e6,
            )
        )

    def _confirmation_start(self, event: Any) -> None:
        request = event.tool_request
        payload = {
            "tool": event.tool.name,
            "tool_request_id": request.tool_request_id,
            "arguments": _plain(request.args),
        }
        self._append(Interrupted(nodes=[request.tool_request_id], reason=f"confirm {event.tool.name}", payload=payload))

    def _confirmation_end(self, event: Any) -> None:
        self.confirming[event.tool_request.tool_request_id] = event.tool.name

    def _message_added(self, event: Any) -> None:
        message = event.message
        if self.llm_calls or not any(m is message for m in self.owner._messages()[-4:]):
            return  # an LLM's output (recorded with its call) or a sub-conversation's message
        result = message.tool_result
        if result is not None and result.tool_request_id in self.tools:
            return  # recorded with the tool's result
        if result is not None and result.tool_request_id in self.confirming:  # a confirmation was declined
            self.confirming.pop(result.tool_request_id)
            self._append(Resumed(value=False, nodes=[result.tool_request_id]))
        names = _tool_names(self.owner._messages())
        made = _message_event(message, names)
        if made is not None:
            self._append(made)

    def _exception(self, event: Any) -> None:
        error = f"{type(event.exception).__name__}: {event.exception}"
        if self.llm_calls:
            call_id, model, start = self.llm_calls.pop()
            self._append(
                LLMCallFailed(call_id=call_id, model=model, error=error, latency_ms=(event.timestamp - start) / 1e6)
            )
        elif self.tools:
            call_id, (name, start) = self.tools.popitem()
            self._append(
                ToolCallFailed(call_id=call_id, tool=name, error=error, latency_ms=(event.timestamp - start) / 1e6)
            )

    def _iteration_finished(self, event: Any) -> None:
        interval = self.owner.interval
        if interval is CheckpointingInterval.ALL_INTERNAL_TURNS or (
            interval is CheckpointingInterval.LLM_TURNS and self.llm_since
        ):
            extra = {"llm_used_in_previous_turn": self.llm_since, "event_type": type(event).__name__}
            self.owner._save("internal_turn_boundary", None, None, extra=extra)
            self.llm_since = False

    _handlers: ClassVar[dict[str, Callable[[_Listener, Any], None]]] = {
        "LlmGenerationRequestEvent": _llm_request,
        "LlmGenerationResponseEvent": _llm_response,
        "ToolExecutionStartEvent": _tool_start,
        "ToolExecutionResultEvent": _tool_result,
        "ToolConfirmationRequestStartEvent": _confirmation_start,
        "ToolConfirmationRequestEndEvent": _confirmation_end,
        "ConversationMessageAddedEvent": _message_added,
        "ExceptionRaisedEvent": _exception,
        "AgentExecutionIterationFinishedEvent": _iteration_finished,
        "FlowExecutionIterationFinishedEvent": _iteration_finished,
    }


# -- starting and restoring ------------------------------------------------------------


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
      `checkpoint_id`. The conversation keeps its id. When the checkpoint is not the
      conversation's latest state, the future after it is forked to a branch run (see
      `EventLogCheckpointer.branches`) and the conversation continues from the checkpoint.

    Refused before anything is written: new `messages` or `inputs` with a restore
    (RestoreWithMessagesError: restore, then append the message), and a component that is not
    the one the conversation was started with, by id or shape (IncompatibleComponentError).
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
    interval = interval or checkpointer.checkpointing_interval
    if not isinstance(interval, CheckpointingInterval):
        raise TypeError(f"interval must be a CheckpointingInterval, not {type(interval).__name__}")
    log = checkpointer.log
    if conversation_id is None:
        if checkpoint_id is not None:
            raise WayflowCheckpointError("checkpoint_id needs the conversation_id it belongs to")
        conversation_id = f"conversation-{log.ids()}"
    shape = _shape(component)
    if shape["id"] is not None and _RANDOM_ID.match(shape["id"]):
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
        _check_compatible(conversation_id, head_state, component, shape)
        if checkpoint_id is not None:
            checkpoint = checkpointer.load(conversation_id, checkpoint_id)
        else:
            checkpoint = checkpointer.load_latest(conversation_id)
    elif checkpoint_id is not None:
        raise CheckpointNotFoundError(
            f"conversation {conversation_id!r} does not exist, so it has no checkpoint {checkpoint_id!r}"
        )

    if checkpoint is None:
        start: Any = component.start_conversation  # Agent, Flow, Swarm, ManagerWorkers take a conversation_id
        conversation = start(inputs=inputs, messages=messages, conversation_id=conversation_id)
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
    conversation = _load(target.conversation, component, conversation_id)  # refuses before anything is written
    if head_state.checkpoint_id != checkpoint.checkpoint_id:
        _rewind(log, recorder, head_state, target, checkpoint)
    return CheckpointedConversation(
        checkpointer, conversation_id, component, conversation, recorder, interval, checkpoint, shape
    )


def _rewind(
    log: EventLog, recorder: Recorder, head: WayflowState, target: WayflowState, checkpoint: ConversationCheckpoint
) -> None:
    """Keep the future after `checkpoint` as a branch run, and bring the conversation back to it."""
    run_id, at = recorder.run_id, recorder.offset
    n = len(head.rewinds) + 1
    while True:
        branch = f"{run_id}~{n}"
        try:
            log.fork(run_id, at, branch)
            break
        except RunExistsError:
            info = log.run_info(branch)
            if info.parent == run_id and info.fork_offset == at == info.head:
                break  # left by an earlier attempt that stopped before the rewind was recorded
            n += 1
    recorder.append(
        Rewound(
            checkpoint_id=checkpoint.checkpoint_id,
            offset=checkpoint.offset,
            head=at,
            branch=branch,
            delta=_diff(head.conversation, target.conversation),
            status=target.status,
            turn=target.turn,
            llm_calls=target.llm_calls,
            tool_calls=target.tool_calls,
            input_tokens=target.input_tokens,
            output_tokens=target.output_tokens,
        )
    )


def _has_messages(messages: Any) -> bool:
    if messages is None:
        return False
    if isinstance(messages, str | list | tuple):
        return len(messages) > 0
    return True


# -- wayflowcore's objects as plain data -----------------------------------------------

_EXTERNAL: dict[str, Any] = {"$external": True}
_RANDOM_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_STEP_KEY = "$step:"


def _components(root: Any) -> dict[str, Any]:
    """Every wayflowcore component reachable from `root` through public attributes, by reference."""
    from wayflowcore.component import Component
    from wayflowcore.serialization.context import SerializationContext

    found: dict[str, Any] = {}
    stack = [root]
    while stack:
        item = stack.pop()
        if isinstance(item, Component):
            ref = SerializationContext.get_reference(item)
            if ref in found:
                continue
            found[ref] = item
            stack.extend(v for k, v in vars(item).items() if not k.startswith("_"))
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return found


def _dump(conversation: WayflowConversation, component: Any, conversation_id: str) -> Any:
    """The conversation as plain data: the component tree left out (it is the live one on restore),
    flow steps named by their names instead of their (random) ids."""
    from wayflowcore.serialization.context import SerializationContext
    from wayflowcore.serialization.serializer import serialize_to_dict

    components = _components(component)
    context = SerializationContext(root=conversation)
    for item in components.values():
        context.record_obj_dict(item, _EXTERNAL)  # referenced, not serialized
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        data = serialize_to_dict(conversation, context)
    refs = data.get("_referenced_objects", {})
    data["_referenced_objects"] = {k: v for k, v in refs.items() if v is not _EXTERNAL}
    try:
        plain = msgspec.msgpack.decode(msgspec.msgpack.encode(data))  # a copy that shares nothing with the live objects
    except (TypeError, ValueError, OverflowError) as exc:
        raise UnencodableValueError(
            f"conversation {conversation_id!r} holds a value that cannot be stored ({exc}); keep inputs, variables "
            f"and tool outputs to plain data (str, numbers, lists, dicts)"
        ) from exc
    _rename_step_keys(plain, components, to_names=True, conversation_id=conversation_id)
    return plain


def _load(data: Any, component: Any, conversation_id: str) -> WayflowConversation:
    """A wayflowcore conversation rebuilt from `_dump`'s data, bound to the live component tree."""
    from wayflowcore.conversation import Conversation
    from wayflowcore.executors.executionstatus import ToolExecutionConfirmationStatus
    from wayflowcore.serialization.context import DeserializationContext
    from wayflowcore.serialization.serializer import autodeserialize_from_dict

    if not isinstance(data, dict):
        raise WayflowCheckpointError(f"conversation {conversation_id!r}: the checkpoint holds no conversation")
    data = copy.deepcopy(data)
    components = _components(component)
    _rename_step_keys(data, components, to_names=False, conversation_id=conversation_id)
    missing = sorted(
        ref
        for ref in _refs(data)
        if ref not in data.get("_referenced_objects", {}) and ref not in components and "/" in ref
    )
    if missing:
        raise IncompatibleComponentError(
            f"conversation {conversation_id!r}: the checkpoint refers to {', '.join(missing)}, which the component "
            f"given does not have; build the component with the same ids (pass id=... to every Agent and Flow)"
        )
    context = DeserializationContext()
    for ref, item in components.items():
        context.recorddeserialized_object(ref, item)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        conversation = autodeserialize_from_dict(data, context)
    if not isinstance(conversation, Conversation):
        raise WayflowCheckpointError(f"conversation {conversation_id!r}: the checkpoint holds no conversation")
    # A tool-confirmation pause: the agent's pending request must be the status's own object,
    # the one `confirm_tool_execution` marks, or the agent asks again after a restore.
    status = conversation.status
    state: Any = conversation.state
    if isinstance(status, ToolExecutionConfirmationStatus) and hasattr(state, "current_tool_request"):
        by_id = {r.tool_request_id: r for r in status.tool_requests}
        current = state.current_tool_request
        if current is not None and current.tool_request_id in by_id:
            state.current_tool_request = by_id[current.tool_request_id]
        state.tool_call_queue = [by_id.get(r.tool_request_id, r) for r in state.tool_call_queue]
    return conversation


def _refs(data: Any) -> Iterator[str]:
    """Every `$ref` in serialized data."""
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            ref = item.get("$ref")
            if isinstance(ref, str):
                yield ref
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _rename_step_keys(data: Any, components: dict[str, Any], *, to_names: bool, conversation_id: str) -> None:
    """Flow state keys made of a step's id (random per process) become `$step:[name, key]`, and back."""
    for value in data.get("_referenced_objects", {}).values():
        if not isinstance(value, dict) or value.get("_component_type") != "FlowConversationExecutionState":
            continue
        flow = components.get(str((value.get("flow") or {}).get("$ref")))
        steps: dict[str, Any] = dict(getattr(flow, "steps", {}) or {})
        current = value.get("current_step_name")
        if not to_names and current is not None and current not in steps:
            raise IncompatibleComponentError(
                f"conversation {conversation_id!r}: the checkpoint is at step {current!r}, which flow "
                f"{getattr(flow, 'id', '?')!r} does not have (steps: {sorted(steps)}); keep step names stable"
            )
        keys = value.get("internal_context_key_values")
        if not isinstance(keys, dict):
            continue
        renamed: dict[str, Any] = {}
        for key, item in keys.items():
            renamed[_step_key(key, steps, to_names, conversation_id)] = item
        value["internal_context_key_values"] = renamed


def _step_key(key: str, steps: dict[str, Any], to_names: bool, conversation_id: str) -> str:
    if to_names:
        for name, step in steps.items():
            prefix = f"{step.id}_"
            if key.startswith(prefix):
                return _STEP_KEY + json.dumps([name, key[len(prefix) :]])
        return key
    if not key.startswith(_STEP_KEY):
        return key
    name, rest = json.loads(key[len(_STEP_KEY) :])
    if name not in steps:
        raise IncompatibleComponentError(
            f"conversation {conversation_id!r}: the checkpoint has state for step {name!r}, which the flow given "
            f"does not have (steps: {sorted(steps)}); keep step names stable"
        )
    return f"{steps[name].id}_{rest}"


def _shape(component: Any) -> dict[str, Any]:
    """What a checkpoint depends on: ids and names of the conversational components, their tools,
    their steps (by name and type) and the edges between steps. Prompts and models may change."""
    from wayflowcore.agent import Agent
    from wayflowcore.conversationalcomponent import ConversationalComponent
    from wayflowcore.flow import Flow

    out: dict[str, Any] = {"type": type(component).__name__, "id": getattr(component, "id", None)}
    out["name"] = str(getattr(component, "name", "") or "")

    def nested(item: Any) -> list[dict[str, Any]]:
        return [
            _shape(v) for k, v in vars(item).items() if not k.startswith("_") and isinstance(v, ConversationalComponent)
        ]

    if isinstance(component, Agent):
        out["tools"] = sorted(
            str(getattr(t, "name", type(t).__name__)) + ("!" if getattr(t, "requires_confirmation", False) else "")
            for t in component.tools
        )
        out["agents"] = [_shape(a) for a in component.agents]
        out["flows"] = [_shape(f) for f in component.flows]
    elif isinstance(component, Flow):
        names = {id(step): name for name, step in component.steps.items()}
        out["steps"] = {
            name: {"type": type(step).__name__, "uses": nested(step)} for name, step in component.steps.items()
        }
        out["edges"] = sorted(
            [
                names.get(id(e.source_step), "?"),
                str(e.source_branch),
                None if e.destination_step is None else names.get(id(e.destination_step), "?"),
            ]
            for e in component.control_flow_edges
        )
    return out


def _check_compatible(conversation_id: str, state: WayflowState, component: Any, shape: dict[str, Any]) -> None:
    if state.shape == shape:
        return
    where, saved, now = _first_difference(state.shape, shape, "component")
    hint = ""
    if isinstance(saved, str) and isinstance(now, str) and (_RANDOM_ID.match(saved) or _RANDOM_ID.match(now)):
        hint = " (an id generated at random changes in every process: give every Agent and Flow a fixed id=...)"
    raise IncompatibleComponentError(
        f"conversation {conversation_id!r} was started with {state.component_type} {state.component_id!r}; the "
        f"{type(component).__name__} given differs at {where}: {saved!r} in the conversation, {now!r} now{hint}"
    )


def _first_difference(a: Any, b: Any, path: str) -> tuple[str, Any, Any]:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            if a.get(key) != b.get(key):
                return _first_difference(a.get(key), b.get(key), f"{path}.{key}")
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if x != y:
                return _first_difference(x, y, f"{path}[{i}]")
    return path, a, b


def _definition(component: Any) -> str | None:
    """The component as wayflowcore serializes it, or None when it cannot (a custom type without a plugin)."""
    from wayflowcore.serialization import serialize

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return serialize(component)
    except Exception:  # noqa: BLE001 - a definition that cannot be written is left out, not fatal
        return None


def _plain(value: Any) -> Any:
    """A value the log can store: plain data as is, anything else as its text."""
    try:
        return msgspec.to_builtins(value, str_keys=True)
    except (TypeError, ValueError, OverflowError):
        return str(value)


def _text(message: Any) -> str:
    try:
        return str(message.content or "")
    except Exception:  # noqa: BLE001 - a message whose content cannot be read shows as empty
        return ""


def _log_message(message: Any) -> LogMessage:
    """A wayflowcore message as the standard kinds hold one."""
    if message.tool_result is not None:
        return LogMessage(
            role="tool", content=_text_of(message.tool_result.content), tool_call_id=message.tool_result.tool_request_id
        )
    calls = [
        ToolCall(id=r.tool_request_id, name=r.name, arguments=_plain(dict(r.args or {})))
        for r in message.tool_requests or []
    ]
    role = message.role if message.role in ("user", "assistant", "system") else "assistant"
    return LogMessage(role=role, content=_text(message), tool_calls=calls)


def _text_of(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(_plain(value))


def _tool_names(messages: Sequence[Any]) -> dict[str, str]:
    return {r.tool_request_id: r.name for m in messages for r in (m.tool_requests or [])}


def _message_event(message: Any, tool_names: Mapping[str, str]) -> Event | None:
    """The event that shows a message added outside an LLM call or a tool execution."""
    result = message.tool_result
    if result is not None:
        name = tool_names.get(result.tool_request_id, "")
        return ToolCallCompleted(call_id=result.tool_request_id, tool=name, output=_plain(result.content))
    if message.role == "user":
        return UserMessage(content=_text(message))
    if message.role == "assistant":
        out = _log_message(message)
        return AssistantMessage(content=out.content, tool_calls=out.tool_calls)
    return None


# -- the command line's view -----------------------------------------------------------


class _View:
    """How `eventlog history` and `eventlog state` show a WayFlow conversation (see eventlog.views)."""

    name = "wayflow"
    kind_prefix = "wayflow."
    fold = WayflowReducer()
    """The reducer a conversation's runs fold with."""

    def history(self, log: EventLog, run_id: str, limit: int | None) -> tuple[Sequence[str], list[dict[str, Any]]]:
        columns = ("checkpoint", "offset", "saved", "reason", "turn", "messages", "status")
        rows = []
        for cp in EventLogCheckpointer(log).list_checkpoints(run_id, limit):
            md = cp.metadata
            rows.append(
                {
                    "checkpoint": cp.checkpoint_id,
                    "offset": cp.offset,
                    "saved": _dt.datetime.fromtimestamp(cp.created_at, tz=_dt.UTC).isoformat(),
                    "reason": md.get("save_reason", ""),
                    "turn": md.get("turn"),
                    "messages": md.get("message_count"),
                    "status": md.get("status_type", ""),
                }
            )
        return columns, rows

    def state(self, log: EventLog, run_id: str, offset: int) -> Any:
        s: WayflowState = log.state_at(run_id, offset, reducer=self.fold)
        return {
            "component_id": s.component_id,
            "component_type": s.component_type,
            "checkpoint_id": s.checkpoint_id,
            "status": s.status,
            "turn": s.turn,
            "llm_calls": s.llm_calls,
            "tool_calls": s.tool_calls,
            "input_tokens": s.input_tokens,
            "output_tokens": s.output_tokens,
            "last_error": s.last_error,
            "messages": _display_messages(s.conversation),
            "branches": list(s.rewinds),
        }


def _display_messages(conversation: Any) -> list[dict[str, Any]]:
    """The root message list of a serialized conversation, as role and text."""
    if not isinstance(conversation, dict):
        return []
    ref = (conversation.get("message_list") or {}).get("$ref")
    listed = conversation.get("_referenced_objects", {}).get(ref, {})
    out = []
    for m in listed.get("messages", []) if isinstance(listed, dict) else []:
        text = "".join(c.get("content", "") for c in m.get("contents", []) if isinstance(c.get("content"), str))
        if m.get("tool_result"):
            out.append({"role": "tool", "content": _text_of(m["tool_result"].get("content"))})
            continue
        entry: dict[str, Any] = {"role": m.get("role"), "content": text}
        calls = [r.get("name") for r in m.get("tool_requests") or []]
        if calls:
            entry["tool_calls"] = calls
        out.append(entry)
    return out


VIEW = _View()
"""The run view registered under the `eventlog.views` entry point group."""
