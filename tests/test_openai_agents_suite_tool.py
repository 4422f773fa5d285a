"""tools/openai_agents_suite.py: the SDK's test modules that make a `SQLiteSession` run once as
they are and once with `EventLogSession` in its place, and the report pairs the two. Run end to
end on a small checkout laid out as the SDK's, with real pytest and real sessions on LMDB."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tools.openai_agents_suite import body, modules

pytest.importorskip("agents")

ROOT = Path(__file__).resolve().parent.parent

TESTS = textwrap.dedent(
    """
    import asyncio

    from agents import SQLiteSession


    def test_items_round_trip(tmp_path):
        async def go():
            session = SQLiteSession("s", tmp_path / "db.sqlite")
            await session.add_items([{"role": "user", "content": str(i)} for i in range(4)])
            assert [i["content"] for i in await session.get_items(limit=2)] == ["2", "3"]
            assert (await session.pop_item())["content"] == "3"
            assert len(await session.get_items()) == 3
            again = SQLiteSession("s", tmp_path / "db.sqlite")
            assert len(await again.get_items()) == 3
            session.close()

        asyncio.run(go())


    def test_reads_a_private_name():
        session = SQLiteSession("p")
        with session._locked_connection() as conn:
            conn.execute("SELECT 1")


    def test_names_the_class_module():
        assert type(SQLiteSession("m")).__module__ == "agents.memory.sqlite_session"
    """
)


def _checkout(root: Path) -> Path:
    tests = root / "tests"
    tests.mkdir(parents=True)
    (tests / "__init__.py").write_text("")
    (tests / "conftest.py").write_text("")
    (tests / "test_sessions.py").write_text(TESTS)
    (tests / "test_other.py").write_text("def test_nothing():\n    pass\n")
    return root


def test_modules_are_those_that_make_a_session(tmp_path: Path) -> None:
    root = _checkout(tmp_path / "sdk")
    assert modules(root / "tests") == [Path("tests/test_sessions.py")]


def test_a_body_runs_from_its_decorators_to_the_next_statement_at_the_margin(tmp_path: Path) -> None:
    path = tmp_path / "t.py"
    path.write_text("@mark\nasync def test_a():\n    x._y\n\n@other\ndef test_b():\n    pass\n")
    assert body(path, 0) == "@mark\nasync def test_a():\n    x._y\n"
    assert body(path, 5) == "def test_b():\n    pass"


def test_the_report_pairs_the_two_sessions(tmp_path: Path) -> None:
    root = _checkout(tmp_path / "sdk")
    done = subprocess.run(
        [sys.executable, "-m", "tools.openai_agents_suite", str(root)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = done.stdout
    assert "3 tests in 1 modules; 4 EventLogSessions made; 1 ended alike with both" in out, out + done.stderr
    worse = out.split("pass with SQLiteSession, fail with EventLogSession: ")[1].split("\n")
    assert worse[0] == "1" and worse[1].endswith("::test_names_the_class_module")
    own = out.split("the same, in tests of SQLiteSession's own implementation: ")[1].split("\n")
    assert own[0] == "1" and own[1].endswith("::test_reads_a_private_name")
    assert done.returncode == 1
