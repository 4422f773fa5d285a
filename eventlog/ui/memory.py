"""What the server gives back after it reads a whole state: its freed heap, and the pages of
the log's files it read through their memory map.

A state of a long run is tens of megabytes of Python objects, and reading it touches tens of
megabytes of the LMDB file, which LMDB reads through a shared memory map: both stay counted in
the server's resident memory after the state is dropped (glibc keeps freed memory for later
allocations; a page of the map, once read, stays mapped). `release` gives both back:

- the heap glibc holds free (`malloc_trim`);
- the pages of the log's files mapped in this process (`madvise(MADV_DONTNEED)` on the
  process's shared, file-backed mappings of files in the log's directory). Nothing is lost:
  the pages stay in the kernel's page cache, shared with every process that reads the log, and
  the next read maps them again from there (a minor fault, no disk read). It is done inside a
  read transaction of the log, during which the store never maps the file anew (LMDB's map
  grows only between transactions), so the ranges given back are the map's own.

Elsewhere than Linux with glibc, and for a log that is not an LMDB directory (PostgreSQL, in
memory), the parts that do not apply do nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from pathlib import Path
from typing import Any

from eventlog import EventLog

__all__ = ["log_directory", "mapped_ranges", "release"]

_MADV_DONTNEED = 4  # Linux's value (asm-generic/mman-common.h)
_MAPS = "/proc/self/maps"


def _libc() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


_c = _libc()
_trim = getattr(_c, "malloc_trim", None)  # not in musl
_madvise = getattr(_c, "madvise", None)
if _madvise is not None:
    _madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    _madvise.restype = ctypes.c_int


def log_directory(log: EventLog[Any]) -> str | None:
    """The directory of an LMDB log, as the kernel names it in `/proc/self/maps`; None for any other store."""
    path = getattr(log.store, "path", None)
    if not isinstance(path, Path) or not path.is_dir():
        return None
    return os.path.realpath(path)


def mapped_ranges(directory: str, maps: str = _MAPS) -> list[tuple[int, int]]:
    """(start, end) of this process's shared, read-only mappings of the log's `data.mdb` in
    `directory` (from /proc/self/maps): the map LMDB reads through. Nothing else is given back:
    not `lock.mdb` (the readers' table and locks every process shares), not a private mapping
    (its pages may be the process's own), not a writable one."""
    try:
        with open(maps) as f:
            lines = f.readlines()
    except OSError:
        return []
    data = directory.rstrip("/") + "/data.mdb"
    out = []
    for line in lines:
        parts = line.split(maxsplit=5)
        if len(parts) < 6 or parts[5].rstrip("\n") != data or parts[1][1:2] != "-" or parts[1][3:4] != "s":
            continue
        start, _, end = parts[0].partition("-")
        out.append((int(start, 16), int(end, 16)))
    return out


def _drop_pages(directory: str) -> None:
    for start, end in mapped_ranges(directory):
        assert _madvise is not None
        _madvise(start, end - start, _MADV_DONTNEED)


def release(log: EventLog[Any], held: list[Any] | None = None) -> None:
    """Drop what `held` holds (a state read for a page sent meanwhile), then give the freed heap
    and the log file's mapped pages back to the system (see the module's docstring)."""
    if held:
        held.clear()
    if _trim is not None:
        _trim(0)
    directory = log_directory(log) if _madvise is not None else None
    if directory is None or not mapped_ranges(directory):
        return
    log.store.read(lambda _txn: _drop_pages(directory))  # inside a transaction: the map is not remapped
