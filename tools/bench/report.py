"""Render a results JSON as Markdown, or refresh the generated part of docs/benchmarks.md.

python -m tools.bench.report RESULTS.json                  # print the Markdown
python -m tools.bench.report RESULTS.json docs/benchmarks.md   # replace what lies between
                                                               # <!-- bench:begin --> and <!-- bench:end -->
"""

from __future__ import annotations

import json
import os
import sys

from ._common import fmt_num

BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown(results: dict, source: str | None = None) -> str:
    """The Markdown of a results JSON; `source` is a link to the JSON, written above the tables."""
    m = results["machine"]
    out: list[str] = []
    probe = results.get("fsync_probe_commits_per_s", {})
    pk = ", ".join(f"{k} {v}" for k, v in m["packages"].items() if v)
    env = " ".join(f"{k}={v}" for k, v in results.get("environment", {}).items())
    command = f"{env} {results['command'].strip()}".strip()
    out.append(f"Command: `{command}` — {results['seconds']:.0f} s in all.\n")
    if source:
        out.append(f"Every figure below comes from this one run; its JSON is [{source}]({source}).\n")
    out.append(
        f"Machine: {m['nproc']} cores (`nproc`), {m.get('cpu') or 'unknown CPU'}, "
        f"{(m.get('memory_bytes') or 0) / 2**30:.0f} GiB, {m['platform']}; "
        f"Python {m['python']} ({m['implementation']}); {pk}.\n"
    )
    if m.get("eventlog_commit_at_start"):
        out.append(
            f"eventlog at commit `{m['eventlog_commit_at_start']}` when the run started"
            f" (`{m.get('eventlog_commit')}` when it ended).\n"
        )
    if probe:
        la0 = m.get("loadavg_at_start") or [float("nan")]
        la1 = results.get("loadavg_at_end") or [float("nan")]
        out.append(
            f"Disk at the time (raw LMDB synced one-put commits/s): {probe['start']:,.0f} at the start, "
            f"{probe['end']:,.0f} at the end; 1-minute load average {la0[0]:.2f} → {la1[0]:.2f}.\n"
        )
    out.append("| suite | system | metric | value | unit | ÷ floor | note |")
    out.append("|---|---|---|---:|---|---:|---|")
    for name, s in results["suites"].items():
        if s["skipped"]:
            out.append(f"| {name} | — | skipped: {_cell(s['skipped'])} | | | | |")
            continue
        for i, r in enumerate(s["rows"]):
            value = "—" if r["value"] is None else fmt_num(r["value"])
            ratio = "" if r["ratio_to_floor"] is None else f"{r['ratio_to_floor']:.2f}"
            out.append(
                f"| {name if i == 0 else ''} | {_cell(r['system'])} | {_cell(r['metric'].strip())} | {value} "
                f"| {r['unit']} | {ratio} | {_cell(r['note'])} |"
            )
    out.append("")
    out.append("| suite | target | figure | needs | result |")
    out.append("|---|---|---:|---|---|")
    for t in results["targets"]:
        unit = f" {t['unit']}" if t["unit"] else ""
        out.append(
            f"| {t.get('suite', '')} | {_cell(t['name'])} | {fmt_num(t['value'])}{unit} "
            f"| {t['op']} {fmt_num(t['threshold'])}{unit} | {'met' if t['met'] else '**missed**'} |"
        )
    for name, s in results["suites"].items():
        profile = (s.get("metrics") or {}).get("profile")
        if not profile:
            continue
        out.append("")
        out.append(
            f"Where the time of `{name}` goes on eventlog's side (cProfile over one round, the functions "
            "with the most own time; a share is of all own time in the round):\n"
        )
        out.append("| function | share of own time | calls per append |")
        out.append("|---|---:|---:|")
        for row in profile:
            name = row["function"]
            name = name if name.startswith("the other") else f"`{_cell(name)}`"
            out.append(f"| {name} | {100 * row['own_time_share']:.1f} % | {fmt_num(row['calls_per_unit'])} |")
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    with open(argv[0]) as f:
        results = json.load(f)
    if len(argv) == 1:
        print(markdown(results))
        return 0
    page = os.path.dirname(os.path.abspath(argv[1]))
    source = os.path.relpath(os.path.abspath(argv[0]), page)
    text = markdown(results, None if source.startswith("..") else source.replace(os.sep, "/"))
    with open(argv[1]) as f:
        doc = f.read()
    if BEGIN not in doc or END not in doc:
        print(f"{argv[1]} has no {BEGIN} ... {END} markers", file=sys.stderr)
        return 1
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    with open(argv[1], "w") as f:
        f.write(head + BEGIN + "\n" + text + END + tail)
    print(f"updated {argv[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
