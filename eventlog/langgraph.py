"""LangGraph checkpointer over an eventlog log: `EventLogSaver`.

    from langgraph.graph import StateGraph
    from eventlog.langgraph import EventLogSaver

    with EventLogSaver.from_path("threads.lmdb") as saver:
        graph = builder.compile(checkpointer=saver)
        graph.invoke({"messages": [...]}, {"configurable": {"thread_id": "chat-1"}})

Event-sourced, not a snapshot per checkpoint. A LangGraph thread, and each of its
checkpoint namespaces (one per subgraph call), is a run of the log:

- thread `T`, namespace `""` is run `T`; namespace `NS` is run `T|NS` (`NS` is LangGraph's
  own, such as `child:1b6f...|grandchild:9c0e...`). A `\\` or `|` inside `T` is written
  `\\\\` or `\\|`, so every (thread, namespace) pair has its own run and a thread id without
  those characters is its own run id: `eventlog history T` shows thread `T`. A run id is
  at most 1,024 UTF-8 bytes; a longer thread and namespace is refused by name.
- `put` appends a `langgraph.checkpoint` event (`CheckpointSaved`) holding only the
  channels in `new_versions`, and for a list channel whose new value starts with the
  items of its value before (a message list under `add_messages`), only the items
  appended. `put_writes` appends a `langgraph.writes` event (`WritesSaved`).
- `ThreadReducer` folds a run into the thread's state at any offset: the current
  checkpoint's channel values (as LangGraph's serializer wrote them, never decoded by the
  fold), versions and pending writes. Each checkpoint is an eventlog checkpoint of the run
  at its event's offset, whose metadata holds LangGraph's checkpoint id and metadata; the
  log materializes snapshots among them so that any checkpoint is restored by loading one
  snapshot and folding a bounded number of events after it.

Values go through `self.serde` (`dumps_typed`/`loads_typed`): `EncryptedSerializer` and
strict msgpack keep working, and nothing is pickled. List values are compared item by
item by identity with the value the saver last stored or returned: a node that changes an
item of a list in place, rather than returning a new item, has that change stored only
once the item is replaced.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import operator
import os
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import msgspec
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

import eventlog
from eventlog.errors import ConflictError, EventLogError, InvalidRunIdError, UnknownRunError
from eventlog.events import Event, register

__all__ = [
    "Blob",
    "CheckpointSaved",
    "EventLogSaver",
    "LangGraphThreadError",
    "ThreadReducer",
    "ThreadState",
    "Write",
    "WriteValue",
    "WritesSaved",
    "run_id_of",
    "thread_of",
]

Version = str | int | float
_T = TypeVar("_T")

_KNOWN_KEYS = frozenset({"v", "id", "ts", "channel_values", "channel_versions", "versions_seen", "updated_channels"})
_REWRITE = "|:rewrite"
"""Suffix of the run a rewrite stages its result in (no LangGraph namespace starts with `:`)."""
_CONFLICT_RETRIES = 8
_FOLD_GAP_EVENTS = 4096
"""`list` folds forward from one checkpoint to the next when they are at most this many events
apart, and restores the next one from its nearest snapshot otherwise."""


class LangGraphThreadError(EventLogError):
    """A thread that cannot be stored as asked (a run that is not LangGraph's, a copy onto a
    thread that exists, an unknown prune strategy)."""


# -- events and state ------------------------------------------------------------------------


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


register(CheckpointSaved)
register(WritesSaved)


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
    yet (LangGraph saves a checkpoint in the background and the writes of its tasks may come first)."""


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
    for w in e.writes:
        new = Write(e.task_id, w.idx, w.channel, w.value, e.task_path)
        for i, old in enumerate(pending):
            if old.task_id == e.task_id and old.idx == w.idx:
                if w.idx < 0:  # a special channel (error, interrupt, resume): the last one counts
                    pending[i] = new
                break
        else:
            pending.append(new)


class _AtCheckpoints(eventlog.CheckpointPolicy, frozen=True):
    """Checkpoint the run right after each `CheckpointSaved` event."""

    def wants(self, event: Event, events_since: int, llm_since: bool) -> bool:
        return type(event) is CheckpointSaved


_POLICY = _AtCheckpoints(final=False)


# -- run ids ---------------------------------------------------------------------------------


def run_id_of(thread_id: str, checkpoint_ns: str = "") -> str:
    """The run that holds a thread's namespace: `T` for the root, `T|NS` for namespace `NS`."""
    escaped = thread_id.replace("\\", "\\\\").replace("|", "\\|")
    run_id = f"{escaped}|{checkpoint_ns}" if checkpoint_ns else escaped
    size = len(run_id.encode("utf-8", "surrogatepass"))
    if not thread_id or size > 1024:
        raise InvalidRunIdError(
            f"thread {thread_id!r} namespace {checkpoint_ns!r} makes a run id of {size} UTF-8 bytes; "
            "eventlog takes 1 to 1,024: use a shorter thread id"
        )
    return run_id


