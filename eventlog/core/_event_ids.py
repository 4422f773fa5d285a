"""Where an event id lives: found again, checked, and given to new events.

An id the log's own source makes is its entry's run number and offset (`own_id`), found by
reading that entry; every other id is in the `event_ids` index (docs/format.md, "Event ids").
"""

from __future__ import annotations

from .. import _limits
from ..errors import CorruptRecordError, InvalidArgumentError
from ..record._keys import META_RUN_NUMBER, IdSource, own_slot
from ..record._records import RunRecord
from ..record.codec import Codec
from ..record.tables import EVENT_IDS, EVENTS, RUN_NUMBERS
from ..store._base import Txn
from ._runs import Link, Runs


class EventIds:
    """Looks event ids up and gives new events theirs, inside a caller's transaction."""

    def __init__(self, codec: Codec, runs: Runs, ids: IdSource) -> None:
        self._codec, self._runs, self._ids = codec, runs, ids

    def find(self, txn: Txn, run_id: str, rec: RunRecord, event_ids: list[str]) -> dict[str, int]:
        """{id: offset} of those of `event_ids` the run holds (a fork's shared events included),
        looked up together: one round trip per run of the lineage (and one more when some are held).

        An id of the form the log draws itself (`own_id`) names its entry: the entry is read and
        its id compared (a pruned one is taken as held). Any other id, and one of that form not
        found so, is looked up in the `event_ids` index."""
        found: dict[str, int] = {}
        wanted = list(dict.fromkeys(event_ids))
        prefix = self._ids.prefix
        slots = {i: slot for i in wanted if (slot := own_slot(prefix, i)) is not None} if prefix else {}
        for link in self._runs.lineage(txn, run_id, rec):
            if slots:
                found.update(self._find_own(txn, link, slots))
            need = [i for i in wanted if i not in found]
            if need:
                values = txn.get_many(EVENT_IDS, [EVENT_IDS.key(link.rec.number, i) for i in need])
                held = {
                    event_id: int.from_bytes(value, "big")
                    for event_id, value in zip(need, values, strict=True)
                    if value is not None and int.from_bytes(value, "big") <= link.hi
                }
                if held:
                    self._check_indexed(txn, link.run_id, link.rec.number, held)
                    found.update(held)
            wanted = [i for i in wanted if i not in found]
            if not wanted or rec.parent is None:
                break
        return found

    def _find_own(self, txn: Txn, link: Link, slots: dict[str, tuple[int, int]]) -> dict[str, int]:
        """{id: offset} of the ids of the log's own form whose entry lies in `link` and holds them."""
        number = link.rec.number
        mine = {i: offset for i, (owner, offset) in slots.items() if owner == number and link.lo < offset <= link.hi}
        if not mine:
            return {}
        keys = [EVENTS.key(number, offset) for offset in mine.values()]
        held: dict[str, int] = {}
        for (event_id, offset), key, value in zip(mine.items(), keys, txn.get_many(EVENTS, keys), strict=True):
            if value is None:
                if offset <= link.rec.base:
                    held[event_id] = offset  # pruned: the id names this entry, which held it
                continue
            try:
                _, stored = self._codec.decode_entry_id(value, key)
            except CorruptRecordError as exc:
                raise exc.at(link.run_id, offset) from None
            if stored == event_id:
                held[event_id] = offset
        return held

    def refuse_own_form(self, txn: Txn, run_id: str, number: int, event_ids: list[str | None]) -> None:
        """InvalidArgumentError for a caller's id the run does not hold that has the form of an id
        the log would draw for this run, or for a run not made yet: two events of the run would
        hold it. (An id of that form from another run of the log is a caller's id like any other.)"""
        prefix = self._ids.prefix
        if not prefix:
            return
        slots = [(i, slot) for i in event_ids if i is not None and (slot := own_slot(prefix, i)) is not None]
        if not slots:
            return
        last = self._runs.meta_int(txn, META_RUN_NUMBER) if txn.dense else 0
        for event_id, (owner, _) in slots:
            # A sequence's next value is not known to a transaction (PostgreSQL): a number not
            # indexed to a run counts as not given yet there.
            not_given = owner > last if txn.dense else txn.get(RUN_NUMBERS, RUN_NUMBERS.key(owner)) is None
            if owner == number or not_given:
                raise InvalidArgumentError(
                    f"run {run_id!r}: event id {event_id!r} has the form of an id the log draws for the "
                    "run itself, but the run does not hold it; give ids of another form, or none"
                )

    def _check_indexed(self, txn: Txn, run_id: str, number: int, held: dict[str, int]) -> None:
        """Raise CorruptRecordError when the (plaintext) id index points an id at an entry of
        another id: a repeated append is a no-op only for the entry that holds its id."""
        keys = [EVENTS.key(number, offset) for offset in held.values()]
        for (event_id, offset), key, value in zip(held.items(), keys, txn.get_many(EVENTS, keys), strict=True):
            if value is None:
                continue  # pruned: ids stay indexed after their entries are gone
            try:
                _, stored = self._codec.decode_entry_id(value, key)
            except CorruptRecordError as exc:
                raise exc.at(run_id, offset) from None
            if stored != event_id:
                raise CorruptRecordError(
                    f"the event id index points {event_id!r} at the entry of id {stored!r}", run_id, offset
                )

    def draw(
        self,
        txn: Txn,
        run_id: str,
        rec: RunRecord | None,
        number: int,
        head: int,
        ids: list[str | None],
        fresh: list[int],
        taken: dict[str, int],
        checked: bool,
        drawn: list[str],
    ) -> set[int]:
        """Fill the empty slots of `ids`; returns the indexes of `fresh` whose ids go in the index.

        The log's own source makes each id from the run number and the offset its event gets
        (`own_id`): new by construction, and not indexed. An injected source's ids are drawn,
        checked and indexed like a caller's: a run forked from another, or a `checked` commit,
        looks them up first; otherwise the run's own index refuses one it holds when the id is
        inserted (KeyExistsError), which has the commit made again, checked. `drawn`: the ids an
        earlier try of this commit drew, drawn again in order; left holding this try's."""
        if self._ids.derives:
            given = {i for i in fresh if ids[i] is not None}
            start = f"{self._ids.prefix}{number:x}-"  # own_id, spelled out: once per event
            for n, i in enumerate(fresh, head + 1):
                if ids[i] is None:
                    ids[i] = f"{start}{n:x}"
            return given
        self._draw_injected(txn, run_id, rec, ids, taken, checked, drawn)
        return set(fresh)

    def _draw_injected(
        self,
        txn: Txn,
        run_id: str,
        rec: RunRecord | None,
        ids: list[str | None],
        taken: dict[str, int],
        checked: bool,
        drawn: list[str],
    ) -> None:
        look_up = rec is not None and (checked or rec.parent is not None)
        again = list(drawn)
        drawn.clear()
        for _ in range(_limits.id_draws_max):
            slots = [n for n, i in enumerate(ids) if i is None]
            if not slots:
                return
            candidates = [again.pop(0) if again else self._ids.draw() for _ in slots]
            held = set(self.find(txn, run_id, rec, candidates)) if look_up and rec is not None else set()
            for n, candidate in zip(slots, candidates, strict=True):
                if candidate in held or candidate in taken:
                    self._ids.taken(candidate, "an event id")
                    continue  # drawn again
                ids[n] = candidate
                taken[candidate] = n
                drawn.append(candidate)
        raise self._ids.exhausted()
