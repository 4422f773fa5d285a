"""HTML: the templates' environment, and the state tree.

Every value that comes from the log reaches the page through one of two doors, and both
escape it: a template's `{{ }}` (autoescape; `visible` first makes control characters,
ANSI escapes included, and bidirectional overrides visible as symbols) and `tree`, which
escapes each key and value it writes.
"""

from __future__ import annotations

import datetime as dt
import itertools
import re
import time
from pathlib import Path
from typing import Any

import jinja2
import msgspec
from markupsafe import Markup, escape

from .model import short, when
from .readings import duration, message_bubble

__all__ = ["environment", "subtree", "tree", "visible", "walk"]

tree_items_max = 100
"""A list or map longer than this shows its first and last `tree_items_max // 2` items."""
tree_depth_open = 1
"""Levels of the tree shown open."""
tree_depth_max = 64
"""Levels of the tree drawn; deeper values show as a preview (the JSON view has them all)."""
tree_string_chars_max = 4000
"""A longer string shows its start and how much more there is (the JSON view has it all)."""

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _picture(match: re.Match[str]) -> str:
    c = ord(match.group())
    if c < 0x20:
        return chr(0x2400 + c)  # ␛ for ESC, ␀ for NUL, ...
    if c == 0x7F:
        return "␡"
    return f"\\u{c:04x}"


def visible(text: str) -> str:
    """`text` with control characters and direction overrides replaced by visible symbols."""
    return _CONTROL.sub(_picture, text)


def _finalize(value: Any) -> Any:
    if isinstance(value, str) and not isinstance(value, Markup):
        return visible(value)
    return value


def _html(template: str, *args: Any) -> Markup:
    """`Markup(template).format(*args)`: each argument escaped (a Markup one kept as it is, an
    int written as the template says), through `str.format`, many times faster than Markup's
    own formatter on the tree's thousands of items."""
    safe = [a if type(a) is int else escape(a) for a in args]
    return Markup(template.format(*safe))


def _text(value: str) -> Markup:
    return escape(visible(value))


def _scalar(value: Any) -> Markup:
    if isinstance(value, str):
        if len(value) > tree_string_chars_max:
            more = _html('<span class="t-more">… {:,} more characters</span>', len(value) - tree_string_chars_max)
            return _html('<span class="v-str">"{}</span>{}', _text(value[:tree_string_chars_max]), more)
        return _html('<span class="v-str">"{}"</span>', _text(value))
    if value is None:
        return Markup('<span class="v-null">null</span>')
    if isinstance(value, bool):
        return _html('<span class="v-bool">{}</span>', "true" if value else "false")
    if isinstance(value, (int, float)):
        return _html('<span class="v-num">{}</span>', msgspec.json.encode(value).decode())
    return _text(short(value))


def _preview(value: Any) -> Markup:
    """A collapsed map or list, in one line: its size and its first scalar items."""
    if isinstance(value, dict):
        n = f"{len(value)} key" + ("" if len(value) == 1 else "s")
        scalars = [f"{k}: {short(v, 48)}" for k, v in value.items() if not isinstance(v, (dict, list, msgspec.Struct))][
            :3
        ]
    else:
        n = f"{len(value)} item" + ("" if len(value) == 1 else "s")
        scalars = []
    text = ", ".join(scalars)
    if len(text) > 96:
        text = text[:95] + "…"
    return _html('<span class="t-size">{}</span> <span class="t-peek">{}</span>', n, _text(text))


def _items(value: dict[Any, Any] | list[Any], lo: int = 0, hi: int | None = None) -> list[tuple[Any, Any] | None]:
    """The items shown of those from `lo` to `hi`: all, or the first and last `tree_items_max // 2`
    with None between."""
    n = len(value) if hi is None else hi
    if n - lo <= tree_items_max:
        if isinstance(value, dict):
            return list(itertools.islice(value.items(), lo, n))
        return [(i, value[i]) for i in range(lo, n)]
    half = tree_items_max // 2
    if isinstance(value, dict):
        first = list(itertools.islice(value.items(), lo, lo + half))
        last = list(itertools.islice(value.items(), n - half, n))
    else:
        first = [(i, value[i]) for i in range(lo, lo + half)]
        last = [(i, value[i]) for i in range(n - half, n)]
    return [*first, None, *last]


def _path_attr(path: tuple[Any, ...]) -> str:
    return msgspec.json.encode(list(path)).decode()


def _node(key: Any, value: Any, depth: int, path: tuple[Any, ...] | None) -> Markup:
    if isinstance(value, msgspec.Struct):
        value = msgspec.to_builtins(value)  # one item shown: converted only now
    label = _html('<span class="t-key">{}</span>', _text(str(key)))
    empty = value in (None, "", [], {}) or value is False or value == 0
    if isinstance(value, (dict, list)) and value and depth < tree_depth_max:
        if path is not None and depth >= tree_depth_open:  # folded: read when opened
            return _html(
                '<li><details data-node="{}"><summary>{} {}</summary>{}</details></li>',
                _path_attr(path),
                label,
                _preview(value),
                Markup('<ul class="tree lazy"><li class="t-more">…</li></ul>'),
            )
        opened = " open" if depth < tree_depth_open else ""
        return _html(
            "<li><details{}><summary>{} {}</summary>{}</details></li>",
            Markup(opened),
            label,
            _preview(value),
            _tree(value, depth + 1, path),
        )
    css = ' class="t-empty"' if empty else ""
    return _html(
        '<li{}>{}<span class="t-colon">:</span> {}</li>',
        Markup(css),
        label,
        _scalar(value) if not isinstance(value, (dict, list)) else _text(short(value)),
    )


