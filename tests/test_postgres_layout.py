"""The PostgreSQL store's relational layout: writers of different runs side by side, a feed that
stays in order and complete while a transaction is held open or its backend killed, and the
migration of a schema in the key-value layout of 923256f (tests/fixtures/pg-kv-923256f.sql)."""

from __future__ import annotations

import json
import os
import re
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import pytest

import eventlog
from eventlog.events import StepCompleted

DSN = os.environ.get("EVENTLOG_TEST_PG_DSN")
pytestmark = pytest.mark.skipif(not DSN, reason="set EVENTLOG_TEST_PG_DSN to run the PostgreSQL store's tests")
FIXTURES = Path(__file__).parent / "fixtures"
WRITERS = 8
EACH = int(os.environ.get("EVENTLOG_TEST_PG_APPENDS", "5"))
T = TypeVar("T")


@pytest.fixture
def schema() -> Iterator[str]:
    from eventlog.store.postgres import PostgresStore

    assert DSN is not None
    name = f"t_{uuid.uuid4().hex[:12]}"
    yield name
    PostgresStore.drop_schema(DSN, name)


def _store(schema: str, **kw: Any) -> Any:
    from eventlog.store.postgres import PostgresStore

    assert DSN is not None
    return PostgresStore(DSN, schema=schema, **kw)


def _held_store(schema: str) -> Any:
    """A real PostgreSQL store whose next write made by the thread `hold(fn)` runs in holds its
    transaction open (after the writer took its positions and wrote, before the commit) until
    released. Writes of other threads (the log's dictionary training, say) go through."""
    from eventlog.store.postgres import PostgresStore

    class Held(PostgresStore):
        hold_thread: int | None = None
        holding = threading.Event()
        release = threading.Event()
        backend_pid = 0

        def hold(self, fn: Callable[[], Any]) -> Callable[[], None]:
            def run() -> None:
                self.hold_thread = threading.get_ident()
                fn()

            return run

        def write(self, fn: Callable[[Any], T]) -> T:
            if threading.get_ident() != self.hold_thread:
                return super().write(fn)
            self.hold_thread = None

            def held(txn: Any) -> T:
                result = fn(txn)
                txn.flush()
                self.backend_pid = txn._session.connection.info.backend_pid
                self.holding.set()
                assert self.release.wait(60)
                return result

            return super().write(held)

    assert DSN is not None
    return Held(DSN, schema=schema)


def step(i: int) -> StepCompleted:
    return StepCompleted(node="n", superstep=i)


def test_a_held_transaction_holds_the_feed_back_and_nothing_is_skipped(schema: str) -> None:
    """8 writers append to their own runs while the first holds its transaction open: a follower
    of the feed gets every position once, in order, none skipped, the held ones included."""
    held = _held_store(schema)
    logs = [eventlog.open(held)] + [eventlog.open(_store(schema)) for _ in range(WRITERS - 1)]
    reader = eventlog.open(_store(schema, readonly=True))
    got: list[eventlog.Entry] = []
    total = WRITERS * EACH

    def follow() -> None:
        for entry in reader.follow(timeout=30, poll=0.05):
            got.append(entry)
            if len(got) == total:
                return

    try:
        follower = threading.Thread(target=follow)
        follower.start()
        first = threading.Thread(target=held.hold(lambda: logs[0].append_many("w0", [step(i) for i in range(EACH)])))
        first.start()
        assert held.holding.wait(30)
        others = [
            threading.Thread(target=lambda k=k: [logs[k].append(f"w{k}", step(i)) for i in range(EACH)])
            for k in range(1, WRITERS)
        ]
        for t in others:
            t.start()
        for t in others:
            t.join()
        seen = len(got)
        held_back = list(logs[1].feed())  # what a reader sees meanwhile: nothing above the held one
        assert all(e.run_id != "w0" for e in held_back)
        held.release.set()
        first.join()
        follower.join()
        positions = [e.position for e in got]
        assert len(got) == total and positions == sorted(set(positions))
        assert [(e.run_id, e.offset, e.position) for e in got] == [
            (e.run_id, e.offset, e.position) for e in logs[1].feed()
        ]
        w0 = [e.position for e in got if e.run_id == "w0"]
        assert w0 == positions[: len(w0)]  # the held writer began first: its positions come first
        assert seen <= total  # appends of others may have been seen only once the held one ended
        assert logs[1].verify().ok
    finally:
        held.release.set()
        for log in [*logs, reader]:
            log.close()


