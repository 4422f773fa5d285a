"""The events a LangGraph thread is stored as, and the fold that makes its state of them.

`CheckpointSaved` (a `put`) and `WritesSaved` (a `put_writes`) are appended to the thread's
run; `ThreadReducer` folds them into a `ThreadState`: the current checkpoint's channel values
(as LangGraph's serializer wrote them), versions and pending writes.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from ..agent.policy import CheckpointPolicy
from ..errors import EventLogError
from ..events import Event, register

__all__ = [
    "POLICY",
    "Blob",
    "CheckpointSaved",
    "LangGraphThreadError",
    "RewriteStarted",
    "ThreadReducer",
    "ThreadState",
    "Version",
    "Write",
    "WriteValue",
    "WritesSaved",
    "add_writes",
    "id_list",
    "pending_writes",
]

Version = str | int | float


class LangGraphThreadError(EventLogError):
    """A thread that cannot be stored as asked (a run that is not LangGraph's, a copy onto a
    thread that exists, an unknown prune strategy)."""


def id_list(what: str, ids: Iterable[str]) -> list[str]:
    """Thread or run ids as given, each as a str; a str (or bytes) is refused with TypeError, as
    LangGraph's `PostgresSaver.prune` refuses it, never read as the ids of its characters."""
    if isinstance(ids, str | bytes | bytearray):
        raise TypeError(f"{what} must be a sequence of ids, not {type(ids).__name__} {ids!r:.80}")
    return [str(i) for i in ids]


