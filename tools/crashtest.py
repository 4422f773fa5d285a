#!/usr/bin/env python
"""Kill writers with SIGKILL at random instants and check that no acknowledged event is lost.

    python tools/crashtest.py --cycles 600 --seed 1 --modes sync,batch,none
    python tools/crashtest.py --cycles 200 --seed 1 --modes postgres --pg postgresql://postgres@127.0.0.1/test

Each cycle starts a writer process (a fresh interpreter, never a fork of an open log) on
the log of one durability mode (LMDB's `sync`, `batch`, `none`, or `postgres`: a log in a
fresh schema of the PostgreSQL database `--pg` names, whose commits are durable as the server
makes them); cycles go round the modes in turn, and each mode's log is renewed every
`--cycles-per-log` cycles. The writer appends single events and batches,
appends through a recorder that checkpoints in the same transaction, saves checkpoints,
forks, prunes and deletes forks, and mixes in poison attempts (events of the wrong field
types, metadata that is not a map, ids over the limit) that must be refused by name with
nothing written. Before each call it writes an `intent` line to its stdout
pipe and, once the call has returned, an `ack` line with the offsets and a digest of every
event's encoded bytes. The parent kills it with SIGKILL at a random instant, reopens the log
and checks:

- the log opens and `verify` reports no problem (once `repair` has finished a delete or prune
  the kill cut short between its chunks, the one problem it may name);
- every run's offsets run without a gap from its base to its head;
- every acknowledged event is present at its acknowledged offset with its event id and
  exactly the bytes it was written with (digest of `codec.encode_event(entry.event)`), and
  the same bytes the event id deterministically makes (the parent rebuilds each event);
- no event appears twice (event ids are unique in the feed), although the next writer
  retries every append the previous one was killed in, with the same event ids;
- feed positions increase and the feed holds every stored event once;
- every acknowledged checkpoint loads with the state it was saved with, and checkpoints of
  unpruned runs equal a fresh fold of the run's events from offset 0.

The seed is printed first; the same seed makes the same writers and the same kill delays
(the instants themselves depend on the machine). The last line is the summary; the exit
status is 1 when anything was lost, duplicated or unreadable.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MODES = ("sync", "batch", "none", "postgres")


def open_log(where: str, mode: str) -> Any:
    """The log of a cycle: an LMDB directory in a durability mode, or a PostgreSQL schema's URL."""
    import eventlog

    return eventlog.open(where) if mode == "postgres" else eventlog.open(where, durability=mode)


def remove_log(where: str, mode: str) -> None:
    if mode == "postgres":
        from eventlog.store.postgres import PostgresStore, split_dsn

        PostgresStore.drop_schema(*split_dsn(where))
    else:
        shutil.rmtree(where, ignore_errors=True)


MAIN_RUNS = ("r0", "r1", "r2")
RECORDED_RUN = "rec"


# -- events that both sides can rebuild from their id ------------------------------------


def make_event(event_id: str) -> Any:
    """The event a writer appends under `event_id`: a pure function of the id."""
    from eventlog.events import AssistantMessage, StateUpdated, StepCompleted, SuperstepCompleted, UserMessage

    r = random.Random(event_id)
    text = "".join(r.choice("abcdefghij klmnop") for _ in range(r.choice((0, 8, 40, 300, 1500))))
    kind = r.randrange(5)
    if kind == 0:
        return StepCompleted(
            node=f"n{r.randrange(8)}", superstep=r.randrange(1, 50), update={"v": text, "id": event_id}
        )
    if kind == 1:
        return UserMessage(content=text or event_id)
    if kind == 2:
        return AssistantMessage(content=text + event_id)
    if kind == 3:
        return SuperstepCompleted(superstep=r.randrange(1, 50), next_nodes=[f"n{r.randrange(8)}"])
    return StateUpdated(values={f"k{r.randrange(20)}": text, "last": event_id})


