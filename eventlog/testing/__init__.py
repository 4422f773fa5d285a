"""The store contract as tests a store of your own can run: what every store must answer the same.

Subclass `StoreContract` in a test module and give it an `open_store` fixture: a function
that opens your store, the same storage each call (a second call is a reopen: it sees what
the first one's log wrote). pytest then runs every test of the contract on it::

    import pytest
    from eventlog.testing import StoreContract

    class TestMyStore(StoreContract):
        @pytest.fixture
        def open_store(self, tmp_path):
            return lambda: MyStore(tmp_path / "db")

The tests write through an `EventLog` on your store, so they check what the log relies on
(docs/architecture.md, "Modules, one idea each"): ordered byte tables, transactions that
commit whole or not at all, `Txn.fetch`, `Txn.insert` raising `KeyExistsError`, and what a
reopen keeps. eventlog runs the same tests on its memory, LMDB and PostgreSQL stores.
Needs pytest (`pip install pytest`), which the rest of the package does not import.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

try:
    import pytest
except ImportError as exc:  # pragma: no cover - what a user without pytest sees
    raise ImportError("eventlog.testing runs under pytest: pip install pytest") from exc
else:
    # A failed assert of the contract shows its values, as in a test module.
    pytest.register_assert_rewrite(*(f"{__name__}.{part}" for part in ("_checkpoints", "_entries", "_txn")))

from .. import open as open_eventlog
from ..errors import EventLogError
from ..log import EventLog
from ..store._base import Store
from ._checkpoints import CheckpointContract, ForkContract, RemovalContract
from ._entries import AppendContract, FenceContract, RunIdContract
from ._helpers import OpenLog
from ._txn import TxnContract

__all__ = ["OpenLog", "OpenStore", "StoreContract"]

OpenStore = Callable[[], Store]
"""`open_store()`: the store under test, opened on the same storage each call."""


class StoreContract(
    AppendContract,
    FenceContract,
    RunIdContract,
    CheckpointContract,
    ForkContract,
    RemovalContract,
    TxnContract,
):
    """Every test of the store contract; a subclass provides the `open_store` fixture (an `OpenStore`)."""

    @pytest.fixture
    def open_log(self, open_store: OpenStore) -> Iterator[OpenLog]:
        """`open_log(**kw)`: `eventlog.open(open_store(), **kw)`; every log it opened is closed after the test."""
        opened: list[EventLog[Any]] = []

        def make(**kw: Any) -> EventLog[Any]:
            store = open_store()
            try:
                log: EventLog[Any] = open_eventlog(store, **kw)
            except BaseException:
                store.close()
                raise
            opened.append(log)
            return log

        yield make
        for log in opened:
            try:
                log.close()
            except EventLogError:
                pass

    @pytest.fixture
    def log(self, open_log: OpenLog) -> EventLog[Any]:
        """A fresh log on the store under test."""
        return open_log()
