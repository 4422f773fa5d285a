"""eventlog's benchmarks: eventlog beside its floors and beside LangGraph's checkpoint savers.

Run ``python -m tools.bench [SUITE ...] [--quick] [--json FILE]``. Each suite is a module
of this package whose docstring says what it measures; ``SUITES`` lists them in run order.
The LangGraph competitors are optional (the ``bench`` extra); their suite skips with a
printed reason when LangGraph is not installed.
"""

from __future__ import annotations

SUITES: dict[str, str] = {
    "append_batch": "tools.bench.append_batch",
    "append_single": "tools.bench.append_single",
    "append_threads": "tools.bench.append_threads",
    "replay": "tools.bench.replay",
    "state_at": "tools.bench.state_at",
    "replay_memory": "tools.bench.replay_memory",
    "chat": "tools.bench.chat",
    "wayflow": "tools.bench.wayflow",
    "ui_open": "tools.bench.ui_open",
}
"""Suite name -> module; every module has ``run(ctx) -> SuiteResult``."""

EVENTLOG_ONLY = ("append_batch", "append_single", "append_threads", "replay", "state_at", "replay_memory")
"""The suites that need nothing but eventlog's own dependencies."""
