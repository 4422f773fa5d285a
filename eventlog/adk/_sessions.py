"""The log side of ADK sessions: runs, their writers and folds, and every call of the session
service as a plain (blocking) call; `_service` is ADK's async face over it.

A session is one run (docs/guides/adk.md). Appends are fenced by the offset this process knows
(a `RunWriter` per run): a writer that lost its place to another process reloads and appends
after it, instead of failing as stale. An event's app and user state changes go to runs of
their own after the event: a process killed between the two leaves the change only in the
event, and the next append to (or read of) the session by any process applies the keys of it
that no later change of that scope has set (`settle`), as one transaction would have left them. `get` reads the session state from the nearest snapshot
and only the events it returns, a range of offsets read from the run's end, so its cost
follows what it returns, not the length of the session.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec
from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events import Event as AdkModel
from google.adk.platform import time as platform_time
from google.adk.platform import uuid as platform_uuid
from google.adk.sessions import Session
from google.adk.sessions.base_session_service import GetSessionConfig, ListSessionsResponse
from pydantic_core import to_jsonable_python

from .._limits import conflict_attempts_max
from ..agent.policy import CheckpointPolicy
from ..errors import (
    ConflictError,
    ForkDependencyError,
    OffsetOutOfRangeError,
    ReadOnlyError,
    RunExistsError,
    RunReplacedError,
    UnknownRunError,
)
from ..log import EventLog, made_by_fork
from ..services.runwriter import RunWriter
from ._events import (
    APP_PREFIX,
    TEMP_PREFIX,
    USER_PREFIX,
    AdkEvent,
    ScopedReducer,
    ScopedState,
    SessionCreated,
    SessionDeleted,
    SessionForked,
    SessionReducer,
    SessionState,
    split_state,
    state_delta_of,
    upcast_data,
)
from ._names import app_run, parse_session_run, session_prefix, session_run, user_run
from ._reads import events_of, session_runs, set_after

__all__ = ["InvocationNotFoundError", "Sessions", "event_of", "list_sessions", "page_sessions"]

T = TypeVar("T")

SESSION_FOLD = SessionReducer()
SCOPED_FOLD = ScopedReducer()

_RETRIES_MAX = 64
"""Reads made again while the run they read is replaced under them (`Sessions.retrying`)."""
_WRITERS_MAX = 1024
"""Run writers kept (each holds one session's or one scope's state)."""


class InvocationNotFoundError(ValueError):
    """`fork_session(before_invocation_id=...)` names an invocation the session does not hold."""


_copy = msgspec.msgpack.Decoder()
_enc = msgspec.msgpack.Encoder()


def _clone(value: T) -> T:
    """A deep copy of plain data (what the log stores), faster than `copy.deepcopy`."""
    out: T = _copy.decode(_enc.encode(value))
    return out


_json = msgspec.json.Encoder()


def event_of(stored: AdkEvent) -> AdkModel:
    """The ADK event a stored `adk.event` holds (older layouts upcast on the way). Read as JSON, as
    it was written: ADK keeps bytes (an image part, say) as base64 text in JSON."""
    return AdkModel.model_validate_json(_json.encode(upcast_data(stored.data, stored.layout)))


def _record(event: AdkModel) -> AdkEvent:
    """The `adk.event` to store for an ADK event: its JSON data without `temp:` keys."""
    data = event.model_dump(mode="json", exclude_none=True)
    actions = data.get("actions")
    if isinstance(actions, dict) and isinstance(actions.get("state_delta"), dict):
        actions["state_delta"] = {k: v for k, v in actions["state_delta"].items() if not k.startswith(TEMP_PREFIX)}
    return AdkEvent(
        id=event.id, invocation_id=event.invocation_id, author=event.author, timestamp=event.timestamp, data=data
    )


def _event_id(event: AdkModel) -> str | None:
    """The ADK event's id as the log's event id, when the log can hold it."""
    eid = event.id
    return eid if isinstance(eid, str) and eid and len(eid.encode("utf-8", "replace")) <= 256 else None


class Sessions:
    """ADK sessions in a log, every call blocking; one lock orders this process's calls."""

    def __init__(self, log: EventLog[Any], checkpoint_every: int) -> None:
        self.log = log
        self.policy = CheckpointPolicy.every(checkpoint_every)
        self.lock = threading.RLock()
        self._writers: OrderedDict[str, RunWriter[Any]] = OrderedDict()
        self._settled: OrderedDict[str, tuple[int, int]] = OrderedDict()
        """Per session run: (run number, offset) of the last event whose app and user changes are known written."""
        self._lives: dict[int, tuple[weakref.ref[Session], int, int]] = {}
        """Per `Session` object given out, alive: the life it was read from (run number, start offset)."""

    def lived(self, session: Session, number: int | None, start: int) -> Session:
        """`session`, given out as read from the life (`number`, `start`): `append` refuses it on another."""
        key = id(session)
        self._lives[key] = (weakref.ref(session, lambda _: self._lives.pop(key, None)), number or 0, start)
        return session

    def life_of(self, session: Session) -> tuple[int, int] | None:
        """The life a `Session` object this service gave out was read from; None for another object."""
        held = self._lives.get(id(session))
        return None if held is None or held[0]() is not session else (held[1], held[2])

    # -- runs, their writers and folds ------------------------------------------------------------

    def writer(self, run: str, scoped: bool = False) -> RunWriter[Any]:
        w = self._writers.get(run)
        if w is None or w.ended:
            fold: Any = SCOPED_FOLD if scoped else SESSION_FOLD
            w = self.log.writer(run, reducer=fold, policy=self.policy)
            self._writers[run] = w
            if len(self._writers) > _WRITERS_MAX:
                self._writers.popitem(last=False)
        else:
            self._writers.move_to_end(run)
        return w

    def folded(self, run: str, scoped: bool) -> tuple[int, Any] | None:
        """(run number, state at the head) of one life of a run (`retrying` reads again), or None when empty."""
        number, head = self.log.life(run)
        if head == 0:
            return None
        w = self._writers.get(run)
        if w is not None and w.run_number == number and w.offset == head:
            return number, w.state
        reducer = SCOPED_FOLD if scoped else SESSION_FOLD
        return number, self.log.state_at(run, head, reducer=reducer, run_number=number)  # of the life read

    def scoped(self, run: str) -> dict[str, Any]:
        found = self.retrying(lambda: self.folded(run, scoped=True))
        return {} if found is None else dict(found[1].values)

    def session(self, run: str) -> tuple[int, SessionState] | None:
        """(run number, state) of a live session's run, or None."""
        found = self.folded(run, scoped=False)
        if found is None or not found[1].exists:
            return None
        return found[0], found[1]

    def retrying(self, fn: Callable[[], T]) -> T:
        """`fn()` again while the run it reads is replaced under it (deleted and made again)."""
        for attempt in range(_RETRIES_MAX):
            try:
                return fn()
            except (RunReplacedError, OffsetOutOfRangeError):
                if attempt == _RETRIES_MAX - 1:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def append_scoped(self, run: str, delta: dict[str, Any], session_id: str, time: float) -> None:
        if not delta:
            return
        met: ConflictError | None = None
        for _ in range(conflict_attempts_max):
            try:  # a writer that knows the others' appends (a new one when the run was made again)
                self.writer(run, scoped=True).append(ScopedState(delta=delta, session_id=session_id, time=time))
                return
            except ConflictError as exc:  # RunReplacedError too
                met = exc
        raise ConflictError.last_of(met, conflict_attempts_max) from None

    def settled(self, run: str, number: int, offset: int) -> None:
        self._settled[run] = (number, offset)
        self._settled.move_to_end(run)
        if len(self._settled) > _WRITERS_MAX:
            self._settled.popitem(last=False)

    def settle(self, run: str, number: int, s: SessionState) -> None:
        """Write the app and user changes of the session's last event that changes them, where a
        crash kept them from their runs: each key no change of its scope committed after the
        event has set (a later change stands, as it would after one transaction)."""
        at = s.scoped_last
        if at <= s.start or self._settled.get(run, (0, 0)) >= (number, at):
            return
        try:
            entry = self.log.entry(run, at, run_number=number)
        except (RunReplacedError, OffsetOutOfRangeError):
            return  # the session was made again meanwhile: its writer's fencing finds out
        if isinstance(entry.event, AdkEvent):
            app, user, _ = split_state(state_delta_of(entry.event.data))
            for scoped, delta in ((app_run(s.app_name), app), (user_run(s.app_name, s.user_id), user)):
                lost = {k: v for k, v in delta.items() if k not in set_after(self.log, scoped, entry.position)}
                self.append_scoped(scoped, lost, s.session_id, entry.event.timestamp)
        self.settled(run, number, at)

    def merged(
        self, app_name: str, user_id: str, state: dict[str, Any], user: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Session state with app and user state merged in under their prefixes."""
        out = _clone(state)
        for key, value in self.scoped(app_run(app_name)).items():
            out[APP_PREFIX + key] = _clone(value)
        for key, value in (self.scoped(user_run(app_name, user_id)) if user is None else user).items():
            out[USER_PREFIX + key] = _clone(value)
        return out

    def user_state(self, app_name: str, user_id: str) -> dict[str, Any]:
        """A user's state (keys without `user:`), a copy."""
        return _clone(self.scoped(user_run(app_name, user_id)))

    # -- writes ---------------------------------------------------------------------------------

    def create(self, app_name: str, user_id: str, state: dict[str, Any] | None, session_id: str | None) -> Session:
        sid = session_id.strip() if session_id else None
        with self.lock:
            if sid:
                given = session_run(app_name, user_id, sid)
                if self.retrying(lambda: self.session(given)) is not None:
                    raise AlreadyExistsError(f"Session with id {sid} already exists.")
            app, user, own = split_state(to_jsonable_python(state or {}))
            now = platform_time.get_time()
            self.append_scoped(app_run(app_name), app, sid or "", now)
            self.append_scoped(user_run(app_name, user_id), user, sid or "", now)
            sid = sid or platform_uuid.new_uuid()
            run = session_run(app_name, user_id, sid)
            met: ConflictError | None = None
            for _ in range(conflict_attempts_max):
                w = self.writer(run)
                if w.state.exists:
                    raise AlreadyExistsError(f"Session with id {sid} already exists.")
                try:
                    w.append(SessionCreated(app_name=app_name, user_id=user_id, session_id=sid, time=now, state=own))
                    break
                except ConflictError as exc:  # another writer made or changed it (the writer reloaded): look again
                    met = exc
            else:
                raise ConflictError.last_of(met, conflict_attempts_max) from None
            session = Session(
                id=sid,
                app_name=app_name,
                user_id=user_id,
                state=self.merged(app_name, user_id, own),
                last_update_time=now,
            )
            return self.lived(session, w.run_number, w.state.start)

    def delete(self, app_name: str, user_id: str, session_id: str) -> None:
        sid = session_id.strip() if session_id else session_id
        run = session_run(app_name, user_id, sid)
        with self.lock:
            met: ConflictError | None = None
            for _ in range(conflict_attempts_max):
                number, head = self.log.life(run)
                found = self.retrying(lambda: self.session(run))
                if found is None:
                    return
                try:
                    self.log.delete_run(run, run_number=number, expected_offset=head)
                    self._writers.pop(run, None)
                    return
                except ForkDependencyError:  # forks share its events: the deletion is an event
                    try:
                        self.writer(run).append(SessionDeleted(time=platform_time.get_time()))
                        return
                    except ConflictError as exc:
                        met = exc
                except ConflictError as exc:  # another writer appended meanwhile: look again
                    met = exc
            raise ConflictError.last_of(met, conflict_attempts_max) from None

    def append(self, session: Session, event: AdkModel) -> bool:
        """Store the event and its app and user state; False when an equal event of its id is there."""
        record = _record(event)
        app, user, _ = split_state(state_delta_of(record.data))
        run = session_run(session.app_name, session.user_id, session.id)
        eid = _event_id(event)
        with self.lock:
            w = self.writer(run)
            met: ConflictError | None = None
            for _ in range(conflict_attempts_max):
                if not w.state.exists:
                    self._writers.pop(run, None)  # look again, past a writer that may know an older life
                    w = self.writer(run)
                    if not w.state.exists:
                        raise SessionNotFoundError(f"Session {session.id} not found.")
                if self.life_of(session) not in (None, (w.run_number or 0, w.state.start)):
                    raise StaleSessionError(
                        f"Session {session.id} was deleted and made again after this Session object was read; "
                        "get the session again"
                    )
                before, start = w.offset, w.state.start
                if w.run_number is not None:
                    self.settle(run, w.run_number, w.state)
                try:
                    offset = w.append(record, event_id=eid)
                except ConflictError as exc:  # RunReplacedError too
                    met = exc
                    w = self.writer(run)  # append after what the other writer wrote, or to the new life
                    continue
                if offset > before:
                    break
                try:  # the event of that id, of this life: a session deleted meanwhile is looked at again
                    held = self.log.entry(run, offset, run_number=w.run_number).event
                except (RunReplacedError, UnknownRunError):
                    self._writers.pop(run, None)
                    w = self.writer(run)
                    continue
                if offset > start and isinstance(held, AdkEvent) and event_of(held) == event:
                    return False
                eid = None  # another event of the same id: kept as ADK keeps it
            else:
                raise ConflictError.last_of(met, conflict_attempts_max) from None
            self.append_scoped(app_run(session.app_name), app, session.id, event.timestamp)
            self.append_scoped(user_run(session.app_name, session.user_id), user, session.id, event.timestamp)
            if (app or user) and w.run_number is not None:
                self.settled(run, w.run_number, offset)
        return True

    def fork(
        self,
        app_name: str,
        user_id: str,
        session_id: str,
        new_session_id: str | None,
        before_invocation_id: str | None,
        num_events: int | None,
    ) -> Session:
        sid = session_id.strip() if session_id else session_id
        run = session_run(app_name, user_id, sid)
        new_sid = new_session_id.strip() if new_session_id else platform_uuid.new_uuid()
        new_run = session_run(app_name, user_id, new_sid)
        with self.lock:
            found = self.retrying(lambda: self.session(run))
            if found is None:
                raise SessionNotFoundError(f"Session {sid} not found.")
            number, s = found
            at = _fork_point(self.log, run, number, s, before_invocation_id, num_events)
            if self.retrying(lambda: self.session(new_run)) is not None or self.log.head(new_run):
                raise AlreadyExistsError(f"Session with id {new_sid} already exists.")
            try:
                made = made_by_fork(self.log, run, at, new_run, run_number=number)
            except RunExistsError:
                raise AlreadyExistsError(f"Session with id {new_sid} already exists.") from None
            self._writers.pop(new_run, None)  # one kept of an older life of the id would refuse this one
            w = self.writer(new_run)
            try:
                w.expect_life(made, "it was forked")  # the run read back by id may be another writer's
                w.append(SessionForked(app_name=app_name, user_id=user_id, session_id=new_sid,
                                       time=platform_time.get_time(), source_session_id=sid, source_offset=at))  # fmt: skip
            except RunReplacedError as exc:
                raise _forked_away(new_sid, exc.now is not None) from None
            got = self.get(app_name, user_id, new_sid, None)
            if got is None or self.life_of(got) != (made, w.state.start):
                raise _forked_away(new_sid, got is not None)
            return got

    # -- reads ----------------------------------------------------------------------------------

    def get(self, app_name: str, user_id: str, session_id: str, config: GetSessionConfig | None) -> Session | None:
        sid = session_id.strip() if session_id else session_id
        run = session_run(app_name, user_id, sid)

        def read() -> tuple[tuple[int, SessionState], list[AdkEvent]] | None:
            found = self.session(run)
            if found is None:
                return None
            number, s = found
            try:
                self.settle(run, number, s)
            except ReadOnlyError:
                pass  # a read-only log is read as it is: the state the crash left
            return (number, s), events_of(self.log, run, number, s.start, s.offset, config)

        with self.lock:
            got = self.retrying(read)
            if got is None:
                return None
            (number, s), stored = got
            session = Session(
                id=sid,
                app_name=app_name,
                user_id=user_id,
                state=self.merged(app_name, user_id, s.state),
                events=[event_of(e) for e in stored],
                last_update_time=s.last_update_time,
            )
            return self.lived(session, number, s.start)


def _forked_away(sid: str, again: bool) -> Exception:
    """ADK's error for a fork another writer deleted (`again`: and made again) as it was made."""
    said = f"Session {sid} was deleted{' and made again' if again else ''} by another writer as it was forked"
    return StaleSessionError(said) if again else SessionNotFoundError(said)


def _fork_point(
    log: EventLog[Any], run: str, number: int, s: SessionState, before_invocation_id: str | None, num_events: int | None
) -> int:
    if before_invocation_id is None and num_events is None:
        return s.offset
    if num_events is not None and num_events < 0:
        raise ValueError("num_events must be at least 0")
    seen = 0
    last = s.start
    for entry in log.read(run, s.start, s.offset, run_number=number):
        if not isinstance(entry.event, AdkEvent):
            last = entry.offset
            continue
        if before_invocation_id is not None and entry.event.invocation_id == before_invocation_id:
            return entry.offset - 1
        if num_events is not None and seen == num_events:
            return entry.offset - 1
        seen += 1
        last = entry.offset
    if before_invocation_id is not None:
        raise InvocationNotFoundError(f"Invocation ID not found: {before_invocation_id}")
    return last


def _listed(held: Sessions, rid: str, app_name: str, users: dict[str, dict[str, Any]]) -> Session | None:
    parsed = parse_session_run(rid)
    if parsed is None:
        return None
    found = held.retrying(lambda: held.session(rid))
    if found is None:
        return None
    _, s = found
    uid, sid = parsed[1], parsed[2]
    if uid not in users:
        users[uid] = held.scoped(user_run(app_name, uid))
    return Session(
        id=sid,
        app_name=app_name,
        user_id=uid,
        state=held.merged(app_name, uid, s.state, users[uid]),
        last_update_time=s.last_update_time,
    )


def list_sessions(held: Sessions, app_name: str, user_id: str | None) -> ListSessionsResponse:
    """Every live session of an app (of one user, when given), oldest update first."""
    users: dict[str, dict[str, Any]] = {}
    with held.lock:
        sessions = [
            s
            for rid in session_runs(held.log, session_prefix(app_name, user_id))
            if (s := _listed(held, rid, app_name, users)) is not None
        ]
    sessions.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
    return ListSessionsResponse(sessions=sessions)


def page_sessions(
    held: Sessions, app_name: str, user_id: str | None, page_size: int, page_token: str | None
) -> tuple[ListSessionsResponse, str | None]:
    """Up to `page_size` sessions in run order after `page_token`, and the token of the next page."""
    users: dict[str, dict[str, Any]] = {}
    sessions: list[Session] = []
    last: str | None = None
    prefix = session_prefix(app_name, user_id)
    if page_token is not None and not page_token.startswith(prefix):
        raise ValueError(f"page_token {page_token!r} is not one of this listing")
    with held.lock:
        for rid in session_runs(held.log, prefix, page_token):
            if len(sessions) == page_size:
                return ListSessionsResponse(sessions=sessions), last
            s = _listed(held, rid, app_name, users)
            if s is not None:
                sessions.append(s)
                last = rid
    return ListSessionsResponse(sessions=sessions), None
