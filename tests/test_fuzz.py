"""Bad input, fuzzed: stored bytes, call arguments, limits.

- Whatever bytes lie under a key of a real LMDB log (an event, a run record, a checkpoint,
  a snapshot), reading them raises CorruptRecordError naming the run (and the offset where
  the key holds one), never another exception, never a hang.
- A zstd frame declaring a huge content size is refused before it is decompressed, also when
  it comes out of a real log.
- Any run id, event id, event size, batch or offset that breaks a limit is refused with a
  named error before anything is written: every table of the store is byte-identical after.
- Any integer given as an offset or position to a read raises an EventLogError or works.

`EVENTLOG_FUZZ_EXAMPLES` sets the examples per property (default 100).
"""

from __future__ import annotations

import os
import tracemalloc
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import msgspec
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import eventlog
from eventlog.errors import (
    CorruptRecordError,
    EventLogError,
    InvalidEventError,
    InvalidRunIdError,
    RecordTooLargeError,
)
from eventlog.events import StepCompleted, UserMessage
from eventlog.record._keys import u64
from eventlog.record._records import CheckpointRecord, RunRecord, SnapshotRecord
from eventlog.record.codec import RAW, ZSTD, Codec, frame
from eventlog.store._base import TABLES

EXAMPLES = int(os.environ.get("EVENTLOG_FUZZ_EXAMPLES", "100"))
fuzz = settings(
    max_examples=EXAMPLES,
    deadline=timedelta(seconds=5),  # a decode that hangs fails here
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)

msgpack_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**63), 2**64 - 1),
        st.floats(),
        st.text(max_size=30),
        st.binary(max_size=30),
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=8), st.dictionaries(st.text(max_size=8), inner, max_size=6)),
    max_leaves=25,
)


@st.composite
def stored_values(draw: st.DrawFn) -> bytes:
    """Bytes a damaged or hostile file could hold under a key: raw, framed, framed and compressed."""
    how = draw(st.sampled_from(["bytes", "raw frame", "zstd frame", "msgpack frame", "msgpack zstd frame"]))
    if how == "bytes":
        return draw(st.binary(max_size=400))
    if how.startswith("msgpack"):
        payload = msgspec.msgpack.encode(draw(msgpack_values))
    else:
        payload = draw(st.binary(max_size=400))
    if "zstd" in how:
        return frame(zstandard.ZstdCompressor().compress(payload), ZSTD, 0)
    return frame(payload, RAW, 0)


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> Iterator[eventlog.EventLog]:
    opened = eventlog.open(tmp_path_factory.mktemp("fuzz") / "log", durability="none")  # decoding, not durability
    for run in ("a", "b"):
        for i in range(6):
            opened.append(run, StepCompleted(node=f"n{i}", superstep=i + 1, update={"i": i}))
        opened.checkpoints.save(run)
    yield opened
    opened.close()


def _dump(log: eventlog.EventLog) -> dict[str, list[tuple[bytes, bytes]]]:
    """Every table, byte for byte, once a dictionary training in the background (which the
    appends before may have started) has written what it writes."""
    log.engine.dictionaries.wait()
    return log.store.read(lambda txn: {t: txn.scan(t, b"", None) for t in TABLES})


def _number(log: eventlog.EventLog, run: str) -> int:
    return log.store.read(lambda txn: log._runs.require(txn, run)).number


def _put(log: eventlog.EventLog, table: str, key: bytes, value: bytes) -> bytes:
    """Store `value` under `key` and return what was there (to put it back)."""

    def swap(txn: Any) -> bytes:
        old = txn.get(table, key)
        txn.put(table, key, value)
        return old

    return log.store.write(swap)


# -- stored bytes ------------------------------------------------------------------------------


@fuzz
@given(value=stored_values())
def test_any_stored_entry_reads_as_an_event_or_a_named_corrupt_record(log: eventlog.EventLog, value: bytes) -> None:
    key = u64(_number(log, "a")) + u64(3)
    old = _put(log, "events", key, value)
    try:
        try:
            entry = log.entry("a", 3)
        except (CorruptRecordError, eventlog.errors.UnknownKindError) as exc:
            assert (exc.run_id, exc.offset) == ("a", 3)
        else:
            assert isinstance(entry.event, eventlog.Event)
        problems = log.verify("a").problems
        assert all(p.run_id == "a" for p in problems)
    finally:
        _put(log, "events", key, old)
    assert log.verify().ok


