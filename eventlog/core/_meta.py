"""Opening a log: the format record, the limits stored in the log, and migrations of older formats.

Migrations are an ordered list; each runs in bounded write transactions and is idempotent,
and the format record is raised only once its migration finished, so a migration cut
short by a crash runs again at the next open (docs/format.md, "Versions").
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial

from .. import _limits
from ..errors import CorruptRecordError, FormatVersionError, KeyMismatchError, NoLogError, NotALogError
from ..record._keys import (
    META_FORMAT,
    META_KEY_CHECK,
    META_LOG_ID,
    META_RECORD_SIZE_MAX,
    META_SEALED,
    u64,
)
from ..record.codec import RAW, Codec, frame, unframe
from ..record.tables import CHECKPOINTS, EVENT_IDS, EVENTS, META, RUNS, SNAPSHOTS
from ..store._base import TABLES, KeyExistsError, Store, Txn
from ._dictionaries import Dictionaries
from ._runs import Runs

_LOG_ID_BYTES = 16

KEY_SOURCES = "eventlog.open(path, key=...); on the command line --key-file PATH or EVENTLOG_KEY_FILE"
"""Where a key is given, as errors name it."""


def open_meta(store: Store, codec: Codec, runs: Runs, dictionaries: Dictionaries) -> int:
    """Check (or write, for a new log) the format and the seal, adopt the stored limits, migrate an
    older format when the log is writable. Returns the log's format version after opening."""

    def check(txn: Txn) -> tuple[int, int]:
        raw = txn.get(META, META_FORMAT)
        if raw is None:
            held = [table for table in TABLES if txn.scan(table, b"", None, limit=1)]
            if held:  # the format record is written in the first transaction of every log
                raise NotALogError(
                    f"the store holds data (in {', '.join(held)}) but no format record; it is not an eventlog log"
                )
            return 0, 0
        try:
            version = runs.meta_int(txn, META_FORMAT)
            stored_limit = runs.meta_int(txn, META_RECORD_SIZE_MAX)
        except CorruptRecordError as exc:
            raise NotALogError(f"the log's format record is damaged ({exc.what})") from None
        if version > _limits.format_version:
            raise FormatVersionError(
                f"the log was written in format version {version}; this eventlog reads up to "
                f"{_limits.format_version}. Upgrade eventlog to open it"
            )
        check_seal(txn, codec, runs, version)
        dictionaries.open(txn)
        return version, stored_limit

    version, stored_limit = store.read(check)
    if version == 0:
        if store.readonly:
            raise NoLogError("there is no log to open read-only")
        try:
            store.write(partial(_create, codec=codec, runs=runs))
        except KeyExistsError:
            pass  # another process created the log meanwhile (a store without a global lock)
        version, stored_limit = store.read(check)  # the log as created, by this process or another
    # Records written under a larger limit than this process's stay readable.
    codec.read_size_bytes_max = max(codec.record_size_bytes_max, stored_limit or _limits.record_size_bytes_max)
    if store.readonly:
        return version
    for target, migrate in _MIGRATIONS:
        if version < target:
            migrate(store, codec, runs)
            store.write(partial(runs.put_meta_int, key=META_FORMAT, value=target))
            version = target
    if codec.read_size_bytes_max != stored_limit:  # a larger limit than stored, or a log of format 1
        store.write(lambda txn: runs.put_meta_int(txn, META_RECORD_SIZE_MAX, codec.read_size_bytes_max))
    return version


def _create(txn: Txn, codec: Codec, runs: Runs) -> None:
    """Write a new log's meta: format, limit, id and seal, once (another process may have been first)."""
    if txn.get(META, META_FORMAT) is not None:
        return
    txn.insert(META, META_FORMAT, frame(u64(_limits.format_version), RAW, 0))  # a second creator fails here
    runs.put_meta_int(txn, META_RECORD_SIZE_MAX, codec.record_size_bytes_max)
    _seal(txn, codec, runs, _new_log_id(txn))


def _new_log_id(txn: Txn) -> bytes:
    log_id = os.urandom(_LOG_ID_BYTES)
    txn.put(META, META_LOG_ID, frame(log_id, RAW, 0))
    return log_id


def _seal(txn: Txn, codec: Codec, runs: Runs, log_id: bytes) -> None:
    """Record whether the log is sealed and, when it is, the key check bound to the log."""
    runs.put_meta_int(txn, META_SEALED, int(codec.sealed))
    if codec.sealed:
        codec.bind(log_id, unbound=False)
        txn.put(META, META_KEY_CHECK, codec.compress(_KEY_CHECK_BOUND, 0, (META, META_KEY_CHECK)))


_KEY_CHECK = b"eventlog key check"
"""The sealed content of `key.check` in a log sealed before format 3 (bound to nothing)."""
_KEY_CHECK_BOUND = b"eventlog key check; values bound to their place"
"""The sealed content of `key.check` once every value is bound to its place: a log whose key.check
says so never reads an unbound value again, whatever its format record says."""


