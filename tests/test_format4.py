"""Format 4 (docs/format.md, "Event ids"): ids the log draws are made from their run number and
offset and indexed nowhere, found again by their form; a format-3 log reads the same before and
after its migration, and the ids it drew before stay known."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

import eventlog
from eventlog.events import StepCompleted, UserMessage
from eventlog.record._keys import own_id, own_prefix, own_slot

OpenLog = Callable[..., eventlog.EventLog[Any]]

FIXTURE = Path(__file__).parent / "fixtures" / "log-923256f"


def _maker() -> Any:
    spec = importlib.util.spec_from_file_location("make_log_923256f", FIXTURE.parent / "make_log_923256f.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("make_log_923256f", module)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def old_log(tmp_path: Path) -> Path:
    copy = tmp_path / "log"
    copy.mkdir(mode=0o700)
    (copy / "data.mdb").write_bytes((FIXTURE / "data.mdb").read_bytes())
    return copy


def _format(log: eventlog.EventLog[Any]) -> int:
    return log.store.read(lambda txn: log._runs.meta_int(txn, b"format"))


def _indexed(log: eventlog.EventLog[Any]) -> int:
    return len(log.store.read(lambda txn: txn.scan("event_ids", b"", None)))


def test_a_format_3_log_reads_identically_as_it_is_and_migrated(old_log: Path) -> None:
    expected = msgspec.json.decode((FIXTURE.parent / "log-923256f.json").read_bytes())
    read_all = _maker().read_all
    with eventlog.open(old_log, readonly=True) as log:  # as it is
        assert _format(log) == 3
        assert read_all(log) == expected
    with eventlog.open(old_log) as log:  # opened to write: format 4, nothing rewritten
        assert _format(log) == eventlog._limits.format_version == 4
        assert read_all(log) == expected
        assert log.verify().ok
        indexed = _indexed(log)
        old = log.entry("chat", 3).event_id
        assert own_slot(own_prefix(log.codec.log_id), old) is None  # drawn by 923256f: indexed
        assert log.append("chat", UserMessage(content="again"), event_id=old) == 3  # still known
        assert log.append("chat-b", UserMessage(content="again"), event_id=old) == 3  # through the fork
        assert log.append("graph", StepCompleted(node="x", superstep=1), event_id="given-3") == 3
        new = log.append_many("chat", [UserMessage(content="after"), UserMessage(content="the migration")])
        assert new == [21, 22]
        assert _indexed(log) == indexed  # ids the log draws now are not indexed
        drawn = log.entry("chat", 22).event_id
        assert own_slot(own_prefix(log.codec.log_id), drawn) is not None
        assert log.append("chat", UserMessage(content="again"), event_id=drawn) == 22
        assert log.verify().ok
    with eventlog.open(old_log, readonly=True) as log:  # and read-only once migrated
        assert _format(log) == 4
        got = read_all(log)
        assert got["chat"]["entries"][:20] == expected["chat"]["entries"]
        assert got["chat-b"] == expected["chat-b"] and got["pruned"] == expected["pruned"]


def test_drawn_ids_are_found_by_their_form_through_forks_and_prunes(open_log: OpenLog) -> None:
    log = open_log()
    log.append_many("r", [StepCompleted(node="a", superstep=i) for i in range(1, 9)])
    ids = [e.event_id for e in log.read("r")]
    assert len(set(ids)) == 8 and _indexed(log) == 0
    assert log.append_many("r", [StepCompleted(node="a", superstep=1)] * 2, event_ids=[ids[0], None]) == [1, 9]
    assert log.entry("r", 9).event_id not in ids
    ids.append(log.entry("r", 9).event_id)
    log.fork("r", at=5, new_run_id="f")
    log.append("f", StepCompleted(node="f", superstep=1))
    assert log.append_many("f", [StepCompleted(node="again", superstep=1)] * 5, event_ids=ids[:5]) == [1, 2, 3, 4, 5]
    assert log.append("f", StepCompleted(node="new", superstep=1), event_id=ids[6]) == 7  # r's offset 7 is not f's
    assert log.append("f", StepCompleted(node="new", superstep=1), event_id=ids[6]) == 7
    log.append_many("p", [StepCompleted(node="p", superstep=i) for i in range(1, 6)])
    pruned = [e.event_id for e in log.read("p")]
    log.checkpoints.save("p", 4)
    log.prune("p", before=4)
    assert log.append("p", StepCompleted(node="again", superstep=1), event_id=pruned[1]) == 2  # pruned: still its id
    assert log.head("p") == 5
    w = log.writer("r")  # a writer's repeated id is not folded again
    assert w.append(StepCompleted(node="again", superstep=1), event_id=ids[7]) == 8 and w.offset == 9
    assert log.verify().ok


@given(st.binary(min_size=16, max_size=16), st.integers(1, 2**64 - 1), st.integers(1, 2**64 - 1))
def test_an_own_id_names_its_slot_and_nothing_else_does(log_id: bytes, number: int, offset: int) -> None:
    prefix = own_prefix(log_id)
    made = own_id(prefix, number, offset)
    assert own_slot(prefix, made) == (number, offset)
    for other in (made.upper(), made + "0", made.replace("-", "-0", 1), prefix + "0-1", prefix + f"{number:x}"):
        assert own_slot(prefix, other) is None or own_id(prefix, *own_slot(prefix, other)) == other  # type: ignore[misc]
    assert own_slot(own_prefix(bytes(16)), made) is None or log_id[:8] == bytes(8)


def test_a_writer_never_writes_from_a_run_record_another_log_changed(
    open_log: OpenLog, backend: str, tmp_path: Path
) -> None:
    """The writer keeps the run records it wrote and skips their decode only while the stored
    value is the one it wrote: appends, forks and deletes made by another process (LMDB) or
    another open log (the other stores) are read, and every fence holds."""
    a = open_log()
    b = None if backend == "lmdb" else open_log()

    def other(code: str) -> None:
        """Run `code` with `log` open as another writer of the same log."""
        if b is not None:
            exec(code, {"log": b, "StepCompleted": StepCompleted})
            return
        script = f"import eventlog\nfrom eventlog.events import StepCompleted\nlog = eventlog.open({str(tmp_path / 'log')!r})\n{code}\nlog.close()\n"
        subprocess.run([sys.executable, "-c", script], check=True, timeout=60)

    step = [StepCompleted(node="n", superstep=i) for i in range(1, 12)]
    assert a.append_many("r", step[:3]) == [1, 2, 3]
    other('log.append_many("r", [StepCompleted(node="b", superstep=4), StepCompleted(node="b", superstep=5)])')
    with pytest.raises(eventlog.ConflictError):
        a.append("r", step[5], expected_offset=3)
    assert a.append("r", step[5], expected_offset=5) == 6
    w = a.writer("r")
    other('log.fork("r", at=2, new_run_id="f")')
    assert a.append("r", step[6]) == 7  # the fork count the other wrote is kept
    with pytest.raises(eventlog.errors.ForkDependencyError):
        a.delete_run("r")
    other('log.delete_run("f"); log.delete_run("r")')
    with pytest.raises(eventlog.errors.RunReplacedError):
        w.append(step[7])
    assert a.append("r", step[8]) == 1  # a new run of the same id
    assert a.head("r") == 1 and a.verify().ok
