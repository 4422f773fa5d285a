"""The argument parser: one subcommand a noun, each with a usage text that ends in examples."""

from __future__ import annotations

import argparse
from typing import NoReturn

from .. import __version__
from ._common import _ENV_KEY_FILE, _ENV_KINDS, _ENV_LOG, _Usage

_HELP_WIDTH = 88


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Help of a fixed width (the same in every terminal), `-o, --output FILE` style."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, width=_HELP_WIDTH, max_help_position=30)

    def _format_action_invocation(self, action: argparse.Action) -> str:
        if not action.option_strings or action.nargs == 0:
            return super()._format_action_invocation(action)
        return (
            ", ".join(action.option_strings)
            + " "
            + self._format_args(action, self._get_default_metavar_for_optional(action))
        )


class _Parser(argparse.ArgumentParser):
    """Raises on a usage error instead of printing usage and exiting."""

    def error(self, message: str) -> NoReturn:
        raise _Usage(f"{self.prog}: {message} (see {self.prog} --help)")


# -- the parser --------------------------------------------------------------------------------

_DESCRIPTION = """\
Inspect, debug and administer an eventlog log: list runs and their events, read the state
at any offset or checkpoint, diff two points of a run, fork, verify, prune, delete,
export and import runs, and see the log's sizes.

The log is --log PATH or the environment variable EVENTLOG_PATH; a sealed log's key is
read from the file --key-file PATH or EVENTLOG_KEY_FILE names. Reading commands take
--json for scripts. Exit codes: 0 ok, 1 other error, 2 usage error, 3 not found,
4 conflict, 5 corruption (or verify found problems).
"""

