"""Smoke test of the benchmarks: `python -m tools.bench --quick` runs and writes its JSON.

Only the eventlog-only suites run (they need nothing beyond eventlog's own dependencies);
a second run checks that the LangGraph chat suite skips its competitors cleanly when
LangGraph cannot be imported; the PostgreSQL suite runs on the server that
`EVENTLOG_TEST_PG_DSN` names and skips with its reason without one. Figures and targets are
not judged here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tools.bench import EVENTLOG_ONLY

ROOT = Path(__file__).resolve().parent.parent


def _run(args: list[str], tmp_path: Path, prelude: str = "", env: dict[str, str] | None = None) -> dict:
    out = tmp_path / "bench.json"
    code = (
        f"{prelude}\nimport sys\nfrom tools.bench.__main__ import main\nsys.exit(main({args + ['--json', str(out)]!r}))"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith("EVENTLOG_BENCH_")}  # no big sizes here
    proc = subprocess.run(
        [sys.executable, "-c", code], check=False, cwd=ROOT, capture_output=True, text=True, timeout=600,
        env=dict(clean, **(env or {})),
    )  # fmt: skip
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}"
    return json.loads(out.read_text())


def test_quick_eventlog_suites(tmp_path: Path) -> None:
    data = _run([*EVENTLOG_ONLY, "--quick"], tmp_path)
    assert data["quick"] is True
    assert {"command", "quick", "seconds", "machine", "suites", "targets"} <= set(data)
    assert {"nproc", "python", "packages"} <= set(data["machine"])
    assert list(data["suites"]) == list(EVENTLOG_ONLY)
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
    assert data["suites"]["append_cpu"]["metrics"]["eventlog_calls_per_append"] > 0
    assert data["suites"]["append_cpu"]["metrics"]["profile"]
    for suite, key in (("group_commit", "sync"), ("group_commit", "none"), ("append_async", None)):
        figures = data["suites"][suite]["metrics"]
        for n in ("8", "32") if suite == "group_commit" else ("64",):
            one = (figures[key] if key else figures)[n]
            assert one["events_per_transaction"] >= 1, (suite, key, n)
    scale = data["suites"]["scale"]["metrics"]
    assert set(scale["operations"]) == {"verify", "export", "prune", "delete_run"}
    assert scale["operations"]["verify"]["big"]["result"]["ok"] is True
    assert scale["operations"]["delete_run"]["big"]["result"]["head_after"] == 0
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


def test_postgres_suite(tmp_path: Path) -> None:
    dsn = os.environ.get("EVENTLOG_TEST_PG_DSN")
    data = _run(["postgres", "--quick"], tmp_path, env={"EVENTLOG_BENCH_PG_DSN": dsn} if dsn else None)
    suite = data["suites"]["postgres"]
    if not dsn:
        assert suite["skipped"] and "EVENTLOG_BENCH_PG_DSN" in suite["skipped"]
        pytest.skip("set EVENTLOG_TEST_PG_DSN to run the PostgreSQL benchmark suite")
    assert suite["skipped"] is None
    assert {t["name"] for t in suite["targets"]} >= {"PostgreSQL 2 writer processes: scaling ÷ the floor's"}
    assert suite["metrics"]["processes"]["eventlog_appends_per_s"]["2"] > 0


def test_fleet_suite(tmp_path: Path) -> None:
    """One process of each saver, two turns: the fleet runs, checks its threads and reports a ratio."""
    pytest.importorskip("langgraph.checkpoint.sqlite", reason="pip install 'eventlog[bench]'")
    env = {"EVENTLOG_BENCH_FLEET_N": "1", "EVENTLOG_BENCH_FLEET_TURNS": "2"}
    data = _run(["fleet", "--quick"], tmp_path, env=env)
    suite = data["suites"]["fleet"]
    assert suite["skipped"] is None
    rates = suite["metrics"]["turns_per_s"]
    assert set(rates) == {"eventlog-lmdb", "langgraph-sqlite"} and all(r["1"] > 0 for r in rates.values())
    assert [t["name"] for t in suite["targets"]] == [
        "EventLogSaver, LMDB (sync) ÷ SqliteSaver (WAL, one file), 1 processes"
    ]


def test_chat_async_suite(tmp_path: Path) -> None:
    """Two turns with `ainvoke` on each saver, one round: the suite checks its thread and reports a
    ratio and eventlog's commits per turn (a superstep's writes share its checkpoint's commit)."""
    pytest.importorskip("langgraph.checkpoint.sqlite.aio", reason="pip install 'eventlog[bench]'")
    env = {"EVENTLOG_BENCH_ASYNC_TURNS": "2", "EVENTLOG_BENCH_ASYNC_ROUNDS": "1"}
    suite = _run(["chat_async", "--quick"], tmp_path, env=env)["suites"]["chat_async"]
    assert suite["skipped"] is None
    lmdb = suite["metrics"]["eventlog-lmdb"]
    assert lmdb["turns_per_s"] > 0 and lmdb["theirs"] > 0 and lmdb["ratio"] > 0
    assert 1 <= lmdb["commits_per_turn"] < 5  # five saver calls a turn


def test_saver_replay(tmp_path: Path) -> None:
    """A two-turn chat's puts replayed into EventLogSaver and SqliteSaver: both rates printed."""
    pytest.importorskip("langgraph.checkpoint.sqlite", reason="pip install 'eventlog[bench]'")
    env = {k: v for k, v in os.environ.items() if k != "EVENTLOG_BENCH_PG_DSN"}
    proc = subprocess.run(
        [sys.executable, "-m", "tools.bench.saver_replay", "--turns", "2", "--rounds", "1"],
        cwd=Path(__file__).resolve().parents[1], env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "6 puts for 2 turns" in proc.stdout
    [row] = [line.split() for line in proc.stdout.splitlines() if "eventlog-lmdb" in line]
    assert row[2] == "langgraph-sqlite" and float(row[1]) > 0 and float(row[3]) > 0
