"""`EventLog`: the facade over one log's services — runs, append, read, feed, state_at,
checkpoints, fork, prune, delete, verify.

Each operation lives in the module that owns its idea (docs/architecture.md): the core
(`Engine`: runs and lineage, the write path, reads, folds) in core/, checkpoints, run
writers, fork/prune/delete and checks in services/. This class wires the services over one
engine and holds nothing else.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Any, Generic, TypeVar, overload

import msgspec

from . import _limits
from .core._reader import Entry, Follow
from .core._stats import log_stats
from .core.engine import Engine
from .core.fold import Reducer, check_reducer, reducer_or
from .errors import EventLogError, InvalidArgumentError, OffsetOutOfRangeError, RunReplacedError
from .record._keys import check_int, check_limit, check_run_id, check_run_number
from .record._records import RunRecord
from .record.codec import Cipher
from .record.kinds import Event
from .services._maintenance import Maintenance
from .services._verify import Problem, Verifier, VerifyReport
from .services.checkpoints import Checkpoints
from .services.runwriter import Never, Policy, RunWriter
from .store._base import Store, Txn

__all__ = ["Entry", "EventLog", "Problem", "RunInfo", "VerifyReport", "made_by_append", "made_by_fork"]

S = TypeVar("S")
T = TypeVar("T")


class RunInfo(msgspec.Struct, frozen=True):
    """What the log knows of a run without folding it."""

    run_id: str
    head: int
    """Offset of the last event (0: no events)."""
    base: int
    """Offsets at or below this were pruned: the run's own base, or in a fork of a pruned run
    (forks are made at or above a base) that run's, its events up to there gone with it. The
    states from `base` on are readable, and its events are read after it."""
    parent: str | None
    """The run this one was forked from."""
    fork_offset: int
    """Offsets up to this are shared with the parent."""
    created_ns: int
    checkpoints: int
    """Number of checkpoints kept."""
    forks: int
    """Number of runs forked from this one."""
    number: int = 0
    """The run number of this life of the run id: a run deleted and made again under the same id
    gets a new one. Pass it as `run_number=` to later reads so they fail (RunReplacedError)
    rather than read another life of the run."""


def _run_info(run_id: str, rec: RunRecord, base: int, checkpoints: int) -> RunInfo:
    return RunInfo(
        run_id, rec.head, base, rec.parent, rec.fork_offset, rec.created_ns, checkpoints, rec.forks, rec.number
    )


def _pinned(log: EventLog[Any], run_id: str) -> Iterator[RunInfo]:
    """`with log.pinned(run_id) as info:` the run's info, for reads made inside the block that
    must all be of one life of the run (the command line's and the UI's, say).

    On leaving the block, RunReplacedError when the run was deleted, or deleted and made again,
    meanwhile (an error raised inside the block is then its cause): run numbers are never given
    twice, so a run with the same number at both ends was that life throughout. For a single
    read, `run_number=` does the same at every transaction."""
    info = log.run_info(run_id)
    try:
        yield info
    except EventLogError as exc:
        if not isinstance(exc, RunReplacedError):
            try:
                log.run_info(run_id, run_number=info.number)
            except RunReplacedError as replaced:
                raise replaced from exc
        raise
    log.run_info(run_id, run_number=info.number)


def made_by_append(
    log: EventLog[Any],
    run_id: str,
    events: Iterable[Event],
    *,
    event_ids: Sequence[str | None] | None = None,
    meta: dict[str, Any] | None = None,
    time_ns: int | None = None,
) -> tuple[list[int], int]:
    """`log.append_many(run_id, events, expected_offset=0, ...)`, the append that makes a run: its
    offsets and the run number of the life it made, told by the append itself. Read after it,
    `life(run_id)` may be another life, made again meanwhile to the same head; a writer that
    goes on names this number (docs/architecture.md, "Reads that span transactions")."""
    commit = log.engine.commit
    slot = commit.commit(
        commit.check(run_id, events, event_ids=event_ids, meta=meta, time_ns=time_ns, expected_offset=0)
    )
    assert slot.number is not None  # set by every commit
    return slot.offsets, slot.number


def made_by_fork(log: EventLog[Any], run_id: str, at: int, new_run_id: str, *, run_number: int | None) -> int:
    """`log.fork(run_id, at, new_run_id, run_number=...)`, and the run number of the fork it made,
    told by the fork itself (see `made_by_append`)."""
    return log._maintenance.fork(run_id, at, new_run_id, log.clock(), check_run_number(run_number))[1]


def _check_options(clock: object, ids: object, record_size_bytes_max: int, reducer: object, policy: object) -> None:
    for name, given, returning in (("clock", clock, "nanoseconds"), ("ids", ids, "new id strings")):
        if given is not None and not callable(given):
            raise InvalidArgumentError(f"{name} must be a function returning {returning}, not {given!r}")
    check_int("record_size_bytes_max", record_size_bytes_max, 1, _limits.snapshot_size_bytes_max)
    check_reducer(reducer)
    _check_policy(policy)


def _check_policy(policy: object) -> None:
    if policy is not None and not isinstance(policy, Policy):
        raise InvalidArgumentError(f"policy must be a CheckpointPolicy (or have Policy's step), not {policy!r}")


def _default_clock() -> int:
    return time.time_ns()


class EventLog(Generic[S]):
    """One log: many runs in one store. Use `eventlog.open` to make one.

    Generic in the state of its default `reducer`: `log.state_at(run)` is an `AgentState` for
    a log `eventlog.open` opened without one. `policy` is the policy of writers given none
    (`eventlog.open`: a checkpoint after every event; None: only when a writer is asked)."""

    def __init__(
        self,
        store: Store,
        *,
        clock: Callable[[], int] | None = None,
        ids: Callable[[], str] | None = None,
        record_size_bytes_max: int = _limits.record_size_bytes_max,
        reducer: Reducer[S],
        policy: Policy | None = None,
        cipher: Cipher | None = None,
    ) -> None:
        _check_options(clock, ids, record_size_bytes_max, reducer, policy)
        self.store = store
        """The store the log keeps its tables in."""
        self.reducer: Reducer[S] = reducer
        """The reducer used when a call names none."""
        self.policy: Policy = policy or Never()
        """The policy of a writer given none."""
        self.engine = Engine(store, clock or _default_clock, ids, record_size_bytes_max, cipher)
        """The core this log works through (shared with `eventlog.aio.AsyncEventLog`)."""
        core = self.engine
        self.codec = core.codec
        """The record pipeline of this log."""
        self.clock: Callable[[], int] = core.commit.now
        """The log's clock (nanoseconds since the epoch), checked; injected with `eventlog.open(clock=...)`."""
        self.ids: Callable[[], str] = core.id_source.draw
        """A new id string from the log's id source (unique with the log's own source)."""
        self.checkpoints: Checkpoints[S] = Checkpoints(
            store, core.codec, core.runs, core.replay, self.reducer, core.commit.now, core.id_source
        )
        """Save, load, list and delete checkpoints."""
        self._runs, self._commit, self._reader, self._replay = core.runs, core.commit, core.reader, core.replay
        self._maintenance = Maintenance(store, core.codec, core.runs, core.replay, self.checkpoints)
        self._verifier = Verifier(store, core.codec, core.runs, core.reader, core.replay, self.checkpoints)

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Close the log (syncs first under `batch` and `none` durability)."""
        self.engine.dictionaries.wait()
        self.store.close()
        self.engine.committed.fire()

    def __enter__(self) -> EventLog[S]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- runs --------------------------------------------------------------------------------

    def head(self, run_id: str) -> int:
        """Offset of the run's last event; 0 for a run with no events or no run at all."""
        return self.life(run_id)[1]

    def life(self, run_id: str) -> tuple[int, int]:
        """(run number, head) of a run in one read; (0, 0): none. A run made again has a new number."""
        return (0, 0) if (r := self.store.read(lambda txn: self._runs.get(txn, run_id))) is None else (r.number, r.head)

    def runs(self) -> list[str]:
        """Every run id in the log, in byte order."""
        return sorted(self.iter_runs(), key=lambda r: r.encode())

    def iter_runs(self, after: str | None = None) -> Iterator[str]:
        """Run ids in the order of their keys, read in pages (bounded memory for any number of runs)."""
        if after is not None:
            check_run_id(after)
        while True:
            page = self.store.read(partial(self._runs.run_ids, after=after, limit=_limits.read_chunk_entries))
            yield from page
            if len(page) < _limits.read_chunk_entries:
                return
            after = page[-1]

    def run_info(self, run_id: str, *, run_number: int | None = None) -> RunInfo:
        """What the log knows of a run (with `run_number`: RunReplacedError unless it is that life)."""

        def info(txn: Txn) -> RunInfo:
            rec = self._runs.require(txn, run_id, check_run_number(run_number))
            return _run_info(run_id, rec, self._runs.base(txn, run_id, rec), self.checkpoints.count(txn, rec))

        return self.store.read(info)

    pinned = contextmanager(_pinned)

    # -- append ------------------------------------------------------------------------------

    def append(
        self,
        run_id: str,
        event: Event,
        *,
        event_id: str | None = None,
        meta: dict[str, Any] | None = None,
        expected_offset: int | None = None,
        run_number: int | None = None,
        time_ns: int | None = None,
    ) -> int:
        """Append one event; return its offset.

        With `event_id`, appending the same id to the run again returns the first offset and
        writes nothing (an event id is unique in its run). With `expected_offset`, ConflictError
        unless the run's head is that offset; with `run_number`, RunReplacedError unless the run is
        still that life (`life`). `time_ns` sets the entry's time instead of the log's clock.
        """
        ids = None if event_id is None else [event_id]
        return self.append_many(run_id, [event], expected_offset=expected_offset, run_number=run_number,
                                event_ids=ids, meta=meta, time_ns=time_ns)[0]  # fmt: skip

    def append_many(
        self,
        run_id: str,
        events: Iterable[Event],
        *,
        expected_offset: int | None = None,
        run_number: int | None = None,
        event_ids: Sequence[str | None] | None = None,
        meta: dict[str, Any] | None = None,
        time_ns: int | None = None,
    ) -> list[int]:
        """Append events atomically (all or none); return their offsets.

        Every event is checked before anything is written: a value that would not read back
        equal is refused (InvalidEventError). ConflictError if `expected_offset` is given and
        the head differs; RunReplacedError if `run_number` is given and the run is not that
        life (deleted, or deleted and made again). Events whose `event_ids` entry is already in
        the run are not written again; their first offsets are returned.
        """
        number = check_run_number(run_number)
        append = self._commit.check(run_id, events, event_ids=event_ids, meta=meta, time_ns=time_ns,
                                    expected_offset=expected_offset, expected_number=number)  # fmt: skip
        return self._commit.commit(append).offsets

    # -- read and fold -----------------------------------------------------------------------

    def read(
        self, run_id: str, after: int = 0, upto: int | None = None, *, run_number: int | None = None
    ) -> Iterator[Entry]:
        """Entries with offsets in (after, upto] in order (upto None: the head when the read starts), all of
        one life of the run (`run_number`, or the first chunk's): else RunReplacedError at the next chunk."""
        check_run_id(run_id)
        return self._reader.read(run_id, after, upto, check_run_number(run_number))

    def entry(self, run_id: str, offset: int, *, run_number: int | None = None) -> Entry:
        """The entry at one offset (1..head); with `run_number`, of that life of the run only."""
        check_int("offset", offset, -(1 << 64), 1 << 64)
        if offset < 1:
            raise OffsetOutOfRangeError(run_id, offset, self.head(run_id))
        for e in self.read(run_id, offset - 1, offset, run_number=run_number):
            return e
        raise OffsetOutOfRangeError(run_id, offset, self.head(run_id))  # pragma: no cover - read raised first

    def feed(self, after: int = 0, limit: int | None = None) -> Iterator[Entry]:
        """Every entry of every run with position > after, in commit order.

        A damaged entry raises CorruptRecordError naming its `position`: `feed(after=position)`
        goes on past it, so one run's damage never stops the feed for the others."""
        check_int("after", after)
        return self._reader.feed(after, check_limit(limit))

    def position(self) -> int:
        """The last feed position given (0 for an empty log): `feed(after=log.position())` reads only
        what is committed from now on."""
        return self.store.read(self._runs.last_position)

    def follow(self, after: int = 0, *, timeout: float | None = None, poll: float = 0.5) -> Iterator[Entry]:
        """Entries with position > after as they are committed: the feed, then wait for more.
        Appends of this process wake every follower at once; those of other processes are seen
        within `poll` seconds (on PostgreSQL at once, through LISTEN/NOTIFY). Stops after `timeout`
        seconds without a new entry (None: never), or when the log is closed."""
        follow = Follow(self._reader, after, timeout, poll)  # checked now, not at the first entry
        return follow.entries(self.engine.commits().waiter())

    @overload
    def state_at(
        self, run_id: str, offset: int | None = None, *, reducer: None = None, run_number: int | None = None
    ) -> S: ...

    @overload
    def state_at(
        self, run_id: str, offset: int | None = None, *, reducer: Reducer[T], run_number: int | None = None
    ) -> T: ...

    def state_at(
        self,
        run_id: str,
        offset: int | None = None,
        *,
        reducer: Reducer[Any] | None = None,
        run_number: int | None = None,
    ) -> Any:
        """The run's state after its first `offset` events (default: the head), 0 <= offset <= head.

        Loads the nearest snapshot at or below the offset made by the same reducer name and
        version, then folds the events after it, all of one life of the run: when it is deleted
        and made again meanwhile, the fold starts again; with `run_number`, of that life only
        (else RunReplacedError), as a caller that read the run's life before needs.
        """
        check_run_id(run_id)
        return self._replay.state_at(run_id, offset, reducer_or(reducer, self.reducer), check_run_number(run_number))

    @overload
    def writer(
        self, run_id: str, *, reducer: None = None, policy: Policy | None = None, snapshot_bytes_min: int = 0
    ) -> RunWriter[S]: ...

    @overload
    def writer(
        self, run_id: str, *, reducer: Reducer[T], policy: Policy | None = None, snapshot_bytes_min: int = 0
    ) -> RunWriter[T]: ...

    def writer(
        self,
        run_id: str,
        *,
        reducer: Reducer[Any] | None = None,
        policy: Policy | None = None,
        snapshot_bytes_min: int = 0,
    ) -> RunWriter[Any]:
        """A writer for one run that keeps its folded state and checkpoints by `policy`
        (default: the log's `policy`; `eventlog.open`: after every event).

        It starts from the exact state at the run's head (a resume), and fences its appends
        with the offset it knows. `snapshot_bytes_min`: see `RunWriter.snapshot_bytes_min`.
        """
        _check_policy(policy)
        check_int("snapshot_bytes_min", snapshot_bytes_min, 0)
        return RunWriter(
            self.store, self._runs, self._commit, self._replay, self.checkpoints, run_id, reducer_or(reducer, self.reducer),
            policy or self.policy, snapshot_bytes_min,
        )  # fmt: skip

    # -- maintenance -------------------------------------------------------------------------

    def fork(self, run_id: str, at: int, new_run_id: str, *, run_number: int | None = None) -> str:
        """A new run whose first `at` events are this run's (of life `run_number`), shared by reference."""
        return self._maintenance.fork(run_id, at, new_run_id, self._commit.now(), check_run_number(run_number))[0]

    def prune(
        self, run_id: str, before: int, *, reducer: Reducer[Any] | None = None, run_number: int | None = None
    ) -> int:
        """Drop the run's events and checkpoints below the latest checkpoint at or below `before`
        (of life `run_number` only, else RunReplacedError). That checkpoint is materialized (if it
        was not) and becomes the run's base, returned: the state from it on stays readable, below
        it `state_at` raises PrunedError. Event ids stay indexed. Refused while forks exist. The
        base moves in one transaction, the rest a chunk per transaction (`repair` ends a cut one)."""
        check_run_id(run_id)
        return self._maintenance.prune(run_id, before, reducer_or(reducer, self.reducer), check_run_number(run_number))

    def delete_run(self, run_id: str, *, run_number: int | None = None, expected_offset: int | None = None) -> None:
        """Remove a run, damaged or not, unless forks of it exist; with `run_number` or `expected_offset`, only
        that life at that head (else ConflictError). Gone at once; records go a chunk per transaction."""
        check_run_id(run_id)
        self._maintenance.delete_run(run_id, check_run_number(run_number), expected_offset)

    def repair(self) -> list[str]:
        """Finish every delete or prune a crash cut short, then remove index records that point
        at nothing (a feed position of a missing entry, say); returns what it did. Never
        rewrites an entry, and removes none but those of such a delete or prune."""
        return self._maintenance.repair()

    def verify(
        self,
        run_id: str | None = None,
        *,
        reducer: Reducer[Any] | None = None,
        reducers: Sequence[Reducer[Any]] = (),
        progress: Callable[[int], None] | None = None,
    ) -> VerifyReport:
        """Check every record's checksum, offsets without gaps, the feed and the id index against
        the entries, and that every stored snapshot equals, byte for byte once encoded, a fresh
        fold from the run's start.

        Each run is folded by `reducer` (the log's by default), or by the one of `reducers` its latest
        checkpoint names (runs of several reducers are checked whole); a pruned run, or a fork of one,
        by one that keeps the state at its base. When none does (a thread its saver pruned, without
        `ThreadReducer()`), its records are checked, not folded, and a note (not a problem) in
        `report.notes` names that reducer. `progress(n)`: events checked since its last call."""
        if run_id is not None:
            check_run_id(run_id)
        return self._verifier.verify(
            run_id,
            reducer_or(reducer, self.reducer),
            progress,
            self.engine.format >= 2,
            [reducer_or(r, self.reducer) for r in reducers],
        )

    def stats(self, *, scan: bool = False) -> dict[str, Any]:
        """Runs, events, checkpoints, snapshots, bytes on disk and map size. With `scan`, also read
        every stored event record's header: `event_bytes_stored` (framed, as kept), `event_bytes_raw`
        (encoded) and `compression_ratio` (raw / stored; 1.0 for an empty log)."""
        return log_stats(self.store, self.codec, scan=scan)
