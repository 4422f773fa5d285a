"""verify: every record's checks, offsets without gaps, the indexes against the entries
(`_links.py`), and every stored snapshot against a fresh fold (docs/concepts.md, "Verify").

A pruned run (or a fork of one) is folded from the state kept at its base; when only a reducer
verify was not given keeps it, the run's records are checked but not folded, and a note says so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from .. import _limits
from ..core._dictionaries import stored_dictionaries
from ..core._reader import Reader
from ..core._replay import PrunedBase, Replay
from ..core._runs import Runs
from ..core.fold import Reducer, reducer_tag
from ..errors import (
    CorruptRecordError,
    EventLogError,
    PrunedError,
    ReducerError,
    RunReplacedError,
    UnknownKindError,
    UnknownRunError,
)
from ..record._keys import run_range
from ..record._records import RunRecord
from ..record.codec import Codec
from ..record.tables import CHECKPOINT_IDS, CHECKPOINTS, EVENTS, SNAPSHOTS
from ..store._base import Store, Txn, scan_chunks
from ._links import Links, index_problems, number_problems, stray_problems
from ._report import Problem, VerifyReport
from .checkpoints import Checkpoints

__all__ = ["Problem", "VerifyReport"]

_CHUNK = 4096


class Verifier:
    """Runs the checks of `verify` in bounded memory: runs and tables are read in chunks."""

    def __init__(
        self, store: Store, codec: Codec, runs: Runs, reader: Reader, replay: Replay, checkpoints: Checkpoints[Any]
    ) -> None:
        self._store, self._codec, self._runs = store, codec, runs
        self._reader, self._replay, self._checkpoints = reader, replay, checkpoints
        self._links = Links(store, codec, runs)

    def verify(
        self,
        run_id: str | None,
        reducer: Reducer[Any],
        progress: Callable[[int], None] | None,
        ids_indexed: bool,
        reducers: Sequence[Reducer[Any]] = (),
    ) -> VerifyReport:
        """`reducers`: others a run may have been checkpointed by; each run is folded by the one
        its latest checkpoint names (`_reducer_of`), `reducer` when it names none of them."""
        report = VerifyReport(problems=[], notes=[])
        try:
            run_ids = [run_id] if run_id is not None else self._all_runs()
        except CorruptRecordError as exc:
            report.problems.append(Problem(exc.run_id, exc.offset, "corrupt", str(exc)))
            return report
        for rid in run_ids:
            for attempt in range(_limits.replaced_retries_max + 1):
                kept = len(report.problems), len(report.notes), report.events, report.checkpoints
                try:
                    rec = self._run(rid, self._reducer_of(rid, reducer, reducers), report, progress, ids_indexed)
                except (RunReplacedError, UnknownRunError) as exc:  # deleted (and made again) meanwhile
                    _restore(report, kept)  # what was found was of a life of the run that is gone
                    gone = isinstance(exc, UnknownRunError) or exc.now is None
                    if gone and run_id is not None:
                        raise UnknownRunError(rid) from None
                    if gone:
                        break  # listed, then deleted: nothing of it is left to check
                    if attempt == _limits.replaced_retries_max:
                        raise
                    continue
                if rec is not None and self._pruned_since(rid, rec):  # what was below the new base went meanwhile
                    _restore(report, kept)
                    if attempt < _limits.replaced_retries_max:
                        continue
                    message = (
                        f"run {rid!r} was pruned again each of the {attempt + 1} times verify read it; verify it again"
                    )
                    report.notes.append(Problem(rid, None, "pruned", message))
                report.runs += 1
                break
        if run_id is None:
            removing = self._store.read(self._runs.removals)
            for number, _ in removing:
                message = f"a delete or prune of run number {number} has not finished; log.repair() finishes it"
                report.problems.append(Problem(None, None, "meta", message))
            for dict_id, data in self._store.read(lambda txn: stored_dictionaries(self._codec, txn)):
                if isinstance(data, CorruptRecordError):
                    message = f"zstd dictionary {dict_id} is damaged ({data.what}): the records compressed with it cannot be read"
                    report.problems.append(Problem(None, None, "meta", message))
            report.problems.extend(self._store.read(lambda txn: index_problems(self._runs, txn)))
            report.problems.extend(self._store.read(lambda txn: stray_problems(self._runs, txn)))
            report.problems.extend(self._links.feed())
        return report

    def _reducer_of(self, run_id: str, default: Reducer[Any], reducers: Sequence[Reducer[Any]]) -> Reducer[Any]:
        """The reducer the run is folded by (`Checkpoints.reducer_of`, as the command line and the
        viewer choose it): that of its latest checkpoint, or one that keeps a pruned base."""
        if not reducers:
            return default
        try:
            return self._checkpoints.reducer_of(run_id, reducers, reducer=default)
        except CorruptRecordError:
            return default  # `_run` names the damage

    def _pruned_since(self, run_id: str, rec: RunRecord) -> bool:
        """Whether the life of the run `rec` was read of has been pruned since."""
        now = self._store.read(lambda txn: self._runs.get(txn, run_id))
        return now is not None and now.number == rec.number and now.base != rec.base

    def _all_runs(self) -> list[str]:
        out: list[str] = []
        while True:
            chunk = self._store.read(lambda txn: self._runs.run_ids(txn, out[-1] if out else None, _CHUNK))
            out.extend(chunk)
            if len(chunk) < _CHUNK:
                return out

    def _run(
        self,
        run_id: str,
        reducer: Reducer[Any],
        report: VerifyReport,
        progress: Callable[[int], None] | None,
        ids_indexed: bool,
    ) -> RunRecord | None:
        """Check one run; the record of the run it checked (None: the record is damaged)."""
        problems = report.problems
        try:
            rec = self._store.read(lambda txn: self._runs.require(txn, run_id))
        except CorruptRecordError as exc:
            problems.append(Problem(run_id, None, "corrupt", str(exc)))
            return None
        problems.extend(self._store.read(lambda txn: number_problems(self._runs, txn, run_id, rec)))
        checkpoints, snapshots, seen, found = self._store.read(
            lambda txn: _stored(self._checkpoints, txn, run_id, rec, reducer)
        )
        report.checkpoints += seen
        problems.extend(found)
        problems.extend(self._links.entries(run_id, rec, ids_indexed))
        try:
            pruned = self._store.read(lambda txn: self._replay.pruned_base(txn, run_id, rec))
        except CorruptRecordError as exc:  # a run it forks from is missing or was made again
            problems.append(Problem(run_id, None, "corrupt", str(exc)))
            return rec
        start = 0 if pruned is None else pruned.offset
        folds = pruned is None or pruned.read_by(reducer)
        state: Any = None
        if folds:
            try:
                _, _, start, state = self._replay.start(run_id, start, reducer, rec.number)
            except (CorruptRecordError, PrunedError, ReducerError) as exc:
                problems.append(Problem(run_id, start, "corrupt", f"base snapshot: {exc}"))
                return rec
            self._compare(run_id, rec, start, state, snapshots, checkpoints, reducer, report, bool(rec.base))
        else:
            assert pruned is not None, "a run no run of whose lineage was pruned folds from its start"
            _unfolded(run_id, pruned, reducer, report)
        pending = 0
        try:
            for owner, number, first, values, _ in self._reader.chunks(run_id, start, rec.head, _CHUNK, rec.number):
                for i, value in enumerate(values):
                    offset = first + i
                    try:
                        event = self._codec.decode_entry_event(value, EVENTS.key(number, offset))
                    except CorruptRecordError as exc:
                        problems.append(Problem(owner, offset, "corrupt", str(exc.at(owner, offset))))
                        return rec
                    except UnknownKindError as exc:
                        problems.append(Problem(owner, offset, "unknown_kind", str(exc.at(owner, offset))))
                        return rec
                    report.events += 1
                    pending += 1
                    if not folds:
                        continue  # its records are checked; a note says why it is not folded
                    try:
                        state = reducer.apply(state, event)
                    except Exception as exc:  # noqa: BLE001 - a reducer failing is reported, not raised
                        problems.append(Problem(run_id, offset, "corrupt", f"the reducer raised {exc!r}"))
                        return rec
                    if offset in snapshots or offset in checkpoints:
                        self._compare(run_id, rec, offset, state, snapshots, checkpoints, reducer, report)
                if progress is not None and pending >= 1024:
                    progress(pending)
                    pending = 0
        except CorruptRecordError as exc:
            kind = "gap" if "missing" in exc.what else "corrupt"
            problems.append(Problem(exc.run_id or run_id, exc.offset, kind, str(exc)))
        except PrunedError as exc:  # pruned meanwhile (the caller reads the run again), else damaged
            problems.append(Problem(run_id, exc.offset, "corrupt", str(exc)))
        if progress is not None and pending:
            progress(pending)
        return rec

    def _snapshot(
        self, run_id: str, rec: RunRecord, offset: int, reducer: Reducer[Any], report: VerifyReport
    ) -> bytes | None:
        """The canonical bytes of the run's snapshot at `offset` by `reducer`; a damaged one is reported."""
        key = SNAPSHOTS.key(rec.number, offset, reducer_tag(reducer))
        value = self._store.read(lambda txn: txn.get(SNAPSHOTS, key))
        if value is None:
            return None
        try:
            return self._replay.load_snapshot(run_id, key, value, reducer)[1]
        except CorruptRecordError as exc:
            report.problems.append(Problem(run_id, offset, "corrupt", f"snapshot at offset {offset}: {exc.what}"))
            return None

    def _compare(
        self,
        run_id: str,
        rec: RunRecord,
        offset: int,
        state: Any,
        snapshots: set[int],
        checkpoints: dict[int, list[bytes]],
        reducer: Reducer[Any],
        report: VerifyReport,
        skip_snapshot: bool = False,
    ) -> None:
        stored = (
            None if skip_snapshot or offset not in snapshots else self._snapshot(run_id, rec, offset, reducer, report)
        )
        if stored is not None and stored != self._codec.encode_state(state):
            report.problems.append(
                Problem(
                    run_id,
                    offset,
                    "nondeterministic",
                    f"run {run_id!r} offset {offset}: the snapshot differs from a fresh fold by "
                    f"{reducer.name}@{reducer.version}; the reducer is not deterministic or the snapshot is damaged",
                )
            )
        summarize = getattr(reducer, "summarize", None)
        keys = checkpoints.get(offset, [])
        records = self._store.read(lambda txn: [(key, txn.get(CHECKPOINTS, key)) for key in keys]) if keys else []
        for cp in (self._checkpoints.record(run_id, key, value) for key, value in records if value is not None):
            if cp.reducer != reducer.name or cp.reducer_version != reducer.version or summarize is None:
                continue
            try:
                fresh = msgspec.msgpack.decode(self._codec.encode_state(summarize(state)))
            except (EventLogError, Exception):  # noqa: BLE001 - a reducer failing is reported, not raised
                fresh = None
            kept = cp.summary_of()
            if kept and (not isinstance(fresh, dict) or {k: fresh.get(k) for k in kept} != kept):
                report.problems.append(
                    Problem(run_id, offset, "checkpoint", f"checkpoint {cp.checkpoint_id!r} disagrees with the fold")
                )


