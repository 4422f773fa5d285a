"""Docs cite only what exists: a section a comment cites, a link's anchor, a name a page writes.

- Code (eventlog/, tools/, tests/) and the docs cite a page as `docs/PAGE.md`, a section as
  `docs/PAGE.md, "Heading"` (the heading's text, code marks left out or kept), a guarantee
  as `docs/durability.md, guarantee N`, an anchor as `docs/PAGE.md#anchor`: each must exist.
- A Markdown link between pages (`[text](page.md#anchor)`, README.md's `docs/page.md`) must
  reach a page and, with an anchor, a heading of it (anchors as mkdocs makes them).
- A name in backticks on a page (`Class.method`, `module.function`, `eventlog.x.y`, a file
  `name.py`) must be found in the package: imported and read with getattr. A name of another
  package is checked where that package is installed, and listed in EXTERNAL with a reason.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import pkgutil
import re
import typing
import unicodedata
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import eventlog

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
SOURCES = sorted(
    p for top in ("eventlog", "tools", "tests") for p in (ROOT / top).rglob("*.py") if p != Path(__file__).resolve()
)  # not this file: its examples are wrong on purpose

# Names the docs use that are not eventlog's: the first part of the name, where it comes from
# (checked when that package is installed), and why a page names it.
EXTERNAL: dict[str, tuple[str, str]] = {
    "langgraph.checkpoint": ("langgraph.checkpoint", "LangGraph's checkpoint package, beside eventlog.langgraph"),
    "SqliteSaver": ("langgraph.checkpoint.sqlite:SqliteSaver", "LangGraph's SQLite saver, compared in the guide"),
    "PostgresSaver": (
        "langgraph.checkpoint.postgres:PostgresSaver",
        "LangGraph's PostgreSQL saver, whose prune a reliability row names",
    ),
    "graph": ("langgraph.graph.state:CompiledStateGraph", "a compiled LangGraph graph in the LangGraph guide"),
    "RunConfig": (
        "google.adk.agents.run_config:RunConfig",
        "ADK's run options, whose session read benchmarks.md names",
    ),
    "Transaction": ("lmdb:Transaction", "py-lmdb's transaction, named in a profile of benchmarks.md"),
    "Runner": ("agents:Runner", "the OpenAI Agents SDK's runner, in its guide"),
    "RunState": ("agents:RunState", "the OpenAI Agents SDK's run state, which RunCheckpointer saves"),
}
FILE_SUFFIXES = ("py", "md", "mdb", "json", "part", "html", "toml")

_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_CITE = re.compile(
    r"docs/(?P<page>[\w./-]+?\.md)(?:#(?P<anchor>[\w-]+))?"
    r"(?:,\s*\\?\"(?P<section>[^\"\\]+)\\?\"|,\s*guarantee\s+(?P<guarantee>\d+))?"
)
_LINK = re.compile(r"\]\((?P<target>[^)\s#]+?\.md)?(?:#(?P<anchor>[^)\s]+))?\)")
_NAME = re.compile(r"`(?P<name>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?:\(\))?`")
_DIRECTIVE = re.compile(r"^:::\s+(?P<name>[\w.]+)\s*$", re.M)


def prose(path: Path) -> str:
    """A page's text outside fenced code blocks."""
    out, fence = [], ""
    for line in path.read_text(encoding="utf-8").splitlines():
        m = _FENCE.match(line)
        if m and (not fence or m.group(1).startswith(fence)):
            fence = "" if fence else m.group(1)[0] * 3
            continue
        if not fence:
            out.append(line)
    return "\n".join(out)


def _plain(heading: str) -> str:
    """A heading's text as a citation writes it: no code marks, emphasis or attribute list."""
    return re.sub(r"\s*\{[^}]*\}$", "", heading).replace("`", "").replace("*", "").strip()


def slug(text: str) -> str:
    """The anchor mkdocs (Python-Markdown's toc) makes of a heading."""
    text = unicodedata.normalize("NFKD", _plain(text)).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


@cache
def headings(page: Path) -> tuple[str, ...]:
    return tuple(_plain(m.group(2)) for line in prose(page).splitlines() if (m := _HEADING.match(line)))


