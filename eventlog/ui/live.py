"""Live updates: wait for entries as they are committed to the log's feed.

`follow` is the one place that waits for new entries, over `log.follow`.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import anyio.to_thread

from eventlog import Entry, EventLog

__all__ = ["feed_end", "follow"]

poll_interval_seconds = 0.2
"""How often `follow` looks for entries other processes committed, and asks whether to stop."""
follow_batch_entries_max = 1024
"""The most entries `follow` yields at once."""
streams_waiting_max = 64
"""Live streams that wait at the same time; more wait their turn, a poll interval at most."""


def feed_end(log: EventLog[Any]) -> int:
    """The last position the feed gave (0 for an empty log): a page follows what comes after it."""
    return log.position()


async def follow(
    log: EventLog[Any], after: int, stop: Callable[[], bool] = lambda: False
) -> AsyncIterator[list[Entry]]:
    """Yield the feed's entries with positions above `after` as they are committed, in
    batches in commit order, until `stop()` is true (or the iteration is cancelled).

    A thin wrapper over `log.follow`: each wait lasts at most `poll_interval_seconds`, so
    that `stop` is asked between waits; the waits run in threads of their own, so that
    open pages never hold up the threads that answer requests."""

    def next_batch(after: int) -> list[Entry]:
        for first in log.follow(after, timeout=poll_interval_seconds, poll=poll_interval_seconds):
            return [first, *log.feed(after=first.position, limit=follow_batch_entries_max - 1)]
        return []

    while not stop():
        batch = await anyio.to_thread.run_sync(next_batch, after, limiter=_streams())
        if batch:
            after = batch[-1].position
            yield batch


_limiters: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, anyio.CapacityLimiter] = weakref.WeakKeyDictionary()


def _streams() -> anyio.CapacityLimiter:
    """The threads the live streams wait in, apart from those that answer requests (one set
    per event loop: a limiter belongs to the loop it was made in)."""
    loop = asyncio.get_running_loop()
    if loop not in _limiters:
        _limiters[loop] = anyio.CapacityLimiter(streams_waiting_max)
    return _limiters[loop]
