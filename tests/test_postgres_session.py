"""The PostgreSQL store's messages (store/_pg_session.py) in a hostile environment: backends
terminated while idle, between the round trips of an append and during its COMMIT; settings
reset behind the store (`DISCARD ALL`, `RESET ALL`); client encodings other than UTF-8;
statements failing inside a message; values of hundreds of MiB; eight writer processes of one
run. After each: what returned reads back equal, what raised is not there, `verify` is clean,
the feed holds every position once in order, and no transaction is left open."""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator
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


def test_a_schema_name_kept_for_the_system_is_refused_by_name() -> None:
    assert DSN is not None
    with pytest.raises(eventlog.errors.InvalidArgumentError, match="pg_"):
        eventlog.open(f"{DSN}{'&' if '?' in DSN else '?'}schema=pg_log")
