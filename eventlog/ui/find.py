"""Finding things, on the server: the runs list filtered and sorted, and events found in a run.

The runs list keeps one summary per run between requests (`RunIndex`) and summarizes a run
again only when its life, head or base changed, so that a filter or a sort over every run
costs one `run_info` per run, not a read of its events. Inside a run, a filter (a kind, a
text) and "the next error" read the run forward or backward in bounded scans
(`scan_events_max` events per request): a search that has not reached its end says where it
stopped, and the page asks again from there.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import Any

import msgspec

from eventlog import Entry, EventLog, EventLogError, RunInfo
from eventlog.errors import CorruptRecordError, RunReplacedError, UnknownKindError, UnknownRunError

from .model import RunSummary, Window, fields_of, kind_of, page_events, summary_of

__all__ = [
    "EventFilter",
    "RunFilter",
    "RunIndex",
    "families",
    "find",
    "matching_window",
    "scan_backward",
    "scan_forward",
    "select_runs",
]

scan_events_max = 20_000
"""Events one request reads when it looks for matches in a run; a longer search goes on in the next request."""
text_chars_max = 200
"""The longest text a search inside a run takes."""
backward_chunk_events = 1024
"""Events read at once when a search goes back."""
changed_entries_max = 10_000
"""Feed entries the runs list reads to learn which runs changed since its last request; more,
and it checks every run's `run_info` instead."""

SORTS = {"activity": "newest activity first", "created": "newest first", "id": "by id", "events": "most events first"}
"""The orders of the runs list (the first is the default)."""
SINCE = {"": "any time", "1h": "last hour", "24h": "last 24 hours", "7d": "last 7 days", "30d": "last 30 days"}
"""How recent a run's last activity must be to be listed."""
_SINCE_SECONDS = {"1h": 3600, "24h": 86400, "7d": 7 * 86400, "30d": 30 * 86400}
STATUSES = ("running", "paused", "failed", "completed", "idle", "empty", "unreadable")
"""The statuses the runs list can be filtered by."""
FAMILIES = ("run", "turn", "message", "llm", "tool", "step", "superstep", "state", "interrupted", "resumed")
"""The kind families of the standard events, offered by the filter of a run's events."""


# -- the runs list ------------------------------------------------------------------------------


class RunFilter(msgspec.Struct, frozen=True):
    """What the runs list is asked for: the runs matching every field set, in one order."""

    query: str = ""
    """A part of the run id (case-insensitive)."""
    status: str = ""
    kind: str = ""
    """`conversation`, `graph`, `events`, or an integration's view name (`langgraph`)."""
    since: str = ""
    """A key of `SINCE`: the run's last activity at most this long ago."""
    sort: str = "activity"

    @property
    def narrowed(self) -> bool:
        return bool(self.query or self.status or self.kind or self.since)

    def matches(self, row: RunSummary, now_ns: int) -> bool:
        if self.query and self.query.casefold() not in row.info.run_id.casefold():
            return False
        if self.status and row.status != self.status:
            return False
        if self.kind and row.kind != self.kind:
            return False
        return not self.since or row.last_ns >= now_ns - _SINCE_SECONDS[self.since] * 1_000_000_000


def _sort_key(sort: str) -> Any:
    if sort == "created":
        return lambda r: (-r.info.created_ns, r.info.run_id)
    if sort == "id":
        return lambda r: r.info.run_id.encode()
    if sort == "events":
        return lambda r: (-r.info.head, r.info.run_id)
    return lambda r: (-r.last_ns, r.info.run_id)


