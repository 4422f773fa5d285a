"""The graph executor on a real LMDB directory: supersteps, checkpoints, resume, time travel, interrupts."""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lives_support import right_after

import eventlog
from eventlog.agent.graph import (
    END,
    START,
    Graph,
    GraphError,
    IncompatibleGraphError,
    Interrupt,
    NodeFailedError,
    RunNotPausedError,
    RunPausedError,
)
from eventlog.errors import RunReplacedError
from eventlog.events import (
    Interrupted,
    Resumed,
    RunCompleted,
    RunFailed,
    RunStarted,
    StateUpdated,
    StepCompleted,
    StepFailed,
    StepStarted,
    SuperstepCompleted,
)


@pytest.fixture
def log(tmp_path: Path):
    with eventlog.open(tmp_path / "log") as opened:
        yield opened


def three_step(ran: list[str] | None = None, fail_step2: list[bool] | None = None) -> Graph:
    """step1 -> step2 -> step3, each adding 10 to `value`; step2 raises while fail_step2[0] is True."""
    ran = ran if ran is not None else []

    def step(name: str):
        def node(values: dict[str, Any]) -> dict[str, Any]:
            ran.append(name)
            if name == "step2" and fail_step2 and fail_step2[0]:
                raise ConnectionError("service unavailable")
            return {"value": values.get("value", 0) + 10}

        return node

    g = Graph("three-step")
    for name in ("step1", "step2", "step3"):
        g.add_node(name, step(name))
    g.set_entry("step1")
    g.add_edge("step1", "step2")
    g.add_edge("step2", "step3")
    g.add_edge("step3", END)
    return g


def kinds(log: eventlog.EventLog, run_id: str) -> list[str]:
    return [type(e.event).__name__ for e in log.read(run_id)]


def test_three_steps_checkpoint_after_every_superstep(log: eventlog.EventLog) -> None:
    state = three_step().compile(log).run("wf", {"value": 0})
    assert state.status == "completed"
    assert state.values == {"value": 30}
    assert state.superstep == 3
    cps = log.checkpoints.list("wf")
    assert [cp.summary["superstep"] for cp in cps] == [1, 2, 3]
    assert [cp.state.values for cp in cps] == [{"value": 10}, {"value": 20}, {"value": 30}]
    assert [cp.summary["completed_nodes"] for cp in cps] == [["step1"], ["step1", "step2"], ["step1", "step2", "step3"]]
    assert cps[0].created_at <= cps[1].created_at <= cps[2].created_at
    assert abs(time.time() - cps[2].created_at.timestamp()) < 60
    assert kinds(log, "wf") == [
        "RunStarted",
        *["StepStarted", "StepCompleted", "SuperstepCompleted"] * 3,
        "RunCompleted",
    ]
    started = next(iter(log.read("wf"))).event
    assert isinstance(started, RunStarted) and started.next_nodes == ["step1"] and started.graph == "three-step"


def test_every_n_supersteps(log: eventlog.EventLog) -> None:
    g = three_step()
    g.compile(log, policy=eventlog.CheckpointPolicy.every_supersteps(2)).run("wf", {})
    # superstep 2 by the policy, superstep 3 by the final checkpoint of a run that ends well
    assert [cp.summary["superstep"] for cp in log.checkpoints.list("wf")] == [2, 3]


def test_listener_sees_every_event_and_each_checkpoint(log: eventlog.EventLog) -> None:
    seen: list[tuple[str, int, int | None]] = []
    runner = three_step().compile(
        log,
        listener=lambda e, off, cp: seen.append(
            (type(e).__name__, off, None if cp is None else cp.summary["superstep"])
        ),
    )
    runner.run("wf", {})
    assert [off for _, off, _ in seen] == list(range(1, log.head("wf") + 1))
    assert [(k, s) for k, _, s in seen if s is not None] == [
        ("SuperstepCompleted", 1),
        ("SuperstepCompleted", 2),
        ("RunCompleted", 3),
    ]


