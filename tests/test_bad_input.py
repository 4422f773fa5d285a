"""Bad input gets a clear, named error and writes nothing (head and feed unchanged)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import lmdb
import msgspec
import pytest

import eventlog
from eventlog.events import StepCompleted, UserMessage
from eventlog.record._keys import u64

OpenLog = Callable[..., eventlog.EventLog]


def step(i: int) -> StepCompleted:
    return StepCompleted(node=f"n{i}", superstep=i, update={"i": i})


def snapshot(log: eventlog.EventLog) -> tuple[list[str], list[tuple[str, int, int, str]], dict[str, int]]:
    """Everything visible of a log: runs, feed, heads."""
    runs = log.runs()
    return runs, [(e.run_id, e.offset, e.position, e.event_id) for e in log.feed()], {r: log.head(r) for r in runs}


@pytest.fixture
def seeded(log: eventlog.EventLog) -> Iterator[eventlog.EventLog]:
    log.append_many("r", [step(1), step(2), step(3)])
    log.append("s", UserMessage(content="hi"))
    log.checkpoints.save("r", 2, checkpoint_id="c")
    yield log


def unchanged(log: eventlog.EventLog, before: Any) -> None:
    assert snapshot(log) == before
    assert [c.checkpoint_id for c in log.checkpoints.list("r")] == ["c"]


# -- events ------------------------------------------------------------------------------


class NotRegistered(eventlog.Event, frozen=True, tag="test_bad_input.not_registered"):
    x: int = 0


class PlainStruct(msgspec.Struct, tag="test_bad_input.plain"):
    x: int = 0


@pytest.mark.parametrize(
    "bad",
    [
        None,
        "an event",
        {"kind": "step.completed", "node": "a", "superstep": 1},
        42,
        PlainStruct(),
        NotRegistered(),
        UserMessage,
    ],
    ids=["none", "str", "dict", "int", "plain-struct", "unregistered-kind", "the-class-itself"],
)
def test_what_is_not_a_registered_event_is_refused(seeded: eventlog.EventLog, bad: Any) -> None:
    before = snapshot(seeded)
    with pytest.raises(eventlog.errors.InvalidEventError, match="not a registered event kind"):
        seeded.append("r", bad)
    with pytest.raises(eventlog.errors.InvalidEventError):
        seeded.append_many("r", [step(4), bad, step(5)])  # one bad event spoils the batch
    with pytest.raises(eventlog.errors.InvalidEventError):
        seeded.append("new-run", bad)
    with pytest.raises(eventlog.errors.InvalidEventError):
        seeded.writer("r").append(bad)
    unchanged(seeded, before)
    assert "new-run" not in seeded.runs()


@pytest.mark.parametrize(
    ("event", "meta"),
    [
        (UserMessage(content="lone surrogate \ud800"), None),
        (StepCompleted(node="a", superstep=1, update={"x": object()}), None),
        (StepCompleted(node="a", superstep=2**64), None),
        (StepCompleted(node="a", superstep=1, update={"big": -(2**63) - 1}), None),
        (step(1), {"m": object()}),
    ],
    ids=["surrogate", "object-in-any", "int-over-64-bits", "int-under-64-bits", "object-in-meta"],
)
def test_an_event_that_cannot_be_encoded_is_refused(seeded: eventlog.EventLog, event: Any, meta: Any) -> None:
    before = snapshot(seeded)
    with pytest.raises(eventlog.errors.InvalidEventError, match="cannot be encoded"):
        seeded.append("r", event, meta=meta)
    with pytest.raises(eventlog.errors.InvalidEventError):
        seeded.append_many("new-run", [step(1), event], meta=meta)
    unchanged(seeded, before)


def test_an_event_over_the_record_limit_is_refused(open_log: OpenLog) -> None:
    log = open_log(record_size_bytes_max=1_000)
    log.append("r", UserMessage(content="small"))
    before = snapshot(log)
    big = UserMessage(content="x" * 2_000)
    with pytest.raises(eventlog.errors.RecordTooLargeError) as info:
        log.append("r", big)
    assert "1000" in str(info.value) and "UserMessage" in str(info.value)
    with pytest.raises(eventlog.errors.RecordTooLargeError):
        log.append_many("r", [UserMessage(content="fine"), big])
    with pytest.raises(eventlog.errors.RecordTooLargeError):
        log.append("other", big)
    assert snapshot(log) == before
    assert "other" not in log.runs()
    # just under the limit is fine
    log.append("r", UserMessage(content="y" * 900))
    assert log.head("r") == 2


def test_an_event_over_the_default_16_mib_limit_is_refused(log: eventlog.EventLog) -> None:
    with pytest.raises(eventlog.errors.RecordTooLargeError, match=str(16 * 1024 * 1024)):
        log.append("r", UserMessage(content="x" * (16 * 1024 * 1024 + 1)))
    assert log.head("r") == 0 and list(log.feed()) == []


def test_empty_batches_and_mismatched_ids_are_refused(seeded: eventlog.EventLog) -> None:
    before = snapshot(seeded)
    with pytest.raises(eventlog.EventLogError, match="at least one event"):
        seeded.append_many("r", [])
    with pytest.raises(eventlog.EventLogError, match="2 event ids for 1 events"):
        seeded.append_many("r", [step(4)], event_ids=["a", "b"])
    with pytest.raises(eventlog.EventLogError, match="event_id"):
        seeded.append("r", step(4), event_id="")
    with pytest.raises(eventlog.EventLogError, match="over the limit"):
        seeded.append("r", step(4), event_id="e" * 257)
    with pytest.raises(eventlog.EventLogError, match="checkpoint_id"):
        seeded.checkpoints.save("r", checkpoint_id="c" * 257)
    unchanged(seeded, before)


# -- run ids -----------------------------------------------------------------------------


BAD_RUN_IDS = ["", None, 7, b"bytes", "x" * 1025, "é" * 513, "🚀" * 256 + "x", "lone \udc80"]


@pytest.mark.parametrize(
    "run_id", BAD_RUN_IDS, ids=["empty", "none", "int", "bytes", "1025-ascii", "1026-utf8", "1025-emoji", "surrogate"]
)
def test_bad_run_ids_are_refused(seeded: eventlog.EventLog, run_id: Any) -> None:
    before = snapshot(seeded)
    calls: list[Callable[[], object]] = [
        lambda: seeded.append(run_id, step(1)),
        lambda: seeded.append_many(run_id, [step(1)]),
        lambda: seeded.fork("r", 1, run_id),
        lambda: list(seeded.read(run_id)),
        lambda: seeded.head(run_id),
        lambda: seeded.state_at(run_id),
        lambda: seeded.writer(run_id),
    ]
    for call in calls:
        with pytest.raises(eventlog.errors.InvalidRunIdError):
            call()
    unchanged(seeded, before)
    assert seeded.run_info("r").forks == 0


def test_the_run_id_limit_is_1024_utf8_bytes(log: eventlog.EventLog) -> None:
    ok = "é" * 512
    log.append(ok, step(1))
    with pytest.raises(eventlog.errors.InvalidRunIdError, match="1026"):
        log.append(ok + "é", step(1))
    assert log.runs() == [ok]


# -- offsets -----------------------------------------------------------------------------


@pytest.mark.parametrize("offset", [-1, 4, 100])
def test_offsets_out_of_range_are_refused(seeded: eventlog.EventLog, offset: int) -> None:
    before = snapshot(seeded)
    with pytest.raises(eventlog.errors.OffsetOutOfRangeError) as info:
        seeded.state_at("r", offset)
    assert (info.value.run_id, info.value.offset, info.value.head) == ("r", offset, 3)
    assert "'r'" in str(info.value) and str(offset) in str(info.value)
    with pytest.raises(eventlog.errors.OffsetOutOfRangeError):
        seeded.entry("r", offset)
    with pytest.raises(eventlog.errors.OffsetOutOfRangeError):
        seeded.fork("r", offset, "fork")
    with pytest.raises(eventlog.errors.OffsetOutOfRangeError):
        seeded.checkpoints.save("r", offset)
    with pytest.raises(eventlog.errors.OffsetOutOfRangeError):
        list(seeded.read("r", after=offset))
    with pytest.raises(eventlog.errors.OffsetOutOfRangeError):
        list(seeded.read("r", after=0, upto=offset))
    unchanged(seeded, before)
    assert "fork" not in seeded.runs()


def test_entry_zero_is_out_of_range(seeded: eventlog.EventLog) -> None:
    with pytest.raises(eventlog.errors.OffsetOutOfRangeError):
        seeded.entry("r", 0)


# -- paths that are not logs -------------------------------------------------------------


def listing(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def test_a_non_empty_directory_is_not_a_log(tmp_path: Path) -> None:
    d = tmp_path / "photos"
    d.mkdir()
    (d / "cat.jpg").write_bytes(b"\xff\xd8 not a log")
    before = listing(d)
    with pytest.raises(eventlog.errors.NotALogError, match="non-empty directory"):
        eventlog.open(d)
    with pytest.raises(eventlog.errors.NotALogError):
        eventlog.open(d, readonly=True)
    assert listing(d) == before


def test_a_plain_file_is_not_a_log(tmp_path: Path) -> None:
    f = tmp_path / "notes.txt"
    f.write_text("hello")
    with pytest.raises(eventlog.errors.NotALogError, match="is a file"):
        eventlog.open(f)
    assert f.read_text() == "hello"


def test_a_foreign_lmdb_environment_is_not_a_log(tmp_path: Path) -> None:
    d = tmp_path / "foreign"
    env = lmdb.open(str(d), max_dbs=4)
    users = env.open_db(b"users")
    with env.begin(write=True) as txn:
        txn.put(b"alice", b"1", db=users)
    env.close()
    with pytest.raises(eventlog.errors.NotALogError, match="another program"):
        eventlog.open(d)
    with pytest.raises(eventlog.errors.NotALogError):
        eventlog.open(d, readonly=True)
    env = lmdb.open(str(d), max_dbs=4)
    with env.begin() as txn:
        assert [bytes(k) for k, _ in txn.cursor()] == [b"users"]  # no table of ours was added
    env.close()


def test_a_foreign_lmdb_with_plain_keys_is_not_a_log(tmp_path: Path) -> None:
    d = tmp_path / "plain"
    env = lmdb.open(str(d))
    with env.begin(write=True) as txn:
        txn.put(b"some-key", b"some-value")
    env.close()
    with pytest.raises(eventlog.errors.NotALogError):
        eventlog.open(d)


def test_a_garbage_data_file_is_not_a_log(tmp_path: Path) -> None:
    d = tmp_path / "garbage"
    d.mkdir()
    (d / "data.mdb").write_bytes(b"\x00garbage" * 1000)
    with pytest.raises(eventlog.errors.NotALogError):
        eventlog.open(d)


def test_readonly_open_of_a_missing_path_is_not_a_log(tmp_path: Path) -> None:
    with pytest.raises(eventlog.errors.NotALogError):
        eventlog.open(tmp_path / "nowhere", readonly=True)
    assert not (tmp_path / "nowhere").exists()


def test_an_unknown_durability_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="durability"):
        eventlog.open(tmp_path / "log", durability="sometimes")


# -- format version ----------------------------------------------------------------------


def test_a_log_of_a_newer_format_version_is_refused(open_log: OpenLog) -> None:
    log = open_log()
    log.append("r", step(1))
    newer = eventlog._limits.format_version + 1
    log.store.write(lambda txn: txn.put("meta", b"format", log.codec.compress(u64(newer), 0, None)))
    log.close()
    with pytest.raises(eventlog.errors.FormatVersionError) as info:
        open_log()
    assert str(newer) in str(info.value) and "Upgrade" in str(info.value)


def test_a_newer_lmdb_log_is_refused_by_open(tmp_path: Path) -> None:
    with eventlog.open(tmp_path / "log") as log:
        log.append("r", step(1))
        log.store.write(lambda txn: txn.put("meta", b"format", log.codec.compress(u64(99), 0, None)))
    with pytest.raises(eventlog.errors.FormatVersionError, match="99"):
        eventlog.open(tmp_path / "log")
    with pytest.raises(eventlog.errors.FormatVersionError):
        eventlog.open(tmp_path / "log", readonly=True)


def test_a_damaged_format_record_is_not_a_log(tmp_path: Path) -> None:
    with eventlog.open(tmp_path / "log") as log:
        log.append("r", step(1))
        log.store.write(lambda txn: txn.put("meta", b"format", b"\x00" * 12))
    with pytest.raises(eventlog.errors.NotALogError, match="format record"):
        eventlog.open(tmp_path / "log")


# -- read-only ---------------------------------------------------------------------------


def test_readonly_refuses_every_write(tmp_path: Path) -> None:
    with eventlog.open(tmp_path / "log") as log:
        log.append_many("r", [step(1), step(2), step(3)])
        log.checkpoints.save("r", 2, checkpoint_id="c")
    with eventlog.open(tmp_path / "log", readonly=True) as log:
        before = snapshot(log)
        writes: list[Callable[[], object]] = [
            lambda: log.append("r", step(4)),
            lambda: log.append_many("new", [step(1)]),
            lambda: log.checkpoints.save("r", 3),
            lambda: log.checkpoints.delete("r", "c"),
            lambda: log.fork("r", 1, "f"),
            lambda: log.prune("r", before=2),
            lambda: log.delete_run("r"),
            lambda: log.writer("r").append(step(4)),
        ]
        for write in writes:
            with pytest.raises(eventlog.errors.ReadOnlyError):
                write()
        assert snapshot(log) == before
        # reads still work
        assert log.state_at("r", 2).values == {"i": 2}
        assert log.checkpoints.load("r", "c").offset == 2
        assert log.verify().ok
    with eventlog.open(tmp_path / "log") as log:
        assert log.head("r") == 3 and log.runs() == ["r"]


def test_a_store_given_as_an_object_opens_with_the_agent_defaults_and_refuses_store_options(tmp_path: Path) -> None:
    from eventlog.store import LMDBStore, MemoryStore

    with eventlog.open(MemoryStore()) as log:
        log.append("r", StepCompleted(node="a", superstep=1, update={"x": 1}))
        assert isinstance(log.reducer, eventlog.AgentReducer) and log.state_at("r").values == {"x": 1}
        assert len(log.writer("r").policy.step(None, StepCompleted(node="b", superstep=1))) == 2
    store = LMDBStore(str(tmp_path / "log"))
    try:
        for option in ({"durability": "none"}, {"pool_size": 2}, {"readonly": True}, {"create": False}):
            with pytest.raises(eventlog.errors.InvalidArgumentError, match="does not apply to a store given"):
                eventlog.open(store, **option)
    finally:
        store.close()


def test_a_policy_of_ones_own_checkpoints_a_writer_and_anything_else_is_refused(log: eventlog.EventLog) -> None:
    class EveryOther:
        """Checkpoints after every second event: any object with Policy's step."""

        def step(self, since: int | None, event: eventlog.Event) -> tuple[int, bool]:
            n = (since or 0) + 1
            return n, n % 2 == 0

    w = log.writer("r", policy=EveryOther())
    for i in range(5):
        w.append(StepCompleted(node="n", superstep=i))
    assert [cp.offset for cp in log.checkpoints.list("r")] == [2, 4]
    with pytest.raises(eventlog.errors.InvalidArgumentError, match="policy must be"):
        log.writer("r", policy="every 2")  # type: ignore[arg-type]
