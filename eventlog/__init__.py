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
from typing import Any, TypeGuard, TypeVar, overload

from . import _limits, errors, events
from .agent.policy import CheckpointPolicy
from .agent.state import AgentReducer, AgentState
from .core.fold import Reducer
from .errors import ConflictError, EventLogError, InvalidArgumentError
from .events import Event, register
from .log import Entry, EventLog, Problem, RunInfo, VerifyReport
from .services.checkpoints import Checkpoint, Checkpoints
from .services.runwriter import RunWriter
from .store._base import Store

__version__ = "0.1.0"

__all__ = [
    "AgentReducer",
    "AgentState",
    "Checkpoint",
    "CheckpointPolicy",
    "Checkpoints",
    "ConflictError",
    "Entry",
    "Event",
    "EventLog",
    "EventLogError",
    "Problem",
    "Reducer",
    "RunInfo",
    "RunWriter",
    "VerifyReport",
    "errors",
    "events",
    "open",
    "register",
]


S = TypeVar("S")

_PG_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg", "postgres+psycopg")
_APPLIES = {
    "lmdb": {"durability", "map_size_bytes", "map_size_bytes_max"},
    "postgres": {"pool_size"},
    "memory": set(),
    "store": set(),
}
_LABEL = {
    "lmdb": "an LMDB log",
    "postgres": "a PostgreSQL log",
    "memory": "an in-memory log",
    "store": "a store given as an object",
}


@overload
def open(
    path: str | os.PathLike[str] | Store,
    *,
    durability: str | None = None,
    readonly: bool = False,
    create: bool = True,
    clock: Callable[[], int] | None = None,
    ids: Callable[[], str] | None = None,
    record_size_bytes_max: int = _limits.record_size_bytes_max,
    map_size_bytes: int | None = None,
    map_size_bytes_max: int | None = None,
    pool_size: int | None = None,
    key: bytes | None = None,
    reducer: None = None,
) -> EventLog[AgentState]: ...


@overload
def open(
    path: str | os.PathLike[str] | Store,
    *,
    durability: str | None = None,
    readonly: bool = False,
    create: bool = True,
    clock: Callable[[], int] | None = None,
    ids: Callable[[], str] | None = None,
    record_size_bytes_max: int = _limits.record_size_bytes_max,
    map_size_bytes: int | None = None,
    map_size_bytes_max: int | None = None,
    pool_size: int | None = None,
    key: bytes | None = None,
    reducer: Reducer[S],
) -> EventLog[S]: ...