def thread_of(run_id: str) -> tuple[str, str]:
    """(thread id, checkpoint namespace) of a run id made by `run_id_of`."""
    out: list[str] = []
    i = 0
    while i < len(run_id):
        c = run_id[i]
        if c == "\\" and i + 1 < len(run_id):
            out.append(run_id[i + 1])
            i += 2
            continue
        if c == "|":
            return "".join(out), run_id[i + 1 :]
        out.append(c)
        i += 1
    return "".join(out), ""


# -- the saver -------------------------------------------------------------------------------


_Batches = list[tuple[list[Event], dict[str, Any] | None]]
"""A run's events to append again, in batches: each ends with a checkpoint (with its eventlog
checkpoint metadata) or holds the writes after the last checkpoint (metadata None)."""


class _Mark(msgspec.Struct, array_like=True, gc=False):
    """A LangGraph checkpoint of a run: its eventlog checkpoint's offset and metadata."""

    offset: int
    checkpoint_id: str
    metadata: Blob


class _Run:
    """What the saver keeps in memory of one run; every use holds `lock`."""

    def __init__(self, run_id: str, thread_id: str, ns: str) -> None:
        self.run_id, self.thread_id, self.ns = run_id, thread_id, ns
        self.lock = threading.RLock()
        self.rec: Any = None  # eventlog.Recorder, made when first used
        self.lists: dict[str, list[Any]] = {}
        """Decoded list values of the current checkpoint (private copies), for the item comparison."""
        self.marks: list[_Mark] | None = None
        self.position: dict[str, int] = {}
        self.current: Blob | None = None
        """Metadata of the current checkpoint, when known."""

    def forget(self) -> None:
        self.rec, self.lists, self.marks, self.position, self.current = None, {}, None, {}, None


def _checkpoint_metadata(checkpoint_id: str, metadata: Blob) -> dict[str, Any]:
    return {"id": checkpoint_id, "md": [metadata.type, metadata.data]}


def _mark(offset: int, metadata: Mapping[str, Any]) -> _Mark | None:
    cid, md = metadata.get("id"), metadata.get("md")
    if not isinstance(cid, str) or not isinstance(md, list) or len(md) != 2:
        return None
    return _Mark(offset, cid, Blob(str(md[0]), bytes(md[1])))


