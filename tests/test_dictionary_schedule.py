"""The zstd dictionaries on every store: a log trains its first dictionary once it holds 64
events and enough bytes of them, whoever wrote them, and later records are compressed with it
(docs/format.md, "Frames"). On PostgreSQL feed positions are made of transaction ids, not
counts: the schedule counts events there too. A damaged dictionary is named as such."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

import eventlog
from eventlog.agent.events import UserMessage
from eventlog.record import _keys
from eventlog.record._pipeline import unframe
from eventlog.record.tables import EVENTS, META

_WORDS = [
    "".join(random.Random(i).choices("abcdefghijklmnopqrstuvwxyz", k=random.Random(-i).randint(2, 9)))
    for i in range(600)
]


def _text(seed: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(_WORDS) for _ in range(170))  # about 1 KiB


def _append(log: eventlog.EventLog, run_id: str, start: int, count: int) -> None:
    for i in range(start, start + count):
        log.append(run_id, UserMessage(content=_text(i)))


def _dictionary(log: eventlog.EventLog) -> int:
    """The id of the dictionary new records use; 0 when none was trained."""
    raw = log.store.read(lambda txn: txn.get(META, _keys.META_DICT_CURRENT))
    return 0 if raw is None else _keys.from_u64(unframe(raw)[2])


def _last_compression(log: eventlog.EventLog) -> tuple[int, int]:
    """(compression byte, dictionary id) of the log's last stored event (of its last run)."""
    last = log.store.read(lambda txn: txn.scan(EVENTS, b"", None, reverse=True, limit=1))
    compression, dict_id, _ = unframe(last[0][1])
    return compression, dict_id


def test_a_log_trains_its_first_dictionary_and_uses_it(open_log: Callable[..., eventlog.EventLog]) -> None:
    log = open_log()
    _append(log, "r", 0, 100)
    log.close()  # waits for a training in progress
    log = open_log()
    assert _dictionary(log) == 1, "100 events of 1 KiB each trained no dictionary"
    _append(log, "r", 100, 1)
    assert _last_compression(log) == (2, 1), "a record after the dictionary is not compressed with it"


def test_events_of_many_short_lived_writers_count(open_log: Callable[..., eventlog.EventLog]) -> None:
    """No writer alone reaches the schedule; together they do."""
    for writer in range(6):
        log = open_log()
        _append(log, f"w{writer}", writer * 20, 20)
        log.close()
    log = open_log()
    assert _dictionary(log) == 1


def test_a_schedule_set_far_past_the_count_is_due_again(open_log: Callable[..., eventlog.EventLog]) -> None:
    """A schedule stored as a PostgreSQL feed position (a transaction id shifted 20 bits, doubled)
    by the first relational layout is far past any count: the log trains on the first schedule."""
    log = open_log()
    _append(log, "r", 0, 1)
    far = ((2_204 << 20) | 1) * 2
    log.store.write(lambda txn: log._runs.put_meta_int(txn, _keys.META_DICT_NEXT_TRY, far))
    log.close()
    log = open_log()
    _append(log, "r", 1, 100)
    log.close()
    log = open_log()
    assert _dictionary(log) == 1, "a schedule far past the count kept the log from training"


def test_a_damaged_dictionary_is_named_by_verify_and_by_the_reads_that_need_it(
    open_log: Callable[..., eventlog.EventLog],
) -> None:
    log = open_log()
    _append(log, "r", 0, 100)
    log.close()
    log = open_log()
    _append(log, "r", 100, 1)  # compressed with dictionary 1
    log.store.write(lambda txn: txn.put(META, _keys.dict_key(1), b"junk!!!"))
    log.close()
    log = open_log()
    report = log.verify()
    assert any(p.kind == "meta" and "zstd dictionary 1 is damaged" in p.message for p in report.problems)
    with pytest.raises(eventlog.errors.CorruptRecordError, match="its zstd dictionary 1 is damaged") as raised:
        log.entry("r", 101)
    assert (raised.value.run_id, raised.value.offset) == ("r", 101)
