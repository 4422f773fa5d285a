"""Data safety: an acknowledged append always reads back, bad input is refused before anything is
written, and every fault is named. One test (or more) for each class of fault in
docs/reliability.md, "Fault classes", on every store where it applies."""

from __future__ import annotations

import gc
import itertools
import math
import os
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import eventlog
from eventlog import events as ev
from eventlog.events import StepCompleted, UserMessage
from eventlog.record._keys import u64

OpenLog = Callable[..., eventlog.EventLog[Any]]
ROOT = Path(__file__).resolve().parents[1]
PG_DSN = os.environ.get("EVENTLOG_TEST_PG_DSN")


def step(i: int) -> StepCompleted:
    return StepCompleted(node=f"n{i}", superstep=i, update={"i": i})


def visible(log: eventlog.EventLog[Any]) -> Any:
    """Everything a reader sees of a log: runs, heads, the feed, checkpoints."""
    runs = log.runs()
    return (
        runs,
        {r: log.head(r) for r in runs},
        [(e.run_id, e.offset, e.position, e.event_id) for e in log.feed()],
        {r: [c.checkpoint_id for c in log.checkpoints.list(r)] for r in runs},
    )


@pytest.fixture
def seeded(log: eventlog.EventLog[Any]) -> eventlog.EventLog[Any]:
    log.append_many("r", [step(1), step(2)])
    log.append("s", UserMessage(content="hi"))
    return log


# -- 1. poison events --------------------------------------------------------------------------


POISON = [
    pytest.param(lambda: StepCompleted(node=123, superstep=1), None, id="int-for-str"),  # type: ignore[arg-type]
    pytest.param(lambda: StepCompleted(node="a", superstep="1"), None, id="str-for-int"),  # type: ignore[arg-type]
    pytest.param(lambda: StepCompleted(node="a", superstep=True), None, id="bool-for-int"),
    pytest.param(lambda: StepCompleted(node="a", superstep=1, update={1: "x"}), None, id="int-key"),  # type: ignore[dict-item]
    pytest.param(lambda: StepCompleted(node="a", superstep=1, update={"x": (1, 2)}), None, id="tuple-in-any"),
    pytest.param(lambda: StepCompleted(node="a", superstep=1, update={"x": {1, 2}}), None, id="set-in-any"),
    pytest.param(lambda: ev.RunStarted(next_nodes=("a", "b")), None, id="tuple-for-list"),  # type: ignore[arg-type]
    pytest.param(lambda: ev.RunCompleted(output=ev.Message(role="user")), None, id="struct-in-any"),
    pytest.param(lambda: ev.LLMCallCompleted(call_id="c", model="m", output="text"), None, id="str-for-struct"),  # type: ignore[arg-type]
    pytest.param(lambda: UserMessage(content="ok"), [1, 2], id="list-meta"),
    pytest.param(lambda: UserMessage(content="ok"), {1: 2}, id="int-key-meta"),
    pytest.param(lambda: UserMessage(content="ok"), {"t": (1,)}, id="tuple-in-meta"),
    pytest.param(lambda: UserMessage(content="\ud800"), None, id="surrogate"),
]


@pytest.mark.parametrize(("make", "meta"), POISON)
def test_poison_events_are_refused_before_anything_is_written(
    seeded: eventlog.EventLog[Any], make: Callable[[], Any], meta: Any
) -> None:
    before = visible(seeded)
    for attempt in (
        lambda: seeded.append("r", make(), meta=meta),
        lambda: seeded.append("new", make(), meta=meta),
        lambda: seeded.append_many("r", [step(3), make()], meta=meta),
        lambda: seeded.writer("r").append(make(), meta=meta),
    ):
        with pytest.raises(eventlog.EventLogError):
            attempt()
    assert visible(seeded) == before
    assert seeded.verify().ok
    assert [e.run_id for e in seeded.feed()] == ["r", "r", "s"]  # the feed is whole for every reader


def test_an_id_source_that_returns_a_non_string_is_refused(open_log: OpenLog) -> None:
    for bad in (123, "", "x" * 300, None, "\ud800"):
        log = open_log(ids=lambda bad=bad: bad)
        with pytest.raises(eventlog.errors.InvalidArgumentError, match="id source"):
            log.append("r", step(1))
        assert log.runs() == [] and list(log.feed()) == []
        log.close()

    def boom() -> str:
        raise RuntimeError("no ids today")

    log = open_log(ids=boom)
    with pytest.raises(eventlog.errors.InvalidArgumentError, match="no ids today"):
        log.append("r", step(1))


def test_what_reads_back_is_what_was_appended(log: eventlog.EventLog[Any]) -> None:
    weird = ev.ToolCallCompleted(call_id="c", tool="t", output=[math.nan, -0.0, b"\x00", {"k": [None]}])
    log.append("r", weird, meta={"nan": math.nan})
    entry = log.entry("r", 1)
    assert msgspec.msgpack.encode(entry.event) == msgspec.msgpack.encode(weird)
    assert math.isnan(entry.meta["nan"])  # type: ignore[index]


# -- 2. times ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "clock",
    [lambda: time.time() * 1e9, lambda: -1, lambda: 1 << 63, lambda: True, lambda: "now", lambda: None],
    ids=["float", "negative", "past-2262", "bool", "str", "none"],
)
def test_a_bad_clock_is_refused_and_bricks_nothing(open_log: OpenLog, clock: Callable[[], Any]) -> None:
    good = open_log()
    good.append("r", step(1))
    good.checkpoints.save("r")
    good.close()
    log = open_log(clock=clock)
    before = visible(log)
    with pytest.raises(eventlog.errors.InvalidArgumentError, match="clock"):
        log.append("r", step(2))
    with pytest.raises(eventlog.errors.InvalidArgumentError, match="clock"):
        log.append("other", step(2))
    with pytest.raises(eventlog.errors.InvalidArgumentError, match="clock"):
        log.checkpoints.save("r")
    with pytest.raises(eventlog.errors.InvalidArgumentError, match="clock"):
        log.fork("r", 1, "f")
    assert visible(log) == before and log.head("r") == 1 and log.verify().ok
    log.delete_run("r")  # the run stays usable
    assert log.runs() == []


@pytest.mark.parametrize("time_ns", [1.5, -1, 1 << 63, True, "1"])
def test_a_bad_entry_time_is_refused(seeded: eventlog.EventLog[Any], time_ns: Any) -> None:
    before = visible(seeded)
    with pytest.raises(eventlog.errors.InvalidArgumentError, match="time_ns"):
        seeded.append("r", step(3), time_ns=time_ns)
    assert visible(seeded) == before


# -- 3. duplicate ids --------------------------------------------------------------------------


