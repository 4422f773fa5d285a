"""`EventLogSession`: the OpenAI Agents SDK's `Session` protocol over a run of the log.

One item is one `openai_agents.item` event. `pop_item` appends an `openai_agents.popped`
event naming the item's offset and `clear_session` an `openai_agents.cleared` event: nothing
is rewritten, the removed items stay readable (`history`). A session caches its folded items
and reads only the events appended since (by any process) on each call.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec

from .._limits import conflict_attempts_max
from ..aio import AsyncEventLog
from ..errors import ConflictError, RunReplacedError, UnknownRunError
from ..log import EventLog, RunInfo
from ._events import AgentsReducer, AgentsState, ItemAdded, ItemPopped, SessionCleared
from ._types import HistoryEntry, NotAnAgentsRunError, SessionInfo

__all__ = ["EventLogSession", "SkippingSession", "list_sessions"]

T = TypeVar("T")

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder()


def _copy(value: Any) -> Any:
    """A copy the caller may change (the cached items stay as the log has them); 8x faster than deepcopy."""
    return _decoder.decode(_encoder.encode(value))


_SESSION_KINDS = (ItemAdded, ItemPopped, SessionCleared)


class EventLogSession:
    """A conversation's items in a run of `log` named `session_id` (the SDK's `Session` protocol).

        session = EventLogSession("user-42", log)
        result = await Runner.run(agent, "Hello", session=session)

    Any eventlog log works (memory, LMDB, PostgreSQL; sealed or not), and an `AsyncEventLog`
    (its `sync` log is used). The methods are coroutines, as the protocol asks; the log's calls
    run in a worker thread.
    """

    def __init__(
        self, session_id: str, log: EventLog[Any] | AsyncEventLog[Any], *, session_settings: Any = None
    ) -> None:
        self.session_id = session_id
        self.log: EventLog[Any] = log.sync if isinstance(log, AsyncEventLog) else log
        self.session_settings = _settings(session_settings)
        """The SDK's `SessionSettings` (its `limit` is the default of `get_items`): the one given
        (a mapping is made one, as `SQLiteSession` does), else the SDK's default."""
        self._reducer = AgentsReducer()
        self._lock = threading.Lock()
        self._number = 0
        self._state: AgentsState = self._reducer.initial()

    # -- the Session protocol ----------------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The session's items in order; with `limit` (or the settings' limit) the latest `limit` of them."""
        return await _in_thread(self.get_items_sync, limit)

    async def add_items(self, items: list[Any]) -> None:
        """Append `items`, one event each, in one atomic append."""
        await _in_thread(self.add_items_sync, items)

    async def pop_item(self) -> Any:
        """Remove the latest item from the session and return it (None when there is none); the log keeps it."""
        return await _in_thread(self.pop_item_sync)

    async def clear_session(self) -> None:
        """Remove every item from the session; the log keeps them, readable through `history`."""
        await _in_thread(self.clear_session_sync)

    # -- the same, blocking ------------------------------------------------------------------

    def get_items_sync(self, limit: int | None = None) -> list[Any]:
        if limit is None and self.session_settings is not None:
            limit = getattr(self.session_settings, "limit", None)
        with self._lock:
            items = self._refresh().items
            if limit is not None and limit >= 0:
                items = items[-limit:] if limit else []
            return list(_copy(items))

    def add_items_sync(self, items: list[Any]) -> None:
        if not items:
            return
        events = [ItemAdded(item=item) for item in items]
        self.log.append_many(self.session_id, events)

    def pop_item_sync(self) -> Any:
        """`pop_item`, blocking. Each attempt pops the item latest then; after
        `conflict_attempts_max` attempts that another writer came before, ConflictError."""
        met: ConflictError | None = None  # the last conflict: its heads name the last attempt's
        for _ in range(conflict_attempts_max):
            with self._lock:
                state = self._refresh()
                if not state.items:
                    return None
                offset, item = state.offsets[-1], state.items[-1]
                head, number = state.events, self._number
            try:
                self.log.append(self.session_id, ItemPopped(offset=offset), expected_offset=head, run_number=number)
            except ConflictError as exc:  # another writer appended first, or the session was made again
                met = exc  # pop what is latest now
                continue
            return _copy(item)
        raise ConflictError.last_of(met, conflict_attempts_max) from None

    def clear_session_sync(self) -> None:
        """`clear_session`, blocking; bounded as `pop_item_sync` is."""
        met: ConflictError | None = None
        for _ in range(conflict_attempts_max):
            with self._lock:
                state = self._refresh()
                if not state.items:
                    return
                count, head, number = len(state.items), state.events, self._number
            try:
                self.log.append(self.session_id, SessionCleared(items=count), expected_offset=head, run_number=number)
            except ConflictError as exc:
                met = exc  # clear what is there now
                continue
            return
        raise ConflictError.last_of(met, conflict_attempts_max) from None

    # -- beyond the protocol -----------------------------------------------------------------

    def history(self) -> list[HistoryEntry]:
        """Every event of the session, oldest first: items added (and whether they were removed
        since), pops (with the item they removed) and clears; of a session pruned (or forked from
        a pruned one), those kept after its base."""
        added: dict[int, Any] = {}
        rows: list[HistoryEntry] = []
        removed: set[int] = set()
        live: list[int] = []
        info = self.log.run_info(self.session_id)
        for entry in self.log.read(self.session_id, info.base, run_number=info.number):
            event = entry.event
            if isinstance(event, ItemAdded):
                added[entry.offset] = event.item
                live.append(entry.offset)
                rows.append(HistoryEntry(entry.offset, entry.time_ns, "added", event.item))
            elif isinstance(event, ItemPopped):
                removed.add(event.offset)
                live = [o for o in live if o != event.offset]
                rows.append(HistoryEntry(entry.offset, entry.time_ns, "popped", added.get(event.offset)))
            elif isinstance(event, SessionCleared):
                removed.update(live)
                live = []
                rows.append(HistoryEntry(entry.offset, entry.time_ns, "cleared"))
            else:
                raise NotAnAgentsRunError(
                    f"{self.session_id} holds {type(event).__name__} at offset {entry.offset}: not a session"
                )
        return [
            HistoryEntry(r.offset, r.time_ns, r.action, r.item, r.offset in removed) if r.action == "added" else r
            for r in rows
        ]

    def items_added_after(self, offset: int, *, run_number: int | None = None) -> list[Any]:
        """The items added to the session after its first `offset` events, in order; with
        `run_number`, those of that life only: none when the session is another life now."""
        try:
            entries = list(self.log.read(self.session_id, offset, run_number=run_number))
        except (RunReplacedError, UnknownRunError):
            if run_number is None:
                raise
            return []
        return [e.event.item for e in entries if isinstance(e.event, ItemAdded)]

    def items_at(self, offset: int) -> list[Any]:
        """The session's items as they were after its first `offset` events."""
        state: AgentsState = self.log.state_at(self.session_id, offset, reducer=self._reducer)
        return state.items

    async def fork_session(self, at: int | None = None, new_session_id: str | None = None) -> EventLogSession:
        """A new session whose first `at` events (default: all) are this one's, shared by the log, not copied.

        `at` is an offset of the session's run (`history()` gives each event's); the new
        session goes on from there and this one is left as it is."""
        return await _in_thread(self.fork_session_sync, at, new_session_id)

    def fork_session_sync(self, at: int | None = None, new_session_id: str | None = None) -> EventLogSession:
        number, head = self.log.life(self.session_id)
        at = head if at is None else at
        new_id = new_session_id or f"{self.session_id}@{at}"
        self.log.fork(self.session_id, at, new_id, run_number=number or None)  # of the life `at` was read on
        return EventLogSession(new_id, self.log, session_settings=self.session_settings)

    def _refresh(self) -> AgentsState:
        """The folded session, brought up to the log's head (called under the lock). A session
        deleted (and made again) between its life read and its events read is read again, on
        the life it has then, as SQLiteSession's reads never fail over it."""
        for _ in range(conflict_attempts_max - 1):
            try:
                return self._refresh_once()
            except (RunReplacedError, UnknownRunError):
                self._number, self._state = -1, self._reducer.initial()  # forget the life that went
        return self._refresh_once()

    def _refresh_once(self) -> AgentsState:
        number, head = self.log.life(self.session_id)
        if number != self._number or head < self._state.events:
            self._number, self._state = number, self._reducer.initial()  # made again, or new to us
            if number == 0:
                return self._state
            if (base := self.log.run_info(self.session_id, run_number=number).base) > 0:
                self._state = self.log.state_at(self.session_id, base, reducer=self._reducer, run_number=number)
        if head > self._state.events:
            for entry in self.log.read(self.session_id, self._state.events, head, run_number=number):
                if not isinstance(entry.event, _SESSION_KINDS):
                    raise NotAnAgentsRunError(
                        f"{self.session_id} holds {type(entry.event).__name__} at offset {entry.offset}: not a session"
                    )
                self._state = self._reducer.apply(self._state, entry.event)
        return self._state


