"""eventlog's benchmarks: eventlog beside its floors and beside LangGraph's checkpoint savers.

Run ``python -m tools.bench [SUITE ...] [--quick] [--json FILE]``. Each suite is a module
of this package whose docstring says what it measures; ``SUITES`` lists them in run order.
The LangGraph competitors are optional (the ``bench`` extra); their suite skips with a
printed reason when LangGraph is not installed. Sizes can be set from the environment
(``EVENTLOG_BENCH_*``, named in each suite's docstring); ``--quick`` uses small defaults.
"""

from __future__ import annotations

SUITES: dict[str, str] = {
    "append_batch": "tools.bench.append_batch",
    "append_train": "tools.bench.append_train",
    "append_single": "tools.bench.append_single",
    "append_cpu": "tools.bench.append_cpu",
    "group_commit": "tools.bench.group_commit",
    "append_async": "tools.bench.append_async",
    "replay": "tools.bench.replay",
    "state_at": "tools.bench.state_at",
    "replay_memory": "tools.bench.replay_memory",
    "postgres": "tools.bench.postgres",
    "scale": "tools.bench.scale",
    "chat": "tools.bench.chat",
    "fleet": "tools.bench.fleet",
    "chat_async": "tools.bench.chat_async",
    "wayflow": "tools.bench.wayflow",
    "openai_agents": "tools.bench.openai_agents",
    "adk": "tools.bench.adk",
    "ui_open": "tools.bench.ui_open",
    "ui_runs": "tools.bench.ui_runs",
    "ui_thread": "tools.bench.ui_thread",
}
"""Suite name -> module; every module has ``run(ctx) -> SuiteResult``."""

EVENTLOG_ONLY = (
    "append_batch",
    "append_train",
    "append_single",
    "append_cpu",
    "group_commit",
    "append_async",
    "replay",
    "state_at",
    "replay_memory",
    "scale",
)
"""The suites that need nothing but eventlog's own dependencies (`postgres` needs a server:
it runs when ``EVENTLOG_BENCH_PG_DSN`` is set and skips with a printed reason otherwise)."""