def _tree(
    value: dict[Any, Any] | list[Any], depth: int, path: tuple[Any, ...] | None, lo: int = 0, hi: int | None = None
) -> Markup:
    parts = []
    items = _items(value, lo, hi)
    n = len(value) if hi is None else hi
    for i, item in enumerate(items):
        if item is not None:
            parts.append(_node(item[0], item[1], depth, None if path is None else (*path, item[0])))
            continue
        start = lo + i  # the first item not shown
        upto = n - (len(items) - 1 - i)  # the first of the last items shown
        hidden = upto - start
        if path is None:
            parts.append(_html('<li class="t-more">… {:,} more</li>', hidden))
        else:
            step = min(tree_items_max, hidden)
            parts.append(
                Markup(
                    '<li class="t-more"><button class="link" data-more="{}" data-from="{}" data-upto="{}">'
                    "show {:,} more of {:,}</button></li>"
                ).format(_path_attr(path), start, upto, step, hidden)
            )
    return _html('<ul class="tree">{}</ul>', Markup("").join(parts))


def tree(value: Any, paged: bool = False) -> Markup:
    """A state (plain data, or msgspec structs) as nested lists of keys and values; maps and lists fold.

    `paged`: the folded maps and lists are drawn closed and empty, each with its path from the
    state's root (`data-node`), and the items of a long one past its first fifty with a button
    (`data-more`, `data-from`, `data-upto`): the page asks the server for them (`subtree`) when
    they are opened, so a state of 50,000 messages costs the page only what it shows."""
    if isinstance(value, msgspec.Struct):
        value = msgspec.to_builtins(value)
    if isinstance(value, (dict, list)):
        return _tree(value, 0, () if paged else None)
    return _html('<ul class="tree"><li>{}</li></ul>', _scalar(value))


subtree_path_max = 64
"""The deepest path a subtree is asked for by."""


def walk(value: Any, path: list[Any]) -> Any:
    """The value at `path` (keys of maps, indices of lists) from `value`; KeyError when there is none."""
    for step in path:
        if isinstance(value, msgspec.Struct):
            value = {f: getattr(value, f) for f in type(value).__struct_fields__}
        if isinstance(value, dict):
            found = next((v for k, v in value.items() if k == step or str(k) == step), _NONE)
            if found is _NONE:
                raise KeyError(step)
            value = found
        elif (
            isinstance(value, list) and isinstance(step, int) and not isinstance(step, bool) and 0 <= step < len(value)
        ):
            value = value[step]
        else:
            raise KeyError(step)
    return value


_NONE = object()


def subtree(value: Any, path: list[Any], lo: int = 0, hi: int | None = None) -> Markup:
    """The items of the map or list at `path`, from `lo` to `hi` (all of them: None), drawn as
    `tree(paged=True)` draws them there: what the page shows when that node is opened."""
    node = walk(value, path)
    if isinstance(node, msgspec.Struct):
        node = msgspec.to_builtins(node)
    if not isinstance(node, (dict, list)):
        raise KeyError("not a map or a list")
    n = len(node)
    hi = n if hi is None else min(hi, n)
    lo = min(lo, hi)
    if lo or hi < n:  # a page of a long one: these items, and a button for what is left
        shown = min(tree_items_max, hi - lo)
        page = _tree(node, len(path), tuple(path), lo, lo + shown)
        if lo + shown < hi:
            rest = hi - lo - shown
            more = Markup(
                '<li class="t-more"><button class="link" data-more="{}" data-from="{}" data-upto="{}">'
                "show {:,} more of {:,}</button></li></ul>"
            ).format(_path_attr(tuple(path)), lo + shown, hi, min(tree_items_max, rest), rest)
            page = Markup(str(page)[: -len("</ul>")]) + more
        return page
    return _tree(node, len(path), tuple(path))


def _ago(ns: int) -> str:
    seconds = max(0.0, time.time() - ns / 1e9)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{int(seconds // size)} {unit} ago"
    return "just now" if seconds < 5 else f"{int(seconds)} s ago"


def _clock(ns: int) -> str:
    return dt.datetime.fromtimestamp(ns / 1e9, tz=dt.UTC).strftime("%H:%M:%S.%f")[:-3]


def _summary_keys(checkpoints: list[Any]) -> list[str]:
    """The facts the reducer keeps in its checkpoints' summaries, in order of first appearance."""
    keys: list[str] = []
    for cp in checkpoints:
        keys += [k for k in cp.summary if k not in keys]
    return keys


def _cell(value: Any) -> str:
    """A summary fact in a table cell: a list as its items, comma-separated."""
    if value is None:
        return ""
    if isinstance(value, list):
        return ", ".join(map(str, value))
    return value if isinstance(value, str) else short(value)


def environment() -> jinja2.Environment:
    """The templates, with autoescape on and the UI's filters."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
        autoescape=True,
        finalize=_finalize,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(ago=_ago, clock=_clock, duration=duration, when=when, tree=tree, visible=visible)
    env.filters.update(cell=_cell, summary_keys=_summary_keys, bubble=message_bubble, oneline=short)
    return env
