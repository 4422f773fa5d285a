"""The `eventlog` command on a sealed log, through real subprocesses: every command takes the key
from a file (--key-file PATH or EVENTLOG_KEY_FILE), never from the command line; a missing,
wrong or needless key is refused by name. On an LMDB directory and on PostgreSQL."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

import eventlog
from eventlog.events import StepCompleted, UserMessage
from eventlog.record.tables import EVENTS

pytest.importorskip("cryptography")

ROOT = Path(__file__).resolve().parent.parent
KEY = bytes(range(32))
SECRET = "the launch code is tangerine-42"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVENTLOG_")}
    env["PYTHONPATH"] = str(ROOT)
    return {**env, **extra}


def cli(*argv: Any, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "eventlog", *map(str, argv)],
        capture_output=True,
        text=True,
        env=_env(**env),
        timeout=120,
    )


def cli_all(argvs: list[list[Any]], **env: str) -> list[subprocess.CompletedProcess[str]]:
    """`cli` of each argv, run side by side (each is a separate process, as a user would start them)."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "eventlog", *map(str, argv)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(**env),
        )
        for argv in argvs
    ]
    done = []
    for argv, proc in zip(argvs, procs, strict=True):
        out, err = proc.communicate(timeout=120)
        done.append(subprocess.CompletedProcess(argv, proc.returncode, out, err))
    return done


def _fill(log: eventlog.EventLog[Any]) -> None:
    w = log.writer("r", policy=eventlog.CheckpointPolicy.every(2))
    for i in range(1, 7):
        w.append(UserMessage(content=f"{SECRET} {i}"))
    log.fork("r", at=3, new_run_id="r-b")
    log.append("r-b", StepCompleted(node="n", superstep=1))