@cache
def anchors(page: Path) -> frozenset[str]:
    """Every anchor of the page: a repeated heading's later anchors take `_1`, `_2`... as in mkdocs."""
    seen: dict[str, int] = {}
    out = set()
    for h in headings(page):
        s = slug(h)
        out.add(s if s not in seen else f"{s}_{seen[s]}")
        seen[s] = seen.get(s, 0) + 1
    return frozenset(out)


@cache
def guarantees() -> frozenset[int]:
    """The numbers of docs/durability.md's list of guarantees."""
    text = prose(ROOT / "docs" / "durability.md").split("\n## Guarantees", 1)[1].split("\n## ", 1)[0]
    return frozenset(int(n) for n in re.findall(r"^(\d+)\. \*\*", text, re.M))


def joined(path: Path) -> str:
    """A file's text with each line's indent and comment mark dropped, lines joined by spaces:
    a citation wrapped over two lines of a comment or docstring reads as one."""
    return " ".join(line.strip().lstrip("#").strip() for line in path.read_text(encoding="utf-8").splitlines())


def check_citation(page_name: str, anchor: str | None, section: str | None, guarantee: str | None) -> str | None:
    """What is wrong with a citation of a docs page, or None."""
    page = ROOT / "docs" / page_name
    if not page.is_file():
        return f"no page docs/{page_name}"
    if anchor is not None and anchor not in anchors(page):
        return f"no anchor #{anchor} in docs/{page_name}"
    if section is not None and _plain(section) not in headings(page):
        return f'no heading "{section}" in docs/{page_name} (it has: {", ".join(headings(page))})'
    if guarantee is not None and (page_name != "durability.md" or int(guarantee) not in guarantees()):
        return f"no guarantee {guarantee} in docs/{page_name}"
    return None


def _citations() -> Iterator[tuple[str, str]]:
    for path in [*SOURCES, *PAGES]:
        for m in _CITE.finditer(joined(path)):
            if (problem := check_citation(m["page"], m["anchor"], m["section"], m["guarantee"])) is not None:
                yield path.relative_to(ROOT).as_posix(), f"{m.group(0)!r}: {problem}"


def test_code_and_docs_cite_pages_sections_and_guarantees_that_exist() -> None:
    wrong = list(_citations())
    assert not wrong, "\n".join(f"{where}: {what}" for where, what in wrong)


def test_links_between_pages_reach_a_page_and_a_heading() -> None:
    wrong = []
    for path in PAGES:
        for m in _LINK.finditer(prose(path)):
            if (m["target"] is None and m["anchor"] is None) or "://" in (m["target"] or ""):
                continue
            page = (path.parent / m["target"]).resolve() if m["target"] else path  # `(#anchor)`: this page
            where = f"{path.relative_to(ROOT).as_posix()}: ({m['target']}#{m['anchor'] or ''})"
            if not page.is_file():
                wrong.append(f"{where}: no page {m['target']}")
            elif m["anchor"] is not None and m["anchor"] not in anchors(page):
                wrong.append(f"{where}: no anchor #{m['anchor']} (has: {sorted(anchors(page))})")
    assert not wrong, "\n".join(wrong)


# -- names ---------------------------------------------------------------------------------


@cache
def modules() -> dict[str, ModuleType]:
    """Every module of the package that imports here, by its full name."""
    out: dict[str, ModuleType] = {"eventlog": eventlog}
    for info in pkgutil.walk_packages(eventlog.__path__, "eventlog."):
        if info.name.endswith("__main__"):
            continue
        try:
            out[info.name] = importlib.import_module(info.name)
        except ImportError:  # an optional dependency that is not installed
            continue
    return out


@cache
def roots() -> dict[str, list[Any]]:
    """What the first part of a name can stand for: a module of the package by any dotted tail
    of its name (`checkpoints`, `transfer._export`), and a class of the package by any name a
    module binds it to."""
    out: dict[str, list[Any]] = {}
    for full, module in modules().items():
        parts = full.split(".")
        for i in range(1, len(parts)):
            out.setdefault(".".join(parts[i:]), []).append(module)
        for bound, value in vars(module).items():
            if inspect.isclass(value) and value.__module__.startswith("eventlog"):
                out.setdefault(bound, []).append(value)
    return out


