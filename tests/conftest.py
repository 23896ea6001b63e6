"""Shared helpers: run rules in isolation, build cases from dicts, fixed environment."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

os.environ.setdefault("HYPOTHESIS_PROFILE", "ci")
# the developer's colour settings would turn commands run without --format into the
# coloured terminal view; the tests that want it set these themselves
for _colour in ("FORCE_COLOR", "NO_COLOR"):
    os.environ.pop(_colour, None)
# the developer's locale would pick the language of every case without one (the language
# rule: docs/reports.md); the tests that want a locale set it themselves
for _locale in ("LC_ALL", "LC_MESSAGES"):
    os.environ.pop(_locale, None)
os.environ["LANG"] = "C.UTF-8"

# the stop signals reach every process the tests start with their default handling,
# however this run was started: nohup and a shell's background jobs ignore SIGHUP and
# SIGINT, and an ignored disposition is inherited, so a Ctrl-C test would wait forever
import signal  # noqa: E402

for _stop in ("SIGINT", "SIGHUP", "SIGTERM", "SIGQUIT"):
    if hasattr(signal, _stop) and signal.getsignal(getattr(signal, _stop)) is signal.SIG_IGN:
        signal.signal(getattr(signal, _stop), signal.default_int_handler if _stop == "SIGINT"
                      else signal.SIG_DFL)

from dataclasses import replace  # noqa: E402

from qcdoctor.collectors.case_file import parse_case  # noqa: E402
from qcdoctor.engine.diagnosis.diagnose import bundled_runner  # noqa: E402
from qcdoctor.engine.diagnosis.triage import triage_case  # noqa: E402
from qcdoctor.engine.matching.rulebook import load_rules  # noqa: E402
from qcdoctor.engine.matching.runner import RuleRunner  # noqa: E402
from tests.paths import REPO  # noqa: E402

# one runner per rule, compiled once for the whole session (matching runs in the engine worker)
_runners: dict[str, RuleRunner] = {r.id: RuleRunner([r]) for r in load_rules()}
FLAT_RUNNER = RuleRunner(tuple(replace(r, stratum=0) for r in load_rules()))
bundled_runner()


def single_rule_runner(rule) -> RuleRunner:
    """A runner holding only ``rule``."""
    return _runners[rule.id]


def case_from(data: dict, folder: Path | None = None):
    """A validated case from a dict, as if read from case.yaml in ``folder``."""
    text = yaml.safe_dump({"schema": "qcdoctor/case-v1", **data}, allow_unicode=True)
    return parse_case(text, None, folder or REPO / "tests" / "no_such_folder")


def triage_dict(data: dict, lang: str = "en", folder: Path | None = None) -> dict:
    """Triage a case dict with no environment, no installed packages, no files."""
    folder = folder or REPO / "tests" / "no_such_folder"
    return triage_case(case_from(data, folder), lang=lang, environ={}, installed={}, cwd=folder)


@pytest.fixture(scope="session")
def rules():
    return load_rules()


@pytest.fixture
def rules_copy(tmp_path, monkeypatch):
    """A copy of the bundled rules folder to change, with a rule cache of its own."""
    import shutil
    from importlib import resources
    monkeypatch.setenv("QCDOCTOR_CACHE_DIR", str(tmp_path / "cache"))
    with resources.as_file(resources.files("qcdoctor.rules")) as src:
        shutil.copytree(src, tmp_path / "rules", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path / "rules"


def missing_in_ci(message: str):
    """Skip a test whose tool or file is missing here; fail it under CI (``CI`` set to
    anything but empty, 0 or false), which must run it, never pass by skipping."""
    if os.environ.get("CI", "").lower() not in ("", "0", "false"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """Once a test module is done (its fixtures torn down), no thread it started may still
    run: qcdoctor does not fork beside one, so a thread left behind would change what a
    test run after it does, depending on the order (a test order is random under CI)."""
    yield
    if nextitem is not None and nextitem.module is item.module:
        return
    import threading
    left = [t for t in threading.enumerate() if t is not threading.main_thread()]
    for thread in left:
        thread.join(timeout=10)
    running = [t.name for t in left if t.is_alive()]
    assert not running, f"{item.module.__name__} left threads running: {running}"