@pytest.fixture(params=["lmdb", "postgres"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A sealed log (its --log argument), on each store the command line reaches."""
    if request.param == "lmdb":
        path = str(tmp_path / "log")
    else:
        dsn = os.environ.get("EVENTLOG_TEST_PG_DSN")
        if not dsn:
            pytest.skip("set EVENTLOG_TEST_PG_DSN to run the PostgreSQL store's tests")
        schema = f"cli_sealed_{os.getpid()}_{abs(hash(str(tmp_path))) % 10**8}"
        path = f"{dsn}{'&' if '?' in dsn else '?'}schema={schema}"
    with eventlog.open(path, key=KEY) as log:
        _fill(log)
    yield path
    if request.param == "postgres":
        from eventlog.store.postgres import PostgresStore

        PostgresStore.drop_schema(os.environ["EVENTLOG_TEST_PG_DSN"], schema)


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "log.key"
    path.write_bytes(KEY)
    path.chmod(0o600)
    return path


READING = [
    ["runs"],
    ["events", "r"],
    ["history", "r"],
    ["state", "r", "--at", "3"],
    ["diff", "r", "0", "head"],
    ["verify"],
    ["verify", "--repair"],
    ["stats"],
]


def test_every_command_refuses_a_sealed_log_without_a_key_naming_both_ways(where: str, tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    argvs = [*READING, ["export", "-o", out], ["fork", "r", "--at", "1", "--as", "x"], ["delete", "r", "--yes"]]
    for argv, p in zip(argvs, cli_all([["--log", where, *argv] for argv in argvs]), strict=True):
        assert p.returncode == 1, (argv, p.stderr)
        assert "--key-file PATH or EVENTLOG_KEY_FILE" in p.stderr, (argv, p.stderr)
        assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr
    assert not out.exists()
    with eventlog.open(where, key=KEY, readonly=True) as log:
        assert log.runs() == ["r", "r-b"]  # nothing was changed


def test_every_command_reads_a_sealed_log_with_a_key_file(where: str, key_file: Path) -> None:
    with eventlog.open(where, key=KEY, readonly=True) as log:
        runs = json.loads(msgspec.json.encode([log.run_info(r) for r in log.runs()]))
        state = json.loads(msgspec.json.encode(log.state_at("r", 3)))
    reading = [argv for argv in READING if argv != ["verify", "--repair"]]  # a writer: run alone below
    done = cli_all([["--log", where, *argv, "--json", "--key-file", key_file] for argv in reading])
    done.append(cli("--log", where, "verify", "--repair", "--json", "--key-file", key_file))
    for argv, p in zip([*reading, ["verify", "--repair"]], done, strict=True):
        assert p.returncode == 0, (argv, p.stderr)
        if argv == ["runs"]:
            assert json.loads(p.stdout) == runs
        if argv[0] == "state":
            assert json.loads(p.stdout)["state"]["messages"] == state["messages"]
        if argv[0] == "events":
            assert json.loads(p.stdout)[0]["event"]["content"] == f"{SECRET} 1"
    p = cli("--key-file", key_file, "--log", where, "fork", "r", "--at", "2", "--as", "r-c")  # before the command too
    assert p.returncode == 0, p.stderr
    p = cli("--log", where, "events", "r-c", "--json", EVENTLOG_KEY_FILE=str(key_file))
    assert p.returncode == 0, p.stderr
    assert len(json.loads(p.stdout)) == 2


def test_a_key_file_may_hold_hex_and_a_bad_one_is_named(where: str, tmp_path: Path) -> None:
    hex_file = tmp_path / "hex.key"
    hex_file.write_text(KEY.hex() + "\n")
    assert cli("--log", where, "runs", EVENTLOG_KEY_FILE=str(hex_file)).returncode == 0
    short = tmp_path / "short.key"
    short.write_bytes(b"too short")
    p = cli("--log", where, "runs", "--key-file", short)
    assert p.returncode == 2 and "short.key" in p.stderr and "16, 24 or 32 bytes" in p.stderr
    p = cli("--log", where, "runs", "--key-file", tmp_path / "missing.key")
    assert p.returncode == 3 and "missing.key" in p.stderr and "does not exist" in p.stderr
    wrong = tmp_path / "wrong.key"
    wrong.write_bytes(os.urandom(32))
    p = cli("--log", where, "verify", "--key-file", wrong)
    assert p.returncode == 1 and "another key" in p.stderr


def test_a_key_file_for_a_plaintext_log_is_refused(tmp_path: Path, key_file: Path) -> None:
    with eventlog.open(tmp_path / "plain") as log:
        log.append("r", UserMessage(content="x"))
    p = cli("--log", tmp_path / "plain", "runs", "--key-file", key_file)
    assert p.returncode == 1 and "not sealed" in p.stderr


def test_verify_with_a_key_names_a_moved_value(where: str, key_file: Path) -> None:
    with eventlog.open(where, key=KEY) as log:
        number = log.store.read(lambda txn: log._runs.require(txn, "r")).number
        log.store.write(lambda txn: txn.put("events", EVENTS.key(number, 5), txn.get("events", EVENTS.key(number, 4))))
    p = cli("--log", where, "verify", "--json", "--key-file", key_file)
    assert p.returncode == 5, p.stderr
    problems = json.loads(p.stdout)["problems"]
    assert {(q["run_id"], q["offset"]) for q in problems} == {("r", 5)}
    assert "does not authenticate" in problems[0]["message"]
    p = cli("--log", where, "events", "r", "--key-file", key_file)
    assert p.returncode == 5 and "run 'r' offset 5" in p.stderr


def test_export_and_import_with_key_files(where: str, key_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "runs.jsonl"
    p = cli("--log", where, "export", "-o", out, "--key-file", key_file)
    assert p.returncode == 0, p.stderr
    other = tmp_path / "other.key"
    other.write_bytes(os.urandom(32))
    copy = tmp_path / "copy"
    p = cli("--log", copy, "import", out, EVENTLOG_KEY_FILE=str(other))
    assert p.returncode == 0, p.stderr
    assert SECRET.encode() not in (copy / "data.mdb").read_bytes()  # the new log is sealed with the other key
    assert cli("--log", copy, "runs").returncode == 1
    with eventlog.open(where, key=KEY, readonly=True) as a, eventlog.open(copy, key=other.read_bytes()) as b:
        assert [(e.event, e.meta) for e in a.read("r")] == [(e.event, e.meta) for e in b.read("r")]
        assert b.verify().ok


def test_ui_serves_a_sealed_log_with_a_key_file(tmp_path: Path, key_file: Path) -> None:
    pytest.importorskip("uvicorn")
    path = tmp_path / "log"
    with eventlog.open(path, key=KEY) as log:
        _fill(log)
    p = cli("ui", "--log", path, "--port", "0")
    assert p.returncode == 1 and "--key-file PATH or EVENTLOG_KEY_FILE" in p.stderr
    proc = subprocess.Popen(
        [sys.executable, "-m", "eventlog", "ui", "--log", str(path), "--port", "0", "--key-file", str(key_file)],
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()
        found = re.search(r"(http://\S+)", first)
        assert found, first + proc.stderr.read()
        with urllib.request.urlopen(found.group(1), timeout=30) as response:
            assert response.status == 200 and 'data-run="r-b"' in response.read().decode()
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=15)
        finally:
            if proc.poll() is None:
                proc.kill()


def test_the_key_never_goes_on_the_command_line() -> None:
    p = cli("--help")
    assert "--key-file PATH" in p.stdout and "EVENTLOG_KEY_FILE" in p.stdout
    assert "--key " not in p.stdout and "--key=" not in p.stdout
    p = cli("runs", "--key", KEY.hex())  # read as --key-file, an abbreviation: a file that does not exist
    assert p.returncode != 0