def test_a_caller_id_equal_to_a_generated_id_is_the_same_event(log: eventlog.EventLog[Any]) -> None:
    log.append("r", step(1))
    generated = log.entry("r", 1).event_id
    assert log.append("r", step(99), event_id=generated) == 1  # the id is taken: nothing written
    assert log.head("r") == 1
    # an id of the form the log makes for the run itself, not held yet, is refused: the log would make it again
    prefix, number = generated.rsplit("-", 2)[0], generated.rsplit("-", 2)[1]
    upcoming = [f"{prefix}-{number}-{k:x}" for k in range(2, 5)]
    for k, taken in enumerate(upcoming):
        with pytest.raises(eventlog.errors.InvalidArgumentError, match="form of an id the log draws"):
            log.append("r", step(10 + k), event_id=taken)
    with pytest.raises(
        eventlog.errors.InvalidArgumentError, match="form of an id the log draws"
    ):  # nor for a run not made yet
        log.append("s", step(1), event_id=f"{prefix}-{int(number, 16) + 1:x}-1")
    assert log.head("r") == 1
    # one of another run is a caller's id like any other
    log.append("other", step(1))
    copied = log.entry("other", 1).event_id
    assert log.append("r", step(5), event_id=copied) == 2
    assert log.append("r", step(5), event_id=copied) == 2
    for k in range(3):
        log.append("r", step(20 + k))
    ids = [e.event_id for e in log.read("r")]
    assert len(ids) == len(set(ids)) == 5
    assert log.append_many("r", [step(1), step(2)], event_ids=ids[:2]) == [1, 2]
    assert log.verify().ok


def test_an_injected_id_source_that_repeats_is_refused_by_name(open_log: OpenLog) -> None:
    def counter() -> Callable[[], str]:
        n = iter(range(1, 10_000))
        return lambda: f"id{next(n)}"

    log = open_log(ids=counter())
    log.append_many("r", [step(1), step(2)])
    log.close()
    log = open_log(ids=counter())  # a second session with the same deterministic source
    before = visible(log)
    with pytest.raises(eventlog.errors.DuplicateIdError, match="id1"):
        log.append("r", step(3))
    assert visible(log) == before
    log.append("other", step(1))  # another run holds no id1 yet
    assert log.entry("other", 1).event_id == "id2"


def test_a_run_writer_checkpoint_id_that_repeats_is_refused(open_log: OpenLog) -> None:
    ids = iter(["e1", "c1", "e2", "c1", "e3", "c2"])
    log = open_log(ids=lambda: next(ids))
    w = log.writer("r", policy=eventlog.CheckpointPolicy.every(1))
    w.append(step(1))
    with pytest.raises(eventlog.errors.DuplicateIdError, match="c1"):
        w.append(step(2))
    assert log.head("r") == 1  # the event and its checkpoint are one transaction: neither was kept
    assert [c.checkpoint_id for c in log.checkpoints.list("r")] == ["c1"]
    assert log.checkpoints.load("r", "c1").offset == 1
    log.checkpoints.delete("r", "c1")
    assert log.checkpoints.list("r") == []


def test_prune_keeps_event_ids_so_a_retry_stays_a_no_op(log: eventlog.EventLog[Any]) -> None:
    for i in range(1, 7):
        log.append("r", step(i), event_id=f"e{i}")
    log.checkpoints.save("r", 4)
    assert log.prune("r", before=4) == 4
    assert log.append("r", step(2), event_id="e2") == 2  # pruned, but still known: not written twice
    assert log.append("r", step(6), event_id="e6") == 6
    assert log.head("r") == 6 and log.state_at("r").values == {"i": 6}
    assert log.verify().ok


def test_a_fork_knows_the_ids_it_shares_with_its_parent(log: eventlog.EventLog[Any]) -> None:
    log.append_many("p", [step(1), step(2), step(3)], event_ids=["a", "b", "c"])
    log.fork("p", 2, "f")
    assert log.append("f", step(9), event_id="b") == 2  # shared: already in the fork
    assert log.append("f", step(9), event_id="c") == 3  # "c" is the parent's future, not the fork's
    assert [e.event_id for e in log.read("f")] == ["a", "b", "c"]


def test_export_import_keeps_every_event(tmp_path: Path, log: eventlog.EventLog[Any]) -> None:
    from eventlog.transfer import ExportFileError, export_runs, import_runs

    log.append_many("r", [step(1), step(2)])
    log.append("r", step(3), event_id="mine")
    out = tmp_path / "x.jsonl"
    export_runs(log, out)
    with eventlog.open(tmp_path / "copy") as copy:
        summary = import_runs(copy, out)
        assert summary.entries == 3 and [e.event_id for e in copy.read("r")] == [e.event_id for e in log.read("r")]
    lines = out.read_text().splitlines()
    entries = [i for i, line in enumerate(lines) if '"type":"entry"' in line]
    first_id = msgspec.json.decode(lines[entries[0]])["event_id"]
    lines[entries[1]] = lines[entries[1]].replace(msgspec.json.decode(lines[entries[1]])["event_id"], first_id)
    dup = tmp_path / "dup.jsonl"
    dup.write_text("\n".join(lines) + "\n")
    with eventlog.open(tmp_path / "other") as other:
        with pytest.raises(ExportFileError, match="twice"):
            import_runs(other, dup)
        assert other.runs() == []


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda lines: ["", *lines[1:]], "no header line"),  # a blank line where the header was
        (lambda lines: ["", *lines], None),  # blank lines before the header are blank lines
        (lambda lines: [lines[0].replace('"version":1', '"version":0'), *lines[1:]], "export version 0"),
        (lambda lines: [lines[0].replace('"version":1', '"version":-7'), *lines[1:]], "export version -7"),
    ],
    ids=["blank-then-no-header", "blank-then-header", "version-0", "version-negative"],
)
def test_an_export_file_is_known_by_its_first_line(
    tmp_path: Path, log: eventlog.EventLog[Any], change: Any, named: str | None
) -> None:
    """The first line that is not blank is the header, of a version that exists (1 up to the
    one this eventlog writes); a file that skips it, or names a version that never was, is
    refused by name and nothing is written."""
    from eventlog.transfer import ExportFileError, export_runs, import_runs

    log.append_many("r", [step(1), step(2)])
    out = tmp_path / "x.jsonl"
    export_runs(log, out)
    lines = out.read_text().splitlines()
    assert '"version":1' in lines[0]
    changed = tmp_path / "changed.jsonl"
    changed.write_text("\n".join(change(lines)) + "\n")
    with eventlog.open(tmp_path / "other") as other:
        if named is None:
            assert import_runs(other, changed).entries == 2
            return
        with pytest.raises(ExportFileError, match=named):
            import_runs(other, changed)
        assert other.runs() == []


