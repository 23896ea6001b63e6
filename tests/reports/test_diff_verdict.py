"""qcdoctor diff: a stage's metric compared in the direction and with the tolerance the
reports used (worse is a regression, better an improvement), and one language for every
line, texts taken from a report in another language included."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from qcdoctor.engine.commands.cli import main
from tests.reports.test_diff import variant

QBC = "quantized_bc: {metric: mAP, value: 0.391}"
CJK = re.compile(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]")


def quantized_bc(tmp_path: Path, name: str, line: str) -> Path:
    """convert_j6e_no_retrain (mAP, higher is better, tolerance 0.005 absolute) with
    quantized.bc's line replaced."""
    return variant(tmp_path, "convert_j6e_no_retrain", name, ("case.yaml", QBC, line))


def json_report(case: Path, *extra: str) -> Path:
    target = case.parent / f"{case.name}.json"
    assert main(["triage", str(case), "--format", "json", "-o", str(target), "--no-env",
                 *extra]) == 0
    return target


def diff_of(capsys, old: Path, new: Path, *extra: str) -> tuple[int, dict]:
    code = main(["diff", str(old), str(new), "--format", "json", "--no-env", *extra])
    return code, json.loads(capsys.readouterr().out)


@pytest.fixture
def before(tmp_path) -> Path:
    """The report before, as JSON (the case's language: Chinese)."""
    return json_report(quantized_bc(tmp_path, "before", QBC))


def test_a_worse_metric_on_an_abnormal_stage_is_a_regression(before, tmp_path, capsys):
    after = quantized_bc(tmp_path, "after", "quantized_bc: {metric: mAP, value: 0.30}")
    code, diff = diff_of(capsys, before, after, "--fail-on", "regression", "--lang", "en")
    assert code == 1
    [stage] = diff["stages"]
    assert (stage["old_status"], stage["new_status"]) == ("abnormal", "abnormal")
    assert (stage["direction"], stage["tolerance"], stage["trend"]) == ("higher", 0.005, "worse")
    assert diff["regressions"] == [{"kind": "metric", "id": "quantized_bc", "old": "abnormal",
                                    "new": "abnormal", "metric": "mAP", "old_value": 0.391,
                                    "new_value": 0.3}]
    assert diff["verdict"]["kind"] == "worse"
    assert diff["verdict_text"] == "worse: quantized.bc mAP 0.391 → 0.3"
    assert main(["diff", str(before), str(after), "--no-env"]) == 0     # only when asked
    text = capsys.readouterr().out
    assert "**结论：变差：quantized.bc mAP 0.391 → 0.3**" in text
    assert "| -0.091（变差，超出容差） |" in text


def test_a_better_metric_is_an_improvement_and_no_regression(before, tmp_path, capsys):
    after = quantized_bc(tmp_path, "after", "quantized_bc: {metric: mAP, value: 0.43}")
    code, diff = diff_of(capsys, before, after, "--fail-on", "regression", "--lang", "en")
    assert code == 0 and diff["regressions"] == []
    assert diff["stages"][0]["trend"] == "better"
    assert diff["improvements"] == [{"kind": "metric", "id": "quantized_bc", "old": "abnormal",
                                     "new": "abnormal", "metric": "mAP", "old_value": 0.391,
                                     "new_value": 0.43}]
    assert diff["verdict_text"] == "better: quantized.bc mAP 0.391 → 0.43"


def test_a_change_within_the_tolerance_is_neither(before, tmp_path, capsys):
    after = quantized_bc(tmp_path, "after", "quantized_bc: {metric: mAP, value: 0.388}")
    code, diff = diff_of(capsys, before, after, "--fail-on", "regression", "--lang", "en")
    assert code == 0 and diff["stages"][0]["trend"] == "within"
    assert diff["verdict_text"] == "changed, neither better nor worse"


def test_lower_is_better_reads_the_other_way(tmp_path, capsys):
    def case(name: str, value: float) -> Path:
        return variant(tmp_path, "convert_j6e_no_retrain", name,
                       *[("case.yaml", f"{{metric: mAP, value: {v}}}",
                          f"{{metric: mATE, value: {w}}}")
                         for v, w in (("0.452", "0.50"), ("0.450", "0.50"), ("0.449", "0.50"),
                                      ("0.391", value))],
                       ("case.yaml", "higher_is_better: true", "higher_is_better: false"))
    old, new = case("old", 0.60), case("new", 0.70)
    code, diff = diff_of(capsys, old, new, "--fail-on", "regression", "--lang", "en")
    # the error grew: worse, although the value went up
    assert diff["stages"][0]["direction"] == "lower" and diff["stages"][0]["trend"] == "worse"
    assert code == 1 and diff["verdict_text"] == "worse: quantized.bc mATE 0.6 → 0.7"
    code, diff = diff_of(capsys, new, old, "--fail-on", "regression", "--lang", "en")
    assert code == 0 and diff["verdict_text"] == "better: quantized.bc mATE 0.7 → 0.6"


def test_values_under_another_metric_name_are_not_compared(before, tmp_path, capsys):
    after = quantized_bc(tmp_path, "after", "quantized_bc: {metric: NDS, value: 0.30}")
    code, diff = diff_of(capsys, before, after, "--fail-on", "regression", "--lang", "en")
    stage = next(s for s in diff["stages"] if s["stage"] == "quantized_bc")
    assert stage["trend"] is None
    assert not any(r["kind"] == "metric" for r in diff["regressions"])


def _single_frame(tmp_path: Path, name: str, evidence: str) -> Path:
    """single_frame (a Chinese case: its only evidence one frame), with ``evidence``."""
    return variant(tmp_path, "single_frame", name,
                   ("case.yaml", "evidence: [single_frame]", f"evidence: [{evidence}]"),
                   ("case.yaml", "badcase: none", "badcase: available"))


def test_every_line_follows_the_language_asked_for(tmp_path, capsys):
    """The pitfall gone is read from a Chinese JSON report; --lang en names it in English."""
    old = json_report(_single_frame(tmp_path, "old", "single_frame"))
    new = _single_frame(tmp_path, "new", "dataset_eval")
    assert main(["diff", str(old), str(new), "--no-env", "--lang", "en"]) == 0
    text = capsys.readouterr().out
    assert "no longer reported: Pitfall: calling a tool bug from one frame's mismatch" in text
    assert "newly reported: Which versions of hbdk4-compiler" in text   # triaged in English
    assert not CJK.findall(text), CJK.findall(text)
    _, diff = diff_of(capsys, old, new, "--lang", "en")
    assert diff["language"] == "en" and not CJK.findall(json.dumps(
        [diff["pitfalls"], diff["missing"], diff["verdict_text"]], ensure_ascii=False))


def test_without_lang_the_new_reports_language_holds_for_every_line(tmp_path, capsys):
    """An English report before, a Chinese case after: all in Chinese, the English
    report's pitfall named by its rule's Chinese title."""
    old = json_report(_single_frame(tmp_path, "old", "single_frame"), "--lang", "en")
    new = _single_frame(tmp_path, "new", "dataset_eval")
    _, diff = diff_of(capsys, old, new)
    assert diff["language"] == "zh"
    [gone] = diff["pitfalls"]["gone"]
    assert gone["id"] == "single_frame_evidence" and CJK.search(gone["text"])
    assert main(["diff", str(old), str(new), "--no-env"]) == 0
    text = capsys.readouterr().out
    assert "one frame" not in text and "Which versions" not in text