def test_a_transaction_held_outside_the_log_does_not_hold_its_feed_back(schema: str) -> None:
    """A transaction with an id held open elsewhere in the cluster (a plain session, a writer of
    the log in another schema) is no writer of this log: the feed gives every acknowledged
    entry at once, not the settled prefix once a second has passed."""
    import psycopg

    assert DSN is not None
    other = f"{schema}_o"
    held = _held_store(other)
    try:
        with psycopg.connect(DSN, autocommit=True) as plain, eventlog.open(_store(schema)) as log:
            plain.execute("BEGIN")
            plain.execute("SELECT pg_current_xact_id()")
            first = threading.Thread(target=held.hold(lambda: eventlog.open(held).append("x", step(0))))
            first.start()
            assert held.holding.wait(30)
            log.append_many("r", [step(i) for i in range(3)])
            log.append("s", step(9))
            assert [(e.run_id, e.offset) for e in log.feed()] == [("r", 1), ("r", 2), ("r", 3), ("s", 1)]
            assert [e.offset for e in log.follow(timeout=0)] == [1, 2, 3, 1]
            plain.execute("ROLLBACK")
            held.release.set()
            first.join()
    finally:
        held.release.set()
        held.close()
        from eventlog.store.postgres import PostgresStore

        PostgresStore.drop_schema(DSN, other)


def test_a_killed_backend_loses_nothing_acknowledged(schema: str) -> None:
    """A writer's backend terminated mid-transaction: that append fails, every acknowledged one
    of the other writers is there, the log verifies, and the killed writer appends again."""
    import psycopg

    assert DSN is not None
    held = _held_store(schema)
    logs = [eventlog.open(held)] + [eventlog.open(_store(schema)) for _ in range(3)]
    acked: list[tuple[str, int]] = []
    failed: list[BaseException] = []
    try:
        logs[0].append("victim", step(0))
        acked.append(("victim", 1))

        def victim() -> None:
            try:
                logs[0].append("victim", step(1))
            except BaseException as exc:  # any kind is recorded: the assert below names it
                failed.append(exc)

        t = threading.Thread(target=held.hold(victim))
        t.start()
        assert held.holding.wait(30)
        writers = [
            threading.Thread(
                target=lambda k=k: acked.extend((f"w{k}", logs[k].append(f"w{k}", step(i))) for i in range(EACH))
            )
            for k in range(1, 4)
        ]
        for w in writers:
            w.start()
        with psycopg.connect(DSN, autocommit=True) as conn:
            # With a timeout the call returns once the backend is gone: without one, the signal
            # may land after the held transaction's COMMIT was read, and the append commits.
            killed = conn.execute("SELECT pg_terminate_backend(%s, 10000)", (held.backend_pid,)).fetchone()
            assert killed == (True,)
        held.release.set()
        t.join()
        for w in writers:
            w.join()
        assert len(failed) == 1 and isinstance(failed[0], eventlog.EventLogError), failed
        log = logs[1]
        assert log.head("victim") == 1
        for run_id, offset in acked:
            assert log.entry(run_id, offset).run_id == run_id
        assert sorted((e.run_id, e.offset) for e in log.feed()) == sorted(acked)
        assert logs[0].append("victim", step(2)) == 2  # the pool gives the killed writer a new connection
        assert log.verify().ok
    finally:
        held.release.set()
        for log in logs:
            log.close()


