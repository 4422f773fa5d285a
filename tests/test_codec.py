"""The record pipeline: every event kind round-trips, frames are checked, damage is named, sizes are bounded."""

from __future__ import annotations

import math
import struct
import tempfile
from pathlib import Path
from typing import Any

import lmdb
import msgspec
import msgspec.inspect as mi
import pytest
import zstandard
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import eventlog
from eventlog import events as ev
from eventlog.agent import events as standard_kinds
from eventlog.record.codec import RAW, ZSTD, ZSTD_DICT, Codec, EntryRecord, frame, train_dictionary, unframe

INT_MIN, INT_MAX = -(2**63), 2**64 - 1  # what msgpack holds

# -- strategies built from each kind's own field types -------------------------------------

edge_ints = st.sampled_from(
    [0, 1, -1, 127, 128, -32, -33, 255, 256, 2**31 - 1, -(2**31), 2**32, 2**63 - 1, 2**63, INT_MIN, INT_MAX]
)
ints = st.one_of(edge_ints, st.integers(INT_MIN, INT_MAX))
floats = st.one_of(
    st.sampled_from([0.0, -0.0, math.nan, math.inf, -math.inf, 5e-324, 1.7976931348623157e308, -1.5]),
    st.floats(allow_nan=True, allow_infinity=True),
)
texts = st.one_of(
    st.sampled_from(["", " ", "\x00", "é", "日本語", "🚀", "a" * 300, "\u200b\ufeff"]),
    st.text(st.characters(exclude_categories=("Cs",)), max_size=40),
)
any_values = st.recursive(
    st.one_of(st.none(), st.booleans(), ints, floats, texts, st.binary(max_size=40)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(texts, inner, max_size=4),
    ),
    max_leaves=12,
)


def strategy_for(t: mi.Type) -> st.SearchStrategy[Any]:
    """A strategy for any value of the msgspec type `t`, edges included."""
    if isinstance(t, mi.IntType):
        return ints
    if isinstance(t, mi.FloatType):
        return floats
    if isinstance(t, mi.StrType):
        return texts
    if isinstance(t, mi.BoolType):
        return st.booleans()
    if isinstance(t, mi.BytesType):
        return st.binary(max_size=64)
    if isinstance(t, mi.NoneType):
        return st.none()
    if isinstance(t, mi.AnyType):
        return any_values
    if isinstance(t, mi.ListType):
        return st.lists(strategy_for(t.item_type), max_size=4)
    if isinstance(t, mi.DictType):
        return st.dictionaries(strategy_for(t.key_type), strategy_for(t.value_type), max_size=4)
    if isinstance(t, mi.UnionType):
        return st.one_of(*[strategy_for(u) for u in t.types])
    if isinstance(t, mi.LiteralType):
        return st.sampled_from(t.values)
    if isinstance(t, mi.StructType):
        return struct_strategy(t)
    raise NotImplementedError(f"no strategy for {t!r}")


def struct_strategy(t: mi.StructType) -> st.SearchStrategy[Any]:
    fields = {}
    optional = {}
    for f in t.fields:
        (fields if f.required else optional)[f.name] = strategy_for(f.type)
    return st.fixed_dictionaries(fields, optional=optional).map(lambda kw: t.cls(**kw))


def event_strategy(kind: type[eventlog.Event]) -> st.SearchStrategy[eventlog.Event]:
    info = mi.type_info(kind)
    assert isinstance(info, mi.StructType)
    return struct_strategy(info)


def _trained() -> bytes:
    """A zstd dictionary trained from events like the ones these tests make."""
    words = "tide moon sea water north shore wave current harbour pull earth turn".split()
    samples = [
        msgspec.msgpack.encode(
            [
                i,
                i * 7,
                f"id{i}",
                None,
                {"kind": "message.user", "content": " ".join(words[(i * j) % 12] for j in range(40))},
            ]
        )
        for i in range(400)
    ]
    trained = train_dictionary(samples)
    assert trained is not None
    return trained


