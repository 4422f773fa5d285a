"""Every LMDB error is named by what it means, never reported as damage.

A map another process grows while this one opens the log is adopted and the open goes on;
a log already open in this process, an empty `data.mdb`, files the process may not read, a
disk full at creation: each is its own named error, and none of them is `NotALogError` or
`CorruptRecordError` (the errors that tell a user to restore from a copy). Writers are real
processes, fresh interpreters.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import eventlog
from eventlog import cli
from eventlog.events import StepCompleted, UserMessage

ROOT = Path(__file__).resolve().parents[1]
NOBODY = 65534
OPENS = int(os.environ.get("EVENTLOG_OPEN_RACE_OPENS", "25"))

_GROWER = textwrap.dedent(
    """
    import json, sys
    import eventlog
    from eventlog.events import StepCompleted
    path, name, n, readonly = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
    errors = []
    for i in range(n):
        try:
            if readonly and i % 2:
                with eventlog.open(path, readonly=True) as log:
                    log.runs()
                continue
            with eventlog.open(path, map_size_bytes=1 << 16, durability="none") as log:
                pad = "x" * 20000
                log.append_many(f"{name}-{i}", [StepCompleted(node="n", superstep=1, update={"p": pad + str(j)}) for j in range(4)])
        except eventlog.EventLogError as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
    print(json.dumps(errors))
    """
)


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


@pytest.mark.parametrize("readers", [False, True], ids=["writers", "writers-and-readers"])
def test_opening_while_other_processes_grow_the_map_is_not_damage(tmp_path: Path, readers: bool) -> None:
    """Three processes open a log with a 64 KiB map again and again and each grows it: every
    open adopts the map the others grew (at `lmdb.open`, at the size check, at the tables)."""
    path = tmp_path / "log"
    eventlog.open(path, map_size_bytes=1 << 16).close()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _GROWER, str(path), name, str(OPENS), "1" if readers else "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(),
        )
        for name in "abc"
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-2000:]
        assert json.loads(out) == [], out
    with eventlog.open(path) as log:
        assert log.verify().ok
        assert all(log.head(r) == 4 for r in log.runs())
        written = OPENS // 2 if readers else OPENS
        assert len(log.runs()) == 3 * (written + (OPENS % 2 if readers else 0))


def test_a_read_after_another_process_grew_the_map_adopts_it(tmp_path: Path) -> None:
    path = tmp_path / "log"
    with eventlog.open(path, map_size_bytes=1 << 16) as log:
        log.append("a", UserMessage(content="first"))
        subprocess.run(
            [sys.executable, "-c", _GROWER, str(path), "other", "3", "0"],
            check=True,
            capture_output=True,
            env=_env(),
            timeout=60,
        )
        assert sorted(log.runs()) == ["a", "other-0", "other-1", "other-2"]  # the map grew under this process
        log.append("a", StepCompleted(node="n", superstep=1, update={"p": "y" * 100_000}))
        assert log.verify().ok


@pytest.mark.parametrize(("first", "second"), [(False, False), (False, True), (True, False), (True, True)])
def test_a_log_already_open_in_this_process_is_named(tmp_path: Path, first: bool, second: bool) -> None:
    path = tmp_path / "log"
    eventlog.open(path).close()
    with eventlog.open(path, readonly=first) as log:
        with pytest.raises(eventlog.errors.AlreadyOpenError, match="already open in this process"):
            eventlog.open(path, readonly=second)
        assert log.runs() == []  # the first one is untouched
    eventlog.open(path, readonly=second).close()  # and once it is closed, the log opens again


def test_an_empty_data_file_is_no_log_read_only_and_a_new_log_writable(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.mkdir()
    (path / "data.mdb").write_bytes(b"")  # a creation cut short before LMDB wrote its first pages
    for options in ({"readonly": True}, {"create": False}):
        with pytest.raises(eventlog.errors.NoLogError, match="empty") as caught:
            eventlog.open(path, **options)
        assert "restore" not in str(caught.value)
    with eventlog.open(path) as log:
        log.append("a", UserMessage(content="made"))
    with eventlog.open(path, readonly=True) as log:
        assert log.head("a") == 1


def test_the_command_line_does_not_call_an_empty_log_damaged(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.mkdir()
    (path / "data.mdb").write_bytes(b"")
    proc = subprocess.run(
        [sys.executable, "-m", "eventlog", "--log", str(path), "runs"],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=60,
    )
    assert proc.returncode == cli.EXIT_NOT_FOUND, proc.stderr  # not corrupt
    assert "empty" in proc.stderr and "restore" not in proc.stderr and "not a log" not in proc.stderr


_AS_NOBODY = textwrap.dedent(
    """
    import json, os, sys
    import eventlog
    path = sys.argv[1]
    os.setgroups([]); os.setgid(65534); os.setuid(65534)
    out = {}
    for readonly in (True, False):
        try:
            eventlog.open(path, readonly=readonly).close()
            out[str(readonly)] = "opened"
        except eventlog.EventLogError as exc:
            out[str(readonly)] = type(exc).__name__
    print(json.dumps(out))
    """
)


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to drop to another user")
def test_a_log_the_process_may_not_read_is_access_denied(tmp_path: Path) -> None:
    path = tmp_path / "log"
    with eventlog.open(path) as log:
        log.append("a", UserMessage(content="private"))
    os.chmod(tmp_path, 0o711)
    proc = subprocess.run(
        [sys.executable, "-c", _AS_NOBODY, str(path)], capture_output=True, text=True, env=_env(), timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"True": "AccessDeniedError", "False": "ReadOnlyError"}


_FULL_AT_CREATION = textwrap.dedent(
    """
    import json, resource, signal, sys
    import eventlog
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.RLIM_INFINITY))
    try:
        eventlog.open(sys.argv[1]).close()
        print(json.dumps("opened"))
    except eventlog.EventLogError as exc:
        print(json.dumps(type(exc).__name__))
    """
)


def test_a_disk_full_at_creation_is_log_full(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _FULL_AT_CREATION, str(tmp_path / "log")],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == "LogFullError"


def _data_dir(p: Path) -> None:
    p.mkdir()
    (p / "data.mdb").mkdir()


def _lock_dir(p: Path) -> None:
    eventlog.open(p).close()
    (p / "lock.mdb").unlink()
    (p / "lock.mdb").mkdir()


def _under_a_file(p: Path) -> None:
    p.parent.joinpath("f").write_text("x")


@pytest.mark.parametrize("make", [_data_dir, _lock_dir, _under_a_file])
@pytest.mark.parametrize("readonly", [False, True])
def test_odd_things_at_a_log_path_are_named(tmp_path: Path, make: Any, readonly: bool) -> None:
    path = tmp_path / "log" if make is not _under_a_file else tmp_path / "f" / "log"
    make(tmp_path / "log")
    with pytest.raises(eventlog.errors.NotALogError) as caught:
        eventlog.open(path, readonly=readonly)
    assert "LMDB error" not in str(caught.value)
