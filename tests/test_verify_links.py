"""verify cross-checks what links runs, entries and the feed: each feed position against the run
it names (number to run id, an offset of the run's own, the entry there holding that position),
and each run's number against the run number index. Every variant of damage is written raw
through the store's own transactions, on every store, and must be named by run, offset and
feed position."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import eventlog
from eventlog.events import StepCompleted
from eventlog.record._keys import removal_key, u64
from eventlog.record.tables import RUNS

Log = eventlog.EventLog[Any]


def step(i: int) -> StepCompleted:
    return StepCompleted(node=f"n{i}", superstep=i, update={"i": i})


@pytest.fixture
def linked(log: Log) -> Log:
    """Runs a (positions 1-3), b (4-6), a deleted run (7-8, gone) and f, a fork of a at 2 (9-10).

    Those are the positions of a dense store; on PostgreSQL `p(log, k)` is the k-th position
    given (11: one past the last), so each damage below names the same entries on every store."""
    log.append_many("a", [step(1), step(2), step(3)])
    log.append_many("b", [step(1), step(2), step(3)])
    log.append_many("gone", [step(1), step(2)])
    log.fork("a", 2, "f")
    log.append_many("f", [step(3), step(4)])
    given = [e.position for e in log.feed()]
    _POSITIONS[id(log)] = [0, *given, given[-1] + 1]
    log.delete_run("gone")
    assert [(e.run_id, e.offset) for e in log.feed()][-2:] == [("f", 3), ("f", 4)]
    assert [e.position for e in log.feed()][-2:] == [p(log, 9), p(log, 10)]
    assert log.verify().ok
    return log


_POSITIONS: dict[int, list[int]] = {}


def p(log: Log, k: int) -> int:
    """The k-th position the linked log gave (k on a dense store)."""
    return _POSITIONS[id(log)][k]


def number(log: Log, run_id: str) -> int:
    return log.store.read(lambda txn: log._runs.require(txn, run_id)).number


def feed_ref(log: Log, position: int) -> bytes:
    ref = log.store.read(lambda txn: txn.get("feed", u64(position)))
    assert ref is not None
    return ref


def put(log: Log, table: str, key: bytes, value: bytes) -> None:
    log.store.write(lambda txn: txn.put(table, key, value))


def set_record(log: Log, run_id: str, **fields: int) -> None:
    """Rewrite a run record through the log's own encoder: its checks pass, only its fields are wrong."""

    def write(txn: Any) -> None:
        rec = log._runs.require(txn, run_id)
        for name, value in fields.items():
            setattr(rec, name, value)
        txn.put("runs", RUNS.key(run_id), log.codec.encode_value(rec, ("runs", RUNS.key(run_id))))

    log.store.write(write)


def found(log: Log) -> set[tuple[str, str | None, int | None, int | None]]:
    return {(p.kind, p.run_id, p.offset, p.position) for p in log.verify().problems}


# -- the feed ------------------------------------------------------------------------------------


def swap_across_runs(log: Log) -> set[Any]:
    one, four = feed_ref(log, p(log, 1)), feed_ref(log, p(log, 4))
    put(log, "feed", u64(p(log, 1)), four)
    put(log, "feed", u64(p(log, 4)), one)
    return {
        ("feed", "b", 1, p(log, 1)),
        ("feed", "a", 1, p(log, 4)),
        ("feed", "a", 1, p(log, 1)),
        ("feed", "b", 1, p(log, 4)),
    }


def swap_within_a_run(log: Log) -> set[Any]:
    two, three = feed_ref(log, p(log, 2)), feed_ref(log, p(log, 3))
    put(log, "feed", u64(p(log, 2)), three)
    put(log, "feed", u64(p(log, 3)), two)
    return {("feed", "a", 3, p(log, 2)), ("feed", "a", 2, p(log, 3))}


def duplicate(log: Log) -> set[Any]:
    put(log, "feed", u64(p(log, 5)), feed_ref(log, p(log, 4)))
    return {("feed", "b", 1, p(log, 5)), ("feed", "b", 2, p(log, 5))}


def extra_position_at_an_entry(log: Log) -> set[Any]:
    put(log, "feed", u64(p(log, 11)), feed_ref(log, p(log, 2)))
    return {("feed", "a", 2, p(log, 11))}


def extra_position_at_a_deleted_run(log: Log) -> set[Any]:
    gone = number(log, "b") + 1  # the deleted run's number: runs are numbered in order of creation
    put(log, "feed", u64(p(log, 11)), u64(gone) + u64(1))
    return {("feed", f"#{gone}", 1, p(log, 11))}


def repointed_at_a_deleted_run(log: Log) -> set[Any]:
    gone = number(log, "b") + 1
    put(log, "feed", u64(p(log, 6)), u64(gone) + u64(2))
    return {("feed", f"#{gone}", 2, p(log, 6)), ("feed", "b", 3, p(log, 6))}


