"""The docs are tested: every ```python block of README.md and docs/ runs, and the site builds in strict mode.

Each block runs on its own, in a fresh interpreter and a fresh empty directory, so a
block may not lean on one before it. A block fenced ```python-norun is shown, not run.
A page written as one walkthrough says so with the line `<!-- docs-test: sequence -->`:
then block k runs after blocks 1..k-1 of the page, in the same interpreter.
A block fenced ```python file=NAME is not run: it is written to NAME in the directory of
every block of its page, so a block may import it or run it in a new process.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_SEQUENCE = "<!-- docs-test: sequence -->"
_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n`]*)$")


def code_blocks(path: Path) -> list[tuple[int, str, str]]:
    """(line of the opening fence, info string, code) of every fenced block in a Markdown file."""
    blocks: list[tuple[int, str, str]] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        indent, fence, info = m["indent"], m["fence"], m["info"].strip()
        body: list[str] = []
        j = i + 1
        while j < len(lines):
            closing = _FENCE.match(lines[j])
            if (
                closing is not None
                and closing["fence"].startswith(fence[0] * len(fence))
                and not closing["info"].strip()
            ):
                break
            body.append(lines[j].removeprefix(indent))
            j += 1
        blocks.append((i + 1, info, "\n".join(body) + "\n"))
        i = j + 1
    return blocks


def _runs(info: str) -> bool:
    words = info.replace("{", " ").replace("}", " ").replace(".", " ").split()
    return bool(words) and words[0] in ("python", "py") and "norun" not in info and _file(info) is None


def _file(info: str) -> str | None:
    """The NAME of a block fenced ```python file=NAME, or None."""
    m = re.search(r"\bfile=(\S+)", info)
    return None if m is None else m.group(1)


def _documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _python_blocks() -> list[pytest.ParameterSet]:
    params = []
    for path in _documents():
        name = path.relative_to(ROOT).as_posix()
        sequence = _SEQUENCE in path.read_text(encoding="utf-8")
        blocks = code_blocks(path)
        files = {f: code for _, info, code in blocks if (f := _file(info)) is not None}
        numbered = [b for b in blocks if _runs(b[1])]
        for index, (line, _, code) in enumerate(numbered, 1):
            before = "".join(c for _, _, c in numbered[: index - 1]) if sequence else ""
            params.append(pytest.param(name, line, before, code, files, id=f"{name}:block{index}:line{line}"))
    return params


@pytest.mark.parametrize(("document", "line", "before", "code", "files"), _python_blocks())
def test_python_block_runs(
    document: str, line: int, before: str, code: str, files: dict[str, str], tmp_path: Path
) -> None:
    """The block runs to the end without an error, alone (or after the blocks before it on a
    sequence page), in an empty directory (but for its page's `file=` blocks)."""
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVENTLOG_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    script = tmp_path / "block.py"
    script.write_text(before + code, encoding="utf-8")
    p = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert p.returncode == 0, f"{document} block at line {line} failed:\n{code}\n--- stderr ---\n{p.stderr[-4000:]}"


def test_code_blocks_are_found() -> None:
    """The block finder sees the blocks these docs are known to hold."""
    readme = list(code_blocks(ROOT / "README.md"))
    assert readme and readme[0][1] == "sh"
    assert any(_runs(info) for _, info, _ in code_blocks(ROOT / "docs" / "quickstart.md"))
    assert not _runs("python-norun") and _runs("python") and not _runs("sh")
    assert not _runs("python file=agent.py") and _file("python file=agent.py") == "agent.py"


def test_site_builds_in_strict_mode(tmp_path: Path) -> None:
    """`mkdocs build --strict`: no broken link, no page left out of the nav, no docstring warning."""
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("mkdocs is not installed (it comes with the test extra: pip install '.[test]')")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT)}
    p = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    warnings = [line for line in p.stderr.splitlines() if "WARNING" in line or "ERROR" in line]
    assert p.returncode == 0, "\n".join(warnings) or p.stderr[-4000:]
    assert not warnings, "\n".join(warnings)
    assert (tmp_path / "site" / "api" / "index.html").exists()
