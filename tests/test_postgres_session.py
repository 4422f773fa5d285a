"""The PostgreSQL store's messages (store/_pg_session.py) in a hostile environment: backends
terminated while idle, between the round trips of an append and during its COMMIT; settings
reset behind the store (`DISCARD ALL`, `RESET ALL`); client encodings other than UTF-8;
statements failing inside a message; values of hundreds of MiB; eight writer processes of one
run. After each: what returned reads back equal, what raised is not there, `verify` is clean,
the feed holds every position once in order, and no transaction is left open."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import eventlog
from eventlog.events import StepCompleted

DSN = os.environ.get("EVENTLOG_TEST_PG_DSN")
pytestmark = pytest.mark.skipif(not DSN, reason="set EVENTLOG_TEST_PG_DSN to run the PostgreSQL store's tests")
ODD_IDS = ["é-run", "quo'te", 'dq"x', "back\\slash", "$1 $$ %s %% ;", "ünï€😀", "a;DROP TABLE x;--", "tab\tnl\n"]


class Schema:
    """A fresh schema, and the name its store's connections give the server (to find them)."""

    def __init__(self) -> None:
        assert DSN is not None
        self.name = f"t_{uuid.uuid4().hex[:12]}"
        self.app = f"s_{self.name}"

    def url(self, *params: str) -> str:
        assert DSN is not None
        query = "&".join([f"application_name={self.app}", *params, f"schema={self.name}"])
        return f"{DSN}{'&' if '?' in DSN else '?'}{query}"

    def sql(self, statement: str, *args: Any) -> list[tuple[Any, ...]]:
        import psycopg

        assert DSN is not None
        with psycopg.connect(DSN, autocommit=True) as conn:
            cur = conn.execute(statement, args or None)
            return cur.fetchall() if cur.description is not None else []

    def backends(self) -> list[int]:
        return [pid for (pid,) in self.sql("SELECT pid FROM pg_stat_activity WHERE application_name = %s", self.app)]

    def terminate(self, pid: int) -> bool:
        # With a timeout the call returns once the backend is gone.
        return bool(self.sql("SELECT pg_terminate_backend(%s, 10000)", pid)[0][0])

    def open_transactions(self) -> list[tuple[Any, ...]]:
        return self.sql(
            "SELECT pid, state FROM pg_stat_activity WHERE application_name = %s AND state LIKE 'idle in transaction%%'",
            self.app,
        )

    def check(self, acked: dict[tuple[str, int], StepCompleted], key: bytes | None = None) -> list[eventlog.Entry]:
        """A fresh open reads every acknowledged event back equal, verifies clean, and its feed
        holds every entry once, in order; its entries are returned."""
        log = eventlog.open(self.url(), key=key)
        try:
            for (run_id, offset), event in acked.items():
                assert log.entry(run_id, offset).event == event, (run_id, offset)
            report = log.verify()
            assert report.ok and not report.problems, report.problems[:3]
            feed = list(log.feed())
            positions = [e.position for e in feed]
            assert positions == sorted(set(positions))
            held = [(e.run_id, e.offset) for r in log.runs() for e in log.read(r)]
            assert sorted(held) == sorted((e.run_id, e.offset) for e in feed)
            assert not self.open_transactions()
            return feed
        finally:
            log.close()


@pytest.fixture
def schema() -> Iterator[Schema]:
    from eventlog.store.postgres import PostgresStore

    assert DSN is not None
    made = Schema()
    yield made
    PostgresStore.drop_schema(DSN, made.name)


def step(i: int, **update: Any) -> StepCompleted:
    return StepCompleted(node="n", superstep=i, update=update)


