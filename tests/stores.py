"""Real LMDB stores with a hand on their write transactions, for tests of group commit."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

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


class HeldStore(CountingStore):
    """Holds its next write transaction open until released: the appends of other threads queue meanwhile."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.holding = threading.Event()
        self.release = threading.Event()
        self.hold = False

    def write(self, fn: Callable[[Any], T]) -> T:
        if self.hold:
            self.hold = False
            self.holding.set()
            assert self.release.wait(30)
        return super().write(fn)
