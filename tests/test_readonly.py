"""Read-only mode, and the permissions new logs are created with.

`eventlog.open(path, readonly=True)` reads a log in a directory the process cannot write
(an archive, a mount shared read-only) and refuses every write with ReadOnlyError. Tests run
as root, where file permissions do not bind, so the unwritable-directory check runs in a
subprocess that drops to the `nobody` user (uid 65534) before it opens the log.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import eventlog
from eventlog.errors import NotALogError, ReadOnlyError
from eventlog.events import StepCompleted, UserMessage

NOBODY = 65534


def _make_log(path: Path) -> None:
    with eventlog.open(path) as log:
        for i in range(10):
            log.append("a", StepCompleted(node=f"n{i}", superstep=i + 1, update={"i": i}))
        log.checkpoints.save("a")
        log.append("b", UserMessage(content="hello"))


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_new_log_files_are_readable_by_their_owner_only(tmp_path: Path) -> None:
    old = os.umask(0)  # even with no umask at all
    try:
        path = tmp_path / "deep" / "log"
        eventlog.open(path).close()
    finally:
        os.umask(old)
    assert _mode(path) == 0o700
    assert _mode(path / "data.mdb") == 0o600
    assert _mode(path / "lock.mdb") == 0o600


def _writes(log: eventlog.EventLog) -> dict[str, object]:
    return {
        "append": lambda: log.append("a", UserMessage(content="no")),
        "append_many": lambda: log.append_many("new", [UserMessage(content="no")]),
        "checkpoint": lambda: log.checkpoints.save("a", 3),
        "delete_checkpoint": lambda: log.checkpoints.delete("a", log.checkpoints.list("a")[0].checkpoint_id),
        "fork": lambda: log.fork("a", 2, "a2"),
        "prune": lambda: log.prune("a", 10),
        "delete_run": lambda: log.delete_run("b"),
        "recorder": lambda: log.writer("a").append(UserMessage(content="no")),
    }


def test_read_only_reads_everything_and_refuses_every_write(tmp_path: Path) -> None:
    path = tmp_path / "log"
    _make_log(path)
    digest = hashlib.sha256((path / "data.mdb").read_bytes()).hexdigest()
    with eventlog.open(path, readonly=True) as log:
        assert log.store.readonly
        assert log.runs() == ["a", "b"]
        assert [e.offset for e in log.read("a")] == list(range(1, 11))
        assert len(list(log.feed())) == 11
        assert log.state_at("a", 5).values == {"i": 4}
        assert log.checkpoints.load_latest("a").offset == 10
        assert log.verify().ok
        for name, write in _writes(log).items():
            with pytest.raises(ReadOnlyError, match="read-only|cannot write"):
                write()
            assert log.head("a") == 10, name
    assert hashlib.sha256((path / "data.mdb").read_bytes()).hexdigest() == digest


def test_read_only_refuses_what_holds_no_log(tmp_path: Path) -> None:
    with pytest.raises(NotALogError):
        eventlog.open(tmp_path / "missing", readonly=True)
    (tmp_path / "empty").mkdir()
    with pytest.raises(NotALogError):
        eventlog.open(tmp_path / "empty", readonly=True)
    assert not (tmp_path / "missing").exists()
    assert list((tmp_path / "empty").iterdir()) == []


_AS_ANOTHER_USER = textwrap.dedent(
    """
    import json, os, sys, tempfile
    import eventlog
    from eventlog.events import UserMessage
    path, uid = sys.argv[1], int(sys.argv[2])
    # Everything is imported before the process drops to another user: the checkout (and its
    # venv) may sit in a directory that user cannot read, so nothing may be imported later.
    with tempfile.TemporaryDirectory() as warm:
        with eventlog.open(os.path.join(warm, "w")) as w:
            w.append("a", UserMessage(content="warm"))
            w.state_at("a"), w.verify(), list(w.feed())
        with eventlog.open(os.path.join(warm, "w"), readonly=True) as w:
            list(w.read("a"))
        try:
            eventlog.open(os.path.join(warm, "missing"), readonly=True)
        except eventlog.EventLogError:
            pass
    if os.getuid() == 0:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    out = {"uid": os.getuid()}
    try:
        open(os.path.join(path, "probe"), "w")
        out["dir_writable"] = True
    except PermissionError:
        out["dir_writable"] = False
    with eventlog.open(path, readonly=True) as log:
        out["runs"] = log.runs()
        out["offsets"] = [e.offset for e in log.read("a")]
        out["state"] = log.state_at("a").values
        out["verify"] = log.verify().ok
        out["feed"] = len(list(log.feed()))
        try:
            log.append("a", UserMessage(content="no"))
            out["append"] = "written"
        except eventlog.EventLogError as exc:
            out["append"] = type(exc).__name__
            out["append_message"] = str(exc)
    try:
        eventlog.open(path).close()
        out["writable_open"] = "opened"
    except eventlog.EventLogError as exc:
        out["writable_open"] = type(exc).__name__
        out["writable_message"] = str(exc)
    print(json.dumps(out))
    """
)


@pytest.fixture
def unwritable_log() -> Iterator[Path]:
    """A log in a directory 0500 with files 0400, owned by the user the check runs as."""
    top = Path(tempfile.mkdtemp(prefix="eventlog-ro-"))
    path = top / "log"
    _make_log(path)
    owner = NOBODY if os.getuid() == 0 else os.getuid()
    os.chmod(top, 0o711)  # let the other user reach the log directory
    for f in path.iterdir():
        os.chown(f, owner, owner) if os.getuid() == 0 else None
        os.chmod(f, 0o400)
    if os.getuid() == 0:
        os.chown(path, owner, owner)
    os.chmod(path, 0o500)
    yield path
    os.chmod(path, 0o700)
    for f in path.iterdir():
        os.chmod(f, 0o600)
    import shutil

    shutil.rmtree(top)


def test_read_only_works_in_a_directory_the_process_cannot_write(unwritable_log: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _AS_ANOTHER_USER, str(unwritable_log), str(NOBODY)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if proc.returncode != 0 and "Operation not permitted" in proc.stderr and os.getuid() == 0:
        pytest.skip(f"cannot drop to uid {NOBODY} here: {proc.stderr.strip().splitlines()[-1]}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["uid"] != 0
    assert out["dir_writable"] is False, "permissions do not bind for this user: the check would prove nothing"
    assert out["runs"] == ["a", "b"]
    assert out["offsets"] == list(range(1, 11))
    assert out["state"] == {"i": 9}
    assert out["verify"] is True and out["feed"] == 11
    assert out["append"] == "ReadOnlyError"
    assert out["writable_open"] == "ReadOnlyError", out
    assert "readonly=True" in out["writable_message"]
    assert str(unwritable_log) in out["writable_message"]
    assert sorted(f.name for f in unwritable_log.iterdir()) == ["data.mdb", "lock.mdb"]


def test_a_read_only_reader_sees_what_a_writer_process_commits_later(tmp_path: Path) -> None:
    path = tmp_path / "log"
    _make_log(path)
    code = (
        "import sys, eventlog\n"
        "from eventlog.events import UserMessage\n"
        "with eventlog.open(sys.argv[1]) as log:\n"
        "    print(log.append('a', UserMessage(content='later')))\n"
    )
    with eventlog.open(path, readonly=True) as reader:
        assert reader.head("a") == 10
        proc = subprocess.run(
            [sys.executable, "-c", code, str(path)], check=False, capture_output=True, text=True, timeout=60
        )
        assert proc.stdout.strip() == "11", proc.stderr
        assert reader.head("a") == 11
        assert reader.entry("a", 11).event == UserMessage(content="later")