def test_an_import_that_a_write_would_refuse_half_way_is_refused_before_the_first(
    tmp_path: Path, log: eventlog.EventLog[Any]
) -> None:
    """Lines a check of each alone passes but that a write would refuse once others were written
    (a fork before the parent's entries it shares, a checkpoint before the entries it covers, an
    id of the form the target log draws for a run it has not made) are refused by the check of
    the whole file: nothing is written, not even for a moment."""
    from eventlog.transfer import ExportFileError, export_runs, import_runs

    log.append_many("a", [step(1), step(2)])
    log.checkpoints.save("a", 2, checkpoint_id="cp")
    log.fork("a", 2, "b")
    out = tmp_path / "x.jsonl"
    export_runs(log, out)
    lines = out.read_text().splitlines()
    kinds = [msgspec.json.decode(line).get("type") for line in lines]
    first_entry = kinds.index("entry")

    def moved(kind: str) -> list[str]:
        at = kinds.index(kind) if kind == "checkpoint" else [i for i, k in enumerate(kinds) if k == "run"][1]
        rest = lines[:at] + lines[at + 1 :]
        return rest[: first_entry + 1] + [lines[at]] + rest[first_entry + 1 :]

    with eventlog.open(tmp_path / "target") as target:
        target.append("x", step(1))
        prefix = target.entry("x", 1).event_id.rsplit("-", 2)[0]
        entry = msgspec.json.decode(lines[first_entry])
        own_form = lines[:first_entry] + [lines[first_entry].replace(entry["event_id"], f"{prefix}-fff-1")]
        own_form += lines[first_entry + 1 :]
        cases = {"fork": moved("run"), "checkpoint": moved("checkpoint"), "own-form": own_form}
        for name, changed in cases.items():
            path = tmp_path / f"{name}.jsonl"
            path.write_text("\n".join(changed) + "\n")
            with pytest.raises(ExportFileError):
                import_runs(target, path)
            assert target.runs() == ["x"], name


# -- 4. PostgreSQL schema names ----------------------------------------------------------------


@pytest.mark.skipif(not PG_DSN, reason="set EVENTLOG_TEST_PG_DSN to run the PostgreSQL store's tests")
def test_postgres_schema_names_postgres_would_cut_are_refused() -> None:
    assert PG_DSN is not None
    long_a, long_b = "s" * 63 + "a", "s" * 63 + "b"
    for bad in (long_a, long_b, "", "é", "1abc", "a-b", 'a"b'):
        with pytest.raises(eventlog.errors.InvalidArgumentError, match="schema"):
            eventlog.open(f"{PG_DSN}?schema={bad}")
    with pytest.raises(eventlog.errors.InvalidArgumentError, match="schema"):
        eventlog.open(f"{PG_DSN}?schema=")
    from eventlog.store.postgres import PostgresStore

    name = "t" * 63  # the longest name PostgreSQL keeps whole
    try:
        with eventlog.open(f"{PG_DSN}?schema={name}") as log:
            log.append("r", step(1))
        with eventlog.open(f"{PG_DSN}?schema={name}", readonly=True) as log:
            assert log.head("r") == 1
    finally:
        PostgresStore.drop_schema(PG_DSN, name)


@pytest.mark.skipif(not PG_DSN, reason="set EVENTLOG_TEST_PG_DSN to run the PostgreSQL store's tests")
def test_postgres_url_spellings_and_unknown_schemes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert PG_DSN is not None
    from eventlog.store.postgres import PostgresStore

    monkeypatch.chdir(tmp_path)
    rest = PG_DSN.split("://", 1)[1]
    try:
        for spelling in ("postgresql+psycopg", "POSTGRESQL", "Postgres"):
            with eventlog.open(f"{spelling}://{rest}?schema=t_spellings") as log:
                log.append(spelling, step(1))
        with eventlog.open(f"{PG_DSN}?schema=t_spellings") as log:
            assert len(log.runs()) == 3
    finally:
        PostgresStore.drop_schema(PG_DSN, "t_spellings")
    for unknown in ("mysql://x/y", "sqlite:///tmp/x", "postgresql-x://a/b"):
        with pytest.raises(eventlog.errors.InvalidArgumentError, match="not a log"):
            eventlog.open(unknown)
    assert list(tmp_path.iterdir()) == []  # no local directory was made for a URL


# -- 5. lock.mdb removed while the log is open -------------------------------------------------

_OTHER_WRITER = textwrap.dedent(
    """
    import sys, eventlog
    from eventlog.events import UserMessage
    with eventlog.open(sys.argv[1]) as log:
        for i in range(int(sys.argv[2])):
            log.append("b", UserMessage(content=str(i)))
    print("ok")
    """
)


def test_a_deleted_lock_file_stops_the_process_that_lost_it(tmp_path: Path) -> None:
    path = tmp_path / "log"
    a = eventlog.open(path)
    a.append("a", step(1))
    (path / "lock.mdb").unlink()  # an operator "cleaning up"
    with pytest.raises(eventlog.errors.LockFileError, match="lock.mdb"):
        a.append("a", step(2))
    with pytest.raises(eventlog.errors.LockFileError):
        a.state_at("a")
    other = subprocess.run(
        [sys.executable, "-c", _OTHER_WRITER, str(path), "50"], capture_output=True, text=True, timeout=60, check=False
    )
    assert other.returncode == 0, other.stderr
    with pytest.raises(eventlog.errors.LockFileError):  # the lock file is another one now: still refused
        a.append("a", step(3))
    a.close()
    with eventlog.open(path) as log:
        assert log.head("a") == 1 and log.head("b") == 50
        assert log.verify().ok


