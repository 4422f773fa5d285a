"""Shared helpers of the benchmark suites: workloads, timing, sizes, targets and results."""

from __future__ import annotations

import math
import os
import random
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

# -- results -----------------------------------------------------------------------------


@dataclass
class Target:
    """One of the project's targets, judged against a measured figure."""

    name: str
    value: float
    threshold: float
    op: str  # ">=" or "<="
    unit: str = ""

    @property
    def met(self) -> bool:
        return self.value >= self.threshold if self.op == ">=" else self.value <= self.threshold

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "value": self.value,
            "threshold": self.threshold,
            "op": self.op,
            "unit": self.unit,
            "met": self.met,
        }


@dataclass
class Row:
    """One line of the printed table: a system, a figure, and its ratio to the floor."""

    system: str
    metric: str
    value: float
    unit: str
    ratio: float | None = None  # eventlog figure / floor figure (1.0 = as fast as the floor)
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "system": self.system,
            "metric": self.metric,
            "value": None if self.value != self.value else self.value,  # NaN is not JSON
            "unit": self.unit,
            "ratio_to_floor": self.ratio,
            "note": self.note,
        }


@dataclass
class SuiteResult:
    name: str
    description: str
    rows: list[Row] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    skipped: str | None = None
    seconds: float = 0.0

    def row(self, *args: Any, **kwargs: Any) -> Row:
        r = Row(*args, **kwargs)
        self.rows.append(r)
        return r

    def target(self, *args: Any, **kwargs: Any) -> Target:
        t = Target(*args, **kwargs)
        self.targets.append(t)
        return t

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "skipped": self.skipped,
            "seconds": round(self.seconds, 3),
            "metrics": self.metrics,
            "rows": [r.as_dict() for r in self.rows],
            "targets": [t.as_dict() for t in self.targets],
        }


@dataclass
class Context:
    """What every suite gets: the quick flag and a scratch directory of its own."""

    quick: bool
    workdir: str

    def path(self, name: str) -> str:
        p = os.path.join(self.workdir, name)
        return p

    def n(self, full: int, quick: int) -> int:
        return quick if self.quick else full

    def size(self, env: str, full: int, quick: int) -> int:
        """A size from the environment variable `env` when it is set (with --quick too), else
        `full`, or `quick` with --quick."""
        text = os.environ.get(env)
        if not text:
            return self.n(full, quick)
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"{env}={text!r} is not a whole number (10_000_000 and 10000000 both work)") from None
        if value < 1:
            raise ValueError(f"{env}={value} must be at least 1")
        return value


# -- timing ------------------------------------------------------------------------------


def best_of(repeats: int, fn: Callable[[], Any]) -> float:
    """Smallest wall time of `repeats` calls of `fn`, in seconds."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def in_threads(n_threads: int, work: Callable[[int], None]) -> float:
    """Run `work(k)` for k in 0..n_threads-1, each on a thread of its own, all released at
    once; returns the wall time from the release until the last one ends (thread start-up
    is not timed). The first error of a thread is raised here."""
    barrier = threading.Barrier(n_threads + 1)
    errors: list[BaseException] = []

    def body(k: int) -> None:
        barrier.wait()
        try:
            work(k)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the calling thread below
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(k,)) for k in range(n_threads)]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return elapsed


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100) by nearest rank on sorted values."""
    if not values:
        return float("nan")
    s = sorted(values)
    k = max(0, min(len(s) - 1, round(q / 100.0 * (len(s) - 1))))
    return s[k]


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


# -- sizes -------------------------------------------------------------------------------


def disk_bytes(path: str) -> int:
    """Bytes a file or directory takes on disk: allocated blocks (sparse holes do not count)."""
    total = 0
    if os.path.isfile(path):
        st = os.stat(path)
        return min(st.st_size, st.st_blocks * 512) if st.st_blocks else st.st_size
    for root, _dirs, files in os.walk(path):
        for f in files:
            st = os.stat(os.path.join(root, f))
            total += min(st.st_size, st.st_blocks * 512) if st.st_blocks else st.st_size
    return total


def lmdb_used_bytes(env: Any) -> int:
    """Pages an LMDB environment has used (high-water mark) times the page size."""
    info = env.info()
    stat = env.stat()
    return int((info["last_pgno"] + 1) * stat["psize"])


def _pages(st: Any) -> int:
    return int(st["branch_pages"] + st["leaf_pages"] + st["overflow_pages"])