def test_a_new_run_made_by_two_writers_at_once_is_made_once(schema: str) -> None:
    logs = [eventlog.open(_store(schema)) for _ in range(4)]
    barrier = threading.Barrier(4)
    offsets: list[int] = []

    def make(k: int) -> None:
        barrier.wait()
        offsets.append(logs[k].append("same", step(k)))

    try:
        threads = [threading.Thread(target=make, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(offsets) == [1, 2, 3, 4]
        assert logs[0].run_info("same").head == 4 and logs[0].verify().ok
    finally:
        for log in logs:
            log.close()


def _load_dump(schema: str) -> None:
    import psycopg

    assert DSN is not None
    lines = (FIXTURES / "pg-kv-923256f.sql").read_text().splitlines()
    sql = "\n".join(line for line in lines if not line.startswith("\\")).replace("kv_923256f", schema)
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(sql)


def test_a_schema_of_the_key_value_layout_is_migrated_and_reads_the_same(schema: str) -> None:
    _load_dump(schema)
    with pytest.raises(eventlog.errors.NotALogError, match="key-value layout"):
        _store(schema, readonly=True)
    expected = json.loads((FIXTURES / "pg-kv-923256f.json").read_text())
    log = eventlog.open(_store(schema))  # migrates
    try:
        assert log.runs() == expected["runs"]
        assert [[e.run_id, e.offset, e.position, e.event_id] for e in log.feed()] == expected["feed"]
        for run_id, run in expected["by_run"].items():
            info = log.run_info(run_id)
            assert msgspec.to_builtins(info) == run["info"]
            assert msgspec.to_builtins(list(log.read(run_id, after=info.base))) == run["entries"]
            for k, state in run["states"].items():
                assert msgspec.to_builtins(log.state_at(run_id, int(k))) == state
            assert [
                [cp.checkpoint_id, cp.offset, cp.reducer, cp.metadata] for cp in log.checkpoints.list(run_id)
            ] == run["checkpoints"]
        assert log.verify().ok
        last = expected["feed"][-1][2]
        log.append("chat", step(1))
        log.append("after", step(1))
        new = list(log.feed(after=last))
        assert [(e.run_id, e.offset) for e in new] == [
            ("chat", expected["by_run"]["chat"]["info"]["head"] + 1),
            ("after", 1),
        ]
        assert new[0].position > last
        numbers = {info.number for info in map(log.run_info, log.runs())}
        assert len(numbers) == len(log.runs())
        assert log.run_info("after").number > max(r["info"]["number"] for r in expected["by_run"].values())
        log.delete_run("after")
        assert log.verify().ok
    finally:
        log.close()


def test_delete_and_prune_are_set_based_and_leave_nothing(schema: str) -> None:
    import psycopg

    assert DSN is not None
    log = eventlog.open(_store(schema))
    try:
        log.append_many("a", [step(i) for i in range(20)], event_ids=[f"e{i}" for i in range(20)])
        log.append_many("b", [step(i) for i in range(3)])
        log.checkpoints.save("a", 10)
        log.prune("a", before=10)
        log.delete_run("b")
        with psycopg.connect(DSN) as conn:
            counts = {
                table: conn.execute(f'SELECT count(*) FROM "{schema}".{table}').fetchone()[0]
                for table in ("events", "feed", "event_ids")
            }
        assert counts == {"events": 10, "feed": 10, "event_ids": 20}  # ids stay indexed after a prune
        assert [e.offset for e in log.feed()] == list(range(11, 21))
        assert log.verify().ok
    finally:
        log.close()


def test_a_schema_partitioned_by_run_works_the_same(schema: str) -> None:
    import psycopg

    assert DSN is not None
    log = eventlog.open(_store(schema, partitions=4))
    try:
        for k in range(6):
            log.append_many(f"r{k}", [step(i) for i in range(3)])
        log.delete_run("r0")
        assert sorted(log.runs()) == [f"r{k}" for k in range(1, 6)]
        assert len(list(log.feed())) == 15 and log.verify().ok
        with psycopg.connect(DSN) as conn:
            parts = conn.execute(
                "SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhparent "
                "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = 'events'",
                (schema,),
            ).fetchone()[0]
            rows = conn.execute(f'SELECT count(DISTINCT tableoid) FROM "{schema}".events').fetchone()[0]
        assert parts == 4 and rows > 1
    finally:
        log.close()


def _set_layout(schema: str, name: str, value: int) -> None:
    import psycopg

    assert DSN is not None
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(f'UPDATE "{schema}".layout SET value = %s WHERE name = %s', (value, name))


@pytest.mark.parametrize("how", ["negative", "set back", "overflowing"])
def test_an_xid_offset_that_would_misplace_positions_is_refused_at_every_open(schema: str, how: str) -> None:
    """The offset that places a transaction's feed positions is read from the schema: one set back
    would give positions below those held (a run's entries out of order in the feed, entries
    skipped by a follower), one set forward near bigint's end would wrap the feed's horizon (a
    feed that never returns). Either is refused by a writable and a read-only open alike."""
    _store(schema).close()
    _set_layout(schema, "xid_offset", 1 << 30)  # as a migration sets it
    with eventlog.open(_store(schema)) as log:
        log.append_many("a", [step(i) for i in range(3)])
    _set_layout(schema, "xid_offset", {"negative": -1, "set back": 0, "overflowing": 1 << 43}[how])
    for readonly in (False, True):
        with pytest.raises(eventlog.errors.NotALogError, match="xid_offset"):
            _store(schema, readonly=readonly)


def test_an_xid_offset_set_forward_within_bounds_keeps_the_feed_in_order(schema: str) -> None:
    with eventlog.open(_store(schema)) as log:
        log.append_many("a", [step(i) for i in range(3)])
    _set_layout(schema, "xid_offset", 1 << 30)
    with eventlog.open(_store(schema)) as log:
        log.append("a", step(3))
        log.append("b", step(0))
        positions = [e.position for e in log.feed()]
        assert [(e.run_id, e.offset) for e in log.feed()] == [("a", 1), ("a", 2), ("a", 3), ("a", 4), ("b", 1)]
        assert positions == sorted(set(positions)) and positions[3] >> 20 >= 1 << 30
        assert log.verify().ok


def test_verify_names_a_run_whose_positions_went_back(schema: str) -> None:
    """A log written by a store that gave positions below those held (an xid offset set back
    before opens checked it): every entry still points at its position and back, but the feed
    would deliver the run out of order. verify names the entry."""
    from eventlog.store.postgres import PostgresStore

    class Unchecked(PostgresStore):  # opens as a store that trusted the layout's offset did
        def _open_layout(self, conn: Any) -> None:
            rows = dict(conn.execute(f'SELECT name, value FROM "{self.schema}".layout').fetchall())
            self._xid_offset = int(rows["xid_offset"])

    assert DSN is not None
    _store(schema).close()
    _set_layout(schema, "xid_offset", 1 << 30)
    with eventlog.open(_store(schema)) as log:
        log.append_many("a", [step(i) for i in range(2)])
    _set_layout(schema, "xid_offset", 0)
    with eventlog.open(Unchecked(DSN, schema=schema)) as log:
        log.append("a", step(2))
        problems = [(p.run_id, p.offset, p.kind) for p in log.verify().problems]
        assert problems == [("a", 3, "feed")]


def test_a_read_returns_at_its_deadline_whatever_the_horizon_says(schema: str) -> None:
    """A reader whose view of the feed's horizon is wrong (it says settled while a transaction
    still holds positions back) reads again only until its deadline, then returns the settled
    part: a feed never hangs."""
    from eventlog.store.postgres import PostgresStore

    class Wrong(PostgresStore):
        def _settle(self, conn: Any, position: int, deadline: float) -> bool:
            return True

    held = _held_store(schema)
    assert DSN is not None
    writer = eventlog.open(_store(schema))
    reader = eventlog.open(Wrong(DSN, schema=schema, readonly=True))
    first = threading.Thread(target=held.hold(lambda: eventlog.open(held).append("held", step(0))))
    try:
        first.start()
        assert held.holding.wait(30)
        writer.append("later", step(0))
        result: list[list[eventlog.Entry]] = []
        feed = threading.Thread(target=lambda: result.append(list(reader.feed())), daemon=True)
        feed.start()
        feed.join(60)
        assert not feed.is_alive() and result == [[]]  # "later" lies above the held one: not yet given
    finally:
        held.release.set()
        first.join()
        for closing in (reader, writer, held):
            closing.close()


@pytest.mark.parametrize("column", ["run", "off"])
def test_a_feed_row_of_a_negative_number_is_named_like_any_damaged_reference(schema: str, column: str) -> None:
    """The feed's `run` and `off` are bigint columns: one set negative reads as a u64 past
    2**63-1, which no row can hold: a reference to nothing, never a store error. A run number
    no run has is passed over by the feed (as a deleted run's positions are); an offset the run
    does not have stops the feed naming its position, and the feed goes on after it. verify
    names it either way, and repair removes it."""
    import psycopg

    assert DSN is not None
    with eventlog.open(_store(schema)) as log:
        log.append_many("a", [step(1), step(2)])
        log.append("b", step(1))
        position = [e.position for e in log.feed()][1]
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(f'UPDATE "{schema}".feed SET {column} = -1 WHERE off = 2')
    with eventlog.open(_store(schema)) as log:
        if column == "off":
            with pytest.raises(eventlog.errors.CorruptRecordError) as raised:
                list(log.feed())
            assert raised.value.position == position
        assert [(e.run_id, e.offset) for e in log.feed(after=position)] == [("b", 1)]
        report = log.verify()
        assert not report.ok and position in {p.position for p in report.problems}
        assert any(str(position) in done for done in log.repair())
        assert [(e.run_id, e.offset) for e in log.feed()] == [("a", 1), ("b", 1)]


def _two_events_and_a_raw_row(schema: str, table: str, row: str) -> None:
    """Run "a" with two events, then `row` inserted into `table` by hand, past the store."""
    import psycopg

    assert DSN is not None
    with eventlog.open(_store(schema)) as log:
        log.append_many("a", [step(1), step(2)])
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(f'INSERT INTO "{schema}".{table} VALUES {row}')


def _negative_rows(schema: str, table: str, column: str) -> int:
    """How many rows of `table` have a negative `column`."""
    import psycopg

    assert DSN is not None
    with psycopg.connect(DSN) as conn:
        found = conn.execute(f'SELECT count(*) FROM "{schema}".{table} WHERE {column} < 0').fetchone()
    assert found is not None
    return int(found[0])


@pytest.mark.parametrize(
    ("table", "row"),
    [
        ("run_numbers", "(-5, 'a'::bytea)"),
        ("event_ids", "(-5, 'zz'::bytea, 1)"),
        ("checkpoint_ids", "(-5, 'zz'::bytea, 1)"),
    ],
)
def test_an_index_row_of_a_negative_number_is_removed_by_repair(schema: str, table: str, row: str) -> None:
    """An index row whose bigint key column is negative reads as a key no row can hold (a u64
    past 2**63-1); repair removes it by its bytes, as any index row that names nothing, where
    it failed with a store error for the whole log."""
    _two_events_and_a_raw_row(schema, table, row)
    with eventlog.open(_store(schema)) as log:
        assert log.repair(), f"repair removed nothing of the {table} row"
        assert log.verify().ok
        assert [(e.run_id, e.offset) for e in log.feed()] == [("a", 1), ("a", 2)]
    assert _negative_rows(schema, table, "number" if table == "run_numbers" else "run") == 0


@pytest.mark.parametrize(
    ("table", "row"),
    [
        ("events", "(-5, 1, '\\x00'::bytea)"),
        ("checkpoints", "(-5, 1, '\\x00'::bytea)"),
        ("snapshots", "(-5, 1, 'tag'::bytea, '\\x00'::bytea)"),
        ("event_ids", "(-5, 'zz'::bytea, 1)"),
    ],
)
def test_a_row_of_a_negative_run_number_is_named_by_verify(schema: str, table: str, row: str) -> None:
    """A row of a table keyed by run whose bigint run is negative belongs to no run: `verify`
    names it as it names rows of any number no run has (it passed over it), and `repair`
    removes it by its bytes."""
    _two_events_and_a_raw_row(schema, table, row)
    with eventlog.open(_store(schema)) as log:
        assert [p.message for p in log.verify().problems] == [
            f"{table} holds rows of run number {(1 << 64) - 5}, which no run has; log.repair() removes them"
        ]
        assert log.repair()
        assert log.verify().ok
        assert [e.offset for e in log.read("a")] == [1, 2]
    assert _negative_rows(schema, table, "run") == 0


def test_a_run_record_under_the_empty_key_is_damage(schema: str) -> None:
    """No run id is empty and LMDB cannot hold an empty key, but a PostgreSQL row can: listing
    the runs names it as damage (`verify` reports it, the CLI exits 5), never as a caller's
    invalid id."""
    import psycopg

    assert DSN is not None
    with eventlog.open(_store(schema)) as log:
        log.append("a", step(1))
        log.append("b", step(1))
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(f"UPDATE \"{schema}\".runs SET key = ''::bytea WHERE key = 'b'::bytea")
    with eventlog.open(_store(schema)) as log:
        with pytest.raises(eventlog.errors.CorruptRecordError, match="empty key"):
            log.runs()
        assert [p.kind for p in log.verify().problems] == ["corrupt"]


@pytest.mark.parametrize(
    ("damage", "named"),
    [
        ('ALTER TABLE "{s}".feed DROP CONSTRAINT feed_pkey', "table feed has the primary key (), not (position)"),
        ('ALTER TABLE "{s}".event_ids DROP COLUMN off', "table event_ids has columns (run bigint, id bytea)"),
        ('ALTER TABLE "{s}".runs ALTER COLUMN value TYPE text', "table runs has columns (key bytea, value text)"),
        (
            'ALTER TABLE "{s}".checkpoint_ids DROP CONSTRAINT checkpoint_ids_pkey, ADD PRIMARY KEY (id, run)',
            "table checkpoint_ids has the primary key (id, run), not (run, id)",
        ),
    ],
)
def test_a_schema_whose_tables_lost_their_shape_is_refused_at_open(schema: str, damage: str, named: str) -> None:
    """The database keeps a run's order and an id's uniqueness by the primary keys: a schema with
    a key dropped or a column gone is refused by name when opened, never read as a log (a
    feed without its key delivered a position twice, and verify said nothing)."""
    import psycopg

    assert DSN is not None
    with eventlog.open(_store(schema)) as log:
        log.append("a", step(1))
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(damage.format(s=schema))
    with pytest.raises(eventlog.errors.NotALogError, match=re.escape(named)):
        eventlog.open(_store(schema))