TRAINED = _trained()


def codec() -> Codec:
    """A codec that knows one trained dictionary, id 1."""
    return Codec(lambda dict_id: TRAINED if dict_id == 1 else None, eventlog._limits.record_size_bytes_max)


def entry(c: Codec, record: EntryRecord, dict_id: int) -> bytes:
    """A stored entry, as the log writes one."""
    return c.encode_entry(
        record.position,
        record.time_ns,
        record.event_id,
        c.encode_meta(record.meta),
        c.encode_event(record.event),
        dict_id,
        ("events", b"k"),
    )


def canonical(value: object) -> bytes:
    return msgspec.msgpack.encode(value)


STANDARD = sorted(standard_kinds._STANDARD, key=lambda k: k.__struct_config__.tag)  # type: ignore[union-attr]


def test_every_standard_kind_is_registered_and_has_a_strategy() -> None:
    registered = ev.kinds()
    assert len(STANDARD) == 21
    for kind in STANDARD:
        assert registered[kind.__struct_config__.tag] is kind  # type: ignore[index]
        event_strategy(kind)  # every field type is covered


# -- round trips -------------------------------------------------------------------------


@pytest.mark.parametrize("kind", STANDARD, ids=lambda k: k.__struct_config__.tag)
@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    position=st.integers(1, INT_MAX),
    time_ns=ints,
    event_id=texts,
    meta=st.none() | st.dictionaries(texts, any_values, max_size=3),
)
def test_every_kind_round_trips_through_an_entry(
    kind: type[eventlog.Event],
    data: st.DataObject,
    position: int,
    time_ns: int,
    event_id: str,
    meta: dict[str, Any] | None,
) -> None:
    event = data.draw(event_strategy(kind))
    c = codec()
    record = EntryRecord(position, time_ns, event_id, meta, event)
    for dict_id in (0, 1):
        stored = entry(c, record, dict_id)
        back = c.decode_entry(stored, b"k")
        assert type(back.event) is kind
        assert canonical(back) == canonical(record)
        assert canonical(back.event) == canonical(event)
        assert (back.position, back.time_ns, back.event_id) == (position, time_ns, event_id)
        # and once more from the decoded record: a fixed point
        assert entry(c, back, dict_id) == stored
    assert c.decode_event(c.encode_event(event)) == event or canonical(
        c.decode_event(c.encode_event(event))
    ) == canonical(event)


@settings(max_examples=100)
@given(data=st.data())
def test_any_registered_kind_round_trips(data: st.DataObject) -> None:
    """Whatever kinds are registered when this runs (standard and users' own)."""
    supported = []
    for kind in ev.kinds().values():
        try:
            event_strategy(kind)
        except NotImplementedError:
            continue
        supported.append(kind)
    assert set(standard_kinds._STANDARD) <= set(supported)
    kind = data.draw(st.sampled_from(sorted(supported, key=lambda k: k.__struct_config__.tag)))  # type: ignore[union-attr]
    event = data.draw(event_strategy(kind))
    c = codec()
    back = c.decode_entry(entry(c, EntryRecord(1, 0, "e", None, event), 0), b"k")
    assert canonical(back.event) == canonical(event)


@settings(
    max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow], deadline=None
)
@given(data=st.data())
def test_events_round_trip_through_a_real_lmdb_log(tmp_path: Path, data: st.DataObject) -> None:
    batch = data.draw(st.lists(st.sampled_from(STANDARD).flatmap(event_strategy), min_size=1, max_size=8))
    path = Path(tempfile.mkdtemp(dir=tmp_path)) / "log"
    with eventlog.open(path, durability="none") as log:
        log.append_many("r", batch)
    with eventlog.open(path, readonly=True) as log:
        assert [canonical(e.event) for e in log.read("r")] == [canonical(e) for e in batch]


