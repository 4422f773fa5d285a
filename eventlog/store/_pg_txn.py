"""A transaction of the PostgreSQL store over the relational layout (store/_pg_layout.py).

Puts and inserts are buffered and sent, one statement per table, before the next scan, delete
or commit; values read or written are remembered, so a key is read at most once. A write
transaction locks every `runs` row it reads (`FOR UPDATE`): appends, checkpoints, prunes and
deletes of one run serialize on that row, those of different runs never wait for each other
(docs/architecture.md, "PostgreSQL without a global lock").

Each round trip is one message (`Session.run`): the BEGIN goes with the first statement, the
COMMIT with the last, so an append that reads is two round trips and one that does not is one.
"""

from __future__ import annotations

from typing import Any

from ..errors import EventLogError, ReadOnlyError
from ._base import KeyExistsError
from ._pg_layout import POSITION_SHIFT, TABLES, horizon_sql, run_lock
from ._pg_session import Session

_ABSENT = object()


class PgTxn:
    """One transaction of a `Session`; `write` transactions also change the tables."""

    dense = False

    def __init__(self, session: Session, schema: str, xid_offset: int, write: bool) -> None:
        self._session, self._s, self._write, self._xid_offset = session, schema, write, xid_offset
        self._run = session.run
        self._xid: int | None = None  # the transaction id, read with the first fetch of a write
        self._puts: dict[tuple[str, bytes], bytes] = {}
        self._inserts: dict[tuple[str, bytes], bytes] = {}
        self._known: dict[tuple[str, bytes], bytes | None] = {}
        self._base: int | None = None
        self._locked: set[bytes] = set()  # the `runs` keys whose run lock this transaction holds
        self.wrote = False
        self.held = 0
        """The greatest feed position this read left out because an older transaction may still
        commit below it (0: none): the store reads again once it settled."""

    def _t(self, table: str) -> str:
        return f'"{self._s}".{TABLES[table].name}'

    def _horizon(self) -> str:
        """Positions below this are settled: every writer of the log that could give one has ended."""
        return f"(({horizon_sql(self._s)} + {self._xid_offset}) << {POSITION_SHIFT})"

    # -- writes ------------------------------------------------------------------------

    def flush(self) -> None:
        """Send the buffered inserts and puts (`_flush_statement`)."""
        statement = self._flush_statement()
        if statement is not None:
            self._run(*statement)

    def _flush_statement(self) -> tuple[str, list[Any]] | None:
        """The buffered inserts and puts as one statement, taken from the buffers: an INSERT per
        table (an upsert for puts), joined as data-modifying CTEs when there are several. A key
        is buffered once. The statement's text depends only on the tables and row counts (one
        append: the same text every time, prepared once per connection), so it is built once
        per shape. None when nothing is buffered."""
        if not self._inserts and not self._puts:
            return None
        shape: list[tuple[bool, str, int]] = []
        params: list[Any] = []
        for rows, upsert in ((self._inserts, False), (self._puts, True)):
            if not rows:
                continue
            by_table: dict[str, list[tuple[bytes, bytes]]] = {}
            for (table, key), value in rows.items():
                by_table.setdefault(table, []).append((key, value))
            for table, pairs in by_table.items():
                t = TABLES[table]
                shape.append((upsert, table, 1 if len(pairs) == 1 else 0))
                if len(pairs) == 1:  # one row: plain parameters, cheaper to send than arrays
                    key, value = pairs[0]
                    params += t.parse_key(key) + t.parse_value(value)
                else:
                    params += t.parse_rows(pairs)
            rows.clear()
        at = (self._s, tuple(shape))
        sql = _FLUSH_SQL.get(at)
        if sql is None:
            if len(_FLUSH_SQL) >= _SQL_HELD:
                _FLUSH_SQL.clear()
            sql = _FLUSH_SQL[at] = _flush_sql(self._s, shape)
        return sql, params

    def commit(self) -> None:
        """Send the buffered writes with the COMMIT: one round trip (none when nothing was sent
        or buffered)."""
        statement = self._flush_statement()
        if statement is not None:
            self._run(*statement, then="COMMIT")
        else:
            self._session.end()

    def _writing(self, what: str) -> None:
        if not self._write:
            raise ReadOnlyError(f"{what} in a read transaction")
        self.wrote = True

    def put(self, table: str, key: bytes, value: bytes) -> None:
        self._writing("put")
        at = (table, bytes(key))
        self._check_position(table, at[1])
        value = bytes(value)
        if at in self._inserts or (table == "runs" and self._known.get(at, _ABSENT) is None and at not in self._puts):
            # A run read as absent is made with an insert: a writer that made it meanwhile wins,
            # and this transaction is made again (PostgresStore.write).
            self._inserts[at] = value
        else:
            self._puts[at] = value
        self._known[at] = value

    def insert(self, table: str, key: bytes, value: bytes) -> None:
        self._writing("insert")
        at = (table, bytes(key))
        self._check_position(table, at[1])
        if self._known.get(at) is not None or at in self._inserts:
            raise KeyExistsError(f"{table}: key {bytes(key)!r} is taken")
        self._inserts[at] = self._known[at] = bytes(value)

    def _check_position(self, table: str, key: bytes) -> None:
        if table == "feed" and self._base is not None:
            position = int.from_bytes(key, "big")
            if not self._base < position < self._base + (1 << POSITION_SHIFT):
                raise EventLogError(
                    f"PostgreSQL store: feed position {position} is not one of this transaction's "
                    f"(at most {(1 << POSITION_SHIFT) - 1} entries per transaction)"
                )

    def delete(self, table: str, key: bytes) -> bool:
        self._writing("delete")
        self.flush()
        t = TABLES[table]
        at = (table, bytes(key))
        self._known[at] = None
        if not _storable(*at):  # a damaged row (a negative bigint, read as a u64 past 2**63-1): by its bytes
            return self._deleted(f"DELETE FROM {self._t(table)} WHERE {t.key_sql()} = %s", [at[1]]) > 0
        where = " AND ".join(f"{c} = %s" for c in t.columns)
        return self._deleted(f"DELETE FROM {self._t(table)} WHERE {where}", t.parse_key(at[1])) > 0

    def delete_range(self, table: str, start: bytes, stop: bytes, limit: int | None = None) -> int:
        self._writing("delete_range")
        self.flush()
        t = TABLES[table]
        self._known = {at: v for at, v in self._known.items() if at[0] != table}
        where, params = t.where_range(start, stop)
        if limit is not None:  # the first `limit` keys of the range, in key order
            cols = ", ".join(t.columns)
            where = f"({cols}) IN (SELECT {cols} FROM {self._t(table)} WHERE {where} ORDER BY {t.order()} LIMIT %s)"
            params = [*params, max(limit, 0)]
        return self._deleted(f"DELETE FROM {self._t(table)} WHERE {where}", params)

    def delete_feed_of(self, number: int, upto: int) -> int:
        self._writing("delete_feed_of")
        self.flush()
        self._known = {at: v for at, v in self._known.items() if at[0] != "feed"}
        sql = f"DELETE FROM {self._t('feed')} WHERE run = %s AND off <= %s"
        return self._deleted(sql, (number, min(upto, (1 << 63) - 1)))

    def _deleted(self, sql: str, params: Any) -> int:
        """Run a DELETE; how many rows went (counted by the statement itself)."""
        (row,) = self._run(f"WITH d AS ({sql} RETURNING 1) SELECT count(*) FROM d", params)
        return int(row[0])

    def generation(self) -> int | None:  # writers to different runs commit side by side: not numbered
        return None

    def position_base(self, last: int) -> int:
        if self._base is None:
            if not self._write:
                raise ReadOnlyError("feed positions are given in write transactions only")
            if self._xid is None:
                ((xid,),) = self._run("SELECT pg_current_xact_id()::text::bigint")
                self._xid = int(xid)
            self._base = (self._xid + self._xid_offset) << POSITION_SHIFT
        return self._base

    def events_given(self, last: int) -> int:
        feed = f"'\"{self._s}\".feed'::regclass"
        ((count,),) = self._run(
            f"SELECT greatest((SELECT n_tup_ins FROM pg_stat_user_tables WHERE relid = {feed}), "
            f"(SELECT reltuples::bigint FROM pg_class WHERE oid = {feed}), 0)"
        )
        return int(count)

    def run_number(self, last: int) -> int:
        self._writing("run_number")
        (row,) = self._run(f"SELECT nextval('\"{self._s}\".run_number')")
        return int(row[0])

    # -- reads -------------------------------------------------------------------------

    def get(self, table: str, key: bytes) -> bytes | None:
        return self.fetch([(table, key)], [])[0][0]

    def get_many(self, table: str, keys: list[bytes]) -> list[bytes | None]:
        return self.fetch([(table, k) for k in keys], [])[0]

    def fetch(self, gets: list[tuple[str, bytes]], lasts: list[str]) -> tuple[list[bytes | None], list[bytes | None]]:
        known = self._known
        wanted = [(t, bytes(k)) for t, k in gets]
        missing = list(dict.fromkeys(w for w in wanted if w not in known))
        for found in missing:
            known[found] = None
        missing = [w for w in missing if _storable(*w)]  # a key no row can have (a u64 part past 2**63-1) is absent
        ends: dict[str, bytes | None] = {}
        if missing or lasts:
            if lasts:
                self.flush()
            sql, params = self._fetch_sql(missing, lasts)
            for kind, number, key, value in self._run(sql, params, lead=_run_locks(self, missing)):
                if kind == 1:
                    known[(_NAMES[number], bytes(key))] = bytes(value)
                elif kind == 3:
                    self._xid = int.from_bytes(key, "big")
                else:
                    ends[_NAMES[number]] = None if key is None else bytes(key)
                    if value is not None:
                        self.held = max(self.held, int.from_bytes(value, "big"))
        return [known[w] for w in wanted], [ends[t] for t in lasts]

    def _fetch_sql(self, missing: list[tuple[str, bytes]], lasts: list[str]) -> tuple[str, list[Any]]:
        by_table: dict[str, list[bytes]] = {}
        for table, key in missing:
            by_table.setdefault(table, []).append(key)
        params: list[Any] = []
        for table, keys in by_table.items():
            t = TABLES[table]
            if len(keys) == 1:
                params += t.parse_key(keys[0])
            else:
                params += [list(c) for c in zip(*(t.parse_key(k) for k in keys), strict=True)]
        at = (
            self._s,
            self._xid_offset,  # in the feed's horizon
            tuple((table, len(keys) == 1) for table, keys in by_table.items()),
            tuple(lasts),
            self._write,
            self._write and self._xid is None,
        )
        sql = _FETCH_SQL.get(at)
        if sql is None:
            if len(_FETCH_SQL) >= _SQL_HELD:
                _FETCH_SQL.clear()
            sql = _FETCH_SQL[at] = self._build_fetch_sql(at[2], lasts)
        return sql, params

    def _build_fetch_sql(self, tables: tuple[tuple[str, bool], ...], lasts: list[str]) -> str:
        ctes: list[str] = []
        parts: list[str] = []
        for n, (table, one) in enumerate(tables):
            t = TABLES[table]
            lock = " ORDER BY " + t.order() + " FOR UPDATE OF x" if self._write and table == "runs" else ""
            if one:
                where = " AND ".join(f"x.{c} = %s::{_type(kind)}" for c, kind in t.key)
                ctes.append(f"g{n} AS (SELECT x.* FROM {self._t(table)} x WHERE {where}{lock})")
            else:
                arrays = ", ".join(f"%s::{_type(kind)}[]" for _, kind in t.key)
                on = " AND ".join(f"x.{c} = q.{c}" for c in t.columns)
                ctes.append(
                    f"g{n} AS (SELECT x.* FROM {self._t(table)} x JOIN unnest({arrays}) AS q({', '.join(t.columns)}) "
                    f"ON {on}{lock})"
                )
            parts.append(f"SELECT 1, {_NUMBERS[table]}, {t.key_sql()}, {t.value_sql()} FROM g{n}")
        for table in lasts:
            t = TABLES[table]
            if table == "feed" and not self._write:
                last = f"(SELECT int8send(position) FROM {self._t(table)} WHERE position %s h.p ORDER BY position DESC LIMIT 1)"
                # the horizon computed once: the settled last and the held last split the feed at one place
                parts.append(
                    f"SELECT 2, {_NUMBERS['feed']}, {last % '<'}, {last % '>='} FROM (SELECT {self._horizon()} AS p) h"
                )
            else:
                parts.append(
                    f"SELECT 2, {_NUMBERS[table]}, (SELECT {t.key_sql()} FROM {self._t(table)} "
                    f"ORDER BY {t.order(reverse=True)} LIMIT 1), NULL::bytea"
                )
        if self._write and self._xid is None:  # the id feed positions derive from, in the same round trip
            parts.append("SELECT 3, 0, int8send(pg_current_xact_id()::text::bigint), NULL::bytea")
        head = ("WITH " + ", ".join(ctes) + " ") if ctes else ""
        return head + " UNION ALL ".join(parts)

    def scan(
        self, table: str, start: bytes, stop: bytes | None, *, reverse: bool = False, limit: int | None = None
    ) -> list[tuple[bytes, bytes]]:
        self.flush()
        t = TABLES[table]
        where, params = t.where_range(start, stop)
        settle = table == "feed" and not self._write and not reverse
        held = f", position >= {self._horizon()}" if settle else ""
        sql = (
            f"SELECT {t.key_sql()}, {t.value_sql()}{held} FROM {self._t(table)} WHERE {where} "
            f"ORDER BY {t.order(reverse)} LIMIT %s"
        )
        out: list[tuple[bytes, bytes]] = []
        for row in self._run(sql, [*params, limit]):
            if settle and row[2]:
                self.held = max(self.held, int.from_bytes(row[0], "big"))
                break
            out.append((bytes(row[0]), bytes(row[1])))
        return out

    def keys(self, table: str, start: bytes, stop: bytes, limit: int) -> list[bytes]:
        if table == "feed":
            return [k for k, _ in self.scan(table, start, stop, limit=max(limit, 0))]
        self.flush()
        t = TABLES[table]
        where, params = t.where_range(start, stop)
        sql = f"SELECT {t.key_sql()} FROM {self._t(table)} WHERE {where} ORDER BY {t.order()} LIMIT %s"
        return [bytes(k) for (k,) in self._run(sql, [*params, max(limit, 0)])]

    def numbers(self, table: str) -> list[int]:
        self.flush()  # a negative bigint (a damaged row) as the u64 of its bytes
        return sorted(int(v) % (1 << 64) for (v,) in self._run(TABLES[table].numbers_sql(self._t(table)), []))

    def values(self, table: str, start: bytes, count: int) -> tuple[list[bytes], bytes | None]:
        pairs = self.scan(table, start, None, limit=max(count, 0))
        return [v for _, v in pairs], (pairs[-1][0] if pairs else None)


