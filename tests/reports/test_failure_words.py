"""A failed checklist item says what failed, with its values, in both languages: every
deploy rule that fails an item, run on its own fires examples, gives the item a negative
wording and evidence that names the example's values; the likely cause and the batch
table say the same; a passed item states its check as it holds. Once the compile script
was read, an unknown item asks for the facts it lacks by name, never for the script."""

from __future__ import annotations

import re
import string

import pytest

from qcdoctor.catalogues import checklist_items
from qcdoctor.engine.commands.batch import CaseResult
from qcdoctor.engine.commands.batch_output import summary_table
from qcdoctor.engine.commands.examples import example_path
from qcdoctor.engine.diagnosis.diagnose import build_report
from qcdoctor.engine.diagnosis.triage import triage_path
from qcdoctor.engine.matching.rulebook import load_rules
from qcdoctor.engine.reports.formats import render
from qcdoctor.fact_types import normalise
from tests.conftest import single_rule_runner

NEGATION = {"en": re.compile(r"\bnot\b"), "zh": re.compile("不")}
FAILING = [r for r in load_rules()
           if r.id.startswith("DP") and (r.then.get("checklist") or {}).get("status") == "fail"]


def _checklist(rule, example: list[dict], lang: str) -> list[dict]:
    facts = [normalise(f) for f in example]
    hits = single_rule_runner(rule).run(facts)
    report = build_report(facts, hits, lang=lang, case_info={}, case_context={}, files=[],
                          full_checklist=True)
    return report["checklist"]


def _values_named(rule, example: list[dict], lang: str) -> list[str]:
    """The example's values the message fills in as they are (not turned into words)."""
    fields = [(name, conversion) for _, name, _, conversion
              in string.Formatter().parse(rule.message[lang]) if name]
    facts = {f["type"]: normalise(f) for f in example}
    named = [name.split(".") for name, conversion in fields if conversion is None]
    return [str(facts[kind][key]) for kind, key in named
            if kind in facts and facts[kind].get(key) not in (None, "", "unknown")]


def test_every_checklist_item_has_a_negative_failed_wording():
    for item, spec in checklist_items().items():
        for lang, negation in NEGATION.items():
            assert negation.search(spec["failed"][lang]), (item, lang)
            assert not negation.search(spec["title"][lang]), (item, lang)   # states the pass


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("rule", FAILING, ids=lambda r: r.id)
def test_a_failed_item_states_the_failure_with_its_values(rule, lang):
    assert len(FAILING) >= 20
    for example in rule.examples["fires"]:
        failed = [c for c in _checklist(rule, example, lang) if c["status"] == "fail"]
        assert failed, rule.id
        for item in failed:
            assert NEGATION[lang].search(item["title"]), (rule.id, item["title"])
            assert item["title"] == checklist_items()[item["id"]]["failed"][lang]
            texts = [e["text"] for e in item["evidence"] if e["status"] == "fail"]
            assert texts, (rule.id, item["id"])
            for value in _values_named(rule, example, lang):
                assert any(value in t for t in texts), (rule.id, value, texts)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_passed_items_state_their_check(lang):
    with example_path("board_nv12_deploy") as path:
        report = triage_path(path, use_env=False, lang=lang, full_checklist=True)
    passed = [c for c in report["checklist"] if c["status"] == "pass"]
    assert passed
    for c in passed:
        assert c["title"] == checklist_items()[c["id"]]["title"][lang]


@pytest.mark.parametrize("lang,failure,values", [
    ("en", "insert_image_preprocess mode does not match the training colour space",
     ["RGB", "yuvbt601full2bgr"]),
    ("zh", "insert_image_preprocess 的 mode 与训练颜色空间不一致", ["RGB", "yuvbt601full2bgr"]),
])
def test_the_likely_cause_and_the_batch_name_the_failure(lang, failure, values):
    with example_path("board_nv12_deploy") as path:
        report = triage_path(path, use_env=False, lang=lang)
    assert report["conclusion"]["suspect"] == "preprocess_mode"
    markdown = render(report, "md")
    cause = next(line for line in markdown.splitlines() if failure in line)
    assert all(v in cause for v in values), cause
    assert "matches the training colour space" not in markdown
    assert "与训练颜色空间一致" not in markdown
    row = CaseResult("board", stage=report["conclusion"]["stage"], determined=True,
                     suspect="preprocess_mode", failed=["preprocess_mode"])
    table = summary_table([row], lang)
    assert table.count(failure) == 2, table           # the likely cause and the failed column


@pytest.mark.parametrize("lang,script", [("en", "compile script"), ("zh", "编译脚本")])
def test_what_was_read_is_not_asked_for(lang, script):
    with example_path("board_nv12_deploy") as path:
        report = triage_path(path, use_env=False, lang=lang, full_checklist=True)
    asked = {c["id"]: c["provide"] for c in report["checklist"] if c.get("provide")}
    assert {"qdq_io_types", "march_consistency"} <= set(asked)
    for item, provide in asked.items():
        assert "deploy.script" not in provide, (item, provide)
        assert not provide.startswith(("the compile script and", "the compile script (",
                                       "编译脚本与", "编译脚本（")), (item, provide)
    assert "board" in asked["qdq_io_types"] or "板端" in asked["qdq_io_types"]
    assert script in asked["qdq_io_types"]          # it says what the script does not show


def test_an_unread_script_is_still_asked_for():
    from qcdoctor.engine.diagnosis.diagnose import checklist_section
    asked = {c["id"]: c["provide"] for c in checklist_section({}, "en")}
    assert asked["qdq_io_types"] == checklist_items()["qdq_io_types"]["provide"]["en"]