def test_time_travel_to_superstep_2_and_fork(log: eventlog.EventLog) -> None:
    ran: list[str] = []
    runner = three_step(ran).compile(log)
    runner.run("wf", {"value": 0})
    head, cps_before = log.head("wf"), [cp.checkpoint_id for cp in log.checkpoints.list("wf")]
    cp2 = next(cp for cp in log.checkpoints.list("wf") if cp.summary["superstep"] == 2)
    assert cp2.state.values == {"value": 20}
    assert log.state_at("wf", cp2.offset).values == {"value": 20}

    ran.clear()
    state = runner.resume("wf", from_checkpoint=cp2.checkpoint_id, new_run_id="wf-b")
    assert ran == ["step3"]  # only the future of superstep 2 runs again, on the fork
    assert state.values == {"value": 30} and state.status == "completed"
    assert log.run_info("wf-b").parent == "wf" and log.run_info("wf-b").fork_offset == cp2.offset
    assert log.head("wf") == head
    assert [cp.checkpoint_id for cp in log.checkpoints.list("wf")] == cps_before
    # a second fork of the same checkpoint takes the default name
    runner.resume("wf", from_checkpoint=cp2.checkpoint_id)
    assert f"wf@{cp2.offset}" in log.runs()
    with pytest.raises(eventlog.errors.RunExistsError):
        runner.resume("wf", from_checkpoint=cp2.checkpoint_id, new_run_id="wf-b")


def test_fail_at_superstep_2_resume_finishes_at_superstep_3(tmp_path: Path) -> None:
    ran: list[str] = []
    failing = [True]
    with eventlog.open(tmp_path / "log") as log:
        with pytest.raises(NodeFailedError) as info:
            three_step(ran, failing).compile(log).run("wf", {"value": 0})
        err = info.value
        assert (err.run_id, err.node, err.superstep) == ("wf", "step2", 2)
        assert isinstance(err.__cause__, ConnectionError)
        assert f"offset {err.offset}" in str(err) and "'wf'" in str(err)
        assert kinds(log, "wf")[-2:] == ["StepFailed", "RunFailed"]
        state = log.state_at("wf")
        assert state.status == "failed" and state.superstep == 1
        # a failed run writes no checkpoint for the failure
        assert [cp.summary["superstep"] for cp in log.checkpoints.list("wf")] == [1]
    failing[0] = False
    with eventlog.open(tmp_path / "log") as log:  # a fresh log object on the same directory
        state = three_step(ran, failing).compile(log).resume("wf")
        assert state.status == "completed" and state.superstep == 3
        assert state.values == {"value": 30}
        assert ran == ["step1", "step2", "step2", "step3"]  # step1 never ran again
        assert [cp.summary["superstep"] for cp in log.checkpoints.list("wf")] == [1, 2, 3]
        assert log.verify().ok


def fan_out(ran: list[str], fail: set[str] | None = None) -> Graph:
    """a -> (b, c) -> d: b and c share superstep 2."""
    fail = fail if fail is not None else set()

    def node(name: str, fn):
        def run(values: dict[str, Any]) -> dict[str, Any]:
            ran.append(name)
            if name in fail:
                raise RuntimeError(f"{name} broke")
            return fn(values)

        return run

    g = Graph("fan-out")
    g.add_node("a", node("a", lambda v: {"x": v["seed"] * 2}))
    g.add_node("b", node("b", lambda v: {"b": v["x"] + 1, "who": "b"}))
    g.add_node("c", node("c", lambda v: {"c": v["x"] + 2, "who": "c"}))
    g.add_node("d", node("d", lambda v: {"total": v["b"] + v["c"]}))
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_edge("a", "c")
    g.add_edge("b", "d")
    g.add_edge("c", "d")
    return g


def test_parallel_nodes_see_superstep_start_and_merge_in_name_order(log: eventlog.EventLog) -> None:
    ran: list[str] = []
    state = fan_out(ran).compile(log).run("fan", {"seed": 5})
    assert ran == ["a", "b", "c", "d"]  # d runs once though both b and c lead to it
    assert state.values == {"seed": 5, "x": 10, "b": 11, "c": 12, "who": "c", "total": 23}
    supersteps = [e.event for e in log.read("fan") if isinstance(e.event, SuperstepCompleted)]
    assert [(s.superstep, s.next_nodes) for s in supersteps] == [(1, ["b", "c"]), (2, ["d"]), (3, [])]