def test_a_replaced_lock_file_is_noticed_by_every_writer_thread(tmp_path: Path) -> None:
    path = tmp_path / "log"
    log = eventlog.open(path)
    log.append("r", step(1))
    lock = path / "lock.mdb"
    lock.rename(tmp_path / "old-lock")
    lock.write_bytes(b"")  # the same name, another file
    failures: list[BaseException] = []

    def append() -> None:
        try:
            log.append("r", step(2))
        except eventlog.EventLogError as exc:
            failures.append(exc)

    threads = [threading.Thread(target=append) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(failures) == 4 and all(isinstance(f, eventlog.errors.LockFileError) for f in failures)
    log.close()


# -- 6. a damaged run can be deleted; the feed has a way past damage ---------------------------


def _number(log: eventlog.EventLog[Any], run_id: str) -> int:
    return log.store.read(lambda txn: log._runs.require(txn, run_id)).number


def test_a_damaged_run_is_deleted_cleanly(log: eventlog.EventLog[Any]) -> None:
    log.append_many("bad", [step(1), step(2), step(3)])
    log.append("good", step(1))
    second = [e.position for e in log.feed()][1]  # 2 in a dense store
    key = u64(_number(log, "bad")) + u64(2)
    log.store.write(lambda txn: txn.put("events", key, b"garbage that fails its checks"))
    with pytest.raises(eventlog.errors.CorruptRecordError) as caught:
        list(log.feed())
    assert caught.value.position == second and (caught.value.run_id, caught.value.offset) == ("bad", 2)
    assert [e.run_id for e in log.feed(after=caught.value.position)] == ["bad", "good"]  # a way past it
    report = log.verify()
    assert [(p.run_id, p.offset) for p in report.problems if p.kind == "corrupt"] == [("bad", 2)]
    log.delete_run("bad")
    assert [e.run_id for e in log.feed()] == ["good"]
    assert log.verify().ok


def test_repair_removes_dangling_references(log: eventlog.EventLog[Any]) -> None:
    log.append_many("r", [step(1), step(2)])
    number = _number(log, "r")
    log.store.write(lambda txn: txn.put("feed", u64(99), u64(number) + u64(7)))  # points at nothing
    log.store.write(lambda txn: txn.put("event_ids", u64(number) + b"ghost", u64(9)))
    report = log.verify()
    assert {p.kind for p in report.problems} >= {"feed", "index"}
    with pytest.raises(eventlog.errors.CorruptRecordError):
        list(log.feed())
    repaired = log.repair()
    assert any("feed position 99" in line for line in repaired) and any("ghost" in line for line in repaired)
    assert log.verify().ok and [e.offset for e in log.feed()] == [1, 2]
    assert log.append("r", step(3)) == 3  # positions never given twice:
    assert log.entry("r", 3).position == 100 if log.store.dense else log.entry("r", 3).position > 100


# -- 7. read-then-write operations re-check inside their transaction ----------------------------


class GatedReducer(eventlog.AgentReducer):
    """AgentReducer that stops in `apply` until released, once armed: a fold paused half-way."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.inside = threading.Event()
        self.go = threading.Event()

    def apply(self, state: eventlog.AgentState, event: eventlog.Event) -> eventlog.AgentState:
        if self.armed:
            self.armed = False
            self.inside.set()
            assert self.go.wait(30)
        return super().apply(state, event)


def test_a_checkpoint_folded_before_a_run_was_remade_is_not_saved_into_the_new_run(
    log: eventlog.EventLog[Any],
) -> None:
    gated = GatedReducer()
    log.append_many("r", [step(1), step(2), step(3)])
    gated.armed = True
    result: list[Any] = []
    saver = threading.Thread(target=lambda: _catch(result, lambda: log.checkpoints.save("r", 3, reducer=gated)))
    saver.start()
    assert gated.inside.wait(30)
    log.delete_run("r")
    log.append_many("r", [UserMessage(content="another run"), UserMessage(content="by the same id"), step(7)])
    gated.go.set()
    saver.join(30)
    assert isinstance(result[0], eventlog.ConflictError)
    assert log.checkpoints.list("r") == []
    assert log.state_at("r").values == {"i": 7} and log.verify().ok


def test_concurrent_prunes_never_move_a_base_backwards(log: eventlog.EventLog[Any]) -> None:
    gated = GatedReducer()
    log.append_many("r", [step(i) for i in range(1, 11)])
    for k in (2, 3, 8):  # the one at 2 is a snapshot; 3 is folded from it when asked for
        log.checkpoints.save("r", k, reducer=gated)
    gated.armed = True
    result: list[Any] = []
    slow = threading.Thread(target=lambda: _catch(result, lambda: log.prune("r", before=3, reducer=gated)))
    slow.start()
    assert gated.inside.wait(30)
    assert log.prune("r", before=8) == 8
    gated.go.set()
    slow.join(30)
    assert result == [8]  # the slow prune saw the newer base and kept it
    assert log.run_info("r").base == 8
    assert [log.state_at("r", k).values for k in (8, 10)] == [{"i": 8}, {"i": 10}]
    assert log.verify().ok


def _catch(out: list[Any], fn: Callable[[], Any]) -> None:
    try:
        out.append(fn())
    except eventlog.EventLogError as exc:
        out.append(exc)


# -- 8. register() refuses kinds that cannot share one union ------------------------------------


def test_register_refuses_kinds_the_decoders_cannot_hold(log: eventlog.EventLog[Any]) -> None:
    log.append("r", step(1))

    class OtherTagField(eventlog.Event, frozen=True, tag="test_trust.other_field", tag_field="type"):
        x: int = 0

    class Arrays(eventlog.Event, frozen=True, tag="test_trust.arrays", array_like=True):
        x: int = 0

    for bad in (OtherTagField, Arrays, int, "x", eventlog.Event):
        with pytest.raises(eventlog.errors.InvalidEventError):
            eventlog.register(bad)  # type: ignore[arg-type]
    assert [e.event for e in log.read("r")] == [step(1)]  # reads still work, in every log
    with eventlog.open(":memory:") as other:
        other.append("r", step(2))
        assert other.state_at("r").values == {"i": 2}


# -- 9. per-log limits are stored in the log ----------------------------------------------------


def test_a_larger_record_limit_is_kept_by_the_log(open_log: OpenLog) -> None:
    log = open_log(record_size_bytes_max=32 << 20)
    big = UserMessage(content="x" * (21 << 20))
    log.append("r", big)
    log.close()
    log = open_log()  # the default limit, as every command line tool opens it
    assert log.entry("r", 1).event == big and log.verify().ok
    with pytest.raises(eventlog.errors.RecordTooLargeError):  # this process writes under its own limit
        log.append("r", big)


# -- 10. import is all or nothing ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [("run_id", ""), ("run_id", "r" * 1025), ("event_id", "e" * 257), ("checkpoint_id", "c" * 257), ("time_ns", -5)],
)
def test_an_import_that_would_fail_half_way_writes_nothing(
    tmp_path: Path, log: eventlog.EventLog[Any], field: str, value: Any
) -> None:
    from eventlog.transfer import ExportFileError, export_runs, import_runs

    log.append_many("first", [step(1), step(2)])
    log.append_many("second", [step(1), step(2)])
    log.checkpoints.save("second", checkpoint_id="cp")
    out = tmp_path / "x.jsonl"
    export_runs(log, out)
    lines = [msgspec.json.decode(line) for line in out.read_text().splitlines()]
    for line in lines:
        if line.get("run_id") == "second" and field in line:
            line[field] = value
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"\n".join(msgspec.json.encode(line) for line in lines) + b"\n")
    with eventlog.open(tmp_path / "target") as target:
        with pytest.raises(ExportFileError):
            import_runs(target, bad)
        assert target.runs() == []  # not even the first run
        import_runs(target, out)  # and the good file imports afterwards
        assert target.runs() == ["first", "second"]


# -- 11. PostgreSQL keeps a bounded pool ---------------------------------------------------------


@pytest.mark.skipif(not PG_DSN, reason="set EVENTLOG_TEST_PG_DSN to run the PostgreSQL store's tests")
def test_postgres_threads_share_a_bounded_pool() -> None:
    assert PG_DSN is not None
    import psycopg

    from eventlog.store.postgres import PostgresStore

    schema = f"t_pool_{os.getpid()}"
    name = f"eventlog_pool_{os.getpid()}"

    def backends() -> int:
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (name,)).fetchone()
            return int(row[0]) if row else 0

    sep = "&" if "?" in PG_DSN else "?"
    try:
        log = eventlog.open(f"{PG_DSN}{sep}application_name={name}&schema={schema}", pool_size=3)
        threads = [threading.Thread(target=lambda k=k: log.append(f"t{k}", step(k))) for k in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert len(log.runs()) == 20
        assert log.store.connections() <= 3  # type: ignore[attr-defined]
        assert 1 <= backends() <= 3
        log.close()
        deadline = time.monotonic() + 30  # a closed connection's backend ends a moment later
        while backends() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert backends() == 0
    finally:
        PostgresStore.drop_schema(PG_DSN, schema)


# -- 12. a killed reader does not pin pages ------------------------------------------------------

_READER = textwrap.dedent(
    """
    import os, sys, time, eventlog
    log = eventlog.open(sys.argv[1], readonly=True)
    def hold(txn):
        os.write(1, b"reading\\n")
        time.sleep(600)
    log.store.read(hold)
    """
)


def test_a_sigkilled_reader_does_not_make_the_file_grow_forever(tmp_path: Path) -> None:
    path = tmp_path / "log"
    payload = "x" * 2000
    with eventlog.open(path, durability="none") as log:  # a writer that stays open all along
        log.append("seed", UserMessage(content="seed"))
        reader = subprocess.Popen([sys.executable, "-c", _READER, str(path)], stdout=subprocess.PIPE)
        assert reader.stdout is not None and reader.stdout.readline() == b"reading\n"
        reader.send_signal(signal.SIGKILL)  # its reader slot stays taken: LMDB cannot know it died
        reader.wait()
        sizes = []
        for cycle in range(12):
            for i in range(100):
                log.append(f"c{cycle}", UserMessage(content=f"{i}{payload}"))
            log.delete_run(f"c{cycle}")
            sizes.append((path / "data.mdb").stat().st_size)
    # With the dead reader's slot cleared, freed pages are reused: the file stops growing.
    assert sizes[-1] == sizes[5], sizes


# -- 13. verify cross-checks the feed and the id index ------------------------------------------


def test_verify_finds_a_repointed_feed_and_a_damaged_id_index(log: eventlog.EventLog[Any]) -> None:
    log.append_many("r", [step(1), step(2), step(3)], event_ids=["a", "b", "c"])
    number = _number(log, "r")
    assert log.verify().ok
    first = u64(next(log.feed()).position)  # 1 in a dense store
    log.store.write(lambda txn: txn.put("feed", first, u64(number) + u64(2)))  # the first position now names offset 2
    assert any(p.kind == "feed" and p.offset == 1 for p in log.verify().problems)
    log.store.write(lambda txn: txn.put("feed", first, u64(number) + u64(1)))
    assert log.verify().ok
    log.store.write(lambda txn: txn.put("event_ids", u64(number) + b"b", u64(3)))  # "b" now names offset 3
    assert any(p.kind == "index" and p.offset == 2 for p in log.verify().problems)
    log.store.write(lambda txn: txn.put("event_ids", u64(number) + b"b", u64(2)))
    log.store.write(lambda txn: txn.delete("event_ids", u64(number) + b"c"))
    assert any(p.kind == "index" for p in log.verify().problems)


# -- 14. exports are private ---------------------------------------------------------------------


def test_exports_are_readable_by_their_owner_only(tmp_path: Path, log: eventlog.EventLog[Any]) -> None:
    from eventlog.transfer import export_runs

    log.append("r", UserMessage(content="a secret prompt"))
    old = os.umask(0)
    try:
        out = tmp_path / "x.jsonl"
        export_runs(log, out)
        assert stat.S_IMODE(out.stat().st_mode) == 0o600
        out.chmod(0o666)
        export_runs(log, out)  # over an existing, world-readable file
        assert stat.S_IMODE(out.stat().st_mode) == 0o600
    finally:
        os.umask(old)


# -- 15. no deadlock between a nested read and a map resize --------------------------------------


def test_a_read_inside_a_transaction_does_not_wait_for_a_map_resize(tmp_path: Path) -> None:
    from eventlog.store import LMDBStore

    store = LMDBStore(tmp_path / "log")
    inside, done = threading.Event(), threading.Event()

    def outer(txn: Any) -> int:
        inside.set()
        time.sleep(0.2)  # a resize now waits for this transaction to end
        return store.read(lambda t: 1)  # a dictionary load does this: it must not wait for the resize

    result: list[int] = []
    reader = threading.Thread(target=lambda: (result.append(store.read(outer)), done.set()))
    reader.start()
    assert inside.wait(10)
    resizer = threading.Thread(target=lambda: store._gate.exclusive(lambda: None))
    resizer.start()
    assert done.wait(20), "a nested read waited for a resize that waited for it"
    resizer.join(20)
    assert result == [1] and not resizer.is_alive()
    store.close()


# -- 16. smaller faults --------------------------------------------------------------------------


class SetReducer:
    name, version, state_type = "sets", 1, Any

    def initial(self) -> set[str]:
        return set()

    def apply(self, state: set[str], event: eventlog.Event) -> set[str]:
        return state | {type(event).__name__}


def test_a_state_that_would_not_read_back_is_refused(log: eventlog.EventLog[Any]) -> None:
    log.append("r", step(1))
    with pytest.raises(eventlog.errors.UnencodableValueError, match="read back"):
        log.checkpoints.save("r", reducer=SetReducer())
    assert log.checkpoints.list("r") == []
    w = log.writer("w", reducer=SetReducer())
    with pytest.raises(eventlog.errors.UnencodableValueError):
        w.append(step(1))
    assert log.head("w") == 0 and log.verify().ok


@pytest.mark.parametrize("limit", [-1, 1.5, "2", True])
def test_a_bad_limit_is_refused(seeded: eventlog.EventLog[Any], limit: Any) -> None:
    with pytest.raises(eventlog.errors.InvalidArgumentError, match="limit"):
        seeded.checkpoints.list("r", limit=limit)
    with pytest.raises(eventlog.errors.InvalidArgumentError):
        list(seeded.feed(limit=limit))


def test_options_that_do_not_apply_are_refused(tmp_path: Path) -> None:
    with pytest.raises(eventlog.errors.InvalidArgumentError, match="durability"):
        eventlog.open(":memory:", durability="sync")
    with pytest.raises(eventlog.errors.InvalidArgumentError, match="pool_size"):
        eventlog.open(tmp_path / "a", pool_size=3)
    with pytest.raises(eventlog.errors.InvalidArgumentError, match="map_size_bytes"):
        eventlog.open(":memory:", map_size_bytes=1 << 20)
    with pytest.raises(eventlog.errors.NoLogError):
        eventlog.open(tmp_path / "missing", create=False)
    assert not (tmp_path / "a").exists() and not (tmp_path / "missing").exists()


def _calls(log: eventlog.EventLog[Any]) -> list[Callable[[Any], Any]]:
    """Every public operation, given one bad argument."""
    return [
        lambda x: log.append(x, step(1)),
        lambda x: log.append("r", x),
        lambda x: log.append("r", step(1), event_id=x),
        lambda x: log.append("r", step(1), meta=x),
        lambda x: log.append("r", step(1), expected_offset=x),
        lambda x: log.append_many("r", x),
        lambda x: log.append_many("r", [step(1)], event_ids=x),
        lambda x: log.head(x),
        lambda x: log.run_info(x),
        lambda x: list(log.read(x)),
        lambda x: list(log.read("r", x)),
        lambda x: list(log.read("r", 0, x)),
        lambda x: log.entry("r", x),
        lambda x: list(log.feed(x)),
        lambda x: log.state_at(x),
        lambda x: log.state_at("r", x),
        lambda x: log.state_at("r", reducer=x),
        lambda x: log.writer(x),
        lambda x: log.writer("r", policy=x),
        lambda x: log.fork("r", x, "f"),
        lambda x: log.fork("r", 1, x),
        lambda x: log.prune("r", x),
        lambda x: log.delete_run(x),
        lambda x: log.verify(x),
        lambda x: log.checkpoints.save("r", x),
        lambda x: log.checkpoints.save("r", metadata=x),
        lambda x: log.checkpoints.save("r", checkpoint_id=x),
        lambda x: log.checkpoints.load("r", x),
        lambda x: log.checkpoints.list(x),
        lambda x: log.checkpoints.delete("r", x),
        lambda x: eventlog.open(x),
        lambda x: eventlog.register(x),
    ]


BAD_VALUES = [None, -1, 2**70, 1.5, "", "x" * 2000, "\ud800", b"bytes", [1], {"a": object()}, object(), True, math.nan]


def test_only_named_errors_leave_the_api(seeded: eventlog.EventLog[Any]) -> None:
    """No raw TypeError, AttributeError, UnicodeEncodeError or store error escapes: EventLogError or a result."""
    before = visible(seeded)
    for call in _calls(seeded):
        for bad in BAD_VALUES:
            try:
                result = call(bad)
            except eventlog.EventLogError:
                continue
            if isinstance(result, eventlog.EventLog):
                result.close()
    runs = [r for r in seeded.runs() if r not in before[0]]
    assert all(seeded.verify(r).ok for r in seeded.runs()), runs


def test_deep_nesting_is_refused_by_name(log: eventlog.EventLog[Any]) -> None:
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(eventlog.errors.InvalidEventError):
        log.append("r", StepCompleted(node="a", superstep=1, update={"deep": deep}))
    assert log.runs() == []


def _nested(depth: int, leaf: Any = "leaf", as_map: bool = False) -> Any:
    for _ in range(depth):
        leaf = {"k": leaf} if as_map else [leaf]
    return leaf


class DeepReducer:
    name, version, state_type = "deep", 1, Any

    def initial(self) -> Any:
        return []

    def apply(self, state: Any, event: eventlog.Event) -> Any:
        return _nested(5_000)


@pytest.mark.parametrize("depth", [300, 5_000])
def test_nesting_is_bounded_on_every_value_the_log_writes(log: eventlog.EventLog[Any], depth: int) -> None:
    """Over `nesting_depth_max` (256) a value is refused by name, whether or not msgspec's own limit is met."""
    from eventlog import _limits

    assert _limits.nesting_depth_max < 300
    for as_map in (False, True):
        deep = _nested(depth, as_map=as_map)
        with pytest.raises(eventlog.errors.InvalidEventError, match="deeper"):
            log.append("r", StepCompleted(node="a", superstep=1, update={"deep": deep}))
        with pytest.raises(eventlog.errors.InvalidEventError, match="deeper"):
            log.append("r", UserMessage(content="ok"), meta={"deep": deep})
    assert log.runs() == []
    log.append("r", StepCompleted(node="a", superstep=1, update={"ok": _nested(200)}))  # well inside the bound
    assert log.state_at("r").values == {"ok": _nested(200)}
    with pytest.raises(eventlog.errors.UnencodableValueError, match="deeper"):
        log.checkpoints.save("r", metadata={"deep": _nested(depth)})
    with pytest.raises(
        eventlog.errors.UnencodableValueError, match="deeper"
    ):  # a state: bounded by what msgpack reads back
        log.checkpoints.save("r", reducer=DeepReducer())
    assert log.checkpoints.list("r") == [] and log.verify().ok


@pytest.mark.parametrize("where", ["event", "meta", "metadata", "msgpack", "line"])
@pytest.mark.parametrize("depth", [300, 10_000])
def test_an_import_nested_too_deep_is_refused_by_name(tmp_path: Path, where: str, depth: int) -> None:
    import base64
    import json

    from eventlog.transfer import ExportFileError, export_runs, import_runs

    with eventlog.open(":memory:") as log:
        log.append("r", StepCompleted(node="n", superstep=1, update={"u": 1}))
        log.checkpoints.save("r", metadata={"k": "v"})
        export_runs(log, tmp_path / "x.jsonl")
    text = (tmp_path / "x.jsonl").read_text()
    deep = "[" * depth + "]" * depth
    if where == "event":
        text = text.replace('"update":{"u":1}', '"update":{"u":' + deep + "}")
    elif where == "meta":
        text = text.replace('"meta":null', '"meta":{"a":' + deep + "}")
    elif where == "metadata":
        text = text.replace('"metadata":{"k":"v"}', '"metadata":{"k":' + deep + "}")
    elif where == "msgpack":
        packed = b"\x92\xc0" + b"\x91" * depth + b"\x90"  # [meta, event]: the event a list nested `depth` deep
        text = text.replace('"meta":null', f'"msgpack":{json.dumps(base64.b64encode(packed).decode())},"meta":null')
    else:
        text = text.replace('{"type":"end"', '{"pad":' + deep + ',"type":"end"')
    (tmp_path / "y.jsonl").write_text(text)
    target = eventlog.open(tmp_path / "log")
    if where == "line" and depth == 300:  # a field no line has, nested within the decoder's reach: ignored
        import_runs(target, tmp_path / "y.jsonl")
        assert target.runs() == ["r"]
    else:
        with pytest.raises(ExportFileError, match="line"):
            import_runs(target, tmp_path / "y.jsonl")
        assert target.runs() == []
    target.close()


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(
            lambda: type("K", (eventlog.Event,), {"__annotations__": {"a": "Nowhere"}}, frozen=True, tag="t.k1"),
            id="undefined-name",
        ),
        pytest.param(
            lambda: type("K", (eventlog.Event,), {"__annotations__": {"a": "list[Nowhere]"}}, frozen=True, tag="t.k2"),
            id="undefined-inner",
        ),
        pytest.param(
            lambda: type("K", (eventlog.Event,), {"__annotations__": {"a": "threading.Lock"}}, frozen=True, tag="t.k4"),
            id="no-module",
        ),
        pytest.param(
            lambda: type("K", (eventlog.Event,), {"__annotations__": {"a": int}}, frozen=True, tag="t.\ud800"),
            id="surrogate-tag",
        ),
        pytest.param(
            lambda: type("K", (eventlog.Event,), {"__annotations__": {"a": "1 +"}}, frozen=True, tag="t.k5"),
            id="syntax-error",
        ),
    ],
)
def test_register_refuses_any_bad_kind_class_by_name(make: Callable[[], Any]) -> None:
    before = eventlog.events.kinds()
    with pytest.raises(eventlog.errors.InvalidEventError):
        eventlog.register(make())
    assert eventlog.events.kinds() == before


