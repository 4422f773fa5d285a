"""A gate for LMDB's map: py-lmdb refuses `set_mapsize` while any transaction of the process
is open, so the map grows only once the gate has let open transactions finish."""

from __future__ import annotations

import threading
from collections.abc import Callable


class Gate:
    """Counts open transactions; `exclusive` waits until none is open and lets none begin.

    A thread that has a transaction open may open another (a dictionary read inside a
    write, say) even while an `exclusive` waits: it would otherwise wait for itself."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # taken directly on the paths of every transaction: a C call
        self._cond = threading.Condition(self._lock)
        self._active = 0
        self._exclusive = False
        self._local = threading.local()

    def enter(self) -> None:
        depth = getattr(self._local, "depth", 0)
        with self._lock:
            while self._exclusive and depth == 0:
                self._cond.wait()
            self._active += 1
        self._local.depth = depth + 1

    def leave(self) -> None:
        self._local.depth -= 1
        with self._lock:
            self._active -= 1
            if self._exclusive and not self._active:
                self._cond.notify_all()  # only `exclusive` waits for the count to fall

    def exclusive(self, fn: Callable[[], None]) -> None:
        with self._cond:
            while self._exclusive:
                self._cond.wait()
            self._exclusive = True
            try:
                while self._active:
                    self._cond.wait()
                fn()
            finally:
                self._exclusive = False
                self._cond.notify_all()
