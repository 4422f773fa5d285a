"""Many processes and threads append to one log while others read it and follow the feed.

Writers append to runs of their own and to one shared run fenced with `expected_offset`
(ConflictError: re-read the head, retry). Readers follow the feed and read whole runs the
whole time. Afterwards every acknowledged event is present once at its offset, offsets run
without gaps, the feed holds every entry once in commit order, every reader saw a prefix of
that order, and no reader ever saw part of a batch (each batch carries its id and size in
its meta). Writer processes are fresh interpreters (this file run as a script), never forks
of a process with the log open.

`EVENTLOG_CONCURRENCY_SCALE` multiplies the work (default 1).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

SCALE = int(os.environ.get("EVENTLOG_CONCURRENCY_SCALE", "1"))
OWN_OPS = 30 * SCALE
SHARED_BATCHES = 20 * SCALE
SHARED = "shared"


def _event(writer: str, j: int) -> Any:
    from eventlog.events import StepCompleted

    return StepCompleted(node=writer, superstep=j + 1, update={"writer": writer, "j": j, "pad": "p" * (j % 7 * 40)})


def write(log: Any, writer: str, seed: int) -> dict[str, Any]:
    """One writer's work; returns what was acknowledged and how many conflicts it met."""
    from eventlog import ConflictError

    r = random.Random(seed)
    acked: list[tuple[str, int, str]] = []
    counter = 0
    conflicts = 0
    own = f"own-{writer}"

    def batch(n: int) -> tuple[list[Any], list[str], dict[str, Any]]:
        nonlocal counter
        ids = [f"{writer}.{counter + i}" for i in range(n)]
        events = [_event(writer, counter + i) for i in range(n)]
        counter += n
        return events, ids, {"batch": ids[0], "size": n}

    schedule = ["own"] * OWN_OPS + [SHARED] * SHARED_BATCHES
    r.shuffle(schedule)
    for target in schedule:
        if target == "own":
            events, ids, meta = batch(r.choice((1, 1, 2, 5, 9)))
            offsets = log.append_many(own, events, event_ids=ids, meta=meta)
            acked += zip([own] * len(ids), offsets, ids, strict=True)
            continue
        events, ids, meta = batch(r.choice((1, 2, 3, 6)))
        head = log.head(SHARED)
        while True:
            try:
                offsets = log.append_many(SHARED, events, expected_offset=head, event_ids=ids, meta=meta)
                break
            except ConflictError as exc:
                conflicts += 1
                assert exc.expected == head and exc.head != head
                head = log.head(SHARED)  # another writer appended first: re-read and retry
        assert offsets == list(range(head + 1, head + len(events) + 1))
        acked += zip([SHARED] * len(ids), offsets, ids, strict=True)
    return {"writer": writer, "acked": acked, "conflicts": conflicts}


