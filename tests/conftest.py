"""Shared fixtures: every store the suite runs against, opened on a real directory or server."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

import eventlog
from eventlog.store import LMDBStore, MemoryStore, Store

# No test depends on the wall clock: a slow machine must not turn a property into a failure.
# HYPOTHESIS_EXAMPLES scales every property up for a long run (e.g. HYPOTHESIS_EXAMPLES=2000).
settings.register_profile("eventlog", deadline=None, max_examples=int(os.environ.get("HYPOTHESIS_EXAMPLES", "100")))
settings.load_profile("eventlog")

BACKENDS = ["memory", "lmdb", "postgres"]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The name of each store in turn; postgres skips unless EVENTLOG_TEST_PG_DSN is set."""
    name: str = request.param
    if name == "postgres":
        if not os.environ.get("EVENTLOG_TEST_PG_DSN"):
            pytest.skip("set EVENTLOG_TEST_PG_DSN to run the PostgreSQL store's tests")
        try:
            import eventlog.store.postgres  # noqa: F401
        except ImportError as exc:
            pytest.skip(f"PostgreSQL store unavailable: {exc}")
    return name


@pytest.fixture
def open_store(backend: str, tmp_path: Path) -> Iterator[Callable[..., Store]]:
    """`open_store(readonly=False)` opens the same store each call (a reopen keeps what was written;
    memory: the same store, opened again): what eventlog.testing.StoreContract asks of a store."""
    opened: list[Store] = []
    memory = MemoryStore()
    schema = f"t_{os.getpid()}_{abs(hash(str(tmp_path))) % 10**8}"

    def make(readonly: bool = False) -> Store:
        store: Store
        if backend == "memory":
            assert not readonly, "a memory store is never read-only"
            memory._closed = False
            store = memory
        elif backend == "lmdb":
            store = LMDBStore(tmp_path / "log", readonly=readonly)
        else:
            from eventlog.store.postgres import PostgresStore

            store = PostgresStore(os.environ["EVENTLOG_TEST_PG_DSN"], schema=schema, readonly=readonly)
        opened.append(store)
        return store

    yield make
    for store in opened:
        try:
            store.close()
        except eventlog.EventLogError:
            pass
    if backend == "postgres" and opened:
        from eventlog.store.postgres import PostgresStore

        PostgresStore.drop_schema(os.environ["EVENTLOG_TEST_PG_DSN"], schema)


@pytest.fixture
def open_log(
    backend: str, tmp_path: Path, open_store: Callable[..., Store]
) -> Iterator[Callable[..., eventlog.EventLog]]:
    """`open_log(**kw)` opens the same log each call (LMDB through `eventlog.open`, the others on
    `open_store`). `key=` and `readonly=` (not on memory) apply to every store, as they do to
    `eventlog.open`."""
    opened: list[eventlog.EventLog] = []

    def make(**kw: Any) -> eventlog.EventLog:
        if backend == "lmdb":
            log = eventlog.open(tmp_path / "log", **kw)
        else:
            store = open_store(readonly=kw.pop("readonly", False))
            try:
                log = eventlog.open(store, **kw)
            except BaseException:
                store.close()
                raise
        opened.append(log)
        return log

    yield make
    for log in opened:
        try:
            log.close()
        except eventlog.EventLogError:
            pass


@pytest.fixture
def saver(open_log: Callable[..., eventlog.EventLog]) -> Any:
    """A LangGraph `EventLogSaver` on a fresh log of each store."""
    from eventlog.langgraph import EventLogSaver

    return EventLogSaver(open_log())


@pytest.fixture
def log(open_log: Callable[..., eventlog.EventLog]) -> eventlog.EventLog:
    """A fresh log on each backend."""
    return open_log()


@pytest.fixture(params=["lmdb", "postgres"])
def shared_log(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Where two processes open one log: an LMDB directory, or a PostgreSQL schema of its own."""
    if request.param == "lmdb":
        yield str(tmp_path / "log")
        return
    dsn = os.environ.get("EVENTLOG_TEST_PG_DSN")
    if not dsn:
        pytest.skip("set EVENTLOG_TEST_PG_DSN to run the PostgreSQL store's tests")
    from eventlog.store.postgres import PostgresStore

    schema = f"sh_{os.getpid()}_{abs(hash(str(tmp_path))) % 10**8}"
    yield f"{dsn}?schema={schema}"
    PostgresStore.drop_schema(dsn, schema)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One Chromium context for a module's browser tests (`ui_support.browser_context`)."""
    from ui_support import browser_context

    with browser_context() as context:
        yield context


@pytest.fixture
def page(browser: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A checked page (`ui_support.checked_page`): a script error fails the test, and so does any
    dialog in a module that sets `DIALOGS_FAIL = True`."""
    from ui_support import checked_page

    with checked_page(browser, dialogs_fail=getattr(request.module, "DIALOGS_FAIL", False)) as page:
        yield page
