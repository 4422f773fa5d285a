"""Every error the log raises, under one base class `EventLogError`.

Each message names the run, the offset and what to do where they apply.
"""

from __future__ import annotations

import errno
import os

__all__ = [
    "AccessDeniedError",
    "AlreadyOpenError",
    "CheckpointNotFoundError",
    "ClosedError",
    "ConflictError",
    "CorruptRecordError",
    "DuplicateIdError",
    "EventLogError",
    "ForkDependencyError",
    "FormatVersionError",
    "InvalidArgumentError",
    "InvalidEventError",
    "InvalidRunIdError",
    "KeyMismatchError",
    "LockFileError",
    "LogFullError",
    "NoLogError",
    "NotALogError",
    "OffsetOutOfRangeError",
    "PrunedError",
    "ReadOnlyError",
    "RecordTooLargeError",
    "ReducerError",
    "RunExistsError",
    "RunReplacedError",
    "UnencodableValueError",
    "UnknownKindError",
    "UnknownRunError",
]


class EventLogError(Exception):
    """Base class of every error raised by eventlog."""


class ConflictError(EventLogError):
    """`expected_offset` did not match the run's head: another writer appended first.

    `expected` and `head` are the heads the write expected and found; `attempts`, how many times
    a writer that retries built the write again on the head it found and met another writer."""

    def __init__(self, run_id: str, expected: int, head: int, *, attempts: int = 1) -> None:
        self.run_id, self.expected, self.head, self.attempts = run_id, expected, head, attempts
        tried = f" at the last of {attempts} attempts" if attempts > 1 else ""
        super().__init__(
            f"run {run_id!r}: expected head {expected} but head is {head}{tried}; "
            f"re-read the run from offset {expected} and retry"
        )

    def after(self, attempts: int) -> ConflictError:
        """This conflict, met by the last of `attempts` attempts of a write: the error to raise when
        they are spent, naming the heads this one expected and found."""
        return ConflictError(self.run_id, self.expected, self.head, attempts=attempts)

    @staticmethod
    def last_of(met: ConflictError | None, attempts: int) -> ConflictError:
        """The error of a write whose `attempts` attempts each met a conflict, `met` the last one's
        (`after`): raise it `from None`."""
        assert met is not None, "every attempt met a conflict"
        return met.after(attempts)


class RunReplacedError(ConflictError):
    """A run was deleted, or deleted and made again under the same id, while something that
    spans transactions used it: a read in chunks, a fold, a checkpoint's lazy state, a run
    writer. Each life of a run id has its own run number (`RunInfo.number`); what was read
    under one number is never joined with what is read under another."""

    def __init__(self, run_id: str, number: int, now: int | None, doing: str = "it was used") -> None:
        self.run_id, self.number, self.now = run_id, number, now
        self.expected, self.head, self.attempts = 0, 0, 1
        again = "deleted" if now is None else f"deleted and made again (run number {number}, now {now})"
        EventLogError.__init__(
            self,
            f"run {run_id!r} was {again} while {doing}; what was read of it no longer holds: "
            "read the run again (or make a new run writer)",
        )

    def after(self, attempts: int) -> ConflictError:
        """Itself: what it says holds whatever the attempts before it met (it has no heads to name)."""
        return self


class UnknownRunError(EventLogError, LookupError):
    """The run does not exist in this log."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(f"run {run_id!r} does not exist in this log")


class RunExistsError(EventLogError):
    """A run with this id exists already (for example the target of a fork)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(f"run {run_id!r} exists already; choose another run id")


class OffsetOutOfRangeError(EventLogError, IndexError):
    """An offset outside 0..head of the run."""

    def __init__(self, run_id: str, offset: int, head: int) -> None:
        self.run_id, self.offset, self.head = run_id, offset, head
        super().__init__(f"run {run_id!r}: offset {offset} is out of range 0..{head}")


class PrunedError(EventLogError):
    """The offset lies below the run's pruned base (an event's: at or below it), or the state kept
    at the base cannot be read by the reducer asked (`detail` says why)."""

    def __init__(self, run_id: str, offset: int, base: int, *, detail: str | None = None) -> None:
        self.run_id, self.offset, self.base = run_id, offset, base
        if detail is not None:
            super().__init__(f"run {run_id!r}: offset {offset}: {detail}")
            return
        super().__init__(
            f"run {run_id!r}: offset {offset} was pruned: the events up to offset {base} are gone, "
            f"the states from offset {base} on are kept"
        )


