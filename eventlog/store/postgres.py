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

import threading
import zlib
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..errors import ClosedError, EventLogError, LogFullError, NotALogError, ReadOnlyError
from ._base import TABLES

T = TypeVar("T")

_TABLE_IDS = {name: i for i, name in enumerate(TABLES)}


def _import_psycopg() -> Any:
    try:
        import psycopg
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise EventLogError("the PostgreSQL store needs psycopg 3: pip install 'eventlog[postgres]'") from exc
    return psycopg


def split_dsn(dsn: str) -> tuple[str, str]:
    """Take the `schema` query parameter out of a connection URL: (dsn, schema)."""
    parts = urlsplit(dsn)
    query = parse_qsl(parts.query)
    schema = next((v for k, v in query if k == "schema"), "eventlog")
    rest = urlencode([(k, v) for k, v in query if k != "schema"])
    return urlunsplit(parts._replace(query=rest)), schema


class _PgTxn:
    """A transaction on one connection. Puts are buffered and sent in one batch before the
    next read, delete or commit, so a batch of appends costs a few round trips, not one a row."""

    __slots__ = ("_cur", "_pending", "_q", "_write")

    def __init__(self, cur: Any, queries: dict[str, str], write: bool) -> None:
        self._cur, self._q, self._write = cur, queries, write
        self._pending: list[tuple[int, bytes, bytes]] = []

    def flush(self) -> None:
        if self._pending:
            pending, self._pending = self._pending, []
            self._cur.executemany(self._q["put"], pending)

    def get(self, table: str, key: bytes) -> bytes | None:
        self.flush()
        row = self._cur.execute(self._q["get"], (_TABLE_IDS[table], key)).fetchone()
        return None if row is None else bytes(row[0])

    def put(self, table: str, key: bytes, value: bytes) -> None:
        if not self._write:
            raise ReadOnlyError("put in a read transaction")
        self._pending.append((_TABLE_IDS[table], bytes(key), bytes(value)))

    def delete(self, table: str, key: bytes) -> bool:
        if not self._write:
            raise ReadOnlyError("delete in a read transaction")
        self.flush()
        return self._cur.execute(self._q["delete"], (_TABLE_IDS[table], key)).rowcount > 0

    def scan(
        self, table: str, start: bytes, stop: bytes | None, *, reverse: bool = False, limit: int | None = None
    ) -> list[tuple[bytes, bytes]]:
        self.flush()
        name = ("scan_desc" if reverse else "scan") + ("" if stop is not None else "_open")
        params: tuple[Any, ...] = (_TABLE_IDS[table], start) + ((stop,) if stop is not None else ()) + (limit,)
        return [(bytes(k), bytes(v)) for k, v in self._cur.execute(self._q[name], params)]

    def values(self, table: str, start: bytes, count: int) -> tuple[list[bytes], bytes | None]:
        pairs = self.scan(table, start, None, limit=count)
        return [v for _, v in pairs], (pairs[-1][0] if pairs else None)


