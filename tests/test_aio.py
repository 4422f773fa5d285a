"""The async face: many tasks share one commit, nothing blocks the loop, follow sees other processes."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from stores import HeldStore

import eventlog
import eventlog.aio
from eventlog.events import StepCompleted, UserMessage

T = TypeVar("T")
OpenLog = Callable[..., eventlog.EventLog[Any]]


def test_tasks_of_one_turn_share_one_transaction(open_log: OpenLog) -> None:
    async def main() -> None:
        log = eventlog.aio.AsyncEventLog(open_log())
        before = log.sync.engine.commit.commits
        offsets = await asyncio.gather(
            *(log.append(f"r{k % 4}", UserMessage(content=str(k)), event_id=f"e{k}") for k in range(64))
        )
        assert log.sync.engine.commit.commits == before + 1  # 64 tasks, one transaction
        for r in range(4):
            entries = [e async for e in log.read(f"r{r}")]
            assert [e.offset for e in entries] == list(range(1, 17))
            assert sorted(e.event.content for e in entries) == sorted(str(k) for k in range(r, 64, 4))
        assert sorted(offsets) == sorted(o for _ in range(4) for o in range(1, 17))
        assert (await log.verify()).ok
        await log.close()

    asyncio.run(main())


def test_bad_input_is_refused_in_the_task_with_nothing_written(open_log: OpenLog) -> None:
    async def main() -> None:
        log = eventlog.aio.AsyncEventLog(open_log())
        await log.append("r", UserMessage(content="ok"))
        results = await asyncio.gather(
            log.append("r", StepCompleted(node=1, superstep=1)),  # type: ignore[arg-type]
            log.append("r", UserMessage(content="fine")),
            log.append("", UserMessage(content="no run id")),
            return_exceptions=True,
        )
        assert isinstance(results[0], eventlog.errors.InvalidEventError)
        assert results[1] == 2
        assert isinstance(results[2], eventlog.errors.InvalidRunIdError)
        assert await log.runs() == ["r"] and await log.head("r") == 2
        await log.close()

    asyncio.run(main())


def test_a_conflict_fails_only_its_own_task(open_log: OpenLog) -> None:
    async def main() -> None:
        log = eventlog.aio.AsyncEventLog(open_log())
        results = await asyncio.gather(
            log.append("r", UserMessage(content="a"), expected_offset=0),
            log.append("r", UserMessage(content="b"), expected_offset=0),
            log.append("s", UserMessage(content="c")),
            return_exceptions=True,
        )
        assert results[0] == 1 and isinstance(results[1], eventlog.ConflictError) and results[2] == 1
        assert [e.event.content async for e in log.feed()] == ["a", "c"]
        await log.close()

    asyncio.run(main())


def test_a_commit_in_progress_does_not_block_the_loop(tmp_path: Path) -> None:
    store = HeldStore(tmp_path / "log")

    async def main() -> None:
        log = eventlog.aio.AsyncEventLog(eventlog.open(store))
        store.hold = True
        task = asyncio.create_task(log.append("r", UserMessage(content="slow")))
        while not store.holding.is_set():
            await asyncio.sleep(0.001)
        ticks = 0
        for _ in range(20):  # the loop runs other work while the commit waits
            await asyncio.sleep(0)
            ticks += 1
        assert ticks == 20 and not task.done()
        store.release.set()
        assert await task == 1
        await log.close()

    asyncio.run(main())


def test_a_cancelled_append_is_all_there_or_not_at_all(tmp_path: Path) -> None:
    store = HeldStore(tmp_path / "log")

    async def main() -> None:
        log = eventlog.aio.AsyncEventLog(eventlog.open(store))
        store.hold = True
        batch = [StepCompleted(node="n", superstep=i) for i in range(500)]
        task = asyncio.create_task(log.append_many("r", batch))
        while not store.holding.is_set():
            await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        store.release.set()
        await log.close()

    asyncio.run(main())
    with eventlog.open(tmp_path / "log") as log:
        assert log.head("r") in (0, 500)
        assert log.verify().ok


_WRITER = textwrap.dedent(
    """
    import sys, time, eventlog
    from eventlog.events import UserMessage
    with eventlog.open(sys.argv[1]) as log:
        for i in range(3):
            time.sleep(0.2)
            log.append("other", UserMessage(content=str(i)))
    """
)


def test_follow_sees_what_another_process_commits(open_log: OpenLog, backend: str, tmp_path: Path) -> None:
    if backend == "memory":
        pytest.skip("an in-memory log has no other process")
    log = open_log()
    log.append("mine", UserMessage(content="first"))
    first = log.position()
    target = str(tmp_path / "log") if backend == "lmdb" else _pg_url(log)
    writer = subprocess.Popen([sys.executable, "-c", _WRITER, target])

    async def follow() -> list[str]:
        seen: list[str] = []
        async with eventlog.aio.AsyncEventLog(log) as alog:
            async for entry in alog.follow(after=first, timeout=10, poll=0.1):
                seen.append(entry.event.content)
                if len(seen) == 3:
                    break
        return seen

    try:
        assert asyncio.run(follow()) == ["0", "1", "2"]
    finally:
        writer.wait(60)


def test_sync_follow_wakes_at_once_for_this_process(log: eventlog.EventLog[Any]) -> None:
    seen: list[int] = []
    done = threading.Event()

    def follower() -> None:
        for entry in log.follow(timeout=10, poll=60):  # a long poll: only a wake-up can make this quick
            seen.append(entry.offset)
            if len(seen) == 3:
                break
        done.set()

    t = threading.Thread(target=follower)
    t.start()
    for k in range(3):
        log.append("r", UserMessage(content=str(k)))
    assert done.wait(20), "follow did not wake up for a commit of this process"
    assert seen == [1, 2, 3]
    t.join()


def _pg_url(log: eventlog.EventLog[Any]) -> str:
    store: Any = log.store
    sep = "&" if "?" in store.dsn else "?"
    return f"{store.dsn}{sep}schema={store.schema}"