class CorruptRecordError(EventLogError):
    """A stored record failed its checks (checksum, header, length, decoding).

    `run_id` and `offset` name the entry where they are known; `position` names its place in
    the feed when the feed met it, so that a feed reader can go on past it with
    `log.feed(after=position)`."""

    def __init__(
        self, what: str, run_id: str | None = None, offset: int | None = None, position: int | None = None
    ) -> None:
        self.what, self.run_id, self.offset, self.position = what, run_id, offset, position
        where = ""
        if run_id is not None:
            where = f"run {run_id!r}"
            if offset is not None:
                where += f" offset {offset}"
            where += ": "
        if position is not None:
            where = f"feed position {position}: " + where
        super().__init__(f"{where}corrupt record: {what}; run `eventlog verify` and restore this run from a copy")

    def at(self, run_id: str | None, offset: int | None, position: int | None = None) -> CorruptRecordError:
        """The same error, naming where the record lives."""
        return CorruptRecordError(self.what, run_id, offset, position if position is not None else self.position)


class UnknownKindError(EventLogError):
    """A stored event is of a kind this process has not registered: not damage, but a reader
    older than the writer (or a module of event kinds not imported). Register the kind (or
    pass `--kinds MODULE` to the command line) to read it."""

    def __init__(self, kind: str, run_id: str | None = None, offset: int | None = None) -> None:
        self.kind, self.run_id, self.offset = kind, run_id, offset
        where = "" if run_id is None else f"run {run_id!r}" + ("" if offset is None else f" offset {offset}") + ": "
        super().__init__(
            f"{where}the event kind {kind!r} is not registered in this process; import the module that "
            "registers it (eventlog --kinds MODULE), or upgrade eventlog"
        )

    def at(self, run_id: str | None, offset: int | None) -> UnknownKindError:
        """The same error, naming where the event lives."""
        return UnknownKindError(self.kind, run_id, offset)


class FormatVersionError(EventLogError):
    """The log or a record was written by a newer version of the format."""


class NotALogError(EventLogError):
    """The path is not an eventlog log (or is damaged beyond opening)."""


class NoLogError(NotALogError, LookupError):
    """There is no log at the path (or in the schema), and it was not to be created."""


class InvalidEventError(EventLogError, TypeError, ValueError):
    """The object is not an instance of a registered event kind."""


class UnencodableValueError(EventLogError, TypeError):
    """A state or checkpoint metadata that msgpack cannot encode canonically (say, a dict with
    keys that are not strings, or an object of an unknown type)."""


class InvalidArgumentError(EventLogError, ValueError, TypeError):
    """An argument of the wrong type or out of its range (an offset, a limit, a time, an option)."""


class DuplicateIdError(EventLogError):
    """An id source injected with `ids=` made an event or checkpoint id that the run holds already."""


class ReducerError(EventLogError):
    """A reducer raised while folding an event; the original exception is the cause."""


class KeyMismatchError(EventLogError):
    """An encrypted log opened without its key or with another one, or a key given for a log
    that is not encrypted."""


class LockFileError(EventLogError):
    """An LMDB log's `lock.mdb` was deleted or replaced while this process had the log open.

    Two processes with different lock files would write over each other, so this one refuses
    to read or write; close every process that uses the log, then open it again."""


class InvalidRunIdError(EventLogError, ValueError):
    """A run id that is empty, not a string, or too long."""


class RecordTooLargeError(EventLogError, ValueError):
    """An event or state larger than the record limit."""


class LogFullError(EventLogError):
    """The disk or the largest allowed map is full; nothing of the failed write was kept."""


class AlreadyOpenError(EventLogError):
    """The LMDB log is already open in this process: LMDB allows one open per process, so use
    the EventLog that opened it (or close it first)."""


class AccessDeniedError(EventLogError, PermissionError):
    """The process may not read the log's files, or write a file it was asked to write (their
    permissions, or the directory's)."""


class ClosedError(EventLogError):
    """The log was closed."""


class ReadOnlyError(EventLogError):
    """A write to a log opened with readonly=True."""


class CheckpointNotFoundError(EventLogError, LookupError):
    """No checkpoint with this id (or none at all) in the run."""


class ForkDependencyError(EventLogError):
    """The operation would remove events that a fork of the run still reads."""


def named_os_error(exc: OSError, path: str | os.PathLike[str], *, writing: bool, log: bool = True) -> EventLogError:
    """An OS error met on a file of a log (`log=False`: a file written for the caller, an
    export), named by what it means: a full disk, a permission, a missing or wrong path."""
    code, reason = exc.errno, exc.strerror or str(exc)
    if code in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
        return LogFullError(f"{path}: the disk is full ({reason}); nothing was kept. Free disk space and retry")
    if code in (errno.EACCES, errno.EPERM, errno.EROFS):
        if writing and log:
            return ReadOnlyError(
                f"{path}: this process may not write the log ({reason}); open it with readonly=True to read it"
            )
        return AccessDeniedError(f"{path}: this process may not {'write' if writing else 'read'} it ({reason})")
    if log and code == errno.ENOENT:
        return NoLogError(f"no log at {path} ({reason})")
    if log and code in (errno.ENOTDIR, errno.ELOOP, errno.EISDIR, errno.EEXIST):
        return NotALogError(f"{path} cannot be used as a log directory: {reason}")
    return EventLogError(f"{path}: {reason}")
