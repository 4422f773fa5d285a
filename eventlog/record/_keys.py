"""The key space (docs/format.md, "The directory") and the checks on what callers name keys with.

Integers in keys are big-endian u64, so byte order is numeric order. Every key of a run
starts with its run number, so one prefix scan finds all of a run's records in a table.
"""

from __future__ import annotations

import itertools
import os
import struct
from collections.abc import Callable, Iterable

from .. import _limits
from ..errors import DuplicateIdError, EventLogError, InvalidArgumentError, InvalidRunIdError, OffsetOutOfRangeError

# meta keys
META_FORMAT = b"format"
META_POSITION = b"position"
META_RUN_NUMBER = b"run_number"
META_DICT_CURRENT = b"dict.current"
META_DICT_NEXT_TRY = b"dict.next_try"
META_DICT = b"dict:"
META_RECORD_SIZE_MAX = b"limit.record_size_bytes_max"
META_KEY_CHECK = b"key.check"
META_LOG_ID = b"log.id"  # the log's 16 random bytes, drawn when it is created (format 3 on)
META_SEALED = b"sealed"  # 1 when the log is sealed, 0 when not: fixed when it is created (format 3 on)
META_REMOVING = b"removing:"  # + run number: offsets up to the value (u64) and a flag byte are being removed


U64 = struct.Struct(">Q")
"""A big-endian u64 (`U64.pack` is `u64` without the Python call, for the append path)."""


def u64(n: int) -> bytes:
    """Fixed-width big-endian key part: byte order is numeric order."""
    return n.to_bytes(8, "big")


def from_u64(b: bytes) -> int:
    """Inverse of `u64`."""
    return int.from_bytes(b, "big")


def removal_key(number: int) -> bytes:
    """The meta key that marks a delete or prune of run number `number` as not finished."""
    return META_REMOVING + u64(number)


def removal_number(key: bytes) -> int:
    """The run number a removal mark's key names (`removal_key`)."""
    return from_u64(key[len(META_REMOVING) :])


def removal_mark(upto: int, damaged: bool) -> bytes:
    """A removal mark's value: the offset up to which to remove, and whether a chunk met a damaged
    entry (its feed positions are then found by a scan of the feed)."""
    return u64(upto) + (b"\x01" if damaged else b"\x00")


def read_removal_mark(value: bytes) -> tuple[int, bool]:
    """(upto, damaged) of a removal mark's value (`removal_mark`)."""
    return from_u64(value[:8]), value[8:9] == b"\x01"


def dict_key(dict_id: int) -> bytes:
    """The meta key of a zstd dictionary."""
    return META_DICT + dict_id.to_bytes(4, "big")


def run_range(number: int) -> tuple[bytes, bytes]:
    """(start, stop) of a prefix scan over one run's keys."""
    return u64(number), u64(number + 1)


def check_run_id(run_id: object) -> bytes:
    """The UTF-8 bytes of a valid run id; raises InvalidRunIdError."""
    return _utf8("run id", run_id, _limits.run_id_size_bytes_max, InvalidRunIdError)


def check_id(what: str, value: object) -> bytes:
    """The UTF-8 bytes of a valid event or checkpoint id; raises InvalidArgumentError."""
    return _utf8(what, value, _limits.event_id_size_bytes_max, InvalidArgumentError)


def _utf8(what: str, value: object, size_bytes_max: int, error: type[EventLogError]) -> bytes:
    if not isinstance(value, str) or not value:
        raise error(f"{what} must be a non-empty string, not {value!r}")
    try:
        raw = value.encode("utf-8")
    except UnicodeEncodeError:
        raise error(f"{what} {value!r} is not valid unicode text") from None
    if len(raw) > size_bytes_max:
        raise error(f"{what} of {len(raw)} UTF-8 bytes is over the limit of {size_bytes_max}")
    return raw


def check_ids(what: str, value: object) -> list[str]:
    """`value`, a collection of ids, as a list; a str (or bytes) is refused, never read as the ids
    of its characters (`prune("trip-1", strategy="delete")` would delete threads "t", "r", ...)."""
    if isinstance(value, str | bytes | bytearray) or not isinstance(value, Iterable):
        raise InvalidArgumentError(f"{what} must be a list of ids, not {type(value).__name__} {value!r:.80}")
    return list(value)


def check_int(what: str, value: object, lo: int = 0, hi: int = (1 << 64) - 1) -> int:
    """`value` if it is an int (not a bool) in lo..hi; raises InvalidArgumentError."""
    if type(value) is not int and not (isinstance(value, int) and not isinstance(value, bool)):
        raise InvalidArgumentError(f"{what} must be an integer, not {type(value).__name__} {value!r}")
    if not lo <= value <= hi:
        raise InvalidArgumentError(f"{what} {value} is out of range {lo}..{hi}")
    return int(value)