@pytest.mark.parametrize("upcasters", [{"\ud800": len}, {"t.k6": len}, {1: len}, {"old": 1}, 5, "ab", [("a", len)]])
def test_register_refuses_upcasters_that_are_not_old_tags_to_functions(upcasters: Any) -> None:
    kind = type("K", (eventlog.Event,), {"__annotations__": {"a": int}}, frozen=True, tag="t.k6")
    with pytest.raises(eventlog.errors.InvalidEventError):
        eventlog.register(kind, upcasters=upcasters)
    assert "t.k6" not in eventlog.events.kinds()


@pytest.mark.parametrize("name", ["a\ud800", "\udfff", "tab\there", "nul\x00", "esc\x1b[31m"])
def test_a_reducer_name_that_is_not_printable_text_is_refused_everywhere(
    seeded: eventlog.EventLog[Any], name: str
) -> None:
    class Odd(eventlog.AgentReducer):
        pass

    Odd.name = name
    reducer = Odd()
    calls = [
        lambda: seeded.state_at("r", reducer=reducer),
        lambda: seeded.checkpoints.save("r", reducer=reducer),
        lambda: seeded.checkpoints.load_latest("r", reducer=reducer),
        lambda: seeded.writer("w", reducer=reducer),
        lambda: seeded.prune("r", 1, reducer=reducer),
        lambda: seeded.verify(reducer=reducer),
        lambda: eventlog.open(":memory:", reducer=reducer),
    ]
    before = visible(seeded)
    for call in calls:
        with pytest.raises(eventlog.errors.InvalidArgumentError, match="name"):
            call()
    assert visible(seeded) == before


