"""Run the OpenAI Agents SDK's own session tests with `EventLogSession` in `SQLiteSession`'s place.

    python -m tools.openai_agents_suite PATH/TO/openai-agents-python [--store lmdb|postgres] [-k EXPR]

PATH is a checkout of openai/openai-agents-python (its `tests` are read, never changed): they
are copied to a temporary folder, and every test module that makes a `SQLiteSession` (the
session tests, and the runner's tests that run an agent with a session) is run twice by
pytest: as it is, then with the module's own name `SQLiteSession` bound to a subclass of
`EventLogSession` that takes `SQLiteSession`'s arguments (each database path names one log,
LMDB in a temporary folder or a PostgreSQL schema; ":memory:" a log per session; `close()`
does nothing, since the log is not the session's). The SDK's own modules keep the real class.

The report pairs each test's two runs and lists the tests that pass with `SQLiteSession` and
fail with `EventLogSession`, apart from those whose code reaches into `SQLiteSession`'s own
implementation (a private name, the SQLite file through `sqlite3`, its closed state): those
test SQLite, not the session protocol. The exit status is 1 when one of the others is left.
`--store postgres` takes the server from `EVENTLOG_BENCH_PG_DSN`. The logs a test opened are
closed, and removed (their folders, their PostgreSQL schemas), after it.

Needs the test extra of eventlog and the SDK's test dependencies (pytest-asyncio, pytest-mock,
inline-snapshot, fastapi, httpx, websockets).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from shutil import copytree

from ._framework_tests import junit_outcomes, print_lists

_PLUGIN = '''
"""Binds the test modules' name SQLiteSession to eventlog's session (tools/openai_agents_suite.py)."""

import os
import shutil
import tempfile

import eventlog
from eventlog.openai_agents import EventLogSession
from eventlog.store.postgres import PostgresStore

_DSN = os.environ.get("EVENTLOG_SUITE_PG_DSN")
_ROOT = tempfile.mkdtemp(prefix="eventlog-oa-suite-")
_LOGS = {}
_OPENED = []
_SCHEMAS = []
_DIRS = []


def _log(db_path):
    key = str(db_path)
    if key in _LOGS:
        return _LOGS[key]
    if key == ":memory:":
        log = eventlog.open(":memory:")
    elif _DSN:
        schema = "oa_suite_" + os.urandom(6).hex()
        _SCHEMAS.append(schema)
        log = eventlog.open(f"{_DSN}{'&' if '?' in _DSN else '?'}schema={schema}")
    else:
        _DIRS.append(tempfile.mkdtemp(dir=_ROOT))
        log = eventlog.open(_DIRS[-1])
    _OPENED.append(log)
    if key != ":memory:":
        _LOGS[key] = log
    return log


class SQLiteSession(EventLogSession):
    """EventLogSession, made with SQLiteSession's arguments."""

    def __init__(self, session_id, db_path=":memory:", sessions_table="agent_sessions",
                 messages_table="agent_messages", session_settings=None):
        super().__init__(session_id, _log(db_path), session_settings=session_settings)
        self.db_path = db_path
        _MADE.append(session_id)

    def close(self):
        pass


_MADE = []


def pytest_collection_modifyitems(items):
    for module in {item.module for item in items if getattr(item, "module", None) is not None}:
        if getattr(module, "SQLiteSession", None) is not None:
            module.SQLiteSession = SQLiteSession


def pytest_runtest_teardown(item):
    """The logs a test opened are closed after it (a PostgreSQL log holds connections)."""
    for log in _OPENED:
        log.close()
    for schema in _SCHEMAS:
        PostgresStore.drop_schema(_DSN, schema)
    for path in _DIRS:
        shutil.rmtree(path, ignore_errors=True)
    _DIRS.clear()
    _OPENED.clear()
    _SCHEMAS.clear()
    _LOGS.clear()


def pytest_unconfigure(config):
    with open(os.environ["EVENTLOG_SUITE_MADE"], "w") as out:
        out.write(str(len(_MADE)))