def _run_locks(txn: PgTxn, missing: list[tuple[str, bytes]]) -> str:
    """The expressions that take, in a write, the run lock of each `runs` row about to be read
    `FOR UPDATE` that the transaction does not hold yet ("" for none): an exclusive advisory
    lock keyed by the run (`run_lock`), which gives no transaction id. A row lock may draw the
    waiter's id before it is granted (when the row's holder updated it), so a writer that
    waited behind two others could get an id, and feed positions, below those of the writer
    before it in the run; waiting on the run lock first, each writer of a run draws its id
    after the one before ended, and a run's positions grow with its offsets
    (docs/architecture.md, "PostgreSQL without a global lock")."""
    if not txn._write:
        return ""
    keys = [key for table, key in missing if table == "runs" and key not in txn._locked]
    if not keys:
        return ""
    txn._locked.update(keys)
    locks = sorted({run_lock(txn._s, key) for key in keys})  # one order: two writers of two runs do not deadlock
    return ", ".join(f"pg_advisory_xact_lock({n})" for n in locks)


_NAMES = tuple(TABLES)
_NUMBERS = {name: n for n, name in enumerate(_NAMES)}
"""A table by its number in a read statement's rows: a number reads the same in any client
encoding (text comes back as bytes under SQL_ASCII)."""