def _restore(report: VerifyReport, kept: tuple[int, int, int, int]) -> None:
    """Forget what was found of a run since `kept` (problems, notes, events, checkpoints): the
    run is read again."""
    del report.problems[kept[0] :]
    del report.notes[kept[1] :]
    report.events, report.checkpoints = kept[2], kept[3]


def _unfolded(run_id: str, pruned: PrunedBase, reducer: Reducer[Any], report: VerifyReport) -> None:
    """Say why the run is not folded: `reducer` cannot start at its pruned base. A base with no
    snapshot at all is a problem (damage); one kept only by reducers verify was not given, a note,
    as their snapshots elsewhere are not compared either."""
    if not pruned.tags:
        message = f"{pruned.kept(run_id)}: the run cannot be folded; restore it from a copy"
        report.problems.append(Problem(run_id, pruned.offset, "corrupt", message))
        return
    older = any(t.rpartition("@")[0] == reducer.name for t in pruned.tags)
    why = f" ({reducer.name}@{reducer.version} has no upgrade(state, from_version) to read it)" if older else ""
    which = "that reducer" if len(pruned.tags) == 1 else "the one that folds it"
    message = (
        f"{pruned.kept(run_id)}, which verify was not given{why}: the run's records were checked but not "
        f"folded; pass {which} in reducers= to fold the run and compare its snapshots"
    )
    report.notes.append(Problem(run_id, pruned.offset, "reducer", message))


