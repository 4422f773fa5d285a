"""The relational layout of the PostgreSQL store: one table per table of the log, with the key
layouts of docs/format.md ("The directory") as real columns (docs/format.md, "PostgreSQL").

Each `Table` knows its columns, builds them from a byte key (and value) the log layer gives,
rebuilds the byte key in SQL (`int8send` is a big-endian u64), and turns a byte range into a
range over its columns: byte order of the keys is the order of the column tuples, so a scan of
`[start, stop)` is a range of the primary key.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, cached_property, lru_cache
from typing import Any

from ..errors import EventLogError, NotALogError

_I63 = 1 << 63


@dataclass(frozen=True)
class Table:
    """One relation: key columns (u64 parts, then at most one bytes part), value columns."""

    name: str
    key: tuple[tuple[str, str], ...]  # (column, "u64" | "bytes")
    value: tuple[tuple[str, str], ...]  # (column, "u64" | "bytes"); a bytes value is the whole value
    run_first: bool = False  # keyed by run number first: the table belongs to runs

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(c for c, _ in self.key)

    @property
    def value_columns(self) -> tuple[str, ...]:
        return tuple(c for c, _ in self.value)

    def key_sql(self, alias: str = "") -> str:
        """The byte key, rebuilt from the columns."""
        return " || ".join(_as_bytes(alias + c, kind) for c, kind in self.key)

    def value_sql(self, alias: str = "") -> str:
        return " || ".join(_as_bytes(alias + c, kind) for c, kind in self.value)

    def types(self) -> list[str]:
        return [_SQL_TYPE[kind] for _, kind in self.key + self.value]

    def parse_key(self, key: bytes) -> tuple[Any, ...]:
        return self._key_parser(key) or _split(self.name, "key", key, self.key)

    def parse_value(self, value: bytes) -> tuple[Any, ...]:
        return self._value_parser(value) or _split(self.name, "value", value, self.value)

    def parse_rows(self, pairs: list[tuple[bytes, bytes]]) -> list[list[Any]]:
        """The columns of many rows (each a key and its value), one list per column, as
        `parse_key` and `parse_value` give them row by row."""
        keys = _columns(self.key, [k for k, _ in pairs])
        values = None if keys is None else _columns(self.value, [v for _, v in pairs])
        if keys is None or values is None:  # one is malformed: row by row, to name the first such
            return [list(c) for c in zip(*(self.parse_key(k) + self.parse_value(v) for k, v in pairs), strict=True)]
        return keys + values

    @cached_property
    def _key_parser(self) -> Callable[[bytes], tuple[Any, ...] | None]:
        return _parser(self.key)

    @cached_property
    def _value_parser(self) -> Callable[[bytes], tuple[Any, ...] | None]:
        return _parser(self.value)

    def bound(self, key: bytes, op: str) -> tuple[str, list[Any]]:
        """SQL (and its parameters) true for the rows whose byte key is >= `key` (op ">=") or
        < `key` (op "<"). A bound ending inside a u64 part compares that part padded with zero
        bytes; a bound shorter than the key compares the columns it covers."""
        values: list[Any] = []
        rest = key
        for _, kind in self.key:
            if not rest:
                break
            if kind == "bytes":
                values.append(rest)
                rest = b""
                break
            part, rest = rest[:8], rest[8:]
            number = int.from_bytes(part.ljust(8, b"\x00"), "big")
            if number >= _I63:  # above every stored value: the columns before it decide
                if not values:
                    return ("FALSE" if op == ">=" else "TRUE"), []
                cols = ", ".join(self.columns[: len(values)])
                marks = ", ".join(["%s"] * len(values))
                return f"({cols}) {'>' if op == '>=' else '<='} ({marks})", values
            values.append(number)
            if len(part) < 8:
                break
        if not values:
            return ("TRUE" if op == ">=" else "FALSE"), []
        if rest:  # bytes past the last column: a key equal on every column is below the bound
            op = ">" if op == ">=" else "<="
        cols = ", ".join(self.columns[: len(values)])
        marks = ", ".join(["%s"] * len(values))
        return f"({cols}) {op} ({marks})", values

    def where_range(self, start: bytes, stop: bytes | None) -> tuple[str, list[Any]]:
        if self.key[0][1] == U64 and start[:1] >= b"\x80":  # rows of a negative bigint (damage): by bytes
            key = self.key_sql()
            return (f"{key} >= %s", [start]) if stop is None else (f"{key} >= %s AND {key} < %s", [start, stop])
        lo, lo_params = self.bound(start, ">=")
        if stop is None:
            return lo, lo_params
        hi, hi_params = self.bound(stop, "<")
        return f"{lo} AND {hi}", lo_params + hi_params

    def numbers_sql(self, table: str) -> str:
        """The distinct values of the first column, one index seek each (a loose index scan)."""
        c = self.columns[0]
        first = f"SELECT {c} FROM {table} ORDER BY {c} LIMIT 1"
        after = f"SELECT (SELECT {c} FROM {table} WHERE {c} > n.v ORDER BY {c} LIMIT 1) FROM n WHERE n.v IS NOT NULL"
        return f"WITH RECURSIVE n(v) AS (({first}) UNION ALL {after}) SELECT v FROM n WHERE v IS NOT NULL"

    def order(self, reverse: bool = False) -> str:
        return ", ".join(c + (" DESC" if reverse else "") for c in self.columns)

    def create_sql(self, schema: str, partitions: int = 0) -> str:
        cols = ", ".join(f"{c} {_SQL_TYPE[k]} NOT NULL" for c, k in self.key + self.value)
        tail = ""
        if partitions and self.run_first:
            tail = " PARTITION BY HASH (run)"
        return f'CREATE TABLE "{schema}".{self.name} ({cols}, PRIMARY KEY ({", ".join(self.columns)})){tail}'


def _as_bytes(column: str, kind: str) -> str:
    return f"int8send({column})" if kind == "u64" else column


_SQL_TYPE = {"u64": "bigint", "bytes": "bytea"}


def _parser(parts: tuple[tuple[str, str], ...]) -> Callable[[bytes], tuple[Any, ...] | None]:
    """The columns of a well-formed key or value of these parts in one `struct` call; None for
    any other (`_split` then says what is wrong with it)."""
    u64s = sum(kind == U64 for _, kind in parts)
    size, unpack = 8 * u64s, struct.Struct(">" + "Q" * u64s).unpack_from
    if parts[-1][1] == BYTES:
        if not u64s:
            return lambda raw: (bytes(raw),)

        def with_bytes(raw: bytes) -> tuple[Any, ...] | None:
            if len(raw) < size:
                return None
            numbers = unpack(raw)
            return (*numbers, bytes(raw[size:])) if max(numbers) < _I63 else None

        return with_bytes

    def numbers_only(raw: bytes) -> tuple[Any, ...] | None:
        if len(raw) != size:
            return None
        numbers: tuple[int, ...] = unpack(raw)
        return numbers if max(numbers) < _I63 else None

    return numbers_only


def _columns(parts: tuple[tuple[str, str], ...], raws: list[bytes]) -> list[list[Any]] | None:
    """The columns of `raws` (keys, or values, of these parts), one list per column, for parts of
    numbers only (in one `struct` call) or of one bytes part; None for other parts, or when one
    is malformed."""
    width = len(parts)
    if all(kind == U64 for _, kind in parts):
        if set(map(len, raws)) == {8 * width}:
            numbers = struct.unpack(f">{width * len(raws)}Q", b"".join(raws))
            if max(numbers) < _I63:
                return [list(numbers[i::width]) for i in range(width)]
    elif width == 1:  # one bytes part: the bytes themselves
        return [raws]
    return None


def _split(table: str, what: str, raw: bytes, parts: tuple[tuple[str, str], ...]) -> tuple[Any, ...]:
    out: list[Any] = []
    rest = bytes(raw)
    for _, kind in parts:
        if kind == "bytes":
            out.append(rest)
            rest = b""
            continue
        if len(rest) < 8:
            raise EventLogError(f"PostgreSQL store: a {what} of {table} must hold a u64 here, not {bytes(raw)!r}")
        number = int.from_bytes(rest[:8], "big")
        if number >= _I63:
            raise EventLogError(f"PostgreSQL store: {table} {what} part {number} is over 2**63-1")
        out.append(number)
        rest = rest[8:]
    if rest:
        raise EventLogError(f"PostgreSQL store: a {what} of {table} is longer than its columns: {bytes(raw)!r}")
    return tuple(out)


U64, BYTES = "u64", "bytes"

TABLES: dict[str, Table] = {
    t.name: t
    for t in (
        Table("meta", (("k", BYTES),), (("v", BYTES),)),
        Table("runs", (("key", BYTES),), (("value", BYTES),)),
        Table("run_numbers", (("number", U64),), (("run_id", BYTES),)),
        Table("events", (("run", U64), ("off", U64)), (("value", BYTES),), run_first=True),
        Table("feed", (("position", U64),), (("run", U64), ("off", U64))),
        Table("event_ids", (("run", U64), ("id", BYTES)), (("off", U64),), run_first=True),
        Table("checkpoints", (("run", U64), ("seq", U64)), (("value", BYTES),), run_first=True),
        Table("checkpoint_ids", (("run", U64), ("id", BYTES)), (("seq", U64),), run_first=True),
        Table("snapshots", (("run", U64), ("off", U64), ("tag", BYTES)), (("value", BYTES),), run_first=True),
    )
}
"""Every table of the log as a relation, by the name the log layer uses."""

LAYOUT_VERSION = 1
"""The version of this relational layout, in the schema's `layout` table."""

