"""Reads of ADK sessions over the log: a session's events read from the run's end, the keys an
app or user run set after a feed position, and the session runs of a prefix. Each reads a range
whose size follows what it returns, not the length of the run."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from google.adk.sessions.base_session_service import GetSessionConfig

from ..errors import PrunedError
from ..log import EventLog
from ._events import AdkEvent, ScopedState

__all__ = ["events_of", "session_runs", "set_after"]

_READ_CHUNK_MIN = 32
"""Offsets read at least at once from a session's end when `num_recent_events` bounds the read (doubling)."""
_SCAN_CHUNK = 16
"""Offsets of an app or user run read at once, from its end, when settling a session (doubling)."""


def events_of(
    log: EventLog[Any], run: str, number: int, start: int, head: int, config: GetSessionConfig | None
) -> list[AdkEvent]:
    """The session's events in (start, head] that `config` asks for, read from the run's end; of
    a session pruned (or forked from a pruned one), those kept after its base."""
    try:
        return _events_of(log, run, number, start, head, config)
    except PrunedError as exc:
        if exc.base <= start:
            raise
        return _events_of(log, run, number, exc.base, head, config)


def _events_of(
    log: EventLog[Any], run: str, number: int, start: int, head: int, config: GetSessionConfig | None
) -> list[AdkEvent]:
    """ADK's filter (its three services alike): the events stamped at or after `after_timestamp`,
    in order, then the last `num_recent_events` of them."""
    n = None if config is None else config.num_recent_events
    after_ts = None if config is None else config.after_timestamp
    if n == 0:
        return []
    if n is None:  # every event may pass the stamp's filter: stamps need not grow
        events = [e.event for e in log.read(run, start, head, run_number=number) if isinstance(e.event, AdkEvent)]
        return events if after_ts is None else [ev for ev in events if ev.timestamp >= after_ts]
    out: list[AdkEvent] = []
    upto, size = head, max(n, _READ_CHUNK_MIN)  # n events take n offsets but for a fork mark
    while upto > start:
        after = max(start, upto - size)
        chunk = [e.event for e in log.read(run, after, upto, run_number=number) if isinstance(e.event, AdkEvent)]
        for ev in reversed(chunk):
            if after_ts is None or ev.timestamp >= after_ts:
                out.append(ev)
                if len(out) >= n:
                    out.reverse()
                    return out
        upto, size = after, size * 2
    out.reverse()
    return out


def set_after(log: EventLog[Any], run: str, position: int) -> set[str]:
    """The keys the changes of app or user run `run` committed after feed position `position` set."""
    keys: set[str] = set()
    number, upto = log.life(run)
    size = _SCAN_CHUNK
    while upto > 0:
        after = max(0, upto - size)
        chunk = list(log.read(run, after, upto, run_number=number))
        for entry in chunk:
            if entry.position > position and isinstance(entry.event, ScopedState):
                keys.update(entry.event.delta)
        if chunk and chunk[0].position <= position:
            break
        upto, size = after, size * 2
    return keys


def session_runs(log: EventLog[Any], prefix: str, after: str | None = None) -> Iterator[str]:
    """Run ids that start with `prefix`, in key order, after `after` when given."""
    for rid in log.iter_runs(after=after or prefix[:-1]):
        if rid.startswith(prefix):
            yield rid
        elif rid > prefix:
            return
