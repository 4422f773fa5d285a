"""What the runs of a framework's own tests share (tools/langgraph_suite.py,
tools/openai_agents_suite.py): the outcomes pytest wrote, and the report's lists."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path


def junit_outcomes(path: Path) -> dict[tuple[str, str], tuple[str, str, int]]:
    """(classname, name) of each test -> (passed, failed or skipped; its file; the line of its
    def), from pytest's JUnit XML (file and line when written as xunit1)."""
    found: dict[tuple[str, str], tuple[str, str, int]] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            outcome = "failed"
        elif case.find("skipped") is not None:
            outcome = "skipped"
        else:
            outcome = "passed"
        key = (case.get("classname", ""), case.get("name", ""))
        found[key] = (outcome, case.get("file", ""), int(case.get("line", "0") or 0))
    return found


def print_lists(lists: list[tuple[str, list[str]]]) -> None:
    """Each list under its title, with its length."""
    for title, names in lists:
        print(f"{title}: {len(names)}")
        for name in names:
            print(f"  {name}")
