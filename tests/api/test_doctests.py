"""The examples in the API's docstrings and in docs/python.md run, and give what they
show."""

from __future__ import annotations

import doctest
import importlib

import pytest

from tests.paths import REPO

MODULES = ["qcdoctor.engine.api", "qcdoctor.engine.api.case", "qcdoctor.engine.api.report",
           "qcdoctor.engine.api.run"]
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _run(tests: list[doctest.DocTest]) -> tuple[int, int, str]:
    """(examples, failures, the runner's account of the failures)."""
    printed = []
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    for test in tests:
        runner.run(test, out=printed.append)
    result = runner.summarize(verbose=False)
    return result.attempted, result.failed, "".join(printed)


@pytest.mark.parametrize("name", MODULES)
def test_the_docstring_examples_run(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)             # an example may write a file
    tests = doctest.DocTestFinder().find(importlib.import_module(name))
    attempted, failed, account = _run(tests)
    assert attempted > 0 and not failed, account


def test_the_guides_examples_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = (REPO / "docs" / "python.md").read_text(encoding="utf-8")
    test = doctest.DocTestParser().get_doctest(text, {}, "docs/python.md", "docs/python.md", 0)
    attempted, failed, account = _run([test])
    assert attempted >= 15 and not failed, account
    assert (tmp_path / "report.html").is_file() and (tmp_path / "my_case" / "case.yaml").is_file()
