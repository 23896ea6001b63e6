"""fix_trials.yaml in a probe's QuantAnalysis folder: read into facts with their source,
the trials ranked best first, the search summed up; a damaged file is one artifact problem
naming the file and the keys at fault, in both languages, and nothing of it is used."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from qcdoctor.collectors.case_facts import collect_case
from qcdoctor.collectors.case_file import load_case
from qcdoctor.collectors.fix_trials import TRIAL_FACTS, reaches, read_fix_trials
from qcdoctor.fact_types import normalise
from tests.qa.fix_trials import GREEDY_SET, PROBE, SINGLE_LAYER, build_fix_case, fix_doc

SOURCE = f"{PROBE}/fix_trials.yaml"


def collected(folder: Path) -> tuple[list[dict], list[dict]]:
    return collect_case(load_case(folder), environ={}, installed={}, cwd=folder)


def of(facts: list[dict], ftype: str) -> list[dict]:
    return [f for f in facts if f["type"] == ftype]


def test_a_single_source_search_is_summed_up_with_its_source(tmp_path):
    facts, series = collected(build_fix_case(tmp_path, "single"))
    (summary,) = of(facts, "fix_trials")
    assert normalise(summary) == {k: v for k, v in summary.items()
                                  if k not in ("source", "locations")}   # every field given
    assert summary["analysis"] == PROBE and summary["source"] == SOURCE
    assert summary["locations"] == [{"file": SOURCE, "line": None}]
    assert (summary["metric"], summary["output"], summary["before"]) == ("Cosine", "logits", 0.937)
    assert (summary["target_removed"], summary["target_cosine"], summary["cosine_target"]) == \
        (0.9, 0.999, True)
    # the best remedy to deploy: float removes more, but is the upper bound, not a remedy
    assert (summary["single_fix"], summary["single_layer"], summary["single_removed"]) == \
        ("int16_activation", SINGLE_LAYER, 0.994)
    assert summary["single_reaches"] and summary["reached"] and summary["measured"]
    assert (summary["float_tried"], summary["float_removed"], summary["float_layers"]) == \
        (True, 0.997, SINGLE_LAYER)
    assert not summary["greedy"] and summary["greedy_layers"] == "" and summary["greedy_size"] == 0
    assert summary["one_input"] and summary["fake_quant_only"]
    assert (summary["trials"], summary["candidates"], summary["budget"], summary["forwards"]) == \
        (4, 3, 200, 9)
    # one fact per trial, best first whatever the file's order: most removed, fewer layers
    trials = of(facts, "fix_trial")
    assert [(t["rank"], t["fix"], t["error_removed"]) for t in trials] == [
        (1, "float", 0.997), (2, "int16_activation", 0.994), (3, "fixed_scale", 0.206),
        (4, "int16_weight", 0.048)]
    assert [t["reaches"] for t in trials] == [True, True, False, False]
    assert [t["deployable"] for t in trials] == [False, True, True, True]
    assert {t["source"] for t in trials} == {SOURCE}
    # the whole file for the report, kept apart from the facts
    (record,) = [s for s in series if s["type"] == "fix_trials_series"]
    assert not of(facts, "fix_trials_series")
    assert record["analysis"] == PROBE and record["source"] == SOURCE
    assert [t["error_removed"] for t in record["trials"]] == [0.997, 0.994, 0.206, 0.048]
    assert record["candidates"] == fix_doc("single")["candidates"] and record["greedy"] is None
    assert record["caveats"] == ["one_input", "fake_quant_only"] and record["notes"] == []


def test_accumulation_gives_the_greedy_set_in_full(tmp_path):
    facts, _ = collected(build_fix_case(tmp_path, "accumulation"))
    (summary,) = of(facts, "fix_trials")
    assert summary["single_tried"] and not summary["single_reaches"]
    assert summary["single_layer"] == "decoder.layer5.linear"    # the best one-layer trial
    assert (summary["greedy"], summary["greedy_reached"], summary["greedy_deployable"]) == \
        (True, True, True)
    assert summary["greedy_layers"].split(", ") == GREEDY_SET and summary["greedy_size"] == 3
    assert (summary["greedy_removed"], summary["greedy_forwards"]) == (0.917, 57)
    assert summary["reached"] and not summary["float_tried"]


def test_a_search_that_fell_short(tmp_path):
    facts, _ = collected(build_fix_case(tmp_path, "not_reached"))
    (summary,) = of(facts, "fix_trials")
    assert not summary["reached"] and not summary["single_reaches"]
    assert summary["greedy"] and not summary["greedy_reached"]
    assert (summary["best_fix"], summary["best_removed"]) == ("int16_activation", 0.444)
    assert (summary["float_removed"], summary["notes"]) == (0.556, 1)


def test_a_greedy_set_in_float_is_no_remedy_reached(tmp_path):
    doc = fix_doc("accumulation")
    doc["greedy"]["fix"] = "float"
    facts, _ = collected(build_fix_case(tmp_path, "accumulation", doc=doc))
    (summary,) = of(facts, "fix_trials")
    assert summary["greedy_reached"] and not summary["greedy_deployable"]
    assert not summary["reached"]


@pytest.mark.parametrize("trial,target,metric,expected", [
    ({"error_removed": 0.9, "after": 0.99}, {"error_removed": 0.9}, "Cosine", True),
    ({"error_removed": 0.89, "after": 0.99}, {"error_removed": 0.9}, "Cosine", False),
    # a Cosine target is met on its own: a small error to begin with
    ({"error_removed": 0.5, "after": 0.9991}, {"error_removed": 0.9, "cosine": 0.999},
     "Cosine", True),
    ({"error_removed": 0.5, "after": 0.9989}, {"error_removed": 0.9, "cosine": 0.999},
     "Cosine", False),
    ({"error_removed": 0.5, "after": 0.001}, {"error_removed": 0.9}, "L1", False),
])
def test_what_reaching_the_target_means(trial, target, metric, expected):
    assert reaches(trial, target, metric) is expected


def test_null_greedy_absent_notes_and_numbers_yaml_reads_as_text(tmp_path):
    doc = fix_doc("single")
    doc.pop("notes")
    doc["output"] = 0                           # an output named by its index
    doc["trials"][0]["error_removed"] = "2.06e-1"   # YAML 1.1 reads this as text
    content = read_fix_trials(doc)
    assert content["notes"] == [] and content["greedy"] is None and content["output"] == "0"
    assert math.isclose(content["trials"][-2]["error_removed"], 0.206)


def test_an_output_within_the_target_before_any_fix_has_nothing_reaching_it(tmp_path):
    doc = fix_doc("single")
    doc["before"] = 0.9994                          # at the target's Cosine already
    facts, series = collected(build_fix_case(tmp_path, "single", doc=doc))
    (summary,) = of(facts, "fix_trials")
    assert summary["within_target"] and summary["before_known"]
    assert not summary["single_reaches"] and not summary["reached"] and summary["measured"]
    assert not any(t["reaches"] for t in of(facts, "fix_trial"))
    (record,) = [s for s in series if s["type"] == "fix_trials_series"]
    assert not any(t["reaches"] for t in record["trials"])


def test_no_figure_before_and_an_empty_greedy_set_are_read(tmp_path):
    doc = fix_doc("not_reached")
    doc.update(before=None, trials=[], candidates=[])
    doc["greedy"].update(layers=[], reached=True)
    facts, series = collected(build_fix_case(tmp_path, "not_reached", doc=doc))
    (summary,) = of(facts, "fix_trials")
    assert (summary["before"], summary["before_known"], summary["within_target"]) == \
        (0.0, False, False)
    assert summary["greedy"] and summary["greedy_size"] == 0
    assert not summary["greedy_reached"] and not summary["reached"]
    (record,) = [s for s in series if s["type"] == "fix_trials_series"]
    assert record["before"] is None and record["greedy"]["layers"] == []


def test_trial_facts_are_capped_and_the_report_keeps_every_trial(tmp_path):
    doc = fix_doc("single")
    doc["trials"] = [{"fix": "int16_activation", "layers": [f"l{i}"], "after": 0.94,
                      "error_removed": i / 1000, "forwards": 1} for i in range(TRIAL_FACTS + 7)]
    facts, series = collected(build_fix_case(tmp_path, "single", doc=doc))
    assert len(of(facts, "fix_trial")) == TRIAL_FACTS
    assert of(facts, "fix_trials")[0]["trials"] == TRIAL_FACTS + 7
    (record,) = [s for s in series if s["type"] == "fix_trials_series"]
    assert len(record["trials"]) == TRIAL_FACTS + 7
    assert record["trials"][0]["layers"] == [f"l{TRIAL_FACTS + 6}"]


# a probe over 24 samples: the trials on the 8 worst, the fix confirmed on all
SAMPLES = {"count": 24, "measured_on": [1, 3, 4, 7, 15, 19, 21, 22],
           "confirmed": {"samples": 24, "forwards": 48, "median_error_removed": 0.6,
                         "improved_share": 0.75,
                         "worst_after": {"sample": 19, "Cosine": 0.95}},
           "not_confirmed": None}


def test_fixes_measured_on_samples_and_confirmed_on_every_one(tmp_path):
    doc = fix_doc("single")
    doc["samples"] = SAMPLES
    doc["caveats"] = ["fake_quant_only"]
    facts, _ = collected(build_fix_case(tmp_path, "single", doc=doc))
    (summary,) = of(facts, "fix_trials")
    assert (summary["samples"], summary["measured_on"], summary["confirmed"]) == (24, 8, True)
    assert (summary["confirmed_removed"], summary["improved_share"]) == (0.6, 0.75)
    assert (summary["worst_after_sample"], summary["worst_after"]) == (19, 0.95)
    assert summary["confirmed_reaches"] is False and summary["one_input"] is False
    doc["samples"] = dict(SAMPLES, confirmed=None, not_confirmed="one_pass")
    facts, _ = collected(build_fix_case(tmp_path / "again", "single", doc=doc))
    (summary,) = of(facts, "fix_trials")
    assert summary["confirmed"] is False and summary["not_confirmed"] == "one_pass"
    assert summary["worst_after_sample"] == -1


def _edit(change):
    doc = fix_doc("single")
    change(doc)
    return yaml.safe_dump(doc, sort_keys=False)


# (id, file text, what the problem must say in English, and in Chinese)
DAMAGED = [
    ("bad_yaml", "schema: qcdoctor/fix-trials-v1\ntrials: [\n", "not valid YAML", "not valid YAML"),
    ("not_a_mapping", "- a\n- b\n", "holds no mapping", "没有键值映射"),
    ("unknown_schema", _edit(lambda d: d.update(schema="qcdoctor/fix-trials-v2")),
     "schema: 'qcdoctor/fix-trials-v2' is not qcdoctor/fix-trials-v1 (this qcdoctor reads",
     "不是 qcdoctor/fix-trials-v1（本版本 qcdoctor 读取"),
    ("no_schema", _edit(lambda d: d.pop("schema")), "schema is missing", "缺少 schema"),
    ("wrong_type", _edit(lambda d: d.update(before="high")),
     "before: expected a finite number, found 'high'", "before：应为有限数值"),
    ("unknown_fix", _edit(lambda d: d["trials"][1].update(fix="int32")),
     "trials[1].fix: 'int32' is not one of int16_activation", "trials[1].fix：'int32' 不是"),
    ("missing_key", _edit(lambda d: d["trials"][0].pop("after")), "trials[0].after is missing",
     "缺少 trials[0].after"),
    ("missing_top_key", _edit(lambda d: d.pop("target")), "target is missing", "缺少 target"),
    ("unknown_key", _edit(lambda d: d.update(speed=3)), "speed: unknown key", "speed：未知的键"),
    ("count", _edit(lambda d: d.update(forwards=-2)),
     "forwards: expected a whole number of 0 or more, found -2", "forwards：应为不小于 0 的整数"),
    ("range", _edit(lambda d: d["target"].update(error_removed=1.5)),
     "target.error_removed: 1.5 is outside 0 to 1", "target.error_removed：1.5 不在 0 到 1 之间"),
    ("cosine_out_of_range", _edit(lambda d: d["trials"][2].update(after=1.2)),
     "trials[2].after: 1.2 is outside -1 to 1", "trials[2].after：1.2 不在 -1 到 1 之间"),
    ("cosine_target_for_l1", _edit(lambda d: d.update(metric="L1", before=0.3)),
     "target.cosine: given, but the metric is 'L1'", "target.cosine：给出了，但指标是 'L1'"),
    ("comma_in_layer", _edit(lambda d: d["trials"][0].update(layers=["a,b"])),
     "trials[0].layers[0]: the layer name 'a,b' holds a comma",
     "trials[0].layers[0]：层名 'a,b' 含有逗号"),
    ("empty_layers", _edit(lambda d: d["trials"][3].update(layers=[])),
     "trials[3].layers: an empty list", "trials[3].layers：列表为空"),
    ("unknown_caveat", _edit(lambda d: d.update(caveats=["one_input", "lucky"])),
     "caveats[1]: 'lucky' is not one of one_input, fake_quant_only", "caveats[1]：'lucky' 不是"),
    ("greedy_without_reached", _edit(lambda d: d.update(greedy={
        "fix": "int16", "layers": ["a"], "after": 0.99, "error_removed": 0.9, "forwards": 3})),
     "greedy.reached is missing", "缺少 greedy.reached"),
    ("flag", _edit(lambda d: d.update(greedy={
        "fix": "int16", "layers": ["a"], "after": 0.99, "error_removed": 0.9, "forwards": 3,
        "reached": "maybe"})),
     "greedy.reached: expected true or false, found 'maybe'", "greedy.reached：应为 true 或 false"),
    ("trials_not_a_list", _edit(lambda d: d.update(trials={"a": 1})),
     "trials: expected a list, found {...}", "trials：应为列表"),
    ("sample_past_the_count", _edit(lambda d: d.update(samples=dict(SAMPLES, measured_on=[3, 24]))),
     "samples.measured_on[1]: sample 24 is past the 24 samples", "samples.measured_on[1]"),
    ("confirmed_on_other_samples", _edit(lambda d: d.update(samples=dict(
        SAMPLES, confirmed=dict(SAMPLES["confirmed"], samples=20)))),
     "samples.confirmed.samples: 20, not the 24 samples searched", "samples.confirmed.samples"),
    ("why_not_confirmed", _edit(lambda d: d.update(samples=dict(
        SAMPLES, confirmed=None, not_confirmed="tired"))),
     "samples.not_confirmed: 'tired' is not one of no_fix, one_pass", "samples.not_confirmed"),
    ("neither", _edit(lambda d: d.update(samples=dict(SAMPLES, confirmed=None))),
     "samples: either confirmed or not_confirmed", "samples"),
    ("improved_share", _edit(lambda d: d.update(samples=dict(
        SAMPLES, confirmed=dict(SAMPLES["confirmed"], improved_share=1.5)))),
     "samples.confirmed.improved_share: 1.5 is outside 0 to 1",
     "samples.confirmed.improved_share"),
]


@pytest.mark.parametrize("text,english,chinese", [d[1:] for d in DAMAGED],
                         ids=[d[0] for d in DAMAGED])
def test_a_damaged_file_is_one_named_problem_and_nothing_of_it_is_used(tmp_path, text,
                                                                         english, chinese):
    facts, series = collected(build_fix_case(tmp_path, "single", text=text))
    problems = [p for p in of(facts, "artifact_problem") if p["file"] == SOURCE]
    assert len(problems) == 1, of(facts, "artifact_problem")
    (problem,) = problems
    assert english in problem["problem"]
    assert chinese in problem["problem_zh"]
    assert problem["partial"] is False and problem["locations"] == [{"file": SOURCE, "line": None}]
    assert not of(facts, "fix_trials") and not of(facts, "fix_trial")
    assert not [s for s in series if s["type"] == "fix_trials_series"]
    # the rest of the probe's folder is read all the same
    (folder,) = of(facts, "qa_folder")
    assert folder["has_compare"] and folder["known_from"] == "probe"


def test_many_problems_are_named_three_and_counted(tmp_path):
    def change(d):
        d.update(before="x", budget=-1, forwards="y", output=[])
        d["trials"][0]["fix"] = "nope"
    facts, _ = collected(build_fix_case(tmp_path, "single", text=_edit(change)))
    (problem,) = [p for p in of(facts, "artifact_problem") if p["file"] == SOURCE]
    assert problem["problem"].startswith("output: expected text, found [...]; before: ")
    assert problem["problem"].endswith("; and 2 more")
    assert problem["problem_zh"].endswith("；另有 2 处")


def test_an_alias_bomb_is_refused_by_the_bounded_loader(tmp_path):
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 10) + "]\n"
        for i in range(9))
    facts, _ = collected(build_fix_case(tmp_path, "single", text=bomb))
    (problem,) = [p for p in of(facts, "artifact_problem") if p["file"] == SOURCE]
    assert "alias" in problem["problem"].lower()


def test_a_folder_without_the_file_has_no_measured_facts(tmp_path):
    folder = build_fix_case(tmp_path, "single")
    (folder / PROBE / "fix_trials.yaml").unlink()
    facts, series = collected(folder)
    assert not of(facts, "fix_trials") and not of(facts, "artifact_problem")
    assert not [s for s in series if s["type"] == "fix_trials_series"]
