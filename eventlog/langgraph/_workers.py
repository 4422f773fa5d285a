"""The saver's async face: each async twin (`aget_tuple`, `alist`, `aput`, ...) is its sync
method run in one of the saver's worker threads while the event loop awaits it, so that an
fsync never blocks the loop. Sync methods run in their caller's thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

__all__ = ["Workers", "async_iter_twin", "async_twin"]

_P = ParamSpec("_P")
_T = TypeVar("_T")


class Workers:
    """A pool of threads that the async twins run the sync core in, so that the event loop never
    waits on the log (an fsync, a round trip); sync calls run in their caller's thread."""

    def __init__(self, workers: int) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="eventlog-saver")
        self._local = threading.local()

    def inside(self) -> bool:
        """Whether the calling thread is one of the pool's."""
        return bool(getattr(self._local, "worker", False))

    async def acall(self, fn: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """`call` for async callers: the event loop waits without blocking (never on an fsync)."""
        return await asyncio.wrap_future(self._pool.submit(self._work, fn, args, kwargs))

    def _work(self, fn: Callable[..., _T], args: tuple[Any, ...], kwargs: dict[str, Any]) -> _T:
        self._local.worker = True
        return fn(*args, **kwargs)

    def close(self) -> None:
        """Stop the threads, once the calls under way return."""
        self._pool.shutdown(wait=True)


class _Served(Protocol):
    """What an async twin asks of the object it is a method of."""

    _workers: Workers


_O = TypeVar("_O", bound=_Served)


def async_twin(
    method: Callable[Concatenate[_O, _P], _T],
) -> Callable[Concatenate[_O, _P], Coroutine[Any, Any, _T]]:
    """The async twin of a sync method: the same method, run in a worker thread."""

    async def twin(self: _O, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        return await self._workers.acall(method, self, *args, **kwargs)

    _name(twin, method)
    return twin


def async_iter_twin(
    method: Callable[Concatenate[_O, _P], Iterator[_T]],
) -> Callable[Concatenate[_O, _P], AsyncIterator[_T]]:
    """The async twin of a sync method that yields: its items gathered in a worker thread, then yielded."""

    def gather(self: _O, /, *args: _P.args, **kwargs: _P.kwargs) -> list[_T]:
        return list(method(self, *args, **kwargs))

    async def twin(self: _O, /, *args: _P.args, **kwargs: _P.kwargs) -> AsyncIterator[_T]:
        for item in await self._workers.acall(gather, self, *args, **kwargs):
            yield item

    _name(twin, method)
    return twin


def _name(twin: Callable[..., Any], method: Callable[..., Any]) -> None:
    twin.__name__ = f"a{method.__name__}"
    twin.__qualname__ = f"{method.__qualname__.rpartition('.')[0]}.a{method.__name__}".lstrip(".")
    twin.__doc__ = f"Async `{method.__name__}`."