def check_offset(run_id: str, what: str, value: object, head: int, lo: int = 0) -> int:
    """An offset of a run in lo..head; InvalidArgumentError for a non-integer, OffsetOutOfRangeError outside."""
    offset = check_int(what, value, -(1 << 64), 1 << 64)
    if not lo <= offset <= head:
        raise OffsetOutOfRangeError(run_id, offset, head)
    return offset


def check_time_ns(what: str, value: object) -> int:
    """A time in nanoseconds since the Unix epoch, as an int in 0..2**63-1; raises InvalidArgumentError."""
    return check_int(what, value, 0, _limits.time_ns_max)


def check_limit(limit: object) -> int | None:
    """None, or a count of at least 0; raises InvalidArgumentError."""
    return None if limit is None else check_int("limit", limit)


def check_run_number(number: object) -> int | None:
    """None, or a run number (`RunInfo.number`) a read is pinned to; raises InvalidArgumentError."""
    return None if number is None else check_int("run_number", number, 1)


# -- ids ------------------------------------------------------------------------------------


def own_prefix(log_id: bytes) -> str:
    """The start of every event id the log draws itself (format 4 on): the first 8 bytes of its
    id (meta/log.id) in hex, then `-`; empty for a log without an id (read as it is, before format 3)."""
    return f"{log_id[:8].hex()}-" if len(log_id) >= 8 else ""


def own_id(prefix: str, number: int, offset: int) -> str:
    """The event id the log draws for the entry at (run number, offset): `prefix`, the number and
    the offset in lowercase hex without leading zeros, joined by `-` (docs/format.md, "Event ids")."""
    return f"{prefix}{number:x}-{offset:x}"


def own_slot(prefix: str, event_id: str) -> tuple[int, int] | None:
    """(run number, offset) that `event_id` names when it is of the form `own_id` makes with
    `prefix` (exactly: one string per slot); None when it is not."""
    if not prefix or not event_id.startswith(prefix):
        return None
    number_hex, dash, offset_hex = event_id[len(prefix) :].partition("-")
    if not dash or not _HEX.issuperset(number_hex) or not _HEX.issuperset(offset_hex):
        return None
    if not number_hex or not offset_hex or number_hex[0] == "0" or offset_hex[0] == "0":
        return None
    if len(number_hex) > 16 or len(offset_hex) > 16:
        return None
    return int(number_hex, 16), int(offset_hex, 16)


_HEX = frozenset("0123456789abcdef")


class IdSource:
    """Makes event and checkpoint ids: the log's own (64 random bits drawn once per open log,
    then a fixed-width counter: unique without a system call per id), or an injected
    `ids()` whose results are checked like a caller's ids.

    The log's own source gives an event the id `own_id` makes from its run number and offset
    (`prefix` set from the log's id once the log is open): unique in the log by construction,
    found again by its form, and indexed nowhere (docs/format.md, "Event ids")."""

    def __init__(self, ids: Callable[[], str] | None, log_id: bytes = b"") -> None:
        """`log_id`: the log's id when it is of format 4 on (`derive`)."""
        self.injected = ids is not None
        self.prefix = ""
        """`own_prefix` of the log's id once `derive` was called: ids of that form name their entry."""
        self.derives = False
        """True when event ids are made from their run number and offset, not drawn and indexed."""
        if ids is None:
            prefix = os.urandom(8).hex()
            count = itertools.count(1)

            def ids() -> str:
                return f"{prefix}{next(count):08x}"

        self._ids = ids
        self.derive(log_id)

    def derive(self, log_id: bytes) -> None:
        """Know the log's own id form (a log of format 4 on), and make event ids in it from now on
        unless the source is injected."""
        self.prefix = own_prefix(log_id)
        self.derives = not self.injected and bool(self.prefix)

    def draw(self, what: str = "event_id") -> str:
        """A new id; one from an injected source is checked (InvalidArgumentError when bad),
        the log's own are valid by construction."""
        if not self.injected:
            return self._ids()
        try:
            value = self._ids()
        except Exception as exc:
            raise InvalidArgumentError(f"the log's id source raised {exc!r}") from exc
        check_id(f"{what} from the log's id source", value)
        return value

    def taken(self, candidate: str, what: str) -> None:
        """A drawn id the run holds already: refused (DuplicateIdError) from an injected source,
        which must return unique ids; the log's own source is simply asked again."""
        if self.injected:
            raise DuplicateIdError(
                f"the log's id source returned {candidate!r}, {what} the run holds already; "
                "an id source given to eventlog.open(ids=...) must return ids unique in the log"
            )

    @staticmethod
    def exhausted() -> DuplicateIdError:
        """The error when every draw was taken."""
        return DuplicateIdError(f"the log's id source returned {_limits.id_draws_max} ids the run holds already")
