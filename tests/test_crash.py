"""Processes killed with SIGKILL lose no acknowledged event (a short run of tools/crashtest.py).

`EVENTLOG_CRASH_CYCLES` sets the number of kill cycles (default 6: two per LMDB durability
mode, and six on a PostgreSQL log when `EVENTLOG_TEST_PG_DSN` is set)
and `EVENTLOG_CRASH_SEED` the seed (default: a random one, printed). The long run and its
figures are in docs/reliability.md.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import ModuleType

import pytest

import eventlog
from eventlog.events import StepCompleted

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "crashtest.py"


def _crashtest() -> ModuleType:
    name = "eventlog_crashtest_tool"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


PG_DSN = os.environ.get("EVENTLOG_TEST_PG_DSN")


@pytest.mark.parametrize(
    "modes",
    [
        "sync,batch,none",
        pytest.param(
            "postgres",
            marks=pytest.mark.skipif(not PG_DSN, reason="set EVENTLOG_TEST_PG_DSN to kill writers of a PostgreSQL log"),
        ),
    ],
)
def test_sigkilled_writers_lose_no_acknowledged_event(tmp_path: Path, modes: str) -> None:
    cycles = int(os.environ.get("EVENTLOG_CRASH_CYCLES", "6"))
    seed = int(os.environ.get("EVENTLOG_CRASH_SEED", str(random.SystemRandom().randrange(1 << 32))))
    print(f"crashtest seed {seed}")
    where = ["--pg", PG_DSN or ""] if modes == "postgres" else []
    proc = subprocess.run(
        [sys.executable, str(TOOL), "--cycles", str(cycles), "--seed", str(seed), "--quiet", "--dir", str(tmp_path)]
        + ["--modes", modes, *where],
        check=False,
        capture_output=True,
        text=True,
        timeout=60 + 5 * cycles,
    )
    print(proc.stdout)
    assert proc.returncode == 0, f"seed {seed}:\n{proc.stdout[-5000:]}\n{proc.stderr[-3000:]}"
    summary = proc.stdout.strip().splitlines()[-1]
    fields = dict(re.findall(r"(\w+)=(\S+)", summary))
    assert fields["seed"] == str(seed)
    assert int(fields["cycles"]) == cycles
    assert int(fields["acknowledged"]) > 0
    assert (fields["lost"], fields["duplicated"], fields["unreadable"], fields["writer_errors"]) == ("0", "0", "0", "0")
    assert fields["result"] == "ok"


# -- the checker itself must catch what it claims to catch -----------------------------------------


def _ack(ct: ModuleType, run: str, ids: list[str], offsets: list[int], kind: str = "batch") -> dict:
    codec = eventlog.open(":memory:").codec
    digests = [ct.digest(codec.encode_event(ct.make_event(i))) for i in ids]
    return {"op": "ack", "kind": kind, "run": run, "ids": ids, "offsets": offsets, "digests": digests}


def test_the_checker_reports_a_lost_a_changed_and_a_duplicated_event(tmp_path: Path) -> None:
    ct = _crashtest()
    path = tmp_path / "log"
    ids = ["e0.0", "e0.1", "e0.2"]
    with eventlog.open(path) as log:
        offsets = log.append_many("r0", [ct.make_event(i) for i in ids], event_ids=ids)
    model = ct.LogModel(path, "sync")
    model.take([_ack(ct, "r0", ids, offsets)])

    totals, out = ct.Totals(), []
    ct.check_log(model, totals, out)
    assert out == [] and totals.lost == 0 and totals.event_checks == 3

    # An acknowledgement for an event the log does not hold.
    model.take([_ack(ct, "r0", ["e0.3"], [4], "append")])
    totals, out = ct.Totals(), []
    ct.check_log(model, totals, out)
    assert totals.lost == 1 and any("offset 4 (e0.3) acknowledged but missing" in line for line in out)

    # A stored event whose bytes differ from the acknowledged ones.
    del model.runs["r0"].entries[4]
    model.runs["r0"].entries[2] = ("e0.1", "0" * 32)
    totals, out = ct.Totals(), []
    ct.check_log(model, totals, out)
    assert totals.lost == 1 and any("offset 2" in line for line in out)

    # The same event id twice in the log (a retry that was not idempotent would do this).
    model.runs["r0"].entries[2] = (
        ids[1],
        ct.digest(eventlog.open(":memory:").codec.encode_event(ct.make_event(ids[1]))),
    )
    with eventlog.open(path) as log:
        log.append("r1", ct.make_event("e0.0"), event_id="e0.0")
    totals, out = ct.Totals(), []
    ct.check_log(model, totals, out)
    assert totals.duplicated == 1 and totals.lost == 0


def test_an_append_killed_before_its_acknowledgement_is_retried_with_the_same_ids() -> None:
    ct = _crashtest()
    model = ct.LogModel(Path("unused"), "sync")
    intent = {
        "op": "intent",
        "kind": "batch",
        "run": "r2",
        "ids": ["e1.0", "e1.1"],
        "meta": {"batch": "e1.0", "size": 2},
    }
    model.take([intent])
    assert model.pending == [{"run": "r2", "ids": ["e1.0", "e1.1"], "meta": {"batch": "e1.0", "size": 2}}]
    model.take(
        [
            {"op": "intent", "kind": "retry", "run": "r2", "ids": ["e1.0", "e1.1"]},
            _ack(ct, "r2", ["e1.0", "e1.1"], [5, 6], "retry"),
        ]
    )
    assert model.pending == []
    assert model.runs["r2"].entries[6][0] == "e1.1"


# -- a batch cut by SIGKILL is all there or not there at all ----------------------------------------

_BIG_BATCH = textwrap.dedent(
    """
    import os, sys, eventlog
    from eventlog.events import StepCompleted
    log = eventlog.open(sys.argv[1], durability=sys.argv[2])
    n = int(sys.argv[3])
    events = [StepCompleted(node="n", superstep=i, update={"i": i, "pad": os.urandom(64).hex()}) for i in range(n)]
    os.write(1, b"start\\n")
    log.append_many("big", events, meta={"batch": "big", "size": n})
    os.write(1, b"done\\n")
    """
)


_IN_COMMIT = textwrap.dedent(
    """
    import os, sys, time, eventlog
    from eventlog.events import StepCompleted

    class Stalls(eventlog.AgentReducer):
        # summarize runs inside the commit's write transaction, after every event of the batch was put
        @staticmethod
        def summarize(state):
            os.write(1, b"in-commit\\n")
            time.sleep(60)
            return {}

    log = eventlog.open(sys.argv[1], durability=sys.argv[2])
    log.append("big", StepCompleted(node="before", superstep=0))
    n = int(sys.argv[3])
    w = log.writer("big", reducer=Stalls(), policy=eventlog.CheckpointPolicy.every(n))
    w.append_many([StepCompleted(node="n", superstep=i, update={"i": i}) for i in range(n)])
    os.write(1, b"done\\n")
    """
)


@pytest.mark.parametrize("mode", ["sync", "batch", "none"])
def test_a_batch_killed_inside_its_commit_leaves_nothing(tmp_path: Path, mode: str) -> None:
    """The kill lands while the write transaction is open, every event of the batch put: proven
    by the writer's own signal from inside the transaction, not by timing."""
    n = 5_000
    path = tmp_path / "log"
    proc = subprocess.Popen([sys.executable, "-c", _IN_COMMIT, str(path), mode, str(n)], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"in-commit\n"
    proc.send_signal(signal.SIGKILL)
    assert proc.stdout.read() == b""  # it never got past the commit
    proc.wait()
    with eventlog.open(path, durability=mode) as log:
        assert log.head("big") == 1  # the acknowledged event before it, none of the batch
        assert log.checkpoints.list("big") == []
        assert log.verify().ok
        log.append("big", StepCompleted(node="after", superstep=1))
        assert [e.event.node for e in log.read("big")] == ["before", "after"]


@pytest.mark.parametrize("mode", ["sync", "batch", "none"])
def test_a_batch_killed_mid_commit_is_all_or_nothing(tmp_path: Path, mode: str) -> None:
    n = 20_000
    seen = set()
    for attempt, delay in enumerate((0.0, 0.1, 0.25, 2.0)):  # the last lets it finish
        path = tmp_path / f"log{attempt}"
        proc = subprocess.Popen([sys.executable, "-c", _BIG_BATCH, str(path), mode, str(n)], stdout=subprocess.PIPE)
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"start\n"
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        rest = proc.stdout.read()
        proc.wait()
        with eventlog.open(path, durability=mode) as log:
            head = log.head("big")
            assert head in (0, n), f"{mode}: a batch of {n} left {head} events after SIGKILL"
            if b"done" in rest:
                assert head == n
            assert log.verify().ok
            entries = list(log.read("big")) if head else []
            assert all(e.meta == {"batch": "big", "size": n} for e in entries)
        seen.add(head)
    print(json.dumps({"mode": mode, "heads_seen": sorted(seen)}))
