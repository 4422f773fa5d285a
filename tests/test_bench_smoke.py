"""Smoke test of the benchmarks: `python -m tools.bench --quick` runs and writes its JSON.

Only the eventlog-only suites run (they need nothing beyond eventlog's own dependencies);
a second run checks that the LangGraph chat suite skips its competitors cleanly when
LangGraph cannot be imported. Figures and targets are not judged here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EVENTLOG_ONLY = ["append_batch", "append_single", "append_threads", "replay", "state_at", "replay_memory"]


def _run(args: list[str], tmp_path: Path, prelude: str = "") -> dict:
    out = tmp_path / "bench.json"
    code = (
        f"{prelude}\nimport sys\nfrom tools.bench.__main__ import main\nsys.exit(main({args + ['--json', str(out)]!r}))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], check=False, cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}"
    return json.loads(out.read_text())


def test_quick_eventlog_suites(tmp_path: Path) -> None:
    data = _run([*EVENTLOG_ONLY, "--quick"], tmp_path)
    assert data["quick"] is True
    assert {"command", "quick", "seconds", "machine", "suites", "targets"} <= set(data)
    assert {"nproc", "python", "packages"} <= set(data["machine"])
    assert list(data["suites"]) == EVENTLOG_ONLY
    for name, suite in data["suites"].items():
        assert suite["skipped"] is None, (name, suite["skipped"])
        assert {"name", "description", "seconds", "metrics", "rows", "targets"} <= set(suite)
        assert suite["rows"], name
        assert suite["targets"], name
        for t in suite["targets"]:
            assert {"name", "value", "threshold", "op", "met"} <= set(t)
            assert isinstance(t["met"], bool)
    assert data["suites"]["append_batch"]["metrics"]["eventlog_events_per_s"] > 0
    assert data["suites"]["append_batch"]["metrics"]["ratio_to_floor"] > 0
    assert data["suites"]["replay"]["metrics"]["ratio_to_floor"] > 0
    assert data["suites"]["state_at"]["metrics"]["median_ms"] > 0
    assert data["suites"]["replay_memory"]["metrics"]["peak_anon_bytes"] > 0
    assert len(data["targets"]) == sum(len(s["targets"]) for s in data["suites"].values())


_NO_LANGGRAPH = """
import sys
class _Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("langgraph", "langgraph_checkpoint_lmdb", "langchain_core"):
            raise ImportError(f"{name} hidden by the smoke test")
        return None
sys.meta_path.insert(0, _Block())
"""


def test_chat_skips_competitors_without_langgraph(tmp_path: Path) -> None:
    data = _run(["chat", "--quick"], tmp_path, prelude=_NO_LANGGRAPH)
    chat = data["suites"]["chat"]
    assert chat["skipped"] is None
    assert list(chat["metrics"]["systems"]) == ["eventlog"]
    assert set(chat["metrics"]["skipped"]) == {
        "eventlog-saver",
        "eventlog-saver-pg",
        "langgraph-postgres",
        "langgraph-memory",
        "langgraph-sqlite",
        "langgraph-sqlite-delta",
        "langgraph-lmdb",
    }
