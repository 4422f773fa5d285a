"""The async face of a log: the same operations as coroutines and async iterators.

    import eventlog.aio

    async with await eventlog.aio.open("runs.lmdb") as log:
        await log.append("run-1", StepCompleted(node="a", superstep=1))
        async for entry in log.read("run-1"):
            ...

Nothing here blocks the event loop on the store. Appends are checked on the loop (so bad
input is refused at once, before anything is written), then handed to one commit thread
per log: every append made by the tasks of one turn of the event loop goes into a single
transaction — many tasks, one commit and one fsync, not one thread each. Reads, folds and
checkpoints run in worker threads (docs/architecture.md, "The async face").

A cancelled `append` is never half-written: its transaction commits all of it or none, and
the cancellation only stops the task from waiting for the answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from functools import partial
from typing import Any, Generic, TypeVar

from .core._commit import Append, GroupCommit, Slot
from .core._reader import Entry, Follow
from .core.fold import Reducer
from .errors import ClosedError, EventLogError
from .log import EventLog, RunInfo
from .record._keys import check_run_number
from .record.kinds import Event
from .services.checkpoints import Checkpoint, Checkpoints
from .services.runwriter import Policy

__all__ = ["AsyncCheckpoints", "AsyncEventLog", "open"]

S = TypeVar("S")
T = TypeVar("T")

_CHUNK = 1024


class _Committer:
    """One thread that commits the requests of the event loop, one transaction per batch."""

    def __init__(self, writer: GroupCommit) -> None:
        self._writer = writer
        self._cond = threading.Condition()
        self._batches: list[list[tuple[Slot, asyncio.Future[list[int]], asyncio.AbstractEventLoop]]] = []
        self._gathering: dict[asyncio.AbstractEventLoop, list[Any]] = {}
        self._thread: threading.Thread | None = None
        self._closed = False

    def submit(self, append: Append) -> asyncio.Future[list[int]]:
        """A future of the append's offsets. Appends submitted in one turn of the loop share a batch."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[int]] = loop.create_future()
        if self._closed:
            raise ClosedError("the log is closed; open it again with eventlog.aio.open(...)")
        gathering = self._gathering.get(loop)
        if gathering is None:
            gathering = self._gathering[loop] = []
            loop.call_soon(self._hand_over, loop)  # after every task ready in this turn has submitted
        gathering.append((Slot(append), future, loop))
        return future

    def _hand_over(self, loop: asyncio.AbstractEventLoop) -> None:
        batch = self._gathering.pop(loop, [])
        if not batch:
            return
        with self._cond:
            self._batches.append(batch)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="eventlog-aio-commit", daemon=True)
                self._thread.start()
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._batches and not self._closed:
                    self._cond.wait()
                if not self._batches:
                    return
                batch = [item for queued in self._batches for item in queued]  # every batch waiting: one commit
                self._batches.clear()
            slots = [slot for slot, _, _ in batch]
            try:
                self._writer.commit_batch(slots)
            except BaseException as exc:  # noqa: BLE001 - every waiting task gets the error
                for slot in slots:
                    if slot.error is None and not slot.committed:
                        slot.error = exc
            for slot, future, loop in batch:
                try:
                    loop.call_soon_threadsafe(_settle, future, slot)
                except RuntimeError:
                    pass  # the loop was closed meanwhile: nobody waits for this answer

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join()


def _settle(future: asyncio.Future[list[int]], slot: Slot) -> None:
    if future.cancelled():
        return
    if slot.error is not None:
        future.set_exception(slot.error)
    elif not slot.committed:
        future.set_exception(
            EventLogError(f"run {slot.append.run_id!r}: the commit was interrupted; nothing was written")
        )
    else:
        future.set_result(slot.offsets)


async def _iterate(make: Callable[[], Iterator[T]]) -> AsyncIterator[T]:
    """An iterator of the sync API, advanced in a worker thread a chunk at a time."""
    iterator = await asyncio.to_thread(make)
    while True:
        chunk = await asyncio.to_thread(_take, iterator, _CHUNK)
        for item in chunk:
            yield item
        if len(chunk) < _CHUNK:
            return


