"""Which reducer reads a run: the one its latest checkpoint was made by, when this process knows
it (the log's own, the conversation loop's, an installed integration's view's), else the log's;
for a pruned run, or a fork of one, one that keeps the state at its base. The command line and
the viewer read a run with the same one, chosen as `verify` chooses it (`Checkpoints.reducer_of`)."""

from __future__ import annotations

from typing import Any

from ..core.fold import Reducer
from ..log import EventLog
from ..views import view_reducers
from .conversation import ConversationReducer

__all__ = ["known_reducers", "reducer_of"]


def known_reducers(log: EventLog[Any]) -> list[Reducer[Any]]:
    """Every reducer whose checkpoints this process can read: the log's, the conversation loop's
    and those of the installed integrations' views."""
    return [log.reducer, ConversationReducer(), *view_reducers()]


def reducer_of(log: EventLog[Any], run_id: str, *, run_number: int | None = None) -> Reducer[Any]:
    """The reducer the run's latest checkpoint was made by, among `known_reducers` (a
    conversation restored in place folds with its own), else the log's; but for a pruned run, or
    a fork of one (a LangGraph thread its saver pruned, forked), the first of them that keeps the
    state at its base when that one does not."""
    return log.checkpoints.reducer_of(run_id, known_reducers(log), run_number=run_number)
