"""A run deleted and made again under the same id is another life of it, with a new run number.

Every read that spans transactions (a read in chunks, `state_at`'s snapshot then fold, a
checkpoint's lazy state, a run writer, an export, verify) keeps to one life: it raises
RunReplacedError, or starts again on the new life, never joins two. Each test makes the
interleaving happen for real, on every store: a paused iterator, or a hook in the reducer's
own state type or `apply` that deletes and makes the run again mid-call (the log holds no
transaction open while it calls a reducer).
"""

from __future__ import annotations

import asyncio
import io
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st
from lives_support import right_after

import eventlog
import eventlog.aio
from eventlog import _limits
from eventlog.events import StepCompleted
from eventlog.services import _verify
from eventlog.transfer import export_runs, import_runs

_hooks: dict[str, list[Callable[[], None]]] = {"state": [], "apply": []}


_quiet: list[bool] = []


def arm(where: str, action: Callable[[], None]) -> None:
    """Run `action` once, the next time the log decodes a Trail state (`state`: a snapshot, after
    the transaction that found it) or folds an event (`apply`)."""
    _hooks[where].append(action)


def fire(where: str) -> None:
    if _hooks[where] and not _quiet:
        _hooks[where].pop()()


@pytest.fixture(autouse=True)
def _disarm() -> Any:
    yield
    for actions in _hooks.values():
        actions.clear()


class Trail(msgspec.Struct):
    """The nodes of a run's steps, in order: a state that shows where each event came from."""

    nodes: list[str] = []

    def __post_init__(self) -> None:  # runs when a snapshot is decoded, after its read transaction
        fire("state")


class TrailReducer:
    name = "trail"
    version = 1
    state_type = Trail

    def initial(self) -> Trail:
        _quiet.append(True)  # made, not decoded
        try:
            return Trail()
        finally:
            _quiet.pop()

    def apply(self, state: Trail, event: Any) -> Trail:
        fire("apply")
        state.nodes.append(event.node)
        return state


TRAIL = TrailReducer()


def steps(tag: str, first: int, last: int) -> list[StepCompleted]:
    return [StepCompleted(node=f"{tag}{i}", superstep=i) for i in range(first, last + 1)]


def make(log: eventlog.EventLog, run_id: str, n: int, tag: str = "old") -> int:
    """A run of `n` steps; returns its run number."""
    log.append_many(run_id, steps(tag, 1, n))
    return log.run_info(run_id).number


def remake(log: eventlog.EventLog, run_id: str, n: int, how: str = "fresh") -> None:
    """Delete the run, and (unless `how` is `deleted`) make it again with `n` events: a new run,
    or (`fork`) a fork at 2 of another run, then its own events."""
    log.delete_run(run_id)
    if how == "fresh":
        log.append_many(run_id, steps("new", 1, n))
    elif how == "fork":
        log.append_many("donor", steps("donor", 1, 2))
        log.fork("donor", 2, run_id)
        log.append_many(run_id, steps("new", 3, n))


HOW = ["fresh", "fork", "deleted"]


# -- read --------------------------------------------------------------------------------------


