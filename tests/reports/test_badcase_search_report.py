"""A case folder holding a probe's bad-case search, triaged whole: the report states the
search (on how many samples the error shows, the sample the layers were read on), counts it
as the stable bad case the evidence principle asks for (no question for a bad case, no
single-frame verdict), says where the error shows on some samples only or on none, and
renders it in every format and both languages: the figures as text, the per-sample Cosine
as an SVG plot in HTML, the series in JSON."""

from __future__ import annotations

import json
import math
import re

import jsonschema
import pytest

from qcdoctor.engine.diagnosis.triage import triage_path
from qcdoctor.engine.reports.formats import render
from qcdoctor.engine.reports.json_schemas import report_schema
from qcdoctor.engine.reports.schema import check_report
from qcdoctor.engine.reports.terminal import render_terminal
from qcdoctor.wording import labels
from tests.qa.badcase_search import (
    CLEAN,
    EVERY,
    PROBE,
    SOME,
    WITHIN,
    WITHIN_ROUNDING,
    build_search_case,
)
from tests.reports.test_report_language import english_left

# name -> (Cosines, build options, case.yaml keys)
CASES = {"every": (EVERY, {}, {}),
         "some": (SOME, {}, {}),
         "given": (SOME, {"badcase": 3}, {}),
         "clean": (CLEAN, {}, {}),
         # below the band on every sample, within the clean model's error on every one
         "within": (WITHIN, {"rounding": WITHIN_ROUNDING}, {}),
         # case.yaml says no bad case and one frame's numbers: the folder says otherwise
         "stated_none": (EVERY, {}, {"badcase": "none", "evidence": ["single_frame"]})}
LANGS = ("en", "zh")


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict:
    """(name, lang) -> report, each case built once."""
    root = tmp_path_factory.mktemp("searches")
    out = {}
    for name, (cosines, options, case) in CASES.items():
        folder = build_search_case(root, name, cosines, case=case, **options)
        for lang in LANGS:
            out[name, lang] = triage_path(folder, lang=lang, environ={}, installed={}, cwd=folder)
    return out


def finding(report: dict, rule: str) -> str:
    (text,) = [f["text"] for f in report["findings"] if f["rule"] == rule]
    return text


def rules_of(report: dict) -> set[str]:
    return {f["rule"] for f in report["findings"]}


def test_the_report_states_the_search_and_the_sample_read(reports):
    assert finding(reports["every", "en"], "LY061") == (
        f"{PROBE}: the bad-case search over 16 samples: the output error shows on 16 of 16 "
        "samples (Cosine below 0.999 and, where it was measured, well past the clean model's error); the layers were read on sample 5, the worst by L1 on "
        "output `0`.")
    assert finding(reports["every", "zh"], "LY061") == (
        f"{PROBE}：对 16 个样本的 badcase 搜索：输出误差出现在其中 16 个样本上（Cosine 低于 0.999，且在测量了干净模型误差时远超它）；"
        "逐层数据取自样本 5，即输出 `0` 上按 L1 最差的样本。")
    assert not rules_of(reports["every", "en"]) & {"LY062", "LY063", "LY064", "LY065"}


def test_a_sample_given_with_badcase_is_ranked(reports):
    report = reports["given", "en"]
    assert finding(report, "LY062") == (
        f"{PROBE}: the bad-case search over 64 samples: the output error shows on 3 of 64 "
        "samples (Cosine below 0.999 and, where it was measured, well past the clean model's error); the layers were read on sample 3, chosen with "
        "--badcase, rank 16 of 64 by L1 on output `logits` (rank 1 is the worst).")
    # sample 3 does not show the error: read the layers on one that does
    assert "whose Cosine on output `logits` is 0.99987, not below 0.999" in finding(report, "LY065")
    assert "the worst by L1 is sample 21 (--badcase 21, or leave --badcase out)" in \
        finding(report, "LY065")
    assert "LY061" not in rules_of(report)


def test_an_error_on_some_samples_depends_on_the_input(reports):
    report = reports["some", "en"]
    assert "shows on 3 of 64 samples" in finding(report, "LY061")
    assert finding(report, "LY064").startswith(
        f"{PROBE}: the output error shows on 3 of 64 samples only: the problem depends on the "
        "input. Check those samples' content")
    assert "LY064" not in rules_of(reports["every", "en"])


def test_a_search_with_no_sample_showing_the_error(reports):
    report = reports["clean", "en"]
    text = finding(report, "LY063")
    assert "found no bad case: every output stays within the clean band (Cosine ≥ 0.999) on " \
           "every one of the 16 samples" in text
    assert "the drop lies in another step, or on inputs these samples do not cover" in text
    assert not rules_of(report) & {"LY061", "LY062", "LY064"}
    # no bad case found: the question for one stays
    assert "badcase" in {m["id"] for m in report["missing"]}
    assert "reproducible_badcase" not in {f["kind"] for f in report["facts"]
                                          if f["type"] == "evidence"}


