"""Threads as runs: the run id of a (thread, namespace), the saver's cache of the runs it uses,
and the marks that tie a LangGraph checkpoint to the eventlog checkpoint at its event.

A `Run` is what the saver keeps in memory of one run (its writer, the marks of its
checkpoints, the decoded lists of its current checkpoint); `Threads` keeps the most recently
used `cache_size` of them and finds the runs of a thread or of the whole log.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from ..errors import InvalidRunIdError, RunReplacedError, UnknownRunError
from ..log import EventLog
from ..services.checkpoints import Checkpoint
from ..services.runwriter import RunWriter
from ._events import POLICY, Blob, LangGraphThreadError, ThreadReducer, ThreadState

__all__ = [
    "REWRITE",
    "Mark",
    "Run",
    "Threads",
    "Waiting",
    "Written",
    "checkpoint_metadata",
    "lineage_checkpoints",
    "mark_of",
    "run_id_of",
    "thread_of",
]

REWRITE = "|:rewrite"
"""Suffix of the run a rewrite stages its result in (no LangGraph namespace starts with `:`)."""


def lineage_checkpoints(
    log: EventLog[Any], reducer: ThreadReducer, run_id: str, number: int | None
) -> list[Checkpoint[Any]]:
    """The checkpoints `reducer` made of a run (of life `number`, when given) and, in a fork
    (`EventLog.fork`, the command line's, the viewer's), those of the runs it forks from at the
    offsets it shares, from its base on, oldest first: a fork of a thread goes on from the
    checkpoint it was made at, with the history up to it. RunReplacedError when the run is not
    that life at the end (its parents, kept while it exists, were then the ones it forks from
    throughout)."""
    found: list[Checkpoint[Any]] = []
    upto: int | None = None
    low = 0  # the run's base (in a pruned fork, those below are unreadable)
    first, life = run_id, number
    while True:
        try:
            info = log.run_info(run_id, run_number=number)
            cps = log.checkpoints.list(run_id, reducer=reducer, run_number=info.number)
        except UnknownRunError:
            break
        if upto is None:
            low, life = info.base, info.number
        found[:0] = [  # a parent's first: the sort below keeps that order where offsets are equal
            cp for cp in cps if cp.reducer == reducer.name and low <= cp.offset and (upto is None or cp.offset <= upto)
        ]
        if info.parent is None or info.fork_offset == 0:
            break
        # a parent is kept while forks of it exist: its current life is the one forked
        run_id, number, upto = info.parent, None, min(info.fork_offset, upto or info.fork_offset)
    if upto is not None and life and (now := log.life(first)[0]) != life:
        raise RunReplacedError(first, life, now or None, "its checkpoints were listed")
    return sorted(found, key=lambda cp: cp.offset)


def run_id_of(thread_id: str, checkpoint_ns: str = "") -> str:
    """The run that holds a thread's namespace: `T` for the root, `T|NS` for namespace `NS`."""
    escaped = thread_id.replace("\\", "\\\\").replace("|", "\\|")
    run_id = f"{escaped}|{checkpoint_ns}" if checkpoint_ns else escaped
    size = len(run_id.encode("utf-8", "surrogatepass"))
    if not thread_id or size > 1024:
        raise InvalidRunIdError(
            f"thread {thread_id!r} namespace {checkpoint_ns!r} makes a run id of {size} UTF-8 bytes; "
            "eventlog takes 1 to 1,024: use a shorter thread id"
        )
    return run_id


def thread_of(run_id: str) -> tuple[str, str]:
    """(thread id, checkpoint namespace) of a run id made by `run_id_of`."""
    out: list[str] = []
    i = 0
    while i < len(run_id):
        c = run_id[i]
        if c == "\\" and i + 1 < len(run_id):
            out.append(run_id[i + 1])
            i += 2
            continue
        if c == "|":
            return "".join(out), run_id[i + 1 :]
        out.append(c)
        i += 1
    return "".join(out), ""


class Mark(msgspec.Struct, array_like=True, gc=False):
    """A LangGraph checkpoint of a run: its eventlog checkpoint's offset and metadata."""

    offset: int
    checkpoint_id: str
    metadata: Blob


def checkpoint_metadata(checkpoint_id: str, metadata: Blob) -> dict[str, Any]:
    """The eventlog checkpoint metadata that holds a LangGraph checkpoint's id and metadata."""
    return {"id": checkpoint_id, "md": [metadata.type, metadata.data]}