def _take(iterator: Iterator[T], n: int) -> list[T]:
    out: list[T] = []
    for item in iterator:
        out.append(item)
        if len(out) >= n:
            break
    return out


class AsyncCheckpoints(Generic[S]):
    """`log.checkpoints` of an async log: save, load, load_latest, list and delete as coroutines."""

    def __init__(self, checkpoints: Checkpoints[S]) -> None:
        self._sync = checkpoints

    async def save(self, run_id: str, offset: int | None = None, **options: Any) -> Checkpoint[S]:
        """See `Checkpoints.save`."""
        return await asyncio.to_thread(partial(self._sync.save, run_id, offset, **options))

    async def load(self, run_id: str, checkpoint_id: str, **options: Any) -> Checkpoint[S]:
        """See `Checkpoints.load` (the state is loaded too, in a worker thread)."""
        cp = await asyncio.to_thread(partial(self._sync.load, run_id, checkpoint_id, **options))
        await asyncio.to_thread(lambda: cp.state)
        return cp

    async def load_latest(self, run_id: str, **options: Any) -> Checkpoint[S] | None:
        """See `Checkpoints.load_latest` (the state is loaded too, in a worker thread)."""
        cp = await asyncio.to_thread(partial(self._sync.load_latest, run_id, **options))
        if cp is not None:
            await asyncio.to_thread(lambda: cp.state)
        return cp

    async def list(self, run_id: str, limit: int | None = None, **options: Any) -> list[Checkpoint[S]]:
        """See `Checkpoints.list`."""
        return await asyncio.to_thread(partial(self._sync.list, run_id, limit, **options))

    async def delete(self, run_id: str, checkpoint_id: str, *, run_number: int | None = None) -> None:
        """See `Checkpoints.delete`."""
        await asyncio.to_thread(partial(self._sync.delete, run_id, checkpoint_id, run_number=run_number))


