"""verify's links: the tables no checksum covers, cross-checked with the entries both ways.

Each entry's feed position must point back at it and be above the one before it in the run,
and its event id must be indexed to its offset; each feed position must name a run that has
that number, an offset of the run's own, and an entry that holds that position; each run's
number must be indexed to it, and each indexed number must be its run's; and every row of a
table keyed by run must be of a run the log has. So a re-pointed, swapped, duplicated or extra
reference is found too, and so is a feed that would deliver a run out of order.
"""

from __future__ import annotations

from ..core._runs import Runs
from ..errors import CorruptRecordError, EventLogError
from ..record._keys import META_RUN_NUMBER, from_u64, own_prefix, own_slot, run_range
from ..record._records import RunRecord
from ..record.codec import Codec
from ..record.tables import CHECKPOINT_IDS, CHECKPOINTS, EVENT_IDS, EVENTS, FEED, RUN_NUMBERS, SNAPSHOTS, Table
from ..store._base import Store, Txn, scan_chunks
from ._report import Problem

__all__ = ["Links", "index_problems", "number_problems", "stray_problems", "strays"]

_CHUNK = 4096
Ordered = tuple[int, int]  # a feed position and the offset of the entry that holds it


class Links:
    """The checks of the links, in bounded memory: tables are read in chunks."""

    def __init__(self, store: Store, codec: Codec, runs: Runs) -> None:
        self._store, self._codec, self._runs = store, codec, runs

    def entries(self, run_id: str, rec: RunRecord, ids_indexed: bool) -> list[Problem]:
        """Cross-check the run's own entries with its head, the feed and the event id index (an
        id the log made from the entry's run number and offset is not indexed: docs/format.md,
        "Event ids")."""
        problems: list[Problem] = []
        number = rec.number
        prefix = own_prefix(self._codec.log_id)
        own = unread = 0  # entries whose id the log made (not indexed); entries whose id is unreadable
        previous: Ordered = (-1, -1)  # the position and offset of the entry before: positions grow with offsets
        first = max(rec.base, rec.fork_offset) + 1
        count = 0
        start = EVENTS.key(number, first)
        stop = run_range(number)[1]
        while True:

            def check(
                txn: Txn, start: bytes = start, before: Ordered = previous
            ) -> tuple[int, bytes | None, list[Problem], int, int, Ordered]:
                found: list[Problem] = []
                own = unread = seen = 0
                last = None
                for key, value in txn.scan(EVENTS, start, stop, limit=_CHUNK):
                    seen += 1
                    last = key
                    offset = EVENTS.second(key)
                    if offset > rec.head:
                        found.append(Problem(run_id, offset, "index", f"an entry lies past the run's head {rec.head}"))
                    try:  # position and id only: the fold decodes the event
                        position, event_id = self._codec.decode_entry_id(value, key)
                    except CorruptRecordError:
                        unread += 1
                        continue  # named by the fold
                    if txn.get(FEED, FEED.key(position)) != key:
                        message = f"feed position {position} does not point at it"
                        found.append(Problem(run_id, offset, "feed", message, position))
                    if position <= before[0]:
                        message = (
                            f"feed position {position} is not above {before[0]}, the position of offset {before[1]}"
                        )
                        found.append(Problem(run_id, offset, "feed", message, position))
                    before = (position, offset)
                    if own_slot(prefix, event_id) == (number, offset):
                        own += 1
                    elif ids_indexed and txn.get(EVENT_IDS, EVENT_IDS.key(number, event_id)) != EVENTS.tail(key):
                        found.append(Problem(run_id, offset, "index", f"event id {event_id!r} is not indexed to it"))
                return seen, last, found, own, unread, before

            seen, last, found, own_here, unread_here, previous = self._store.read(check)
            problems.extend(found)
            own += own_here
            unread += unread_here
            count += seen
            if last is None or seen < _CHUNK:
                break
            start = last + b"\x00"
        if ids_indexed:
            indexed = self._store.read(lambda txn: self._count_ids_above(txn, number, rec.base))
            if not count - own - unread <= indexed <= count - own:
                problems.append(
                    Problem(run_id, None, "index", f"{indexed} event ids index the run's {count - own} entries")
                )
        return problems

    @staticmethod
    def _count_ids_above(txn: Txn, number: int, base: int) -> int:
        start, stop = run_range(number)
        return sum(1 for _, v in scan_chunks(txn, EVENT_IDS, start, stop) if len(v) != 8 or from_u64(v) > base)

    def feed(self) -> list[Problem]:
        """Every feed position must name a run that has that number, an offset of the run's own
        (above its base and its fork point, at most its head), and an entry that holds that
        position; but the positions an unfinished removal has yet to remove are skipped (its
        marks read in the same transaction: a prune that began meanwhile is one too)."""
        problems: list[Problem] = []
        start = b""
        while True:

            def check(txn: Txn, start: bytes = start) -> tuple[int, bytes, list[Problem]]:
                removing = dict(self._runs.removals(txn))
                pairs = txn.scan(FEED, start, None, limit=_CHUNK)
                cache: dict[int, tuple[str, RunRecord | None]] = {}
                found = [
                    problem
                    for key, ref in pairs
                    if (problem := _position_problem(self._runs, self._codec, txn, from_u64(key), ref, removing, cache))
                    is not None
                ]
                return len(pairs), (pairs[-1][0] + b"\x00" if pairs else start), found

            seen, start, found = self._store.read(check)
            problems.extend(found)
            if seen < _CHUNK:
                return problems


