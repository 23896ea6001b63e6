"""A report speaks with one voice (knowledge.md §16 R3.14): every bundled example and every
scenario case, rendered in both languages, is checked for the ways a report contradicts
itself or says nothing useful.

- no word printed twice in a row ("training training post-processing");
- "information still needed: none" never beside a checklist item that waits for an input;
- a stage that has a value in the stage table is never said to have no result;
- a folder listed under the checks already run is not also "no QuantAnalysis outputs";
- an undetermined gap between two stages still lists what to keep;
- a caution the user did not commit is not listed among the pitfalls seen in the case;
- nothing cites a file the user does not have (knowledge.md, the seeds).
"""

from __future__ import annotations

import functools
import re

import pytest

from qcdoctor.engine.commands.examples import example_names, example_path
from qcdoctor.engine.diagnosis.triage import triage_path
from qcdoctor.engine.matching.rulebook import load_rules
from qcdoctor.engine.reports.markdown import render_markdown
from qcdoctor.vocabulary import stage_label
from qcdoctor.wording import id_words, labels
from tests.conftest import triage_dict
from tests.diagnosis.test_stage_mapping import ROWS, _case
from tests.qa.scenarios import SCENARIOS, build

LANGS = ("zh", "en")
_CODE = re.compile(r"```.*?```", re.S)
_INLINE = re.compile(r"`[^`\n]*`")
# "a a" in prose: the same word of three letters or more twice in a row
_DOUBLED = re.compile(r"\b([A-Za-z][A-Za-z_-]{2,})\s+\1\b", re.I)


def _prose(markdown: str) -> str:
    """The report's own words: code blocks and inline code (user values) taken out."""
    return _INLINE.sub("``", _CODE.sub("", markdown))


@functools.cache
def _example_reports(lang: str) -> dict:
    out = {}
    for name in example_names():
        with example_path(name) as path:
            out[f"example:{name}"] = triage_path(path, lang=lang, use_env=False)
            out[f"example:{name}:audit"] = triage_path(path, lang=lang, use_env=False,
                                                       full_checklist=True)
    return out


@functools.cache
def _scenario_reports(lang: str, root) -> dict:
    out = {}
    for kind in SCENARIOS:
        out[f"qa:{kind}"] = triage_path(build(kind, root / lang), lang=lang, use_env=False)
    for i, (stages, _stage, _suspect) in enumerate(ROWS):
        out[f"stages:{i}"] = triage_dict(_case(**stages), lang=lang)
    for name, data in REVIEW_CASES.items():
        out[f"review:{name}"] = triage_dict(data, lang=lang)
    for name, make in FOLDER_CASES.items():
        folder = make(root / lang / name)
        out[f"folder:{name}"] = triage_path(folder, lang=lang, use_env=False)
    return out


def _folder_cases() -> dict:
    """Report shapes of knowledge.md §17 R4.5-R4.7 and R4.10 built as case folders: which
    analysis speaks for the located step, what a remedy costs at its stage, which step
    comes first."""
    from tests.diagnosis import test_remedy_cost_and_order as cost
    from tests.diagnosis import test_which_analysis_speaks as speaks
    return {
        "recovered_calibration_folder": speaks.recovered_calibration_case,
        "one_run_export": speaks.one_run_export_case,
        "postprocess_inside": speaks.postprocess_case,
        "sibling_sensitivity": speaks.split_sensitivity_case,
        "calibration_before_qat": lambda root: cost.calibration_case(root, cost.BEFORE_QAT),
        "calibration_qat_trained": lambda root: cost.calibration_case(root, cost.QAT_TRAINED),
        "convert_retrain_unknown": lambda root: cost.convert_case(root, retrain="unknown"),
    }


FOLDER_CASES = _folder_cases()


# shapes the review found contradictions in
REVIEW_CASES = {
    "board_in_another_metric": {"evidence": ["dataset_eval"], "stages": {
        "qat": {"metric": "mAP", "value": 0.45}, "quantized_bc": {"metric": "mAP", "value": 0.449},
        "board": {"metric": "NDS", "value": 0.30}}},
    "percent_and_fraction": {"evidence": ["dataset_eval"], "stages": {
        "qat_bc": {"metric": "mAP", "value": 45.0},
        "quantized_bc": {"metric": "mAP", "value": 0.449}}},
    "unknown_direction": {"evidence": ["dataset_eval"], "stages": {
        "qat_bc": {"metric": "minADE", "value": 1.10},
        "quantized_bc": {"metric": "minADE", "value": 1.31}}},
    # knowledge.md §17 R4.8: a small first drop that the board step outweighs
    "small_drop_then_board_step": {"evidence": ["dataset_eval"],
                                   "symptom": "lane F1 drops on the board", "stages": {
        "qat": {"metric": "F1", "value": 0.81}, "qat_bc": {"metric": "F1", "value": 0.80},
        "quantized_bc": {"metric": "F1", "value": 0.80}, "board": {"metric": "F1", "value": 0.62}}},
    "small_drop_real_step": {"evidence": ["dataset_eval"], "stages": {
        "qat": {"metric": "F1", "value": 0.81}, "qat_bc": {"metric": "F1", "value": 0.79},
        "quantized_bc": {"metric": "F1", "value": 0.79}, "board": {"metric": "F1", "value": 0.62}}},
    "small_drop_later_step_under_five": {"evidence": ["dataset_eval"], "stages": {
        "qat": {"metric": "F1", "value": 0.81}, "qat_bc": {"metric": "F1", "value": 0.80},
        "quantized_bc": {"metric": "F1", "value": 0.80}, "board": {"metric": "F1", "value": 0.76}}},
    # R4.9: one metric under several spellings, and two names to ask about
    "metric_spelt_two_ways": {"evidence": ["dataset_eval"], "stages": {
        "qat": {"metric": "mAP", "value": 0.452}, "qat_bc": {"metric": "mAP", "value": 0.449},
        "quantized_bc": {"metric": "map", "value": 0.391}}},
    "top1_spellings": {"evidence": ["dataset_eval"], "stages": {
        "qat": {"metric": "Top1 acc", "value": 0.762},
        "qat_bc": {"metric": "top-1", "value": 0.760},
        "quantized_bc": {"metric": "top1", "value": 0.701}}},
    "map_and_nds": {"evidence": ["dataset_eval"], "stages": {
        "qat": {"metric": "mAP", "value": 0.452}, "qat_bc": {"metric": "mAP", "value": 0.449},
        "quantized_bc": {"metric": "NDS", "value": 0.391}}},
    "another_name_after_the_drop": {"evidence": ["dataset_eval"], "stages": {
        "qat": {"metric": "mAP", "value": 0.452}, "qat_bc": {"metric": "mAP", "value": 0.40},
        "quantized_bc": {"metric": "NDS", "value": 0.39}}},
}


