"""The LMDB store: a directory holding `data.mdb` and `lock.mdb`, one named database per table.

Writes are serialized by LMDB's writer lock across threads and processes; readers never
block. The map grows by doubling when a write does not fit (py-lmdb refuses
`set_mapsize` while any transaction of the process is open, so a gate lets open
transactions finish and holds new ones back while the map grows).
"""

from __future__ import annotations

import errno
import fcntl
import itertools
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar, cast

import lmdb

from .. import _limits
from ..errors import (
    AccessDeniedError,
    ClosedError,
    CorruptRecordError,
    InvalidArgumentError,
    LockFileError,
    LogFullError,
    NotALogError,
    ReadOnlyError,
    named_os_error,
)
from ._base import APPENDED, TABLES, KeyExistsError, numbers_by_seeking
from ._gate import Gate
from ._lmdb_files import check_directory, is_errno, translate

T = TypeVar("T")

DURABILITY = ("sync", "batch", "none")


class _LMDBTxn:
    __slots__ = ("_dbs", "_txn", "_write")

    dense = True
    numbers = numbers_by_seeking

    def __init__(self, txn: lmdb.Transaction, dbs: dict[str, Any], write: bool) -> None:
        self._txn, self._dbs, self._write = txn, dbs, write

    # Begun with buffers=False: keys and values are bytes. No `cast` on an append's path (a call each).

    def get(self, table: str, key: bytes) -> bytes | None:
        return self._txn.get(key, db=self._dbs[table])  # type: ignore[return-value]

    def get_many(self, table: str, keys: list[bytes]) -> list[bytes | None]:
        get, db = self._txn.get, self._dbs[table]
        return [get(k, db=db) for k in keys]  # type: ignore[misc]

    def fetch(self, gets: list[tuple[str, bytes]], lasts: list[str]) -> tuple[list[bytes | None], list[bytes | None]]:
        get, dbs = self._txn.get, self._dbs
        found: list[bytes | None] = [get(k, db=dbs[t]) for t, k in gets]  # type: ignore[misc]
        ends: list[bytes | None] = []
        for table in lasts:
            with self._txn.cursor(db=dbs[table]) as cur:
                ends.append(cast("bytes", cur.key()) if cur.last() else None)
        return found, ends

    def generation(self) -> int | None:  # the last commit's id + 1; a commit of no change keeps it
        return self._txn.id() if self._write else None

    def put(self, table: str, key: bytes, value: bytes) -> None:
        if not self._write:
            raise ReadOnlyError("put in a read transaction")
        if table in APPENDED and self._txn.put(key, value, db=self._dbs[table], append=True):
            return  # MDB_APPEND; False when the key is not past the table's last (another run's, or put again)
        self._txn.put(key, value, db=self._dbs[table])

    def insert(self, table: str, key: bytes, value: bytes) -> None:
        if not self._write:
            raise ReadOnlyError("insert in a read transaction")
        if not self._txn.put(key, value, db=self._dbs[table], overwrite=False):
            raise KeyExistsError(f"{table}: key {key!r} is taken")

    def delete(self, table: str, key: bytes) -> bool:
        if not self._write:
            raise ReadOnlyError("delete in a read transaction")
        return self._txn.delete(key, db=self._dbs[table])

    def scan(
        self, table: str, start: bytes, stop: bytes | None, *, reverse: bool = False, limit: int | None = None
    ) -> list[tuple[bytes, bytes]]:
        out: list[tuple[bytes, bytes]] = []
        if limit == 0:
            return out
        with self._txn.cursor(db=self._dbs[table]) as cur:
            if not reverse:
                if not cur.set_range(start):
                    return out
                for key, value in cast("Iterator[tuple[bytes, bytes]]", cur):
                    if stop is not None and key >= stop:
                        break
                    out.append((key, value))
                    if limit is not None and len(out) >= limit:
                        break
                return out
            positioned = cur.set_range(stop) if stop is not None else cur.last()
            if positioned and stop is not None:
                positioned = cur.prev()  # first key < stop
            elif not positioned and stop is not None:
                positioned = cur.last()  # every key is < stop
            if not positioned:
                return out
            for key, value in cast("Iterator[tuple[bytes, bytes]]", cur.iterprev()):
                if key < start:
                    break
                out.append((key, value))
                if limit is not None and len(out) >= limit:
                    break
            return out

    def count(self, table: str) -> int:
        return int(self._txn.stat(self._dbs[table])["entries"])

    def keys(self, table: str, start: bytes, stop: bytes, limit: int) -> list[bytes]:
        out: list[bytes] = []
        with self._txn.cursor(db=self._dbs[table]) as cur:
            if limit <= 0 or not cur.set_range(start):
                return out
            for key in cast("Iterator[bytes]", cur.iternext(keys=True, values=False)):
                if key >= stop or len(out) >= limit:
                    break
                out.append(key)
        return out

    def delete_range(self, table: str, start: bytes, stop: bytes, limit: int | None = None) -> int:
        if not self._write:
            raise ReadOnlyError("delete_range in a read transaction")
        count = 0
        with self._txn.cursor(db=self._dbs[table]) as cur:
            if not cur.set_range(start):
                return 0
            while (limit is None or count < limit) and cast("bytes", cur.key()) < stop:
                count += 1
                if not cur.delete() or not cur.key():  # the cursor moves to the next key, if any
                    break
        return count

    def delete_feed_of(self, number: int, upto: int) -> int | None:
        return None

    def position_base(self, last: int) -> int:
        return last

    events_given = position_base  # dense: the last position given is the count

    def run_number(self, last: int) -> int:
        if not self._write:
            raise ReadOnlyError("run_number in a read transaction")
        return last + 1

    def values(self, table: str, start: bytes, count: int) -> tuple[list[bytes], bytes | None]:
        if count <= 0:
            return [], None
        with self._txn.cursor(db=self._dbs[table]) as cur:
            if not cur.set_range(start):
                return [], None
            out = cast("list[bytes]", list(itertools.islice(cur.iternext(keys=False, values=True), count)))
            if not cur.key():
                cur.last()  # the iterator ran off the end: the last key is the last one read
            return out, cast("bytes", cur.key())