class PostgresStore:
    """A log in a PostgreSQL schema (created if missing). One connection per thread."""

    durability = "sync"

    def __init__(self, dsn: str, *, schema: str = "eventlog", readonly: bool = False) -> None:
        self._psycopg = _import_psycopg()
        if not schema.replace("_", "").isalnum() or schema[0].isdigit():
            raise EventLogError(f"schema name {schema!r} must be letters, digits and underscores")
        self.dsn = dsn
        self.schema = schema
        self.readonly = readonly
        self._local = threading.local()
        self._connections: list[Any] = []
        self._lock = threading.Lock()
        self._closed = False
        self._lock_id = zlib.crc32(f"eventlog:{schema}".encode())
        kv = f'"{schema}".kv'
        self._q = {
            "get": f"SELECT v FROM {kv} WHERE tbl = %s AND k = %s",
            "put": f"INSERT INTO {kv} (tbl, k, v) VALUES (%s, %s, %s) ON CONFLICT (tbl, k) DO UPDATE SET v = EXCLUDED.v",
            "delete": f"DELETE FROM {kv} WHERE tbl = %s AND k = %s",
            "scan": f"SELECT k, v FROM {kv} WHERE tbl = %s AND k >= %s AND k < %s ORDER BY k LIMIT %s",
            "scan_open": f"SELECT k, v FROM {kv} WHERE tbl = %s AND k >= %s ORDER BY k LIMIT %s",
            "scan_desc": f"SELECT k, v FROM {kv} WHERE tbl = %s AND k >= %s AND k < %s ORDER BY k DESC LIMIT %s",
            "scan_desc_open": f"SELECT k, v FROM {kv} WHERE tbl = %s AND k >= %s ORDER BY k DESC LIMIT %s",
        }
        self._create()

    def _connection(self) -> Any:
        self._check_open()
        conn = getattr(self._local, "conn", None)
        if conn is None or conn.closed:
            try:
                conn = self._psycopg.connect(self.dsn, autocommit=False)
            except self._psycopg.Error as exc:
                raise NotALogError(f"cannot connect to PostgreSQL: {exc}".strip()) from None
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        return conn

    def _create(self) -> None:
        conn = self._connection()
        with conn.transaction():
            exists = conn.execute(
                "SELECT 1 FROM information_schema.tables WHERE table_schema = %s AND table_name = 'kv'", (self.schema,)
            ).fetchone()
            if exists or self.readonly:
                if not exists:
                    raise NotALogError(f"schema {self.schema!r} holds no log to open read-only")
                return
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._lock_id,))
            conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"')
            conn.execute(
                f'CREATE TABLE IF NOT EXISTS "{self.schema}".kv '
                "(tbl smallint NOT NULL, k bytea NOT NULL, v bytea NOT NULL, PRIMARY KEY (tbl, k))"
            )

    def read(self, fn: Callable[[_PgTxn], T]) -> T:
        conn = self._connection()
        if conn.info.transaction_status != self._psycopg.pq.TransactionStatus.IDLE:
            with conn.cursor() as cur:  # a read inside this thread's write: see that transaction
                return fn(_PgTxn(cur, self._q, write=False))
        conn.isolation_level = self._psycopg.IsolationLevel.REPEATABLE_READ
        conn.read_only = True
        try:
            with conn.transaction(), conn.cursor() as cur:
                return fn(_PgTxn(cur, self._q, write=False))
        except self._psycopg.Error as exc:
            raise _translate(self._psycopg, exc) from None
        finally:
            if conn.info.transaction_status == self._psycopg.pq.TransactionStatus.IDLE:
                conn.read_only = False

    def write(self, fn: Callable[[_PgTxn], T]) -> T:
        if self.readonly:
            raise ReadOnlyError(f"schema {self.schema!r} was opened read-only")
        conn = self._connection()
        conn.isolation_level = self._psycopg.IsolationLevel.READ_COMMITTED
        conn.read_only = False
        try:
            with conn.transaction(), conn.cursor() as cur:
                cur.execute("SELECT pg_advisory_xact_lock(%s)", (self._lock_id,))
                txn = _PgTxn(cur, self._q, write=True)
                result = fn(txn)
                txn.flush()
                return result
        except self._psycopg.Error as exc:
            raise _translate(self._psycopg, exc) from None

    def sync(self) -> None:
        self._check_open()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with self._lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()

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
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _translate(psycopg: Any, exc: Exception) -> Exception:
    if isinstance(exc, psycopg.errors.DiskFull) or isinstance(exc, psycopg.errors.ProgramLimitExceeded):
        return LogFullError(f"PostgreSQL: {exc}".strip())
    if isinstance(exc, psycopg.OperationalError):
        return EventLogError(f"PostgreSQL connection failed: {exc}".strip())
    return exc
