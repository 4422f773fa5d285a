"""The PostgreSQL layout's columns of many rows at once are what its row-by-row parse gives: for
keys and values of every table, well formed or not (a wrong length, a number past 2**63 - 1)."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eventlog.errors import EventLogError
from eventlog.store._pg_layout import TABLES, Table

u64 = st.one_of(st.integers(0, (1 << 63) - 1), st.integers(1 << 63, (1 << 64) - 1))


def raw(parts: tuple[tuple[str, str], ...]) -> st.SearchStrategy[bytes]:
    numbers = sum(kind == "u64" for _, kind in parts)
    tail = st.binary(max_size=12) if parts[-1][1] == "bytes" else st.just(b"")
    well = st.tuples(st.lists(u64, min_size=numbers, max_size=numbers), tail).map(
        lambda nt: struct.pack(">" + "Q" * numbers, *nt[0]) + nt[1]
    )
    return st.one_of(well, well, st.binary(max_size=3 * 8 + 4))  # mostly well formed


def row_by_row(table: Table, pairs: list[tuple[bytes, bytes]]) -> list[list[Any]]:
    return [list(c) for c in zip(*(table.parse_key(k) + table.parse_value(v) for k, v in pairs), strict=True)]


@pytest.mark.parametrize("name", sorted(TABLES))
@given(data=st.data())
def test_the_columns_of_many_rows_are_those_of_each_row(name: str, data: st.DataObject) -> None:
    table = TABLES[name]
    pairs = data.draw(st.lists(st.tuples(raw(table.key), raw(table.value)), min_size=2, max_size=6))
    try:
        expected: Any = row_by_row(table, pairs)
    except EventLogError as exc:
        expected = str(exc)
    try:
        got: Any = table.parse_rows(pairs)
    except EventLogError as exc:
        got = str(exc)
    assert got == expected
