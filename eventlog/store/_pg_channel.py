"""The PostgreSQL store's notifications: a NOTIFY after commits, a LISTENing thread that wakes
followers (docs/architecture.md, "Following", "PostgreSQL without a global lock")."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from ..errors import EventLogError

_LISTEN_TICK_SECONDS = 0.2
"""How often the threads look whether the store was closed (so `close()` waits at most this)."""
_NOTIFY_INTERVAL_SECONDS = 0.02
"""The least time between two notifications of one store: a follower learns of a commit at most
this much later, and a process committing hundreds of times a second notifies 50 times."""


class Channel:
    """The log's channel. Notifications are sent by a thread of their own after the commits, one
    for all the commits made while the last one was sent and `_NOTIFY_INTERVAL_SECONDS` after:
    a transaction that notifies holds a database-wide lock while it commits, which no write
    transaction takes so, and each notification costs the server a transaction and the
    process a thread's wake-up."""

    def __init__(
        self, psycopg: Any, dsn: str, channel: str, name: str, translate: Callable[[Any, Exception], EventLogError]
    ) -> None:
        self._psycopg, self.dsn, self._channel, self._name, self._translate = psycopg, dsn, channel, name, translate
        self._notify_sql = f"SELECT pg_notify('{channel}', '')"  # an identifier: safe inline
        self._due = threading.Event()
        self._notifier: threading.Thread | None = None
        self._listener: threading.Thread | None = None  # LISTENs on the channel from the first `listen` on
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []
        self._closed = False

    def notify_soon(self) -> None:
        """Have the notifier thread NOTIFY the log's channel (once for every commit made meanwhile)."""
        self._due.set()
        if self._notifier is None:
            with self._lock:
                if self._notifier is None:
                    self._notifier = threading.Thread(
                        target=self._notify_loop, name=f"eventlog-notify-{self._name}", daemon=True
                    )
                    self._notifier.start()

    def _notify_loop(self) -> None:
        """The notifier thread: one NOTIFY, in a transaction that does not wait for the disk, each
        time commits were made since the last; a lost connection is made again at the next one."""
        conn = None
        while True:
            due = self._due.wait(_LISTEN_TICK_SECONDS)
            if not due:
                if self._closed:
                    break
                continue
            self._due.clear()
            try:
                if conn is None:
                    conn = self._psycopg.connect(self.dsn, autocommit=True)
                    conn.execute("SET synchronous_commit TO off")
                conn.execute(self._notify_sql)
            except self._psycopg.Error:
                if conn is not None:
                    conn.close()
                conn = None  # followers of other processes wait for their poll meanwhile
            time.sleep(_NOTIFY_INTERVAL_SECONDS)  # the commits made meanwhile share the next one
        if conn is not None:
            conn.close()

    def listen(self, callback: Callable[[], None]) -> None:
        """Call `callback` after every commit to this log by any process, until `close()`.

        One thread per store LISTENs on the log's channel and calls every callback at each
        notification, so every follower wakes for every commit. LISTEN is in place when this
        returns; a lost connection is made again, and the callbacks are called once then, for
        the commits that went unheard meanwhile. A callback given again is called once."""
        with self._lock:
            if callback not in self._callbacks:
                self._callbacks.append(callback)
            if self._listener is None:
                conn = self._listen_connect()
                self._listener = threading.Thread(
                    target=self._listen_loop, args=(conn,), name=f"eventlog-listen-{self._name}", daemon=True
                )
                self._listener.start()

    def _listen_connect(self) -> Any:
        try:
            conn = self._psycopg.connect(self.dsn, autocommit=True)
        except self._psycopg.Error as exc:
            raise self._translate(self._psycopg, exc) from None
        try:
            conn.execute(f'LISTEN "{self._channel}"')
        except self._psycopg.Error as exc:
            conn.close()
            raise self._translate(self._psycopg, exc) from None
        return conn

    def _listen_loop(self, conn: Any) -> None:
        """The listener thread: wake every callback at each notification; look at `_closed`
        every `_LISTEN_TICK_SECONDS`."""
        while not self._closed:
            try:
                if conn is None:
                    conn = self._listen_connect()
                    self._wake()
                for _ in conn.notifies(timeout=_LISTEN_TICK_SECONDS):
                    self._wake()
            except (self._psycopg.Error, EventLogError):
                if conn is not None:
                    conn.close()
                conn = None
                time.sleep(_LISTEN_TICK_SECONDS)
        if conn is not None:
            conn.close()

    def _wake(self) -> None:
        with self._lock:
            callbacks = list(self._callbacks)
        for callback in callbacks:
            callback()

    def close(self) -> None:
        """Send what is due, then end both threads."""
        self._closed = True
        for thread in (self._notifier, self._listener):
            if thread is not None and thread is not threading.current_thread():
                thread.join(timeout=4 * _LISTEN_TICK_SECONDS)
