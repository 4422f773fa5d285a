"""Interleavings for tests: a clock that makes every attempt of a fenced write meet a conflict
(tests of retry limits), and another writer's step run right before a call (`once_before`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import eventlog


def once_before(owner: Any, name: str, action: Callable[[], None]) -> None:
    """Wrap `owner.name` so that its next call runs `action` first."""
    real = getattr(owner, name)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        setattr(owner, name, real)
        action()
        return real(*args, **kwargs)

    setattr(owner, name, wrapped)


class Jostling:
    """A log's clock that, once aimed at a run, lets another writer append `event` to it each time
    the log stamps an append (after the writer read the run's head, before its commit), at most
    `limit` times: every attempt of a write fenced by the head it read meets a conflict."""

    def __init__(self, limit: int) -> None:
        self.limit, self.times, self._now, self._inside = limit, 0, 1_800_000_000 * 10**9, False
        self.log: eventlog.EventLog | None = None
        self.run_id, self.event = "", None

    def aim(self, log: eventlog.EventLog, run_id: str, event: Any) -> None:
        self.log, self.run_id, self.event = log, run_id, event

    def __call__(self) -> int:
        self._now += 1
        if self.log is not None and not self._inside and self.times < self.limit:
            self._inside = True  # the other writer's own append is stamped as it is
            try:
                self.log.append(self.run_id, self.event)
                self.times += 1
            finally:
                self._inside = False
        return self._now
