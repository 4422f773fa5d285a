"""The demo runs in a process of its own, exits 0, prints each part and leaves a log that verifies."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from rich.console import Console

import eventlog
from eventlog.demo import run_demo

PARTS = [
    "Part 1: Workflow with Automatic Checkpointing",
    "[Superstep 1] Executing node: step1",
    "→ Checkpoint saved at superstep 1",
    "→ Checkpoint saved at superstep 2",
    "→ Checkpoint saved at superstep 3",
    "Part 2: Checkpoint History",
    "Part 3: Time-Travel (Load State from Superstep 2)",
    "Loaded checkpoint at superstep 2",
    'State: {"value":20}',
    "Part 4: Resume from Checkpoint (Failure Recovery)",
    "failed at superstep 2",
    "Superstep 3 reached",
    "step1 ×1, step2 ×2, step3 ×1",
    "✓ Workflow completed successfully",
    "Part 5: A Conversation Checkpointed per Turn",
    "→ Checkpoint saved at turn 1",
    "→ Checkpoint saved at turn 2",
    "Part 6: Restart and Resume the Latest",
    "resumes at turn 2",
    "Part 7: Rewind to the Previous Checkpoint",
    "Refused: conversation 'chat-demo': cannot restore checkpoint",
    "Rewound into chat-demo-rewind",
    "It is 24°C and clear in Rome.",
    "Part 8: Pause for a Human's Approval",
    "⏸ Paused: approve book_table",
    "→ Checkpoint saved at the pause",
    "Done: a table for 2 at 20:00.",
    "no problems",
]


def run_module(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "PYTHONIOENCODING": "utf-8"}
    return subprocess.run(
        [sys.executable, "-m", *args],
        check=False,
        capture_output=True,
        text=True,
        encoding="utf-8",
        env=env,
        timeout=120,
    )


def test_demo_runs_in_a_subprocess_and_prints_each_part(tmp_path: Path) -> None:
    path = tmp_path / "demo"
    done = run_module("eventlog.demo", "--path", str(path))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    positions = []
    for part in PARTS:
        assert part in out, f"missing from the demo's output: {part!r}\n{out}"
        positions.append(out.index(part))
    assert positions == sorted(positions)  # in this order
    history = out[out.index("Part 2") : out.index("Part 3")]
    assert len(re.findall(r"Checkpoint \d", history)) == 3
    assert len(re.findall(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", history)) == 3  # real timestamps
    for command in ("runs", "history workflow-demo", "state workflow-demo --at 7", "verify"):
        assert f"eventlog --log {path} {command}" in out

    with eventlog.open(path, readonly=True) as log:
        assert set(log.runs()) == {
            "workflow-demo",
            "workflow-demo-replay",
            "workflow-retry",
            "chat-demo",
            "chat-demo-rewind",
        }
        assert [cp.summary["superstep"] for cp in log.checkpoints.list("workflow-demo")] == [1, 2, 3]
        assert log.state_at("workflow-retry").status == "completed"
        assert len(log.checkpoints.list("chat-demo")) == 3
        assert log.run_info("chat-demo-rewind").parent == "chat-demo"
        assert log.state_at("chat-demo-rewind").resume_value is True
        assert log.verify().ok


def test_the_printed_cli_commands_work(tmp_path: Path) -> None:
    path = tmp_path / "demo"
    assert run_module("eventlog.demo", "--path", str(path)).returncode == 0
    done = run_module("eventlog", "--log", str(path), "state", "workflow-demo", "--at", "7", "--json")
    assert done.returncode == 0, done.stderr
    assert '"value": 20' in done.stdout or '"value":20' in done.stdout


def test_a_second_demo_on_the_same_log_uses_new_run_ids(tmp_path: Path) -> None:
    path = tmp_path / "demo"
    console = Console(record=True, width=200, force_terminal=False)
    assert run_demo(str(path), console=console) == 0
    assert run_demo(str(path), console=console) == 0
    text = console.export_text()
    assert text.count("✓ Workflow completed successfully") == 2
    assert "Run ID: workflow-demo-2" in text
    with eventlog.open(path) as log:
        assert len(log.runs()) == 10 and log.verify().ok


def test_without_a_path_the_demo_writes_a_temporary_directory() -> None:
    console = Console(record=True, width=300, force_terminal=False)
    assert run_demo(None, console=console) == 0
    match = re.search(r"LMDB log at (\S+)", console.export_text())
    assert match is not None
    path = Path(match.group(1))
    try:
        assert path.is_dir() and path.name.startswith("eventlog-demo-")
        with eventlog.open(path) as log:
            assert "chat-demo" in log.runs()
    finally:
        shutil.rmtree(path)
