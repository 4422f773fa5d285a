"""The `eventlog` command against a real LMDB log made by the demo.

Every subcommand runs in-process through `eventlog.cli.main` (a few through a real
subprocess); `--json` output is checked against the library's own answers.
"""

from __future__ import annotations

import importlib.util
import io
import json
import math
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import eventlog
from eventlog import cli
from eventlog.agent.readers import reducer_of
from eventlog.demo import run_demo
from eventlog.diff import diff_offsets
from eventlog.events import (
    StateUpdated,
    StepCompleted,
    UserMessage,
)
from eventlog.transfer import export_runs, import_runs
from eventlog.views import view_for_run

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def demo_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A log made once per module by the demo: graph runs, a conversation, forks and checkpoints."""
    from rich.console import Console

    path = tmp_path_factory.mktemp("demo") / "demo.lmdb"
    assert run_demo(str(path), console=Console(file=io.StringIO())) == 0
    with eventlog.open(path) as log:
        assert any(log.run_info(r).parent for r in log.runs()), "the log needs a fork"
        assert any(log.run_info(r).checkpoints for r in log.runs()), "the log needs checkpoints"
    return path


@pytest.fixture
def copy_log(demo_log: Path, tmp_path: Path) -> Path:
    """A private copy of the demo log, for commands that change it."""
    dest = tmp_path / "copy.lmdb"
    shutil.copytree(demo_log, dest)
    return dest


Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Run:
    """`run(*argv, stdin="")` -> (exit code, stdout, stderr) of `eventlog argv` in this process."""
    monkeypatch.delenv("EVENTLOG_PATH", raising=False)
    monkeypatch.delenv("EVENTLOG_KINDS", raising=False)
    monkeypatch.setenv("COLUMNS", "160")  # tables as wide whatever terminal, if any, runs the tests

    def call(*argv: str, stdin: str = "") -> tuple[int, str, str]:
        import io

        capsys.readouterr()
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        code = cli.main([str(a) for a in argv])
        out, err = capsys.readouterr()
        return code, out, err

    return call


def _json(run: Run, *argv: Any) -> Any:
    code, out, err = run(*argv, "--json")
    assert code == 0, err
    return json.loads(out)


def _builtins(value: Any) -> Any:
    return json.loads(msgspec.json.encode(value))


def _state(state: Any) -> dict[str, Any]:
    return {f: _builtins(getattr(state, f)) for f in type(state).__struct_fields__}


# -- reading commands --------------------------------------------------------------------------
# LMDB opens a directory once per process: each test reads the library's answers first,
# closes the log, then runs the command.


def _lib(path: Path, fn: Callable[[eventlog.EventLog], Any], *, write: bool = False) -> Any:
    with eventlog.open(path, readonly=not write) as log:
        return fn(log)


def test_runs_json_is_run_info_of_every_run(run: Run, demo_log: Path) -> None:
    want = _lib(demo_log, lambda log: [_builtins(log.run_info(r)) for r in log.runs()])
    assert _json(run, "--log", demo_log, "runs") == want
    assert len(want) >= 2


def test_runs_table_has_a_header_row_and_every_run(run: Run, demo_log: Path) -> None:
    runs = _lib(demo_log, lambda log: log.runs())
    code, out, _ = run("runs", "--log", demo_log)  # --log after the subcommand works too
    assert code == 0
    header = out.splitlines()[1]
    assert "run" in header and "head" in header and "parent" in header
    for r in runs:
        assert r in out


def test_log_from_the_environment(run: Run, demo_log: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVENTLOG_PATH", str(demo_log))
    code, out, err = run("runs", "--json")
    assert code == 0, err
    assert json.loads(out)


def test_events_json_equals_read_for_every_run_forks_included(run: Run, demo_log: Path) -> None:
    want = _lib(demo_log, lambda log: {r: [_builtins(e) for e in log.read(r)] for r in log.runs()})
    for r, entries in want.items():
        got = _json(run, "--log", demo_log, "events", r)
        assert got == entries
        assert [e["offset"] for e in got] == list(range(1, len(entries) + 1))


def test_events_from_to_and_kind(run: Run, demo_log: Path) -> None:
    r, entries = _lib(
        demo_log,
        lambda log: max(((r, [_builtins(e) for e in log.read(r)]) for r in log.runs()), key=lambda x: len(x[1])),
    )
    head = len(entries)
    got = _json(run, "--log", demo_log, "events", r, "--from", 2, "--to", head - 1)
    assert got == entries[1 : head - 1]
    some = sorted({e["event"]["kind"] for e in entries})[0]
    family = some.split(".")[0]
    assert _json(run, "--log", demo_log, "events", r, "--kind", some) == [
        e for e in entries if e["event"]["kind"] == some
    ]
    fam = _json(run, "--log", demo_log, "events", r, "--kind", family)
    assert fam == [e for e in entries if e["event"]["kind"] == family or e["event"]["kind"].startswith(family + ".")]
    code, out, _ = run("--log", demo_log, "events", r)
    assert code == 0 and "offset" in out and "kind" in out and some in out


def test_history_json_equals_checkpoints_list(run: Run, demo_log: Path) -> None:
    def answers(log: eventlog.EventLog) -> dict[str, list[tuple[Any, ...]]]:
        return {
            r: [(cp.checkpoint_id, cp.offset, _builtins(cp.metadata), cp.summary) for cp in log.checkpoints.list(r)]
            for r in log.runs()
            if log.run_info(r).checkpoints
        }

    want = _lib(demo_log, answers)
    assert want
    for r, cps in want.items():
        got = _json(run, "--log", demo_log, "history", r)
        assert [(c["checkpoint_id"], c["offset"], c["metadata"], c["summary"]) for c in got] == cps
        assert _json(run, "--log", demo_log, "history", r, "--limit", 1) == got[-1:]
    code, out, _ = run("--log", demo_log, "history", next(iter(want)))
    assert code == 0 and "checkpoint" in out and "offset" in out


def test_state_json_at_every_offset_and_at_checkpoints(run: Run, demo_log: Path) -> None:
    def answers(log: eventlog.EventLog) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for r in log.runs():
            head = log.head(r)
            out[r] = (
                {k: _state(log.state_at(r, k, reducer=reducer_of(log, r))) for k in range(head + 1)},
                [
                    (cp.checkpoint_id, cp.offset, _state(cp.state))
                    for cp in log.checkpoints.list(r, reducer=reducer_of(log, r))
                ],
            )
        return out

    for r, (states, cps) in _lib(demo_log, answers).items():
        for k, state in states.items():
            got = _json(run, "--log", demo_log, "state", r, "--at", k)
            assert (got["run_id"], got["offset"], got["checkpoint_id"], got["state"]) == (r, k, None, state)
        assert _json(run, "--log", demo_log, "state", r)["state"] == states[max(states)]
        for checkpoint_id, offset, state in cps:
            got = _json(run, "--log", demo_log, "state", r, "--checkpoint", checkpoint_id)
            assert (got["offset"], got["checkpoint_id"], got["state"]) == (offset, checkpoint_id, state)
    code, out, _ = run("--log", demo_log, "state", r)
    assert code == 0 and '"status"' in out


def test_diff_json_matches_the_states(run: Run, demo_log: Path) -> None:
    heads = _lib(demo_log, lambda log: {r: log.head(r) for r in log.runs()})
    pairs = {r: [(0, h), (h // 2, h), (h, h // 2)] for r, h in heads.items()}
    states = _lib(
        demo_log, lambda log: {(r, k): _state(log.state_at(r, k)) for r, ps in pairs.items() for p in ps for k in p}
    )
    for r, ps in pairs.items():
        for a, b in ps:
            got = _json(run, "--log", demo_log, "diff", r, a, b)
            sa, sb = states[r, a], states[r, b]
            va, vb = sa["values"], sb["values"]
            assert got["added"] == {k: v for k, v in vb.items() if k not in va}
            assert got["removed"] == {k: v for k, v in va.items() if k not in vb}
            assert got["changed"] == {k: {"from": va[k], "to": vb[k]} for k in vb if k in va and va[k] != vb[k]}
            ma, mb = sa["messages"], sb["messages"]
            assert got["messages_appended"] == mb[len(mb) - len(got["messages_appended"]) :]
            kept = len(mb) - len(got["messages_appended"])
            assert ma[:kept] == mb[:kept] and got["messages_removed"] == ma[kept:]
            if a <= b:  # messages only grow along a run
                assert got["messages_removed"] == [] and got["messages_appended"] == mb[len(ma) :]
            for field, change in got["fields"].items():
                assert change == {"from": sa[field], "to": sb[field]}
            assert {f for f in sa if f not in ("values", "messages") and sa[f] != sb[f]} == set(got["fields"])
        assert _json(run, "--log", demo_log, "diff", r, 0, "head")["b"]["offset"] == heads[r]


def test_diff_between_checkpoints_and_table(run: Run, demo_log: Path) -> None:
    def pick(log: eventlog.EventLog) -> tuple[str, Any, Any]:
        r = max(log.runs(), key=lambda r: log.run_info(r).checkpoints)
        cps = log.checkpoints.list(r)
        return r, (cps[0].checkpoint_id, cps[0].offset), (cps[-1].checkpoint_id, cps[-1].offset)

    r, first, last = _lib(demo_log, pick)
    got = _json(run, "--log", demo_log, "diff", r, first[0], last[0])
    assert got["a"] == {"offset": first[1], "checkpoint_id": first[0]}
    assert got["b"] == {"offset": last[1], "checkpoint_id": last[0]}
    code, out, _ = run("--log", demo_log, "diff", r, 0, "head")
    assert code == 0 and "change" in out


def test_stats_json_matches_log_stats(run: Run, demo_log: Path) -> None:
    want = _lib(demo_log, lambda log: log.stats(scan=True))
    got = _json(run, "--log", demo_log, "stats")
    assert {k: got[k] for k in want} == want
    assert got["runs"] == len(_json(run, "--log", demo_log, "runs"))
    assert got["bytes_on_disk"] > 0 and got["map_size_bytes"] > 0
    assert got["compression_ratio"] == pytest.approx(got["event_bytes_raw"] / got["event_bytes_stored"])
    code, out, _ = run("--log", demo_log, "stats")
    assert code == 0 and "compression ratio" in out and "map size" in out


def test_verify_ok(run: Run, demo_log: Path) -> None:
    report = _lib(demo_log, lambda log: log.verify())
    got = _json(run, "--log", demo_log, "verify")
    assert got == {
        "ok": True,
        "runs": report.runs,
        "events": report.events,
        "checkpoints": report.checkpoints,
        "problems": [],
        "notes": [],
    }
    code, out, _ = run("--log", demo_log, "verify")
    assert code == 0 and "ok" in out


# -- commands that change the log --------------------------------------------------------------


def test_fork_then_state_equals_parent_at_the_fork(run: Run, copy_log: Path) -> None:
    def pick(log: eventlog.EventLog) -> tuple[str, int, Any]:
        r = max(log.runs(), key=log.head)
        return r, log.head(r) // 2, _state(log.state_at(r, log.head(r) // 2))

    r, at, want = _lib(copy_log, pick)
    got = _json(run, "--log", copy_log, "fork", r, "--at", at, "--as", "branch")
    assert (got["run_id"], got["parent"], got["fork_offset"], got["head"]) == ("branch", r, at, at)
    assert _json(run, "--log", copy_log, "state", "branch")["state"] == want
    code, _, err = run("--log", copy_log, "fork", r, "--at", at, "--as", "branch")
    assert code == cli.EXIT_CONFLICT and "branch" in err
    code, _, err = run("--log", copy_log, "fork", r, "--at", 10**6, "--as", "far")
    assert code == cli.EXIT_NOT_FOUND and "out of range" in err


def test_prune_keeps_states_from_the_base(run: Run, copy_log: Path) -> None:
    def prepare(log: eventlog.EventLog) -> tuple[str, int, Any, str]:
        r = next(r for r in log.runs() if not log.run_info(r).forks and not log.run_info(r).parent and log.head(r) >= 4)
        head = log.head(r)
        log.checkpoints.save(r, head - 1)
        parent = next(x for x in log.runs() if log.run_info(x).forks)
        return r, head, _state(log.state_at(r, head)), parent

    r, head, later, parent = _lib(copy_log, prepare, write=True)
    assert _json(run, "--log", copy_log, "prune", r, "--before", head - 1) == {"run_id": r, "base": head - 1}
    assert _json(run, "--log", copy_log, "state", r)["state"] == later
    code, _, err = run("--log", copy_log, "state", r, "--at", 1)
    assert code == cli.EXIT_NOT_FOUND and "pruned" in err
    assert _lib(copy_log, lambda log: log.run_info(r).base) == head - 1
    code, _, err = run("--log", copy_log, "prune", parent, "--before", 10**6)
    assert code in (cli.EXIT_CONFLICT, cli.EXIT_NOT_FOUND), err


def test_state_and_prune_of_a_fork_of_a_thread_its_saver_pruned(run: Run, tmp_path: Path) -> None:
    """A LangGraph thread its saver pruned, forked at its base: the fork has no checkpoint of its
    own and its events up to the base went with the thread's, so the command line reads it by the
    reducer that keeps the state there (as verify does): `state` shows the thread's state at the
    fork, `prune` says nothing below the base is kept, and `runs` lists it by its view."""
    from ui_support import write_langgraph_thread

    path = tmp_path / "log"
    with eventlog.open(path) as log:
        if write_langgraph_thread(log, "lg") is None:
            pytest.skip("the langgraph extra is not installed")
        from eventlog.langgraph import VIEW, EventLogSaver

        EventLogSaver(log).prune(["lg"])
        base = log.run_info("lg").base
        assert base > 0 and log.checkpoints.list("lg")[-1].reducer == VIEW.fold.name
        parent = VIEW.state(log, "lg", base)
    assert _json(run, "--log", path, "fork", "lg", "--at", base, "--as", "lg-fork")["fork_offset"] == base

    doc = _json(run, "--log", path, "state", "lg-fork")
    assert doc["offset"] == base and doc["state"] == {**_builtins(parent), "thread_id": "lg-fork"}
    code, out, err = run("--log", path, "state", "lg-fork")
    assert code == 0 and f"run lg-fork at offset {base}" in out, err
    listed = {r["run_id"]: r for r in _json(run, "--log", path, "runs")}
    assert (listed["lg-fork"]["parent"], listed["lg-fork"]["fork_offset"]) == ("lg", base)
    code, out, err = run("--log", path, "runs")
    assert code == 0 and out.count("langgraph") == 2, err  # the thread and its fork, by their view

    assert _json(run, "--log", path, "prune", "lg-fork", "--before", base) == {"run_id": "lg-fork", "base": base}
    code, out, err = run("--log", path, "prune", "lg-fork", "--before", base)
    assert code == 0 and f"its states from offset {base} on stay readable" in out, err
    assert _json(run, "--log", path, "state", "lg-fork")["state"] == doc["state"]  # as it was
    with eventlog.open(path) as log:  # by a reducer that does not keep the base, a prune says which does
        with pytest.raises(eventlog.errors.CheckpointNotFoundError) as exc:
            log.prune("lg-fork", before=base)
        assert f"is kept only by reducer '{VIEW.fold.name}@{VIEW.fold.version}'" in str(exc.value)
        assert log.verify(reducers=[VIEW.fold]).ok


def test_delete_asks_and_refuses_runs_with_forks(run: Run, copy_log: Path) -> None:
    leaf = _lib(
        copy_log, lambda log: next(r for r in log.runs() if log.run_info(r).parent and not log.run_info(r).forks)
    )
    code, _, err = run("--log", copy_log, "delete", leaf, stdin="n\n")
    assert code == cli.EXIT_ERROR and "not deleted" in err
    code, _, err = run("--log", copy_log, "delete", leaf, stdin="")
    assert code == cli.EXIT_ERROR
    assert leaf in _lib(copy_log, lambda log: log.runs())
    code, out, err = run("--log", copy_log, "delete", leaf, stdin="y\n")
    assert code == 0, err
    assert leaf not in _lib(copy_log, lambda log: log.runs())
    parent = _lib(copy_log, lambda log: next((r for r in log.runs() if log.run_info(r).forks), None))
    if parent is not None:
        code, _, err = run("--log", copy_log, "delete", parent, "--yes")
        assert code == cli.EXIT_CONFLICT and "fork" in err
    code, _, err = run("--log", copy_log, "delete", "no-such-run", "--yes")
    assert code == cli.EXIT_NOT_FOUND


# -- export and import -------------------------------------------------------------------------


def _assert_same_logs(a: eventlog.EventLog, b: eventlog.EventLog, runs: list[str] | None = None) -> None:
    """Same runs, forks, entries (ids, times, meta, event bytes), checkpoints and state_at at every offset."""
    runs = a.runs() if runs is None else runs
    assert sorted(runs) == sorted(b.runs())
    enc = msgspec.msgpack.encode
    for r in runs:
        ia, ib = a.run_info(r), b.run_info(r)
        assert (ia.head, ia.parent, ia.fork_offset) == (ib.head, ib.parent, ib.fork_offset)
        ea, eb = list(a.read(r)), list(b.read(r))
        assert [(e.offset, e.event_id, e.time_ns, enc(e.meta), enc(e.event)) for e in ea] == [
            (e.offset, e.event_id, e.time_ns, enc(e.meta), enc(e.event)) for e in eb
        ]
        for k in range(ia.head + 1):
            assert enc(a.state_at(r, k)) == enc(b.state_at(r, k)), (r, k)
        ca, cb = a.checkpoints.list(r), b.checkpoints.list(r)
        assert [(c.checkpoint_id, c.offset, enc(c.metadata), c.reducer) for c in ca] == [
            (c.checkpoint_id, c.offset, enc(c.metadata), c.reducer) for c in cb
        ]


def test_export_then_import_is_lossless(run: Run, demo_log: Path, tmp_path: Path) -> None:
    out = tmp_path / "all.jsonl"
    got = _json(run, "--log", demo_log, "export", "-o", out)
    copy = tmp_path / "copy.lmdb"
    imported = _json(run, "--log", copy, "import", out)
    assert (imported["runs"], imported["entries"], imported["checkpoints"]) == (
        got["runs"],
        got["entries"],
        got["checkpoints"],
    )
    assert imported["skipped_checkpoints"] == 0
    with eventlog.open(demo_log, readonly=True) as a, eventlog.open(copy, readonly=True) as b:
        assert any(a.run_info(r).parent for r in a.runs())
        _assert_same_logs(a, b)
    assert _json(run, "--log", copy, "verify")["ok"]
    # Exported again, the copy gives the same file, byte for byte, but for run creation and checkpoint times.
    again = tmp_path / "again.jsonl"
    _json(run, "--log", copy, "export", "-o", again)

    def stable(path: Path) -> list[dict[str, Any]]:
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        for line in lines:
            line.pop("created_ns", None)
        return lines

    assert stable(again) == stable(out)


def test_import_twice_is_a_conflict_and_writes_nothing(run: Run, demo_log: Path, tmp_path: Path) -> None:
    out = tmp_path / "all.jsonl"
    assert run("--log", demo_log, "export", "-o", out)[0] == 0
    copy = tmp_path / "copy.lmdb"
    assert run("--log", copy, "import", out)[0] == 0
    with eventlog.open(copy, readonly=True) as log:
        before = log.stats()
    code, _, err = run("--log", copy, "import", out)
    assert code == cli.EXIT_CONFLICT and "exists already" in err
    with eventlog.open(copy, readonly=True) as log:
        assert log.stats() == before


def test_import_of_a_cut_or_damaged_file_is_refused(run: Run, demo_log: Path, tmp_path: Path) -> None:
    out = tmp_path / "all.jsonl"
    assert run("--log", demo_log, "export", "-o", out)[0] == 0
    lines = out.read_bytes().splitlines(keepends=True)
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(b"".join(lines[:-2]))
    code, _, err = run("--log", tmp_path / "a.lmdb", "import", cut)
    assert code == cli.EXIT_CORRUPT and "cut short" in err
    bad = tmp_path / "bad.jsonl"
    entry = next(i for i, line in enumerate(lines) if b'"type":"entry"' in line)
    lines[entry] = lines[entry].replace(b'"kind":"', b'"kind":"unknown.', 1)
    bad.write_bytes(b"".join(lines))
    code, _, err = run("--log", tmp_path / "b.lmdb", "import", bad)
    assert code == cli.EXIT_CORRUPT and f"line {entry + 1}" in err
    assert not (tmp_path / "a.lmdb").exists() and not (tmp_path / "b.lmdb").exists()  # a failed import leaves no log
    code, _, err = run("--log", tmp_path / "c.lmdb", "import", tmp_path / "missing.jsonl")
    assert code == cli.EXIT_NOT_FOUND


def test_export_of_a_fork_brings_its_parent(run: Run, demo_log: Path, tmp_path: Path) -> None:
    with eventlog.open(demo_log, readonly=True) as log:
        fork = next(r for r in log.runs() if log.run_info(r).parent)
        chain = [fork]
        while log.run_info(chain[-1]).parent:
            chain.append(log.run_info(chain[-1]).parent)
    out = tmp_path / "one.jsonl"
    assert _json(run, "--log", demo_log, "export", fork, "-o", out)["runs"] == len(chain)
    copy = tmp_path / "copy.lmdb"
    assert run("--log", copy, "import", out)[0] == 0
    with eventlog.open(demo_log, readonly=True) as a, eventlog.open(copy, readonly=True) as b:
        _assert_same_logs(a, b, chain)
    code, _, err = run("--log", demo_log, "export", "no-such-run", "-o", tmp_path / "x.jsonl")
    assert code == cli.EXIT_NOT_FOUND and not (tmp_path / "x.jsonl").exists()


def test_export_refuses_a_pruned_run(run: Run, copy_log: Path, tmp_path: Path) -> None:
    with eventlog.open(copy_log) as log:
        r = next(r for r in log.runs() if not log.run_info(r).forks and not log.run_info(r).parent and log.head(r) >= 3)
        log.checkpoints.save(r, 2)
        log.prune(r, before=2)
    code, _, err = run("--log", copy_log, "export", r, "-o", tmp_path / "p.jsonl")
    assert code == cli.EXIT_NOT_FOUND and "pruned" in err


def test_export_skips_pruned_runs_when_asked_and_names_them(run: Run, copy_log: Path, tmp_path: Path) -> None:
    """A whole log with a pruned run is refused, naming --skip-pruned; with it, every other run
    is exported, the pruned one and a fork made of it since are left out and named."""
    with eventlog.open(copy_log) as log:
        r = next(r for r in log.runs() if not log.run_info(r).forks and not log.run_info(r).parent and log.head(r) >= 3)
        log.checkpoints.save(r, 2)
        log.prune(r, before=2)
        log.fork(r, at=log.head(r), new_run_id="fork-of-pruned")
        others = [x for x in log.runs() if x not in (r, "fork-of-pruned")]
    out = tmp_path / "kept.jsonl"
    code, _, err = run("--log", copy_log, "export", "-o", out)
    assert code == cli.EXIT_NOT_FOUND and "--skip-pruned" in err and not out.exists()
    code, stdout, err = run("--log", copy_log, "export", "--skip-pruned", "-o", out, "--json")
    assert code == 0, err
    doc = json.loads(stdout)
    assert doc["skipped_runs"] == [r, "fork-of-pruned"] and doc["runs"] == len(others)
    code, _, err = run("--log", tmp_path / "imported.lmdb", "import", out)
    assert code == 0, err
    with (
        eventlog.open(tmp_path / "imported.lmdb", readonly=True) as copy,
        eventlog.open(copy_log, readonly=True) as log,
    ):
        assert copy.runs() == sorted(others, key=str.encode)
        assert all([e.event for e in copy.read(x)] == [e.event for e in log.read(x)] for x in others)
    code, stdout, _ = run("--log", copy_log, "export", "--skip-pruned", "-o", out)
    assert code == 0 and f"left out 2 pruned run(s) or forks of them: {r}, fork-of-pruned" in stdout


def _values(keys: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(
        st.none()
        | st.booleans()
        | st.integers(-(2**63), 2**63 - 1)
        | st.floats()
        | st.text(max_size=5)
        | st.binary(max_size=5),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3),
        max_leaves=8,
    )


# States are encoded with sorted keys, so only str keys may reach them; metadata takes any key.
_state_values = _values(st.text(max_size=3))
_meta_values = _values(st.text(max_size=3) | st.integers(0, 9))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    updates=st.lists(
        st.dictionaries(st.text(min_size=1, max_size=4), _state_values, max_size=3), min_size=1, max_size=6
    ),
    metas=st.lists(st.none() | st.dictionaries(st.text(max_size=3), _meta_values, max_size=2), min_size=6, max_size=6),
    fork_at=st.integers(0, 6),
)
def test_round_trip_is_exact_for_values_json_cannot_carry(
    tmp_path_factory: pytest.TempPathFactory, updates: list[dict[str, Any]], metas: list[Any], fork_at: int
) -> None:
    """bytes, NaN, infinities and integer map keys come back identical (the msgpack fallback)."""
    src, dst = eventlog.open(":memory:"), eventlog.open(":memory:")
    for i, update in enumerate(updates):
        src.append("r", StepCompleted(node="n", superstep=i, update=update), meta=metas[i], time_ns=1_000 + i // 2)
    src.checkpoints.save("r", len(updates), metadata={"raw": b"\x00", "nan": math.nan})
    src.fork("r", min(fork_at, len(updates)), "f")
    src.append("f", StateUpdated(values={"k": updates[0]}))
    path = tmp_path_factory.mktemp("hyp") / "x.jsonl"
    export_runs(src, path)
    import_runs(dst, path)
    _assert_same_logs(src, dst)
    enc = msgspec.msgpack.encode
    assert [enc(c.metadata) for c in dst.checkpoints.list("r")] == [enc(c.metadata) for c in src.checkpoints.list("r")]


# -- errors and exit codes ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "code", "words"),
    [
        ([], cli.EXIT_USAGE, None),
        (["runs"], cli.EXIT_USAGE, "--log"),
        (["frobnicate"], cli.EXIT_USAGE, "invalid choice"),
        (["{log}", "events"], cli.EXIT_USAGE, "required"),
        (["{log}", "state", "x", "--at", "one"], cli.EXIT_USAGE, "invalid int"),
        (["{log}", "state", "x", "--at", "1", "--checkpoint", "c"], cli.EXIT_USAGE, "not allowed"),
        (["--log", "/nonexistent/eventlog", "runs"], cli.EXIT_NOT_FOUND, "no log at"),
        (["{log}", "events", "no-such-run"], cli.EXIT_NOT_FOUND, "no-such-run"),
        (["{log}", "state", "{run}", "--checkpoint", "no-such-checkpoint"], cli.EXIT_NOT_FOUND, "no-such-checkpoint"),
        (["{log}", "state", "{run}", "--at", "999999"], cli.EXIT_NOT_FOUND, "out of range"),
        (["{log}", "diff", "{run}", "0", "999999"], cli.EXIT_NOT_FOUND, "out of range"),
        (["{log}", "--kinds", "no_such_module_here", "runs"], cli.EXIT_USAGE, "no_such_module_here"),
    ],
)
def test_exit_codes_and_one_line_errors(
    run: Run, demo_log: Path, argv: list[str], code: int, words: str | None
) -> None:
    with eventlog.open(demo_log, readonly=True) as log:
        first = log.runs()[0]
    argv = [a.replace("{run}", first) for a in argv]
    if argv and argv[0] == "{log}":
        argv = ["--log", str(demo_log), *argv[1:]]
    got, out, err = run(*argv)
    assert got == code, err
    if words is not None:
        assert words in err
        assert err.count("\n") == 1 and err.startswith("eventlog: error: ")
    assert "Traceback" not in err


def test_corruption_is_exit_5_and_named(run: Run, copy_log: Path) -> None:
    with eventlog.open(copy_log) as log:
        number_and_offset: list[bytes] = []

        def damage(txn: Any) -> None:
            # Flip one payload byte of the run's third stored event: its checksum no longer matches.
            key, value = txn.scan("events", b"", None)[2]
            number_and_offset.append(key)
            txn.put("events", key, value[:-1] + bytes([value[-1] ^ 0xFF]))

        log.store.write(damage)
    got = json.loads(run("--log", copy_log, "verify", "--json")[1])
    assert not got["ok"] and got["problems"]
    assert all(p["run_id"] and p["offset"] for p in got["problems"] if p["kind"] == "corrupt")
    code, out, _ = run("--log", copy_log, "verify")
    assert code == cli.EXIT_CORRUPT and "problem" in out
    damaged_run = got["problems"][0]["run_id"]
    code, _, err = run("--log", copy_log, "events", damaged_run)
    assert code == cli.EXIT_CORRUPT and "corrupt" in err and damaged_run in err


# -- the real command ----------------------------------------------------------------------------


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVENTLOG_")}
    env["PYTHONPATH"] = str(ROOT)
    return env


def _eventlog(log: Path, *argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m eventlog --log LOG argv` in a process of its own, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "eventlog", "--log", str(log), *argv],
        capture_output=True,
        text=True,
        env=_env() if env is None else env,
        timeout=120,
        check=False,
    )


def test_python_dash_m_and_the_console_script(demo_log: Path) -> None:
    p = subprocess.run(
        [sys.executable, "-m", "eventlog", "--log", str(demo_log), "runs", "--json"],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    with eventlog.open(demo_log, readonly=True) as log:
        assert [r["run_id"] for r in json.loads(p.stdout)] == log.runs()
    p = subprocess.run(
        [sys.executable, "-m", "eventlog", "--log", str(demo_log), "events", "nope"],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=60,
    )
    assert p.returncode == cli.EXIT_NOT_FOUND and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr
    script = shutil.which("eventlog", path=str(Path(sys.executable).parent))
    if script is None:
        pytest.skip("the eventlog console script is not installed beside this Python")
    p = subprocess.run([script, "--version"], capture_output=True, text=True, env=_env(), timeout=60)
    assert p.returncode == 0 and p.stdout.startswith("eventlog ")


def test_demo_subcommand(run: Run, tmp_path: Path) -> None:
    code, out, err = run("demo", "--path", tmp_path / "demo.lmdb")
    assert code == 0, err
    with eventlog.open(tmp_path / "demo.lmdb", readonly=True) as log:
        assert log.runs()
        assert log.verify().ok


# -- the reference -----------------------------------------------------------------------------


def _generator() -> Any:
    spec = importlib.util.spec_from_file_location("gen_cli_docs", ROOT / "tools" / "gen_cli_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_subcommand_is_in_the_reference_and_it_matches_help(run: Run) -> None:
    reference = (ROOT / "docs" / "cli.md").read_text()
    assert reference == _generator().render(), "docs/cli.md is stale: run python tools/gen_cli_docs.py"
    names = cli.commands()
    assert set(names) == set(cli._HANDLERS)
    for name in names:
        assert f"\n## `eventlog {name}`" in reference, name
        with pytest.raises(SystemExit) as exit_:
            cli.main([name, "--help"])
        assert exit_.value.code == 0
    for name in [None, *names]:
        argv = [sys.executable, "-m", "eventlog", *([name] if name else []), "--help"]
        p = subprocess.run(argv, capture_output=True, text=True, env=_env(), timeout=60)
        assert p.returncode == 0
        assert p.stdout.strip() in reference, name
        examples = p.stdout.rstrip().rsplit("\nexamples:\n", 1)[1].splitlines()  # the help ends in examples
        assert examples and all("eventlog " in line for line in examples), name


def test_exit_codes_are_documented() -> None:
    reference = (ROOT / "docs" / "cli.md").read_text()
    for code in (cli.EXIT_ERROR, cli.EXIT_USAGE, cli.EXIT_NOT_FOUND, cli.EXIT_CONFLICT, cli.EXIT_CORRUPT):
        assert f"| {code} |" in reference


def test_kinds_of_your_own_decode_with_kinds(tmp_path: Path) -> None:
    """A run holding a user's event kind: refused with a hint without --kinds, read with it or EVENTLOG_KINDS."""
    (tmp_path / "myapp_kinds.py").write_text(
        "import eventlog\n\n\n"
        "@eventlog.register\n"
        "class Approved(eventlog.Event, frozen=True, tag='myapp.approved'):\n"
        "    by: str\n"
    )
    env = {**_env(), "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}
    log_path = tmp_path / "mine.lmdb"
    write = (
        "import eventlog, myapp_kinds\n"
        f"with eventlog.open({str(log_path)!r}) as log:\n"
        "    log.append('r', myapp_kinds.Approved(by='ada'))\n"
    )
    subprocess.run([sys.executable, "-c", write], env=env, check=True, timeout=60)

    def cli_(*argv: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "eventlog", "--log", str(log_path), *argv],
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    p = cli_("events", "r", "--json")  # a kind this process does not know is not damage: it asks for --kinds
    assert p.returncode == cli.EXIT_USAGE and "--kinds" in p.stderr and "'r'" in p.stderr
    assert "restore" not in p.stderr and "corrupt" not in p.stderr
    p = cli_("--kinds", "myapp_kinds", "events", "r", "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)[0]["event"] == {"kind": "myapp.approved", "by": "ada"}
    out = tmp_path / "mine.jsonl"
    assert cli_("export", "-o", str(out), EVENTLOG_KINDS="myapp_kinds").returncode == 0
    p = subprocess.run(
        [sys.executable, "-m", "eventlog", "--log", str(tmp_path / "copy.lmdb"), "import", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert p.returncode == cli.EXIT_CORRUPT and "--kinds" in p.stderr  # the kind is not registered there
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "eventlog",
            "--log",
            str(tmp_path / "copy.lmdb"),
            "--kinds",
            "myapp_kinds",
            "import",
            str(out),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert p.returncode == 0, p.stderr


def _integration_runs(path: Path) -> list[str]:
    """A LangGraph thread and a WayFlow conversation (those whose framework is installed)."""
    from ui_support import write_langgraph_thread, write_wayflow_conversation

    with eventlog.open(path, durability="none") as log:
        runs = [write_langgraph_thread(log, "lg"), write_wayflow_conversation(log, "wf")]
    return [r for r in runs if r is not None]


def test_an_integrations_runs_read_without_kinds(tmp_path: Path) -> None:
    """A process that never imported an integration (the command as a user runs it) reads the
    runs it wrote: the installed integrations' kinds are registered, so nothing is called
    unknown, verify finds nothing wrong with a healthy log, and prune and verify fold each run
    by the reducer that checkpointed it."""
    path = tmp_path / "log"
    runs = _integration_runs(path)
    if not runs:
        pytest.skip("neither langgraph nor wayflowcore is installed")

    def cli_(*argv: str) -> subprocess.CompletedProcess[str]:
        return _eventlog(path, *argv)

    p = cli_("verify", "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["ok"] is True, p.stdout + p.stderr
    with eventlog.open(path, readonly=True) as log:
        for run_id in runs:
            p = cli_("events", run_id, "--json")
            assert p.returncode == 0, p.stderr
            read = [msgspec.json.decode(msgspec.json.encode(e)) for e in log.read(run_id)]
            assert json.loads(p.stdout) == read
            p = cli_("diff", run_id, "1", "head", "--json")  # in the terms `state` shows, as the UI diffs
            assert p.returncode == 0, p.stderr
            doc = json.loads(p.stdout)
            head = log.run_info(run_id).head
            changes = diff_offsets(log, run_id, 1, head, view_for_run(log, run_id))
            assert doc["messages_appended"] and {k: doc[k] for k in changes} == msgspec.to_builtins(changes)
    out = tmp_path / "runs.jsonl"
    assert cli_("export", "-o", str(out)).returncode == 0
    p = _eventlog(tmp_path / "copy", "import", str(out))
    assert p.returncode == 0, p.stderr
    with eventlog.open(tmp_path / "copy", readonly=True) as copy, eventlog.open(path, readonly=True) as log:
        assert copy.runs() == log.runs()
        heads = {run_id: log.run_info(run_id).head for run_id in runs}
    for run_id, head in heads.items():  # pruned by the reducer that checkpointed it, not the log's
        before = cli_("state", run_id, "--json")
        assert before.returncode == 0, before.stderr
        p = cli_("prune", run_id, "--before", str(head), "--json")
        assert p.returncode == 0 and json.loads(p.stdout)["base"] > 0, p.stderr
        assert cli_("state", run_id, "--json").stdout == before.stdout
    p = cli_("verify", "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["ok"] is True, p.stdout + p.stderr


def test_a_view_that_fails_to_load_is_named_and_the_others_still_work(tmp_path: Path) -> None:
    """An installed package whose run view raises on import (not a missing framework) costs
    its own runs their view, with a warning that names it; every command still works."""
    site = tmp_path / "site"
    info = site / "broken_view-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-view\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[eventlog.views]\nbroken = broken_view:VIEW\n")
    (site / "broken_view.py").write_text("raise RuntimeError('this view is broken')\n")
    runs = _integration_runs(tmp_path / "log")
    env = {**_env(), "PYTHONPATH": os.pathsep.join([str(ROOT), str(site)])}
    p = _eventlog(tmp_path / "log", "runs", "--json", env=env)
    assert p.returncode == 0, p.stderr
    assert "'broken'" in p.stderr and "this view is broken" in p.stderr and "Traceback" not in p.stderr
    shown = {r["run_id"]: r for r in json.loads(p.stdout)}
    assert set(runs) <= set(shown)


# -- hostile input ---------------------------------------------------------------------------------


def test_control_characters_in_run_ids_are_shown_as_escapes(run: Run, tmp_path: Path) -> None:
    path = tmp_path / "log"
    hostile = "evil\x1b[31mRED\x1b[0m\u202e"
    with eventlog.open(path) as log:
        log.append(hostile, UserMessage(content="\x1b]0;title\x07 text"))
        log.checkpoints.save(hostile, metadata={"note": "\x1b[2J"})
    for argv in (("runs",), ("events", hostile), ("history", hostile), ("state", hostile), ("state", "\x1b[1m")):
        code, out, err = run("--log", path, *argv)
        assert "\x1b" not in out + err and "\u202e" not in out + err, argv
        assert code in (0, cli.EXIT_NOT_FOUND)
    assert "evil\\x1b[31mRED" in run("--log", path, "runs")[1]


# Characters JSON leaves as they are that a terminal acts on: a C1 CSI, bidi overrides, line separators.
TERMINAL_ACTS_ON = ("\x9b", "\x85", "\u202e", "\u2066", "\u2028")


def test_stored_text_reaches_the_terminal_as_text_in_tables_and_json(run: Run, tmp_path: Path) -> None:
    """Stored text is neither read by rich (markup, emoji codes) nor written raw where JSON keeps
    it as it is: `state` and every `--json` output escape such characters as `\\uXXXX` and read
    back equal to the library's answer."""
    path = tmp_path / "log"
    hostile = "r:warning:[bold]B[/bold][link=https://evil.example]x[/link]"
    text = "a\x9b31mb\x85c\u202ed\u2066e\u2028f :cross_mark: [red]R[/red]"
    with eventlog.open(path) as log:
        log.append(hostile, UserMessage(content=text))
        log.append(hostile, StepCompleted(node=text, superstep=1, update={text: text}))
        log.checkpoints.save(hostile, metadata={text: text})
        answers = {
            "runs": [msgspec.structs.asdict(log.run_info(r)) for r in log.runs()],
            "events": _builtins(list(log.read(hostile))),
            "state": _state(log.state_at(hostile, 2, reducer=reducer_of(log, hostile))),
        }
    commands = [("runs",), ("events", hostile), ("history", hostile), ("state", hostile), ("diff", hostile, 0, 2)]
    for argv in commands:
        for json_out in ((), ("--json",)):
            code, out, err = run("--log", path, *argv, *json_out)
            assert code == 0, (argv, err)
            assert not any(c in out + err for c in TERMINAL_ACTS_ON), (argv, json_out, out)
            assert "\u26a0" not in out and "\u274c" not in out, (argv, json_out)  # no emoji for :warning:
            if json_out:
                doc = json.loads(out)
                if argv[0] in ("runs", "events"):
                    assert doc == _builtins(answers[argv[0]]), argv
                if argv[0] == "state":
                    assert doc["state"] == answers["state"]
    code, out, _ = run("--log", path, "runs")
    assert hostile in out  # the run id as it is: the one to type
    code, out, _ = run("--log", path, "state", hostile)
    assert json.loads(out.split("\n", 1)[1]) == answers["state"]  # the pretty JSON reads back equal
    assert "[red]R[/red]" in out and ":cross_mark:" in out


def test_a_superscript_digit_is_not_an_offset(run: Run, demo_log: Path) -> None:
    code, _, err = run("--log", demo_log, "diff", "workflow-demo", "²", "head")
    assert code == cli.EXIT_NOT_FOUND and "²" in err and "Traceback" not in err


def test_a_kinds_module_that_exits_is_a_usage_error(run: Run, demo_log: Path, tmp_path: Path) -> None:
    (tmp_path / "quits_kinds.py").write_text("raise SystemExit(0)\n")
    sys.path.insert(0, str(tmp_path))
    try:
        code, _, err = run("--log", demo_log, "--kinds", "quits_kinds", "runs")
    finally:
        sys.path.remove(str(tmp_path))
    assert code == cli.EXIT_USAGE and "quits_kinds" in err and "SystemExit" in err


@pytest.mark.skipif(not os.environ.get("EVENTLOG_TEST_PG_DSN"), reason="set EVENTLOG_TEST_PG_DSN to run it")
def test_the_command_line_reads_a_postgres_log(run: Run) -> None:
    from eventlog.store.postgres import PostgresStore

    dsn = os.environ["EVENTLOG_TEST_PG_DSN"]
    schema = f"t_cli_{os.getpid()}"
    url = f"{dsn}?schema={schema}"
    try:
        with eventlog.open(url) as log:
            log.append_many("r", [UserMessage(content="a"), UserMessage(content="b")])
            log.checkpoints.save("r")
        assert [r["run_id"] for r in _json(run, "--log", url, "runs")] == ["r"]
        assert [e["offset"] for e in _json(run, "--log", url, "events", "r")] == [1, 2]
        assert _json(run, "--log", url, "verify")["ok"] is True
        code, _, err = run("--log", f"{dsn}?schema=t_cli_missing_{os.getpid()}", "runs")
        assert code == cli.EXIT_NOT_FOUND and "no log" in err
    finally:
        PostgresStore.drop_schema(dsn, schema)
