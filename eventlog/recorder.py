"""The recorder: one run's writer that keeps the folded state and checkpoints by a policy."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from . import _limits
from ._keys import check_run_id
from .checkpoints import Checkpoint
from .events import Event, LLMCallCompleted
from .fold import CheckpointPolicy, Reducer, reducer_tag
from .store._base import Txn

if TYPE_CHECKING:
    from .log import EventLog, _PendingCheckpoint

__all__ = ["Recorder"]


class Recorder:
    """Appends to one run, keeps the folded state in memory, and checkpoints by a policy.

    The checkpoint a policy asks for is written in the same transaction as the event that
    triggers it. Appends are fenced with the offset the recorder knows: a second writer of
    the same run makes the next append raise ConflictError (then make a new recorder).
    """

    def __init__(self, log: EventLog, run_id: str, reducer: Reducer, policy: CheckpointPolicy) -> None:
        check_run_id(run_id)
        self.log = log
        self.run_id = run_id
        self.reducer = reducer
        self.policy = policy
        self.offset = 0
        self.state: Any = None
        self._events_since = 0
        self._llm_since = False
        self._bytes_since = 0
        self._snapshot_bytes = 0
        self._reload()

    def _reload(self) -> None:
        log = self.log
        tag = reducer_tag(self.reducer)
        head = log.head(self.run_id)
        self.offset = head
        self.state = log.state_at(self.run_id, head, reducer=self.reducer) if head else self.reducer.initial()

        def sizes(txn: Txn) -> tuple[int, int]:
            rec = log._run(txn, self.run_id)
            if rec is None:
                return 0, 0
            found = log._find_snapshot(txn, self.run_id, rec, head, tag)
            start, size = (0, 0) if found is None else (found[0], len(found[1]))
            since = sum(len(v) for _, _, v in log._raw_range_txn(txn, self.run_id, rec, start, head))
            return size, since

        self._snapshot_bytes, self._bytes_since = log.store.read(sizes)
        self._events_since = 0
        self._llm_since = False

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
        """Append events atomically, fold them, and checkpoint once after them if the policy asks."""
        events = list(events)
        for e in events:
            self.log.codec.check_event(e)
        known = self._known_ids(event_ids)
        wants = False
        events_since, llm_since = self._events_since, self._llm_since
        apply = self.reducer.apply
        state = self.state
        try:
            for e in (e for i, e in enumerate(events) if i not in known):  # a known id is not written again
                state = apply(state, e)
                events_since += 1
                llm_since = llm_since or isinstance(e, LLMCallCompleted)
                if self.policy.wants(e, events_since, llm_since):
                    wants = True
        except BaseException:
            self._reload()
            raise
        self.state = state
        pending_fn = None
        if wants:
            pending_fn = self._checkpoint_fn(checkpoint_metadata)
        try:
            offsets, written = self.log._commit(self.run_id, events, self.offset, event_ids, meta, pending_fn)
        except BaseException:
            self._reload()
            raise
        fresh = [o for i, o in enumerate(offsets) if i not in known]
        if fresh != list(range(self.offset + 1, self.offset + 1 + len(fresh))):
            self._reload()  # the log wrote other events than were folded (an id became known meanwhile)
            return offsets
        self.offset = fresh[-1] if fresh else self.offset
        self._bytes_since += written
        if wants:
            self._after_checkpoint()
        else:
            self._events_since, self._llm_since = events_since, llm_since
        return offsets

    def _known_ids(self, event_ids: Sequence[str | None] | None) -> set[int]:
        """Indexes of the `event_ids` already in the run: their events are not written again."""
        if not event_ids or all(i is None for i in event_ids):
            return set()
        log = self.log

        def read(txn: Txn) -> set[int]:
            rec = log._run(txn, self.run_id)
            return set() if rec is None else set(log._known_event_ids(txn, rec, event_ids))

        return log.store.read(read)

    def _checkpoint_fn(self, metadata: dict[str, Any] | None) -> Callable[[int, int], _PendingCheckpoint]:
        def make(offset: int, written: int) -> _PendingCheckpoint:
            since = self._bytes_since + written
            materialize = (
                self._snapshot_bytes == 0 or since >= self._snapshot_bytes * _limits.snapshot_event_bytes_ratio
            )
            pending = self.log._pending(
                self.run_id,
                offset,
                self.state,
                self.reducer,
                metadata=metadata,
                checkpoint_id=None,
                materialize=materialize,
            )
            self._last_pending = pending
            return pending

        self._last_pending: _PendingCheckpoint | None = None
        return make

    def _after_checkpoint(self) -> None:
        self._events_since = 0
        self._llm_since = False
        pending = self._last_pending
        if pending is not None and pending.snapshot is not None:
            self._snapshot_bytes = len(pending.snapshot)
            self._bytes_since = 0

    def checkpoint(self, metadata: dict[str, Any] | None = None, checkpoint_id: str | None = None) -> Checkpoint:
        """Save a checkpoint of the recorder's state at its offset now."""
        cp = self.log.checkpoints.save(
            self.run_id, self.offset, metadata=metadata, checkpoint_id=checkpoint_id, reducer=self.reducer
        )
        self._events_since = 0
        self._llm_since = False
        return cp