def test_failure_mid_superstep_does_not_rerun_completed_sibling(log: eventlog.EventLog) -> None:
    ran: list[str] = []
    fail = {"c"}
    runner = fan_out(ran, fail).compile(log)
    with pytest.raises(NodeFailedError):
        runner.run("fan", {"seed": 5})
    state = log.state_at("fan")
    assert state.superstep_nodes == ["b"] and state.status == "failed"
    fail.clear()
    state = runner.resume("fan")
    assert ran == ["a", "b", "c", "c", "d"]
    reference = fan_out([]).compile(log).run("ref", {"seed": 5})
    assert state.values == reference.values
    completions = Counter(e.event.node for e in log.read("fan") if isinstance(e.event, StepCompleted))
    assert completions == {"a": 1, "b": 1, "c": 1, "d": 1}


def test_conditional_edges_loop_until_done(log: eventlog.EventLog) -> None:
    calls: list[int] = []
    g = Graph("loop")
    g.add_node("inc", lambda v: {"n": v["n"] + 1})

    def route(values: dict[str, Any]) -> str:
        calls.append(values["n"])
        return "again" if values["n"] < 3 else "stop"

    g.add_conditional_edges("inc", route, {"again": "inc", "stop": END})
    g.set_entry("inc")
    state = g.compile(log).run("loop", {"n": 0})
    assert state.values == {"n": 3} and state.superstep == 3 and calls == [1, 2, 3]

    g2 = Graph("bad-route")
    g2.add_node("x", lambda v: None)
    g2.add_conditional_edges("x", lambda v: "nowhere")
    g2.set_entry("x")
    with pytest.raises(NodeFailedError, match="nowhere"):
        g2.compile(log).run("bad", {})
    assert isinstance(list(log.read("bad"))[-1].event, RunFailed)


def test_max_supersteps(log: eventlog.EventLog) -> None:
    g = Graph("forever")
    g.add_node("spin", lambda v: None)
    g.add_edge("spin", "spin")
    g.set_entry("spin")
    with pytest.raises(GraphError, match="limit of 5 supersteps"):
        g.compile(log, max_supersteps=5).run("spin", {})
    assert log.state_at("spin").status == "failed"


def approval_graph(seen: list[Any]) -> Graph:
    g = Graph("approval")
    g.add_node("draft", lambda v: {"amount": v["amount"] * 2})

    def approve(values: dict[str, Any], ctx) -> dict[str, Any]:
        seen.append((ctx.resumed, ctx.resume_value, values.get("amount")))
        answer = ctx.interrupt("approve the transfer?", {"amount": values["amount"]})
        return {"approved": answer}

    g.add_node("approve", approve)
    g.add_node("send", lambda v: {"sent": bool(v["approved"])})
    g.set_entry("draft")
    g.add_edge("draft", "approve")
    g.add_edge("approve", "send")
    return g


def test_resume_with_an_incompatible_graph_is_refused_before_anything_is_written(log: eventlog.EventLog) -> None:
    seen: list[Any] = []
    approval_graph(seen).compile(log).run("pay", {"amount": 50})
    head, runs = log.head("pay"), log.runs()
    pause = log.checkpoints.load_latest("pay")

    lacking = Graph("approval")  # the same name, but without the paused node
    lacking.add_node("draft", lambda v: {})
    lacking.set_entry("draft")
    with pytest.raises(IncompatibleGraphError, match=r"needs node\(s\) 'approve', which graph 'approval' does not"):
        lacking.compile(log).resume("pay", value="yes")
    other = approval_graph(seen)
    other.name = "payments-v2"
    with pytest.raises(IncompatibleGraphError, match="started by graph 'approval', not 'payments-v2'") as info:
        other.compile(log).resume("pay", value="yes")
    assert isinstance(info.value, GraphError) and isinstance(info.value, eventlog.EventLogError)
    with pytest.raises(IncompatibleGraphError):
        lacking.compile(log).resume("pay", value="yes", from_checkpoint=pause.checkpoint_id, new_run_id="pay-b")
    assert log.head("pay") == head and log.runs() == runs  # the answer is not used up, no fork was made
    assert log.state_at("pay").status == "paused"
    assert approval_graph(seen).compile(log).resume("pay", value="yes").status == "completed"


