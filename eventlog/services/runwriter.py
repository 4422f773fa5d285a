"""`RunWriter`: one run's writer, which keeps the run's folded state and checkpoints by a policy."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from .. import _limits
from ..core._commit import GroupCommit
from ..core._replay import Replay, snapshot_due
from ..core._runs import Runs
from ..core.fold import Reducer, reducer_tag
from ..errors import PrunedError, ReducerError, RunReplacedError
from ..record._keys import check_id, check_run_id
from ..record._records import RunRecord
from ..record.kinds import Event
from ..record.tables import CHECKPOINT_IDS
from ..store._base import Store, Txn, at_checkpoint
from .checkpoints import Checkpoint, Checkpoints

__all__ = ["Policy", "RunWriter"]

S = TypeVar("S")


@runtime_checkable
class Policy(Protocol):
    """When a run writer checkpoints by itself. The log knows no event kind: the standard
    policies (`CheckpointPolicy`, agent/policy.py) look at the kinds for it."""

    def step(self, since: Any, event: Event) -> tuple[Any, bool]:
        """What the policy keeps after `event`, from what it kept before (None at the writer's
        start and after every checkpoint), and whether a checkpoint is due right after it."""
        ...


class Never:
    """The policy of a writer given none: checkpoints only when `checkpoint()` is called."""

    def step(self, since: Any, event: Event) -> tuple[Any, bool]:
        return None, False


class RunWriter(Generic[S]):
    """Appends to one run, keeps the folded state in memory, and checkpoints by a policy.

    The checkpoint a policy asks for is written in the same transaction as the event that
    triggers it. Appends and `checkpoint()` are fenced with the offset and the run number the
    writer knows: a second writer of the same run makes the next append raise ConflictError (the
    writer then knows the new head), a delete of the run (and its making again)
    RunReplacedError, a ConflictError too. A writer whose life of the run ended never writes
    again: every later append and checkpoint raises RunReplacedError, so nothing decided on one
    life lands in the next; make a new run writer. Make one with `log.writer(run_id, ...)`.
    """

    def __init__(
        self,
        store: Store,
        runs: Runs,
        writer: GroupCommit,
        replay: Replay,
        checkpoints: Checkpoints[Any],
        run_id: str,
        reducer: Reducer[S],
        policy: Policy,
        snapshot_bytes_min: int = 0,
    ) -> None:
        check_run_id(run_id)
        self._store, self._runs, self._writer, self._replay, self._checkpoints = (
            store,
            runs,
            writer,
            replay,
            checkpoints,
        )
        self.run_id = run_id
        """The run this writer appends to."""
        self.reducer = reducer
        """The reducer that folds `state`."""
        self.policy = policy
        """When checkpoints are taken."""
        self.snapshot_bytes_min = snapshot_bytes_min
        """A checkpoint after the first materializes its state only once the events since the
        nearest snapshot take this many stored bytes, besides the log's own rule (0: that rule
        alone). A run that is short and seldom read back keeps fewer copies of its state; each
        read of it folds up to this many bytes of events more."""
        self.offset = 0
        """Offset of the last event appended (the run's head, as this writer knows it)."""
        self.state: S = reducer.initial()
        """The run's state at `offset`: the writer's own, folded from the log's copies of the
        events (nothing the caller appended is held in it). Read it; change a copy of it only:
        the writer's next checkpoint stores it as it is."""
        self._number: int | None = None
        self._since: Any = None  # what the policy keeps since the last checkpoint
        self._bytes_since = 0
        self._snapshot_bytes = 0
        self._ended = False  # whether the life of the run it knew has ended
        self._now: int | None = None  # the run's number then (None: not made again)
        self._reload()

    @property
    def run_number(self) -> int | None:
        """The run number of the life of the run this writer knows (`RunInfo.number`; None before
        the run exists): its appends and checkpoints go to that life only, else RunReplacedError."""
        return self._number

    @property
    def ended(self) -> bool:
        """Whether the life of the run this writer knew has ended (the run was deleted, and
        maybe made again): it writes nothing more; make a new writer for the run as it is now."""
        return self._ended

    def _reload(self) -> None:
        """Know the run as it is now: its head, its state there, and what the policy counts."""
        tag = reducer_tag(self.reducer)

        def read(txn: Txn) -> tuple[RunRecord | None, int, int]:
            rec = self._runs.get(txn, self.run_id)
            if rec is None:
                return None, 0, 0
            found = self._replay.find_snapshot(txn, self.run_id, rec, rec.head, tag)
            start, size = (0, 0) if found is None else (found[0], len(found[2]))
            return rec, size, self._replay.bytes_since(txn, self.run_id, rec, start, rec.head, None)

        for attempt in range(_limits.replaced_retries_max + 1):
            rec, snapshot_bytes, bytes_since = self._store.read(read)
            try:  # the state of the life of the run just read, not of one made since
                state = (
                    self._replay.state_at(self.run_id, rec.head, self.reducer, rec.number)
                    if rec is not None and rec.head
                    else self.reducer.initial()
                )
                break
            except RunReplacedError:
                if attempt == _limits.replaced_retries_max:
                    raise
        if self._number is not None and (rec is None or rec.number != self._number):
            # its life ended: what it and its caller decided on that life is never written to the next
            self._ended, self._now = True, None if rec is None else rec.number
            return
        self._snapshot_bytes, self._bytes_since = snapshot_bytes, bytes_since
        self._number = None if rec is None else rec.number
        self.offset = 0 if rec is None else rec.head
        self.state = state
        self._since = None

    def append(self, event: Event, *, event_id: str | None = None, meta: dict[str, Any] | None = None) -> int:
        """Append one event, fold it, and checkpoint if the policy says so; return its offset."""
        ids = None if event_id is None else [event_id]
        return self.append_many([event], event_ids=ids, meta=meta)[-1]

    def append_many(
        self,
        events: Sequence[Event],
        *,
        event_ids: Sequence[str | None] | None = None,
        meta: dict[str, Any] | None = None,
        checkpoint_metadata: dict[str, Any] | None = None,
    ) -> list[int]:
        """Append events atomically, fold them, and checkpoint once after them if the policy asks.

        `checkpoint_metadata` goes on that checkpoint, if one is taken."""
        self._check_life()
        if not isinstance(events, (str, bytes)):
            events = list(events)  # folded below as well as encoded: an iterator is read once
        append = self._writer.check(
            self.run_id, events, event_ids=event_ids, meta=meta, expected_offset=self.offset,
            expected_number=self._number,
        )  # fmt: skip
        cp_meta = self._checkpoints.check_metadata(checkpoint_metadata)
        known = self._known(append.ids)
        state, wants, since_after = self._fold(append.events, known)  # the log's copies, not the caller's
        written_checkpoint: list[int] = []

        def hook(txn: Txn, rec: RunRecord, written: int, checked: bool) -> bool:
            if not wants:
                return False
            since = self._bytes_since + written
            materialize = snapshot_due(self._snapshot_bytes, since, self.snapshot_bytes_min)
            pending = self._checkpoints.pending(
                rec.head, state, self.reducer, metadata=cp_meta, checkpoint_id=None, materialize=materialize
            )
            self._checkpoints.put(txn, rec, pending, look_up=checked)
            written_checkpoint[:] = [len(pending.snapshot) if pending.snapshot is not None else -1]
            return True

        try:
            slot = self._writer.commit(append, hook)
        except BaseException:
            self._reload()
            raise
        self._number = slot.number
        fresh = [o for i, o in enumerate(slot.offsets) if i not in known]
        if fresh != list(range(self.offset + 1, self.offset + 1 + len(fresh))):
            self._reload()  # the log wrote other events than were folded (an id became known meanwhile)
            return slot.offsets
        self.state = state
        self.offset = fresh[-1] if fresh else self.offset
        self._bytes_since += slot.written
        if written_checkpoint:
            self._since = None
            if written_checkpoint[0] >= 0:
                self._snapshot_bytes, self._bytes_since = written_checkpoint[0], 0
        else:
            self._since = since_after
        return slot.offsets

    def _fold(self, events: Sequence[Event], known: set[int]) -> tuple[S, bool, Any]:
        """The state after the events not yet in the run, and whether the policy wants a checkpoint."""
        wants = False
        since = self._since
        apply, step = self.reducer.apply, self.policy.step
        state = self.state
        try:
            for i, e in enumerate(events):
                if i in known:
                    continue  # a known id is not written again
                state = apply(state, e)
                since, due = step(since, e)
                wants = wants or due
        except Exception as exc:
            self._reload()
            raise ReducerError(f"run {self.run_id!r}: reducer {self.reducer.name} raised {exc!r}") from exc
        except BaseException:
            self._reload()
            raise
        return state, wants, since

    def _known(self, ids: Sequence[str | None]) -> set[int]:
        """Indexes of the caller's `ids` already in the run: their events are not written again."""
        if self._number is None or all(i is None for i in ids):
            return set()

        def known(txn: Txn) -> set[int]:
            rec = self._runs.get(txn, self.run_id)
            if rec is None or rec.number != self._number:
                return set()  # deleted (and made again): the commit raises RunReplacedError
            held = self._writer.event_ids.find(txn, self.run_id, rec, [e for e in ids if e is not None])
            return {i for i, e in enumerate(ids) if e is not None and e in held}

        return self._store.read(known)

    def checkpoint(self, metadata: dict[str, Any] | None = None, checkpoint_id: str | None = None) -> Checkpoint[S]:
        """Save a checkpoint of the writer's state at its offset now: the state it holds, not one
        folded again from a snapshot, materialized by the writer's own count of the bytes since
        its last snapshot (as the checkpoints a policy asks for). An id the run holds already
        has its metadata updated (`Checkpoints.save`)."""
        self._check_life()
        number, offset, checkpoints = self._number, self.offset, self._checkpoints
        if checkpoint_id is not None:
            check_id("checkpoint_id", checkpoint_id)
        if number is None:  # no run yet: `save` names what is missing
            return self._saved(checkpoints.save(self.run_id, offset, metadata=metadata, reducer=self.reducer))
        materialize = snapshot_due(self._snapshot_bytes, self._bytes_since, self.snapshot_bytes_min)
        pending = checkpoints.pending(
            offset,
            self.state,
            self.reducer,
            metadata=checkpoints.check_metadata(metadata),
            checkpoint_id=checkpoint_id,
            materialize=materialize,
        )

        def write(txn: Txn) -> bool:
            rec = self._runs.require(txn, self.run_id, number, "a checkpoint of it was saved")
            key = None if checkpoint_id is None else CHECKPOINT_IDS.key(number, checkpoint_id)
            if key is not None and txn.get(CHECKPOINT_IDS, key) is not None:
                return False  # an id the run holds
            if offset < rec.base:
                raise PrunedError(self.run_id, offset, rec.base)
            checkpoints.put(txn, rec, pending)
            self._runs.put(txn, self.run_id, rec)
            return True

        if not self._store.write(write):
            return self._saved(
                checkpoints.save(self.run_id, offset, metadata=metadata, checkpoint_id=checkpoint_id,
                                 reducer=self.reducer, run_number=number)
            )  # fmt: skip
        at_checkpoint(self._store)
        if pending.snapshot is not None:
            self._snapshot_bytes, self._bytes_since = len(pending.snapshot), 0
        replay, run_id, reducer = self._replay, self.run_id, self.reducer
        # its state is folded when read: the writer's own object goes on changing
        return self._saved(
            Checkpoint(run_id, pending.record, lambda: replay.state_at(run_id, offset, reducer, number), None, number)
        )

    def expect_life(self, number: int, doing: str) -> None:
        """Raise RunReplacedError unless this writer is of life `number` of its run: the life a write
        made (a fork, say), where the run read back by id may be another writer's, made again to
        the same head (docs/architecture.md, "Reads that span transactions")."""
        if self._number != number:
            raise RunReplacedError(self.run_id, number, self._number, doing)

    def _check_life(self) -> None:
        """Raise RunReplacedError once the life of the run this writer knew has ended."""
        if self._ended:
            raise RunReplacedError(self.run_id, self._number or 0, self._now, "this run writer was used")

    def _saved(self, cp: Checkpoint[S]) -> Checkpoint[S]:
        self._since = None
        return cp
