"""A conversation's data: what an LLM may return (`Completion`), how a turn ends (`TurnResult`),
the `Restored` event, `ConversationState` and its reducer, the branch a restore keeps, and the
tool calls a state leaves pending.

`eventlog.agent.conversation` exports the public names and drives the conversation with them.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any, cast

import msgspec

from ..errors import RunExistsError, RunReplacedError
from ..log import EventLog
from ..record.kinds import Event, register
from ..services.checkpoints import Checkpoint
from .events import Message, ToolCall
from .state import AgentReducer, AgentState

__all__ = [
    "Completion",
    "ConversationReducer",
    "ConversationState",
    "Restored",
    "TurnResult",
    "pending_tool_calls",
    "restore_event",
]


class Completion(msgspec.Struct, frozen=True):
    """What an LLM may return instead of a bare Message, to report its token usage."""

    message: Message
    input_tokens: int = 0
    output_tokens: int = 0


class TurnResult(msgspec.Struct, frozen=True):
    """How `send`, `execute` or `resume` ended."""

    status: str
    """`answered` (the turn completed) or `paused` (waiting for `resume(value)`)."""
    turn: int
    """Number of the turn."""
    offset: int
    """Head of the conversation's run afterwards."""
    message: Message | None = None
    """The assistant's answer, when answered."""
    interrupt: Any = None
    """`{"reason": ..., "payload": {"call_id", "tool", "arguments"}}`, when paused."""


@register
class Restored(Event, frozen=True, tag="conversation.restored"):
    """The conversation was brought back to a checkpoint; the future it replaced is a branch run."""

    checkpoint_id: str
    """The checkpoint restored."""
    offset: int
    """Its offset."""
    head: int
    """The last offset of the replaced future: the branch is forked there."""
    branch: str
    """Run id of the branch that keeps the replaced future."""
    keep: int = 0
    """How many of the conversation's messages the checkpoint's state starts with."""
    messages: list[Message] = msgspec.field(default_factory=list)
    """The checkpoint state's messages after those."""
    state: dict[str, Any] = msgspec.field(default_factory=dict)
    """Every other field of the checkpoint's state."""


class ConversationState(AgentState):
    """`AgentState` and the restores of the conversation."""

    restores: list[dict[str, Any]] = msgspec.field(default_factory=list)
    """Every restore: `checkpoint_id`, `offset`, `head`, `branch` (oldest first)."""


class ConversationReducer(AgentReducer):
    """AgentReducer, and `Restored`: the state becomes the restored checkpoint's."""

    name = "conversation"
    version = 1
    state_type = ConversationState

    def initial(self) -> ConversationState:
        return ConversationState()

    def apply(self, state: AgentState, event: Event) -> AgentState:
        if not isinstance(event, Restored):
            return super().apply(state, event)
        assert isinstance(state, ConversationState)
        restores = state.restores + [
            {"checkpoint_id": event.checkpoint_id, "offset": event.offset, "head": event.head, "branch": event.branch}
        ]
        fields = {k: copy.deepcopy(v) for k, v in event.state.items() if k in _STATE_FIELDS}
        return ConversationState(
            **fields, messages=state.messages[: event.keep] + list(event.messages), restores=restores
        )


_STATE_FIELDS = frozenset(AgentState.__struct_fields__) - {"messages"}


def restore_event(
    log: EventLog[Any],
    reducer: ConversationReducer,
    current: ConversationState,
    cp: Checkpoint[Any],
    conversation_id: str,
    head: int,
) -> Restored:
    """Fork the conversation at `head` into a new branch run (`<id>~1`, `<id>~2`, ...) that keeps
    the future after `cp`, and return the event that brings the state at `head` back to `cp`'s."""
    with log.pinned(conversation_id) as info:  # the checkpoint's life, throughout
        if info.number != cp.run_number:
            raise RunReplacedError(conversation_id, cp.run_number, info.number, "it was restored")
        target = cast(ConversationState, log.state_at(conversation_id, cp.offset, reducer=reducer))
    keep = 0
    for a, b in zip(current.messages, target.messages, strict=False):
        if a != b:
            break
        keep += 1
    n = len(current.restores) + 1
    while True:
        branch = f"{conversation_id}~{n}"
        try:
            log.fork(conversation_id, head, branch, run_number=cp.run_number)
            break
        except RunExistsError:
            n += 1
    fields = msgspec.structs.asdict(target)
    state = {k: msgspec.to_builtins(v) for k, v in fields.items() if k in _STATE_FIELDS}
    return Restored(
        checkpoint_id=cp.checkpoint_id, offset=cp.offset, head=head, branch=branch, keep=keep,
        messages=list(target.messages[keep:]), state=state,
    )  # fmt: skip


def pending_tool_calls(messages: Sequence[Message]) -> list[ToolCall]:
    """Tool calls of the last assistant message that no tool message answers yet."""
    answered: set[str] = set()
    for message in reversed(messages):
        if message.role == "tool" and message.tool_call_id is not None:
            answered.add(message.tool_call_id)
        elif message.role == "assistant":
            return [c for c in message.tool_calls if c.id not in answered]
        else:
            return []
    return []