@pytest.mark.parametrize("rest", ["[" * 10_000 + "]" * 10_000, "not json", '["only-one"]', "[[1], 2]", '{"a": 1}'])
def test_a_wayflow_step_key_that_does_not_decode_is_named(rest: str) -> None:
    pytest.importorskip("wayflowcore")
    from eventlog.wayflow._serialize import _STEP_KEY, _step_key

    with pytest.raises(eventlog.EventLogError, match="does not decode"):
        _step_key(_STEP_KEY + rest, {}, False, "conv-1")


_ODD_CHARS = ["\ud800", "\udfff", "\x00", "\x1b", "\t", "\u202e", "@", "|", "/", "é", "a"]
_ODD_TEXT = st.lists(
    st.one_of(
        st.sampled_from(_ODD_CHARS), st.characters(min_codepoint=0, max_codepoint=0x10FFFF, blacklist_categories=())
    ),
    max_size=6,
).map("".join)  # st.text leaves lone surrogates out


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(text=_ODD_TEXT, key=_ODD_TEXT)
def test_odd_text_anywhere_is_refused_by_name_or_kept(seeded: eventlog.EventLog[Any], text: str, key: str) -> None:
    """Lone surrogates, control characters, empty strings: in a run id, an event or checkpoint
    id, a meta or metadata key, a reducer name or a kind tag, only EventLogError leaves."""

    class Odd(eventlog.AgentReducer):
        pass

    Odd.name = text
    calls: list[Callable[[], Any]] = [
        lambda: seeded.append(text, UserMessage(content=text)),
        lambda: seeded.append("r", UserMessage(content="x"), event_id=text, meta={key: text}),
        lambda: seeded.checkpoints.save("r", checkpoint_id=text, metadata={key: text}),
        lambda: seeded.checkpoints.load("r", text),
        lambda: seeded.fork("r", 1, text),
        lambda: seeded.state_at("r", reducer=Odd()),
        lambda: list(seeded.read(text)),
        lambda: eventlog.register(type("K", (eventlog.Event,), {}, frozen=True, tag=text)),
    ]
    for call in calls:
        try:
            call()
        except eventlog.EventLogError:
            pass