class AsyncEventLog(Generic[S]):
    """An `EventLog` as coroutines and async iterators. Make one with `await eventlog.aio.open(...)`
    or `AsyncEventLog(log)` over a log that is open already."""

    def __init__(self, log: EventLog[S]) -> None:
        self.sync = log
        """The log underneath, for what has no async form."""
        self.checkpoints = AsyncCheckpoints(log.checkpoints)
        """Save, load, list and delete checkpoints."""
        self._committer = _Committer(log.engine.commit)

    async def __aenter__(self) -> AsyncEventLog[S]:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Commit what is queued, then close the log."""
        await asyncio.to_thread(self._committer.close)
        await asyncio.to_thread(self.sync.close)

    async def append(self, run_id: str, event: Event, *, event_id: str | None = None, **options: Any) -> int:
        """See `EventLog.append`."""
        ids = None if event_id is None else [event_id]
        return (await self.append_many(run_id, [event], event_ids=ids, **options))[0]

    async def append_many(
        self,
        run_id: str,
        events: Iterable[Event],
        *,
        expected_offset: int | None = None,
        run_number: int | None = None,
        event_ids: Sequence[str | None] | None = None,
        meta: dict[str, Any] | None = None,
        time_ns: int | None = None,
    ) -> list[int]:
        """See `EventLog.append_many`: checked here, committed with the other appends of this turn."""
        append = self.sync.engine.commit.check(
            run_id,
            events,
            event_ids=event_ids,
            meta=meta,
            time_ns=time_ns,
            expected_offset=expected_offset,
            expected_number=check_run_number(run_number),
        )
        return await self._committer.submit(append)

    async def head(self, run_id: str) -> int:
        return await asyncio.to_thread(self.sync.head, run_id)

    async def life(self, run_id: str) -> tuple[int, int]:
        return await asyncio.to_thread(self.sync.life, run_id)

    async def runs(self) -> list[str]:
        return await asyncio.to_thread(self.sync.runs)

    async def run_info(self, run_id: str, *, run_number: int | None = None) -> RunInfo:
        return await asyncio.to_thread(partial(self.sync.run_info, run_id, run_number=run_number))

    async def entry(self, run_id: str, offset: int, *, run_number: int | None = None) -> Entry:
        return await asyncio.to_thread(partial(self.sync.entry, run_id, offset, run_number=run_number))

    def read(
        self, run_id: str, after: int = 0, upto: int | None = None, *, run_number: int | None = None
    ) -> AsyncIterator[Entry]:
        """See `EventLog.read`: chunks of one life of the run (RunReplacedError when it is made again)."""
        return _iterate(partial(self.sync.read, run_id, after, upto, run_number=run_number))

    def feed(self, after: int = 0, limit: int | None = None) -> AsyncIterator[Entry]:
        """See `EventLog.feed`."""
        return _iterate(partial(self.sync.feed, after, limit))

    async def follow(self, after: int = 0, *, timeout: float | None = None, poll: float = 0.5) -> AsyncIterator[Entry]:
        """See `EventLog.follow`: entries as they are committed, waiting without blocking the loop
        or holding a thread; every commit wakes every follower."""
        loop = asyncio.get_running_loop()
        woken = asyncio.Event()

        def wake() -> None:
            with contextlib.suppress(RuntimeError):  # the loop was closed: nobody follows any more
                loop.call_soon_threadsafe(woken.set)

        commits = await asyncio.to_thread(self.sync.engine.commits)  # on PostgreSQL this may connect: not on the loop
        commits.subscribe(wake)
        follow = Follow(self.sync.engine.reader, after, timeout, poll)
        try:
            while True:
                woken.clear()  # before the read: a commit made during it wakes the wait below
                chunk = await asyncio.to_thread(follow.chunk)
                if chunk is None:
                    return
                for entry in chunk:
                    yield entry
                if chunk:
                    continue
                seconds = follow.pause()
                if seconds is None:
                    return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woken.wait(), seconds)
        finally:
            commits.unsubscribe(wake)

    async def state_at(
        self,
        run_id: str,
        offset: int | None = None,
        *,
        reducer: Reducer[Any] | None = None,
        run_number: int | None = None,
    ) -> Any:
        """See `EventLog.state_at`."""
        return await asyncio.to_thread(
            partial(self.sync.state_at, run_id, offset, reducer=reducer, run_number=run_number)
        )

    async def fork(self, run_id: str, at: int, new_run_id: str, *, run_number: int | None = None) -> str:
        return await asyncio.to_thread(partial(self.sync.fork, run_id, at, new_run_id, run_number=run_number))

    async def prune(
        self, run_id: str, before: int, *, reducer: Reducer[Any] | None = None, run_number: int | None = None
    ) -> int:
        return await asyncio.to_thread(partial(self.sync.prune, run_id, before, reducer=reducer, run_number=run_number))

    async def delete_run(
        self, run_id: str, *, run_number: int | None = None, expected_offset: int | None = None
    ) -> None:
        await asyncio.to_thread(
            partial(self.sync.delete_run, run_id, run_number=run_number, expected_offset=expected_offset)
        )

    async def verify(self, run_id: str | None = None, **options: Any) -> Any:
        return await asyncio.to_thread(partial(self.sync.verify, run_id, **options))

    def writer(self, run_id: str, *, reducer: Reducer[Any] | None = None, policy: Policy | None = None) -> Any:
        """A run writer (sync: it folds on the caller's thread); wrap its appends in `asyncio.to_thread`."""
        return self.sync.writer(run_id, reducer=reducer, policy=policy)


async def open(path: Any, **options: Any) -> AsyncEventLog[Any]:
    """`eventlog.open(path, **options)` in a worker thread, as an async log."""
    from . import open as open_sync

    return AsyncEventLog(await asyncio.to_thread(partial(open_sync, path, **options)))