class SkippingSession:
    """A session that does not add again the items a killed attempt of a run added already.

    A resumed run goes through the steps after its last checkpoint again and adds their items
    to the session; those the killed attempt added are in `written` (in order) and are skipped
    once each, as they come. Everything else goes to `inner`."""

    def __init__(self, inner: EventLogSession, written: list[Any]) -> None:
        self.inner = inner
        self.session_id = inner.session_id
        self.session_settings = inner.session_settings
        self.written = list(written)

    async def get_items(self, limit: int | None = None) -> list[Any]:
        return await self.inner.get_items(limit)

    async def add_items(self, items: list[Any]) -> None:
        fresh = []
        for item in items:
            i = next((k for k, w in enumerate(self.written) if w == item), None)
            if i is None:
                fresh.append(item)
            else:
                del self.written[: i + 1]  # an earlier one not added again (the run's input) is passed
        await self.inner.add_items(fresh)

    async def pop_item(self) -> Any:
        return await self.inner.pop_item()

    async def clear_session(self) -> None:
        await self.inner.clear_session()


def list_sessions(log: EventLog[Any], *, after: str | None = None, limit: int | None = None) -> list[SessionInfo]:
    """The sessions of `log` (runs whose first event kept is a session's), in run id order: those
    after the run id `after`, at most `limit` of them (a page; the next starts after its last id)."""
    out: list[SessionInfo] = []
    for run_id in log.iter_runs(after):
        if limit is not None and len(out) >= limit:
            break
        info = log.run_info(run_id)
        if _is_session(log, info):
            out.append(SessionInfo(run_id, info.head, info.parent, info.fork_offset, info.created_ns))
    return out


def _is_session(log: EventLog[Any], info: RunInfo) -> bool:
    """Whether the run holds a session: its first event kept is a session's; with none after its
    base (pruned, or forked from a pruned one, at its head), the state kept there is a session's."""
    for entry in log.read(info.run_id, info.base, min(info.head, info.base + 1), run_number=info.number):
        return isinstance(entry.event, _SESSION_KINDS)
    reducer = AgentsReducer()
    if not info.base or not log.checkpoints.kept_by(info.run_id, reducer, run_number=info.number):
        return False
    return not log.state_at(info.run_id, info.base, reducer=reducer, run_number=info.number).agent


def _settings(given: Any) -> Any:
    """`given` as the SDK's `SessionSettings` (a default one for None), as `SQLiteSession` takes it;
    `given` itself when the SDK is not installed (the session is then read, not run)."""
    try:
        from agents.memory.session_settings import SessionSettings, coerce_session_settings
    except ImportError:
        return given
    return SessionSettings() if given is None else coerce_session_settings(given)


async def _in_thread(fn: Callable[..., T], *args: Any) -> T:
    return await asyncio.to_thread(fn, *args)