_SQL_HELD = 256
"""Statements held per kind (by schema and shape) before the cache starts again."""
_FLUSH_SQL: dict[tuple[str, tuple[tuple[bool, str, int], ...]], str] = {}
"""Write statements by (schema, shape): a few shapes per log (one append, a batch, a new run)."""


_FETCH_SQL: dict[tuple[str, int, tuple[tuple[str, bool], ...], tuple[str, ...], bool, bool], str] = {}
"""Read statements by (schema, xid offset, tables and whether one key each, lasts, write, reads the xid)."""


def _flush_sql(schema: str, shape: list[tuple[bool, str, int]]) -> str:
    """The write statement of a flush of this shape: (upsert, table, one row) per table."""
    parts: list[str] = []
    for upsert, table, one in shape:
        t = TABLES[table]
        names = t.columns + t.value_columns
        if one:
            rows = "VALUES (" + ", ".join(f"%s::{ty}" for ty in t.types()) + ")"
        else:
            rows = "SELECT * FROM unnest(" + ", ".join(f"%s::{ty}[]" for ty in t.types()) + ")"
        sql = f'INSERT INTO "{schema}".{t.name} ({", ".join(names)}) {rows}'
        if upsert:
            sets = ", ".join(f"{c} = EXCLUDED.{c}" for c in t.value_columns)
            sql += f" ON CONFLICT ({', '.join(t.columns)}) DO UPDATE SET {sets}"
        parts.append(sql)
    if len(parts) == 1:
        return parts[0]
    return "WITH " + ", ".join(f"w{i} AS ({sql})" for i, sql in enumerate(parts)) + " SELECT 1"


def _type(kind: str) -> str:
    return "bigint" if kind == "u64" else "bytea"


def _storable(table: str, key: bytes) -> bool:
    """Whether a row of `table` can have the byte key `key` (its parts fit the columns)."""
    try:
        TABLES[table].parse_key(key)
    except EventLogError:
        return False
    return True
