"""EventLogSaver alone: where a LangGraph chat's bytes and time go, turn by turn.

    python -m tools.bench.saver_profile [--turns 1000] [--durability none|batch|sync]

Runs the chat suite's graph (one `invoke` per turn, `durability="exit"`) with
`EventLogSaver` over a fresh LMDB log, and prints, for each block of 100 turns, the median
wall time of a turn and of the saver's `put` and `get_tuple` (each wrapped with a timer);
then what a 200-turn chat leaves in the log, run apart and measured after close (keys and
values per table, live pages, file).
With `--durability none` the figures are CPU only, without the fsync.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from typing import Any


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.saver_profile", description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--durability", default="none", choices=("none", "batch", "sync"))
    args = parser.parse_args(argv)

    from langchain_core.messages import HumanMessage

    import eventlog
    from eventlog.langgraph import EventLogSaver

    from . import _langgraph as lg
    from ._common import disk_bytes, lmdb_breakdown, lmdb_live_bytes
    from .chat import _texts

    def chat(path: str, users: list[str], replies: list[str]) -> tuple[list[float], dict[str, list[float]]]:
        log = eventlog.open(path, durability=args.durability)
        saver = EventLogSaver(log)
        spent: dict[str, list[float]] = {"put": [], "get_tuple": []}
        for name, times in spent.items():
            method = getattr(saver, name)

            def timed(*a: Any, _m: Any = method, _t: list[float] = times, **kw: Any) -> Any:
                t = time.perf_counter()
                try:
                    return _m(*a, **kw)
                finally:
                    _t.append((time.perf_counter() - t) * 1000)

            setattr(saver, name, timed)
        graph = lg._build(saver, False, replies)
        config = {"configurable": {"thread_id": "chat-1"}}
        turns: list[float] = []
        for i, text in enumerate(users):
            t = time.perf_counter()
            graph.invoke({"messages": [HumanMessage(content=text, id=f"u{i + 1}")]}, config, durability="exit")
            turns.append((time.perf_counter() - t) * 1000)
        saver.close()
        log.close()
        return turns, spent

    users, replies = _texts(args.turns)
    work = tempfile.mkdtemp(prefix="eventlog-saver-")
    short = os.path.join(work, "short")
    chat(short, users[:200], replies[:200])
    at_200 = {"file": disk_bytes(short), "live": lmdb_live_bytes(short), "tables": lmdb_breakdown(short)}
    turns, spent = chat(os.path.join(work, "long"), users, replies)
    shutil.rmtree(work, ignore_errors=True)

    def blocks(xs: list[float]) -> str:
        return " ".join(f"{statistics.median(xs[i : i + 100]):.2f}" for i in range(0, len(xs), 100))

    print(f"durability {args.durability}; medians of each 100 turns, ms")
    print(f"  turn       {blocks(turns)}")
    print(f"  put        {blocks(spent['put'])}")
    print(f"  get_tuple  {blocks(spent['get_tuple'])}")
    print(f"a 200-turn chat: file {at_200['file']:,} bytes, live pages {at_200['live']:,} bytes")
    for table, t in sorted(at_200["tables"].items(), key=lambda kv: -kv[1]["kv_bytes"]):
        if t["entries"]:
            print(f"  {table:15} {t['kv_bytes']:>9,} bytes in {t['entries']:>5} entries, {t['pages']} pages")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
