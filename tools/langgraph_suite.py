"""Run LangGraph's own checkpointer tests with `EventLogSaver` beside `InMemorySaver`.

    python -m tools.langgraph_suite PATH/TO/langgraph [--store lmdb|postgres] [--strict] [-n 2]

PATH is a checkout of langchain-ai/langgraph (its `libs/langgraph/tests` are read, never
changed): they are copied to a temporary folder, where the `sync_checkpointer` and
`async_checkpointer` fixtures of its conftest get one more parameter, `eventlog`, next to
`memory` (LangGraph's `InMemorySaver`); then pytest runs every test of the copy that takes a
checkpointer, with `NO_DOCKER=true`. The report pairs the two parameters of each test and
lists the tests that pass with `InMemorySaver` and fail with `EventLogSaver` (the exit status
is 1 when there is one), and those that fail with both (the tests' own version of LangGraph
against the installed one). `--strict` sets `LANGGRAPH_STRICT_MSGPACK=true`: LangGraph's
strict reading, the one `EventLogSaver`'s serializer keeps by default (docs/guides/langgraph.md,
"Reading constructs only known types"); without it LangGraph's `InMemorySaver` builds any type a value
names, and a test that stores another type (an `AgentAction`, say) differs for that reason.
`--store postgres` takes the server from `EVENTLOG_BENCH_PG_DSN` (a schema per test, dropped
after it).

Needs the test extra of eventlog and LangGraph's test dependencies (pytest-mock, syrupy,
httpx, pytest-dotenv, pytest-repeat, pycryptodome, redis, psycopg-pool).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from ._framework_tests import junit_outcomes, print_lists

_FIXTURE = '''
import contextlib as _el_contextlib


@_el_contextlib.contextmanager
def _checkpointer_eventlog():
    """EventLogSaver over a fresh log (added by eventlog's tools/langgraph_suite.py)."""
    import os as _el_os
    import shutil as _el_shutil
    import tempfile as _el_tempfile

    import eventlog
    from eventlog.langgraph import EventLogSaver
    from eventlog.store.postgres import PostgresStore

    dsn = _el_os.environ.get("EVENTLOG_SUITE_PG_DSN")
    if dsn:  # a schema of its own; os.urandom, as the tests replace uuid.uuid4 by a counter
        schema = "lg_suite_" + _el_os.urandom(6).hex()
        log = eventlog.open(f"{dsn}{'&' if '?' in dsn else '?'}schema={schema}")
    else:
        path = _el_tempfile.mkdtemp(prefix="eventlog-lg-suite-")
        log = eventlog.open(path)
    saver = EventLogSaver(log)
    try:
        yield saver
    finally:
        saver.close()
        log.close()
        if dsn:
            PostgresStore.drop_schema(dsn, schema)
        else:
            _el_shutil.rmtree(path, ignore_errors=True)

'''

_PARAMS = re.compile(r'(params=\[\s*"memory",)')
_DISPATCH = re.compile(r'(    checkpointer_name = request\.param\n)(    if checkpointer_name == "memory":)')


def patch_conftest(text: str) -> str:
    """The conftest with an `eventlog` parameter for both checkpointer fixtures; raises when its
    layout is not the one this tool knows (so a changed LangGraph fails loudly, not silently)."""
    text, params = _PARAMS.subn(r'\1 "eventlog",', text)
    text, dispatch = _DISPATCH.subn(
        r'\1    if checkpointer_name == "eventlog":\n'
        r"        with _checkpointer_eventlog() as checkpointer:\n"
        r"            yield checkpointer\n"
        r"            return\n"
        r"\2",
        text,
    )
    # each fixture's list without Docker (NO_DOCKER=true) starts with "memory"; each dispatches once
    if params != 2 or dispatch != 2:
        raise SystemExit(
            f"LangGraph's tests/conftest.py is not laid out as expected ({params} parameter lists, "
            f"{dispatch} dispatches to patch, need 2 and 2)"
        )
    first_fixture = text.index("@pytest.fixture")
    return text[:first_fixture] + _FIXTURE + text[first_fixture:]


def outcomes(report: Path) -> dict[str, str]:
    """Test id (`file::name[param]`) -> passed, failed or skipped, from pytest's JUnit XML."""
    return {f"{cls.replace('.', '/')}.py::{name}": v[0] for (cls, name), v in junit_outcomes(report).items()}


def paired(found: dict[str, str]) -> dict[str, dict[str, str]]:
    """Test id without its saver parameter -> {"memory": outcome, "eventlog": outcome}."""
    pairs: dict[str, dict[str, str]] = defaultdict(dict)
    for name, outcome in found.items():
        match = re.fullmatch(r"(.*)\[(.*)\]", name)
        if match is None:
            continue
        params = match.group(2).split("-")
        for saver in ("memory", "eventlog"):
            if saver in params:
                rest = "-".join(p for p in params if p != saver)
                pairs[f"{match.group(1)}[{rest}]"][saver] = outcome
    return {k: v for k, v in pairs.items() if len(v) == 2}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.langgraph_suite", description=__doc__.splitlines()[0])
    parser.add_argument("checkout", type=Path, help="a checkout of langchain-ai/langgraph")
    parser.add_argument("--store", choices=("lmdb", "postgres"), default="lmdb")
    parser.add_argument("--strict", action="store_true", help="LangGraph's strict msgpack reading")
    parser.add_argument("-n", "--workers", default="2", help="pytest-xdist workers (0: none)")
    parser.add_argument("-k", dest="keyword", default="", help="pytest -k expression, to run fewer tests")
    args = parser.parse_args(argv)
    tests = args.checkout / "libs" / "langgraph" / "tests"
    if not (tests / "conftest.py").is_file():
        parser.error(f"{tests}/conftest.py not found: give a checkout of langchain-ai/langgraph")
    env = dict(os.environ, NO_DOCKER="true", LANGGRAPH_STRICT_MSGPACK="true" if args.strict else "false")
    env.pop("EVENTLOG_SUITE_PG_DSN", None)
    if args.store == "postgres":
        dsn = os.environ.get("EVENTLOG_BENCH_PG_DSN")
        if not dsn:
            parser.error("--store postgres needs EVENTLOG_BENCH_PG_DSN")
        env["EVENTLOG_SUITE_PG_DSN"] = dsn
    with tempfile.TemporaryDirectory(prefix="eventlog-lg-suite-") as tmp:
        root = Path(tmp) / "langgraph"
        shutil.copytree(tests, root / "tests")
        conftest = root / "tests" / "conftest.py"
        conftest.write_text(patch_conftest(conftest.read_text()))
        junit = Path(tmp) / "junit.xml"
        keyword = "memory or eventlog" + (f" and ({args.keyword})" if args.keyword else "")
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests", "-k", keyword,
                   f"--junitxml={junit}", "--ignore=tests/test_remote_graph.py",
                   "--ignore=tests/test_remote_graph_v3.py"]  # fmt: skip
        if args.workers != "0":
            command += ["-n", args.workers]
        print("running:", " ".join(command[2:]), f"(store {args.store}, strict {args.strict})", flush=True)
        subprocess.run(command, cwd=root, env=env, stdout=subprocess.DEVNULL, check=False)
        if not junit.is_file():
            print("pytest wrote no report: it could not run the tests")
            return 2
        pairs = paired(outcomes(junit))
    worse = sorted(k for k, v in pairs.items() if v["memory"] == "passed" and v["eventlog"] == "failed")
    better = sorted(k for k, v in pairs.items() if v["memory"] == "failed" and v["eventlog"] == "passed")
    both = sorted(k for k, v in pairs.items() if v["memory"] == "failed" and v["eventlog"] == "failed")
    ran = sum(1 for v in pairs.values() if v["eventlog"] != "skipped")
    same = sum(1 for v in pairs.values() if v["memory"] == v["eventlog"])
    print(f"{len(pairs)} tests take a checkpointer; {ran} ran with EventLogSaver; {same} ended alike with both")
    print_lists(
        [
            ("pass with InMemorySaver, fail with EventLogSaver", worse),
            ("fail with InMemorySaver, pass with EventLogSaver", better),
            ("fail with both", both),
        ]
    )
    return 1 if worse else 0


if __name__ == "__main__":
    sys.exit(main())
