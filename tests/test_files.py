"""Files the log writes cannot be redirected by a link planted where it writes them.

An export is written to a new file of a unique name in the destination's directory,
created exclusively (O_EXCL, no following of links), then renamed over the destination: a
link at the old fixed temporary name is never touched, and a destination that is itself a
link is replaced, never followed. A new LMDB log's directory, `data.mdb` and `lock.mdb` are
created exclusively too, and an existing log's files are never reached through a link.
Every case is checked through the library and the command line.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import eventlog
from eventlog.events import UserMessage
from eventlog.transfer import export_runs

ROOT = Path(__file__).resolve().parents[1]
SECRET = "keep me as I am"


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file someone else owns: what a planted link points at."""
    target = tmp_path / "elsewhere" / "victim"
    target.parent.mkdir()
    target.write_text(SECRET)
    target.chmod(0o644)
    return target


def _untouched(victim: Path) -> bool:
    return victim.read_text() == SECRET and stat.S_IMODE(victim.stat().st_mode) == 0o644


def _export_cli(log: Path, dest: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "eventlog", "--log", str(log), "export", "-o", str(dest)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
    )


@pytest.fixture
def lmdb_log(tmp_path: Path) -> Path:
    path = tmp_path / "log"
    with eventlog.open(path) as log:
        log.append("r", UserMessage(content="a secret prompt"))
    return path


def _export_lib(log: Path, dest: Path) -> None:
    with eventlog.open(log, readonly=True) as opened:
        export_runs(opened, dest)


def _export_cli_ok(log: Path, dest: Path) -> None:
    proc = _export_cli(log, dest)
    assert proc.returncode == 0, proc.stderr


EXPORTS = [pytest.param(_export_lib, id="library"), pytest.param(_export_cli_ok, id="cli")]


@pytest.mark.parametrize("export", EXPORTS)
@pytest.mark.parametrize("planted", ["DEST.part", ".DEST.part", "DEST.tmp"])
def test_a_link_at_a_temporary_name_is_never_followed(
    tmp_path: Path, lmdb_log: Path, victim: Path, export: Any, planted: str
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    dest = out / "x.jsonl"
    (out / planted.replace("DEST", "x.jsonl")).symlink_to(victim)
    export(lmdb_log, dest)
    assert _untouched(victim)
    assert dest.is_file() and not dest.is_symlink() and stat.S_IMODE(dest.stat().st_mode) == 0o600
    assert sorted(p.name for p in out.iterdir()) == sorted(["x.jsonl", planted.replace("DEST", "x.jsonl")])


@pytest.mark.parametrize("export", EXPORTS)
def test_a_destination_that_is_a_link_is_replaced_not_followed(
    tmp_path: Path, lmdb_log: Path, victim: Path, export: Any
) -> None:
    dest = tmp_path / "x.jsonl"
    dest.symlink_to(victim)
    export(lmdb_log, dest)
    assert _untouched(victim)
    assert not dest.is_symlink() and stat.S_IMODE(dest.stat().st_mode) == 0o600
    assert '"a secret prompt"' in dest.read_text()


def test_an_export_that_fails_half_way_leaves_nothing_behind(tmp_path: Path, lmdb_log: Path) -> None:
    dest = tmp_path / "x.jsonl"
    dest.write_text("the last good export")

    def stop(done: int, total: int | None) -> None:
        raise KeyboardInterrupt

    with eventlog.open(lmdb_log) as log:
        log.append_many("r", [UserMessage(content=str(i)) for i in range(600)])
        with pytest.raises(KeyboardInterrupt):
            export_runs(log, dest, progress=stop)
    assert dest.read_text() == "the last good export"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log", "x.jsonl"]


def test_an_export_into_a_missing_directory_is_named(tmp_path: Path, lmdb_log: Path) -> None:
    with eventlog.open(lmdb_log) as log, pytest.raises(eventlog.EventLogError, match="No such file"):
        export_runs(log, tmp_path / "missing" / "x.jsonl")
    proc = _export_cli(lmdb_log, tmp_path / "missing" / "x.jsonl")
    assert proc.returncode == 1 and "No such file" in proc.stderr and "Traceback" not in proc.stderr


# -- the log's own files -----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["data.mdb", "lock.mdb"])
@pytest.mark.parametrize("readonly", [False, True])
def test_a_link_planted_in_an_empty_log_directory_is_refused(
    tmp_path: Path, victim: Path, name: str, readonly: bool
) -> None:
    path = tmp_path / "log"
    path.mkdir()
    (path / name).symlink_to(victim)
    with pytest.raises(eventlog.errors.NotALogError, match="link"):
        eventlog.open(path, readonly=readonly)
    assert _untouched(victim)


@pytest.mark.parametrize("name", ["data.mdb", "lock.mdb"])
def test_an_existing_log_is_never_read_through_a_linked_file(tmp_path: Path, lmdb_log: Path, name: str) -> None:
    moved = tmp_path / "moved"
    (lmdb_log / name).rename(moved)
    (lmdb_log / name).symlink_to(moved)
    for readonly in (False, True):
        with pytest.raises(eventlog.errors.NotALogError, match="link"):
            eventlog.open(lmdb_log, readonly=readonly)


def test_a_log_is_never_created_through_a_dangling_link(tmp_path: Path) -> None:
    target = tmp_path / "target"
    (tmp_path / "log").symlink_to(target)
    with pytest.raises(eventlog.errors.NotALogError, match="link"):
        eventlog.open(tmp_path / "log")
    assert not target.exists()
    proc = subprocess.run(
        [sys.executable, "-m", "eventlog", "--log", str(tmp_path / "log"), "runs"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
    )
    assert proc.returncode != 0 and "link" in proc.stderr and not target.exists()


def test_a_new_log_makes_its_files_itself_and_a_linked_directory_still_opens(tmp_path: Path) -> None:
    real = tmp_path / "real"
    with eventlog.open(real) as log:
        log.append("r", UserMessage(content="x"))
    assert all(not (real / n).is_symlink() and (real / n).is_file() for n in ("data.mdb", "lock.mdb"))
    (tmp_path / "alias").symlink_to(real)  # a user's own link to a log directory is theirs to make
    with eventlog.open(tmp_path / "alias", readonly=True) as log:
        assert log.head("r") == 1
