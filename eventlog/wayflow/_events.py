"""The event kinds a WayFlow conversation adds to the standard ones, and the fold of a
conversation's events into `WayflowState`.

A snapshot stores the change of the serialized conversation since the previous one (see
`_diff`); a message's text that an event since then carries already is named, not stored again.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import msgspec

from ..agent.policy import CheckpointPolicy
from ..errors import RunReplacedError
from ..events import (
    AssistantMessage,
    Event,
    LLMCallCompleted,
    LLMCallFailed,
    ToolCallCompleted,
    ToolCallFailed,
    TurnFailed,
    TurnStarted,
    UserMessage,
    register,
)
from ..log import EventLog
from ..services.runwriter import RunWriter
from ._diff import copied, patch, same
from ._types import WayflowCheckpointError

__all__ = [
    "ConversationStarted",
    "Rewound",
    "Snapshot",
    "WayflowReducer",
    "WayflowState",
    "refer_texts",
    "resolve_texts",
]


class ConversationStarted(Event, frozen=True, tag="wayflow.started"):
    """A WayFlow conversation began; its component is described once, here."""

    component_id: str
    """Id of the Agent or Flow."""
    component_type: str
    """`Agent`, `Flow`, ..."""
    name: str = ""
    """The component's name."""
    shape: dict[str, Any] = msgspec.field(default_factory=dict)
    """What a restore checks: ids, tools, steps and sub-components (see `shape_of`)."""
    definition: str | None = None
    """The component as wayflowcore serializes it (YAML), or None when it cannot."""


class Snapshot(Event, frozen=True, tag="wayflow.snapshot"):
    """A checkpoint's content: what changed in the serialized conversation since the previous snapshot."""

    checkpoint_id: str
    """The checkpoint saved at this event's offset."""
    delta: Any = None
    """The change (see `diff`); None when nothing changed."""
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


SNAPSHOT_BYTES_MIN = 128 * 1024
"""A conversation's writer materializes a checkpoint's state again only after this many stored
bytes of events since its last snapshot (`RunWriter.snapshot_bytes_min`): a conversation is
read back at a restore, a few times in its life, where it is saved at every turn; a fold of
128 KiB of its events takes about 9 ms, and each snapshot is a copy of the whole conversation."""


def conversation_writer(log: EventLog[Any], conversation_id: str, reducer: WayflowReducer) -> RunWriter[WayflowState]:
    """The run writer of one conversation: checkpoints only when saved, snapshots by `SNAPSHOT_BYTES_MIN`."""
    return log.writer(
        conversation_id, reducer=reducer, policy=CheckpointPolicy.never(), snapshot_bytes_min=SNAPSHOT_BYTES_MIN
    )


@contextmanager
def writers_life(log: EventLog[Any], conversation_id: str, writer: RunWriter[WayflowState]) -> Iterator[None]:
    """`with writers_life(log, id, writer):` the reads made inside are all of the life of the
    conversation's run that `writer` writes (a restore reads a checkpoint and a state, then writes
    through the writer): RunReplacedError when the run was deleted, or made again, since."""
    with log.pinned(conversation_id) as info:
        if info.number != writer.run_number:
            raise RunReplacedError(conversation_id, writer.run_number or 0, info.number, "it was restored")
        yield


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
            if event.texts:  # resolved into a copy: patched in without another
                s.conversation = patch(s.conversation, resolve_texts(event.delta, s.texts), fresh=True)
            else:
                s.conversation = patch(s.conversation, event.delta)
            s.checkpoint_id, s.status, s.texts = event.checkpoint_id, event.status, []
        elif isinstance(event, Rewound):
            s.conversation = patch(s.conversation, event.delta)
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


def refer_texts(delta: Any, texts: Sequence[str]) -> tuple[Any, bool]:
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
    return (delta, False) if own or same(out, delta) else (out, True)


def resolve_texts(delta: Any, texts: Sequence[str]) -> Any:
    """The reverse of `refer_texts`: a copy of `delta` (it shares no container with it)."""
    if type(delta) is list:
        return [x if type(x) not in _CONTAINERS else resolve_texts(x, texts) for x in delta]
    if type(delta) is dict:
        if len(delta) == 1 and "$text" in delta:
            i = delta["$text"]
            if not isinstance(i, int) or not 0 <= i < len(texts):
                raise WayflowCheckpointError(f"a snapshot names text {i!r}, which the events before it do not carry")
            return texts[i]
        return {k: v if type(v) not in _CONTAINERS else resolve_texts(v, texts) for k, v in delta.items()}
    return copied(delta)


_CONTAINERS = (list, dict)
