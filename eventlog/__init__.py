"""eventlog: an embedded, event-sourced, append-only checkpoint log for agent and workflow runs.

import eventlog
from eventlog.events import StepCompleted

with eventlog.open("runs.lmdb") as log:
    log.append("run-1", StepCompleted(node="step1", superstep=1, update={"value": 10}))
    log.state_at("run-1").values   # {'value': 10}
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from . import _limits, events
from .checkpoints import Checkpoint, Checkpoints
from .errors import (
    CheckpointNotFoundError,
    ClosedError,
    ConflictError,
    CorruptRecordError,
    EventLogError,
    ForkDependencyError,
    FormatVersionError,
    InvalidEventError,
    InvalidRunIdError,
    LogFullError,
    NotALogError,
    OffsetOutOfRangeError,
    PrunedError,
    ReadOnlyError,
    RecordTooLargeError,
    RunExistsError,
    UnencodableValueError,
    UnknownRunError,
)
from .events import Event, register
from .fold import AgentReducer, AgentState, CheckpointPolicy, Reducer
from .log import Entry, EventLog, Problem, RunInfo, VerifyReport
from .recorder import Recorder

__version__ = "0.1.0"

__all__ = [
    "AgentReducer",
    "AgentState",
    "Checkpoint",
    "CheckpointNotFoundError",
    "CheckpointPolicy",
    "Checkpoints",
    "ClosedError",
    "ConflictError",
    "CorruptRecordError",
    "Entry",
    "Event",
    "EventLog",
    "EventLogError",
    "ForkDependencyError",
    "FormatVersionError",
    "InvalidEventError",
    "InvalidRunIdError",
    "LogFullError",
    "NotALogError",
    "OffsetOutOfRangeError",
    "Problem",
    "PrunedError",
    "ReadOnlyError",
    "RecordTooLargeError",
    "Recorder",
    "Reducer",
    "RunExistsError",
    "RunInfo",
    "UnencodableValueError",
    "UnknownRunError",
    "VerifyReport",
    "events",
    "open",
    "register",
]


def open(
    path: str | os.PathLike[str],
    *,
    durability: str = "sync",
    readonly: bool = False,
    clock: Callable[[], int] | None = None,
    ids: Callable[[], str] | None = None,
    record_size_bytes_max: int = _limits.record_size_bytes_max,
    map_size_bytes: int = _limits.map_size_bytes_initial,
    map_size_bytes_max: int = _limits.map_size_bytes_max,
    reducer: Reducer | None = None,
) -> EventLog:
    """Open (creating if missing) the log at `path`: an LMDB directory, ":memory:", or a
    PostgreSQL URL (`postgresql://user@host/db?schema=NAME`; the schema defaults to `eventlog`).

    `durability`: `sync` (fsync at every commit, the default), `batch` (fsync at checkpoint
    boundaries and on close) or `none` (the OS decides). A killed process loses no committed
    event in any mode; see docs/format.md for what each mode survives.
    `clock` returns nanoseconds since the epoch and `ids` returns new unique id strings:
    inject them to make a run replay exactly. `reducer` is the default for state_at and
    checkpoints (AgentReducer unless given).
    """
    from .store import LMDBStore, MemoryStore

    store: Any
    if str(path) == ":memory:":
        store = MemoryStore()
    elif str(path).startswith(("postgresql://", "postgres://")):
        from .store.postgres import PostgresStore, split_dsn

        dsn, schema = split_dsn(str(path))
        store = PostgresStore(dsn, schema=schema, readonly=readonly)
    else:
        store = LMDBStore(
            path,
            durability=durability,
            readonly=readonly,
            map_size_bytes=map_size_bytes,
            map_size_bytes_max=map_size_bytes_max,
        )
    try:
        return EventLog(store, clock=clock, ids=ids, record_size_bytes_max=record_size_bytes_max, reducer=reducer)
    except BaseException:
        store.close()
        raise