def test_metadata_on_automatic_checkpoints(log: eventlog.EventLog) -> None:
    runner = approval_graph([]).compile(log)
    runner.run("pay", {"amount": 5}, metadata={"tenant": "acme", "graph": "ignored"})
    cps = log.checkpoints.list("pay")
    assert cps and all(cp.metadata["tenant"] == "acme" and cp.metadata["graph"] == "approval" for cp in cps)
    assert cps[-1].metadata == {"tenant": "acme", "graph": "approval", "source": "interrupt"}
    runner.resume("pay", value=True, metadata={"approved_by": "ada"})
    after = log.checkpoints.list("pay")[len(cps) :]
    assert after and all(cp.metadata == {"approved_by": "ada", "graph": "approval"} for cp in after)


def test_interrupt_pauses_checkpoints_and_resumes_with_value(tmp_path: Path) -> None:
    seen: list[Any] = []
    with eventlog.open(tmp_path / "log") as log:
        runner = approval_graph(seen).compile(log)
        state = runner.run("pay", {"amount": 50})
        assert state.status == "paused" and state.paused_nodes == ["approve"]
        assert state.interrupt == {"reason": "approve the transfer?", "payload": {"amount": 100}}
        latest = log.checkpoints.load_latest("pay")
        assert latest is not None and latest.offset == log.head("pay") and latest.summary["paused_nodes"] == ["approve"]
        assert latest.metadata["source"] == "interrupt"
        with pytest.raises(RunPausedError, match="approve"):
            runner.resume("pay")
    with eventlog.open(tmp_path / "log") as log:  # the answer comes after a restart
        runner = approval_graph(seen).compile(log)
        state = runner.resume("pay", value="yes")
        assert state.status == "completed"
        assert state.values == {"amount": 100, "approved": "yes", "sent": True}
        assert state.resume_value == "yes"
        assert seen == [(False, None, 100), (True, "yes", 100)]
        events = [e.event for e in log.read("pay")]
        assert any(isinstance(e, Interrupted) and e.nodes == ["approve"] for e in events)
        assert any(isinstance(e, Resumed) and e.value == "yes" and e.nodes == ["approve"] for e in events)
        with pytest.raises(RunNotPausedError):
            runner.resume("pay", value="again")


def test_interrupt_returned_and_asked_twice(log: eventlog.EventLog) -> None:
    g = Graph("two-questions")

    def ask(values: dict[str, Any], ctx) -> Any:
        first = ctx.interrupt("name?")
        second = ctx.interrupt("age?", {"name": first})
        return {"name": first, "age": second}

    g.add_node("ask", ask)
    g.set_entry("ask")
    runner = g.compile(log)
    assert runner.run("q", {}).interrupt["reason"] == "name?"
    state = runner.resume("q", value="Ada")
    assert state.status == "paused" and state.interrupt == {"reason": "age?", "payload": {"name": "Ada"}}
    state = runner.resume("q", value=36)
    assert state.values == {"name": "Ada", "age": 36}

    g2 = Graph("returned")
    g2.add_node("gate", lambda v, ctx: {"ok": ctx.resume_value} if ctx.resumed else Interrupt("ok?", [1, 2]))
    g2.set_entry("gate")
    runner2 = g2.compile(log)
    assert runner2.run("gate", {}).interrupt == {"reason": "ok?", "payload": [1, 2]}
    assert runner2.resume("gate", value=False).values == {"ok": False}