def _poison() -> list[tuple[str, Any]]:
    """(name, attempt): each calls `append(event, **kw)` with input a log must refuse."""
    from eventlog.events import RunStarted, StepCompleted, UserMessage

    return [
        ("int-node", lambda append: append(StepCompleted(node=123, superstep=1))),  # type: ignore[arg-type]
        ("int-key", lambda append: append(StepCompleted(node="a", superstep=1, update={1: "x"}))),  # type: ignore[dict-item]
        ("tuple", lambda append: append(RunStarted(next_nodes=("a",)))),  # type: ignore[arg-type]
        ("list-meta", lambda append: append(UserMessage(content="x"), meta=[1, 2])),
        ("object", lambda append: append(StepCompleted(node="a", superstep=1, update={"o": object()}))),
        ("surrogate", lambda append: append(UserMessage(content="\ud800"))),
        ("bad-id", lambda append: append(UserMessage(content="x"), event_id="x" * 300)),
    ]


POISON: list[tuple[str, Any]] = []


def digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


# -- the writer (child process) --------------------------------------------------------


def child_main(path: str, mode: str, seed: int, cycle: int) -> int:
    """Open the log, retry what the last writer was killed in, then write until killed."""
    import eventlog
    from eventlog.errors import CheckpointNotFoundError, ForkDependencyError, PrunedError

    retries = json.loads(sys.stdin.read() or "[]")
    out = sys.stdout.fileno()

    def say(**msg: Any) -> None:
        os.write(out, (json.dumps(msg, separators=(",", ":")) + "\n").encode())

    log = open_log(path, mode)
    codec = log.codec
    POISON[:] = _poison()
    r = random.Random(seed)
    say(op="ready")
    counter = 0

    def new_ids(n: int) -> list[str]:
        nonlocal counter
        ids = [f"e{cycle}.{counter + i}" for i in range(n)]
        counter += n
        return ids

    def ack_append(run: str, ids: list[str], offsets: list[int], kind: str) -> None:
        events = [digest(codec.encode_event(make_event(i))) for i in ids]
        say(op="ack", kind=kind, run=run, ids=ids, offsets=offsets, digests=events)

    for intent in retries:  # an executor resuming: the same events, the same ids
        run, ids = intent["run"], intent["ids"]
        say(op="intent", kind="retry", run=run, ids=ids)
        offsets = log.append_many(run, [make_event(i) for i in ids], event_ids=ids, meta=intent.get("meta"))
        ack_append(run, ids, offsets, "retry")

    recorder = log.writer(RECORDED_RUN, policy=eventlog.CheckpointPolicy.every(3))
    forks = 0
    for _ in range(1_000_000):
        runs = log.runs()
        forked = [x for x in runs if x.startswith("f")]
        op = r.random()
        if op < 0.32:
            run = r.choice(list(MAIN_RUNS) + forked[-3:])
            ids = new_ids(1)
            say(op="intent", kind="append", run=run, ids=ids)
            offset = log.append(run, make_event(ids[0]), event_id=ids[0])
            ack_append(run, ids, [offset], "append")
        elif op < 0.52:
            run = r.choice(MAIN_RUNS)
            n = r.randrange(2, 13)
            ids = new_ids(n)
            meta = {"batch": ids[0], "size": n}
            say(op="intent", kind="batch", run=run, ids=ids, meta=meta)
            offsets = log.append_many(run, [make_event(i) for i in ids], event_ids=ids, meta=meta)
            ack_append(run, ids, offsets, "batch")
        elif op < 0.67:
            ids = new_ids(1)
            say(op="intent", kind="recorder", run=RECORDED_RUN, ids=ids)
            offset = recorder.append(make_event(ids[0]), event_id=ids[0])
            ack_append(RECORDED_RUN, ids, [offset], "recorder")
        elif op < 0.77:
            run = r.choice([x for x in runs if log.head(x) > log.run_info(x).base] or [None])
            if run is None:
                continue
            say(op="intent", kind="checkpoint", run=run)
            cp = log.checkpoints.save(run, metadata={"cycle": cycle})
            say(
                op="ack",
                kind="checkpoint",
                run=run,
                checkpoint_id=cp.checkpoint_id,
                offset=cp.offset,
                state=digest(codec.encode_state(cp.state)),
            )
        elif op < 0.85:
            run = r.choice(list(MAIN_RUNS) + forked[-2:])
            if run not in runs:
                continue
            info = log.run_info(run)
            at = r.randrange(info.base, info.head + 1)
            new = f"f{cycle}x{forks}"
            forks += 1
            say(op="intent", kind="fork", run=new, parent=run, at=at)
            try:
                log.fork(run, at, new)
            except PrunedError:  # `at` lies below a pruned ancestor's base
                say(op="ack", kind="skip", run=new)
                continue
            say(op="ack", kind="fork", run=new, parent=run, at=at)
        elif op < 0.89:
            # A poison attempt: input that must be refused by name with nothing written.
            run = r.choice([*MAIN_RUNS, RECORDED_RUN])
            name, attempt = r.choice(POISON)
            say(op="intent", kind="poison", run=run, name=name)
            try:
                if run == RECORDED_RUN:
                    attempt(recorder.append)
                else:
                    attempt(lambda e, run=run, **kw: log.append(run, e, **kw))
            except eventlog.EventLogError:
                say(op="ack", kind="poison", run=run, name=name, refused=True)
            else:
                say(op="ack", kind="poison", run=run, name=name, refused=False)
        elif op < 0.94:
            if not forked:
                continue
            run = r.choice(forked)
            if log.run_info(run).forks:
                continue
            say(op="intent", kind="delete", run=run)
            log.delete_run(run)
            say(op="ack", kind="delete", run=run)
        else:
            run = r.choice(list(MAIN_RUNS) + [RECORDED_RUN])
            if run not in runs:
                continue
            before = log.head(run)
            say(op="intent", kind="prune", run=run, before=before)
            try:
                base = log.prune(run, before)
            except (CheckpointNotFoundError, ForkDependencyError, PrunedError):
                say(op="ack", kind="skip", run=run)
                continue
            say(op="ack", kind="prune", run=run, base=base)
    return 0


