"""Live updates: wait for entries as they are committed to the log's feed.

`follow` is the one place that waits for new entries. It polls `log.feed(after=...)`;
once the log can follow its feed itself, `follow` becomes a thin wrapper over that and
nothing else in the UI changes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio.to_thread

from eventlog import Entry, EventLog

__all__ = ["feed_end", "follow"]

poll_interval_seconds = 0.2
"""How often `follow` asks the feed for new entries."""
follow_batch_entries_max = 1024
"""The most entries `follow` yields at once."""


def feed_end(log: EventLog[Any]) -> int:
    """The position of the feed's last entry (0 for an empty feed).

    Found with about 2·log2(position) one-entry reads of the feed: whether an entry exists
    after a position only changes once, from yes to no, as the position grows.
    """

    def after(position: int) -> bool:
        return any(True for _ in log.feed(after=position, limit=1))

    if not after(0):
        return 0
    low, high = 0, 1  # after(low) is true; after(high) is searched for false
    while after(high):
        low, high = high, high * 2
    while high - low > 1:  # after(low) true, after(high) false
        middle = (low + high) // 2
        if after(middle):
            low = middle
        else:
            high = middle
    return high


async def follow(
    log: EventLog[Any], after: int, stop: Callable[[], bool] = lambda: False
) -> AsyncIterator[list[Entry]]:
    """Yield the feed's entries with positions above `after` as they are committed, in
    batches in commit order; waits between batches until `stop()` is true (or the
    iteration is cancelled)."""

    def read(after: int) -> list[Entry]:
        return list(log.feed(after=after, limit=follow_batch_entries_max))

    while not stop():
        batch = await anyio.to_thread.run_sync(read, after)
        if batch:
            after = batch[-1].position
            yield batch
        else:
            await anyio.sleep(poll_interval_seconds)
