"""The documentation a user reads: the README's first screen, the rules reference kept
current with the rule files, and links between the pages that lead somewhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from qcdoctor.engine.reports.method_docs import anchor_of
from qcdoctor.engine.reports.rule_docs import rule_docs
from tests.paths import REPO

DOCS = REPO / "docs"
PAGES = sorted([REPO / "README.md", *DOCS.glob("*.md")])
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*$")


def test_readme_begins_with_the_two_set_up_commands():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```bash\n(.*?)```", readme, re.S)
    assert block and readme.index("```bash") < readme.index("\n## ")
    commands = block.group(1).strip().splitlines()
    assert len(commands) == 2
    assert "qcdoctor triage --example" in commands[0]
    assert "torch==2.13.0" in commands[1] and commands[1].endswith("python3 -m pytest")
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert commands[1] in ci, ".ci/run runs the README's test command"


def test_readme_is_a_first_read_and_the_rest_lives_in_docs():
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 220, len(lines)


def test_the_rules_reference_is_current():
    committed = (DOCS / "rules.md").read_text(encoding="utf-8")
    assert committed == rule_docs("en"), (
        "docs/rules.md is stale: qcdoctor rules docs --lang en -o docs/rules.md")


def _anchors(page: Path) -> set[str]:
    found, fenced = set(), False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        heading = None if fenced else _HEADING.match(line)
        if heading:
            found.add(anchor_of(heading.group(1)))
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_link_between_pages_leads_somewhere(page):
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    broken = []
    for target in _LINK.findall(text):
        if target.startswith(("https://", "http://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.is_file() or (anchor and anchor not in _anchors(linked)):
            broken.append(target)
    assert not broken, f"{page.name}: {broken}"
