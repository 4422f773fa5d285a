"""The PostgreSQL store: a log in one schema of a PostgreSQL database, for executors on several machines.

Every table of the log is a relation with real columns (store/_pg_layout.py, docs/format.md,
"PostgreSQL"), keyed by run number first wherever it belongs to a run. There is no global
lock: a write transaction locks the `runs` rows it reads, so appends to one run serialize and
appends to different runs run side by side; feed positions come from the transaction id and
readers read the feed only below the oldest transaction still in flight
(docs/architecture.md, "PostgreSQL without a global lock"). Reads run in REPEATABLE READ
snapshots and never block. Commits are durable when PostgreSQL's `synchronous_commit` is on
(its default).

    log = eventlog.open("postgresql://user@host/db")            # schema "eventlog"
    log = eventlog.open("postgresql://user@host/db?schema=runs")  # another log in the same database
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit, urlunsplit

from .. import _limits
from ..errors import (
    ClosedError,
    EventLogError,
    InvalidArgumentError,
    LogFullError,
    NoLogError,
    NotALogError,
    ReadOnlyError,
)
from ._base import KeyExistsError
from ._pg_channel import Channel
from ._pg_layout import LAYOUT_VERSION, POSITION_SHIFT, TABLES, horizon_sql, layout_of, migrate_kv_sql, schema_sql
from ._pg_session import READ_BEGIN, SETTINGS, Session, SeveralStatements, write_begin
from ._pg_txn import PgTxn

T = TypeVar("T")

_log = logging.getLogger("eventlog")


def _import_psycopg() -> Any:
    try:
        import psycopg
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise EventLogError("the PostgreSQL store needs psycopg 3: pip install 'eventlog[postgres]'") from exc
    return psycopg


def split_dsn(dsn: str) -> tuple[str, str]:
    """Take the `schema` query parameter out of a connection URL: (dsn, schema).

    `postgresql+psycopg://` (SQLAlchemy's spelling) and any case of the scheme are read as
    `postgresql://`. An empty `schema=` is refused rather than read as the default. The other
    parameters are passed on as they were written: libpq reads `%20` as a space and `+` as a
    plus, so a query decoded and encoded again (`options=-c%20name%3Dvalue` made
    `-c+name=value`) would not be the one given."""
    parts = urlsplit(dsn)
    pairs = [pair for pair in parts.query.split("&") if pair]
    schemas = [unquote(v) for k, _, v in (pair.partition("=") for pair in pairs) if unquote(k) == "schema"]
    if len(schemas) > 1 or (schemas and not schemas[0]):
        raise InvalidArgumentError(f"give one non-empty schema= in the URL, not {schemas!r}")
    schema = schemas[0] if schemas else "eventlog"
    check_schema(schema)
    rest = "&".join(pair for pair in pairs if unquote(pair.partition("=")[0]) != "schema")
    return urlunsplit(parts._replace(scheme="postgresql", query=rest)), schema


def check_schema(schema: object) -> str:
    """A schema name PostgreSQL keeps exactly and lets a user make: ASCII letters, digits and
    underscores, not starting with a digit nor with `pg_` (kept for system schemas), at most 63
    bytes (PostgreSQL cuts longer names, so two would alias)."""
    limit = _limits.pg_identifier_size_bytes_max
    if (
        not isinstance(schema, str)
        or not schema
        or not schema.isascii()
        or not schema.replace("_", "").isalnum()
        or schema[0].isdigit()
        or schema[:3].lower() == "pg_"
        or len(schema) > limit
    ):
        raise InvalidArgumentError(
            f"schema name {schema!r} must be 1 to {limit} ASCII letters, digits and underscores, "
            "not starting with a digit nor with pg_"
        )
    return schema


class PostgresStore:
    """A log in a PostgreSQL schema (created if missing or empty; a schema holding another
    program's relations is refused; a schema of the older key-value layout is migrated when
    opened writable), over a bounded pool of connections (`pool_size`, 8 unless given):
    threads share them, and `close()` closes them all. `partitions` (new schemas only): split
    every table keyed by run into that many hash partitions by run."""

    durability = "sync"
    dense = False
    """Feed positions and run numbers only increase; they are not consecutive (docs/format.md, "PostgreSQL")."""

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "eventlog",
        readonly: bool = False,
        create: bool = True,
        pool_size: int | None = None,
        partitions: int = 0,
    ) -> None:
        self._psycopg = _import_psycopg()
        check_schema(schema)
        size = _limits.pg_pool_connections_max if pool_size is None else pool_size
        if type(size) is not int or not 1 <= size <= 1024:
            raise InvalidArgumentError(f"pool_size must be an integer from 1 to 1024, not {pool_size!r}")
        if type(partitions) is not int or not 0 <= partitions <= 1024:
            raise InvalidArgumentError(f"partitions must be an integer from 0 to 1024, not {partitions!r}")
        self.dsn = dsn
        self.schema = schema
        self.readonly = readonly
        self.pool_size = size
        """Connections kept open at most."""
        self._partitions = partitions
        self._xid_offset = 0
        self._local = threading.local()  # the session of a write in progress on this thread
        self._channel = f"eventlog_{schema}"[: _limits.pg_identifier_size_bytes_max]
        self._channel_io = Channel(self._psycopg, dsn, self._channel, schema, _translate)
        self._closed = False
        self._lock_id = zlib.crc32(f"eventlog:{schema}".encode())
        self._write_begin = write_begin(schema)
        try:
            import psycopg_pool
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise EventLogError("the PostgreSQL store needs psycopg_pool: pip install 'eventlog[postgres]'") from exc
        self._pool_errors = (psycopg_pool.PoolTimeout, psycopg_pool.PoolClosed)
        self._pool = psycopg_pool.ConnectionPool(
            dsn,
            min_size=1,
            max_size=size,
            # transactions are begun and ended explicitly, statements prepared by name (_pg_session.Session)
            kwargs={"autocommit": True, "prepare_threshold": None},
            configure=_configure,
            open=False,
            timeout=_POOL_TIMEOUT_SECONDS,
        )
        try:
            _reach(self._psycopg, dsn)  # a server that cannot be reached is said at once, with its cause
            self._pool.open(wait=True, timeout=_POOL_TIMEOUT_SECONDS)
            self._create(create)
        except (self._psycopg.Error, *self._pool_errors) as exc:
            self._pool.close()
            raise NotALogError(f"cannot connect to PostgreSQL: {exc}".strip()) from None
        except BaseException:
            self._pool.close()
            raise

    # -- opening -----------------------------------------------------------------------

    def _create(self, create: bool) -> None:
        """Open the schema's log, migrate one of the key-value layout, or make one in an empty or
        missing schema. A schema that holds other relations but no log belongs to another
        program: it is refused, never written."""
        with self._pool.connection() as conn, conn.transaction():
            found = _holds_log(conn, self.schema)
            if found == "log":
                return self._open_layout(conn)
            if self.readonly or not create:
                if found == "kv":
                    raise NotALogError(
                        f"schema {self.schema!r} holds a log in the key-value layout of eventlog before "
                        "the relational layout; open it once writable to migrate it"
                    )
                raise NoLogError(f"no log in schema {self.schema!r}")
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._lock_id,))
            found = _holds_log(conn, self.schema)  # another process may have made or migrated it meanwhile
            if found == "log":
                return self._open_layout(conn)
            if found == "kv":
                _log.warning(
                    "eventlog: schema %r holds a log in the key-value layout; migrating it to the "
                    'relational layout (docs/format.md, "PostgreSQL")',
                    self.schema,
                )
                for statement in migrate_kv_sql(self.schema):
                    conn.execute(statement)
            else:
                for statement in schema_sql(self.schema, self._partitions):
                    conn.execute(statement)
            self._open_layout(conn)

    def _open_layout(self, conn: Any) -> None:
        rows = layout_of(conn, self.schema)
        if rows.get("version") != LAYOUT_VERSION:
            raise NotALogError(
                f"schema {self.schema!r} holds a log of relational layout {rows.get('version')}; "
                f"this eventlog reads layout {LAYOUT_VERSION}"
            )
        self._xid_offset = _checked_xid_offset(conn, self.schema, rows.get("xid_offset"))

    # -- transactions ------------------------------------------------------------------

    def read(self, fn: Callable[[PgTxn], T]) -> T:
        """Run `fn` in a REPEATABLE READ snapshot. When it met feed positions above the oldest
        transaction still in flight (which may yet commit a smaller one), it waits up to
        `_SETTLE_SECONDS` for those to settle and runs again; past that it returns what was settled.

        A function that reads with one statement needs no transaction: it runs first as one
        statement by itself (one round trip, not a BEGIN and a COMMIT too), and again in a
        transaction the first time it asks for a second, as does its code from then on."""
        self._check_open()
        current: Session | None = getattr(self._local, "session", None)
        if current is not None:  # a read inside this thread's write: see that transaction
            return fn(PgTxn(current, self.schema, self._xid_offset, write=False))
        deadline = time.monotonic() + _SETTLE_SECONDS
        lost = 0
        while True:
            try:
                with self._pool.connection() as conn:
                    try:
                        return self._read_on(conn, fn, deadline)
                    except self._psycopg.Error as exc:
                        if self._broken(conn):  # a read commits nothing: made again on another connection
                            raise _Lost(exc) from None
                        raise
            except _Lost as exc:
                lost += 1
                if lost > self.pool_size:  # every connection the pool held went, and a new one too
                    raise _translate(self._psycopg, exc.error) from None
            except self._psycopg.Error as exc:
                raise _translate(self._psycopg, exc) from None
            except self._pool_errors as exc:
                raise EventLogError(f"PostgreSQL: no connection from the pool: {exc}".strip()) from None

    def _read_on(self, conn: Any, fn: Callable[[PgTxn], T], deadline: float) -> T:
        """`read` on one connection of the pool."""
        gone = self._psycopg.errors.InvalidSqlStatementName
        code = getattr(fn, "__code__", None)
        again = True
        while True:
            once = code is not None and code not in _SEVERAL
            session = Session(conn, READ_BEGIN, once=once)
            txn = PgTxn(session, self.schema, self._xid_offset, write=False)
            try:
                result = fn(txn)
                session.end()
            except SeveralStatements:
                if len(_SEVERAL) >= _SQL_CODES_HELD:
                    _SEVERAL.clear()
                _SEVERAL.add(code)
                continue
            except gone:  # deallocated behind the store (DISCARD ALL): prepared again once
                self._rollback(conn)
                if not again:
                    raise
                again = False
                continue
            except BaseException:
                self._rollback(conn)
                raise
            if not txn.held or time.monotonic() >= deadline or not self._settle(conn, txn.held, deadline):
                return result

    def _broken(self, conn: Any) -> bool:
        """Whether the connection went (the server ended it, its socket closed)."""
        return bool(conn.pgconn.status != self._psycopg.pq.ConnStatus.OK)

    def _rollback(self, conn: Any) -> None:
        """End a transaction a failure left open (a broken connection leaves the pool)."""
        if conn.info.transaction_status != self._psycopg.pq.TransactionStatus.IDLE:
            with contextlib.suppress(self._psycopg.Error):
                conn.execute("ROLLBACK")

    def _settle(self, conn: Any, position: int, deadline: float) -> bool:
        """Wait until every writer of the log that could give a position below `position` ended;
        False when the deadline came first."""
        xid = (position >> POSITION_SHIFT) - self._xid_offset
        while True:
            conn.isolation_level = None
            conn.read_only = None
            (horizon,) = conn.execute(f"SELECT {horizon_sql(self.schema)}").fetchone()
            if int(horizon) > xid:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(_SETTLE_POLL_SECONDS)

    def write(self, fn: Callable[[PgTxn], T]) -> T:
        if self.readonly:
            raise ReadOnlyError(f"schema {self.schema!r} was opened read-only")
        self._check_open()
        errors = self._psycopg.errors
        lost = 0
        for attempt in range(_WRITE_ATTEMPTS):
            try:
                return self._write_once(fn)
            except (errors.DeadlockDetected, errors.SerializationFailure, errors.InvalidSqlStatementName) as exc:
                # made again; a statement deallocated behind the store is prepared again (`Session.run`)
                failure: Exception = exc
            except errors.UniqueViolation as exc:
                if exc.diag.table_name != "runs":
                    raise _translate(self._psycopg, exc) from None
                failure = exc  # another writer made the run first: made again, it sees the run
            except _Lost as exc:
                failure = exc.error  # nothing committed: made again on another connection
                lost += 1
                if lost > self.pool_size:
                    break
                continue
            except self._psycopg.Error as exc:
                raise _translate(self._psycopg, exc) from None
            except self._pool_errors as exc:
                raise EventLogError(f"PostgreSQL: no connection from the pool: {exc}".strip()) from None
            time.sleep(0.001 * attempt)
        raise _translate(self._psycopg, failure)

    def _write_once(self, fn: Callable[[PgTxn], T]) -> T:
        with self._pool.connection() as conn:
            session = Session(conn, self._write_begin)
            self._local.session = session
            try:
                try:
                    # The BEGIN goes with the first statement (a read, or the writes of a
                    # transaction that reads nothing), the buffered writes with the COMMIT.
                    txn = PgTxn(session, self.schema, self._xid_offset, write=True)
                    result = fn(txn)
                    txn.commit()
                except BaseException as exc:
                    self._rollback(conn)
                    if isinstance(exc, self._psycopg.Error) and not session.committing and self._broken(conn):
                        # The connection went before the COMMIT was sent: the server rolled the
                        # transaction back. After it, whether it committed is not known: raised.
                        raise _Lost(exc) from None
                    raise
                if txn.wrote:
                    self._channel_io.notify_soon()
                return result
            finally:
                self._local.session = None

    def sync(self) -> None:
        self._check_open()

    def listen(self, callback: Callable[[], None]) -> None:
        """Call `callback` after every commit to this log by any process, until `close()`
        (`_pg_channel.Channel.listen`)."""
        self._check_open()
        self._channel_io.listen(callback)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._pool.close()
        self._channel_io.close()

    def connections(self) -> int:
        """Connections the pool holds open now."""
        return int(self._pool.get_stats().get("pool_size", 0))

    def stats(self) -> dict[str, int]:
        self._check_open()
        s = self.schema
        sizes = " + ".join(f"pg_total_relation_size('\"{s}\".{name}')" for name in TABLES)
        counts = ", ".join(f'(SELECT count(*) FROM "{s}".{name})' for name in TABLES)
        with self._pool.connection() as conn:
            row = conn.execute(f"SELECT {sizes}, {counts}").fetchone()
        out = {"map_size_bytes": 0, "bytes_on_disk": int(row[0])}
        out.update({f"entries_{name}": int(n) for name, n in zip(TABLES, row[1:], strict=True)})
        return out

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("the log is closed; open it again with eventlog.open(...)")

    @staticmethod
    def drop_schema(dsn: str, schema: str) -> None:
        """Remove a log's schema and everything in it (used by tests and `delete`-all tooling)."""
        psycopg = _import_psycopg()
        check_schema(schema)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


class _Lost(Exception):
    """A pooled connection went while nothing sent on it could have committed: the operation is
    made again on another connection (at most once per connection the pool can hold, and one)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def _configure(conn: Any) -> None:
    """Each pooled connection plans its prepared statements once: their plans do not depend on
    the keys bound to them, and planning again on every call costs more than running them. Its
    string literals are standard, and its client encoding UTF-8 whatever the URL, the role or
    the database says: the store reads names as text only at the open (under SQL_ASCII psycopg
    gives bytes), and a server notice in any language converts to it (`_pg_session.SETTINGS`,
    made again after a message failed). Nothing reaches the server before these."""
    for statement in SETTINGS:
        conn.execute(statement)


_POOL_TIMEOUT_SECONDS = 30.0
"""How long an operation waits for a free connection of the pool."""


def _reach(psycopg: Any, dsn: str) -> None:
    """Connect once and close: the error of a server that refuses, a wrong role or database, or
    a host silent for `_POOL_TIMEOUT_SECONDS` (unless the URL sets `connect_timeout`), where the
    pool would retry for that long and then name none of them."""
    given = psycopg.conninfo.conninfo_to_dict(dsn)
    timeout = {} if "connect_timeout" in given else {"connect_timeout": int(_POOL_TIMEOUT_SECONDS)}
    psycopg.connect(dsn, autocommit=True, **timeout).close()


_SETTLE_SECONDS = 1.0
_SEVERAL: set[Any] = set()
"""The code of the read functions that asked for a second statement: run in a transaction."""
_SQL_CODES_HELD = 4096
_POSITION_XIDS_MAX = 1 << (62 - POSITION_SHIFT)  # a transaction's base below 2^62: half of bigint's room kept


def _holds_log(conn: Any, schema: str) -> str | None:
    """ "log" when the schema holds a log, "kv" when it holds one of the key-value layout,
    None when it holds no relation at all. NotALogError, naming a few of them, when it
    holds relations but no log."""
    found = conn.execute(
        "SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f') AND NOT c.relispartition "
        "ORDER BY c.relname",
        (schema,),
    ).fetchall()
    if not found:
        return None
    names = {name for name, _ in found}
    if "layout" in names and set(TABLES) <= names:
        return "log"
    if ("kv", "r") in found:
        columns = conn.execute(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
            "WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
            (f'"{schema}".kv',),
        ).fetchall()
        if columns == [("tbl", "smallint"), ("k", "bytea"), ("v", "bytea")]:
            return "kv"
    listed = ", ".join(name for name, _ in found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")
    raise NotALogError(
        f"schema {schema!r} holds relations of another program ({listed}) and no eventlog log; "
        "give eventlog.open another schema (?schema=...)"
    )


def _checked_xid_offset(conn: Any, schema: str, value: Any) -> int:
    """The layout's xid offset, refused (NotALogError) unless the positions it gives from now on
    lie above every feed position held and far below bigint's end: an offset set back would give
    positions below held ones (the feed out of order, entries skipped), one set forward too far
    would overflow the positions and the feed's horizon (docs/format.md, "PostgreSQL")."""
    (next_xid, greatest) = conn.execute(
        f'SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint, (SELECT max(position) FROM "{schema}".feed)'
    ).fetchone()
    if type(value) is not int or value < 0:
        raise NotALogError(f"schema {schema!r}: the layout's xid_offset is {value!r}, not a count from 0")
    least = 0 if greatest is None else max(0, (greatest >> POSITION_SHIFT) + 1 - next_xid)
    if value < least:
        raise NotALogError(
            f"schema {schema!r}: the layout's xid_offset {value} would give feed positions below those held "
            f"(up to {greatest}); it must be at least {least}"
        )
    if next_xid + value >= _POSITION_XIDS_MAX:
        raise NotALogError(
            f"schema {schema!r}: the layout's xid_offset {value} would give feed positions past 2**62, near "
            "the end of their 63 bits"
        )
    return value


"""How long a read of the feed waits for older transactions to end before it returns what was settled."""

_SETTLE_POLL_SECONDS = 0.002

_WRITE_ATTEMPTS = 32
"""Times a write transaction is made again after a deadlock or a run made by another writer meanwhile."""


def _translate(psycopg: Any, exc: Exception) -> EventLogError:
    """Every psycopg error as a named eventlog error."""
    if isinstance(exc, (psycopg.errors.DiskFull, psycopg.errors.ProgramLimitExceeded)):
        return LogFullError(f"PostgreSQL: {exc}".strip())
    if isinstance(exc, psycopg.errors.UniqueViolation):  # only `insert` adds a row without ON CONFLICT
        return KeyExistsError(f"PostgreSQL: {exc}".strip())
    if isinstance(exc, psycopg.OperationalError):
        return EventLogError(f"PostgreSQL connection failed: {exc}".strip())
    return EventLogError(f"PostgreSQL: {type(exc).__name__}: {exc}".strip())