class FeedFollower:
    """Follows the feed until stopped; records every entry and any partial batch it saw."""

    def __init__(self, log: Any) -> None:
        self.log = log
        self.seen: list[tuple[int, str, int, str]] = []
        self.errors: list[str] = []
        self.drains = 0
        self._counts: Counter[str] = Counter()
        self._sizes: dict[str, int] = {}

    def drain(self) -> None:
        pos = self.seen[-1][0] if self.seen else 0
        for e in self.log.feed(after=pos):
            if e.position != pos + 1:
                self.errors.append(f"feed position {e.position} follows {pos}")
            pos = e.position
            self.seen.append((e.position, e.run_id, e.offset, e.event_id))
            if e.meta:
                self._counts[e.meta["batch"]] += 1
                self._sizes[e.meta["batch"]] = e.meta["size"]
        self.drains += 1
        for bid, n in self._counts.items():
            if n != self._sizes[bid]:
                self.errors.append(f"batch {bid}: {n} of {self._sizes[bid]} entries visible at the end of the feed")

    def follow(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self.drain()
        self.drain()


def read_runs(log: Any, stop: threading.Event, errors: list[str], reads: list[int]) -> None:
    """Read whole runs over and over; each read must hold whole batches and no gap."""
    while not stop.is_set():
        for run in log.runs():
            entries = list(log.read(run))
            if [e.offset for e in entries] != list(range(1, len(entries) + 1)):
                errors.append(f"run {run!r}: offsets with a gap in one read")
            counts: Counter[str] = Counter(e.meta["batch"] for e in entries)
            for e in entries:
                if counts[e.meta["batch"]] != e.meta["size"]:
                    errors.append(f"run {run!r}: batch {e.meta['batch']} partly visible in one read")
                    break
            reads[0] += 1


def test_processes_and_threads_append_read_and_follow_the_feed(tmp_path: Path) -> None:
    import eventlog

    path = tmp_path / "log"
    seed = random.SystemRandom().randrange(1 << 32)
    print(f"seed {seed}")
    log = eventlog.open(path)
    log.append("own-setup", _event("setup", 0), event_id="setup.0", meta={"batch": "setup.0", "size": 1})

    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "writer", str(path), f"p{i}", str(seed + i)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(3)
    ]
    follower_proc = subprocess.Popen(
        [sys.executable, __file__, "follower", str(path), str(tmp_path / "follower.json"), str(tmp_path / "stop")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    stop = threading.Event()
    followers = [FeedFollower(log) for _ in range(2)]
    read_errors: list[str] = []
    reads = [0]
    readers = [threading.Thread(target=f.follow, args=(stop,)) for f in followers]
    readers.append(threading.Thread(target=read_runs, args=(log, stop, read_errors, reads)))
    results: list[dict[str, Any]] = []
    thread_errors: list[BaseException] = []

    def thread_writer(name: str, s: int) -> None:
        try:
            results.append(write(log, name, s))
        except BaseException as exc:
            thread_errors.append(exc)

    writers = [threading.Thread(target=thread_writer, args=(f"t{i}", seed + 10 + i)) for i in range(2)]
    for t in readers + writers:
        t.start()
    for t in writers:
        t.join()
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        results.append(json.loads(out))
    stop.set()
    (tmp_path / "stop").touch()
    for t in readers:
        t.join()
    out, err = follower_proc.communicate(timeout=60)
    assert follower_proc.returncode == 0, err
    assert not thread_errors, thread_errors
    log.close()

    # -- afterwards, on a fresh open -----------------------------------------------------------
    with eventlog.open(path) as log:
        assert log.verify().ok
        feed = [(e.position, e.run_id, e.offset, e.event_id) for e in log.feed()]
        assert [p for p, *_ in feed] == list(range(1, len(feed) + 1)), "feed positions have a gap or a repeat"
        assert len({(r, o) for _, r, o, _ in feed}) == len(feed), "an entry appears twice in the feed"
        ids = Counter(eid for *_, eid in feed)
        assert max(ids.values()) == 1, "an event appears twice"

        stored: dict[tuple[str, int], str] = {}
        for run in log.runs():
            entries = list(log.read(run))
            assert [e.offset for e in entries] == list(range(1, log.head(run) + 1))
            stored.update({(run, e.offset): e.event_id for e in entries})
        assert stored == {(r, o): eid for _, r, o, eid in feed}, "the feed and the runs disagree"

        acked = [tuple(a) for res in results for a in res["acked"]]
        assert len(acked) == len(set(acked))
        for run, offset, eid in acked:
            assert stored.get((run, offset)) == eid, f"acknowledged {eid} at {run}/{offset} is not there"
        assert len(acked) + 1 == len(feed), "the log holds events nobody acknowledged"

        shared = list(log.read(SHARED))
        for i, e in enumerate(shared):  # batches of the shared run lie whole and in one piece
            first = shared[i - 1].meta["batch"] != e.meta["batch"] if i else True
            if first:
                assert [x.meta["batch"] for x in shared[i : i + e.meta["size"]]] == [e.meta["batch"]] * e.meta["size"]

    for f in followers:
        assert not f.errors, f.errors[:5]
        assert f.seen == feed[: len(f.seen)]
        assert f.seen == feed  # the final drain ran after every writer finished
    follower = json.loads((tmp_path / "follower.json").read_text())
    assert not follower["errors"], follower["errors"][:5]
    assert [tuple(x) for x in follower["seen"]] == feed
    assert not read_errors, read_errors[:5]
    conflicts = sum(res["conflicts"] for res in results)
    print(
        f"writers=5 (3 processes, 2 threads) acknowledged={len(acked)} shared={len(shared)} "
        f"conflicts={conflicts} feed_drains={sum(f.drains for f in followers) + follower['drains']} run_reads={reads[0]}"
    )
    assert conflicts > 0, "five writers of one run met no conflict: the fence was never exercised"


def test_a_stale_expected_offset_is_fenced_across_processes(tmp_path: Path) -> None:
    import eventlog
    from eventlog import ConflictError

    path = tmp_path / "log"
    with eventlog.open(path) as log:
        log.append("r", _event("a", 0))
        head = log.head("r")
        code = (
            "import sys, eventlog\n"
            "from eventlog.events import StepCompleted\n"
            "with eventlog.open(sys.argv[1]) as log:\n"
            "    print(log.append('r', StepCompleted(node='b', superstep=1), expected_offset=1))\n"
        )
        proc = subprocess.run(
            [sys.executable, "-c", code, str(path)], check=False, capture_output=True, text=True, timeout=60
        )
        assert proc.stdout.strip() == "2", proc.stderr
        try:
            log.append("r", _event("a", 1), expected_offset=head)
        except ConflictError as exc:
            assert (exc.run_id, exc.expected, exc.head) == ("r", 1, 2)
        else:
            raise AssertionError("a writer that lost its place was not fenced")
        assert [e.event.node for e in log.read("r")] == ["a", "b"]


def _main() -> None:
    import eventlog

    role, path = sys.argv[1], sys.argv[2]
    if role == "writer":
        with eventlog.open(path) as log:
            print(json.dumps(write(log, sys.argv[3], int(sys.argv[4]))))
    elif role == "follower":
        out, stop_file = Path(sys.argv[3]), Path(sys.argv[4])
        with eventlog.open(path, readonly=False) as log:
            f = FeedFollower(log)
            while not stop_file.exists():
                f.drain()
                time.sleep(0.001)
            f.drain()
            out.write_text(json.dumps({"seen": f.seen, "errors": f.errors, "drains": f.drains}))


if __name__ == "__main__":
    _main()