POSITION_SHIFT = 20
"""A feed position is (transaction id + the log's xid offset) << 20 | its index in the transaction."""


WRITERS_LOCK_CLASS = 0x45564C47
"""The first key of the shared advisory lock every write transaction of a log holds ("EVLG")."""


@cache
def writers_lock(schema: str) -> tuple[int, int]:
    """The two keys of the shared advisory lock a write transaction of the log in `schema` takes
    before it has a transaction id: readers tell the log's own writers from other transactions
    by it (`horizon_sql`). Two schemas whose keys collide only wait for each other's writers."""
    return WRITERS_LOCK_CLASS, zlib.crc32(schema.encode()) & 0x7FFFFFFF


@lru_cache(maxsize=4096)
def run_lock(schema: str, key: bytes) -> int:
    """The key of the exclusive advisory lock a write transaction of the log in `schema` takes on
    a run (its `runs` key) before it locks the run's row (`_pg_txn._run_locks`): a signed 64-bit
    number, so the lock is of the one-key form and never one of the writers lock's two-key form
    (`horizon_sql` looks only at those). Two runs whose keys collide only wait for each other."""
    digest = hashlib.blake2b(schema.encode() + b"\x00" + key, digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


@cache
def horizon_sql(schema: str) -> str:
    """An expression for the transaction id below which the log's feed is settled, in the
    statement's snapshot: the oldest transaction in flight in that snapshot that is, or may
    have been, a writer of this log, else the snapshot's xmax. A transaction still running that
    does not hold the log's writers lock never writes its feed and is passed over, so a
    transaction held open elsewhere in the cluster does not hold the feed back; one that ended
    since the snapshot was taken counts, since its rows are not in the snapshot. A writer that
    holds the lock but has no id yet will get one greater than any id the snapshot saw
    committed."""
    cls, obj = writers_lock(schema)
    return (
        "(WITH l AS MATERIALIZED (SELECT locktype, virtualtransaction, transactionid::text::bigint AS xid, "
        "classid, objid, objsubid, mode, granted FROM pg_locks), "
        f"w AS (SELECT virtualtransaction FROM l WHERE locktype = 'advisory' AND classid = {cls} "
        f"AND objid = {obj} AND objsubid = 2), "
        "f AS (SELECT xid FROM l WHERE locktype = 'transactionid' AND mode = 'ExclusiveLock' AND granted "
        "AND virtualtransaction NOT IN (SELECT virtualtransaction FROM w)) "
        "SELECT coalesce(min(x::text::bigint), pg_snapshot_xmax(pg_current_snapshot())::text::bigint) "
        "FROM pg_snapshot_xip(pg_current_snapshot()) x "
        "WHERE (x::text::bigint & 4294967295) NOT IN (SELECT xid FROM f))"
    )


def schema_sql(schema: str, partitions: int = 0) -> list[str]:
    """The statements that make the layout in an empty schema (hash partitions by run when
    `partitions` > 0: every table keyed by run first is split into that many)."""
    out = [f'CREATE SCHEMA IF NOT EXISTS "{schema}"']
    out.append(f'CREATE TABLE "{schema}".layout (name text PRIMARY KEY, value bigint NOT NULL)')
    for table in TABLES.values():
        out.append(table.create_sql(schema, partitions))
        if partitions and table.run_first:
            for i in range(partitions):
                out.append(
                    f'CREATE TABLE "{schema}".{table.name}_p{i} PARTITION OF "{schema}".{table.name} '
                    f"FOR VALUES WITH (MODULUS {partitions}, REMAINDER {i})"
                )
    out.append(f'CREATE INDEX ON "{schema}".feed (run, off)')  # set-based removal of a run's positions
    out.append(f'CREATE SEQUENCE "{schema}".run_number')
    out.append(
        f"INSERT INTO \"{schema}\".layout VALUES ('version', {LAYOUT_VERSION}), ('xid_offset', 0), "
        f"('partitions', {partitions})"
    )
    return out


def _u64(column: str, at: int) -> str:
    """SQL: the big-endian u64 at byte `at` (1-based) of a bytea column, as a bigint."""
    return f"('x' || encode(substring({column} from {at} for 8), 'hex'))::bit(64)::bigint"


def migrate_kv_sql(schema: str) -> list[str]:
    """The statements that move a log of the key-value layout (`kv (tbl, k, v)`, eventlog before
    this layout) into the relational one, in the same schema, in one transaction: every row is
    parsed into its columns, the run number sequence starts after the last number given, the
    xid offset puts every new position above every old one, and `kv` is dropped last."""
    s = f'"{schema}"'
    k8 = "substring(k from 9)"
    out = schema_sql(schema)[1:]
    copies = {
        "meta": (0, "k, v"),
        "runs": (1, "k, v"),
        "run_numbers": (2, f"{_u64('k', 1)}, v"),
        "events": (3, f"{_u64('k', 1)}, {_u64('k', 9)}, v"),
        "feed": (4, f"{_u64('k', 1)}, {_u64('v', 1)}, {_u64('v', 9)}"),
        "event_ids": (5, f"{_u64('k', 1)}, {k8}, {_u64('v', 1)}"),
        "checkpoints": (6, f"{_u64('k', 1)}, {_u64('k', 9)}, v"),
        "checkpoint_ids": (7, f"{_u64('k', 1)}, {k8}, {_u64('v', 1)}"),
        "snapshots": (8, f"{_u64('k', 1)}, {_u64('k', 9)}, substring(k from 17), v"),
    }
    for name, (tbl, select) in copies.items():
        out.append(f"INSERT INTO {s}.{name} SELECT {select} FROM {s}.kv WHERE tbl = {tbl}")
    counter = f"(SELECT {_u64('v', 11)} FROM {s}.kv WHERE tbl = 0 AND k = 'run_number'::bytea AND length(v) = 18)"
    out.append(
        f"SELECT setval('{s}.run_number', greatest(1, {counter}, (SELECT max(number) FROM {s}.run_numbers)), "
        f"coalesce({counter}, (SELECT max(number) FROM {s}.run_numbers)) IS NOT NULL)"
    )
    kept = f"(SELECT {_u64('v', 11)} FROM {s}.kv WHERE tbl = 0 AND k = 'position'::bytea AND length(v) = 18)"
    last = f"greatest(0, {kept}, (SELECT max(position) FROM {s}.feed))"
    out.append(
        f"UPDATE {s}.layout SET value = greatest(0, ({last} >> {POSITION_SHIFT}) + 1 "
        "- pg_current_xact_id()::text::bigint) WHERE name = 'xid_offset'"
    )
    out.append(f"DROP TABLE {s}.kv")
    return out


def layout_of(conn: Any, schema: str) -> dict[str, Any]:
    """The `layout` table's rows of a schema that holds a log's tables, once each table is
    checked to have the layout's columns, of their types, and its primary key (the database
    keeps a run's order and an id's uniqueness by it): NotALogError naming what differs."""
    rows = conn.execute(
        "SELECT c.relname, (SELECT array_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod) "
        "ORDER BY a.attnum) FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped), "
        "(SELECT array_agg(a.attname ORDER BY k.i) FROM pg_constraint p, unnest(p.conkey) WITH ORDINALITY k(n, i) "
        "JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.n WHERE p.conrelid = c.oid AND p.contype = 'p') "
        "FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace "
        "WHERE s.nspname = %s AND c.relkind IN ('r', 'p') AND NOT c.relispartition",
        (schema,),
    ).fetchall()
    found = {name: (columns or [], key or []) for name, columns, key in rows}
    wanted = {t.name: ([f"{c} {_SQL_TYPE[k]}" for c, k in t.key + t.value], list(t.columns)) for t in TABLES.values()}
    wanted["layout"] = (["name text", "value bigint"], ["name"])
    for name, (columns, key) in wanted.items():
        has_columns, has_key = found.get(name, ([], []))
        if has_columns != columns:
            what = f"table {name} has columns ({', '.join(has_columns)}), not ({', '.join(columns)})"
        elif has_key != key:
            what = f"table {name} has the primary key ({', '.join(has_key)}), not ({', '.join(key)})"
        else:
            continue
        raise NotALogError(f"schema {schema!r} is not a log of relational layout {LAYOUT_VERSION}: {what}")
    return dict(conn.execute(f'SELECT name, value FROM "{schema}".layout').fetchall())