_COMMANDS: list[tuple[str, str, str, str]] = [
    (
        "runs",
        "list the log's runs",
        "List every run: its head (number of events), pruned base, the run it was forked\nfrom and where, its checkpoints and forks, and when it was created.",
        "eventlog --log runs.lmdb runs\nEVENTLOG_PATH=runs.lmdb eventlog runs --json",
    ),
    (
        "events",
        "list a run's events",
        "List a run's events in order, with their offset, commit time and kind. --from and\n--to bound the offsets (both included); --kind keeps one kind, or a family of kinds\n(`llm` keeps llm.started, llm.completed and llm.failed).",
        "eventlog events run-1\neventlog events run-1 --from 10 --to 20\neventlog events run-1 --kind llm --json",
    ),
    (
        "history",
        "list a run's checkpoints",
        "List a run's checkpoints, oldest first: id, offset, superstep, paused nodes,\ncreation time and metadata. A run an integration wrote (a LangGraph thread) is\nlisted by its view: for LangGraph, each checkpoint's step, source and next nodes.",
        "eventlog history run-1\neventlog history run-1 --limit 5 --json",
    ),
    (
        "state",
        "show a run's state at an offset or checkpoint",
        "Show the state of a run after its first OFFSET events (default: its head), or at a\ncheckpoint. Any offset works, not only those of checkpoints: the log folds the events\nafter the nearest snapshot. A LangGraph thread shows its channel values; a type that\nis not allowed shows as data, never constructed (docs/durability.md, guarantee 7).",
        "eventlog state run-1\neventlog state run-1 --at 3\neventlog state run-1 --checkpoint 5f2c... --json",
    ),
    (
        "diff",
        "show what changed between two points of a run",
        "Show what changed in a run's state from A to B. A and B are offsets, checkpoint ids\nor `head`. Reports the values (graph state) keys added, removed and changed, the\nmessages appended (or removed), and every other field that changed. An integration's\nrun (a LangGraph thread, say) is diffed as `state` shows it, message by message.",
        "eventlog diff run-1 2 5\neventlog diff run-1 0 head --json\neventlog diff run-1 5f2c... 7a91...",
    ),
    (
        "fork",
        "branch a run at an offset into a new run",
        "Make a new run whose first OFFSET events are the run's own, shared, not copied.\nThe run keeps its future; the new run continues from the state at OFFSET.",
        "eventlog fork run-1 --at 2 --as run-1-retry",
    ),
    (
        "verify",
        "check every record, offset and snapshot",
        "Check every record's checksum, that offsets have no gaps, the feed and the event id\nindex against the entries, and that every stored snapshot equals a fresh fold from the\nrun's start. Exits 5 when it finds a problem, and lists each with its run and offset.\nA pruned run whose base state is kept only by a reducer this process does not know is\nchecked but not folded: a note says so, and it is not a problem.\nWith --repair, first remove index records that point at nothing and rows of run\nnumbers no run has (a run's entries are never changed: restore a damaged run from a\ncopy).",
        "eventlog verify\neventlog verify run-1 --json\neventlog verify --repair",
    ),
    (
        "prune",
        "drop a run's events below a checkpoint",
        "Drop a run's events and checkpoints below the latest checkpoint at or below OFFSET.\nThat checkpoint becomes the run's base: states from it on stay readable, states\nbelow it are gone. Refused (exit 4) while forks of the run exist. A fork of a pruned\nrun reads from that run's base: pruned at or below it, nothing of it is left to drop.\nThe run is pruned by the reducer that checkpointed it, or that keeps its base.",
        "eventlog prune run-1 --before 1000",
    ),
    (
        "delete",
        "remove a run",
        "Remove a run: its events, checkpoints and snapshots. Asks first unless --yes.\nRefused (exit 4) while forks of the run exist, or when the run was deleted and\nmade again while the question waited (the new run is left as it is).",
        "eventlog delete run-1\neventlog delete run-1 --yes",
    ),
    (
        "export",
        "write runs to a JSON Lines file",
        "Write runs (default: all) to a JSON Lines file: each run after the run it forks from\n(which is exported too), its entries with their ids, times, metadata and events (JSON\nwith their kind tag), and its checkpoints. `eventlog import` reads it back exactly.\nA pruned run cannot be exported: with --skip-pruned the others are, and it is named.",
        "eventlog export -o all.jsonl\neventlog export run-1 run-1-retry -o two.jsonl\neventlog export --skip-pruned -o kept.jsonl",
    ),
    (
        "import",
        "read runs from an export file",
        "Read an export file into the log (created if missing). The whole file is checked\nfirst; nothing is written if it is damaged or cut, or if one of its runs exists\nalready (exit 4). Entries keep their ids, times, metadata and events; forks are forks\nagain. Writes without a sync per commit and syncs once at the end.",
        "eventlog --log copy.lmdb import all.jsonl",
    ),
    (
        "stats",
        "show the log's sizes",
        "Show the number of runs, stored events, checkpoints and snapshots, the bytes on\ndisk, the events' compression ratio (encoded bytes / stored bytes) and the map size.",
        "eventlog stats\neventlog stats --json",
    ),
    (
        "langgraph-copy",
        "copy LangGraph threads from one saver to another",
        "Copy every checkpoint of LangGraph threads (default: all of the source's) from one\nsaver to another: every namespace (subgraphs), parents, metadata, channel versions\nand pending writes, so that the graph's history is the same on the target and runs on\nfrom there. A saver is sqlite:PATH (SqliteSaver), postgres:DSN (PostgresSaver) or an\neventlog log (a directory or a postgresql:// URL; EventLogSaver). A thread the target\nholds already is refused (exit 4) unless --replace. Nothing read is run: types that\nare not allowed are copied as their bytes (docs/durability.md, guarantee 7).",
        "eventlog langgraph-copy --from sqlite:checkpoints.sqlite --to threads.lmdb\neventlog langgraph-copy --from threads.lmdb --to sqlite:back.sqlite --thread chat-1\neventlog langgraph-copy --from postgres:postgresql://me@db/app --to postgresql://me@db/app?schema=eventlog",
    ),
    (
        "demo",
        "run the demo on a fresh log",
        "Run the demo: a small graph and a conversation recorded in a log, then a tour of\nresume, history, time travel and a fork. The log goes to a temporary directory unless\n--path is given.",
        "eventlog demo\neventlog demo --path demo.lmdb",
    ),
    (
        "ui",
        "look at the log's runs in the browser",
        "Serve a web page over the log: its runs and their forks; a run's timeline, read as a\nconversation or as supersteps where it is one; the state at any offset and what changed\nbetween two; new events as they are committed. Reads only, unless --allow-writes (then\na fork button appears). Listens on 127.0.0.1; any other --host needs --allow-remote,\nand every request then needs the token (--token, $EVENTLOG_UI_TOKEN, or a new one,\nprinted in the URL). On Linux the server runs with PYTHONMALLOC=malloc and\nMALLOC_ARENA_MAX=2 unless PYTHONMALLOC is set, so that what it freed after a long run's\nstate goes back to the system. Needs the ui extra: pip install 'eventlog[ui]'.",
        "eventlog ui --log demo.lmdb --open\neventlog ui --log runs.lmdb --port 0\neventlog ui --log postgresql://me@db/app --allow-writes\neventlog ui --log runs.lmdb --host 0.0.0.0 --allow-remote",
    ),
]


