"""The PostgreSQL store: a log in one schema of a PostgreSQL database, for executors on several machines.

Every table of the log is a range of one key-value table, `(tbl, k, v)`, with `k` compared
byte by byte as LMDB compares keys. Write transactions take a transaction-scoped advisory
lock on the schema, so writers are serialized across machines exactly as LMDB serializes
them across processes; reads run in REPEATABLE READ snapshots and never block. Commits are
durable when PostgreSQL's `synchronous_commit` is on (its default).

    log = eventlog.open("postgresql://user@host/db")            # schema "eventlog"
    log = eventlog.open("postgresql://user@host/db?schema=runs")  # another log in the same database
"""

from __future__ import annotations

import contextlib
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

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
from ._base import TABLES, KeyExistsError

T = TypeVar("T")

_TABLE_IDS = {name: i for i, name in enumerate(TABLES)}


def _import_psycopg() -> Any:
    try:
        import psycopg
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise EventLogError("the PostgreSQL store needs psycopg 3: pip install 'eventlog[postgres]'") from exc
    return psycopg


def split_dsn(dsn: str) -> tuple[str, str]:
    """Take the `schema` query parameter out of a connection URL: (dsn, schema).

    `postgresql+psycopg://` (SQLAlchemy's spelling) and any case of the scheme are read as
    `postgresql://`. An empty `schema=` is refused rather than read as the default."""
    parts = urlsplit(dsn)
    query = parse_qsl(parts.query, keep_blank_values=True)
    schemas = [v for k, v in query if k == "schema"]
    if len(schemas) > 1 or (schemas and not schemas[0]):
        raise InvalidArgumentError(f"give one non-empty schema= in the URL, not {schemas!r}")
    schema = schemas[0] if schemas else "eventlog"
    check_schema(schema)
    rest = urlencode([(k, v) for k, v in query if k != "schema"])
    return urlunsplit(parts._replace(scheme="postgresql", query=rest)), schema


def check_schema(schema: object) -> str:
    """A schema name PostgreSQL keeps exactly: ASCII letters, digits and underscores, not starting
    with a digit, at most 63 bytes (PostgreSQL cuts longer names, so two would alias)."""
    limit = _limits.pg_identifier_size_bytes_max
    if (
        not isinstance(schema, str)
        or not schema
        or not schema.isascii()
        or not schema.replace("_", "").isalnum()
        or schema[0].isdigit()
        or len(schema) > limit
    ):
        raise InvalidArgumentError(
            f"schema name {schema!r} must be 1 to {limit} ASCII letters, digits and underscores, "
            "not starting with a digit"
        )
    return schema