def number_problems(runs: Runs, txn: Txn, run_id: str, rec: RunRecord) -> list[Problem]:
    """The run's number must be one the log gave, and be indexed to the run: feed positions
    name runs by number, so a run whose number is wrong has its entries shown as another's."""
    out = []
    given = runs.meta_int(txn, META_RUN_NUMBER)
    if rec.number < 1 or (txn.dense and rec.number > given):  # PostgreSQL: numbers from a sequence
        hint = "; log.repair() raises the log's counter" if rec.number > given else ""
        out.append(
            Problem(run_id, None, "index", f"run number {rec.number} is not one the log gave (1..{given}){hint}")
        )
    named = txn.get(RUN_NUMBERS, RUN_NUMBERS.key(rec.number))
    if named != run_id.encode():
        whose = "no run" if named is None else repr(bytes(named).decode("utf-8", "replace"))
        out.append(Problem(run_id, None, "index", f"the run's number {rec.number} is indexed to {whose}"))
    return out


def index_problems(runs: Runs, txn: Txn) -> list[Problem]:
    """Each indexed run number must be the number of the run it names."""
    out = []
    for key, value in scan_chunks(txn, RUN_NUMBERS, b"", None):
        number, run_id = from_u64(key), bytes(value).decode("utf-8", "replace")
        try:
            rec = runs.get(txn, run_id)
        except EventLogError:
            continue  # a damaged record is named by its run's check, an invalid id is not a run
        if rec is None or rec.number != number:
            has = "is gone" if rec is None else f"has number {rec.number}"
            out.append(Problem(run_id, None, "index", f"run number {number} is indexed to run {run_id!r}, which {has}"))
    return out


def strays(runs: Runs, txn: Txn) -> tuple[list[tuple[Table, int]], int] | None:
    """(table, number) for each run number a table keyed by run holds rows of though no run has
    it, nor a delete or prune yet to finish (what is left of a run that is gone; new runs would
    be refused that number), and the highest number a run has; None when a run record does not
    decode (its number, unknown, could be any of them). The tables are read before the runs: a
    PostgreSQL write transaction reads each statement as of its start, and a run's rows and its
    record are committed together."""
    held = [(table, number) for table in _RUN_TABLES for number in txn.numbers(table)]
    removing = {number for number, _ in runs.removals(txn)}
    live = {0}
    try:
        for run_id in runs.run_ids(txn):
            rec = runs.get(txn, run_id)
            if rec is not None:
                live.add(rec.number)
    except EventLogError:
        return None
    return [(t, n) for t, n in held if n not in live and n not in removing], max(live)


def stray_problems(runs: Runs, txn: Txn) -> list[Problem]:
    """`strays` as problems (a counter below a run's number is named by `number_problems`)."""
    found = strays(runs, txn)  # None: the damaged record is named by the runs listing or its run's check
    message = "{} holds rows of run number {}, which no run has; log.repair() removes them"
    return [Problem(None, None, "index", message.format(*row)) for row in (found[0] if found is not None else [])]


_RUN_TABLES = (EVENTS, EVENT_IDS, CHECKPOINTS, CHECKPOINT_IDS, SNAPSHOTS)


def _position_problem(
    runs: Runs,
    codec: Codec,
    txn: Txn,
    position: int,
    ref: bytes,
    removing: dict[int, int],
    cache: dict[int, tuple[str, RunRecord | None]],
) -> Problem | None:
    """What is wrong with one feed position (None: nothing). `cache` holds the run of each number."""
    if not FEED.well_formed(ref):
        return Problem(None, None, "feed", f"feed position {position} is malformed", position)
    number, offset = FEED.parse_ref(ref)
    if offset <= removing.get(number, -1):
        return None  # a delete or prune has yet to remove it
    if number not in cache:
        raw = txn.get(RUN_NUMBERS, RUN_NUMBERS.key(number))
        run_id = f"#{number}" if raw is None else bytes(raw).decode("utf-8", "replace")
        try:
            cache[number] = run_id, None if raw is None else runs.get(txn, run_id)
        except EventLogError:
            return None  # a damaged record is named by its run's check
    run_id, rec = cache[number]
    where = f"feed position {position} points at run number {number} offset {offset}"
    if rec is None or rec.number != number:
        has = "a number no run has" if rec is None else f"indexed to run {run_id!r}, whose number is {rec.number}"
        return Problem(run_id, offset, "feed", f"{where}, {has}", position)
    if not max(rec.base, rec.fork_offset) < offset <= rec.head:
        lo = max(rec.base, rec.fork_offset) + 1
        return Problem(run_id, offset, "feed", f"{where}, outside the run's own offsets {lo}..{rec.head}", position)
    value = txn.get(EVENTS, ref)
    if value is None:
        return Problem(run_id, offset, "feed", f"feed position {position} points at a missing entry", position)
    try:
        held, _ = codec.decode_entry_id(value, ref)
    except CorruptRecordError:
        return None  # named by the fold
    if held != position:
        return Problem(run_id, offset, "feed", f"{where}, whose entry has position {held}", position)
    return None