# -- upgrades --------------------------------------------------------------------------------------

_WRITE_OLD_SHAPE = textwrap.dedent(
    """
    import sys, eventlog

    class Approved(eventlog.Event, frozen=True, tag="test_trust.approved"):
        by: str
        amount: int = 0

    eventlog.register(Approved)
    with eventlog.open(sys.argv[1]) as log:
        log.append("r", Approved(by="ann", amount=5))
        log.append("r", eventlog.events.UserMessage(content="after"))
    """
)


class ApprovedV2(eventlog.Event, frozen=True, tag="test_trust.approved.v2"):
    """The reshaped kind: `by` became `approver`, `amount` became cents."""

    approver: str
    cents: int = 0


eventlog.register(
    ApprovedV2,
    upcasters={"test_trust.approved": lambda old: {"approver": old["by"], "cents": old.get("amount", 0) * 100}},
)


@pytest.fixture
def old_shape_log(tmp_path: Path) -> Path:
    path = tmp_path / "old"
    subprocess.run([sys.executable, "-c", _WRITE_OLD_SHAPE, str(path)], check=True, timeout=60)
    return path


def test_an_old_shape_is_read_through_its_upcaster(old_shape_log: Path) -> None:
    with eventlog.open(old_shape_log) as log:
        assert [e.event for e in log.read("r")] == [ApprovedV2(approver="ann", cents=500), UserMessage(content="after")]
        assert log.verify().ok


def test_an_unknown_kind_is_not_corruption(tmp_path: Path) -> None:
    path = tmp_path / "log"
    code = _WRITE_OLD_SHAPE.replace("test_trust.approved", "test_trust.unheard_of")
    subprocess.run([sys.executable, "-c", code, str(path)], check=True, timeout=60)
    with eventlog.open(path) as log:
        with pytest.raises(eventlog.errors.UnknownKindError, match="test_trust.unheard_of") as caught:
            list(log.read("r"))
        assert not isinstance(caught.value, eventlog.errors.CorruptRecordError) and caught.value.offset == 1
        assert "restore" not in str(caught.value)
        report = log.verify()
        assert [p.kind for p in report.problems] == ["unknown_kind"]
        assert [e.event for e in log.read("r", after=1)] == [UserMessage(content="after")]