# -- the parent: a model of what was acknowledged ----------------------------------------


@dataclass
class RunModel:
    entries: dict[int, tuple[str, str]] = field(default_factory=dict)
    """Acknowledged offset -> (event id, digest of the encoded event)."""
    prune_before: int = 0
    """Highest `before` of any prune started on the run (acknowledged or not)."""
    acknowledged: bool = False
    """The run was acknowledged to exist (an append or a fork returned)."""
    delete_started: bool = False
    deleted: bool = False
    checkpoints: dict[str, tuple[int, str]] = field(default_factory=dict)
    """Acknowledged checkpoint id -> (offset, digest of the encoded state)."""


@dataclass
class LogModel:
    path: str
    mode: str
    runs: dict[str, RunModel] = field(default_factory=dict)
    pending: list[dict[str, Any]] = field(default_factory=list)
    """Appends a killed writer had started and not acknowledged: the next writer retries them."""
    cycles: int = 0
    poisons: int = 0
    """Poison attempts refused by name."""

    def run(self, run_id: str) -> RunModel:
        return self.runs.setdefault(run_id, RunModel())

    def take(self, lines: list[dict[str, Any]]) -> tuple[int, list[str]]:
        """Fold a writer's lines into the model; return (events acknowledged, protocol errors)."""
        acked = 0
        errors: list[str] = []
        intent: dict[str, Any] | None = None
        pending = {tuple(p["ids"]): p for p in self.pending}
        for msg in lines:
            if msg["op"] == "intent":
                intent = msg
                kind = msg["kind"]
                if kind == "prune":
                    m = self.run(msg["run"])
                    m.prune_before = max(m.prune_before, msg["before"])
                elif kind == "delete":
                    self.run(msg["run"]).delete_started = True
                continue
            if msg["op"] != "ack":
                continue
            intent = None
            kind = msg["kind"]
            if kind in ("append", "batch", "recorder", "retry"):
                m = self.run(msg["run"])
                m.acknowledged = True
                for i, off, d in zip(msg["ids"], msg["offsets"], msg["digests"], strict=True):
                    before = m.entries.get(off)
                    if before is not None and before[0] != i:
                        errors.append(f"run {msg['run']!r} offset {off} acknowledged twice: {before[0]} and {i}")
                    m.entries[off] = (i, d)
                    acked += before is None
                pending.pop(tuple(msg["ids"]), None)
            elif kind == "checkpoint":
                self.run(msg["run"]).checkpoints[msg["checkpoint_id"]] = (msg["offset"], msg["state"])
            elif kind == "fork":
                parent = self.run(msg["parent"])
                child = self.run(msg["run"])
                child.acknowledged = True
                # Shared offsets the parent may have pruned before the fork are not the fork's to keep.
                child.entries = {o: v for o, v in parent.entries.items() if parent.prune_before < o <= msg["at"]}
            elif kind == "delete":
                self.run(msg["run"]).deleted = True
            elif kind == "poison":
                self.poisons += 1
                if not msg["refused"]:
                    errors.append(f"run {msg['run']!r}: the poison attempt {msg['name']!r} was acknowledged")
        # The append the writer was killed in (committed or not) is retried by the next writer.
        if intent is not None and intent["kind"] in ("append", "batch"):
            pending[tuple(intent["ids"])] = {"run": intent["run"], "ids": intent["ids"], "meta": intent.get("meta")}
        self.pending = list(pending.values())
        return acked, errors


