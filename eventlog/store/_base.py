"""The store interface: ordered byte tables read and written in transactions.

A store knows nothing of events, reducers or runs: the log layer lays its keys out in the
tables below and a store keeps them. Every store passes the same contract tests
(eventlog.testing, `StoreContract`); the in-memory store is the reference.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Protocol, TypeVar

from ..errors import EventLogError

T = TypeVar("T")

TABLES = (
    "meta",            # format version, zstd dictionaries, counters
    "runs",            # run id (UTF-8) -> run record
    "run_numbers",     # run number (u64) -> run id
    "events",          # run number (u64) + offset (u64) -> entry record
    "feed",            # position (u64) -> run number (u64) + offset (u64)
    "event_ids",       # run number (u64) + event id (UTF-8) -> offset (u64)
    "checkpoints",     # run number (u64) + sequence (u64) -> checkpoint record
    "checkpoint_ids",  # run number (u64) + checkpoint id (UTF-8) -> sequence (u64)
    "snapshots",       # run number (u64) + offset (u64) -> snapshot record
)  # fmt: skip
"""Every table a store holds, by name."""

APPENDED = frozenset({"events", "feed", "run_numbers", "checkpoints", "snapshots"})
"""Tables whose keys are mostly written in increasing order (docs/architecture.md, "The key space":
a run number, then an offset or a sequence; a feed position). The LMDB store puts a key past a
table's last one as an append: the leaf it ends stays full and the key starts a new one, where a
plain put may split the leaf in half and leave its lower half half empty for good."""


class Txn(Protocol):
    """A transaction: a consistent view of every table; a write transaction also changes them."""

    dense: bool
    """True when feed positions and run numbers are consecutive (1, 2, 3, …: memory, LMDB); False
    when they only increase (PostgreSQL), each writer taking its own without waiting for the others."""

    def get(self, table: str, key: bytes) -> bytes | None:
        """The value under `key`, or None."""

    def get_many(self, table: str, keys: list[bytes]) -> list[bytes | None]:
        """The values under `keys`, in their order (None where absent): one round trip where that matters."""
        ...

    def fetch(self, gets: list[tuple[str, bytes]], lasts: list[str]) -> tuple[list[bytes | None], list[bytes | None]]:
        """The values under (table, key) pairs, and the last key of each table of `lasts` (None when
        it is empty), in their orders: one round trip where that matters."""
        ...

    def put(self, table: str, key: bytes, value: bytes) -> None:
        """Set `key` to `value` (write transactions only)."""

    def insert(self, table: str, key: bytes, value: bytes) -> None:
        """Set `key`, which must be new, to `value` (write transactions only). When it is taken,
        KeyExistsError is raised, here or when the transaction commits, and nothing is written."""

    def delete(self, table: str, key: bytes) -> bool:
        """Remove `key`; True if it was there (write transactions only)."""

    def scan(
        self, table: str, start: bytes, stop: bytes | None, *, reverse: bool = False, limit: int | None = None
    ) -> list[tuple[bytes, bytes]]:
        """Pairs with start <= key < stop (stop None: no upper bound) in key order, or reversed; at most `limit`."""

    def values(self, table: str, start: bytes, count: int) -> tuple[list[bytes], bytes | None]:
        """The values of the first `count` keys >= start, in key order, and the last of those keys."""

    def keys(self, table: str, start: bytes, stop: bytes, limit: int) -> list[bytes]:
        """The first `limit` keys with start <= key < stop, in key order, without their values."""
        ...

    def numbers(self, table: str) -> list[int]:
        """The distinct u64s the keys of `table` begin with (a run number in a table keyed by run),
        in increasing order, each found by one seek (`numbers_by_seeking`)."""
        ...

    def delete_range(self, table: str, start: bytes, stop: bytes, limit: int | None = None) -> int:
        """Remove the keys with start <= key < stop, the first `limit` of them in key order (None:
        all); returns how many went (write transactions only)."""
        ...

    def delete_feed_of(self, number: int, upto: int) -> int | None:
        """Remove, set-based, the feed positions that point at offsets up to `upto` of run number
        `number`; returns how many went, or None when the store keeps no index to find them
        (memory, LMDB: the log finds them through the entries). Write transactions only."""
        ...

    def position_base(self, last: int) -> int:
        """The base of this write transaction's feed positions: its entries take base + 1,
        base + 2, … (at most 2**20 - 1 of them). `last` is the last position the log gave: a
        dense store returns it; PostgreSQL returns one derived from its transaction id, above every
        position a transaction that began before it gave (docs/architecture.md, "PostgreSQL
        without a global lock")."""
        ...

    def run_number(self, last: int) -> int:
        """A new run number: `last + 1` in a dense store (`last` is the log's counter, which the
        log then raises), the next value of a sequence on PostgreSQL (write transactions only)."""
        ...

    def events_given(self, last: int) -> int:
        """About how many events the log has been given, for the dictionary schedule
        (docs/format.md, "Frames"): `last`, the last position given, in a dense store; on
        PostgreSQL the feed's rows as the server's statistics count them (rows inserted, or
        the planner's estimate when larger: a second or so behind, and from zero again after
        the statistics are reset)."""
        ...

    def generation(self) -> int | None:
        """The number this write transaction commits as, when the store numbers its commits one
        by one: each commit that changes anything takes the next number, so a write
        transaction whose number is one above the number of a commit knows that nothing was
        committed since (LMDB: the transaction id; memory: a counter). None: the store does not
        number its commits (PostgreSQL), or this is a read transaction."""
        ...


class KeyExistsError(EventLogError):
    """`Txn.insert` found its key taken; the transaction was rolled back."""


class Store(Protocol):
    """One log's storage. Safe to use from many threads; LMDB and PostgreSQL also from many processes."""

    readonly: bool
    """True when writes are refused."""
    dense: bool
    """As `Txn.dense`: consecutive feed positions and run numbers (memory, LMDB), or only increasing ones."""
    durability: str
    """When commits reach the disk: `sync` (each commit), `batch` (at `sync()` and close) or `none`."""

    def read(self, fn: Callable[[Txn], T]) -> T:
        """Run `fn` in a read transaction and return its result.

        `fn` may be called again (PostgreSQL runs a function of one statement without a
        transaction first, and reads again once older writers settle): it must not have side
        effects outside its result."""

    def write(self, fn: Callable[[Txn], T]) -> T:
        """Run `fn` in a write transaction; commit when it returns, roll back when it raises.

        `fn` may be called again (after the store grew, say): it must not have side effects
        outside the transaction. Writes are serialized across threads and processes.
        """

    def sync(self) -> None:
        """Make every committed write durable on disk (a no-op where there is no disk)."""

    def close(self) -> None:
        """Release the store; later calls raise ClosedError."""

    def stats(self) -> dict[str, int]:
        """Sizes: `bytes_on_disk`, `map_size_bytes` (0 where that means nothing), entries per table."""


SCAN_CHUNK = 4096
"""Pairs `scan_chunks` reads at a time."""


def numbers_by_seeking(txn: Txn, table: str) -> list[int]:
    """`Txn.numbers` of a store whose keys are in byte order: one `keys` call per number held
    (a key shorter than 8 bytes counts as padded with zeros)."""
    out: list[int] = []
    start = b""
    while found := txn.keys(table, start, _PAST_EVERY_KEY, 1):
        out.append(int.from_bytes(found[0][:8].ljust(8, b"\x00"), "big"))
        if out[-1] == (1 << 64) - 1:
            break
        start = (out[-1] + 1).to_bytes(8, "big")
    return out


_PAST_EVERY_KEY = b"\xff" * 32  # above the longest key of a run's tables (UTF-8 holds no 0xff byte)


def scan_chunks(txn: Txn, table: str, start: bytes, stop: bytes | None) -> Iterator[tuple[bytes, bytes]]:
    """The pairs of a key range in key order, read a chunk at a time (a long range is never one list).
    Keys already yielded may be deleted meanwhile; the next chunk starts after the last one read."""
    while True:
        pairs = txn.scan(table, start, stop, limit=SCAN_CHUNK)
        yield from pairs
        if len(pairs) < SCAN_CHUNK:
            return
        start = pairs[-1][0] + b"\x00"


def at_checkpoint(store: Store) -> None:
    """A checkpoint was committed: under `batch` durability that is when commits reach the disk
    (docs/durability.md), the one place both the group commit and `Checkpoints.save` say so."""
    if store.durability == "batch":
        store.sync()
