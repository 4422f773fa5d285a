"""python -m tools.bench [SUITE ...] [--quick] [--json FILE] [--list]

Runs the named suites (all of them when none is named), prints a table of figures with
each eventlog figure's ratio to its floor, a table of the project's targets (met / missed),
and writes everything as JSON.
"""

from __future__ import annotations

import argparse
import faulthandler
import importlib
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import traceback
from importlib import metadata
from typing import Any

from . import SUITES
from ._common import Context, SuiteResult, fmt_num

_PACKAGES = (
    "msgspec", "zstandard", "lmdb", "langgraph", "langgraph-checkpoint",
    "langgraph-checkpoint-sqlite", "langgraph-checkpoint-lmdb", "langchain-core", "matplotlib", "wayflowcore",
    "openai-agents",
    "google-adk", "sqlalchemy",
)  # fmt: skip


def eventlog_commit() -> str | None:
    """The git commit of the checkout the benchmark runs in, with +dirty when eventlog/ has changes."""
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        head = subprocess.run(
            ["git", "-C", root, "rev-parse", "--short", "HEAD"], check=False, capture_output=True, text=True, timeout=10
        )
        dirty = subprocess.run(
            ["git", "-C", root, "status", "--porcelain", "--", "eventlog"],
            check=False,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def bench_environment() -> dict[str, str]:
    """The EVENTLOG_BENCH_* variables the run saw (sizes, the PostgreSQL DSN without its password)."""
    from urllib.parse import urlsplit

    out = {}
    for name, value in sorted(os.environ.items()):
        if name.startswith("EVENTLOG_BENCH_"):
            parts = urlsplit(value) if "://" in value else None
            if parts is not None and parts.password:
                value = value.replace(f":{parts.password}@", ":***@", 1)
            out[name] = value
    return out


def machine(loadavg_at_start: tuple[float, ...] | None = None) -> dict[str, Any]:
    versions = {}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = None
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        pass
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "memory_bytes": mem,
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "loadavg_at_start": loadavg_at_start,
        "eventlog_commit": eventlog_commit(),
        "packages": versions,
    }


def fsync_probe(commits: int = 200) -> float:
    """Raw LMDB one-put commits per second with sync: how busy the disk is right now."""
    import lmdb

    d = tempfile.mkdtemp(prefix="eventlog-probe-")
    try:
        env = lmdb.open(d, map_size=64 << 20, sync=True, metasync=True)
        with env.begin(write=True) as txn:  # grow the file first: file growth costs extra
            for i in range(commits):
                txn.put(i.to_bytes(8, "big"), b"x" * 400)
        t0 = time.perf_counter()
        for i in range(commits):
            with env.begin(write=True) as txn:
                txn.put(i.to_bytes(8, "big"), b"y" * 400)
        rate = commits / (time.perf_counter() - t0)
        env.close()
        return rate
    finally:
        shutil.rmtree(d, ignore_errors=True)


