"""After a whole state is read, the server gives back what it no longer needs.

The pages of the LMDB file it read through the memory map leave its resident memory (they stay
in the kernel's cache), only for the log's own shared mappings, and every read after that
answers the same as before.
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="the UI needs its extra: pip install '.[ui]'")
pytest.importorskip("uvicorn", reason="the UI needs its extra: pip install '.[ui]'")

from ui_support import get, serving

import eventlog
from eventlog.events import UserMessage
from eventlog.ui import memory

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/maps and madvise are Linux's")


def _mapped_kb(directory: str) -> int:
    """Resident kB of this process's mappings of files in `directory` (from /proc/self/smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            parts = line.split()
            if parts and "-" in parts[0] and not parts[0].endswith(":"):
                inside = len(parts) > 5 and parts[5].startswith(directory + "/")
            elif inside and parts[0] == "Rss:":
                total += int(parts[1])
    return total


def _filled(path: Path) -> eventlog.EventLog:
    log = eventlog.open(str(path), durability="none")
    rng = random.Random(25)  # contents that do not compress away: the file is megabytes
    for i in range(40):
        log.append_many(
            "chat", [UserMessage(content=f"message {i}.{j} " + rng.randbytes(1000).hex()) for j in range(50)]
        )
    return log


def test_mapped_ranges_are_the_read_only_maps_of_the_logs_data_file(tmp_path: Path) -> None:
    maps = tmp_path / "maps"
    maps.write_text(
        "7f0000000000-7f0000100000 r--s 00000000 08:01 12 /logs/a/data.mdb\n"
        "7f0000100000-7f0000200000 r--p 00000000 08:01 13 /logs/a/private.bin\n"
        "7f0000200000-7f0000300000 r--s 00000000 08:01 14 /logs/ab/data.mdb\n"
        "7f0000300000-7f0000400000 rw-p 00000000 00:00 0 \n"
        "7f0000400000-7f0000500000 rw-s 00000000 08:01 12 /logs/a/data.mdb\n"
        "7f0000500000-7f0000600000 rw-s 00000000 08:01 15 /logs/a/lock.mdb\n"
        "7f0000600000-7f0000700000 r--s 00000000 08:01 12 /logs/a/data.mdb\n"
    )
    # only the read-only shared map of data.mdb: not another directory's, a private, a writable
    # mapping or the lock file every process shares
    assert memory.mapped_ranges("/logs/a", str(maps)) == [
        (0x7F0000000000, 0x7F0000100000),
        (0x7F0000600000, 0x7F0000700000),
    ]
    assert memory.mapped_ranges("/logs/a", str(tmp_path / "missing")) == []


def test_only_a_directory_log_has_files_to_give_back(tmp_path: Path) -> None:
    with eventlog.open(":memory:") as log:
        assert memory.log_directory(log) is None
        memory.release(log)  # nothing to give back: nothing done, nothing raised
    with eventlog.open(str(tmp_path / "log")) as log:
        assert memory.log_directory(log) == str((tmp_path / "log").resolve())


@linux
def test_the_map_pages_read_for_a_state_leave_the_resident_memory(tmp_path: Path) -> None:
    with _filled(tmp_path / "log") as log:
        directory = memory.log_directory(log)
        assert directory is not None
        before = log.state_at("chat")
        assert _mapped_kb(directory) > 1000  # the state's read mapped the file's pages
        memory.release(log)
        assert _mapped_kb(directory) < 200
        assert log.state_at("chat") == before  # read again from the kernel's cache, the same


@linux
def test_the_server_gives_the_pages_back_after_each_state(tmp_path: Path) -> None:
    with _filled(tmp_path / "log") as log, serving(log) as base:
        directory = memory.log_directory(log)
        assert directory is not None
        status, first, _ = get(f"{base}/run/state.json?id=chat&at=2000")
        assert status == 200
        deadline = time.monotonic() + 10  # given back once the answer is sent
        while _mapped_kb(directory) >= 200:
            assert time.monotonic() < deadline, f"{_mapped_kb(directory)} kB of the log still mapped"
            time.sleep(0.02)
        assert get(f"{base}/run/state.json?id=chat&at=2000")[1] == first
        assert "message 39.49" in get(f"{base}/run/state?id=chat&at=2000")[1]
