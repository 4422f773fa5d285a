"""`EventLogSessionService`: ADK's `BaseSessionService` over an eventlog log, an async face over
`_sessions.Sessions` (the log's calls run in a worker thread, off the event loop)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from google.adk.events import Event as AdkModel
from google.adk.sessions import BaseSessionService, Session
from google.adk.sessions.base_session_service import GetSessionConfig, ListSessionsResponse

from ..log import EventLog
from ._sessions import Sessions, list_sessions, page_sessions

__all__ = ["EventLogSessionService"]

T = TypeVar("T")


class EventLogSessionService(BaseSessionService):
    """ADK sessions kept in an eventlog log (any store: memory, LMDB, PostgreSQL).

    Behaves as ADK's `InMemorySessionService` on every method of `BaseSessionService`, and adds
    `fork_session`, `list_sessions_page` and `get_user_state`. State values are kept as JSON data,
    as ADK's database services keep them.

    `checkpoint_every`: a session's state is checkpointed every that many events, so reading it
    folds at most that many. `offload`: run the log's calls in a worker thread, off the event
    loop (the default); False runs them on the loop (an in-memory log, tests).
    """

    def __init__(self, log: EventLog[Any], *, checkpoint_every: int = 16, offload: bool = True) -> None:
        super().__init__()
        self.log = log
        """The log the sessions are kept in."""
        self.sessions = Sessions(log, checkpoint_every)
        """The same calls, blocking."""
        self._offload = offload

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        if self._offload:
            return await asyncio.to_thread(fn, *args)
        return fn(*args)

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        return await self._call(self.sessions.create, app_name, user_id, state, session_id)

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        return await self._call(self.sessions.get, app_name, user_id, session_id, config)

    async def list_sessions(self, *, app_name: str, user_id: str | None = None) -> ListSessionsResponse:
        return await self._call(list_sessions, self.sessions, app_name, user_id)

    async def list_sessions_page(
        self, *, app_name: str, user_id: str | None = None, page_size: int = 100, page_token: str | None = None
    ) -> tuple[ListSessionsResponse, str | None]:
        """One page of sessions, in the order of (user id, session id), and the token of the next
        page (None after the last). Each page reads only its own sessions."""
        if page_size < 1:
            raise ValueError("page_size must be at least 1")
        return await self._call(page_sessions, self.sessions, app_name, user_id, page_size, page_token)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        await self._call(self.sessions.delete, app_name, user_id, session_id)

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        return await self._call(self.sessions.user_state, app_name, user_id)

    async def append_event(self, session: Session, event: AdkModel) -> AdkModel:
        if event.partial:
            return event
        if not await self._call(self.sessions.append, session, event):
            return event  # an equal event of the same id is in the session: not applied again
        await super().append_event(session=session, event=event)
        session.last_update_time = event.timestamp
        return event

    async def fork_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        new_session_id: str | None = None,
        before_invocation_id: str | None = None,
        num_events: int | None = None,
    ) -> Session:
        """A new session whose history is this session's first events, shared with it by reference.

        By default all of its events; `num_events`: its first that many; `before_invocation_id`:
        those before the first event of that invocation (ADK's rewind, as a branch: the session
        itself keeps its whole history). The new session's state is the session state after
        those events (app and user state are shared, as always). Raises SessionNotFoundError,
        AlreadyExistsError for a `new_session_id` taken, InvocationNotFoundError; and, when another
        writer deletes the new session's run as it is forked, SessionNotFoundError (StaleSessionError
        when it makes the run again): the fork never writes to or gives back that writer's session."""
        return await self._call(
            self.sessions.fork, app_name, user_id, session_id, new_session_id, before_invocation_id, num_events
        )