def _named_dbs(env: Any) -> Iterator[tuple[bytes, Any]]:
    """(name, handle) of every named database of an open LMDB environment."""
    import lmdb

    with env.begin() as txn:
        names = [bytes(k) for k, _ in txn.cursor()]
    for name in names:
        try:
            yield name, env.open_db(name, create=False)
        except lmdb.Error:
            continue


def lmdb_live_bytes(path: str) -> int:
    """Bytes of the pages an LMDB directory's databases hold now (what a compacting copy
    keeps): branch, leaf and overflow pages of the main and every named database, plus the
    two meta pages. Free pages that LMDB keeps for reuse are not counted."""
    import lmdb

    env = lmdb.open(path, readonly=True, lock=False, max_dbs=64, subdir=True)
    try:
        main = env.stat()
        total = _pages(main) + 2
        for _, db in _named_dbs(env):
            with env.begin() as txn:
                total += _pages(txn.stat(db))
        return total * main["psize"]
    finally:
        env.close()


def lmdb_breakdown(path: str) -> dict[str, dict[str, int]]:
    """Per named database of an LMDB directory: entries, pages in use, and key+value bytes."""
    import lmdb

    env = lmdb.open(path, readonly=True, lock=False, max_dbs=64, subdir=True)
    out: dict[str, dict[str, int]] = {}
    try:
        for name, db in _named_dbs(env):
            with env.begin() as txn:
                st = txn.stat(db)
                kv = sum(len(k) + len(v) for k, v in txn.cursor(db=db))
            out[name.decode(errors="replace")] = {"entries": st["entries"], "pages": _pages(st), "kv_bytes": kv}
    finally:
        env.close()
    return out


# -- text and workloads ------------------------------------------------------------------

_WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "for",
    "it",
    "as",
    "was",
    "with",
    "be",
    "by",
    "on",
    "not",
    "he",
    "this",
    "are",
    "or",
    "his",
    "from",
    "at",
    "which",
    "but",
    "have",
    "an",
    "they",
    "you",
    "were",
    "her",
    "she",
    "there",
    "been",
    "one",
    "all",
    "we",
    "their",
    "has",
    "would",
    "when",
    "what",
    "so",
    "if",
    "more",
    "will",
    "about",
    "can",
    "other",
    "into",
    "some",
    "could",
    "them",
    "than",
    "then",
    "its",
    "only",
    "time",
    "agent",
    "model",
    "tool",
    "call",
    "result",
    "search",
    "query",
    "document",
    "answer",
    "context",
    "token",
    "step",
    "node",
    "graph",
    "state",
    "value",
    "update",
    "message",
    "user",
    "assistant",
    "function",
    "argument",
    "return",
    "error",
    "retry",
    "weather",
    "city",
    "temperature",
    "forecast",
    "price",
    "order",
    "customer",
    "account",
    "invoice",
    "payment",
    "shipping",
    "report",
    "summary",
    "analysis",
    "data",
    "table",
    "column",
    "row",
    "index",
    "file",
    "path",
    "directory",
    "config",
    "option",
    "request",
    "response",
    "status",
    "code",
    "server",
    "client",
    "session",
    "cache",
    "memory",
    "disk",
    "write",
    "read",
    "python",
    "function",
    "class",
    "method",
    "object",
    "list",
    "dict",
    "string",
    "number",
    "integer",
    "float",
    "boolean",
    "please",
    "thanks",
    "could",
    "you",
    "help",
    "me",
    "find",
    "check",
    "explain",
    "show",
    "compare",
    "list",
    "describe",
    "write",
    "yesterday",
    "today",
    "tomorrow",
    "morning",
    "evening",
    "week",
    "month",
    "year",
    "first",
    "second",
    "third",
    "last",
    "next",
]


class Text:
    """Deterministic pseudo-English text: compressible like real prose, never a repeated block."""

    def __init__(self, seed: int = 7) -> None:
        self._rng = random.Random(seed)

    def words(self, chars: int) -> str:
        rng = self._rng
        out: list[str] = []
        n = 0
        while n < chars:
            w = rng.choice(_WORDS)
            if rng.random() < 0.08:
                w = f"{w}{rng.randint(0, 9999)}"
            out.append(w)
            n += len(w) + 1
        s = " ".join(out)
        return s[:chars]

    def ident(self) -> str:
        return f"{self._rng.getrandbits(64):016x}"

    def randint(self, a: int, b: int) -> int:
        return self._rng.randint(a, b)


