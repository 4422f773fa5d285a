"""Which reducer reads a run: the one its latest checkpoint was made by, when this process knows
it (the log's own, the conversation loop's, an installed integration's view's), else the log's.
The command line and the viewer read a run with the same one."""

from __future__ import annotations

from typing import Any

from ..core.fold import Reducer, reducer_named
from ..log import EventLog
from ..views import view_reducers
from .conversation import ConversationReducer

__all__ = ["known_reducers", "reducer_of"]


def known_reducers(log: EventLog[Any]) -> list[Reducer[Any]]:
    """Every reducer whose checkpoints this process can read: the log's, the conversation loop's
    and those of the installed integrations' views."""
    return [log.reducer, ConversationReducer(), *view_reducers()]


def reducer_of(log: EventLog[Any], run_id: str) -> Reducer[Any]:
    """The reducer the run's latest checkpoint was made by, among `known_reducers` (a
    conversation restored in place folds with its own); else the log's."""
    latest = log.checkpoints.list(run_id, limit=1, newest_first=True)
    found = reducer_named(known_reducers(log), latest[0].reducer, latest[0].reducer_version) if latest else None
    return log.reducer if found is None else found