def test_update_state_is_an_event_and_paused_node_sees_it(log: eventlog.EventLog) -> None:
    seen: list[Any] = []
    runner = approval_graph(seen).compile(log)
    runner.run("pay", {"amount": 50})
    offset = runner.update_state("pay", {"amount": 10}, as_node="draft")
    entry = list(log.read("pay"))[-1]
    assert entry.offset == offset and entry.event == StateUpdated(values={"amount": 10}, as_node="draft")
    state = runner.resume("pay", value=True)
    assert seen[-1] == (True, True, 10)
    assert state.values["amount"] == 10 and state.values["sent"] is True
    with pytest.raises(GraphError, match="not a node"):
        runner.update_state("pay", {"x": 1}, as_node="nope")


def test_refusals(log: eventlog.EventLog) -> None:
    runner = three_step().compile(log)
    runner.run("wf", {})
    with pytest.raises(eventlog.errors.RunExistsError):
        runner.run("wf", {})
    with pytest.raises(eventlog.errors.UnknownRunError):
        runner.resume("missing")
    with pytest.raises(RunNotPausedError):
        runner.resume("wf", value=1)
    assert runner.resume("wf").status == "completed"  # nothing left to do
    with pytest.raises(GraphError, match="no entry"):
        Graph("empty").compile(log)
    g = Graph("dangling")
    g.add_node("a", lambda v: None)
    g.add_edge("a", "b")
    g.set_entry("a")
    with pytest.raises(GraphError, match="goes to no node"):
        g.compile(log)
    with pytest.raises(GraphError, match="exists already"):
        g.add_node("a", lambda v: None)
    bad = Graph("bad-return")
    bad.add_node("a", lambda v: 42)
    bad.set_entry("a")
    with pytest.raises(NodeFailedError, match="returned int"):
        bad.compile(log).run("bad", {})


# -- a process killed in the middle of a superstep ------------------------------------

KILLED_GRAPH = textwrap.dedent(
    """
    import os, sys, time
    import eventlog
    from eventlog.agent.graph import Graph, START

    def build(side: str, ready: str | None) -> Graph:
        def node(name, fn):
            def run(values):
                with open(side, "a") as f:
                    f.write(name + "\\n")
                if name == "c" and ready is not None:
                    open(ready, "w").close()
                    time.sleep(120)
                return fn(values)
            return run
        g = Graph("killed")
        g.add_node("a", node("a", lambda v: {"x": v["seed"] * 2}))
        g.add_node("b", node("b", lambda v: {"b": v["x"] + 1}))
        g.add_node("c", node("c", lambda v: {"c": v["x"] + 2}))
        g.add_node("d", node("d", lambda v: {"total": v["b"] + v["c"]}))
        g.add_edge(START, "a")
        for s, t in [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")]:
            g.add_edge(s, t)
        return g

    if __name__ == "__main__":
        path, side, ready = sys.argv[1:4]
        with eventlog.open(path) as log:
            build(side, ready).compile(log).run("job", {"seed": 7})
    """
)


def test_resume_after_sigkill_mid_superstep(tmp_path: Path) -> None:
    module = tmp_path / "killed_graph.py"
    module.write_text(KILLED_GRAPH)
    side, ready, path = tmp_path / "ran.txt", tmp_path / "ready", tmp_path / "log"
    proc = subprocess.Popen([sys.executable, str(module), str(path), str(side), str(ready)])
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert proc.poll() is None, "the graph process ended before node c started"
            assert time.monotonic() < deadline, "node c never started"
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert side.read_text().split() == ["a", "b", "c"]

    sys.path.insert(0, str(tmp_path))
    try:
        import killed_graph
    finally:
        sys.path.remove(str(tmp_path))
    with eventlog.open(path) as log:
        state = log.state_at("job")
        assert state.status == "running" and state.superstep == 1 and state.superstep_nodes == ["b"]
        assert isinstance(list(log.read("job"))[-1].event, StepStarted)  # c started, never completed
        resumed = killed_graph.build(str(side), None).compile(log).resume("job")
        reference = killed_graph.build(str(tmp_path / "ref.txt"), None).compile(log).run("ref", {"seed": 7})
        assert resumed.status == "completed"
        assert resumed.values == reference.values == {"seed": 7, "x": 14, "b": 15, "c": 16, "total": 31}
        ran = Counter(side.read_text().split())
        assert ran == {"a": 1, "b": 1, "c": 2, "d": 1}  # only the node that was running ran again
        completions = Counter(e.event.node for e in log.read("job") if isinstance(e.event, StepCompleted))
        assert completions == {"a": 1, "b": 1, "c": 1, "d": 1}
        assert log.verify().ok