class CountingV1:
    name, version, state_type = "counter", 1, dict

    def initial(self) -> dict[str, int]:
        return {"n": 0}

    def apply(self, state: dict[str, int], event: eventlog.Event) -> dict[str, int]:
        return {"n": state["n"] + 1}


class CountingV2(CountingV1):
    version = 2

    def initial(self) -> dict[str, int]:
        return {"count": 0}

    def apply(self, state: dict[str, int], event: eventlog.Event) -> dict[str, int]:
        return {"count": state["count"] + 1}


class CountingV2WithUpgrade(CountingV2):
    def upgrade(self, state: Any, from_version: int) -> dict[str, int]:
        assert from_version == 1
        return {"count": state["n"]}


def test_a_pruned_run_is_read_by_a_newer_reducer_through_its_upgrade(log: eventlog.EventLog[Any]) -> None:
    log.append_many("r", [step(i) for i in range(1, 7)])
    log.checkpoints.save("r", 4, reducer=CountingV1())
    log.prune("r", before=4, reducer=CountingV1())
    with pytest.raises(eventlog.errors.PrunedError, match=r"counter@1.*no upgrade"):
        log.state_at("r", 5, reducer=CountingV2())
    assert log.state_at("r", 6, reducer=CountingV2WithUpgrade()) == {"count": 6}
    log.checkpoints.save("r", 5, reducer=CountingV2WithUpgrade())
    assert log.prune("r", before=5, reducer=CountingV2WithUpgrade()) == 5  # the base is readable by v2 now
    assert log.state_at("r", 6, reducer=CountingV2()) == {"count": 6}


# -- the 319ba18 log -------------------------------------------------------------------------------

FIXTURE = ROOT / "tests" / "fixtures" / "log-319ba18"


class FixtureApproved(eventlog.Event, frozen=True, tag="fixture.approved"):
    by: str
    note: str = ""


eventlog.register(FixtureApproved)


@pytest.fixture
def old_log(tmp_path: Path) -> Iterator[Path]:
    copy = tmp_path / "log"
    copy.mkdir(mode=0o700)
    (copy / "data.mdb").write_bytes((FIXTURE / "data.mdb").read_bytes())
    yield copy


def _read_all(log: eventlog.EventLog[Any]) -> dict[str, Any]:
    expected = msgspec.json.decode((ROOT / "tests" / "fixtures" / "log-319ba18.json").read_bytes())
    got: dict[str, Any] = {"runs": log.runs(), "feed": [], "by_run": {}}
    got["feed"] = [[e.run_id, e.offset, e.position, e.event_id] for e in log.feed()]
    for run_id in log.runs():
        info = log.run_info(run_id)
        want = expected["by_run"][run_id]
        later = ("number", "run_number")  # run numbers came into the API after 319ba18
        got["by_run"][run_id] = {
            "info": {k: v for k, v in msgspec.to_builtins(info).items() if k not in later},
            "entries": [
                {k: v for k, v in e.items() if k not in later}
                for e in msgspec.to_builtins(list(log.read(run_id, after=info.base)))
            ],
            "states": {k: msgspec.to_builtins(log.state_at(run_id, int(k))) for k in want["states"]},
            "checkpoints": [
                [c.checkpoint_id, c.offset, c.created_ns, c.reducer, c.reducer_version, c.metadata]
                + [c.summary.get("superstep"), c.summary.get("completed_nodes", []), c.summary.get("paused_nodes", [])]
                for c in log.checkpoints.list(run_id)
            ],
        }
    return msgspec.json.decode(msgspec.json.encode(got))  # type: ignore[no-any-return]


def test_a_log_written_by_319ba18_reads_identically(old_log: Path) -> None:
    expected = msgspec.json.decode((ROOT / "tests" / "fixtures" / "log-319ba18.json").read_bytes())
    with eventlog.open(old_log, readonly=True) as log:  # as it is, format 1
        assert _read_all(log) == expected
    with eventlog.open(old_log) as log:  # opened to write: migrated to format 2
        assert _read_all(log) == expected
        assert log.verify().ok
        assert log.append("graph", step(1), event_id="approval-1") == 13  # an old caller id is still known
        generated = log.entry("chat", 1).event_id
        assert log.append("chat", step(1), event_id=generated) == 1  # and so is an old generated one
        log.append("chat", step(1))
        assert log.verify().ok


# -- the property ----------------------------------------------------------------------------------

leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True),
    st.text(),
    st.binary(max_size=8),
    st.builds(object),
    st.just(ev.Message(role="user", content="x")),
)
values = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.tuples(inner),
        st.frozensets(st.integers(), max_size=3),
        st.dictionaries(st.one_of(st.text(max_size=3), st.integers(), st.none()), inner, max_size=3),
    ),
    max_leaves=8,
)
events = st.one_of(
    st.builds(StepCompleted, node=values, superstep=values, update=values),
    st.builds(UserMessage, content=values),
    st.builds(ev.RunCompleted, output=values),
    st.builds(ev.RunStarted, input=values, next_nodes=values),
    st.builds(ev.ToolCallCompleted, call_id=values, tool=st.text(max_size=3), output=values),
)


_EXAMPLES = itertools.count()


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(event=events, meta=st.one_of(st.none(), values), event_id=st.one_of(st.none(), values))
def test_any_value_is_refused_by_name_or_read_back_equal(
    log: eventlog.EventLog[Any], event: Any, meta: Any, event_id: Any
) -> None:
    before = visible(log)
    run_id = f"p{next(_EXAMPLES)}"  # the log lives across examples: a new run each, so no id is known already
    try:
        offset = log.append(run_id, event, meta=meta, event_id=event_id)
    except eventlog.EventLogError:
        assert visible(log) == before
        return
    entry = log.entry(run_id, offset)
    from eventlog.record.codec import same

    assert same(entry.event, event) and same(entry.meta, meta)
    if event_id is not None:
        assert entry.event_id == event_id
    assert [e.position for e in log.feed(after=entry.position - 1)] == [entry.position]


def test_replay_leaves_the_garbage_collector_as_the_host_set_it(log: eventlog.EventLog[Any]) -> None:
    class Failing(eventlog.AgentReducer):
        def apply(self, state: eventlog.AgentState, event: eventlog.Event) -> eventlog.AgentState:
            raise RuntimeError("boom")

    log.append_many("r", [step(i) for i in range(1, 50)])
    for enabled in (True, False):
        (gc.enable if enabled else gc.disable)()
        try:
            assert log.state_at("r").values == {"i": 49}
            with pytest.raises(eventlog.errors.ReducerError, match="boom"):
                log.state_at("r", reducer=Failing())
            assert gc.isenabled() is enabled
        finally:
            gc.enable()
