"""eventlog.testing as another project uses it: a test module of its own, its own `open_store`,
run by pytest in a new process with none of this suite's fixtures. A store that breaks the
contract fails the tests that name what it broke. (tests/test_conformance.py runs the same
contract on eventlog's own stores; docs/api.md shows a store that passes it.)"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

LAX_STORE = '''
import pytest

from eventlog.store import MemoryStore
from eventlog.testing import StoreContract


class LaxTxn:
    """A transaction whose `insert` writes over a taken key instead of refusing it."""

    def __init__(self, txn):
        self._txn = txn

    def __getattr__(self, name):
        return getattr(self._txn, name)

    def insert(self, table, key, value):
        self._txn.put(table, key, value)


class LaxStore(MemoryStore):
    def write(self, fn):
        return super().write(lambda txn: fn(LaxTxn(txn)))


class TestLaxStore(StoreContract):
    @pytest.fixture
    def open_store(self):
        return LaxStore  # a new, empty store at each open: a reopen forgets everything
'''


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVENTLOG_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def test_a_store_that_breaks_the_contract_fails_what_it_broke(tmp_path: Path) -> None:
    (tmp_path / "test_lax_store.py").write_text(LAX_STORE, encoding="utf-8")
    p = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--junitxml=report.xml", "test_lax_store.py"],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert p.returncode == 1, p.stdout[-4000:] + p.stderr[-4000:]
    cases = ET.parse(tmp_path / "report.xml").getroot().iter("testcase")
    outcome = {
        c.get("name"): "failed" if c.find("failure") is not None or c.find("error") is not None else "passed"
        for c in cases
    }
    assert len(outcome) > 50, outcome
    broken = {
        "test_insert_of_a_taken_key_rolls_the_whole_transaction_back",
        "test_insert_of_new_keys_then_a_put_over_one",
        "test_reopen_keeps_everything",
        "test_event_id_survives_reopen",
        "test_feed_order_is_kept_across_reopen",
    }
    assert {name: outcome[name] for name in broken} == dict.fromkeys(broken, "failed")
    kept = {"test_append_returns_offsets_one_to_head_without_gaps", "test_fork_refusals", "test_prune"}
    assert {name: outcome[name] for name in kept} == dict.fromkeys(kept, "passed")


def test_the_package_does_not_import_the_contract_or_pytest() -> None:
    code = (
        "import sys, eventlog, eventlog.aio, eventlog.store, eventlog.transfer\n"
        "print(sorted(m for m in sys.modules if m in ('pytest', 'hypothesis', 'eventlog.testing')))"
    )
    p = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True, timeout=60, check=True)
    assert p.stdout.strip() == "[]"
