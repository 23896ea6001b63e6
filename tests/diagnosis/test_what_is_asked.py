"""knowledge.md §16 R3.14 and R3.4: what a report asks the user for. A checklist item asks
only for the case keys the case leaves empty; a conclusion another one overrides asks for
nothing; a remedy is a fix to make, which the rule data must say in a form the loader
checks."""

from __future__ import annotations

import pytest
import yaml

from qcdoctor.engine.diagnosis.triage import triage_path
from qcdoctor.engine.matching.rulebook import load_rules_from
from qcdoctor.engine.reports.formats import render_output
from qcdoctor.engine.reports.terminal import render_terminal
from qcdoctor.errors import QcdoctorError
from tests.diagnosis.one_voice import problems

BOARD_CASE = {
    "schema": "qcdoctor/case-v1", "language": "en", "evidence": ["dataset_eval"],
    "badcase": "available", "versions": {"hbdk4-compiler": "4.5.0"},
    "stages": {"qat": {"metric": "mIoU", "value": 0.715},
               "quantized_bc": {"metric": "mIoU", "value": 0.712},
               "hbm_x86": {"metric": "mIoU", "value": 0.710},
               "board": {"metric": "mIoU", "value": 0.520}},
    "tolerance": {"abs": 0.01}}


def _triaged(folder, case: dict, lang: str) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "case.yaml").write_text(yaml.safe_dump(case, allow_unicode=True), encoding="utf-8")
    report = triage_path(folder, use_env=False, lang=lang)
    for fmt in ("md", "html", "json", "sarif", "junit"):
        assert render_output(report, fmt).strip(), fmt
    assert render_terminal(report, color=False).strip()
    return report


def _provide(report: dict, item: str) -> str:
    return next(c for c in report["checklist"] if c["id"] == item)["provide"]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_checklist_item_asks_only_for_the_keys_the_case_leaves_empty(tmp_path, lang):
    none_given = _triaged(tmp_path / "none", BOARD_CASE, lang)
    assert "deploy.train.layout" in _provide(none_given, "layout")
    assert "deploy.board.layout" in _provide(none_given, "layout")

    case = {**BOARD_CASE, "deploy": {"train": {"layout": "NCHW", "padding": "none"},
                                     "board": {"input_scale": 0.0078125}}}
    some = _triaged(tmp_path / "some", case, lang)
    layout, padding = _provide(some, "layout"), _provide(some, "padding")
    assert "deploy.train.layout" not in layout and "deploy.board.layout" in layout
    assert "deploy.train.padding" not in padding and "deploy.board.padding" in padding
    assert "deploy.board.input_scale" not in _provide(some, "input_scale")
    assert "deploy.train.input_scale" in _provide(some, "input_scale")
    assert not problems(some, case), problems(some, case)

    # every key of the layout given, no compile script: only the script is asked for
    case = {**BOARD_CASE, "deploy": {"train": {"layout": "NCHW"},
                                     "board": {"input_source": "pyramid"}}}
    keys_given = _triaged(tmp_path / "all", case, lang)
    # without the compile script the item stays unknown: only the script is asked for
    assert next(c for c in keys_given["checklist"] if c["id"] == "layout")["status"] == "unknown"
    assert "deploy." not in _provide(keys_given, "layout")
    assert ("编译脚本" if lang == "zh" else "compile script") in _provide(keys_given, "layout")
    assert not problems(keys_given, case), problems(keys_given, case)


def test_a_value_left_unknown_is_still_asked_for(tmp_path):
    case = {**BOARD_CASE, "deploy": {"postprocess_same": "unknown"}}
    report = _triaged(tmp_path / "case", case, "en")
    assert "deploy.postprocess_same" in _provide(report, "pre_post_nodes")


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_an_overridden_conclusion_asks_for_nothing(tmp_path, lang):
    """A later stage better than an earlier one (inconsistent evaluations) overrides "the
    board is not evaluated yet": the stage results that one would ask for are not asked."""
    case = {"schema": "qcdoctor/case-v1", "evidence": ["dataset_eval"],
            "stages": {"qat": {"metric": "mAP", "value": 0.45},
                       "qat_export": {"metric": "mAP", "value": 0.45},
                       "qat_bc": {"metric": "mAP", "value": 0.48}},
            "tolerance": {"abs": 0.005}}
    report = _triaged(tmp_path / "case", case, lang)
    overridden = [e["rule"] for e in report["conclusion"]["evidence"] if e.get("overridden")]
    assert "ST111" in overridden
    assert not [m for m in report["missing"] if m["rule"] in overridden]
    assert not problems(report, case), problems(report, case)



@pytest.mark.parametrize("change,message", [
    ('remedy: "yes", cost: retrain,', "remedy must be true or false"),
    ("remedy: true, cost: verify,", "its cost is analyse, recalibrate or retrain"),
])
def test_a_remedy_is_declared_in_a_form_the_loader_checks(rules_copy, change, message):
    path = next(rules_copy.glob("layers/LY030-*.yaml"))
    text = path.read_text(encoding="utf-8")
    assert "remedy: true, cost: retrain," in text
    path.write_text(text.replace("remedy: true, cost: retrain,", change), encoding="utf-8")
    with pytest.raises(QcdoctorError) as raised:
        load_rules_from(rules_copy, cached=False)
    assert message in str(raised.value) and "LY030" in str(raised.value)
    assert "then.next_action" in str(raised.value)


def test_post_processing_is_asked_only_where_no_table_shows_it(tmp_path):
    """A folder holding sensitivity tables alone (no per-layer table to read the model's
    ops from) leaves it open: asked; beside the per-layer table it is not."""
    from qcdoctor.engine.reports.view import view_model
    from tests.diagnosis.test_sensitivity_validity import (
        CONVERT_RUN,
        clean_rows,
        noise_values,
        rows,
    )
    from tests.qa.scenarios import case_yaml
    from tests.qa.writers import write_compare, write_sensitivity
    alone = tmp_path / "alone"
    case_yaml(alone, analyses_run=[CONVERT_RUN])
    write_sensitivity(alone / "qa_convert", rows(noise_values()))
    beside = tmp_path / "beside"
    case_yaml(beside, analyses_run=[CONVERT_RUN])
    write_compare(beside / "qa_convert", clean_rows())
    write_sensitivity(beside / "qa_convert", rows(noise_values()))
    for folder, asked in ((alone, True), (beside, False)):
        report = triage_path(folder, use_env=False, lang="en")
        needed = [item["id"] for item in view_model(report)["needed"]]
        assert ("postprocess_in_model" in needed) is asked, folder.name


def test_a_stage_entry_holding_only_the_metric_is_no_result(tmp_path):
    """The intake keeps a metric confirmed before any value as ``qat: {metric: mAP}``: no
    result, so no stage row says "unknown" for it."""
    from qcdoctor.engine.reports.view import view_model
    case = {**BOARD_CASE, "stages": {"qat": {"metric": "mIoU"},
                                     "quantized_bc": {"metric": "mIoU", "value": 0.712},
                                     "hbm_x86": {"metric": "mIoU", "value": 0.710},
                                     "board": {"metric": "mIoU", "value": 0.520}}}
    report = _triaged(tmp_path / "case", case, "en")
    qat = next(f for f in report["facts"] if f["type"] == "stage" and f["stage"] == "qat")
    assert qat["source"] == "not given" and not qat["has_value"]
    shown = [row["label"] for row in view_model(report)["stage_rows"]]
    assert "qat.pt" not in shown and "quantized.bc" in shown