class RunIndex:
    """Every run's summary, kept between requests.

    At each request, the feed's entries committed since the last one say which runs changed
    (at most `changed_entries_max` of them are read; past that, or when the feed does not
    read, every run's `run_info` is checked); run ids that came or went are found in
    `log.runs()`. A run is summarized again when its life, head or base changed. The rows a
    page shows get a fresh `run_info` (`fresh`): their counts of checkpoints and forks, and a
    run made again under its id with no events yet, are never stale. Memory: one summary a run."""

    def __init__(self) -> None:
        self._kept: dict[str, RunSummary] = {}
        self._position: int | None = None
        self._lock = threading.Lock()

    def summaries(self, log: EventLog[Any]) -> list[RunSummary]:
        """A summary of every run of the log, in id order."""
        with self._lock:
            position = log.position()
            touched = self._touched(log, position)
            kept: dict[str, RunSummary] = {}
            for run_id in log.runs():
                old = self._kept.get(run_id)
                if old is not None and touched is not None and run_id not in touched:
                    kept[run_id] = old
                    continue
                try:
                    info = log.run_info(run_id)
                except UnknownRunError:
                    continue  # deleted since the list was read
                row = self._summary(log, info, old)
                if row is not None:
                    kept[run_id] = row
            self._kept, self._position = kept, position
            return [msgspec.structs.replace(r, depth=0, children=[]) for r in kept.values()]

    def fresh(self, log: EventLog[Any], rows: list[RunSummary]) -> list[RunSummary]:
        """`rows` with a fresh `run_info` each (summarized again if the run changed; gone if deleted)."""
        out = []
        for row in rows:
            try:
                info = log.run_info(row.info.run_id)
            except UnknownRunError:
                continue
            new = self._summary(log, info, row)
            if new is not None:
                out.append(msgspec.structs.replace(new, depth=row.depth, children=row.children))
        return out

    def _touched(self, log: EventLog[Any], position: int) -> set[str] | None:
        """The runs with entries committed since the last request (None: check every run)."""
        if self._position is None or position < self._position:
            return None
        if position - self._position > changed_entries_max:
            return None
        try:
            return {e.run_id for e in log.feed(after=self._position, limit=position - self._position)}
        except EventLogError:  # a damaged entry, a kind not registered: check every run
            return None

    @staticmethod
    def _summary(log: EventLog[Any], info: RunInfo, old: RunSummary | None) -> RunSummary | None:
        if old is not None and (old.info.number, old.info.head, old.info.base) == (info.number, info.head, info.base):
            return msgspec.structs.replace(old, info=info)
        try:
            return summary_of(log, info)
        except (RunReplacedError, UnknownRunError):
            return None  # deleted (and made again) since its info was read
        except (UnknownKindError, CorruptRecordError) as exc:  # one run that does not read spoils no other
            return RunSummary(info, "?", "unreadable", info.created_ns, problem=str(exc))


def select_runs(
    summaries: list[RunSummary], wanted: RunFilter, page: int, per_page: int, now_ns: int | None = None
) -> tuple[list[RunSummary], int]:
    """(the rows of one page of the runs that match `wanted`, in its order, each fork right under
    the run it was forked from when both are on the page, a tree where its first run in the
    order is; the number of runs that match)."""
    now = time.time_ns() if now_ns is None else now_ns
    matched = sorted((r for r in summaries if wanted.matches(r, now)), key=_sort_key(wanted.sort))
    chosen = {r.info.run_id: r for r in matched[page * per_page : (page + 1) * per_page]}
    for row in chosen.values():
        if row.info.parent in chosen:
            chosen[row.info.parent].children.append(row.info.run_id)
    ordered: list[RunSummary] = []

    def place(row: RunSummary, depth: int) -> None:
        row.depth = depth
        ordered.append(row)
        for child in row.children:
            place(chosen[child], depth + 1)

    placed: set[str] = set()
    for row in chosen.values():  # each tree where its first run in the order is
        while row.info.parent in chosen:
            row = chosen[row.info.parent]
        if row.info.run_id not in placed:
            placed.add(row.info.run_id)
            place(row, 0)
    return ordered, len(matched)


# -- events inside a run --------------------------------------------------------------------------


