"""The PostgreSQL store's messages: one per round trip, each statement prepared once per
connection and then executed by name (docs/architecture.md, "PostgreSQL without a global lock")."""

from __future__ import annotations

import hashlib
import re
import weakref
from collections.abc import Sequence
from typing import Any

from ._pg_layout import writers_lock

_BINARY_ROWS = 64
"""Array elements in a statement's parameters from which it is sent with binary parameters."""

_STATEMENTS_HELD = 1024
"""SQL texts whose names and PREPARE statements are kept before the cache starts again."""

_PREPARED_HELD = 512
"""Statements a connection keeps prepared before they are all deallocated and prepared anew."""

_BINARY_BYTES = 16 * 1024 * 1024
"""Bytes in a statement's parameters from which it is sent with binary parameters: a value
written as a hex literal takes twice its size in the message, and the server copies the text
again while it parses it, so a value of a few hundred MiB (a large snapshot) would pass the
1 GiB a server allocation may take."""

_PERCENT = re.compile(r"%[s%]?")

SETTINGS = (
    "SET plan_cache_mode = force_generic_plan",
    "SET standard_conforming_strings = on",
    "SET client_encoding = 'UTF8'",
)
"""What the store sets on each pooled connection (`postgres._configure`), and again after a
message failed, since a `DISCARD ALL` or `RESET ALL` run behind the store (by a pooler, say)
puts each back to the default of the role, the database or the URL's `options`. The messages'
meaning does not depend on them (`_literal` writes escape strings, rows carry no text): the
plans are made once, and text the server sends (its notices) converts to any character."""


class _Prepared:
    """The statements prepared on one connection, by name (the pool's connections leave
    preparing to this: `prepare_threshold=None`), and the connection's loader of result rows."""

    def __init__(self, conn: Any) -> None:
        from psycopg import errors, pq
        from psycopg.adapt import Transformer

        self.names: set[str] = set()
        self.rows = Transformer.from_context(conn)
        """Loads a result's rows with the connection's types (set to one result at a time)."""
        self.encoding = conn.info.encoding
        self.error = errors.error_from_result
        self.lost = errors.OperationalError
        self.ok = pq.ConnStatus.OK
        self.fine = (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK)
        self.unsure = False
        """A message failed: which statements it prepared is not known, so all are deallocated
        at the next use and prepared again, and the connection's `SETTINGS` made again (the
        failure may be a `DISCARD ALL` run behind the store)."""


_SESSIONS: weakref.WeakKeyDictionary[Any, _Prepared] = weakref.WeakKeyDictionary()
_STATEMENTS: dict[str, tuple[str, str]] = {}
"""SQL text -> (its name, its PREPARE statement), for the texts this process built."""


def _statement(sql: str) -> tuple[str, str]:
    found = _STATEMENTS.get(sql)
    if found is None:
        if len(_STATEMENTS) >= _STATEMENTS_HELD:
            _STATEMENTS.clear()
        name = "eventlog_" + hashlib.blake2b(sql.encode(), digest_size=10).hexdigest()
        n = iter(range(1, 1 << 16))

        def numbered(m: re.Match[str]) -> str:  # `%s` -> `$1`, `$2`, ...; `%%` -> `%`
            return f"${next(n)}" if m[0] == "%s" else "%"

        found = _STATEMENTS[sql] = (name, f"PREPARE {name} AS " + _PERCENT.sub(numbered, sql))
    return found


def _literal(value: Any, conn: Any) -> str:
    """A parameter as an SQL literal, for a message whose text is sent as it is: ints, bytes
    (bytea's hex input), None, and lists of those written here; anything else by psycopg.
    Backslashes are written in escape strings (`E'...'`), which read the same whatever
    `standard_conforming_strings` the session has: in a plain literal they would be escapes
    once something behind the store set it off (a `RESET ALL` back to a role's default), and
    the bytes stored would not be those given."""
    kind = type(value)
    if kind is int:
        return str(value)
    if isinstance(value, bytes):
        return "E'\\\\x" + value.hex() + "'"
    if value is None:
        return "NULL"
    if kind is list:
        if all(type(x) is int for x in value):
            return "'{" + ",".join(map(str, value)) + "}'"
        if all(x is None or type(x) is bytes for x in value):
            return "E'{" + ",".join("NULL" if x is None else '"\\\\\\\\x' + x.hex() + '"' for x in value) + "}'"
    from psycopg import sql  # a type this store does not bind itself

    return str(sql.Literal(value).as_string(conn))


def write_begin(schema: str) -> tuple[str, ...]:
    """The statements that begin a write transaction of the log in `schema`: the writers lock is
    taken before any transaction id (`horizon_sql`)."""
    cls, obj = writers_lock(schema)
    return "BEGIN ISOLATION LEVEL READ COMMITTED", f"SELECT pg_advisory_xact_lock_shared({cls}, {obj})"


READ_BEGIN = ("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",)


class SeveralStatements(BaseException):
    """A session of one statement was asked for a second (`Session(once=True)`): nothing was sent.
    Not an `Exception`, so that no handler of the read function it goes through takes it."""