class _PgTxn:
    """A transaction on one connection.

    Puts and inserts are buffered and sent in one statement before the next scan, delete,
    last-key fetch or commit; values read or written are remembered, so a key is read at most
    once. Writers hold the schema's lock, so nothing else changes what a write transaction
    remembers."""

    __slots__ = ("_cur", "_inserts", "_known", "_puts", "_q", "_write")

    def __init__(self, cur: Any, queries: dict[str, str], write: bool) -> None:
        self._cur, self._q, self._write = cur, queries, write
        self._puts: dict[tuple[int, bytes], bytes] = {}
        self._inserts: dict[tuple[int, bytes], bytes] = {}
        self._known: dict[tuple[int, bytes], bytes | None] = {}

    def flush(self) -> None:
        """Send the buffered inserts and puts: one statement, or two when a key was inserted
        and then put (the insert goes first, so the put overwrites it)."""
        inserts, puts = self._inserts, self._puts
        if inserts and puts and not inserts.keys() & puts.keys():
            self._cur.execute(self._q["insert_put"], (*_columns(inserts), *_columns(puts)))
        else:
            for name, rows in (("insert", inserts), ("put", puts)):
                if rows:
                    self._cur.execute(self._q[name], _columns(rows))
        inserts.clear()
        puts.clear()

    def get(self, table: str, key: bytes) -> bytes | None:
        return self.get_many(table, [key])[0]

    def get_many(self, table: str, keys: list[bytes]) -> list[bytes | None]:
        return self.fetch([(table, k) for k in keys], [])[0]

    def fetch(self, gets: list[tuple[str, bytes]], lasts: list[str]) -> tuple[list[bytes | None], list[bytes | None]]:
        known = self._known
        wanted = [(_TABLE_IDS[t], bytes(k)) for t, k in gets]
        missing = list(dict.fromkeys(w for w in wanted if w not in known))
        ends: dict[int, bytes | None] = {}
        if missing or lasts:
            if lasts:
                self.flush()
            for found in missing:
                known[found] = None
            params = ([t for t, _ in missing], [k for _, k in missing], [_TABLE_IDS[t] for t in lasts])
            for is_last, tbl, key, value in self._cur.execute(self._q["fetch"], params):
                if is_last:
                    ends[tbl] = None if key is None else bytes(key)
                elif value is not None:
                    known[(tbl, bytes(key))] = bytes(value)
        return [known[w] for w in wanted], [ends[_TABLE_IDS[t]] for t in lasts]

    def put(self, table: str, key: bytes, value: bytes) -> None:
        if not self._write:
            raise ReadOnlyError("put in a read transaction")
        at = (_TABLE_IDS[table], bytes(key))
        self._puts[at] = self._known[at] = bytes(value)

    def insert(self, table: str, key: bytes, value: bytes) -> None:
        if not self._write:
            raise ReadOnlyError("insert in a read transaction")
        at = (_TABLE_IDS[table], bytes(key))
        if self._known.get(at) is not None or at in self._inserts:
            raise KeyExistsError(f"{table}: key {bytes(key)!r} is taken")
        self._inserts[at] = self._known[at] = bytes(value)

    def delete(self, table: str, key: bytes) -> bool:
        if not self._write:
            raise ReadOnlyError("delete in a read transaction")
        self.flush()
        at = (_TABLE_IDS[table], bytes(key))
        self._known[at] = None
        return bool(self._cur.execute(self._q["delete"], at).rowcount > 0)

    def scan(
        self, table: str, start: bytes, stop: bytes | None, *, reverse: bool = False, limit: int | None = None
    ) -> list[tuple[bytes, bytes]]:
        self.flush()
        name = ("scan_desc" if reverse else "scan") + ("" if stop is not None else "_open")
        params: tuple[Any, ...] = (_TABLE_IDS[table], start) + ((stop,) if stop is not None else ()) + (limit,)
        return [(bytes(k), bytes(v)) for k, v in self._cur.execute(self._q[name], params)]

    def keys(self, table: str, start: bytes, stop: bytes, limit: int) -> list[bytes]:
        self.flush()
        return [bytes(k) for (k,) in self._cur.execute(self._q["keys"], (_TABLE_IDS[table], start, stop, limit))]

    def values(self, table: str, start: bytes, count: int) -> tuple[list[bytes], bytes | None]:
        pairs = self.scan(table, start, None, limit=count)
        return [v for _, v in pairs], (pairs[-1][0] if pairs else None)


def _columns(rows: dict[tuple[int, bytes], bytes]) -> tuple[list[int], list[bytes], list[bytes]]:
    """Buffered rows as the three arrays a statement unnests."""
    return [t for t, _ in rows], [k for _, k in rows], list(rows.values())


