"""The event kinds an ADK session adds to the log, the folds of a session and of app or user
state, and the upcasters that read events stored in an older layout.

A session is one run. Its first event is `adk.session` (or, for a fork, the parent's first
events and then `adk.forked`); each ADK event appended to the session is one `adk.event`
holding the ADK event as JSON data (`temp:` keys left out). App state and user state live in
runs of their own, one `adk.state` per change; the session event that made the change is named
in it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from ..events import Event, register

__all__ = [
    "APP_PREFIX",
    "LAYOUT",
    "TEMP_PREFIX",
    "UPCASTERS",
    "USER_PREFIX",
    "AdkEvent",
    "ScopedReducer",
    "ScopedState",
    "ScopedValues",
    "SessionCreated",
    "SessionDeleted",
    "SessionForked",
    "SessionReducer",
    "SessionState",
    "split_state",
    "upcast_data",
]

APP_PREFIX = "app:"
USER_PREFIX = "user:"
TEMP_PREFIX = "temp:"

LAYOUT = 1
"""The layout of `AdkEvent.data` this version writes: ADK's `Event` as JSON data (snake_case keys)."""


class SessionCreated(Event, frozen=True, tag="adk.session"):
    """An ADK session began (or began again under an id whose earlier session was deleted)."""

    app_name: str
    user_id: str
    session_id: str
    time: float
    """ADK's `last_update_time` at creation (seconds since the epoch)."""
    state: dict[str, Any] = msgspec.field(default_factory=dict)
    """The session-scoped part of the initial state (app: and user: keys go to their own runs)."""


class SessionForked(Event, frozen=True, tag="adk.forked"):
    """This run is a fork of another session: the events before this one are that session's first."""

    app_name: str
    user_id: str
    session_id: str
    time: float
    source_session_id: str
    """The session forked."""
    source_offset: int
    """The offset of the source run the fork was made at."""


class SessionDeleted(Event, frozen=True, tag="adk.deleted"):
    """The session was deleted while forks of it share its events (else its run is removed)."""

    time: float


class AdkEvent(Event, frozen=True, tag="adk.event"):
    """One ADK event appended to the session."""

    id: str
    invocation_id: str
    author: str
    timestamp: float
    data: dict[str, Any]
    """The ADK event as JSON data (`Event.model_dump(mode="json")`), in layout `layout`."""
    layout: int = LAYOUT
    """The layout of `data`; older layouts are upcast on read (`upcast_data`)."""


class ScopedState(Event, frozen=True, tag="adk.state"):
    """A change of app state or of a user's state (keys without their `app:` or `user:` prefix)."""

    delta: dict[str, Any]
    session_id: str = ""
    """The session whose event (or creation) made the change."""
    time: float = 0.0


for _kind in (SessionCreated, SessionForked, SessionDeleted, AdkEvent, ScopedState):
    register(_kind)


# -- layouts of AdkEvent.data ----------------------------------------------------------------


def _from_columns(row: dict[str, Any]) -> dict[str, Any]:
    """Layout 0: an event as ADK's first database schema kept it, one column per field
    (`long_running_tool_ids_json` a JSON string, `timestamp` an ISO datetime, `actions` a map)."""
    import datetime as _dt
    import json

    data = {k: v for k, v in row.items() if k not in ("long_running_tool_ids_json", "timestamp") and v is not None}
    ids = row.get("long_running_tool_ids_json")
    if ids:
        data["long_running_tool_ids"] = sorted(json.loads(ids))
    ts = row.get("timestamp")
    if isinstance(ts, str):
        parsed = _dt.datetime.fromisoformat(ts)
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=_dt.UTC)
        data["timestamp"] = parsed.timestamp()
    elif isinstance(ts, int | float):
        data["timestamp"] = float(ts)
    return data


UPCASTERS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {0: _from_columns}
"""For each older layout n, the function from `data` in layout n to layout n + 1."""


def upcast_data(data: dict[str, Any], layout: int) -> dict[str, Any]:
    """`data` stored in `layout`, brought to `LAYOUT` one step at a time.

    ADK adding a field needs no step (the field reads back as its default), nor dropping one
    (ADK's `Event` ignores a field it does not know); a field renamed or reshaped does."""
    if layout > LAYOUT:
        raise ValueError(f"an ADK event stored in layout {layout}, newer than this version reads ({LAYOUT})")
    while layout < LAYOUT:
        step = UPCASTERS.get(layout)
        if step is None:
            raise ValueError(f"no upcaster from ADK event layout {layout}")
        data, layout = step(data), layout + 1
    return data


