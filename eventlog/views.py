"""Run views: how the command line and the UI show a run that an integration wrote.

A run written through an integration (a LangGraph thread, a WayFlow conversation) holds
that integration's own event kinds and folds with its own reducer. Its module registers a
`RunView` under the `eventlog.views` entry point group; `view_of` picks the view whose
`kind_prefix` the run's first event kind starts with. Runs of the standard kinds have no
view: the command line shows them with `AgentReducer`. `view_for_run` finds a run's view
from the log; a run pruned down to its base holds no event, so a view may also name its
reducer (an optional `fold` attribute) and is then found by the run's latest checkpoint, or, with
none (a fork of a pruned thread), by the reducer that keeps the state at the pruned base.

    [project.entry-points."eventlog.views"]
    langgraph = "eventlog.langgraph:VIEW"
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .log import EventLog

__all__ = ["RunView", "answered", "load_views", "view_for_run", "view_of", "waiting"]


class RunView(Protocol):
    """What the command line and the UI ask of an integration about one of its runs."""

    name: str
    """Short name shown beside the run (`langgraph`, `wayflow`)."""
    kind_prefix: str
    """A run whose first event kind starts with this prefix belongs to the view."""

    def history(self, log: EventLog[Any], run_id: str, limit: int | None) -> tuple[Sequence[str], list[dict[str, Any]]]:
        """The run's history, oldest first: column names and one row (plain data) per checkpoint."""

    def state(self, log: EventLog[Any], run_id: str, offset: int) -> Any:
        """The run's state after its first `offset` events, as plain data (JSON-encodable).

        A view never imports or calls what stored bytes name (docs/durability.md, guarantee 7):
        a framework payload is decoded only into known types, any other shown as data."""

    # Optional: `waiting(log, run_id, offset) -> list[dict]`, what the run waits for from a
    # human after its first `offset` events (see `waiting` below); `answered(log, run_id,
    # offset) -> list[dict]`, the answers stored that the run has not taken yet (see
    # `answered`); `fold`, its reducer.


_loaded: list[RunView] | None = None


def load_views() -> list[RunView]:
    """Every installed view (imported once). A view whose framework is missing is skipped; one
    that fails to load otherwise is skipped with a warning that names it: its runs show as
    plain events, and every other view still loads."""
    global _loaded
    if _loaded is None:
        views: list[RunView] = []
        for ep in entry_points(group="eventlog.views"):
            try:
                views.append(ep.load())
            except ImportError:
                continue  # its framework is not installed: its runs show as plain events
            except Exception as exc:  # noqa: BLE001 - an installed package's import is not ours to fail on
                warnings.warn(
                    f"the run view {ep.name!r} ({ep.value}) did not load: {type(exc).__name__}: {exc}; "
                    "its runs show as plain events",
                    RuntimeWarning,
                    stacklevel=2,
                )
        _loaded = views
    return _loaded


def view_reducers() -> list[Any]:
    """The reducers installed views fold their runs with (their optional `fold` attribute)."""
    return [view.fold for view in load_views() if getattr(view, "fold", None) is not None]  # type: ignore[attr-defined]


def view_of(first_kind: str | None) -> RunView | None:
    """The view of a run whose first event is of kind `first_kind`, or None."""
    if first_kind is None:
        return None
    for view in load_views():
        if first_kind.startswith(view.kind_prefix):
            return view
    return None


def view_for_run(log: EventLog[Any], run_id: str, *, run_number: int | None = None) -> RunView | None:
    """The view of a run of `log`: by its first event kept (in a fork of a pruned run, the first
    after that run's base), else by its latest checkpoint's reducer, else by the reducer that keeps
    the state at its pruned base (with `run_number`: of that life of the run, else RunReplacedError)."""
    views = load_views()
    if not views:
        return None
    info = log.run_info(run_id, run_number=run_number)
    for entry in log.read(run_id, info.base, min(info.head, info.base + 1), run_number=info.number):
        return view_of(str(type(entry.event).__struct_config__.tag))
    folds = [(view, fold) for view in views if (fold := getattr(view, "fold", None)) is not None]
    return next((view for view, fold in folds if log.checkpoints.kept_by(run_id, fold, run_number=info.number)), None)


def waiting(view: RunView | None, log: EventLog[Any], run_id: str, offset: int) -> list[dict[str, Any]]:
    """What a run waits for from a human after its first `offset` events (a LangGraph
    `interrupt()` not yet resumed): one dict per question, with at least `value` (plain data,
    what the run asked) and `node` (the step that asked, or None). A view tells it through an
    optional `waiting` method; a run of the standard kinds, or a view without one, waits for
    nothing here ([])."""
    method = getattr(view, "waiting", None)
    if method is None:
        return []
    return list(method(log, run_id, offset))


def answered(view: RunView | None, log: EventLog[Any], run_id: str, offset: int) -> list[dict[str, Any]]:
    """The answers stored after a run's first `offset` events that the run has not taken yet (a
    LangGraph thread's resume value, stored by `EventLogSaver.answer` or `Command(resume=...)`,
    before the graph runs on): one dict per question, with `value` and `node` as `waiting` gives
    them, and `answer` (plain data). A view tells it through an optional `answered` method; [] for
    a run of the standard kinds (its answer is its `resumed` event) or a view without one."""
    method = getattr(view, "answered", None)
    if method is None:
        return []
    return list(method(log, run_id, offset))
