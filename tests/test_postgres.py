"""The PostgreSQL store through `eventlog.open(URL)`: two clients of one log, as on two machines."""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator

import pytest

import eventlog
from eventlog.events import StepCompleted, UserMessage

DSN = os.environ.get("EVENTLOG_TEST_PG_DSN")
pytestmark = pytest.mark.skipif(not DSN, reason="set EVENTLOG_TEST_PG_DSN to run the PostgreSQL store's tests")


@pytest.fixture
def url() -> Iterator[str]:
    from eventlog.store.postgres import PostgresStore

    assert DSN is not None
    schema = f"t_{uuid.uuid4().hex[:12]}"
    sep = "&" if "?" in DSN else "?"
    yield f"{DSN}{sep}schema={schema}"
    PostgresStore.drop_schema(DSN, schema)


def test_two_clients_share_one_log_with_fencing(url: str) -> None:
    a, b = eventlog.open(url), eventlog.open(url)
    try:
        assert a.append("run", UserMessage(content="from a")) == 1
        assert b.head("run") == 1
        assert b.append("run", UserMessage(content="from b"), expected_offset=1) == 2
        with pytest.raises(eventlog.ConflictError):
            a.append("run", UserMessage(content="stale"), expected_offset=1)
        assert [e.event.content for e in a.read("run")] == ["from a", "from b"]
        first, second = [e.position for e in b.feed()]
        assert 0 < first < second  # increasing, not consecutive (docs/format.md, "PostgreSQL")
    finally:
        a.close()
        b.close()


def test_threads_and_clients_append_without_loss(url: str) -> None:
    clients = [eventlog.open(url) for _ in range(2)]
    per_thread = 20

    def work(k: int) -> None:
        log = clients[k % 2]
        done = 0
        while done < per_thread:
            head = log.head("shared")
            try:
                log.append("shared", StepCompleted(node=f"n{k}", superstep=done), expected_offset=head)
                done += 1
            except eventlog.ConflictError:
                continue

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    log = clients[0]
    entries = list(log.read("shared"))
    assert [e.offset for e in entries] == list(range(1, 4 * per_thread + 1))
    assert sorted((e.event.node, e.event.superstep) for e in entries) == sorted(
        (f"n{k}", i) for k in range(4) for i in range(per_thread)
    )
    positions = [e.position for e in log.feed()]
    assert len(positions) == 4 * per_thread and positions == sorted(set(positions))
    assert log.verify().ok
    for c in clients:
        c.close()


def test_readonly_open_of_missing_schema_is_refused(url: str) -> None:
    with pytest.raises(eventlog.errors.NotALogError):
        eventlog.open(url, readonly=True)


# -- a schema of another program ---------------------------------------------------------------

_FOREIGN_SCHEMAS = {
    "table": ["CREATE TABLE {s}.orders (id int PRIMARY KEY, total numeric)", "INSERT INTO {s}.orders VALUES (1, 2)"],
    "empty table": ["CREATE TABLE {s}.audit (at timestamptz)"],
    "view": ["CREATE VIEW {s}.now_view AS SELECT now() AS at"],
    "sequence": ["CREATE SEQUENCE {s}.ids"],
    "kv of other columns": ["CREATE TABLE {s}.kv (key text PRIMARY KEY, value jsonb)"],
    "kv of other column types": ["CREATE TABLE {s}.kv (tbl int, k text, v text)"],
    "many tables": [f"CREATE TABLE {{s}}.t{i} (x int)" for i in range(8)],
}


def _relations(schema: str) -> list[tuple[str, str]]:
    import psycopg

    assert DSN is not None
    with psycopg.connect(DSN) as conn:
        rows = conn.execute(
            "SELECT c.relname, c.relkind::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s ORDER BY 1",
            (schema,),
        ).fetchall()
    return [(str(a), str(b)) for a, b in rows]


@pytest.mark.parametrize("statements", list(_FOREIGN_SCHEMAS.values()), ids=list(_FOREIGN_SCHEMAS))
@pytest.mark.parametrize("readonly", [False, True], ids=["writable", "readonly"])
def test_a_schema_of_another_program_is_refused_and_left_alone(url: str, statements: list[str], readonly: bool) -> None:
    import psycopg

    assert DSN is not None
    schema = url.rsplit("schema=", 1)[1]
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
        for statement in statements:
            conn.execute(statement.format(s=f'"{schema}"'))
    before = _relations(schema)
    with pytest.raises(eventlog.errors.NotALogError) as caught:
        eventlog.open(url, readonly=readonly)
    assert not isinstance(caught.value, eventlog.errors.NoLogError)
    message = str(caught.value)
    assert repr(schema) in message and before[0][0] in message, message
    assert _relations(schema) == before  # nothing was made in it


