"""The wake-up of followers: every commit wakes every follower, thread or task, and a commit
made while a follower was reading the feed is not missed (docs/architecture.md, "Following")."""

from __future__ import annotations

import threading
from collections.abc import Callable


class Signal:
    """Counts what it was told of; `fire` wakes every waiter and calls every subscriber."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._count = 0
        self._subscribers: list[Callable[[], None]] = []

    def fire(self) -> None:
        with self._cond:
            self._count += 1
            self._cond.notify_all()
            subscribers = list(self._subscribers)
        for fn in subscribers:
            fn()

    def subscribe(self, fn: Callable[[], None]) -> None:
        """Call `fn` (from the thread that fires) at each `fire` until `unsubscribe(fn)`."""
        with self._cond:
            self._subscribers.append(fn)

    def unsubscribe(self, fn: Callable[[], None]) -> None:
        with self._cond:
            self._subscribers.remove(fn)

    def waiter(self) -> Callable[[float], None]:
        """A `wait(seconds)` that returns once the signal fired since this waiter was made or last
        returned, or after `seconds`: a fire between two waits is never lost."""
        with self._cond:
            seen = self._count

        def wait(seconds: float) -> None:
            nonlocal seen
            with self._cond:
                self._cond.wait_for(lambda: self._count != seen, seconds)
                seen = self._count

        return wait
