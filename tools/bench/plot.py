"""Plot the chat suite: bytes on disk and per-turn latency against turns, for every system.

    python -m tools.bench.plot RESULTS.json [OUT.png]     (default docs/img/chat.png)

Needs matplotlib (the `bench` extra).
"""

from __future__ import annotations

import json
import sys

_STYLE = {
    "eventlog": ("tab:green", "-", 2.4),
    "langgraph-memory": ("tab:gray", ":", 1.4),
    "langgraph-sqlite": ("tab:blue", "-", 1.4),
    "langgraph-sqlite-delta": ("tab:purple", "--", 1.6),
    "langgraph-lmdb": ("tab:orange", "-.", 1.4),
    "langgraph-postgres": ("tab:brown", "-", 1.4),
    "eventlog-saver": ("tab:olive", "-", 2.4),
    "eventlog-saver-pg": ("tab:cyan", "--", 2.0),
}


def plot(results: dict, out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    chat = results["suites"]["chat"]["metrics"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5))
    for name, s in chat["systems"].items():
        color, ls, lw = _STYLE.get(name, (None, "-", 1.4))
        turns = sorted(int(t) for t in s["bytes"])
        ax1.plot(turns, [s["bytes"][str(t)] / 1e6 for t in turns], label=name, color=color, ls=ls, lw=lw)
        lat = s["latency_ms"]
        w = 10  # rolling median of 10 turns
        xs, ys = [], []
        for i in range(len(lat)):
            window = sorted(lat[max(0, i - w + 1) : i + 1])
            xs.append(i + 1)
            ys.append(window[len(window) // 2])
        ax2.plot(xs, ys, label=name, color=color, ls=ls, lw=lw)
    ax1.set_yscale("log")
    ax1.set_xlabel("turns")
    ax1.set_ylabel("bytes on disk (MB, log scale)")
    ax1.set_title("storage of a chat checkpointed every turn")
    ax1.grid(True, which="both", alpha=0.3)
    ax1.legend()
    ax2.set_yscale("log")
    ax2.set_xlabel("turn")
    ax2.set_ylabel("wall time per turn (ms, rolling median of 10, log scale)")
    ax2.set_title("per-turn latency (200-char user, 800-char reply)")
    ax2.grid(True, which="both", alpha=0.3)
    ax2.legend()
    m = results.get("machine", {})
    fig.suptitle(
        f"eventlog vs LangGraph savers — {m.get('nproc')} cores, Python {m.get('python')}, "
        f"langgraph {m.get('packages', {}).get('langgraph')}",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    with open(argv[0]) as f:
        results = json.load(f)
    out = argv[1] if len(argv) > 1 else "docs/img/chat.png"
    plot(results, out)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