def agent_events(n: int, seed: int = 1) -> list[Any]:
    """`n` events of an agent run, about 600 bytes each encoded: LLM calls with tool calls,
    tool results, user messages and graph steps, in the order an agent produces them."""
    from eventlog import events as ev

    t = Text(seed)
    out: list[Any] = []
    superstep = 0
    while len(out) < n:
        superstep += 1
        cid = t.ident()
        kind = superstep % 4
        if kind == 0:
            out.append(ev.UserMessage(content=t.words(560)))
        elif kind == 1:
            out.append(
                ev.LLMCallCompleted(
                    call_id=cid,
                    model="gpt-4o-mini-2024-07-18",
                    output=ev.Message(
                        role="assistant",
                        content=t.words(380),
                        tool_calls=[
                            ev.ToolCall(id=f"call_{cid}", name="search", arguments={"query": t.words(60), "k": 5})
                        ],
                    ),
                    input_tokens=t.randint(200, 4000),
                    output_tokens=t.randint(20, 400),
                    latency_ms=float(t.randint(100, 3000)),
                )
            )
        elif kind == 2:
            out.append(
                ev.ToolCallCompleted(
                    call_id=f"call_{cid}",
                    tool="search",
                    output={"hits": [t.words(150) for _ in range(3)], "took_ms": t.randint(1, 500)},
                    latency_ms=float(t.randint(1, 500)),
                )
            )
        else:
            out.append(
                ev.StepCompleted(
                    node=f"node_{superstep % 7}",
                    superstep=superstep,
                    update={"summary": t.words(480), "step": superstep, "score": t.randint(0, 100) / 100.0},
                )
            )
    return out[:n]


def workflow_events(n: int, seed: int = 2) -> list[Any]:
    """`n` graph-workflow events, about 600 bytes each on average, whose folded values stay
    bounded: each superstep is three nodes' `StepCompleted` (about 770 bytes; updates overwrite
    a fixed set of keys, the usual shape of a long LangGraph-style run) and one
    `SuperstepCompleted`."""
    from eventlog import events as ev

    t = Text(seed)
    keys = [f"k{i}" for i in range(16)]
    pool = [t.words(680) for _ in range(64)]  # reused blocks keep generation cheap for 1M events
    out: list[Any] = []
    i = 0
    while len(out) < n:
        superstep = len(out) // 4 + 1
        for j in range(3):
            out.append(
                ev.StepCompleted(
                    node=f"node_{j}",
                    superstep=superstep,
                    update={keys[i % 16]: pool[(i * 7) % 64] + f" #{i}", "step": i, "score": (i % 100) / 100.0},
                )
            )
            i += 1
        out.append(ev.SuperstepCompleted(superstep=superstep, next_nodes=["node_0", "node_1", "node_2"]))
    return out[:n]


def chunks(seq: list[Any], size: int) -> Iterator[list[Any]]:
    for i in range(0, len(seq), size):
        yield seq[i : i + size]


def fmt_num(v: float) -> str:
    if math.isnan(v):
        return "n/a"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:,.1f}"
    return f"{v:,.3g}"


# -- peak memory in a fresh process ------------------------------------------------------

_CHILD = r"""
import json, resource, sys, threading, time

def status():
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                out[k] = int(v.split()[0]) * 1024
    return out

peak = [0]
done = threading.Event()

def sample():
    while not done.is_set():
        peak[0] = max(peak[0], status().get("RssAnon", 0))
        time.sleep(0.002)

result = None
%(setup)s
before = status()
sampler = threading.Thread(target=sample, daemon=True)
sampler.start()
t0 = time.perf_counter()
%(body)s
seconds = time.perf_counter() - t0
done.set()
sampler.join()
after = status()
print(json.dumps({
    "seconds": seconds,
    "before": before,
    "after": after,
    "peak_anon_bytes": max(peak[0], after.get("RssAnon", 0)),
    "maxrss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    "result": result,
}))
"""


def measure_child(setup: str, body: str, argv: list[str], timeout: float = 3600) -> dict[str, Any]:
    """Run `setup`, then `body`, in a new Python process (`sys.argv[1:]` is `argv`) and return
    what it measured of `body`: `seconds`, `/proc/self/status` figures `before` and `after`,
    `peak_anon_bytes` (private anonymous memory, `RssAnon`, sampled every 2 ms on a thread of
    its own), `maxrss_bytes` (which also counts file pages read through a memory map), and
    `result` (whatever JSON value `body` put in the name `result`)."""
    import json
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
    code = _CHILD % {"setup": setup.strip(), "body": body.strip()}
    out = subprocess.run(
        [sys.executable, "-c", code, *argv],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
        timeout=timeout,
    )
    if out.returncode != 0:
        raise RuntimeError(f"measured subprocess failed: {out.stderr[-2000:]}")
    child: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return child
