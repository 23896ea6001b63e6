"""Remedies measured on the model (fix_trials.yaml), triaged end to end: what the report
concludes from them, the measured remedy's place among the next actions, and generated
code that sets exactly the layers the search found."""

from __future__ import annotations

import ast
import json

import pytest
import yaml

from qcdoctor.engine.commands.cli import main
from qcdoctor.engine.diagnosis.triage import triage_path
from qcdoctor.engine.matching.runner import MAX_ENGINE_STRING
from qcdoctor.engine.reports.formats import render
from tests.qa.fix_trials import GREEDY_SET, PROBE, SINGLE_LAYER, build_fix_case, fix_doc


def triage(folder, lang: str = "en") -> dict:
    return triage_path(folder, lang=lang, environ={}, installed={}, cwd=folder)


def findings(report: dict) -> dict[str, str]:
    return {f["rule"]: f["text"] for f in report["findings"] if f["rule"].startswith("FX")}


def measured_action(report: dict) -> dict:
    (action,) = [a for a in report["next_actions"] if a["rule"] in ("FX030", "FX031")]
    return action


def literal(code: str, name: str):
    """The value of the literal assigned to ``name`` in generated code (parsed, not run)."""
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Assign) and [t.id for t in node.targets
                                             if isinstance(t, ast.Name)] == [name]:
            return ast.literal_eval(node.value)
    raise AssertionError(f"no {name} = ... in\n{code}")


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_single_source_measured(tmp_path, lang):
    report = triage(build_fix_case(tmp_path, "single"), lang)
    found = findings(report)
    assert set(found) == {"FX010"}
    text = found["FX010"]
    assert f"`{SINGLE_LAYER}`" in text and "0.937" in text and "0.9996" in text
    assert "99.4%" in text
    if lang == "en":
        assert "qint16 activation on `backbone.stage3.conv` alone: output `logits` Cosine " \
               "0.937 -> 0.9996, 99.4% of the error removed" in text
    else:
        assert "qint16 激活" in text and "从 0.937 变为 0.9996，消除 99.4%" in text
    # the measured remedy is the first action, ahead of the remedy the curve inferred (the
    # located op's qint16, LY031) and of the QuantAnalysis run; QAT has not run in this
    # calibration case, so it takes effect by calibrating again (R4.6)
    first = report["next_actions"][0]
    assert (first["id"], first["rule"], first["cost"]) == (f"measured_fix:{PROBE}", "FX030",
                                                            "recalibrate")
    assert "train_qat" not in first["code"] and "FakeQuantState.CALIBRATION" in first["code"]
    rules = [a["rule"] for a in report["next_actions"]]
    # the probe's comparison is in the case: its sensitivity is pending (R5.7), not the run
    assert rules.index("FX030") < rules.index("LY031") and "AN047" in rules
    assert "AN010" not in rules
    # the inferred remedy follows, said to be not measured (R4.4)
    inferred = report["next_actions"][rules.index("LY031")]
    label = "[not measured] " if lang == "en" else "【未实测】"
    assert label in inferred["text"][:50] and label not in first["text"]
    assert "effect" not in first and "rank" not in first        # ordering keys only
    assert literal(first["code"], "measured_layers") == [SINGLE_LAYER]
    assert "measured = {name: qint16 for name in measured_layers}" in first["code"]
    assert ("one input is not the dataset" if lang == "en" else "一份输入不等于数据集") \
        in first["text"]
    cautions = {c["id"]: c["rule"] for c in report["cautions"]}
    assert cautions["measured_on_one_input"] == "FX020"
    assert cautions["measured_in_fake_quant"] == "FX021"
    (section,) = report["fix_trials"]
    assert section["analysis"] == PROBE and section["source"] == f"{PROBE}/fix_trials.yaml"
    assert [t["fix"] for t in section["trials"]] == ["float", "int16_activation", "fixed_scale",
                                                      "int16_weight"]
    assert section["target"] == {"error_removed": 0.9, "cosine": 0.999}


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_accumulation_measured_applies_the_greedy_set(tmp_path, lang):
    report = triage(build_fix_case(tmp_path, "accumulation"), lang)
    found = findings(report)
    assert set(found) == {"FX011"}
    assert ", ".join(GREEDY_SET) in found["FX011"] and "91.7%" in found["FX011"]
    assert "16.5%" in found["FX011"]                 # the best one layer fell short
    action = report["next_actions"][0]
    assert action["rule"] == "FX031" and action["id"] == f"measured_fix:{PROBE}"
    assert literal(action["code"], "measured_layers") == GREEDY_SET
    # the inferred region-wide qint16 (LY011) comes after the measured set
    rules = [a["rule"] for a in report["next_actions"]]
    assert rules.index("FX031") < rules.index("LY011")
    assert report["fix_trials"][0]["greedy"]["layers"] == GREEDY_SET


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_search_that_fell_short_proposes_nothing_measured(tmp_path, lang):
    report = triage(build_fix_case(tmp_path, "not_reached"), lang)
    found = findings(report)
    # the budget ended the search (200 of 200), and float measured best: both are said
    assert set(found) == {"FX012", "FX016", "FX017"}
    text = found["FX012"]
    assert "200 / 200" in text if lang == "zh" else "200 of 200 forward passes" in text
    assert "44.4%" in text and "55.6%" in text           # the best remedy, the float bound
    assert not [a for a in report["next_actions"] if a["rule"] in ("FX030", "FX031")]
    assert not {"measured_on_one_input", "measured_in_fake_quant"} & \
        {c["id"] for c in report["cautions"]}