def past_a_head(log: Log) -> set[Any]:
    put(log, "feed", u64(p(log, 11)), u64(number(log, "a")) + u64(4))
    return {("feed", "a", 4, p(log, 11))}


def into_a_forks_shared_offsets(log: Log) -> set[Any]:
    put(log, "feed", u64(p(log, 11)), u64(number(log, "f")) + u64(1))
    return {("feed", "f", 1, p(log, 11))}


def at_a_number_never_given(log: Log) -> set[Any]:
    put(log, "feed", u64(p(log, 11)), u64(999) + u64(1))
    return {("feed", "#999", 1, p(log, 11))}


def malformed(log: Log) -> set[Any]:
    if not log.store.dense:
        pytest.skip("PostgreSQL keeps a feed reference as two columns: a malformed one cannot be stored")
    put(log, "feed", u64(p(log, 11)), b"short")
    return {("feed", None, None, p(log, 11))}


# -- run records' numbers and the run number index ----------------------------------------------


def records_swap_numbers(log: Log) -> set[Any]:
    na, nb = number(log, "a"), number(log, "b")
    set_record(log, "a", number=nb)
    set_record(log, "b", number=na)
    every_position = {("feed", "a", o, p(log, o)) for o in (1, 2, 3)} | {
        ("feed", "b", o, p(log, o + 3)) for o in (1, 2, 3)
    }
    return {("index", "a", None, None), ("index", "b", None, None)} | every_position


def index_swaps_numbers(log: Log) -> set[Any]:
    na, nb = number(log, "a"), number(log, "b")
    put(log, "run_numbers", u64(na), b"b")
    put(log, "run_numbers", u64(nb), b"a")
    every_position = {("feed", "b", o, p(log, o)) for o in (1, 2, 3)} | {
        ("feed", "a", o, p(log, o + 3)) for o in (1, 2, 3)
    }
    return {("index", "a", None, None), ("index", "b", None, None)} | every_position


def record_takes_anothers_number(log: Log) -> set[Any]:
    set_record(log, "b", number=number(log, "a"))
    return {("index", "b", None, None)}


def record_takes_a_number_never_given(log: Log) -> set[Any]:
    set_record(log, "b", number=999)
    return {("index", "b", None, None)} | {("feed", "b", o, p(log, o + 3)) for o in (1, 2, 3)}


def record_takes_number_zero(log: Log) -> set[Any]:
    set_record(log, "a", number=0)
    return {("index", "a", None, None)}


def record_head_lowered(log: Log) -> set[Any]:
    set_record(log, "b", head=2)
    return {("feed", "b", 3, p(log, 6)), ("index", "b", 3, None)}


def index_names_a_deleted_run(log: Log) -> set[Any]:
    gone = number(log, "b") + 1
    put(log, "run_numbers", u64(gone), b"gone")
    return {("index", "gone", None, None)}


VARIANTS: list[Callable[[Log], set[Any]]] = [
    swap_across_runs,
    swap_within_a_run,
    duplicate,
    extra_position_at_an_entry,
    extra_position_at_a_deleted_run,
    repointed_at_a_deleted_run,
    past_a_head,
    into_a_forks_shared_offsets,
    at_a_number_never_given,
    malformed,
    records_swap_numbers,
    index_swaps_numbers,
    record_takes_anothers_number,
    record_takes_a_number_never_given,
    record_takes_number_zero,
    record_head_lowered,
    index_names_a_deleted_run,
]


@pytest.mark.parametrize("damage", VARIANTS, ids=[v.__name__ for v in VARIANTS])
def test_verify_names_each_broken_link(linked: Log, damage: Callable[[Log], set[Any]]) -> None:
    expected = damage(linked)
    problems = found(linked)
    assert expected <= problems, f"missing {expected - problems}; found {problems}"


def test_a_removal_cut_short_is_not_a_broken_link(linked: Log) -> None:
    """The feed positions of a run whose delete has not finished are the removal's, not damage."""
    gone = number(linked, "b") + 1
    put(linked, "meta", removal_key(gone), u64((1 << 64) - 1) + b"\x00")
    put(linked, "feed", u64(p(linked, 11)), u64(gone) + u64(1))
    assert {p.kind for p in linked.verify().problems} == {"meta"}
    linked.repair()
    assert linked.verify().ok


def test_repair_removes_a_position_that_points_at_an_entry_of_another(linked: Log) -> None:
    """An entry's position is sealed in it: a second feed position pointing at the entry is a
    stray, shown twice by the feed; repair removes it and keeps the entry's own."""
    before = [(e.run_id, e.offset, e.position) for e in linked.feed()]
    extra_position_at_an_entry(linked)
    assert not linked.verify().ok
    assert any(
        f"feed position {p(linked, 11)} pointed at the entry of position {p(linked, 2)}" in done
        for done in linked.repair()
    )
    assert linked.verify().ok
    assert [(e.run_id, e.offset, e.position) for e in linked.feed()] == before