# -- property: failures anywhere, resumed, end where an uninterrupted run ends --------


def layered(n_layers: int, width: int, fail_at: set[str], ran: list[str]) -> Graph:
    g = Graph("layered")
    names = [[f"n{i}{j}" for j in range(width)] for i in range(n_layers)]

    def node(name: str, i: int, j: int):
        def run(values: dict[str, Any]) -> dict[str, Any]:
            ran.append(name)
            if name in fail_at:
                fail_at.discard(name)
                raise RuntimeError(f"{name} failed once")
            prev = sum(values.get(f"n{i - 1}{k}", 1) for k in range(width))
            return {name: prev * (j + 2) % 1009, "last": name}

        return run

    for i, layer in enumerate(names):
        for j, name in enumerate(layer):
            g.add_node(name, node(name, i, j))
            if i:
                for prev in names[i - 1]:
                    g.add_edge(prev, name)
    g.set_entry(*names[0])
    return g


@settings(max_examples=15, deadline=None)
@given(
    n_layers=st.integers(1, 4),
    width=st.integers(1, 3),
    failures=st.sets(st.tuples(st.integers(0, 3), st.integers(0, 2)), max_size=4),
    seed=st.integers(0, 2**32 - 1),
)
def test_property_failed_and_resumed_equals_uninterrupted(n_layers: int, width: int, failures, seed: int) -> None:
    print(f"seed={seed}")
    fail_at = {f"n{i}{j}" for i, j in failures if i < n_layers and j < width}
    with tempfile.TemporaryDirectory() as d, eventlog.open(Path(d) / "log", durability="none") as log:
        ran: list[str] = []
        runner = layered(n_layers, width, fail_at, ran).compile(log)
        rng = random.Random(seed)
        try:
            state = runner.run("r", {})
        except NodeFailedError:
            state = None
        while state is None or state.status != "completed":
            if rng.random() < 0.5:  # sometimes resume through a new log object's view
                runner = layered(n_layers, width, fail_at, ran).compile(log)
            try:
                state = runner.resume("r")
            except NodeFailedError:
                state = None
        reference = layered(n_layers, width, set(), []).compile(log).run("ref", {})
        assert state.values == reference.values
        completions = Counter(e.event.node for e in log.read("r") if isinstance(e.event, StepCompleted))
        assert completions == Counter(e.event.node for e in log.read("ref") if isinstance(e.event, StepCompleted))
        assert len(ran) == n_layers * width + sum(isinstance(e.event, StepFailed) for e in log.read("r"))
        assert sum(isinstance(e.event, RunCompleted) for e in log.read("r")) == 1