def open(
    path: str | os.PathLike[str] | Store,
    *,
    durability: str | None = None,
    readonly: bool = False,
    create: bool = True,
    clock: Callable[[], int] | None = None,
    ids: Callable[[], str] | None = None,
    record_size_bytes_max: int = _limits.record_size_bytes_max,
    map_size_bytes: int | None = None,
    map_size_bytes_max: int | None = None,
    pool_size: int | None = None,
    key: bytes | None = None,
    reducer: Reducer[Any] | None = None,
) -> EventLog[Any]:
    """Open the log at `path`: an LMDB directory, ":memory:", or a PostgreSQL URL
    (`postgresql://user@host/db?schema=NAME`; the schema defaults to `eventlog`), or the log
    on a store given as an object (one of `eventlog.store`'s, or a store of your own).

    A missing log is created unless `create=False` (then NotALogError). A directory, LMDB
    database or PostgreSQL schema that holds something else (another program's files,
    tables or named databases) is refused with NotALogError and left as it was.
    `durability` (LMDB): `sync` (fsync at every commit, the default), `batch` (fsync at
    checkpoint boundaries and on close) or `none` (the OS decides). A killed process loses
    no committed event in any mode; see docs/durability.md for what each mode survives.
    `map_size_bytes` and `map_size_bytes_max` (LMDB): the map's first and largest size.
    `pool_size` (PostgreSQL): connections kept open at most (default 8).
    `clock` returns nanoseconds since the epoch and `ids` returns new unique id strings:
    inject them to make a run replay exactly. `key`: a 32-byte key that seals every
    record, bound to its place (AES-GCM; needs `pip install 'eventlog[crypto]'`); the key is
    never stored. A log is sealed when it is created with a key, and only then: a key for a
    log that is not sealed, none for a sealed log and a wrong key are KeyMismatchError.
    `reducer` is the default for state_at and checkpoints (AgentReducer unless given).
    An option that does not apply to the chosen store is refused (InvalidArgumentError).
    """
    from .store import LMDBStore, MemoryStore

    options = {
        "durability": durability,
        "map_size_bytes": map_size_bytes,
        "map_size_bytes_max": map_size_bytes_max,
        "pool_size": pool_size,
    }
    if _is_store(path):
        kind, where, scheme = "store", "", None
    else:
        where, scheme = _where(path)
        kind = "memory" if where == ":memory:" else "lmdb" if scheme is None else "postgres"
    wrong = [name for name, value in options.items() if value is not None and name not in _APPLIES[kind]]
    if kind in ("memory", "store") and readonly:
        wrong.append("readonly")
    if kind == "store" and not create:
        wrong.append("create")
    if wrong:
        raise InvalidArgumentError(f"{', '.join(wrong)} does not apply to {_LABEL[kind]}")
    cipher = _cipher(key)  # a bad key is refused before anything is opened
    store: Any
    if _is_store(path):
        return _log(path, clock, ids, record_size_bytes_max, reducer, cipher)
    if where == ":memory:":
        store = MemoryStore()
    elif scheme is not None:
        if scheme not in _PG_SCHEMES:
            raise InvalidArgumentError(
                f"{scheme}:// is not a log this eventlog opens; use a directory path, ':memory:' or postgresql://"
            )
        from .store.postgres import PostgresStore, split_dsn

        dsn, schema = split_dsn(where)
        store = PostgresStore(dsn, schema=schema, readonly=readonly, create=create, pool_size=pool_size)
    else:
        store = LMDBStore(
            where,
            durability=durability or "sync",
            readonly=readonly,
            create=create,
            map_size_bytes=map_size_bytes or _limits.map_size_bytes_initial,
            map_size_bytes_max=map_size_bytes_max or _limits.map_size_bytes_max,
        )
    try:
        return _log(store, clock, ids, record_size_bytes_max, reducer, cipher)
    except BaseException:
        store.close()
        raise


def _where(path: object) -> tuple[str, str | None]:
    """The path as text, and its URL scheme (None for a directory or ":memory:")."""
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidArgumentError(f"path must be a directory path, ':memory:' or a PostgreSQL URL, not {path!r}")
    where = os.fspath(path)
    if not isinstance(where, str) or not where or "\x00" in where:
        raise InvalidArgumentError(f"path must be a non-empty text path, not {path!r}")
    try:
        os.fsencode(where)
    except UnicodeEncodeError:
        raise InvalidArgumentError(f"path {where!r} cannot be encoded for the file system") from None
    return where, (where.split("://", 1)[0].lower() if "://" in where else None)


def _is_store(value: object) -> TypeGuard[Store]:
    return not isinstance(value, (str, os.PathLike)) and all(
        callable(getattr(value, name, None)) for name in ("read", "write", "sync", "close")
    )


def _cipher(key: bytes | None) -> Any:
    if key is None:
        return None
    from .record.crypto import AESGCMCipher

    return AESGCMCipher(key)


def _log(
    store: Store,
    clock: Callable[[], int] | None,
    ids: Callable[[], str] | None,
    record_size_bytes_max: int,
    reducer: Reducer[Any] | None,
    cipher: Any,
) -> EventLog[Any]:
    """The log on `store`, with the agent layer's defaults: `AgentReducer`, and writers that
    checkpoint after every event."""
    return EventLog(
        store,
        clock=clock,
        ids=ids,
        record_size_bytes_max=record_size_bytes_max,
        reducer=reducer or AgentReducer(),
        policy=CheckpointPolicy.every(1),
        cipher=cipher,
    )