class PostgresStore:
    """A log in a PostgreSQL schema (created if missing or empty; a schema holding another
    program's relations is refused), over a bounded pool of connections
    (`pool_size`, 8 unless given): threads share them, and `close()` closes them all."""

    durability = "sync"

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "eventlog",
        readonly: bool = False,
        create: bool = True,
        pool_size: int | None = None,
    ) -> None:
        self._psycopg = _import_psycopg()
        check_schema(schema)
        size = _limits.pg_pool_connections_max if pool_size is None else pool_size
        if type(size) is not int or not 1 <= size <= 1024:
            raise InvalidArgumentError(f"pool_size must be an integer from 1 to 1024, not {pool_size!r}")
        self.dsn = dsn
        self.schema = schema
        self.readonly = readonly
        self.pool_size = size
        """Connections kept open at most."""
        self._local = threading.local()  # the connection of a write in progress on this thread
        self._channel = f"eventlog_{schema}"[: _limits.pg_identifier_size_bytes_max]
        self._listener: threading.Thread | None = None  # LISTENs on the channel from the first `listen` on
        self._listen_lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []
        self._closed = False
        self._lock_id = zlib.crc32(f"eventlog:{schema}".encode())
        kv = f'"{schema}".kv'
        self._q = {
            # Keys with their tables, and tables whose last key is wanted: one statement.
            "fetch": f"SELECT false, q.t, q.k, (SELECT v FROM {kv} WHERE tbl = q.t AND k = q.k) "
            "FROM unnest(%b::int2[], %b::bytea[]) AS q(t, k) UNION ALL "
            f"SELECT true, l.t, (SELECT k FROM {kv} WHERE tbl = l.t ORDER BY k DESC LIMIT 1), NULL::bytea "
            "FROM unnest(%b::int2[]) AS l(t)",
            "put": f"INSERT INTO {kv} (tbl, k, v) SELECT * FROM unnest(%b::int2[], %b::bytea[], %b::bytea[]) "
            "ON CONFLICT (tbl, k) DO UPDATE SET v = EXCLUDED.v",
            "insert": f"INSERT INTO {kv} (tbl, k, v) SELECT * FROM unnest(%b::int2[], %b::bytea[], %b::bytea[])",
            "insert_put": f"WITH i AS (INSERT INTO {kv} (tbl, k, v) "
            "SELECT * FROM unnest(%b::int2[], %b::bytea[], %b::bytea[])) "
            f"INSERT INTO {kv} (tbl, k, v) SELECT * FROM unnest(%b::int2[], %b::bytea[], %b::bytea[]) "
            "ON CONFLICT (tbl, k) DO UPDATE SET v = EXCLUDED.v",
            "delete": f"DELETE FROM {kv} WHERE tbl = %s AND k = %s",
            "scan": f"SELECT k, v FROM {kv} WHERE tbl = %s AND k >= %s AND k < %s ORDER BY k LIMIT %s",
            "keys": f"SELECT k FROM {kv} WHERE tbl = %s AND k >= %s AND k < %s ORDER BY k LIMIT %s",
            "scan_open": f"SELECT k, v FROM {kv} WHERE tbl = %s AND k >= %s ORDER BY k LIMIT %s",
            "scan_desc": f"SELECT k, v FROM {kv} WHERE tbl = %s AND k >= %s AND k < %s ORDER BY k DESC LIMIT %s",
            "scan_desc_open": f"SELECT k, v FROM {kv} WHERE tbl = %s AND k >= %s ORDER BY k DESC LIMIT %s",
        }
        try:
            import psycopg_pool
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise EventLogError("the PostgreSQL store needs psycopg_pool: pip install 'eventlog[postgres]'") from exc
        self._pool_errors = (psycopg_pool.PoolTimeout, psycopg_pool.PoolClosed)
        # A writer's lock, and the notification that wakes followers when it commits (the lock
        # id is an integer, the channel an identifier: both are safe inline).
        self._lock = f"SELECT pg_advisory_xact_lock({self._lock_id}), pg_notify('{self._channel}', '')"
        self._pool = psycopg_pool.ConnectionPool(
            dsn,
            min_size=1,
            max_size=size,
            kwargs={"autocommit": True},  # transactions are begun and ended explicitly
            configure=_configure,
            open=False,
            timeout=_POOL_TIMEOUT_SECONDS,
        )
        try:
            self._pool.open(wait=True, timeout=_POOL_TIMEOUT_SECONDS)
            self._create(create)
        except (self._psycopg.Error, *self._pool_errors) as exc:
            self._pool.close()
            raise NotALogError(f"cannot connect to PostgreSQL: {exc}".strip()) from None
        except BaseException:
            self._pool.close()
            raise

    def _create(self, create: bool) -> None:
        """Open the schema's log, or make one in an empty or missing schema. A schema that holds
        other relations but no log belongs to another program: it is refused, never written."""
        with self._pool.connection() as conn, conn.transaction():
            if self._holds_log(conn):
                return
            if not self.readonly and create:
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._lock_id,))
                if self._holds_log(conn):  # another process made it meanwhile
                    return
            if self.readonly or not create:
                raise NoLogError(f"no log in schema {self.schema!r}")
            conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"')
            conn.execute(
                f'CREATE TABLE "{self.schema}".kv '
                "(tbl smallint NOT NULL, k bytea NOT NULL, v bytea NOT NULL, PRIMARY KEY (tbl, k))"
            )

    def _holds_log(self, conn: Any) -> bool:
        """True when the schema holds a log's `kv` table; False when it holds no relation at all.
        NotALogError, naming a few of them, when it holds relations but no log."""
        found = conn.execute(
            "SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f') ORDER BY c.relname",
            (self.schema,),
        ).fetchall()
        if not found:
            return False
        if ("kv", "r") in found:
            columns = conn.execute(
                "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
                "WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
                (f'"{self.schema}".kv',),
            ).fetchall()
            if columns == [("tbl", "smallint"), ("k", "bytea"), ("v", "bytea")]:
                return True
        names = ", ".join(name for name, _ in found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")
        raise NotALogError(
            f"schema {self.schema!r} holds relations of another program ({names}) and no eventlog log; "
            "give eventlog.open another schema (?schema=...)"
        )

    def read(self, fn: Callable[[_PgTxn], T]) -> T:
        self._check_open()
        current = getattr(self._local, "conn", None)
        if current is not None:
            with current.cursor() as cur:  # a read inside this thread's write: see that transaction
                return fn(_PgTxn(cur, self._q, write=False))
        try:
            with self._pool.connection() as conn:
                conn.isolation_level = self._psycopg.IsolationLevel.REPEATABLE_READ
                conn.read_only = True
                with conn.transaction(), conn.cursor() as cur:
                    return fn(_PgTxn(cur, self._q, write=False))
        except self._psycopg.Error as exc:
            raise _translate(self._psycopg, exc) from None
        except self._pool_errors as exc:
            raise EventLogError(f"PostgreSQL: no connection from the pool: {exc}".strip()) from None

    def write(self, fn: Callable[[_PgTxn], T]) -> T:
        if self.readonly:
            raise ReadOnlyError(f"schema {self.schema!r} was opened read-only")
        self._check_open()
        try:
            with self._pool.connection() as conn:
                self._local.conn = conn
                try:
                    with conn.cursor() as cur:
                        try:
                            # Pipelined: the BEGIN and the lock go with the first read, the
                            # buffered writes with the COMMIT: two round trips for an append.
                            with conn.pipeline():
                                cur.execute("BEGIN ISOLATION LEVEL READ COMMITTED")
                                cur.execute(self._lock)
                                txn = _PgTxn(cur, self._q, write=True)
                                result = fn(txn)
                                txn.flush()
                                cur.execute("COMMIT")
                        except BaseException:
                            if conn.info.transaction_status != self._psycopg.pq.TransactionStatus.IDLE:
                                with contextlib.suppress(self._psycopg.Error):  # a broken connection leaves the pool
                                    conn.execute("ROLLBACK")
                            raise
                    return result
                finally:
                    self._local.conn = None
        except self._psycopg.Error as exc:
            raise _translate(self._psycopg, exc) from None
        except self._pool_errors as exc:
            raise EventLogError(f"PostgreSQL: no connection from the pool: {exc}".strip()) from None

    def sync(self) -> None:
        self._check_open()

    def listen(self, callback: Callable[[], None]) -> None:
        """Call `callback` after every commit to this log by any process, until `close()`.

        One thread per store LISTENs on the log's channel and calls every callback at each
        notification, so every follower wakes for every commit. LISTEN is in place when this
        returns; a lost connection is made again, and the callbacks are called once then, for
        the commits that went unheard meanwhile. A callback given again is called once."""
        self._check_open()
        with self._listen_lock:
            if callback not in self._callbacks:
                self._callbacks.append(callback)
            if self._listener is None:
                conn = self._listen_connect()
                self._listener = threading.Thread(
                    target=self._listen_loop, args=(conn,), name=f"eventlog-listen-{self.schema}", daemon=True
                )
                self._listener.start()

    def _listen_connect(self) -> Any:
        try:
            conn = self._psycopg.connect(self.dsn, autocommit=True)
        except self._psycopg.Error as exc:
            raise _translate(self._psycopg, exc) from None
        try:
            conn.execute(f'LISTEN "{self._channel}"')
        except self._psycopg.Error as exc:
            conn.close()
            raise _translate(self._psycopg, exc) from None
        return conn

    def _listen_loop(self, conn: Any) -> None:
        """The listener thread: wake every callback at each notification; look at `_closed`
        every `_LISTEN_TICK_SECONDS`."""
        while not self._closed:
            try:
                if conn is None:
                    conn = self._listen_connect()
                    self._wake()
                for _ in conn.notifies(timeout=_LISTEN_TICK_SECONDS):
                    self._wake()
            except (self._psycopg.Error, EventLogError):
                if conn is not None:
                    conn.close()
                conn = None
                time.sleep(_LISTEN_TICK_SECONDS)
        if conn is not None:
            conn.close()

    def _wake(self) -> None:
        with self._listen_lock:
            callbacks = list(self._callbacks)
        for callback in callbacks:
            callback()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._pool.close()
        listener = self._listener
        if listener is not None and listener is not threading.current_thread():
            listener.join(timeout=4 * _LISTEN_TICK_SECONDS)

    def connections(self) -> int:
        """Connections the pool holds open now."""
        return int(self._pool.get_stats().get("pool_size", 0))

    def stats(self) -> dict[str, int]:
        def count(txn: _PgTxn) -> dict[str, int]:
            cur = txn._cur
            out = {"map_size_bytes": 0}
            size = cur.execute("SELECT pg_total_relation_size(%s)", (f'"{self.schema}".kv',)).fetchone()
            out["bytes_on_disk"] = int(size[0])
            counts = dict(cur.execute(f'SELECT tbl, count(*) FROM "{self.schema}".kv GROUP BY tbl').fetchall())
            for name, i in _TABLE_IDS.items():
                out[f"entries_{name}"] = int(counts.get(i, 0))
            return out

        return self.read(count)

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


def _configure(conn: Any) -> None:
    """Each pooled connection plans its prepared statements once: their plans do not depend on
    the keys bound to them, and planning again on every call costs more than running them."""
    conn.execute("SET plan_cache_mode = force_generic_plan")


_POOL_TIMEOUT_SECONDS = 30.0
"""How long an operation waits for a free connection of the pool."""

_LISTEN_TICK_SECONDS = 0.2
"""How often the listener thread looks whether the store was closed (so `close()` waits at most this)."""


def _translate(psycopg: Any, exc: Exception) -> EventLogError:
    """Every psycopg error as a named eventlog error."""
    if isinstance(exc, (psycopg.errors.DiskFull, psycopg.errors.ProgramLimitExceeded)):
        return LogFullError(f"PostgreSQL: {exc}".strip())
    if isinstance(exc, psycopg.errors.UniqueViolation):  # only `insert` adds a row without ON CONFLICT
        return KeyExistsError(f"PostgreSQL: {exc}".strip())
    if isinstance(exc, psycopg.OperationalError):
        return EventLogError(f"PostgreSQL connection failed: {exc}".strip())
    return EventLogError(f"PostgreSQL: {type(exc).__name__}: {exc}".strip())