@cache
def strings() -> frozenset[str]:
    """Dotted words the package holds as strings or bytes: event kinds, meta keys. A page that
    names one in backticks names data, not a Python name."""
    found = set()
    for path in (ROOT / "eventlog").rglob("*.py"):
        for s in re.findall(r"""b?["']([a-z_]+(?:\.[a-z_]+)+)["']""", path.read_text(encoding="utf-8")):
            found.add(s)
    return frozenset(found)


def step(obj: Any, attr: str) -> tuple[bool, Any]:
    """Whether `obj` has `attr` (a class: also one it sets on its instances, `self.attr =`), and
    what it is: the attribute, the class of an instance attribute or a property, or None when
    that is not known here."""
    if inspect.isclass(obj) and isinstance(value := inspect.getattr_static(obj, attr, None), property):
        try:
            return True, typing.get_type_hints(value.fget).get("return")
        except (NameError, TypeError):
            return True, None
    if hasattr(obj, attr):
        value = getattr(obj, attr)
        return True, None if inspect.ismemberdescriptor(value) or inspect.isgetsetdescriptor(value) else value
    if not inspect.isclass(obj):
        return False, None
    for cls in obj.__mro__:
        if attr in getattr(cls, "__annotations__", {}) or attr in getattr(cls, "__slots__", ()):
            return True, None
        if m := re.search(
            rf"\bself\.{re.escape(attr)}\s*(?::\s*(?P<hint>\w+)[^=]*)?=(?!=)\s*(?P<made>\w+)?", source(cls)
        ):
            made = roots().get(m["hint"] or m["made"] or "", [])
            return True, next((c for c in made if inspect.isclass(c)), None)
    return False, None


@cache
def source(cls: type) -> str:
    try:
        return inspect.getsource(cls)
    except (OSError, TypeError):
        return ""


def walk(obj: Any, parts: list[str]) -> bool:
    for part in parts:
        found, obj = step(obj, part)
        if not found:
            return False
        if obj is None:  # its type is not known here: the rest is not checked
            return True
    return True


def _external(spec: str) -> Any:
    module, _, attr = spec.partition(":")
    try:
        obj: Any = importlib.import_module(module)
    except ImportError:
        return None
    return getattr(obj, attr, None) if attr else obj


def check_name(name: str) -> str | None:
    """What is wrong with a name a page writes in backticks, or None (also for what is not a
    Python name: a variable, a stored key, an event kind)."""
    parts = name.split(".")
    if parts[-1] in FILE_SUFFIXES:
        if parts[-1] == "py" and not any(
            p.name == name for top in ("eventlog", "tools") for p in (ROOT / top).rglob(name)
        ):
            return f"no file {name} in eventlog/ or tools/"
        return None
    if name in strings():
        return None
    for prefix, (spec, _) in EXTERNAL.items():
        if name == prefix or name.startswith(prefix + "."):
            obj = _external(spec)
            rest = name.removeprefix(prefix).lstrip(".")
            if obj is None or walk(obj, rest.split(".") if rest else []):
                return None
    if parts[0] == "eventlog":
        module = max((m for m in modules() if name == m or name.startswith(m + ".")), key=len)
        return (
            None if walk(modules()[module], name.removeprefix(module).split(".")[1:]) else f"no {name} in the package"
        )
    begins = starts(parts)
    if not begins:
        if parts[0][:1].isupper():
            return f"no class {parts[0]} in the package (a name of another package goes in EXTERNAL, with a reason)"
        return None  # a variable, a module of another package
    try:  # a module of another package with the same name as one of the package's (`lmdb.open`)
        begins.append((importlib.import_module(parts[0]), parts[1:]))
    except ImportError:
        pass
    return None if any(walk(root, rest) for root, rest in begins) else f"{name} is not found in the package"