@dataclass
class Totals:
    cycles: dict[str, int] = field(default_factory=lambda: dict.fromkeys(MODES, 0))
    acknowledged: dict[str, int] = field(default_factory=lambda: dict.fromkeys(MODES, 0))
    event_checks: int = 0
    checkpoint_checks: int = 0
    retries: int = 0
    lost: int = 0
    duplicated: int = 0
    unreadable: int = 0
    failures: int = 0
    writer_errors: int = 0
    poisons: int = 0
    removals_finished: int = 0


# -- the parent: checks ------------------------------------------------------------------


def check_log(model: LogModel, totals: Totals, out: list[str]) -> None:
    """Reopen the log and check everything the model says must hold; append problems to `out`."""
    from eventlog.errors import PrunedError

    try:
        log = open_log(model.path, model.mode)
    except Exception as exc:  # noqa: BLE001 - any failure to open is what is counted
        totals.unreadable += 1
        out.append(f"unreadable: {type(exc).__name__}: {exc}")
        return
    try:
        report = log.verify()
        unfinished = [p for p in report.problems if p.kind == "meta" and "has not finished" in p.message]
        if unfinished and len(unfinished) == len(report.problems):
            # A kill between a delete's (or prune's) chunks leaves the rest of its records for
            # `repair` to remove (docs/durability.md): finish it, then everything must hold.
            log.repair()
            totals.removals_finished += len(unfinished)
            report = log.verify()
        for p in report.problems:
            out.append(f"verify: {p.kind} run {p.run_id!r} offset {p.offset}: {p.message}")
        codec = log.codec
        reducer = log.reducer
        runs = set(log.runs())
        for run_id, m in model.runs.items():
            if run_id not in runs:
                if m.acknowledged and not m.delete_started:
                    totals.lost += len(m.entries)
                    out.append(f"run {run_id!r} with {len(m.entries)} acknowledged events is missing")
                continue
            if m.deleted:
                out.append(f"run {run_id!r} was deleted (acknowledged) but is still there")
                continue
            info = log.run_info(run_id)
            start = 0
            while True:
                try:
                    entries = list(log.read(run_id, after=start))
                    break
                except PrunedError as exc:
                    if exc.base <= start:
                        raise
                    start = exc.base
            offsets = [e.offset for e in entries]
            if offsets != list(range(start + 1, info.head + 1)):
                out.append(f"run {run_id!r}: offsets are not contiguous from {start + 1} to {info.head}")
            by_offset = {e.offset: e for e in entries}
            for off, (eid, dig) in m.entries.items():
                totals.event_checks += 1
                if off <= start:
                    if off > m.prune_before:
                        totals.lost += 1
                        out.append(f"run {run_id!r} offset {off} ({eid}) is gone below base {start} without a prune")
                    continue
                e = by_offset.get(off)
                if e is None:
                    totals.lost += 1
                    out.append(f"run {run_id!r} offset {off} ({eid}) acknowledged but missing (head {info.head})")
                    continue
                stored = digest(codec.encode_event(e.event))
                if e.event_id != eid or stored != dig or dig != digest(codec.encode_event(make_event(eid))):
                    totals.lost += 1
                    out.append(f"run {run_id!r} offset {off}: stored {e.event_id}/{stored}, acknowledged {eid}/{dig}")
            check_checkpoints(log, run_id, m, entries, start, reducer, totals, out)
        seen: set[str] = set()
        last = 0
        count = 0
        for e in log.feed():
            count += 1
            if e.position <= last:
                out.append(f"feed position {e.position} after {last}")
            last = e.position
            if e.event_id in seen:
                totals.duplicated += 1
                out.append(f"event {e.event_id} appears twice in the feed (run {e.run_id!r} offset {e.offset})")
            seen.add(e.event_id)
        stored = log.stats()["events"]
        if count != stored:
            out.append(f"the feed holds {count} entries but {stored} events are stored")
    except Exception as exc:  # noqa: BLE001 - a read that fails is a failure of the log
        totals.unreadable += 1
        out.append(f"unreadable: {type(exc).__name__}: {exc}\n{traceback.format_exc()}")
    finally:
        log.close()


