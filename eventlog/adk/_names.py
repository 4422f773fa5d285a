"""Run ids of ADK sessions and of app and user state.

Each part is percent-encoded (no `/` left in it), so the parts of an id are found again, and
the runs of one app, and of one user in it, are neighbours in the log's key order:

    adk/s/<app>/<user>/<session>     a session
    adk/a/<app>                      app state
    adk/u/<app>/<user>               a user's state
"""

from __future__ import annotations

from urllib.parse import quote, unquote

__all__ = ["app_run", "parse_session_run", "session_prefix", "session_run", "user_run"]


def _q(part: str) -> str:
    return quote(part, safe="")


def session_run(app_name: str, user_id: str, session_id: str) -> str:
    return f"adk/s/{_q(app_name)}/{_q(user_id)}/{_q(session_id)}"


def session_prefix(app_name: str, user_id: str | None = None) -> str:
    """The prefix every session run of an app (of one user of it, when given) starts with."""
    if user_id is None:
        return f"adk/s/{_q(app_name)}/"
    return f"adk/s/{_q(app_name)}/{_q(user_id)}/"


def app_run(app_name: str) -> str:
    return f"adk/a/{_q(app_name)}"


def user_run(app_name: str, user_id: str) -> str:
    return f"adk/u/{_q(app_name)}/{_q(user_id)}"


def parse_session_run(run_id: str) -> tuple[str, str, str] | None:
    """(app, user, session) of a session run id, or None for another run."""
    parts = run_id.split("/")
    if len(parts) != 5 or parts[0] != "adk" or parts[1] != "s":
        return None
    return unquote(parts[2]), unquote(parts[3]), unquote(parts[4])