def test_long_messages_are_compressed_and_round_trip() -> None:
    c = codec()
    event = ev.UserMessage(content="the same words again " * 500)
    stored = entry(c, EntryRecord(1, 2, "id", None, event), 0)
    assert len(stored) < len(canonical(event)) // 4
    assert unframe(stored)[0] == ZSTD
    assert c.decode_entry(stored, b"k").event == event
    with_dict = entry(c, EntryRecord(1, 2, "id", None, event), 1)
    assert unframe(with_dict)[:2] == (ZSTD_DICT, 1) and len(with_dict) <= len(stored)
    assert codec().decode_entry(with_dict, b"k").event == event  # a fresh codec loads the dictionary by its id


# -- frames ------------------------------------------------------------------------------


@given(
    payload=st.binary(max_size=300),
    compression=st.sampled_from([RAW, ZSTD, ZSTD_DICT]),
    dict_id=st.integers(1, 2**32 - 1),
)
def test_unframe_inverts_frame(payload: bytes, compression: int, dict_id: int) -> None:
    dict_id = dict_id if compression == ZSTD_DICT else 0
    value = frame(payload, compression, dict_id)
    assert len(value) == eventlog._limits.record_header_size_bytes + len(payload)
    got_compression, got_dict, got_payload = unframe(value)
    assert (got_compression, got_dict, bytes(got_payload)) == (compression, dict_id, payload)


@given(payload=st.binary(max_size=300), data=st.data())
def test_any_changed_byte_of_a_frame_is_refused(payload: bytes, data: st.DataObject) -> None:
    value = bytearray(frame(payload, RAW, 0))
    i = data.draw(st.integers(0, len(value) - 1))
    value[i] ^= data.draw(st.integers(1, 255))
    with pytest.raises(eventlog.errors.CorruptRecordError):
        unframe(bytes(value))


@given(payload=st.binary(max_size=300), data=st.data())
def test_a_truncated_or_extended_frame_is_refused(payload: bytes, data: st.DataObject) -> None:
    value = frame(payload, RAW, 0)
    cut = data.draw(st.integers(0, len(value) - 1))
    with pytest.raises(eventlog.errors.CorruptRecordError):
        unframe(value[:cut])
    extra = data.draw(st.binary(min_size=1, max_size=8))
    with pytest.raises(eventlog.errors.CorruptRecordError):
        unframe(value + extra)


@given(payload=st.binary(max_size=5000) | st.text(max_size=3000).map(str.encode))
def test_compress_then_payload_round_trips(payload: bytes) -> None:
    c = codec()
    stored = c.compress(payload, 0, None)
    assert len(stored) <= len(payload) + eventlog._limits.record_header_size_bytes
    assert bytes(c.payload(stored, ("events", b"k"))) == payload


def test_a_frame_of_another_format_version_is_refused() -> None:
    body = struct.pack(">BBI", eventlog._limits.format_version + 1, RAW, 0) + b"payload"
    import zlib

    for value in (zlib.crc32(body).to_bytes(4, "big") + body, frame(b"payload", 7, 0), frame(b"payload", RAW, 5)):
        with pytest.raises(eventlog.errors.CorruptRecordError):
            codec().payload(value, ("events", b"k"))


# -- bounded decompression -----------------------------------------------------------------


def _zstd_frame_declaring(size: int, block: bytes) -> bytes:
    """A hand-made zstd frame: single segment, 8-byte content size `size`, one raw last block."""
    magic = (0xFD2FB528).to_bytes(4, "little")
    descriptor = bytes([0b1110_0000])  # content size field of 8 bytes, single segment
    header = (1 | (0 << 1) | (len(block) << 3)).to_bytes(3, "little")  # last block, raw
    return magic + descriptor + size.to_bytes(8, "little") + header + block


def test_hand_made_zstd_frame_is_valid_when_honest() -> None:
    honest = _zstd_frame_declaring(5, b"hello")
    assert zstandard.frame_content_size(honest) == 5
    assert zstandard.ZstdDecompressor().decompress(honest) == b"hello"
    assert bytes(codec().payload(frame(honest, ZSTD, 0), ("events", b"k"))) == b"hello"