def check_checkpoints(
    log: Any, run_id: str, m: RunModel, entries: list[Any], start: int, reducer: Any, totals: Totals, out: list[str]
) -> None:
    """Acknowledged checkpoints load their saved state; the newest ones equal a fold from offset 0."""
    codec = log.codec
    kept = {cp.checkpoint_id: cp for cp in log.checkpoints.list(run_id)}
    for cid, (offset, dig) in m.checkpoints.items():
        cp = kept.get(cid)
        if cp is None:
            if offset >= start:
                out.append(f"run {run_id!r}: acknowledged checkpoint {cid} at offset {offset} is missing")
            continue
        totals.checkpoint_checks += 1
        if cp.offset != offset or digest(codec.encode_state(cp.state)) != dig:
            out.append(f"run {run_id!r}: checkpoint {cid} loads a different state than it was saved with")
    if start:
        return  # below the pruned base there is nothing to fold from; verify compared the snapshots
    wanted = {cp.offset for cp in list(kept.values())[-12:]}
    state = reducer.initial()
    folded = {0: codec.encode_state(state)}
    for e in entries:
        state = reducer.apply(state, e.event)
        if e.offset in wanted:
            folded[e.offset] = codec.encode_state(state)
    for cp in list(kept.values())[-12:]:
        if cp.reducer != reducer.name or cp.offset not in folded:
            continue
        totals.checkpoint_checks += 1
        if codec.encode_state(cp.state) != folded[cp.offset]:
            out.append(f"run {run_id!r}: checkpoint {cp.checkpoint_id} at offset {cp.offset} differs from a fold")


# -- the parent: cycles --------------------------------------------------------------------


def run_cycle(model: LogModel, cycle: int, rng: random.Random, totals: Totals, args: argparse.Namespace) -> list[str]:
    """Start a writer, kill it at a random instant, fold its lines into the model, check the log."""
    child_seed = rng.randrange(1 << 32)
    early = rng.random() < 0.1  # sometimes kill during start-up and the retries
    delay = rng.uniform(0, 0.15) if early else rng.uniform(0, args.run_seconds_max)
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--child",
        str(model.path),
        model.mode,
        str(child_seed),
        str(cycle),
    ]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    lines: list[bytes] = []
    ready = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if line.startswith(b'{"op":"ready"'):
                ready.set()
        ready.set()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    proc.stdin.write(json.dumps(model.pending).encode())
    proc.stdin.close()
    if not early:
        ready.wait(30)
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    reader.join()
    err = proc.stderr.read().decode(errors="replace")
    problems: list[str] = []
    if proc.returncode != -signal.SIGKILL:
        totals.writer_errors += 1
        problems.append(f"writer exited with {proc.returncode} before it was killed:\n{err[-3000:]}")
    msgs = []
    for line in lines:
        if not line.endswith(b"\n"):
            continue  # cut short by the kill: not acknowledged
        msgs.append(json.loads(line))
    totals.retries += len(model.pending)
    poisons = model.poisons
    acked, errors = model.take(msgs)
    totals.poisons += model.poisons - poisons
    problems += errors
    totals.acknowledged[model.mode] += acked
    totals.cycles[model.mode] += 1
    model.cycles += 1
    check_log(model, totals, problems)
    return problems