def _stored(
    records: Checkpoints[Any], txn: Txn, run_id: str, rec: RunRecord, reducer: Reducer[Any]
) -> tuple[dict[int, list[bytes]], set[int], int, list[Problem]]:
    """The keys of the run's checkpoints by offset, the offsets of its snapshots by `reducer`
    (a record is read again, and a snapshot read, only when the fold reaches it), how many
    checkpoints it has, and what is wrong with their records and ids."""
    found: list[Problem] = []
    start, stop = run_range(rec.number)
    tag = reducer_tag(reducer)
    checkpoints: dict[int, list[bytes]] = {}
    seen = 0
    for key, value in scan_chunks(txn, CHECKPOINTS, start, stop):
        seen += 1
        try:
            cp = records.record(run_id, key, value)
        except CorruptRecordError as exc:
            found.append(Problem(run_id, None, "corrupt", f"checkpoint record: {exc}"))
            continue
        checkpoints.setdefault(cp.offset, []).append(key)
        if txn.get(CHECKPOINT_IDS, CHECKPOINT_IDS.key(rec.number, cp.checkpoint_id)) != CHECKPOINTS.tail(key):
            found.append(
                Problem(run_id, cp.offset, "index", f"checkpoint {cp.checkpoint_id!r} is not indexed by its id")
            )
    if sum(1 for _ in scan_chunks(txn, CHECKPOINT_IDS, start, stop)) > seen:
        found.append(Problem(run_id, None, "index", "checkpoint ids index checkpoints that are gone"))
    snapshots: set[int] = set()
    while keys := txn.keys(SNAPSHOTS, start, stop, _CHUNK):
        snapshots.update(at for _, at, held in map(SNAPSHOTS.parse, keys) if held == tag)
        start = keys[-1] + b"\x00"
    return checkpoints, snapshots, seen, found