@pytest.mark.parametrize("declared", [eventlog._limits.record_size_bytes_max + 1, 2**40, 2**62])
def test_zstd_frame_declaring_a_huge_size_is_refused_before_decompression(declared: int) -> None:
    bomb = frame(_zstd_frame_declaring(declared, b"hello"), ZSTD, 0)
    # A decompressor would fail differently (the block holds 5 bytes); the declared size is refused first.
    with pytest.raises(eventlog.errors.CorruptRecordError, match=f"declares {declared} bytes, over the limit"):
        codec().payload(bomb, ("events", b"k"))
    with pytest.raises(eventlog.errors.CorruptRecordError, match="over the limit"):
        codec().decode_entry(bomb, b"k")


def test_a_real_decompression_bomb_is_refused() -> None:
    zeros = zstandard.ZstdCompressor().compress(bytes(eventlog._limits.record_size_bytes_max + 1024))
    assert len(zeros) < 4096
    with pytest.raises(eventlog.errors.CorruptRecordError, match="over the limit"):
        codec().decode_entry(frame(zeros, ZSTD, 0), b"k")


def test_zstd_frame_without_a_content_size_is_refused() -> None:
    data = b"x" * 5000
    blob = zstandard.ZstdCompressor(write_content_size=False).compress(data)
    assert zstandard.frame_content_size(blob) == -1
    with pytest.raises(eventlog.errors.CorruptRecordError, match="content size"):
        codec().payload(frame(blob, ZSTD, 0), ("events", b"k"))


def test_zstd_frame_whose_content_differs_from_its_declared_size_is_refused() -> None:
    liar = _zstd_frame_declaring(10, b"hello")
    with pytest.raises(eventlog.errors.CorruptRecordError):
        codec().payload(frame(liar, ZSTD, 0), ("events", b"k"))


def test_missing_dictionary_is_a_corrupt_record() -> None:
    with pytest.raises(eventlog.errors.CorruptRecordError, match="dictionary 3"):
        codec().payload(frame(_zstd_frame_declaring(5, b"hello"), ZSTD_DICT, 3), ("events", b"k"))


# -- arbitrary bytes ---------------------------------------------------------------------


@settings(max_examples=300)
@given(value=st.binary(max_size=200))
@example(value=b"")
@example(value=bytes(10))
def test_arbitrary_bytes_raise_only_corrupt_record(value: bytes) -> None:
    with pytest.raises(eventlog.errors.CorruptRecordError):
        codec().decode_entry(value, b"k")


@settings(max_examples=500)
@given(payload=st.binary(max_size=200), compression=st.sampled_from([RAW, ZSTD, ZSTD_DICT]))
@example(payload=b"\x28\xb5\x2f\xfd\x00", compression=ZSTD)
@example(payload=b"\x28\xb5\x2f\xfd", compression=ZSTD)
@example(payload=b"garbage!", compression=ZSTD)
@example(payload=b"\x95\x01\x00\xa1e\xc0\x81\xa4kind\xa4nope", compression=RAW)
def test_arbitrary_payloads_with_a_good_checksum_raise_only_corrupt_record(payload: bytes, compression: int) -> None:
    """A frame whose checksum is right but whose payload is garbage: every layer below must refuse it by name."""
    value = frame(payload, compression, 9 if compression == ZSTD_DICT else 0)
    try:
        record = codec().decode_entry(value, b"k")
    except (eventlog.errors.CorruptRecordError, eventlog.errors.UnknownKindError):
        return
    # A payload that happens to be a valid entry must decode to a registered kind.
    assert isinstance(record.event, eventlog.Event)


