"""The store contract, part three: the transaction interface itself (store/_base.Txn), what the
log layer relies on when it reads several keys in one round trip and inserts keys that must be new."""

from __future__ import annotations

from typing import Any

import pytest

from ..errors import EventLogError, ReadOnlyError
from ..log import EventLog
from ..store._base import KeyExistsError, Txn


class TxnContract:
    """A store's transactions: `fetch`, `insert`, `keys`, and writes refused in a read. Keys follow
    each table's layout (docs/format.md): free-form ones go in `meta` (under `t:`) and `runs`."""

    def test_fetch_reads_keys_of_several_tables_and_last_keys(self, log: EventLog[Any]) -> None:
        def fill(txn: Txn) -> None:
            txn.put("meta", b"t:\x01", b"one")
            txn.put("meta", b"t:\x03", b"three")
            txn.put("runs", b"\x02", b"s")

        log.store.write(fill)

        def fetch(txn: Txn) -> Any:
            return txn.fetch(
                [("meta", b"t:\x03"), ("runs", b"\x02"), ("meta", b"t:\x02"), ("meta", b"t:\x03")],
                ["meta", "checkpoint_ids", "runs"],
            )

        expected = ([b"three", b"s", None, b"three"], [b"t:\x03", None, b"\x02"])
        assert log.store.read(fetch) == expected
        assert log.store.write(fetch) == expected

    def test_fetch_sees_what_its_own_transaction_wrote(self, log: EventLog[Any]) -> None:
        log.store.write(lambda txn: txn.put("meta", b"t:\x05", b"old"))

        def write_then_fetch(txn: Txn) -> Any:
            before = txn.fetch([("meta", b"t:\x05")], [])
            txn.put("meta", b"t:\x05", b"new")
            txn.put("meta", b"t:\x09", b"nine")
            txn.delete("meta", b"t:\x05")
            return before, txn.fetch([("meta", b"t:\x05"), ("meta", b"t:\x09")], ["meta"])

        before, after = log.store.write(write_then_fetch)
        assert before == ([b"old"], [])
        assert after == ([None, b"nine"], [b"t:\x09"])
        assert log.store.read(lambda txn: txn.scan("meta", b"t:", b"t;")) == [(b"t:\x09", b"nine")]

    def test_insert_of_a_taken_key_rolls_the_whole_transaction_back(self, log: EventLog[Any]) -> None:
        log.store.write(lambda txn: txn.put("meta", b"t:\x01", b"kept"))

        def clash(txn: Txn) -> None:
            txn.put("meta", b"t:\x02", b"lost")
            txn.insert("meta", b"t:\x03", b"lost too")
            txn.insert("meta", b"t:\x01", b"clash")  # raised here, or when the transaction commits

        with pytest.raises(KeyExistsError):
            log.store.write(clash)
        assert log.store.read(lambda txn: txn.scan("meta", b"t:", b"t;")) == [(b"t:\x01", b"kept")]
        assert issubclass(KeyExistsError, EventLogError)

    def test_insert_of_new_keys_then_a_put_over_one(self, log: EventLog[Any]) -> None:
        def write(txn: Txn) -> None:
            txn.insert("meta", b"t:\x01", b"a")
            txn.insert("meta", b"t:\x02", b"b")
            txn.put("meta", b"t:\x02", b"b2")

        log.store.write(write)
        assert log.store.read(lambda txn: txn.scan("meta", b"t:", b"t;")) == [(b"t:\x01", b"a"), (b"t:\x02", b"b2")]

        def insert_twice(txn: Txn) -> None:
            txn.insert("meta", b"t:\x07", b"x")
            txn.insert("meta", b"t:\x07", b"y")

        with pytest.raises(KeyExistsError):  # two inserts of one key in one transaction
            log.store.write(insert_twice)
        assert log.store.read(lambda txn: txn.get("meta", b"t:\x07")) is None

    def test_writes_are_refused_in_a_read_transaction(self, log: EventLog[Any]) -> None:
        def insert(txn: Txn) -> None:
            txn.insert("meta", b"t:\x01", b"x")

        with pytest.raises(ReadOnlyError):
            log.store.read(insert)

    def test_keys_lists_a_range_without_values(self, log: EventLog[Any]) -> None:
        def fill(txn: Txn) -> None:
            for i in range(10):
                txn.put("runs", bytes([i]), b"v" * 100)

        log.store.write(fill)
        assert log.store.read(lambda txn: txn.keys("runs", b"\x02", b"\x07", 3)) == [b"\x02", b"\x03", b"\x04"]
        assert log.store.read(lambda txn: txn.keys("runs", b"\x05", b"\x07", 10)) == [b"\x05", b"\x06"]
        assert log.store.read(lambda txn: txn.keys("runs", b"\x0a", b"\xff", 10)) == []
        assert log.store.read(lambda txn: txn.keys("runs", b"", b"\xff", 0)) == []

    def test_delete_range_removes_the_first_keys_of_a_range(self, log: EventLog[Any]) -> None:
        def fill(txn: Txn) -> None:
            for i in range(10):
                txn.put("runs", bytes([i]), b"v")

        log.store.write(fill)
        assert log.store.write(lambda txn: txn.delete_range("runs", b"\x02", b"\x08", 3)) == 3
        assert log.store.read(lambda txn: txn.keys("runs", b"", b"\xff", 20)) == [
            bytes([i]) for i in (0, 1, 5, 6, 7, 8, 9)
        ]
        assert log.store.write(lambda txn: txn.delete_range("runs", b"\x01", b"\x09")) == 5
        assert log.store.read(lambda txn: txn.keys("runs", b"", b"\xff", 20)) == [b"\x00", b"\x09"]

    def test_positions_and_run_numbers_only_increase(self, log: EventLog[Any]) -> None:
        """Dense stores give last + 1; PostgreSQL gives increasing ones (docs/format.md, "PostgreSQL")."""
        first = log.store.write(lambda txn: (txn.position_base(7), txn.run_number(7)))
        second = log.store.write(lambda txn: (txn.position_base(first[0] + 1), txn.run_number(first[1])))
        if log.store.dense:
            assert first == (7, 8) and second == (first[0] + 1, 9)
        assert second[0] > first[0] and second[1] > first[1]
        with pytest.raises(ReadOnlyError):
            log.store.read(lambda txn: txn.run_number(0))

    def test_generation_numbers_each_commit_that_changes_something(self, log: EventLog[Any]) -> None:
        """A store that numbers its commits (`Txn.generation`) gives each write transaction the
        number after the last commit that changed something: the log trusts what it wrote last
        only while the next number is its commit's plus one (docs/architecture.md, "An append")."""

        def put(txn: Txn) -> int | None:
            txn.put("meta", b"t:generation", b"x")
            return txn.generation()

        def rolled_back(txn: Txn) -> None:
            txn.put("meta", b"t:generation", b"y")
            raise _Abort

        first = log.store.write(put)
        if first is None:
            assert log.store.write(lambda txn: txn.generation()) is None
            return  # a store that does not number its commits: the log reads what it needs at each commit
        assert log.store.read(lambda txn: txn.generation()) is None  # a read transaction commits nothing
        assert log.store.write(lambda txn: txn.generation()) == first + 1
        assert log.store.write(lambda txn: txn.generation()) == first + 1  # that one changed nothing
        with pytest.raises(_Abort):
            log.store.write(rolled_back)
        assert log.store.write(put) == first + 1  # the rolled back one took no number
        assert log.store.write(put) == first + 2


class _Abort(Exception):
    pass