def test_without_a_float_trial_nothing_bounds_the_search(tmp_path):
    doc = fix_doc("not_reached")
    doc["trials"] = [t for t in doc["trials"] if t["fix"] != "float"]
    report = triage(build_fix_case(tmp_path, "not_reached", doc=doc))
    assert set(findings(report)) == {"FX013", "FX016"}
    assert "No float trial ran" in findings(report)["FX013"]


def test_a_search_that_ended_on_its_own_says_no_budget_and_no_upper_bound(tmp_path):
    """Every candidate tried before the budget ran out, float removing less than the best
    remedy: no word of a budget, nor of float as the upper bound (knowledge.md R4.4)."""
    doc = fix_doc("not_reached")
    doc["forwards"] = 84
    doc["notes"] = [n for n in doc.get("notes") or [] if not str(n).startswith("budget_spent")]
    best = max(t["error_removed"] for t in doc["trials"] if t["fix"] != "float")
    for trial in doc["trials"]:
        if trial["fix"] == "float":
            trial["error_removed"] = best / 2
    report = triage(build_fix_case(tmp_path, "not_reached", doc=doc))
    found = findings(report)
    assert set(found) == {"FX012"}
    assert "within its budget" not in found["FX012"] and "upper bound" not in found["FX012"]


def test_a_search_that_ran_no_trial(tmp_path):
    doc = fix_doc("not_reached")
    doc.update(trials=[], greedy=None, candidates=[], forwards=0,
               notes=["no quantizer found in the analysis model"])
    report = triage(build_fix_case(tmp_path, "not_reached", doc=doc))
    assert set(findings(report)) == {"FX014"}
    assert "0 trials" in findings(report)["FX014"]
    assert report["fix_trials"][0]["notes"] == ["no quantizer found in the analysis model"]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_an_output_within_the_target_before_any_fix_proposes_nothing(tmp_path, lang):
    doc = fix_doc("single")
    doc["before"] = 0.99938
    report = triage(build_fix_case(tmp_path, "single", doc=doc), lang)
    assert set(findings(report)) == {"FX015"}
    assert "0.99938" in findings(report)["FX015"]
    assert not [a for a in report["next_actions"] if a["rule"] in ("FX030", "FX031")]
    assert not {"measured_on_one_input", "measured_in_fake_quant"} & \
        {c["id"] for c in report["cautions"]}
    assert not any(t["reaches"] for t in report["fix_trials"][0]["trials"])


def test_no_figure_before_any_fix(tmp_path):
    doc = fix_doc("not_reached")
    doc.update(before=None, trials=[], candidates=[], greedy=None,
               notes=["no_figure: the analysis model's output Cosine is not a number"])
    report = triage(build_fix_case(tmp_path, "not_reached", doc=doc))
    assert set(findings(report)) == {"FX014"}
    markdown = render(report, "md")
    assert "Cosine — before" in markdown and "The file holds no trial." in markdown


def test_a_greedy_set_left_in_float_is_no_remedy(tmp_path):
    doc = fix_doc("accumulation")
    doc["greedy"]["fix"] = "float"
    report = triage(build_fix_case(tmp_path, "accumulation", doc=doc))
    assert set(findings(report)) == {"FX013"}
    assert not [a for a in report["next_actions"] if a["rule"] in ("FX030", "FX031")]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_measured_qat_remedy_leads_though_the_sensitivity_run_is_pending(tmp_path, lang):
    """R4.7 holds a remedy that needs QAT behind the cheaper step that confirms it; a fix
    trial on the bad case has confirmed this one (R4.4): it stays first."""
    stages = {"float": {"metric": "mAP", "value": 0.452}, "calib": {"metric": "mAP", "value": 0.401},
              "qat": {"metric": "mAP", "value": 0.405}}
    report = triage(build_fix_case(tmp_path, "single", retrain="yes", stages=stages), lang)
    rules = [a["rule"] for a in report["next_actions"]]
    first = report["next_actions"][0]
    assert (first["rule"], first["cost"]) == ("FX030", "retrain"), rules
    assert "AN047" in rules                     # the sensitivity run is still to do
    # the remedy read from the tables still waits for its confirmation
    assert rules.index("LY031") > rules.index("AN047")


def test_without_retraining_the_measured_remedy_waits_with_the_other_qat_remedies(tmp_path):
    # a QAT model trained already (qat evaluated): the remedy needs QAT again (R4.6)
    stages = {"float": {"metric": "mAP", "value": 0.452}, "calib": {"metric": "mAP", "value": 0.401},
              "qat": {"metric": "mAP", "value": 0.405}}
    report = triage(build_fix_case(tmp_path, "single", retrain="no", stages=stages))
    costs = [a["cost"] for a in report["next_actions"]]
    assert costs[0] != "retrain" and costs == sorted(costs, key=["verify", "analyse",
                                                                "retrain"].index)
    action = measured_action(report)
    assert action["text"].startswith("[needs retraining: you said you cannot retrain]")


