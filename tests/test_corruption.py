"""Damage a real LMDB log and check that every damage is named, never returned as data, never a crash.

Bytes are flipped inside stored event records, snapshots, checkpoint records and the meta
`format` record; the data file is truncated; foreign files are opened. Opening a damaged
file runs in a subprocess, because a crash there (SIGBUS, SIGSEGV) would take pytest down
with it: the return code tells a named error from a crash.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import lmdb
import pytest

import eventlog
from eventlog.errors import CheckpointNotFoundError, CorruptRecordError
from eventlog.events import AssistantMessage, StepCompleted, UserMessage
from eventlog.record._keys import u64
from eventlog.record.codec import Codec, frame
from eventlog.store._base import TABLES

RUNS = ("a", "b", "c")
EVENTS = 24
DAMAGED_OFFSET = 7


def _events(run: str) -> list:
    out = []
    for i in range(1, EVENTS + 1):
        if i % 3 == 0:
            out.append(UserMessage(content=f"{run} question {i} " + "words " * (i * 3)))
        elif i % 3 == 1:
            out.append(AssistantMessage(content=f"{run} answer {i} " + "more words " * (i * 2)))
        else:
            out.append(StepCompleted(node=f"n{i}", superstep=i, update={"run": run, "i": i, "pad": "x" * (10 * i)}))
    return out


def _make_log(path: Path) -> None:
    with eventlog.open(path) as log:
        for run in RUNS:
            for i, e in enumerate(_events(run), 1):
                log.append(run, e)
                if i in (10, 20):
                    log.checkpoints.save(run, metadata={"at": i})
        assert log.verify().ok


@pytest.fixture
def path(tmp_path: Path) -> Path:
    p = tmp_path / "log"
    _make_log(p)
    return p


def _number(log: eventlog.EventLog, run: str) -> int:
    return log.store.read(lambda txn: log._runs.require(txn, run)).number


def _flip(log: eventlog.EventLog, table: str, key: bytes, index: int, mask: int = 0xFF) -> None:
    """Xor one byte of a stored value, through a real write transaction of the store."""

    def write(txn) -> None:
        value = bytearray(txn.get(table, key))
        value[index % len(value)] ^= mask
        txn.put(table, key, bytes(value))

    log.store.write(write)


def _others_readable(log: eventlog.EventLog, damaged: str) -> None:
    for run in RUNS:
        if run == damaged:
            continue
        entries = list(log.read(run))
        assert [e.offset for e in entries] == list(range(1, EVENTS + 1))
        assert [e.event for e in entries] == _events(run)
        assert log.state_at(run).values  # folds through every offset
        assert log.verify(run).ok


# -- event records ---------------------------------------------------------------------------


@pytest.mark.parametrize("index", [0, 1, 3, 6, 9, 10, 11, 40, -1], ids=lambda i: f"byte{i}")
def test_flipped_byte_in_an_event_is_named_by_run_and_offset(path: Path, index: int) -> None:
    with eventlog.open(path) as log:
        _flip(log, "events", u64(_number(log, "a")) + u64(DAMAGED_OFFSET), index)

        report = log.verify()
        assert not report.ok
        assert {(p.run_id, p.offset, p.kind) for p in report.problems} == {("a", DAMAGED_OFFSET, "corrupt")}

        with pytest.raises(CorruptRecordError) as caught:
            list(log.read("a"))
        assert (caught.value.run_id, caught.value.offset) == ("a", DAMAGED_OFFSET)
        assert f"run 'a' offset {DAMAGED_OFFSET}" in str(caught.value)
        with pytest.raises(CorruptRecordError) as caught:
            log.entry("a", DAMAGED_OFFSET)
        assert (caught.value.run_id, caught.value.offset) == ("a", DAMAGED_OFFSET)
        with pytest.raises(CorruptRecordError) as caught:
            log.state_at("a", DAMAGED_OFFSET + 1)  # no snapshot below: the fold reads the damaged record
        assert (caught.value.run_id, caught.value.offset) == ("a", DAMAGED_OFFSET)
        with pytest.raises(CorruptRecordError) as caught:
            list(log.feed())
        assert (caught.value.run_id, caught.value.offset) == ("a", DAMAGED_OFFSET)

        # What lies around the damage is still served: before it, and from the snapshot after it.
        assert [e.offset for e in log.read("a", upto=DAMAGED_OFFSET - 1)] == list(range(1, DAMAGED_OFFSET))
        assert [e.offset for e in log.read("a", after=DAMAGED_OFFSET)] == list(range(DAMAGED_OFFSET + 1, EVENTS + 1))
        assert log.state_at("a", 10) is not None
        _others_readable(log, "a")


def test_missing_event_record_is_a_named_gap(path: Path) -> None:
    with eventlog.open(path) as log:
        log.store.write(lambda txn: txn.delete("events", u64(_number(log, "b")) + u64(12)))
        report = log.verify()
        assert ("b", 12) in {(p.run_id, p.offset) for p in report.problems}
        with pytest.raises(CorruptRecordError) as caught:
            list(log.read("b"))
        assert (caught.value.run_id, caught.value.offset) == ("b", 12)
        _others_readable(log, "b")


def test_every_single_byte_damage_of_every_record_kind_is_detected(path: Path) -> None:
    """Each byte of stored entries, snapshots, checkpoint and run records, xor 0x01, 0x80 and 0xFF."""
    with eventlog.open(path) as log:
        codec = log.codec
        number = _number(log, "c")
        prefix = u64(number)
        values = log.store.read(
            lambda txn: {
                "event": txn.get("events", prefix + u64(5)),
                "snapshot": txn.scan("snapshots", prefix, u64(number + 1))[0][1],
                "checkpoint": txn.scan("checkpoints", prefix, u64(number + 1))[0][1],
                "run": txn.get("runs", b"c"),
            }
        )
    from eventlog.record._records import CheckpointRecord, RunRecord, SnapshotRecord

    decoders = {
        "event": lambda v: codec.decode_entry(v, prefix + u64(5)),
        "snapshot": lambda v: codec.decode_value(v, SnapshotRecord, ("snapshots", b"")),
        "checkpoint": lambda v: codec.decode_value(v, CheckpointRecord, ("checkpoints", b"")),
        "run": lambda v: codec.decode_value(v, RunRecord, ("runs", b"c")),
    }
    injected = 0
    for kind, value in values.items():
        decoders[kind](value)  # the undamaged record decodes
        for index in range(len(value)):
            for mask in (0x01, 0x80, 0xFF):
                damaged = bytearray(value)
                damaged[index] ^= mask
                injected += 1
                with pytest.raises(CorruptRecordError):
                    decoders[kind](bytes(damaged))
        for cut in range(len(value)):  # every truncation of the record
            injected += 1
            with pytest.raises(CorruptRecordError):
                decoders[kind](value[:cut])
    assert injected > 1000
    print(f"single-byte damages and truncations injected and detected: {injected}")


# -- snapshots and checkpoint records ------------------------------------------------------------


def test_flipped_byte_in_a_snapshot_is_named_by_run_and_offset(path: Path) -> None:
    with eventlog.open(path) as log:
        number = _number(log, "a")
        keys = log.store.read(lambda txn: [k for k, _ in txn.scan("snapshots", u64(number), u64(number + 1))])
        key = next(k for k in keys if int.from_bytes(k[8:16], "big") == 20)
        _flip(log, "snapshots", key, 30)

        report = log.verify()
        assert ("a", 20, "corrupt") in {(p.run_id, p.offset, p.kind) for p in report.problems}
        assert {p.run_id for p in report.problems} == {"a"}
        with pytest.raises(CorruptRecordError) as caught:
            log.state_at("a", 22)
        assert (caught.value.run_id, caught.value.offset) == ("a", 20)
        cp = log.checkpoints.load_latest("a")
        assert cp is not None and cp.offset == 20
        with pytest.raises(CorruptRecordError) as caught:
            cp.state  # noqa: B018 - loading the state is the read under test
        assert (caught.value.run_id, caught.value.offset) == ("a", 20)
        # The events themselves are intact, and states below the damaged snapshot still fold.
        assert [e.event for e in log.read("a")] == _events("a")
        assert log.state_at("a", 15) is not None
        _others_readable(log, "a")


def test_verify_folds_each_run_by_the_reducer_that_checkpointed_it(tmp_path: Path) -> None:
    """A LangGraph thread's snapshots are made by the saver's reducer, not the log's: verify with
    the installed views' reducers folds the thread by its own and finds a damaged snapshot the
    log's reducer never reads; a pruned thread, whose base state only that reducer holds, is
    whole by it, and without it checked but not folded, as a note names."""
    pytest.importorskip("langgraph", reason="the langgraph extra is not installed")
    from ui_support import write_langgraph_thread

    from eventlog.views import view_reducers

    with eventlog.open(tmp_path / "log") as log:
        write_langgraph_thread(log, "t")
        log.append("plain", UserMessage(content="a run of the standard kinds beside it"))
        log.checkpoints.save("plain")
        reducers = view_reducers()
        report = log.verify(reducers=reducers)
        assert report.ok and report.runs == 2, report.problems
        number = _number(log, "t")
        keys = log.store.read(lambda txn: [k for k, _ in txn.scan("snapshots", u64(number), u64(number + 1))])
        assert keys and all(b"langgraph@" in k[16:] for k in keys)
        _flip(log, "snapshots", keys[0], 30)
        assert log.verify().ok  # the log's own reducer has no snapshot of the thread to check
        found = {(p.run_id, p.offset, p.kind) for p in log.verify(reducers=reducers).problems}
        assert found == {("t", int.from_bytes(keys[0][8:16], "big"), "corrupt")}
        log.store.write(lambda txn: txn.delete("snapshots", keys[0]))  # the damage removed: rebuilt below
        head = log.run_info("t").head
        with pytest.raises(CheckpointNotFoundError, match="were made by langgraph@"):
            log.prune("t", before=head)  # by the log's reducer, which made none of them: named, nothing moved
        log.prune("t", before=head, reducer=next(r for r in reducers if r.name == "langgraph"))
        alone = log.verify()  # its base state is the thread reducer's alone: not a problem, a note
        assert alone.ok and [(n.run_id, n.kind) for n in alone.notes] == [("t", "reducer")], alone.problems
        assert log.verify(reducers=reducers).ok


def test_a_msgpack_extension_value_is_refused_on_the_way_in_and_named_on_the_way_out(tmp_path: Path) -> None:
    import msgspec

    ext = msgspec.msgpack.Ext(3, b"x")  # no value of a log: no encoder downstream can write it again
    path = tmp_path / "log"
    with eventlog.open(path) as log:
        with pytest.raises(eventlog.errors.InvalidEventError, match="msgpack extension"):
            log.append("r", StepCompleted(node="a", superstep=1, update={"x": ext}))
        with pytest.raises(eventlog.errors.InvalidEventError, match="msgpack extension"):
            log.append("r", StepCompleted(node="a", superstep=1), meta={"x": ext})
        log.append_many("r", [StepCompleted(node=n, superstep=i) for i, n in enumerate("abc", 1)])
        number = _number(log, "r")
        key = u64(number) + u64(2)
        codec: Codec = log.codec
        held = log.store.read(lambda txn: codec.decode_entry(txn.get("events", key), key))
        planted = msgspec.msgpack.encode({"kind": "step.completed", "node": "b", "superstep": 2, "update": {"x": ext}})
        value = codec.encode_entry(held.position, held.time_ns, held.event_id, b"\xc0", planted, 0, ("events", key))
        log.store.write(lambda txn: txn.put("events", key, value))  # as a raw writer could
        with pytest.raises(CorruptRecordError, match="msgpack extension") as caught:
            list(log.read("r"))
        assert (caught.value.run_id, caught.value.offset) == ("r", 2)
        with pytest.raises(CorruptRecordError):
            log.state_at("r", 3)
        assert ("r", 2) in {(p.run_id, p.offset) for p in log.verify().problems}
    p = subprocess.run(
        [sys.executable, "-m", "eventlog", "--log", str(path), "events", "r"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 5 and "msgpack extension" in p.stderr and "Traceback" not in p.stderr


def test_flipped_byte_in_a_checkpoint_record_is_named_by_run(path: Path) -> None:
    with eventlog.open(path) as log:
        number = _number(log, "b")
        key = log.store.read(lambda txn: txn.scan("checkpoints", u64(number), u64(number + 1))[0][0])
        _flip(log, "checkpoints", key, -3)
        report = log.verify()
        assert {p.run_id for p in report.problems} == {"b"}
        with pytest.raises(CorruptRecordError) as caught:
            log.checkpoints.list("b")
        assert caught.value.run_id == "b"
        assert [e.event for e in log.read("b")] == _events("b")
        _others_readable(log, "b")


# -- opening damaged and foreign files, in a subprocess ----------------------------------------

_PROBE = textwrap.dedent(
    """
    import json, sys
    import eventlog
    path, readonly = sys.argv[1], sys.argv[2] == "1"
    out = {"opened": False}
    try:
        log = eventlog.open(path, readonly=readonly)
    except eventlog.EventLogError as exc:
        out["open_error"] = type(exc).__name__
        out["message"] = str(exc)
    else:
        out["opened"] = True
        try:
            report = log.verify()
            out["problems"] = [[p.run_id, p.offset, p.kind] for p in report.problems]
            out["events"] = sum(1 for _ in log.feed())
        except eventlog.EventLogError as exc:
            out["read_error"] = type(exc).__name__
            out["message"] = str(exc)
        log.close()
    print(json.dumps(out))
    """
)


def _probe(path: Path, readonly: bool = False) -> dict:
    """Open the log in a fresh interpreter; fail the test on a crash or an exception that is not named."""
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, str(path), "1" if readonly else "0"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, f"the log crashed the process (return code {proc.returncode}): {proc.stderr[-2000:]}"
    return json.loads(proc.stdout)


def _page_count(path: Path) -> int:
    env = lmdb.open(str(path), readonly=True, lock=False, max_dbs=16)
    try:
        return env.info()["last_pgno"] + 1
    finally:
        env.close()


@pytest.mark.parametrize("readonly", [False, True], ids=["writable", "readonly"])
@pytest.mark.parametrize("keep", ["1page", "2pages", "3pages", "half", "all_but_2_pages"])
def test_truncated_data_file_fails_with_a_named_error_not_a_crash(path: Path, keep: str, readonly: bool) -> None:
    data = path / "data.mdb"
    pages = _page_count(path)
    size = {"1page": 1, "2pages": 2, "3pages": 3, "half": pages // 2, "all_but_2_pages": pages - 2}[keep] * 4096
    assert size < pages * 4096
    os.truncate(data, size)
    out = _probe(path, readonly)
    if not out["opened"]:
        assert out["open_error"] in ("NotALogError", "CorruptRecordError"), out
    elif "read_error" in out or out["problems"]:  # opened (a writable open pads the file): damage named
        assert out.get("read_error", "CorruptRecordError") == "CorruptRecordError", out
    else:  # the pages cut off were free ones: then every event is there and verify finds nothing
        assert out == {"opened": True, "problems": [], "events": len(RUNS) * EVENTS}, out


def test_truncated_data_file_read_only_names_the_truncation(path: Path) -> None:
    os.truncate(path / "data.mdb", _page_count(path) * 4096 // 2)
    out = _probe(path, readonly=True)
    assert out["open_error"] == "CorruptRecordError"
    assert "truncated" in out["message"]


def test_damaged_format_record_refuses_to_open(path: Path) -> None:
    with eventlog.open(path) as log:
        _flip(log, "meta", b"format", 12)
    out = _probe(path)
    assert out == {"opened": False, "open_error": "NotALogError", "message": out["message"]}
    assert "format record is damaged" in out["message"]


def test_format_record_of_a_newer_version_refuses_to_open(path: Path) -> None:
    with eventlog.open(path) as log:
        codec = Codec(lambda _: None, 1 << 20)
        log.store.write(lambda txn: txn.put("meta", b"format", codec.compress(u64(99), 0, None)))
    out = _probe(path)
    assert out["open_error"] == "FormatVersionError"


def _foreign_random(p: Path) -> None:
    p.mkdir()
    (p / "data.mdb").write_bytes(os.urandom(64 * 1024))


def _foreign_text(p: Path) -> None:
    p.mkdir()
    (p / "data.mdb").write_text("SQLite format 3\0 this is not an LMDB file\n" * 400)


def _foreign_lmdb(p: Path) -> None:
    env = lmdb.open(str(p), max_dbs=4)
    db = env.open_db(b"someone-elses")
    with env.begin(write=True) as txn:
        txn.put(b"k", b"v", db=db)
    env.close()


def _foreign_lmdb_of_log_names(p: Path) -> None:
    """Another program's LMDB whose named databases are called like some of a log's tables."""
    env = lmdb.open(str(p), max_dbs=4)
    for name in (b"events", b"meta"):
        with env.begin(write=True) as txn:
            txn.put(b"k", b"v", db=env.open_db(name, txn=txn))
    env.close()


def _foreign_lmdb_of_every_log_name(p: Path) -> None:
    """Another program's LMDB with a named database for each of a log's tables, and its own data in them."""
    env = lmdb.open(str(p), max_dbs=len(TABLES))
    with env.begin(write=True) as txn:
        for name in TABLES:
            txn.put(b"someone", b"else", db=env.open_db(name.encode(), txn=txn))
    env.close()


def _foreign_lmdb_of_plain_keys(p: Path) -> None:
    """Another program's LMDB whose main database holds plain keys named like a log's tables."""
    env = lmdb.open(str(p))
    with env.begin(write=True) as txn:
        for name in TABLES:
            txn.put(name.encode(), b"not a table")
    env.close()


def _foreign_plain_file(p: Path) -> None:
    p.write_bytes(b"just a file")


def _foreign_dir(p: Path) -> None:
    p.mkdir()
    (p / "notes.txt").write_text("not a log")


def _header_only(p: Path) -> None:
    _make_log(p)
    os.truncate(p / "data.mdb", 100)


_FOREIGN_LMDB = [
    _foreign_lmdb,
    _foreign_lmdb_of_log_names,
    _foreign_lmdb_of_every_log_name,
    _foreign_lmdb_of_plain_keys,
]


@pytest.mark.parametrize(
    "make", [_foreign_random, _foreign_text, *_FOREIGN_LMDB, _foreign_plain_file, _foreign_dir, _header_only]
)
@pytest.mark.parametrize("readonly", [False, True], ids=["writable", "readonly"])
def test_foreign_files_are_not_a_log(tmp_path: Path, make, readonly: bool) -> None:
    p = tmp_path / "x"
    make(p)
    before = sorted((f.name, f.stat().st_size) for f in p.iterdir()) if p.is_dir() else None
    data = (p / "data.mdb").read_bytes() if make in _FOREIGN_LMDB else None
    out = _probe(p, readonly)
    assert out["opened"] is False and out["open_error"] == "NotALogError", out
    if data is not None:
        assert (p / "data.mdb").read_bytes() == data  # another program's database is never written
    if before is not None:
        assert sorted((f.name, f.stat().st_size) for f in p.iterdir()) == before  # nothing made beside it
    if make is _foreign_lmdb and before is not None:
        env = lmdb.open(str(p), readonly=True, lock=False, max_dbs=4)
        db = env.open_db(b"someone-elses", create=False)
        with env.begin() as txn:
            assert txn.get(b"k", db=db) == b"v"  # left as it was
        env.close()


def test_direct_frames_with_a_bad_header_are_refused() -> None:
    codec = Codec(lambda _: None, 1 << 20)
    good = frame(b"\x90", 0, 0)
    for damaged in (b"", good[:9], bytes([2]) + good[1:], good[:1] + bytes([7]) + good[2:]):
        with pytest.raises(CorruptRecordError):
            codec.decode_entry(damaged, b"")


def test_tables_named_in_the_format_are_the_tables_of_the_log(path: Path) -> None:
    env = lmdb.open(str(path), readonly=True, lock=False, max_dbs=16)
    with env.begin() as txn:
        names = {bytes(k).decode() for k, _ in txn.cursor()}
    env.close()
    assert names == set(TABLES)


# -- a store of data without a log's format record, on every store ------------------------------


@pytest.mark.parametrize("table", TABLES)
def test_data_without_a_format_record_is_not_a_log(backend: str, tmp_path: Path, table: str) -> None:
    from eventlog.store import LMDBStore, MemoryStore

    store: Any
    if backend == "memory":
        store = MemoryStore()
    elif backend == "lmdb":
        store = LMDBStore(tmp_path / "x")
    else:
        from eventlog.store.postgres import PostgresStore

        store = PostgresStore(os.environ["EVENTLOG_TEST_PG_DSN"], schema=f"t_fmt_{os.getpid()}_{TABLES.index(table)}")
    try:
        key = b"someone" if table in ("meta", "runs") else bytes(range(1, 17)) + b"else"  # a key of the table's layout
        key = (
            bytes(7) + b"\x01"
            if table == "feed"
            else key[:8]
            if table == "run_numbers"
            else key[:16]
            if table in ("events", "checkpoints")
            else key
        )
        value = bytes(range(16)) if table == "feed" else bytes(8) if table.endswith("_ids") else b"else"
        store.write(lambda txn: txn.put(table, key, value))
        with pytest.raises(eventlog.errors.NotALogError, match=table):
            eventlog.open(store)
        assert store.read(lambda txn: [t for t in TABLES if txn.scan(t, b"", None)]) == [table]  # nothing written
    finally:
        store.close()
        if backend == "postgres":
            PostgresStore.drop_schema(os.environ["EVENTLOG_TEST_PG_DSN"], store.schema)


class _Seen:
    """A reducer that keeps the superstep of every event it folds."""

    name = "seen"
    version = 1
    state_type = list

    def initial(self) -> list[int]:
        return []

    def apply(self, state: list[int], event: Any) -> list[int]:
        return [*state, event.superstep]


@pytest.mark.parametrize("damaged", [1, 40, 64, 65, 100, 150])
def test_a_fold_and_a_read_stop_at_the_damaged_event_after_every_event_before_it(tmp_path: Path, damaged: int) -> None:
    """Events are checked and decoded in groups (`fold_decode_entries`): a damaged one anywhere in
    a group is still named by its offset, after every event before it was folded."""
    seen: list[list[int]] = []

    class Watching(_Seen):
        def apply(self, state: list[int], event: Any) -> list[int]:
            out = super().apply(state, event)
            seen.append(out)
            return out

    n = 150
    with eventlog.open(tmp_path / "log", durability="none") as log:
        log.append_many("a", [StepCompleted(node="n", superstep=i, update={"i": i}) for i in range(1, n + 1)])
        assert log.state_at("a", reducer=_Seen()) == list(range(1, n + 1))
        _flip(log, "events", u64(_number(log, "a")) + u64(damaged), 20)
        with pytest.raises(CorruptRecordError) as caught:
            log.state_at("a", reducer=Watching())
        assert (caught.value.run_id, caught.value.offset) == ("a", damaged)
        assert (seen[-1] if seen else []) == list(range(1, damaged))
        assert log.state_at("a", damaged - 1, reducer=_Seen()) == list(range(1, damaged))
        read: list[int] = []
        with pytest.raises(CorruptRecordError) as caught:
            read.extend(e.offset for e in log.read("a"))
        assert (caught.value.run_id, caught.value.offset) == ("a", damaged)
        assert read == list(range(1, damaged))