@pytest.mark.parametrize("how", HOW)
def test_read_in_chunks_never_joins_two_lives(
    log: eventlog.EventLog, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    monkeypatch.setattr(_limits, "read_chunk_entries", 2)
    number = make(log, "r", 6)
    it = log.read("r")
    first = [next(it), next(it)]  # the first chunk; the iterator is paused between transactions
    assert [e.event.node for e in first] == ["old1", "old2"]
    remake(log, "r", 8, how)
    with pytest.raises(eventlog.errors.RunReplacedError, match="'r' was deleted") as caught:
        next(it)
    assert {e.run_number for e in first} == {number}
    assert caught.value.number == number
    assert caught.value.now == (None if how == "deleted" else log.run_info("r").number)
    assert isinstance(caught.value, eventlog.ConflictError)


@pytest.mark.parametrize("how", HOW)
def test_read_of_a_fork_keeps_to_one_life_across_the_parent_share(
    log: eventlog.EventLog, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    monkeypatch.setattr(_limits, "read_chunk_entries", 2)
    make(log, "p", 4)
    log.fork("p", 3, "f")
    log.append_many("f", steps("own", 4, 6))
    it = log.read("f")
    assert [next(it).event.node, next(it).event.node] == ["old1", "old2"]  # from the parent, by reference
    remake(log, "f", 8, how)
    with pytest.raises(eventlog.errors.RunReplacedError):
        next(it)


def test_a_read_pinned_to_a_run_number_refuses_another_life(log: eventlog.EventLog) -> None:
    number = make(log, "r", 3)
    assert [e.run_number for e in log.read("r", run_number=number)] == [number] * 3
    remake(log, "r", 3)
    with pytest.raises(eventlog.errors.RunReplacedError):
        list(log.read("r", run_number=number))
    with pytest.raises(eventlog.errors.RunReplacedError):
        log.entry("r", 1, run_number=number)
    with pytest.raises(eventlog.errors.RunReplacedError):
        log.run_info("r", run_number=number)
    assert log.run_info("r").number > number  # numbers only grow: a life never comes back
    with pytest.raises(eventlog.errors.InvalidArgumentError):
        log.read("r", run_number="1")  # type: ignore[arg-type]


# -- state_at ----------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["fresh", "fork"])
def test_state_at_never_folds_one_lifes_snapshot_with_anothers_events(log: eventlog.EventLog, how: str) -> None:
    number = make(log, "r", 6)
    log.checkpoints.save("r", 3, reducer=TRAIL)  # a snapshot at 3 of the first life
    arm("state", lambda: remake(log, "r", 8, how))  # after the snapshot was found, before the fold
    state = log.state_at("r", 6, reducer=TRAIL)
    fresh = log.state_at("r", 6, reducer=TRAIL)
    assert state.nodes == fresh.nodes  # the new life's state, folded again from its start
    assert not any(n.startswith("old") for n in state.nodes)
    # pinned to the first life, it refuses instead
    log.delete_run("r")
    number = make(log, "r", 6)
    log.checkpoints.save("r", 3, reducer=TRAIL)
    arm("state", lambda: remake(log, "r", 8, how))
    with pytest.raises(eventlog.errors.RunReplacedError), log.pinned("r") as info:
        assert info.number == number
        log.state_at("r", 6, reducer=TRAIL)


def test_state_at_never_folds_chunks_of_two_lives(log: eventlog.EventLog, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_limits, "fold_chunk_entries", 2)
    make(log, "r", 6)
    arm("apply", lambda: remake(log, "r", 8))  # while the first chunk is folded
    state = log.state_at("r", 6, reducer=TRAIL)
    assert state.nodes == [f"new{i}" for i in range(1, 7)]


def test_state_at_gives_up_when_the_run_keeps_being_made_again(
    log: eventlog.EventLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_limits, "fold_chunk_entries", 2)
    make(log, "r", 6)
    lives: list[int] = []

    class Restless(TrailReducer):
        def apply(self, state: Trail, event: Any) -> Trail:
            if event.node.endswith("1") and len(lives) < 10:  # each attempt folds from a life's first event
                lives.append(1)
                remake(log, "r", 6)
            return super().apply(state, event)

    with pytest.raises(eventlog.errors.RunReplacedError):
        log.state_at("r", 6, reducer=Restless())
    assert len(lives) == 1 + _limits.replaced_retries_max


# -- checkpoints -------------------------------------------------------------------------------


def _get(log: eventlog.EventLog, how: str) -> eventlog.Checkpoint:
    if how == "load":
        return log.checkpoints.load("r", "c", reducer=TRAIL)
    if how == "latest":
        cp = log.checkpoints.load_latest("r", reducer=TRAIL)
        assert cp is not None
        return cp
    if how == "list":
        return log.checkpoints.list("r", reducer=TRAIL)[-1]
    return list(log.checkpoints.iter("r", reducer=TRAIL))[-1]


@pytest.mark.parametrize("get", ["load", "latest", "list", "iter"])
@pytest.mark.parametrize("how", HOW)
def test_lazy_checkpoint_state_is_of_its_own_life(log: eventlog.EventLog, get: str, how: str) -> None:
    number = make(log, "r", 4)
    log.checkpoints.save("r", 2, checkpoint_id="c", reducer=TRAIL)
    cp = _get(log, get)  # its state is not loaded yet
    remake(log, "r", 4, how)
    if how != "deleted":
        log.checkpoints.save("r", 2, checkpoint_id="c", reducer=TRAIL)  # the same id, in the new life
    with pytest.raises(eventlog.errors.RunReplacedError):
        _ = cp.state
    assert cp.checkpoint_id == "c" and cp.run_number == number
    if how != "deleted":
        assert _get(log, get).state.nodes != ["old1", "old2"]


def test_checkpoints_pinned_to_a_run_number(log: eventlog.EventLog) -> None:
    number = make(log, "r", 2)
    log.checkpoints.save("r", checkpoint_id="c", run_number=number)
    remake(log, "r", 2)
    for call in (
        lambda: log.checkpoints.load("r", "c", run_number=number),
        lambda: log.checkpoints.list("r", run_number=number),
        lambda: log.checkpoints.load_latest("r", run_number=number),
        lambda: list(log.checkpoints.iter("r", run_number=number)),
        lambda: log.checkpoints.save("r", run_number=number),
        lambda: log.checkpoints.save("r", checkpoint_id="c", run_number=number),
    ):
        with pytest.raises(eventlog.errors.RunReplacedError):
            call()
    assert log.checkpoints.list("r") == []  # nothing was saved into the new life


# -- run writers -------------------------------------------------------------------------------


@pytest.mark.parametrize("how", HOW)
def test_a_run_writer_never_continues_into_another_life(log: eventlog.EventLog, how: str) -> None:
    w = log.writer("r", reducer=TRAIL, policy=eventlog.CheckpointPolicy.every(100))
    w.append_many(steps("old", 1, 3))
    remake(log, "r", 5, how)
    before = [(e.offset, e.event.node) for e in log.read("r")] if how != "deleted" else []
    with pytest.raises(eventlog.errors.RunReplacedError):
        w.checkpoint()
    with pytest.raises(eventlog.errors.RunReplacedError):
        w.append(StepCompleted(node="late", superstep=4))
    number = w.run_number
    # told once, it stays of its own life: nothing decided on that life is written to the next
    for _ in range(2):
        with pytest.raises(eventlog.errors.RunReplacedError):
            w.append(StepCompleted(node="later", superstep=5))
        with pytest.raises(eventlog.errors.RunReplacedError):
            w.checkpoint()
    assert w.run_number == number
    if how != "deleted":
        assert [(e.offset, e.event.node) for e in log.read("r")] == before
        assert log.checkpoints.list("r") == []
        assert log.run_info("r").number != number
    else:
        assert "r" not in log.runs()
    fresh = log.writer("r", reducer=TRAIL)  # a new writer knows the run as it is now
    assert fresh.offset == (0 if how == "deleted" else 5)


@pytest.mark.parametrize("how", ["fresh", "fork"])
def test_a_run_writer_starts_from_one_life(log: eventlog.EventLog, how: str) -> None:
    make(log, "r", 6)
    log.checkpoints.save("r", 3, reducer=TRAIL)
    arm("state", lambda: remake(log, "r", 8, how))  # while the writer folds its starting state
    w = log.writer("r", reducer=TRAIL)
    assert w.offset == 8
    assert w.state.nodes == log.state_at("r", reducer=TRAIL).nodes
    assert w.run_number == log.run_info("r").number


# -- the feed ----------------------------------------------------------------------------------


def test_a_follower_of_the_feed_tells_two_lives_apart(log: eventlog.EventLog) -> None:
    log.append_many("donor", steps("donor", 1, 2))
    first = make(log, "r", 2)
    follower = log.follow(timeout=5)
    seen = [next(follower) for _ in range(4)]
    log.delete_run("r")
    log.fork("donor", 2, "r")  # the new life's own entries go on at offset 3, as if nothing happened
    log.append("r", StepCompleted(node="new3", superstep=3))
    seen.append(next(follower))
    second = log.run_info("r").number
    lives = [(e.offset, e.run_number) for e in seen if e.run_id == "r"]
    assert lives == [(1, first), (2, first), (3, second)]
    assert second != first
    assert [e.run_number for e in log.feed() if e.run_id == "r"] == [second]  # the first life is gone


# -- export, verify, the async face, forks --------------------------------------------------------


def test_export_never_writes_two_lives_of_a_run(log: eventlog.EventLog, tmp_path: Path) -> None:
    make(log, "a", 3)
    make(log, "r", 3)
    done: list[int] = []

    def progress(n: int, total: int) -> None:
        if not done:  # after the first run's entries, before the second's
            done.append(n)
            remake(log, "r", 5)

    with pytest.raises(eventlog.errors.RunReplacedError):
        export_runs(log, tmp_path / "out.jsonl", ["a", "r"], progress=progress)
    assert not (tmp_path / "out.jsonl").exists()
    out = io.BytesIO()
    export_runs(log, out, ["r"])  # the new life, whole
    assert out.getvalue().count(b'"type":"entry"') == 5


def test_export_writes_a_run_with_the_parents_of_its_own_life(
    log: eventlog.EventLog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make(log, "a", 3)
    make(log, "r", 3)
    run_info = log.run_info

    def info_then_remake(run_id: str, **kw: Any) -> Any:
        info = run_info(run_id, **kw)
        if run_id == "r":  # once, right after the export read it, as another process may
            monkeypatch.setattr(log, "run_info", run_info)
            remake(log, "r", 4, "fork")  # now a fork of "donor", which the export has not planned
        return info

    monkeypatch.setattr(log, "run_info", info_then_remake)
    with pytest.raises(eventlog.errors.RunReplacedError):
        export_runs(log, tmp_path / "out.jsonl")
    assert not (tmp_path / "out.jsonl").exists()
    assert export_runs(log, tmp_path / "out.jsonl").runs == 3  # now: a, donor, then r as its fork
    with eventlog.open(":memory:") as copy:
        import_runs(copy, tmp_path / "out.jsonl")
        assert copy.run_info("r").parent == "donor"


def test_an_import_writes_only_to_the_lives_it_made_and_undoes_only_those(
    log: eventlog.EventLog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer deletes a run the import made and makes it again, to the same head, between
    two of the import's batches: the next batch is refused, and undoing the import leaves that
    writer's run alone."""
    from eventlog.transfer import _import

    monkeypatch.setattr(_import, "_IMPORT_BATCH_EVENTS_MAX", 2)
    with eventlog.open(":memory:") as source:
        source.append_many("r", steps("x", 1, 5))
        source.checkpoints.save("r", 4, reducer=TRAIL)
        export_runs(source, tmp_path / "out.jsonl")
    made: list[int] = []

    def progress(done: int, total: int) -> None:
        if not made:  # after the import's first batch of "r"
            made.append(log.run_info("r").number)
            remake(log, "r", 2)

    with pytest.raises(eventlog.errors.RunReplacedError):
        import_runs(log, tmp_path / "out.jsonl", reducers=[TRAIL], progress=progress)
    info = log.run_info("r")  # the other writer's life, as it left it
    assert info.number != made[0] and info.head == 2 and info.checkpoints == 0
    assert [e.event.node for e in log.read("r")] == ["new1", "new2"]


@pytest.mark.parametrize("made", ["append", "fork"])
def test_an_import_takes_the_life_of_a_run_it_made_from_the_write_that_made_it(
    log: eventlog.EventLog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, made: str
) -> None:
    """Another writer deletes a run right after the import's append (or fork) made it, and makes
    it again to the same head, before the import reads the run back: the import's next write is
    refused, and undoing the import leaves that writer's run alone. Before, the import took the
    life it read back by id for its own: it wrote its next entries into the other writer's run,
    then deleted that run as its own."""
    from eventlog.transfer import _import

    monkeypatch.setattr(_import, "_IMPORT_BATCH_EVENTS_MAX", 2)
    with eventlog.open(":memory:") as source:
        if made == "append":
            source.append_many("r", steps("x", 1, 5))
        else:
            source.append_many("donor", steps("d", 1, 2))
            source.fork("donor", 2, "r")
            source.append_many("r", steps("x", 3, 6))
        export_runs(source, tmp_path / "out.jsonl")

    def made_again() -> None:  # by another writer, to the head the import's write left
        log.delete_run("r")
        if made == "append":
            log.append_many("r", steps("new", 1, 2))
        else:
            log.append_many("other", steps("other", 1, 2))
            log.fork("other", 2, "r")

    if made == "append":  # the run's first batch, two events
        right_after(log.engine.commit, "commit", made_again)
    else:  # the fork at 2
        right_after(log._maintenance, "fork", made_again)
    with pytest.raises(eventlog.errors.RunReplacedError):
        import_runs(log, tmp_path / "out.jsonl")
    info = log.run_info("r")  # the other writer's life, as it left it
    assert info.head == 2 and info.parent == (None if made == "append" else "other")
    assert [e.event.node for e in log.read("r")] == (["new1", "new2"] if made == "append" else ["other1", "other2"])


def test_verify_checks_the_life_it_finds_and_skips_a_deleted_run(
    log: eventlog.EventLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_verify, "_CHUNK", 2)  # verify folds a run two entries per transaction
    make(log, "r", 6)
    log.checkpoints.save("r", 4, reducer=TRAIL)
    arm("apply", lambda: remake(log, "r", 8))  # while the first chunk is checked
    report = log.verify("r", reducer=TRAIL)
    assert report.ok, report.problems
    assert report.events == 8  # the new life, checked whole
    arm("apply", lambda: log.delete_run("r"))
    make(log, "s", 2)
    report = log.verify(reducer=TRAIL)
    assert report.ok, report.problems
    assert report.runs == 1  # "s"; "r" went while it was checked


def test_the_async_face_pins_the_run_number(log: eventlog.EventLog) -> None:
    alog = eventlog.aio.AsyncEventLog(log)
    number = make(log, "r", 3)

    async def main() -> None:
        assert [e.run_number async for e in alog.read("r", run_number=number)] == [number] * 3
        cp = await alog.checkpoints.save("r", reducer=TRAIL)
        assert cp.run_number == number
        remake(log, "r", 3)
        with pytest.raises(eventlog.errors.RunReplacedError):
            [e async for e in alog.read("r", run_number=number)]
        with pytest.raises(eventlog.errors.RunReplacedError):
            await alog.entry("r", 2, run_number=number)
        with pytest.raises(eventlog.errors.RunReplacedError):
            await alog.run_info("r", run_number=number)

    asyncio.run(main())


@pytest.mark.parametrize("how", HOW)
def test_an_append_pinned_to_a_run_number_never_lands_in_another_life(log: eventlog.EventLog, how: str) -> None:
    number = make(log, "r", 3)
    assert log.append("r", StepCompleted(node="old", superstep=4), run_number=number, expected_offset=3) == 4
    remake(log, "r", 4, how)  # the same head as the old life had: only the run number tells them apart
    after = [] if how == "deleted" else [(e.run_number, e.offset, e.event) for e in log.read("r")]
    alog = eventlog.aio.AsyncEventLog(log)
    with pytest.raises(eventlog.errors.RunReplacedError):
        log.append("r", StepCompleted(node="old", superstep=5), run_number=number, expected_offset=4)
    with pytest.raises(eventlog.errors.RunReplacedError):
        log.append_many("r", steps("old", 5, 6), run_number=number)
    with pytest.raises(eventlog.errors.RunReplacedError):
        asyncio.run(alog.append("r", StepCompleted(node="old", superstep=5), run_number=number))
    if how == "deleted":
        assert "r" not in log.runs()
    else:
        assert [(e.run_number, e.offset, e.event) for e in log.read("r")] == after
    with pytest.raises(eventlog.errors.InvalidArgumentError):
        log.append("r", StepCompleted(node="old", superstep=5), run_number=0)


def test_a_checkpoint_delete_pinned_to_a_run_number_never_deletes_one_of_another_life(log: eventlog.EventLog) -> None:
    number = make(log, "r", 3)
    log.checkpoints.save("r", 2, checkpoint_id="c", reducer=TRAIL)
    listed = [cp.run_number for cp in log.checkpoints.list("r")]
    assert listed == [number]
    remake(log, "r", 3)
    log.checkpoints.save("r", 2, checkpoint_id="c", reducer=TRAIL)  # the same id in the new life
    with pytest.raises(eventlog.errors.RunReplacedError):
        log.checkpoints.delete("r", "c", run_number=number)
    with pytest.raises(eventlog.errors.RunReplacedError):
        asyncio.run(eventlog.aio.AsyncEventLog(log).checkpoints.delete("r", "c", run_number=number))
    assert [cp.checkpoint_id for cp in log.checkpoints.list("r")] == ["c"]
    log.checkpoints.delete("r", "c", run_number=log.run_info("r").number)
    assert log.checkpoints.list("r") == []


def test_a_fork_never_reads_a_parent_made_again_after_it(log: eventlog.EventLog) -> None:
    make(log, "p", 4)
    log.fork("p", 3, "f")
    with pytest.raises(eventlog.errors.ForkDependencyError):
        log.delete_run("p")  # the parent of a fork cannot go
    # A damaged fork count lets it go; the fork must then not read the new parent's events.
    runs = log._runs
    rec = log.store.read(lambda txn: runs.get(txn, "p"))
    assert rec is not None
    rec.forks = 0
    log.store.write(lambda txn: runs.put(txn, "p", rec))
    remake(log, "p", 5)
    with pytest.raises(eventlog.errors.CorruptRecordError, match="made again after the fork"):
        list(log.read("f"))
    with pytest.raises(eventlog.errors.CorruptRecordError, match="made again after the fork"):
        log.state_at("f")
    assert not log.verify().ok


# -- what the command line and the UI read: several calls, one life -----------------------------


def test_pinned_names_a_run_made_again_inside_its_block(log: eventlog.EventLog) -> None:
    number = make(log, "r", 3)
    with log.pinned("r") as info:
        assert (info.number, info.head) == (number, 3)
    with pytest.raises(eventlog.errors.RunReplacedError), log.pinned("r"):
        remake(log, "r", 2)  # the reads of the block may have been of either life
    with pytest.raises(eventlog.errors.RunReplacedError) as caught, log.pinned("r"):
        remake(log, "r", 1)
        log.state_at("r", 2)  # the new life is shorter: the error names the cause, not the offset
    assert isinstance(caught.value.__cause__, eventlog.errors.OffsetOutOfRangeError)
    with pytest.raises(eventlog.errors.OffsetOutOfRangeError), log.pinned("r"):
        log.state_at("r", 9)  # the same life: the error is the block's own


def test_the_ui_never_shows_a_state_of_two_lives(open_log: Callable[..., eventlog.EventLog]) -> None:
    pytest.importorskip("starlette", reason="the UI needs its extra: pip install '.[ui]'")
    pytest.importorskip("uvicorn", reason="the UI needs its extra: pip install '.[ui]'")
    from ui_support import get, serving

    log = open_log(reducer=TRAIL)  # the UI folds with the log's reducer
    make(log, "r", 6)
    log.checkpoints.save("r", 3)
    with serving(log) as base:
        arm("state", lambda: remake(log, "r", 8))  # in the server's thread, between the snapshot and the fold
        status, body, _ = get(f"{base}/run/state.json?id=r&at=6")
        assert status == 409, body
        assert "deleted and made again" in body
        status, body, _ = get(f"{base}/run/state.json?id=r&at=6")
        assert status == 200 and msgspec.json.decode(body)["state"]["nodes"] == [f"new{i}" for i in range(1, 7)]


def test_a_fork_pinned_to_a_run_number_forks_that_life_or_nothing(log: eventlog.EventLog) -> None:
    number = make(log, "r", 3)
    cp = log.checkpoints.save("r", 2)
    remake(log, "r", 4)
    with pytest.raises(eventlog.errors.RunReplacedError):
        log.fork("r", cp.offset, "b", run_number=cp.run_number)
    assert "b" not in log.runs()  # refused before anything was written
    log.fork("r", 2, "b", run_number=log.run_info("r").number)
    assert [e.event.node for e in log.read("b")] == ["new1", "new2"]
    assert number != log.run_info("r").number


def test_the_command_line_deletes_only_the_life_it_asked_about(tmp_path: Path) -> None:
    path = tmp_path / "log"
    with eventlog.open(path) as log:
        make(log, "r", 3)
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVENTLOG_")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent)
    argv = [sys.executable, "-m", "eventlog", "--log", str(path), "delete", "r"]
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    killer = threading.Timer(60, p.kill)  # never hang the suite
    killer.start()
    try:
        assert p.stderr is not None
        prompt = b"delete run 'r' (3 events, 0 checkpoints)? [y/N] "
        assert p.stderr.read(len(prompt)) == prompt  # the command waits for its answer
        with eventlog.open(path) as log:  # meanwhile another process deletes the run and makes it again
            remake(log, "r", 5)
        out, err = p.communicate(b"y\n", timeout=60)
    finally:
        killer.cancel()
    assert p.returncode == 4, err  # a conflict: the run it asked about is gone
    assert b"deleted and made again" in err
    with eventlog.open(path) as log:
        assert [e.event.node for e in log.read("r")] == [f"new{i}" for i in range(1, 6)]


def test_the_ui_forks_and_inspects_only_the_life_its_page_shows(log: eventlog.EventLog) -> None:
    pytest.importorskip("starlette", reason="the UI needs its extra: pip install '.[ui]'")
    pytest.importorskip("uvicorn", reason="the UI needs its extra: pip install '.[ui]'")
    import html
    import json
    import re

    from ui_support import get, serving

    make(log, "r", 3)
    with serving(log, allow_writes=True) as url:
        _, page, _ = get(f"{url}/run?id=r")
        key = re.search(r'<meta name="eventlog-write" content="([^"]+)">', page).group(1)  # type: ignore[union-attr]
        number = re.search(r'data-number="(\d+)"', page).group(1)  # type: ignore[union-attr]
        remake(log, "r", 5)  # while the page is open
        form = {"run": "r", "at": 2, "new": "b", "number": int(number)}
        status, body, _ = get(f"{url}/run/fork", {"x-eventlog-write": key}, json.dumps(form).encode())
        assert status == 409 and "deleted and made again" in body
        assert "b" not in log.runs()
        # the inspector's fragments name the page's life too: never a state of the new one
        state_url = html.unescape(re.search(r'data-state="([^"]+)"', page).group(1))  # type: ignore[union-attr]
        assert f"number={number}" in state_url
        status, body, _ = get(f"{url}{state_url}&at=2")
        assert status == 409 and "deleted and made again" in body
        _, page, _ = get(f"{url}/run?id=r")
        assert f'data-number="{log.run_info("r").number}"' in page
        state_url = html.unescape(re.search(r'data-state="([^"]+)"', page).group(1))  # type: ignore[union-attr]
        assert get(f"{url}{state_url}&at=2")[0] == 200


@given(
    chunk=st.integers(1, 4),
    n=st.integers(1, 8),
    taken=st.integers(1, 8),  # a read starts at its first entry
    how=st.sampled_from([*HOW, "none"]),
    m=st.integers(3, 9),
)
def test_a_read_is_a_prefix_of_one_life_then_done_or_refused(chunk: int, n: int, taken: int, how: str, m: int) -> None:
    """However chunks fall and wherever the run is made again, a read yields a prefix of the
    life it started on, in order, and then ends with that life's last entry or RunReplacedError."""
    from eventlog.store import MemoryStore

    saved = _limits.read_chunk_entries
    _limits.read_chunk_entries = chunk
    try:
        log = eventlog.open(MemoryStore())
        number = make(log, "r", n)
        it = log.read("r")
        got = [e for _, e in zip(range(min(taken, n)), it, strict=False)]
        if how != "none":
            remake(log, "r", m, how)
        try:
            got += list(it)
            refused = False
        except eventlog.errors.RunReplacedError:
            refused = True
    finally:
        _limits.read_chunk_entries = saved
    assert [(e.offset, e.event.node, e.run_number) for e in got] == [
        (i, f"old{i}", number) for i in range(1, len(got) + 1)
    ]
    assert refused or len(got) == n
    assert not refused or how != "none"