class EventFilter(msgspec.Struct, frozen=True):
    """Which events of a run to show or find: of a kind, holding a text, or both."""

    kind: str = ""
    """A family (`tool`: every `tool.` kind), an exact kind (`tool.completed`), or `failed`
    (every kind that ends in `.failed`: the errors)."""
    text: str = ""
    """A text the event's kind or fields hold, as JSON (case-insensitive)."""

    def __bool__(self) -> bool:
        return bool(self.kind or self.text)

    def matches(self, entry: Entry) -> bool:
        kind = kind_of(entry.event)
        if self.kind == "failed":
            if not kind.endswith(".failed"):
                return False
        elif self.kind and kind != self.kind and not kind.startswith(self.kind + "."):
            return False
        if self.text:
            fields = msgspec.json.encode(fields_of(entry.event)).decode()
            folded = self.text.casefold()
            return folded in kind.casefold() or folded in fields.casefold()
        return True


def scan_forward(
    log: EventLog[Any], run_id: str, after: int, head: int, wanted: EventFilter, most: int, number: int
) -> tuple[list[Entry], int]:
    """(up to `most` events above offset `after` that `wanted` matches, the last offset read):
    at most `scan_events_max` events are read."""
    upto = min(head, after + scan_events_max)
    found: list[Entry] = []
    for entry in log.read(run_id, after=after, upto=upto, run_number=number):
        if wanted.matches(entry):
            found.append(entry)
            if len(found) >= most:
                return found, entry.offset
    return found, max(after, upto)


def scan_backward(
    log: EventLog[Any], run_id: str, before: int, base: int, wanted: EventFilter, most: int, number: int
) -> tuple[list[Entry], int]:
    """(up to `most` events at or below offset `before` that `wanted` matches, in offset order;
    the offset below the lowest one read): at most `scan_events_max` events are read."""
    found: list[Entry] = []
    hi, floor = before, max(base, before - scan_events_max)
    while hi > floor:
        lo = max(floor, hi - backward_chunk_events)
        for entry in reversed(list(log.read(run_id, after=lo, upto=hi, run_number=number))):
            if wanted.matches(entry):
                found.append(entry)
                if len(found) >= most:
                    return found[::-1], entry.offset - 1
        hi = lo
    return found[::-1], min(before, floor)


def matching_window(
    log: EventLog[Any], info: RunInfo, wanted: EventFilter, *, after: int | None, before: int | None, at: int | None
) -> Window:
    """A page of the events of the run `info` names that `wanted` matches (`page_events` at most):
    going back from `before`, else on from `after`, else from just before `at`, else from the
    run's start."""
    run_id, base, head, number = info.run_id, info.base, info.head, info.number
    if before is not None:
        entries, lo = scan_backward(log, run_id, before, base, wanted, page_events, number)
        return Window(run_id, base, head, lo, before, entries, filtered=True)
    if after is None:
        after = base if at is None else max(base, at - 1)
    entries, hi = scan_forward(log, run_id, after, head, wanted, page_events, number)
    return Window(run_id, base, head, after, hi, entries, filtered=True)


def find(
    log: EventLog[Any], run_id: str, start: int, forward: bool, wanted: EventFilter, info: RunInfo
) -> dict[str, Any]:
    """The first event after offset `start` (before it, going back) that `wanted` matches:
    `{"offset": k or None, "scanned": the offset the search reached, "done": nothing is left to read}`."""
    if forward:
        found, reached = scan_forward(log, run_id, start, info.head, wanted, 1, info.number)
        done = reached >= info.head
    else:
        found, reached = scan_backward(log, run_id, start - 1, info.base, wanted, 1, info.number)
        done = reached <= info.base
    offset = found[0].offset if found else None
    return {"offset": offset, "scanned": reached, "done": offset is None and done}


def families(kinds: Iterable[str]) -> list[str]:
    """The kind families the filter of a run's events offers: the standard ones, then those of `kinds`."""
    out = list(FAMILIES)
    for kind in kinds:
        family = kind.split(".", 1)[0]
        if family not in out:
            out.append(family)
    return out