def run_guide(name: str, capsys: pytest.CaptureFixture[str]) -> str:
    """Run a guide's python blocks top to bottom in one namespace; return what they printed."""
    text = (Path(__file__).parent.parent / "docs" / "guides" / name).read_text()
    blocks = re.findall(r"^```python\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE)
    assert blocks, f"{name} has no python blocks"
    namespace: dict[str, Any] = {"__name__": f"guide_{name}"}
    for i, block in enumerate(blocks):
        exec(compile(block, f"{name} block {i + 1}", "exec"), namespace)
    return capsys.readouterr().out


def test_graph_guide_runs(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_guide("graph.md", capsys)
    for n in (1, 2, 3):
        assert f"→ Checkpoint saved at superstep {n}" in out
    assert "✓ Workflow completed successfully" in out


def test_fork_at_the_pause_and_answer_differently(log: eventlog.EventLog) -> None:
    seen: list[Any] = []
    runner = approval_graph(seen).compile(log)
    runner.run("pay", {"amount": 50})
    pause = log.checkpoints.load_latest("pay")
    assert runner.resume("pay", value="yes").values["sent"] is True
    other = runner.resume("pay", value="", from_checkpoint=pause.checkpoint_id, new_run_id="pay-declined")
    assert other.values == {"amount": 100, "approved": "", "sent": False}
    assert log.state_at("pay").values["approved"] == "yes"  # the first answer stands on the original
    with pytest.raises(GraphError, match="needs from_checkpoint"):
        runner.resume("pay", new_run_id="x")


def test_an_update_that_cannot_be_stored_fails_the_node(log: eventlog.EventLog) -> None:
    g = Graph("unstorable")
    g.add_node("a", lambda v: {"ok": 1})
    g.add_node("b", lambda v: {"thing": object()})
    g.set_entry("a")
    g.add_edge("a", "b")
    with pytest.raises(NodeFailedError) as info:
        g.compile(log).run("u", {})
    assert isinstance(info.value.__cause__, eventlog.errors.InvalidEventError) and info.value.node == "b"
    assert kinds(log, "u")[-3:] == ["StepStarted", "StepFailed", "RunFailed"]
    assert log.state_at("u").values == {"ok": 1}


class _MadeAgainBeforeTheListenersRead:
    """The runner's log, where another writer deletes the run and makes it again, with as many
    events and a checkpoint at the same offset, right before the runner reads the checkpoint an
    append took (once, after the run's first checkpoint)."""

    def __init__(self, log: eventlog.EventLog) -> None:
        self._log, self._done = log, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)

    @property
    def checkpoints(self) -> Any:
        return self

    def load_latest(self, run_id: str, **kwargs: Any) -> Any:
        log = self._log
        if not self._done and log.checkpoints.load_latest(run_id) is not None:
            self._done = True
            events = [e.event for e in log.read(run_id)]
            log.delete_run(run_id)
            log.append_many(run_id, events)
            log.checkpoints.save(run_id, checkpoint_id="the other life's")
        return log.checkpoints.load_latest(run_id, **kwargs)

    def list(self, *args: Any, **kwargs: Any) -> Any:
        return self._log.checkpoints.list(*args, **kwargs)


def test_the_listener_is_never_handed_a_checkpoint_of_another_life(log: eventlog.EventLog) -> None:
    """The run made again between an append and the read of the checkpoint it took: the listener
    gets no checkpoint for that append (the other life's is not the append's), and the run's next
    append is refused, as every write to a life that is gone."""
    handed: list[Any] = []
    runner = three_step().compile(
        _MadeAgainBeforeTheListenersRead(log),  # type: ignore[arg-type]
        listener=lambda e, off, cp: handed.append(cp),
    )
    with pytest.raises(RunReplacedError):
        runner.run("wf", {})
    assert [cp for cp in handed if cp is not None] == []
    assert log.checkpoints.load_latest("wf").checkpoint_id == "the other life's"


def test_a_resume_from_a_checkpoint_continues_only_the_fork_it_made(log: eventlog.EventLog) -> None:
    """Another writer deletes the fork a resume from a checkpoint just made and makes it again to
    the same head (a fork of its own run) before the resume reads it back: the resume raises
    RunReplacedError and that writer's run holds only its own events. Before, the resume read
    the fork back by id, took the other writer's life for its own and ran the rest of the graph
    into it."""
    ran: list[str] = []
    runner = three_step(ran).compile(log)
    runner.run("wf", {"value": 0})
    runner.run("other", {"value": 100})
    cp2 = next(cp for cp in log.checkpoints.list("wf") if cp.summary["superstep"] == 2)

    def made_again() -> None:  # by another writer, to the head the fork left
        log.delete_run("wf-b")
        log.fork("other", cp2.offset, "wf-b")

    right_after(log._maintenance, "fork", made_again)
    ran.clear()
    with pytest.raises(RunReplacedError):
        runner.resume("wf", from_checkpoint=cp2.checkpoint_id, new_run_id="wf-b")
    assert ran == []
    info = log.run_info("wf-b")  # the other writer's fork, as it left it
    assert (info.parent, info.head) == ("other", cp2.offset)
    assert log.state_at("wf-b").values == {"value": 120}