class _Writing:
    """The locks around one write transaction (a plain context manager: it runs at every commit)."""

    __slots__ = ("_store",)

    def __init__(self, store: LMDBStore) -> None:
        self._store = store

    def __enter__(self) -> None:
        store = self._store
        store._write_lock.acquire()
        try:
            if store._data_fd >= 0:
                fcntl.flock(store._data_fd, fcntl.LOCK_EX)
            store._check_lock_file()
        except BaseException:
            self.__exit__()
            raise

    def __exit__(self, *exc: object) -> None:
        store = self._store
        try:
            if store._data_fd >= 0:
                fcntl.flock(store._data_fd, fcntl.LOCK_UN)
        finally:
            store._write_lock.release()


class LMDBStore:
    """A log in an LMDB directory. `durability` is `sync`, `batch` or `none` (see docs/durability.md).

    Besides LMDB's own locks, every write transaction holds an exclusive `flock` on
    `data.mdb` and checks that `lock.mdb` is still the file this process opened: an
    operator who deletes `lock.mdb` while the log is in use would otherwise let two
    processes write with separate lock tables. Such a process refuses every further read
    and write with LockFileError (docs/durability.md,
    "What never to do, and what the log detects").
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        durability: str = "sync",
        readonly: bool = False,
        create: bool = True,
        map_size_bytes: int = _limits.map_size_bytes_initial,
        map_size_bytes_max: int = _limits.map_size_bytes_max,
    ) -> None:
        if durability not in DURABILITY:
            raise InvalidArgumentError(f"durability must be one of {', '.join(DURABILITY)}, not {durability!r}")
        for name, value in (("map_size_bytes", map_size_bytes), ("map_size_bytes_max", map_size_bytes_max)):
            if type(value) is not int or not 1 << 16 <= value <= 1 << 48:
                raise InvalidArgumentError(f"{name} must be an integer from 64 KiB to 256 TiB, not {value!r}")
        self.path = Path(path)
        self.dense = True
        self.durability = durability
        self.readonly = readonly
        self._map_size_bytes_max = max(map_size_bytes_max, map_size_bytes)
        self._gate = Gate()
        self._closed = False
        self._broken: str | None = None
        self._write_lock = threading.Lock()
        self._writes = 0
        check_directory(self.path, readonly=readonly, create=create)
        self._env = self._open_env(map_size_bytes)
        self._lock_id: tuple[int, int] | None = None
        self._lock_path = os.fspath(self.path / "lock.mdb")
        self._data_fd = -1
        try:
            self._guard()
            self._check_size()
            self._dbs = self._open_dbs()
            if not readonly:
                self._env.reader_check()
        except BaseException:
            self._release()
            raise

    # -- opening -----------------------------------------------------------------------

    def _open_env(self, map_size_bytes: int) -> lmdb.Environment:
        kwargs: dict[str, Any] = dict(
            map_size=map_size_bytes,
            subdir=True,
            max_dbs=_limits.lmdb_max_dbs,
            sync=self.durability == "sync",
            metasync=self.durability == "sync",
            readonly=self.readonly,
            mode=0o600,
            readahead=False,
            max_spare_txns=4,
        )
        try:
            while True:
                try:
                    return lmdb.open(str(self.path), **kwargs)
                except lmdb.MapResizedError:
                    continue  # another process grew the map while this one opened it: open again, at its size
                except lmdb.Error as exc:
                    if not self.readonly or not is_errno(exc, errno.EACCES, errno.EROFS):
                        raise
                try:
                    return lmdb.open(str(self.path), lock=False, **kwargs)  # a directory we may not write
                except lmdb.MapResizedError:
                    continue
        except lmdb.Error as exc:
            if is_errno(exc, errno.EACCES, errno.EPERM, errno.EROFS):
                if self.readonly:
                    raise AccessDeniedError(f"{self.path}: this process may not read the log ({exc})") from None
                raise ReadOnlyError(
                    f"{self.path}: this process may not write the log ({exc}); open it with readonly=True to read it"
                ) from None
            raise translate(exc, self.path, opening=True) from None

    def _at_open(self, fn: Callable[[], T]) -> T:
        """`fn` (a transaction at open), again after adopting a map another process grew meanwhile."""
        while True:
            try:
                return fn()
            except lmdb.MapResizedError:
                self._env.set_mapsize(0)
            except lmdb.Error as exc:
                raise translate(exc, self.path, opening=True) from None

    def _guard(self) -> None:
        """Note which `lock.mdb` this process uses, and open `data.mdb` for the writers' flock."""
        try:
            st = os.stat(self._lock_path)
        except FileNotFoundError:
            return  # opened without a lock file (read-only, in a directory we may not write)
        self._lock_id = (st.st_dev, st.st_ino)
        if not self.readonly:
            data = self.path / "data.mdb"
            try:
                self._data_fd = os.open(data, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
            except OSError as exc:
                raise named_os_error(exc, data, writing=True) from None

    def _check_lock_file(self) -> None:
        if self._broken is not None:
            raise LockFileError(self._broken)
        if self._lock_id is None:
            return
        try:
            st = os.stat(self._lock_path)
            same = (st.st_dev, st.st_ino) == self._lock_id
        except FileNotFoundError:
            same = False
        if not same:
            self._broken = (
                f"{self.path}/lock.mdb was deleted or replaced while this process had the log open; "
                "to keep two processes from writing over each other this one refuses to go on: "
                "stop every process that uses the log, then open it again"
            )
            raise LockFileError(self._broken)

    def _check_size(self) -> None:
        """Refuse (read-only) or zero-pad (writable) a data file shorter than the pages its meta names.

        LMDB maps the file, and touching a mapped page past the end of the file kills the
        process with SIGBUS. Padded pages read as zeros, which LMDB and the record checksums
        report as corruption. A healthy file may also end before its last page when that page
        was freed unwritten; padding it changes nothing.
        """
        data = self.path / "data.mdb"

        def shortfall() -> tuple[int, int]:
            need = (self._env.info()["last_pgno"] + 1) * self._env.stat()["psize"]
            return os.stat(data).st_size, need

        if self.readonly:
            size, need = self._at_open(shortfall)
            if size < need:
                raise CorruptRecordError(
                    f"{data} is {size} bytes but the log's pages reach {need} bytes: the file was "
                    "truncated; restore it from a copy (or, if it only ends in unwritten free pages, "
                    "open it once writable)"
                )
            return

        def pad() -> None:
            with self._writing(), self._env.begin(write=True):  # no other process extends the file now
                size, need = shortfall()
                if size < need:
                    os.truncate(data, need)  # grows only: `need` is above the size read under the lock

        try:
            self._at_open(pad)
        except OSError as exc:
            raise named_os_error(exc, data, writing=True) from None

    def _open_dbs(self) -> dict[str, Any]:
        """Open the log's tables, or make them all in an environment that has none. An environment
        with other names, or only some of the tables (eventlog makes them in one transaction),
        belongs to another program: it is refused before anything is written."""

        def names() -> set[bytes]:
            with self._env.begin() as txn:
                return {bytes(k) for k, _ in txn.cursor()}

        found = self._at_open(names)
        ours = {name.encode() for name in TABLES}
        if not found and self.readonly:
            raise NotALogError(f"{self.path} is not a complete eventlog log (its tables were never made)")
        if found and found != ours:
            other = b", ".join(sorted(found - ours)[:5]).decode("utf-8", "replace")
            held = f"it holds {other}" if other else "it holds some of a log's tables, not all"
            raise NotALogError(f"{self.path} is an LMDB database of another program, not an eventlog log ({held})")

        def tables() -> dict[str, Any]:
            if self.readonly:
                return {name: self._env.open_db(name.encode(), create=False) for name in TABLES}
            with self._writing(), self._env.begin(write=True) as txn:
                return {name: self._env.open_db(name.encode(), txn=txn, create=True) for name in TABLES}

        return self._at_open(tables)

    # -- transactions ------------------------------------------------------------------

    def _writing(self) -> _Writing:
        """This process's write lock, then the flock every writer process takes, then the lock file check."""
        return _Writing(self)

    def read(self, fn: Callable[[_LMDBTxn], T]) -> T:
        while True:
            self._check_open()
            self._check_lock_file()
            self._gate.enter()
            try:
                with self._env.begin(buffers=False) as txn:
                    return fn(_LMDBTxn(txn, self._dbs, write=False))
            except lmdb.MapResizedError:
                pass
            except lmdb.Error as exc:
                raise translate(exc, self.path) from None
            finally:
                self._gate.leave()
            self._adopt_map_size()

    def write(self, fn: Callable[[_LMDBTxn], T]) -> T:
        if self.readonly:
            raise ReadOnlyError(f"{self.path} was opened read-only; open it with readonly=False to write")
        while True:
            self._check_open()
            self._gate.enter()
            grow = False
            try:
                with self._writing(), self._env.begin(write=True) as txn:
                    result = fn(_LMDBTxn(txn, self._dbs, write=True))
                self._writes += 1
                if self._writes % _limits.reader_check_writes == 0:
                    self._env.reader_check()  # free the reader slots of killed processes
                return result
            except lmdb.MapResizedError:
                pass
            except lmdb.MapFullError:
                grow = True
            except lmdb.Error as exc:
                raise translate(exc, self.path) from None
            finally:
                self._gate.leave()
            if grow:
                self._grow()
            else:
                self._adopt_map_size()

    def _grow(self) -> None:
        def grow() -> None:
            size = self._env.info()["map_size"]
            if size >= self._map_size_bytes_max:
                raise LogFullError(
                    f"{self.path}: the map is at its limit of {self._map_size_bytes_max} bytes; "
                    "prune or delete runs, or open the log with a larger map_size_bytes_max"
                )
            self._env.reader_check()
            self._env.set_mapsize(min(size * 2, self._map_size_bytes_max))

        self._gate.exclusive(grow)

    def _adopt_map_size(self) -> None:
        self._gate.exclusive(lambda: self._env.set_mapsize(0))

    # -- the rest ----------------------------------------------------------------------

    def sync(self) -> None:
        self._check_open()
        if not self.readonly:
            try:
                self._env.sync(True)
            except lmdb.Error as exc:
                raise translate(exc, self.path) from None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if not self.readonly and self.durability != "sync" and self._broken is None:
                self._env.sync(True)
        except lmdb.Error as exc:
            raise translate(exc, self.path) from None
        finally:
            self._release()

    def _release(self) -> None:
        self._env.close()
        if self._data_fd >= 0:
            os.close(self._data_fd)
            self._data_fd = -1

    def stats(self) -> dict[str, int]:
        self._check_open()
        data = self.path / "data.mdb"
        st = data.stat()
        out = {
            "bytes_on_disk": st.st_blocks * 512,
            "file_size_bytes": st.st_size,
            "map_size_bytes": self._env.info()["map_size"],
        }
        out.update(self.read(lambda txn: {f"entries_{name}": txn.count(name) for name in TABLES}))
        return out

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("the log is closed; open it again with eventlog.open(...)")
