"""`delete_run` and `prune` remove a run's records a bounded chunk per transaction: the run (or
what is below the new base) is gone at once for readers, a removal cut short by a crash is
named by `verify` and finished by `repair`, and a removal of a long run does not hold it all
in one transaction."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import eventlog
from eventlog import _limits
from eventlog.events import StepCompleted

OpenLog = Callable[..., eventlog.EventLog]


class Cut(Exception):
    """Stands for a crash between two of a removal's transactions."""


def step(i: int) -> StepCompleted:
    return StepCompleted(node=f"n{i}", superstep=i, update={"i": i})


def fill(log: eventlog.EventLog, run_id: str, n: int, every: int = 10) -> None:
    for start in range(0, n, every):
        log.append_many(run_id, [step(i) for i in range(start, min(n, start + every))])
        log.checkpoints.save(run_id)


@contextmanager
def cut_after(log: eventlog.EventLog, writes: int) -> Iterator[None]:
    """Within the block, the log's store fails every write transaction after the next `writes`."""
    real = log.store.write
    left = [writes]

    def write(fn: Any) -> Any:
        if left[0] == 0:
            raise Cut
        left[0] -= 1
        return real(fn)

    log.store.write = write  # type: ignore[method-assign]
    try:
        yield
    finally:
        del log.store.write  # the store's own method again


def table_sizes(log: eventlog.EventLog) -> dict[str, int]:
    stats = log.store.stats()
    return {t: stats[f"entries_{t}"] for t in ("events", "feed", "event_ids", "checkpoints", "snapshots")}


def test_a_delete_cut_short_is_gone_for_readers_and_finished_by_repair(
    open_log: OpenLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_limits, "remove_chunk_keys", 8)
    log = open_log()
    fill(log, "kept", 30)
    before = table_sizes(log)
    fill(log, "gone", 100)
    kept_feed = [(e.run_id, e.offset) for e in log.feed() if e.run_id == "kept"]
    # The detach and two chunks of entries; on PostgreSQL the detach (the rest is one set-based transaction).
    with cut_after(log, 3 if log.store.dense else 1), pytest.raises(Cut):
        log.delete_run("gone")

    assert "gone" not in log.runs()
    assert [(e.run_id, e.offset) for e in log.feed()] == kept_feed
    assert sum(1 for _ in log.feed(limit=5)) == 5
    report = log.verify()
    assert [p.kind for p in report.problems] == ["meta"], report.problems
    assert "has not finished" in report.problems[0].message

    done = log.repair()
    assert any("deleting run number" in line for line in done), done
    assert log.verify().ok
    assert table_sizes(log) == before
    log.append("gone", step(0))  # the id is free again, with a new number
    assert log.head("gone") == 1 and log.verify().ok


def test_a_prune_cut_short_reads_from_its_base_and_is_finished_by_repair(
    open_log: OpenLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_limits, "remove_chunk_keys", 8)
    log = open_log()
    fill(log, "r", 100)
    full = log.state_at("r", 100)
    ids = [e.event_id for e in log.read("r")]
    with cut_after(log, 2), pytest.raises(Cut):  # the prune's own transaction and one chunk of entries
        log.prune("r", before=60)

    assert log.state_at("r", 100) == full
    with pytest.raises(eventlog.errors.PrunedError):
        log.state_at("r", 59)
    assert [e.offset for e in log.feed()] == list(range(61, 101))
    assert [cp.offset for cp in log.checkpoints.list("r")] == list(range(60, 101, 10))
    assert [p.kind for p in log.verify().problems] == ["meta"]

    assert any("pruning up to offset 60" in line for line in log.repair())
    assert log.verify().ok
    sizes = table_sizes(log)
    assert sizes["events"] == sizes["feed"] == 40
    assert sizes["event_ids"] == 0  # ids the log made are indexed nowhere: their form names their entry
    assert log.append("r", step(5), event_id=ids[9]) == 10  # a pruned event's id: a no-op
    assert log.head("r") == 100


def test_a_delete_of_a_damaged_run_finds_its_feed_positions_across_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An undecodable entry's feed position is found by a feed scan, itself in chunks."""
    monkeypatch.setattr(_limits, "remove_chunk_keys", 4)
    log = eventlog.open(tmp_path / "log")
    fill(log, "kept", 20)
    fill(log, "bad", 20)
    fill(log, "kept", 20)

    def damage(txn: Any) -> None:
        number = log._runs.require(txn, "bad").number
        key = number.to_bytes(8, "big") + (7).to_bytes(8, "big")
        value = bytearray(txn.get("events", key))
        value[-3] ^= 0xFF
        txn.put("events", key, bytes(value))

    log.store.write(damage)
    log.delete_run("bad")
    assert log.verify().ok
    assert table_sizes(log)["feed"] == table_sizes(log)["events"] == 40
    log.close()


_KILLED_DELETE = textwrap.dedent(
    """
    import os, sys, time, eventlog
    from eventlog import _limits
    _limits.remove_chunk_keys = 64
    log = eventlog.open(sys.argv[1])
    real = log.store.write
    commits = []
    def write(fn):
        result = real(fn)
        commits.append(1)
        if len(commits) == 5:  # the detach and four chunks committed: wait for the kill
            os.write(1, b"committed\\n")
            time.sleep(60)
        return result
    log.store.write = write
    log.delete_run("big")
    os.write(1, b"done\\n")
    """
)


def test_a_delete_killed_between_chunks_is_finished_by_repair(tmp_path: Path) -> None:
    path = tmp_path / "log"
    with eventlog.open(path, durability="none") as log:
        fill(log, "kept", 50)
        before = table_sizes(log)
        fill(log, "big", 5_000, every=100)
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_DELETE, str(path)], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"committed\n"
    proc.kill()
    proc.wait()
    with eventlog.open(path) as log:
        assert "big" not in log.runs()
        assert {e.run_id for e in log.feed()} == {"kept"}
        assert [p.kind for p in log.verify().problems] == ["meta"]
        log.repair()
        assert log.verify().ok
        assert table_sizes(log) == before