def _where(args: argparse.Namespace, root: Path, seed: int, mode: str, generation: int) -> str:
    if mode != "postgres":
        return str(root / f"{mode}-{generation}")
    sep = "&" if "?" in args.pg else "?"
    return f"{args.pg}{sep}schema=crash_{seed}_{generation}"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        path, mode, seed, cycle = argv[1:5]
        return child_main(path, mode, int(seed), int(cycle))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--cycles",
        type=int,
        default=int(os.environ.get("EVENTLOG_CRASH_CYCLES", "30")),
        help="SIGKILL cycles in all (default: $EVENTLOG_CRASH_CYCLES or 30)",
    )
    ap.add_argument(
        "--seed", type=int, default=None, help="seed of the kill instants and the writers (default: random)"
    )
    ap.add_argument(
        "--modes",
        default="sync,batch,none",
        help="durability modes, taken in turn (default: sync,batch,none; or postgres)",
    )
    ap.add_argument("--cycles-per-log", type=int, default=40, help="cycles on one log before a fresh one (default: 40)")
    ap.add_argument("--run-seconds-max", type=float, default=0.3, help="longest a writer runs before the kill")
    ap.add_argument(
        "--pg", default=None, help="a PostgreSQL URL, for the postgres mode (a schema per log, dropped after)"
    )
    ap.add_argument("--dir", default=None, help="where the logs go (default: a temporary directory, removed)")
    ap.add_argument("--keep", action="store_true", help="keep the logs (kept anyway when a check fails)")
    ap.add_argument("--quiet", action="store_true", help="print only the seed, problems and the summary")
    args = ap.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    for m in modes:
        if m not in MODES:
            ap.error(f"unknown durability mode {m!r}; choose from {', '.join(MODES)}")
    if "postgres" in modes and not args.pg:
        ap.error("the postgres mode needs --pg URL")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 32)
    print(f"crashtest: seed={seed} cycles={args.cycles} modes={','.join(modes)}", flush=True)
    rng = random.Random(seed)
    root = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="eventlog-crash-"))
    root.mkdir(parents=True, exist_ok=True)
    totals = Totals()
    models: dict[str, LogModel] = {}
    generation = dict.fromkeys(modes, 0)
    failed = False
    started = time.monotonic()
    for cycle in range(args.cycles):
        mode = modes[cycle % len(modes)]
        model = models.get(mode)
        if model is None or model.cycles >= args.cycles_per_log:
            if model is not None and not failed and not args.keep:
                remove_log(model.path, mode)
            generation[mode] += 1
            model = models[mode] = LogModel(_where(args, root, seed, mode, generation[mode]), mode)
        problems = run_cycle(model, cycle, rng, totals, args)
        if problems:
            failed = True
            print(f"cycle {cycle} ({mode}, {model.path}): {len(problems)} problem(s)", flush=True)
            for p in problems[:20]:
                print("  " + p, flush=True)
            model.cycles = args.cycles_per_log  # keep this log for inspection, go on with a fresh one
        elif not args.quiet and (cycle + 1) % max(1, args.cycles // 20) == 0:
            total = sum(totals.acknowledged.values())
            print(f"  cycle {cycle + 1}/{args.cycles}: {total} acknowledged events so far", flush=True)
    elapsed = time.monotonic() - started
    if not failed and not args.keep:
        for model in models.values():
            if model.mode == "postgres":
                remove_log(model.path, model.mode)
    if not failed and not args.keep and not args.dir:
        shutil.rmtree(root, ignore_errors=True)
    per_mode = " ".join(f"{m}={totals.cycles[m]}/{totals.acknowledged[m]}" for m in modes)
    bad = totals.lost + totals.duplicated + totals.unreadable + totals.writer_errors
    print(
        f"crashtest summary: seed={seed} cycles={sum(totals.cycles.values())} "
        f"acknowledged={sum(totals.acknowledged.values())} (mode=cycles/acknowledged: {per_mode}) "
        f"event_checks={totals.event_checks} checkpoint_checks={totals.checkpoint_checks} "
        f"retried={totals.retries} poisons_refused={totals.poisons} removals_finished={totals.removals_finished} "
        f"lost={totals.lost} duplicated={totals.duplicated} "
        f"unreadable={totals.unreadable} writer_errors={totals.writer_errors} "
        f"result={'FAIL' if failed or bad else 'ok'} elapsed={elapsed:.1f}s",
        flush=True,
    )
    return 1 if failed or bad else 0


if __name__ == "__main__":
    sys.exit(main())