def _add_arguments(name: str, p: argparse.ArgumentParser) -> None:
    if name == "events":
        p.add_argument("run", help="run id")
        p.add_argument("--from", dest="from_", type=int, metavar="N", help="first offset to list (default 1)")
        p.add_argument("--to", type=int, metavar="M", help="last offset to list (default: the head)")
        p.add_argument("--kind", metavar="K", help="only events of kind K, or of the family K (llm, tool, step, ...)")
    elif name == "history":
        p.add_argument("run", help="run id")
        p.add_argument("--limit", type=int, metavar="N", help="only the newest N checkpoints")
    elif name == "state":
        p.add_argument("run", help="run id")
        at = p.add_mutually_exclusive_group()
        at.add_argument("--at", type=int, metavar="OFFSET", help="the state after the first OFFSET events")
        at.add_argument("--checkpoint", metavar="ID", help="the state at this checkpoint")
    elif name == "diff":
        p.add_argument("run", help="run id")
        p.add_argument("a", metavar="A", help="offset, checkpoint id or `head`")
        p.add_argument("b", metavar="B", help="offset, checkpoint id or `head`")
    elif name == "fork":
        p.add_argument("run", help="run id to fork from")
        p.add_argument("--at", type=int, metavar="OFFSET", required=True, help="events of the run the fork starts with")
        p.add_argument("--as", dest="new", metavar="NEW", required=True, help="id of the new run")
    elif name == "verify":
        p.add_argument("run", nargs="?", help="check only this run (default: the whole log)")
        p.add_argument(
            "--repair",
            action="store_true",
            help="first remove index records that point at nothing (a deleted damaged run's feed positions) and rows of no run",
        )
    elif name == "prune":
        p.add_argument("run", help="run id")
        p.add_argument(
            "--before",
            type=int,
            metavar="OFFSET",
            required=True,
            help="keep states from the latest checkpoint at or below OFFSET",
        )
    elif name == "delete":
        p.add_argument("run", help="run id")
        p.add_argument("--yes", "-y", action="store_true", help="do not ask")
    elif name == "export":
        p.add_argument("runs", nargs="*", metavar="RUN", help="runs to export (default: every run)")
        p.add_argument("-o", "--output", required=True, metavar="FILE", help="the JSON Lines file to write")
        p.add_argument(
            "--skip-pruned",
            action="store_true",
            help="leave out pruned runs and runs forked from them, and name them (default: refuse, exit 3)",
        )
    elif name == "import":
        p.add_argument("file", metavar="FILE", help="an export file (JSON Lines)")
    elif name == "langgraph-copy":
        p.add_argument(
            "--from", dest="source", required=True, metavar="SAVER", help="sqlite:PATH, postgres:DSN or a log"
        )
        p.add_argument("--to", dest="target", required=True, metavar="SAVER", help="sqlite:PATH, postgres:DSN or a log")
        p.add_argument("--thread", action="append", metavar="ID", help="copy this thread (repeatable; default: all)")
        p.add_argument("--replace", action="store_true", help="delete a thread the target holds before copying it")
    elif name == "demo":
        p.add_argument("--path", metavar="DIR", help="keep the demo's log in DIR (default: a temporary directory)")
    elif name == "ui":
        p.add_argument("--host", default="127.0.0.1", metavar="HOST", help="address to listen on (default 127.0.0.1)")
        p.add_argument("--port", type=int, metavar="N", help="port to listen on (default 8377; 0: any free port)")
        p.add_argument("--open", action="store_true", help="open the page in the web browser")
        p.add_argument("--allow-writes", action="store_true", help="open the log for writing and show a fork button")
        p.add_argument("--allow-remote", action="store_true", help="allow a --host other machines reach")
        p.add_argument("--token", metavar="TOKEN", help="the token requests need (default: $EVENTLOG_UI_TOKEN)")
        p.add_argument(
            "--prices",
            metavar="FILE",
            help='JSON of USD per million tokens, {"MODEL": {"input": N, "output": N}}: the waterfall shows costs',
        )
    elif name != "runs" and name != "stats":
        raise AssertionError(name)
    if name not in ("demo", "ui"):
        p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def build_parser() -> argparse.ArgumentParser:
    """The `eventlog` argument parser (also what docs/cli.md is generated from)."""
    common = _Parser(add_help=False)
    common.add_argument(
        "--log", metavar="PATH", default=argparse.SUPPRESS, help=f"the log directory (default: ${_ENV_LOG})"
    )
    common.add_argument(
        "--key-file",
        metavar="PATH",
        default=argparse.SUPPRESS,
        help=f"the file holding a sealed log's key (default: ${_ENV_KEY_FILE}); never the key itself",
    )
    common.add_argument(
        "--kinds",
        metavar="MODULE",
        action="append",
        default=argparse.SUPPRESS,
        help=f"import MODULE first, to register its event kinds (repeatable; also ${_ENV_KINDS}, comma-separated)",
    )
    parser = _Parser(
        prog="eventlog",
        description=_DESCRIPTION,
        epilog="examples:\n  eventlog demo --path demo.lmdb\n  eventlog --log demo.lmdb runs\n  eventlog --log demo.lmdb state RUN --at 3\n  eventlog COMMAND --help",
        formatter_class=_Formatter,
        parents=[common],
    )
    parser.add_argument("--version", action="version", version=f"eventlog {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands", parser_class=_Parser)
    for name, summary, description, examples in _COMMANDS:
        p = sub.add_parser(
            name,
            help=summary,
            description=description,
            epilog="examples:\n" + "\n".join("  " + line for line in examples.splitlines()),
            formatter_class=_Formatter,
            parents=[common],
        )
        _add_arguments(name, p)
    return parser


def commands() -> list[str]:
    """Every subcommand's name, in the order of the help."""
    return [name for name, *_ in _COMMANDS]
