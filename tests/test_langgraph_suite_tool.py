"""tools/langgraph_suite.py: LangGraph's checkpointer fixtures get an `eventlog` parameter, and
the report pairs each test's two savers. Run end to end on a small checkout laid out as
LangGraph's (its conftest's fixtures as LangGraph writes them), with real pytest and a real
EventLogSaver on LMDB."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tools.langgraph_suite import paired, patch_conftest

pytest.importorskip("langgraph")

ROOT = Path(__file__).resolve().parent.parent

CONFTEST = textwrap.dedent(
    """
    import os
    from contextlib import contextmanager

    import pytest
    from langgraph.checkpoint.memory import InMemorySaver

    NO_DOCKER = os.getenv("NO_DOCKER", "false") == "true"


    @contextmanager
    def _checkpointer_memory():
        yield InMemorySaver()


    @pytest.fixture(
        scope="function",
        params=[
            "memory",
            "sqlite",
        ]
        if NO_DOCKER
        else ["memory", "sqlite", "postgres"],
    )
    def sync_checkpointer(request):
        checkpointer_name = request.param
        if checkpointer_name == "memory":
            with _checkpointer_memory() as checkpointer:
                yield checkpointer
        else:
            pytest.skip("not in this checkout")


    @pytest.fixture(
        scope="function",
        params=[
            "memory",
        ]
        if NO_DOCKER
        else ["memory", "postgres_aio"],
    )
    async def async_checkpointer(request):
        checkpointer_name = request.param
        if checkpointer_name == "memory":
            with _checkpointer_memory() as checkpointer:
                yield checkpointer
        else:
            raise NotImplementedError(checkpointer_name)
    """
)

TESTS = textwrap.dedent(
    """
    import operator
    from typing import Annotated, TypedDict

    import pytest
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, StateGraph


    class State(TypedDict):
        items: Annotated[list, operator.add]


    def graph(checkpointer):
        g = StateGraph(State)
        g.add_node("a", lambda s: {"items": [len(s["items"])]})
        g.add_edge(START, "a")
        g.add_edge("a", END)
        return g.compile(checkpointer=checkpointer)


    @pytest.mark.parametrize("turns", [1, 3])
    def test_history(sync_checkpointer, turns):
        app, config = graph(sync_checkpointer), {"configurable": {"thread_id": "t"}}
        for _ in range(turns):
            app.invoke({"items": ["x"]}, config)
        assert app.get_state(config).values["items"][-1] == 2 * turns - 1
        assert len(list(app.get_state_history(config))) == 2 * turns


    def test_memory_only(sync_checkpointer):
        assert isinstance(sync_checkpointer, InMemorySaver)
    """
)


def test_patch_adds_the_parameter_and_refuses_another_layout() -> None:
    patched = patch_conftest(CONFTEST)
    compile(patched, "conftest.py", "exec")
    assert patched.count('"memory", "eventlog",') == 2
    assert patched.count('if checkpointer_name == "eventlog":') == 2
    with pytest.raises(SystemExit, match="not laid out as expected"):
        patch_conftest(CONFTEST.replace('"memory",\n        "sqlite"', '"sqlite",\n        "memory"'))


def test_pairs_a_test_by_its_saver_parameter() -> None:
    found = {
        "tests/t.py::a[memory-3]": "passed",
        "tests/t.py::a[eventlog-3]": "failed",
        "tests/t.py::b[sync-memory]": "passed",
        "tests/t.py::b[sync-eventlog]": "passed",
        "tests/t.py::c[sqlite]": "passed",
        "tests/t.py::d": "passed",
    }
    assert paired(found) == {
        "tests/t.py::a[3]": {"memory": "passed", "eventlog": "failed"},
        "tests/t.py::b[sync]": {"memory": "passed", "eventlog": "passed"},
    }


def test_end_to_end_names_what_fails_with_eventlog_alone(tmp_path: Path) -> None:
    tests = tmp_path / "libs" / "langgraph" / "tests"
    tests.mkdir(parents=True)
    (tests / "__init__.py").write_text("")
    (tests / "conftest.py").write_text(CONFTEST)
    (tests / "test_graph.py").write_text(TESTS)
    done = subprocess.run(
        [sys.executable, "-m", "tools.langgraph_suite", str(tmp_path), "-n", "0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (tests / "conftest.py").read_text() == CONFTEST  # the checkout is never changed
    out = done.stdout
    assert "3 tests take a checkpointer; 3 ran with EventLogSaver; 2 ended alike with both" in out, out + done.stderr
    assert "pass with InMemorySaver, fail with EventLogSaver: 1\n  tests/test_graph.py::test_memory_only[]" in out
    assert done.returncode == 1