@settings(max_examples=300)
@given(data=st.data())
def test_mutated_valid_entries_raise_only_corrupt_record(data: st.DataObject) -> None:
    """Valid msgpack entries with bytes changed, reframed with a good checksum."""
    event = data.draw(st.sampled_from(STANDARD).flatmap(event_strategy))
    payload = bytearray(msgspec.msgpack.encode(EntryRecord(1, 2, "e", None, event)))
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(payload) - 1))
        payload[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(1, len(payload)))
    value = frame(bytes(payload[:cut]), RAW, 0)
    try:
        record = codec().decode_entry(value, b"k")
    except (
        eventlog.errors.CorruptRecordError,
        eventlog.errors.UnknownKindError,
    ):  # a changed tag reads as an unknown kind
        return
    assert isinstance(record.event, eventlog.Event)


# -- damage in a real LMDB log -----------------------------------------------------------


def _event_key(log: eventlog.EventLog, run_id: str, offset: int) -> bytes:
    """The events-table key of (run, offset), found through the feed (no private helpers)."""

    def find(txn: Any) -> bytes:
        for _, ref in txn.scan("feed", b"", None):
            if txn.get("run_numbers", ref[:8]) == run_id.encode() and int.from_bytes(ref[8:16], "big") == offset:
                return ref
        raise AssertionError("not found")

    return log.store.read(find)


