"""The tables of a log, one object each, that build and read their own keys (docs/format.md,
"The directory").

A table is its name — a `str`, as every store takes it — with the layout of its keys: a run
number first wherever the table belongs to a run, then the run's own parts. Integers are
big-endian u64, so byte order is log order. Nothing outside this module slices a key.

    EVENTS.key(number, offset)     EVENTS.second(key) -> offset
    EVENT_IDS.key(number, id)      EVENT_IDS.id_of(key)
    FEED.key(position)             FEED.ref(number, offset) / FEED.parse_ref(value)
"""

from __future__ import annotations

import hashlib
import struct

from .. import _limits
from ..store._base import TABLES

__all__ = [
    "CHECKPOINTS",
    "CHECKPOINT_IDS",
    "EVENTS",
    "EVENT_IDS",
    "FEED",
    "META",
    "RUNS",
    "RUN_NUMBERS",
    "SNAPSHOTS",
    "Table",
]

_U64 = struct.Struct(">Q")
_PAIR = struct.Struct(">QQ")


class Table(str):
    """A table of the log: its name."""

    def __new__(cls, name: str) -> Table:
        if name not in TABLES:  # pragma: no cover - a programmer error, caught at import
            raise AssertionError(f"{name!r} is not a table of the store interface")
        return super().__new__(cls, name)


class _RunTable(Table):
    """A table whose keys begin with a run number (`record/_keys.run_range(number)` spans one
    run's keys)."""

    def number_of(self, key: bytes) -> int:
        """The run number a key belongs to."""
        return int.from_bytes(key[:8], "big")


class _Pairs(_RunTable):
    """Keys of a run number and one more u64 (`events`: an offset; `checkpoints`: a sequence)."""

    key = staticmethod(_PAIR.pack)
    """`key(number, n)`: the key (a `struct` call, for the append path)."""

    def second(self, key: bytes) -> int:
        """The part after the run number: an entry's offset, a checkpoint's sequence."""
        return int.from_bytes(key[8:16], "big")

    def tail(self, key: bytes) -> bytes:
        """That part as its 8 stored bytes (what an id index holds as its value)."""
        return key[8:16]


class _Ids(_RunTable):
    """Keys of a run number and an id's UTF-8 bytes; the value is a u64 (offset or sequence)."""

    def key(self, number: int, some_id: str) -> bytes:
        return _U64.pack(number) + some_id.encode("utf-8")

    def id_of(self, key: bytes) -> str:
        """The id a key names (a damaged one read with replacement characters)."""
        return bytes(key[8:]).decode("utf-8", "replace")


class _Snapshots(_RunTable):
    """Keys of a run number, an offset and the reducer's tag (`name@version`)."""

    def key(self, number: int, offset: int, tag: bytes) -> bytes:
        return _PAIR.pack(number, offset) + tag

    def parse(self, key: bytes) -> tuple[int, int, bytes]:
        number, offset = _PAIR.unpack_from(key)
        return number, offset, bytes(key[16:])


class _Feed(Table):
    """Keys of a position; the value is the run number and offset of the entry there."""

    key = staticmethod(_U64.pack)
    """`key(position)`."""
    ref = staticmethod(_PAIR.pack)
    """`ref(number, offset)`: the value under a position."""

    def position_of(self, key: bytes) -> int:
        return int.from_bytes(key, "big")

    def parse_ref(self, value: bytes) -> tuple[int, int]:
        """(number, offset) of a well-formed reference (16 bytes; see `well_formed`)."""
        number, offset = _PAIR.unpack_from(value)
        return number, offset

    def well_formed(self, value: bytes) -> bool:
        return len(value) == _PAIR.size


class _Runs(Table):
    """Keys of a run id."""

    def key(self, run_id: str) -> bytes:
        """The run id's UTF-8 bytes, or, for an id over 448 bytes (LMDB keys hold at most 511),
        its first 448 bytes, 0xff (a byte UTF-8 never holds) and the SHA-256 of the id."""
        raw = run_id.encode("utf-8")
        inline = _limits.run_key_inline_size_bytes_max
        if len(raw) <= inline:
            return raw
        return raw[:inline] + b"\xff" + hashlib.sha256(raw).digest()


class _RunNumbers(Table):
    """Keys of a run number; the value is the run id."""

    key = staticmethod(_U64.pack)
    """`key(number)`."""


META = Table("meta")
"""The format record, the stored limits, counters, zstd dictionaries and removal marks."""
RUNS = _Runs("runs")
"""Run id -> run record."""
RUN_NUMBERS = _RunNumbers("run_numbers")
"""Run number -> run id."""
EVENTS = _Pairs("events")
"""Run number + offset -> entry record."""
FEED = _Feed("feed")
"""Position -> run number + offset."""
EVENT_IDS = _Ids("event_ids")
"""Run number + event id -> offset (a caller's ids, and every id before format 4)."""
CHECKPOINTS = _Pairs("checkpoints")
"""Run number + sequence -> checkpoint record."""
CHECKPOINT_IDS = _Ids("checkpoint_ids")
"""Run number + checkpoint id -> sequence."""
SNAPSHOTS = _Snapshots("snapshots")
"""Run number + offset + reducer tag -> snapshot record."""

if {META, RUNS, RUN_NUMBERS, EVENTS, FEED, EVENT_IDS, CHECKPOINTS, CHECKPOINT_IDS, SNAPSHOTS} != set(TABLES):
    raise AssertionError("record/tables.py names every table of the store interface, once")  # pragma: no cover