def check_seal(txn: Txn, codec: Codec, runs: Runs, version: int) -> None:
    """Refuse, by name, every mismatch between the log's seal and the key given (none, or another),
    and bind the codec to the log. A log is sealed when it is created with a key, and only then;
    before format 3 that was recorded by the presence of `key.check`."""
    log_id = _log_id(txn)
    if version >= 3:
        if log_id is None:
            raise NotALogError("the log's id (meta log.id) is missing or damaged")
        try:
            sealed = runs.meta_int(txn, META_SEALED)
        except CorruptRecordError as exc:
            raise NotALogError(f"the log's seal record (meta sealed) is damaged ({exc.what})") from None
        if txn.get(META, META_SEALED) is None or sealed not in (0, 1):
            raise NotALogError("the log's seal record (meta sealed) is missing or damaged")
    else:
        sealed = int(txn.get(META, META_KEY_CHECK) is not None)
    if not sealed:
        if txn.get(META, META_KEY_CHECK) is not None:
            raise NotALogError(
                "the log's seal record (meta sealed) says it is not sealed, but it holds a key check "
                "(meta key.check): the seal record was damaged or changed"
            )
        if codec.sealed:
            raise KeyMismatchError(
                "a key was given, but the log is not sealed (not encrypted): it was created without a key, and whether "
                "a log is sealed is fixed when it is created; open it without a key"
            )
        codec.bind(log_id or b"", unbound=False)
        return
    if not codec.sealed:
        raise KeyMismatchError(f"the log is sealed (encrypted); open it with its key ({KEY_SOURCES})")
    raw = txn.get(META, META_KEY_CHECK)
    if raw is None:
        raise NotALogError("the log is sealed but its key check (meta key.check) is missing")
    codec.bind(log_id or b"", unbound=False)
    if log_id is not None and _opens(codec, raw) == _KEY_CHECK_BOUND:
        return  # bound: every value is, and an unbound one is refused
    if version < 3:
        codec.bind(log_id or b"", unbound=True)  # sealed before format 3: read as it is, migrated to write
        if _opens(codec, raw) == _KEY_CHECK:
            return
    raise KeyMismatchError(
        "the key does not open this log's key check (meta key.check): the log was sealed with "
        "another key, or key.check was damaged or copied from another log"
    )


def _opens(codec: Codec, raw: bytes) -> bytes | None:
    try:
        return codec.payload(raw, (META, META_KEY_CHECK))
    except CorruptRecordError:
        return None


def _log_id(txn: Txn) -> bytes | None:
    raw = txn.get(META, META_LOG_ID)
    if raw is None:
        return None
    try:
        compression, _, log_id = unframe(raw)
    except CorruptRecordError:
        return None
    return log_id if compression == RAW and len(log_id) == _LOG_ID_BYTES else None


def _index_every_event_id(store: Store, codec: Codec, runs: Runs) -> None:
    """Format 1 -> 2: format 1 indexed only the event ids callers chose; every id is indexed
    from format 2 on (an id is unique in its run). An id indexed already keeps its first offset."""
    start = b""
    while True:

        def chunk(txn: Txn, start: bytes = start) -> bytes | None:
            pairs = txn.scan(EVENTS, start, None, limit=_limits.migrate_chunk_entries)
            for key, value in pairs:
                try:
                    _, event_id = codec.decode_entry_id(value, key)
                except CorruptRecordError:
                    continue  # verify names it
                index = EVENT_IDS.key(EVENTS.number_of(key), event_id)
                if txn.get(EVENT_IDS, index) is None:
                    txn.put(EVENT_IDS, index, EVENTS.tail(key))
            return pairs[-1][0] + b"\x00" if len(pairs) == _limits.migrate_chunk_entries else None

        following = store.write(chunk)
        if following is None:
            return
        start = following


def _bind_seals(store: Store, codec: Codec, runs: Runs) -> None:
    """Format 2 -> 3: the log gets an id and records whether it is sealed; in a sealed log every
    sealed value (bound to nothing before) is sealed again bound to the log, its table and its key,
    in transactions of 4,096 values; the key check is sealed again last, and from then on no
    unbound value is read. A value that does not open is left as it is (verify names it)."""
    log_id = store.write(lambda txn: _log_id(txn) or _new_log_id(txn))
    if codec.sealed:
        codec.bind(log_id, unbound=True)
        for table in (META, RUNS, EVENTS, CHECKPOINTS, SNAPSHOTS):
            start = b""
            while True:

                def chunk(txn: Txn, table: str = table, start: bytes = start) -> bytes | None:
                    pairs = txn.scan(table, start, None, limit=_limits.migrate_chunk_entries)
                    for key, value in pairs:
                        if table == META and key == META_KEY_CHECK:
                            continue  # sealed again last
                        try:
                            bound = codec.reseal(value, (table, key))
                        except CorruptRecordError:
                            continue
                        if bound is not None:
                            txn.put(table, key, bound)
                    return pairs[-1][0] + b"\x00" if len(pairs) == _limits.migrate_chunk_entries else None

                following = store.write(chunk)
                if following is None:
                    break
                start = following
    store.write(lambda txn: _seal(txn, codec, runs, log_id))


def _own_event_ids(store: Store, codec: Codec, runs: Runs) -> None:
    """Format 3 -> 4: the event ids the log draws itself from now on are made from the run number
    and offset of their entry (docs/format.md, "Event ids") and are not indexed. Every id stored
    before stays indexed and is found as before, so nothing is rewritten: the format record, raised
    after this, is what keeps an older eventlog (which would look such ids up in the index alone)
    from writing to the log."""


_MIGRATIONS: list[tuple[int, Callable[[Store, Codec, Runs], None]]] = [
    (2, _index_every_event_id),
    (3, _bind_seals),
    (4, _own_event_ids),
]
"""(format version, migration to it), in order."""
