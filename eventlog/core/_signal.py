"""The wake-up of followers: every commit wakes every follower, thread or task, and a commit
made while a follower was reading the feed is not missed (docs/architecture.md, "Following")."""

from __future__ import annotations

import threading
from collections.abc import Callable


class Signal:
    """Counts what it was told of; `fire` wakes every waiter and calls every subscriber."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # taken directly at every commit: a C call, not Condition's Python
        self._cond = threading.Condition(self._lock)
        self._count = 0
        self._waiting = 0  # waiters inside `wait`: a fire with none wakes nothing
        self._subscribers: tuple[Callable[[], None], ...] = ()  # replaced, never changed: read without a copy

    def fire(self) -> None:
        with self._lock:
            self._count += 1
            if self._waiting:
                self._cond.notify_all()
            subscribers = self._subscribers
        for fn in subscribers:
            fn()

    def subscribe(self, fn: Callable[[], None]) -> None:
        """Call `fn` (from the thread that fires) at each `fire` until `unsubscribe(fn)`."""
        with self._lock:
            self._subscribers = (*self._subscribers, fn)

    def unsubscribe(self, fn: Callable[[], None]) -> None:
        with self._lock:
            held = list(self._subscribers)
            held.remove(fn)
            self._subscribers = tuple(held)

    def waiter(self) -> Callable[[float], None]:
        """A `wait(seconds)` that returns once the signal fired since this waiter was made or last
        returned, or after `seconds`: a fire between two waits is never lost."""
        with self._lock:
            seen = self._count

        def wait(seconds: float) -> None:
            nonlocal seen
            with self._lock:
                self._waiting += 1
                try:
                    self._cond.wait_for(lambda: self._count != seen, seconds)
                finally:
                    self._waiting -= 1
                seen = self._count

        return wait
