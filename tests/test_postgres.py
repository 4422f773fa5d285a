"""The PostgreSQL store through `eventlog.open(URL)`: two clients of one log, as on two machines."""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator

import pytest

import eventlog
from eventlog.events import StepCompleted, UserMessage

DSN = os.environ.get("EVENTLOG_TEST_PG_DSN")
pytestmark = pytest.mark.skipif(not DSN, reason="set EVENTLOG_TEST_PG_DSN to run the PostgreSQL store's tests")


@pytest.fixture
def url() -> Iterator[str]:
    from eventlog.store.postgres import PostgresStore

    assert DSN is not None
    schema = f"t_{uuid.uuid4().hex[:12]}"
    sep = "&" if "?" in DSN else "?"
    yield f"{DSN}{sep}schema={schema}"
    PostgresStore.drop_schema(DSN, schema)


def test_two_clients_share_one_log_with_fencing(url: str) -> None:
    a, b = eventlog.open(url), eventlog.open(url)
    try:
        assert a.append("run", UserMessage(content="from a")) == 1
        assert b.head("run") == 1
        assert b.append("run", UserMessage(content="from b"), expected_offset=1) == 2
        with pytest.raises(eventlog.ConflictError):
            a.append("run", UserMessage(content="stale"), expected_offset=1)
        assert [e.event.content for e in a.read("run")] == ["from a", "from b"]
        assert [e.position for e in b.feed()] == [1, 2]
    finally:
        a.close()
        b.close()


def test_threads_and_clients_append_without_loss(url: str) -> None:
    clients = [eventlog.open(url) for _ in range(2)]
    per_thread = 20

    def work(k: int) -> None:
        log = clients[k % 2]
        done = 0
        while done < per_thread:
            head = log.head("shared")
            try:
                log.append("shared", StepCompleted(node=f"n{k}", superstep=done), expected_offset=head)
                done += 1
            except eventlog.ConflictError:
                continue

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    log = clients[0]
    entries = list(log.read("shared"))
    assert [e.offset for e in entries] == list(range(1, 4 * per_thread + 1))
    assert sorted((e.event.node, e.event.superstep) for e in entries) == sorted(
        (f"n{k}", i) for k in range(4) for i in range(per_thread)
    )
    assert [e.position for e in log.feed()] == list(range(1, 4 * per_thread + 1))
    assert log.verify().ok
    for c in clients:
        c.close()


def test_readonly_open_of_missing_schema_is_refused(url: str) -> None:
    with pytest.raises(eventlog.NotALogError):
        eventlog.open(url, readonly=True)