@fuzz
@given(value=stored_values())
def test_any_stored_run_record_reads_as_a_run_or_a_named_corrupt_record(log: eventlog.EventLog, value: bytes) -> None:
    old = _put(log, "runs", b"b", value)
    try:
        for call in (lambda: log.head("b"), lambda: list(log.read("b")), lambda: log.run_info("b")):
            try:
                call()
            except CorruptRecordError as exc:
                assert exc.run_id == "b"
            except EventLogError:
                pass  # a record that decodes to nonsense may read as a range or pruned error
        assert list(log.read("a"))  # the other run is untouched
    finally:
        _put(log, "runs", b"b", old)


@fuzz
@given(value=stored_values(), table=st.sampled_from(["checkpoints", "snapshots"]))
def test_any_stored_checkpoint_or_snapshot_is_a_named_corrupt_record(
    log: eventlog.EventLog, value: bytes, table: str
) -> None:
    number = _number(log, "b")
    key = log.store.read(lambda txn: txn.scan(table, u64(number), u64(number + 1))[0][0])
    old = _put(log, table, key, value)
    try:
        try:
            for cp in log.checkpoints.list("b"):
                cp.state  # noqa: B018 - loading is the read under test
            log.state_at("b")
        except CorruptRecordError as exc:
            assert exc.run_id == "b"
            if table == "snapshots":
                assert exc.offset == 6
        assert all(p.run_id == "b" for p in log.verify().problems)
    finally:
        _put(log, table, key, old)


@fuzz
@given(value=stored_values())
def test_the_codec_decoders_raise_only_corrupt_record(value: bytes) -> None:
    codec = Codec(lambda _: None, 1 << 20)
    for decode in (
        lambda v: codec.decode_entry(v, b""),
        lambda v: codec.decode_value(v, RunRecord, ("runs", b"")),
        lambda v: codec.decode_value(v, CheckpointRecord, ("checkpoints", b"")),
        lambda v: codec.decode_value(v, SnapshotRecord, ("snapshots", b"")),
        codec.decode_event,
    ):
        try:
            decode(value)
        except CorruptRecordError:
            pass


# -- zstd frames that lie about their size --------------------------------------------------------


def _zstd_header(content_size: int) -> bytes:
    """A zstd frame header with an 8-byte content size field, then one raw block of 4 bytes."""
    magic = (0xFD2FB528).to_bytes(4, "little")
    descriptor = bytes([0b1110_0000])  # 8-byte content size, single segment
    block = (1 | (0 << 1) | (4 << 3)).to_bytes(3, "little") + b"abcd"  # last block, raw, 4 bytes
    return magic + descriptor + content_size.to_bytes(8, "little") + block