def print_tables(results: list[SuiteResult]) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # plain text when rich is missing
        for r in results:
            print(f"== {r.name}" + (f" (skipped: {r.skipped})" if r.skipped else ""))
            for row in r.rows:
                ratio = f" x{row.ratio:.2f} of floor" if row.ratio is not None else ""
                print(f"  {row.system:28} {row.metric:40} {fmt_num(row.value):>14} {row.unit}{ratio} {row.note}")
            for t in r.targets:
                print(
                    f"  [{'met' if t.met else 'MISSED'}] {t.name}: {fmt_num(t.value)} {t.unit} ({t.op} {fmt_num(t.threshold)})"
                )
        return
    console = Console(width=160)
    table = Table(title="eventlog benchmarks", show_lines=False)
    for col, kw in (
        ("suite", {}), ("system", {}), ("metric", {}), ("value", {"justify": "right"}),
        ("unit", {}), ("÷ floor", {"justify": "right"}), ("note", {"overflow": "fold"}),
    ):  # fmt: skip
        table.add_column(col, **kw)
    for r in results:
        if r.skipped:
            table.add_row(r.name, "—", f"skipped: {r.skipped}", "", "", "", "")
            continue
        for i, row in enumerate(r.rows):
            table.add_row(
                r.name if i == 0 else "",
                row.system,
                row.metric,
                fmt_num(row.value),
                row.unit,
                f"{row.ratio:.2f}" if row.ratio is not None else "",
                row.note,
            )
        table.add_section()
    console.print(table)
    targets = Table(title="targets")
    for col in ("suite", "target", "figure", "needs", "result"):
        targets.add_column(col)
    for r in results:
        for t in r.targets:
            targets.add_row(
                r.name,
                t.name,
                f"{fmt_num(t.value)} {t.unit}",
                f"{t.op} {fmt_num(t.threshold)} {t.unit}",
                "[green]met[/green]" if t.met else "[red]missed[/red]",
            )
    console.print(targets)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench", description=__doc__.split("\n\n")[1])
    parser.add_argument("suites", nargs="*", metavar="SUITE", help=f"suites to run (default: all): {', '.join(SUITES)}")
    parser.add_argument("--quick", action="store_true", help="smoke run: small sizes, a few seconds per suite")
    parser.add_argument("--json", metavar="FILE", help="write the results as JSON to FILE")
    parser.add_argument("--list", action="store_true", help="list the suites and what each measures")
    parser.add_argument("--workdir", help="scratch directory (default: a new temporary directory, removed after)")
    args = parser.parse_args(argv)
    faulthandler.enable()  # a crash in a C extension prints the Python stacks

    if args.list:
        for name, mod in SUITES.items():
            doc = (importlib.import_module(mod).__doc__ or "").strip().split("\n\n")[0]
            print(f"{name}\n    {' '.join(doc.split())}\n")
        return 0
    unknown = [s for s in args.suites if s not in SUITES]
    if unknown:
        parser.error(f"unknown suite(s) {', '.join(unknown)}; known: {', '.join(SUITES)}")
    names = args.suites or list(SUITES)

    base = args.workdir or tempfile.mkdtemp(prefix="eventlog-bench-")
    load_start = os.getloadavg()
    commit_start = eventlog_commit()
    probe_start = fsync_probe(50 if args.quick else 300)
    print(f"disk probe: {probe_start:,.0f} synced LMDB commits/s; load average {os.getloadavg()[0]:.2f}", flush=True)
    results: list[SuiteResult] = []
    failed = False
    started = time.perf_counter()
    for name in names:
        module = importlib.import_module(SUITES[name])
        description = " ".join((module.__doc__ or "").strip().split("\n\n")[0].split())
        workdir = os.path.join(base, name)
        os.makedirs(workdir, exist_ok=True)
        print(f"running {name}{' (quick)' if args.quick else ''} ...", flush=True)
        t0 = time.perf_counter()
        try:
            result = module.run(Context(quick=args.quick, workdir=workdir))
        except Exception:  # noqa: BLE001 - a failing suite is reported, the others still run
            failed = True
            traceback.print_exc()
            result = SuiteResult(
                name, description, skipped="error: " + traceback.format_exc(limit=1).strip().splitlines()[-1]
            )
        result.name = name
        result.description = result.description or description
        result.seconds = time.perf_counter() - t0
        result.metrics.setdefault("loadavg_1min_after", round(os.getloadavg()[0], 2))
        if result.skipped and not result.skipped.startswith("error"):
            print(f"  skipped {name}: {result.skipped}", flush=True)
        results.append(result)
        shutil.rmtree(workdir, ignore_errors=True)
    if not args.workdir:
        shutil.rmtree(base, ignore_errors=True)

    print_tables(results)
    total = time.perf_counter() - started
    print(f"total {total:.1f} s")
    probe_end = fsync_probe(50 if args.quick else 300)
    print(f"disk probe at the end: {probe_end:,.0f} synced LMDB commits/s")
    doc = {
        "command": "python -m tools.bench " + " ".join(argv if argv is not None else sys.argv[1:]),
        "environment": bench_environment(),
        "quick": args.quick,
        "seconds": round(total, 3),
        "loadavg_at_end": os.getloadavg(),
        "fsync_probe_commits_per_s": {"start": probe_start, "end": probe_end},
        "machine": dict(machine(load_start), eventlog_commit_at_start=commit_start),
        "suites": {r.name: r.as_dict() for r in results},
        "targets": [dict(t.as_dict(), suite=r.name) for r in results for t in r.targets],
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2, default=float)
            f.write("\n")
        print(f"wrote {args.json}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