def mark_of(offset: int, metadata: Mapping[str, Any]) -> Mark | None:
    """The mark of an eventlog checkpoint saved with `checkpoint_metadata`, or None for another one."""
    cid, md = metadata.get("id"), metadata.get("md")
    if not isinstance(cid, str) or not isinstance(md, list) or len(md) != 2:
        return None
    return Mark(offset, cid, Blob(str(md[0]), bytes(md[1])))


class Waiting:
    """A `put_writes` waiting for the `put` that ends its superstep, to be committed with it.

    The caller is answered only once its writes are committed (`done`), by that put or alone."""

    def __init__(self, checkpoint_id: str, task_id: str, task_path: str, writes: list[tuple[int, str, Blob]]) -> None:
        self.checkpoint_id, self.task_id, self.task_path, self.writes = checkpoint_id, task_id, task_path, writes
        self.taken = False
        """A put took it (under the run's lock): only that put answers it now."""
        self.done = threading.Event()
        self.error: BaseException | None = None


class Run:
    """What the saver keeps in memory of one run; every use holds `lock` (of `waiting`, `waiting_lock`)."""

    def __init__(self, run_id: str, thread_id: str, ns: str) -> None:
        self.run_id, self.thread_id, self.ns = run_id, thread_id, ns
        self.lock = threading.RLock()
        self.rec: RunWriter[ThreadState] | None = None
        """The run's writer, made when first used."""
        self.lists: dict[str, Written] = {}
        """The items of the current checkpoint's list values as stored (`Written`: their types
        and writings, taken by value when they were stored or decoded from the stored bytes; no
        caller's object is kept): `put` compares a new list with them by value."""
        self.marks: list[Mark] | None = None
        self.position: dict[str, int] = {}
        self.current: Blob | None = None
        """Metadata of the current checkpoint, when known."""
        self.waiting: list[Waiting] = []
        """`put_writes` calls waiting to share the commit of the next `put` (kept by `forget`)."""
        self.waiting_lock = threading.Lock()
        """Guards `waiting` and each one's `taken`, apart from `lock`: a `put_writes` offered while
        a put commits (holding `lock`) is in the list before the next put looks, never after it."""
        self.replaced = 0
        """The number of a life of the run this saver used and then found deleted (kept by
        `forget`): until a write onto the life it holds now commits, a write onto a checkpoint
        that this life does not hold is of the gone one (`Writer.onto_gone_life`)."""

    @property
    def number(self) -> int:
        """The run number `rec` writes (each life of the run id has its own; 0: none yet), what
        is cached is of: the writer's own, so a run its first write made is known by its number."""
        return 0 if self.rec is None else self.rec.run_number or 0

    def forget(self) -> None:
        self.rec, self.lists, self.marks, self.position, self.current = None, {}, None, {}, None


class Written:
    """The items of a saved list as `_write.same_items` compares them: each one's type, and their
    writings one after another (`_write.written`). Never changed: `then` makes another."""

    __slots__ = ("joined", "kinds")

    def __init__(self, kinds: list[type], joined: bytes) -> None:
        self.kinds, self.joined = kinds, joined

    def __len__(self) -> int:
        return len(self.kinds)

    def then(self, added: Written) -> Written:
        """These items, then `added`'s."""
        return Written(self.kinds + added.kinds, self.joined + added.joined)


_LIVES_HELD = 65536
"""How many runs the cache let go of keep the number of their life (`Threads._lives`)."""