class Session:
    """One transaction's messages on one connection, each sent as one text: its parameters are
    written into it as literals (`_literal`), and the text goes to libpq as it is (one
    `PQexec`: psycopg's cursor would add about half again of the client's CPU per round trip).
    `begin` is sent with the first statement; a message that fails leaves the transaction to
    the caller's ROLLBACK. A session made `once` sends one statement by itself, outside any
    transaction (its own snapshot, one round trip), and refuses a second (`SeveralStatements`)
    before sending anything.

    A lost connection is raised as psycopg's `OperationalError`; `committing` says whether the
    message lost held the COMMIT (then whether the transaction committed is not known; before
    it, the server rolled the transaction back when the connection went)."""

    def __init__(self, conn: Any, begin: tuple[str, ...], once: bool = False) -> None:
        self.connection, self._begin, self._once = conn, () if once else begin, once
        self.begun = False
        self.committing = False
        self._sent = False
        prepared = _SESSIONS.get(conn)
        if prepared is None:
            prepared = _SESSIONS[conn] = _Prepared(conn)
        self._prepared = prepared

    def run(self, sql: str, params: Sequence[Any] = (), then: str = "", lead: str = "") -> list[tuple[Any, ...]]:
        """Send the statement `sql` (prepared once on the connection, then executed by name)
        after the BEGIN when none was sent yet and after `lead` (expressions, `_lead`),
        followed by `then` (e.g. "COMMIT", after which the statement's rows are not read);
        returns the statement's rows. A statement with many rows in its arrays, or many bytes
        in its values, goes by itself, its parameters in binary (`_run_binary`)."""
        if self._once:
            if self._sent:
                raise SeveralStatements
            self._sent = True
        prepared = self._prepared
        if prepared.unsure and not self.begun:
            self._reset()
        if (
            sum(len(p) for p in params if type(p) is list) >= _BINARY_ROWS
            or sum(len(p) for p in params if type(p) is bytes) >= _BINARY_BYTES
        ):
            return self._run_binary(sql, params, then, lead)
        try:
            parts = self._lead(lead)
            if prepared.unsure or len(prepared.names) >= _PREPARED_HELD:
                parts.append("DEALLOCATE ALL")
                prepared.names.clear()
                prepared.unsure = False
            name, prepare = _statement(sql)
            if name not in prepared.names:
                parts.append(prepare)
                prepared.names.add(name)
            if params:
                conn = self.connection
                parts.append(f"EXECUTE {name}({', '.join([_literal(p, conn) for p in params])})")
            else:
                parts.append(f"EXECUTE {name}")
            if then:
                parts.append(then)
                self.committing = True
            result = self._exec("; ".join(parts))
        except BaseException:
            prepared.unsure = True
            raise
        if then or not result.ntuples:
            return []
        rows = prepared.rows
        rows.set_pgresult(result)
        return rows.load_rows(0, result.ntuples, tuple)

    def _reset(self) -> None:
        """After a failed message, before a transaction begins: deallocate every statement and
        make the connection's `SETTINGS` again, in a message of its own (outside the
        transaction, whose ROLLBACK would undo them)."""
        prepared = self._prepared
        self._exec("; ".join(("DEALLOCATE ALL", *SETTINGS)))
        prepared.names.clear()
        prepared.unsure = False
        prepared.encoding = self.connection.info.encoding

    def _exec(self, text: str) -> Any:
        """Send `text` (statements joined by `;`) in one message; the result of its last
        statement, or the error of the first that failed (processing stops there)."""
        prepared = self._prepared
        pgconn = self.connection.pgconn
        result = pgconn.exec_(text.encode(prepared.encoding))
        if result.status not in prepared.fine:
            error = prepared.error(result, encoding=prepared.encoding)
            if pgconn.status != prepared.ok and not isinstance(error, prepared.lost):
                raise prepared.lost(str(error))  # the connection went with no SQLSTATE said
            raise error
        return result

    def _run_binary(self, sql: str, params: Sequence[Any], then: str, lead: str) -> list[tuple[Any, ...]]:
        """`run` for a statement whose parameters hold many rows or bytes: bound by the server
        from their binary form (text literals of a thousand values cost ten times more to make),
        not prepared; the BEGIN with `lead`, and `then`, are messages of their own."""
        opening = self._lead(lead)
        if opening:
            self._exec("; ".join(opening))
        cur = self.connection.cursor()
        cur.execute(_PERCENT.sub(lambda m: "%b" if m[0] == "%s" else m[0], sql), params)
        if then:  # its rows are not read
            self.committing = True
            self._exec(then)
            return []
        return cur.fetchall() if cur.description is not None else []

    def _lead(self, lead: str) -> list[str]:
        """The statements sent before a statement: the opening ones (`_opening`), then the
        expressions `lead` evaluated in order in a SELECT (the opening's own SELECT, the
        writers lock, when it is sent: one statement less for the server)."""
        parts = self._opening()
        if lead:
            if parts and parts[-1].startswith("SELECT "):
                parts[-1] += ", " + lead
            else:
                parts.append("SELECT " + lead)
        return parts

    def _opening(self) -> list[str]:
        """The statements that begin the transaction, once: the first message sends them."""
        if self.begun:
            return []
        self.begun = True
        return list(self._begin)

    def end(self) -> None:
        """COMMIT what was begun (nothing when no statement was sent, or the session's one
        statement ran by itself)."""
        if self.begun and not self._once:
            self.committing = True
            self._exec("COMMIT")
