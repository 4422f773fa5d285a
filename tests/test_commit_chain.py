"""A writer trusts what its own last commit left (the run's head and number, the last feed
position, the dictionary) only while nothing else committed since (`Txn.generation`): every
other commit — another process's, another face's, a fork, prune, delete or checkpoint of
this one — has the next append read what it left."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import eventlog
import eventlog.aio
from eventlog.events import StepCompleted, UserMessage

OpenLog = Callable[..., eventlog.EventLog[Any]]


def _contents(log: eventlog.EventLog[Any], run_id: str) -> list[str]:
    return [e.event.content for e in log.read(run_id)]


def _feed_is_whole(log: eventlog.EventLog[Any], appends: int) -> None:
    """Every position given once, in order; on a dense store 1 to `appends` but for those removed."""
    positions = [e.position for e in log.feed()]
    assert positions == sorted(set(positions))
    if log.store.dense:
        assert positions[-1] == log.position() == appends
    assert log.verify().ok


def test_another_processs_commit_between_two_appends_is_read(tmp_path: Path) -> None:
    path = tmp_path / "log"
    code = (
        "import sys, eventlog\n"
        "from eventlog.events import UserMessage\n"
        "with eventlog.open(sys.argv[1]) as log:\n"
        "    log.append('r', UserMessage(content='other 1'))\n"
        "    log.append('s', UserMessage(content='other run'))\n"
        "    log.append('r', UserMessage(content='other 2'))\n"
    )
    with eventlog.open(path) as log:
        for i in range(3):  # commits that follow one another: the writer reads nothing of its own
            log.append("r", UserMessage(content=f"mine {i}"))
        proc = subprocess.run(
            [sys.executable, "-c", code, str(path)], check=False, capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 0, proc.stderr
        assert log.append("r", UserMessage(content="mine 3")) == 6
        log.append("t", UserMessage(content="a new run"))
        assert _contents(log, "r") == ["mine 0", "mine 1", "mine 2", "other 1", "other 2", "mine 3"]
        numbers = {run_id: log.run_info(run_id).number for run_id in log.runs()}
        assert len(set(numbers.values())) == 3  # the new run did not take the other process's number
        _feed_is_whole(log, 8)
        assert [e.position for e in log.feed()] == list(range(1, 9))


def test_this_logs_other_writes_between_appends_are_read(open_log: OpenLog) -> None:
    log = open_log()
    for i in range(3):
        log.append("r", UserMessage(content=f"first life {i}"))
    log.delete_run("r")
    assert log.append("r", UserMessage(content="second life")) == 1
    log.append("r", UserMessage(content="second life, again"))
    log.fork("r", 1, "f")
    assert log.append("r", UserMessage(content="after the fork")) == 3
    assert log.append("f", UserMessage(content="the fork's own")) == 2
    log.checkpoints.save("r", 3)
    assert log.append("r", UserMessage(content="after a checkpoint")) == 4
    for i in range(3):
        log.append("p", UserMessage(content=f"to prune {i}"))
    log.checkpoints.save("p", 2)
    log.prune("p", 2)
    assert log.append("p", UserMessage(content="after a prune")) == 4
    assert log.append("r", UserMessage(content="and on")) == 5
    assert _contents(log, "f") == ["second life", "the fork's own"]
    assert [e.event.content for e in log.read("p", after=2)] == ["to prune 2", "after a prune"]
    _feed_is_whole(log, 13)


def test_the_sync_and_async_faces_committing_at_once_lose_nothing(open_log: OpenLog) -> None:
    log = open_log()
    per_side = 60

    def sync_side() -> None:
        for i in range(per_side):
            log.append("shared", StepCompleted(node="sync", superstep=i))

    async def async_side() -> None:
        alog = eventlog.aio.AsyncEventLog(log)
        for i in range(0, per_side, 3):  # three tasks in one turn: one commit on the commit thread
            await asyncio.gather(
                *(alog.append("shared", StepCompleted(node="async", superstep=j)) for j in range(i, i + 3))
            )

    thread = threading.Thread(target=sync_side)
    thread.start()
    asyncio.run(async_side())
    thread.join(60)
    entries = list(log.read("shared"))
    assert [e.offset for e in entries] == list(range(1, 2 * per_side + 1))
    for node in ("sync", "async"):
        assert sorted(e.event.superstep for e in entries if e.event.node == node) == list(range(per_side))
    _feed_is_whole(log, 2 * per_side)


def test_a_drawn_checkpoint_id_a_caller_took_first_is_drawn_again(open_log: OpenLog) -> None:
    """A writer's checkpoint takes an id from the log's own source without looking it up; when a
    caller saved a checkpoint under the id the source gives next, the index refuses it and the
    commit is made again, looking ids up: both checkpoints are kept, and the events once."""
    log = open_log()
    w = log.writer("r", policy=eventlog.CheckpointPolicy.every(1))
    w.append(UserMessage(content="one"))
    (first,) = log.checkpoints.list("r")
    drawn = first.checkpoint_id
    assert drawn[-8:] == "00000001", drawn  # the own source: a prefix, then an 8-digit counter
    taken = f"{drawn[:-8]}{2:08x}"
    log.checkpoints.save("r", 1, checkpoint_id=taken, metadata={"by": "caller"})
    w.append(UserMessage(content="two"))
    assert _contents(log, "r") == ["one", "two"]
    by_id = {cp.checkpoint_id: cp for cp in log.checkpoints.list("r")}
    assert set(by_id) == {drawn, taken, f"{drawn[:-8]}{3:08x}"}
    assert by_id[taken].offset == 1 and by_id[taken].metadata == {"by": "caller"}
    assert by_id[f"{drawn[:-8]}{3:08x}"].offset == 2
    assert log.verify().ok