def test_measured_remedies_of_two_folders_rank_by_the_error_they_removed(tmp_path):
    folder = build_fix_case(tmp_path, "single")
    other = fix_doc("accumulation")
    (folder / "qa_probe_2").mkdir()
    for name in ("compare_per_layer_out.csv", "probe_run.yaml"):
        (folder / "qa_probe_2" / name).write_bytes((folder / PROBE / name).read_bytes())
    (folder / "qa_probe_2" / "fix_trials.yaml").write_text(yaml.safe_dump(other),
                                                           encoding="utf-8")
    report = triage(folder)
    measured = [a["id"] for a in report["next_actions"] if a["rule"] in ("FX030", "FX031")]
    # 99.4% removed before 91.7%, whatever the folders' or the rules' order
    assert measured == [f"measured_fix:{PROBE}", "measured_fix:qa_probe_2"]
    assert report["next_actions"][0]["id"] == f"measured_fix:{PROBE}"
    other["greedy"]["error_removed"] = 0.999
    (folder / "qa_probe_2" / "fix_trials.yaml").write_text(yaml.safe_dump(other),
                                                           encoding="utf-8")
    report = triage(folder)
    measured = [a["id"] for a in report["next_actions"] if a["rule"] in ("FX030", "FX031")]
    assert measured == ["measured_fix:qa_probe_2", f"measured_fix:{PROBE}"]
    assert [s["analysis"] for s in report["fix_trials"]] == [PROBE, "qa_probe_2"]


@pytest.mark.parametrize("fix,check", [
    ("int16_weight", lambda code: 'measured = {name: {"weight": qint16} for name in '
                                  'measured_layers}' in code),
    ("int16", lambda code: '{"output": qint16, "weight": qint16}' in code),
    ("per_channel", lambda code: "get_submodule(name).weight_fake_quant" in code),
    ("fixed_scale", lambda code: literal(code, "thresholds") == dict.fromkeys(GREEDY_SET, ...)),
])
def test_the_code_applies_the_fix_that_was_measured(tmp_path, fix, check):
    doc = fix_doc("accumulation")
    doc["greedy"]["fix"] = fix
    code = measured_action(triage(build_fix_case(tmp_path, "accumulation", doc=doc)))["code"]
    assert literal(code, "measured_layers") == GREEDY_SET
    assert check(code), code
    compile(code, fix, "exec")


def test_a_greedy_set_longer_than_the_engine_keeps_is_named_whole_in_the_code(tmp_path):
    names = [f"backbone.stages.{i}.blocks.{i}.attention.projection_{'x' * 40}"
             for i in range(40)]
    assert len(", ".join(names)) > MAX_ENGINE_STRING
    doc = fix_doc("accumulation")
    doc["greedy"]["layers"] = names
    report = triage(build_fix_case(tmp_path, "accumulation", doc=doc))
    action = measured_action(report)
    assert literal(action["code"], "measured_layers") == names
    assert "40 layer(s)" in action["code"]


def test_hostile_layer_names_stay_literals(tmp_path):
    hostile = ["x\"]; import os; os.system('id'); y = [\"", "a'b\\c", "层.`tick`"]
    doc = fix_doc("accumulation")
    doc["greedy"]["layers"] = hostile
    code = measured_action(triage(build_fix_case(tmp_path, "accumulation", doc=doc)))["code"]
    assert literal(code, "measured_layers") == hostile
    calls = {ast.unparse(n.func) for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Call)}
    assert "os.system" not in calls


def test_the_command_line_reports_the_measured_fixes(tmp_path, capsys):
    folder = build_fix_case(tmp_path, "single")
    assert main(["triage", str(folder), "--format", "json", "--lang", "en", "--no-env"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["fix_trials"][0]["trials"][1]["layers"] == [SINGLE_LAYER]
    assert report["next_actions"][0]["rule"] == "FX030"
    assert {"FX010", "FX030", "FX020", "FX021"} <= {t["rule"] for t in report["trace"]}


def test_a_remedy_measured_on_another_step_is_no_action(tmp_path):
    """knowledge.md §17 R4.5: the probe compared float with calib, the drop is at convert:
    what it measured there is no remedy for the located step."""
    stages = {"float": {"metric": "mAP", "value": 0.452}, "calib": {"metric": "mAP", "value": 0.45},
              "qat": {"metric": "mAP", "value": 0.45}, "qat_bc": {"metric": "mAP", "value": 0.449},
              "quantized_bc": {"metric": "mAP", "value": 0.391}}
    report = triage(build_fix_case(tmp_path, "single", stages=stages))
    assert report["conclusion"]["stage"] == "convert"
    rules = [a["rule"] for a in report["next_actions"]]
    assert "FX030" not in rules and "FX031" not in rules, rules