def test_samples_below_the_band_within_the_clean_models_error(reports):
    """Every sample below the clean band, none past ten times the clean model's error:
    no bad case (the question for one stays), and the report says the error does not
    depend on the input, in both languages."""
    report = reports["within", "en"]
    text = finding(report, "LY066")
    assert "on 16 samples an output's Cosine is below 0.999, but every sample is within " \
           "the clean model's error: none goes past 10 times" in text
    assert not rules_of(report) & {"LY061", "LY062", "LY063", "LY064"}
    assert "badcase" in {m["id"] for m in report["missing"]}
    assert "干净模型的误差之内" in finding(reports["within", "zh"], "LY066")


@pytest.mark.parametrize("name", ["every", "some", "given", "stated_none"])
def test_the_search_is_the_bad_case_the_gate_asks_for(reports, name):
    report = reports[name, "en"]
    assert "badcase" not in {m["id"] for m in report["missing"]}
    assert "GT020" not in {t["rule"] for t in report["trace"]}
    assert "obtain_badcase" not in {a["id"] for a in report["next_actions"]}
    assert "reproducible_badcase" in {f["kind"] for f in report["facts"] if f["type"] == "evidence"}


def test_one_frame_stated_beside_the_search_is_not_single_frame_evidence(reports):
    report = reports["stated_none", "en"]
    assert report["conclusion"]["stage"] == "calibration" and report["conclusion"]["determined"]
    assert "single_frame_evidence" not in {p["id"] for p in report["pitfalls"]}
    # case.yaml's "none" is not the last word: the folder holds the bad case, and says where
    text = render(report, "md")
    assert f"found by the bad-case search in {PROBE}: the worst is sample 5" in text
    # a sample given with --badcase is not named as the bad case: the worst is
    assert f"{PROBE}: the worst is sample 21" in render(reports["given", "en"], "md")


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("name", list(CASES))
def test_every_format_renders_the_search(reports, name, lang):
    report = reports[name, lang]
    L = labels()[lang]
    markdown = render(report, "md")
    line = next(line for line in markdown.splitlines()
                if line.strip().startswith("- " + L["qa"]["samples"].split("{")[0]))
    cosines = CASES[name][0]
    count = len(next(iter(cosines.values())))
    shown = {"every": 16, "some": 3, "given": 3, "clean": 0, "within": 0,
             "stated_none": 16}[name]
    if lang == "en":
        assert f"over the {count} samples: median" in line
        when = " and past 10 times the clean model's error; below 0.999 on 16" \
            if name == "within" else ""
        assert f"the error shows on {shown} of {count} samples (Cosine below 0.999{when})" \
            in line
    else:
        assert f"在 {count} 个样本上的 Cosine 中位数" in line and f"误差出现在 {shown} 个样本上" in line
    worst = min(min(v) for v in cosines.values())
    assert f"{worst:.6g}" in line
    page = render(report, "html")
    (figure,) = re.findall(r'<figure class="plot" id="plot-samples-0">.*?</figure>', page, re.S)
    assert "<svg " in figure
    texts = re.findall(r"<text\b[^>]*>(.*?)</text>", figure, re.S)
    P = L["view"]["plot"]
    output = next(iter(cosines)) if name in ("every", "clean", "within", "stated_none") \
        else "logits"
    assert P["sample_title"].format(analysis=PROBE, output=output) in texts
    assert P["sample_x"] in texts and P["sample_tolerance"].format(tolerance="0.999") in texts
    chosen = 3 if name == "given" else report["series"]["samples"][0]["chosen"]
    assert P["sample_chosen"].format(sample=chosen) in texts
    assert page.index('id="findings"') < page.index('id="plot-samples-0"') < page.index('id="next"')
    data = json.loads(render(report, "json"))
    (series,) = data["series"]["samples"]
    assert series["analysis"] == PROBE and series["count"] == count
    assert len(series["points"]) == sum(v == v for v in cosines[output])
    jsonschema.Draft7Validator(report_schema()).validate(data)
    assert check_report(data, "report.json") is data
    terminal = " ".join(render_terminal(report, color=False, width=120).split())
    assert L["qa"]["samples"].split("`")[0] in terminal          # code spans as styled text
    if lang == "zh":                          # "probe" comes from the probe folder's own line
        assert english_left(report, markdown) <= {"probe"}, name


def test_the_html_plot_is_the_same_from_run_to_run(reports):
    report = reports["some", "en"]
    assert render(report, "html") == render(report, "html")


def test_samples_whose_cosine_is_no_number_are_left_out_and_said(tmp_path):
    cosines = {"0": [0.95, math.nan, 0.8, 5e-324, math.nan, 0.9]}
    folder = build_search_case(tmp_path, "nan", cosines, badcase=1)
    report = triage_path(folder, lang="en", environ={}, installed={}, cwd=folder)
    page = render(report, "html")
    (caption,) = re.findall(r'<figcaption id="plot-samples-0-caption">(.*?)</figcaption>', page,
                            re.S)
    assert "2 value(s) left out of this chart" in caption
    assert labels()["en"]["view"]["plot"]["sample_chosen_off"].format(chosen=1) in caption
    assert "; 2 sample(s) with a Cosine that is not a number" in render(report, "md")
