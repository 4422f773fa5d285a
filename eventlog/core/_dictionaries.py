"""zstd dictionaries trained from the log's own records, off the commit path.

The first dictionary is trained once the log holds 64 events, a new one each time the
count grows eightfold (docs/format.md, "Frames"). The count is the last feed position in a
dense store; on PostgreSQL, whose positions come from transaction ids, the server's count
of the feed's rows, or this process's own count when larger (`Txn.events_given`). Training runs in a background thread: it
copies a bounded sample of the latest records in a write transaction that changes nothing
(so that no commit overlaps it and keeps pages for it), opens them outside it, trains, and
a short write transaction then stores the dictionary, unless another writer stored one
meanwhile. New records use a dictionary from the transaction after it was stored; records
name the dictionary they were compressed with, so older records stay readable.
"""

from __future__ import annotations

import threading

from .. import _limits
from ..errors import CorruptRecordError, EventLogError
from ..record._keys import META_DICT, META_DICT_CURRENT, META_DICT_NEXT_TRY, dict_key, from_u64
from ..record.codec import Codec, train_dictionary
from ..record.tables import EVENTS, FEED, META
from ..store._base import Store, Txn
from ._runs import Runs


class Dictionaries:
    """Loads dictionaries for the codec and trains new ones on the schedule."""

    def __init__(self, store: Store, codec: Codec, runs: Runs) -> None:
        self._store, self._codec, self._runs = store, codec, runs
        self._next_try = 0  # the event count from which training is due; read at open
        self._count = 0  # the log's event count: as last read, and this process's events since
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def load(self, dict_id: int) -> bytes | None:
        """A dictionary's bytes from the log's meta, or None when it is missing."""
        raw = self._store.read(lambda txn: txn.get(META, dict_key(dict_id)))
        if raw is None:
            return None
        try:
            return self._codec.payload(raw, (META, dict_key(dict_id)), _limits.dictionary_size_bytes * 4)
        except CorruptRecordError as exc:  # the record that needs it is named by the caller
            raise CorruptRecordError(f"its zstd dictionary {dict_id} is damaged ({exc.what})") from None

    def open(self, txn: Txn) -> None:
        """Make every stored dictionary known to the codec and read the schedule (at open)."""
        for dict_id, data in stored_dictionaries(self._codec, txn):
            if not isinstance(data, CorruptRecordError):  # verify names it; records that use it fail by name
                self._codec.add_dictionary(dict_id, data)
        self._count = txn.events_given(self._runs.last_position(txn))
        self._next_try = _due_at(self._runs.meta_int(txn, META_DICT_NEXT_TRY), self._count)

    def after_commit(self, position: int, events: int) -> None:
        """After a commit of `events` events, the last at `position`: start training in the
        background when the log's count reached the schedule."""
        self._count = position if self._store.dense else self._count + events
        if self._count < self._next_try or self._store.readonly:
            return
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._next_try = 1 << 64  # until the thread has read the schedule again
            self._thread = threading.Thread(target=self._train, name="eventlog-dictionary", daemon=True)
            self._thread.start()

    def wait(self) -> None:
        """Wait for a training in progress (at close)."""
        thread = self._thread
        if thread is not None:
            thread.join()

    def _train(self) -> None:
        try:
            self._train_once()
        except EventLogError:
            self._next_try = 0  # the next commit looks at the schedule again

    def _train_once(self) -> None:
        known = self._count

        def sample(txn: Txn) -> tuple[int, int, int, list[tuple[bytes, bytes]]]:
            count = max(txn.events_given(self._runs.last_position(txn)), known)
            next_try = _due_at(self._runs.meta_int(txn, META_DICT_NEXT_TRY), count)
            current = self._runs.meta_int(txn, META_DICT_CURRENT)
            stored: list[tuple[bytes, bytes]] = []
            if count < next_try:
                return count, next_try, current, stored
            size = 0
            for _, ref in txn.scan(FEED, b"", None, reverse=True, limit=_limits.dictionary_sample_records_max):
                value = txn.get(EVENTS, ref)
                if value is None:
                    continue
                stored.append((ref, value))
                size += len(value)  # a payload is at least as long as its stored frame: enough are read
                if size >= _limits.dictionary_sample_size_bytes_max:
                    break
            return count, next_try, current, stored

        # The sample is read in a write transaction that changes nothing: no commit of the log
        # happens while it is read, so none has to keep pages for it (LMDB reuses a page only
        # once no reader can see it), and the file grows the same whatever the timing. Its
        # values are opened after, outside any transaction.
        count, next_try, current, stored = self._store.write(sample)
        self._count = max(self._count, count)
        if count < next_try:
            self._next_try = next_try
            return
        samples: list[bytes] = []
        size = 0
        for ref, value in stored:
            try:
                payload = self._codec.payload(value, (EVENTS, ref))
            except CorruptRecordError:
                continue
            samples.append(payload)
            size += len(payload)
            if size >= _limits.dictionary_sample_size_bytes_max:
                break
        trained = train_dictionary(samples)

        def store(txn: Txn) -> tuple[int, bool]:
            if self._runs.meta_int(txn, META_DICT_CURRENT) != current:
                return self._runs.meta_int(txn, META_DICT_NEXT_TRY), False  # another writer trained meanwhile
            if trained is None:
                self._runs.put_meta_int(txn, META_DICT_NEXT_TRY, count * 2)
                return count * 2, False
            key = dict_key(current + 1)
            # Inserted: a trainer in another process that stored this id first wins (KeyExistsError here).
            txn.insert(META, key, self._codec.compress(trained, 0, (META, key)))
            self._runs.put_meta_int(txn, META_DICT_CURRENT, current + 1)
            upcoming = count * _limits.dictionary_retrain_factor
            self._runs.put_meta_int(txn, META_DICT_NEXT_TRY, upcoming)
            return upcoming, True

        self._next_try, kept = self._store.write(store)
        if kept and trained is not None:
            self._codec.add_dictionary(current + 1, trained)


def stored_dictionaries(codec: Codec, txn: Txn) -> list[tuple[int, bytes | CorruptRecordError]]:
    """Each dictionary stored in the log's meta: its id and its bytes, or what is wrong with it."""
    out: list[tuple[int, bytes | CorruptRecordError]] = []
    for key, raw in txn.scan(META, META_DICT, META_DICT + b"\xff"):
        dict_id = from_u64(key[len(META_DICT) :])
        try:
            out.append((dict_id, codec.payload(raw, (META, key), _limits.dictionary_size_bytes * 4)))
        except CorruptRecordError as exc:
            out.append((dict_id, exc))
    return out


def _due_at(stored: int, count: int) -> int:
    """The event count at which training is due, from the schedule stored (0: none yet) and the
    log's count. A schedule is set at most `dictionary_retrain_factor` times the count it was
    set at. One further ahead than twice that is taken as due at the first count again: it was
    not set as a count (PostgreSQL logs of relational layout 1 before this rule stored a feed
    position, made of a transaction id, and so never trained again), or the count fell since
    (PostgreSQL, after deletes and a reset of the server's statistics), and one more dictionary
    is trained."""
    limit = 2 * _limits.dictionary_retrain_factor * max(count, _limits.dictionary_train_records_min)
    if not stored or stored > limit:
        return _limits.dictionary_train_records_min
    return stored
