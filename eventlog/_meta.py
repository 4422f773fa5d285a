"""Opening a log: the format record, the limits stored in the log, and migrations of older formats.

Migrations are an ordered list; each runs in bounded write transactions and is idempotent,
and the format record is raised only once its migration finished, so a migration cut
short by a crash runs again at the next open (docs/format.md, "Versions").
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from . import _limits
from ._dictionaries import Dictionaries
from ._keys import META_FORMAT, META_KEY_CHECK, META_RECORD_SIZE_MAX, from_u64, id_key
from ._runs import Runs
from .codec import Codec
from .errors import CorruptRecordError, FormatVersionError, KeyMismatchError, NoLogError, NotALogError
from .store._base import TABLES, Store, Txn


def open_meta(store: Store, codec: Codec, runs: Runs, dictionaries: Dictionaries) -> int:
    """Check (or write, for a new log) the format, adopt the stored limits, migrate an older
    format when the log is writable. Returns the log's format version after opening."""

    def check(txn: Txn) -> tuple[int, int]:
        raw = txn.get("meta", META_FORMAT)
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
        check_key(txn, codec)
        dictionaries.open(txn)
        return version, stored_limit

    version, stored_limit = store.read(check)
    # Records written under a larger limit than this process's stay readable.
    codec.read_size_bytes_max = max(codec.record_size_bytes_max, stored_limit or _limits.record_size_bytes_max)
    if store.readonly:
        if version == 0:
            raise NoLogError("there is no log to open read-only")
        return version
    if version == 0:

        def init(txn: Txn) -> None:
            if txn.get("meta", META_FORMAT) is None:
                runs.put_meta_int(txn, META_FORMAT, _limits.format_version)
                runs.put_meta_int(txn, META_RECORD_SIZE_MAX, codec.record_size_bytes_max)
                if codec.sealed:
                    txn.put("meta", META_KEY_CHECK, codec.compress(_KEY_CHECK, 0))

        store.write(init)
        return _limits.format_version
    for target, migrate in _MIGRATIONS:
        if version < target:
            migrate(store, codec, runs)
            store.write(partial(runs.put_meta_int, key=META_FORMAT, value=target))
            version = target
    if codec.read_size_bytes_max != stored_limit:  # a larger limit than stored, or a log of format 1
        store.write(lambda txn: runs.put_meta_int(txn, META_RECORD_SIZE_MAX, codec.read_size_bytes_max))
    return version


_KEY_CHECK = b"eventlog key check"


def check_key(txn: Txn, codec: Codec) -> None:
    """Raise KeyMismatchError unless the log is encrypted exactly when a key was given, with that key."""
    raw = txn.get("meta", META_KEY_CHECK)
    if raw is None:
        if codec.sealed and txn.scan("runs", b"", None, limit=1):
            raise KeyMismatchError("the log is not encrypted; open it without a key")
        return
    if not codec.sealed:
        raise KeyMismatchError("the log is encrypted; open it with its key (eventlog.open(path, key=...))")
    try:
        ok = codec.payload(raw) == _KEY_CHECK
    except CorruptRecordError:
        ok = False
    if not ok:
        raise KeyMismatchError("the key does not open this log: it was encrypted with another key")


def _index_every_event_id(store: Store, codec: Codec, runs: Runs) -> None:
    """Format 1 -> 2: format 1 indexed only the event ids callers chose; every id is indexed
    from format 2 on (an id is unique in its run). An id indexed already keeps its first offset."""
    start = b""
    while True:

        def chunk(txn: Txn, start: bytes = start) -> bytes | None:
            pairs = txn.scan("events", start, None, limit=_limits.migrate_chunk_entries)
            for key, value in pairs:
                try:
                    _, event_id = codec.decode_entry_id(value)
                except CorruptRecordError:
                    continue  # verify names it
                index = id_key(from_u64(key[:8]), event_id)
                if txn.get("event_ids", index) is None:
                    txn.put("event_ids", index, key[8:16])
            return pairs[-1][0] + b"\x00" if len(pairs) == _limits.migrate_chunk_entries else None

        following = store.write(chunk)
        if following is None:
            return
        start = following


_MIGRATIONS: list[tuple[int, Callable[[Store, Codec, Runs], None]]] = [(2, _index_every_event_id)]
"""(format version, migration to it), in order."""
