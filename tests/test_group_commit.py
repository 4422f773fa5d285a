"""Group commit: appends of many threads share transactions, and a failed leader strands no one."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from stores import CountingStore, HeldStore

import eventlog
from eventlog.events import UserMessage


def test_appends_queued_behind_a_commit_share_the_next_transaction(tmp_path: Path) -> None:
    store = HeldStore(tmp_path / "log")
    log = eventlog.open(store)
    waiting = 7
    store.hold = True
    leader = threading.Thread(target=lambda: log.append("lead", UserMessage(content="first")))
    leader.start()
    assert store.holding.wait(30)
    before = store.writes
    workers = [
        threading.Thread(target=lambda k=k: log.append(f"t{k}", UserMessage(content=str(k)))) for k in range(waiting)
    ]
    for w in workers:
        w.start()
    while log.engine.commit.queued() < waiting:  # every worker's append is queued behind the held commit
        threading.Event().wait(0.001)
    store.release.set()
    for t in [leader, *workers]:
        t.join(30)
    assert store.writes == before + 2  # the held one, then one transaction for the seven queued appends
    assert sorted(e.run_id for e in log.feed()) == sorted(["lead", *(f"t{k}" for k in range(waiting))])
    assert [e.position for e in log.feed()] == list(range(1, waiting + 2))
    assert log.verify().ok
    log.close()


def test_threads_appending_at_once_lose_nothing(tmp_path: Path) -> None:
    store = CountingStore(tmp_path / "log")
    log = eventlog.open(store)
    threads, per_thread = 8, 40
    start = threading.Barrier(threads)

    def work(k: int) -> None:
        start.wait()
        for i in range(per_thread):
            log.append(f"t{k}", UserMessage(content=f"{k}:{i}"))

    workers = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    appends = threads * per_thread
    for k in range(threads):
        assert [e.event.content for e in log.read(f"t{k}")] == [f"{k}:{i}" for i in range(per_thread)]
    assert [e.position for e in log.feed()] == list(range(1, appends + 1))
    assert store.writes <= appends
    assert log.verify().ok
    log.close()


def test_an_interrupted_commit_raises_and_the_next_appends_go_on(tmp_path: Path) -> None:
    store = CountingStore(tmp_path / "log")
    log = eventlog.open(store)
    assert log.append("r", UserMessage(content="kept")) == 1
    store.fail_next = 1
    with pytest.raises(KeyboardInterrupt):
        log.append("r", UserMessage(content="lost"))
    done: list[int] = []
    t = threading.Thread(target=lambda: done.append(log.append("r", UserMessage(content="next"))))
    t.start()
    t.join(timeout=10)
    assert not t.is_alive(), "an append hung after an interrupted commit"
    assert done == [2]
    assert [e.event.content for e in log.read("r")] == ["kept", "next"]
    log.close()
