"""The store contract (eventlog.testing), run against every store: memory, LMDB, and PostgreSQL
when EVENTLOG_TEST_PG_DSN is set. The in-memory store is the reference; every other store
must answer the same. `open_store` comes from conftest.py, one store per backend."""

from __future__ import annotations

from eventlog.testing import StoreContract


class TestEveryStore(StoreContract):
    """Each test of the contract, once per backend."""