# -- state scopes ----------------------------------------------------------------------------


def split_state(delta: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(app, user, session) parts of a state delta by ADK's scoping: `app:` and `user:` keys lose
    their prefix, `temp:` keys are dropped, the rest is the session's."""
    app: dict[str, Any] = {}
    user: dict[str, Any] = {}
    session: dict[str, Any] = {}
    for key, value in delta.items():
        if key.startswith(APP_PREFIX):
            app[key[len(APP_PREFIX) :]] = value
        elif key.startswith(USER_PREFIX):
            user[key[len(USER_PREFIX) :]] = value
        elif not key.startswith(TEMP_PREFIX):
            session[key] = value
    return app, user, session


def state_delta_of(data: dict[str, Any]) -> dict[str, Any]:
    """The state delta an ADK event's data carries ({} when none)."""
    actions = data.get("actions")
    if not isinstance(actions, dict):
        return {}
    delta = actions.get("state_delta", actions.get("stateDelta"))
    return delta if isinstance(delta, dict) else {}


# -- folds -----------------------------------------------------------------------------------


class SessionState(msgspec.Struct, omit_defaults=True):
    """What `SessionReducer` folds a session's run into."""

    app_name: str = ""
    user_id: str = ""
    session_id: str = ""
    exists: bool = False
    """False before creation and after a deletion kept as an event."""
    offset: int = 0
    """Events folded: the offset this state is at."""
    start: int = 0
    """Offset of the event that began the session's current life (`adk.session`)."""
    last_update_time: float = 0.0
    state: dict[str, Any] = {}
    """Session-scoped state (no app:, user: or temp: keys)."""
    events: int = 0
    """ADK events in the session."""
    forked_from: list[dict[str, Any]] = []
    """Each fork this session descends from: `session_id` and `offset`."""
    rewinds: int = 0
    """Rewind events appended (ADK's `rewind_before_invocation_id`)."""
    scoped_last: int = 0
    """Offset of the last ADK event that changes app or user state (0: none, or not known from
    an older snapshot): the one whose change a crash may have kept from its run (`_sessions`)."""


class SessionReducer:
    """Folds an ADK session's events into `SessionState` (deterministic, no I/O)."""

    name = "adk.session"
    version = 1
    state_type = SessionState

    def initial(self) -> SessionState:
        return SessionState()

    def apply(self, state: SessionState, event: Event) -> SessionState:
        s = state
        s.offset += 1
        if isinstance(event, AdkEvent):
            app, user, session = split_state(state_delta_of(event.data))
            if session:
                s.state.update(session)
            if app or user:
                s.scoped_last = s.offset
            s.last_update_time = event.timestamp
            s.events += 1
            actions = event.data.get("actions")
            if isinstance(actions, dict) and actions.get("rewind_before_invocation_id"):
                s.rewinds += 1
        elif isinstance(event, SessionCreated):
            s = SessionState(
                app_name=event.app_name,
                user_id=event.user_id,
                session_id=event.session_id,
                exists=True,
                last_update_time=event.time,
                state=dict(event.state),
                offset=s.offset,
                start=s.offset,
            )
        elif isinstance(event, SessionForked):
            s.app_name, s.user_id, s.session_id = event.app_name, event.user_id, event.session_id
            s.last_update_time = event.time
            s.forked_from.append({"session_id": event.source_session_id, "offset": event.source_offset})
        elif isinstance(event, SessionDeleted):
            s.exists = False
            s.last_update_time = event.time
        return s


class ScopedValues(msgspec.Struct):
    """App state or one user's state: keys without their prefix."""

    values: dict[str, Any] = {}


class ScopedReducer:
    """Folds a run of `adk.state` changes into `ScopedValues`."""

    name = "adk.scoped"
    version = 1
    state_type = ScopedValues

    def initial(self) -> ScopedValues:
        return ScopedValues()

    def apply(self, state: ScopedValues, event: Event) -> ScopedValues:
        if isinstance(event, ScopedState):
            state.values.update(event.delta)
        return state
