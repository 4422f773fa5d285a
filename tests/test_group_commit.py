"""Group commit: appends of many threads share transactions, and a failed leader strands no one."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

import eventlog
from eventlog.events import UserMessage
from eventlog.store import LMDBStore

T = TypeVar("T")


class CountingStore(LMDBStore):
    """A real LMDB store that counts its write transactions and can fail the next ones."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, durability="sync")
        self.writes = 0
        self.fail_next = 0

    def write(self, fn: Callable[[Any], T]) -> T:
        self.writes += 1
        if self.fail_next:
            self.fail_next -= 1
            raise KeyboardInterrupt  # what a leader thread may meet at any instant
        return super().write(fn)


def test_threads_share_transactions_and_lose_nothing(tmp_path: Path) -> None:
    store = CountingStore(tmp_path / "log")
    log = eventlog.EventLog(store)
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
    assert store.writes < appends  # some transactions carried several appends
    assert log.verify().ok
    log.close()


def test_an_interrupted_commit_raises_and_the_next_appends_go_on(tmp_path: Path) -> None:
    store = CountingStore(tmp_path / "log")
    log = eventlog.EventLog(store)
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