@pytest.mark.parametrize("where", ["first", "header", "middle", "last"])
def test_flipped_byte_in_a_stored_event_is_named_by_run_and_offset(tmp_path: Path, where: str) -> None:
    path = tmp_path / "log"
    with eventlog.open(path) as log:
        log.append_many("other", [ev.UserMessage(content="x")])
        log.append_many("run-7", [ev.UserMessage(content=f"message {i} " * 20) for i in range(1, 6)])
        key = _event_key(log, "run-7", 3)
    # Flip one byte of the stored value with LMDB itself, outside the log.
    env = lmdb.open(str(path), max_dbs=eventlog._limits.lmdb_max_dbs)
    db = env.open_db(b"events")
    with env.begin(write=True) as txn:
        value = bytearray(txn.get(key, db=db))
        i = {"first": 0, "header": 5, "middle": len(value) // 2, "last": len(value) - 1}[where]
        value[i] ^= 0x40
        txn.put(key, bytes(value), db=db)
    env.close()

    with eventlog.open(path) as log:
        assert [e.offset for e in log.read("run-7", upto=2)] == [1, 2]
        assert [e.offset for e in log.read("run-7", after=3)] == [4, 5]
        with pytest.raises(eventlog.errors.CorruptRecordError) as info:
            list(log.read("run-7"))
        assert (info.value.run_id, info.value.offset) == ("run-7", 3)
        assert "'run-7' offset 3" in str(info.value)
        with pytest.raises(eventlog.errors.CorruptRecordError) as info:
            log.entry("run-7", 3)
        assert (info.value.run_id, info.value.offset) == ("run-7", 3)
        with pytest.raises(eventlog.errors.CorruptRecordError) as info:
            log.state_at("run-7", 4)
        assert (info.value.run_id, info.value.offset) == ("run-7", 3)
        with pytest.raises(eventlog.errors.CorruptRecordError) as info:
            list(log.feed())
        assert (info.value.run_id, info.value.offset) == ("run-7", 3)
        log.fork("run-7", 4, "child")
        with pytest.raises(eventlog.errors.CorruptRecordError) as info:
            list(log.read("child"))
        assert (info.value.run_id, info.value.offset) == ("run-7", 3)  # the run that holds the record
        report = log.verify()
        assert not report.ok
        assert any(p.run_id == "run-7" and p.offset == 3 and p.kind == "corrupt" for p in report.problems), (
            report.problems
        )
        assert log.state_at("other").messages[0].content == "x"


def test_flipped_byte_through_the_store_is_named(tmp_path: Path) -> None:
    with eventlog.open(tmp_path / "log") as log:
        log.append_many("r", [ev.StepCompleted(node="a", superstep=1, update={"v": i}) for i in range(3)])
        key = _event_key(log, "r", 2)

        def flip(txn: Any) -> None:
            value = bytearray(txn.get("events", key))
            value[-1] ^= 1
            txn.put("events", key, bytes(value))

        log.store.write(flip)
        with pytest.raises(eventlog.errors.CorruptRecordError, match="'r' offset 2"):
            log.state_at("r")
        assert log.state_at("r", 1).values == {"v": 0}


# -- users' own kinds ----------------------------------------------------------------------


class Approved(eventlog.Event, frozen=True, tag="test_codec.approved"):
    by: str
    amount: int = 0
    ratio: float = 1.0
    tags: list[str] = []  # noqa: RUF012 - msgspec copies mutable defaults
    extra: dict[str, Any] = {}  # noqa: RUF012
    blob: bytes = b""
    note: str | None = None


eventlog.register(Approved)


def test_user_kind_round_trips() -> None:
    c = codec()
    event = Approved(
        by="ann", amount=INT_MAX, ratio=-math.inf, tags=["x", "ü"], extra={"n": [1, None]}, blob=b"\x00\xff", note="ok"
    )
    back = c.decode_entry(entry(c, EntryRecord(1, 1, "e", None, event), 0), b"k").event
    assert back == event and type(back) is Approved


@settings(max_examples=50)
@given(event=event_strategy(Approved))
def test_user_kind_round_trips_for_any_value(event: Approved) -> None:
    c = codec()
    assert canonical(c.decode_entry(entry(c, EntryRecord(1, 1, "e", None, event), 0), b"k").event) == canonical(event)


def test_user_kind_in_a_real_log(tmp_path: Path) -> None:
    with eventlog.open(tmp_path / "log") as log:
        log.append("r", Approved(by="bob", amount=-5))
        log.append("r", ev.UserMessage(content="hi"))
    with eventlog.open(tmp_path / "log") as log:
        assert [e.event for e in log.read("r")] == [Approved(by="bob", amount=-5), ev.UserMessage(content="hi")]
        assert log.state_at("r").messages == [ev.Message(role="user", content="hi")]  # unknown kinds leave the state


def test_duplicate_tag_is_refused() -> None:
    class Impostor(eventlog.Event, frozen=True, tag="test_codec.approved"):
        by: str

    with pytest.raises(ValueError, match="test_codec.approved"):
        eventlog.register(Impostor)
    assert ev.kinds()["test_codec.approved"] is Approved
    with pytest.raises(ValueError):
        eventlog.register(type("StepAgain", (eventlog.Event,), {}, frozen=True, tag="step.completed"))
    assert eventlog.register(Approved) is Approved  # registering the same kind again is harmless
    with pytest.raises(eventlog.errors.InvalidEventError):
        entry(codec(), EntryRecord(1, 1, "e", None, Impostor(by="x")), 0)


def test_register_refuses_what_is_not_a_kind() -> None:
    class Plain(msgspec.Struct, tag="test_codec.plain"):
        x: int

    with pytest.raises(TypeError):
        eventlog.register(Plain)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        eventlog.register(eventlog.Event)


def test_decoding_an_unregistered_tag_is_an_unknown_kind_not_corruption() -> None:
    payload = msgspec.msgpack.encode([1, 2, "e", None, {"kind": "nobody.knows", "x": 1}])
    with pytest.raises(eventlog.errors.UnknownKindError, match="nobody.knows") as info:
        codec().decode_entry(frame(payload, RAW, 0), b"k")
    assert not isinstance(info.value, eventlog.errors.CorruptRecordError) and info.value.kind == "nobody.knows"


def test_nan_survives_bit_for_bit() -> None:
    c = codec()
    weird_nan = struct.unpack(">d", bytes.fromhex("7ff8000000000123"))[0]
    event = ev.ToolCallCompleted(call_id="c", tool="t", output=[weird_nan, math.nan], latency_ms=math.nan)
    back = c.decode_entry(entry(c, EntryRecord(1, 1, "e", None, event), 0), b"k").event
    assert canonical(back) == canonical(event)