def test_a_schema_with_a_log_keeps_opening_beside_other_tables(url: str) -> None:
    import psycopg

    assert DSN is not None
    schema = url.rsplit("schema=", 1)[1]
    with eventlog.open(url) as log:
        log.append("r", UserMessage(content="kept"))
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(f'CREATE TABLE "{schema}".notes (x int)')
    for readonly in (False, True):
        with eventlog.open(url, readonly=readonly) as log:
            assert [e.event.content for e in log.read("r")] == ["kept"]


def test_an_empty_or_missing_schema_becomes_a_log(url: str) -> None:
    import psycopg

    assert DSN is not None
    schema = url.rsplit("schema=", 1)[1]
    with eventlog.open(url) as log:  # missing
        log.append("r", UserMessage(content="a"))
    from eventlog.store.postgres import PostgresStore

    PostgresStore.drop_schema(DSN, schema)
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    with pytest.raises(eventlog.errors.NoLogError):
        eventlog.open(url, readonly=True)
    with eventlog.open(url) as log:  # empty
        assert log.append("r", UserMessage(content="b")) == 1
    names = {name for name, _ in _relations(schema)}
    assert {"layout", "runs", "events", "feed", "events_pkey", "run_number"} <= names and "kv" not in names


def test_the_command_line_refuses_a_schema_of_another_program(url: str) -> None:
    import subprocess
    import sys

    import psycopg

    assert DSN is not None
    schema = url.rsplit("schema=", 1)[1]
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
        conn.execute(f'CREATE TABLE "{schema}".invoices (id int)')
    for argv in (["runs"], ["fork", "r", "--at", "1", "--as", "r2"]):
        p = subprocess.run(
            [sys.executable, "-m", "eventlog", "--log", url, *argv],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert p.returncode != 0 and "invoices" in p.stderr and "another program" in p.stderr, p.stderr
    assert [name for name, _ in _relations(schema)] == ["invoices"]


def test_statements_deallocated_behind_the_store_are_prepared_again(url: str) -> None:
    """The store prepares each statement once per connection; a session reset behind it
    (`DISCARD ALL`, as a pooler may send) costs the next read and write a retry, not an error."""
    from eventlog.store.postgres import PostgresStore, split_dsn

    dsn, schema = split_dsn(url)
    store = PostgresStore(dsn, schema=schema, pool_size=1)
    log = eventlog.open(store)
    try:
        log.append("r", UserMessage(content="one"))
        assert [e.event.content for e in log.read("r")] == ["one"]
        for then in ("read", "write"):
            with store._pool.connection() as conn:
                conn.execute("DISCARD ALL")
            if then == "read":
                assert [e.event.content for e in log.read("r")] == ["one"]
            else:
                log.append("r", UserMessage(content="two"))
        assert [e.event.content for e in log.read("r")] == ["one", "two"]
        assert log.verify().ok
    finally:
        log.close()


def test_a_read_of_several_statements_sees_one_snapshot(url: str) -> None:
    """A read function that asks for one statement runs as that statement alone (no BEGIN and
    COMMIT around it); one that asks for a second is run again in one REPEATABLE READ
    transaction, so that what its statements read is of one instant: here another client commits
    between its two statements, the first time it runs."""
    from eventlog.record.tables import RUNS

    a, b = eventlog.open(url), eventlog.open(url)
    try:
        a.append("x", StepCompleted(node="n", superstep=1))
        a.append("y", StepCompleted(node="n", superstep=1))
        calls = []
        commit = [True]

        def read(txn: object) -> tuple[bytes | None, bytes | None]:
            x = txn.get("runs", RUNS.key("x"))  # type: ignore[attr-defined]
            if commit.pop() if commit else False:
                b.append_many("x", [StepCompleted(node="n", superstep=2)])
                b.append_many("y", [StepCompleted(node="n", superstep=2)])
            calls.append(1)
            return x, txn.get("runs", RUNS.key("y"))  # type: ignore[attr-defined]

        x, y = a.store.read(read)
        assert len(calls) == 2  # the first run asked for a second statement: it ran again
        now = a.store.read(lambda txn: (txn.get("runs", RUNS.key("x")), txn.get("runs", RUNS.key("y"))))
        assert (x, y) == now  # both of one instant (after b's commits): none mixed with the other
        calls.clear()
        assert a.store.read(read) == now and len(calls) == 1  # its code now runs in a transaction at once
        one = a.store.read(lambda txn: txn.get("runs", RUNS.key("x")))
        assert one == now[0]
    finally:
        a.close()
        b.close()