@pytest.fixture(scope="module", params=LANGS)
def reports(request, tmp_path_factory):
    lang = request.param
    found = dict(_example_reports(lang))
    found.update(_scenario_reports(lang, tmp_path_factory.mktemp("cases")))
    return lang, {name: (report, render_markdown(report)) for name, report in found.items()}


def test_no_word_is_printed_twice_in_a_row(reports):
    _, rendered = reports
    doubled = {name: m.group(0) for name, (_, text) in rendered.items()
               for m in [_DOUBLED.search(_prose(text))] if m}
    assert not doubled, doubled


def _section(markdown: str, heading: str) -> str:
    start = markdown.find(heading)
    if start < 0:
        return ""
    rest = markdown[start + len(heading):]
    end = re.search(r"^#{2,3} ", rest, re.M)
    return rest[:end.start()] if end else rest


def test_nothing_needed_is_never_said_while_an_item_waits_for_input(reports):
    lang, rendered = reports
    words = labels()[lang]
    wrong = []
    for name, (report, text) in rendered.items():
        assert f"### {words['needed']}" in text, name          # the section is there
        waiting = [c["id"] for c in report["checklist"] if c.get("provide")]
        needed = _section(text, f"### {words['needed']}").strip()
        if waiting and needed == words["nothing_needed"]:
            wrong.append((name, waiting))
    assert not wrong, wrong


NO_RESULT = {"zh": ("{label}没有结果", "{label}没有评测结果", "{label} 没有结果"),
             "en": ("{label} has no result", "no result for {label}")}


def test_a_stage_with_a_value_is_never_said_to_have_no_result(reports):
    lang, rendered = reports
    wrong = []
    for name, (report, text) in rendered.items():
        valued = {f["stage"] for f in report["facts"]
                  if f["type"] == "stage" and f.get("has_value")}
        prose = _prose(text)
        wrong += [(name, phrase) for stage in valued for phrase in
                  (p.format(label=_stage_label(report, stage)) for p in NO_RESULT[lang])
                  if phrase in prose]
    assert not wrong, wrong


def _stage_label(report: dict, stage: str) -> str:
    """The label the stage table prints for ``stage`` (its first column)."""
    return stage_label(stage, report["language"])


def test_a_listed_check_is_not_also_missing(reports):
    lang, rendered = reports
    words = labels()[lang]
    wrong = []
    for name, (_, text) in rendered.items():
        checks = _section(text, f"## {words['checks']}")
        listed = re.findall(r"\((qa[^)\s;]*)\)", checks)
        if listed and words["qa_none"] in text:
            wrong.append((name, listed))
    assert not wrong, wrong


def test_an_undetermined_gap_keeps_the_lists_of_both_ends(reports):
    _, rendered = reports
    empty = [name for name, (report, _) in rendered.items()
             if report["conclusion"]["stage"] == "undetermined"
             and any(f["type"] == "transition" for f in report["facts"])
             and not report["artifacts"]["keep"]]
    assert not empty, empty


def test_cautions_are_not_listed_as_pitfalls_seen_in_the_case(reports):
    lang, rendered = reports
    words = labels()[lang]
    # ids no rule reports as a committed mistake: never "seen in this case"
    committed = {r.then["pitfall"] for r in load_rules() if "pitfall" in r.then}
    reminders = {r.then["caution"] for r in load_rules() if "caution" in r.then} - committed
    wrong, shown = [], 0
    for name, (report, text) in rendered.items():
        seen = _section(text, f"### {words['pitfalls']}")
        kept_apart = _section(text, f"### {words['cautions']}")
        for caution in report["cautions"]:
            shown += 1
            named = f"**{id_words(caution['id'], lang)}**"      # shown in words, in bold
            if named in seen or named not in kept_apart:
                wrong.append((name, caution["id"]))
        wrong += [(name, p["id"]) for p in report["pitfalls"] if p["id"] in reminders]
    assert not wrong, wrong
    assert shown, "no report holds a caution: the check above checked nothing"


def test_no_empty_brackets_where_a_value_was_missing(reports):
    _, rendered = reports
    empty = {name: m.group(0) for name, (_, text) in rendered.items()
             for m in [re.search(r" \(\s*\)|（\s*）", _prose(text))] if m}
    assert not empty, empty


def test_nothing_cites_a_file_the_user_does_not_have(reports):
    _, rendered = reports
    cited = {name: m.group(0) for name, (_, text) in rendered.items()
             for m in [re.search(r"knowledge\.md|seed 0\d\d", text)] if m}
    assert not cited, cited