class Blob(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """A value as LangGraph's serializer wrote it: `serde.dumps_typed(value)`."""

    type: str
    """The serializer's type tag (`msgpack`, `json`, `msgpack+aes`, ...)."""
    data: bytes
    """The serialized value."""


class WriteValue(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """One write of a `WritesSaved` event."""

    idx: int
    """Index of the write in its task (negative for LangGraph's special channels)."""
    channel: str
    """Channel written."""
    value: Blob
    """Value written."""


class Write(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """A pending write of a checkpoint, as the fold keeps it."""

    task_id: str
    idx: int
    channel: str
    value: Blob
    task_path: str = ""


class CheckpointSaved(Event, frozen=True, tag="langgraph.checkpoint"):
    """`put`: a LangGraph checkpoint, as a change of the thread's current checkpoint.

    Without `fork`, the change applies to the checkpoint before it in the run (its parent);
    with `fork`, to nothing: the event holds every channel of the checkpoint.
    """

    checkpoint_id: str
    """LangGraph's checkpoint id."""
    parent_id: str | None = None
    """The checkpoint it was made from (the config's `checkpoint_id`)."""
    ts: str = ""
    """LangGraph's timestamp (ISO 8601)."""
    v: int = 1
    """LangGraph's checkpoint format version."""
    fork: bool = False
    """True when the event stands alone (the parent is not the run's current checkpoint)."""
    chunks: dict[str, list[Blob]] = msgspec.field(default_factory=dict)
    """Channels set to a new value: one blob, or the blobs of list pieces to concatenate."""
    tails: dict[str, Blob] = msgspec.field(default_factory=dict)
    """List channels whose value grew: the items appended to the value before."""
    empty: list[str] = msgspec.field(default_factory=list)
    """Channels with a new version and no value."""
    versions: dict[str, Version] = msgspec.field(default_factory=dict)
    """Channel versions that changed (all of them for a fork)."""
    dropped: list[str] = msgspec.field(default_factory=list)
    """Channels no longer versioned."""
    seen: dict[str, dict[str, Version]] = msgspec.field(default_factory=dict)
    """`versions_seen` entries that changed."""
    seen_dropped: list[str] = msgspec.field(default_factory=list)
    """Nodes no longer in `versions_seen`."""
    updated: list[str] | None = None
    """LangGraph's `updated_channels`."""
    extra: Blob | None = None
    """Any other keys of the checkpoint (such as `pending_sends` of older formats)."""


class WritesSaved(Event, frozen=True, tag="langgraph.writes"):
    """`put_writes`: writes of one task, pending on a checkpoint."""

    checkpoint_id: str
    """The checkpoint they are pending on."""
    task_id: str
    """The task that made them."""
    task_path: str = ""
    """The task's path (the first part of `writes_sort_key`)."""
    writes: list[WriteValue] = msgspec.field(default_factory=list)
    """The writes."""


class RewriteStarted(Event, frozen=True, tag="langgraph.rewrite"):
    """A rewrite of the thread's run (`delete_for_runs`) starts here: the mark that puts every
    other writer of the run behind its head. The fold ignores it; the rewritten run leaves it out."""


register(CheckpointSaved)
register(WritesSaved)
register(RewriteStarted)


class ThreadState(msgspec.Struct, omit_defaults=True):
    """What `ThreadReducer` folds a run into: its current checkpoint and pending writes."""

    checkpoint_id: str | None = None
    """The current (last saved) checkpoint; None before the first."""
    parent_id: str | None = None
    ts: str = ""
    v: int = 1
    values: dict[str, list[Blob]] = {}
    """Channel values as stored: a value is its blobs' values concatenated (one blob: the value)."""
    versions: dict[str, Version] = {}
    seen: dict[str, dict[str, Version]] = {}
    updated: list[str] | None = None
    extra: Blob | None = None
    writes: list[Write] = []
    """Writes pending on the current checkpoint."""
    late: dict[str, list[Write]] = {}
    """Writes pending on other checkpoints than the current one: an earlier one, or one not saved
    yet (LangGraph saves a checkpoint in the background and the writes of its tasks may come first).
    A read of an earlier one adds them to those it had then by LangGraph's rule (`pending_writes`)."""


class ThreadReducer:
    """Folds `CheckpointSaved` and `WritesSaved` events into `ThreadState`."""

    name = "langgraph"
    version = 1
    state_type = ThreadState

    def initial(self) -> ThreadState:
        return ThreadState()

    def apply(self, state: ThreadState, event: Event) -> ThreadState:
        kind = type(event)
        if kind is CheckpointSaved:
            _apply_checkpoint(state, event)  # type: ignore[arg-type]
        elif kind is WritesSaved:
            _apply_writes(state, event)  # type: ignore[arg-type]
        return state


def _apply_checkpoint(s: ThreadState, e: CheckpointSaved) -> None:
    if e.fork:
        values: dict[str, list[Blob]] = {}
        versions: dict[str, Version] = {}
        seen: dict[str, dict[str, Version]] = {}
    else:
        values, versions, seen = s.values, s.versions, s.seen
    for ch in e.dropped:
        versions.pop(ch, None)
    versions.update(e.versions)
    for node in e.seen_dropped:
        seen.pop(node, None)
    for node, entry in e.seen.items():
        seen[node] = dict(entry)
    for ch in e.empty:
        values.pop(ch, None)
    for ch, chunks in e.chunks.items():
        values[ch] = list(chunks)
    for ch, tail in e.tails.items():
        current = values.get(ch)
        if current is None:
            values[ch] = [tail]
        else:
            current.append(tail)
    for ch in [c for c in values if c not in versions]:
        del values[ch]
    s.values, s.versions, s.seen = values, versions, seen
    s.checkpoint_id, s.parent_id, s.ts, s.v = e.checkpoint_id, e.parent_id, e.ts, e.v
    s.updated = None if e.updated is None else list(e.updated)
    s.extra = e.extra
    s.writes = s.late.pop(e.checkpoint_id, [])  # writes can be saved before their checkpoint is


def _apply_writes(s: ThreadState, e: WritesSaved) -> None:
    pending = s.writes if e.checkpoint_id == s.checkpoint_id else s.late.setdefault(e.checkpoint_id, [])
    add_writes(pending, [Write(e.task_id, w.idx, w.channel, w.value, e.task_path) for w in e.writes])


def add_writes(pending: list[Write], new: list[Write]) -> None:
    """Add `new` to the writes pending on one checkpoint as LangGraph's savers key them, by task
    and index: a write to a special channel (error, scheduled, interrupt, resume: a negative index)
    replaces the one under its key, in its place; any other leaves the one there (the first counts)."""
    for w in new:
        for i, old in enumerate(pending):
            if old.task_id == w.task_id and old.idx == w.idx:
                if w.idx < 0:
                    pending[i] = w
                break
        else:
            pending.append(w)


def pending_writes(then: list[Write], late: list[Write] | None) -> list[Write]:
    """The writes pending on a checkpoint: `then`, those of the run's state while it was the current
    checkpoint, and `late`, those saved after the run moved on (`ThreadState.late` of the head),
    added by `add_writes`: a later resume of the checkpoint replaces its `__resume__` write."""
    out = list(then)
    if late:
        add_writes(out, late)
    return out


class _AtCheckpoints(CheckpointPolicy, frozen=True):
    """Checkpoint the run right after each `CheckpointSaved` event."""

    def wants(self, event: Event, events_since: int, llm_since: bool) -> bool:
        return type(event) is CheckpointSaved


POLICY = _AtCheckpoints(final=False)
"""The policy of every writer of a thread's run."""