def starts(parts: list[str]) -> list[tuple[Any, list[str]]]:
    """Where the walk of a name can begin: a module or class of the package (`checkpoints`,
    `Writer`, `transfer._export`), the log by convention (`log.`), or an attribute of the log
    named without it (`checkpoints.iter`)."""
    out = [(root, parts[i:]) for i in range(1, len(parts)) for root in roots().get(".".join(parts[:i]), [])]
    if parts[0] == "log":
        out.append((eventlog.EventLog, parts[1:]))
    elif (attr := step(eventlog.EventLog, parts[0]))[0] and not inspect.isroutine(attr[1]):
        out.append((eventlog.EventLog, parts))  # not a method: `writer.checkpoint` is a run writer's
    return out


def _names() -> Iterator[tuple[str, str]]:
    for path in PAGES:
        text = prose(path)
        found = [m["name"] for m in _NAME.finditer(text)] + [m["name"] for m in _DIRECTIVE.finditer(text)]
        for name in dict.fromkeys(found):
            if (problem := check_name(name)) is not None:
                yield path.relative_to(ROOT).as_posix(), f"`{name}`: {problem}"


def test_pages_name_only_what_exists_in_the_package() -> None:
    wrong = list(_names())
    assert not wrong, "\n".join(f"{where}: {what}" for where, what in wrong)


def test_every_name_of_another_package_is_named_by_a_page_and_exists() -> None:
    """No stale entry in EXTERNAL: each is used, and names something where its package is installed."""
    used = {n for path in PAGES for n in (m["name"] for m in _NAME.finditer(prose(path)))}
    for prefix, (spec, _) in EXTERNAL.items():
        assert any(n == prefix or n.startswith(prefix + ".") for n in used), f"no page names {prefix}"
        module, _, attr = spec.partition(":")
        if importlib.util.find_spec(module.split(".")[0]) is not None:
            assert _external(spec) is not None, spec


# -- the check itself ----------------------------------------------------------------------


def test_slugs_are_those_mkdocs_makes() -> None:
    toc = pytest.importorskip("markdown.extensions.toc", reason="Python-Markdown comes with mkdocs (the test extra)")
    for h in [
        "A `state_at`",
        "What never to do, and what the log detects",
        "`eventlog verify`",
        "Records (msgpack, inside the payload)",
        "Traps of wayflowcore 26.3.1, and what this module does about them",
    ]:
        assert slug(h) == toc.slugify(toc.strip_tags(toc.unescape(_plain(h))), "-")


@pytest.mark.parametrize(
    ("page", "anchor", "section", "guarantee"),
    [
        ("nope.md", None, None, None),
        ("architecture.md", "no-such-anchor", None, None),
        ("architecture.md", None, "Reading", None),
        ("durability.md", None, "What never to do", None),
        ("durability.md", None, None, "99"),
        ("format.md", None, None, "7"),
    ],
)
def test_a_wrong_citation_is_named(page: str, anchor: str | None, section: str | None, guarantee: str | None) -> None:
    assert check_citation(page, anchor, section, guarantee) is not None


def test_a_right_citation_passes() -> None:
    assert check_citation("architecture.md", "removal", "A `state_at`", None) is None
    assert check_citation("architecture.md", None, "A state_at", None) is None
    assert check_citation("durability.md", "encryption-at-rest", None, "7") is None
    cited = _CITE.search('see (docs/durability.md,\n"Encryption at rest") for'.replace("\n", " "))
    assert cited is not None and cited["page"] == "durability.md" and cited["section"] == "Encryption at rest"


@pytest.mark.parametrize(
    "name",
    [
        "EventLog.no_such_method",
        "eventlog.no_such_module",
        "eventlog.aio.NoSuchClass",
        "NoSuchClass.method",
        "checkpoints.no_such_function",
        "log.no_such_method",
        "no_such_file.py",
        "Writer.find_id",
    ],
)
def test_a_missing_name_is_named(name: str) -> None:
    assert check_name(name) is not None


@pytest.mark.parametrize(
    "name",
    [
        "EventLog.state_at",
        "eventlog.aio.AsyncEventLog",
        "log.checkpoints.save",
        "Checkpoints.iter",
        "RunInfo.number",
        "_limits.nesting_depth_max",
        "turn.failed",
        "log.id",
        "lock.mdb",
        "_pipeline.py",
        "some_variable.attr",
    ],
)
def test_a_name_that_exists_passes(name: str) -> None:
    assert check_name(name) is None