def hold_next_write(log: eventlog.EventLog) -> tuple[threading.Event, threading.Event, list[int]]:
    """Make the next write of the calling thread's log hold its transaction open after its
    function ran (its first round trip made, the writes and COMMIT not sent) until released:
    (holding, release, [the backend's pid])."""
    store = log.store
    write, thread = store.write, threading.get_ident()
    holding, release, pid = threading.Event(), threading.Event(), [0]

    def held_write(fn: Callable[[Any], Any]) -> Any:
        if threading.get_ident() != thread or holding.is_set():
            return write(fn)

        def held(txn: Any) -> Any:
            result = fn(txn)
            pid[0] = txn._session.connection.info.backend_pid
            holding.set()
            assert release.wait(60)
            return result

        return write(held)

    store.write = held_write  # type: ignore[method-assign]
    return holding, release, pid


def test_eight_writers_of_one_run_give_it_positions_that_grow_with_its_offsets(schema: Schema) -> None:
    """A row lock may give a waiting writer its transaction id before the lock is granted: a
    writer that waited behind two others had positions below the one before it in the run, the
    feed gave the run's entries out of order and `verify` named them."""
    logs = [eventlog.open(schema.url()) for _ in range(8)]
    acked: dict[tuple[str, int], StepCompleted] = {}
    try:
        logs[0].append("shared", step(0))

        def write(k: int) -> None:
            for i in range(25):
                event = step(i, writer=k)
                acked[("shared", logs[k].append("shared", event))] = event

        threads = [threading.Thread(target=write, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(acked) == 200
    finally:
        for log in logs:
            log.close()
    feed = schema.check(acked)
    assert [e.offset for e in feed] == list(range(1, 202))


@pytest.mark.parametrize(
    ("options", "behind"),
    [
        ("options=-c%20standard_conforming_strings%3Doff", "DISCARD ALL"),
        ("options=-c%20standard_conforming_strings%3Doff", "RESET ALL"),
        ("", "SET standard_conforming_strings = off"),
    ],
)
def test_settings_reset_behind_the_store_change_no_byte_it_stores(schema: Schema, options: str, behind: str) -> None:
    """A `DISCARD ALL` or `RESET ALL` (a pooler's, say) puts `standard_conforming_strings` back
    to the default of the URL's options, the role or the database: a literal `'\\x..'` then
    read as escapes, an acknowledged append stored other bytes (its run record failed its
    checksum) and the next ones failed."""
    log = eventlog.open(schema.url(options) if options else schema.url(), pool_size=1)
    acked: dict[tuple[str, int], StepCompleted] = {}
    try:
        acked[("r\\", log.append("r\\", step(0)))] = step(0)
        with log.store._pool.connection() as conn:  # type: ignore[attr-defined]
            conn.execute(behind)
            assert conn.execute("SHOW standard_conforming_strings").fetchone() == ("off",)
        for i in range(1, 4):
            event = step(i, text="\\x41 \\' ü")
            acked[("r\\", log.append("r\\", event, event_id=f"id\\{i}"))] = event
        batch = [step(i, n=i) for i in range(5)]  # arrays of bytes written as literals
        for offset, event in zip(log.append_many("r\\", batch), batch, strict=True):
            acked[("r\\", offset)] = event
    finally:
        log.close()
    schema.check(acked)


def test_options_in_the_url_reach_the_server_as_written(schema: Schema) -> None:
    """`options=-c%20name%3Dvalue` was decoded and encoded again as `-c+name=value`, which libpq
    passes on as it is: the server refused every connection, and the open said so after the
    pool's 30 s. A `+` the URL holds stays a plus."""
    import psycopg

    from eventlog.store.postgres import split_dsn

    url = schema.url("options=-c%20statement_timeout%3D54321", "fallback_application_name=a+b%20c")
    dsn, name = split_dsn(url)
    assert name == schema.name and "schema" not in dsn
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SHOW statement_timeout").fetchone() == ("54321ms",)
    with eventlog.open(url) as log:
        log.append("r", step(1))
        with log.store._pool.connection() as conn:  # type: ignore[attr-defined]
            assert conn.execute("SHOW statement_timeout").fetchone() == ("54321ms",)
    schema.check({("r", 1): step(1)})


@pytest.mark.parametrize(
    "encoding", ["client_encoding=SQL_ASCII", "options=-c%20client_encoding%3DLATIN1", "client_encoding=SJIS"]
)
def test_a_client_encoding_other_than_utf8_round_trips_odd_ids(schema: Schema, encoding: str) -> None:
    """Under SQL_ASCII psycopg reads text as bytes: the open found no layout version and the
    reads' rows named their tables in bytes. Under LATIN1 or SJIS a server notice holding a
    character of neither (a user's trigger) failed the statement it came from. Both hold after
    a `DISCARD ALL` or a `RESET ALL` puts the URL's encoding back, and for a sealed log."""
    key = os.urandom(32)
    eventlog.open(schema.url(), key=key).close()
    schema.sql(
        f'CREATE FUNCTION "{schema.name}".say() RETURNS trigger AS $$ BEGIN '
        "RAISE NOTICE 'position % € ü 😀', NEW.position; RETURN NEW; END $$ LANGUAGE plpgsql"
    )
    schema.sql(
        f'CREATE TRIGGER say BEFORE INSERT ON "{schema.name}".feed FOR EACH ROW EXECUTE FUNCTION "{schema.name}".say()'
    )
    acked: dict[tuple[str, int], StepCompleted] = {}
    log = eventlog.open(schema.url(encoding), key=key, pool_size=1)
    try:
        for n, run_id in enumerate(ODD_IDS):
            if n == len(ODD_IDS) // 2:
                with log.store._pool.connection() as conn:  # type: ignore[attr-defined]
                    conn.execute("RESET ALL" if "SQL_ASCII" in encoding else "DISCARD ALL")
            for i in range(2):
                event = step(i, run=run_id * 2, text="ü€😀\\'")
                acked[(run_id, log.append(run_id, event, event_id=f"{run_id}#{i}"))] = event
        batch = [step(i, text="é" * 10) for i in range(1500)]  # parameters in binary
        for offset, event in zip(log.append_many("batch-é", batch), batch, strict=True):
            acked[("batch-é", offset)] = event
        assert sorted(log.runs()) == sorted([*ODD_IDS, "batch-é"])
        assert [e.event_id for e in log.read(ODD_IDS[0])] == [f"{ODD_IDS[0]}#0", f"{ODD_IDS[0]}#1"]
    finally:
        log.close()
    schema.check(acked, key=key)


def test_an_idle_connection_lost_is_made_again(schema: Schema) -> None:
    """A pooled connection the server ended while idle (terminated, `idle_session_timeout`)
    failed the next read or write that drew it, as a `DatabaseError` that named no connection:
    nothing sent on it could have committed, so the store makes the call again on another."""
    acked: dict[tuple[str, int], StepCompleted] = {("r", 1): step(1)}
    with eventlog.open(schema.url(), pool_size=2) as log:
        log.append("r", step(1))
        calls: list[Callable[[], Any]] = [
            lambda: log.head("r"),
            lambda: list(log.read("r")),
            lambda: list(log.feed()),
            lambda: log.append("r", step(log.head("r") + 1)),
            lambda: log.append_many("r", [step(0)] * 100),
            lambda: log.verify(),
        ]
        for call in calls:
            killed = [schema.terminate(pid) for pid in schema.backends()]
            assert killed and all(killed)
            call()
        for entry in log.read("r"):
            acked[("r", entry.offset)] = entry.event  # type: ignore[assignment]
    assert len(acked) == 102
    schema.check(acked)


def test_a_backend_terminated_between_round_trips_loses_nothing_acknowledged(schema: Schema) -> None:
    """An append whose backend is terminated after its first round trip (its reads, its locks)
    raises a connection failure and leaves nothing; a sealed log's other writers go on, and the
    writer appends again on a new connection."""
    key = os.urandom(32)
    logs = [eventlog.open(schema.url(), key=key) for _ in range(3)]
    acked: dict[tuple[str, int], StepCompleted] = {}
    failed: list[BaseException] = []
    try:
        acked[("victim", logs[0].append("victim", step(0)))] = step(0)

        ready = threading.Event()
        hold: list[Any] = []

        def victim() -> None:
            hold.extend(hold_next_write(logs[0]))
            ready.set()
            try:
                logs[0].append_many("victim", [step(1), step(2)], event_ids=["v1", "v2"])
            except BaseException as exc:  # any kind is recorded: the assert below names it
                failed.append(exc)

        t = threading.Thread(target=victim)
        t.start()
        assert ready.wait(30)
        holding, release, pid = hold
        assert holding.wait(30)
        for k in (1, 2):
            for i in range(5):
                acked[(f"w{k}", logs[k].append(f"w{k}", step(i)))] = step(i)
        assert [row[0] for row in schema.open_transactions()] == pid
        assert schema.terminate(pid[0])
        release.set()
        t.join()
        assert len(failed) == 1 and isinstance(failed[0], eventlog.EventLogError), failed
        assert "connection" in str(failed[0])
        assert logs[1].head("victim") == 1
        assert logs[0].append_many("victim", [step(1), step(2)], event_ids=["v1", "v2"]) == [2, 3]
        acked.update({("victim", 2): step(1), ("victim", 3): step(2)})
    finally:
        for log in logs:
            log.close()
    schema.check(acked, key=key)


def test_a_backend_terminated_during_its_commit_leaves_all_or_nothing(schema: Schema) -> None:
    """A COMMIT that runs long (a user's deferred trigger) and whose backend is terminated: the
    append raises, not made again (once the COMMIT is sent, whether it committed is not known),
    and the batch is there whole or not at all."""
    with eventlog.open(schema.url()) as log:
        log.append("r", step(0))
        schema.sql(
            f'CREATE FUNCTION "{schema.name}".slow() RETURNS trigger AS $$ BEGIN PERFORM pg_sleep(1); RETURN NEW; END '
            "$$ LANGUAGE plpgsql"
        )
        schema.sql(
            f'CREATE CONSTRAINT TRIGGER slow AFTER INSERT ON "{schema.name}".events DEFERRABLE INITIALLY DEFERRED '
            f'FOR EACH ROW EXECUTE FUNCTION "{schema.name}".slow()'
        )
        failed: list[BaseException] = []

        def append() -> None:
            try:
                log.append_many("r", [step(1), step(2), step(3)], event_ids=["a", "b", "c"])
            except BaseException as exc:  # any kind is recorded: the assert below names it
                failed.append(exc)

        t = threading.Thread(target=append)
        t.start()
        committing: list[tuple[Any, ...]] = []
        for _ in range(500):
            committing = schema.sql(
                "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND wait_event = 'PgSleep'", schema.app
            )
            if committing:
                break
            time.sleep(0.01)
        assert len(committing) == 1 and schema.terminate(committing[0][0])
        t.join()
        assert len(failed) == 1 and isinstance(failed[0], eventlog.EventLogError), failed
        schema.sql(f'DROP TRIGGER slow ON "{schema.name}".events')
        assert log.head("r") in (1, 4)  # here: aborted in the trigger, before the commit record
        assert log.append_many("r", [step(1), step(2), step(3)], event_ids=["a", "b", "c"]) == [2, 3, 4]
    schema.check({("r", 1): step(0), ("r", 2): step(1), ("r", 3): step(2), ("r", 4): step(3)})


def test_statements_failing_inside_a_message_leave_no_transaction_open(schema: Schema) -> None:
    """A statement timeout (the URL's options) that cancels a statement inside a message, with
    NOTICEs and WARNINGs raised on the way: the append raises and leaves nothing, the
    connection goes back to the pool with no transaction open, the others read back equal."""
    eventlog.open(schema.url()).close()
    schema.sql(
        f'CREATE FUNCTION "{schema.name}".slow() RETURNS trigger AS $$ BEGIN PERFORM pg_sleep(random() * 0.08); '
        "RAISE NOTICE 'a notice ü'; RAISE WARNING 'a warning ''\\ %%'; RETURN NEW; END $$ LANGUAGE plpgsql"
    )
    schema.sql(
        f'CREATE TRIGGER slow BEFORE INSERT ON "{schema.name}".feed FOR EACH ROW EXECUTE FUNCTION "{schema.name}".slow()'
    )
    log = eventlog.open(schema.url("options=-c%20statement_timeout%3D50"))
    acked: dict[tuple[str, int], StepCompleted] = {}
    raised: list[tuple[str, list[str]]] = []
    try:

        def write(k: int) -> None:
            for i in range(12):
                run_id, ids = f"r{k % 2}", [f"{k}-{i}-{j}" for j in range(1 + i % 3)]
                events = [step(i, k=k, j=j) for j in range(len(ids))]
                try:
                    offsets = log.append_many(run_id, events, event_ids=ids)
                except eventlog.EventLogError as exc:
                    assert "statement timeout" in str(exc)
                    raised.append((run_id, ids))
                    continue
                acked.update({(run_id, o): e for o, e in zip(offsets, events, strict=True)})

        threads = [threading.Thread(target=write, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert acked and raised
        assert not schema.open_transactions()
    finally:
        log.close()
    schema.sql(f'DROP TRIGGER slow ON "{schema.name}".feed')
    schema.check(acked)
    with eventlog.open(schema.url()) as log:
        stored = {(run_id, e.event_id) for run_id in log.runs() for e in log.read(run_id)}
    assert not any((run_id, i) in stored for run_id, ids in raised for i in ids)


def test_a_value_of_hundreds_of_mib_is_written_and_read_back(schema: Schema) -> None:
    """A value written as a hex literal takes twice its size in the message, and the server
    copies it again: a 300 MiB snapshot (within the snapshot limit) failed with "invalid memory
    alloc request size". Large values go as binary parameters."""
    from eventlog.store.postgres import PostgresStore, split_dsn

    dsn, name = split_dsn(schema.url())
    store = PostgresStore(dsn, schema=name)
    try:
        value = os.urandom(1 << 20) * 300
        key = (1).to_bytes(8, "big") + (1).to_bytes(8, "big") + b"tag"
        store.write(lambda txn: txn.put("snapshots", key, value))
        assert store.read(lambda txn: txn.get("snapshots", key)) == value
    finally:
        store.close()


WRITER = """
import json, sys, time, eventlog
from eventlog.events import StepCompleted
url, k, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
while True:
    try:
        log = eventlog.open(url)
        break
    except eventlog.EventLogError:
        time.sleep(0.05)
for i in range(n):
    run_id = "shared" if i % 3 == 0 else f"w{k}-é'\\\\$%;"
    size = 1 + i % 4
    ids = [f"{k}-{i}-{j}-ü" for j in range(size)]
    events = [StepCompleted(node="n", superstep=i, update={"k": k, "j": j}) for j in range(size)]
    for attempt in range(100):
        try:  # the same ids again: an append that committed before its answer was lost is not made twice
            offsets = log.append_many(run_id, events, event_ids=ids)
            break
        except eventlog.EventLogError:
            time.sleep(0.01)
    print(json.dumps([run_id, ids, offsets]), flush=True)
log.close()
"""


def test_eight_writer_processes_and_a_follower_while_backends_are_terminated(schema: Schema) -> None:
    """Eight writer processes (their own runs and one shared) while their backends are
    terminated at random, idle or mid-transaction: every acknowledged batch is at its offsets,
    no id is written twice, the follower got exactly the feed, and the log verifies."""
    eventlog.open(schema.url()).close()
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, schema.url(), str(k), "40"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        for k in range(8)
    ]
    stop = threading.Event()
    kills = [0]

    def kill() -> None:
        rng = random.Random(20261205)
        while not stop.wait(rng.uniform(0, 0.1)):
            pids = schema.backends()
            if pids:
                kills[0] += schema.terminate(rng.choice(pids))

    got: list[tuple[int, str, int]] = []
    reader = eventlog.open(schema.url(), readonly=True)
    try:
        follower = threading.Thread(
            target=lambda: got.extend((e.position, e.run_id, e.offset) for e in reader.follow(timeout=10, poll=0.05))
        )
        killer = threading.Thread(target=kill)
        follower.start()
        killer.start()
        outs = [w.communicate(timeout=300)[0] for w in writers]
        stop.set()
        killer.join()
        follower.join()
    finally:
        stop.set()
        reader.close()
    assert [w.returncode for w in writers] == [0] * 8 and kills[0] > 0
    lines = [json.loads(line) for out in outs for line in out.decode().splitlines()]
    assert len(lines) == 8 * 40
    with eventlog.open(schema.url()) as log:
        for run_id, ids, offsets in lines:
            assert [log.entry(run_id, o).event_id for o in offsets] == ids
        stored = [e.event_id for r in log.runs() for e in log.read(r)]
        assert len(stored) == len(set(stored)) == sum(len(ids) for _, ids, _ in lines)
        feed = schema.check({})
        assert got == [(e.position, e.run_id, e.offset) for e in feed]


def test_a_schema_name_kept_for_the_system_is_refused_by_name() -> None:
    assert DSN is not None
    with pytest.raises(eventlog.errors.InvalidArgumentError, match="pg_"):
        eventlog.open(f"{DSN}{'&' if '?' in DSN else '?'}schema=pg_log")


@pytest.mark.parametrize(
    ("where", "cause"),
    [
        ("postgresql://postgres@127.0.0.1:1/test", "Connection refused"),  # nothing listens there
        ("postgresql://no_such_role_here@{host}/test", 'role "no_such_role_here" does not exist'),
        ("postgresql://postgres@{host}/no_such_database_here", 'database "no_such_database_here" does not exist'),
    ],
    ids=["refused", "role", "database"],
)
def test_a_server_that_cannot_be_reached_is_named_with_its_cause(where: str, cause: str) -> None:
    """Opening a log on a server that refuses, or with a role or database it does not have, raises
    NotALogError naming the server's own reason (the pool retried for 30 s, then named none)."""
    assert DSN is not None
    from urllib.parse import urlsplit

    with pytest.raises(eventlog.errors.NotALogError) as exc:
        eventlog.open(where.format(host=urlsplit(DSN).netloc.rpartition("@")[2]))
    assert "cannot connect to PostgreSQL" in str(exc.value) and cause in str(exc.value)


def test_a_read_of_one_statement_is_one_message(schema: Schema, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read function of one statement runs as that statement alone: one message to the server,
    and no COMMIT after it (there is no transaction to end). A read of several statements is a
    transaction: its BEGIN goes with the first, and a COMMIT ends it."""
    from eventlog.store import _pg_session

    sent: list[str] = []
    send = _pg_session.Session._exec

    def counted(session: Any, text: str) -> Any:
        sent.append(text)
        return send(session, text)

    monkeypatch.setattr(_pg_session.Session, "_exec", counted)
    with eventlog.open(schema.url()) as log:
        log.append("r", step(1))
        for _ in range(2):  # the first of each learns that it reads with one statement
            sent.clear()
            assert log.head("r") == 1
        assert len(sent) == 1 and "COMMIT" not in sent[0] and not sent[0].startswith("BEGIN")
        for _ in range(2):
            sent.clear()
            assert log.entry("r", 1).event == step(1)
        assert sent[0].startswith("BEGIN") and sent[-1] == "COMMIT"