@fuzz
@given(declared=st.integers((1 << 24) + 1, (1 << 63) - 1))
def test_a_huge_declared_size_is_refused_before_decompressing(declared: int) -> None:
    codec = Codec(lambda _: None, 1 << 24)
    tracemalloc.start()
    try:
        with pytest.raises(CorruptRecordError, match="declares"):
            codec.payload(frame(_zstd_header(declared), ZSTD, 0), ("events", b"k"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


def test_a_real_bomb_in_a_log_is_refused_with_its_run_and_offset(log: eventlog.EventLog) -> None:
    payload = msgspec.msgpack.encode([1, 2, "id", None, {"kind": "message.user", "content": "x" * (64 << 20)}])
    bomb = frame(zstandard.ZstdCompressor().compress(payload), ZSTD, 0)
    assert len(bomb) < 64 << 10
    key = u64(_number(log, "a")) + u64(4)
    old = _put(log, "events", key, bomb)
    try:
        tracemalloc.start()
        with pytest.raises(CorruptRecordError, match="declares") as caught:
            log.entry("a", 4)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert (caught.value.run_id, caught.value.offset) == ("a", 4)
        assert peak < 8 << 20  # refused from the frame's header, never decompressed
    finally:
        _put(log, "events", key, old)


# -- limits: refused before anything is written ----------------------------------------------------


def _valid_run_id(run_id: str) -> bool:
    try:
        raw = run_id.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return 0 < len(raw) <= 1024


run_ids = st.one_of(
    st.text(st.characters(blacklist_categories=()), max_size=40),
    st.text(st.characters(blacklist_categories=()), min_size=250, max_size=1100),
    st.sampled_from(
        ["", "\ud800", "a\udfff", "é" * 512, "é" * 513, "x" * 1024, "x" * 1025, "🚀" * 256, "🚀" * 257, "\x00"]
    ),
)


@fuzz
@given(run_id=run_ids)
def test_any_run_id_is_taken_or_refused_before_anything_is_written(log: eventlog.EventLog, run_id: str) -> None:
    before = _dump(log)
    event = UserMessage(content="hi")
    if _valid_run_id(run_id):
        head = log.head(run_id)
        assert log.append(run_id, event) == head + 1
        assert run_id in log.runs()
        assert [e.event for e in log.read(run_id, after=head)] == [event]
        return
    for call in (
        lambda: log.append(run_id, event),
        lambda: log.append_many(run_id, [event, event]),
        lambda: log.fork("a", 1, run_id),
        lambda: log.writer(run_id),
    ):
        with pytest.raises(InvalidRunIdError):
            call()
    assert _dump(log) == before


LIMIT = 2048


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Iterator[eventlog.EventLog]:
    opened = eventlog.open(tmp_path_factory.mktemp("limit") / "log", durability="none", record_size_bytes_max=LIMIT)
    opened.append("r", UserMessage(content="first"))
    yield opened
    opened.close()


@fuzz
@given(size=st.integers(0, 6000), position=st.integers(0, 4), batch=st.integers(1, 5))
def test_an_event_over_the_record_limit_is_refused_with_its_batch(
    small: eventlog.EventLog, size: int, position: int, batch: int
) -> None:
    before = _dump(small)
    head = small.head("r")
    events = [UserMessage(content=f"e{i}") for i in range(batch)]
    events.insert(min(position, batch), UserMessage(content="x" * size))
    too_big = len(small.codec.encode_event(events[min(position, batch)])) > LIMIT
    try:
        small.append_many("r", events)
    except RecordTooLargeError as exc:
        assert str(LIMIT) in str(exc)
        assert _dump(small) == before
    else:
        assert not too_big, "an event over the limit was written"
        assert small.head("r") == head + len(events)


class NotRegistered(eventlog.Event, frozen=True, tag="fuzz.not-registered"):
    x: int = 0


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda log: log.append("a", NotRegistered()), id="unregistered kind"),
        pytest.param(lambda log: log.append("a", {"kind": "message.user", "content": "x"}), id="a dict"),
        pytest.param(lambda log: log.append_many("a", [UserMessage(content="ok"), "text"]), id="a str in a batch"),
        pytest.param(lambda log: log.append("a", UserMessage(content="x"), event_id="i" * 257), id="long event id"),
        pytest.param(lambda log: log.append("a", UserMessage(content="x"), event_id=""), id="empty event id"),
        pytest.param(
            lambda log: log.append("a", UserMessage(content="x"), meta={"o": object()}), id="meta not encodable"
        ),
        pytest.param(lambda log: log.append_many("a", []), id="empty batch"),
        pytest.param(lambda log: log.append_many("a", [UserMessage(content="x")] * 100_001), id="batch over the limit"),
        pytest.param(
            lambda log: log.append_many("a", [UserMessage(content="x")] * 2, event_ids=["one"]), id="ids do not match"
        ),
        pytest.param(lambda log: log.checkpoints.save("a", checkpoint_id="c" * 257), id="long checkpoint id"),
    ],
)
def test_bad_input_is_refused_before_anything_is_written(log: eventlog.EventLog, call: Any) -> None:
    before = _dump(log)
    with pytest.raises(EventLogError) as caught:
        call(log)
    assert isinstance(caught.value, (InvalidEventError, EventLogError))
    assert _dump(log) == before


# -- any integer as an offset or position ------------------------------------------------------------

offsets = st.one_of(st.integers(-3, 10), st.integers(-(2**70), 2**70))


@fuzz
@given(after=offsets, upto=st.one_of(st.none(), offsets), run=st.sampled_from(["a", "b", "missing"]))
def test_any_offset_to_a_read_is_served_or_a_named_error(
    log: eventlog.EventLog, after: int, upto: int | None, run: str
) -> None:
    head = log.head(run)
    calls = {
        "read": lambda: list(log.read(run, after, upto)),
        "entry": lambda: log.entry(run, after),
        "state_at": lambda: log.state_at(run, after),
        "feed": lambda: list(log.feed(after=after, limit=None if upto is None or upto < 0 else upto)),
        "fork": lambda: log.fork(run, after, "fuzz-fork"),
        "save": lambda: log.checkpoints.save(run, after),
    }
    for name, call in calls.items():
        before = _dump(log) if name in ("fork", "save") else None
        try:
            result = call()
        except EventLogError:
            if before is not None:
                assert _dump(log) == before
            continue
        if name == "read":
            stop = head if upto is None else upto
            assert [e.offset for e in result] == list(range(after + 1, stop + 1))
        elif name == "fork":
            assert 0 <= after <= head
            log.delete_run("fuzz-fork")