'''

_INI = """[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = session
junit_family = xunit1
markers =
    allow_call_model_methods: calls real model implementations
    requires_native_macos_sandbox: needs its own macOS sandbox
"""

_MAKES = re.compile(r"\bSQLiteSession\(")
_OWN = re.compile(r"\b\w+\._[A-Za-z]\w*|\bsqlite3\b|SQLiteSession is closed")
"""What a test of SQLiteSession's own implementation reads: a private name, the SQLite file, its
closed state."""


def modules(tests: Path) -> list[Path]:
    """The test modules that make a SQLiteSession, relative to the tests' parent."""
    return sorted(
        p.relative_to(tests.parent) for p in tests.rglob("test_*.py") if _MAKES.search(p.read_text(errors="replace"))
    )


def outcomes(report: Path) -> dict[str, tuple[str, str, int]]:
    """Test id (`module::name`) -> (passed, failed or skipped; its file; the line of its def)."""
    return {f"{cls}::{name}": v for (cls, name), v in junit_outcomes(report).items()}


def body(path: Path, line: int) -> str:
    """The source of the test at `line` (0-based, its def or its first decorator) of `path`: its
    decorators and def, then up to the next statement at the margin."""
    lines = path.read_text(errors="replace").splitlines()
    end = line
    while end < len(lines) and not re.match(r"(async def |def )", lines[end]):
        end += 1
    end += 1
    while end < len(lines) and not re.match(r"(async def |def |class |@)", lines[end]):
        end += 1
    return "\n".join(lines[line:end])


def reaches_into_sqlite(root: Path, file: str, line: int) -> bool:
    path = root / file
    return path.is_file() and _OWN.search(body(path, line)) is not None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.openai_agents_suite", description=__doc__.splitlines()[0])
    parser.add_argument("checkout", type=Path, help="a checkout of openai/openai-agents-python")
    parser.add_argument("--store", choices=("lmdb", "postgres"), default="lmdb")
    parser.add_argument("-k", dest="keyword", default="", help="pytest -k expression, to run fewer tests")
    args = parser.parse_args(argv)
    tests = args.checkout / "tests"
    if not (tests / "conftest.py").is_file():
        parser.error(f"{tests}/conftest.py not found: give a checkout of openai/openai-agents-python")
    env = dict(os.environ)
    env.pop("EVENTLOG_SUITE_PG_DSN", None)
    if args.store == "postgres":
        dsn = os.environ.get("EVENTLOG_BENCH_PG_DSN")
        if not dsn:
            parser.error("--store postgres needs EVENTLOG_BENCH_PG_DSN")
        env["EVENTLOG_SUITE_PG_DSN"] = dsn
    with tempfile.TemporaryDirectory(prefix="eventlog-oa-suite-") as tmp:
        root = Path(tmp) / "sdk"
        copytree(tests, root / "tests")
        (root / "_eventlog_swap.py").write_text(_PLUGIN)
        (root / "pytest.ini").write_text(_INI)
        files = [str(p) for p in modules(root / "tests")]
        if not files:
            parser.error(f"no test module under {tests} makes a SQLiteSession")
        made = Path(tmp) / "made"
        env.update(PYTHONPATH=os.pathsep.join([str(root), env.get("PYTHONPATH", "")]), EVENTLOG_SUITE_MADE=str(made))
        runs: dict[str, dict[str, tuple[str, str, int]]] = {}
        for side in ("sqlite", "eventlog"):
            junit = Path(tmp) / f"{side}.xml"
            command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", *files]
            if side == "eventlog":
                command[3:3] = ["-p", "_eventlog_swap"]
            if args.keyword:
                command += ["-k", args.keyword]
            print(f"running {len(files)} modules with {side}", flush=True)
            subprocess.run(command, cwd=root, env=env, stdout=subprocess.DEVNULL, check=False)
            if not junit.is_file():
                print("pytest wrote no report: it could not run the tests")
                return 2
            runs[side] = outcomes(junit)
        sessions = int(made.read_text()) if made.is_file() else 0
        sqlite, ours = runs["sqlite"], runs["eventlog"]
        worse = sorted(k for k, v in sqlite.items() if v[0] == "passed" and ours.get(k, ("",))[0] == "failed")
        own = [k for k in worse if reaches_into_sqlite(root, *sqlite[k][1:])]
        left = [k for k in worse if k not in own]
    both = sorted(k for k, v in sqlite.items() if v[0] == "failed" and ours.get(k, ("",))[0] == "failed")
    better = sorted(k for k, v in sqlite.items() if v[0] == "failed" and ours.get(k, ("",))[0] == "passed")
    same = sum(1 for k, v in sqlite.items() if ours.get(k, ("",))[0] == v[0])
    print(
        f"{len(sqlite)} tests in {len(files)} modules; {sessions} EventLogSessions made; {same} ended alike with both"
    )
    print_lists(
        [
            ("pass with SQLiteSession, fail with EventLogSession", left),
            ("the same, in tests of SQLiteSession's own implementation", own),
            ("fail with SQLiteSession, pass with EventLogSession", better),
            ("fail with both", both),
        ]
    )
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
