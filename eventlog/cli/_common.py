"""What every command shares: exit codes, output that is safe on a terminal, opening the log."""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import importlib
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import msgspec

EXIT_OK = 0
EXIT_ERROR = 1
"""Any other error (a declined `delete`, a full disk, a log of a newer format)."""
EXIT_USAGE = 2
"""Bad arguments or options, no log given, or an event kind this process does not know (pass --kinds)."""
EXIT_NOT_FOUND = 3
"""No log at the path, no such run, checkpoint or file, an offset out of range or pruned."""
EXIT_CONFLICT = 4
"""The run exists already, another writer moved the head, or forks depend on the run."""
EXIT_CORRUPT = 5
"""A damaged record, `verify` found problems, or an import file that does not decode."""
_ENV_LOG = "EVENTLOG_PATH"
_ENV_KINDS = "EVENTLOG_KINDS"
_ENV_KEY_FILE = "EVENTLOG_KEY_FILE"
_KEY_FILE_BYTES_MAX = 4096


class _Usage(Exception):
    """A usage error found by the parser."""


class _Fail(Exception):
    """An error with its exit code, printed as one line."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


# -- output ----------------------------------------------------------------------------------


def _console(stderr: bool = False) -> Any:
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    wide = None if stream.isatty() or "COLUMNS" in os.environ else 160  # piped: do not fold at 80
    # markup=False, emoji=False: run ids, metadata and events are printed as they are, never read
    # as markup (`[bold]`, `[link=...]`) or as emoji codes (`:warning:`).
    return Console(file=stream, highlight=False, soft_wrap=False, width=wide, markup=False, emoji=False)


def _emit_json(value: Any) -> None:
    sys.stdout.write(_json_text(msgspec.json.encode(value)) + "\n")


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _safe(text: object) -> str:
    """Text from the log as it may reach a terminal: control characters (ANSI escapes, bidi
    overrides) shown as escapes, never interpreted."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), str(text))


def _json_text(encoded: bytes) -> str:
    """JSON text as it may reach a terminal: every character `_safe` escapes that JSON leaves
    as it is (C1 controls such as CSI, bidi overrides, line separators) written as a `\\uXXXX`
    escape. Such a character can only stand inside a string, so the JSON reads back equal."""
    return _CONTROL.sub(lambda m: f"\\u{ord(m.group()):04x}", encoded.decode())


def _pretty_json(value: Any) -> Any:
    """`value` as indented, highlighted JSON (rich's `print_json` look), escaped as `_json_text` escapes."""
    from rich.highlighter import JSONHighlighter

    text = JSONHighlighter()(_json_text(msgspec.json.format(msgspec.json.encode(value), indent=2)))
    text.no_wrap = True
    text.overflow = None
    return text


def _say(text: str, **style: Any) -> None:
    _console().print(_safe(text), **style)


def _table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    from rich.table import Table

    table = Table(title=None if title is None else _safe(title), header_style="bold", show_lines=False)
    for i, name in enumerate(columns):
        last = i == len(columns) - 1
        table.add_column(_safe(name), overflow="fold", no_wrap=not last)
    for row in rows:
        table.add_row(*("" if v is None else _safe(v) for v in row))
    _console().print(table)


def _when(ns: int) -> str:
    return dt.datetime.fromtimestamp(ns / 1e9, tz=dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def _short(value: Any, limit: int = 80) -> str:
    text = msgspec.json.encode(value).decode()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _cell(value: Any) -> str:
    """A summary value in a table cell: lists as comma-separated items."""
    text = "" if value is None else ", ".join(map(str, value)) if isinstance(value, list) else str(value)
    return text if len(text) <= 40 else text[:39] + "…"


def _kind(event: Any) -> str:
    return str(type(event).__struct_config__.tag)


def _fields(event: Any) -> dict[str, Any]:
    return {f: getattr(event, f) for f in type(event).__struct_fields__}


@contextlib.contextmanager
def _progress(description: str, total: int | None) -> Iterator[Callable[..., None]]:
    """A progress bar on stderr (only on a terminal); yields `advance(n, total=None)`.

    Without a total the bar pulses: the work is one step whose length is not known.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    console = _console(stderr=True)
    columns = [SpinnerColumn(), TextColumn("{task.description}", markup=False), BarColumn()]
    if total is not None:
        columns.append(MofNCompleteColumn())
    columns.append(TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True, disable=not console.is_terminal) as bar:
        task = bar.add_task(_safe(description), total=total)

        def advance(n: int, total: int | None = None) -> None:
            if total is not None:
                bar.update(task, total=total)
            bar.advance(task, n)

        yield advance


# -- opening the log ---------------------------------------------------------------------------


def _log_path(args: argparse.Namespace) -> str:
    path = getattr(args, "log", None) or os.environ.get(_ENV_LOG)
    if not path:
        raise _Fail(f"no log given: pass --log PATH or set {_ENV_LOG}", EXIT_USAGE)
    return str(path)


def _open(args: argparse.Namespace, *, write: bool = False, create: bool = False, durability: str = "sync") -> Any:
    """The log named by --log (a directory or a PostgreSQL URL), with the key of --key-file;
    NoLogError unless it exists or `create`."""
    import eventlog

    from ..views import load_views

    path = _log_path(args)
    local = "://" not in path and path != ":memory:"
    key = _key(args)
    log = eventlog.open(path, readonly=not write, create=create, durability=durability if local else None, key=key)
    load_views()  # the installed integrations register their event kinds: their runs read without --kinds
    return log


def _key(args: argparse.Namespace) -> bytes | None:
    """The key of a sealed log, read from the file --key-file or $EVENTLOG_KEY_FILE names (never
    from the command line itself); None when neither is given. The file holds the key's 16, 24
    or 32 bytes, or those bytes as hexadecimal digits (whitespace around them is ignored)."""
    path = getattr(args, "key_file", None) or os.environ.get(_ENV_KEY_FILE)
    if not path:
        return None
    where = f"the key file {path} (--key-file or {_ENV_KEY_FILE})"
    try:
        with open(path, "rb") as file:
            data = file.read(_KEY_FILE_BYTES_MAX + 1)
    except FileNotFoundError:
        raise _Fail(f"{where} does not exist", EXIT_NOT_FOUND) from None
    except OSError as exc:
        raise _Fail(f"cannot read {where}: {exc.strerror or exc}", EXIT_ERROR) from None
    text = data.strip()
    if len(text) in (32, 48, 64) and re.fullmatch(rb"[0-9a-fA-F]+", text):
        return bytes.fromhex(text.decode("ascii"))
    if len(data) in (16, 24, 32):
        return data
    raise _Fail(
        f"{where} holds {len(data)} bytes: it must hold the key's 16, 24 or 32 bytes, or 32, 48 or 64 "
        "hexadecimal digits (make one with: head -c 32 /dev/urandom > FILE)",
        EXIT_USAGE,
    )


def _load_kinds(modules: Sequence[str]) -> None:
    for name in modules:
        try:
            importlib.import_module(name)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 - any failure of a user's module (SystemExit too) is reported
            raise _Fail(f"cannot import {name!r} (--kinds): {type(exc).__name__}: {exc}", EXIT_USAGE) from None
