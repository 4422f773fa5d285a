"""Google ADK sessions kept in the log: `EventLogSessionService`, a `BaseSessionService`.

    from eventlog.adk import EventLogSessionService

    service = EventLogSessionService(eventlog.open("sessions.lmdb"))   # any eventlog log
    runner = Runner(agent=agent, app_name="app", session_service=service)

It works with google-adk 2.x (the `adk` extra). A session is one run of the log
(`adk/s/<app>/<user>/<session>`, each part percent-encoded):

- `adk.session` (first event): the app, user and session ids, the creation time and the
  session-scoped part of the initial state.
- `adk.event`: one per ADK event appended, the event as JSON data with its `temp:` state keys
  left out. The session state is the fold of these (`SessionReducer`), checkpointed every
  `checkpoint_every` events.
- `adk.forked` in a session made by `fork_session`: the events before it are the source
  session's, shared by reference.
- `adk.deleted` when a session whose events forks share is deleted (else its run is removed).

App state and user state are runs of their own (`adk/a/<app>`, `adk/u/<app>/<user>`), one
`adk.state` per change. Events stored in an older layout are read through `upcast_data`, so an
upgrade of ADK or of this package never asks for a migration. See docs/guides/adk.md.

The package: `_events` (the event kinds, the folds and the upcasters), `_names` (run ids),
`_sessions` (the sessions in the log, blocking calls), `_service` (ADK's async session service over them) and `_view` (the command line's and the UI's view).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._events import (
    LAYOUT,
    UPCASTERS,
    AdkEvent,
    ScopedReducer,
    ScopedState,
    ScopedValues,
    SessionCreated,
    SessionDeleted,
    SessionForked,
    SessionReducer,
    SessionState,
    upcast_data,
)
from ._names import app_run, session_run, user_run
from ._view import VIEW

if TYPE_CHECKING:
    from ._service import EventLogSessionService
    from ._sessions import InvocationNotFoundError, Sessions, event_of


def __getattr__(name: str) -> Any:
    """The session service and what needs google-adk, imported when first asked for: the view
    (and the command line) read sessions without it."""
    if name == "EventLogSessionService":
        from ._service import EventLogSessionService

        return EventLogSessionService
    if name in ("InvocationNotFoundError", "Sessions", "event_of"):
        from . import _sessions

        return getattr(_sessions, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "LAYOUT",
    "UPCASTERS",
    "VIEW",
    "AdkEvent",
    "EventLogSessionService",
    "InvocationNotFoundError",
    "ScopedReducer",
    "ScopedState",
    "ScopedValues",
    "SessionCreated",
    "SessionDeleted",
    "SessionForked",
    "SessionReducer",
    "SessionState",
    "Sessions",
    "app_run",
    "event_of",
    "session_run",
    "upcast_data",
    "user_run",
]
