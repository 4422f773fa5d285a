"""The in-memory store: the reference every other store is checked against."""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable
from typing import TypeVar

from ..errors import ClosedError, ReadOnlyError
from ._base import TABLES, KeyExistsError, numbers_by_seeking

T = TypeVar("T")


class _Table:
    __slots__ = ("keys", "values")

    def __init__(self) -> None:
        self.keys: list[bytes] = []
        self.values: dict[bytes, bytes] = {}


class _MemoryTxn:
    dense = True

    def __init__(self, tables: dict[str, _Table], write: bool, generation: int | None = None) -> None:
        self._tables = tables
        self._write = write
        self._generation = generation
        self.undo: list[tuple[str, bytes, bytes | None]] = []

    def generation(self) -> int | None:
        return self._generation

    def get(self, table: str, key: bytes) -> bytes | None:
        return self._tables[table].values.get(key)

    def get_many(self, table: str, keys: list[bytes]) -> list[bytes | None]:
        values = self._tables[table].values
        return [values.get(k) for k in keys]

    def fetch(self, gets: list[tuple[str, bytes]], lasts: list[str]) -> tuple[list[bytes | None], list[bytes | None]]:
        tables = self._tables
        return [tables[t].values.get(k) for t, k in gets], [
            tables[t].keys[-1] if tables[t].keys else None for t in lasts
        ]

    def insert(self, table: str, key: bytes, value: bytes) -> None:
        if self._write and key in self._tables[table].values:
            raise KeyExistsError(f"{table}: key {key!r} is taken")
        self.put(table, key, value)

    def put(self, table: str, key: bytes, value: bytes) -> None:
        if not self._write:
            raise ReadOnlyError("put in a read transaction")
        t = self._tables[table]
        old = t.values.get(key)
        if old is None:
            bisect.insort(t.keys, key)
        t.values[key] = bytes(value)
        self.undo.append((table, key, old))

    def delete(self, table: str, key: bytes) -> bool:
        if not self._write:
            raise ReadOnlyError("delete in a read transaction")
        t = self._tables[table]
        old = t.values.pop(key, None)
        if old is None:
            return False
        del t.keys[bisect.bisect_left(t.keys, key)]
        self.undo.append((table, key, old))
        return True

    def scan(
        self, table: str, start: bytes, stop: bytes | None, *, reverse: bool = False, limit: int | None = None
    ) -> list[tuple[bytes, bytes]]:
        t = self._tables[table]
        lo = bisect.bisect_left(t.keys, start)
        hi = len(t.keys) if stop is None else bisect.bisect_left(t.keys, stop)
        keys = t.keys[lo:hi]
        if reverse:
            keys.reverse()
        if limit is not None:
            keys = keys[:limit]
        return [(k, t.values[k]) for k in keys]

    numbers = numbers_by_seeking

    def keys(self, table: str, start: bytes, stop: bytes, limit: int) -> list[bytes]:
        t = self._tables[table]
        lo = bisect.bisect_left(t.keys, start)
        return t.keys[lo : min(bisect.bisect_left(t.keys, stop), lo + max(limit, 0))]

    def values(self, table: str, start: bytes, count: int) -> tuple[list[bytes], bytes | None]:
        pairs = self.scan(table, start, None, limit=count)
        return [v for _, v in pairs], (pairs[-1][0] if pairs else None)

    def delete_range(self, table: str, start: bytes, stop: bytes, limit: int | None = None) -> int:
        keys = self.keys(table, start, stop, len(self._tables[table].keys) if limit is None else limit)
        for key in keys:
            self.delete(table, key)
        return len(keys)

    def delete_feed_of(self, number: int, upto: int) -> int | None:
        return None

    def position_base(self, last: int) -> int:
        return last

    def events_given(self, last: int) -> int:
        return last

    def run_number(self, last: int) -> int:
        if not self._write:
            raise ReadOnlyError("run_number in a read transaction")
        return last + 1

    def rollback(self) -> None:
        for table, key, old in reversed(self.undo):
            t = self._tables[table]
            if old is None:
                del t.values[key]
                del t.keys[bisect.bisect_left(t.keys, key)]
            else:
                if key not in t.values:
                    bisect.insort(t.keys, key)
                t.values[key] = old


class MemoryStore:
    """Tables in dictionaries with sorted keys, one lock. Lost when the process ends."""

    readonly = False
    durability = "none"
    dense = True

    def __init__(self) -> None:
        self._tables = {name: _Table() for name in TABLES}
        self._lock = threading.RLock()
        self._closed = False
        self._commits = 0  # write transactions that changed something (`Txn.generation`)

    def read(self, fn: Callable[[_MemoryTxn], T]) -> T:
        with self._lock:
            self._check_open()
            return fn(_MemoryTxn(self._tables, write=False))

    def write(self, fn: Callable[[_MemoryTxn], T]) -> T:
        with self._lock:
            self._check_open()
            txn = _MemoryTxn(self._tables, write=True, generation=self._commits + 1)
            try:
                result = fn(txn)
            except BaseException:
                txn.rollback()
                raise
            if txn.undo:  # it changed something: the next write is numbered after it
                self._commits += 1
            return result

    def sync(self) -> None:
        self._check_open()

    def close(self) -> None:
        self._closed = True

    def stats(self) -> dict[str, int]:
        with self._lock:
            size = sum(len(k) + len(v) for t in self._tables.values() for k, v in t.values.items())
            out = {"bytes_on_disk": 0, "bytes_stored": size, "map_size_bytes": 0}
            out.update({f"entries_{name}": len(t.keys) for name, t in self._tables.items()})
            return out

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("the log is closed; open it again with eventlog.open(...)")
