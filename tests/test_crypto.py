"""Encryption at rest: records sealed with AES-GCM, the key never stored, a wrong key named."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

import eventlog
from eventlog.events import StepCompleted, UserMessage
from eventlog.record._keys import u64
from eventlog.record.codec import RAW, SEALED, frame, unframe
from eventlog.record.tables import EVENTS, RUNS
from eventlog.transfer import export_runs, import_runs

pytest.importorskip("cryptography")

SECRET = "the launch code is tangerine-42"
KEY = bytes(range(32))


def fill(log: eventlog.EventLog[Any], n: int = 400) -> None:
    """Enough events for a trained dictionary (trained from the records: it must be sealed too)."""
    w = log.writer("r", policy=eventlog.CheckpointPolicy.every(50))
    for i in range(n):
        w.append(
            UserMessage(content=f"{SECRET} {i} " + "words of a conversation " * (5 + i % 9)), meta={"note": SECRET}
        )
    log.checkpoints.save("r", metadata={"why": SECRET})


def test_round_trip_and_no_plaintext_on_disk(tmp_path: Path) -> None:
    path = tmp_path / "log"
    with eventlog.open(path, key=KEY) as log:
        fill(log)
        log.engine.dictionaries.wait()
        fill_more = log.append("r", UserMessage(content=SECRET))
    with eventlog.open(path, key=KEY) as log:
        assert log.entry("r", fill_more).event == UserMessage(content=SECRET)
        assert log.state_at("r").messages[0].content.startswith(SECRET)
        assert log.checkpoints.load_latest("r").metadata == {"why": SECRET}  # type: ignore[union-attr]
        assert log.verify().ok
        assert log.store.read(lambda txn: txn.scan("meta", b"dict:", b"dict;"))  # a dictionary was trained
    data = (path / "data.mdb").read_bytes()
    for needle in (SECRET, "tangerine", "words of a conversation"):
        assert needle.encode() not in data, needle


def test_a_wrong_or_missing_key_is_named(tmp_path: Path) -> None:
    path = tmp_path / "log"
    with eventlog.open(path, key=KEY) as log:
        log.append("r", UserMessage(content=SECRET))
    with pytest.raises(eventlog.errors.KeyMismatchError, match="another key"):
        eventlog.open(path, key=os.urandom(32))
    with pytest.raises(eventlog.errors.KeyMismatchError, match="encrypted"):
        eventlog.open(path)
    with pytest.raises(eventlog.errors.KeyMismatchError, match="encrypted"):
        eventlog.open(path, readonly=True)
    plain = tmp_path / "plain"
    with eventlog.open(plain) as log:
        log.append("r", UserMessage(content="x"))
    with pytest.raises(eventlog.errors.KeyMismatchError, match="not encrypted"):
        eventlog.open(plain, key=KEY)
    for bad in (b"short", "a string key" * 3, 42):
        with pytest.raises(eventlog.errors.InvalidArgumentError, match="key"):
            eventlog.open(tmp_path / "other", key=bad)  # type: ignore[arg-type]


def test_a_flipped_ciphertext_byte_is_a_named_corrupt_record(tmp_path: Path) -> None:
    with eventlog.open(tmp_path / "log", key=KEY) as log:
        log.append_many("r", [StepCompleted(node="a", superstep=i) for i in range(1, 4)])
        number = log.store.read(lambda txn: log._runs.require(txn, "r")).number
        key = u64(number) + u64(2)
        value = bytearray(log.store.read(lambda txn: txn.get("events", key)))
        value[-3] ^= 0x01  # inside the GCM tag's reach
        import zlib

        value[0:4] = zlib.crc32(bytes(value[4:])).to_bytes(4, "big")  # a good checksum: only the seal can tell
        log.store.write(lambda txn: txn.put("events", key, bytes(value)))
        with pytest.raises(eventlog.errors.CorruptRecordError, match="authenticate") as caught:
            list(log.read("r"))
        assert (caught.value.run_id, caught.value.offset) == ("r", 2)
        assert [p.offset for p in log.verify().problems] == [2]


def test_export_and_import_of_an_encrypted_log(tmp_path: Path) -> None:
    with eventlog.open(tmp_path / "a", key=KEY) as log:
        fill(log, 60)
        out = tmp_path / "runs.jsonl"
        export_runs(log, out)
        entries = [(e.event, e.meta) for e in log.read("r")]
    other = os.urandom(32)
    with eventlog.open(tmp_path / "b", key=other) as copy:
        import_runs(copy, out)
        assert [(e.event, e.meta) for e in copy.read("r")] == entries
        assert copy.verify().ok
    assert SECRET.encode() not in (tmp_path / "b" / "data.mdb").read_bytes()


# -- whether a log is sealed is recorded once (every store) -------------------------------------

OTHER = bytes(range(100, 132))


def _opens(backend: str) -> list[dict[str, Any]]:
    """The ways of opening a log again: to write, and read-only where the store has that."""
    return [{}] if backend == "memory" else [{}, {"readonly": True}]


def test_a_key_given_to_a_plaintext_log_is_refused_even_before_its_first_run(
    open_log: Callable[..., eventlog.EventLog[Any]], backend: str
) -> None:
    open_log().close()  # created without a key; no run yet
    for kw in _opens(backend):
        with pytest.raises(eventlog.errors.KeyMismatchError, match="not sealed"):
            open_log(key=KEY, **kw)
    log = open_log()
    log.append("r", UserMessage(content="plain"))
    log.close()
    for kw in _opens(backend):
        with pytest.raises(eventlog.errors.KeyMismatchError, match="not sealed"):
            open_log(key=KEY, **kw)


def test_a_sealed_log_refuses_no_key_and_another_key_by_name(
    open_log: Callable[..., eventlog.EventLog[Any]], backend: str
) -> None:
    open_log(key=KEY).close()  # sealed from its creation, though it holds no run
    for kw in _opens(backend):
        with pytest.raises(eventlog.errors.KeyMismatchError, match="sealed.*--key-file PATH or EVENTLOG_KEY_FILE"):
            open_log(**kw)
        with pytest.raises(eventlog.errors.KeyMismatchError, match="another key"):
            open_log(key=OTHER, **kw)
    log = open_log(key=KEY)
    log.append("r", UserMessage(content=SECRET))
    assert log.entry("r", 1).event == UserMessage(content=SECRET)


def test_the_seal_record_and_the_key_check_must_agree(
    open_log: Callable[..., eventlog.EventLog[Any]], backend: str
) -> None:
    log = open_log(key=KEY)
    log.append("r", UserMessage(content=SECRET))
    log.store.write(lambda txn: txn.put("meta", b"sealed", frame(u64(0), RAW, 0)))  # "not sealed", by hand
    log.close()
    for kw in _opens(backend):
        with pytest.raises(eventlog.errors.NotALogError, match="key check"):
            open_log(**kw)  # no key: refused rather than writing plaintext beside sealed values


def _events_value(log: eventlog.EventLog[Any], run_id: str, offset: int) -> tuple[bytes, bytes]:
    key = EVENTS.key(_number(log, run_id), offset)
    return key, log.store.read(lambda txn: txn.get("events", key))


def test_a_plaintext_value_in_a_sealed_log_and_a_sealed_value_in_a_plaintext_log_are_refused(
    open_log: Callable[..., eventlog.EventLog[Any]],
) -> None:
    log = open_log(key=KEY)
    log.append_many("r", [StepCompleted(node="a", superstep=i) for i in range(1, 4)])
    key, _ = _events_value(log, "r", 2)
    with eventlog.open(":memory:") as plain:  # the same entry, not sealed, at the same key
        plain.append_many("r", [StepCompleted(node="a", superstep=i) for i in range(1, 4)])
        _, value = _events_value(plain, "r", 2)
    log.store.write(lambda txn: txn.put("events", key, value))
    with pytest.raises(eventlog.errors.CorruptRecordError, match="not sealed .* in a sealed log") as caught:
        list(log.read("r"))
    assert (caught.value.run_id, caught.value.offset) == ("r", 2)
    assert [(p.run_id, p.offset) for p in log.verify().problems] == [("r", 2)]


def test_a_sealed_value_in_a_plaintext_log_is_refused(open_log: Callable[..., eventlog.EventLog[Any]]) -> None:
    log = open_log()
    log.append_many("r", [StepCompleted(node="a", superstep=i) for i in range(1, 4)])
    key, _ = _events_value(log, "r", 3)
    with eventlog.open(":memory:", key=KEY) as sealed:
        sealed.append_many("r", [StepCompleted(node="a", superstep=i) for i in range(1, 4)])
        _, value = _events_value(sealed, "r", 3)
    log.store.write(lambda txn: txn.put("events", key, value))
    with pytest.raises(eventlog.errors.CorruptRecordError, match="sealed value .* not sealed") as caught:
        log.entry("r", 3)
    assert (caught.value.run_id, caught.value.offset) == ("r", 3)
    assert [(p.run_id, p.offset) for p in log.verify().problems] == [("r", 3)]


# -- a sealed value is bound to its place (every store) ------------------------------------------


def _number(log: eventlog.EventLog[Any], run_id: str) -> int:
    return log.store.read(lambda txn: log._runs.require(txn, run_id)).number


def _sealed_pair(open_log: Callable[..., eventlog.EventLog[Any]]) -> eventlog.EventLog[Any]:
    """A sealed log with runs "a" and "b", each with checkpoints and at least two snapshots."""
    log = open_log(key=KEY)
    for run_id in ("a", "b"):
        w = log.writer(run_id, policy=eventlog.CheckpointPolicy.every(2))
        for i in range(1, 9):
            w.append(UserMessage(content=f"{run_id} {i}"), meta={"pad": os.urandom(400).hex()})
    return log


def _swap(log: eventlog.EventLog[Any], table: str, one: bytes, two: bytes) -> None:
    def swap(txn: Any) -> None:
        first, second = txn.get(table, one), txn.get(table, two)
        assert first is not None and second is not None
        txn.put(table, one, second)
        txn.put(table, two, first)

    log.store.write(swap)


def _copy(log: eventlog.EventLog[Any], table: str, source: bytes, dest: bytes) -> None:
    log.store.write(lambda txn: txn.put(table, dest, txn.get(table, source)))


def _problems(log: eventlog.EventLog[Any]) -> set[tuple[str, int | None]]:
    report = log.verify()
    assert not report.ok
    return {(p.run_id, p.offset) for p in report.problems}


def test_an_event_moved_between_runs_fails_to_open(open_log: Callable[..., eventlog.EventLog[Any]]) -> None:
    log = _sealed_pair(open_log)
    _copy(log, "events", EVENTS.key(_number(log, "a"), 1), EVENTS.key(_number(log, "b"), 1))
    with pytest.raises(eventlog.errors.CorruptRecordError, match="does not authenticate") as caught:
        list(log.read("b"))
    assert (caught.value.run_id, caught.value.offset) == ("b", 1)
    with pytest.raises(eventlog.errors.CorruptRecordError) as caught:
        list(log.feed())
    assert (caught.value.run_id, caught.value.offset) == ("b", 1)
    assert ("b", 1) in _problems(log)
    assert [e.offset for e in log.read("a")] == list(range(1, 9))  # the source is untouched


def test_two_offsets_swapped_in_one_run_fail_to_open(open_log: Callable[..., eventlog.EventLog[Any]]) -> None:
    log = _sealed_pair(open_log)
    number = _number(log, "a")
    _swap(log, "events", EVENTS.key(number, 3), EVENTS.key(number, 4))
    with pytest.raises(eventlog.errors.CorruptRecordError, match="does not authenticate") as caught:
        log.entry("a", 4)
    assert (caught.value.run_id, caught.value.offset) == ("a", 4)
    with pytest.raises(eventlog.errors.CorruptRecordError) as caught:
        log.state_at("a", 3)
    assert caught.value.run_id == "a"
    assert ("a", 3) in _problems(log)


def test_an_older_snapshot_replayed_under_a_newer_key_fails_to_open(
    open_log: Callable[..., eventlog.EventLog[Any]],
) -> None:
    log = _sealed_pair(open_log)
    number = _number(log, "a")
    keys = log.store.read(lambda txn: txn.keys("snapshots", u64(number), u64(number + 1), 100))
    assert len(keys) >= 2
    older, newer = keys[0], keys[-1]
    _copy(log, "snapshots", older, newer)
    offset = int.from_bytes(newer[8:16], "big")
    with pytest.raises(eventlog.errors.CorruptRecordError, match="does not authenticate") as caught:
        log.state_at("a", offset)
    assert (caught.value.run_id, caught.value.offset) == ("a", offset)
    assert ("a", offset) in _problems(log)


def test_a_run_record_moved_to_another_run_fails_to_open(open_log: Callable[..., eventlog.EventLog[Any]]) -> None:
    log = _sealed_pair(open_log)
    _copy(log, "runs", b"a", b"b")
    with pytest.raises(eventlog.errors.CorruptRecordError, match="does not authenticate") as caught:
        log.run_info("b")
    assert caught.value.run_id == "b"
    assert ("b", None) in _problems(log)


@pytest.mark.parametrize("across", [False, True], ids=["within-a-run", "between-runs"])
def test_a_checkpoint_record_moved_fails_to_open(open_log: Callable[..., eventlog.EventLog[Any]], across: bool) -> None:
    log = _sealed_pair(open_log)
    a, b = _number(log, "a"), _number(log, "b")
    if across:
        _copy(log, "checkpoints", u64(a) + u64(1), u64(b) + u64(1))
    else:
        _swap(log, "checkpoints", u64(a) + u64(1), u64(a) + u64(2))
    victim = "b" if across else "a"
    with pytest.raises(eventlog.errors.CorruptRecordError, match="checkpoints key") as caught:
        log.checkpoints.list(victim)
    assert caught.value.run_id == victim
    assert victim in {run_id for run_id, _ in _problems(log)}


def _set_run_numbers_back(log: eventlog.EventLog[Any], to: int) -> None:
    """The run number counter set back, as someone with the store's raw access could: the next
    run would be given `to + 1`."""
    if log.store.dense:
        log.store.write(lambda txn: txn.put("meta", b"run_number", frame(u64(to), RAW, 0)))
        return
    import psycopg

    with psycopg.connect(log.store.dsn, autocommit=True) as conn:
        conn.execute(f'ALTER SEQUENCE "{log.store.schema}".run_number RESTART WITH {to + 1}')


def test_a_run_number_in_use_is_never_given_again(open_log: Callable[..., eventlog.EventLog[Any]]) -> None:
    log = _sealed_pair(open_log)
    before = [(e.offset, e.event) for e in log.read("b")]
    _set_run_numbers_back(log, _number(log, "b") - 1)
    with pytest.raises(eventlog.errors.CorruptRecordError, match="counter was set back"):
        log.append("z", UserMessage(content="z's own"))
    assert [(e.offset, e.event) for e in log.read("b")] == before  # nothing of b was written over
    assert "z" not in log.runs()
    assert [c.offset for c in log.checkpoints.list("b")] == [2, 4, 6, 8]


def _remove_rows(log: eventlog.EventLog[Any], run_id: str, keep: tuple[str, ...] = ()) -> None:
    """Every row of the run taken out of the store by hand but those of the tables in `keep`: a
    deletion, which a key does not prevent."""
    number, key = _number(log, run_id), RUNS.key(run_id)

    def remove(txn: Any) -> None:
        txn.delete("runs", key)
        txn.delete("run_numbers", u64(number))
        for table in ("events", "checkpoints", "checkpoint_ids", "event_ids", "snapshots"):
            if table not in keep:
                txn.delete_range(table, u64(number), u64(number + 1))

    log.store.write(remove)


def test_a_number_is_never_given_again_to_read_what_a_deleted_run_left(
    open_log: Callable[..., eventlog.EventLog[Any]],
) -> None:
    """A deleted run's snapshots left behind, the counter set back: the next run would read them
    as its own states."""
    log = _sealed_pair(open_log)
    number = _number(log, "b")
    _remove_rows(log, "b", keep=("snapshots",))
    _set_run_numbers_back(log, number - 1)
    with pytest.raises(eventlog.errors.CorruptRecordError, match="counter was set back"):
        log.append("z", UserMessage(content="z's own"))
    assert "z" not in log.runs()


def test_a_parent_made_again_below_its_forks_number_is_refused(
    open_log: Callable[..., eventlog.EventLog[Any]],
) -> None:
    """The parent's rows removed and the counter set back under its fork's number: a parent made
    again would be read as the one the fork was made of."""
    log = _sealed_pair(open_log)
    log.fork("a", 4, "child")
    child = [(e.offset, e.event) for e in log.read("child")]
    _remove_rows(log, "a")
    _set_run_numbers_back(log, 0)
    if log.store.dense:  # numbers only grow there: no run is given one at or below the fork's
        with pytest.raises(eventlog.errors.CorruptRecordError, match="counter was set back"):
            log.append("a", UserMessage(content="a made again"))
        assert "a" not in log.runs()
    else:  # PostgreSQL's writers take numbers side by side: a number no row holds is given
        log.append("a", UserMessage(content="a made again"))
    with pytest.raises(eventlog.errors.CorruptRecordError, match="forks from 'a'"):
        list(log.read("child"))  # its parent is gone, and never another one read for it
    assert child  # what it read before


def _reads(log: eventlog.EventLog[Any]) -> dict[str, list[Any]]:
    return {run_id: [(e.offset, e.event) for e in log.read(run_id)] for run_id in log.runs()}


@pytest.mark.parametrize("ahead", [1, 7])
def test_rows_of_a_number_no_run_has_are_named_by_verify_and_removed_by_repair(
    open_log: Callable[..., eventlog.EventLog[Any]], ahead: int
) -> None:
    """A deleted run's rows left behind at a number the log would give next (or later): new runs
    were refused that number (forever, on LMDB) while `verify` found nothing and `repair` did
    nothing. `verify` names each table and number, `repair` removes those rows only, and new
    runs are made again."""
    log = _sealed_pair(open_log)
    before, number = _reads(log), _number(log, "b") + ahead
    _remove_rows(log, "b")  # b's rows out by hand: the log's counter (or sequence) stays past b
    before.pop("b")
    stray = {
        "events": EVENTS.key(number, 1),
        "snapshots": u64(number) + u64(2) + b"tag",
        "event_ids": u64(number) + b"x",
    }
    log.store.write(lambda txn: [txn.put(table, key, u64(1)) for table, key in stray.items()])
    if log.store.dense or ahead == 1:
        for _ in range(ahead):
            try:
                log.append(f"z{_}", UserMessage(content="z"))
            except eventlog.errors.CorruptRecordError as exc:
                assert "counter was set back" in str(exc)
                break
        else:
            raise AssertionError("a run was given a number rows of no run hold")
    report = log.verify()
    named = {
        p.message.split(" holds rows of run number ")[0] for p in report.problems if "which no run has" in p.message
    }
    assert named == set(stray), report.problems
    done = log.repair()
    assert sum("which no run has" in line for line in done) == len(stray), done
    assert log.verify().ok, log.verify().problems
    log.append("new", UserMessage(content="made"))
    assert [e.event.content for e in log.read("new")] == ["made"]
    assert {k: v for k, v in _reads(log).items() if k in before} == before  # nothing of a live run went
    assert not any("which no run has" in line for line in log.repair())


def test_a_counter_set_back_below_a_live_run_is_named_and_raised_by_repair(
    open_log: Callable[..., eventlog.EventLog[Any]],
) -> None:
    log = _sealed_pair(open_log)
    if not log.store.dense:
        pytest.skip("PostgreSQL gives run numbers from a sequence, never below one it gave")
    before = _reads(log)
    _set_run_numbers_back(log, 0)
    assert {(p.run_id, p.message.split(";")[1]) for p in log.verify().problems} == {
        (run_id, " log.repair() raises the log's counter") for run_id in ("a", "b")
    }
    assert any("counter was raised to" in line for line in log.repair())
    assert log.verify().ok
    log.append("z", UserMessage(content="z's own"))
    assert _number(log, "z") > _number(log, "b")
    assert {k: v for k, v in _reads(log).items() if k != "z"} == before


def test_a_long_run_id_named_by_another_id_in_run_numbers_is_refused(
    open_log: Callable[..., eventlog.EventLog[Any]],
) -> None:
    log = open_log(key=KEY)
    long_id = "l" * 500  # keyed by its hash: its id is read from run_numbers
    for run_id in ("a", long_id):
        log.append(run_id, UserMessage(content=run_id[:8]))
    number = _number(log, long_id)
    log.store.write(lambda txn: txn.put("run_numbers", u64(number), b"a"))
    with pytest.raises(eventlog.errors.CorruptRecordError, match=f"the id of run number {number} in run_numbers"):
        log.runs()


def test_run_numbers_swapped_in_the_index_are_refused_by_the_feed(
    open_log: Callable[..., eventlog.EventLog[Any]],
) -> None:
    """The feed names an entry by run number; the index says which run holds the number. Two
    numbers swapped there would give each run the other's entries, or, as the sealed run record
    does not match, drop both runs from the feed without a word: refused."""
    log = open_log(key=KEY)
    for run_id in ("a", "b", "c"):
        log.append(run_id, UserMessage(content=run_id))
    a, b = _number(log, "a"), _number(log, "b")
    log.store.write(lambda txn: (txn.put("run_numbers", u64(a), b"b"), txn.put("run_numbers", u64(b), b"a")))
    with pytest.raises(eventlog.errors.CorruptRecordError, match="names a run whose record is number"):
        list(log.feed())
    with pytest.raises(eventlog.errors.CorruptRecordError, match="names a run whose record is number"):
        list(log.follow(timeout=0.1))
    assert [(e.run_id, e.offset) for e in log.read("c")] == [("c", 1)]


def test_a_key_check_copied_from_another_log_is_refused(
    open_log: Callable[..., eventlog.EventLog[Any]], backend: str
) -> None:
    log = _sealed_pair(open_log)
    with eventlog.open(":memory:", key=KEY) as other:  # another log, sealed with the same key
        copied = other.store.read(lambda txn: txn.get("meta", b"key.check"))
    log.store.write(lambda txn: txn.put("meta", b"key.check", copied))
    log.close()
    for kw in _opens(backend):
        with pytest.raises(eventlog.errors.KeyMismatchError, match="key.check"):
            open_log(key=KEY, **kw)


def test_a_value_copied_from_another_log_with_the_same_key_fails_to_open(
    open_log: Callable[..., eventlog.EventLog[Any]],
) -> None:
    log = _sealed_pair(open_log)
    with eventlog.open(":memory:", key=KEY) as other:
        other.append("a", UserMessage(content="from another log"))
        _, value = _events_value(other, "a", 1)
    key, _ = _events_value(log, "a", 1)
    assert key == EVENTS.key(1, 1)  # the same table and key in both logs: only the log id differs
    log.store.write(lambda txn: txn.put("events", key, value))
    with pytest.raises(eventlog.errors.CorruptRecordError, match="another place or log") as caught:
        log.entry("a", 1)
    assert (caught.value.run_id, caught.value.offset) == ("a", 1)


# -- a log sealed before values were bound to their place (format 2) -----------------------------

FIXTURE = Path(__file__).parent / "fixtures" / "sealed-log-f83f4b8"
FIXTURE_KEY = bytes(range(32))


def _read_all(log: eventlog.EventLog[Any]) -> dict[str, Any]:
    """What tests/fixtures/make_sealed_log_f83f4b8.py recorded, read the same way."""
    out: dict[str, Any] = {"runs": log.runs(), "feed": [[e.run_id, e.offset, e.position] for e in log.feed()]}
    for run_id in log.runs():
        info = log.run_info(run_id)
        out[run_id] = {
            "head": info.head,
            "base": info.base,
            "entries": [  # without `run_number`, which came into the API after f83f4b8
                {k: v for k, v in e.items() if k != "run_number"}
                for e in msgspec.to_builtins(list(log.read(run_id, after=info.base)))
            ],
            "state": msgspec.to_builtins(log.state_at(run_id)),
            "checkpoints": [[c.checkpoint_id, c.offset, c.metadata] for c in log.checkpoints.list(run_id)],
        }
    return msgspec.json.decode(msgspec.json.encode(out))  # type: ignore[no-any-return]


def _values(log: eventlog.EventLog[Any]) -> dict[tuple[str, bytes], bytes]:
    """Every framed value of the log by (table, key)."""
    return {
        (table, bytes(k)): bytes(v)
        for table in ("meta", "runs", "events", "checkpoints", "snapshots")
        for k, v in log.store.read(lambda txn, table=table: txn.scan(table, b"", None))
    }


@pytest.fixture
def old_sealed(tmp_path: Path) -> Path:
    copy = tmp_path / "log"
    copy.mkdir(mode=0o700)
    (copy / "data.mdb").write_bytes((FIXTURE / "data.mdb").read_bytes())
    return copy


def _format(log: eventlog.EventLog[Any]) -> int:
    return log.store.read(lambda txn: log._runs.meta_int(txn, b"format"))


def test_a_log_sealed_by_f83f4b8_reads_as_it_is_and_is_bound_when_opened_to_write(old_sealed: Path) -> None:
    expected = msgspec.json.decode((FIXTURE.parent / "sealed-log-f83f4b8.json").read_bytes())
    with pytest.raises(eventlog.errors.KeyMismatchError, match="sealed"):
        eventlog.open(old_sealed, readonly=True)
    with pytest.raises(eventlog.errors.KeyMismatchError, match="another key"):
        eventlog.open(old_sealed, key=OTHER, readonly=True)
    with eventlog.open(old_sealed, key=FIXTURE_KEY, readonly=True) as log:  # as it is: format 2, unbound
        assert _format(log) == 2
        assert _read_all(log) == expected
        unbound = _values(log)
    assert ("meta", b"dict:\x00\x00\x00\x01") in unbound  # a sealed dictionary is bound too
    with eventlog.open(old_sealed, key=FIXTURE_KEY) as log:  # to write: every value sealed again, bound
        assert _format(log) == eventlog._limits.format_version
        assert _read_all(log) == expected
        assert log.verify().ok
        log.append("chat", UserMessage(content="after the migration"))
        again = _values(log)
        sealed = [place for place, value in unbound.items() if unframe(value)[0] & SEALED]
        assert len(sealed) > 200 and all(again[place] != unbound[place] for place in sealed)
        # No downgrade: an unbound value from before the migration, put back at its own place, is refused.
        key = EVENTS.key(_number(log, "chat"), 5)
        log.store.write(lambda txn: txn.put("events", key, unbound[("events", key)]))
        with pytest.raises(eventlog.errors.CorruptRecordError, match="does not authenticate") as caught:
            log.entry("chat", 5)
        assert (caught.value.run_id, caught.value.offset) == ("chat", 5)
        assert {(p.run_id, p.offset) for p in log.verify().problems} == {("chat", 5)}  # read by chat-b too
        # Nor when the format record is set back to 2 and the log opened read-only: the key check says "bound".
        log.store.write(lambda txn: log._runs.put_meta_int(txn, b"format", 2))
    with eventlog.open(old_sealed, key=FIXTURE_KEY, readonly=True) as log:
        with pytest.raises(eventlog.errors.CorruptRecordError, match="does not authenticate"):
            log.entry("chat", 5)
        assert log.entry("chat", 6).offset == 6


@pytest.mark.parametrize("writes", [1, 3, 5, 6, 7])
def test_a_migration_cut_short_reads_whole_and_finishes_at_the_next_open(old_sealed: Path, writes: int) -> None:
    from eventlog.store import LMDBStore

    class CutStore(LMDBStore):
        """Dies (as a killed process would) before its write transaction number `writes` + 1."""

        left = writes

        def write(self, fn: Callable[[Any], Any]) -> Any:
            if self.left == 0:
                raise KeyboardInterrupt
            self.left -= 1
            return super().write(fn)

    expected = msgspec.json.decode((FIXTURE.parent / "sealed-log-f83f4b8.json").read_bytes())
    store = CutStore(old_sealed)
    with pytest.raises(KeyboardInterrupt):
        eventlog.open(store, key=FIXTURE_KEY)
    store.close()
    with eventlog.open(old_sealed, key=FIXTURE_KEY, readonly=True) as log:  # part bound, part not
        assert _format(log) == 2
        assert _read_all(log) == expected
    with eventlog.open(old_sealed, key=FIXTURE_KEY) as log:
        assert _format(log) == eventlog._limits.format_version
        assert _read_all(log) == expected
        assert log.verify().ok


def test_a_checkpoint_id_index_pointed_at_another_checkpoint_is_refused(
    open_log: Callable[..., eventlog.EventLog[Any]],
) -> None:
    log = _sealed_pair(open_log)
    first, second = (c.checkpoint_id for c in log.checkpoints.list("a")[:2])
    number = _number(log, "a")
    _copy(log, "checkpoint_ids", u64(number) + second.encode(), u64(number) + first.encode())
    for act in (
        lambda: log.checkpoints.load("a", first),
        lambda: log.checkpoints.delete("a", first),
        lambda: log.checkpoints.save("a", 2, checkpoint_id=first, metadata={"x": 1}),
    ):
        with pytest.raises(eventlog.errors.CorruptRecordError, match="index points") as caught:
            act()
        assert caught.value.run_id == "a"
    assert [c.checkpoint_id for c in log.checkpoints.list("a")][:2] == [first, second]  # nothing deleted
    assert "a" in {run_id for run_id, _ in _problems(log)}


@pytest.mark.parametrize("sealed", [True, False], ids=["sealed", "plaintext"])
def test_an_event_id_index_pointed_at_another_entry_is_refused(
    open_log: Callable[..., eventlog.EventLog[Any]], sealed: bool
) -> None:
    log = open_log(key=KEY if sealed else None)
    log.append_many("r", [StepCompleted(node="a", superstep=i) for i in range(1, 4)], event_ids=["e1", "e2", "e3"])
    assert log.append("r", StepCompleted(node="a", superstep=2), event_id="e2") == 2  # a repeat: a no-op
    number = _number(log, "r")
    _copy(log, "event_ids", u64(number) + b"e3", u64(number) + b"e2")  # "e2" now says offset 3
    with pytest.raises(eventlog.errors.CorruptRecordError, match="index points 'e2'") as caught:
        log.append("r", StepCompleted(node="a", superstep=2), event_id="e2")
    assert (caught.value.run_id, caught.value.offset) == ("r", 3)
    assert log.head("r") == 3
    assert ("r", 2) in _problems(log)
