"""knowledge.md §16 R3.14 over every bundled example, in both languages (the knowledge
coverage examples run the same checks in test_knowledge_coverage): no word written twice,
no two actions doing the same, no action listed again as information still needed, no
work to do shown as information, no overridden rule's request, no request for a fact the
case gives."""

from __future__ import annotations

import pytest
import yaml

from qcdoctor.engine.commands.examples import example_names, example_path
from qcdoctor.engine.diagnosis.triage import triage_path
from qcdoctor.engine.reports.formats import render_output
from qcdoctor.engine.reports.terminal import render_terminal
from qcdoctor.engine.reports.view import view_model
from qcdoctor.wording import labels
from tests.diagnosis.one_voice import problems
from tests.qa.scenarios import build


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("name", example_names())
def test_an_example_report_speaks_with_one_voice(name, lang):
    with example_path(name) as path:
        report = triage_path(path, use_env=False, lang=lang)
        case = yaml.safe_load((path / "case.yaml").read_text(encoding="utf-8"))
    assert not problems(report, case), problems(report, case)


def _example_report(name: str) -> tuple[dict, dict]:
    with example_path(name) as path:
        report = triage_path(path, use_env=False, lang="en")
        case = yaml.safe_load((path / "case.yaml").read_text(encoding="utf-8"))
    return report, case


def test_the_checks_find_what_they_look_for():
    report, case = _example_report("board_only")
    assert not problems(report, case)
    # a doubled word, two LUT bisections, an action asked again as missing
    report["conclusion"]["evidence"][0]["text"] = "the board board decode"
    report["next_actions"] += [{"id": "lut:a", "kind": "lut_bisect", "rule": "LY032"},
                               {"id": "lut:b", "kind": "lut_bisect", "rule": "LY032"}]
    report["missing"].append({"id": "lut:a", "question": "x", "rule": "LY032"})
    # an overridden conclusion still asking for stage results
    report["conclusion"]["evidence"].append({"rule": "ST120", "text": "(overridden) x",
                                             "overridden": True})
    report["missing"].append({"id": "stage_results", "question": "y", "rule": "ST120"})
    # the checklist asks for the training layout: a case that gives it is asked again
    assert "deploy.train.layout" in str(report["checklist"])
    case = {**case, "deploy": {**case["deploy"], "train": {"layout": "NCHW"}}}
    found = problems(report, case)
    expected = ["a word written twice", "two actions do the same",
                "actions listed again as information still needed",
                "ST120 is overridden but still asks for stage_results",
                "work to do listed as information still needed: lut:a",
                "asks for deploy.train.layout, which the case gives"]
    for start in expected:
        assert any(f.startswith(start) for f in found), (start, found)
    assert len(found) == len(expected), found


def test_a_code_comment_the_finding_denies_is_found(tmp_path):
    case = build("rounding", tmp_path)
    report = triage_path(case, use_env=False, lang="en")
    assert not problems(report), problems(report)
    action = next(a for a in report["next_actions"] if a["rule"] == "LY031")
    assert "by rounding" in action["code"]
    action["text"] += " It is not rounding."
    assert problems(report) == [f"{action['id']}: its code comments say rounding, which its "
                                "finding denies"]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_rule_proposing_work_and_asking_beside_it_keeps_its_action_among_actions(
        tmp_path, lang):
    """CS022 proposes level 1 and asks which levels were tried: the question is what the
    report waits for, the level an action; neither shown twice."""
    with example_path("convert_j6p") as path:
        case = yaml.safe_load((path / "case.yaml").read_text(encoding="utf-8"))
    case["platform"] = {"chip": "J6E"}
    (tmp_path / "case.yaml").write_text(yaml.safe_dump(case, allow_unicode=True),
                                        encoding="utf-8")
    report = triage_path(tmp_path, use_env=False, lang=lang)
    assert "consistency_level_1" in {a["id"] for a in report["next_actions"]}
    needed = view_model(report)["needed"]
    assert [item["id"] for item in needed if item["rule"] == "CS022"] == ["consistency_tried"]
    assert not problems(report, case), problems(report, case)
    markdown = render_output(report, "md")
    waiting = markdown.split(f"### {labels()[lang]['needed']}")[1].split("\n## ")[0]
    level_1 = next(a for a in report["next_actions"] if a["id"] == "consistency_level_1")
    assert level_1["text"][:30] not in waiting and "CS022" in waiting
    for fmt in ("md", "html", "json", "sarif", "junit"):
        assert render_output(report, fmt).strip(), fmt
    assert render_terminal(report, color=False).strip()


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_remedy_shows_as_a_fix_to_make(lang):
    """A located op's remedy is a change to the model, shown as one in every format; the
    JSON keeps the contract's kind and says remedy."""
    with example_path("convert_quant_analysis") as path:
        report = triage_path(path, use_env=False, lang=lang)
    remedies = [a for a in report["next_actions"] if a.get("remedy")]
    assert remedies and all(a["kind"] == "provide_info" and a["cost"] != "verify"
                            for a in remedies)
    words = labels()[lang]["words"]["action"]
    markdown, html = render_output(report, "md"), render_output(report, "html")
    assert words["remedy"] in markdown and words["remedy"] in html
    assert words["provide_info"] not in markdown
