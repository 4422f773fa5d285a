"""A write that does not fit fails with LogFullError, keeps nothing of itself, and harms nothing.

A full disk is made real with RLIMIT_FSIZE in a subprocess (SIGXFSZ ignored, so the write
fails with EFBIG instead of killing the process); a full map with a small
`map_size_bytes_max`. In both, earlier data stays intact and readable, the log keeps working
for writes that fit, and once space returns (the limit raised, or the log reopened with a
larger map) appends go on.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import eventlog
from eventlog.errors import LogFullError
from eventlog.events import UserMessage

_FULL_DISK = textwrap.dedent(
    """
    import json, os, resource, signal, sys
    import eventlog
    from eventlog.events import UserMessage
    path, mode = sys.argv[1], sys.argv[2]
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    out = {}
    log = eventlog.open(path, durability=mode)
    for i in range(50):
        log.append("a", UserMessage(content=f"m{i} " + "x" * 200))
    log.checkpoints.save("a")
    log.store.sync()
    size = os.path.getsize(os.path.join(path, "data.mdb"))
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size + 64 * 1024, hard))
    acked = 0
    try:
        while acked < 100_000:
            log.append("b", UserMessage(content=os.urandom(2000).hex()))
            acked += 1
        out["error"] = None
    except eventlog.EventLogError as exc:
        out["error"], out["message"] = type(exc).__name__, str(exc)
    out["acked_b"], out["head_b"] = acked, log.head("b")
    out["verify_ok"] = log.verify().ok
    out["a"] = [e.event.content for e in log.read("a")]
    try:
        log.append_many("c", [UserMessage(content=os.urandom(2000).hex()) for _ in range(40)])
        out["batch"] = "kept"
    except eventlog.errors.LogFullError:
        out["batch"] = "LogFullError"
    out["head_c"] = log.head("c")
    try:
        log.checkpoints.save("a", metadata={"pad": os.urandom(100_000).hex()})
        out["checkpoint"] = "kept"
    except eventlog.errors.LogFullError:
        out["checkpoint"] = "LogFullError"
    out["checkpoints_a"] = len(log.checkpoints.list("a"))
    resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))  # space returns
    log.append("b", UserMessage(content="after"))
    out["head_b_after"] = log.head("b")
    log.close()
    print(json.dumps(out))
    """
)


def _expected_a() -> list[str]:
    return [f"m{i} " + "x" * 200 for i in range(50)]


@pytest.mark.parametrize("mode", ["sync", "batch", "none"])
def test_full_disk_fails_with_log_full_and_keeps_earlier_data(tmp_path: Path, mode: str) -> None:
    path = tmp_path / "log"
    proc = subprocess.run(
        [sys.executable, "-c", _FULL_DISK, str(path), mode], check=False, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, f"return code {proc.returncode}: {proc.stderr[-3000:]}"
    out = json.loads(proc.stdout)
    assert out["error"] == "LogFullError", out
    assert "no space" in out["message"]
    assert out["acked_b"] > 0
    assert out["head_b"] == out["acked_b"], "the failed write left something behind"
    assert out["verify_ok"]
    assert out["a"] == _expected_a()
    assert out["batch"] == "LogFullError" and out["head_c"] == 0, "part of a batch that did not fit was kept"
    assert out["checkpoint"] == "LogFullError" and out["checkpoints_a"] == 1
    assert out["head_b_after"] == out["acked_b"] + 1, "the log did not take writes once space returned"

    with eventlog.open(path, durability=mode) as log:  # reopened, without any limit
        assert log.verify().ok
        assert [e.event.content for e in log.read("a")] == _expected_a()
        assert log.head("b") == out["acked_b"] + 1
        assert log.append("b", UserMessage(content="reopened")) == out["acked_b"] + 2
        assert log.append_many("c", [UserMessage(content="x" * 4000) for _ in range(40)]) == list(range(1, 41))


def test_full_map_fails_with_log_full_and_keeps_earlier_data(tmp_path: Path) -> None:
    path = tmp_path / "log"
    small = 512 * 1024
    log = eventlog.open(path, map_size_bytes=256 * 1024, map_size_bytes_max=small)
    for i in range(50):
        log.append("a", UserMessage(content=f"m{i} " + "x" * 200))
    acked = 0
    with pytest.raises(LogFullError) as caught:
        while acked < 10_000:
            log.append("b", UserMessage(content=os.urandom(1500).hex()))
            acked += 1
    assert str(small) in str(caught.value)
    assert 0 < acked < 10_000
    assert log.head("b") == acked
    assert log.verify().ok
    assert [e.event.content for e in log.read("a")] == _expected_a()
    with pytest.raises(LogFullError):
        log.append_many("c", [UserMessage(content=os.urandom(1500).hex()) for _ in range(60)])
    assert log.head("c") == 0
    assert log.state_at("a").messages  # reads and folds still work on a full map
    log.close()

    with eventlog.open(path, map_size_bytes_max=64 * 1024 * 1024) as log:  # space returns
        assert log.head("b") == acked
        assert log.append_many("c", [UserMessage(content=os.urandom(1500).hex()) for _ in range(60)]) == list(
            range(1, 61)
        )
        assert log.verify().ok
        assert log.stats()["map_size_bytes"] > small


def test_an_event_larger_than_the_whole_map_is_log_full_not_a_crash(tmp_path: Path) -> None:
    with eventlog.open(tmp_path / "log", map_size_bytes=128 * 1024, map_size_bytes_max=256 * 1024) as log:
        log.append("a", UserMessage(content="small"))
        with pytest.raises(LogFullError):
            log.append("a", UserMessage(content=os.urandom(400 * 1024).hex()))
        assert log.head("a") == 1
        assert log.append("a", UserMessage(content="still fits")) == 2