class EventLogSaver(BaseCheckpointSaver[int]):
    """A LangGraph checkpointer that stores threads as runs of an eventlog log.

    `log` is any open log (LMDB, `:memory:`, PostgreSQL); the saver does not close it
    (`from_path` does). The sync methods and their async twins (`aget_tuple`, `alist`,
    `aput`, ...) serve `graph.invoke` and `await graph.ainvoke` alike; the async ones run
    the sync core in a worker thread, so an fsync never blocks the event loop. Safe to
    share between threads: the log is used from `workers` threads of the saver's own (a
    PostgreSQL log then holds that many connections). `cache_size` bounds how many runs keep
    their folded state in memory.
    """

    def __init__(
        self,
        log: eventlog.EventLog,
        *,
        serde: SerializerProtocol | None = None,
        cache_size: int = 128,
        workers: int = 4,
    ) -> None:
        super().__init__(serde=serde)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="eventlog-saver")
        self._local = threading.local()
        self.log = log
        self.reducer = ThreadReducer()
        self.cache_size = cache_size
        self._runs: OrderedDict[str, _Run] = OrderedDict()
        self._lock = threading.Lock()

    @classmethod
    @contextlib.contextmanager
    def from_path(cls, path: str | os.PathLike[str], **open_options: Any) -> Iterator[EventLogSaver]:
        """Open the log at `path` (see `eventlog.open` for the options), yield a saver over it, close it."""
        serde = open_options.pop("serde", None)
        with eventlog.open(path, **open_options) as log:
            saver = cls(log, serde=serde)
            try:
                yield saver
            finally:
                saver.close()

    # -- runs and their state ------------------------------------------------------------------

    def _run(self, thread_id: str, ns: str) -> _Run:
        run_id = run_id_of(thread_id, ns)
        with self._lock:
            run = self._runs.get(run_id)
            if run is not None:
                self._runs.move_to_end(run_id)
                return run
            run = self._runs[run_id] = _Run(run_id, thread_id, ns)
            while len(self._runs) > self.cache_size:
                self._runs.popitem(last=False)
        self._recover(run_id)
        return run

    def _drop(self, run_id: str) -> None:
        with self._lock:
            run = self._runs.pop(run_id, None)
        if run is not None:
            with run.lock:
                run.forget()

    def _recorder(self, run: _Run, *, check: bool = False) -> Any:
        """The run's recorder; with `check`, first made again if another writer moved the head."""
        if run.rec is not None and check and self.log.head(run.run_id) != run.rec.offset:
            run.forget()
        if run.rec is None:
            rec = self.log.recorder(run.run_id, reducer=self.reducer, policy=_POLICY)
            if rec.offset:
                info = self.log.run_info(run.run_id)
                for entry in self.log.read(run.run_id, info.base, min(info.head, info.base + 1)):
                    kind = type(entry.event).__struct_config__.tag
                    if not str(kind).startswith("langgraph."):
                        raise LangGraphThreadError(
                            f"run {run.run_id!r} holds {kind!r} events, not a LangGraph thread; "
                            "use another thread id or another log"
                        )
            run.rec = rec
        return run.rec

    def _marks(self, run: _Run) -> builtins.list[_Mark]:
        """The run's checkpoints, oldest first (read once, then kept up to date)."""
        if run.marks is None:
            try:
                cps = self.log.checkpoints.list(run.run_id, reducer=self.reducer)
            except UnknownRunError:
                cps = []
            marks = [m for cp in cps if cp.reducer == self.reducer.name and (m := _mark(cp.offset, cp.metadata))]
            run.marks = marks
            run.position = {m.checkpoint_id: i for i, m in enumerate(marks)}
        return run.marks

    def _find(self, run: _Run, checkpoint_id: str) -> tuple[_Mark, int] | None:
        """A checkpoint's mark and the last offset before the run's next checkpoint."""
        marks = self._marks(run)
        i = run.position.get(checkpoint_id)
        if i is None:
            return None
        end = marks[i + 1].offset - 1 if i + 1 < len(marks) else run.rec.offset
        return marks[i], end

    def _current_metadata(self, run: _Run, state: ThreadState) -> Blob:
        if run.current is None:
            latest = self.log.checkpoints.load_latest(run.run_id, reducer=self.reducer)
            mark = None if latest is None else _mark(latest.offset, latest.metadata)
            if mark is None or mark.checkpoint_id != state.checkpoint_id:
                found = self._find(run, state.checkpoint_id or "")
                mark = None if found is None else found[0]
            run.current = mark.metadata if mark is not None else self._blob({})
        return run.current

    # -- values ----------------------------------------------------------------------------------

    def _blob(self, value: Any) -> Blob:
        kind, data = self.serde.dumps_typed(value)
        return Blob(kind, bytes(data))

    def _load(self, blob: Blob) -> Any:
        return self.serde.loads_typed((blob.type, blob.data))

    def _value(self, chunks: builtins.list[Blob], cache: dict[int, tuple[Blob, Any]] | None = None) -> Any:
        """A channel value from its stored blobs (a list's pieces are concatenated)."""

        def load(blob: Blob) -> Any:
            if cache is None:
                return self._load(blob)
            hit = cache.get(id(blob))
            if hit is None:
                hit = cache[id(blob)] = (blob, self._load(blob))
            return hit[1]

        first = load(chunks[0])
        if len(chunks) == 1:
            return list(first) if isinstance(first, list) and cache is not None else first
        out = list(first)
        for blob in chunks[1:]:
            out.extend(load(blob))
        return out

    def _tuple(
        self,
        run: _Run,
        state: ThreadState,
        metadata: Blob,
        late: builtins.list[Write] | None,
        *,
        head: bool = False,
        cache: dict[int, tuple[Blob, Any]] | None = None,
    ) -> CheckpointTuple:
        values: dict[str, Any] = {}
        for ch, chunks in state.values.items():
            if not head:
                values[ch] = self._value(chunks, cache)
                continue
            cached = run.lists.get(ch)  # the current checkpoint's lists are kept decoded
            if cached is None:
                value = self._value(chunks)
                if not isinstance(value, list):
                    values[ch] = value
                    continue
                cached = run.lists[ch] = value
            values[ch] = list(cached)
        checkpoint: dict[str, Any] = {
            "v": state.v,
            "id": state.checkpoint_id,
            "ts": state.ts,
            "channel_values": values,
            "channel_versions": dict(state.versions),
            "versions_seen": {node: dict(seen) for node, seen in state.seen.items()},
            "updated_channels": None if state.updated is None else list(state.updated),
        }
        if state.extra is not None:
            checkpoint.update(self._load(state.extra))
        writes = sorted([*state.writes, *(late or ())], key=lambda w: writes_sort_key(w.task_path, w.task_id, w.idx))
        conf = {"thread_id": run.thread_id, "checkpoint_ns": run.ns}
        return CheckpointTuple(
            config={"configurable": {**conf, "checkpoint_id": state.checkpoint_id}},
            checkpoint=checkpoint,  # type: ignore[arg-type]
            metadata=self._load(metadata),
            parent_config=(
                {"configurable": {**conf, "checkpoint_id": state.parent_id}} if state.parent_id is not None else None
            ),
            pending_writes=[(w.task_id, w.channel, self._load(w.value)) for w in writes],
        )

    # -- get_tuple, list -------------------------------------------------------------------------

    def _get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        conf = config["configurable"]
        run = self._run(str(conf["thread_id"]), conf.get("checkpoint_ns", "") or "")
        checkpoint_id = get_checkpoint_id(config)
        with run.lock:
            rec = self._recorder(run, check=True)
            state: ThreadState = rec.state
            if state.checkpoint_id is None:
                return None
            if checkpoint_id is None or checkpoint_id == state.checkpoint_id:
                return self._tuple(run, state, self._current_metadata(run, state), None, head=True)
            found = self._find(run, checkpoint_id)
            if found is None:
                return None
            mark, end = found
            old = self.log.state_at(run.run_id, end, reducer=self.reducer)
            return self._tuple(run, old, mark.metadata, state.late.get(checkpoint_id))

    def _list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> builtins.list[CheckpointTuple]:
        if config is None:
            runs = [self._run(*thread_of(r)) for r in self._langgraph_runs()]
        else:
            conf = config["configurable"]
            thread_id, ns = str(conf["thread_id"]), conf.get("checkpoint_ns")
            if ns is None:
                runs = [self._run(thread_id, thread_of(r)[1]) for r in self._thread_runs(thread_id)]
            else:
                runs = [self._run(thread_id, ns)]
        wanted = get_checkpoint_id(config) if config else None
        before_id = get_checkpoint_id(before) if before else None
        chosen: builtins.list[tuple[str, _Run, _Mark]] = []
        for run in runs:
            with run.lock:
                self._recorder(run, check=True)
                marks = list(self._marks(run))
                latest = {m.checkpoint_id: m for m in marks}  # a checkpoint saved twice counts once
            for mark in marks:
                cid = mark.checkpoint_id
                if latest[cid] is not mark or (wanted and cid != wanted) or (before_id and cid >= before_id):
                    continue
                if filter:
                    md = self._load(mark.metadata)
                    if not all(md.get(k) == v for k, v in filter.items()):
                        continue
                chosen.append((cid, run, mark))
        chosen.sort(key=operator.itemgetter(0), reverse=True)
        if limit is not None:
            chosen = chosen[: max(limit, 0)]
        tuples: dict[int, CheckpointTuple] = {}
        for run in {id(r): r for _, r, _ in chosen}.values():
            tuples.update(self._tuples(run, [m for _, r, m in chosen if r is run]))
        return [tuples[id(mark)] for _, _, mark in chosen if id(mark) in tuples]  # not one deleted meanwhile

    def _tuples(self, run: _Run, marks: builtins.list[_Mark]) -> dict[int, CheckpointTuple]:
        """Tuples of some checkpoints of one run, folded forward from one to the next where close."""
        out: dict[int, CheckpointTuple] = {}
        cache: dict[int, tuple[Blob, Any]] = {}
        with run.lock:
            rec = self._recorder(run)
            head_state: ThreadState = rec.state
            state: ThreadState | None = None
            at = -1
            for mark in sorted(marks, key=lambda m: m.offset):
                found = self._find(run, mark.checkpoint_id)
                if found is None:
                    continue
                end = found[1]
                if end == rec.offset:
                    current = head_state
                else:
                    if state is None or not at <= end <= at + _FOLD_GAP_EVENTS:
                        state, at = self.log.state_at(run.run_id, end, reducer=self.reducer), end
                    for entry in self.log.read(run.run_id, after=at, upto=end):
                        state = self.reducer.apply(state, entry.event)
                    at = end
                    current = state
                out[id(mark)] = self._tuple(
                    run, current, mark.metadata, head_state.late.get(mark.checkpoint_id), cache=cache
                )
        return out

    # -- put, put_writes -------------------------------------------------------------------------

    def _put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        conf = config["configurable"]
        thread_id, ns = str(conf["thread_id"]), conf.get("checkpoint_ns", "") or ""
        parent = conf.get("checkpoint_id")
        run = self._run(thread_id, ns)
        md = self._blob(get_serializable_checkpoint_metadata(config, metadata))
        with run.lock:
            for _ in range(_CONFLICT_RETRIES):
                rec = self._recorder(run)
                event, lists = self._checkpoint_event(run, rec.state, checkpoint, new_versions, parent)
                try:
                    rec.append_many([event], checkpoint_metadata=_checkpoint_metadata(event.checkpoint_id, md))
                except ConflictError:  # another writer appended: rebuild against what it wrote
                    run.forget()
                    continue
                run.lists, run.current = lists, md
                if run.marks is not None:
                    run.position[event.checkpoint_id] = len(run.marks)
                    run.marks.append(_Mark(rec.offset, event.checkpoint_id, md))
                break
            else:
                raise ConflictError(run.run_id, run.rec.offset if run.rec else 0, self.log.head(run.run_id))
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"]}}

    def _checkpoint_event(
        self,
        run: _Run,
        state: ThreadState,
        checkpoint: Checkpoint,
        new_versions: ChannelVersions,
        parent: str | None,
    ) -> tuple[CheckpointSaved, dict[str, builtins.list[Any]]]:
        values = checkpoint["channel_values"]
        versions = checkpoint["channel_versions"]
        seen = checkpoint["versions_seen"]
        fork = parent is None or parent != state.checkpoint_id
        chunks: dict[str, builtins.list[Blob]] = {}
        tails: dict[str, Blob] = {}
        empty: builtins.list[str] = []
        lists: dict[str, builtins.list[Any]] = {}
        if fork:
            base_versions: Mapping[str, Version] = {}
            base_seen: Mapping[str, Mapping[str, Version]] = {}
            previous: dict[str, builtins.list[Any]] = {}
            if parent is not None and (found := self._find(run, parent)) is not None:
                at = self.log.state_at(run.run_id, found[0].offset, reducer=self.reducer)
                chunks = {ch: at.values[ch] for ch in versions if ch not in new_versions and ch in at.values}
        else:
            base_versions, base_seen, previous = state.versions, state.seen, run.lists
            lists = {ch: v for ch, v in previous.items() if ch not in new_versions and ch in versions}
        for ch in new_versions:
            if ch not in values:
                empty.append(ch)
                continue
            value = values[ch]
            if isinstance(value, list):
                before = previous.get(ch)
                n = -1 if before is None else len(before)
                if 0 <= n <= len(value) and all(map(operator.is_, value[:n], before)):  # type: ignore[arg-type]
                    tails[ch] = self._blob(value[n:])
                else:
                    chunks[ch] = [self._blob(value)]
                lists[ch] = list(value)
            else:
                chunks[ch] = [self._blob(value)]
        extra = {k: v for k, v in checkpoint.items() if k not in _KNOWN_KEYS}
        updated = checkpoint.get("updated_channels")
        event = CheckpointSaved(
            checkpoint_id=checkpoint["id"],
            parent_id=parent,
            ts=checkpoint["ts"],
            v=checkpoint["v"],
            fork=fork,
            chunks=chunks,
            tails=tails,
            empty=empty,
            versions={ch: v for ch, v in versions.items() if ch not in base_versions or base_versions[ch] != v},
            dropped=[ch for ch in base_versions if ch not in versions],
            seen={n: dict(s) for n, s in seen.items() if n not in base_seen or base_seen[n] != s},
            seen_dropped=[n for n in base_seen if n not in seen],
            updated=None if updated is None else list(updated),
            extra=self._blob(extra) if extra else None,
        )
        return event, lists

    def _put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        conf = config["configurable"]
        run = self._run(str(conf["thread_id"]), conf.get("checkpoint_ns", "") or "")
        checkpoint_id = conf["checkpoint_id"]
        blobs = [(WRITES_IDX_MAP.get(ch, i), ch, value) for i, (ch, value) in enumerate(writes)]
        with run.lock:
            for _ in range(_CONFLICT_RETRIES):
                rec = self._recorder(run)
                known = {(w.task_id, w.idx) for w in self._writes_of(run, rec.state, checkpoint_id)}
                items = [
                    WriteValue(idx, ch, self._blob(value))
                    for idx, ch, value in blobs
                    if idx < 0 or (task_id, idx) not in known
                ]
                if not items:
                    return
                try:
                    rec.append_many([WritesSaved(checkpoint_id, task_id, task_path, items)])
                except ConflictError:
                    run.forget()
                    continue
                return
            raise ConflictError(run.run_id, run.rec.offset if run.rec else 0, self.log.head(run.run_id))

    def _writes_of(self, run: _Run, state: ThreadState, checkpoint_id: str) -> builtins.list[Write]:
        if checkpoint_id == state.checkpoint_id:
            return state.writes
        late = state.late.get(checkpoint_id, [])
        found = self._find(run, checkpoint_id)
        if found is None:
            return late
        return [*self.log.state_at(run.run_id, found[1], reducer=self.reducer).writes, *late]

    # -- delete, copy, prune ----------------------------------------------------------------------

    def _thread_runs(self, thread_id: str) -> builtins.list[str]:
        """The runs of a thread: its root and one per namespace (not a rewrite in progress)."""
        root = run_id_of(thread_id)
        return [r for r in self.log.runs() if (r == root or r.startswith(root + "|")) and not r.endswith(_REWRITE)]

    def _langgraph_runs(self) -> builtins.list[str]:
        out = []
        for run_id in self.log.runs():
            if run_id.endswith(_REWRITE):
                continue
            latest = self.log.checkpoints.list(run_id, limit=1, newest_first=True)
            if latest and latest[0].reducer == self.reducer.name:
                out.append(run_id)
        return out

    def _delete_thread(self, thread_id: str) -> None:
        root = run_id_of(str(thread_id))
        for run_id in self.log.runs():
            if run_id == root or run_id.startswith(root + "|"):
                self._drop(run_id)
                with contextlib.suppress(UnknownRunError):
                    self.log.delete_run(run_id)

    def _copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        source, target = str(source_thread_id), str(target_thread_id)
        plan = [(r, run_id_of(target, thread_of(r)[1])) for r in self._thread_runs(source)]
        for _, dst in plan:
            if self.log.head(dst):
                raise LangGraphThreadError(f"thread {target!r} exists already; delete it first or copy to a new thread")
        for src, dst in plan:
            run = self._run(*thread_of(src))
            with run.lock:
                items = self._rewrite(src, None)
            self._drop(dst)
            self._write(dst, items)

    def _prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        if strategy not in ("keep_latest", "delete"):
            raise LangGraphThreadError(f"unknown prune strategy {strategy!r}; use 'keep_latest' or 'delete'")
        for thread_id in thread_ids:
            if strategy == "delete":
                self._delete_thread(thread_id)
                continue
            for run_id in self._thread_runs(str(thread_id)):
                run = self._run(*thread_of(run_id))
                with run.lock:
                    self._recorder(run, check=True)
                    marks = self._marks(run)
                    if marks and marks[-1].offset > self.log.run_info(run_id).base:
                        self.log.prune(run_id, before=marks[-1].offset, reducer=self.reducer)
                    run.forget()

    def _delete_for_runs(self, run_ids: Sequence[str]) -> None:
        doomed_runs = {str(r) for r in run_ids}
        if not doomed_runs:
            return
        for run_id in self._langgraph_runs():
            run = self._run(*thread_of(run_id))
            with run.lock:
                self._recorder(run, check=True)
                marks = self._marks(run)
                doomed = {m.checkpoint_id for m in marks if self._load(m.metadata).get("run_id") in doomed_runs}
                if not doomed:
                    continue
                if all(m.checkpoint_id in doomed for m in marks):
                    self.log.delete_run(run_id)
                else:
                    self._replace(run_id, self._rewrite(run_id, doomed))
                run.forget()

    # -- rewriting runs ---------------------------------------------------------------------------

    def _rewrite(self, run_id: str, doomed: set[str] | None) -> _Batches:
        """A run's events as batches to append again, without the checkpoints in `doomed` and their
        writes; each batch ends with a checkpoint (and its metadata) or holds trailing writes."""
        log, reducer = self.log, self.reducer
        base = log.run_info(run_id).base
        records: dict[int, dict[str, Any]] = {}
        for cp in log.checkpoints.list(run_id, reducer=reducer):
            if _mark(cp.offset, cp.metadata) is not None:
                records[cp.offset] = cp.metadata
        batches: _Batches = []
        batch: builtins.list[Event] = []
        kept: str | None = None  # the current checkpoint of the new run

        def keep(checkpoint_id: str) -> bool:
            return doomed is None or checkpoint_id not in doomed

        def whole(state: ThreadState, offset: int) -> None:
            nonlocal kept, batch
            event = CheckpointSaved(
                checkpoint_id=state.checkpoint_id or "",
                parent_id=state.parent_id,
                ts=state.ts,
                v=state.v,
                fork=True,
                chunks={ch: list(chunks) for ch, chunks in state.values.items()},
                versions=dict(state.versions),
                seen={n: dict(s) for n, s in state.seen.items()},
                updated=state.updated,
                extra=state.extra,
            )
            batches.append(([*batch, event], records.get(offset)))
            batch, kept = [], state.checkpoint_id

        def writes(checkpoint_id: str, pending: builtins.list[Write]) -> None:
            for w in pending:
                batch.append(
                    WritesSaved(checkpoint_id, w.task_id, w.task_path, [WriteValue(w.idx, w.channel, w.value)])
                )

        state = log.state_at(run_id, base, reducer=reducer) if base else reducer.initial()
        if base and state.checkpoint_id is not None and keep(state.checkpoint_id):
            whole(state, base)
            writes(state.checkpoint_id, state.writes)
        for checkpoint_id, pending in state.late.items():
            if keep(checkpoint_id):
                writes(checkpoint_id, pending)
        for entry in log.read(run_id, after=base):
            event = entry.event
            current = state.checkpoint_id
            state = reducer.apply(state, event)
            if type(event) is CheckpointSaved:
                if not keep(event.checkpoint_id):
                    continue
                if event.fork or current == kept:
                    batches.append(([*batch, event], records.get(entry.offset)))
                    batch, kept = [], event.checkpoint_id
                else:
                    whole(state, entry.offset)
            elif type(event) is WritesSaved and keep(event.checkpoint_id):
                batch.append(event)
        if batch:
            batches.append((batch, None))
        return batches

    def _write(self, run_id: str, batches: _Batches) -> None:
        rec = self.log.recorder(run_id, reducer=self.reducer, policy=_POLICY)
        for events, metadata in batches:
            if metadata is None and type(events[-1]) is CheckpointSaved:
                metadata = _checkpoint_metadata(events[-1].checkpoint_id, self._blob({}))
            rec.append_many(events, checkpoint_metadata=metadata)

    def _replace(self, run_id: str, batches: _Batches) -> None:
        """Write a run anew: stage the batches, mark the stage complete, then replace the run."""
        stage = run_id + _REWRITE
        if self.log.head(stage):
            self.log.delete_run(stage)
        self._write(stage, batches)
        self.log.checkpoints.save(stage, metadata={"rewrite": "complete"}, reducer=self.reducer)
        self._finish(run_id, batches)

    def _finish(self, run_id: str, batches: _Batches) -> None:
        if self.log.head(run_id):
            self.log.delete_run(run_id)
        self._write(run_id, batches)
        self.log.delete_run(run_id + _REWRITE)

    def _recover(self, run_id: str) -> None:
        """Finish a rewrite a crash interrupted (a complete stage), or drop an incomplete stage."""
        stage = run_id + _REWRITE
        if len(stage.encode("utf-8", "surrogatepass")) > 1024 or not self.log.head(stage):
            return
        latest = self.log.checkpoints.list(stage, limit=1, newest_first=True)
        if latest and latest[0].metadata.get("rewrite") == "complete":
            self._finish(run_id, self._rewrite(stage, None))
        else:
            self.log.delete_run(stage)

    # -- the public methods: sync and async twins over the same core ------------------------------

    def _call(self, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """Run `fn` in one of the saver's worker threads (at once when already in one).

        The log is used from these threads only: a store that keeps a connection per thread
        (PostgreSQL) keeps `workers` of them, however many threads LangGraph calls from.
        """
        if getattr(self._local, "worker", False):
            return fn(*args, **kwargs)
        return self._pool.submit(self._work, fn, args, kwargs).result()

    async def _acall(self, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """`_call` for async callers: the event loop waits without blocking (never on an fsync)."""
        return await asyncio.wrap_future(self._pool.submit(self._work, fn, args, kwargs))

    def _work(self, fn: Callable[..., _T], args: tuple[Any, ...], kwargs: dict[str, Any]) -> _T:
        self._local.worker = True
        return fn(*args, **kwargs)

    def close(self) -> None:
        """Stop the saver's worker threads (the log stays open: close it yourself)."""
        self._pool.shutdown(wait=True)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint the config names, or the thread's latest; None if there is none."""
        return self._call(self._get_tuple, config)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Async `get_tuple`."""
        return await self._acall(self._get_tuple, config)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first (by checkpoint id), across namespaces when the config names
        none and across threads without a config; `filter` keeps those whose metadata has each
        key equal, `before` those older than its checkpoint id, `limit` the first so many."""
        yield from self._call(self._list, config, filter=filter, before=before, limit=limit)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Async `list`."""
        for item in await self._acall(self._list, config, filter=filter, before=before, limit=limit):
            yield item

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Append the checkpoint as a change of its parent: only the channels in `new_versions`,
        and for a list that grew, only the items appended."""
        return self._call(self._put, config, checkpoint, metadata, new_versions)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Async `put`."""
        return await self._acall(self._put, config, checkpoint, metadata, new_versions)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Append writes pending on the config's checkpoint; a write saved before under the same
        task and index is not saved again (LangGraph's special channels are replaced)."""
        self._call(self._put_writes, config, writes, task_id, task_path)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Async `put_writes`."""
        await self._acall(self._put_writes, config, writes, task_id, task_path)

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint and write of the thread, in every namespace."""
        self._call(self._delete_thread, thread_id)

    async def adelete_thread(self, thread_id: str) -> None:
        """Async `delete_thread`."""
        await self._acall(self._delete_thread, thread_id)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete every checkpoint whose metadata `run_id` is one of `run_ids`, with its writes.

        A run of the log that holds such checkpoints is written anew without them (staged in a
        run of its own first, so that a crash leaves the old or the new one whole); a checkpoint
        whose parent is deleted is then stored whole.
        """
        self._call(self._delete_for_runs, run_ids)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Async `delete_for_runs`."""
        await self._acall(self._delete_for_runs, run_ids)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and write of a thread, in every namespace, to a new thread.

        The copy stands alone: deleting the source afterwards leaves it whole. A target thread
        that holds checkpoints already is refused with LangGraphThreadError.
        """
        self._call(self._copy_thread, source_thread_id, target_thread_id)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Async `copy_thread`."""
        await self._acall(self._copy_thread, source_thread_id, target_thread_id)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """`keep_latest`: keep each namespace's latest checkpoint and its pending writes, drop the
        rest (the log's own prune: the latest becomes the run's base). `delete`: delete the threads."""
        self._call(self._prune, thread_ids, strategy=strategy)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Async `prune`."""
        await self._acall(self._prune, thread_ids, strategy=strategy)

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Writes and seed of `DeltaChannel`s along the checkpoint's parents (LangGraph's walk)."""
        walk = super().get_delta_channel_history
        return self._call(lambda: walk(config=config, channels=channels))

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Async `get_delta_channel_history`."""
        walk = super().get_delta_channel_history
        return await self._acall(lambda: walk(config=config, channels=channels))


# -- the command line's view of a thread ------------------------------------------------------


def _plain(value: Any) -> Any:
    def hook(obj: Any) -> Any:
        dump = getattr(obj, "model_dump", None)
        if callable(dump):
            return dump()
        if hasattr(obj, "__dict__"):
            return {"type": type(obj).__name__, **vars(obj)}
        return repr(obj)

    try:
        return msgspec.to_builtins(value, enc_hook=hook, str_keys=True)
    except (TypeError, ValueError, msgspec.EncodeError):
        return repr(value)


def _next_nodes(state: ThreadState) -> list[str]:
    """Nodes the checkpoint's trigger channels say run next (`branch:to:X`, `__start__`)."""
    out: list[str] = []
    for ch, version in state.versions.items():
        if ch.startswith("branch:to:"):
            node = ch[len("branch:to:") :]
        elif ch == "__start__":
            node = ch
        else:
            continue
        seen = state.seen.get(node, {}).get(ch)
        try:
            newer = seen is None or version > seen  # type: ignore[operator]
        except TypeError:
            newer = str(version) > str(seen)
        if newer and ch in state.values:
            out.append(node)
    return sorted(out)


class _View:
    """How `eventlog history` and `eventlog state` show a LangGraph thread."""

    name = "langgraph"
    kind_prefix = "langgraph."

    def __init__(self) -> None:
        self.serde: SerializerProtocol = JsonPlusSerializer()
        self.fold = ThreadReducer()
        """The reducer a thread's runs fold with."""

    def _load(self, blob: Blob) -> Any:
        try:
            return self.serde.loads_typed((blob.type, blob.data))
        except Exception:  # noqa: BLE001 - an encrypted or foreign value is shown, not decoded
            return f"<{blob.type}, {len(blob.data)} bytes>"

    def history(
        self, log: eventlog.EventLog, run_id: str, limit: int | None
    ) -> tuple[Sequence[str], list[dict[str, Any]]]:
        marks = [(cp, m) for cp in log.checkpoints.list(run_id) if (m := _mark(cp.offset, cp.metadata))]
        if limit is not None:
            marks = marks[-limit:] if limit > 0 else []
        rows: list[dict[str, Any]] = []
        if not marks:
            return self.columns, rows
        offsets = [cp.offset for cp, _ in marks]
        head = log.head(run_id)
        for i, (cp, mark) in enumerate(marks):
            end = offsets[i + 1] - 1 if i + 1 < len(offsets) else head
            next_nodes = _next_nodes(log.state_at(run_id, cp.offset, reducer=self.fold))
            state: ThreadState = log.state_at(run_id, end, reducer=self.fold)
            md = self._load(mark.metadata)
            md = md if isinstance(md, dict) else {}
            rows.append(
                {
                    "checkpoint": mark.checkpoint_id,
                    "offset": cp.offset,
                    "step": md.get("step"),
                    "source": md.get("source"),
                    "next": ", ".join(next_nodes),
                    "writes": len(state.writes),
                    "parent": state.parent_id,
                    "created (UTC)": cp.created_at.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                }
            )
        return self.columns, rows

    columns = ("checkpoint", "offset", "step", "source", "next", "writes", "parent", "created (UTC)")

    def state(self, log: eventlog.EventLog, run_id: str, offset: int) -> Any:
        state: ThreadState = log.state_at(run_id, offset, reducer=self.fold)
        thread_id, ns = thread_of(run_id)
        values: dict[str, Any] = {}
        for ch, chunks in sorted(state.values.items()):
            loaded = [self._load(b) for b in chunks]
            value = loaded[0] if len(loaded) == 1 else [x for part in loaded for x in part]
            values[ch] = _plain(value)
        return {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": state.checkpoint_id,
            "parent_id": state.parent_id,
            "values": values,
            "next": _next_nodes(state),
            "channel_versions": _plain(state.versions),
            "pending_writes": [
                {"task_id": w.task_id, "channel": w.channel, "value": _plain(self._load(w.value))} for w in state.writes
            ],
        }


VIEW = _View()
"""The run view registered under the `eventlog.views` entry point group."""
