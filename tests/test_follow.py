"""Every follower wakes for every commit: many async tasks or threads following one log, one
writer (this log, or on PostgreSQL another client of it). Followers poll only every
`POLL_SECONDS`, so an entry that reaches a follower within `PROMPT_SECONDS` of its commit was
delivered by a wake-up, not by the poll: a wake-up that reaches only some followers fails."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import eventlog
import eventlog.aio
from eventlog.events import UserMessage

OpenLog = Callable[..., eventlog.EventLog[Any]]

FOLLOWERS = int(os.environ.get("EVENTLOG_TEST_FOLLOWERS", "8"))  # more than asyncio's default worker threads here
ENTRIES = 5
POLL_SECONDS = 20.0
PROMPT_SECONDS = 4.0


def _writer(open_log: OpenLog, backend: str, log: eventlog.EventLog[Any], which: str) -> eventlog.EventLog[Any]:
    if which == "same log":
        return log
    if backend != "postgres":
        pytest.skip("only PostgreSQL hears the commits of another client at once (LMDB: within a poll)")
    return open_log()  # another pool and listener on the same schema: as another machine


def _check(seen: list[dict[int, float]], committed: dict[int, float]) -> None:
    for k, got in enumerate(seen):
        assert sorted(got) == sorted(committed), f"follower {k} saw positions {sorted(got)}"
        late = {p: round(got[p] - committed[p], 2) for p in committed if got[p] - committed[p] > PROMPT_SECONDS}
        assert not late, f"follower {k} saw these positions late (seconds after commit): {late}"


def write(writer: eventlog.EventLog[Any], start: int, committed: dict[int, float]) -> None:
    for i in range(ENTRIES):
        offset = writer.append("r", UserMessage(content=str(i)))
        done = time.monotonic()
        committed[start + i + 1 if writer.store.dense else writer.entry("r", offset).position] = done
        time.sleep(0.05)


@pytest.mark.parametrize("which", ["same log", "another client"])
def test_every_async_follower_wakes_for_every_commit(open_log: OpenLog, backend: str, which: str) -> None:
    log = open_log()
    writer = _writer(open_log, backend, log, which)
    start = log.position()
    seen: list[dict[int, float]] = [{} for _ in range(FOLLOWERS)]
    committed: dict[int, float] = {}

    async def main() -> None:
        alog = eventlog.aio.AsyncEventLog(log)

        async def follower(k: int) -> None:
            async for entry in alog.follow(after=start, poll=POLL_SECONDS):
                seen[k][entry.position] = time.monotonic()
                if len(seen[k]) == ENTRIES:
                    return

        tasks = [asyncio.create_task(follower(k)) for k in range(FOLLOWERS)]
        await asyncio.sleep(0.5)  # every follower has read the empty feed and waits
        writing = threading.Thread(target=write, args=(writer, start, committed))  # not the loop's worker threads
        writing.start()
        _, pending = await asyncio.wait(tasks, timeout=ENTRIES * 0.05 + PROMPT_SECONDS + 2)
        for task in pending:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        writing.join()

    loop = asyncio.new_event_loop()  # not asyncio.run: a failure must not wait for threads stuck in a wait
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    _check(seen, committed)


@pytest.mark.parametrize("which", ["same log", "another client"])
def test_every_thread_following_wakes_for_every_commit(open_log: OpenLog, backend: str, which: str) -> None:
    log = open_log()
    writer = _writer(open_log, backend, log, which)
    start = log.position()
    seen: list[dict[int, float]] = [{} for _ in range(FOLLOWERS)]
    committed: dict[int, float] = {}

    def follower(k: int) -> None:
        for entry in log.follow(after=start, poll=POLL_SECONDS, timeout=PROMPT_SECONDS + 2):
            seen[k][entry.position] = time.monotonic()
            if len(seen[k]) == ENTRIES:
                return

    threads = [threading.Thread(target=follower, args=(k,), daemon=True) for k in range(FOLLOWERS)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    write(writer, start, committed)
    deadline = time.monotonic() + PROMPT_SECONDS + 2
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    _check(seen, committed)


def test_a_commit_during_a_read_of_the_feed_is_not_missed(log: eventlog.EventLog[Any]) -> None:
    """A waiter returns at once for a commit made after it was made (while its follower read the
    feed), not a poll later."""
    wait = log.engine.commits().waiter()
    log.append("r", UserMessage(content="meanwhile"))
    began = time.monotonic()
    wait(POLL_SECONDS)
    assert time.monotonic() - began < PROMPT_SECONDS
    time.sleep(0.5)  # on PostgreSQL the commit's notification comes too, a moment later
    wait(0)
    began = time.monotonic()
    wait(0.2)  # nothing committed since it last returned: it waits
    assert time.monotonic() - began >= 0.15


def test_followers_wake_again_after_the_listening_connection_is_lost(open_log: OpenLog, backend: str) -> None:
    if backend != "postgres":
        pytest.skip("only PostgreSQL listens on a connection of its own")
    import psycopg

    log, writer = open_log(), open_log()
    store: Any = log.store
    seen: dict[int, float] = {}
    done = threading.Event()

    def follower() -> None:
        for entry in log.follow(after=log.position(), poll=POLL_SECONDS, timeout=2 * PROMPT_SECONDS):
            seen[entry.position] = time.monotonic()
            done.set()
            return

    thread = threading.Thread(target=follower, daemon=True)
    thread.start()
    time.sleep(0.5)
    with psycopg.connect(store.dsn, autocommit=True) as conn:
        killed = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = %s",
            (f'LISTEN "{store._channel}"',),
        ).fetchall()
    assert killed == [(True,)]
    time.sleep(1.0)  # the listener has noticed and connected again
    writer.append("r", UserMessage(content="after the loss"))
    committed = time.monotonic()
    assert done.wait(PROMPT_SECONDS), "the follower was not woken after the listener's connection was lost"
    assert list(seen) == [writer.position()] and seen[writer.position()] - committed < PROMPT_SECONDS
    thread.join()
