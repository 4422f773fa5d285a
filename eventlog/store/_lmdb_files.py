"""An LMDB log's directory and its two files: what is refused before LMDB opens them, how a new
log's files are made (exclusively, never through a link), and LMDB's errors named by what
they mean (docs/durability.md: only damage is called damage)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import lmdb

from ..errors import (
    AlreadyOpenError,
    CorruptRecordError,
    EventLogError,
    FormatVersionError,
    InvalidArgumentError,
    LogFullError,
    NoLogError,
    NotALogError,
    ReadOnlyError,
    named_os_error,
)

FILES = ("data.mdb", "lock.mdb")
FULL_ERRNOS = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)


def check_directory(p: Path, *, readonly: bool, create: bool) -> None:
    """Refuse what is not a log directory; make a new log's directory and files exclusively.

    A new log's directory, `data.mdb` and `lock.mdb` are created with O_EXCL and without
    following links (LMDB itself would follow a link planted at either name and truncate
    its target), and an existing log's files are never reached through a symbolic link.
    """
    try:
        if p.exists() and not p.is_dir():
            raise NotALogError(f"{p} is a file, not a log directory; give eventlog.open a directory path")
        if p.is_symlink() and not p.exists():
            raise NotALogError(f"{p} is a symbolic link to nothing; a log is never created through a link")
        if not p.exists():
            if readonly or not create:
                raise NoLogError(f"no log at {p}")
            p.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            try:
                p.mkdir(mode=0o700)  # never follows a link: another creator's directory is EEXIST
            except FileExistsError:
                if p.is_symlink() or not p.is_dir():
                    raise NotALogError(f"{p} appeared while the log was being created and is not a directory") from None
        data = p / "data.mdb"
        if not exists(data):
            if any(e.name not in FILES for e in p.iterdir()):  # a log another process is making is not
                raise NotALogError(
                    f"{p} is a non-empty directory without a log in it; choose an empty or new directory"
                )
            if readonly or not create:
                raise NoLogError(f"no log at {p} (the directory holds none)")
        for name in FILES:
            if (p / name).is_symlink():
                raise NotALogError(f"{p / name} is a symbolic link; a log's files are never reached through a link")
            if exists(p / name) and not (p / name).is_file():
                raise NotALogError(f"{p / name} is not a file; {p} is not a log")
        if exists(data) and data.stat().st_size == 0 and (readonly or not create):
            raise NoLogError(
                f"no log at {p}: its data.mdb is empty (the log's creation was cut short); "
                "open it writable to make the log, or remove the directory"
            )
        check_magic(data)
        if not readonly:
            for name in FILES:
                create_exclusively(p / name)
    except OSError as exc:
        raise named_os_error(exc, p, writing=not readonly) from None


_MAGIC = (0xBEEFC0DE).to_bytes(4, "little")
"""LMDB's magic number, 16 bytes into its first meta page (after the page header)."""


def check_magic(data: Path) -> None:
    """Refuse a `data.mdb` that is not an LMDB file before LMDB makes a `lock.mdb` beside it."""
    try:
        with open(data, "rb") as f:
            head = f.read(20)
    except (FileNotFoundError, NotADirectoryError):
        return
    if len(head) == 20 and head[16:] != _MAGIC:
        raise NotALogError(f"{data} is not an LMDB file; it is not an eventlog log")


def is_errno(exc: lmdb.Error, *codes: int) -> bool:
    text = str(exc)
    return any(os.strerror(code) in text for code in codes)


def exists(path: Path) -> bool:
    """Whether anything (a link to nothing too) is at `path`."""
    return os.path.lexists(path)


def create_exclusively(path: Path) -> None:
    """Create an empty file `0600` at `path` unless one is there; never through a link."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        if path.is_symlink():
            raise NotALogError(f"{path} is a symbolic link; a log's files are never reached through a link") from None
        return
    os.close(fd)


def translate(exc: lmdb.Error, path: Path, *, opening: bool = False) -> EventLogError:
    """Every LMDB error as a named eventlog error, by what it means: damage only where LMDB
    says the file is damaged (or, at open, not an LMDB file at all)."""
    if "already open in this process" in str(exc):
        return AlreadyOpenError(
            f"{path}: the log is already open in this process; use the EventLog that opened it "
            "(LMDB allows one open per process), or close that one first"
        )
    if isinstance(exc, (lmdb.MapFullError, lmdb.TxnFullError)) or is_errno(exc, *FULL_ERRNOS):
        return LogFullError(
            f"{path}: no space for this write ({exc}); nothing of it was kept. Free disk space and retry"
        )
    if isinstance(exc, lmdb.MemoryError):
        return LogFullError(f"{path}: the map does not fit in this process's memory ({exc})")
    if isinstance(exc, lmdb.ReadonlyError) or is_errno(exc, errno.EACCES, errno.EPERM, errno.EROFS):
        return ReadOnlyError(f"{path}: cannot write ({exc})")
    if isinstance(exc, lmdb.ReadersFullError):
        return EventLogError(f"{path}: too many processes and threads read the log at once ({exc}); retry")
    if isinstance(exc, lmdb.VersionMismatchError):
        return FormatVersionError(f"{path} was written by another version of LMDB ({exc})")
    if isinstance(exc, lmdb.IncompatibleError) and opening:
        return NotALogError(
            f"{path} is an LMDB database of another program: its keys named like a log's tables are not tables"
        )
    if isinstance(exc, lmdb.InvalidError) and opening:
        return NotALogError(f"{path} is not a log: its data.mdb is not an LMDB file ({exc})")
    if isinstance(exc, (lmdb.CorruptedError, lmdb.PageNotFoundError, lmdb.InvalidError, lmdb.PanicError)):
        return CorruptRecordError(f"LMDB reports {exc}")
    if isinstance(exc, lmdb.BadValsizeError):
        return InvalidArgumentError(f"{path}: a key or value LMDB cannot hold ({exc})")
    if is_errno(exc, errno.ENOENT):
        return NoLogError(f"no log at {path} ({exc})")
    if isinstance(exc, lmdb.MapResizedError):
        return EventLogError(f"{path}: another process grew the map again and again; retry ({exc})")
    return EventLogError(f"{path}: LMDB error: {exc}")