class Threads:
    """The runs of a log that hold LangGraph threads, and the saver's cache of those it uses."""

    def __init__(self, log: EventLog[Any], reducer: ThreadReducer, cache_size: int) -> None:
        self.log = log
        self.reducer = reducer
        self.cache_size = cache_size
        self._runs: OrderedDict[str, Run] = OrderedDict()
        self._lives: OrderedDict[str, int] = OrderedDict()
        """The number of the life of each run the cache let go of (the last `_LIVES_HELD`): a run
        cached again remembers it (`Run.replaced`), so a write onto a checkpoint of that life
        still never lands in a later one."""
        self._lock = threading.Lock()
        self.settle: Callable[[str], None] = lambda run_id: None
        """Called before a run's writer is made: the rewriter's wait for a rewrite of the run to end."""

    def get(self, thread_id: str, ns: str) -> tuple[Run, bool]:
        """The cached run of a thread's namespace, and True when it was not cached."""
        run_id = run_id_of(thread_id, ns)
        with self._lock:
            run = self._runs.get(run_id)
            if run is not None:
                self._runs.move_to_end(run_id)
                return run, False
            run = self._runs[run_id] = Run(run_id, thread_id, ns)
            run.replaced = self._lives.pop(run_id, 0)
            while len(self._runs) > self.cache_size:
                _, gone = self._runs.popitem(last=False)
                if gone.number or gone.replaced:
                    self._lives[gone.run_id] = gone.number or gone.replaced
                    if len(self._lives) > _LIVES_HELD:
                        self._lives.popitem(last=False)
        return run, True

    def drop(self, run_id: str) -> None:
        """Forget what the cache holds of a run."""
        with self._lock:
            run = self._runs.pop(run_id, None)
        if run is not None:
            with run.lock:
                run.forget()

    def writer(self, run: Run, *, check: bool = False) -> RunWriter[ThreadState]:
        """The run's writer; with `check`, first made again if another writer moved the head or
        deleted the run and made it again (a new run number): nothing of an old life is served."""
        if run.rec is not None and run.rec.ended:  # found deleted by a write that raised past the saver
            run.replaced = run.number
            run.forget()
        if run.rec is not None and check and (life := self.log.life(run.run_id)) != (run.number, run.rec.offset):
            if life[0] != run.number:
                run.replaced = run.number
            run.forget()
        while run.rec is None:
            self.settle(run.run_id)
            number, head = self.log.life(run.run_id)
            rec = self.log.writer(run.run_id, reducer=self.reducer, policy=POLICY)
            if (rec.run_number or 0, rec.offset) != (number, head):
                continue  # written meanwhile: read the run number again
            if rec.offset:
                try:
                    self.check_owned(run.run_id)
                except UnknownRunError:
                    continue  # deleted meanwhile (another saver's rewrite, say): read its life again
            run.rec = rec
        return run.rec

    def same_life(self, run: Run) -> bool:
        """Whether the run is still the life its writer was made of (not deleted, not made again)."""
        return self.log.life(run.run_id)[0] == run.number

    def owned(self, run_id: str) -> str | None:
        """None when the run holds a LangGraph thread (its first event, or the snapshot it was
        pruned to, is the saver's), else the kind of event it holds. Writes and admin use this one check."""
        info = self.log.run_info(run_id)
        for entry in self.log.read(run_id, info.base, min(info.head, info.base + 1), run_number=info.number):
            kind = str(type(entry.event).__struct_config__.tag)
            return None if kind.startswith("langgraph.") else kind
        return None if self.log.checkpoints.kept_by(run_id, self.reducer, run_number=info.number) else "no LangGraph"

    def check_owned(self, run_id: str) -> None:
        """Raise LangGraphThreadError unless the run holds a LangGraph thread."""
        kind = self.owned(run_id)
        if kind is not None:
            raise LangGraphThreadError(
                f"run {run_id!r} holds {kind!r} events, not a LangGraph thread; use another thread id or another log"
            )

    def marks(self, run: Run) -> list[Mark]:
        """The run's checkpoints, those a fork shares included (`lineage_checkpoints`), oldest
        first (read once, then kept up to date)."""
        if run.marks is None:
            cps = lineage_checkpoints(self.log, self.reducer, run.run_id, run.number or None)
            marks = [m for cp in cps if (m := mark_of(cp.offset, cp.metadata))]
            run.marks = marks
            run.position = {m.checkpoint_id: i for i, m in enumerate(marks)}
        return run.marks

    def find(self, run: Run, checkpoint_id: str) -> tuple[Mark, int] | None:
        """A checkpoint's mark and the last offset before the run's next checkpoint."""
        marks = self.marks(run)
        i = run.position.get(checkpoint_id)
        if i is None:
            return None
        assert run.rec is not None, "find() follows writer()"
        end = marks[i + 1].offset - 1 if i + 1 < len(marks) else run.rec.offset
        return marks[i], end

    def thread_runs(self, thread_id: str) -> list[str]:
        """The runs of a thread: its root and one per namespace, each holding a LangGraph thread
        (not a run of other events whose id looks like one, not a rewrite in progress)."""
        root = run_id_of(thread_id)
        return [
            r
            for r in self.log.runs()
            if (r == root or r.startswith(root + "|")) and not r.endswith(REWRITE) and self.is_owned(r)
        ]

    def all_runs(self) -> list[str]:
        """Every run of the log that holds a LangGraph thread."""
        return [r for r in self.log.runs() if not r.endswith(REWRITE) and self.is_owned(r)]

    def is_owned(self, run_id: str) -> bool:
        """`owned`, as a yes or no; a run deleted meanwhile is not."""
        try:
            return self.owned(run_id) is None
        except UnknownRunError:
            return False
