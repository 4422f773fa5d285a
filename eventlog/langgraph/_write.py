"""The saver's writes: `put` appends a checkpoint as a change of its parent, `put_writes` the
writes of a task; both retry against what another writer appended meanwhile.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import operator
from collections.abc import Callable, Sequence
from typing import Any

import ormsgpack
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    get_serializable_checkpoint_metadata,
)
from pydantic import BaseModel

from ..errors import ConflictError, OffsetOutOfRangeError, RunReplacedError, UnknownRunError
from ._events import (
    Blob,
    CheckpointSaved,
    LangGraphThreadError,
    ThreadState,
    Version,
    Write,
    WritesSaved,
    WriteValue,
    pending_writes,
)
from ._rewrite import Part
from ._serde import SafeSerializer
from ._threads import Mark, Run, Waiting, Written, checkpoint_metadata

__all__ = ["CONFLICT_RETRIES", "KNOWN_KEYS", "Writer", "next_version", "same_items", "withdrawn", "written"]

KNOWN_KEYS = frozenset({"v", "id", "ts", "channel_values", "channel_versions", "versions_seen", "updated_channels"})
"""The keys of a LangGraph checkpoint that `CheckpointSaved` has fields for; others go in its `extra`."""
CONFLICT_RETRIES = 8
"""How many times a write is made again when another writer appended to the run meanwhile."""
_NONE = object()


def same_items(saved: Written, value: list[Any]) -> bool:
    """Whether `value` starts with the items whose writings are `saved` (`written`), each the same
    as stored: of one type and written alike at every depth, so that values equal under `==` but
    of other kinds or forms (`1` and `True`, `Decimal("1.0")` and `Decimal("1.00")`, a list and a
    set, a str and a UUID, two offsets of one instant) differ."""
    head = value[: len(saved.kinds)]
    if not all(map(operator.is_, saved.kinds, map(type, head))):
        return False
    try:
        again = _joined(head, saved.kinds)
    except Exception:  # noqa: BLE001 - an item that cannot be written counts as changed
        return False
    return again == saved.joined


def written(items: list[Any]) -> Written | None:
    """The writings of `items` that `same_items` compares with; None when one cannot be written
    (the list is then stored whole at its next change)."""
    kinds = [type(item) for item in items]
    try:
        return Written(kinds, _joined(items, kinds))
    except Exception:  # noqa: BLE001 - as in same_items
        return None


def _joined(items: list[Any], kinds: list[type]) -> bytes:
    """Every item written so as to tell its values' kinds and forms apart at every depth, as the
    saver stores them or finer, one after another: msgpack for the built-in types (a tuple and a
    list, a dict and an `OrderedDict`, bytes and a bytearray write alike, as LangGraph's
    serializer stores them), a model as its fields and extra fields, and any other value tagged
    with its type (`_tagged`). Written as one msgpack array, in one call, without the array's
    header (msgpack writes an array as its header and then each item's bytes). Never read back.
    `kinds`: the items' types."""
    models = {kind for kind in set(kinds) if _model(kind)}
    packed = ormsgpack.packb(
        [(b.__dict__, b.__pydantic_extra__) if type(b) in models else b for b in items],
        default=_tagged,
        option=_WRITING,
    )
    n = len(items)
    return packed[1 if n < 16 else 3 if n < 1 << 16 else 5 :]


_MODELS: dict[type, bool] = {}
_WRITING = (
    ormsgpack.OPT_NON_STR_KEYS
    | ormsgpack.OPT_PASSTHROUGH_DATACLASS
    | ormsgpack.OPT_PASSTHROUGH_DATETIME
    | ormsgpack.OPT_PASSTHROUGH_ENUM
    | ormsgpack.OPT_PASSTHROUGH_UUID
    | ormsgpack.OPT_REPLACE_SURROGATES
)
"""The options of LangGraph's own msgpack writing: msgpack writes the built-in types itself (each
exactly: a bool, an int, a float's bits, a str, bytes; their subclasses as they are, as
LangGraph stores them), every other value goes to `_tagged`."""


_PLAIN = SafeSerializer()
"""Writes the values `_tagged` has no form of its own for (a pydantic v1 model, a secret, a
named tuple): their state as LangGraph stores it, whatever their `repr` shows. Never reads."""


def _model(kind: type) -> bool:
    found = _MODELS.get(kind)
    if found is None:  # `isinstance` with pydantic's metaclass costs more than the rest: once per type
        found = _MODELS[kind] = issubclass(kind, BaseModel)
    return found


def _tagged(value: Any) -> ormsgpack.Ext:
    """A value msgpack does not write itself, as its type's name and its state: a model's fields
    (those its `repr` leaves out too), a dataclass's fields, a set's items, a buffer's format,
    shape and bytes (a numpy array), else as LangGraph's serializer writes it (`_PLAIN`: a
    pydantic v1 model's fields, a secret's value, whatever their `repr` hides), else its `repr`
    (a value whose `repr` shows no value, an object at an address, then counts as changed:
    stored whole again, never lost)."""
    kind = type(value)
    state: Any
    if _model(kind):
        state = [value.__dict__, value.__pydantic_extra__]
    elif dataclasses.is_dataclass(value):
        state = [getattr(value, f.name) for f in dataclasses.fields(value)]
    elif isinstance(value, set | frozenset | collections.deque):
        state = list(value)
    else:
        try:
            view = memoryview(value)
            state = [view.format, view.shape, view.tobytes()]
        except (TypeError, ValueError):  # no buffer (or one of objects): as LangGraph's serializer writes it
            try:
                state = list(_PLAIN.dumps_typed(value))
            except Exception:  # noqa: BLE001 - a value it cannot write: its repr (shows no value: changed)
                state = repr(value)
    return ormsgpack.Ext(
        0, ormsgpack.packb([kind.__module__, kind.__qualname__, state], default=_tagged, option=_WRITING)
    )


def next_version(current: Version | None) -> Version:
    """The channel version after `current`: an int after an int (or none); after a string
    version (`InMemorySaver`, `SqliteSaver`, `PostgresSaver`), a string of the same form
    (`<32-digit counter>.<16-digit fraction>`), so that it compares greater."""
    if current is None:
        return 1
    if isinstance(current, str):
        try:
            counter = int(current.split(".", 1)[0])
        except ValueError:
            raise LangGraphThreadError(
                f"channel version {current!r} is neither a number nor LangGraph's '<counter>.<fraction>'"
            ) from None
        return f"{counter + 1:032}.{0.0:016}"
    return current + 1


class Writer(Part):
    """`put` and `put_writes` onto the runs of a log's threads."""

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """What `EventLogSaver.put` does."""
        conf = config["configurable"]
        thread_id, ns = str(conf["thread_id"]), conf.get("checkpoint_ns", "") or ""
        parent = conf.get("checkpoint_id")
        run = self.rewriter.open(thread_id, ns)
        md = self.values.blob(get_serializable_checkpoint_metadata(config, metadata))
        out: RunnableConfig = {
            "configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"]}
        }
        with run.lock:
            if self.saved_already(run, checkpoint, md, parent):
                return out
            with run.waiting_lock:
                shared = [w for w in run.waiting if w.checkpoint_id == parent]  # its superstep's writes
                for w in shared:
                    w.taken = True
                    run.waiting.remove(w)
            try:
                self._put(run, checkpoint, new_versions, parent, md, shared)
            except BaseException as exc:
                for w in shared:
                    w.error = exc
                raise
            finally:
                for w in shared:
                    w.done.set()
        return out

    def saved_already(self, run: Run, checkpoint: Checkpoint, md: Blob, parent: str | None) -> bool:
        """Whether the run holds a checkpoint of this id: True when it holds it as given (a put
        made again, after an answer that was lost, say: nothing is written and the writes pending
        on it stay, as with LangGraph's savers); LangGraphThreadError when it holds other values,
        metadata or parent under the id (a saved checkpoint is never written over)."""
        cid, state = checkpoint["id"], self.threads.writer(run).state
        if state.checkpoint_id is None or (cid > state.checkpoint_id and run.marks is None):
            return False  # ids LangGraph draws grow: a new one is above the head (once marks are read, looked up)
        found = self.threads.find(run, cid)
        if found is None:
            return False
        mark, end = found
        if cid == state.checkpoint_id:
            old = state
        else:
            old = self.log.state_at(run.run_id, end, reducer=self.reducer, run_number=run.number)
        saved = self.values.checkpoint_tuple(run, old, mark.metadata, None)
        same = (
            mark.metadata == md
            and old.parent_id == parent
            and all(self._same(saved.checkpoint.get(k), checkpoint.get(k)) for k in {*saved.checkpoint, *checkpoint})
        )
        if not same:
            raise LangGraphThreadError(
                f"thread {run.thread_id!r}, namespace {run.ns!r}: checkpoint {cid!r} is saved already with other "
                "values, metadata or parent; a saved checkpoint is never written over (put it under a new id)"
            )
        return True

    def _same(self, saved: Any, given: Any) -> bool:
        """Whether a value read back is the one given: equal, or written alike by the serializer."""
        with contextlib.suppress(Exception):  # a value whose == raises (or is no bool) is compared as written
            if saved == given:
                return True
        return self.values.blob(saved) == self.values.blob(given)

    def _put(
        self,
        run: Run,
        checkpoint: Checkpoint,
        new_versions: ChannelVersions,
        parent: str | None,
        md: Blob,
        shared: list[Waiting],
    ) -> None:
        """Append the checkpoint, after the writes of `shared`, in one commit (the run's lock held)."""
        met: ConflictError | None = None  # the last conflict, its heads read before the run is forgotten
        for _ in range(CONFLICT_RETRIES):
            rec = self.threads.writer(run)
            self.onto_gone_life(run, parent)
            try:
                writes: list[WritesSaved] = []
                for w in shared:
                    saved = self.writes_event(run, rec.state, w, writes)
                    if saved is not None:
                        writes.append(saved)
                if met is not None and self.saved_already(run, checkpoint, md, parent):
                    # the run as it is now holds this checkpoint (another saver put it first): only
                    # the writes are new, and those pending on it stay
                    if writes:
                        rec.append_many(writes)
                    return
                event, lists = self.checkpoint_event(run, rec.state, checkpoint, new_versions, parent)
                rec.append_many([*writes, event], checkpoint_metadata=checkpoint_metadata(event.checkpoint_id, md))
            except ConflictError as exc:  # another writer appended (or made the run again): rebuild against it
                met = exc
                self.conflicted(run, exc)
                continue
            run.lists, run.current, run.replaced = lists, md, 0
            if run.marks is not None:
                run.position[event.checkpoint_id] = len(run.marks)
                run.marks.append(Mark(rec.offset, event.checkpoint_id, md))
            return
        raise ConflictError.last_of(met, CONFLICT_RETRIES) from None

    @staticmethod
    def conflicted(run: Run, exc: ConflictError) -> None:
        """After another writer came first: forget what is kept of the run, to build the write again
        on what it holds now; a life of it deleted meanwhile is remembered (`Run.replaced`)."""
        if isinstance(exc, RunReplacedError) and run.number:
            run.replaced = run.number
        run.forget()

    def onto_gone_life(self, run: Run, checkpoint_id: str | None) -> None:
        """Raise RunReplacedError for a write onto a checkpoint of a life of the run that this saver
        used and found deleted (`Run.replaced`): one the run's life now does not hold. Such a write
        never lands in another life of the thread."""
        if not run.replaced or checkpoint_id is None:
            return
        assert run.rec is not None, "onto_gone_life() follows writer()"
        if run.rec.state.checkpoint_id != checkpoint_id and self.threads.find(run, checkpoint_id) is None:
            raise RunReplacedError(
                run.run_id, run.replaced, run.number or None, f"a write onto its checkpoint {checkpoint_id!r} was made"
            )

    def checkpoint_event(
        self,
        run: Run,
        state: ThreadState,
        checkpoint: Checkpoint,
        new_versions: ChannelVersions,
        parent: str | None,
    ) -> tuple[CheckpointSaved, dict[str, Written]]:
        """The event that saves `checkpoint` as a change of `parent` when that is the run's current
        checkpoint (`state`), or whole otherwise (a fork), and the writings of its lists as stored.

        A channel keeps its parent's value only when the parent has it at the version the
        checkpoint names; any other channel (in `new_versions`, or at a version the parent did
        not have, as in a copy made by `update_state(config, None, as_node="__copy__")`) is
        saved from the checkpoint's own values. A list that only grew is saved as the items
        appended, the rest compared with the saver's copy by value, never by identity."""
        values = checkpoint["channel_values"]
        versions = checkpoint["channel_versions"]
        seen = checkpoint["versions_seen"]
        fork = parent is None or parent != state.checkpoint_id
        chunks: dict[str, list[Blob]] = {}
        tails: dict[str, Blob] = {}
        empty: list[str] = []
        lists: dict[str, Written] = {}
        base = state
        if fork:
            found = None if parent is None else self.threads.find(run, parent)
            base = (
                ThreadState() if found is None else self.log.state_at(run.run_id, found[0].offset, reducer=self.reducer)
            )
        changed = [ch for ch in versions if ch in new_versions or base.versions.get(ch, _NONE) != versions[ch]]
        changed += [ch for ch in new_versions if ch not in versions]
        for ch in versions:
            if ch in changed:
                continue
            if fork and ch in base.values:
                chunks[ch] = base.values[ch]
            elif not fork and ch in run.lists:
                lists[ch] = run.lists[ch]
        for ch in changed:
            if ch not in values:
                empty.append(ch)
                continue
            value = values[ch]
            if not isinstance(value, list):
                chunks[ch] = [self.values.blob(value)]
                continue
            before = None if fork else self.saved_list(run, state, ch)
            if before is not None and len(before) <= len(value) and same_items(before, value):
                tails[ch] = self.values.blob(value[len(before) :])
                added = written(value[len(before) :])  # by value, as the blob was written: nothing kept
                if added is not None:
                    lists[ch] = before.then(added)
            else:
                chunks[ch] = [self.values.blob(value)]
        extra = {k: v for k, v in checkpoint.items() if k not in KNOWN_KEYS}
        updated = checkpoint.get("updated_channels")
        base_versions = {} if fork else state.versions
        base_seen = {} if fork else state.seen
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
            extra=self.values.blob(extra) if extra else None,
        )
        return event, lists

    def saved_list(self, run: Run, state: ThreadState, channel: str) -> Written | None:
        """The writings of a list channel of the run's current checkpoint, as stored (decoded from
        the stored bytes when not kept yet); None when the channel holds no list."""
        kept = run.lists.get(channel)
        if kept is None and channel in state.values:
            value = self.values.value(state.values[channel])
            kept = written(value) if isinstance(value, list) else None
            if kept is not None:
                run.lists[channel] = kept
        return kept

    def offer(
        self,
        config: RunnableConfig,
        blobs: list[tuple[int, str, Blob]],
        task_id: str,
        task_path: str = "",
    ) -> tuple[Run, Waiting]:
        """A `put_writes` (its writes written: `blobs`) made to wait for the put of its
        checkpoint's superstep (see `withdrawn`)."""
        conf = config["configurable"]
        run = self.rewriter.run_of(config)
        waiting = Waiting(conf["checkpoint_id"], task_id, task_path, blobs)
        with run.waiting_lock:
            run.waiting.append(waiting)
        return run, waiting

    def blobs(self, writes: Sequence[tuple[str, Any]]) -> list[tuple[int, str, Blob]]:
        """The writes as stored, written when given (as InMemorySaver does): a caller's later edit is not theirs."""
        return [(WRITES_IDX_MAP.get(ch, i), ch, self.values.blob(value)) for i, (ch, value) in enumerate(writes)]

    def put_writes(
        self,
        config: RunnableConfig,
        blobs: list[tuple[int, str, Blob]],
        task_id: str,
        task_path: str = "",
        check: Callable[[ThreadState], None] | None = None,
    ) -> None:
        """What `EventLogSaver.put_writes` does when it commits alone (its writes written: `blobs`);
        `check(state)` may refuse it before each attempt, on the state the append then lands on."""
        conf = config["configurable"]
        run = self.rewriter.run_of(config)
        alone = Waiting(conf["checkpoint_id"], task_id, task_path, blobs)
        with run.lock:
            met: ConflictError | None = None
            for _ in range(CONFLICT_RETRIES):
                rec = self.threads.writer(run, check=check is not None)
                self.onto_gone_life(run, alone.checkpoint_id)
                if check is not None:
                    check(rec.state)
                try:
                    event = self.writes_event(run, rec.state, alone, [])
                    if event is None:
                        return
                    rec.append_many([event])
                except ConflictError as exc:
                    met = exc
                    self.conflicted(run, exc)
                    continue
                run.replaced = 0
                return
            raise ConflictError.last_of(met, CONFLICT_RETRIES) from None

    def writes_event(self, run: Run, state: ThreadState, w: Waiting, before: list[WritesSaved]) -> WritesSaved | None:
        """The event of a `put_writes` onto the run at `state`, after the events `before` of the same
        commit; None when each write is saved already (LangGraph's special channels are replaced)."""
        known = {(x.task_id, x.idx) for x in self.writes_of(run, state, w.checkpoint_id)}
        known |= {(e.task_id, v.idx) for e in before if e.checkpoint_id == w.checkpoint_id for v in e.writes}
        items = [WriteValue(idx, ch, blob) for idx, ch, blob in w.writes if idx < 0 or (w.task_id, idx) not in known]
        return WritesSaved(w.checkpoint_id, w.task_id, w.task_path, items) if items else None

    def writes_of(self, run: Run, state: ThreadState, checkpoint_id: str) -> list[Write]:
        """The writes pending on a checkpoint of the run whose head state is `state`."""
        if checkpoint_id == state.checkpoint_id:
            return state.writes
        late = state.late.get(checkpoint_id, [])
        found = self.threads.find(run, checkpoint_id)
        if found is None:
            return late
        try:
            then: ThreadState | None = self.log.state_at(run.run_id, found[1], reducer=self.reducer)
        except (UnknownRunError, OffsetOutOfRangeError):
            then = None
        if then is None or not self.threads.same_life(run):  # deleted (and made again) meanwhile
            raise RunReplacedError(run.run_id, run.number, self.log.life(run.run_id)[0] or None, "a write read it")
        return pending_writes(then.writes, late)


def withdrawn(run: Run, waiting: Waiting) -> bool:
    """Take back an offered `put_writes` (`Writer.offer`) no put took: True when the caller must
    write it itself."""
    with run.waiting_lock:
        if waiting.taken:
            return False
        run.waiting.remove(waiting)
        return True
